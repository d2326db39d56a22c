//! What `bakery serve` gives its operators, over real sockets with a real
//! client: Prometheus metrics at `/metrics`, the access log, HTTPS with
//! HTTP/2 and HTTP/1.1, and a graceful stop in the clear and over TLS.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bakery::VersionedStore;
use bakery_core::{async_trait, Bytes, Key, PutOutcome, Result as StoreResult, StoreLayer};
use bakery_serve::{Ids, ServeConfig, ServeError};

use common::{self_signed, Instance};
use reqwest::{header, StatusCode, Version};
use tokio::sync::Notify;

/// An instance with `config`, the access log captured first.
async fn start(store: Arc<dyn VersionedStore>, config: ServeConfig) -> Instance {
    log();
    Instance::start_with(store, config).await
}

async fn plain(store: Arc<dyn VersionedStore>) -> Instance {
    start(store, ServeConfig::default()).await
}

fn memory() -> Arc<dyn VersionedStore> {
    Arc::new(bakery::MemoryStore::new())
}

/// The value of the sample of `name` whose labels include every one of
/// `labels`, in the Prometheus text format.
fn sample(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    body.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.split_once("} ")?;
        let pairs: Vec<&str> = set.split(',').collect();
        labels
            .iter()
            .all(|(key, value)| pairs.contains(&format!("{key}=\"{value}\"").as_str()))
            .then(|| value.trim().parse().ok())?
    })
}

#[tokio::test]
async fn metrics_count_and_time_each_request_by_its_route_template() {
    let instance = plain(memory()).await;
    let http = reqwest::Client::new();
    let name = "metered-orders";
    for _ in 0..3 {
        let response = http
            .post(instance.url(&format!("/v1/sequences/{name}/next")))
            .send()
            .await
            .expect("next");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let missing = http
        .get(instance.url("/no/such/route/4711"))
        .send()
        .await
        .expect("a 404");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    let response = http
        .get(instance.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let body = response.text().await.expect("text");

    let route = "/v1/sequences/{name}/next";
    // Other tests in this binary share the process's recorder: at least.
    let served = sample(
        &body,
        "bakery_serve_requests_total",
        &[("method", "POST"), ("route", route), ("status", "200")],
    );
    assert!(served.is_some_and(|count| count >= 3.0), "{body}");
    let unmatched = sample(
        &body,
        "bakery_serve_requests_total",
        &[("method", "GET"), ("route", "unmatched"), ("status", "404")],
    );
    assert!(unmatched.is_some_and(|count| count >= 1.0), "{body}");
    // A histogram, with buckets, per method and route.
    let timed = sample(
        &body,
        "bakery_serve_request_duration_seconds_count",
        &[("method", "POST"), ("route", route)],
    );
    assert!(timed.is_some_and(|count| count >= 3.0), "{body}");
    let slowest_bucket = sample(
        &body,
        "bakery_serve_request_duration_seconds_bucket",
        &[("route", route), ("le", "+Inf")],
    );
    assert!(slowest_bucket.is_some_and(|count| count >= 3.0), "{body}");
    assert!(
        body.contains("# TYPE bakery_serve_request_duration_seconds histogram"),
        "{body}"
    );
    // The raw paths never become labels.
    assert!(
        !body.contains(&format!("/v1/sequences/{name}/next")),
        "{body}"
    );
    assert!(!body.contains("/no/such/route"), "{body}");
    // The facade's other metrics are served too: the sequence's reservations.
    let reserved = sample(
        &body,
        "bakery_sequence_reservations_total",
        &[("sequence", name)],
    );
    assert!(reserved.is_some_and(|count| count >= 1.0), "{body}");
}

#[tokio::test]
async fn the_openapi_document_describes_metrics_as_prometheus_text() {
    let doc = serde_json::to_value(bakery_serve::openapi()).expect("json");
    let metrics = &doc["paths"]["/metrics"]["get"];
    assert_eq!(metrics["tags"][0], "operations", "{metrics}");
    let content = metrics["responses"]["200"]["content"]
        .as_object()
        .expect("content");
    assert!(
        content
            .keys()
            .any(|media| media.starts_with("text/plain; version=0.0.4")),
        "{content:?}"
    );
}

/// A `MakeWriter` into a shared buffer, for the log a test reads back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

impl Captured {
    fn lines_with(&self, needle: &str) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().expect("log")).into_owned();
        text.lines()
            .filter(|line| line.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

/// This process's log, captured by a global subscriber installed before any
/// instance starts: a thread's scoped subscriber can miss events when other
/// threads register the same callsites concurrently.
fn log() -> &'static Captured {
    static LOG: OnceLock<Captured> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(log.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        log
    })
}

#[tokio::test]
async fn each_request_is_one_access_log_event_with_route_status_latency_and_peer() {
    let instance = plain(memory()).await;
    // The one test that asks for a sequence's state, so the one with this route.
    let response = reqwest::get(instance.url("/v1/sequences/logged"))
        .await
        .expect("show");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let events: Vec<String> = log()
        .lines_with("bakery_serve::access")
        .into_iter()
        .filter(|line| line.contains("route=\"/v1/sequences/{name}\""))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    for field in [
        "INFO",
        "method=\"GET\"",
        "status=404",
        "latency_ms=",
        "peer=127.0.0.1:",
    ] {
        assert!(event.contains(field), "{field} missing in {event}");
    }
}

#[tokio::test]
async fn plain_http_also_serves_http2_with_prior_knowledge() {
    let instance = plain(memory()).await;
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let response = h2c
        .get(instance.url("/healthz"))
        .send()
        .await
        .expect("healthz over h2c");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.version(), Version::HTTP_2);
}

