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
