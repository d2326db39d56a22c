//! Sessions and the lock family over HTTP: open a session, keep it alive,
//! acquire (long-poll) or try, release, inspect; follow an election.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Caller, Operation};
use crate::error::{ApiError, ErrorResponses, Kind};
use crate::grants::{Ask, Family, Mode, QueueView};
use crate::sessions::{SessionView, DEFAULT_TTL};
use crate::Service;

/// Longest wait an acquire may ask for: a long poll must end before the
/// proxies and clients between give up on it.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// The wait of an acquire that gives none.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Opening a session.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenSession {
    /// Milliseconds the session lives without a keepalive (1,000 to
    /// 3,600,000; default 10,000). Keep it alive at a third of this.
    pub ttl_ms: Option<u64>,
}

/// Open a session.
///
/// A session holds grants and idempotency claims; it ends, giving all of
/// them back, when it misses its TTL, is closed, or its instance shuts
/// down. It lives on the instance that opened it: send its calls there.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    request_body = OpenSession,
    responses((status = 200, description = "The new session.", body = SessionView), ErrorResponses)
)]
pub(crate) async fn open_session(
    State(service): State<Service>,
    caller: Caller,
    body: Result<Json<OpenSession>, JsonRejection>,
) -> Result<Json<SessionView>, ApiError> {
    let Json(request) = body?;
    open(&service, &caller, request).map(Json)
}

/// Open a session for `caller`: [`open_session`]'s operation, over any
/// protocol.
pub(crate) fn open(
    service: &Service,
    caller: &Caller,
    request: OpenSession,
) -> Result<SessionView, ApiError> {
    caller_may_hold(caller)?;
    let ttl = request.ttl_ms.map_or(DEFAULT_TTL, Duration::from_millis);
    let session = service.sessions().open(caller, ttl)?;
    service.directory().changed();
    Ok(session.view())
}

/// A session may hold locks or claims: a token needs one of the two
/// operations (each grant or claim checks its name's prefix).
fn caller_may_hold(caller: &Caller) -> Result<(), ApiError> {
    if caller.may(Operation::Locks) || caller.may(Operation::Once) {
        Ok(())
    } else {
        Err(ApiError::new(
            Kind::Forbidden,
            "opening a session needs the \"locks\" or \"once\" operation",
        ))
    }
}

/// A session's id in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct SessionPath {
    /// The session's id.
    id: String,
}

/// A session and the grants it holds.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    params(SessionPath),
    responses((status = 200, description = "The session.", body = SessionView), ErrorResponses)
)]
pub(crate) async fn show_session(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<SessionPath>, PathRejection>,
) -> Result<Json<SessionView>, ApiError> {
    let Path(SessionPath { id }) = path?;
    session_view(&service, &caller, &id).map(Json)
}

/// Session `id` as `caller` may see it: [`show_session`]'s operation.
pub(crate) fn session_view(
    service: &Service,
    caller: &Caller,
    id: &str,
) -> Result<SessionView, ApiError> {
    Ok(service.sessions().get(caller, id)?.view())
}

/// Keep a session alive for another TTL.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/keepalive",
    tag = "sessions",
    params(SessionPath),
    responses((status = 200, description = "The session, alive a TTL from now.", body = SessionView), ErrorResponses)
)]
pub(crate) async fn keep_alive(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<SessionPath>, PathRejection>,
) -> Result<Json<SessionView>, ApiError> {
    let Path(SessionPath { id }) = path?;
    keep(&service, &caller, &id).map(Json)
}

/// Keep session `id` alive another TTL: [`keep_alive`]'s operation.
pub(crate) fn keep(service: &Service, caller: &Caller, id: &str) -> Result<SessionView, ApiError> {
    let session = service.sessions().get(caller, id)?;
    session.keep_alive()?;
    Ok(session.view())
}

