//! The routes of the id services teams move from, answering in their
//! documented shapes: Meituan Leaf's segment and snowflake routes and Didi
//! Tinyid's id and segment routes. A Leaf segment key or Tinyid `bizType`
//! is a bakery sequence name; a Leaf snowflake key a snowflake name.

use std::collections::HashMap;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{tinyid_caller, Caller, Operation};
use crate::error::{ApiError, ErrorResponses, Kind};
use crate::ids::{bounded, take, MAX_COUNT};
use crate::Service;

/// Leaf segment mode: the next id of `key`, as plain text.
///
/// Leaf answers any method; GET and POST are served here.
#[utoipa::path(
    method(get, post),
    path = "/api/segment/get/{key}",
    tag = "compatible",
    params(("key" = String, Path, description = "Leaf's biz tag: the sequence name.")),
    responses(
        (status = 200, description = "The id, in decimal, nothing else.", body = String, content_type = "text/plain"),
        ErrorResponses,
    )
)]
pub(crate) async fn leaf_segment(
    State(service): State<Service>,
    caller: Caller,
    key: Result<Path<String>, PathRejection>,
) -> Result<String, ApiError> {
    let Path(key) = key?;
    caller.allow(Operation::Ids, &key)?;
    let id = service.sequences().get(&key)?.next().await?;
    Ok(id.to_string())
}

/// Leaf snowflake mode: a time-ordered id, as plain text. Leaf ignores the
/// key; here it is the snowflake's name, served on a worker id this
/// instance leases from the store (Leaf's come from ZooKeeper).
#[utoipa::path(
    method(get, post),
    path = "/api/snowflake/get/{key}",
    tag = "compatible",
    params(("key" = String, Path, description = "The snowflake name.")),
    responses(
        (status = 200, description = "The id, in decimal, nothing else.", body = String, content_type = "text/plain"),
        ErrorResponses,
    )
)]
pub(crate) async fn leaf_snowflake(
    State(service): State<Service>,
    caller: Caller,
    key: Result<Path<String>, PathRejection>,
) -> Result<String, ApiError> {
    let Path(key) = key?;
    caller.allow(Operation::Ids, &key)?;
    let id = service.snowflakes().get(&key)?.next().await?;
    Ok(id.to_string())
}

/// A Tinyid call's parameters, read by name.
type Params = HashMap<String, String>;

/// Tinyid's parameters (query or form, by name).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // read by name from the query map: Tinyid answers a bad value in its body
pub(crate) struct TinyidParams {
    /// The business type: the sequence name.
    #[param(rename = "bizType")]
    biz_type: Option<String>,
    /// How many ids (default 1; more than 100,000 gives 100,000), for the
    /// id routes.
    #[param(rename = "batchSize")]
    batch_size: Option<i64>,
    /// Tinyid's access token: with a tokens file, one of its tokens allowed
    /// `ids` on `bizType` (else `code` 5); without one, ignored.
    token: Option<String>,
}

/// One of Tinyid's envelopes: `code` 200 and `message` empty on success;
/// HTTP status 200 either way. (Two concrete types rather than one generic:
/// the OpenAPI derive drops the null of a generic `Option<T>`.)
macro_rules! tinyid_envelope {
    ($(#[$doc:meta])* $name:ident($data:ty)) => {
        $(#[$doc])*
        #[derive(Debug, Serialize, Deserialize, ToSchema)]
        pub struct $name {
            /// What was asked for; null on an error.
            pub data: Option<$data>,
            /// 200, or 6 with the error in `message`.
            pub code: i32,
            /// Empty, or what went wrong.
            pub message: String,
        }

        impl $name {
            fn of(result: Result<$data, ApiError>) -> $name {
                let (data, code, message) = envelope(result);
                $name { data, code, message }
            }
        }
    };
}

tinyid_envelope! {
    /// Tinyid's answer to `nextId`: the ids.
    TinyidIds(Vec<u64>)
}

tinyid_envelope! {
    /// Tinyid's answer to `nextSegmentId`: a segment.
    TinyidSegmentResponse(TinyidSegment)
}

/// Tinyid's segment: ids `currentId + 1 ..= maxId`, for its client to hand
/// out, and where that client starts loading the next segment.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TinyidSegment {
    /// The last id of the previous segment: this one starts after it.
    pub current_id: i64,
    /// When the client's current id reaches this, it fetches the next
    /// segment (a fifth of the way in).
    pub loading_id: i64,
    /// The last id of this segment.
    pub max_id: i64,
    /// The step between ids (1).
    pub delta: i32,
    /// The remainder every id leaves modulo `delta` (0).
    pub remainder: i32,
}

/// Tinyid's code for every failure but a bad token.
const TINYID_ERROR: i32 = 6;
/// Tinyid's code for a token that is unknown or not allowed the `bizType`.
const TINYID_TOKEN_ERROR: i32 = 5;
const TINYID_OK: i32 = 200;

/// Tinyid's `data`, `code` and `message` for a result.
fn envelope<T>(result: Result<T, ApiError>) -> (Option<T>, i32, String) {
    match result {
        Ok(data) => (Some(data), TINYID_OK, String::new()),
        Err(err) => {
            let code = match err.body().kind {
                Kind::Unauthorized | Kind::Forbidden => TINYID_TOKEN_ERROR,
                _ => TINYID_ERROR,
            };
            (None, code, err.body().message.clone())
        }
    }
}

/// The sequence a Tinyid call names, once its `token` may take its ids.
fn tinyid_name<'a>(service: &Service, params: &'a Params) -> Result<&'a str, ApiError> {
    let name = biz_type(params)?;
    tinyid_caller(service.tokens(), params.get("token").map(String::as_str))?
        .allow(Operation::Ids, name)?;
    Ok(name)
}

