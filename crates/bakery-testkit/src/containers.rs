//! Server backends started in containers for a test run, from the
//! project's own images (built on this machine by `scripts/docker.sh`) or
//! from the official images of a registry.
//!
//! This module is always compiled, so a runner can call it unconditionally;
//! only the cargo feature `containers` (which brings in `testcontainers` and
//! `testcontainers-modules`) lets [`start`] actually start something.
//! Without the feature, [`docker_available`] is `false` and [`start`]
//! returns an error that says so.
//!
//! Which images: `BAKERY_CONTAINER_IMAGES=local` starts `bakery-test/NAME:local`,
//! the images `scripts/docker.sh build` makes from a debootstrap Debian and
//! Debian's packages (no registry needed; the project's machines and CI run
//! this way). Unset or `official`, the official images below are pulled
//! from their registries (for users who have one; not run on the project's
//! machines, which reach no registry).
//!
//! | backend | official image | local image | ready when (both) |
//! |---|---|---|---|
//! | `postgres` | `postgres:16` (module's log line) | `bakery-test/postgres` (PostgreSQL 15) | local: healthy, a query over TCP in database `bakery` |
//! | `redis` | `redis:7` (module's log line) | `bakery-test/redis` (Redis 7.0) | local: healthy, `PING` and AOF on |
//! | `etcd` | `quay.io/coreos/etcd:v3.5.17` | `bakery-test/etcd` (etcd 3.4) | healthy: `etcdctl endpoint health` |
//! | `mysql` | `mariadb:10.11` | `bakery-test/mariadb` (MariaDB 10.11) | healthy: user `bakery` runs a query in `bakery_src` |
//! | `mongodb` | `mongo:7` (replica set `rs0`) | `bakery-test/ferretdb` (FerretDB 1.24 over PostgreSQL, one container) | healthy: replica set primary / FerretDB and its PostgreSQL answer |
//! | `cassandra` | `cassandra:5.0` | `bakery-test/cassandra` (Cassandra 5.0 from Maven Central's jars) | healthy: CQL answers, keyspace `bakery` created |
//!
//! Each server runs as `docker/compose.yaml` runs it: PostgreSQL with
//! `wal_level=logical` and fsync on, Redis with an fsync-per-write
//! append-only file, Cassandra with `commitlog_sync: batch`, MariaDB with
//! its durable defaults (`innodb_flush_log_at_trx_commit=1`, doublewrite
//! on), MongoDB as a single-node replica set. Bakery's own durability checks
//! at open accept each. The local images carry their health check in their
//! Dockerfile (`docker/images/NAME`); [`start`] waits for it
//! (`WaitFor::healthcheck`), bounded.
//!
//! Ports are Docker's random host ports, so runs never collide. An engine
//! on a Unix socket is taken to share this machine's network (as the one
//! `scripts/docker.sh start` runs does): ports are published on 127.0.0.1
//! only and the URIs name 127.0.0.1. A remote engine (`tcp://`) publishes
//! on all its addresses and the URIs name its host. (An engine of a parent
//! host whose socket is mounted into this container: reach it by `tcp://`.)
//!
//! MongoDB (official): the module's replica-set mode (`Mongo::repl_set`)
//! fixes the set name (`rs`) and image (`mongo:5.0.6`), so a generic image
//! with the same healthcheck as `docker/compose.yaml` is used instead: the
//! set is `rs0` and majority writes work.
//!
//! Every container is started and removed by one background thread with
//! its own tokio runtime, so [`start`] can be awaited from any runtime (the
//! conformance runner builds one per trial) and a [`Started`] can be
//! dropped anywhere, inside or outside a runtime, also while a panic
//! unwinds. Drop a [`Started`] before the process exits
//! (`std::process::exit` runs no destructors): that is what removes the
//! container.
//!
//! The Docker engine is found as testcontainers finds it: `DOCKER_HOST`
//! (`unix://…`, or `tcp://…`, with TLS when `DOCKER_TLS_VERIFY=1` and
//! `DOCKER_CERT_PATH` are set; `eval "$(scripts/docker.sh start)"` sets it
//! to the project's private engine), else the first of
//! `/var/run/docker.sock`, `$XDG_RUNTIME_DIR/.docker/run/docker.sock`,
//! `~/.docker/run/docker.sock`, `~/.docker/desktop/docker.sock` that exists.
//! `TESTCONTAINERS_COMMAND=keep` keeps containers after the run.

use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The backends [`start`] knows: (backend, official image, local image).
pub const BACKENDS: &[(&str, &str, &str)] = &[
    ("postgres", "postgres:16", "bakery-test/postgres:local"),
    ("redis", "redis:7", "bakery-test/redis:local"),
    (
        "etcd",
        "quay.io/coreos/etcd:v3.5.17",
        "bakery-test/etcd:local",
    ),
    ("mysql", "mariadb:10.11", "bakery-test/mariadb:local"),
    ("mongodb", "mongo:7", "bakery-test/ferretdb:local"),
    ("cassandra", "cassandra:5.0", "bakery-test/cassandra:local"),
];

/// Which images [`start`] runs, from `BAKERY_CONTAINER_IMAGES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Images {
    /// The official images, pulled from their registries (the default).
    Official,
    /// `bakery-test/NAME:local`, built here by `scripts/docker.sh build`.
    Local,
}

