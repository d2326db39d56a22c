//! The `once` workload: `Idempotency::run`, idempotent execution of an
//! operation per key.
//!
//! Each client has its own `Idempotency` handle on the cell's scope, as
//! separate processes would. The operation itself does nothing but count
//! its runs, so the figures are the recipe's. Two variants:
//! - **new key**: every call is on a key never used before: claim, run,
//!   complete (the recipe's budget: two conditional writes), then the
//!   completion's notification for waiters (a request on backends with
//!   notifications, a no-op call on the others; the `notifies` column
//!   counts these calls);
//! - **completed key**: every call is on a key completed before the cell
//!   started (one of a few, per client): the claim, a conditional write
//!   expecting the key absent, meets the completed record and returns its
//!   result — one round trip, counted as a conflict.
//!
//! Every call checks that it ran the operation exactly when the outcome
//! says so (`Executed` on a new key, `Replayed` on a completed one); the
//! finish checks that the operation ran once per new key in all (and never
//! for a completed one), then deletes the rows (`once/SCOPE/KEY`).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bakery::{CountingStore, Execution, Idempotency, RunError, VersionedStore};

use super::prelude::*;

/// The `once` workload.
#[derive(Debug, Clone, Copy)]
pub struct OnceWorkload;

const NEW: Variant = Variant::new("new", "Idempotency::run, new key");
const REPLAY: Variant = Variant::new("replay", "Idempotency::run, completed key");

/// Completed keys each client of a `replay` cell cycles through.
const REPLAY_KEYS_PER_CLIENT: u64 = 4;

/// The payload of every call (a key names one request).
const PAYLOAD: &[u8] = b"bench";

/// Extra column: `notify` calls (after each completion) in the timed part.
const NOTIFIES: &str = "notifies";

/// The `once` workload as the registry lists it.
pub const SPEC: WorkloadSpec = WorkloadSpec::new("once", "runs", &[NEW, REPLAY], &OnceWorkload)
    .summary("Idempotency::run on a new key and on a completed key.")
    .title(
        "once: Idempotency::run, a handle per client, on a new key (claim + complete) and on \
         a completed key (replay) (runs/s; notifies = calls to notify waiters, included in the \
         round trips)",
    )
    .extra_columns(&[NOTIFIES]);

#[async_trait]
impl Workload for OnceWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        let scope = cell.recipe_name();
        let replay = cell.variant == REPLAY.id;
        let prepare_error = prepare_error("once", store);
        let executed = Arc::new(AtomicU64::new(0));
        // Per client, how many keys it has used (new) or has (replay).
        let used: Arc<[AtomicU64]> = (0..cell.clients).map(|_| AtomicU64::new(0)).collect();
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for index in 0..cell.clients {
            // Its own counter on top of the cell's, for the notify column.
            let own = Arc::new(CountingStore::new(store.counted.clone()));
            let counted: Arc<dyn VersionedStore> = own.clone();
            let once = Idempotency::builder(counted, &scope)
                .build()
                .map_err(prepare_error)?;
            clients.push(Box::new(OnceClient {
                index,
                once,
                own,
                replay,
                next: 0,
                used: used.clone(),
                executed: executed.clone(),
                notifies_before: None,
            }));
        }
        // Uncounted: writes the completed keys before the cell starts
        // (replay) and names the rows to delete afterwards.
        let setup = Idempotency::builder(store.raw.clone(), &scope)
            .build()
            .map_err(prepare_error)?;
        if replay {
            for (index, used) in used.iter().enumerate() {
                for n in 0..REPLAY_KEYS_PER_CLIENT {
                    used.store(n + 1, Ordering::Relaxed);
                    let key = key_name(index, n);
                    match setup
                        .run(&key, PAYLOAD, |_| async { Ok::<u64, Infallible>(n) })
                        .await
                    {
                        Ok(Execution::Executed(_)) => {}
                        Err(RunError::Store(err)) => return Err(prepare_error(err)),
                        other => {
                            return Err(BenchError::Internal(format!(
                                "once: setting up completed key {key}: {other:?}"
                            )))
                        }
                    }
                }
            }
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(OnceFinish {
                store: store.raw.clone(),
                once: setup,
                used,
                executed,
                replay,
            })),
        })
    }
}

