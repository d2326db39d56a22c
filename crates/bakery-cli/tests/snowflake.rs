//! `bakery snowflake` across OS processes, on the embedded SQLite file and
//! on every server backend the run provides (under CI=true a missing one
//! fails), targets side by side:
//!
//! - 8 processes × 100,000 ids at once: every id unique, each process's
//!   increasing, 8 worker ids;
//! - 5 processes on a layout of 2 worker bits: 4 worker ids, the fifth
//!   process starts on one only after the tick its holder last used;
//! - a process SIGSTOPped past its lease while a waiter takes its worker id:
//!   after SIGCONT it issues nothing on that worker id at a tick the
//!   successor used (it leases again first);
//! - clocks moved with libfaketime on real processes: a process whose clock
//!   is behind the worker id's last tick waits (within `--max-clock-wait`)
//!   and then issues above it, or beyond it passes that worker id over for
//!   the next free one (refusing only when every worker id is marked that
//!   far ahead); a clock going back while a process runs ends it with an
//!   error, never a duplicate.
//!
//! The ids are checked with [`check_ids`]: unique, increasing per process,
//! and on each worker id, from one process to another only at a later
//! tick. Its negative controls are the unit tests at the end.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use common::{on_every_target, text, Target};

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// Bound on anything that must happen (a failure, not a speed check).
const PATIENCE: Duration = Duration::from_secs(120);

/// The default layout's worker and sequence bits with a narrower
/// sequence: `--sequence-bits N` makes a process issue at most 2^N ids a
/// millisecond, so processes of the same test overlap in time.
struct Bits {
    worker: u32,
    sequence: u32,
}

impl Bits {
    fn args(&self) -> Vec<String> {
        vec![
            "--worker-bits".into(),
            self.worker.to_string(),
            "--sequence-bits".into(),
            self.sequence.to_string(),
        ]
    }

    /// (tick, worker) of `id`.
    fn parts(&self, id: u64) -> (u64, u64) {
        let worker = (id >> self.sequence) & ((1 << self.worker) - 1);
        (id >> (self.sequence + self.worker), worker)
    }
}

impl Target {
    fn bakery(&self, args: &[String]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env("BAKERY_URI", &self.uri)
            .env("HOME", self.dir.path())
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .args(args);
        cmd
    }

    fn spawn(&self, args: &[String]) -> Child {
        self.bakery(args).spawn().expect("spawn bakery")
    }

    fn scratch(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).expect("scratch dir");
        path
    }
}

