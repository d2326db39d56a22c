//! A small async client of [Toxiproxy]'s HTTP API, to put a real TCP fault
//! proxy between a test's client and its server: delay, throttle, reset,
//! blackhole or cut the connections while requests are in flight.
//!
//! `scripts/backends.sh start toxiproxy` runs the server (built from the Go
//! module proxy) and exports its API as `BAKERY_TOXIPROXY_URL`. A test
//! creates one [`Proxy`] per server it talks to (listening on a port the
//! kernel picks), opens its store on [`Proxy::uri`] instead of the server's
//! URI, and adds and removes [`Toxic`]s around the calls it checks.
//!
//! Directions are Toxiproxy's: [`Direction::Upstream`] is what the client
//! sends (the requests), [`Direction::Downstream`] what the server sends
//! back (the replies). A toxic that drops or cuts the downstream after the
//! upstream carried a request is how "applied, but the reply was lost" — an
//! unknown outcome — is produced on purpose.
//!
//! ```no_run
//! use std::time::Duration;
//! use bakery_testkit::proxy::{Direction, Toxic, Toxiproxy};
//!
//! # async fn demo() -> Result<(), bakery_testkit::proxy::ProxyError> {
//! let api = Toxiproxy::new("http://127.0.0.1:18474")?;
//! let proxy = api.create("redis-test", "127.0.0.1:16379").await?;
//! let uri = proxy.uri("redis://127.0.0.1:16379/0"); // redis://127.0.0.1:<port>/0
//! proxy
//!     .add(Toxic::latency(Duration::from_millis(100), Duration::from_millis(20)))
//!     .await?;
//! // ... calls through `uri` are slow now ...
//! proxy.clear().await?; // every toxic removed
//! proxy.disable().await?; // every connection cut, new ones refused
//! proxy.enable().await?;
//! proxy.delete().await?; // or let it drop
//! # Ok(())
//! # }
//! ```
//!
//! [Toxiproxy]: https://github.com/Shopify/toxiproxy

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// The environment variable `scripts/backends.sh` exports the API's URL in.
pub const URL_VAR: &str = "BAKERY_TOXIPROXY_URL";

/// How long one API call may take (the server is on loopback; this only
/// turns a hung server into an error).
const API_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed API call: the server could not be reached, or answered with an
/// error status (its message included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyError(String);

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "toxiproxy: {}", self.0)
    }
}

impl std::error::Error for ProxyError {}

fn error(message: impl Into<String>) -> ProxyError {
    ProxyError(message.into())
}

/// The result of an API call.
pub type Result<T> = std::result::Result<T, ProxyError>;

/// A Toxiproxy server's HTTP API.
#[derive(Debug, Clone)]
pub struct Toxiproxy {
    addr: SocketAddr,
}

