//! Server backends started in containers for a test run, for machines with
//! a Docker engine and no `BAKERY_<NAME>_URI` set.
//!
//! This module is always compiled, so a runner can call it unconditionally;
//! only the cargo feature `containers` (which brings in `testcontainers` and
//! `testcontainers-modules`) lets [`start`] actually start something.
//! Without the feature, [`docker_available`] is `false` and [`start`]
//! returns an error that says so.
//!
//! | backend | image | module | ready when |
//! |---|---|---|---|
//! | `postgres` | `postgres:16` | `testcontainers_modules::postgres` | "database system is ready to accept connections" (the module's log condition) |
//! | `redis` | `redis:7` | `testcontainers_modules::redis` | "Ready to accept connections" (the module's log condition) |
//! | `etcd` | `quay.io/coreos/etcd:v3.5.17` | `GenericImage` (no module) | healthy: `etcdctl endpoint health` |
//! | `mongodb` | `mongo:7` | `GenericImage` (see below) | healthy: replica set `rs0` initiated and this node primary |
//! | `cassandra` | `cassandra:5.0` | `GenericImage` (no module in 0.15) | healthy: `cqlsh` answers and keyspace `bakery` exists |
//!
//! Each server runs as `docker/compose.yaml` runs it (PostgreSQL with
//! `wal_level=logical` and fsync on, Redis with an fsync-per-write
//! append-only file, MongoDB as a single-node replica set). Ports are
//! Docker's random host ports, so runs never collide.
//!
//! MongoDB: the module's replica-set mode (`Mongo::repl_set`) fixes the set
//! name (`rs`) and image (`mongo:5.0.6`), so a generic image with the same
//! healthcheck as `docker/compose.yaml` is used instead: the set is `rs0`
//! and majority writes work.
//!
//! Every container is started and removed by one background thread with
//! its own tokio runtime, so [`start`] can be awaited from any runtime (the
//! conformance runner builds one per trial) and a [`Started`] can be
//! dropped anywhere, inside or outside a runtime. Drop a [`Started`] before
//! the process exits (`std::process::exit` runs no destructors): that is
//! what removes the container.
//!
//! The Docker engine is found as testcontainers finds it: `DOCKER_HOST`
//! (`unix://…`, or `tcp://…`, with TLS when `DOCKER_TLS_VERIFY=1` and
//! `DOCKER_CERT_PATH` are set), else the first of
//! `/var/run/docker.sock`, `$XDG_RUNTIME_DIR/.docker/run/docker.sock`,
//! `~/.docker/run/docker.sock`, `~/.docker/desktop/docker.sock` that exists.
//! `TESTCONTAINERS_COMMAND=keep` keeps containers after the run.

use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The backends [`start`] knows, with the image each runs.
pub const BACKENDS: &[(&str, &str)] = &[
    ("postgres", "postgres:16"),
    ("redis", "redis:7"),
    ("etcd", "quay.io/coreos/etcd:v3.5.17"),
    ("mongodb", "mongo:7"),
    ("cassandra", "cassandra:5.0"),
];

/// How long [`docker_available`] waits for the engine to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A backend started in a container for this test run; stops the container
/// when dropped.
pub struct Started {
    /// The backend's URI in bakery's format, e.g.
    /// `postgres://postgres@127.0.0.1:32768/postgres`.
    pub uri: String,
    _guard: imp::Guard,
}

impl fmt::Debug for Started {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Started").field("uri", &self.uri).finish()
    }
}

/// Whether this build can start containers (feature `containers` on) AND a
/// Docker engine answers `GET /_ping` at `DOCKER_HOST` or the default
/// socket (behind TLS: accepts a TCP connection). A cheap, blocking check,
/// bounded to about two seconds.
pub fn docker_available() -> bool {
    cfg!(feature = "containers") && probe(&Endpoint::from_env()).is_ok()
}

/// Starts `backend` (`"postgres"`, `"redis"`, `"etcd"`, `"mongodb"` or
/// `"cassandra"`) in a container and returns its URI in bakery's format:
///
/// - `postgres://postgres@127.0.0.1:PORT/postgres`
/// - `redis://127.0.0.1:PORT/0`
/// - `etcd://127.0.0.1:PORT`
/// - `mongodb://127.0.0.1:PORT/bakery?replicaSet=rs0&directConnection=true`
/// - `cassandra://127.0.0.1:PORT/bakery`
///
/// Returns when the server accepts work (a log line or a healthcheck, see
/// the module docs). Pulling an image the first time can take minutes.
///
/// `Err(message)` when the feature is off, the backend is unknown, no
/// Docker engine is reachable, or the start fails.
pub async fn start(backend: &str) -> Result<Started, String> {
    start_with(backend, &Endpoint::from_env()).await
}

