#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod compat;
mod config;
mod error;
mod ids;
mod ops;
mod sequences;
mod telemetry;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use bakery::VersionedStore;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use compat::{TinyidIds, TinyidSegment, TinyidSegmentResponse};
pub use config::{
    ServeConfig, ServeError, DEFAULT_LISTEN, DEFAULT_MAX_SEQUENCES, DEFAULT_SEGMENT_SIZE,
};
pub use error::{ApiError, ErrorBody, Kind};
pub use ids::{Block, Ids, MAX_BLOCK, MAX_COUNT};
pub use ops::Health;

use sequences::Sequences;

/// The API's description: fixed title and version, so the checked-in
/// document changes only when the API does.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "bakery serve",
        version = "1",
        description = "Unique increasing ids from any bakery store, over HTTP/JSON.",
        license(name = "MIT OR Apache-2.0")
    ),
    tags(
        (name = "ids", description = "Sequences: ids each handed out once."),
        (name = "compatible", description = "Meituan Leaf's and Didi Tinyid's routes."),
        (name = "operations", description = "Health, metrics and the API's description."),
    )
)]
struct ApiDoc;

/// Every route, with its documentation.
fn routes() -> OpenApiRouter<Service> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(ids::next))
        .routes(routes!(ids::reserve))
        .routes(routes!(ids::show))
        .routes(routes!(compat::leaf_segment))
        .routes(routes!(compat::tinyid_next_id))
        .routes(routes!(compat::tinyid_next_id_simple))
        .routes(routes!(compat::tinyid_next_segment))
        .routes(routes!(compat::tinyid_next_segment_simple))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::openapi_json))
        .routes(routes!(telemetry::metrics))
}

/// The OpenAPI 3.1 document of the API, as served at `/openapi.json` (and
/// checked in as this crate's `openapi.json`).
///
/// ```
/// let doc = bakery_serve::openapi();
/// assert!(doc.paths.paths.contains_key("/v1/sequences/{name}/next"));
/// ```
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().split_for_parts().1
}

/// One instance's state: the store and the sequence handles it keeps.
/// Cheap to clone.
///
/// The first service made in a process installs a Prometheus recorder as the
/// `metrics` facade's global recorder (unless one is installed already), so
/// that `/metrics` shows the process's metrics.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery::Result<()> {
/// let store = bakery::connect("memory://").await?;
/// let app = bakery_serve::Service::new(store, &bakery_serve::ServeConfig::default()).router();
/// # let _ = app;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    sequences: Sequences,
    segment_size: u64,
    metrics: PrometheusHandle,
}

impl Service {
    /// A service over `store` with `config`'s limits.
    pub fn new(store: Arc<dyn VersionedStore>, config: &ServeConfig) -> Service {
        Service {
            inner: Arc::new(Inner {
                sequences: Sequences::new(store, config.max_sequences()),
                segment_size: config.segment_size(),
                metrics: telemetry::handle(),
            }),
        }
    }

    /// The HTTP application: every route, JSON errors for the rest; each
    /// request counted, timed and logged (see `/metrics`).
    pub fn router(&self) -> Router {
        let (router, _) = routes().split_for_parts();
        router
            .fallback(ops::not_found)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn(telemetry::observe))
            .with_state(self.clone())
    }

    pub(crate) fn sequences(&self) -> &Sequences {
        &self.inner.sequences
    }

    pub(crate) fn segment_size(&self) -> u64 {
        self.inner.segment_size
    }

    pub(crate) fn metrics(&self) -> &PrometheusHandle {
        &self.inner.metrics
    }
}

/// The largest request body accepted.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Open the listening socket `config` names, after checking the config
/// (a non-loopback address is refused: see [`ServeConfig::check`]) and its
/// TLS certificate and key, if any ([`ServeError::Tls`] names a bad file
/// before anything listens).
pub async fn bind(config: &ServeConfig) -> Result<TcpListener, ServeError> {
    config.check()?;
    tls::server_config(config)?;
    let addr = config.listen();
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Serve `store` on `listener` until `shutdown` completes; calls in flight
/// then finish before this returns. HTTPS if `config` has a TLS certificate
/// and key; HTTP/1.1 and HTTP/2 either way (over TLS by ALPN, in the clear
/// with prior knowledge).
pub async fn serve_on(
    listener: TcpListener,
    store: Arc<dyn VersionedStore>,
    config: &ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let tls = tls::server_config(config)?;
    let app = Service::new(store, config).router();
    tracing::info!(addr = ?listener.local_addr().ok(), tls = tls.is_some(), "bakery serve listening");
    if let Some(tls) = tls {
        return tls::serve(listener, app, tls, shutdown).await;
    }
    // The peer's address reaches the access log.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// [`bind`], then [`serve_on`].
pub async fn serve(
    store: Arc<dyn VersionedStore>,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listener = bind(&config).await?;
    serve_on(listener, store, &config, shutdown).await
}