impl Toxiproxy {
    /// The API at `url`, `http://HOST:PORT` with HOST an IP address (no
    /// name lookup) and an optional trailing `/`.
    ///
    /// ```
    /// use bakery_testkit::proxy::Toxiproxy;
    /// assert_eq!(Toxiproxy::new("http://127.0.0.1:8474/").unwrap().addr().port(), 8474);
    /// assert!(Toxiproxy::new("https://127.0.0.1:8474").is_err());
    /// assert!(Toxiproxy::new("http://localhost:8474").is_err());
    /// ```
    pub fn new(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| error(format!("{url:?} is not an http:// URL")))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let addr = rest
            .parse()
            .map_err(|_| error(format!("{url:?} is not http://IP:PORT")))?;
        Ok(Toxiproxy { addr })
    }

    /// The API named by [`URL_VAR`] (`BAKERY_TOXIPROXY_URL`), with the
    /// rules of [`crate::server_uri`]: unset or empty, in CI
    /// ([`crate::in_ci`]) the test FAILS, elsewhere it prints why and
    /// returns `None` (the test skips). A value that is not a valid URL
    /// always fails.
    pub fn from_env(who: &str) -> Option<Self> {
        match std::env::var(URL_VAR) {
            Ok(url) if !url.is_empty() => match Toxiproxy::new(&url) {
                Ok(api) => Some(api),
                Err(e) => panic!("{who}: {URL_VAR}: {e}"),
            },
            _ => {
                let start = "start it with `scripts/backends.sh start toxiproxy`";
                assert!(
                    !crate::in_ci(),
                    "{who}: {URL_VAR} is not set but CI requires the toxiproxy tests; {start}"
                );
                eprintln!("{who}: skipped: {URL_VAR} is not set ({start}; CI fails instead)");
                None
            }
        }
    }

    /// The address of the API.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's version (`GET /version`), e.g. `v2.12.0`.
    pub async fn version(&self) -> Result<String> {
        let body = self.call(Method::GET, "/version", None).await?;
        body.get("version")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| error(format!("GET /version answered {body}")))
    }

    /// A new proxy `name`, listening on 127.0.0.1 on a port the kernel
    /// picks, forwarding to `upstream` (`HOST:PORT`), enabled.
    pub async fn create(&self, name: &str, upstream: &str) -> Result<Proxy> {
        self.create_on(name, "127.0.0.1:0", upstream).await
    }

    /// A new proxy `name` listening on `listen` (`IP:PORT`; port 0: the
    /// kernel picks) and forwarding to `upstream`, enabled.
    pub async fn create_on(&self, name: &str, listen: &str, upstream: &str) -> Result<Proxy> {
        let body = json!({
            "name": name,
            "listen": listen,
            "upstream": upstream,
            "enabled": true,
        });
        let created = self.call(Method::POST, "/proxies", Some(body)).await?;
        let listen = created
            .get("listen")
            .and_then(Value::as_str)
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| error(format!("POST /proxies answered {created}")))?;
        Ok(Proxy {
            api: self.clone(),
            name: name.to_owned(),
            listen,
            upstream: upstream.to_owned(),
            deleted: false,
        })
    }

    /// `POST /reset`: enables EVERY proxy of the server and removes every
    /// toxic — also those of other tests sharing the server. Prefer
    /// [`Proxy::clear`] and [`Proxy::enable`] on your own proxies.
    pub async fn reset(&self) -> Result<()> {
        self.call(Method::POST, "/reset", None).await.map(drop)
    }

    /// One API call: `method path` with a JSON body; the reply's JSON (or
    /// `null` for an empty one). A status of 400 or more is an error.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value> {
        let what = format!("{method} {path}");
        match tokio::time::timeout(API_TIMEOUT, self.exchange(method, path, body)).await {
            Ok(Ok((status, reply))) if status.is_success() => {
                if reply.is_empty() {
                    Ok(Value::Null)
                } else {
                    serde_json::from_slice(&reply).map_err(|e| {
                        error(format!(
                            "{what}: the reply is not JSON ({e}): {}",
                            String::from_utf8_lossy(&reply)
                        ))
                    })
                }
            }
            Ok(Ok((status, reply))) => Err(error(format!(
                "{what}: {status}: {}",
                String::from_utf8_lossy(&reply).trim()
            ))),
            Ok(Err(e)) => Err(error(format!("{what} to {}: {e}", self.addr))),
            Err(_) => Err(error(format!(
                "{what} to {}: no reply within {API_TIMEOUT:?}",
                self.addr
            ))),
        }
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> std::result::Result<(StatusCode, Bytes), Box<dyn std::error::Error + Send + Sync>> {
        let stream = tokio::net::TcpStream::connect(self.addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        // Drives the connection; it ends when `sender` is dropped.
        let driver = tokio::spawn(connection);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.addr.to_string())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let reply = response.into_body().collect().await?.to_bytes();
        drop(sender);
        // The response is complete; a failure while closing is no concern.
        let _ = driver.await;
        Ok((status, reply))
    }
}

/// Which way a toxic acts: on what the client sends, or on what it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server: the requests.
    Upstream,
    /// Server to client: the replies.
    Downstream,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::Upstream => "upstream",
            Direction::Downstream => "downstream",
        }
    }
}

