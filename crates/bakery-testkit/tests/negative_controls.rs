//! Negative controls: the suite must FAIL on stores that break the
//! contract, or its passes would prove nothing.

use std::sync::{Arc, Mutex};

use bakery_core::{
    async_trait, Capabilities, Key, MemoryStore, Result, Row, StoreLayer, VersionedStore, Watch,
    WatchSender,
};
use bakery_testkit::{Case, Clients, Target};
use bakery_verify::{Fault, FaultyStore};

/// How the broken store misrepresents what it is. (Stores that break the
/// compare-and-set itself are `bakery_verify::FaultyStore`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breakage {
    /// Claims PERSISTENT, SHARED and LINEARIZABLE_READS, but every open is
    /// a private MemoryStore.
    FalselyShared,
    /// One shared state, but each store's `get` returns what its previous
    /// `get` read (a lagging replica); claims SHARED and LINEARIZABLE_READS.
    StaleReads,
    /// One shared state across opens, but claims nothing.
    MissingClaims,
    /// Claims WATCH, but `notify` wakes nobody.
    DeafWatch,
    /// Claims WATCH, but `notify` wakes the watches of every key.
    NoisyWatch,
}

/// A MemoryStore with one [`Breakage`].
#[derive(Debug)]
struct BrokenStore {
    inner: Arc<MemoryStore>,
    breakage: Breakage,
    /// What the previous `get` read ([`Breakage::StaleReads`]).
    last_read: Mutex<Option<Option<Row>>>,
    /// Every watch handed out ([`Breakage::DeafWatch`], [`Breakage::NoisyWatch`]).
    watchers: Mutex<Vec<WatchSender>>,
}

impl BrokenStore {
    fn open(inner: Arc<MemoryStore>, breakage: Breakage) -> Arc<dyn VersionedStore> {
        Arc::new(BrokenStore {
            inner,
            breakage,
            last_read: Mutex::new(None),
            watchers: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl StoreLayer for BrokenStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }
    fn backend(&self) -> &'static str {
        "broken"
    }
    fn capabilities(&self) -> Capabilities {
        match self.breakage {
            Breakage::FalselyShared => {
                Capabilities::PERSISTENT | Capabilities::SHARED | Capabilities::LINEARIZABLE_READS
            }
            Breakage::StaleReads => Capabilities::SHARED | Capabilities::LINEARIZABLE_READS,
            Breakage::DeafWatch | Breakage::NoisyWatch => Capabilities::WATCH,
            _ => Capabilities::empty(),
        }
    }
    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let now = self.inner.get(key).await?;
        if self.breakage != Breakage::StaleReads {
            return Ok(now);
        }
        let previous = self.last_read.lock().unwrap().replace(now.clone());
        Ok(previous.unwrap_or(now))
    }
    async fn watch(&self, _key: &Key) -> Result<Option<Watch>> {
        if !matches!(self.breakage, Breakage::DeafWatch | Breakage::NoisyWatch) {
            return Ok(None);
        }
        let (sender, watch) = Watch::channel();
        self.watchers.lock().unwrap().push(sender);
        Ok(Some(watch))
    }
    async fn notify(&self, _key: &Key) -> Result<()> {
        if self.breakage == Breakage::NoisyWatch {
            for sender in self.watchers.lock().unwrap().iter() {
                sender.wake();
            }
        }
        Ok(())
    }
}

