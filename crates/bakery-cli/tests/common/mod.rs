//! What the end-to-end tests of `bakery` processes on every backend share:
//! the stores they run against.

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
