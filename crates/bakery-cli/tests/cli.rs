//! End-to-end tests of the `bakery` binary on a throwaway SQLite file.
//!
//! Every command runs with HOME and XDG_DATA_HOME inside a temporary
//! directory and without BAKERY_URI, so nothing here touches the real home.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// One isolated environment: a temp dir acting as HOME, holding the database.
struct Sandbox {
    dir: TempDir,
    /// A server store to use instead of the sandbox's SQLite file.
    server: Option<String>,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("create a temp dir"),
            server: None,
        }
    }

    fn on_server(uri: String) -> Self {
        Sandbox {
            server: Some(uri),
            ..Sandbox::new()
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn data_home(&self) -> PathBuf {
        self.path().join("data")
    }

    fn db(&self) -> PathBuf {
        self.path().join("b.db")
    }

    fn uri(&self) -> String {
        match &self.server {
            Some(uri) => uri.clone(),
            None => format!("sqlite://{}", self.db().display()),
        }
    }

    /// `bakery` with a clean environment and no `--uri`.
    fn bare(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env_remove("BAKERY_URI")
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .env("HOME", self.path())
            .env("XDG_DATA_HOME", self.data_home())
            .stdin(Stdio::null());
        cmd
    }

    /// `bakery --uri sqlite://<tmp>/b.db ARGS…`
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = self.bare();
        cmd.arg("--uri").arg(self.uri()).args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run bakery")
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bakery")
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ids(out: &Output) -> Vec<u64> {
    stdout(out)
        .lines()
        .map(|line| {
            line.parse()
                .unwrap_or_else(|_| panic!("not an id: {line:?}"))
        })
        .collect()
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "bakery failed with {:?}; stderr: {}",
        out.status,
        stderr(out)
    );
    assert_no_panic(&stderr(out));
}

fn assert_no_panic(err: &str) {
    for bad in ["panicked", "backtrace", "internal error", "RUST_BACKTRACE"] {
        assert!(!err.contains(bad), "stderr mentions {bad:?}: {err}");
    }
}

/// Exit status `code`, and exactly one line on stderr starting with
/// `bakery: error:` (for runtime errors).
fn assert_one_line_error(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {} stderr: {}",
        stdout(out),
        stderr(out)
    );
    let err = stderr(out);
    assert_no_panic(&err);
    assert_eq!(err.lines().count(), 1, "stderr is not one line: {err:?}");
    assert!(err.starts_with("bakery: error: "), "{err:?}");
    err
}

fn strictly_increasing(ids: &[u64]) -> bool {
    ids.windows(2).all(|w| w[0] < w[1])
}

#[test]
fn next_prints_count_increasing_ids_and_continues() {
    let sb = Sandbox::new();
    let first = sb.run(&["seq", "next", "orders", "--count", "5"]);
    assert_ok(&first);
    assert_eq!(ids(&first), vec![1, 2, 3, 4, 5]);

    let second = sb.run(&["seq", "next", "orders", "--count", "5"]);
    assert_ok(&second);
    let second = ids(&second);
    assert_eq!(second.len(), 5);
    assert!(strictly_increasing(&second), "{second:?}");
    assert!(second[0] > 5, "{second:?}");

    // Default count is one id.
    let one = sb.run(&["seq", "next", "orders"]);
    assert_ok(&one);
    let one = ids(&one);
    assert_eq!(one.len(), 1);
    assert!(one[0] > second[4]);

    // Another name is another sequence.
    let other = sb.run(&["seq", "next", "invoices", "-n", "2"]);
    assert_ok(&other);
    assert_eq!(ids(&other), vec![1, 2]);
}

/// Start `procs` processes at once, wait for all, check every id is distinct
/// and each process's ids strictly increase.
fn concurrent_processes(procs: usize, count: u64, block_size: Option<u64>) {
    concurrent_processes_on(Sandbox::new(), "orders", procs, count, block_size);
}

