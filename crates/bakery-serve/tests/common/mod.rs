//! What the HTTP tests share: an instance on a free loopback port, the
//! stores to run on, error bodies.
#![allow(dead_code)] // each test file uses its part

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bakery::VersionedStore;
use bakery_serve::{ErrorBody, ServeConfig};
use reqwest::{Method, StatusCode};
use tokio::sync::oneshot;

/// A running instance on a free loopback port, stopped when dropped.
pub struct Instance {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    /// `https` when the config has a certificate.
    scheme: &'static str,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<Result<(), bakery_serve::ServeError>>>,
}

impl Instance {
    pub async fn start(store: Arc<dyn VersionedStore>) -> Instance {
        Instance::start_with(store, ServeConfig::default()).await
    }

    /// Started with `config`, on a free loopback port.
    pub async fn start_with(store: Arc<dyn VersionedStore>, config: ServeConfig) -> Instance {
        let config = config.with_listen(loopback());
        let scheme = if config.tls_cert().is_some() {
            "https"
        } else {
            "http"
        };
        let listener = bakery_serve::bind(&config).await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(async move {
            bakery_serve::serve_on(listener, store, &config, async {
                let _ = stopped.await;
            })
            .await
        });
        Instance {
            addr,
            http: reqwest::Client::new(),
            scheme,
            stop: Some(stop),
            served: Some(served),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    pub async fn send(&self, method: Method, path: impl AsRef<str>) -> reqwest::Response {
        let url = self.url(path.as_ref());
        self.http
            .request(method, &url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    pub async fn text(&self, method: Method, path: impl AsRef<str>) -> String {
        self.send(method, path)
            .await
            .text()
            .await
            .expect("a text body")
    }

    pub async fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: impl AsRef<str>,
    ) -> T {
        self.send(method, path)
            .await
            .json()
            .await
            .expect("a JSON body of the documented type")
    }

    /// Ask it to stop, without waiting.
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Wait until `serve_on` has returned, and return what it returned.
    pub async fn stopped(&mut self) -> Result<(), bakery_serve::ServeError> {
        let served = self.served.take().expect("still serving");
        tokio::time::timeout(std::time::Duration::from_secs(10), served)
            .await
            .expect("serve_on returns after its shutdown")
            .expect("server task")
    }

    /// Stop it and wait until it has: calls in flight finish first.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served
                .await
                .expect("server task")
                .expect("server stopped cleanly");
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The stores the API is checked on: SQLite always, each server when its
/// URI is set (and in CI, where a missing one fails).
pub async fn stores() -> Vec<(String, Arc<dyn VersionedStore>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = format!("sqlite://{}", dir.path().join("serve.db").display());
    let mut stores = vec![(
        "sqlite".to_owned(),
        bakery::connect(&sqlite).await.expect("sqlite"),
        Some(dir),
    )];
    for (name, var) in [
        ("postgres", "BAKERY_POSTGRES_URI"),
        ("redis", "BAKERY_REDIS_URI"),
        ("etcd", "BAKERY_ETCD_URI"),
        ("mongodb", "BAKERY_MONGODB_URI"),
        ("cassandra", "BAKERY_CASSANDRA_URI"),
        ("mysql", "BAKERY_MARIADB_URI"),
        ("dynamodb", "BAKERY_DYNAMODB_URI"),
    ] {
        if let Some(uri) = bakery_testkit::server_uri(var, "bakery serve over HTTP") {
            let store = bakery::connect(&uri)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            stores.push((name.to_owned(), store, None));
        }
    }
    stores
}

/// The status and JSON body of an error response.
pub async fn error_of(response: reqwest::Response) -> (StatusCode, ErrorBody) {
    let status = response.status();
    let body = response
        .json::<ErrorBody>()
        .await
        .expect("a JSON error body");
    (status, body)
}

/// A self-signed certificate for 127.0.0.1 and localhost, written as PEM
/// files into `dir`: (certificate path, key path, certificate PEM).
pub fn self_signed(dir: &Path) -> (PathBuf, PathBuf, String) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("certificate");
    let cert_pem = certified.cert.pem();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, &cert_pem).expect("write cert");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key");
    (cert, key, cert_pem)
}
