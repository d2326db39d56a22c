//! `bakery verify` as a user runs it: the real binary against the embedded
//! SQLite file and every server backend of the run (under CI=true a missing
//! one fails), and against the known non-atomic configuration — FerretDB
//! with `cas=update`, whose compare-and-set loses updates — which it must
//! reject, writing the failing history.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// `bakery --uri URI verify ARGS…` with a short run.
fn verify(uri: &str, dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .env("HOME", dir)
        .env_remove("BAKERY_URI")
        .args(["--uri", uri, "verify", "--duration", "5s"])
        .args(args)
        .output()
        .expect("run bakery")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every check passes, the compare-and-set history is linearizable, and
/// the JSON report says so with its counts.
fn passes(label: &str, uri: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = verify(uri, dir.path(), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{label}: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{label}: {e}: {}", text(&out)));
    let checks = report["checks"].as_array().expect("checks");
    let names: Vec<&str> = checks.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, bakery_verify::CHECKS, "{label}");
    for check in checks {
        assert_eq!(check["status"], "pass", "{label}: {check}");
        assert!(
            check["counts"]["ok"].as_u64().unwrap_or(0) > 0,
            "{label}: {check}"
        );
    }
    let summary = checks[0]["summary"].as_str().unwrap_or_default();
    assert!(summary.starts_with("linearizable:"), "{label}: {summary}");
    println!("{label}: {summary}");
}

#[test]
fn sqlite_verifies() {
    let dir = tempfile::tempdir().expect("temp dir");
    passes(
        "sqlite",
        &format!("sqlite://{}", dir.path().join("v.db").display()),
    );
}

#[test]
fn every_server_backend_verifies() {
    for (label, var) in [
        ("postgres", "BAKERY_POSTGRES_URI"),
        ("redis", "BAKERY_REDIS_URI"),
        ("etcd", "BAKERY_ETCD_URI"),
        ("mongodb", "BAKERY_MONGODB_URI"),
        ("cassandra", "BAKERY_CASSANDRA_URI"),
        ("mysql", "BAKERY_MARIADB_URI"),
        ("dynamodb", "BAKERY_DYNAMODB_URI"),
    ] {
        if !cfg!(feature = "all-backends") {
            assert!(
                !bakery_testkit::in_ci(),
                "CI builds the CLI with every backend (--all-features)"
            );
            println!("skipped {label}: this build has not every backend compiled in");
            continue;
        }
        if let Some(uri) = bakery_testkit::server_uri(var, "verify") {
            passes(label, &uri);
        }
    }
}

/// The negative control on a real server: FerretDB applies the `update`
/// strategy's filtered update non-atomically, and `verify` must say the
/// history is not linearizable, exit 1 and write the history.
#[test]
fn ferretdb_with_cas_update_is_rejected() {
    if !cfg!(feature = "mongodb") {
        assert!(!bakery_testkit::in_ci(), "CI builds with mongodb");
        println!("skipped: mongodb not compiled in");
        return;
    }
    let Some(uri) = bakery_testkit::server_uri("BAKERY_MONGODB_URI", "verify negative control")
    else {
        return;
    };
    let (base, query) = uri.split_once('?').unwrap_or((&uri, ""));
    let mut options: Vec<&str> = query
        .split('&')
        .filter(|o| !o.is_empty() && !o.starts_with("cas=") && !o.starts_with("collection="))
        .collect();
    options.extend([
        "cas=update",
        "allow_unproven_update=true",
        "collection=bakery_verify_update",
    ]);
    let unsafe_uri = format!("{base}?{}", options.join("&"));
    let dir = tempfile::tempdir().expect("temp dir");
    // One key and eight clients: the race the server loses. A few seeds, so
    // the control does not depend on one interleaving; any rejection counts.
    let mut outputs = Vec::new();
    for seed in ["1", "2", "3"] {
        let history = dir.path().join(format!("history-{seed}.json"));
        let history = history.to_str().expect("utf-8 temp path");
        let args = [
            "--keys",
            "1",
            "--clients",
            "8",
            "--seed",
            seed,
            "--history",
            history,
        ];
        let out = verify(&unsafe_uri, dir.path(), &args);
        let shown = text(&out);
        if out.status.code() == Some(1) {
            assert!(shown.contains("NOT linearizable"), "{shown}");
            let written = std::fs::read_to_string(history).expect("the history file");
            let calls: serde_json::Value = serde_json::from_str(&written).expect("JSON history");
            let calls = calls.as_array().expect("a list of calls");
            assert!(
                calls.len() > 100 && calls.iter().all(|c| c.get("outcome").is_some()),
                "{written:.300}"
            );
            return;
        }
        outputs.push(shown);
    }
    panic!(
        "verify passed FerretDB's non-atomic cas=update three times:\n{}",
        outputs.join("\n")
    );
}