fn concurrent_processes_on(
    sb: Sandbox,
    name: &str,
    procs: usize,
    count: u64,
    block_size: Option<u64>,
) {
    // Create the file first so the processes race on the sequence, not on
    // creating the database schema.
    assert_ok(&sb.run(&["seq", "next", "warmup"]));

    let count_arg = count.to_string();
    let block_arg = block_size.map(|b| b.to_string());
    let mut args = vec!["seq", "next", name, "--count", &count_arg];
    if let Some(block) = &block_arg {
        args.extend(["--block-size", block]);
    }
    let children: Vec<Child> = (0..procs).map(|_| sb.spawn(&args)).collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().expect("wait for bakery"))
        .collect();

    let mut all = HashSet::new();
    for (i, out) in outputs.iter().enumerate() {
        assert_ok(out);
        let got = ids(out);
        assert_eq!(got.len() as u64, count, "process {i}");
        assert!(strictly_increasing(&got), "process {i} not increasing");
        for id in got {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(all.len() as u64, procs as u64 * count);
}

#[test]
fn eight_processes_at_once_get_distinct_ids() {
    concurrent_processes(8, 5000, Some(100));
}

#[test]
fn eight_processes_at_once_with_default_block_size() {
    concurrent_processes(8, 5000, None);
}

/// The same on every server backend configured for this run (the URIs that
/// `scripts/backends.sh` exports). A developer run without them prints why.
#[test]
fn eight_processes_at_once_on_each_server_backend() {
    let mut ran = 0;
    // (variable, ids per process): LWT on Cassandra and FerretDB are slower,
    // so those runs hand out 8 × 2,000.
    for (var, count) in [
        ("BAKERY_POSTGRES_URI", 5000),
        ("BAKERY_REDIS_URI", 5000),
        ("BAKERY_ETCD_URI", 5000),
        ("BAKERY_CASSANDRA_URI", 2000),
        ("BAKERY_MONGODB_URI", 2000),
    ] {
        let Some(uri) = bakery_testkit::server_uri(var, "cli") else {
            continue;
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("orders-{nanos}");
        concurrent_processes_on(Sandbox::on_server(uri.clone()), &name, 8, count, Some(100));
        concurrent_processes_on(
            Sandbox::on_server(uri),
            &format!("{name}-big"),
            8,
            count,
            None,
        );
        ran += 1;
    }
    eprintln!("cli: 8-process test ran on {ran} server backend(s)");
}

#[test]
fn json_next_and_show() {
    let sb = Sandbox::new();
    let next = sb.run(&["--json", "seq", "next", "orders", "--count", "3"]);
    assert_ok(&next);
    let v: serde_json::Value = serde_json::from_slice(&next.stdout).expect("next JSON");
    assert_eq!(v, serde_json::json!({"name": "orders", "ids": [1, 2, 3]}));

    // --json also works after the subcommand.
    let show = sb.run(&["seq", "show", "orders", "--json"]);
    assert_ok(&show);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).expect("show JSON");
    assert_eq!(v["name"], "orders");
    let next_unreserved = v["next"].as_u64().expect("next is a number");
    assert!(next_unreserved > 3, "{v}");
    assert!(v["version"].as_u64().is_some(), "{v}");
    assert!(v["block_size"].as_u64().is_some(), "{v}");
    assert!(v["node"].is_string(), "{v}");

    let human = sb.run(&["seq", "show", "orders"]);
    assert_ok(&human);
    let text = stdout(&human);
    assert!(text.contains("next"), "{text}");
    assert!(text.contains(&next_unreserved.to_string()), "{text}");
}

#[test]
fn show_of_a_missing_sequence_exits_1() {
    let sb = Sandbox::new();
    assert_ok(&sb.run(&["seq", "next", "exists"]));
    for json in [false, true] {
        let mut args = vec!["seq", "show", "nope"];
        if json {
            args.push("--json");
        }
        let out = sb.run(&args);
        let err = assert_one_line_error(&out, 1);
        assert!(err.contains("sequence nope does not exist"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn unknown_scheme_is_one_line_naming_the_compiled_schemes() {
    let sb = Sandbox::new();
    let out = sb
        .bare()
        .args(["--uri", "nosuch://x", "seq", "next", "x"])
        .output()
        .expect("run bakery");
    let err = assert_one_line_error(&out, 1);
    assert!(err.contains("sqlite"), "{err}");
    assert!(err.contains("memory"), "{err}");
}

#[test]
fn passwords_are_never_echoed() {
    let sb = Sandbox::new();
    for uri in [
        "redis://user:hunter2@localhost:6379/0",
        "nosuch://user:hunter2@localhost/db",
    ] {
        let out = sb
            .bare()
            .args(["seq", "next", "x"])
            .env("BAKERY_URI", uri)
            .output()
            .expect("run bakery");
        let err = assert_one_line_error(&out, 1);
        assert!(!err.contains("hunter2"), "{err}");
    }
    // The env value is not shown in --help either.
    let help = sb
        .bare()
        .arg("--help")
        .env("BAKERY_URI", "redis://user:hunter2@localhost/0")
        .output()
        .expect("run bakery");
    assert!(help.status.success());
    assert!(!stdout(&help).contains("hunter2"));
}

#[test]
fn bad_name_is_invalid_input() {
    let sb = Sandbox::new();
    for name in ["a b", "a/b", ""] {
        let out = sb.run(&["seq", "next", name]);
        let err = assert_one_line_error(&out, 1);
        assert!(err.contains("invalid input"), "{err}");
        assert!(err.contains("name"), "{err}");
    }
    // The name is checked before the store is opened.
    assert!(!sb.db().exists());
}

#[test]
fn usage_errors_exit_2() {
    let sb = Sandbox::new();
    for args in [
        &["seq", "next", "x", "--count", "0"][..],
        &["seq", "next", "x", "--count", "10000001"],
        &["seq", "next", "x", "--count", "-3"],
        &["seq", "next", "x", "--count", "many"],
        &["seq", "next", "x", "--block-size", "0"],
        &["seq", "next"],
        &["seq", "frobnicate"],
        &[],
    ] {
        let out = sb.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_no_panic(&stderr(&out));
    }
    assert!(!sb.db().exists());
}

#[test]
#[cfg(target_os = "linux")]
fn default_store_lives_under_xdg_data_home() {
    let sb = Sandbox::new();
    let expected = sb.data_home().join("bakery").join("bakery.db");

    let help = sb.bare().arg("--help").output().expect("run bakery");
    assert!(help.status.success());
    let text = stdout(&help);
    assert!(
        text.contains(&expected.display().to_string()),
        "help does not name {}: {text}",
        expected.display()
    );
    assert!(text.contains("Exit status"), "{text}");

    let out = sb
        .bare()
        .args(["seq", "next", "x", "--count", "2"])
        .output()
        .expect("run bakery");
    assert_ok(&out);
    assert_eq!(ids(&out), vec![1, 2]);
    assert!(expected.is_file(), "{} was not created", expected.display());

    // It persists: the next process continues the same sequence.
    let again = sb.bare().args(["seq", "next", "x"]).output().expect("run");
    assert_ok(&again);
    assert!(ids(&again)[0] > 2);
}

#[test]
#[cfg(target_os = "linux")]
fn default_store_path_with_uri_metacharacters() {
    let sb = Sandbox::new();
    let data = sb.path().join("my data 100%?x=1");
    let out = sb
        .bare()
        .env("XDG_DATA_HOME", &data)
        .args(["seq", "next", "x"])
        .output()
        .expect("run bakery");
    assert_ok(&out);
    assert_eq!(ids(&out), vec![1]);
    assert!(data.join("bakery").join("bakery.db").is_file());
}

#[test]
fn bakery_uri_env_selects_the_store() {
    let sb = Sandbox::new();
    let out = sb
        .bare()
        .args(["seq", "next", "x"])
        .env("BAKERY_URI", sb.uri())
        .output()
        .expect("run bakery");
    assert_ok(&out);
    assert!(sb.db().is_file());
    assert!(!sb.data_home().join("bakery").join("bakery.db").exists());
}

#[test]
fn broken_pipe_exits_quietly() {
    let sb = Sandbox::new();
    let mut child = sb.spawn(&["seq", "next", "x", "--count", "200000"]);
    let pipe = child.stdout.take().expect("piped stdout");
    let mut reader = BufReader::new(pipe);
    let mut line = String::new();
    reader.read_line(&mut line).expect("read one line");
    assert_eq!(line.trim(), "1");
    drop(reader);

    let out = child.wait_with_output().expect("wait for bakery");
    let err = stderr(&out);
    assert_no_panic(&err);
    assert!(err.is_empty(), "stderr: {err}");
    assert!(out.status.success(), "{:?}", out.status);
}

#[test]
fn backends_lists_compiled_schemes() {
    let sb = Sandbox::new();
    let out = sb.bare().arg("backends").output().expect("run bakery");
    assert_ok(&out);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.contains(&"memory"), "{text}");
    assert!(lines.contains(&"sqlite"), "{text}");

    let out = sb
        .bare()
        .args(["backends", "--json"])
        .output()
        .expect("run bakery");
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v["schemes"]
        .as_array()
        .is_some_and(|s| s.iter().any(|x| x == "sqlite")));
}

/// `BAKERY_LOG` shows the library's events (here, the retries of a refused
/// connection) on stderr; without it an error stays one line; a bad filter
/// is reported and logging stays off.
#[test]
fn bakery_log_shows_retries_and_is_off_by_default() {
    let home = Sandbox::new();
    let refused = [
        "--uri",
        "postgres://postgres@127.0.0.1:1/x",
        "--retries",
        "1",
    ];
    let args = [&refused[..], &["seq", "next", "x"]].concat();
    let quiet = home.bare().args(&args).output().expect("run bakery");
    let quiet_err = stderr(&quiet);
    if quiet_err.contains("not compiled in") {
        eprintln!("postgres is not compiled into this build: skipped");
        return;
    }
    assert_one_line_error(&quiet, 1);

    let logged = home
        .bare()
        .env("BAKERY_LOG", "warn")
        .args(&args)
        .output()
        .expect("run bakery");
    let err = stderr(&logged);
    assert_eq!(logged.status.code(), Some(1), "{err}");
    assert!(err.contains("retrying"), "{err}");
    assert!(err.lines().count() > 1, "{err}");

    let bad = home
        .bare()
        .env("BAKERY_LOG", "bakery=[")
        .args(&args)
        .output()
        .expect("run bakery");
    assert!(
        stderr(&bad).contains("is not a log filter"),
        "{}",
        stderr(&bad)
    );
}