/// Close a session: its grants are released (each next waiter is served at
/// once) and its claims given up.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    params(SessionPath),
    responses((status = 204, description = "Closed; everything it held is given back."), ErrorResponses)
)]
pub(crate) async fn close_session(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<SessionPath>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path(SessionPath { id }) = path?;
    service.sessions().close(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A member of the lock family in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct FamilyPath {
    /// Which recipe: `locks`, `semaphores`, `rwlocks` or `elections`.
    family: Family,
    /// Its name (letters, digits, `_ - . : @ + =`).
    name: String,
}

/// Asking for a grant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// The session that will hold the grant.
    pub session: String,
    /// Acquire only: milliseconds to wait at most (1 to 60,000; default
    /// 30,000). Not granted by then: `granted` is false, and the request
    /// has left the queue.
    pub timeout_ms: Option<u64>,
    /// Semaphores only, required: how many may hold it at once (every
    /// caller must give the same number).
    pub permits: Option<u32>,
    /// RW locks only, required: `read` or `write`.
    pub mode: Option<Mode>,
    /// Locks: a value stored with the grant, readable by all (at most
    /// 1,024 bytes); elections: the leader's published value.
    pub data: Option<String>,
}

/// How long an acquire may wait: when it gives no timeout, and at most.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waits {
    pub(crate) default: Duration,
    pub(crate) max: Duration,
}

/// An HTTP acquire's waits: a long poll must end before the proxies and
/// clients between give up on it.
const HTTP_WAITS: Waits = Waits {
    default: DEFAULT_WAIT,
    max: MAX_WAIT,
};

/// Whether a grant was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Acquired {
    /// True if the session now holds the grant.
    pub granted: bool,
    /// The grant's fencing token (larger than every earlier grant's of the
    /// same name): send it with every write made under the grant, and
    /// release with it.
    pub token: Option<u64>,
}

/// Wait for a grant, first come first served (a long poll).
///
/// Locks and elections have one holder (an election's holder leads);
/// semaphores `permits`; RW locks one writer or many readers. The session
/// holds the grant until it releases it or ends.
#[utoipa::path(
    post,
    path = "/v1/{family}/{name}/acquire",
    tag = "locks",
    params(FamilyPath),
    request_body = AcquireRequest,
    responses((status = 200, description = "Granted, or not within the timeout.", body = Acquired), ErrorResponses)
)]
pub(crate) async fn acquire(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<FamilyPath>, PathRejection>,
    body: Result<Json<AcquireRequest>, JsonRejection>,
) -> Result<Json<Acquired>, ApiError> {
    let (Path(FamilyPath { family, name }), Json(request)) = (path?, body?);
    wait_for_grant(&service, &caller, family, name, request, HTTP_WAITS)
        .await
        .map(Json)
}

/// Wait for a grant of `family` `name` (within `waits`): [`acquire`]'s
/// operation, over any protocol. Dropping the future withdraws the request
/// from the queue.
pub(crate) async fn wait_for_grant(
    service: &Service,
    caller: &Caller,
    family: Family,
    name: String,
    request: AcquireRequest,
    waits: Waits,
) -> Result<Acquired, ApiError> {
    let wait = match request.timeout_ms {
        None => waits.default,
        Some(ms) if (1..=millis(waits.max)).contains(&ms) => Duration::from_millis(ms),
        Some(ms) => {
            return Err(ApiError::invalid_input(format!(
                "timeout_ms must be within 1..={}; got {ms}",
                millis(waits.max)
            )))
        }
    };
    take(service, caller, family, name, request, Some(wait)).await
}

