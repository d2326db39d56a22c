//! Fenced values over HTTP: a write carries the writer's fencing token and
//! is refused once a larger token has written.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::Json;
use bakery::{Fenced, FencedValue, FencedWrite};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Caller, Operation};
use crate::error::{ApiError, ErrorResponses, Kind};
use crate::Service;

/// A fenced value's name in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct FencedPath {
    /// The value's name (letters, digits, `_ - . : @ + =`).
    name: String,
}

/// A fenced value's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FencedContent {
    /// The largest token that wrote it.
    pub token: u64,
    /// The data (UTF-8 text).
    pub data: String,
}

/// A write under a grant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FencedWriteRequest {
    /// The writer's fencing token (its grant's, or an idempotency
    /// attempt's).
    pub token: u64,
    /// The data to store (UTF-8 text).
    pub data: String,
}

impl TryFrom<Fenced> for FencedContent {
    type Error = ApiError;

    fn try_from(fenced: Fenced) -> Result<FencedContent, ApiError> {
        let data = String::from_utf8(fenced.data.to_vec()).map_err(|_| {
            ApiError::new(
                Kind::Corrupt,
                "the value is not UTF-8 text (written by a library client?); HTTP serves text",
            )
        })?;
        Ok(FencedContent {
            token: fenced.token,
            data,
        })
    }
}

/// Read a fenced value.
#[utoipa::path(
    get,
    path = "/v1/fenced/{name}",
    tag = "locks",
    params(FencedPath),
    responses((status = 200, description = "The value and the token that wrote it.", body = FencedContent), ErrorResponses)
)]
pub(crate) async fn read(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<FencedPath>, PathRejection>,
) -> Result<Json<FencedContent>, ApiError> {
    let Path(FencedPath { name }) = path?;
    read_value(&service, &caller, &name).await.map(Json)
}

/// Fenced value `name`: [`read`]'s operation, over any protocol.
pub(crate) async fn read_value(
    service: &Service,
    caller: &Caller,
    name: &str,
) -> Result<FencedContent, ApiError> {
    caller.allow(Operation::Read, name)?;
    let value = FencedValue::new(service.store().clone(), name)?;
    let fenced = value
        .read()
        .await?
        .ok_or_else(|| ApiError::not_found(format!("fenced value {name:?} was never written")))?;
    fenced.try_into()
}

/// Write a fenced value with a token: stored unless a larger token wrote
/// it before (then 409 `conflict`: the writer's grant is stale).
#[utoipa::path(
    put,
    path = "/v1/fenced/{name}",
    tag = "locks",
    params(FencedPath),
    request_body = FencedWriteRequest,
    responses((status = 200, description = "Stored.", body = FencedContent), ErrorResponses)
)]
pub(crate) async fn write(
    State(service): State<Service>,
    caller: Caller,
    path: Result<Path<FencedPath>, PathRejection>,
    body: Result<Json<FencedWriteRequest>, JsonRejection>,
) -> Result<Json<FencedContent>, ApiError> {
    let (Path(FencedPath { name }), Json(request)) = (path?, body?);
    write_value(&service, &caller, &name, request)
        .await
        .map(Json)
}

/// Write fenced value `name` unless a larger token wrote it:
/// [`write`]'s operation, over any protocol.
pub(crate) async fn write_value(
    service: &Service,
    caller: &Caller,
    name: &str,
    request: FencedWriteRequest,
) -> Result<FencedContent, ApiError> {
    caller.allow(Operation::Locks, name)?;
    let value = FencedValue::new(service.store().clone(), name)?;
    match value.write(request.token, request.data.into()).await? {
        FencedWrite::Accepted(fenced) => fenced.try_into(),
        FencedWrite::Rejected { highest } => Err(ApiError::new(
            Kind::Conflict,
            format!(
                "token {} is stale: fenced value {name:?} has accepted token {highest}",
                request.token
            ),
        )),
    }
}