impl Images {
    /// `BAKERY_CONTAINER_IMAGES`: unset, empty or `official` →
    /// [`Images::Official`]; `local` → [`Images::Local`]; anything else is
    /// an error naming the two.
    pub fn from_env() -> Result<Images, String> {
        Images::parse(std::env::var("BAKERY_CONTAINER_IMAGES").ok().as_deref())
    }

    fn parse(value: Option<&str>) -> Result<Images, String> {
        match value.map(str::trim) {
            None | Some("") | Some("official") => Ok(Images::Official),
            Some("local") => Ok(Images::Local),
            Some(other) => Err(format!(
                "BAKERY_CONTAINER_IMAGES={other:?}: use `local` (images built by \
                 scripts/docker.sh build) or `official` (pulled from a registry)"
            )),
        }
    }
}

/// How long [`docker_available`] waits for the engine to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A backend started in a container for this test run; stops the container
/// when dropped.
pub struct Started {
    /// The backend's URI in bakery's format, e.g.
    /// `postgres://postgres@127.0.0.1:32768/postgres`.
    pub uri: String,
    /// The container's id, as `docker logs` or `docker inspect` take it.
    pub container_id: String,
    _guard: imp::Guard,
}

impl fmt::Debug for Started {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Started")
            .field("uri", &self.uri)
            .field("container_id", &self.container_id)
            .finish()
    }
}

/// Whether this build can start containers (feature `containers` on) AND a
/// Docker engine answers `GET /_ping` at `DOCKER_HOST` or the default
/// socket (behind TLS: accepts a TCP connection). A cheap, blocking check,
/// bounded to about two seconds.
pub fn docker_available() -> bool {
    cfg!(feature = "containers") && probe(&Endpoint::from_env()).is_ok()
}

/// Starts `backend` (`"postgres"`, `"redis"`, `"etcd"`, `"mysql"`,
/// `"mongodb"` or `"cassandra"`) in a container of the images
/// `BAKERY_CONTAINER_IMAGES` selects ([`Images`]) and returns its URI in
/// bakery's format:
///
/// - `postgres://postgres@127.0.0.1:PORT/postgres` (local image: `/bakery`)
/// - `redis://127.0.0.1:PORT/0`
/// - `etcd://127.0.0.1:PORT`
/// - `mysql://bakery:bakery@127.0.0.1:PORT/bakery_src`
/// - `mongodb://127.0.0.1:PORT/bakery?replicaSet=rs0&directConnection=true`
///   (local image, FerretDB: `mongodb://127.0.0.1:PORT/bakery`)
/// - `cassandra://127.0.0.1:PORT/bakery`
///
/// Returns when the server accepts work (a log line or a healthcheck, see
/// the module docs). Pulling an image the first time can take minutes.
///
/// `Err(message)` when the feature is off, the backend is unknown,
/// `BAKERY_CONTAINER_IMAGES` is not understood, no Docker engine is
/// reachable, or the start fails (with a local image: also when it was not
/// built, naming `scripts/docker.sh build`).
pub async fn start(backend: &str) -> Result<Started, String> {
    let images = Images::from_env()?;
    start_with(backend, images, &Endpoint::from_env()).await
}

async fn start_with(backend: &str, images: Images, endpoint: &Endpoint) -> Result<Started, String> {
    if !cfg!(feature = "containers") {
        return Err(format!(
            "cannot start {backend} in a container: bakery-testkit was built without its \
             `containers` feature (set BAKERY_{}_URI, or build with \
             `--features bakery-testkit/containers` on a machine with a Docker engine)",
            backend.to_uppercase()
        ));
    }
    let Some(&(backend, official, local)) = BACKENDS.iter().find(|(name, ..)| *name == backend)
    else {
        let known: Vec<&str> = BACKENDS.iter().map(|(name, ..)| *name).collect();
        return Err(format!(
            "no container recipe for backend {backend:?}; known: {}",
            known.join(", ")
        ));
    };
    if let Err(why) = probe(endpoint) {
        return Err(format!(
            "cannot start {backend} in a container: Docker engine not reachable at {endpoint} \
             ({why}); set DOCKER_HOST, or set BAKERY_{}_URI to a running server",
            backend.to_uppercase()
        ));
    }
    let image = match images {
        Images::Official => official,
        Images::Local => local,
    };
    // A local engine publishes on 127.0.0.1 only; a remote one must publish
    // where this machine can reach it.
    let loopback = matches!(endpoint, Endpoint::Unix(_));
    imp::start(backend, image, images, loopback).await
}

/// Where the Docker engine should be.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Unix(PathBuf),
    /// `host:port`; `tls`: only a TCP connect is checked.
    Tcp {
        addr: String,
        tls: bool,
    },
    Unsupported(String),
}

