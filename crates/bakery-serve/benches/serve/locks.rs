//! (c) Lock acquire + release by N clients of one lock, through any
//! [`LockTarget`]: `bakery serve`'s HTTP/JSON API ([`HttpLocks`]), its
//! gRPC API ([`GrpcLocks`]), or the same lock in this process
//! ([`InProcessLocks`], `bakery::Lock` on the same store).
//!
//! One operation is acquire, the critical section (the checks: nobody else
//! inside, the fencing token above every token granted before), release.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Lock, LockGuard, VersionedStore};
use bakery_serve::proto::{self, acquire_response::Event, OpenSessionRequest};
use bakery_serve::proto::{locks_client::LocksClient, sessions_client::SessionsClient};
use bakery_serve::{Acquired, SessionView};
use bytes::Bytes;
use hyper::{Method, StatusCode, Uri};
use tonic::transport::{Channel, Endpoint};

use crate::http::{self, Conn, Reply};
use crate::stats::{Phases, Tally};

/// Where clients of one lock come from.
pub trait LockTarget: Sync {
    type Client: LockClient;

    /// How the clients reach the lock, for the report.
    fn implementation(&self) -> &'static str;

    /// A new client of the lock `name`, with its own session or handle.
    fn client(&self, name: &str) -> impl Future<Output = Result<Self::Client, String>> + Send;
}

/// One client of one lock.
pub trait LockClient: Send + 'static {
    /// What a grant hands to its release.
    type Grant: Send;

    /// Wait for the lock.
    fn acquire(&mut self) -> impl Future<Output = Result<Self::Grant, String>> + Send;

    /// The grant's fencing token.
    fn token(grant: &Self::Grant) -> u64;

    /// Give the lock up.
    fn release(&mut self, grant: Self::Grant) -> impl Future<Output = Result<(), String>> + Send;

    /// Done with the lock: close what the client opened.
    fn close(self) -> impl Future<Output = Result<(), String>> + Send;
}

/// `bakery serve`'s lock API over HTTP/JSON: a session per client
/// (`POST /v1/sessions`, closed with `DELETE /v1/sessions/{id}`), then
/// `POST /v1/locks/{name}/acquire` (a long poll) and `…/release`.
pub struct HttpLocks {
    pub addr: SocketAddr,
    /// The sessions' time to live: longer than a cell, so that no
    /// keepalive is needed while the clients measure.
    pub ttl: Duration,
    /// How long an acquire may wait.
    pub timeout: Duration,
}

pub struct HttpLockClient {
    conn: Conn,
    session: String,
    acquire: Uri,
    acquire_body: Bytes,
    release: Uri,
    close: Uri,
}

fn json(value: serde_json::Value) -> Bytes {
    Bytes::from(value.to_string())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl LockTarget for HttpLocks {
    type Client = HttpLockClient;

    fn implementation(&self) -> &'static str {
        "HTTP/JSON (bakery serve)"
    }

    async fn client(&self, name: &str) -> Result<HttpLockClient, String> {
        let mut conn = Conn::open(self.addr).await?;
        let body = conn
            .call(
                Method::POST,
                &http::target("/v1/sessions")?,
                Some(json(serde_json::json!({ "ttl_ms": millis(self.ttl) }))),
            )
            .await
            .and_then(Reply::ok)
            .map_err(|err| format!("opening a session: {err}"))?;
        let session: SessionView =
            serde_json::from_slice(&body).map_err(|err| format!("session body: {err}"))?;
        Ok(HttpLockClient {
            conn,
            acquire: http::target(&format!("/v1/locks/{name}/acquire"))?,
            acquire_body: json(serde_json::json!({
                "session": session.id,
                "timeout_ms": millis(self.timeout),
            })),
            release: http::target(&format!("/v1/locks/{name}/release"))?,
            close: http::target(&format!("/v1/sessions/{}", session.id))?,
            session: session.id,
        })
    }
}

impl LockClient for HttpLockClient {
    type Grant = u64;

    async fn acquire(&mut self) -> Result<u64, String> {
        let body = self
            .conn
            .call(Method::POST, &self.acquire, Some(self.acquire_body.clone()))
            .await
            .and_then(Reply::ok)?;
        let answer: Acquired =
            serde_json::from_slice(&body).map_err(|err| format!("acquire body: {err}"))?;
        match (answer.granted, answer.token) {
            (true, Some(token)) => Ok(token),
            (true, None) => Err("granted without a token".into()),
            (false, _) => Err("not granted before the timeout".into()),
        }
    }

    fn token(grant: &u64) -> u64 {
        *grant
    }

    async fn release(&mut self, token: u64) -> Result<(), String> {
        let body = json(serde_json::json!({ "session": self.session, "token": token }));
        self.conn
            .call(Method::POST, &self.release, Some(body))
            .await
            .and_then(|reply| reply.expect(StatusCode::NO_CONTENT))
            .map(drop)
    }

