//! `kill -9` of `bakery` processes at random moments: in the middle of
//! reserving ids, and while holding a lock (its heartbeats stop). On the
//! embedded SQLite file and on every server backend the run provides (the
//! URIs `scripts/backends.sh` exports; under CI=true a missing one fails;
//! the binary needs their features, as `cargo test --all-features` builds
//! it). Targets run side by side; the moments are drawn from a seed the
//! test prints (`BAKERY_KILL_SEED` replays one).
//!
//! Asserted:
//! - no id is handed out twice across killed and surviving `bakery seq
//!   next` processes (what a killed process printed before it died counts,
//!   complete lines only), each process's ids increase, a survivor prints
//!   all it was asked for, and a later process continues above every
//!   printed id;
//! - a `bakery lock run` already waiting when the holder's `bakery` is
//!   killed gets the lock (within a bound) with the next fencing token, and
//!   only once the dead holder's lease has run out: at least a lease after
//!   a look at the lock that still showed an older heartbeat than the
//!   holder's last (a waiter evicts a holder whose heartbeat it has seen
//!   standing for a whole lease on its own clock, which starts when it
//!   first sees that heartbeat: after the heartbeat was written, so after
//!   that look, whenever the heartbeats came);
//! - the dead holder's command, still running, is refused when it then
//!   writes with the dead holder's token, and the value keeps the new
//!   holder's write.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use common::{lock_shown, on_every_target, text, Target};

/// Bound on anything that must happen (a failure, not a speed check).
const PATIENCE: Duration = Duration::from_secs(60);

/// Waves of `seq next` processes per target, processes per wave, and how
/// many of each wave are killed.
const WAVES: usize = 3;
const PER_WAVE: usize = 4;
const KILLED_PER_WAVE: usize = 3;
const COUNT: usize = 300;
const BLOCK: &str = "10";

/// The lock holders' lease (long enough to outlast a heartbeat delayed by
/// a loaded machine while processes start), and holders killed per target.
const LEASE: Duration = Duration::from_secs(4);
const HOLDERS: usize = 2;

impl Target {
    fn spawn(&self, scratch: &Path, args: &[&str]) -> Child {
        common::bakery(self, scratch, args)
            .spawn()
            .expect("spawn bakery")
    }

    fn run(&self, scratch: &Path, args: &[&str]) -> Output {
        let child = self.spawn(scratch, args);
        finish(child, &format!("{}: bakery {}", self.label, args.join(" ")))
    }

    /// `bakery lock run LOCK --lease LEASE OPTIONS… -- sh -c SCRIPT`.
    fn lock_run(&self, scratch: &Path, lock: &str, options: &[&str], script: &str) -> Child {
        let lease = format!("{}ms", LEASE.as_millis());
        let head = ["lock", "run", lock, "--lease", &lease];
        self.spawn(
            scratch,
            &[&head[..], options, &["--", "sh", "-c", script]].concat(),
        )
    }

    fn scratch(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).expect("scratch dir");
        path
    }
}

/// Random moments: a 64-bit LCG (Knuth's MMIX constants) seeded from the
/// clock, or from `BAKERY_KILL_SEED` to replay a run.
struct Moments(u64);

