//! End-to-end tests of `bakery once`: real processes racing for one key on
//! the embedded SQLite file, and a real `kill -9` of the runner. (The
//! recipe itself runs on every backend in the conformance suite.)

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// Bound on waiting for something that must happen (failure, not speed).
const PATIENCE: Duration = Duration::from_secs(60);

fn bakery(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env(
        "BAKERY_URI",
        format!("sqlite://{}", dir.join("b.db").display()),
    )
    .env("HOME", dir)
    .env("D", dir)
    .env_remove("BAKERY_FENCING_TOKEN")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .args(args);
    cmd
}

fn finish(child: Child) -> Output {
    child.wait_with_output().expect("wait for bakery")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Wait (bounded) until `path` exists.
fn wait_for(path: &Path, why: &str) {
    let begun = Instant::now();
    while !path.exists() {
        assert!(begun.elapsed() < PATIENCE, "{why}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn concurrent_processes_run_the_command_once_and_share_its_result() {
    let dir = TempDir::new().expect("dir");
    let script = "echo $$ >> \"$D/runs\"; sleep 0.3; echo out-$BAKERY_FENCING_TOKEN-$BAKERY_ONCE_KEY; exit 4";
    let children: Vec<Child> = (0..6)
        .map(|_| {
            bakery(
                dir.path(),
                &["once", "run", "job-1", "--", "sh", "-c", script],
            )
            .spawn()
            .expect("spawn")
        })
        .collect();
    for child in children {
        let out = finish(child);
        assert_eq!(out.status.code(), Some(4), "stderr: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            "out-1-job-1\n",
            "every caller sees the one run's stdout"
        );
    }
    assert_eq!(
        lines(&dir.path().join("runs")),
        1,
        "the command ran more than once"
    );
    // A later caller replays too, and says so on stderr.
    let out = bakery(
        dir.path(),
        &["once", "run", "job-1", "--", "sh", "-c", script],
    )
    .output()
    .expect("run");
    assert_eq!(
        (out.status.code(), text(&out.stdout).as_str()),
        (Some(4), "out-1-job-1\n")
    );
    assert!(
        text(&out.stderr).contains("already ran"),
        "{}",
        text(&out.stderr)
    );
    let shown = bakery(dir.path(), &["--json", "once", "show", "job-1"])
        .output()
        .expect("show");
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
    assert_eq!(json["exit_status"], 4);
    assert_eq!(json["record"]["status"], "completed");
}

/// `bakery once run [FLAGS…] --lease 300ms job -- sh -c SCRIPT`.
fn run_job(dir: &Path, flags: &[&str], script: &str) -> Command {
    let mut args = vec!["once", "run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--lease", "300ms", "job", "--", "sh", "-c", script]);
    bakery(dir, &args)
}

#[test]
fn a_killed_runner_is_taken_over_after_its_lease() {
    let dir = TempDir::new().expect("dir");
    let started = dir.path().join("started");
    let long = "echo x > \"$D/started\"; exec sleep 20";
    let mut runner = run_job(dir.path(), &[], long).spawn().expect("spawn");
    wait_for(&started, "the command never started");
    runner.kill().expect("kill -9 the runner"); // SIGKILL: no clean-up
    let _ = runner.wait();
    // The command line differs from the dead runner's: refused, nothing run.
    let refused = run_job(dir.path(), &[], "echo token=$BAKERY_FENCING_TOKEN")
        .output()
        .expect("run");
    assert_eq!(refused.status.code(), Some(1));
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("different payload"), "{stderr}");
    // The same command: taken over (token 2) once the lease has passed.
    std::fs::remove_file(&started).expect("rm");
    let mut taker = run_job(dir.path(), &[], long).spawn().expect("spawn");
    wait_for(&started, "never taken over");
    let shown = bakery(dir.path(), &["--json", "once", "show", "job"])
        .output()
        .expect("show");
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
    assert_eq!(json["record"]["attempt"], 2, "{json}");
    assert_eq!(json["record"]["status"], "in_progress");
    // While it runs, --no-wait exits 75 without running anything.
    let busy = run_job(dir.path(), &["--no-wait"], long)
        .output()
        .expect("run");
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy.stderr));
    taker.kill().expect("kill");
    let _ = taker.wait();
}

#[test]
fn retry_failures_releases_the_key_and_forget_clears_it() {
    let dir = TempDir::new().expect("dir");
    let script = "echo try >> \"$D/tries\"; test -e \"$D/ok\"";
    let args = [
        "once",
        "run",
        "--retry-failures",
        "k",
        "--",
        "sh",
        "-c",
        script,
    ];
    let out = bakery(dir.path(), &args).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("released"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(dir.path().join("ok"), "").expect("touch");
    let out = bakery(dir.path(), &args).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = bakery(dir.path(), &args).output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        lines(&dir.path().join("tries")),
        2,
        "ran until it succeeded, then never again"
    );
    assert!(bakery(dir.path(), &["once", "forget", "k"])
        .status()
        .expect("forget")
        .success());
    let out = bakery(dir.path(), &args).output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        lines(&dir.path().join("tries")),
        3,
        "runs again after forget"
    );
    for bad in [
        &["once", "run", "a/b", "--", "true"][..],
        &["once", "run", "--scope", "x y", "k", "--", "true"],
        &["once", "show", "never"],
    ] {
        let out = bakery(dir.path(), bad).output().expect("run");
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {}", text(&out.stderr));
    }
}