/// What a toxic does to the bytes of each connection, in its [`Direction`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ToxicKind {
    /// Delays every chunk by `latency` ± `jitter` (order kept).
    Latency {
        /// The delay.
        latency: Duration,
        /// Up to this much more or less, at random.
        jitter: Duration,
    },
    /// On the first data after `timeout` (0: at once), drops it and resets
    /// the connection (TCP RST): the data in this direction is lost.
    ResetPeer {
        /// How long the connection lives after its first data.
        timeout: Duration,
    },
    /// A blackhole: swallows all data, and closes the connection after
    /// `timeout` — never while the toxic stays, if `timeout` is zero.
    /// Removing the toxic closes the connections it held.
    Timeout {
        /// When to close; zero: hold until the toxic is removed.
        timeout: Duration,
    },
    /// Delays the closing of the connection by `delay`.
    SlowClose {
        /// The delay.
        delay: Duration,
    },
    /// Throttles to `rate` KB/s.
    Bandwidth {
        /// KB per second; 0 leaves the data unthrottled.
        rate: u64,
    },
    /// Slices the data into chunks of `average_size` ± `size_variation`
    /// bytes, `delay` apart.
    Slicer {
        /// Mean chunk size in bytes.
        average_size: u64,
        /// Variation in bytes (less than `average_size`).
        size_variation: u64,
        /// Pause between chunks (sent in microseconds).
        delay: Duration,
    },
    /// Lets `bytes` bytes through (counted from when the toxic applies to
    /// the connection), then closes the connection.
    LimitData {
        /// Bytes let through.
        bytes: u64,
    },
}

impl ToxicKind {
    /// Toxiproxy's name of the type, e.g. `reset_peer`.
    pub fn type_name(&self) -> &'static str {
        match self {
            ToxicKind::Latency { .. } => "latency",
            ToxicKind::ResetPeer { .. } => "reset_peer",
            ToxicKind::Timeout { .. } => "timeout",
            ToxicKind::SlowClose { .. } => "slow_close",
            ToxicKind::Bandwidth { .. } => "bandwidth",
            ToxicKind::Slicer { .. } => "slicer",
            ToxicKind::LimitData { .. } => "limit_data",
        }
    }

    fn attributes(&self) -> Value {
        let ms = |d: &Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        match self {
            ToxicKind::Latency { latency, jitter } => {
                json!({"latency": ms(latency), "jitter": ms(jitter)})
            }
            ToxicKind::ResetPeer { timeout } | ToxicKind::Timeout { timeout } => {
                json!({"timeout": ms(timeout)})
            }
            ToxicKind::SlowClose { delay } => json!({"delay": ms(delay)}),
            ToxicKind::Bandwidth { rate } => json!({"rate": rate}),
            ToxicKind::Slicer {
                average_size,
                size_variation,
                delay,
            } => json!({
                "average_size": average_size,
                "size_variation": size_variation,
                "delay": u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
            }),
            ToxicKind::LimitData { bytes } => json!({"bytes": bytes}),
        }
    }
}

/// A toxic to add to a [`Proxy`]: a kind, a direction, a name (by default
/// `TYPE_DIRECTION`, Toxiproxy's own default) and a toxicity (the share of
/// connections it applies to; 1 by default).
///
/// ```
/// use std::time::Duration;
/// use bakery_testkit::proxy::{Direction, Toxic};
///
/// let t = Toxic::reset_peer(Duration::ZERO);
/// assert_eq!(t.name(), "reset_peer_downstream");
/// let t = Toxic::limit_data(1).direction(Direction::Upstream).named("cut");
/// assert_eq!(t.name(), "cut");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Toxic {
    kind: ToxicKind,
    direction: Direction,
    name: Option<String>,
    toxicity: f32,
}

impl Toxic {
    /// A `kind` toxic on the replies ([`Direction::Downstream`]).
    pub fn new(kind: ToxicKind) -> Self {
        Toxic {
            kind,
            direction: Direction::Downstream,
            name: None,
            toxicity: 1.0,
        }
    }

    /// [`ToxicKind::Latency`] on the replies.
    pub fn latency(latency: Duration, jitter: Duration) -> Self {
        Toxic::new(ToxicKind::Latency { latency, jitter })
    }

    /// [`ToxicKind::ResetPeer`] on the replies.
    pub fn reset_peer(timeout: Duration) -> Self {
        Toxic::new(ToxicKind::ResetPeer { timeout })
    }

