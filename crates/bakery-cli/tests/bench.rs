//! End-to-end tests of `bakery bench`, running the built binary.
//!
//! Speed is never asserted (it depends on the machine): these tests check
//! that every cell ran, without errors, and that every output is there and
//! well formed. Each run uses a temporary HOME and no BAKERY_URI.
#![cfg(feature = "bench")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// `bakery` with a clean environment: HOME and XDG_DATA_HOME in `home`.
fn bakery(home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("BAKERY_URI")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .stdin(Stdio::null());
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run bakery")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `bakery ARGS…` with `home`, which must exit with `code`.
fn exits(home: &Path, args: &[&str], code: i32) -> Output {
    let out = run(bakery(home).args(args));
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
    out
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "bakery failed with {:?}\nstdout: {}\nstderr: {}",
        out.status,
        stdout(out),
        stderr(out)
    );
    for bad in ["panicked", "internal error"] {
        assert!(!stderr(out).contains(bad), "stderr: {}", stderr(out));
    }
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(out)))
}

fn results(report: &Value) -> &Vec<Value> {
    report["results"].as_array().expect("results is an array")
}

/// The cell of `workload`/`target`/`variant` at `clients`.
fn cell<'a>(
    report: &'a Value,
    workload: &str,
    target: &str,
    variant: &str,
    clients: u64,
) -> &'a Value {
    results(report)
        .iter()
        .find(|r| {
            r["workload"] == workload
                && r["target"] == target
                && r["variant"] == variant
                && r["clients"] == clients
        })
        .unwrap_or_else(|| panic!("no cell {workload}/{target}/{variant}/{clients}: {report:#}"))
}

