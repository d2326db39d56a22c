//! What an operator or a load balancer asks: is the process up, can it reach
//! its store, what is the API.

use std::sync::LazyLock;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bakery::Key;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody};
use crate::Service;

/// A liveness or readiness answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Up.", body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The store answers a read.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "The store answered.", body = Health),
        (status = 503, description = "The store did not answer; retry.", body = ErrorBody),
    ))]
pub(crate) async fn readyz(State(service): State<Service>) -> Result<Json<Health>, ApiError> {
    let key = Key::new("bakery-serve/ready")?;
    service.sequences().store().get(&key).await?;
    Ok(Json(Health {
        status: "ok".into(),
    }))
}

/// The OpenAPI document, made once from the routes.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    crate::openapi()
        .to_pretty_json()
        .unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
});

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI document.", content_type = "application/json")))]
pub(crate) async fn openapi_json() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
}

/// Any other path: a JSON 404, or for a gRPC call (of a service this
/// server lacks) gRPC's UNIMPLEMENTED.
pub(crate) async fn not_found(headers: HeaderMap) -> Response {
    if crate::grpc::is_grpc(&headers) {
        return crate::grpc::unimplemented();
    }
    ApiError::not_found("no such route; the API is described at /openapi.json").into_response()
}
