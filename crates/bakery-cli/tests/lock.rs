//! End-to-end tests of `bakery lock` and `bakery fence`: real processes,
//! real `kill -9` and `kill -STOP`, on the embedded SQLite file and on every
//! server backend configured for the run (the URIs `scripts/backends.sh`
//! exports; under CI=true a missing one fails).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use common::{targets, text, Target};

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// Bound on waiting for something that must happen (failure, not speed).
const PATIENCE: Duration = Duration::from_secs(60);

/// The lease of a holder that is killed or paused to be replaced: short,
/// so a test waits little for it to run out, but long enough to outlast a
/// heartbeat delayed by a loaded machine while its command's processes
/// start (the holder gives the lock up itself after a lease without one).
const SHORT_LEASE: Duration = Duration::from_secs(3);

/// `lock try`'s status when the lock is busy.
const EXIT_BUSY: i32 = 75;

impl Target {
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

    /// `bakery HEAD… -- sh -c SCRIPT`, run to its end.
    fn run_sh(&self, head: &[&str], script: &str) -> Output {
        self.run(&sh(head, script))
    }

    /// `bakery HEAD… -- sh -c SCRIPT`, spawned as by [`Target::spawn`].
    fn spawn_sh(&self, head: &[&str], script: &str) -> Child {
        self.spawn(&sh(head, script))
    }

    /// A holder with the [`SHORT_LEASE`] running `script`, in the background.
    fn hold_briefly(&self, lock: &str, script: &str) -> Child {
        let lease = format!("{}ms", SHORT_LEASE.as_millis());
        self.spawn_sh(&["lock", "run", lock, "--lease", &lease], script)
    }

    /// The next holder: waits (up to 60 s) for the lock, then runs `script`
    /// (with the default lease: it is not the one to be replaced).
    fn take_over(&self, lock: &str, script: &str) -> Output {
        self.run_sh(&["lock", "run", lock, "--timeout", "60s"], script)
    }
}

/// `HEAD… -- sh -c SCRIPT`: the arguments of a command running `script`.
fn sh<'a>(head: &[&'a str], script: &'a str) -> Vec<&'a str> {
    [head, &["--", "sh", "-c", script]].concat()
}

/// A script that marks `$D/ready-TAG`, then runs until `$D/stop-TAG` exists.
fn until_stopped(tag: &str) -> String {
    format!("touch \"$D/ready-{tag}\"; while [ ! -e \"$D/stop-{tag}\" ]; do sleep 0.02; done")
}

