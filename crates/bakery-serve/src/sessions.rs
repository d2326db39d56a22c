//! Client sessions: the only state an instance keeps. A session lives while
//! its client keeps it alive; the grants and idempotency claims it holds
//! live with it. A session that misses its TTL, is closed, or whose
//! instance shuts down gives everything back at once (the next waiter is
//! served by the same write); an instance that dies leaves its grants to
//! expire after one lease, like any crashed holder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bakery::{Bytes, Execution, RunError};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{ApiError, Kind};
use crate::grants::{Family, Handle, HandleKey, Held};

/// Shortest session TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest session TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// A session's TTL unless the client gives one.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// A grant in a session: which recipe, which name, which token.
pub(crate) type GrantKey = (Family, String, u64);

/// An idempotency claim in a session: scope, key, attempt.
pub(crate) type ClaimKey = (String, String, u64);

/// What the worker of a claim reports: the result, or why it failed.
pub(crate) type Outcome = Result<Bytes, String>;

/// The run of a claimed key, waiting for its client's outcome.
pub(crate) struct Claim {
    pub(crate) outcome: oneshot::Sender<Outcome>,
    pub(crate) run: JoinHandle<Result<Execution<Bytes>, RunError<String>>>,
}

/// The sessions of one instance.
pub(crate) struct Sessions {
    open: Arc<Mutex<HashMap<String, Arc<Session>>>>,
    max: usize,
    /// Cancelled when the instance shuts down: no new sessions, waits end.
    closing: CancellationToken,
}

/// One client's session.
pub(crate) struct Session {
    pub(crate) id: String,
    /// The token that opened it (`None` without tokens).
    opener: Option<String>,
    pub(crate) ttl: Duration,
    deadline: Mutex<Instant>,
    /// Cancelled when the session ends: its waits stop.
    pub(crate) ended: CancellationToken,
    grants: Mutex<HashMap<GrantKey, Held>>,
    claims: Mutex<HashMap<ClaimKey, Claim>>,
    /// The recipe handles its requests were served with, for the next ones.
    handles: Mutex<HashMap<HandleKey, Handle>>,
}

/// The most recipe handles a session keeps; past it, they are all dropped
/// (each is rebuilt on its next use).
const MAX_HANDLES: usize = 64;

/// A session as its routes answer it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    /// The session's id: pass it to every call made in it.
    pub id: String,
    /// Its TTL in milliseconds: keep it alive more often than this.
    pub ttl_ms: u64,
    /// The grants it holds.
    pub grants: Vec<GrantView>,
}

/// A grant held in a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GrantView {
    /// Which recipe.
    pub family: Family,
    /// Its name.
    pub name: String,
    /// The grant's fencing token.
    pub token: u64,
    /// False once the instance learned the grant was lost (it could not
    /// renew the lease for a whole lease, and a waiter took over): stop
    /// working under it; releasing it answers 409 `lost`.
    pub held: bool,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these maps leaves it consistent (every
    // change is one insert or remove), so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Sessions {
    pub(crate) fn new(max: usize) -> Sessions {
        Sessions {
            open: Arc::default(),
            max,
            closing: CancellationToken::new(),
        }
    }

    /// Open a session for `caller` that ends unless kept alive every `ttl`.
    pub(crate) fn open(&self, caller: &Caller, ttl: Duration) -> Result<Arc<Session>, ApiError> {
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(ApiError::invalid_input(format!(
                "ttl_ms must be between {} and {}, got {}",
                MIN_TTL.as_millis(),
                MAX_TTL.as_millis(),
                ttl.as_millis()
            )));
        }
        if self.closing.is_cancelled() {
            return Err(shutting_down());
        }
        let session = Arc::new(Session {
            id: uuid::Uuid::new_v4().to_string(),
            opener: caller.name().map(str::to_owned),
            ttl,
            deadline: Mutex::new(Instant::now() + ttl),
            ended: self.closing.child_token(),
            grants: Mutex::default(),
            claims: Mutex::default(),
            handles: Mutex::default(),
        });
        {
            let mut open = locked(&self.open);
            if open.len() >= self.max {
                return Err(ApiError::new(
                    Kind::Unavailable,
                    format!("this instance has {} sessions open, its limit", self.max),
                ));
            }
            open.insert(session.id.clone(), session.clone());
        }
        tokio::spawn(expire(self.open.clone(), session.clone()));
        Ok(session)
    }

    /// The open session `id`, if `caller` may use it.
    pub(crate) fn get(&self, caller: &Caller, id: &str) -> Result<Arc<Session>, ApiError> {
        let session = locked(&self.open).get(id).cloned().ok_or_else(|| {
            ApiError::not_found(format!(
                "no session {id:?} on this instance: it ended or expired (or was opened on \
                 another instance; a session lives on the instance that opened it)"
            ))
        })?;
        if !caller.same_as(session.opener.as_deref()) {
            return Err(ApiError::new(
                Kind::Forbidden,
                format!("session {id:?} belongs to another token"),
            ));
        }
        Ok(session)
    }

    /// End session `id`: everything it holds is given back.
    pub(crate) async fn close(&self, caller: &Caller, id: &str) -> Result<(), ApiError> {
        let session = self.get(caller, id)?;
        locked(&self.open).remove(id);
        session.finish().await;
        Ok(())
    }

    /// The instance is stopping: end every session, giving back its grants,
    /// so waiters on other instances are served now rather than after a
    /// lease.
    pub(crate) async fn shut_down(&self) {
        self.closing.cancel();
        let sessions: Vec<_> = locked(&self.open).drain().map(|(_, s)| s).collect();
        futures::future::join_all(sessions.iter().map(|session| session.finish())).await;
    }

    /// The open sessions `caller` may use, in id order (stable between calls).
    pub(crate) fn visible_to(&self, caller: &Caller) -> Vec<Arc<Session>> {
        let mut sessions: Vec<_> = locked(&self.open)
            .values()
            .filter(|session| caller.same_as(session.opener.as_deref()))
            .cloned()
            .collect();
        sessions.sort_by(|a, b| a.id.cmp(&b.id));
        sessions
    }

    /// Cancelled when the instance starts shutting down.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.closing
    }
}