    /// [`ToxicKind::Timeout`] (a blackhole) on the replies.
    pub fn timeout(timeout: Duration) -> Self {
        Toxic::new(ToxicKind::Timeout { timeout })
    }

    /// [`ToxicKind::SlowClose`] on the replies.
    pub fn slow_close(delay: Duration) -> Self {
        Toxic::new(ToxicKind::SlowClose { delay })
    }

    /// [`ToxicKind::Bandwidth`] on the replies, `rate` KB/s.
    pub fn bandwidth(rate: u64) -> Self {
        Toxic::new(ToxicKind::Bandwidth { rate })
    }

    /// [`ToxicKind::Slicer`] on the replies.
    pub fn slicer(average_size: u64, size_variation: u64, delay: Duration) -> Self {
        Toxic::new(ToxicKind::Slicer {
            average_size,
            size_variation,
            delay,
        })
    }

    /// [`ToxicKind::LimitData`] on the replies.
    pub fn limit_data(bytes: u64) -> Self {
        Toxic::new(ToxicKind::LimitData { bytes })
    }

    /// The same toxic acting in `direction`.
    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// The same toxic named `name` (names are unique per proxy).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The same toxic applied to a share `toxicity` (0 to 1) of connections.
    pub fn toxicity(mut self, toxicity: f32) -> Self {
        self.toxicity = toxicity;
        self
    }

    /// Its name on the proxy.
    pub fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}_{}", self.kind.type_name(), self.direction.as_str()))
    }

    /// What it does.
    pub fn kind(&self) -> ToxicKind {
        self.kind
    }

    fn body(&self) -> Value {
        json!({
            "name": self.name(),
            "type": self.kind.type_name(),
            "stream": self.direction.as_str(),
            "toxicity": self.toxicity,
            "attributes": self.kind.attributes(),
        })
    }
}

/// One proxy on a Toxiproxy server, deleted when dropped (or by
/// [`Proxy::delete`], which reports a failure).
#[derive(Debug)]
pub struct Proxy {
    api: Toxiproxy,
    name: String,
    listen: SocketAddr,
    upstream: String,
    deleted: bool,
}

impl Proxy {
    /// Its name on the server.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it listens: connect here instead of to the upstream.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// The `HOST:PORT` it forwards to.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// `uri` pointed at this proxy: see [`via`].
    pub fn uri(&self, uri: &str) -> String {
        via(uri, self.listen)
    }

    fn path(&self) -> String {
        format!("/proxies/{}", self.name)
    }

    /// Adds `toxic`; it applies to the open connections too. Returns its name.
    pub async fn add(&self, toxic: Toxic) -> Result<String> {
        let path = format!("{}/toxics", self.path());
        self.api
            .call(Method::POST, &path, Some(toxic.body()))
            .await?;
        Ok(toxic.name())
    }

    /// Removes the toxic `name`.
    pub async fn remove(&self, name: &str) -> Result<()> {
        let path = format!("{}/toxics/{name}", self.path());
        self.api.call(Method::DELETE, &path, None).await.map(drop)
    }

    /// The names of its toxics.
    pub async fn toxics(&self) -> Result<Vec<String>> {
        let path = format!("{}/toxics", self.path());
        let list = self.api.call(Method::GET, &path, None).await?;
        let list = list
            .as_array()
            .ok_or_else(|| error(format!("GET {path} answered {list}")))?;
        Ok(list
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect())
    }

    /// Removes every toxic.
    pub async fn clear(&self) -> Result<()> {
        for name in self.toxics().await? {
            self.remove(&name).await?;
        }
        Ok(())
    }

    /// Stops listening and closes every connection through it (a cut: what
    /// was in flight is lost); connecting is refused until [`enable`](Self::enable).
    pub async fn disable(&self) -> Result<()> {
        self.set_enabled(false).await
    }

    /// Listens again, on the same address.
    pub async fn enable(&self) -> Result<()> {
        self.set_enabled(true).await
    }

    async fn set_enabled(&self, enabled: bool) -> Result<()> {
        self.api
            .call(
                Method::PATCH,
                &self.path(),
                Some(json!({ "enabled": enabled })),
            )
            .await
            .map(drop)
    }