    async fn close(mut self) -> Result<(), String> {
        self.conn
            .call(Method::DELETE, &self.close, None)
            .await
            .and_then(|reply| reply.expect(StatusCode::NO_CONTENT))
            .map(drop)
            .map_err(|err| format!("closing session {}: {err}", self.session))
    }
}

/// `bakery serve`'s lock API over gRPC, on the same port: a session per
/// client (`Sessions/Open`, closed with `Sessions/Close`), then the
/// `Locks/Acquire` stream (read to its `acquired` message) and
/// `Locks/Release`, on one HTTP/2 connection per client.
pub struct GrpcLocks {
    pub addr: SocketAddr,
    /// As [`HttpLocks::ttl`].
    pub ttl: Duration,
    /// How long an acquire may wait.
    pub timeout: Duration,
}

pub struct GrpcLockClient {
    locks: LocksClient<Channel>,
    sessions: SessionsClient<Channel>,
    session: String,
    name: String,
    timeout_ms: u64,
}

impl LockTarget for GrpcLocks {
    type Client = GrpcLockClient;

    fn implementation(&self) -> &'static str {
        "gRPC (bakery serve)"
    }

    async fn client(&self, name: &str) -> Result<GrpcLockClient, String> {
        let channel = Endpoint::from_shared(format!("http://{}", self.addr))
            .map_err(|err| format!("endpoint: {err}"))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|err| format!("connecting over gRPC: {err}"))?;
        let mut sessions = SessionsClient::new(channel.clone());
        let session = sessions
            .open(OpenSessionRequest {
                ttl_ms: Some(millis(self.ttl)),
            })
            .await
            .map_err(|status| format!("opening a session: {status}"))?
            .into_inner()
            .id;
        Ok(GrpcLockClient {
            locks: LocksClient::new(channel),
            sessions,
            session,
            name: name.to_owned(),
            timeout_ms: millis(self.timeout),
        })
    }
}

impl LockClient for GrpcLockClient {
    type Grant = u64;

    async fn acquire(&mut self) -> Result<u64, String> {
        let request = proto::AcquireRequest {
            family: proto::Family::Lock.into(),
            name: self.name.clone(),
            session: self.session.clone(),
            timeout_ms: Some(self.timeout_ms),
            ..proto::AcquireRequest::default()
        };
        let mut stream = self
            .locks
            .acquire(request)
            .await
            .map_err(|status| format!("acquire: {status}"))?
            .into_inner();
        loop {
            let message = stream
                .message()
                .await
                .map_err(|status| format!("acquire stream: {status}"))?
                .ok_or("the acquire stream ended without an outcome")?;
            match message.event {
                Some(Event::Acquired(proto::Acquired {
                    granted: true,
                    token: Some(token),
                })) => return Ok(token),
                Some(Event::Acquired(_)) => return Err("not granted before the timeout".into()),
                Some(Event::Waiting(_)) | None => continue,
            }
        }
    }

    fn token(grant: &u64) -> u64 {
        *grant
    }

    async fn release(&mut self, token: u64) -> Result<(), String> {
        self.locks
            .release(proto::ReleaseRequest {
                family: proto::Family::Lock.into(),
                name: self.name.clone(),
                session: self.session.clone(),
                token,
            })
            .await
            .map(drop)
            .map_err(|status| format!("release: {status}"))
    }

    async fn close(mut self) -> Result<(), String> {
        self.sessions
            .close(proto::CloseSessionRequest {
                session: self.session.clone(),
            })
            .await
            .map(drop)
            .map_err(|status| format!("closing session {}: {status}", self.session))
    }
}

/// The same lock in this process: `bakery::Lock` on the store the server
/// serves (for memory://, the bench's own), a handle per client, as
/// separate services would have. With `per_acquire`, a handle built for
/// every acquire with an owner and acquire timeout, as the service takes a
/// grant for a session: the service's own way of using the lock, without
/// HTTP.
pub struct InProcessLocks {
    pub store: Arc<dyn VersionedStore>,
    pub per_acquire: bool,
}

pub struct InProcessLockClient {
    store: Arc<dyn VersionedStore>,
    name: String,
    /// The handle kept for every acquire; `None`: one built per acquire.
    lock: Option<Lock>,
    owner: String,
}

impl LockTarget for InProcessLocks {
    type Client = InProcessLockClient;

