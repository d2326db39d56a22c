//! The conformance runner: every case of `bakery-testkit` against every
//! backend configured for this run.
//!
//! - MemoryStore always; SQLite always (a temp file, or `BAKERY_SQLITE_URI`).
//! - Each server backend whose `BAKERY_<NAME>_URI` is set (e.g.
//!   `BAKERY_POSTGRES_URI`). A configured backend that cannot be reached
//!   FAILS its cases; it is never skipped.
//! - `BAKERY_TEST_URIS="label=URI label2=URI2"`: extra stores, e.g. a
//!   second configuration of a backend (`redis-watch=redis://…?cas=watch`).
//! - `BAKERY_TEST_REQUIRE=postgres,redis,…` (set by `scripts/test.sh`): a
//!   required backend without a URI fails. Under `CI=true` every backend
//!   compiled into this build is required; on a developer machine a
//!   backend without a URI is left out with a printed reason.
//!
//! - With the testkit's `containers` feature and a reachable Docker engine,
//!   a compiled-in server backend without a URI that is not required (see
//!   above) is started in a container (testcontainers) for the run; a
//!   required one without a URI fails, Docker or not.
//! - `BAKERY_TEST_CONTAINERS=postgres,redis,etcd` (names as in
//!   `bakery_testkit::containers::BACKENDS`; `mariadb` and `ferretdb` are
//!   taken for `mysql` and `mongodb`): each is ALSO started in a container,
//!   beside the native server of its URI, as the target `{name}-container`
//!   (`cargo test --all-features --features bakery-testkit/containers
//!   --test conformance -- container::`: the testkit's feature is not one of
//!   this package's). Set
//!   `BAKERY_CONTAINER_IMAGES=local` for the images `scripts/docker.sh build`
//!   makes (no registry needed); `DOCKER_HOST` from
//!   `eval "$(scripts/docker.sh start)"`. A container that does not start
//!   FAILS every case of its target; it is never skipped.
//!   A container is started only when the run selects a case of its
//!   target: not for `--list`, nor for a filter that selects none.
//!
//! - Each server backend also runs
//!   `faults::unreachable_server_is_unavailable` on its URI pointed at a
//!   port where nothing listens, and every backend with a namespace option
//!   (table, collection, prefix) `namespace::eight_opens_of_a_new_namespace_at_once`.
//! - A case of several clients (`Case::many_clients`) runs twice: as
//!   `{backend}::{case}`, its clients tasks on one store handle, and as
//!   `{backend}::separate::{case}`, each client on a store of its own (a
//!   new `bakery::connect`; on `memory://` a new handle on the same rows),
//!   so no two clients share the recipes' per-process writer and listener.
//! - Besides `bakery_testkit::cases()`, each backend runs
//!   `bakery_testkit::capability_cases()` on a `Target` whose reopen is a
//!   fresh `bakery::connect` of the same URI: every capability the backend
//!   claims (PERSISTENT, SHARED, LINEARIZABLE_READS, WATCH) is verified.
//! - Every target but `memory` also runs `bakery_testkit::processes::cases()`
//!   (`{backend}::processes::…`): each client in a child process of this
//!   binary, with its own connection (`main` runs the child's role first).
//!
//! `cargo test --test conformance -- sqlite::sequence` filters as usual.

use std::sync::Arc;
use std::time::Duration;

use bakery::{MemoryStore, VersionedStore};
use bakery_testkit::{CaseFuture, Clients, Target as StoreTarget, Topology};
use libtest_mimic::{Arguments, Failed, Trial};

/// Server backends: (name, env var).
const SERVERS: &[(&str, &str)] = &[
    ("postgres", "BAKERY_POSTGRES_URI"),
    ("redis", "BAKERY_REDIS_URI"),
    ("etcd", "BAKERY_ETCD_URI"),
    ("mongodb", "BAKERY_MONGODB_URI"),
    ("cassandra", "BAKERY_CASSANDRA_URI"),
    ("mysql", "BAKERY_MARIADB_URI"),
    ("dynamodb", "BAKERY_DYNAMODB_URI"),
];

/// A hang guard, not a performance assertion: a case that runs this long
/// is stuck.
const CASE_TIMEOUT: Duration = Duration::from_secs(300);

