//! Clock faults on clients (issue 55, item 4): real `bakery` processes run
//! under libfaketime (Debian's `faketime`) whose clock jumps ±1 h or runs
//! at 0.5x / 2x, on the embedded SQLite file and on every server backend
//! the run provides (under CI=true a missing one, or a missing libfaketime,
//! fails). Each fault runs beside the others, on a lock or id name of its
//! own.
//!
//! Two kinds of fault, because libfaketime can fake either:
//! - **wall clock** (`FAKETIME_DONT_FAKE_MONOTONIC=1`): what an NTP step,
//!   `date -s` or a drifting `CLOCK_REALTIME` do. The kernel's
//!   `CLOCK_MONOTONIC` never jumps and is slewed by at most 500 ppm. bakery
//!   measures leases on the monotonic clock only, so nothing may change:
//!   no eviction of a live holder, eviction of a silent one only after a
//!   real lease, no duplicate id. (libfaketime also scales the timeouts of
//!   sleeps and `epoll_wait` by the rate, so a 0.5x process sleeps twice
//!   as long: its heartbeats come every 2/3 of a lease.)
//! - **whole clock** (monotonic too): a clock source gone wrong, which no
//!   lease measured on a local clock survives. Asserted: a holder at 0.5x
//!   keeps its lock; at 2x it keeps it, or (its own lease half a real one,
//!   its heartbeats slow on a loaded machine) gives it up itself, its
//!   command stopped first; a holder whose clock jumps forward gives the
//!   lock up itself; a holder whose clock jumps back stops renewing (its
//!   timers wait for its clock), is evicted after a real lease and still
//!   believes it holds — its fenced write is refused, and when its clock
//!   comes back it exits 1. A waiter at 0.5x evicts a silent holder after
//!   two real leases; a waiter at 2x, or whose clock jumps forward, evicts
//!   early: the negative controls, where the eviction check must and does
//!   fail, and fencing refuses the holder it wronged.
//!
//! Each faked clock of a lock fault or a snowflake rate, and each move of a
//! clock file, is probed: a bash process started in the same environment
//! (the same clock file) reports its wall clock against the real time
//! since boot; its offset and rate must be the fault's, so a fault that
//! never reached a process fails.
//!
//! Asserted for locks: a waiter runs only after the holder's command ended
//! (a marker file the holder's command removes as it ends), the holder's
//! fenced writes at start and end accepted, the waiter's token the next
//! one; a waiter that evicts a silent holder runs at least a lease after a
//! look at the lock that still saw an older heartbeat than the holder's
//! last (as in tests/kill.rs). For ids: unique, increasing per process, on
//! each worker id a new process only at a later tick; sequence ids unique
//! and increasing per process (a `seq next` reads no clock for its ids:
//! only its store client can meet the fault).
//!
//! The tests run one at a time, each on every target at once (a few
//! minutes in all with eight targets on two cores).
//!
//! With `BAKERY_RELIABILITY_LOG=FILE` each fault appends one JSON line in
//! the shape of the root crate's tests/common/report.rs (suite `clock`),
//! for docs/RELIABILITY.md.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use common::{bakery, lock_shown, on_every_target, text, Target};

/// Bound on anything that must happen (a failure, not a speed check).
const PATIENCE: Duration = Duration::from_secs(180);

/// The lease where the holders run on the real clock (waiters and jumps
/// under a fault): a heartbeat every 2 s, 4 s of margin.
const LEASE: Duration = Duration::from_secs(6);

/// The lease of holders whose clock runs at another rate. A 0.5x holder
/// beats every 2/3 of it (real: libfaketime scales its sleeps too), so
/// the margin for a loaded machine is a third of it; a 2x holder gives up
/// after half of it without an applied heartbeat, beating every sixth.
/// Long enough that a heartbeat taking several seconds (a Cassandra LWT
/// on a busy machine) stays inside both margins, 8 s each.
const HOLDER_LEASE: Duration = Duration::from_secs(24);

/// The lease in the negative controls: an eviction after half of it
/// must stand clear of a whole one even though each look at the lock (a
/// `bakery lock show` process) and the waiter's reads (every lease/4 of
/// its clock) are slow on a loaded machine.
const NC_LEASE: Duration = Duration::from_secs(30);

/// How long a holder under a fault keeps the lock with a waiter queued:
/// longer than [`HOLDER_LEASE`], so the waiter would evict a holder whose
/// heartbeats did not keep its lease.
const HOLD: Duration = Duration::from_secs(28);

/// The default epoch of `bakery snowflake` layouts (2026-01-01), in Unix ms.
const EPOCH_MS: u64 = 1_767_225_600_000;

const HOUR_MS: u64 = 3_600_000;

/// The tests of this file run one at a time (each runs its faults on
/// every target at once): many `bakery` processes at once on two cores
/// delay heartbeats past a lease, which would be load, not the clock. The
/// guard prints how long the test took.
fn one_at_a_time() -> OneAtATime {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    OneAtATime {
        _turn: ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner()),
        started: Instant::now(),
    }
}

struct OneAtATime {
    _turn: std::sync::MutexGuard<'static, ()>,
    started: Instant,
}

impl Drop for OneAtATime {
    fn drop(&mut self) {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        eprintln!("clock_faults: {test} took {:.1?}", self.started.elapsed());
    }
}

// ---------------------------------------------------------------- clocks

/// libfaketime's library. Missing: a failure under CI=true (the test
/// command installs it), else the clock tests are skipped with a note.
fn libfaketime() -> Option<PathBuf> {
    let found = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|dir| Path::new(dir).join("faketime/libfaketime.so.1"))
    .find(|path| path.exists());
    if found.is_none() {
        let why = "libfaketime is not installed: `apt-get install faketime` (scripts/backends.sh \
                   deps, which scripts/test.sh runs, installs it)";
        assert!(!bakery_testkit::in_ci(), "{why}");
        eprintln!("clock_faults: {why}; the clock fault tests did not run");
    }
    found
}

/// How one process's clock is faked.
#[derive(Debug, Clone)]
struct Clock {
    /// FAKETIME's value, or `None` for a timestamp file the test moves.
    spec: Option<&'static str>,
    /// The monotonic clock is faked too (else only the wall clock).
    monotonic: bool,
}

impl Clock {
    fn wall(spec: &'static str) -> Clock {
        Clock {
            spec: Some(spec),
            monotonic: false,
        }
    }

    fn whole(spec: &'static str) -> Clock {
        Clock {
            spec: Some(spec),
            monotonic: true,
        }
    }

    /// Moved by writing [`Moved::set`]'s file; starts at the real time.
    fn moved(monotonic: bool) -> Clock {
        Clock {
            spec: None,
            monotonic,
        }
    }
}

/// The timestamp file of a [`Clock::moved`] process.
struct Moved(PathBuf);

impl Moved {
    /// Move the process's clock: `+3600`, `-3600`, `+0` (read again
    /// within two seconds: FAKETIME_CACHE_DURATION=1 re-reads once the
    /// whole seconds since the last read exceed 1).
    fn set(&self, offset: &str) {
        // Written whole, then renamed: a reader never sees half of it.
        let tmp = self.0.with_extension("tmp");
        std::fs::write(&tmp, format!("{offset}\n")).expect("write the clock file");
        std::fs::rename(&tmp, &self.0).expect("move the clock file");
    }
}

/// `cmd` under libfaketime as `clock` says; the timestamp file for a
/// moved clock is `file`.
fn fake(cmd: &mut Command, library: &Path, clock: &Clock, file: &Path) -> Option<Moved> {
    if clock.spec.is_none() {
        Moved(file.to_owned()).set("+0");
    }
    // A clock at 2x halves the process's call timeouts too: a generous one
    // keeps a slow call on a loaded machine from failing a test about
    // leases, not call timeouts. (SQLite has no call timeout.)
    let uri = cmd
        .get_envs()
        .find(|(key, _)| *key == "BAKERY_URI")
        .and_then(|(_, value)| value?.to_str().map(str::to_owned));
    if let Some(uri) = uri.filter(|uri| !uri.starts_with("sqlite")) {
        let separator = if uri.contains('?') { '&' } else { '?' };
        cmd.env("BAKERY_URI", format!("{uri}{separator}timeout_ms=30000"));
    }
    fake_env(cmd, library, clock, file)
}

