//! Exactly once over HTTP: claim an idempotency key, do the work, complete
//! it with the result (or fail it for a retry); everyone after gets the
//! stored result. The `once` recipe runs in the service, its operation
//! being "wait for the client's outcome", so heartbeats, takeovers and
//! fencing are the recipe's own.

use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bakery::once::{OnBusy, Status};
use bakery::{Bytes, Execution, Idempotency, RunError};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Caller, Operation};
use crate::error::{ApiError, ErrorResponses, Kind};
use crate::locks::{millis, MAX_WAIT};
use crate::sessions::{Claim, Outcome};
use crate::Service;

/// An idempotency key in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct KeyPath {
    /// The scope: a namespace of keys (a name: letters, digits, `_ - . :
    /// @ + =`).
    scope: String,
    /// The key (the same rules).
    key: String,
}

/// Claiming a key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The session that will hold the claim (it ends the claim if it ends).
    pub session: String,
    /// The request the key names (its SHA-256 is kept: the same key with
    /// another payload is refused with 409).
    pub payload: String,
    /// Milliseconds to wait while another worker runs the key (0 to
    /// 60,000; default 0: answer `in_progress` at once).
    pub wait_ms: Option<u64>,
}

/// Where a key stands for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClaimStatus {
    /// The caller claimed the key: do the work, then complete or fail it.
    Claimed,
    /// Done before: `result` is the stored result; do not run again.
    Completed,
    /// Failed before, and the failure was recorded.
    Failed,
    /// Another worker runs it now; ask again later.
    InProgress,
    /// The failure was reported; the key is free for a retry.
    Released,
}

/// A key's state, as the once routes answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OnceState {
    /// Where the key stands.
    pub status: ClaimStatus,
    /// The claim's attempt: a fencing token for the work's writes (1 for
    /// the first claim, larger for every takeover).
    pub attempt: Option<u64>,
    /// The stored result (completed).
    pub result: Option<String>,
    /// The recorded failure (failed).
    pub error: Option<String>,
}

impl OnceState {
    fn of(status: ClaimStatus, attempt: Option<u64>) -> OnceState {
        OnceState {
            status,
            attempt,
            result: None,
            error: None,
        }
    }
}

/// Claim a key: `claimed` (run it, then complete or fail), `completed`
/// (its stored result), or `in_progress` (another worker runs it).
#[utoipa::path(
    post,
    path = "/v1/once/{scope}/{key}/claim",
    tag = "once",
    params(KeyPath),
    request_body = ClaimRequest,
    responses((status = 200, description = "Where the key stands for this caller.", body = OnceState), ErrorResponses)
)]
pub(crate) async fn claim(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<KeyPath>, PathRejection>,
    body: Result<Json<ClaimRequest>, JsonRejection>,
) -> Result<Json<OnceState>, ApiError> {
    let (Path(KeyPath { scope, key }), Json(request)) = (path?, body?);
    claim_key(&service, &caller, scope, key, request)
        .await
        .map(Json)
}