    /// Deletes it from the server (closing its connections).
    pub async fn delete(mut self) -> Result<()> {
        self.deleted = true;
        self.api
            .call(Method::DELETE, &self.path(), None)
            .await
            .map(drop)
    }
}

impl Drop for Proxy {
    /// Deletes the proxy if [`Proxy::delete`] did not: on a thread of its
    /// own with a runtime of its own, so it works inside or outside one.
    /// A failure is printed, not raised.
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        let api = self.api.clone();
        let path = self.path();
        let done = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| error(format!("no runtime to delete the proxy: {e}")))?;
            runtime.block_on(api.call(Method::DELETE, &path, None))
        })
        .join();
        match done {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("proxy {} not deleted: {e}", self.name),
            Err(_) => eprintln!(
                "proxy {} not deleted: the deleting thread panicked",
                self.name
            ),
        }
    }
}

/// The first `HOST:PORT` of a bakery URI — the server a proxy for it
/// forwards to — with the scheme's default port when the URI gives none.
/// `None` if there is no host (or, without a port, an unknown scheme).
///
/// ```
/// use bakery_testkit::proxy::upstream_of;
/// assert_eq!(upstream_of("postgres://u:p@127.0.0.1:15432/db?x=1").as_deref(), Some("127.0.0.1:15432"));
/// assert_eq!(upstream_of("etcd://10.0.0.1:2379,10.0.0.2").as_deref(), Some("10.0.0.1:2379"));
/// assert_eq!(upstream_of("cassandra://db/ks").as_deref(), Some("db:9042"));
/// assert_eq!(upstream_of("redis://[::1]/0").as_deref(), Some("[::1]:6379"));
/// assert_eq!(upstream_of("sqlite:///tmp/x.db"), None);
/// ```
pub fn upstream_of(uri: &str) -> Option<String> {
    if let Some((start, end)) = endpoint_span(uri) {
        let host = &uri[start..end];
        if host.contains(':') {
            return Some(host.to_owned());
        }
        let port = if uri[..start].ends_with("https://") {
            443
        } else {
            80
        };
        return Some(format!("{host}:{port}"));
    }
    let (scheme, rest) = uri.split_once("://")?;
    let (_, hosts, _) = split_authority(rest);
    let first = hosts.split(',').next().filter(|h| !h.is_empty())?;
    let has_port = match first.rfind(']') {
        Some(close) => first[close..].contains(':'),
        None => first.contains(':'),
    };
    if has_port {
        return Some(first.to_owned());
    }
    let port = match scheme.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => 5432,
        "redis" | "rediss" => 6379,
        "etcd" | "etcds" => 2379,
        "cassandra" | "scylla" => 9042,
        "mongodb" => 27017,
        "mysql" | "mariadb" => 3306,
        _ => return None,
    };
    Some(format!("{first}:{port}"))
}

/// `uri` with its host list (one host or several, comma-separated) replaced
/// by `listen`; scheme, credentials, path and options kept.
///
/// ```
/// use bakery_testkit::proxy::via;
/// let at = "127.0.0.1:4000".parse().unwrap();
/// assert_eq!(via("postgres://u:p@127.0.0.1:15432/db?a=1", at), "postgres://u:p@127.0.0.1:4000/db?a=1");
/// assert_eq!(via("etcd://h1:2379,h2:2379", at), "etcd://127.0.0.1:4000");
/// assert_eq!(via("redis://127.0.0.1:16379?x=y", at), "redis://127.0.0.1:4000?x=y");
/// ```
pub fn via(uri: &str, listen: SocketAddr) -> String {
    if let Some((start, end)) = endpoint_span(uri) {
        return format!("{}{listen}{}", &uri[..start], &uri[end..]);
    }
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_owned();
    };
    let (userinfo, _, tail) = split_authority(rest);
    let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    format!("{scheme}://{userinfo}{listen}{tail}")
}