impl Endpoint {
    /// As testcontainers resolves it (without `~/.testcontainers.properties`).
    fn from_env() -> Endpoint {
        match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.trim().is_empty() => Endpoint::parse(host.trim()),
            _ => {
                let home = std::env::var_os("HOME").map(PathBuf::from);
                let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
                let candidates = [
                    Some(PathBuf::from("/var/run/docker.sock")),
                    runtime.map(|dir| dir.join(".docker/run/docker.sock")),
                    home.as_ref().map(|dir| dir.join(".docker/run/docker.sock")),
                    home.as_ref()
                        .map(|dir| dir.join(".docker/desktop/docker.sock")),
                ];
                let found = candidates.into_iter().flatten().find(|p| p.exists());
                Endpoint::Unix(found.unwrap_or_else(|| PathBuf::from("/var/run/docker.sock")))
            }
        }
    }

    fn parse(host: &str) -> Endpoint {
        let tls_verify = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| v == "1");
        if let Some(path) = host.strip_prefix("unix://") {
            Endpoint::Unix(PathBuf::from(path))
        } else if let Some(rest) = host
            .strip_prefix("tcp://")
            .or_else(|| host.strip_prefix("http://"))
        {
            Endpoint::Tcp {
                addr: rest.trim_end_matches('/').to_string(),
                tls: tls_verify,
            }
        } else if let Some(rest) = host.strip_prefix("https://") {
            Endpoint::Tcp {
                addr: rest.trim_end_matches('/').to_string(),
                tls: true,
            }
        } else {
            Endpoint::Unsupported(host.to_string())
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp { addr, tls: false } => write!(f, "tcp://{addr}"),
            Endpoint::Tcp { addr, tls: true } => write!(f, "tcp://{addr} (TLS)"),
            Endpoint::Unsupported(host) => f.write_str(host),
        }
    }
}

/// `Ok` when a Docker engine answers at `endpoint`, within about
/// [`PROBE_TIMEOUT`].
fn probe(endpoint: &Endpoint) -> Result<(), String> {
    match endpoint {
        #[cfg(unix)]
        Endpoint::Unix(path) => {
            let stream = std::os::unix::net::UnixStream::connect(path)
                .map_err(|e| format!("connect: {e}"))?;
            stream
                .set_read_timeout(Some(PROBE_TIMEOUT))
                .and_then(|()| stream.set_write_timeout(Some(PROBE_TIMEOUT)))
                .map_err(|e| format!("socket: {e}"))?;
            ping(stream)
        }
        #[cfg(not(unix))]
        Endpoint::Unix(_) => Err("unix sockets are not supported on this platform".into()),
        Endpoint::Tcp { addr, tls } => {
            let deadline = Instant::now() + PROBE_TIMEOUT;
            let addrs = addr
                .to_socket_addrs()
                .map_err(|e| format!("resolve {addr}: {e}"))?;
            let mut last = format!("{addr} resolves to no address");
            for socket in addrs {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    last = format!("no answer within {PROBE_TIMEOUT:?}");
                    break;
                }
                match TcpStream::connect_timeout(&socket, left) {
                    // Behind TLS, a TCP connect is as far as a cheap check goes.
                    Ok(_) if *tls => return Ok(()),
                    Ok(stream) => {
                        stream
                            .set_read_timeout(Some(PROBE_TIMEOUT))
                            .and_then(|()| stream.set_write_timeout(Some(PROBE_TIMEOUT)))
                            .map_err(|e| format!("socket: {e}"))?;
                        return ping(stream);
                    }
                    Err(e) => last = format!("connect {socket}: {e}"),
                }
            }
            Err(last)
        }
        Endpoint::Unsupported(host) => Err(format!(
            "DOCKER_HOST={host} is not unix:// or tcp://, which is all this check supports"
        )),
    }
}

/// Docker's `GET /_ping`: a 200 means an engine answers.
fn ping(mut stream: impl Read + Write) -> Result<(), String> {
    stream
        .write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        .map_err(|e| format!("send /_ping: {e}"))?;
    let mut head = [0u8; 64];
    let mut len = 0;
    while len < head.len() {
        match stream.read(&mut head[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if len == 0 => return Err(format!("read /_ping: {e}")),
            Err(_) => break,
        }
        if head[..len].contains(&b'\n') {
            break;
        }
    }
    let line = String::from_utf8_lossy(&head[..len]);
    let status = line.lines().next().unwrap_or_default().trim().to_string();
    let mut parts = status.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(version), Some("200")) if version.starts_with("HTTP/") => Ok(()),
        _ => Err(format!("/_ping answered {status:?}, not HTTP 200")),
    }
}

#[cfg(not(feature = "containers"))]
mod imp {
    use super::{Images, Started};

    /// Without the feature nothing is ever started: no guard can exist.
    pub(super) type Guard = std::convert::Infallible;

    pub(super) async fn start(
        backend: &str,
        _image: &str,
        _images: Images,
        _loopback: bool,
    ) -> Result<Started, String> {
        // Unreachable in practice: `start_with` refuses first.
        Err(format!(
            "cannot start {backend}: built without the `containers` feature"
        ))
    }
}

#[cfg(feature = "containers")]
mod imp {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    use std::time::Duration;

    use testcontainers::bollard::models::PortBinding;
    use testcontainers::core::{Healthcheck, IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};
    use testcontainers_modules::postgres::Postgres;
    use testcontainers_modules::redis::Redis;
    use tokio::sync::{mpsc, oneshot};

    use super::{Images, Started};

    /// The whole start, image pull included.
    const START_BOUND: Duration = Duration::from_secs(15 * 60);
    /// How long dropping a [`Started`] waits for its container's removal.
    const STOP_WAIT: Duration = Duration::from_secs(60);