/// Claim `key` of `scope` for the request's session: [`claim`]'s
/// operation, over any protocol.
pub(crate) async fn claim_key(
    service: &Service,
    caller: &Caller,
    scope: String,
    key: String,
    request: ClaimRequest,
) -> Result<OnceState, ApiError> {
    caller.allow(Operation::Once, &scope)?;
    let wait = match request.wait_ms.unwrap_or(0) {
        0 => None,
        ms if ms <= millis(MAX_WAIT) => Some(Duration::from_millis(ms)),
        ms => {
            return Err(ApiError::invalid_input(format!(
                "wait_ms must be within 0..={}; got {ms}",
                millis(MAX_WAIT)
            )))
        }
    };
    let session = service.sessions().get(caller, &request.session)?;
    let once = Idempotency::builder(service.store().clone(), &scope)
        .lease(service.lease())
        .owner(session.owner())
        .on_busy(if wait.is_some() {
            OnBusy::Wait
        } else {
            OnBusy::Fail
        })
        .build()?;
    once.row_key(&key)?;
    let (started, attempt) = oneshot::channel::<u64>();
    let (outcome, reported) = oneshot::channel::<Outcome>();
    let payload = request.payload.into_bytes();
    let run_key = key.clone();
    let mut run = tokio::spawn(async move {
        once.run_bytes(&run_key, &payload, move |attempt| async move {
            let _ = started.send(attempt.token());
            reported
                .await
                .unwrap_or_else(|_| Err("the claim was abandoned".to_owned()))
        })
        .await
    });
    let answer = async {
        match attempt.await {
            Ok(attempt) => Ok(attempt),
            // The operation never started: the run's outcome says why.
            Err(_) => Err((&mut run).await),
        }
    };
    let answer = tokio::select! {
        answer = answer => answer,
        () = tokio::time::sleep(wait.unwrap_or(MAX_WAIT)) => {
            run.abort();
            return Ok(OnceState::of(ClaimStatus::InProgress, None));
        }
        () = session.ended.cancelled() => {
            run.abort();
            return Err(ApiError::not_found(format!("session {:?} ended while waiting", session.id)));
        }
    };
    match answer {
        Ok(attempt) => {
            session.claim((scope, key, attempt), Claim { outcome, run })?;
            Ok(OnceState::of(ClaimStatus::Claimed, Some(attempt)))
        }
        Err(finished) => settled(finished),
    }
}

type Finished = Result<Result<Execution<Bytes>, RunError<String>>, tokio::task::JoinError>;

/// The state a finished run leaves the key in.
fn settled(finished: Finished) -> Result<OnceState, ApiError> {
    let ran =
        finished.map_err(|e| ApiError::new(Kind::Internal, format!("the run failed: {e}")))?;
    match ran {
        Ok(execution) => {
            let result = text(execution.into_inner())?;
            Ok(OnceState {
                result: Some(result),
                ..OnceState::of(ClaimStatus::Completed, None)
            })
        }
        Err(RunError::InProgress { attempt, .. }) => {
            Ok(OnceState::of(ClaimStatus::InProgress, Some(attempt)))
        }
        Err(RunError::FailedBefore {
            attempt, message, ..
        }) => Ok(OnceState {
            error: Some(message),
            ..OnceState::of(ClaimStatus::Failed, Some(attempt))
        }),
        Err(RunError::Failed(_)) => Ok(OnceState::of(ClaimStatus::Released, None)),
        Err(err @ RunError::PayloadMismatch { .. }) => {
            Err(ApiError::new(Kind::Conflict, err.to_string()))
        }
        Err(err @ RunError::Lost { .. }) => Err(ApiError::new(Kind::Lost, err.to_string())),
        Err(RunError::Store(err)) => Err(err.into()),
    }
}

fn text(bytes: Bytes) -> Result<String, ApiError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        ApiError::new(
            Kind::Corrupt,
            "the stored result is not UTF-8 text (stored by a library client?); HTTP serves text",
        )
    })
}

/// Finishing a claim.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishRequest {
    /// The session holding the claim.
    pub session: String,
    /// The claim's attempt, as claim returned it.
    pub attempt: u64,
    /// Complete: the result to store and hand to every later caller; fail:
    /// what went wrong.
    pub outcome: String,
}

/// Complete a claimed key with its result: stored unless the claim was lost
/// (its lease ran out and another worker took over: 409 `lost`).
#[utoipa::path(
    post,
    path = "/v1/once/{scope}/{key}/complete",
    tag = "once",
    params(KeyPath),
    request_body = FinishRequest,
    responses((status = 200, description = "Completed: the stored result.", body = OnceState), ErrorResponses)
)]
pub(crate) async fn complete(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<KeyPath>, PathRejection>,
    body: Result<Json<FinishRequest>, JsonRejection>,
) -> Result<Json<OnceState>, ApiError> {
    let (Path(KeyPath { scope, key }), Json(request)) = (path?, body?);
    finish(&service, &caller, scope, key, request, Ok)
        .await
        .map(Json)
}