/// Take a grant only if it is free and nobody waits; never queues.
#[utoipa::path(
    post,
    path = "/v1/{family}/{name}/try",
    tag = "locks",
    params(FamilyPath),
    request_body = AcquireRequest,
    responses((status = 200, description = "Granted, or busy.", body = Acquired), ErrorResponses)
)]
pub(crate) async fn try_acquire(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<FamilyPath>, PathRejection>,
    body: Result<Json<AcquireRequest>, JsonRejection>,
) -> Result<Json<Acquired>, ApiError> {
    let (Path(FamilyPath { family, name }), Json(request)) = (path?, body?);
    if request.timeout_ms.is_some() {
        return Err(ApiError::invalid_input(
            "try never waits: timeout_ms belongs to /acquire",
        ));
    }
    take(&service, &caller, family, name, request, None)
        .await
        .map(Json)
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Take a grant for the request's session: wait up to `wait`, or with
/// `None` only if it is free now ([`try_acquire`]'s operation).
pub(crate) async fn take(
    service: &Service,
    caller: &Caller,
    family: Family,
    name: String,
    request: AcquireRequest,
    wait: Option<Duration>,
) -> Result<Acquired, ApiError> {
    caller.allow(Operation::Locks, &name)?;
    if request.permits.is_some() && family != Family::Semaphores {
        return Err(ApiError::invalid_input("`permits` is for semaphores only"));
    }
    if request.mode.is_some() && family != Family::Rwlocks {
        return Err(ApiError::invalid_input("`mode` is for RW locks only"));
    }
    if request.data.is_some() && !matches!(family, Family::Locks | Family::Elections) {
        return Err(ApiError::invalid_input(
            "`data` is for locks and elections only",
        ));
    }
    let session = service.sessions().get(caller, &request.session)?;
    service.directory().touched(family, &name);
    let ask = Ask {
        family,
        name,
        lease: service.lease(),
        owner: session.owner(),
        data: request.data,
        permits: request.permits,
        mode: request.mode,
    };
    // A session that ends while its request waits withdraws the request
    // (dropping the wait leaves the queue).
    let handle = session.handle(ask.key(wait), || ask.handle(service.store().clone(), wait))?;
    let taken = tokio::select! {
        taken = handle.take(ask.mode, wait.is_some()) => taken?,
        () = session.ended.cancelled() => {
            return Err(ApiError::not_found(format!("session {:?} ended while waiting", session.id)));
        }
    };
    service.directory().changed();
    Ok(match taken {
        Some(held) => Acquired {
            granted: true,
            token: Some(session.hold(family, &ask.name, held).await?),
        },
        None => Acquired {
            granted: false,
            token: None,
        },
    })
}

/// Giving a grant back.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The session holding the grant.
    pub session: String,
    /// The grant's token, as acquire returned it.
    pub token: u64,
}

/// Release a grant; in the same write the next waiter is served.
///
/// 409 `lost` if the grant had been lost (the instance could not renew
/// its lease for a whole lease, and a waiter took over): whatever was done
/// under it may have overlapped the next holder; fencing tokens tell.
#[utoipa::path(
    post,
    path = "/v1/{family}/{name}/release",
    tag = "locks",
    params(FamilyPath),
    request_body = ReleaseRequest,
    responses((status = 204, description = "Released."), ErrorResponses)
)]
pub(crate) async fn release(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<FamilyPath>, PathRejection>,
    body: Result<Json<ReleaseRequest>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let (Path(FamilyPath { family, name }), Json(request)) = (path?, body?);
    give_back(&service, &caller, family, name, request).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Release the request's grant: [`release`]'s operation, over any protocol.
pub(crate) async fn give_back(
    service: &Service,
    caller: &Caller,
    family: Family,
    name: String,
    request: ReleaseRequest,
) -> Result<(), ApiError> {
    caller.allow(Operation::Locks, &name)?;
    let session = service.sessions().get(caller, &request.session)?;
    let held = session
        .take(&(family, name.clone(), request.token))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "session {:?} holds no {} {name:?} grant with token {}",
                session.id,
                family.one(),
                request.token
            ))
        })?;
    held.release().await?;
    service.directory().changed();
    Ok(())
}

/// Who holds a lock, semaphore, RW lock or election, and who waits.
#[utoipa::path(
    get,
    path = "/v1/{family}/{name}",
    tag = "locks",
    params(FamilyPath),
    responses((status = 200, description = "The stored state.", body = QueueView), ErrorResponses)
)]
pub(crate) async fn show(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<FamilyPath>, PathRejection>,
) -> Result<Json<QueueView>, ApiError> {
    let Path(FamilyPath { family, name }) = path?;
    queue_state(&service, &caller, family, &name)
        .await
        .map(Json)
}