/// A client that trusts `cert_pem` only.
fn trusting(cert_pem: &str, http1_only: bool) -> reqwest::Client {
    let root = reqwest::Certificate::from_pem(cert_pem.as_bytes()).expect("root");
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(root);
    if http1_only {
        builder = builder.http1_only();
    }
    builder.build().expect("client")
}

fn tls_config(cert: &Path, key: &Path) -> ServeConfig {
    ServeConfig::default().with_tls_cert(cert).with_tls_key(key)
}

#[tokio::test]
async fn https_offers_http2_and_http1_and_refuses_plain_http() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key, cert_pem) = self_signed(dir.path());
    let instance = start(memory(), tls_config(&cert, &key)).await;
    assert!(instance.url("/").starts_with("https://"));

    // ALPN picks h2 when the client offers it…
    let response = trusting(&cert_pem, false)
        .get(instance.url("/healthz"))
        .send()
        .await
        .expect("healthz over https");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.version(), Version::HTTP_2);
    // …and HTTP/1.1 when that is all it offers.
    let response = trusting(&cert_pem, true)
        .post(instance.url("/v1/sequences/secure/next?count=2"))
        .send()
        .await
        .expect("next over https");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.version(), Version::HTTP_11);
    let ids: Ids = response.json().await.expect("ids");
    assert_eq!(ids.ids.len(), 2);

    // A client that does not trust the certificate is refused.
    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .build()
        .expect("client");
    assert!(untrusting
        .get(instance.url("/healthz"))
        .send()
        .await
        .is_err());
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/healthz", instance.addr))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
}

#[tokio::test]
async fn a_bad_certificate_or_key_file_is_a_tls_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key, _) = self_signed(dir.path());
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a key\n").expect("write");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    let (_, other_key, _) = self_signed(&other);
    let missing = dir.path().join("missing.pem");

    for (config, at_fault) in [
        (tls_config(&cert, &garbage), &garbage),
        (tls_config(&garbage, &key), &garbage),
        (tls_config(&missing, &key), &missing),
        // Someone else's key: the certificate's public key is not its.
        (tls_config(&cert, &other_key), &other_key),
    ] {
        let config = config.with_listen(SocketAddr::from(([127, 0, 0, 1], 0)));
        match bakery_serve::bind(&config).await {
            Err(err @ ServeError::Tls { .. }) => {
                let ServeError::Tls { path, .. } = &err else {
                    unreachable!()
                };
                assert_eq!(path, at_fault, "{err}");
                let message = err.to_string();
                assert!(
                    message.contains(&at_fault.display().to_string()),
                    "{message}"
                );
            }
            other => panic!(
                "{}: expected a TLS error, got {other:?}",
                at_fault.display()
            ),
        }
    }
    // The same from serve_on, for a listener opened some other way.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let served = bakery_serve::serve_on(
        listener,
        memory(),
        &tls_config(&cert, &garbage),
        std::future::pending(),
    )
    .await;
    assert!(
        matches!(&served, Err(ServeError::Tls { path, .. }) if *path == garbage),
        "{served:?}"
    );
}

/// Makes the first write wait until the test lets it go, and says when it
/// is waiting: a call held in flight.
#[derive(Debug)]
struct HeldWrite {
    inner: Arc<dyn VersionedStore>,
    held: AtomicBool,
    waiting: Arc<Notify>,
    release: Arc<Notify>,
}

#[async_trait]
impl StoreLayer for HeldWrite {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<bakery_core::Version>,
        value: Bytes,
    ) -> StoreResult<PutOutcome> {
        if !self.held.swap(true, Ordering::SeqCst) {
            self.waiting.notify_one();
            self.release.notified().await;
        }
        self.inner.put_if_version(key, expected, value).await
    }
}

/// Stop an instance while a call is in flight: the call finishes, then
/// `serve_on` returns, then nothing listens.
async fn stops_gracefully(config: ServeConfig, client: reqwest::Client) {
    let waiting = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let store: Arc<dyn VersionedStore> = Arc::new(HeldWrite {
        inner: memory(),
        held: AtomicBool::new(false),
        waiting: waiting.clone(),
        release: release.clone(),
    });
    let mut instance = start(store, config).await;
    let url = instance.url("/v1/sequences/graceful/next");
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.post(url).send().await }
    });
    tokio::time::timeout(Duration::from_secs(10), waiting.notified())
        .await
        .expect("the call reaches the store");
    instance.signal_stop();
    // Give the server time to act on the stop before the call may finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!call.is_finished(), "the held call ended early");
    release.notify_one();
    let response = call
        .await
        .expect("client task")
        .expect("the call in flight");
    assert_eq!(response.status(), StatusCode::OK);
    let ids: Ids = response.json().await.expect("ids");
    assert_eq!(ids.ids.len(), 1);
    instance.stopped().await.expect("stopped cleanly");
    let after = client
        .get(instance.url("/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(after.is_err(), "still answering after the stop: {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_stops_gracefully_finishing_the_call_in_flight() {
    stops_gracefully(ServeConfig::default(), reqwest::Client::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_stops_gracefully_finishing_the_call_in_flight() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key, cert_pem) = self_signed(dir.path());
    stops_gracefully(tls_config(&cert, &key), trusting(&cert_pem, false)).await;
}
