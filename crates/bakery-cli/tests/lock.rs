//! End-to-end tests of `bakery lock` and `bakery fence`: real processes,
//! real `kill -9` and `kill -STOP`, on the embedded SQLite file and on every
//! server backend configured for the run (the URIs `scripts/backends.sh`
//! exports; under CI=true a missing one fails).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// Bound on waiting for something that must happen (failure, not speed).
const PATIENCE: Duration = Duration::from_secs(60);

/// One store to run against, and a scratch directory for files.
struct Target {
    label: &'static str,
    uri: String,
    dir: TempDir,
}

impl Target {
    fn sqlite() -> Target {
        let dir = tempfile::tempdir().expect("temp dir");
        let uri = format!("sqlite://{}", dir.path().join("b.db").display());
        Target {
            label: "sqlite",
            uri,
            dir,
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// `bakery ARGS…` with BAKERY_URI set (children of `lock run` inherit it).
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env("BAKERY_URI", &self.uri)
            .env("HOME", self.dir.path())
            .env("BAKERY", BIN)
            .env("D", self.dir.path())
            .env_remove("RUST_BACKTRACE")
            .env_remove("BAKERY_FENCING_TOKEN")
            .stdin(Stdio::null())
            .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run bakery")
    }

    /// Spawn in its own process group, so a test can signal it alone.
    fn spawn(&self, args: &[&str]) -> Child {
        use std::os::unix::process::CommandExt;
        self.cmd(args)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bakery")
    }

    /// A holder with a 1 s lease running `script`, in the background.
    fn hold_1s(&self, lock: &str, script: &str) -> Child {
        self.spawn(&[
            "lock", "run", lock, "--lease", "1s", "--", "sh", "-c", script,
        ])
    }

    /// The next holder: waits (up to 60 s) for the lock, then runs `script`.
    fn take_over(&self, lock: &str, script: &str) -> Output {
        let args = [
            "--lease",
            "1s",
            "--timeout",
            "60s",
            "--",
            "sh",
            "-c",
            script,
        ];
        self.run(&[&["lock", "run", lock][..], &args].concat())
    }
}

/// SQLite always; each server backend whose URI the run provides.
fn targets() -> Vec<Target> {
    let mut all = vec![Target::sqlite()];
    for (label, var) in [
        ("postgres", "BAKERY_POSTGRES_URI"),
        ("redis", "BAKERY_REDIS_URI"),
        ("etcd", "BAKERY_ETCD_URI"),
        ("cassandra", "BAKERY_CASSANDRA_URI"),
        ("mongodb", "BAKERY_MONGODB_URI"),
    ] {
        if let Some(uri) = bakery_testkit::server_uri(var, "lock") {
            all.push(Target {
                label,
                uri,
                dir: tempfile::tempdir().expect("temp dir"),
            });
        }
    }
    all
}

fn unique(prefix: &str) -> String {
    bakery_testkit::unique_name(prefix)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `output` (a command's stdout or stderr) contains `needle`.
fn assert_mentions(output: &[u8], needle: &str) {
    let output = text(output);
    assert!(output.contains(needle), "{needle:?} missing from {output}");
}

fn assert_status(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: status {:?}; stdout: {} stderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(!text(&out.stderr).contains("panicked"), "{what} panicked");
}

fn wait_for_file(path: &Path) {
    let give_up = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(
            Instant::now() < give_up,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_with_patience(child: Child, what: &str) -> Output {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            let _ = killpg(pid, Signal::SIGKILL);
            panic!("{what} did not exit within {PATIENCE:?}");
        }
    }
}

/// The done-criterion: eight `bakery lock run` loops of 25 runs each,
/// every run a read-sleep-write of a plain file counter — 200 at the end.
#[test]
fn eight_lock_run_loops_count_to_200_on_every_backend() {
    const LOOPS: usize = 8;
    const RUNS: usize = 25;
    for target in targets() {
        let lock = unique("jobs");
        let counter = target.path("counter");
        std::fs::write(&counter, "0").expect("init counter");
        let script = format!(
            "n=$(cat '{c}'); sleep 0.01; echo $((n+1)) > '{c}'",
            c = counter.display()
        );
        let started = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..LOOPS {
                scope.spawn(|| {
                    for _ in 0..RUNS {
                        let out = target.run(&["lock", "run", &lock, "--", "sh", "-c", &script]);
                        assert_status(&out, 0, "lock run");
                    }
                });
            }
        });
        let value = std::fs::read_to_string(&counter).expect("read counter");
        assert_eq!(value.trim(), "200", "{}: lost updates", target.label);
        let show = target.run(&["--json", "lock", "show", &lock]);
        assert_status(&show, 0, "lock show");
        let state: serde_json::Value = serde_json::from_slice(&show.stdout).expect("json");
        assert_eq!(
            state["state"]["token"], 200,
            "{}: one grant per run",
            target.label
        );
        eprintln!(
            "lock: {}: 8 loops x 25 runs -> counter 200 in {:.1?}",
            target.label,
            started.elapsed()
        );
    }
}

/// `kill -9` of a holder (and its command): the next `lock run` gets the lock
/// once the dead holder's lease has run out.
#[test]
fn killed_holder_is_replaced_after_its_lease_on_every_backend() {
    for target in targets() {
        let lock = unique("killed");
        let ready = target.path("ready-kill");
        let holder = target.hold_1s(&lock, "touch \"$D/ready-kill\"; sleep 120");
        wait_for_file(&ready);
        let pgid = Pid::from_raw(i32::try_from(holder.id()).expect("pid"));
        killpg(pgid, Signal::SIGKILL).expect("kill -9 the holder's group");
        let _ = wait_with_patience(holder, "killed holder");

        let started = Instant::now();
        let next = target.take_over(&lock, "echo \"$BAKERY_FENCING_TOKEN\"");
        let waited = started.elapsed();
        assert_status(&next, 0, "next holder");
        assert_eq!(text(&next.stdout).trim(), "2", "the second grant's token");
        assert!(
            waited >= Duration::from_secs(1),
            "{}: the dead holder was evicted after {waited:?}, before its lease",
            target.label
        );
        eprintln!(
            "lock: {}: holder killed with -9; next holder ran after {waited:.2?} (lease 1s)",
            target.label
        );
    }
}

/// The paused-holder scenario with real processes. The holder's `bakery`
/// process is stopped (`kill -STOP`) past its 1 s lease while its command
/// waits; another `lock run` takes over and writes; then the old command
/// writes its stale value and the old `bakery` is resumed.
fn paused_holder(target: &Target, fenced: bool) -> (String, Output, String) {
    let lock = unique("paused");
    let value = unique("value");
    let (ready, go, done) = (
        target.path("ready-pause"),
        target.path("go"),
        target.path("stale-write"),
    );
    for file in [&ready, &go, &done] {
        let _ = std::fs::remove_file(file);
    }
    let stale_write = if fenced {
        format!("\"$BAKERY\" fence write {value} stale")
    } else {
        "echo stale > \"$D/plain\"".to_owned()
    };
    // The holder reads under its token first (raising the fence), as a
    // read-modify-write would.
    let first_read = if fenced {
        format!("\"$BAKERY\" fence read {value} > /dev/null 2>&1; ")
    } else {
        String::new()
    };
    let holder_script = format!(
        "{first_read}touch \"$D/ready-pause\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done; \
         {stale_write} 2> \"$D/stale-err\"; echo $? > \"$D/stale-write.tmp\"; \
         mv \"$D/stale-write.tmp\" \"$D/stale-write\""
    );
    let holder = target.hold_1s(&lock, &holder_script);
    wait_for_file(&ready);
    let bakery_pid = Pid::from_raw(i32::try_from(holder.id()).expect("pid"));
    kill(bakery_pid, Signal::SIGSTOP).expect("kill -STOP the holder");

    let fresh_write = if fenced {
        format!("\"$BAKERY\" fence write {value} fresh")
    } else {
        "echo fresh > \"$D/plain\"".to_owned()
    };
    let next = target.take_over(&lock, &fresh_write);
    assert_status(&next, 0, "the next holder");

    std::fs::write(&go, "").expect("release the stale write");
    wait_for_file(&done);
    let stale_status = std::fs::read_to_string(&done)
        .expect("status")
        .trim()
        .to_owned();
    kill(bakery_pid, Signal::SIGCONT).expect("kill -CONT the holder");
    let old = wait_with_patience(holder, "resumed holder");

    let final_value = if fenced {
        let read = target.run(&["fence", "read", &value]);
        assert_status(&read, 0, "fence read");
        text(&read.stdout).trim().to_owned()
    } else {
        std::fs::read_to_string(target.path("plain"))
            .expect("plain file")
            .trim()
            .to_owned()
    };
    (stale_status, old, final_value)
}

#[test]
fn paused_holder_is_fenced_off_on_every_backend() {
    for target in targets() {
        let (stale_status, old, final_value) = paused_holder(&target, true);
        assert_eq!(
            stale_status, "1",
            "{}: the stale fenced write was accepted",
            target.label
        );
        let err = std::fs::read_to_string(target.path("stale-err")).unwrap_or_default();
        assert!(err.contains("rejected"), "{}: {err}", target.label);
        assert_eq!(final_value, "fresh", "{}", target.label);
        assert_eq!(
            old.status.code(),
            Some(1),
            "{}: resumed holder",
            target.label
        );
        let said = text(&old.stderr);
        assert!(
            said.contains("lost"),
            "{}: holder did not say: {said}",
            target.label
        );
        eprintln!(
            "lock: {}: paused holder's fenced write rejected",
            target.label
        );
    }
}

/// Negative control: the same scenario writing a plain file (no fencing)
/// must show the violation — the stale write lands after the new holder's.
#[test]
fn without_fencing_the_paused_holder_overwrites_the_new_holder() {
    let target = Target::sqlite();
    let (stale_status, _old, final_value) = paused_holder(&target, false);
    assert_eq!(stale_status, "0");
    assert_eq!(
        final_value, "stale",
        "the control must show the lost update fencing prevents"
    );
}

#[test]
fn try_exits_75_when_busy_and_run_passes_status_and_token() {
    let target = Target::sqlite();
    let lock = unique("try");
    let out = target.run(&["lock", "run", &lock, "--", "sh", "-c", "exit 7"]);
    assert_status(&out, 7, "command status passed through");

    let holder = target.spawn(&[
        "lock",
        "run",
        &lock,
        "--",
        "sh",
        "-c",
        "touch \"$D/ready-try\"; while [ ! -e \"$D/stop-try\" ]; do sleep 0.02; done",
    ]);
    wait_for_file(&target.path("ready-try"));
    let busy = target.run(&["lock", "try", &lock, "--", "sh", "-c", "touch \"$D/ran\""]);
    assert_status(&busy, 75, "try while held");
    assert!(!target.path("ran").exists(), "ran the command while busy");
    let timed_out = target.run(&["lock", "run", &lock, "--timeout", "200ms", "--", "true"]);
    assert_status(&timed_out, 75, "run --timeout while held");
    assert!(text(&timed_out.stderr).contains("timed out"));

    let show = target.run(&["lock", "show", &lock]);
    assert_status(&show, 0, "show");
    let shown = text(&show.stdout);
    assert!(shown.contains("token:  2"), "{shown}");
    assert!(
        shown.contains("queue:  0 waiting"),
        "timed-out request left: {shown}"
    );

    std::fs::write(target.path("stop-try"), "").expect("stop holder");
    assert_status(&wait_with_patience(holder, "holder"), 0, "holder");
    let free = target.run(&[
        "lock",
        "try",
        &lock,
        "--",
        "sh",
        "-c",
        "echo $BAKERY_FENCING_TOKEN",
    ]);
    assert_status(&free, 0, "try when free");
    assert_eq!(text(&free.stdout).trim(), "3");
}

/// `--at-least` keeps the lock after a job that ended at once (a second
/// scheduler's try is refused meanwhile), `--data` is shown with the holder,
/// and `--at-most` stops a job that runs too long.
#[test]
fn job_flags_hold_at_least_at_most_and_show_data() {
    let target = Target::sqlite();
    let lock = unique("job");
    let asked = Instant::now();
    let fast = target.spawn(&[
        "lock",
        "try",
        &lock,
        "--at-least",
        "3s",
        "--data",
        "node-a:8080",
        "--",
        "true",
    ]);
    let give_up = Instant::now() + PATIENCE;
    let shown = loop {
        let show = target.run(&["lock", "show", &lock]);
        let shown = text(&show.stdout);
        if shown.contains("data:") {
            break shown;
        }
        assert!(Instant::now() < give_up, "never held: {shown}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(shown.contains("data:   node-a:8080"), "{shown}");
    let second = target.run(&["lock", "try", &lock, "--", "sh", "-c", "touch \"$D/ran\""]);
    assert_status(
        &second,
        75,
        "second scheduler while the first keeps the lock",
    );
    assert!(!target.path("ran").exists(), "the job ran twice");
    assert_status(&wait_with_patience(fast, "fast job"), 0, "fast job");
    assert!(
        asked.elapsed() >= Duration::from_secs(3),
        "released after {:?}",
        asked.elapsed()
    );

    let slow = target.run(&[
        "lock",
        "run",
        &lock,
        "--at-most",
        "300ms",
        "--",
        "sleep",
        "30",
    ]);
    assert_status(&slow, 1, "a job past --at-most");
    assert_mentions(&slow.stderr, "lock_at_most_for");
    let free = target.run(&["lock", "try", &lock, "--", "true"]);
    assert_status(&free, 0, "free after --at-most released it");
}

/// `bakery leader run` publishes its value with the term; a second
/// candidate waits its turn and leads with the next term once the first
/// command exits; `leader show` fails (exit 1) when nobody leads.
#[test]
fn leader_run_publishes_value_and_hands_over_with_the_next_term() {
    let target = Target::sqlite();
    let election = unique("leader");
    let first = target.spawn(&[
        "leader",
        "run",
        &election,
        "--value",
        "node-a:8080",
        "--",
        "sh",
        "-c",
        "echo $BAKERY_FENCING_TOKEN > \"$D/term-a\"; while [ ! -e \"$D/stop-a\" ]; do sleep 0.02; done",
    ]);
    wait_for_file(&target.path("term-a"));
    let show = target.run(&["leader", "show", &election]);
    assert_status(&show, 0, "leader show");
    let shown = text(&show.stdout);
    assert!(shown.contains("value:    node-a:8080"), "{shown}");
    let term_a: u64 = std::fs::read_to_string(target.path("term-a"))
        .expect("term")
        .trim()
        .parse()
        .expect("a number");
    assert!(shown.contains(&format!("term:     {term_a}")), "{shown}");

    let second = target.spawn(&[
        "leader",
        "run",
        &election,
        "--value",
        "node-b:8080",
        "--timeout",
        "60s",
        "--",
        "sh",
        "-c",
        "echo $BAKERY_FENCING_TOKEN",
    ]);
    std::fs::write(target.path("stop-a"), "").expect("stop the first leader");
    assert_status(
        &wait_with_patience(first, "first leader"),
        0,
        "first leader",
    );
    let second = wait_with_patience(second, "second leader");
    assert_status(&second, 0, "second leader");
    assert_eq!(text(&second.stdout).trim(), (term_a + 1).to_string());

    let nobody = target.run(&["leader", "show", &election]);
    assert_status(&nobody, 1, "leader show with no leader");
    assert_mentions(&nobody.stderr, "no leader");
}

/// `--metrics-addr` serves Prometheus text while `lock run` holds the
/// lock: the store's calls and the lock's acquisition are in it.
#[test]
fn metrics_addr_serves_store_and_lock_metrics() {
    use std::io::{Read, Write as _};
    let target = Target::sqlite();
    let lock = unique("metrics");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let holder = target.spawn(&[
        "--metrics-addr",
        &addr,
        "lock",
        "run",
        &lock,
        "--",
        "sh",
        "-c",
        "touch \"$D/ready-m\"; while [ ! -e \"$D/stop-m\" ]; do sleep 0.02; done",
    ]);
    wait_for_file(&target.path("ready-m"));
    let mut page = String::new();
    let mut stream = std::net::TcpStream::connect(&addr).expect("metrics listener");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .expect("request");
    stream.read_to_string(&mut page).expect("response");
    std::fs::write(target.path("stop-m"), "").expect("stop holder");
    assert_status(&wait_with_patience(holder, "holder"), 0, "holder");
    assert!(page.contains("200 OK"), "{page}");
    assert!(
        page.contains(&format!(
            "bakery_lock_acquisitions_total{{lock=\"{lock}\"}} 1"
        )),
        "{page}"
    );
    assert!(
        page.contains("bakery_store_calls_total{backend=\"sqlite\",op=\"put_if_version\"}"),
        "{page}"
    );
}

/// Four `bakery semaphore run --permits 2` processes: never more than two
/// commands inside at once (each counts the markers present after adding
/// its own, and removes its marker before its permit is released), all
/// succeed, and `semaphore show` reports the permits free afterwards.
#[test]
fn semaphore_run_admits_at_most_n_processes() {
    let target = Target::sqlite();
    let name = unique("sem");
    let script = "touch \"$D/in.$$\"; ls \"$D\" | grep -c '^in\\.' >> \"$D/counts\"; \
                  sleep 0.3; rm \"$D/in.$$\"";
    let children: Vec<Child> = (0..4)
        .map(|_| {
            target.spawn(&[
                "semaphore",
                "run",
                &name,
                "--permits",
                "2",
                "--timeout",
                "60s",
                "--",
                "sh",
                "-c",
                script,
            ])
        })
        .collect();
    for child in children {
        assert_status(
            &wait_with_patience(child, "semaphore run"),
            0,
            "semaphore run",
        );
    }
    let counts = std::fs::read_to_string(target.path("counts")).expect("counts");
    let counts: Vec<u32> = counts
        .lines()
        .map(|line| line.trim().parse().expect("a count"))
        .collect();
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(
        counts.iter().all(|&n| (1..=2).contains(&n)),
        "more than 2 inside at once: {counts:?}"
    );
    let show = target.run(&["semaphore", "show", &name]);
    assert_status(&show, 0, "semaphore show");
    assert_mentions(&show.stdout, "permits:   2 (0 held)");
    let other = target.run(&["semaphore", "run", &name, "--permits", "3", "--", "true"]);
    assert_status(&other, 1, "another permit count");
    assert_mentions(&other.stderr, "permits");
}

#[test]
fn bad_input_is_a_clear_error() {
    let target = Target::sqlite();
    let out = target.run(&["lock", "run", "a/b", "--", "true"]);
    assert_status(&out, 1, "bad name");
    assert_mentions(&out.stderr, "invalid input");
    let out = target.run(&["lock", "run", "x", "--lease", "0s", "--", "true"]);
    assert_status(&out, 2, "zero lease");
    let out = target.run(&["lock", "run", "x", "--lease", "1ms", "--", "true"]);
    assert_status(&out, 1, "lease below the minimum");
    let out = target.run(&["lock", "run", "x"]);
    assert_status(&out, 2, "no command");
    let out = target.run(&["lock", "show", "never-taken"]);
    assert_status(&out, 1, "missing lock");
    let out = target.run(&["lock", "run", "x", "--", "/nonexistent/program"]);
    assert_status(&out, 1, "command that cannot start");
    let out = target.run(&["fence", "write", "v", "x"]);
    assert_status(&out, 2, "fence write without a token");
    let out = target.run(&["fence", "write", "v", "new", "--token", "5"]);
    assert_status(&out, 0, "fence write");
    let out = target.run(&["fence", "write", "v", "old", "--token", "4"]);
    assert_status(&out, 1, "older token");
    let out = target.run(&["fence", "read", "v", "--token", "3"]);
    assert_status(&out, 1, "fenced read with an older token");
    assert_mentions(&out.stderr, "refused");
    let out = target.run(&["fence", "read", "v", "--token", "6"]);
    assert_status(&out, 0, "fenced read raises the fence");
    let out = target.run(&["fence", "write", "v", "late", "--token", "5"]);
    assert_status(&out, 1, "write below the raised fence");
    let out = target.run(&["--json", "fence", "read", "v"]);
    assert_status(&out, 0, "fence read");
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(read["value"], "new");
    assert_eq!(read["token"], 6, "the fenced read raised it");
}

#[test]
fn rwlock_read_and_write_never_overlap_across_processes() {
    let target = Target::sqlite();
    let name = unique("rw");
    // Each side fails (exit 3) if it sees the other side's marker while it
    // holds the lock, at its start or its end.
    let reader = "touch \"$D/r.$$\"; \
                  ls \"$D\" | grep -q '^w\\.' && exit 3; \
                  sleep 0.5; ls \"$D\" | grep -c '^r\\.' >> \"$D/readers\"; \
                  ls \"$D\" | grep -q '^w\\.' && exit 3; \
                  rm \"$D/r.$$\"";
    let writer = "touch \"$D/w.$$\"; \
                  ls \"$D\" | grep -q '^r\\.' && exit 3; \
                  sleep 0.3; \
                  ls \"$D\" | grep -q '^r\\.' && exit 3; \
                  rm \"$D/w.$$\"; echo done >> \"$D/writer\"";
    let children: Vec<(&str, Child)> = ["read", "read", "write", "read"]
        .into_iter()
        .map(|mode| {
            let script = if mode == "write" { writer } else { reader };
            let child = target.spawn(&[
                "rwlock",
                mode,
                &name,
                "--timeout",
                "60s",
                "--",
                "sh",
                "-c",
                script,
            ]);
            (mode, child)
        })
        .collect();
    for (mode, child) in children {
        let what = format!("rwlock {mode}");
        assert_status(&wait_with_patience(child, &what), 0, &what);
    }
    let writer_runs = std::fs::read_to_string(target.path("writer")).expect("writer ran");
    assert_eq!(writer_runs.lines().count(), 1);
    let readers = std::fs::read_to_string(target.path("readers")).expect("readers ran");
    let readers: Vec<u32> = readers
        .lines()
        .map(|line| line.trim().parse().expect("a count"))
        .collect();
    assert_eq!(readers.len(), 3, "{readers:?}");
    assert!(
        readers.iter().any(|&n| n >= 2),
        "readers never held the lock together: {readers:?}"
    );
    let show = target.run(&["rwlock", "show", &name]);
    assert_status(&show, 0, "rwlock show");
    assert_mentions(&show.stdout, "held by: 0 readers");
    assert_mentions(&show.stdout, "token:   4");
}