/// `snowflake next NAME --count COUNT` with `more` options.
fn next_args(name: &str, count: u64, bits: &Bits, more: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["snowflake", "next", name, "--count"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(count.to_string());
    args.extend(bits.args());
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

fn ids_of(out: &Output, what: &str) -> Vec<u64> {
    assert!(
        out.status.success(),
        "{what}: {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .map(|line| {
            line.parse()
                .unwrap_or_else(|_| panic!("{what}: not an id: {line:?}"))
        })
        .collect()
}

/// What [`check_ids`] found wrong, if anything.
fn id_problem(bits: &Bits, per_process: &[Vec<u64>]) -> Option<String> {
    common::id_problem(|id| bits.parts(id), per_process)
}

/// Every id unique, each process's increasing, and on each worker id the
/// holders took turns: ordered by id, the issuing process changes only
/// where the tick grows.
#[track_caller]
fn check_ids(bits: &Bits, per_process: &[Vec<u64>]) {
    if let Some(problem) = id_problem(bits, per_process) {
        panic!("{problem}");
    }
}

fn workers(bits: &Bits, ids: &[u64]) -> HashSet<u64> {
    ids.iter().map(|&id| bits.parts(id).1).collect()
}

#[test]
fn eight_processes_at_once_hold_eight_worker_ids_and_never_collide() {
    // 32 ids a millisecond: 100,000 take at least 3 s, so the 8 overlap.
    let bits = Bits {
        worker: 10,
        sequence: 5,
    };
    on_every_target("snowflake", |target| {
        let name = bakery_testkit::unique_name("sf-eight");
        let args = next_args(&name, 100_000, &bits, &[]);
        let children: Vec<Child> = (0..8).map(|_| target.spawn(&args)).collect();
        let per_process: Vec<Vec<u64>> = children
            .into_iter()
            .enumerate()
            .map(|(i, child)| {
                let out = child.wait_with_output().expect("wait");
                ids_of(&out, &format!("{}: process {i}", target.label))
            })
            .collect();
        for ids in &per_process {
            assert_eq!(ids.len(), 100_000, "{}", target.label);
        }
        check_ids(&bits, &per_process);
        let all: HashSet<u64> = per_process
            .iter()
            .flat_map(|ids| workers(&bits, ids))
            .collect();
        assert_eq!(all.len(), 8, "{}: worker ids {all:?}", target.label);
    });
}

#[test]
fn with_two_worker_bits_a_fifth_process_waits_for_a_worker_id() {
    // 16 ids a millisecond: 20,000 take at least 1.25 s.
    let bits = Bits {
        worker: 2,
        sequence: 4,
    };
    on_every_target("snowflake", |target| {
        let name = bakery_testkit::unique_name("sf-five");
        let args = next_args(&name, 20_000, &bits, &["--wait", "60s"]);
        let children: Vec<Child> = (0..5).map(|_| target.spawn(&args)).collect();
        let per_process: Vec<Vec<u64>> = children
            .into_iter()
            .enumerate()
            .map(|(i, child)| {
                let out = child.wait_with_output().expect("wait");
                ids_of(&out, &format!("{}: process {i}", target.label))
            })
            .collect();
        check_ids(&bits, &per_process);
        let all: HashSet<u64> = per_process
            .iter()
            .flat_map(|ids| workers(&bits, ids))
            .collect();
        assert_eq!(all.len(), 4, "{}: worker ids {all:?}", target.label);
    });
}

/// Waits (within [`PATIENCE`]) for `child` to exit and reads its output.
fn finish(mut child: Child, what: &str) -> Output {
    let give_up = Instant::now() + PATIENCE;
    // (none left when the test reads it itself)
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        match stdout {
            Some(mut stdout) => stdout.read_to_end(&mut bytes).map(|_| bytes),
            None => Ok(bytes),
        }
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < give_up,
            "{what}: not done within {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = Vec::new();
    if let Some(mut err) = child.stderr.take() {
        err.read_to_end(&mut stderr).expect("read stderr");
    }
    Output {
        status,
        stdout: reader.join().expect("reader").expect("read stdout"),
        stderr,
    }
}

/// The first line `stdout` prints, and the rest of it read in the
/// background.
fn first_line(stdout: ChildStdout) -> (u64, std::thread::JoinHandle<Vec<u64>>) {
    let mut lines = BufReader::new(stdout);
    let mut first = String::new();
    lines.read_line(&mut first).expect("read the first id");
    let id = first
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not an id: {first:?}"));
    let rest = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        lines.read_to_end(&mut bytes).expect("read");
        // A process killed while printing may leave half a line: no id.
        let complete = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(last) => &bytes[..=last],
            None => &[][..],
        };
        text(complete)
            .lines()
            .map(|line| line.parse().expect("an id"))
            .collect()
    });
    (id, rest)
}

#[test]
fn a_process_stopped_past_its_lease_issues_nothing_its_successor_could_collide_with() {
    let bits = Bits {
        worker: 1,
        sequence: 4,
    };
    on_every_target("snowflake", |target| {
        let label = target.label;
        let name = bakery_testkit::unique_name("sf-stop");
        // Two slots. `other` holds one until it is killed at the end; the
        // `stopped` one holds the other, and a `successor` takes it over.
        // Each prints its first ids after 4 s (16 ids a millisecond).
        // (Leases that a renewal every lease/3 keeps on FerretDB and
        // dynalite on a loaded machine; `other`'s is longer, so that the
        // waiting successor evicts the stopped one, silent for its lease,
        // and not `other` if one of its renewals is slow.)
        let forever = next_args(&name, 10_000_000, &bits, &["--lease", "10s"]);
        let long = next_args(&name, 131_072, &bits, &["--lease", "3s", "--wait", "120s"]);
        let mut other = target.spawn(&forever);
        let mut stopped = target.spawn(&long);
        // Both hold a worker id once each printed its first ids.
        let (other_first, other_rest) = first_line(other.stdout.take().expect("stdout"));
        let (first, stopped_rest) = first_line(stopped.stdout.take().expect("stdout"));
        let stopped_worker = bits.parts(first).1;
        let pid = Pid::from_raw(i32::try_from(stopped.id()).expect("pid"));
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
        // The successor waits for a worker id and, a lease of silence
        // later, takes the stopped one's; the stopped one resumes while its
        // successor issues ids on it, and must lease again (it waits for
        // the successor to finish).
        let mut successor = target.spawn(&long);
        let (successor_first, successor_rest) =
            first_line(successor.stdout.take().expect("stdout"));
        assert_eq!(
            bits.parts(successor_first).1,
            stopped_worker,
            "{label}: the successor took the stopped process's worker id"
        );
        kill(pid, Signal::SIGCONT).expect("SIGCONT");
        for (child, what) in [(stopped, "stopped"), (successor, "successor")] {
            let out = finish(child, &format!("{label}: {what}"));
            assert!(
                out.status.success(),
                "{label}: {what}: {}",
                text(&out.stderr)
            );
        }
        kill(
            Pid::from_raw(i32::try_from(other.id()).expect("pid")),
            Signal::SIGKILL,
        )
        .expect("SIGKILL");
        finish(other, &format!("{label}: other"));
        let mut stopped_ids = vec![first];
        stopped_ids.extend(stopped_rest.join().expect("reader"));
        let mut successor_ids = vec![successor_first];
        successor_ids.extend(successor_rest.join().expect("reader"));
        for ids in [&stopped_ids, &successor_ids] {
            assert_eq!(ids.len(), 131_072, "{label}: every id printed");
        }
        let mut other_ids = vec![other_first];
        other_ids.extend(other_rest.join().expect("reader"));
        check_ids(&bits, &[stopped_ids, other_ids, successor_ids]);
    });
}