/// Key `n` of client `index`.
fn key_name(index: usize, n: u64) -> String {
    format!("c{index}-{n}")
}

/// `once.run` on `key` with an operation that counts its runs in
/// `executed`; an error if it ran when the outcome says replayed, or the
/// reverse. Returns whether it ran.
async fn run_counted(once: &Idempotency, key: &str, executed: &AtomicU64) -> Result<bool, OpError> {
    let mut ran = false;
    let outcome = once
        .run(key, PAYLOAD, |_| {
            ran = true;
            executed.fetch_add(1, Ordering::Relaxed);
            async { Ok::<u64, Infallible>(1) }
        })
        .await
        .map_err(|e| OpError(crate::error::one_line(&e.to_string())))?;
    if ran != matches!(outcome, Execution::Executed(_)) {
        return Err(OpError(format!(
            "key {key}: the operation {} but the outcome is {outcome:?}",
            if ran { "ran" } else { "did not run" }
        )));
    }
    Ok(ran)
}

/// One handle running keys.
struct OnceClient {
    index: usize,
    once: Idempotency,
    /// Counts this client's store calls (for [`NOTIFIES`]).
    own: Arc<CountingStore>,
    /// `replay` variant: cycle through completed keys.
    replay: bool,
    /// Operations so far (warm-up included).
    next: u64,
    used: Arc<[AtomicU64]>,
    executed: Arc<AtomicU64>,
    /// Notifies after the warm-up operation.
    notifies_before: Option<u64>,
}

#[async_trait]
impl BenchClient for OnceClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let n = self.next;
        self.next += 1;
        let key = if self.replay {
            key_name(self.index, n % REPLAY_KEYS_PER_CLIENT)
        } else {
            // Counted before the call: a failed call may have written it.
            self.used[self.index].store(n + 1, Ordering::Relaxed);
            key_name(self.index, n)
        };
        let result = run_counted(&self.once, &key, &self.executed).await;
        if self.notifies_before.is_none() {
            self.notifies_before = Some(self.own.counts().notifies);
        }
        match (self.replay, result?) {
            (false, true) | (true, false) => Ok(()),
            (true, true) => Err(OpError(format!("completed key {key} ran again"))),
            (false, false) => Err(OpError(format!("new key {key} was not run"))),
        }
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        let before = self.notifies_before.unwrap_or(0);
        vec![(NOTIFIES, self.own.counts().notifies.saturating_sub(before))]
    }
}

/// Checks that the operation ran once per key, then deletes the rows.
struct OnceFinish {
    store: Arc<dyn VersionedStore>,
    /// The cell's scope, uncounted: names the rows to delete.
    once: Idempotency,
    used: Arc<[AtomicU64]>,
    executed: Arc<AtomicU64>,
    /// `replay`: the keys were run by the setup, so no run is expected.
    replay: bool,
}

#[async_trait]
impl Finish for OnceFinish {
    async fn finish(self: Box<Self>, had_errors: bool) -> Vec<String> {
        let keys: u64 = self.used.iter().map(|n| n.load(Ordering::Relaxed)).sum();
        let runs = self.executed.load(Ordering::Relaxed);
        let expected = if self.replay { 0 } else { keys };
        let mut problems = Vec::new();
        // A failed call may have claimed its key without running it: with
        // errors, fewer runs than keys, never more.
        if runs > expected || (!had_errors && runs != expected) {
            problems.push(format!(
                "the operation ran {runs} times for {expected} keys (once per key expected)"
            ));
        }
        for (index, used) in self.used.iter().enumerate() {
            for n in 0..used.load(Ordering::Relaxed) {
                if let Ok(key) = self.once.row_key(&key_name(index, n)) {
                    delete_quietly(&*self.store, &key).await;
                }
            }
        }
        problems
    }
}
