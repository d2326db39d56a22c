//! Ids: next ids from the instance's block, blocks for thin clients, and
//! where a sequence stands.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use bakery::{Sequence, SequenceState};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Caller, Operation};
use crate::error::{ApiError, ErrorResponses};
use crate::Service;

/// The most ids one `next` call returns.
pub const MAX_COUNT: u64 = 100_000;

/// The most snowflakes one instance serves at once: each holds a worker id
/// (a lease renewed in the background); the oldest is given back first.
pub const MAX_SNOWFLAKES: usize = 64;

/// The most ids one `reserve` call reserves.
pub const MAX_BLOCK: u64 = 100_000_000;

/// How many ids `next` returns.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct CountParams {
    /// How many ids (1 to 100,000; default 1).
    count: Option<u64>,
}

/// How many ids `reserve` reserves.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SizeParams {
    /// How many consecutive ids (1 to 100,000,000).
    size: u64,
}

/// Ids of one sequence, increasing.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Ids {
    /// The sequence.
    pub name: String,
    /// The ids, each handed out once, by this or any other instance.
    pub ids: Vec<u64>,
}

/// Time-ordered ids of one snowflake, increasing.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SnowflakeIds {
    /// The snowflake.
    pub name: String,
    /// The worker id this instance holds for it (every id carries it).
    pub worker: u32,
    /// The ids: unique among every instance and process of the snowflake.
    pub ids: Vec<u64>,
}

/// Consecutive ids `start..end` (end excluded), reserved for one caller.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Block {
    /// The sequence.
    pub name: String,
    /// The first id of the block.
    pub start: u64,
    /// One past the last id of the block.
    pub end: u64,
}

/// Checks a count against `1..=max`.
pub(crate) fn bounded(what: &str, value: u64, max: u64) -> Result<u64, ApiError> {
    if (1..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::invalid_input(format!(
            "{what} must be within 1..={max}; got {value}"
        )))
    }
}

/// `count` ids from the sequence's handle in this instance.
pub(crate) async fn take(sequence: &Sequence, count: u64) -> Result<Vec<u64>, ApiError> {
    let batch = sequence.next_batch(count).await?;
    Ok(batch.iter().collect())
}

/// Next ids of a sequence.
///
/// Served from a block this instance reserved (made on first use): one
/// store round trip per block, not per id.
#[utoipa::path(
    post,
    path = "/v1/sequences/{name}/next",
    tag = "ids",
    params(("name" = String, Path, description = "The sequence name."), CountParams),
    responses(
        (status = 200, description = "The ids.", body = Ids),
        ErrorResponses,
    )
)]
pub(crate) async fn next(
    State(service): State<Service>,
    caller: Caller,
    name: Result<Path<String>, PathRejection>,
    params: Result<Query<CountParams>, QueryRejection>,
) -> Result<Json<Ids>, ApiError> {
    let (Path(name), Query(params)) = (name?, params?);
    next_ids(&service, &caller, name, params.count)
        .await
        .map(Json)
}

/// `count` (default 1) next ids of `name`: [`next`]'s operation, over any
/// protocol.
pub(crate) async fn next_ids(
    service: &Service,
    caller: &Caller,
    name: String,
    count: Option<u64>,
) -> Result<Ids, ApiError> {
    caller.allow(Operation::Ids, &name)?;
    let count = bounded("count", count.unwrap_or(1), MAX_COUNT)?;
    let sequence = service.sequences().get(&name)?;
    let ids = take(&sequence, count).await?;
    Ok(Ids { name, ids })
}

/// Next time-ordered ids of a snowflake.
///
/// 64-bit ids `timestamp | worker | sequence` (41, 10 and 12 bits; epoch
/// 2026-01-01), issued on a worker id this instance leases from the store
/// on first use (at most 64 snowflakes per instance): no store call per id.
#[utoipa::path(
    post,
    path = "/v1/snowflakes/{name}/next",
    tag = "ids",
    params(("name" = String, Path, description = "The snowflake name."), CountParams),
    responses(
        (status = 200, description = "The ids.", body = SnowflakeIds),
        ErrorResponses,
    )
)]
pub(crate) async fn snowflake_next(
    State(service): State<Service>,
    caller: Caller,
    name: Result<Path<String>, PathRejection>,
    params: Result<Query<CountParams>, QueryRejection>,
) -> Result<Json<SnowflakeIds>, ApiError> {
    let (Path(name), Query(params)) = (name?, params?);
    caller.allow(Operation::Ids, &name)?;
    let count = bounded("count", params.count.unwrap_or(1), MAX_COUNT)?;
    let snowflake = service.snowflakes().get(&name)?;
    let ids: Vec<u64> = snowflake.next_batch(count).await?.into_iter().collect();
    let worker = snowflake.layout().decode(ids[ids.len() - 1]).worker;
    Ok(Json(SnowflakeIds { name, worker, ids }))
}

/// Reserve a block of consecutive ids.
///
/// For a client that hands ids out itself: one conditional write to the
/// store, above every id reserved before it.
#[utoipa::path(
    post,
    path = "/v1/sequences/{name}/reserve",
    tag = "ids",
    params(("name" = String, Path, description = "The sequence name."), SizeParams),
    responses(
        (status = 200, description = "The block.", body = Block),
        ErrorResponses,
    )
)]
pub(crate) async fn reserve(
    State(service): State<Service>,
    caller: Caller,
    name: Result<Path<String>, PathRejection>,
    params: Result<Query<SizeParams>, QueryRejection>,
) -> Result<Json<Block>, ApiError> {
    let (Path(name), Query(params)) = (name?, params?);
    reserve_block(&service, &caller, name, params.size)
        .await
        .map(Json)
}

/// A block of `size` ids of `name`: [`reserve`]'s operation, over any
/// protocol.
pub(crate) async fn reserve_block(
    service: &Service,
    caller: &Caller,
    name: String,
    size: u64,
) -> Result<Block, ApiError> {
    caller.allow(Operation::Ids, &name)?;
    let size = bounded("size", size, MAX_BLOCK)?;
    let sequence = service.sequences().get(&name)?;
    let block = sequence.reserve_block(size).await?;
    Ok(Block {
        name,
        start: block.start,
        end: block.end,
    })
}

/// Where a sequence stands.
#[utoipa::path(
    get,
    path = "/v1/sequences/{name}",
    tag = "ids",
    params(("name" = String, Path, description = "The sequence name.")),
    responses(
        (status = 200, description = "The sequence's row.", body = SequenceState),
        ErrorResponses,
    )
)]
pub(crate) async fn show(
    State(service): State<Service>,
    caller: Caller,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SequenceState>, ApiError> {
    let Path(name) = name?;
    sequence_state(&service, &caller, &name).await.map(Json)
}

/// Where `name` stands: [`show`]'s operation, over any protocol.
pub(crate) async fn sequence_state(
    service: &Service,
    caller: &Caller,
    name: &str,
) -> Result<SequenceState, ApiError> {
    caller.allow(Operation::Read, name)?;
    Sequence::inspect(service.sequences().store().as_ref(), name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no sequence {name:?}")))
}