enum Target {
    Uri(String),
    Missing(String),
    /// The backend (a `bakery_testkit::containers::BACKENDS` name), to be
    /// started in a container if the run selects a case of its target.
    Container(&'static str),
}

fn targets() -> Vec<(String, Target)> {
    let ci = bakery_testkit::in_ci();
    let required: Vec<String> = std::env::var("BAKERY_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut out = vec![("memory".to_string(), Target::Uri("memory://".into()))];
    let sqlite = std::env::var("BAKERY_SQLITE_URI").unwrap_or_else(|_| {
        let dir = std::env::temp_dir().join(format!("bakery-conformance-{}", std::process::id()));
        format!("sqlite://{}/conformance.db", dir.display())
    });
    out.push(("sqlite".into(), Target::Uri(sqlite)));
    for extra in std::env::var("BAKERY_TEST_URIS")
        .unwrap_or_default()
        .split_whitespace()
    {
        match extra.split_once('=') {
            Some((label, uri)) if !label.is_empty() && !uri.is_empty() => {
                out.push((label.to_string(), Target::Uri(uri.to_string())))
            }
            _ => out.push((
                format!("BAKERY_TEST_URIS[{extra}]"),
                Target::Missing(format!("{extra:?} is not label=URI")),
            )),
        }
    }
    let compiled_schemes = bakery::schemes();
    let docker = bakery_testkit::containers::docker_available();
    for (name, var) in SERVERS {
        let compiled = &compiled_schemes.contains(name);
        match std::env::var(var) {
            // The MariaDB server also serves bakery-migrate's tests, so its
            // URI is set in builds without the `mysql` feature too.
            Ok(_)
                if !*compiled
                    && *var == "BAKERY_MARIADB_URI"
                    && !required.iter().any(|r| r == name || r == "all") =>
            {
                eprintln!("conformance: {name} left out: not compiled in (feature `{name}`)")
            }
            Ok(uri) if !uri.is_empty() => out.push((name.to_string(), Target::Uri(uri))),
            // A required backend without its URI fails, even with a Docker
            // engine at hand: a container must not stand in for a server the
            // run was told to test (a lost BAKERY_<NAME>_URI).
            _ if required.iter().any(|r| r == name || r == "all") || (ci && *compiled) => {
                out.push((
                    name.to_string(),
                    Target::Missing(format!(
                    "{var} is not set but {name} is required (CI=true or BAKERY_TEST_REQUIRE); \
                     start it with `scripts/backends.sh start {name}` (a Docker engine \
                     does not stand in for a required backend)"
                )),
                ))
            }
            _ if *compiled && docker => out.push((name.to_string(), Target::Container(name))),
            _ if *compiled => {
                eprintln!("conformance: {name} left out: {var} is not set (a developer run; CI fails instead)")
            }
            _ => {}
        }
    }
    for name in std::env::var("BAKERY_TEST_CONTAINERS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let backend = match name {
            "mariadb" => "mysql",
            "ferretdb" => "mongodb",
            other => other,
        };
        let label = format!("{name}-container");
        let Some(backend) = compiled_schemes.iter().copied().find(|s| *s == backend) else {
            out.push((
                label,
                Target::Missing(format!(
                    "BAKERY_TEST_CONTAINERS names {name}, but {backend} is no backend \
                     compiled into this build (its cargo feature off, or a typo?)"
                )),
            ));
            continue;
        };
        out.push((label, Target::Container(backend)));
    }
    out
}

/// Start `backend` in a container; the guard stays in `started` until the
/// run ends.
fn in_container(backend: &str, started: &mut Vec<bakery_testkit::containers::Started>) -> Target {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return Target::Missing(format!("tokio runtime: {e}")),
    };
    match runtime.block_on(bakery_testkit::containers::start(backend)) {
        Ok(container) => {
            let uri = container.uri.clone();
            started.push(container);
            Target::Uri(uri)
        }
        Err(why) => Target::Missing(why),
    }
}

