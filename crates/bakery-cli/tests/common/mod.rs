//! What the end-to-end tests of `bakery` processes on every backend share:
//! the stores they run against, how a `bakery` process is started on one,
//! and the check of snowflake ids.

use tempfile::TempDir;

/// One store to run against, and a scratch directory for files.
pub struct Target {
    pub label: &'static str,
    pub uri: String,
    pub dir: TempDir,
}

impl Target {
    /// A SQLite file in a new scratch directory.
    pub fn sqlite() -> Target {
        let dir = tempfile::tempdir().expect("temp dir");
        let uri = format!("sqlite://{}", dir.path().join("b.db").display());
        Target {
            label: "sqlite",
            uri,
            dir,
        }
    }
}

/// SQLite always; each server backend whose URI the run provides (test
/// `who` says which one is missing; under CI=true a missing one fails).
pub fn targets(who: &str) -> Vec<Target> {
    let mut all = vec![Target::sqlite()];
    for label in [
        "postgres",
        "redis",
        "etcd",
        "cassandra",
        "mongodb",
        "dynamodb",
    ] {
        let var = format!("BAKERY_{}_URI", label.to_uppercase());
        if let Some(uri) = bakery_testkit::server_uri(&var, who) {
            let dir = tempfile::tempdir().expect("temp dir");
            all.push(Target { label, uri, dir });
        }
    }
    // MySQL/MariaDB: its variable is BAKERY_MARIADB_URI, set for `bakery
    // migrate`'s tests too, so only a build with the backend uses it.
    if cfg!(feature = "mysql") {
        if let Some(uri) = bakery_testkit::server_uri("BAKERY_MARIADB_URI", who) {
            let dir = tempfile::tempdir().expect("temp dir");
            all.push(Target {
                label: "mysql",
                uri,
                dir,
            });
        }
    }
    all
}

/// A command's output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `test` on every target of [`targets`]`(who)` at once, a thread
/// each, and fails once naming each target that failed and why, first
/// lines only (so a CI log's tail shows every cause).
#[allow(dead_code)] // (not every test binary runs on every target)
pub fn on_every_target(who: &str, test: impl Fn(&Target) + Sync) {
    let targets = targets(who);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let test = &test;
        let running: Vec<_> = targets
            .iter()
            .map(|target| (target.label, scope.spawn(move || test(target))))
            .collect();
        running
            .into_iter()
            .filter_map(|(label, handle)| {
                let payload = handle.join().err()?;
                let why = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".into());
                let short: String = why.lines().take(6).collect::<Vec<_>>().join(" | ");
                Some(format!("[{label}] {short}"))
            })
            .collect()
    });
    assert!(
        failures.is_empty(),
        "failed on {} of {} targets:\n{}",
        failures.len(),
        targets.len(),
        failures.join("\n")
    );
}

/// `bakery ARGS…` on `target`, in its own process group (so a test can
/// kill what it started, its commands too), with `D` (the scratch
/// directory `d`) and `BAKERY` (the binary) for scripts; stdin closed,
/// stdout and stderr piped; no fencing token, backtrace or libfaketime
/// inherited from the test's environment.
#[allow(dead_code)] // (not every test binary starts processes this way)
pub fn bakery(target: &Target, d: &std::path::Path, args: &[&str]) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bakery"));
    cmd.env("BAKERY_URI", &target.uri)
        .env("HOME", target.dir.path())
        .env("BAKERY", env!("CARGO_BIN_EXE_bakery"))
        .env("D", d)
        .env_remove("BAKERY_FENCING_TOKEN")
        .env_remove("RUST_BACKTRACE")
        .env_remove("LD_PRELOAD")
        .env_remove("FAKETIME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .args(args);
    cmd
}

/// `check`'s value once it has one, polled every `every`; fails after
/// `patience`.
#[allow(dead_code)] // (not every test binary waits on processes)
#[track_caller]
pub fn within<T>(
    what: &str,
    patience: std::time::Duration,
    every: std::time::Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let give_up = std::time::Instant::now() + patience;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "{what}: not within {patience:?}"
        );
        std::thread::sleep(every);
    }
}

/// Waits (within `patience`) for `child` to exit and returns what it
/// printed, read while it runs (a full pipe never blocks it); kills its
/// process group and fails if it does not exit in time.
#[allow(dead_code)] // (not every test binary waits on processes)
#[track_caller]
pub fn finish(
    mut child: std::process::Child,
    what: &str,
    patience: std::time::Duration,
) -> std::process::Output {
    use std::io::Read;
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let give_up = std::time::Instant::now() + patience;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if std::time::Instant::now() >= give_up {
            let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            panic!("{what}: not done within {patience:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// The lock's stored state, from `bakery --json lock show` (bounded to a
/// minute).
#[allow(dead_code)] // (only the lock process tests read it)
#[track_caller]
pub fn lock_shown(target: &Target, d: &std::path::Path, lock: &str) -> serde_json::Value {
    let args = ["--json", "lock", "show", lock];
    let child = bakery(target, d, &args).spawn().expect("spawn bakery");
    let out = finish(
        child,
        &format!("{}: lock show", target.label),
        std::time::Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}: lock show: {}",
        target.label,
        text(&out.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("lock show json");
    shown["state"].clone()
}

/// What is wrong with snowflake ids issued by several processes (one list
/// each, in the order printed), if anything: a duplicate, a process's ids
/// not increasing, or on one worker id a process issuing at a tick another
/// had used before it (a shared worker id). `parts` splits an id into
/// (tick, worker id) for the layout used.
#[allow(dead_code)] // (only the snowflake tests issue snowflake ids)
pub fn id_problem(parts: impl Fn(u64) -> (u64, u64), per_process: &[Vec<u64>]) -> Option<String> {
    use std::collections::{BTreeMap, HashSet};
    let mut seen = HashSet::new();
    // worker -> id -> process
    let mut by_worker: BTreeMap<u64, BTreeMap<u64, usize>> = BTreeMap::new();
    for (process, ids) in per_process.iter().enumerate() {
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            return Some(format!("process {process}: {} then {}", w[0], w[1]));
        }
        for &id in ids {
            if !seen.insert(id) {
                return Some(format!("id {id} issued twice"));
            }
            let (_, worker) = parts(id);
            by_worker.entry(worker).or_default().insert(id, process);
        }
    }
    for (worker, ids) in &by_worker {
        let mut previous: Option<(u64, usize)> = None;
        for (&id, &process) in ids {
            let (tick, _) = parts(id);
            if let Some((last_tick, last_process)) = previous {
                if last_process != process && tick <= last_tick {
                    return Some(format!(
                        "worker id {worker}: process {process} issued at tick {tick} after process \
                         {last_process} used tick {last_tick}"
                    ));
                }
            }
            previous = Some((tick, process));
        }
    }
    None
}