/// End `session` when its deadline passes without a keepalive.
async fn expire(open: Arc<Mutex<HashMap<String, Arc<Session>>>>, session: Arc<Session>) {
    loop {
        let deadline = *locked(&session.deadline);
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {
                if *locked(&session.deadline) <= Instant::now() {
                    break;
                }
            }
            () = session.ended.cancelled() => return,
        }
    }
    tracing::info!(session = %session.id, "session expired: its grants and claims are given back");
    locked(&open).remove(&session.id);
    session.finish().await;
}

fn shutting_down() -> ApiError {
    ApiError::new(Kind::Unavailable, "this instance is shutting down")
}

impl Session {
    /// Push the deadline a TTL from now.
    pub(crate) fn keep_alive(&self) -> Result<(), ApiError> {
        if self.ended.is_cancelled() {
            return Err(self.gone());
        }
        *locked(&self.deadline) = Instant::now() + self.ttl;
        Ok(())
    }

    /// How long the session lives unless kept alive.
    pub(crate) fn expires_in(&self) -> Duration {
        locked(&self.deadline).saturating_duration_since(Instant::now())
    }

    /// The owner recorded with this session's grants.
    pub(crate) fn owner(&self) -> String {
        format!("session {}", self.id)
    }

    fn gone(&self) -> ApiError {
        ApiError::not_found(format!("session {:?} has ended", self.id))
    }

    /// Keep `held` in the session; if the session ended meanwhile, give it
    /// back and say so.
    pub(crate) async fn hold(
        &self,
        family: Family,
        name: &str,
        held: Held,
    ) -> Result<u64, ApiError> {
        let token = held.token();
        if !self.ended.is_cancelled() {
            locked(&self.grants).insert((family, name.to_owned(), token), held);
            if !self.ended.is_cancelled() {
                return Ok(token);
            }
            // Ended between the check and the insert: `finish` may have
            // drained the map before the insert; give it back here.
            let Some(held) = locked(&self.grants).remove(&(family, name.to_owned(), token)) else {
                return Err(self.gone());
            };
            let _ = held.release().await;
            return Err(self.gone());
        }
        let _ = held.release().await;
        Err(self.gone())
    }

    /// The session's handle for `key`, made by `make` on first use.
    pub(crate) fn handle(
        &self,
        key: HandleKey,
        make: impl FnOnce() -> Result<Handle, ApiError>,
    ) -> Result<Handle, ApiError> {
        let mut handles = locked(&self.handles);
        if let Some(handle) = handles.get(&key) {
            return Ok(handle.clone());
        }
        let handle = make()?;
        if handles.len() >= MAX_HANDLES {
            handles.clear();
        }
        handles.insert(key, handle.clone());
        Ok(handle)
    }

    /// Take grant `key` out of the session (to release it).
    pub(crate) fn take(&self, key: &GrantKey) -> Option<Held> {
        locked(&self.grants).remove(key)
    }

    /// Keep a claimed key's run in the session.
    pub(crate) fn claim(&self, key: ClaimKey, claim: Claim) -> Result<(), ApiError> {
        if self.ended.is_cancelled() {
            claim.run.abort();
            return Err(self.gone());
        }
        locked(&self.claims).insert(key, claim);
        Ok(())
    }

    /// Take claim `key` out of the session (to finish it).
    pub(crate) fn take_claim(&self, key: &ClaimKey) -> Option<Claim> {
        locked(&self.claims).remove(key)
    }

    pub(crate) fn view(&self) -> SessionView {
        let mut grants: Vec<GrantView> = locked(&self.grants)
            .iter()
            .map(|((family, name, token), held)| GrantView {
                family: *family,
                name: name.clone(),
                token: *token,
                held: held.is_held(),
            })
            .collect();
        grants.sort_by(|a, b| (&a.name, a.token).cmp(&(&b.name, b.token)));
        SessionView {
            id: self.id.clone(),
            ttl_ms: u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
            grants,
        }
    }

    /// End the session: stop its waits, release its grants (each release
    /// serves the next waiter in the same write), abandon its claims (their
    /// keys are released for a retry).
    async fn finish(&self) {
        self.ended.cancel();
        let grants: Vec<_> = locked(&self.grants).drain().collect();
        let claims: Vec<_> = locked(&self.claims).drain().collect();
        let abandons = claims
            .into_iter()
            .map(|((scope, key, attempt), claim)| async move {
                let _ = claim
                    .outcome
                    .send(Err(format!("session {} ended before completing", self.id)));
                // Its run releases the key: the session has ended once it has.
                if let Ok(Err(err)) = claim.run.await {
                    if !matches!(err, RunError::Failed(_)) {
                        tracing::warn!(%scope, %key, attempt, error = %err,
                            "giving up an ended session's claim failed; it expires with its lease");
                    }
                }
            });
        let releases = grants
            .into_iter()
            .map(|((family, name, token), held)| async move {
                if let Err(err) = held.release().await {
                    tracing::warn!(%name, token, family = family.one(), error = %err,
                    "releasing an ended session's grant failed; it expires with its lease");
                }
            });
        futures::future::join(
            futures::future::join_all(abandons),
            futures::future::join_all(releases),
        )
        .await;
    }
}