fn main() {
    // A child of a `processes::` case: run its role and exit.
    if let Some(code) =
        bakery_testkit::processes::child_main(|uri| async move { bakery::connect(&uri).await })
    {
        std::process::exit(code);
    }
    let args = Arguments::from_args();
    let mut started = Vec::new();
    let mut trials = Vec::new();
    for (label, target) in targets() {
        let target = match target {
            Target::Container(backend) if selects(&args, &label) => {
                in_container(backend, &mut started)
            }
            // Listed, or filtered out: no container is started for it.
            Target::Container(backend) => Target::Missing(format!(
                "{backend}: its container was not started (no case of {label} selected)"
            )),
            target => target,
        };
        trials.extend(trials_of(&label, &target));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    // `exit()` skips destructors: remove the containers first.
    drop(started);
    conclusion.exit();
}

/// Whether the run (not `--list`) selects a case of the target `label`:
/// its trials, and the two only a target with a URI has, against the
/// filter and `--skip`s as libtest-mimic applies them.
fn selects(args: &Arguments, label: &str) -> bool {
    if args.list {
        return false;
    }
    let placeholder = Target::Missing(String::new());
    let with_uri = [
        "faults::unreachable_server_is_unavailable",
        "namespace::eight_opens_of_a_new_namespace_at_once",
    ]
    .map(|case| Trial::test(format!("{label}::{case}"), || Ok(())).with_kind(label));
    trials_of(label, &placeholder)
        .iter()
        .chain(&with_uri)
        .any(|trial| !args.is_filtered_out(trial))
}

/// Every trial of the target `backend`.
fn trials_of(backend: &str, target: &Target) -> Vec<Trial> {
    let mut trials = Vec::new();
    // A case of several clients runs in each topology; the shared one
    // keeps the plain name.
    let store_cases = bakery_testkit::cases().into_iter().flat_map(|case| {
        let topologies: &[Topology] = if case.many_clients {
            &Topology::ALL
        } else {
            &[Topology::Shared]
        };
        topologies.iter().map(move |&topology| {
            let name = match topology {
                Topology::Shared => case.name.to_string(),
                Topology::Separate => format!("separate::{}", case.name),
            };
            (name, Run::Store(case.run, topology))
        })
    });
    let target_cases = bakery_testkit::capability_cases()
        .into_iter()
        .map(|case| (case.name.to_string(), Run::Target(case.run)));
    for (case, run) in store_cases.chain(target_cases) {
        let name = format!("{backend}::{case}");
        let trial = match target {
            Target::Uri(uri) => {
                let uri = uri.clone();
                Trial::test(name, move || run_case(&uri, run))
            }
            Target::Missing(_) | Target::Container(_) => {
                let why = target_uri(target);
                Trial::test(name, move || why.map(drop))
            }
        };
        trials.push(trial.with_kind(backend));
    }
    // Every server backend: a refused connection is Unavailable.
    if let Target::Uri(uri) = target {
        if !(uri.starts_with("memory:") || uri.starts_with("sqlite:")) {
            let unreachable = bakery_testkit::faults::unreachable_uri(uri);
            let name = format!("{backend}::faults::unreachable_server_is_unavailable");
            trials
                .push(Trial::test(name, move || unreachable_case(&unreachable)).with_kind(backend));
        }
        if let Some(option) = namespace_option(uri) {
            let name = format!("{backend}::namespace::eight_opens_of_a_new_namespace_at_once");
            let uri = uri.clone();
            trials.push(
                Trial::test(name, move || new_namespace_case(&uri, option)).with_kind(backend),
            );
        }
    }
    trials.extend(process_trials(backend, target));
    trials
}

/// The `Processes` topology on every target but `memory` (a MemoryStore
/// lives in one process): each case's clients in separate OS processes,
/// children of this binary; on SQLite also the negative control that
/// must catch clients that skip the lock.
fn process_trials(backend: &str, target: &Target) -> Vec<Trial> {
    if backend == "memory" {
        return Vec::new();
    }
    let mut trials: Vec<Trial> = bakery_testkit::processes::cases()
        .into_iter()
        .map(|case| {
            let name = format!("{backend}::processes::{}", case.name);
            let (backend, target) = (backend.to_string(), target_uri(target));
            Trial::test(name, move || {
                let uri = target?;
                (case.run)(&backend, &uri).map_err(Failed::from)
            })
        })
        .collect();
    if backend == "sqlite" {
        let target = target_uri(target);
        trials.push(Trial::test(
            "processes::unlocked_clients_are_caught",
            move || {
                let uri = target?;
                bakery_testkit::processes::unlocked_clients_are_caught(&uri).map_err(Failed::from)
            },
        ));
    }
    trials
        .into_iter()
        .map(|trial| trial.with_kind(backend))
        .collect()
}

/// The URI of a target, or why it has none (the case then fails).
fn target_uri(target: &Target) -> Result<String, Failed> {
    match target {
        Target::Uri(uri) => Ok(uri.clone()),
        Target::Missing(why) => Err(Failed::from(why.clone())),
        Target::Container(backend) => Err(Failed::from(format!(
            "{backend}: its container was never started (a bug of this runner)"
        ))),
    }
}

/// A case of either kind: with its clients in a topology, or on a target
/// it can reopen.
#[derive(Clone, Copy)]
enum Run {
    Store(fn(Clients) -> CaseFuture, Topology),
    Target(fn(StoreTarget) -> CaseFuture),
}

fn run_case(uri: &str, run: Run) -> Result<(), Failed> {
    let uri = uri.to_string();
    on_runtime(async move {
        match run {
            Run::Store(run, topology) => run(clients(&uri, topology).await).await,
            Run::Target(run) => run(target(&uri).await).await,
        }
    })
}

fn connect_failed(uri: &str, e: bakery::Error) -> ! {
    panic!("cannot connect to {}: {e}", bakery::redact(uri))
}

/// A target whose every open is a new `bakery::connect`: a new connection
/// to the same server or file, and for `memory://` a new, empty store.
async fn target(uri: &str) -> StoreTarget {
    let open_uri = uri.to_string();
    StoreTarget::connect(move || {
        let uri = open_uri.clone();
        async move { bakery::connect(&uri).await }
    })
    .await
    .unwrap_or_else(|e| connect_failed(uri, e))
}

/// The clients of a case on `uri`. Separate clients each `bakery::connect`
/// on their own (a new connection each); on `memory://`, where a connect
/// is a new empty store, each is a new handle on the first store's rows.
async fn clients(uri: &str, topology: Topology) -> Clients {
    if uri.starts_with("memory:") {
        let memory = MemoryStore::new();
        let store: Arc<dyn VersionedStore> = Arc::new(memory.handle());
        return match topology {
            Topology::Shared => Clients::shared(store),
            Topology::Separate => Clients::separate(store, move || {
                let handle = memory.handle();
                async move { Ok(Arc::new(handle) as Arc<dyn VersionedStore>) }
            }),
        };
    }
    let store = bakery::connect(uri)
        .await
        .unwrap_or_else(|e| connect_failed(uri, e));
    match topology {
        Topology::Shared => Clients::shared(store),
        Topology::Separate => {
            let uri = uri.to_string();
            Clients::separate(store, move || {
                let uri = uri.clone();
                async move { bakery::connect(&uri).await }
            })
        }
    }
}

/// Run one case on its own runtime, as a task: a panic is the case's
/// failure, and a case that runs past [`CASE_TIMEOUT`] is stuck.
fn on_runtime(case: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(async move {
        match tokio::time::timeout(CASE_TIMEOUT, tokio::spawn(case)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(join)) => Err(Failed::from(panic_message(join))),
            Err(_) => Err(Failed::from(format!("hung for {CASE_TIMEOUT:?}"))),
        }
    })
}