/// `uri` with the option `key=value` added to its query.
///
/// ```
/// use bakery_testkit::proxy::with_option;
/// assert_eq!(with_option("redis://h:1/0", "timeout_ms", "500"), "redis://h:1/0?timeout_ms=500");
/// assert_eq!(with_option("postgres://h/db?a=1", "timeout_ms", "500"), "postgres://h/db?a=1&timeout_ms=500");
/// assert_eq!(with_option("etcd://h:1", "timeout_ms", "5"), "etcd://h:1?timeout_ms=5");
/// ```
pub fn with_option(uri: &str, key: &str, value: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{key}={value}")
}

/// Where the server's `HOST[:PORT]` is in a URI that names it in an
/// `endpoint=http[s]://HOST[:PORT]` option rather than as its host (a
/// `dynamodb://REGION` URI: its host part is the AWS region); `None` for
/// every other URI.
///
/// ```
/// use bakery_testkit::proxy::{endpoint_span, upstream_of, via};
/// let uri = "dynamodb://k:s@us-east-1?endpoint=http://127.0.0.1:18000&timeout_ms=5";
/// let (start, end) = endpoint_span(uri).unwrap();
/// assert_eq!(&uri[start..end], "127.0.0.1:18000");
/// assert_eq!(upstream_of(uri).as_deref(), Some("127.0.0.1:18000"));
/// let at = "127.0.0.1:4000".parse().unwrap();
/// assert_eq!(via(uri, at), "dynamodb://k:s@us-east-1?endpoint=http://127.0.0.1:4000&timeout_ms=5");
/// assert_eq!(endpoint_span("dynamodb://us-east-1"), None);
/// ```
pub fn endpoint_span(uri: &str) -> Option<(usize, usize)> {
    let (scheme, _) = uri.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("dynamodb") {
        return None;
    }
    let query = uri.find('?')? + 1;
    let mut at = query;
    for option in uri[query..].split('&') {
        if let Some(value) = option.strip_prefix("endpoint=") {
            let scheme_len = value.find("://")? + 3;
            let start = at + "endpoint=".len() + scheme_len;
            let host_len = value[scheme_len..]
                .find('/')
                .unwrap_or(value.len() - scheme_len);
            return Some((start, start + host_len));
        }
        at += option.len() + 1;
    }
    None
}

/// Splits what follows `scheme://` into userinfo, hosts, and the rest (path
/// and query, with their leading `/` or `?`).
fn split_authority(rest: &str) -> (Option<&str>, &str, &str) {
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts, tail),
        None => (None, authority, tail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toxic_bodies_use_toxiproxy_units() {
        let t = Toxic::latency(Duration::from_millis(150), Duration::from_millis(40))
            .direction(Direction::Upstream)
            .toxicity(0.5);
        assert_eq!(
            t.body(),
            json!({"name": "latency_upstream", "type": "latency", "stream": "upstream",
                   "toxicity": 0.5, "attributes": {"latency": 150, "jitter": 40}})
        );
        let t = Toxic::slicer(64, 16, Duration::from_millis(2)).named("s");
        assert_eq!(
            t.body()["attributes"],
            json!({"average_size": 64, "size_variation": 16, "delay": 2000})
        );
        assert_eq!(Toxic::timeout(Duration::ZERO).body()["type"], "timeout");
        assert_eq!(Toxic::bandwidth(1).body()["attributes"], json!({"rate": 1}));
        assert_eq!(
            Toxic::slow_close(Duration::from_secs(1)).body()["attributes"],
            json!({"delay": 1000})
        );
        assert_eq!(
            Toxic::limit_data(10).body()["attributes"],
            json!({"bytes": 10})
        );
    }

    #[test]
    fn uris_keep_credentials_path_and_options() {
        let at: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(
            via("cassandra://a:b@h1:1,h2:2/ks?timeout_ms=5", at),
            "cassandra://a:b@127.0.0.1:9/ks?timeout_ms=5"
        );
        assert_eq!(
            via("mongodb://h:1/bakery", at),
            "mongodb://127.0.0.1:9/bakery"
        );
        assert_eq!(via("not a uri", at), "not a uri");
        assert_eq!(upstream_of("mongodb://h/x").as_deref(), Some("h:27017"));
        assert_eq!(upstream_of("redis://").as_deref(), None);
        assert_eq!(upstream_of("x://h/").as_deref(), None);
    }
}