fn case(name: &str) -> Case {
    bakery_testkit::cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

/// Run `case` on a store with `fault`; returns true if it failed (panicked).
fn fails(name: &str, fault: Fault) -> bool {
    let store: Arc<dyn VersionedStore> =
        Arc::new(FaultyStore::new(Arc::new(MemoryStore::new()), fault));
    bakery_testkit::runtime(4)
        .block_on(async move { tokio::spawn(case(name).run_on(store)).await.is_err() })
}

/// A lost update needs an interleaving: run a bounded number of times, so
/// the control is not flaky, and report whether any run failed.
fn fails_within_20_runs(name: &str, fault: Fault) -> bool {
    (0..20).any(|_| fails(name, fault))
}

#[test]
fn race_case_detects_lost_updates_of_a_read_then_write_cas() {
    assert!(
        fails_within_20_runs("cas::race_of_8_tasks_loses_no_update", Fault::LostConflicts),
        "the race case passed 20 times on a non-atomic CAS"
    );
}

#[test]
fn stale_case_detects_a_conflict_without_the_current_row() {
    assert!(fails(
        "cas::stale_version_conflicts_with_current_row",
        Fault::ConflictWithoutRow
    ));
    assert!(fails(
        "cas::second_create_conflicts_with_current_row",
        Fault::ConflictWithoutRow
    ));
}

#[test]
fn sequence_case_detects_duplicates_from_a_read_then_write_cas() {
    assert!(
        fails_within_20_runs(
            "sequence::eight_clients_10000_ids_unique_and_increasing",
            Fault::LostConflicts
        ),
        "8 clients never collided on a non-atomic CAS in 20 runs"
    );
}

/// The recorded-history case rejects stale reads and lost conflicts, and
/// accepts unknown outcomes (which are not bugs).
#[test]
fn verify_case_detects_stale_reads_and_lost_conflicts() {
    let name = "verify::recorded_histories_check_out";
    assert!(
        fails_within_20_runs(name, Fault::StaleReads),
        "stale reads passed 20 runs"
    );
    assert!(
        fails_within_20_runs(name, Fault::LostConflicts),
        "lost conflicts passed 20 runs"
    );
    assert!(
        !fails(name, Fault::UnknownOutcomes),
        "unknown outcomes were called a bug"
    );
}

// ---- Capability claims: a false claim (or a missing one) must fail. ----

/// A target whose opens share one state, except under
/// [`Breakage::FalselyShared`] where each open is a private MemoryStore.
fn broken_target(breakage: Breakage) -> Target {
    let shared = Arc::new(MemoryStore::new());
    let open = move || {
        let inner = match breakage {
            Breakage::FalselyShared => Arc::new(MemoryStore::new()),
            _ => shared.clone(),
        };
        async move { Ok(BrokenStore::open(inner, breakage)) }
    };
    let first = block_on(open()).expect("open");
    Target::new(first, open)
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// Run capability case `name` on a target; returns true if it failed.
fn target_fails(name: &str, target: Target) -> bool {
    let case = bakery_testkit::capability_cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no capability case {name}"));
    bakery_testkit::runtime(4)
        .block_on(async move { tokio::spawn((case.run)(target)).await.is_err() })
}

/// The reference: each open is a new, private MemoryStore.
fn memory_target() -> Target {
    Target::new(Arc::new(MemoryStore::new()), || async {
        Ok(Arc::new(MemoryStore::new()) as Arc<dyn VersionedStore>)
    })
}

const PERSISTENT: &str = "capabilities::persistent_rows_survive_a_reopen";
const SHARED: &str = "capabilities::shared_stores_see_one_state";
const LINEARIZABLE: &str = "capabilities::linearizable_reads_see_every_acknowledged_write";

const WATCH_WAKES: &str = "watch::a_change_by_another_client_wakes_every_watch";
const WATCH_KEYS: &str = "watch::a_change_of_another_key_wakes_no_watch";

#[test]
fn capability_and_watch_cases_pass_on_memory_stores() {
    for case in [PERSISTENT, SHARED, LINEARIZABLE, WATCH_WAKES, WATCH_KEYS] {
        assert!(
            !target_fails(case, memory_target()),
            "{case} failed on MemoryStore"
        );
    }
}

/// Each case fails on a store that breaks what it checks: a false or a
/// missing capability claim, stale reads, a deaf or a noisy watch.
#[test]
fn capability_and_watch_cases_detect_the_breakage_they_check() {
    for (case, breakage) in [
        (PERSISTENT, Breakage::FalselyShared),
        (SHARED, Breakage::FalselyShared),
        (PERSISTENT, Breakage::MissingClaims),
        (SHARED, Breakage::MissingClaims),
        (LINEARIZABLE, Breakage::StaleReads),
        (WATCH_WAKES, Breakage::DeafWatch),
        (WATCH_KEYS, Breakage::NoisyWatch),
    ] {
        assert!(
            target_fails(case, broken_target(breakage)),
            "{case} passed on a store with {breakage:?}"
        );
    }
}

// ---- The lock family with separate clients on a broken store. ----

/// A hang guard for a case on a broken store: a case that waits this long
/// for a grant that never comes has failed (the runner's own guard is the
/// same idea, longer).
const BROKEN_CASE_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Run multi-client case `name` with every client on a store of its own
/// over one shared MemoryStore state (as separate processes on one
/// server), each a `FaultyStore` with `fault` if one is given; true if it
/// failed (panicked, or still waited for a grant after
/// [`BROKEN_CASE_LIMIT`]).
fn fails_separate(name: &str, fault: Option<Fault>) -> bool {
    let case = case(name);
    assert!(case.many_clients, "{name} is not a case of several clients");
    let memory = MemoryStore::new();
    let open = move |memory: &MemoryStore| -> Arc<dyn VersionedStore> {
        let store = Arc::new(memory.handle());
        match fault {
            Some(fault) => Arc::new(FaultyStore::new(store, fault)),
            None => store,
        }
    };
    let store = open(&memory);
    let clients = Clients::separate(store, move || {
        let client = open(&memory);
        async move { Ok(client) }
    });
    bakery_testkit::runtime(4).block_on(async move {
        let run = tokio::spawn((case.run)(clients));
        let failed = match tokio::time::timeout(BROKEN_CASE_LIMIT, run).await {
            Ok(joined) => joined.is_err(),
            Err(_) => true,
        };
        failed
    })
}

const LOCK_EXCLUSION: &str = "lock::fenced_counter_eight_clients_fifty_each";
const SEMAPHORE_BOUND: &str = "semaphore::never_more_than_n_holders_at_once";
const RWLOCK_EXCLUSION: &str = "rwlock::never_a_writer_with_anyone";
const ONE_LEADER: &str = "election::one_leader_at_a_time_and_terms_increase";

const LOCK_FAMILY: [&str; 4] = [
    LOCK_EXCLUSION,
    SEMAPHORE_BOUND,
    RWLOCK_EXCLUSION,
    ONE_LEADER,
];

#[test]
fn lock_family_cases_pass_with_separate_clients_on_a_sound_store() {
    for name in LOCK_FAMILY {
        assert!(!fails_separate(name, None), "{name} failed on MemoryStore");
    }
}

/// Each case of the lock family fails with separate clients on a store
/// whose compare-and-set reads then writes, and on one whose reads lag.
#[test]
fn lock_family_cases_detect_a_read_then_write_cas_and_stale_reads() {
    for name in LOCK_FAMILY {
        for fault in [Fault::LostConflicts, Fault::StaleReads] {
            assert!(
                fails_separate(name, Some(fault)),
                "{name} passed on a store with {fault:?}"
            );
        }
    }
}
