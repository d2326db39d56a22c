//! What the partition tests (tests/partition_*.rs) share: the cuts
//! (`scripts/partition.sh`, healed when a test ends, by a panic too),
//! waiting for acknowledged writes around a cut, a cut's window (the
//! acknowledgements and unsettled calls in it, the heal, the writes after
//! it), and the negative control — reads a cut-off member serves alone,
//! checked to be stale, added to the history as another client's, which
//! the checker must then judge `NotLinearizable`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bakery::Key;
use bakery_verify::history::{Call, Outcome, Reply, RowRecord, Value};
use bakery_verify::linearizability::{self, Verdict};
use bakery_verify::workload::Counts;
use bakery_verify::History;

use super::cluster::{acked_after, eventually};
use super::report::FaultRow;

/// `scripts/partition.sh CLUSTER ARGS` (cut or heal the network between
/// the members of a cluster whose members each run in a network namespace
/// of their own); panics with its stderr if it fails.
pub fn partition(cluster: &str, args: &[&str]) {
    script(cluster, args).unwrap_or_else(|e| panic!("{e}"));
}

/// The cuts of `cluster` standing (`scripts/partition.sh CLUSTER show`),
/// one a line: `N -> M`, `N <-> clients`.
pub fn cuts_shown(cluster: &str) -> Vec<String> {
    let out = script(cluster, &["show"]).unwrap_or_else(|e| panic!("{e}"));
    out.lines().map(str::to_owned).collect()
}

/// `scripts/partition.sh CLUSTER ARGS`'s output, or why it failed.
fn script(cluster: &str, args: &[&str]) -> Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/partition.sh");
    let out = Command::new(&script)
        .arg(cluster)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "partition.sh {cluster} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Heals the cuts of one cluster when dropped, by a panic too: a failed