    fn implementation(&self) -> &'static str {
        if self.per_acquire {
            "in-process bakery::Lock, built per acquire"
        } else {
            "in-process bakery::Lock"
        }
    }

    async fn client(&self, name: &str) -> Result<InProcessLockClient, String> {
        let lock = if self.per_acquire {
            None
        } else {
            Some(
                Lock::builder(self.store.clone(), name)
                    .build()
                    .map_err(|err| format!("lock {name:?}: {err}"))?,
            )
        };
        // As long as the service's owner, `session <uuid>`.
        let owner = format!("session {:036x}", next_owner());
        Ok(InProcessLockClient {
            store: self.store.clone(),
            name: name.to_string(),
            lock,
            owner,
        })
    }
}

fn next_owner() -> u64 {
    static OWNERS: AtomicU64 = AtomicU64::new(1);
    OWNERS.fetch_add(1, Ordering::Relaxed)
}

impl LockClient for InProcessLockClient {
    type Grant = LockGuard;

    async fn acquire(&mut self) -> Result<LockGuard, String> {
        let built;
        let lock = match &self.lock {
            Some(lock) => lock,
            None => {
                built = Lock::builder(self.store.clone(), &self.name)
                    .owner(self.owner.clone())
                    .acquire_timeout(bakery_serve::DEFAULT_WAIT)
                    .build()
                    .map_err(|err| format!("lock {:?}: {err}", self.name))?;
                &built
            }
        };
        lock.acquire().await.map_err(|err| err.to_string())
    }

    fn token(grant: &LockGuard) -> u64 {
        grant.token()
    }

    async fn release(&mut self, grant: LockGuard) -> Result<(), String> {
        grant.release().await.map_err(|err| err.to_string())
    }

    async fn close(self) -> Result<(), String> {
        Ok(())
    }
}

/// A finished cell.
pub struct LockCell {
    pub implementation: &'static str,
    pub clients: usize,
    /// Which round of the cell (from 1).
    pub round: usize,
    pub tally: Tally,
    pub per_sec: f64,
    pub problems: Vec<String>,
}

/// What the critical section checks, shared by the clients of a cell.
#[derive(Default)]
struct Exclusion {
    inside: AtomicBool,
    /// The last token granted, plus one (0: none yet).
    last: AtomicU64,
    overlaps: AtomicU64,
    not_increasing: AtomicU64,
}

impl Exclusion {
    fn enter(&self, token: u64) {
        if self.inside.swap(true, Ordering::AcqRel) {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        let before = self.last.swap(token.saturating_add(1), Ordering::AcqRel);
        if token.saturating_add(1) <= before {
            self.not_increasing.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn leave(&self) {
        self.inside.store(false, Ordering::Release);
    }
}

/// Run one cell: `clients` clients of one fresh lock `name` of `target`.
pub async fn run<T: LockTarget>(
    target: &T,
    name: &str,
    clients: usize,
    round: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<LockCell, String> {
    let mut opened = Vec::with_capacity(clients);
    for _ in 0..clients {
        opened.push(target.client(name).await?);
    }
    let exclusion = Arc::new(Exclusion::default());
    let phases = Phases::start(warmup, duration);
    let tasks: Vec<_> = opened
        .into_iter()
        .map(|client| tokio::spawn(client_loop(client, exclusion.clone(), phases)))
        .collect();
    let mut tally = Tally::new();
    let mut problems = Vec::new();
    for task in tasks {
        let (client_tally, closed) = task
            .await
            .map_err(|err| format!("a client task failed: {err}"))?;
        tally.merge(client_tally);
        if let Err(err) = closed {
            problems.push(format!("closing a client: {err}"));
        }
    }
    let overlaps = exclusion.overlaps.load(Ordering::Acquire);
    if overlaps > 0 {
        problems.push(format!(
            "{overlaps} grant(s) while another client held the lock"
        ));
    }
    let not_increasing = exclusion.not_increasing.load(Ordering::Acquire);
    if not_increasing > 0 {
        problems.push(format!(
            "{not_increasing} token(s) not above the token granted before"
        ));
    }
    let per_sec = tally.count() as f64 / phases.duration().as_secs_f64();
    Ok(LockCell {
        implementation: target.implementation(),
        clients,
        round,
        tally,
        per_sec,
        problems,
    })
}

async fn client_loop<C: LockClient>(
    mut client: C,
    exclusion: Arc<Exclusion>,
    phases: Phases,
) -> (Tally, Result<(), String>) {
    let mut tally = Tally::new();
    loop {
        let begin = Instant::now();
        if begin >= phases.until {
            break;
        }
        let grant = match client.acquire().await {
            Ok(grant) => grant,
            Err(err) => {
                tally.error(format!("acquire: {err}"));
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        exclusion.enter(C::token(&grant));
        exclusion.leave();
        if let Err(err) = client.release(grant).await {
            tally.error(format!("release: {err}"));
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        if begin >= phases.timed_from {
            tally.record(begin.elapsed());
        }
    }
    (tally, client.close().await)
}