/// The URI option naming a backend's namespace, and how a fresh one
/// ends: a table (SQLite, PostgreSQL, Cassandra), a collection (MongoDB)
/// or a key prefix (Redis `…:`, etcd `…/`).
fn namespace_option(uri: &str) -> Option<(&'static str, &'static str)> {
    let scheme = uri.split_once(':').map_or(uri, |(scheme, _)| scheme);
    match scheme {
        "sqlite" | "postgres" | "postgresql" | "cassandra" => Some(("table", "")),
        "mongodb" | "mongodb+srv" => Some(("collection", "")),
        "mysql" | "mariadb" => Some(("table", "")),
        "redis" | "rediss" => Some(("prefix", ":")),
        "etcd" => Some(("prefix", "/")),
        "dynamodb" => Some(("table", "")),
        _ => None,
    }
}

fn new_namespace_case(uri: &str, (option, end): (&str, &str)) -> Result<(), Failed> {
    let separator = if uri.contains('?') { '&' } else { '?' };
    let fresh = bakery_testkit::unique_ident("bk_ns");
    let uri = format!("{uri}{separator}{option}={fresh}{end}");
    on_runtime(
        bakery_testkit::namespace::eight_opens_of_a_new_namespace_at_once(move || {
            let uri = uri.clone();
            async move { bakery::connect(&uri).await }
        }),
    )
}

/// The hang guard of each call to an unreachable server.
const UNREACHABLE_LIMIT: Duration = Duration::from_secs(60);

fn unreachable_case(uri: &str) -> Result<(), Failed> {
    let uri = uri.to_string();
    on_runtime(async move {
        bakery_testkit::faults::unreachable_server_is_unavailable(
            &uri,
            UNREACHABLE_LIMIT,
            |uri| async move { bakery::connect(&uri).await },
        )
        .await
    })
}

fn panic_message(err: tokio::task::JoinError) -> String {
    match err.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "case panicked".into()),
        Err(e) => format!("case task failed: {e}"),
    }
}