/// [`fake`] without setting a moved clock's file: for a probe of a clock
/// already moved.
fn fake_env(cmd: &mut Command, library: &Path, clock: &Clock, file: &Path) -> Option<Moved> {
    cmd.env("LD_PRELOAD", library)
        // x0.5 is read with the locale's decimal point.
        .env("LC_ALL", "C");
    if !clock.monotonic {
        cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    match clock.spec {
        Some(spec) => {
            cmd.env("FAKETIME", spec);
            None
        }
        None => {
            let moved = Moved(file.to_owned());
            // Read again at most two seconds after it moves (reading it
            // at every clock call slows a busy process down a lot).
            cmd.env_remove("FAKETIME")
                .env("FAKETIME_TIMESTAMP_FILE", file)
                .env("FAKETIME_CACHE_DURATION", "1");
            Some(moved)
        }
    }
}

/// Processes under a faked clock that report what it does: `date` (its
/// wall clock), then a sleep (4 s of its clock, 8 s if it runs fast) timed
/// on the real time since boot
/// (`/proc/uptime`, a file libfaketime leaves alone, read by bash
/// builtins): libfaketime scales a sleep by the clock's rate, as it does
/// a `bakery` process's heartbeat and lease timers.
struct Probe {
    child: Child,
    _group: Group,
    started_ns: u128,
    what: String,
    offset_s: f64,
    rate: f64,
    /// How long it sleeps on its clock.
    seconds: f64,
}

/// Starts a [`Probe`] of `clock` in the environment [`fake`] gives a
/// process (for a moved clock, the same file, as it now is), expecting
/// `offset_s` (its wall clock minus the real one, ±60 s) and `rate`.
fn probe(library: &Path, clock: &Clock, file: &Path, what: String, offset_s: f64) -> Probe {
    let rate = match clock.spec {
        Some(spec) => spec
            .split_once(" x")
            .map_or(1.0, |(_, rate)| rate.parse().expect("a rate")),
        None => 1.0,
    };
    // (Longer for a fast clock: starting `sleep` counts against its
    // shorter real time.)
    let seconds = if rate > 1.0 { 8.0 } else { 4.0 };
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        &format!(
            "f=$(date +%s.%N) && read u0 _ < /proc/uptime && sleep {seconds} && \
             read u1 _ < /proc/uptime && echo \"$f $u0 $u1\""
        ),
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    fake_env(&mut cmd, library, clock, file);
    let started_ns = unix_ns();
    let child = cmd.spawn().expect("spawn bash");
    Probe {
        _group: Group::of(&child),
        child,
        started_ns,
        what,
        offset_s,
        rate,
        seconds,
    }
}

impl Probe {
    /// Asserts the process saw the offset and rate expected; returns what
    /// it saw (offset s, rate).
    #[track_caller]
    fn check(self) -> (f64, f64) {
        let what = self.what;
        let out = finish(self.child, &format!("{what}: clock probe"));
        let said = text(&out.stdout);
        let read: Vec<f64> = said
            .split_whitespace()
            .map(|n| n.parse().unwrap_or(f64::NAN))
            .collect();
        assert!(
            out.status.success() && read.len() == 3 && read.iter().all(|n| n.is_finite()),
            "{what}: clock probe said {said:?} {}",
            text(&out.stderr)
        );
        let (wall, u0, u1) = (read[0], read[1], read[2]);
        // (`date` ran a moment after the start: within a second or so.)
        let offset = wall - self.started_ns as f64 / 1e9;
        // Its sleep, on the real clock; starting `sleep` adds to it, on a
        // loaded machine a second or more, hence the low bound. An
        // unfaked sleep still fails: it measures under 1x.
        let rate = self.seconds / (u1 - u0);
        assert!(
            (offset - self.offset_s).abs() < 60.0,
            "{what}: the faked clock is {offset:.1} s off the real one, not {} s: libfaketime did \
             not reach the process",
            self.offset_s
        );
        // (A moved clock's rate is the real one: its offset is the check.)
        assert!(
            self.rate == 1.0 || (rate > self.rate * 0.55 && rate < self.rate * 1.15),
            "{what}: the faked clock ran at {rate:.2}x, not {}x: libfaketime did not reach the \
             process",
            self.rate
        );
        (offset, rate)
    }
}

// ------------------------------------------------------------- processes

fn run(target: &Target, d: &Path, args: &[&str]) -> Output {
    bakery(target, d, args).output().expect("run bakery")
}

fn scratch(target: &Target, name: &str) -> PathBuf {
    let path = target.dir.path().join(name);
    std::fs::create_dir_all(&path).expect("scratch dir");
    path
}

fn pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).expect("pid"))
}

/// Kills a child's process group (its `bakery` and the command it runs)
/// when dropped, stopped or not: a test that fails midway leaves nothing
/// running, stopped or waiting for a clock.
struct Group(Pid);