impl Moments {
    fn seeded(salt: u64) -> (Moments, u64) {
        let seed = std::env::var("BAKERY_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        (Moments(seed.wrapping_add(salt)), seed)
    }

    /// A moment in `[0, bound)`.
    fn before(&mut self, bound: Duration) -> Duration {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        bound.mul_f64((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// `ready()`'s value once it has one, polled every 10 ms; fails after
/// [`PATIENCE`].
#[track_caller]
fn within<T>(what: &str, ready: impl FnMut() -> Option<T>) -> T {
    common::within(what, PATIENCE, Duration::from_millis(10), ready)
}

/// Waits (within [`PATIENCE`]) for `child` to exit, then reads what it
/// printed.
#[track_caller]
fn finish(child: Child, what: &str) -> Output {
    common::finish(child, what, PATIENCE)
}

/// The ids of the complete lines of `stdout` (a process killed while
/// printing may leave half a line, which is no id).
fn printed_ids(stdout: &[u8]) -> Vec<u64> {
    let complete = match stdout.iter().rposition(|&b| b == b'\n') {
        Some(last) => &stdout[..=last],
        None => &[][..],
    };
    text(complete)
        .lines()
        .map(|line| {
            line.parse()
                .unwrap_or_else(|_| panic!("not an id: {line:?}"))
        })
        .collect()
}

fn was_killed(out: &Output) -> bool {
    use std::os::unix::process::ExitStatusExt;
    out.status.signal() == Some(Signal::SIGKILL as i32)
}

/// `bakery seq next NAME --count 300 --block-size 10` in waves of four,
/// three of each wave SIGKILLed at random moments (within one and a half
/// times what an unkilled process takes): printed ids stay unique.
#[test]
fn killed_reservations_never_hand_out_an_id_twice() {
    on_every_target("kill", |target| {
        let (mut rng, seed) = Moments::seeded(target.label.len() as u64);
        let scratch = target.scratch("seq");
        let name = bakery_testkit::unique_name("kill-seq");
        let count = COUNT.to_string();
        let args = [
            "seq",
            "next",
            &name,
            "--count",
            &count,
            "--block-size",
            BLOCK,
        ];
        // Calibration: how long one process takes here, unkilled.
        let started = Instant::now();
        let first = target.run(&scratch, &args);
        let span = started.elapsed().mul_f64(1.5);
        assert!(
            first.status.success(),
            "{}: {}",
            target.label,
            text(&first.stderr)
        );
        let mut per_process = vec![printed_ids(&first.stdout)];
        let (mut killed, mut finished_first, mut printed_by_killed) = (0, 0, 0);
        for _ in 0..WAVES {
            let spawned = Instant::now();
            let mut children: Vec<Option<Child>> = (0..PER_WAVE)
                .map(|_| Some(target.spawn(&scratch, &args)))
                .collect();
            let mut moments: Vec<(Duration, usize)> = (0..KILLED_PER_WAVE)
                .map(|victim| (rng.before(span), victim))
                .collect();
            moments.sort();
            let mut outputs = Vec::new();
            for (at, victim) in moments {
                std::thread::sleep(at.saturating_sub(spawned.elapsed()));
                let child = children[victim].take().expect("each victim once");
                let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
                let _ = killpg(pid, Signal::SIGKILL);
                outputs.push((true, finish(child, "killed seq next")));
            }
            for child in children.into_iter().flatten() {
                outputs.push((false, finish(child, "seq next")));
            }
            for (victim, out) in outputs {
                let ids = printed_ids(&out.stdout);
                if victim && was_killed(&out) {
                    killed += 1;
                    printed_by_killed += ids.len();
                } else {
                    // A survivor, or a victim that finished before its moment.
                    finished_first += usize::from(victim);
                    assert!(
                        out.status.success(),
                        "{}: seq next failed: {}",
                        target.label,
                        text(&out.stderr)
                    );
                    assert_eq!(ids.len(), COUNT, "{}: a survivor's ids", target.label);
                }
                per_process.push(ids);
            }
        }
        let report = bakery_verify::checks::check_sequence(&per_process);
        assert!(
            report.passed(),
            "{} (seed {seed}): killed processes broke the sequence: {report:?}",
            target.label
        );
        let highest = per_process.iter().flatten().max().copied().unwrap_or(0);
        let later = target.run(&scratch, &["seq", "next", &name, "--count", "5"]);
        assert!(
            later.status.success(),
            "{}: {}",
            target.label,
            text(&later.stderr)
        );
        let next = printed_ids(&later.stdout);
        assert!(
            next.iter().all(|&id| id > highest),
            "{} (seed {seed}): a later process got {next:?}, not above {highest}",
            target.label
        );
        eprintln!(
            "kill[{}] seed {seed}: {} seq processes, {killed} SIGKILLed mid-run \
             ({finished_first} finished before their moment), {printed_by_killed} ids printed by \
             killed ones; {} ids, 0 duplicates, {} gaps; a later process continued at {}",
            target.label,
            1 + WAVES * PER_WAVE,
            report.ids,
            report.gaps,
            next.first().copied().unwrap_or(0)
        );
    });
}

/// The fencing token of the current grant, and how many wait, from `bakery
/// --json lock show`.
fn lock_state(target: &Target, scratch: &Path, lock: &str) -> (u64, usize) {
    let state = lock_shown(target, scratch, lock);
    let queued = state["queue"].as_array().map_or(0, Vec::len);
    (state["token"].as_u64().expect("a token"), queued)
}

/// The holder's request id and heartbeat, from `bakery --json lock show`.
fn holder_beat(target: &Target, scratch: &Path, lock: &str) -> (String, u64) {
    let holder = &lock_shown(target, scratch, lock)["holder"];
    let id = holder["id"].as_str().expect("a holder").to_owned();
    (id, holder["beat"].as_u64().expect("a heartbeat"))
}

/// A holder (`lock run --lease 4s`) writes the fenced value, then waits; a
/// second `lock run` queues behind it; the holder's `bakery` is SIGKILLed
/// at a random moment of its heartbeats, its command left running. The
/// waiter takes over after the lease and writes; the orphaned command's
/// write with the dead holder's token is refused.
#[test]
fn a_killed_holder_is_replaced_after_its_lease_and_fenced_off() {
    on_every_target("kill", |target| {
        let (mut rng, seed) = Moments::seeded(7 + target.label.len() as u64);
        let mut waits = Vec::new();
        for round in 0..HOLDERS {
            let d = target.scratch(&format!("lock-{round}"));
            let lock = bakery_testkit::unique_name("kill-lock");
            let value = bakery_testkit::unique_name("kill-fenced");
            let holder_script = format!(
                "echo \"$BAKERY_FENCING_TOKEN\" > \"$D/token\"; \
                 \"$BAKERY\" fence write {value} held || exit 3; touch \"$D/ready\"; \
                 while [ ! -e \"$D/go\" ]; do sleep 0.02; done; \
                 \"$BAKERY\" fence write {value} stale 2> \"$D/stale-err\"; \
                 echo $? > \"$D/stale.tmp\"; mv \"$D/stale.tmp\" \"$D/stale\""
            );
            let holder = target.lock_run(&d, &lock, &[], &holder_script);
            let holder_pid = Pid::from_raw(i32::try_from(holder.id()).expect("pid"));
            within("the holder's command started", || {
                d.join("ready").exists().then_some(())
            });
            let token: u64 = std::fs::read_to_string(d.join("token"))
                .expect("token file")
                .trim()
                .parse()
                .expect("a token");
            let waiter_script = format!(
                "date +%s%N; echo \"$BAKERY_FENCING_TOKEN\"; \"$BAKERY\" fence write {value} fresh"
            );
            let waiter = target.lock_run(&d, &lock, &["--timeout", "60s"], &waiter_script);
            within("the waiter queued", || {
                (lock_state(target, &d, &lock).1 == 1).then_some(())
            });
            // Watch the holder's heartbeat move: `beat_after` is the start
            // of the last look that still saw the older one. The holder's
            // last heartbeat before the kill is that newer one or a later
            // one, written after `beat_after`; the waiter's clock for it
            // starts when it reads it, later still, so no correct waiter
            // evicts the dead holder before `beat_after` + LEASE, however
            // the heartbeats were spread.
            // (`look` before the first read too: a beat written while that
            // read's `bakery` was still exiting came after its start, not
            // after the moment it returned.)
            let mut look = SystemTime::now();
            let (holder_id, mut seen) = holder_beat(target, &d, &lock);
            let beat_after = within("a heartbeat of the holder", || {
                let next_look = SystemTime::now();
                let (id, beat) = holder_beat(target, &d, &lock);
                assert_eq!(id, holder_id, "{}: the holder changed", target.label);
                if beat > seen {
                    return Some(look);
                }
                (seen, look) = (beat, next_look);
                None
            });
            // Then a random moment of its heartbeats (every lease/3).
            std::thread::sleep(rng.before(LEASE / 3));
            kill(holder_pid, Signal::SIGKILL).expect("kill -9 the holder's bakery");
            let killed_at = SystemTime::now();
            // (Not its output: the orphaned command holds the pipes open.)
            let mut holder = holder;
            let status = holder.wait().expect("reap the killed holder");
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(Signal::SIGKILL as i32),
                "{}: the holder exited by itself first",
                target.label
            );

            let next = finish(waiter, "the waiter");
            assert!(
                next.status.success(),
                "{}: the waiter: {:?} {}",
                target.label,
                next.status,
                text(&next.stderr)
            );
            let said = text(&next.stdout);
            let mut lines = said.lines();
            let granted_ns: u128 = lines
                .next()
                .and_then(|l| l.parse().ok())
                .expect("date +%s%N");
            let next_token: u64 = lines.next().and_then(|l| l.parse().ok()).expect("a token");
            assert_eq!(
                next_token,
                token + 1,
                "{}: the next grant's token",
                target.label
            );
            let killed_ns = killed_at
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_nanos();
            let beat_after_ns = beat_after
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_nanos();
            let waited = Duration::from_nanos(granted_ns.saturating_sub(killed_ns) as u64);
            let since_beat = Duration::from_nanos(granted_ns.saturating_sub(beat_after_ns) as u64);
            assert!(
                granted_ns >= beat_after_ns + LEASE.as_nanos(),
                "{} (seed {seed}): the waiter ran {since_beat:?} after a look that saw the holder's \
                 heartbeat not yet at its last ({waited:?} after the kill): before the dead holder's \
                 lease of {LEASE:?} ran out",
                target.label
            );
            waits.push(waited);

            // The dead holder's command writes with its token: refused.
            std::fs::write(d.join("go"), "").expect("let the orphan write");
            within("the orphaned command's write", || {
                d.join("stale").exists().then_some(())
            });
            let status = std::fs::read_to_string(d.join("stale")).expect("status");
            let err = std::fs::read_to_string(d.join("stale-err")).unwrap_or_default();
            assert_eq!(
                status.trim(),
                "1",
                "{}: stale fenced write accepted: {err}",
                target.label
            );
            assert!(err.contains("rejected"), "{}: {err}", target.label);
            let _ = killpg(holder_pid, Signal::SIGKILL);
            let read = target.run(&d, &["fence", "read", &value]);
            assert_eq!(text(&read.stdout).trim(), "fresh", "{}", target.label);
            assert_eq!(
                lock_state(target, &d, &lock),
                (token + 1, 0),
                "{}",
                target.label
            );
        }
        eprintln!(
            "kill[{}] seed {seed}: {HOLDERS} lock holders SIGKILLed mid-heartbeat (lease {LEASE:?}); \
             the waiters ran {waits:.2?} after the kills with the next token; \
             {HOLDERS} stale fenced writes by the orphaned commands refused",
            target.label
        );
    });
}