/// run leaves no blackhole route behind (a `cutoff` one in the root
/// namespace would make the member's next start wait its whole timeout).
/// Held by each partition test for its whole run.
pub struct HealOnDrop(&'static str);

impl HealOnDrop {
    /// `cluster`'s cuts; what an interrupted run left is healed first.
    pub fn new(cluster: &'static str) -> Self {
        partition(cluster, &["heal"]);
        Self(cluster)
    }
}

impl Drop for HealOnDrop {
    fn drop(&mut self) {
        match script(self.0, &["heal"]) {
            Ok(_) => {}
            // Unwinding already: a second panic would abort, so only say it.
            Err(e) if std::thread::panicking() => {
                eprintln!("{e}: run `scripts/partition.sh {} heal`", self.0)
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// `scripts/partition.sh CLUSTER ARGS` (a cut) run off the runtime's
/// threads; when it stood, in `history`'s clock.
pub async fn cut(history: &History, cluster: &'static str, args: &[&str]) -> u64 {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        partition(cluster, &args);
    })
    .await
    .expect("partition.sh");
    history.now_ns()
}

/// A cut's window, from the cut to its heal, in a workload's history.
pub struct Window {
    pub cut_ns: u64,
    pub healed_ns: u64,
    /// Writes acknowledged in the window.
    pub acked: u64,
    /// Calls invoked in the window not answered Ok by its end.
    pub unsettled: u64,
    /// Writes awaited after the window, and how long after its end they
    /// were acknowledged (seconds).
    pub recovered: (u64, f64),
}

impl Window {
    /// Ends the window of a cut made at `cut_ns`: `cluster` healed unless
    /// `heal` is false (a failover leaves the old primary cut off), then
    /// `acks` writes awaited (at most `bound`).
    pub async fn end(
        history: &History,
        cluster: &'static str,
        cut_ns: u64,
        heal: bool,
        acks: u64,
        bound: Duration,
    ) -> Self {
        let healed_ns = history.now_ns();
        let (acked_in, unsettled) = (
            acked_between(history, cut_ns, healed_ns),
            unsettled_between(history, cut_ns, healed_ns),
        );
        if heal {
            cut(history, cluster, &["heal"]).await;
        }
        acked(history, healed_ns, acks, bound, "after the heal").await;
        Self {
            cut_ns,
            healed_ns,
            acked: acked_in,
            unsettled,
            recovered: (acks, (history.now_ns() - healed_ns) as f64 / 1e9),
        }
    }

    /// How long the cut stood (seconds).
    pub fn held_s(&self) -> f64 {
        (self.healed_ns - self.cut_ns) as f64 / 1e9
    }

    /// Asserts that no write was acknowledged from [`CUT_GRACE`] after the
    /// cut to the window's end (`without`: what the writes lacked), and
    /// that some call invoked in the window failed or timed out.
    pub fn assert_none_acked(&self, history: &History, what: &str, without: &str) {
        let after_ns = self.cut_ns + CUT_GRACE.as_nanos() as u64;
        let late = acked_between(history, after_ns, self.healed_ns);
        assert_eq!(
            late, 0,
            "{what}: {late} writes acknowledged without {without}"
        );
        assert!(
            self.unsettled > 0,
            "{what}: no call failed or timed out without {without}"
        );
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} writes acknowledged while cut, {} calls invoked while cut not answered Ok by the \
             heal; {} writes acknowledged {:.1}s after the heal",
            self.acked, self.unsettled, self.recovered.0, self.recovered.1
        )
    }
}

/// Calls whose replies were on their way when a cut came may still be
/// answered this long after it: a write acknowledged later was committed
/// after the cut.
pub const CUT_GRACE: Duration = Duration::from_secs(1);

/// The negative control's reader, a client id no workload client has.
pub const STALE_READER: u64 = 1_000;

/// Waits (at most `bound`) until `acks` writes were acknowledged after
/// `after_ns`; panics naming `when` otherwise.
pub async fn acked(history: &History, after_ns: u64, acks: u64, bound: Duration, when: &str) {
    let done = eventually(bound, || acked_after(history, after_ns) >= acks);
    assert!(
        done.await,
        "fewer than {acks} writes acknowledged {when} within {bound:?} (only {})",
        acked_after(history, after_ns)
    );
}

/// The keys of `keys` with a write acknowledged [`CUT_GRACE`] after
/// `cut_ns` or later (a member cut off since `cut_ns` holds a stale
/// version of each), once every one has one or `bound` is past; the ones
/// without are printed with what became of their calls since the cut (a
/// client may be stuck on a coordinator that fails each of its calls).
/// Panics if none has.
pub async fn fresh_keys(
    history: &History,
    keys: &[Key],
    cut_ns: u64,
    bound: Duration,
    test: &str,
) -> Vec<Key> {
    let after_ns = cut_ns + CUT_GRACE.as_nanos() as u64;
    let fresh = |key: &Key| {
        history.operations().iter().any(|op| {
            op.key == key.as_str()
                && op.completed_ns.is_some_and(|t| t > after_ns)
                && matches!(
                    op.outcome,
                    Outcome::Ok {
                        reply: Reply::Applied(_)
                    }
                )
        })
    };
    eventually(bound, || keys.iter().all(fresh)).await;
    let (fresh, stale): (Vec<Key>, Vec<Key>) = keys.iter().cloned().partition(fresh);
    for key in &stale {
        let (mut ok, mut failed, mut unknown, mut last_error) = (0, 0, 0, String::new());
        for op in history.operations() {
            if op.key != key.as_str() || op.invoked_ns <= cut_ns {
                continue;
            }
            match op.outcome {
                Outcome::Ok { .. } => ok += 1,
                Outcome::Fail { error } => (failed, last_error) = (failed + 1, error),
                Outcome::Unknown { error } => (unknown, last_error) = (unknown + 1, error),
                Outcome::Pending => unknown += 1,
            }
        }
        println!(
            "{test}: counter {key} had no write acknowledged after the cut within {bound:?} \
             (since the cut: {ok} ok, {failed} failed, {unknown} unknown; last error: \
             {last_error}); the negative control leaves it out"
        );
    }
    assert!(
        !fresh.is_empty(),
        "no counter had a write acknowledged after the cut within {bound:?}"
    );
    fresh
}

/// What became of one client's calls around a cut: see [`client_calls`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientCalls {
    /// Writes acknowledged (applied) [`CUT_GRACE`] after the cut or later.
    pub acked: u64,
    /// Calls invoked after the cut that failed.
    pub failed: u64,
    /// Of those, the ones a coordinator refused for too few live
    /// replicas (the driver's "Not enough nodes are alive").
    pub unavailable: u64,
    /// Calls invoked after the cut of unknown outcome, or not completed.
    pub unknown: u64,
    /// The last error of those calls.
    pub last_error: String,
}

impl std::fmt::Display for ClientCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} writes acknowledged, {} calls failed ({} refused: not enough nodes alive), \
             {} unknown; last error: {}",
            self.acked, self.failed, self.unavailable, self.unknown, self.last_error
        )
    }
}