impl Group {
    fn of(child: &Child) -> Group {
        Group(pid(child))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

/// Polls `check` every 100 ms (many checks start a `bakery` process: not
/// too often) until it gives a value; fails after [`PATIENCE`].
#[track_caller]
fn within<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    common::within(what, PATIENCE, Duration::from_millis(100), check)
}

/// Waits (within [`PATIENCE`]) for `child` to exit and reads its output;
/// its group is killed if it does not.
#[track_caller]
fn finish(child: Child, what: &str) -> Output {
    common::finish(child, what, PATIENCE)
}

/// A shell loop waiting for `[ CONDITION ]`, exiting 4 after [`PATIENCE`]
/// (so a command orphaned by a failed test ends by itself).
fn sh_wait_until(condition: &str) -> String {
    format!(
        "end=$(($(date +%s) + {})); while ! [ {condition} ]; do \
         [ \"$(date +%s)\" -lt \"$end\" ] || exit 4; sleep 0.02; done",
        PATIENCE.as_secs()
    )
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

// ------------------------------------------------------------------ locks

/// The holder's request id and heartbeat.
fn holder_beat(target: &Target, d: &Path, lock: &str) -> (String, u64) {
    let state = lock_shown(target, d, lock);
    let holder = &state["holder"];
    let id = holder["id"].as_str().unwrap_or("(none)").to_owned();
    (id, holder["beat"].as_u64().unwrap_or(0))
}

fn queued(target: &Target, d: &Path, lock: &str) -> usize {
    lock_shown(target, d, lock)["queue"]
        .as_array()
        .map_or(0, Vec::len)
}

/// The holder's command: writes the fenced value under its token, marks
/// itself running and ready, then waits for `$D/stop` (writes again under
/// its token: must be accepted, then marks `$D/ended`) or `$D/go` (the
/// waiter took over: writes its stale value, recording the status in
/// `$D/stale`). The running marker goes when it ends, on SIGTERM too
/// (`lock run` stops it when it learns the lock is lost).
fn holder_script(value: &str) -> String {
    format!(
        "trap 'rm -f \"$D/running\"; exit 143' TERM; \
         echo \"$BAKERY_FENCING_TOKEN\" > \"$D/holder-token\"; \
         \"$BAKERY\" fence write {value} held || exit 3; touch \"$D/running\" \"$D/ready\"; \
         {wait}; \
         if [ -e \"$D/go\" ]; then \
           \"$BAKERY\" fence write {value} stale 2> \"$D/stale-err\"; \
           echo $? > \"$D/stale.tmp\"; mv \"$D/stale.tmp\" \"$D/stale\"; \
         else \"$BAKERY\" fence write {value} held-to-the-end || exit 3; touch \"$D/ended\"; fi; \
         rm -f \"$D/running\"",
        wait = sh_wait_until("-e \"$D/stop\" -o -e \"$D/go\"")
    )
}

/// The waiter's command: when it was granted (real time), its token,
/// whether the holder's command was still running (an overlap of holders
/// that believe they hold), then its fenced write, then `$D/go`.
fn waiter_script(value: &str) -> String {
    format!(
        "date +%s%N > \"$D/granted\"; echo \"$BAKERY_FENCING_TOKEN\" > \"$D/waiter-token\"; \
         if [ -e \"$D/running\" ]; then touch \"$D/overlap\"; fi; \
         \"$BAKERY\" fence write {value} fresh || exit 3; touch \"$D/go\""
    )
}

/// `lock run LOCK --lease L --timeout PATIENCE -- env -u LD_PRELOAD sh -c
/// SCRIPT`: the command runs on the real clock whatever bakery's is.
fn lock_run(
    target: &Target,
    d: &Path,
    lock: &str,
    lease: Duration,
    script: &str,
    clock: Option<(&Path, &Clock)>,
) -> (Child, Option<Moved>) {
    lock_run_within(target, d, lock, lease, PATIENCE, script, clock)
}

/// [`lock_run`] with `--timeout TIMEOUT` (measured on bakery's clock).
fn lock_run_within(
    target: &Target,
    d: &Path,
    lock: &str,
    lease: Duration,
    timeout: Duration,
    script: &str,
    clock: Option<(&Path, &Clock)>,
) -> (Child, Option<Moved>) {
    let lease = format!("{}ms", lease.as_millis());
    let timeout = format!("{}s", timeout.as_secs());
    let args = [
        "lock",
        "run",
        lock,
        "--lease",
        &lease,
        "--timeout",
        &timeout,
        "--",
        "env",
        "-u",
        "LD_PRELOAD",
        "sh",
        "-c",
        script,
    ];
    let mut cmd = bakery(target, d, &args);
    let moved = clock.and_then(|(library, clock)| fake(&mut cmd, library, clock, &d.join("clock")));
    (cmd.spawn().expect("spawn bakery lock run"), moved)
}

fn read_number(path: &Path) -> u128 {
    let said = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    said.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: not a number: {said:?}", path.display()))
}

/// Early eviction: the waiter ran at `granted_ns` (real), before a lease
/// had passed since `beat_after_ns`, the start of a look at the lock that
/// still saw an older heartbeat than the holder's last. `None` if it
/// waited a whole lease.
fn early_eviction(beat_after_ns: u128, granted_ns: u128, lease: Duration) -> Option<String> {
    let waited = Duration::from_nanos(
        u64::try_from(granted_ns.saturating_sub(beat_after_ns)).unwrap_or(u64::MAX),
    );
    (waited < lease).then(|| {
        format!("the waiter took the lock {waited:.2?} after the holder's last heartbeat, before its lease of {lease:?}")
    })
}

/// Watches the holder's heartbeat move, then at once `silence`s the
/// holder (kill, stop, or its clock moved), and returns the start of the
/// last look that saw an older heartbeat than the holder's last one (real
/// ns): that last heartbeat was written after it, so a waiter that waits a
/// whole lease of silence is granted no sooner than a lease after it.
fn silenced(target: &Target, d: &Path, lock: &str, silence: impl FnOnce()) -> u128 {
    let start = unix_ns();
    let (holder, first) = holder_beat(target, d, lock);
    let mut looks: Vec<(u128, u64)> = vec![(start, first)];
    within("a heartbeat of the holder", || {
        let look = unix_ns();
        let (id, beat) = holder_beat(target, d, lock);
        assert_eq!(id, holder, "{}: the holder changed", target.label);
        looks.push((look, beat));
        (beat > first).then_some(())
    });
    silence();
    // Its last heartbeat may have come after the last look.
    let (_, last) = holder_beat(target, d, lock);
    looks
        .iter()
        .rev()
        .find(|(_, beat)| *beat < last)
        .map_or_else(
            || panic!("{}: no look before the last heartbeat {last}", target.label),
            |(look, _)| *look,
        )
}

/// What one lock fault did.
#[derive(Debug, Default)]
struct LockFigures {
    grants: usize,
    /// The holder's heartbeats while it held with a waiter queued; `None`
    /// when it gave the lock up (the row's beat may be the next holder's).
    beats: Option<u64>,
    /// Waiters that ran while the holder's command still ran: two holders
    /// that believed they held at once (the store confirmed one: the
    /// other's fenced writes are refused, asserted).
    believed_overlaps: u64,
    fenced_accepted: u64,
    stale_tried: u64,
    /// Real time from the look before the holder's last beat to the
    /// waiter's grant, where the holder went silent.
    evicted_after: Option<Duration>,
    verdict: String,
    /// What the probes of the faked clock saw: offset (s) and rate each.
    seen: String,
}

/// Checks `probes`, describing what they saw.
fn seen(probes: Vec<Probe>) -> String {
    let seen: Vec<String> = probes
        .into_iter()
        .map(|probe| {
            let (offset, rate) = probe.check();
            format!("{offset:+.0} s at {rate:.2}x")
        })
        .collect();
    format!("clock probe(s): {}", seen.join(", "))
}

/// One JSON line for docs/RELIABILITY.md, in the shape of the root
/// crate's tests/common/report.rs, if BAKERY_RELIABILITY_LOG is set.
fn record(backend: &str, setup: &str, fault: &str, row: serde_json::Value) {
    let Ok(path) = std::env::var("BAKERY_RELIABILITY_LOG") else {
        return;
    };
    let mut line = serde_json::json!({
        "suite": "clock",
        "backend": backend,
        "setup": setup,
        "fault": fault,
        "failed": 0,
        "unknown": 0,
        "lost_acked": null,
        "duplicate_ids": null,
        "stale_accepted": null,
        "sequence_clients": null,
        "lock_clients": null,
        "grants": null,
        "overlapping_grants": null,
        "fenced_accepted": null,
        "stale_tried": null,
    });
    if let (Some(line), Some(row)) = (line.as_object_mut(), row.as_object()) {
        for (key, value) in row {
            line.insert(key.clone(), value.clone());
        }
    }
    // One write of one line, appended: rows of faults running at once do
    // not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        panic!("cannot append to BAKERY_RELIABILITY_LOG={path}: {e}");
    }
}

fn record_lock(backend: &str, fault: &str, lease: Duration, figures: &LockFigures) {
    let verdict = match figures.believed_overlaps {
        0 => figures.verdict.clone(),
        n => format!(
            "{}; {n} time(s) two holders believed they held at once",
            figures.verdict
        ),
    };
    record(
        backend,
        &format!(
            "lock run --lease {}s, a holder and a waiter",
            lease.as_secs()
        ),
        fault,
        serde_json::json!({
            "ok": figures.grants,
            // (asserted: every stale fenced write was refused, so no two
            // grants were confirmed at once)
            "stale_accepted": 0,
            "lock_clients": 2,
            "grants": figures.grants,
            "overlapping_grants": 0,
            "fenced_accepted": figures.fenced_accepted,
            "stale_tried": figures.stale_tried,
            "verdict": verdict,
        }),
    );
}

/// A holder under `clock` holds the lock for [`HOLD`] while a real waiter
/// queues; `moves` (for a moved clock) are spread over the hold. The
/// waiter must run only after the holder's command ended, with the next
/// token; the holder's fenced writes at start and end are accepted.
fn holder_keeps_the_lock(
    target: &Target,
    library: &Path,
    tag: &str,
    clock: &Clock,
    moves: &[&str],
) -> LockFigures {
    let label = target.label;
    let d = scratch(target, tag);
    let lock = bakery_testkit::unique_name("clock-hold");
    let value = bakery_testkit::unique_name("clock-fenced");
    let (holder, moved) = lock_run(
        target,
        &d,
        &lock,
        HOLDER_LEASE,
        &holder_script(&value),
        Some((library, clock)),
    );
    let _holder_group = Group::of(&holder);
    let file = d.join("clock");
    // (A moved clock is probed after each move.)
    let mut probes: Vec<Probe> = clock
        .spec
        .map(|_| probe(library, clock, &file, format!("{label} {tag}"), 0.0))
        .into_iter()
        .collect();
    within(
        &format!("{label} {tag}: the holder's command started"),
        || d.join("ready").exists().then_some(()),
    );
    let token = read_number(&d.join("holder-token"));
    let (waiter, _) = lock_run(
        target,
        &d,
        &lock,
        HOLDER_LEASE,
        &waiter_script(&value),
        None,
    );
    let _waiter_group = Group::of(&waiter);
    within(&format!("{label} {tag}: the waiter queued"), || {
        (queued(target, &d, &lock) == 1).then_some(())
    });
    let (holder_id, first_beat) = holder_beat(target, &d, &lock);
    let started = Instant::now();
    let step = HOLD / u32::try_from(moves.len() + 1).expect("a few moves");
    for offset in moves {
        std::thread::sleep(step);
        moved.as_ref().expect("a moved clock").set(offset);
        let at: f64 = offset.parse().expect("an offset");
        probes.push(probe(
            library,
            clock,
            &file,
            format!("{label} {tag} {offset}"),
            at,
        ));
    }
    std::thread::sleep(HOLD.saturating_sub(started.elapsed()));
    let seen = seen(probes);
    let (last_id, last_beat) = holder_beat(target, &d, &lock);
    // A holder whose monotonic clock runs at 2x counts its own lease out
    // in half a real one: when its heartbeats are slow to apply (a loaded
    // machine) it gives the lock up itself, sooner than it must. Allowed,
    // if it says so and its command had stopped before the waiter ran. The
    // waiter may still be counting the lease out when the hold ends: the
    // holder's exit says whether it gave up.
    let fast = clock.monotonic && clock.spec == Some("+0 x2");
    let granted_early = d.join("granted").exists();
    assert!(
        !granted_early || fast,
        "{label} {tag}: the waiter took the lock while the holder held it"
    );
    let stopped_ns = unix_ns();
    std::fs::write(d.join("stop"), "").expect("stop the holder");
    let held = finish(holder, &format!("{label} {tag}: holder"));
    let gave_up = !held.status.success();
    assert!(
        !gave_up || fast,
        "{label} {tag}: the holder lost its lock ({:?}): {}",
        held.status,
        text(&held.stderr)
    );
    if gave_up {
        // Its own lease ran out, not an eviction (the waiter's lease is
        // twice as long in real time).
        assert_eq!(held.status.code(), Some(1), "{label} {tag}: the holder");
        bakery_testkit::assert_mentions(
            text(&held.stderr),
            &["lost", "heartbeats failed for a whole lease"],
        );
    }
    assert!(
        !granted_early || gave_up,
        "{label} {tag}: the waiter took the lock while the holder held it (the holder ended well)"
    );
    let next = finish(waiter, &format!("{label} {tag}: waiter"));
    assert!(
        next.status.success(),
        "{label} {tag}: the waiter: {:?} {}",
        next.status,
        text(&next.stderr)
    );
    let granted_ns = read_number(&d.join("granted"));
    assert!(
        gave_up || granted_ns >= stopped_ns,
        "{label} {tag}: the waiter ran before the holder was told to stop"
    );
    assert!(
        !d.join("overlap").exists(),
        "{label} {tag}: the waiter ran while the holder's command still ran"
    );
    assert_eq!(
        read_number(&d.join("waiter-token")),
        token + 1,
        "{label} {tag}: the waiter's token"
    );
    let read = run(target, &d, &["fence", "read", &value]);
    assert_eq!(text(&read.stdout).trim(), "fresh", "{label} {tag}");
    LockFigures {
        grants: 2,
        beats: (!gave_up && last_id == holder_id).then(|| last_beat.saturating_sub(first_beat)),
        // The holder's first write, its last if it made it (it may have
        // given up after), and the waiter's.
        fenced_accepted: 2 + u64::from(d.join("ended").exists()),
        verdict: if gave_up {
            "ok: the holder (its lease half a real one) gave the lock up itself, stopping its \
             command first; waiter granted after with the next token"
                .into()
        } else {
            "ok: held to the end, no eviction, waiter granted after it with the next token".into()
        },
        seen,
        ..LockFigures::default()
    }
}

/// The holder's heartbeats in [`HOLD`] on a real clock: one every lease/3.
fn real_beats() -> f64 {
    HOLD.as_secs_f64() / (HOLDER_LEASE.as_secs_f64() / 3.0)
}

#[test]
fn a_holder_whose_clock_jumps_or_drifts_keeps_its_lock_and_no_one_overlaps() {
    let _one = one_at_a_time();
    let Some(library) = libfaketime() else { return };
    let faults: [(&str, &str, Clock, &[&str]); 5] = [
        (
            "h-wall-jumps",
            "holder: wall clock +1 h, then -1 h",
            Clock::moved(false),
            &["+3600", "-3600"],
        ),
        (
            "h-wall-half",
            "holder: wall clock at 0.5x",
            Clock::wall("+0 x0.5"),
            &[],
        ),
        (
            "h-wall-double",
            "holder: wall clock at 2x",
            Clock::wall("+0 x2"),
            &[],
        ),
        (
            "h-whole-half",
            "holder: whole clock (monotonic too) at 0.5x",
            Clock::whole("+0 x0.5"),
            &[],
        ),
        (
            "h-whole-double",
            "holder: whole clock (monotonic too) at 2x",
            Clock::whole("+0 x2"),
            &[],
        ),
    ];
    on_every_target("clock_faults", |target| {
        let results = run_faults(&faults, |tag, clock, moves| {
            holder_keeps_the_lock(target, &library, tag, clock, moves)
        });
        for (fault, figures) in &results {
            // The rate reached the process: its heartbeats (every lease/3
            // of its monotonic clock) came twice as often. (Not a bound on
            // the slow ones: a heartbeat that meets the waiter's write
            // beats again at once, so the count is only a lower bound.)
            // A holder that gave the lock up early has no count to check;
            // its probe showed the rate reached it.
            let real = real_beats();
            if let (true, Some(beats)) = (fault.contains("monotonic too) at 2x"), figures.beats) {
                assert!(
                    beats as f64 >= real * 1.4,
                    "{}: {fault}: {beats} beats",
                    target.label
                );
            }
            let beats = figures
                .beats
                .map_or_else(|| "(gave up)".to_owned(), |beats| beats.to_string());
            eprintln!(
                "clock[{}] {fault}: held {HOLD:?} with a waiter queued, {beats} heartbeats (real clock: \
                 {real:.0}); {}; {}",
                target.label, figures.verdict, figures.seen
            );
            record_lock(target.label, fault, HOLDER_LEASE, figures);
        }
    });
}

/// What a waiter under `clock` does when the real holder goes silent
/// (`bakery` SIGKILLed right after a heartbeat, its command left running):
/// the figures, with `evicted_after` and any early eviction in the
/// verdict. The orphaned command's stale write is refused either way.
fn waiter_takes_over(
    target: &Target,
    library: &Path,
    tag: &str,
    clock: &Clock,
    moves: &[&str],
    lease: Duration,
) -> (LockFigures, Option<String>) {
    let label = target.label;
    let d = scratch(target, tag);
    let lock = bakery_testkit::unique_name("clock-wait");
    let value = bakery_testkit::unique_name("clock-fenced");
    let (holder, _) = lock_run(target, &d, &lock, lease, &holder_script(&value), None);
    let _holder_group = Group::of(&holder);
    within(
        &format!("{label} {tag}: the holder's command started"),
        || d.join("ready").exists().then_some(()),
    );
    let token = read_number(&d.join("holder-token"));
    let (waiter, moved) = lock_run(
        target,
        &d,
        &lock,
        lease,
        &waiter_script(&value),
        Some((library, clock)),
    );
    let _waiter_group = Group::of(&waiter);
    let file = d.join("clock");
    let mut probes: Vec<Probe> = clock
        .spec
        .map(|_| probe(library, clock, &file, format!("{label} {tag}"), 0.0))
        .into_iter()
        .collect();
    within(&format!("{label} {tag}: the waiter queued"), || {
        (queued(target, &d, &lock) == 1).then_some(())
    });
    let beat_after_ns = silenced(target, &d, &lock, || {
        kill(pid(&holder), Signal::SIGKILL).expect("kill -9 the holder's bakery");
    });
    let mut holder = holder;
    let _ = holder.wait();
    for offset in moves {
        moved.as_ref().expect("a moved clock").set(offset);
        let at: f64 = offset.parse().expect("an offset");
        probes.push(probe(
            library,
            clock,
            &file,
            format!("{label} {tag} {offset}"),
            at,
        ));
    }
    let next = finish(waiter, &format!("{label} {tag}: waiter"));
    assert!(
        next.status.success(),
        "{label} {tag}: the waiter: {:?} {}",
        next.status,
        text(&next.stderr)
    );
    let granted_ns = read_number(&d.join("granted"));
    assert_eq!(
        read_number(&d.join("waiter-token")),
        token + 1,
        "{label} {tag}: the waiter's token"
    );
    // The orphaned command (the dead holder's) writes with its token.
    within(&format!("{label} {tag}: the orphan's stale write"), || {
        d.join("stale").exists().then_some(())
    });
    let stale = read_number(&d.join("stale"));
    let _ = killpg(pid(&holder), Signal::SIGKILL);
    let err = std::fs::read_to_string(d.join("stale-err")).unwrap_or_default();
    assert_eq!(
        stale, 1,
        "{label} {tag}: the stale fenced write was accepted: {err}"
    );
    assert!(err.contains("rejected"), "{label} {tag}: {err}");
    let read = run(target, &d, &["fence", "read", &value]);
    assert_eq!(text(&read.stdout).trim(), "fresh", "{label} {tag}");
    let early = early_eviction(beat_after_ns, granted_ns, lease);
    let evicted_after = Duration::from_nanos(
        u64::try_from(granted_ns.saturating_sub(beat_after_ns)).unwrap_or(u64::MAX),
    );
    let figures = LockFigures {
        grants: 2,
        believed_overlaps: u64::from(d.join("overlap").exists()),
        fenced_accepted: 2,
        stale_tried: 1,
        evicted_after: Some(evicted_after),
        seen: seen(probes),
        ..LockFigures::default()
    };
    (figures, early)
}

#[test]
fn a_waiter_whose_wall_clock_jumps_or_drifts_evicts_a_silent_holder_only_after_a_real_lease() {
    let _one = one_at_a_time();
    let Some(library) = libfaketime() else { return };
    let faults: [(&str, &str, Clock, &[&str]); 5] = [
        (
            "w-wall-forward",
            "waiter: wall clock +1 h while it waits",
            Clock::moved(false),
            &["+3600"],
        ),
        (
            "w-wall-back",
            "waiter: wall clock -1 h while it waits",
            Clock::moved(false),
            &["-3600"],
        ),
        (
            "w-wall-half",
            "waiter: wall clock at 0.5x",
            Clock::wall("+0 x0.5"),
            &[],
        ),
        (
            "w-wall-double",
            "waiter: wall clock at 2x",
            Clock::wall("+0 x2"),
            &[],
        ),
        (
            "w-whole-half",
            "waiter: whole clock (monotonic too) at 0.5x",
            Clock::whole("+0 x0.5"),
            &[],
        ),
    ];
    on_every_target("clock_faults", |target| {
        let results = run_faults(&faults, |tag, clock, moves| {
            waiter_takes_over(target, &library, tag, clock, moves, LEASE)
        });
        for (fault, (mut figures, early)) in results {
            if let Some(early) = early {
                panic!("{}: {fault}: {early}", target.label);
            }
            let after = figures.evicted_after.unwrap_or_default();
            if fault.contains("monotonic too) at 0.5x") {
                // The rate reached the waiter: a lease of its clock is two.
                assert!(
                    after >= LEASE * 3 / 2,
                    "{}: {fault}: evicted after {after:?}: the slow clock did not count",
                    target.label
                );
            }
            figures.verdict = format!(
                "ok: silent holder evicted {:.1} s after its last heartbeat (lease {} s); its stale fenced write refused",
                after.as_secs_f64(),
                LEASE.as_secs()
            );
            eprintln!(
                "clock[{}] {fault}: {}; {}",
                target.label, figures.verdict, figures.seen
            );
            record_lock(target.label, fault, LEASE, &figures);
        }
    });
}

/// Runs each fault of `faults` at once, a thread each; the results in
/// order, a fault's panic passed on.
fn run_faults<T: Send>(
    faults: &[(&str, &'static str, Clock, &[&str])],
    each: impl Fn(&str, &Clock, &[&str]) -> T + Sync,
) -> Vec<(&'static str, T)> {
    std::thread::scope(|scope| {
        let each = &each;
        let running: Vec<_> = faults
            .iter()
            .map(|(tag, fault, clock, moves)| {
                (*fault, scope.spawn(move || each(tag, clock, moves)))
            })
            .collect();
        running
            .into_iter()
            .map(|(fault, handle)| {
                (
                    fault,
                    handle
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                )
            })
            .collect()
    })
}

/// A holder whose whole clock (monotonic too) jumps by `offset` right
/// after a heartbeat, a real waiter queued. Forward: the holder sees its
/// lease over and gives the lock up itself (stops its command); the waiter
/// still waits a real lease of silence. Back: the holder's timers wait for
/// its clock, so it stops renewing and is evicted after a real lease while
/// it still believes it holds; its command's fenced write after the
/// waiter's is refused; its clock set right again, it learns it lost.
fn holder_clock_jumps(target: &Target, library: &Path, tag: &str, offset: &str) -> LockFigures {
    let label = target.label;
    let d = scratch(target, tag);
    let lock = bakery_testkit::unique_name("clock-jump");
    let value = bakery_testkit::unique_name("clock-fenced");
    let clock = Clock::moved(true);
    let (holder, moved) = lock_run(
        target,
        &d,
        &lock,
        LEASE,
        &holder_script(&value),
        Some((library, &clock)),
    );
    let _holder_group = Group::of(&holder);
    let moved = moved.expect("a moved clock");
    within(
        &format!("{label} {tag}: the holder's command started"),
        || d.join("ready").exists().then_some(()),
    );
    let token = read_number(&d.join("holder-token"));
    let (waiter, _) = lock_run(target, &d, &lock, LEASE, &waiter_script(&value), None);
    let _waiter_group = Group::of(&waiter);
    within(&format!("{label} {tag}: the waiter queued"), || {
        (queued(target, &d, &lock) == 1).then_some(())
    });
    let beat_after_ns = silenced(target, &d, &lock, || moved.set(offset));
    let next = finish(waiter, &format!("{label} {tag}: waiter"));
    assert!(
        next.status.success(),
        "{label} {tag}: the waiter: {:?} {}",
        next.status,
        text(&next.stderr)
    );
    let granted_ns = read_number(&d.join("granted"));
    let back = offset.starts_with('-');
    // (Forward, the holder stops its command and may give the lock back
    // itself as it exits: the waiter may come sooner than a lease, but
    // never while the command runs — the overlap check below.)
    if back {
        if let Some(early) = early_eviction(beat_after_ns, granted_ns, LEASE) {
            panic!("{label} {tag}: {early}");
        }
    }
    assert_eq!(
        read_number(&d.join("waiter-token")),
        token + 1,
        "{label} {tag}: the waiter's token"
    );
    let believed = d.join("overlap").exists();
    let mut stale_tried = 0;
    if back {
        // Frozen: its command still runs and writes with its old token.
        assert!(believed, "{label} {tag}: the holder's command had ended");
        within(&format!("{label} {tag}: the holder's stale write"), || {
            d.join("stale").exists().then_some(())
        });
        let err = std::fs::read_to_string(d.join("stale-err")).unwrap_or_default();
        assert_eq!(
            read_number(&d.join("stale")),
            1,
            "{label} {tag}: the stale fenced write was accepted: {err}"
        );
        assert!(err.contains("rejected"), "{label} {tag}: {err}");
        stale_tried = 1;
        moved.set("+0");
    } else {
        assert!(
            !believed,
            "{label} {tag}: the waiter ran while the holder's command still ran"
        );
    }
    let old = finish(holder, &format!("{label} {tag}: holder"));
    assert_eq!(
        old.status.code(),
        Some(1),
        "{label} {tag}: the holder: {}",
        text(&old.stderr)
    );
    // It says it lost the lock; or, when its clock came back (an hour
    // forward at once) with a store call in flight, that the call failed
    // or its outcome is unknown: the client's own timeouts, on the same
    // clock, fired at once. Never success.
    let said = text(&old.stderr);
    assert!(
        ["lost", "unknown outcome", "unavailable"]
            .iter()
            .any(|word| said.contains(word)),
        "{label} {tag}: the holder did not say it lost the lock: {said}"
    );
    let read = run(target, &d, &["fence", "read", &value]);
    assert_eq!(text(&read.stdout).trim(), "fresh", "{label} {tag}");
    let after = Duration::from_nanos(
        u64::try_from(granted_ns.saturating_sub(beat_after_ns)).unwrap_or(u64::MAX),
    );
    let verdict = if believed {
        format!(
            "ok: holder stopped renewing, evicted {:.1} s after its last heartbeat, still believed \
             it held; its stale fenced write refused; 0 confirmed overlaps",
            after.as_secs_f64()
        )
    } else {
        format!(
            "ok: holder gave the lock up itself at once; waiter granted {:.1} s after its last \
             heartbeat",
            after.as_secs_f64()
        )
    };
    LockFigures {
        grants: 2,
        believed_overlaps: u64::from(believed),
        fenced_accepted: 2,
        stale_tried,
        evicted_after: Some(after),
        verdict,
        ..LockFigures::default()
    }
}

#[test]
fn a_holder_whose_monotonic_clock_jumps_gives_up_or_is_fenced_off() {
    let _one = one_at_a_time();
    let Some(library) = libfaketime() else { return };
    let faults: [(&str, &str, Clock, &[&str]); 2] = [
        (
            "h-whole-forward",
            "holder: whole clock (monotonic too) +1 h",
            Clock::moved(true),
            &["+3600"],
        ),
        (
            "h-whole-back",
            "holder: whole clock (monotonic too) -1 h",
            Clock::moved(true),
            &["-3600"],
        ),
    ];
    on_every_target("clock_faults", |target| {
        let results = run_faults(&faults, |tag, _, moves| {
            holder_clock_jumps(target, &library, tag, moves[0])
        });
        for (fault, figures) in results {
            eprintln!("clock[{}] {fault}: {}", target.label, figures.verdict);
            record_lock(target.label, fault, LEASE, &figures);
        }
    });
}

/// A waiter whose whole clock jumps an hour forward once it has seen the
/// last heartbeat of a holder paused a moment ago (its `bakery`
/// SIGSTOPped, its command running on): the heartbeat has stood "for an
/// hour" on the waiter's clock, so it evicts at once. (A holder still
/// renewing is evicted only if its heartbeat did not move between the
/// waiter's last read before the jump and its first after: with beats
/// every lease/3 and reads every lease/4, seldom; hence the pause.)
/// The holder's command, running on, sees the waiter's write and writes
/// with its own token: refused. Returns the figures and the early
/// eviction found (the test wants one).
fn waiter_jumps_on_a_paused_holder(
    target: &Target,
    library: &Path,
    tag: &str,
) -> (LockFigures, Option<String>) {
    let label = target.label;
    let d = scratch(target, tag);
    let lock = bakery_testkit::unique_name("clock-pause");
    let value = bakery_testkit::unique_name("clock-fenced");
    let (holder, _) = lock_run(target, &d, &lock, NC_LEASE, &holder_script(&value), None);
    // (Killed, stopped or not, if the test fails midway.)
    let _holder_group = Group::of(&holder);
    within(
        &format!("{label} {tag}: the holder's command started"),
        || d.join("ready").exists().then_some(()),
    );
    let token = read_number(&d.join("holder-token"));
    let clock = Clock::moved(true);
    // (A --timeout shorter than the jump would fire first: the waiter,
    // its clock an hour on, would give up instead of evicting.)
    let (waiter, moved) = lock_run_within(
        target,
        &d,
        &lock,
        NC_LEASE,
        Duration::from_secs(7200),
        &waiter_script(&value),
        Some((library, &clock)),
    );
    let _waiter_group = Group::of(&waiter);
    within(&format!("{label} {tag}: the waiter queued"), || {
        (queued(target, &d, &lock) == 1).then_some(())
    });
    let beat_after_ns = silenced(target, &d, &lock, || {
        kill(pid(&holder), Signal::SIGSTOP).expect("kill -STOP the holder's bakery");
    });
    // The waiter reads the row every lease/4 of its clock: by now it has
    // seen the last heartbeat (half a period of slack for a slow read).
    std::thread::sleep(NC_LEASE / 4 * 3 / 2);
    moved.expect("a moved clock").set("+3600");
    let next = finish(waiter, &format!("{label} {tag}: waiter"));
    // The wronged holder's command (its `bakery` still stopped, so nothing
    // stops the command) sees the waiter's `$D/go` and writes with its
    // token: refused.
    let give_up = Instant::now() + Duration::from_secs(60);
    while !d.join("stale").exists() {
        assert!(
            Instant::now() < give_up,
            "{label} {tag}: the wronged holder's command wrote nothing within 60 s of the waiter's \
             write (its command running: {}; its write said: {:?})",
            d.join("running").exists(),
            std::fs::read_to_string(d.join("stale-err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = std::fs::read_to_string(d.join("stale-err")).unwrap_or_default();
    assert_eq!(
        read_number(&d.join("stale")),
        1,
        "{label} {tag}: the wronged holder's fenced write was accepted: {err}"
    );
    assert!(err.contains("rejected"), "{label} {tag}: {err}");
    kill(pid(&holder), Signal::SIGCONT).expect("kill -CONT the holder's bakery");
    assert!(
        next.status.success(),
        "{label} {tag}: the waiter: {:?} {}",
        next.status,
        text(&next.stderr)
    );
    let granted_ns = read_number(&d.join("granted"));
    assert_eq!(
        read_number(&d.join("waiter-token")),
        token + 1,
        "{label} {tag}"
    );
    // Let go, its `bakery` learns it lost the lock.
    let old = finish(holder, &format!("{label} {tag}: holder"));
    assert_eq!(
        old.status.code(),
        Some(1),
        "{label} {tag}: the evicted holder: {}",
        text(&old.stderr)
    );
    bakery_testkit::assert_mentions(text(&old.stderr), &["lost"]);
    let read = run(target, &d, &["fence", "read", &value]);
    assert_eq!(text(&read.stdout).trim(), "fresh", "{label} {tag}");
    let figures = LockFigures {
        grants: 2,
        believed_overlaps: u64::from(d.join("overlap").exists()),
        fenced_accepted: 2,
        stale_tried: 1,
        evicted_after: Some(Duration::from_nanos(
            u64::try_from(granted_ns.saturating_sub(beat_after_ns)).unwrap_or(u64::MAX),
        )),
        ..LockFigures::default()
    };
    (figures, early_eviction(beat_after_ns, granted_ns, NC_LEASE))
}

/// Negative controls: a waiter whose monotonic clock runs at 2x, or jumps
/// an hour forward, evicts a silent holder early — after about half a
/// lease, or at once. The eviction check must flag both (so it
/// would catch an early eviction by bakery), and fencing must refuse the
/// holder that was wronged. No lease measured on the observer's own clock
/// survives such a clock; the kernel's CLOCK_MONOTONIC never jumps and is
/// slewed by at most 500 ppm.
#[test]
fn negative_control_a_waiter_whose_monotonic_clock_runs_fast_or_jumps_evicts_early() {
    let _one = one_at_a_time();
    let Some(library) = libfaketime() else { return };
    let faults: [(&str, &str, Clock, &[&str]); 2] = [
        (
            "n-whole-double",
            "negative control: waiter's whole clock (monotonic too) at 2x",
            Clock::whole("+0 x2"),
            &[],
        ),
        (
            "n-whole-forward",
            "negative control: waiter's whole clock (monotonic too) +1 h, holder paused",
            Clock::moved(true),
            &[],
        ),
    ];
    on_every_target("clock_faults", |target| {
        let results = run_faults(&faults, |tag, clock, moves| {
            if tag == "n-whole-forward" {
                waiter_jumps_on_a_paused_holder(target, &library, tag)
            } else {
                waiter_takes_over(target, &library, tag, clock, moves, NC_LEASE)
            }
        });
        for (fault, (mut figures, early)) in results {
            let Some(early) = early else {
                panic!(
                    "{}: {fault}: the eviction check found nothing wrong (waited {:?}): it would \
                     not catch an early eviction",
                    target.label, figures.evicted_after
                );
            };
            figures.verdict = format!(
                "negative control: caught ({early}); {} stale fenced write(s) refused, 0 accepted",
                figures.stale_tried
            );
            eprintln!("clock[{}] {fault}: {}", target.label, figures.verdict);
            record_lock(target.label, fault, NC_LEASE, &figures);
        }
    });
}

/// The eviction check itself: a grant a lease after the look passes, one
/// earlier is flagged.
#[test]
fn early_eviction_flags_a_grant_within_the_lease() {
    let lease = Duration::from_secs(4);
    let look = 1_000_000_000_000u128;
    assert!(early_eviction(look, look + 4_000_000_000, lease).is_none());
    assert!(early_eviction(look, look + 3_999_000_000, lease).is_some());
    assert!(early_eviction(look, look - 1, lease).is_some());
}

// -------------------------------------------------------------------- ids

/// A snowflake layout's worker and sequence bits (`--worker-bits`,
/// `--sequence-bits`), the rest bakery's defaults.
#[derive(Clone, Copy)]
struct Bits {
    worker: u32,
    sequence: u32,
}

impl Bits {
    fn args(self) -> Vec<String> {
        vec![
            "--worker-bits".into(),
            self.worker.to_string(),
            "--sequence-bits".into(),
            self.sequence.to_string(),
        ]
    }

    /// (tick, worker) of `id`.
    fn parts(self, id: u64) -> (u64, u64) {
        let worker = (id >> self.sequence) & ((1 << self.worker) - 1);
        (id >> (self.sequence + self.worker), worker)
    }
}

fn duplicates(per_process: &[Vec<u64>]) -> u64 {
    let mut seen = HashSet::new();
    per_process
        .iter()
        .flatten()
        .filter(|&&id| !seen.insert(id))
        .count() as u64
}

fn parse_ids(bytes: &[u8]) -> Vec<u64> {
    // A process ended mid-line leaves half a line: no id.
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(last) => &bytes[..=last],
        None => &[][..],
    };
    text(complete)
        .lines()
        .map(|line| line.trim().parse().expect("an id"))
        .collect()
}

/// The first line `stdout` prints (an id; fails after [`PATIENCE`]
/// without one), then the rest, read in the background.
fn first_then_rest(stdout: ChildStdout) -> (u64, std::thread::JoinHandle<Vec<u64>>) {
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let rest = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        let _ = lines.read_line(&mut first);
        let _ = first_tx.send(first);
        let mut bytes = Vec::new();
        let _ = lines.read_to_end(&mut bytes);
        parse_ids(&bytes)
    });
    let first = first_rx
        .recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("no first id within {PATIENCE:?}"));
    let id = first
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not an id: {first:?}"));
    (id, rest)
}

fn snowflake_args(name: &str, count: u64, bits: Bits, more: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["snowflake", "next", name, "--count"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(count.to_string());
    args.extend(bits.args());
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

fn spawn_ids(
    target: &Target,
    d: &Path,
    args: &[String],
    clock: Option<(&Path, &Clock, &str)>,
) -> (Child, Option<Moved>) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = bakery(target, d, &args);
    let moved =
        clock.and_then(|(library, clock, file)| fake(&mut cmd, library, clock, &d.join(file)));
    (cmd.spawn().expect("spawn bakery"), moved)
}

/// A snowflake process whose wall clock jumps by `offset` after its first
/// id: back, it ends with an error (the worker id's last tick is ahead)
/// and a later real process goes on above its ids; forward, it goes on an
/// hour ahead, and a later real process on the same worker id refuses (its
/// clock is an hour behind the worker id's last tick) rather than reuse a
/// timestamp.
fn snowflake_jump(target: &Target, library: &Path, tag: &str, offset: &str) -> (usize, String) {
    let label = target.label;
    let d = scratch(target, tag);
    let name = bakery_testkit::unique_name("clock-sf");
    let bits = Bits {
        worker: 10,
        sequence: 6,
    };
    let back = offset.starts_with('-');
    // 64 ids a ms, printed 65,536 at a time (the first after 1 s): the
    // clock jumps during the 3 s after the first (the move takes up to
    // 2 s to be read).
    let count = if back { 10_000_000 } else { 4 * 65_536 };
    let clock = Clock::moved(false);
    let (mut child, moved) = spawn_ids(
        target,
        &d,
        &snowflake_args(&name, count, bits, &["--max-clock-wait", "1s"]),
        Some((library, &clock, "clock")),
    );
    let _group = Group::of(&child);
    let (first, rest) = first_then_rest(child.stdout.take().expect("stdout"));
    moved.expect("a moved clock").set(offset);
    let out = finish(child, &format!("{label} {tag}"));
    let mut ids = vec![first];
    ids.extend(rest.join().expect("reader"));
    if back {
        assert_eq!(
            out.status.code(),
            Some(1),
            "{label} {tag}: {}",
            text(&out.stderr)
        );
        bakery_testkit::assert_mentions(text(&out.stderr), &["behind"]);
    } else {
        assert!(out.status.success(), "{label} {tag}: {}", text(&out.stderr));
        assert_eq!(ids.len() as u64, count, "{label} {tag}: every id printed");
        // The jump reached the process: its last ids are an hour ahead.
        let (first_tick, _) = bits.parts(first);
        let (last_tick, _) = bits.parts(*ids.last().expect("ids"));
        assert!(
            last_tick >= first_tick + HOUR_MS,
            "{label} {tag}: ticks {first_tick}..{last_tick}: the clock never jumped"
        );
    }
    if let Some(problem) = common::id_problem(|id| bits.parts(id), &[ids.clone()]) {
        panic!("{label} {tag}: {problem}");
    }
    // A later process on the real clock, on the same worker id (the lowest
    // free one).
    let later = run(
        target,
        &d,
        &snowflake_args(&name, 1000, bits, &["--max-clock-wait", "1s"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let later_ids = parse_ids(&later.stdout);
    let after = if later.status.success() {
        if let Some(problem) =
            common::id_problem(|id| bits.parts(id), &[ids.clone(), later_ids.clone()])
        {
            panic!("{label} {tag}: then a real process: {problem}");
        }
        format!(
            "a later real-clock process issued {} ids, checked with them",
            later_ids.len()
        )
    } else {
        assert_eq!(
            later.status.code(),
            Some(1),
            "{label} {tag}: {}",
            text(&later.stderr)
        );
        bakery_testkit::assert_mentions(text(&later.stderr), &["behind"]);
        assert!(
            later_ids.is_empty(),
            "{label} {tag}: printed ids and failed"
        );
        assert!(
            !back,
            "{label} {tag}: a real clock refused after a clock that went back"
        );
        "a later real-clock process refused its worker id (its clock 1 h behind the id's last \
         tick), printing nothing"
            .to_string()
    };
    let ended = if back {
        "it stopped with an error (clock behind the last tick)"
    } else {
        "it went on an hour ahead"
    };
    let total = ids.len() + later_ids.len();
    (
        total,
        format!("ok: {} ids, 0 duplicates; {ended}; {after}", ids.len()),
    )
}

/// Three processes on two worker ids, one with a fast and one with a slow
/// clock (`monotonic`: the monotonic clock too) holding both, the third on
/// the real clock waiting for a worker id and taking over the first one
/// given back. Ids unique, increasing per process, worker ids never
/// shared: the third starts above the tick its predecessor last used.
fn snowflake_rates(target: &Target, library: &Path, tag: &str, monotonic: bool) -> (usize, String) {
    const COUNT: usize = 16_000;
    let label = target.label;
    let d = scratch(target, tag);
    let name = bakery_testkit::unique_name("clock-sf-rate");
    let bits = Bits {
        worker: 1,
        sequence: 4,
    };
    let (fast, slow) = if monotonic {
        (Clock::whole("+0 x2"), Clock::whole("+0 x0.5"))
    } else {
        (Clock::wall("+0 x2"), Clock::wall("+0 x0.5"))
    };
    // 16 ids a ms of each process's clock: 16,000 take 1 s of it (the
    // slow one 2 s of real time, the fast one 0.5 s, if not slower).
    // The third may wait for its clock to pass the fast one's last tick:
    // as long as the fast one ran, from its start (its connection too).
    let args = snowflake_args(
        &name,
        COUNT as u64,
        bits,
        &[
            "--lease",
            "6s",
            "--wait",
            "120s",
            "--max-clock-wait",
            "120s",
        ],
    );
    let (a, _) = spawn_ids(target, &d, &args, Some((library, &fast, "fast")));
    let _a_group = Group::of(&a);
    let (b, _) = spawn_ids(target, &d, &args, Some((library, &slow, "slow")));
    let _b_group = Group::of(&b);
    // (The files are unused: these clocks are not moved.)
    let probes = vec![
        probe(
            library,
            &fast,
            &d.join("fast"),
            format!("{label} {tag} 2x"),
            0.0,
        ),
        probe(
            library,
            &slow,
            &d.join("slow"),
            format!("{label} {tag} 0.5x"),
            0.0,
        ),
    ];
    // Both processes leased a worker id before the third: two grants in
    // all (the fast one may be done already, its worker id taken again).
    within(&format!("{label} {tag}: both worker ids taken"), || {
        let grants: u64 = (0..2)
            .map(|w| {
                let lock = format!("snowflake.{name}.w{w}");
                let out = run(target, &d, &["--json", "lock", "show", &lock]);
                serde_json::from_slice::<serde_json::Value>(&out.stdout)
                    .ok()
                    .filter(|_| out.status.success())
                    .and_then(|shown| shown["state"]["token"].as_u64())
                    .unwrap_or(0)
            })
            .sum();
        (grants >= 2).then_some(())
    });
    let (c, _) = spawn_ids(target, &d, &args, None);
    let _c_group = Group::of(&c);
    let per_process: Vec<Vec<u64>> = [(a, "2x"), (b, "0.5x"), (c, "real")]
        .into_iter()
        .map(|(child, what)| {
            let out = finish(child, &format!("{label} {tag}: {what}"));
            assert!(
                out.status.success(),
                "{label} {tag}: {what}: {}",
                text(&out.stderr)
            );
            let ids = parse_ids(&out.stdout);
            assert_eq!(ids.len(), COUNT, "{label} {tag}: {what}: every id printed");
            ids
        })
        .collect();
    if let Some(problem) = common::id_problem(|id| bits.parts(id), &per_process) {
        panic!("{label} {tag}: {problem}");
    }
    // (A process may lease again, the same worker id or the other, when
    // its lease could end on its own clock: the 2x one does.)
    let workers: Vec<usize> = per_process
        .iter()
        .map(|ids| {
            ids.iter()
                .map(|&id| bits.parts(id).1)
                .collect::<HashSet<_>>()
                .len()
        })
        .collect();
    let seen = seen(probes);
    (
        3 * COUNT,
        format!(
            "ok: 3 processes on 2 worker ids (2x, 0.5x, real: on {workers:?} worker ids), {} ids, 0 \
             duplicates, each increasing, each worker id's holders at later ticks; {seen}",
            3 * COUNT
        ),
    )
}

fn record_ids(backend: &str, setup: &str, fault: &str, ids: usize, verdict: &str) {
    record(
        backend,
        setup,
        fault,
        serde_json::json!({ "ok": ids, "duplicate_ids": 0, "verdict": verdict }),
    );
}

#[test]
fn snowflake_ids_stay_unique_when_a_process_clock_jumps_or_drifts() {
    let _one = one_at_a_time();
    let Some(library) = libfaketime() else { return };
    on_every_target("clock_faults", |target| {
        let label = target.label;
        let (back, forward, wall, whole) = std::thread::scope(|scope| {
            let library = &library;
            let back = scope.spawn(move || snowflake_jump(target, library, "sf-back", "-3600"));
            let forward =
                scope.spawn(move || snowflake_jump(target, library, "sf-forward", "+3600"));
            let wall = scope.spawn(move || snowflake_rates(target, library, "sf-wall", false));
            let whole = scope.spawn(move || snowflake_rates(target, library, "sf-whole", true));
            let join = |h: std::thread::ScopedJoinHandle<'_, (usize, String)>| {
                h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
            };
            (join(back), join(forward), join(wall), join(whole))
        });
        for (fault, setup, (ids, verdict)) in [
            (
                "snowflake: wall clock -1 h mid-run",
                "snowflake next, 1 process then 1",
                back,
            ),
            (
                "snowflake: wall clock +1 h mid-run",
                "snowflake next, 1 process then 1",
                forward,
            ),
            (
                "snowflake: wall clocks at 2x and 0.5x",
                "snowflake next, 3 processes, 2 worker ids",
                wall,
            ),
            (
                "snowflake: whole clocks (monotonic too) at 2x and 0.5x",
                "snowflake next, 3 processes, 2 worker ids",
                whole,
            ),
        ] {
            eprintln!("clock[{label}] {fault}: {verdict}");
            record_ids(label, setup, fault, ids, &verdict);
        }
    });
}

/// Clients of one sequence at once, each under another clock fault and
/// each a run of `seq next` processes one after another: two whose wall
/// clock jumps (-1 h, +1 h) between their processes, two whose whole clock
/// (monotonic too) runs at 2x and 0.5x, one on the real clock. Every
/// client runs one process, waits until all have, then the jumps happen
/// and each runs two more (started after the jump, so they read the moved
/// clock: probed). Ids unique, increasing per process, and a later
/// process above them all.
///
/// A `seq next` reserves its ids in one write (its block the count) and
/// reads no clock for them: what a clock fault can reach is the store
/// client (its timeouts and retries; the time a request is signed with or
/// stamped with, as DynamoDB's and Cassandra's clients do).
#[test]
fn sequence_ids_stay_unique_when_process_clocks_jump_or_drift() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let _one = one_at_a_time();
    let Some(library) = libfaketime() else { return };
    const COUNT: usize = 100;
    const AFTER: usize = 2;
    on_every_target("clock_faults", |target| {
        let label = target.label;
        let d = scratch(target, "seq");
        let name = bakery_testkit::unique_name("clock-seq");
        let count = COUNT.to_string();
        let args = ["seq", "next", name.as_str(), "--count", count.as_str()];
        let clocks = [
            ("back", Some((Clock::moved(false), "-3600"))),
            ("forward", Some((Clock::moved(false), "+3600"))),
            ("2x", Some((Clock::whole("+0 x2"), ""))),
            ("0.5x", Some((Clock::whole("+0 x0.5"), ""))),
            ("real", None),
        ];
        for (what, clock) in &clocks {
            if let Some((Clock { spec: None, .. }, _)) = clock {
                Moved(d.join(format!("clock-{what}"))).set("+0");
            }
        }
        let jumped = AtomicBool::new(false);
        let before = AtomicUsize::new(0);
        // One process (its ids) each, in the order run; whether it started
        // after the jumps.
        let per_client: Vec<Vec<(bool, Vec<u64>)>> = std::thread::scope(|scope| {
            let (jumped, before, d, args) = (&jumped, &before, &d, &args);
            let clients: Vec<_> = clocks
                .iter()
                .map(|(what, clock)| {
                    let library = library.as_path();
                    scope.spawn(move || {
                        let file = d.join(format!("clock-{what}"));
                        let one = |after: bool| {
                            let mut cmd = bakery(target, d, args);
                            if let Some((clock, _)) = clock {
                                fake_env(&mut cmd, library, clock, &file);
                            }
                            let child = cmd.spawn().expect("spawn bakery seq next");
                            let _group = Group::of(&child);
                            let out = finish(child, &format!("{label} seq {what}"));
                            assert!(
                                out.status.success(),
                                "{label} seq {what}: {}",
                                text(&out.stderr)
                            );
                            let ids = parse_ids(&out.stdout);
                            assert_eq!(ids.len(), COUNT, "{label} seq {what}: every id printed");
                            (after, ids)
                        };
                        let mut run = vec![one(false)];
                        before.fetch_add(1, Ordering::SeqCst);
                        within(&format!("{label} seq {what}: the jumps"), || {
                            jumped.load(Ordering::SeqCst).then_some(())
                        });
                        run.extend((0..AFTER).map(|_| one(true)));
                        run
                    })
                })
                .collect();
            // (A client that failed never counts: the wait fails, not hangs.)
            within(&format!("{label} seq: a process of each client"), || {
                (before.load(Ordering::SeqCst) == clocks.len()).then_some(())
            });
            let mut probes = Vec::new();
            for (what, clock) in &clocks {
                if let Some((clock @ Clock { spec: None, .. }, offset)) = clock {
                    let file = d.join(format!("clock-{what}"));
                    Moved(file.clone()).set(offset);
                    let at: f64 = offset.parse().expect("an offset");
                    probes.push(probe(
                        &library,
                        clock,
                        &file,
                        format!("{label} seq {what}"),
                        at,
                    ));
                }
            }
            jumped.store(true, Ordering::SeqCst);
            let seen = seen(probes);
            eprintln!("clock[{label}] sequence: after the jumps, {seen}");
            clients
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for ((what, _), run) in clocks.iter().zip(&per_client) {
            let after = run.iter().filter(|(after, _)| *after).count();
            assert_eq!(
                after, AFTER,
                "{label} seq {what}: processes after the jumps"
            );
        }
        let per_process: Vec<Vec<u64>> = per_client
            .into_iter()
            .flatten()
            .map(|(_, ids)| ids)
            .collect();
        let report = bakery_verify::checks::check_sequence(&per_process);
        assert!(
            report.passed(),
            "{label}: clock faults broke the sequence: {report:?}"
        );
        let highest = per_process.iter().flatten().max().copied().unwrap_or(0);
        let later = run(target, &d, &["seq", "next", &name, "--count", "3"]);
        let next = parse_ids(&later.stdout);
        assert!(
            later.status.success() && next.iter().all(|&id| id > highest),
            "{label}: a later process got {next:?}, not above {highest}: {}",
            text(&later.stderr)
        );
        let verdict = format!(
            "ok: {} ids from {} processes, 0 duplicates, each process increasing, a later process \
             above them",
            report.ids,
            per_process.len()
        );
        eprintln!(
            "clock[{label}] sequence: 5 clients (wall clock -1 h, +1 h between processes; whole \
             clock 2x, 0.5x; real), 1 process each before the jumps, {AFTER} after: {verdict}"
        );
        record_ids(
            label,
            "seq next --count 100 (one write), 5 clients at once, 3 processes each in turn",
            "sequence: wall clocks -1 h, +1 h between a client's processes; whole clocks (monotonic \
             too) 2x, 0.5x; one real",
            report.ids as usize,
            &verdict,
        );
    });
}

/// Negative control for the id checks: two snowflake names stand for two
/// generators whose worker ids are set by hand (not leased from one
/// store), both on worker id 0; the second's wall clock is set back into
/// the first one's ticks. The checks must find duplicates. The same clock
/// on the first name refuses instead (the worker id's stored mark).
#[test]
fn negative_control_unleased_worker_ids_and_a_clock_set_back_give_duplicates() {
    let _one = one_at_a_time();
    let Some(library) = libfaketime() else { return };
    let target = Target::sqlite();
    let d = scratch(&target, "sf-negative");
    let bits = Bits {
        worker: 10,
        sequence: 4,
    };
    let (first_name, second_name) = (
        bakery_testkit::unique_name("clock-sf-a"),
        bakery_testkit::unique_name("clock-sf-b"),
    );
    // 16 ids a ms: 48,000 take 3 s, every tick full.
    let first = run(
        &target,
        &d,
        &snowflake_args(&first_name, 48_000, bits, &[])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    let first_ids = parse_ids(&first.stdout);
    // One second after the first id's second, UTC.
    let (tick, _) = bits.parts(first_ids[0]);
    let start_s = (EPOCH_MS + tick) / 1000 + 1;
    let at = Command::new("date")
        .args(["-u", "-d", &format!("@{start_s}"), "+@%Y-%m-%d %H:%M:%S"])
        .output()
        .expect("date");
    let at = text(&at.stdout).trim().to_owned();
    let back = |name: &str| {
        let args = snowflake_args(name, 8_000, bits, &["--max-clock-wait", "1s"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = bakery(&target, &d, &args);
        cmd.env("LD_PRELOAD", &library)
            .env("FAKETIME", &at)
            .env("TZ", "UTC")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        cmd.output().expect("run")
    };
    // On the leased name the same clock refuses, or passes worker id 0
    // over (its last tick too far ahead) for another: no duplicate either
    // way.
    let same = back(&first_name);
    let leased = if same.status.success() {
        let ids = parse_ids(&same.stdout);
        assert!(
            !ids.is_empty() && ids.iter().all(|&id| bits.parts(id).1 != 0),
            "the leased name issued on worker id 0 with its clock behind: {}",
            text(&same.stderr)
        );
        assert_eq!(
            common::id_problem(|id| bits.parts(id), &[first_ids.clone(), ids]),
            None,
            "the leased name"
        );
        "took another worker id"
    } else {
        assert_eq!(
            same.status.code(),
            Some(1),
            "the leased worker id: {}",
            text(&same.stderr)
        );
        bakery_testkit::assert_mentions(text(&same.stderr), &["behind"]);
        "refused"
    };
    let other = back(&second_name);
    assert!(other.status.success(), "{}", text(&other.stderr));
    let other_ids = parse_ids(&other.stdout);
    let both = [first_ids, other_ids];
    let dups = duplicates(&both);
    let problem = common::id_problem(|id| bits.parts(id), &both);
    assert!(
        dups > 0 && problem.is_some(),
        "the id checks found nothing in ids of two generators on one worker id and one clock"
    );
    eprintln!(
        "clock[sqlite] negative control: two unleased generators on worker id 0, the second's clock \
         set back to {at}: {dups} duplicate ids, caught ({}); on the leased name the same clock \
         {leased}",
        problem.unwrap_or_default()
    );
    record(
        "sqlite",
        "snowflake next, 2 names standing for 2 hand-set worker ids",
        "negative control: worker id not leased, second clock set back 2 s",
        serde_json::json!({
            "ok": both.iter().map(Vec::len).sum::<usize>(),
            "duplicate_ids": dups,
            "verdict": format!("negative control: duplicates caught; on one leased name the same clock {leased}"),
        }),
    );
}
