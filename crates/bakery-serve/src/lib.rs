#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod auth;
mod compat;
mod config;
mod error;
mod fenced;
mod grants;
mod grpc;
mod handles;
mod ids;
mod locks;
mod once;
mod ops;
mod overview;
mod sessions;
mod telemetry;
mod tls;
mod ui;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use bakery::VersionedStore;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{Caller, Operation, Tokens, MIN_SECRET_LEN};
pub use compat::{TinyidIds, TinyidSegment, TinyidSegmentResponse};
pub use config::{
    ServeConfig, ServeError, DEFAULT_LEASE, DEFAULT_LISTEN, DEFAULT_MAX_SEQUENCES,
    DEFAULT_MAX_SESSIONS, DEFAULT_SEGMENT_SIZE,
};
pub use error::{ApiError, ErrorBody, Kind};
pub use fenced::{FencedContent, FencedWriteRequest};
pub use grants::{Family, Mode, Party, QueueView};
pub use grpc::proto;
pub use ids::{Block, Ids, SnowflakeIds, MAX_BLOCK, MAX_COUNT};
pub use locks::{
    AcquireRequest, Acquired, LeaderEvent, OpenSession, ReleaseRequest, DEFAULT_WAIT, MAX_WAIT,
};
pub use once::{ClaimRequest, ClaimStatus, FinishRequest, OnceState};
pub use ops::Health;
pub use overview::{GrantState, Overview, SessionState};
pub use sessions::{GrantView, SessionView, DEFAULT_TTL, MAX_TTL, MIN_TTL};

use handles::{Sequences, Snowflakes};
use overview::Directory;
use sessions::Sessions;

/// The API's description: fixed title and version, so the checked-in
/// document changes only when the API does.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "bakery serve",
        version = "1",
        description = "Unique increasing ids, fair fenced locks and exactly-once processing from any bakery store, over HTTP/JSON.",
        license(name = "MIT OR Apache-2.0")
    ),
    tags(
        (name = "ids", description = "Sequences: ids each handed out once."),
        (name = "sessions", description = "Client sessions: what holds grants and claims."),
        (name = "locks", description = "Locks, semaphores, RW locks, elections and fenced values."),
        (name = "once", description = "Idempotency keys: run at most once, replay the result."),
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
        .routes(routes!(ids::snowflake_next))
        .routes(routes!(locks::open_session))
        .routes(routes!(locks::show_session, locks::close_session))
        .routes(routes!(locks::keep_alive))
        .routes(routes!(locks::acquire))
        .routes(routes!(locks::try_acquire))
        .routes(routes!(locks::release))
        .routes(routes!(locks::show))
        .routes(routes!(locks::observe))
        .routes(routes!(fenced::read, fenced::write))
        .routes(routes!(once::claim))
        .routes(routes!(once::complete))
        .routes(routes!(once::fail))
        .routes(routes!(once::show, once::forget))
        .routes(routes!(compat::leaf_segment))
        .routes(routes!(compat::leaf_snowflake))
        .routes(routes!(compat::tinyid_next_id))
        .routes(routes!(compat::tinyid_next_id_simple))
        .routes(routes!(compat::tinyid_next_segment))
        .routes(routes!(compat::tinyid_next_segment_simple))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::openapi_json))
        .routes(routes!(overview::overview))
        .routes(routes!(overview::events))
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

/// One instance's state: the store, the sequence handles and the client
/// sessions it keeps. Cheap to clone.
///
/// The first service made in a process installs a Prometheus recorder as the
/// `metrics` facade's global recorder (unless one is installed already), so
/// that `/metrics` shows the process's metrics.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = bakery::connect("memory://").await?;
/// let app = bakery_serve::Service::new(store, &bakery_serve::ServeConfig::default())?.router();
/// # let _ = app;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn VersionedStore>,
    sequences: Sequences,
    snowflakes: Snowflakes,
    sessions: Sessions,
    directory: Directory,
    tokens: Option<Tokens>,
    segment_size: u64,
    lease: Duration,
    metrics: PrometheusHandle,
}

impl Service {
    /// A service over `store` with `config`'s limits (its tokens file read
    /// now).
    pub fn new(
        store: Arc<dyn VersionedStore>,
        config: &ServeConfig,
    ) -> Result<Service, ServeError> {
        config.check()?;
        let tokens = config.tokens_file().map(Tokens::load).transpose()?;
        Ok(Service {
            inner: Arc::new(Inner {
                sequences: Sequences::sequences(store.clone(), config.max_sequences()),
                snowflakes: Snowflakes::snowflakes(store.clone(), ids::MAX_SNOWFLAKES),
                store,
                sessions: Sessions::new(config.max_sessions()),
                directory: Directory::new(),
                tokens,
                segment_size: config.segment_size(),
                lease: config.lease(),
                metrics: telemetry::handle(),
            }),
        })
    }

    /// Begin shutting down: end every session, releasing its grants (each
    /// release serves the next waiter, on any instance, at once) and giving
    /// up its claims; waits in flight end, new sessions are refused.
    pub async fn shut_down(&self) {
        self.inner.sessions.shut_down().await;
    }

    /// The application: every HTTP route, JSON errors for the rest, each
    /// HTTP request counted, timed and logged (see `/metrics`); and the
    /// gRPC services beside them, on the same port (HTTP/2).
    pub fn router(&self) -> Router {
        let (router, _) = routes().split_for_parts();
        let rest = ui::beside(router)
            .fallback(ops::not_found)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn(telemetry::observe))
            .with_state(self.clone());
        grpc::beside(rest, self)
    }

    pub(crate) fn sequences(&self) -> &Sequences {
        &self.inner.sequences
    }

    pub(crate) fn snowflakes(&self) -> &Snowflakes {
        &self.inner.snowflakes
    }

    pub(crate) fn segment_size(&self) -> u64 {
        self.inner.segment_size
    }

    pub(crate) fn store(&self) -> &Arc<dyn VersionedStore> {
        &self.inner.store
    }

    pub(crate) fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    pub(crate) fn directory(&self) -> &Directory {
        &self.inner.directory
    }

    pub(crate) fn tokens(&self) -> Option<&Tokens> {
        self.inner.tokens.as_ref()
    }

    pub(crate) fn lease(&self) -> Duration {
        self.inner.lease
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

/// Serve `store` on `listener` until `shutdown` completes; then every
/// session ends (its grants released, so waiters elsewhere are served at
/// once), and calls in flight finish before this returns. HTTPS if
/// `config` has a TLS certificate and key; HTTP/1.1 and HTTP/2 either way
/// (over TLS by ALPN, in the clear with prior knowledge).
pub async fn serve_on(
    listener: TcpListener,
    store: Arc<dyn VersionedStore>,
    config: &ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let tls = tls::server_config(config)?;
    let service = Service::new(store, config)?;
    let app = service.router();
    tracing::info!(addr = ?listener.local_addr().ok(), tls = tls.is_some(), "bakery serve listening");
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: ending sessions, releasing their grants");
        service.shut_down().await;
    };
    if let Some(tls) = tls {
        return tls::serve(listener, app, tls, shutdown).await;
    }
    // The peer's address reaches the access log.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    // No Nagle delay: an HTTP/2 answer (gRPC's headers, data and trailers)
    // goes out in several writes, and the delayed ACK of the client would
    // hold the last one back for 40 ms.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::warn!(error = %err, "could not set TCP_NODELAY on a connection");
        }
    });
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