/// `client`'s calls in a cut's window `(cut_ns, to_ns)`.
pub fn client_calls(history: &History, client: u64, cut_ns: u64, to_ns: u64) -> ClientCalls {
    let after_ns = cut_ns + CUT_GRACE.as_nanos() as u64;
    let mut calls = ClientCalls::default();
    for op in history.operations() {
        if op.client != client {
            continue;
        }
        if let Outcome::Ok {
            reply: Reply::Applied(_),
        } = op.outcome
        {
            if op.completed_ns.is_some_and(|t| t > after_ns && t < to_ns) {
                calls.acked += 1;
            }
        }
        if op.invoked_ns <= cut_ns || op.invoked_ns >= to_ns {
            continue;
        }
        match &op.outcome {
            Outcome::Ok { .. } => {}
            Outcome::Fail { error } => {
                calls.failed += 1;
                if error.contains("Not enough nodes are alive") {
                    calls.unavailable += 1;
                }
                calls.last_error = error.clone();
            }
            Outcome::Unknown { error } => {
                calls.unknown += 1;
                calls.last_error = error.clone();
            }
            Outcome::Pending => calls.unknown += 1,
        }
    }
    calls
}

/// Puts acknowledged (applied) that completed in `(from_ns, to_ns)`.
pub fn acked_between(history: &History, from_ns: u64, to_ns: u64) -> u64 {
    acked_after(history, from_ns) - acked_after(history, to_ns)
}

/// Calls of the workload invoked in `(from_ns, to_ns)` that were not
/// answered Ok: failed, or of unknown outcome (timed out, connection
/// lost), or never completed.
pub fn unsettled_between(history: &History, from_ns: u64, to_ns: u64) -> u64 {
    history
        .operations()
        .iter()
        .filter(|op| op.client != STALE_READER)
        .filter(|op| op.invoked_ns > from_ns && op.invoked_ns < to_ns)
        .filter(|op| !matches!(op.outcome, Outcome::Ok { .. }))
        .count() as u64
}

/// The version of the newest acknowledged write to `key` in `history`.
pub fn newest_acked(history: &History, key: &Key) -> Option<u64> {
    history
        .operations()
        .into_iter()
        .filter(|op| op.key == key.as_str())
        .filter_map(|op| match op.outcome {
            Outcome::Ok {
                reply: Reply::Applied(row),
            } => Some(row.version),
            _ => None,
        })
        .max()
}

/// One read of `key` that a cut-off `member` served alone, recorded into
/// `history` as [`STALE_READER`]'s get: invoked before `read` runs,
/// completed with what it returned (`(version, value)`, or `None`: never
/// written there, nothing recorded but the invocation). The read is
/// checked to be stale first: older than a write to its key acknowledged
/// before it. Whether a read was recorded.
pub fn stale_read(
    history: &History,
    member: &str,
    key: &Key,
    read: impl FnOnce() -> Option<(u64, Vec<u8>)>,
) -> bool {
    let acked_version = newest_acked(history, key);
    let id = history.invoke(STALE_READER, key.as_str(), Call::Get);
    let Some((version, value)) = read() else {
        return false;
    };
    assert!(
        acked_version.is_some_and(|acked| version < acked),
        "negative control: {member}'s {key} (version {version}) is not older than the \
         acknowledged {acked_version:?}: the read is not stale, so it shows nothing"
    );
    let row = RowRecord {
        version,
        value: Value(value.into()),
    };
    history.complete(
        id,
        Outcome::Ok {
            reply: Reply::Row(Some(row)),
        },
    );
    true
}

/// The workload's own calls (every client but [`STALE_READER`]), and all
/// of them (the negative control's last).
pub fn own_and_all(history: &History) -> (History, History) {
    let (own, control): (Vec<_>, Vec<_>) = history
        .operations()
        .into_iter()
        .partition(|op| op.client != STALE_READER);
    let all = History::from_operations(own.iter().cloned().chain(control).collect());
    (History::from_operations(own), all)
}

/// The negative control's end: `all` (the workload's history with
/// `stale_reads` reads a cut-off member served alone, `how`) must be
/// judged `NotLinearizable`; records its row and prints it.
pub fn assert_caught(
    test: &str,
    backend: &str,
    setup: &str,
    what: &str,
    how: &str,
    all: &History,
    stale_reads: usize,
) {
    assert!(
        stale_reads > 0,
        "negative control ({what}): no stale read was recorded"
    );
    let control = linearizability::check(all);
    assert_eq!(
        control.verdict(),
        Verdict::NotLinearizable,
        "negative control: {stale_reads} stale reads ({how}) were judged {:?} beside the \
         acknowledged writes",
        control.verdict()
    );
    println!(
        "{test}: negative control: {what}: {stale_reads} stale reads ({how}) make the history {:?}",
        control.verdict()
    );
    FaultRow {
        suite: "cluster",
        backend: backend.into(),
        setup: setup.into(),
        fault: format!("negative control: {what}; {how} added as a client's"),
        counts: Counts::of(all),
        verdict: format!(
            "{:?} ({} ops): caught, as it must be",
            control.verdict(),
            control.ops()
        ),
        ..Default::default()
    }
    .record();
}