/// Fail a claimed key: the key is released, and the next claim runs it.
#[utoipa::path(
    post,
    path = "/v1/once/{scope}/{key}/fail",
    tag = "once",
    params(KeyPath),
    request_body = FinishRequest,
    responses((status = 200, description = "Released for a retry.", body = OnceState), ErrorResponses)
)]
pub(crate) async fn fail(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<KeyPath>, PathRejection>,
    body: Result<Json<FinishRequest>, JsonRejection>,
) -> Result<Json<OnceState>, ApiError> {
    let (Path(KeyPath { scope, key }), Json(request)) = (path?, body?);
    finish(&service, &caller, scope, key, request, Err)
        .await
        .map(Json)
}

/// Hand the claim's run its `outcome` (`Ok`: complete, `Err`: fail) and
/// wait for it to settle: [`complete`]'s and [`fail`]'s operation, over any
/// protocol.
pub(crate) async fn finish(
    service: &Service,
    caller: &Caller,
    scope: String,
    key: String,
    request: FinishRequest,
    outcome: fn(String) -> Result<String, String>,
) -> Result<OnceState, ApiError> {
    caller.allow(Operation::Once, &scope)?;
    let session = service.sessions().get(caller, &request.session)?;
    let claim = session
        .take_claim(&(scope, key.clone(), request.attempt))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "session {:?} holds no claim of {key:?} with attempt {}",
                session.id, request.attempt
            ))
        })?;
    let _ = claim
        .outcome
        .send(outcome(request.outcome).map(Bytes::from));
    let mut state = settled(claim.run.await)?;
    state.attempt = Some(request.attempt);
    Ok(state)
}

/// Where a key stands, read from the store.
#[utoipa::path(
    get,
    path = "/v1/once/{scope}/{key}",
    tag = "once",
    params(KeyPath),
    responses((status = 200, description = "The key's record.", body = OnceState), ErrorResponses)
)]
pub(crate) async fn show(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<KeyPath>, PathRejection>,
) -> Result<Json<OnceState>, ApiError> {
    let Path(KeyPath { scope, key }) = path?;
    key_state(&service, &caller, &scope, &key).await.map(Json)
}

/// Where `key` of `scope` stands: [`show`]'s operation, over any protocol.
pub(crate) async fn key_state(
    service: &Service,
    caller: &Caller,
    scope: &str,
    key: &str,
) -> Result<OnceState, ApiError> {
    caller.allow(Operation::Read, scope)?;
    let once = Idempotency::builder(service.store().clone(), scope).build()?;
    let record = once.inspect(key).await?.ok_or_else(|| {
        ApiError::not_found(format!("key {key:?} of {scope:?} was never claimed"))
    })?;
    let status = match record.status {
        Status::InProgress => ClaimStatus::InProgress,
        Status::Completed => ClaimStatus::Completed,
        Status::Failed => ClaimStatus::Failed,
    };
    let result = match record.status {
        Status::Completed => Some(text(record.result_bytes()?)?),
        _ => None,
    };
    Ok(OnceState {
        status,
        attempt: Some(record.attempt),
        result,
        error: record.error,
    })
}

/// Forget a key whatever its state, so that it runs again (an operator's
/// call: needs the `admin` operation).
#[utoipa::path(
    delete,
    path = "/v1/once/{scope}/{key}",
    tag = "once",
    params(KeyPath),
    responses((status = 204, description = "Forgotten."), ErrorResponses)
)]
pub(crate) async fn forget(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<KeyPath>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path(KeyPath { scope, key }) = path?;
    forget_key(&service, &caller, &scope, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Forget `key` of `scope`: [`forget`]'s operation, over any protocol.
pub(crate) async fn forget_key(
    service: &Service,
    caller: &Caller,
    scope: &str,
    key: &str,
) -> Result<(), ApiError> {
    caller.allow(Operation::Admin, scope)?;
    let once = Idempotency::builder(service.store().clone(), scope).build()?;
    if once.forget(key).await? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "key {key:?} of {scope:?} was never claimed"
        )))
    }
}