/// A cell that ran: operations, latencies and round trips, and no error.
fn assert_clean_cell(cell: &Value) {
    assert!(cell["ops"].as_u64().unwrap_or(0) > 0, "{cell:#}");
    assert!(
        cell["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
        "{cell:#}"
    );
    assert_eq!(cell["errors"], 0, "{cell:#}");
    assert!(cell["first_error"].is_null(), "{cell:#}");
    let latency = &cell["latency"];
    let p50 = latency["p50_ns"].as_u64().unwrap_or(0);
    let p999 = latency["p999_ns"].as_u64().unwrap_or(0);
    assert!(p50 > 0 && p999 >= p50, "{cell:#}");
    assert!(cell["round_trips"].as_u64().unwrap_or(0) > 0, "{cell:#}");
    assert!(
        cell["round_trips_per_op"].as_f64().unwrap_or(0.0) > 0.0,
        "{cell:#}"
    );
    assert!(cell["conflicts_per_op"].as_f64().is_some(), "{cell:#}");
    assert!(
        !cell["distribution"].as_array().is_none_or(Vec::is_empty),
        "{cell:#}"
    );
}

fn assert_non_empty_file(path: &Path) -> String {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(!text.trim().is_empty(), "{} is empty", path.display());
    text
}

#[test]
fn default_run_prints_tables_and_writes_every_output() {
    let home = TempDir::new().expect("temp dir");
    let out_dir = home.path().join("out");
    let out = run(bakery(home.path())
        .args(["bench", "--duration", "200ms", "--clients", "1,2", "--out"])
        .arg(&out_dir));
    assert_ok(&out);

    // A table per workload, on the two default stores.
    let text = stdout(&out);
    for expected in [
        "cas: read-modify-write",
        "sequence: next()",
        "memory://",
        "sqlite://",
        "Sequence::next()",
        "put_if_version, shared key",
        "p999",
        "round trips/op",
        "targets (measured, never asserted)",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }

    // The JSON holds every cell, each with operations and no error.
    let report: Value = serde_json::from_str(&assert_non_empty_file(&out_dir.join("results.json")))
        .expect("results.json is JSON");
    assert_eq!(report["schema"], "bakery-bench/1");
    assert_eq!(report["settings"]["clients"], serde_json::json!([1, 2]));
    assert_eq!(report["settings"]["duration_ms"], 200);
    assert_eq!(report["settings"]["block_size"], 1000);
    assert!(report["machine"]["logical_cpus"].as_u64().unwrap_or(0) >= 1);
    assert!(report["command"]
        .as_str()
        .is_some_and(|c| c.starts_with("bakery bench")));
    let targets: Vec<&str> = report["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter_map(|t| t["label"].as_str())
        .collect();
    assert_eq!(targets, ["memory", "sqlite"]);
    for target in ["memory", "sqlite"] {
        for clients in [1, 2] {
            for variant in ["shared-key", "own-key", "own-key-4k"] {
                assert_clean_cell(cell(&report, "cas", target, variant, clients));
            }
            assert_clean_cell(cell(&report, "sequence", target, "nodes", clients));
            let seq = cell(&report, "sequence", target, "next", clients);
            assert_clean_cell(seq);
            assert!(
                seq["extras"]["reservations"].as_u64().unwrap_or(0) > 0,
                "{seq:#}"
            );
        }
    }
    // Exactly these cells for cas and sequence (other workloads, such as
    // lock, have their own tests).
    let ours = results(&report)
        .iter()
        .filter(|r| r["workload"] == "cas" || r["workload"] == "sequence")
        .count();
    // 2 stores × 2 client counts × (3 cas variants + 2 sequence variants).
    assert_eq!(ours, 2 * 2 * 5);
    let checks = report["checks"].as_array().expect("checks");
    let check = |id: &str| {
        checks
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no check {id}: {checks:#?}"))
    };
    assert_eq!(check("sequence-vs-nextval")["status"], "not_measured");
    let tail = check("sequence-tail")["status"]
        .as_str()
        .unwrap_or_default();
    assert!(["met", "not_met"].contains(&tail), "{tail}");
    assert_eq!(check("put-if-version-overhead")["status"], "see_criterion");

    // The SVG charts and the Markdown report.
    for workload in ["cas", "sequence"] {
        for kind in ["throughput", "latency"] {
            let svg = assert_non_empty_file(&out_dir.join(format!("{kind}-{workload}.svg")));
            assert!(
                svg.contains("<svg") && svg.contains("</svg>"),
                "{kind}-{workload}"
            );
        }
    }
    let markdown = assert_non_empty_file(&out_dir.join("report.md"));
    for expected in [
        "# bakery benchmarks",
        "do not edit by hand",
        "bakery bench --duration 200ms --clients 1,2 --out",
        "## Machine",
        "## Stores and server versions",
        "## Settings",
        "### cas",
        "### sequence",
        "## Targets",
        "| memory | Sequence::next() | 1 |",
    ] {
        assert!(markdown.contains(expected), "no {expected:?} in report.md");
    }

    // The default SQLite file was temporary, and the user's store untouched.
    let sqlite_uri = report["targets"][1]["uri"].as_str().expect("sqlite URI");
    let sqlite_file = PathBuf::from(sqlite_uri.trim_start_matches("sqlite://"));
    assert!(
        !sqlite_file.exists(),
        "{} was left behind",
        sqlite_file.display()
    );
    assert!(!home.path().join("data").join("bakery").exists());
}

#[test]
fn json_flag_prints_the_report_on_stdout() {
    let home = TempDir::new().expect("temp dir");
    let out = run(bakery(home.path()).args([
        "bench",
        "--json",
        "--workload",
        "sequence",
        "--clients",
        "3",
        "--duration",
        "50ms",
        "--block-size",
        "10",
    ]));
    assert_ok(&out);
    let report = json(&out);
    assert_eq!(
        report["settings"]["workloads"],
        serde_json::json!(["sequence"])
    );
    assert_eq!(report["settings"]["block_size"], 10);
    for target in ["memory", "sqlite"] {
        let seq = cell(&report, "sequence", target, "next", 3);
        assert_clean_cell(seq);
        assert_eq!(seq["implementation"], "bakery");
    }
    assert!(results(&report).iter().all(|r| r["workload"] == "sequence"));
}

#[test]
fn rounds_run_every_cell_again_and_keep_each_round_s_rate() {
    let home = TempDir::new().expect("temp dir");
    let out = run(bakery(home.path())
        .args(["--uri", "memory://"])
        .args(ONE_SHORT_CAS)
        .args(["--rounds", "3"]));
    assert_ok(&out);
    let report = json(&out);
    assert_eq!(report["settings"]["rounds"], 3);
    for variant in ["shared-key", "own-key", "own-key-4k"] {
        let cas = cell(&report, "cas", "memory", variant, 1);
        assert_clean_cell(cas);
        let rates = cas["rounds_ops_per_sec"].as_array().expect("rates");
        assert_eq!(rates.len(), 3, "{cas}");
        // The cell shows its median round.
        let mut sorted: Vec<f64> = rates.iter().filter_map(Value::as_f64).collect();
        sorted.sort_by(f64::total_cmp);
        let shown = cas["ops_per_sec"].as_f64().expect("rate");
        assert!((shown - sorted[1]).abs() <= 1e-6 * shown, "{cas}");
    }
    assert_eq!(results(&report).len(), 3, "one row per cell, not per round");
}

/// `bakery bench --json` of one `workload`, with `clients` (a list) and
/// `duration`; more arguments can follow.
fn bench_json(home: &Path, workload: &str, clients: &str, duration: &str) -> Command {
    let mut cmd = bakery(home);
    cmd.args(["bench", "--json", "--workload", workload]);
    cmd.args(["--clients", clients, "--duration", duration]);
    cmd
}

/// The smallest bench run: one client, 20 ms of `cas`.
const ONE_SHORT_CAS: [&str; 8] = [
    "bench",
    "--json",
    "--workload",
    "cas",
    "--clients",
    "1",
    "--duration",
    "20ms",
];

#[test]
fn bakery_uri_is_ignored_but_uri_before_bench_is_honoured() {
    let home = TempDir::new().expect("temp dir");
    let user_db = home.path().join("user.db");
    let out = run(bakery(home.path())
        .env("BAKERY_URI", format!("sqlite://{}", user_db.display()))
        .args(ONE_SHORT_CAS));
    assert_ok(&out);
    assert!(
        stderr(&out).contains("ignores BAKERY_URI"),
        "{}",
        stderr(&out)
    );
    assert!(!user_db.exists(), "bench wrote into the BAKERY_URI store");
    let report = json(&out);
    assert_eq!(report["targets"][0]["uri"], "memory://");

    let out = run(bakery(home.path())
        .args(["--uri", "memory://"])
        .args(ONE_SHORT_CAS));
    assert_ok(&out);
    let report = json(&out);
    assert_eq!(report["targets"].as_array().map(Vec::len), Some(1));
    assert_clean_cell(cell(&report, "cas", "memory", "shared-key", 1));
}

#[test]
fn worker_threads_sets_the_runtime_and_the_results_record_it() {
    let home = TempDir::new().expect("temp dir");
    for threads in ["1", "3"] {
        let out = run(bakery(home.path())
            .args(ONE_SHORT_CAS)
            .args(["--uri", "memory://", "--worker-threads", threads])
            // The flag wins over the runtime's own variable.
            .env("TOKIO_WORKER_THREADS", "2"));
        assert_ok(&out);
        let report = json(&out);
        assert_eq!(
            report["settings"]["runtime_worker_threads"].to_string(),
            threads,
            "{report:#}"
        );
        assert_clean_cell(cell(&report, "cas", "memory", "shared-key", 1));
    }
    // Without the flag the run records what the runtime had, here the
    // variable's count (not the machine's cores).
    let out = run(bakery(home.path())
        .args(ONE_SHORT_CAS)
        .args(["--uri", "memory://"])
        .env("TOKIO_WORKER_THREADS", "5"));
    assert_ok(&out);
    assert_eq!(json(&out)["settings"]["runtime_worker_threads"], 5);
}

#[test]
fn usage_errors_exit_2_with_a_clear_first_line() {
    let home = TempDir::new().expect("temp dir");
    for (args, mentions) in [
        (&["bench", "--workload", "nosuch"][..], "--workload"),
        (&["bench", "--clients", "0"], "--clients"),
        (&["bench", "--clients", "1,x"], "--clients"),
        (&["bench", "--duration", "soon"], "--duration"),
        (&["bench", "--duration", "0s"], "--duration"),
        (&["bench", "--block-size", "0"], "--block-size"),
        (&["bench", "--rounds", "0"], "--rounds"),
        (&["bench", "--rounds", "26"], "--rounds"),
        (&["bench", "--worker-threads", "0"], "--worker-threads"),
        (&["bench", "--worker-threads", "many"], "--worker-threads"),
    ] {
        let out = exits(home.path(), args, 2);
        let err = stderr(&out);
        let first = err.lines().next().unwrap_or_default();
        assert!(first.starts_with("error:"), "{args:?}: {err}");
        assert!(first.contains(mentions), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn runtime_errors_exit_1_with_one_line() {
    let home = TempDir::new().expect("temp dir");
    let not_a_dir = home.path().join("file");
    std::fs::write(&not_a_dir, "x").expect("write a file");
    let out_arg = not_a_dir.join("out").display().to_string();
    for (args, mentions) in [
        (&["bench", "--uri", "nosuch://x"][..], "nosuch"),
        (
            &[
                "bench",
                "--uri",
                "redis://user:hunter2@127.0.0.1:1/0?timeout_ms=x",
            ],
            "redis",
        ),
        (
            &[
                "bench",
                "--workload",
                "cas",
                "--clients",
                "1",
                "--duration",
                "10ms",
                "--out",
                &out_arg,
            ],
            "cannot write",
        ),
    ] {
        let err = stderr(&exits(home.path(), args, 1));
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("bakery: error: "), "{args:?}: {err}");
        assert!(err.contains(mentions), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// With the server URIs CI exports (scripts/test.sh), the native peers run
/// beside bakery's sequence: PostgreSQL nextval() (plain and cached) and
/// Redis INCRBY.
#[test]
fn native_peers_run_beside_the_server_backends() {
    let mut uris = Vec::new();
    for (var, compiled) in [
        ("BAKERY_POSTGRES_URI", cfg!(feature = "postgres")),
        ("BAKERY_REDIS_URI", cfg!(feature = "redis")),
    ] {
        if !compiled {
            eprintln!("bench: {var}: its backend feature is off in this build: skipped");
            continue;
        }
        if let Some(uri) = bakery_testkit::server_uri(var, "bench") {
            uris.push(uri);
        }
    }
    if uris.is_empty() {
        return;
    }
    let home = TempDir::new().expect("temp dir");
    let mut cmd = bench_json(home.path(), "sequence", "1,2", "200ms");
    for uri in &uris {
        cmd.arg("--uri").arg(uri);
    }
    let out = run(&mut cmd);
    assert_ok(&out);
    let report = json(&out);
    let mut peers = Vec::new();
    if cfg!(feature = "postgres") && std::env::var("BAKERY_POSTGRES_URI").is_ok() {
        peers.extend([
            ("postgres", "nextval()"),
            ("postgres", "nextval() CACHE 1000"),
        ]);
        let version = report["targets"][0]["version"].as_str().unwrap_or_default();
        assert!(version.starts_with("PostgreSQL "), "{version}");
        // With a nextval() peer, the first target is measured, not skipped.
        assert_ne!(report["checks"][0]["status"], "not_measured");
    }
    if cfg!(feature = "redis") && std::env::var("BAKERY_REDIS_URI").is_ok() {
        peers.push(("redis", "INCRBY"));
    }
    for (target, peer) in peers {
        for clients in [1, 2] {
            let native = cell(&report, "sequence", target, peer, clients);
            assert_eq!(native["implementation"], "native");
            assert_clean_cell(native);
            // One request per id.
            assert_eq!(native["round_trips_per_op"], 1.0, "{native:#}");
            assert_clean_cell(cell(&report, "sequence", target, "next", clients));
        }
    }
}

/// The lock table: the three bakery variants on the default stores (and on
/// PostgreSQL / etcd when configured, beside their native locks), each with
/// a fairness index and the longest run of grants to one client.
#[test]
fn lock_workload_reports_fairness_and_native_locks() {
    let mut servers = Vec::new();
    for (var, target, peer, compiled) in [
        (
            "BAKERY_POSTGRES_URI",
            "postgres",
            "pg_advisory_lock()",
            cfg!(feature = "postgres"),
        ),
        (
            "BAKERY_ETCD_URI",
            "etcd",
            "etcd Lock/Unlock",
            cfg!(feature = "etcd"),
        ),
    ] {
        if !compiled {
            eprintln!("bench: {var}: its backend feature is off in this build: skipped");
            continue;
        }
        if let Some(uri) = bakery_testkit::server_uri(var, "bench") {
            servers.push((uri, target, peer));
        }
    }
    let home = TempDir::new().expect("temp dir");
    let mut cmd = bench_json(home.path(), "lock", "1,3", "300ms");
    cmd.args(["--uri", "memory://"]);
    let db = home.path().join("lock-bench.db");
    cmd.arg("--uri").arg(format!("sqlite://{}", db.display()));
    for (uri, _, _) in &servers {
        cmd.arg("--uri").arg(uri);
    }
    let out = run(&mut cmd);
    assert_ok(&out);
    let report = json(&out);
    let mut targets = vec!["memory", "sqlite"];
    targets.extend(servers.iter().map(|(_, target, _)| *target));
    for target in targets {
        for variant in [
            "fair",
            "fair-polling",
            "old",
            "election",
            "semaphore",
            "rwlock-write",
        ] {
            let cell = cell(&report, "lock", target, variant, 3);
            assert_clean_cell(cell);
            let fairness = cell["fairness"].as_f64().unwrap_or(-1.0);
            assert!((0.0..=1.0).contains(&fairness), "{cell:#}");
            assert!(
                cell["extras"]["longest run"].as_u64().unwrap_or(0) >= 1,
                "{cell:#}"
            );
            assert!(
                cell["extras"]["row bytes"].as_u64().unwrap_or(0) >= 1,
                "{cell:#}"
            );
        }
        // The hand-off is judged in ns; the µs column is that, rounded up.
        let fair = cell(&report, "lock", target, "fair", 3);
        let ns = fair["extras"]["hand-off p50 ns"].as_u64().unwrap_or(0);
        assert!(ns > 0, "{fair:#}");
        assert_eq!(
            fair["extras"]["hand-off p50 µs"].as_u64(),
            Some(ns.div_ceil(1000)),
            "{fair:#}"
        );
        // The fair lock's queue lives in its row: waiters make it larger.
        let row_bytes = |clients| {
            let cell = cell(&report, "lock", target, "fair", clients);
            cell["extras"]["row bytes"].as_u64().unwrap_or(0)
        };
        assert!(
            row_bytes(3) > row_bytes(1),
            "{target}: row bytes {} at 3 clients, {} at 1",
            row_bytes(3),
            row_bytes(1)
        );
    }
    for (_, target, peer) in &servers {
        let native = cell(&report, "lock", target, peer, 3);
        assert_eq!(native["implementation"], "native");
        assert_clean_cell(native);
        // Lock + unlock: two requests per acquisition.
        assert_eq!(native["round_trips_per_op"], 2.0, "{native:#}");
    }
}

/// `--processes 1,2` on the default SQLite file: the lock's variants and
/// the sequence's run again with a client per OS process (workers of this
/// binary), into their own tables and results; every such cell ran
/// cleanly, so the parent's checks on the merged grants and ids (no
/// overlap, no lost increment, fencing tokens in order, no duplicate id)
/// passed. The checks' negative controls are unit tests of
/// `bakery_bench::journal` and `bakery_bench::process` (overlapping
/// intervals, a lost increment, duplicate ids).
#[test]
fn processes_run_the_cells_across_processes_and_check_them() {
    let home = TempDir::new().expect("temp dir");
    let out_dir = home.path().join("out");
    let out = run(bakery(home.path()).args([
        "bench",
        "--workload",
        "lock,sequence",
        "--clients",
        "1",
        "--processes",
        "1,2",
        "--duration",
        "50ms",
        "--out",
        &out_dir.display().to_string(),
    ]));
    assert_ok(&out);
    let text = stdout(&out);
    for heading in ["lock across processes: ", "sequence across processes: "] {
        assert!(text.contains(heading), "no {heading:?} in:\n{text}");
    }
    let report: Value =
        serde_json::from_str(&assert_non_empty_file(&out_dir.join("results.json"))).expect("json");
    assert_eq!(report["settings"]["processes"], serde_json::json!([1, 2]));
    let across: Vec<&Value> = results(&report)
        .iter()
        .filter(|r| r["across_processes"] == true)
        .collect();
    // 6 lock variants and 2 sequence variants, at 1 and 2 processes, on
    // the one SQLite store (no memory store across processes).
    assert_eq!(across.len(), (6 + 2) * 2, "{report:#}");
    for cell in &across {
        assert_eq!(cell["target"], "sqlite", "{cell:#}");
        assert_clean_cell(cell);
    }
    // Two processes each had their share: the fairness index is over both.
    for cell in across.iter().filter(|c| c["clients"] == 2) {
        assert!(cell["fairness"].as_f64().is_some(), "{cell:#}");
        if cell["workload"] == "lock" {
            assert!(
                cell["extras"]["longest run"].as_u64() >= Some(1),
                "{cell:#}"
            );
        }
    }
    let markdown = assert_non_empty_file(&out_dir.join("report.md"));
    assert!(markdown.contains("| processes |"), "{markdown}");
    assert!(
        markdown.contains("In one process (a client per task):"),
        "{markdown}"
    );
}

/// Plans that cannot run are refused with a clear error before anything
/// runs: cells across processes on a memory store (a store of one
/// process), and a `--mariadb` URL that is not MySQL's (its password not
/// echoed).
#[test]
fn plans_that_cannot_run_are_refused_before_anything_runs() {
    let home = TempDir::new().expect("temp dir");
    for (args, mentions, hidden) in [
        (
            &[
                "bench",
                "--uri",
                "memory://",
                "--workload",
                "lock",
                "--processes",
                "2",
            ][..],
            &["memory:// is a store of one process", "processes share"][..],
            None,
        ),
        (
            &[
                "bench",
                "--workload",
                "lock",
                "--mariadb",
                "postgres://user:secret@127.0.0.1/db",
            ],
            &["not a mysql:// or mariadb:// URL"],
            Some("secret"),
        ),
    ] {
        let err = stderr(&exits(home.path(), args, 1));
        for mention in mentions {
            assert!(err.contains(mention), "{args:?}: {err}");
        }
        if let Some(hidden) = hidden {
            assert!(!err.contains(hidden), "{args:?}: {err}");
        }
    }
}

/// `--mariadb` beside PostgreSQL: MariaDB's `GET_LOCK` runs in the lock
/// cells in one process and across processes (a connection per worker),
/// cleanly (the parent's check of the merged grants and shared counter
/// passed), two requests per acquisition.
#[cfg(all(feature = "postgres", feature = "mariadb"))]
#[test]
fn mariadb_get_lock_runs_beside_postgres_in_and_across_processes() {
    let Some(postgres) = bakery_testkit::server_uri("BAKERY_POSTGRES_URI", "bench") else {
        return;
    };
    let Some(mariadb) = bakery_testkit::server_uri("BAKERY_MARIADB_URI", "bench") else {
        return;
    };
    let home = TempDir::new().expect("temp dir");
    let mut cmd = bench_json(home.path(), "lock", "2", "200ms");
    cmd.args([
        "--uri",
        &postgres,
        "--mariadb",
        &mariadb,
        "--processes",
        "2",
    ]);
    let out = run(&mut cmd);
    assert_ok(&out);
    let report = json(&out);
    let get_lock: Vec<&Value> = results(&report)
        .iter()
        .filter(|r| r["variant"] == "MariaDB GET_LOCK() (its own server)")
        .collect();
    assert_eq!(get_lock.len(), 2, "{report:#}");
    assert!(get_lock.iter().any(|c| c["across_processes"] == true));
    for cell in get_lock {
        assert_eq!(cell["target"], "postgres", "{cell:#}");
        assert_eq!(cell["implementation"], "native", "{cell:#}");
        assert_clean_cell(cell);
        assert_eq!(cell["round_trips_per_op"], 2.0, "{cell:#}");
    }
}
