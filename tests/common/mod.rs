//! Helpers shared by the root integration tests.

// Each test binary uses some of them.
#![allow(dead_code)]

pub mod clients;
pub mod cluster;
pub mod cql;
pub mod etcd;
pub mod partition;
pub mod report;

use std::path::Path;
use std::process::Command;

/// Run `scripts/backends.sh ACTION NAME` (start, stop, restart, kill a
/// server the project's script manages) and panic with its stderr if it
/// fails.
pub fn backends(action: &str, name: &str) {
    script("backends.sh", &[action, name]);
}

/// Run `scripts/NAME ARGS` and panic with its stderr if it fails.
pub fn script(name: &str, args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name);
    let out = Command::new(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The URI in `var` of `server`, for a test that stops, kills or restarts
/// servers with `scripts/backends.sh`: it runs only under
/// `BAKERY_FAULT_TESTS=1` (set by `scripts/test.sh`, hence in CI), where a
/// missing URI FAILS; without it, it prints why and returns `None`.
pub fn fault_tests_uri(server: &str, var: &str) -> Option<String> {
    let on = std::env::var("BAKERY_FAULT_TESTS").is_ok_and(|v| v == "1");
    match (on, std::env::var(var)) {
        (true, Ok(uri)) if !uri.is_empty() => Some(uri),
        (true, _) => panic!(
            "BAKERY_FAULT_TESTS=1 but {var} is not set: start {server} with scripts/backends.sh"
        ),
        (false, _) => {
            eprintln!("faults: {server} left out: set BAKERY_FAULT_TESTS=1 with servers started by scripts/backends.sh (scripts/test.sh does)");
            None
        }
    }
}

/// One value from `psql` as `postgres` on the server of `uri` (its host
/// and port), giving up on a connection after 2 seconds and on a
/// statement after [`PSQL_STATEMENT_TIMEOUT_S`].
pub fn psql(uri: &str, sql: &str) -> String {
    let out = psql_output(uri, sql);
    assert!(
        out.status.success(),
        "psql {uri} -c {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// How long the server lets one of [`psql`]'s statements run (a lock or
/// a wait would otherwise hold the test): longer than the 60 s the tests
/// give `pg_promote`.
pub const PSQL_STATEMENT_TIMEOUT_S: u64 = 70;

/// `psql -c SQL` on the server of `uri`, as it ended (a partition test
/// expects some to fail).
pub fn psql_output(uri: &str, sql: &str) -> std::process::Output {
    let authority = uri
        .split_once('@')
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split(['/', '?']).next())
        .unwrap_or_else(|| panic!("no host:port in {uri}"));
    let (host, port) = authority
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("no port in {uri}"));
    Command::new("psql")
        .env("PGCONNECT_TIMEOUT", "2")
        .env(
            "PGOPTIONS",
            format!("-c statement_timeout={PSQL_STATEMENT_TIMEOUT_S}s"),
        )
        .args(["-X", "-q", "-h", host, "-p", port, "-U", "postgres"])
        .args(["-d", "postgres", "-tA", "-c", sql])
        .output()
        .expect("run psql (scripts/backends.sh installs it)")
}