/// The numbers of `file` in the target's directory, one a line.
fn counts(target: &Target, file: &str) -> Vec<u32> {
    std::fs::read_to_string(target.path(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .lines()
        .map(|line| line.trim().parse().expect("a count"))
        .collect()
}

fn unique(prefix: &str) -> String {
    bakery_testkit::unique_name(prefix)
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
    for target in targets("lock") {
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
                        let out = target.run_sh(&["lock", "run", &lock], &script);
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
    for target in targets("lock") {
        let lock = unique("killed");
        let ready = target.path("ready-kill");
        let holder = target.hold_briefly(&lock, "touch \"$D/ready-kill\"; sleep 120");
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
            waited >= SHORT_LEASE,
            "{}: the dead holder was evicted after {waited:?}, before its lease",
            target.label
        );
        eprintln!(
            "lock: {}: holder killed with -9; next holder ran after {waited:.2?} (lease {SHORT_LEASE:?})",
            target.label
        );
    }
}

/// The paused-holder scenario with real processes. The holder's `bakery`
/// process is stopped (`kill -STOP`) past its short lease while its command
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
    let holder = target.hold_briefly(&lock, &holder_script);
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
    for target in targets("lock") {
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
    let out = target.run_sh(&["lock", "run", &lock], "exit 7");
    assert_status(&out, 7, "command status passed through");

    let holder = target.spawn_sh(&["lock", "run", &lock], &until_stopped("try"));
    wait_for_file(&target.path("ready-try"));
    let busy = target.run_sh(&["lock", "try", &lock], "touch \"$D/ran\"");
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
    let free = target.run_sh(&["lock", "try", &lock], "echo $BAKERY_FENCING_TOKEN");
    assert_status(&free, 0, "try when free");
    assert_eq!(text(&free.stdout).trim(), "3");
}

/// `--at-least` keeps the lock after a job that ended at once (a second
/// scheduler's try is refused meanwhile), `--data` is shown with the holder,
/// and `--at-most` stops a job that runs too long.
#[test]
fn job_flags_hold_at_least_at_most_and_show_data() {
    let target = Target::sqlite();
    // The refusal is only asserted for a try that finished within the
    // window; on a machine too slow for that, again with a longer one.
    let told = [3, 6, 12, 24].into_iter().any(|secs| {
        let told = at_least_keeps_the_lock(&target, Duration::from_secs(secs));
        if !told {
            eprintln!("lock: --at-least {secs}s: too slow here to tell; a longer window");
        }
        told
    });
    assert!(
        told,
        "no --at-least window was long enough to see the hold and try during it"
    );

    let lock = unique("job");
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

/// `lock try --at-least WINDOW --data … -- true`: released no sooner than
/// WINDOW after it was asked for, with the data shown while held, and a
/// second try during the window refused (exit 75) without running its
/// command. False if this machine was too slow to tell: no look at the
/// lock fell in the hold, or the second try ended after the window and
/// found the lock free (which it then may).
fn at_least_keeps_the_lock(target: &Target, window: Duration) -> bool {
    let lock = unique("job");
    let ran = target.path("ran");
    let _ = std::fs::remove_file(&ran);
    let at_least = format!("{}ms", window.as_millis());
    let asked = Instant::now();
    let mut fast = target.spawn(&[
        "lock",
        "try",
        &lock,
        "--at-least",
        &at_least,
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
            break Some(shown);
        }
        if fast.try_wait().expect("try_wait").is_some() {
            break None; // the whole hold passed between two looks
        }
        assert!(Instant::now() < give_up, "never held: {shown}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut told = false;
    if let Some(shown) = shown {
        assert!(shown.contains("data:   node-a:8080"), "{shown}");
        let second = target.run_sh(&["lock", "try", &lock], "touch \"$D/ran\"");
        // The grant was written after `asked`, so the lock is kept at
        // least until `asked + window`: a try that ended before then found
        // it held.
        let in_window = asked.elapsed() < window;
        if in_window || second.status.code() == Some(EXIT_BUSY) {
            assert_status(
                &second,
                EXIT_BUSY,
                "second scheduler while the first keeps the lock",
            );
            assert!(!ran.exists(), "the job ran twice");
            told = true;
        } else {
            assert_status(&second, 0, "second scheduler after the window");
        }
    }
    assert_status(&wait_with_patience(fast, "fast job"), 0, "fast job");
    assert!(
        asked.elapsed() >= window,
        "released after {:?}, before --at-least {window:?}",
        asked.elapsed()
    );
    told
}

/// `bakery leader run` publishes its value with the term; a second
/// candidate waits its turn and leads with the next term once the first
/// command exits; `leader show` fails (exit 1) when nobody leads.
#[test]
fn leader_run_publishes_value_and_hands_over_with_the_next_term() {
    let target = Target::sqlite();
    let election = unique("leader");
    let first = target.spawn_sh(
        &["leader", "run", &election, "--value", "node-a:8080"],
        "echo $BAKERY_FENCING_TOKEN > \"$D/term-a\"; while [ ! -e \"$D/stop-a\" ]; do sleep 0.02; done",
    );
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

    let second = target.spawn_sh(
        &[
            "leader",
            "run",
            &election,
            "--value",
            "node-b:8080",
            "--timeout",
            "60s",
        ],
        "echo $BAKERY_FENCING_TOKEN",
    );
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
#[cfg(feature = "prometheus")]
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
    let holder = target.spawn_sh(
        &["--metrics-addr", &addr, "lock", "run", &lock],
        &until_stopped("m"),
    );
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
            let head = [
                "semaphore",
                "run",
                &name,
                "--permits",
                "2",
                "--timeout",
                "60s",
            ];
            target.spawn_sh(&head, script)
        })
        .collect();
    for child in children {
        assert_status(
            &wait_with_patience(child, "semaphore run"),
            0,
            "semaphore run",
        );
    }
    let counts = counts(&target, "counts");
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

/// A shell loop that waits until `[ CONDITION ]` holds, exiting 4 if it
/// does not within [`PATIENCE`] (at most: it must happen).
fn sh_wait_until(condition: &str) -> String {
    format!(
        "end=$(($(date +%s) + {})); while ! [ {condition} ]; do \
         [ \"$(date +%s)\" -lt \"$end\" ] || exit 4; sleep 0.02; done",
        PATIENCE.as_secs()
    )
}

/// How many files in the target's directory start with `prefix`.
fn markers(target: &Target, prefix: &str) -> usize {
    std::fs::read_dir(target.dir.path())
        .expect("read the scratch dir")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(prefix))
        })
        .count()
}

/// Waits (within [`PATIENCE`]) until `rwlock show NAME` shows `holders`
/// (their modes) holding and `queue` (the modes) waiting. Fails at once
/// if `child` (which should be among the waiting) exits instead.
fn wait_for_rwlock(
    target: &Target,
    name: &str,
    holders: &[&str],
    queue: &[&str],
    child: &mut Child,
) {
    let modes = |list: &serde_json::Value| -> Vec<String> {
        list.as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| item["mode"].as_str().unwrap_or("?").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let give_up = Instant::now() + PATIENCE;
    loop {
        let show = target.run(&["--json", "rwlock", "show", name]);
        assert_status(&show, 0, "rwlock show");
        let shown: serde_json::Value = serde_json::from_slice(&show.stdout).expect("json");
        let state = &shown["state"];
        let (held, waiting) = (modes(&state["holders"]), modes(&state["queue"]));
        if held == holders && waiting == queue {
            return;
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("a request that should wait ended ({status}) instead; held by {held:?}, waiting {waiting:?}");
        }
        assert!(
            Instant::now() < give_up,
            "never held by {holders:?} with {queue:?} waiting: held by {held:?}, waiting {waiting:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `bakery rwlock read|write NAME -- sh -c SCRIPT`, waiting up to 60 s.
fn rwlock_run(target: &Target, mode: &str, name: &str, script: &str) -> Child {
    target.spawn_sh(&["rwlock", mode, name, "--timeout", "60s"], script)
}

/// Readers share the lock: three reader processes each wait, inside, until
/// all three are inside (a lock that admits one at a time makes the first
/// wait in vain: exit 4), and count the readers inside then.
#[test]
fn rwlock_readers_hold_together_across_processes() {
    let target = Target::sqlite();
    let name = unique("rw-shared");
    // `r.PID` marks a reader inside (removed as it leaves), `arrived.PID`
    // one that got in (kept). No reader leaves, or counts, before all
    // three got in, so the first count is of all three.
    let reader = format!(
        "touch \"$D/r.$$\" \"$D/arrived.$$\"; {}; \
         ls \"$D\" | grep -c '^r\\.' >> \"$D/readers\"; rm \"$D/r.$$\"",
        sh_wait_until("$(ls \"$D\" | grep -c '^arrived\\.') -ge 3")
    );
    let children: Vec<Child> = (0..3)
        .map(|_| rwlock_run(&target, "read", &name, &reader))
        .collect();
    for child in children {
        let what = "rwlock read (exit 4: the other readers never got in beside it)";
        assert_status(&wait_with_patience(child, what), 0, what);
    }
    let readers = counts(&target, "readers");
    assert_eq!(readers.len(), 3, "{readers:?}");
    assert_eq!(
        readers.iter().max(),
        Some(&3),
        "the three readers never held the lock together: {readers:?}"
    );
    let show = target.run(&["rwlock", "show", &name]);
    assert_status(&show, 0, "rwlock show");
    assert_mentions(&show.stdout, "held by: 0 readers");
    assert_mentions(&show.stdout, "token:   3");
}

/// A writer never holds the lock with readers: it asks while two readers
/// hold it and waits until both have left; a reader that asks while the
/// writer holds it waits until the writer has left. Each side fails (exit
/// 3) if it sees the other side's marker while it holds the lock, at its
/// start or its end; the holders leave only when the test says so, once
/// the other request is seen waiting.
#[test]
fn rwlock_read_and_write_never_overlap_across_processes() {
    let target = Target::sqlite();
    let name = unique("rw");
    let reader = format!(
        "touch \"$D/r.$$\"; ls \"$D\" | grep -q '^w\\.' && exit 3; \
         {}; \
         ls \"$D\" | grep -q '^w\\.' && exit 3; rm \"$D/r.$$\"",
        sh_wait_until("-e \"$D/go-read\"")
    );
    let writer = format!(
        "touch \"$D/w.$$\"; ls \"$D\" | grep -q '^r\\.' && exit 3; touch \"$D/writer-in\"; \
         {}; \
         ls \"$D\" | grep -q '^r\\.' && exit 3; rm \"$D/w.$$\"; echo done >> \"$D/writer\"",
        sh_wait_until("-e \"$D/go-write\"")
    );
    let first: Vec<Child> = (0..2)
        .map(|_| rwlock_run(&target, "read", &name, &reader))
        .collect();
    let give_up = Instant::now() + PATIENCE;
    while markers(&target, "r.") < 2 {
        assert!(
            Instant::now() < give_up,
            "the two readers never held the lock together"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The writer asks while both readers hold the lock.
    let mut writer_child = rwlock_run(&target, "write", &name, &writer);
    wait_for_rwlock(
        &target,
        &name,
        &["read", "read"],
        &["write"],
        &mut writer_child,
    );
    std::fs::write(target.path("go-read"), "").expect("let the readers go");
    for child in first {
        assert_status(&wait_with_patience(child, "rwlock read"), 0, "rwlock read");
    }
    // A reader asks while the writer holds the lock.
    wait_for_file(&target.path("writer-in"));
    let mut late = rwlock_run(&target, "read", &name, &reader);
    wait_for_rwlock(&target, &name, &["write"], &["read"], &mut late);
    std::fs::write(target.path("go-write"), "").expect("let the writer go");
    assert_status(
        &wait_with_patience(writer_child, "rwlock write"),
        0,
        "rwlock write",
    );
    assert_status(
        &wait_with_patience(late, "late rwlock read"),
        0,
        "late rwlock read",
    );

    let writer_runs = std::fs::read_to_string(target.path("writer")).expect("writer ran");
    assert_eq!(writer_runs.lines().count(), 1);
    assert_eq!(markers(&target, "r."), 0, "a reader left its marker");
    let show = target.run(&["rwlock", "show", &name]);
    assert_status(&show, 0, "rwlock show");
    assert_mentions(&show.stdout, "held by: 0 readers");
    assert_mentions(&show.stdout, "token:   4");
}