async fn start_with(backend: &str, endpoint: &Endpoint) -> Result<Started, String> {
    if !cfg!(feature = "containers") {
        return Err(format!(
            "cannot start {backend} in a container: bakery-testkit was built without its \
             `containers` feature (set BAKERY_{}_URI, or build with \
             `--features bakery-testkit/containers` on a machine with a Docker engine)",
            backend.to_uppercase()
        ));
    }
    let Some(&(backend, image)) = BACKENDS.iter().find(|(name, _)| *name == backend) else {
        let known: Vec<&str> = BACKENDS.iter().map(|(name, _)| *name).collect();
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
    imp::start(backend, image).await
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
    use super::Started;

    /// Without the feature nothing is ever started: no guard can exist.
    pub(super) type Guard = std::convert::Infallible;

    pub(super) async fn start(backend: &str, _image: &str) -> Result<Started, String> {
        // Unreachable in practice: `start_with` refuses first.
        Err(format!(
            "cannot start {backend}: built without the `containers` feature"
        ))
    }
}

#[cfg(feature = "containers")]
mod imp {
    use std::sync::OnceLock;
    use std::time::Duration;

    use testcontainers::core::{Healthcheck, IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};
    use testcontainers_modules::postgres::Postgres;
    use testcontainers_modules::redis::Redis;
    use tokio::sync::{mpsc, oneshot};

    use super::Started;

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
        reply: oneshot::Sender<Result<String, String>>,
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
    ) -> Result<Started, String> {
        let (reply, answer) = oneshot::channel();
        let (stop_tx, stop) = oneshot::channel();
        let (removed, removed_rx) = std::sync::mpsc::channel();
        let job = Job {
            backend,
            image,
            reply,
            stop,
            removed,
        };
        worker()?
            .send(job)
            .map_err(|_| "the container thread has stopped".to_string())?;
        let uri = answer
            .await
            .map_err(|_| format!("{backend}: the container task ended without an answer"))??;
        Ok(Started {
            uri,
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
            reply,
            stop,
            removed,
        } = job;
        let started = match tokio::time::timeout(START_BOUND, launch(backend)).await {
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
        if reply.send(Ok(uri)).is_ok() {
            // Ok: stop asked; Err: the guard was dropped without asking.
            let _ = stop.await;
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
        async fn rm(self) -> Result<(), testcontainers::TestcontainersError> {
            match self {
                Container::Postgres(c) => c.rm().await,
                Container::Redis(c) => c.rm().await,
                Container::Generic(c) => c.rm().await,
            }
        }
    }

    /// `HOST:PORT` where the container's port `inner` is reached: the host
    /// `127.0.0.1` for a local engine (the IPv4 port is the one asked for),
    /// the engine's host for a remote one.
    async fn address<I: testcontainers::Image>(
        backend: &str,
        container: &ContainerAsync<I>,
        inner: u16,
    ) -> Result<String, String> {
        let host = container
            .get_host()
            .await
            .map_err(|e| format!("{backend}: container host: {e}"))?;
        // `url::Host`'s Display: a name, an IPv4 address, or `[IPv6]`.
        let host = host.to_string();
        let host = if host == "localhost" {
            "127.0.0.1".to_string()
        } else {
            host
        };
        let port = container
            .get_host_port_ipv4(inner.tcp())
            .await
            .map_err(|e| format!("{backend}: host port for {inner}: {e}"))?;
        Ok(format!("{host}:{port}"))
    }

    /// Start `request`, allowing it `bound` (from the container's start to
    /// its readiness).
    async fn boot<I: testcontainers::Image>(
        backend: &str,
        request: ContainerRequest<I>,
        bound: Duration,
    ) -> Result<ContainerAsync<I>, String> {
        request
            .with_startup_timeout(bound)
            .start()
            .await
            .map_err(|e| format!("{backend}: {e}"))
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

    async fn launch(backend: &'static str) -> Result<(String, Container), String> {
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
                let c = boot(backend, request, secs(180)).await?;
                let at = address(backend, &c, 5432).await?;
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
                let c = boot(backend, request, secs(120)).await?;
                let at = address(backend, &c, 6379).await?;
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
                let c = boot(backend, request, secs(120)).await?;
                let at = address(backend, &c, 2379).await?;
                Ok((format!("etcd://{at}"), Container::Generic(c)))
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
                let c = boot(backend, request, secs(180)).await?;
                // directConnection: the member's own name (localhost:27017)
                // means nothing outside the container.
                let at = address(backend, &c, 27017).await?;
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
                let c = boot(backend, request, secs(360)).await?;
                let at = address(backend, &c, 9042).await?;
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
        let err = start_with("postgres", &endpoint)
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
        let err = start_with("oracle", &endpoint)
            .await
            .expect_err("no such backend");
        if cfg!(feature = "containers") {
            assert!(
                err.contains("known: postgres, redis, etcd, mongodb, cassandra"),
                "{err}"
            );
        }
    }

    /// On this machine as it is: without the feature, or without a Docker
    /// engine (the project's machines have none), `docker_available` is
    /// false and `start` fails at once saying why. With an engine it says
    /// so and checks only that the probe is quick: starting containers is
    /// the conformance runner's job, not a unit test's.
    #[tokio::test]
    async fn this_machine() {
        let began = Instant::now();
        let available = docker_available();
        assert!(began.elapsed() < QUICK, "probe took {:?}", began.elapsed());
        if !cfg!(feature = "containers") {
            assert!(!available, "without the feature nothing is available");
        }
        if available {
            eprintln!(
                "containers: a Docker engine answers here; start() not exercised by unit tests"
            );
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
}