/// libfaketime's library, installed by `scripts/backends.sh deps`.
fn libfaketime() -> Option<PathBuf> {
    let found = std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists());
    if found.is_none() {
        let why = "libfaketime is not installed (scripts/backends.sh deps installs it)";
        assert!(!bakery_testkit::in_ci(), "{why}");
        eprintln!("snowflake: {why}; the clock tests did not run");
    }
    found
}

/// `cmd` with its wall clock as libfaketime's FAKETIME says (monotonic
/// time left alone).
fn faked(mut cmd: Command, library: &Path, faketime: &str) -> Command {
    cmd.env("LD_PRELOAD", library)
        .env("FAKETIME", faketime)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

/// A process whose clock is behind the last tick used on the lowest free
/// worker id waits for it within `--max-clock-wait`; further behind, it
/// passes that worker id over (a warning, under `BAKERY_LOG=warn`) and
/// issues ids on the next free one, of older timestamps but unique. Only a
/// layout whose every worker id is marked too far ahead refuses.
#[test]
fn a_clock_behind_the_worker_id_s_last_tick_waits_within_the_bound_or_takes_another() {
    let Some(library) = libfaketime() else { return };
    let bits = Bits {
        worker: 10,
        sequence: 12,
    };
    on_every_target("snowflake", |target| {
        let label = target.label;
        let name = bakery_testkit::unique_name("sf-clock");
        let first = target
            .bakery(&next_args(&name, 1000, &bits, &[]))
            .output()
            .expect("run");
        let first = ids_of(&first, &format!("{label}: first"));
        assert_eq!(workers(&bits, &first), HashSet::from([0]), "{label}");
        // Ten minutes behind: worker id 0's last tick is too far ahead, so
        // it takes worker id 1, saying why.
        let mut far = faked(
            target.bakery(&next_args(&name, 10, &bits, &["--max-clock-wait", "1s"])),
            &library,
            "-600",
        );
        let far = far.env("BAKERY_LOG", "warn").output().expect("run");
        let far_ids = ids_of(&far, &format!("{label}: 10 min behind"));
        assert_eq!(far_ids.len(), 10, "{label}");
        assert_eq!(
            workers(&bits, &far_ids),
            HashSet::from([1]),
            "{label}: worker id 0 passed over"
        );
        assert!(
            far_ids[far_ids.len() - 1] < first[0],
            "{label}: the timestamps of its clock, ten minutes older"
        );
        bakery_testkit::assert_mentions(
            text(&far.stderr),
            &["worker id passed over", "worker", "ahead", "max_clock_wait"],
        );
        // Three seconds behind, with ten to wait: it waits, then goes on above.
        let near = faked(
            target.bakery(&next_args(&name, 1000, &bits, &["--max-clock-wait", "10s"])),
            &library,
            "-3",
        )
        .output()
        .expect("run");
        let near = ids_of(&near, &format!("{label}: 3 s behind"));
        assert_eq!(
            workers(&bits, &near),
            workers(&bits, &first),
            "{label}: the same worker id"
        );
        check_ids(&bits, &[first, far_ids, near]);

        // Two worker ids, both marked ahead (by processes 20 and 10
        // minutes ahead, the second passing the first's over): a process
        // on the real clock refuses, printing nothing.
        let two = Bits {
            worker: 1,
            sequence: 12,
        };
        let name = bakery_testkit::unique_name("sf-ahead");
        let mut ahead = Vec::new();
        for (offset, worker) in [("+1200", 0), ("+600", 1)] {
            let out = faked(
                target.bakery(&next_args(&name, 10, &two, &["--max-clock-wait", "1s"])),
                &library,
                offset,
            )
            .output()
            .expect("run");
            let ids = ids_of(&out, &format!("{label}: {offset} s"));
            assert_eq!(workers(&two, &ids), HashSet::from([worker]), "{label}");
            ahead.push(ids);
        }
        check_ids(&two, &ahead);
        let refused = target
            .bakery(&next_args(&name, 10, &two, &["--max-clock-wait", "1s"]))
            .output()
            .expect("run");
        assert_eq!(
            refused.status.code(),
            Some(1),
            "{label}: {}",
            text(&refused.stderr)
        );
        assert!(
            refused.stdout.is_empty(),
            "{label}: printed {}",
            text(&refused.stdout)
        );
        bakery_testkit::assert_mentions(
            text(&refused.stderr),
            &["0 held and 2 free but marked", "ahead", "max_clock_wait"],
        );
    });
}

#[test]
fn a_clock_going_back_while_a_process_runs_ends_it_without_a_duplicate() {
    let Some(library) = libfaketime() else { return };
    let bits = Bits {
        worker: 10,
        sequence: 4,
    };
    on_every_target("snowflake", |target| {
        let label = target.label;
        let name = bakery_testkit::unique_name("sf-back");
        let clock = target.scratch("clock").join(format!("{name}.faketime"));
        std::fs::write(&clock, "+0\n").expect("write the clock");
        let mut cmd = faked(
            target.bakery(&next_args(
                &name,
                10_000_000,
                &bits,
                &["--max-clock-wait", "1s"],
            )),
            &library,
            "",
        );
        cmd.env_remove("FAKETIME")
            .env("FAKETIME_TIMESTAMP_FILE", &clock)
            .env("FAKETIME_NO_CACHE", "1");
        let mut child = cmd.spawn().expect("spawn");
        let (first, rest) = first_line(child.stdout.take().expect("stdout"));
        // The clock jumps back 30 s while the process issues ids.
        std::fs::write(&clock, "-30\n").expect("move the clock");
        let out = finish(child, &format!("{label}: clock going back"));
        assert_eq!(out.status.code(), Some(1), "{label}: {}", text(&out.stderr));
        bakery_testkit::assert_mentions(text(&out.stderr), &["behind"]);
        let mut ids = vec![first];
        ids.extend(rest.join().expect("reader"));
        check_ids(&bits, &[ids.clone()]);
        // A later process on the same worker id goes on above them.
        let after = target
            .bakery(&next_args(&name, 100, &bits, &[]))
            .output()
            .expect("run");
        let after = ids_of(&after, &format!("{label}: after"));
        check_ids(&bits, &[ids, after]);
    });
}

/// The checker's negative controls: each broken history is caught.
#[test]
fn check_ids_catches_duplicates_disorder_and_interleaved_holders() {
    let bits = Bits {
        worker: 2,
        sequence: 4,
    };
    let id = |tick: u64, worker: u64, seq: u64| (tick << 6) | (worker << 4) | seq;
    assert!(id_problem(&bits, &[vec![id(1, 0, 0), id(1, 0, 1)], vec![id(2, 0, 0)]]).is_none());
    let twice = id_problem(&bits, &[vec![id(1, 0, 0)], vec![id(1, 0, 0)]]);
    assert!(twice.is_some_and(|p| p.contains("twice")));
    let disorder = id_problem(&bits, &[vec![id(2, 0, 0), id(1, 0, 0)]]);
    assert!(disorder.is_some_and(|p| p.contains("then")));
    // Two processes in one tick of one worker id: a shared worker id.
    let shared = id_problem(&bits, &[vec![id(5, 1, 0)], vec![id(5, 1, 1)]]);
    assert!(shared.is_some_and(|p| p.contains("worker id 1")));
    // A holder that went on in a tick its successor was using.
    let resumed = id_problem(
        &bits,
        &[
            vec![id(3, 2, 0), id(5, 2, 1)],
            vec![id(5, 2, 0), id(7, 2, 0)],
        ],
    );
    assert!(resumed.is_some_and(|p| p.contains("worker id 2")));
    // Turns at later ticks are fine: a holder back after its successor.
    let turns = [
        vec![id(3, 2, 0), id(9, 2, 0)],
        vec![id(5, 2, 0), id(7, 2, 0)],
    ];
    assert!(id_problem(&bits, &turns).is_none());
}
