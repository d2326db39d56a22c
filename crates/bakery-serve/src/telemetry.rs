//! What an instance tells its operators: Prometheus metrics at `/metrics`
//! and one access-log event per request.
//!
//! # The recorder
//!
//! The `metrics` facade has one global recorder per process. The first
//! [`Service`] made builds a Prometheus recorder and installs it there, so
//! `/metrics` shows everything the process records through the facade: the
//! requests below, the recipes' metrics (`bakery_sequence_…`) and, when the
//! store is wrapped in a [`bakery::MetricsStore`], its calls
//! (`bakery_store_…`).
//!
//! If another recorder was installed first (the CLI's `--metrics-addr`
//! exporter, a test's recorder), that one keeps the facade: the requests
//! below are recorded into both it and this module's recorder, so `/metrics`
//! still shows them, and the rest is where the application sent it.
//!
//! # Histograms
//!
//! Durations are Prometheus histograms with fixed buckets ([`BUCKETS`]),
//! not summaries: buckets add up across instances behind a load balancer
//! (`histogram_quantile(0.99, sum by (le, route) (rate(…_bucket[5m])))`),
//! where the quantiles of a summary cannot be combined.
//!
//! # The access log
//!
//! Each request is one `tracing` event at INFO on the target
//! `bakery_serve::access` (filter it out with `bakery_serve::access=warn`),
//! with `method`, `route`, `status`, `latency_ms` and `peer` when the
//! server knows it.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::auth::{Caller, Operation};
use crate::error::{ApiError, ErrorBody, Kind};
use crate::Service;

/// Counter `bakery_serve_requests_total{method, route, status}`.
pub(crate) const REQUESTS: &str = "bakery_serve_requests_total";
/// Histogram `bakery_serve_request_duration_seconds{method, route}`.
pub(crate) const DURATION: &str = "bakery_serve_request_duration_seconds";
/// The `route` label of a request that matched no route: the raw path would
/// make a label value per path a client cares to send.
pub(crate) const UNMATCHED: &str = "unmatched";

/// The upper bounds (seconds) of every histogram's buckets: from a cached id
/// (well under a millisecond) to a lock held for a minute.
pub(crate) const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// How often recorded histogram samples are folded into their buckets (a
/// scrape folds them too): unfolded, they pile up in memory.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The Prometheus exposition format's media type.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// This process's Prometheus recorder.
struct Exporter {
    handle: PrometheusHandle,
    /// The recorder, when another one was global first: requests are also
    /// recorded here directly.
    own: Option<PrometheusRecorder>,
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// The process's exporter, built and installed on first use.
fn exporter() -> &'static Exporter {
    EXPORTER.get_or_init(|| {
        // Fails only for an empty list; summaries would then be served.
        let builder = match PrometheusBuilder::new().set_buckets(BUCKETS) {
            Ok(builder) => builder,
            Err(_) => PrometheusBuilder::new(),
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let own = metrics::set_global_recorder(recorder)
            .err()
            .map(|taken| taken.into_inner());
        if own.is_some() {
            tracing::info!(
                "a metrics recorder was already installed: /metrics shows bakery serve's \
                 request metrics only, the others go to that recorder"
            );
        }
        let exporter = Exporter { handle, own };
        exporter.with_each(describe);
        bakery::MetricsStore::describe();
        spawn_upkeep(exporter.handle.clone());
        exporter
    })
}

impl Exporter {
    /// Run `record` against the global recorder and, if it is not this
    /// one, against this one too.
    fn with_each(&self, record: impl Fn()) {
        record();
        if let Some(own) = &self.own {
            metrics::with_local_recorder(own, record);
        }
    }
}

/// Histogram samples are kept raw until folded; a thread rather than a task
/// so that it outlives whichever runtime made the first service.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("bakery-serve-metrics".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_EVERY);
            handle.run_upkeep();
        });
    if let Err(err) = spawned {
        tracing::warn!(%err, "no metrics upkeep thread: histograms are folded at each scrape only");
    }
}

fn describe() {
    metrics::describe_counter!(
        REQUESTS,
        metrics::Unit::Count,
        "HTTP requests answered, by method, matched route and status"
    );
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "time from a request to its response headers, by method and matched route"
    );
}

/// The handle `/metrics` renders; installs the recorder on first call.
pub(crate) fn handle() -> PrometheusHandle {
    exporter().handle.clone()
}

/// This process's metrics, for Prometheus.
///
/// Requests by route, sequence reservations, store calls (when the store is
/// metered). Among them `bakery_serve_requests_total{method, route, status}` and the
/// histogram `bakery_serve_request_duration_seconds{method, route}`, where
/// `route` is the route's template (`/v1/sequences/{name}/next`), or
/// `unmatched`. With a tokens file, only a token with the `admin`
/// operation may read them.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "The metrics, in the Prometheus text format 0.0.4.",
        body = String, content_type = "text/plain; version=0.0.4; charset=utf-8"),
        (status = 401, description = "No token, or an unknown one (only with a tokens file).", body = ErrorBody),
        (status = 403, description = "The token lacks the `admin` operation.", body = ErrorBody)))]
pub(crate) async fn metrics(
    State(service): State<Service>,
    caller: Caller,
) -> Result<impl IntoResponse, ApiError> {
    if !caller.may(Operation::Admin) {
        return Err(ApiError::new(
            Kind::Forbidden,
            "reading /metrics needs the \"admin\" operation",
        ));
    }
    Ok((
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        service.metrics().render(),
    ))
}

/// Middleware: count and time each request under its matched route, and log
/// it on `bakery_serve::access`.
pub(crate) async fn observe(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request.extensions().get::<MatchedPath>().cloned();
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer);
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let route = route.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
    let status = response.status().as_u16();
    exporter().with_each(|| {
        metrics::counter!(REQUESTS, "method" => method, "route" => route.to_owned(),
            "status" => status.to_string())
        .increment(1);
        metrics::histogram!(DURATION, "method" => method, "route" => route.to_owned())
            .record(elapsed.as_secs_f64());
    });
    tracing::info!(
        target: "bakery_serve::access",
        method,
        route,
        status,
        // From whole microseconds: no binary-fraction noise in the log.
        latency_ms = elapsed.as_micros() as f64 / 1000.0,
        peer = peer.map(tracing::field::display),
        "request"
    );
    response
}

/// The method as a label: any method outside the standard ones is `other`,
/// so clients cannot mint label values.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        let custom = Method::from_bytes(b"BREW").map(|method| method_label(&method));
        assert_eq!(custom.ok(), Some("other"));
    }
}