/// The stored state of `family` `name`: [`show`]'s operation.
pub(crate) async fn queue_state(
    service: &Service,
    caller: &Caller,
    family: Family,
    name: &str,
) -> Result<QueueView, ApiError> {
    caller.allow(Operation::Read, name)?;
    QueueView::read(&**service.store(), family, name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("{} {name:?} was never taken", family.one())))
}

/// An election's name in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct ElectionPath {
    /// The election's name.
    name: String,
}

/// How long to follow.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ObserveParams {
    /// Milliseconds after which the stream ends (1 to 3,600,000; default
    /// 600,000): reconnect to follow longer.
    timeout_ms: Option<u64>,
}

/// How long a stream asked to last `timeout_ms` lasts; a 400 if out of
/// bounds.
pub(crate) fn stream_limit(timeout_ms: Option<u64>) -> Result<Duration, ApiError> {
    match timeout_ms {
        None => Ok(DEFAULT_OBSERVE),
        Some(ms) if (1..=millis(MAX_OBSERVE)).contains(&ms) => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(ApiError::invalid_input(format!(
            "timeout_ms must be within 1..={}; got {ms}",
            millis(MAX_OBSERVE)
        ))),
    }
}

/// The leader of an election, or nobody (`term` 0, no owner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaderEvent {
    /// The leader's term (its grant's fencing token); 0: nobody leads.
    pub term: u64,
    /// The leader's owner (`session ID` for the service's sessions).
    pub owner: Option<String>,
    /// The value the leader published.
    pub value: Option<String>,
}

/// The longest an observe stream lasts.
const MAX_OBSERVE: Duration = Duration::from_secs(3600);
const DEFAULT_OBSERVE: Duration = Duration::from_secs(600);

/// Follow an election: a Server-Sent Events stream whose `leader` events
/// give the leader now, then every change of leader.
#[utoipa::path(
    get,
    path = "/v1/elections/{name}/observe",
    tag = "locks",
    params(ElectionPath, ObserveParams),
    responses(
        (status = 200, description = "`event: leader` with a LeaderEvent as data, per change.", body = LeaderEvent, content_type = "text/event-stream"),
        ErrorResponses
    )
)]
pub(crate) async fn observe(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<ElectionPath>, PathRejection>,
    query: Result<Query<ObserveParams>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let (Path(ElectionPath { name }), Query(params)) = (path?, query?);
    let limit = stream_limit(params.timeout_ms)?;
    let events = follow(&service, &caller, &name)
        .await?
        .map(|leader| {
            Ok(match leader {
                Ok(event) => Event::default()
                    .event("leader")
                    .json_data(event)
                    .unwrap_or_else(|_| Event::default().event("error")),
                Err(err) => Event::default()
                    .event("error")
                    .data(err.body().message.clone()),
            })
        })
        .take_until(tokio::time::sleep(limit));
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// The leader of election `name` now, then each change, until the instance
/// shuts down: [`observe`]'s operation, over any protocol. A failed read is
/// an `Err` item; the stream goes on after it.
pub(crate) async fn follow(
    service: &Service,
    caller: &Caller,
    name: &str,
) -> Result<impl Stream<Item = Result<LeaderEvent, ApiError>> + Send + 'static, ApiError> {
    caller.allow(Operation::Read, name)?;
    let election = bakery::Election::builder(service.store().clone(), name).build()?;
    let mut watch = election.observe();
    // The first read here, so a bad store answers with a status, not a
    // stream that ends at once.
    let first = watch.next().await?;
    Ok(futures::stream::once(async move { Ok(first) })
        .chain(futures::stream::unfold(watch, |mut watch| async move {
            let next = watch.next().await;
            Some((next, watch))
        }))
        .map(|leader| {
            let leader = leader?;
            Ok(LeaderEvent {
                term: leader.as_ref().map_or(0, |l| l.term),
                owner: leader.as_ref().map(|l| l.owner.clone()),
                value: leader.and_then(|l| l.value),
            })
        })
        .take_until(service.sessions().closing().clone().cancelled_owned()))
}