    /// Stops the container when dropped: tells its task to remove it, and
    /// waits (at most [`STOP_WAIT`]) until it has.
    pub(super) struct Guard {
        stop: Option<oneshot::Sender<()>>,
        removed: std::sync::mpsc::Receiver<()>,
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            if let Some(stop) = self.stop.take() {
                // An Err means the task is gone, and with it the container.
                let _ = stop.send(());
            }
            // Ok: removed; Err: removal failed (reported) or took too long.
            let _ = self.removed.recv_timeout(STOP_WAIT);
        }
    }

    struct Job {
        backend: &'static str,
        image: &'static str,
        images: Images,
        loopback: bool,
        reply: oneshot::Sender<Result<(String, String), String>>,
        stop: oneshot::Receiver<()>,
        removed: std::sync::mpsc::Sender<()>,
    }

    /// The background thread and runtime that own every container.
    fn worker() -> Result<&'static mpsc::UnboundedSender<Job>, String> {
        static WORKER: OnceLock<Result<mpsc::UnboundedSender<Job>, String>> = OnceLock::new();
        WORKER
            .get_or_init(|| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("bakery-containers")
                    .enable_all()
                    .build()
                    .map_err(|e| format!("tokio runtime for containers: {e}"))?;
                let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
                std::thread::Builder::new()
                    .name("bakery-containers".into())
                    .spawn(move || {
                        runtime.block_on(async move {
                            while let Some(job) = queue.recv().await {
                                tokio::spawn(run(job));
                            }
                        })
                    })
                    .map_err(|e| format!("thread for containers: {e}"))?;
                Ok(jobs)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    pub(super) async fn start(
        backend: &'static str,
        image: &'static str,
        images: Images,
        loopback: bool,
    ) -> Result<Started, String> {
        let (reply, answer) = oneshot::channel();
        let (stop_tx, stop) = oneshot::channel();
        let (removed, removed_rx) = std::sync::mpsc::channel();
        let job = Job {
            backend,
            image,
            images,
            loopback,
            reply,
            stop,
            removed,
        };
        worker()?
            .send(job)
            .map_err(|_| "the container thread has stopped".to_string())?;
        let (uri, container_id) = answer
            .await
            .map_err(|_| format!("{backend}: the container task ended without an answer"))??;
        Ok(Started {
            uri,
            container_id,
            _guard: Guard {
                stop: Some(stop_tx),
                removed: removed_rx,
            },
        })
    }

    /// One container's life, on the worker runtime: start, answer, wait for
    /// the stop, remove.
    async fn run(job: Job) {
        let Job {
            backend,
            image,
            images,
            loopback,
            reply,
            stop,
            removed,
        } = job;
        let launched = async {
            match images {
                Images::Official => launch(backend, loopback).await,
                Images::Local => launch_local(backend, image, loopback).await,
            }
        };
        let started = match tokio::time::timeout(START_BOUND, launched).await {
            Ok(started) => started,
            Err(_) => Err(format!(
                "{backend} ({image}) did not start within {START_BOUND:?} (image pull included)"
            )),
        };
        let (uri, container) = match started {
            Ok(ok) => ok,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        // If the caller gave up waiting, nobody holds a guard: remove now.
        if reply.send(Ok((uri, container.id()))).is_ok() {
            // Ok: stop asked; Err: the guard was dropped without asking.
            let _ = stop.await;
        }
        // As testcontainers' own drop: `keep` leaves the container for a
        // look (`docker logs`), `docker rm -f` by hand.
        if std::env::var("TESTCONTAINERS_COMMAND").is_ok_and(|v| v == "keep") {
            eprintln!("bakery-testkit: {backend} container kept (TESTCONTAINERS_COMMAND=keep)");
            drop(container);
            let _ = removed.send(());
            return;
        }
        match container.rm().await {
            Ok(()) => {
                let _ = removed.send(());
            }
            Err(e) => eprintln!("bakery-testkit: could not remove the {backend} container: {e}"),
        }
    }

    /// The running container, whatever its image type.
    enum Container {
        Postgres(ContainerAsync<Postgres>),
        Redis(ContainerAsync<Redis>),
        Generic(ContainerAsync<GenericImage>),
    }

    impl Container {
        fn id(&self) -> String {
            match self {
                Container::Postgres(c) => c.id().to_string(),
                Container::Redis(c) => c.id().to_string(),
                Container::Generic(c) => c.id().to_string(),
            }
        }

        async fn rm(self) -> Result<(), testcontainers::TestcontainersError> {
            match self {
                Container::Postgres(c) => c.rm().await,
                Container::Redis(c) => c.rm().await,
                Container::Generic(c) => c.rm().await,
            }
        }
    }

    /// `HOST:PORT` where the container's port `inner` is reached. With
    /// `loopback` (an engine on a Unix socket, taken to share this
    /// machine's network, as `scripts/docker.sh`'s does) the port was
    /// published on 127.0.0.1, so that is the host; testcontainers' own
    /// answer would be the bridge's gateway whenever `/.dockerenv` exists
    /// (it then assumes a sibling container of the engine's host). Else the
    /// engine's host, as testcontainers gives it.
    async fn address<I: testcontainers::Image>(
        backend: &str,
        container: &ContainerAsync<I>,
        inner: u16,
        loopback: bool,
    ) -> Result<String, String> {
        let host = if loopback {
            "127.0.0.1".to_string()
        } else {
            // `url::Host`'s Display: a name, an IPv4 address, or `[IPv6]`.
            let host = container
                .get_host()
                .await
                .map_err(|e| format!("{backend}: container host: {e}"))?
                .to_string();
            if host == "localhost" {
                "127.0.0.1".to_string()
            } else {
                host
            }
        };
        let port = container
            .get_host_port_ipv4(inner.tcp())
            .await
            .map_err(|e| format!("{backend}: host port for {inner}: {e}"))?;
        Ok(format!("{host}:{port}"))
    }

    /// Start `request`, allowing it `bound` (from the container's start to
    /// its readiness); with `loopback`, its `port` is published on
    /// 127.0.0.1 only (a random host port), not on every address.
    async fn boot<I: testcontainers::Image>(
        backend: &str,
        request: ContainerRequest<I>,
        bound: Duration,
        loopback: bool,
        port: u16,
    ) -> Result<ContainerAsync<I>, String> {
        let request = request.with_startup_timeout(bound);
        let request = if loopback {
            // Runs after testcontainers' own settings (publish all ports).
            request.with_host_config_modifier(move |host| {
                host.publish_all_ports = Some(false);
                host.port_bindings = Some(HashMap::from([(
                    format!("{port}/tcp"),
                    Some(vec![PortBinding {
                        host_ip: Some("127.0.0.1".into()),
                        // Empty: the engine picks a free port.
                        host_port: Some(String::new()),
                    }]),
                )]));
            })
        } else {
            request
        };
        request.start().await.map_err(|e| format!("{backend}: {e}"))
    }

    /// The local image `image` (`bakery-test/NAME:local`), ready once the
    /// health check in its Dockerfile passes; its URI as [`super::start`]
    /// documents.
    async fn launch_local(
        backend: &'static str,
        image: &'static str,
        loopback: bool,
    ) -> Result<(String, Container), String> {
        let (name, tag) = image.rsplit_once(':').unwrap_or((image, "latest"));
        let (port, bound) = match backend {
            "postgres" => (5432, 120),
            "redis" => (6379, 60),
            "etcd" => (2379, 60),
            "mysql" => (3306, 180),
            "mongodb" => (27017, 180),
            // A JVM: the slowest to turn healthy (docker/README.md has the times).
            "cassandra" => (9042, 420),
            other => return Err(format!("no container recipe for backend {other:?}")),
        };
        let request = GenericImage::new(name, tag)
            .with_exposed_port(port.tcp())
            .with_wait_for(WaitFor::healthcheck());
        let c = boot(
            backend,
            request.into(),
            Duration::from_secs(bound),
            loopback,
            port,
        )
        .await
        .map_err(|e| {
            format!(
                "{e} (image {image} is built on this machine, not pulled: run \
                 `scripts/docker.sh build`; a failed start's log: `docker logs`, with the \
                 container kept by TESTCONTAINERS_COMMAND=keep)"
            )
        })?;
        let at = address(backend, &c, port, loopback).await?;
        let uri = match backend {
            "postgres" => format!("postgres://postgres@{at}/bakery"),
            "redis" => format!("redis://{at}/0"),
            "etcd" => format!("etcd://{at}"),
            "mysql" => format!("mysql://bakery:bakery@{at}/bakery_src"),
            // FerretDB: no replica set; the mongodb crate recognizes it.
            "mongodb" => format!("mongodb://{at}/bakery"),
            _ => format!("cassandra://{at}/bakery"),
        };
        Ok((uri, Container::Generic(c)))
    }

    /// `name:tag` serving `port`, ready once its health check passes.
    fn healthy(name: &str, tag: &str, port: u16) -> GenericImage {
        GenericImage::new(name, tag)
            .with_exposed_port(port.tcp())
            .with_wait_for(WaitFor::healthcheck())
    }

    /// A health check running `cmd` every `interval`, each run given
    /// `timeout`, failing after `retries` failures in a row.
    fn check(cmd: &[&str], interval: Duration, timeout: Duration, retries: u32) -> Healthcheck {
        Healthcheck::cmd(cmd.iter().copied())
            .with_interval(interval)
            .with_timeout(timeout)
            .with_retries(retries)
    }

    async fn launch(backend: &'static str, loopback: bool) -> Result<(String, Container), String> {
        let secs = Duration::from_secs;
        match backend {
            "postgres" => {
                // As docker/compose.yaml: wal_level=logical, fsync on (the
                // module turns it off by default); trust auth from outside.
                let request = Postgres::default()
                    .with_host_auth()
                    .with_fsync_enabled()
                    .with_tag("16")
                    .with_cmd([
                        "postgres",
                        "-c",
                        "wal_level=logical",
                        "-c",
                        "max_connections=200",
                    ]);
                let c = boot(backend, request, secs(180), loopback, 5432).await?;
                let at = address(backend, &c, 5432, loopback).await?;
                Ok((
                    format!("postgres://postgres@{at}/postgres"),
                    Container::Postgres(c),
                ))
            }
            "redis" => {
                // Append-only file, fsync per write: acknowledged writes
                // survive a restart, as scripts/backends.sh runs it.
                let request = Redis::default().with_tag("7").with_cmd([
                    "redis-server",
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                ]);
                let c = boot(backend, request, secs(120), loopback, 6379).await?;
                let at = address(backend, &c, 6379, loopback).await?;
                Ok((format!("redis://{at}/0"), Container::Redis(c)))
            }
            "etcd" => {
                // No module: the image has no shell, so exec form only. The
                // advertised URL is inside the container; bakery's client
                // talks to the endpoint it is given and never syncs members.
                let request = healthy("quay.io/coreos/etcd", "v3.5.17", 2379)
                    .with_cmd([
                        "/usr/local/bin/etcd",
                        "--name=bakery",
                        "--data-dir=/etcd-data",
                        "--listen-client-urls=http://0.0.0.0:2379",
                        "--advertise-client-urls=http://127.0.0.1:2379",
                        "--listen-peer-urls=http://127.0.0.1:2380",
                        "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                        "--initial-cluster=bakery=http://127.0.0.1:2380",
                    ])
                    .with_health_check(check(
                        &[
                            "/usr/local/bin/etcdctl",
                            "--endpoints=http://127.0.0.1:2379",
                            "endpoint",
                            "health",
                        ],
                        secs(1),
                        secs(5),
                        60,
                    ));
                let c = boot(backend, request, secs(120), loopback, 2379).await?;
                let at = address(backend, &c, 2379, loopback).await?;
                Ok((format!("etcd://{at}"), Container::Generic(c)))
            }
            "mysql" => {
                // The image's own user and database, as BAKERY_MARIADB_URI
                // names them; its durable defaults (flush per commit,
                // doublewrite) are what bakery's check at open requires.
                let request = healthy("mariadb", "10.11", 3306)
                    .with_env_var("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1")
                    .with_env_var("MARIADB_DATABASE", "bakery_src")
                    .with_env_var("MARIADB_USER", "bakery")
                    .with_env_var("MARIADB_PASSWORD", "bakery")
                    .with_health_check(check(
                        &["healthcheck.sh", "--connect", "--innodb_initialized"],
                        secs(2),
                        secs(10),
                        60,
                    ));
                let c = boot(backend, request, secs(180), loopback, 3306).await?;
                let at = address(backend, &c, 3306, loopback).await?;
                Ok((
                    format!("mysql://bakery:bakery@{at}/bakery_src"),
                    Container::Generic(c),
                ))
            }
            "mongodb" => {
                // A single-node replica set (majority writes, transactions).
                // The healthcheck initiates it on its first run and is
                // healthy once this node is primary (docker/compose.yaml's).
                let request = healthy("mongo", "7", 27017)
                    .with_cmd(["--replSet", "rs0", "--bind_ip_all"])
                    .with_health_check(
                        check(
                            &[
                                "mongosh",
                                "--quiet",
                                "--eval",
                                "try { rs.status().ok } catch (e) { rs.initiate({_id: 'rs0', \
                                 members: [{_id: 0, host: 'localhost:27017'}]}).ok }; \
                                 quit(db.hello().isWritablePrimary ? 0 : 1)",
                            ],
                            secs(2),
                            secs(20),
                            30,
                        )
                        .with_start_period(secs(10)),
                    );
                let c = boot(backend, request, secs(180), loopback, 27017).await?;
                // directConnection: the member's own name (localhost:27017)
                // means nothing outside the container.
                let at = address(backend, &c, 27017, loopback).await?;
                Ok((
                    format!("mongodb://{at}/bakery?replicaSet=rs0&directConnection=true"),
                    Container::Generic(c),
                ))
            }
            "cassandra" => {
                // Healthy once CQL answers; the check also creates the
                // keyspace the URI names (RF 1), as docker/compose.yaml does.
                // The JVM options skip the gossip wait of a one-node ring.
                // The commit log is synced per write (`batch`): with the
                // image's periodic sync, bakery refuses a keyspace of one
                // replica (a power cut could forget acknowledged writes).
                let request = healthy("cassandra", "5.0", 9042)
                    .with_entrypoint("bash")
                    .with_cmd(["-c", super::CASSANDRA_BATCH_COMMITLOG])
                    .with_env_var("MAX_HEAP_SIZE", "512M")
                    .with_env_var("HEAP_NEWSIZE", "128M")
                    // Drivers connect to the address a node advertises, on
                    // the port they first used: advertise the host's side.
                    .with_env_var("CASSANDRA_BROADCAST_RPC_ADDRESS", "127.0.0.1")
                    .with_env_var(
                        "JVM_EXTRA_OPTS",
                        "-Dcassandra.skip_wait_for_gossip_to_settle=0 \
                         -Dcassandra.initial_token=0",
                    )
                    .with_health_check(
                        check(
                            &[
                                "cqlsh",
                                "-e",
                                "CREATE KEYSPACE IF NOT EXISTS bakery WITH replication = \
                                 {'class': 'SimpleStrategy', 'replication_factor': 1}; \
                                 DESCRIBE KEYSPACES",
                            ],
                            secs(5),
                            secs(30),
                            30,
                        )
                        .with_start_period(secs(120)),
                    );
                let c = boot(backend, request, secs(360), loopback, 9042).await?;
                let at = address(backend, &c, 9042, loopback).await?;
                Ok((format!("cassandra://{at}/bakery"), Container::Generic(c)))
            }
            other => Err(format!("no container recipe for backend {other:?}")),
        }
    }
}

/// The image's entry point, after switching its commit log to `batch`.
#[cfg_attr(not(feature = "containers"), allow(dead_code))]
const CASSANDRA_BATCH_COMMITLOG: &str =
    "sed -i -e 's/^commitlog_sync: periodic$/commitlog_sync: batch/' \
     -e '/^commitlog_sync_period:/d' /etc/cassandra/cassandra.yaml \
     && exec docker-entrypoint.sh cassandra -f";

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: Duration = Duration::from_secs(5);

    #[test]
    fn docker_host_forms_are_understood() {
        assert_eq!(
            Endpoint::parse("unix:///run/user/1000/docker.sock"),
            Endpoint::Unix("/run/user/1000/docker.sock".into())
        );
        assert!(matches!(
            Endpoint::parse("tcp://127.0.0.1:2375"),
            Endpoint::Tcp { ref addr, .. } if addr == "127.0.0.1:2375"
        ));
        assert!(matches!(
            Endpoint::parse("https://docker.example:2376/"),
            Endpoint::Tcp { ref addr, tls: true } if addr == "docker.example:2376"
        ));
        assert!(matches!(
            Endpoint::parse("ssh://me@host"),
            Endpoint::Unsupported(_)
        ));
    }

    #[test]
    fn image_choice_is_read_from_its_variable() {
        assert_eq!(Images::parse(None), Ok(Images::Official));
        assert_eq!(Images::parse(Some("")), Ok(Images::Official));
        assert_eq!(Images::parse(Some("official")), Ok(Images::Official));
        assert_eq!(Images::parse(Some(" local ")), Ok(Images::Local));
        let err = Images::parse(Some("registry.example/bakery")).expect_err("not a choice");
        assert!(err.contains("scripts/docker.sh build"), "{err}");
        // Every local image is one scripts/docker.sh builds.
        for (_, _, local) in BACKENDS {
            assert!(
                local.starts_with("bakery-test/") && local.ends_with(":local"),
                "{local}"
            );
        }
    }

    #[test]
    fn a_missing_socket_is_not_an_engine() {
        let endpoint = Endpoint::Unix("/nonexistent/bakery-testkit/docker.sock".into());
        let began = Instant::now();
        assert!(probe(&endpoint).is_err());
        assert!(began.elapsed() < QUICK, "probe took {:?}", began.elapsed());
    }

    #[test]
    fn a_non_docker_answer_is_not_an_engine() {
        let mut answer = std::io::Cursor::new(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec());
        assert!(ping(&mut answer).is_err());
    }

    /// Read/Write over a canned reply, recording what was sent.
    struct Canned(std::io::Cursor<Vec<u8>>, Vec<u8>);
    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.1.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_engine_answering_ping_is_an_engine() {
        let reply = b"HTTP/1.0 200 OK\r\nApi-Version: 1.47\r\n\r\nOK".to_vec();
        let mut stream = Canned(std::io::Cursor::new(reply), Vec::new());
        assert_eq!(ping(&mut stream), Ok(()));
        assert!(stream.1.starts_with(b"GET /_ping HTTP/1.0\r\n"));
    }

    /// A socket path no other test run uses.
    #[cfg(unix)]
    fn socket_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "bakery-testkit-{name}-{}.sock",
            uuid::Uuid::now_v7().simple()
        ))
    }

    #[cfg(unix)]
    #[test]
    fn a_fake_engine_on_a_socket_is_found() {
        use std::os::unix::net::UnixListener;
        let path = socket_path("engine");
        let listener = UnixListener::bind(&path).expect("bind a test socket");
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut request = [0u8; 128];
            let _ = conn.read(&mut request);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK");
        });
        let result = probe(&Endpoint::Unix(path.clone()));
        let _ = server.join();
        let _ = std::fs::remove_file(&path);
        assert_eq!(result, Ok(()));
    }

    #[cfg(unix)]
    #[test]
    fn a_silent_socket_is_given_up_on_in_bounded_time() {
        use std::os::unix::net::UnixListener;
        let path = socket_path("silent");
        let listener = UnixListener::bind(&path).expect("bind a test socket");
        // Accepts, then says nothing until the probe has given up.
        let server = std::thread::spawn(move || {
            let conn = listener.accept().expect("accept");
            std::thread::sleep(PROBE_TIMEOUT + Duration::from_secs(2));
            drop(conn);
        });
        let began = Instant::now();
        let result = probe(&Endpoint::Unix(path.clone()));
        let took = began.elapsed();
        let _ = std::fs::remove_file(&path);
        assert!(result.is_err(), "{result:?}");
        assert!(
            took < PROBE_TIMEOUT + Duration::from_secs(1),
            "took {took:?}"
        );
        drop(server); // detached: it only sleeps, then closes its end
    }

    #[tokio::test]
    async fn unreachable_engine_refuses_quickly_with_the_reason() {
        let endpoint = Endpoint::Unix("/nonexistent/bakery-testkit/docker.sock".into());
        let began = Instant::now();
        let err = start_with("postgres", Images::Local, &endpoint)
            .await
            .expect_err("no engine there");
        assert!(began.elapsed() < QUICK, "took {:?}", began.elapsed());
        if cfg!(feature = "containers") {
            assert!(err.contains("Docker engine not reachable"), "{err}");
            assert!(
                err.contains("/nonexistent/bakery-testkit/docker.sock"),
                "{err}"
            );
        } else {
            assert!(err.contains("without its `containers` feature"), "{err}");
        }
        assert!(err.contains("BAKERY_POSTGRES_URI"), "{err}");
    }

    #[tokio::test]
    async fn unknown_backend_is_refused() {
        let endpoint = Endpoint::Unix("/nonexistent/bakery-testkit/docker.sock".into());
        let err = start_with("oracle", Images::Official, &endpoint)
            .await
            .expect_err("no such backend");
        if cfg!(feature = "containers") {
            assert!(
                err.contains("known: postgres, redis, etcd, mysql, mongodb, cassandra"),
                "{err}"
            );
        }
    }

    /// On this machine as it is: without the feature, or without a Docker
    /// engine, `docker_available` is false and `start` fails at once saying
    /// why. With an engine and `BAKERY_CONTAINER_IMAGES=local` (as
    /// scripts/test.sh runs it), see `a_local_container_answers_and_is_gone_after_a_panic`;
    /// with official images nothing is pulled by a unit test.
    #[tokio::test]
    async fn this_machine() {
        let began = Instant::now();
        let available = docker_available();
        assert!(began.elapsed() < QUICK, "probe took {:?}", began.elapsed());
        if !cfg!(feature = "containers") {
            assert!(!available, "without the feature nothing is available");
        }
        if available {
            eprintln!("containers: a Docker engine answers here");
            return;
        }
        let began = Instant::now();
        let err = start("postgres")
            .await
            .expect_err("no engine or no feature");
        assert!(began.elapsed() < QUICK, "start took {:?}", began.elapsed());
        assert!(
            err.contains("Docker engine not reachable")
                || err.contains("without its `containers` feature"),
            "{err}"
        );
    }

    /// `host:port` of a `redis://host:port/0` URI.
    fn redis_address(uri: &str) -> String {
        uri.trim_start_matches("redis://")
            .trim_end_matches("/0")
            .to_string()
    }

    /// Whether a Redis server answers PING at `address`.
    fn pong(address: &str) -> Result<(), String> {
        let mut conn = TcpStream::connect(address).map_err(|e| format!("connect: {e}"))?;
        conn.set_read_timeout(Some(QUICK))
            .map_err(|e| format!("socket: {e}"))?;
        conn.write_all(b"PING\r\n")
            .map_err(|e| format!("send: {e}"))?;
        let mut reply = [0u8; 7];
        conn.read_exact(&mut reply)
            .map_err(|e| format!("read: {e}"))?;
        if &reply == b"+PONG\r\n" {
            Ok(())
        } else {
            Err(format!("answered {:?}", String::from_utf8_lossy(&reply)))
        }
    }

    /// The status code the engine at `endpoint` answers `GET path` with
    /// (a Unix socket or plain TCP).
    fn engine_get(endpoint: &Endpoint, path: &str) -> Result<u16, String> {
        let request = format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n");
        let mut reply = String::new();
        match endpoint {
            #[cfg(unix)]
            Endpoint::Unix(socket) => {
                let mut conn = std::os::unix::net::UnixStream::connect(socket)
                    .map_err(|e| format!("connect {}: {e}", socket.display()))?;
                conn.set_read_timeout(Some(QUICK))
                    .map_err(|e| format!("socket: {e}"))?;
                conn.write_all(request.as_bytes())
                    .and_then(|()| conn.read_to_string(&mut reply))
                    .map_err(|e| format!("GET {path}: {e}"))?;
            }
            Endpoint::Tcp { addr, tls: false } => {
                let mut conn =
                    TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
                conn.set_read_timeout(Some(QUICK))
                    .map_err(|e| format!("socket: {e}"))?;
                conn.write_all(request.as_bytes())
                    .and_then(|()| conn.read_to_string(&mut reply))
                    .map_err(|e| format!("GET {path}: {e}"))?;
            }
            other => return Err(format!("this test asks no engine at {other} (TLS?)")),
        }
        let status = reply.lines().next().unwrap_or_default();
        status
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("GET {path}: not an HTTP answer: {status:?}"))
    }

    /// With an engine and the local images: a Redis container answers on
    /// 127.0.0.1 once `start` returns (its health check passed), and after a
    /// panic in the thread that held it (its `Started` dropped while
    /// unwinding) the container is gone: the engine no longer knows it
    /// (404) and nothing answers on its port. Under `CI=true` (where
    /// scripts/test.sh sets all of that up) a missing engine or image
    /// choice FAILS it.
    #[test]
    fn a_local_container_answers_and_is_gone_after_a_panic() {
        if !cfg!(feature = "containers") {
            eprintln!("containers: built without the `containers` feature; not run");
            return;
        }
        let endpoint = Endpoint::from_env();
        if let Err(why) = probe(&endpoint) {
            assert!(
                !crate::in_ci(),
                "CI=true: no Docker engine answers at {endpoint} ({why}): run \
                 `eval \"$(scripts/docker.sh start)\"` and `scripts/docker.sh build redis` first"
            );
            eprintln!("containers: no Docker engine at {endpoint} ({why}); not run");
            return;
        }
        if Images::from_env() != Ok(Images::Local) {
            assert!(
                !crate::in_ci(),
                "CI=true: this test runs bakery-test/redis:local: set BAKERY_CONTAINER_IMAGES=local \
                 (after `scripts/docker.sh build redis`)"
            );
            eprintln!("containers: needs BAKERY_CONTAINER_IMAGES=local; not run");
            return;
        }
        let holder = std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let started = runtime
                .block_on(start("redis"))
                .expect("redis from bakery-test/redis:local");
            let address = redis_address(&started.uri);
            assert!(address.starts_with("127.0.0.1:"), "{}", started.uri);
            pong(&address).expect("PONG from the container");
            let id = &started.container_id;
            assert_eq!(
                engine_get(&Endpoint::from_env(), &format!("/containers/{id}/json")),
                Ok(200),
                "the engine does not know the running container {id}"
            );
            // Hand the container out through the panic, while `started` lives.
            std::panic::panic_any((address, started.container_id.clone()));
        });
        let payload = holder.join().expect_err("the holder panics");
        let (address, id) = payload
            .downcast_ref::<(String, String)>()
            .cloned()
            .expect("the address and container id as the panic's payload");
        assert_eq!(
            engine_get(&endpoint, &format!("/containers/{id}/json")),
            Ok(404),
            "the engine still knows container {id} after the drop"
        );
        let refused = pong(&address);
        assert!(refused.is_err(), "{address} still answers after the drop");
    }
}