/// The sequence name a Tinyid call names.
fn biz_type(params: &Params) -> Result<&str, ApiError> {
    match params.get("bizType").map(String::as_str) {
        None | Some("") => Err(ApiError::invalid_input("bizType is missing")),
        Some(name) => Ok(name),
    }
}

/// Tinyid's batch size: default 1, capped at [`MAX_COUNT`] as Tinyid caps
/// it at its `batch.size.max`.
fn batch_size(params: &Params) -> Result<u64, ApiError> {
    let Some(raw) = params.get("batchSize") else {
        return Ok(1);
    };
    let size: i64 = raw
        .parse()
        .map_err(|_| ApiError::invalid_input(format!("batchSize {raw:?} is not a number")))?;
    let size = u64::try_from(size).unwrap_or(0).min(MAX_COUNT);
    bounded("batchSize", size, MAX_COUNT)
}

async fn tinyid_ids(
    service: &Service,
    params: Result<Query<Params>, QueryRejection>,
) -> Result<Vec<u64>, ApiError> {
    let Query(params) = params?;
    let name = tinyid_name(service, &params)?;
    let count = batch_size(&params)?;
    take(&service.sequences().get(name)?, count).await
}

async fn tinyid_segment(
    service: &Service,
    params: Result<Query<Params>, QueryRejection>,
) -> Result<TinyidSegment, ApiError> {
    let Query(params) = params?;
    let name = tinyid_name(service, &params)?;
    let step = service.segment_size();
    let block = service.sequences().get(name)?.reserve_block(step).await?;
    let signed = |id: u64| {
        i64::try_from(id).map_err(|_| {
            ApiError::new(
                Kind::Exhausted,
                format!(
                    "sequence {name:?} is past Tinyid's largest id ({})",
                    i64::MAX
                ),
            )
        })
    };
    let current_id = signed(block.start - 1)?;
    let max_id = signed(block.end - 1)?;
    let fifth = i64::try_from(step / 5).unwrap_or(i64::MAX);
    Ok(TinyidSegment {
        current_id,
        loading_id: current_id.saturating_add(fifth),
        max_id,
        delta: 1,
        remainder: 0,
    })
}

/// Tinyid: the next `batchSize` ids of `bizType`.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextId",
    tag = "compatible",
    params(TinyidParams),
    responses((status = 200, description = "Tinyid's envelope; `code` says whether it worked.", body = TinyidIds))
)]
pub(crate) async fn tinyid_next_id(
    State(service): State<Service>,
    params: Result<Query<Params>, QueryRejection>,
) -> Json<TinyidIds> {
    Json(TinyidIds::of(tinyid_ids(&service, params).await))
}

/// Tinyid: the next `batchSize` ids of `bizType` as `1,2,3`; empty on any
/// error.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextIdSimple",
    tag = "compatible",
    params(TinyidParams),
    responses((status = 200, description = "The ids joined by commas, or nothing on an error.", body = String, content_type = "text/plain"))
)]
pub(crate) async fn tinyid_next_id_simple(
    State(service): State<Service>,
    params: Result<Query<Params>, QueryRejection>,
) -> String {
    match tinyid_ids(&service, params).await {
        Ok(ids) => join(ids.iter()),
        Err(_) => String::new(),
    }
}

/// Tinyid: a segment of `bizType` for a client that hands out its ids.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextSegmentId",
    tag = "compatible",
    params(TinyidParams),
    responses((status = 200, description = "Tinyid's envelope; `code` says whether it worked.", body = TinyidSegmentResponse))
)]
pub(crate) async fn tinyid_next_segment(
    State(service): State<Service>,
    params: Result<Query<Params>, QueryRejection>,
) -> Json<TinyidSegmentResponse> {
    Json(TinyidSegmentResponse::of(
        tinyid_segment(&service, params).await,
    ))
}

/// Tinyid: a segment as `currentId,loadingId,maxId,delta,remainder`; empty
/// on any error.
#[utoipa::path(
    method(get, post),
    path = "/tinyid/id/nextSegmentIdSimple",
    tag = "compatible",
    params(TinyidParams),
    responses((status = 200, description = "The segment's five numbers joined by commas, or nothing on an error.", body = String, content_type = "text/plain"))
)]
pub(crate) async fn tinyid_next_segment_simple(
    State(service): State<Service>,
    params: Result<Query<Params>, QueryRejection>,
) -> String {
    match tinyid_segment(&service, params).await {
        Ok(s) => format!(
            "{},{},{},{},{}",
            s.current_id, s.loading_id, s.max_id, s.delta, s.remainder
        ),
        Err(_) => String::new(),
    }
}

fn join<'a>(ids: impl Iterator<Item = &'a u64>) -> String {
    ids.map(u64::to_string).collect::<Vec<_>>().join(",")
}
