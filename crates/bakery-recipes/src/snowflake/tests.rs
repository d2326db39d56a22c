//! The snowflake on a MemoryStore, with a wall clock that follows tokio's
//! paused time plus an offset the tests move (a clock going back, a
//! machine ahead of another).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use bakery_core::{
    async_trait, Bytes, CountingStore, Key, MemoryStore, PutOutcome, StoreLayer, Version,
};
use tokio::time::Instant;

use super::*;

/// Wall time: tokio's (paused) time since the test began, from the
/// layout's epoch plus a day, plus `offset_ms`, plus a millisecond every
/// thousand readings (paused time stands still while a task spins).
#[derive(Debug)]
struct TestClock {
    start: Instant,
    offset_ms: AtomicI64,
    readings: std::sync::atomic::AtomicU64,
}

impl TestClock {
    fn new() -> Arc<TestClock> {
        Arc::new(TestClock {
            start: Instant::now(),
            offset_ms: AtomicI64::new(0),
            readings: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Move the clock by `ms` (back when negative).
    fn shift(&self, ms: i64) {
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

const DAY_MS: u64 = 86_400_000;

impl Clock for TestClock {
    fn unix_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).expect("ms");
        let spun = self.readings.fetch_add(1, Ordering::Relaxed) / 1000;
        let base = DEFAULT_EPOCH_MS + DAY_MS + elapsed + spun;
        base.saturating_add_signed(self.offset_ms.load(Ordering::SeqCst))
    }
}

/// A store whose calls fail while `down` (a partition from the store).
#[derive(Debug)]
struct Partitioned {
    inner: MemoryStore,
    down: AtomicBool,
}

#[async_trait]
impl StoreLayer for Partitioned {
    fn inner(&self) -> &dyn VersionedStore {
        &self.inner
    }

    async fn get(&self, key: &Key) -> Result<Option<bakery_core::Row>> {
        self.check()?;
        self.inner.get(key).await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        self.check()?;
        self.inner.put_if_version(key, expected, value).await
    }
}

impl Partitioned {
    fn check(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(Error::new(ErrorKind::Unavailable, "memory", "partitioned"))
        } else {
            Ok(())
        }
    }
}

/// Two generators on one memory store, in a layout of two worker ids:
/// `a` through `cut`, which a test can partition, `b` through `store`.
struct TwoWorkers {
    cut: Arc<Partitioned>,
    store: Arc<dyn VersionedStore>,
    clock: Arc<TestClock>,
    layout: Layout,
    a: Snowflake,
    b: Snowflake,
}

fn two_workers() -> TwoWorkers {
    let memory = MemoryStore::new();
    let cut = Arc::new(Partitioned {
        inner: memory.handle(),
        down: AtomicBool::new(false),
    });
    let cut_store: Arc<dyn VersionedStore> = cut.clone();
    let store: Arc<dyn VersionedStore> = Arc::new(memory.handle());
    let clock = TestClock::new();
    let layout = Layout::default().worker_bits(1);
    let a = builder(&cut_store, &clock)
        .layout(layout)
        .build()
        .expect("a");
    let b = builder(&store, &clock).layout(layout).build().expect("b");
    TwoWorkers {
        cut,
        store,
        clock,
        layout,
        a,
        b,
    }
}

fn builder(store: &Arc<dyn VersionedStore>, clock: &Arc<TestClock>) -> SnowflakeBuilder {
    Snowflake::builder(store.clone(), "ids")
        .clock(clock.clone())
        .lease(Duration::from_secs(3))
}

fn memory() -> Arc<dyn VersionedStore> {
    Arc::new(MemoryStore::new())
}

async fn take(ids: &Snowflake, n: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(ids.next().await.expect("next"));
    }
    out
}

fn increasing(ids: &[u64]) -> bool {
    ids.windows(2).all(|pair| pair[0] < pair[1])
}

#[tokio::test(start_paused = true)]
async fn generators_take_the_lowest_free_worker_ids_and_never_collide() {
    let store = memory();
    let clock = TestClock::new();
    let a = builder(&store, &clock).build().expect("a");
    let b = builder(&store, &clock).build().expect("b");
    let before = clock.unix_ms();
    let (from_a, from_b) = (take(&a, 5000).await, take(&b, 5000).await);
    assert_eq!((a.worker(), b.worker()), (Some(0), Some(1)));
    assert!(increasing(&from_a) && increasing(&from_b));
    let all: HashSet<u64> = from_a.iter().chain(&from_b).copied().collect();
    assert_eq!(all.len(), 10_000, "every id unique");
    let layout = a.layout();
    assert!(from_a.iter().all(|&id| layout.decode(id).worker == 0));
    let first = layout.decode(from_a[0]);
    assert!(
        (before..=clock.unix_ms()).contains(&first.unix_ms),
        "the clock's time"
    );
}

/// A generator of 2 sequence bits: 4 ids a tick.
fn four_a_tick() -> Snowflake {
    builder(&memory(), &TestClock::new())
        .layout(Layout::default().sequence_bits(2))
        .build()
        .expect("build")
}

#[tokio::test(start_paused = true)]
async fn a_full_sequence_waits_for_the_next_tick() {
    let ids = four_a_tick();
    let issued = take(&ids, 12).await;
    assert!(increasing(&issued));
    let ticks: Vec<u64> = issued
        .iter()
        .map(|&id| ids.layout().decode(id).tick)
        .collect();
    let mut per_tick = std::collections::BTreeMap::new();
    for tick in &ticks {
        *per_tick.entry(tick).or_insert(0) += 1;
    }
    assert!(
        per_tick.values().all(|&n| n <= 4),
        "at most 4 ids a tick: {ticks:?}"
    );
    assert!(per_tick.len() >= 3, "{ticks:?}");
}

/// A batch issues what `next` would: increasing ids, at most a tick's
/// sequence a tick, each tick's run one range of consecutive integers, and
/// the ids after it above it; a batch of none is empty.
#[tokio::test(start_paused = true)]
async fn a_batch_is_runs_of_consecutive_ids_one_per_tick() {
    let ids = four_a_tick();
    let before = ids.next().await.expect("next");
    let batch = ids.next_batch(10).await.expect("batch");
    assert_eq!(batch.len(), 10);
    let issued: Vec<u64> = std::iter::once(before).chain(batch.iter()).collect();
    assert!(increasing(&issued), "{issued:?}");
    let layout = ids.layout();
    for run in batch.ranges() {
        let (first, last) = (layout.decode(run.start), layout.decode(run.end - 1));
        assert_eq!(first.tick, last.tick, "a run within one tick: {run:?}");
        assert!(
            run.end - run.start <= 4,
            "at most a tick's sequence: {run:?}"
        );
    }
    assert!(batch.ranges().len() >= 3, "{:?}", batch.ranges());
    let run_ticks: Vec<u64> = batch
        .ranges()
        .iter()
        .map(|run| layout.decode(run.start).tick)
        .collect();
    assert!(increasing(&run_ticks), "one run a tick: {run_ticks:?}");
    let after = ids.next().await.expect("next");
    assert!(after > issued[issued.len() - 1]);
    assert!(ids.next_batch(0).await.expect("none").is_empty());
}

/// A batch within one tick's sequence is one range from one clock read.
#[tokio::test(start_paused = true)]
async fn a_batch_within_a_tick_is_one_range() {
    let ids = builder(&memory(), &TestClock::new())
        .build()
        .expect("build");
    ids.next().await.expect("lease first");
    let batch = ids.next_batch(100).await.expect("batch");
    assert_eq!(batch.ranges().len(), 1, "{:?}", batch.ranges());
    assert_eq!(batch.len(), 100);
}

#[tokio::test(start_paused = true)]
async fn a_clock_going_back_is_waited_for_within_the_bound_and_refused_beyond_it() {
    let store = memory();
    let clock = TestClock::new();
    let ids = builder(&store, &clock)
        .max_clock_wait(Duration::from_secs(2))
        .build()
        .expect("build");
    let before = take(&ids, 3).await;
    clock.shift(-1500);
    // The tick it was in goes on while its sequence lasts; then the next
    // tick is 1.5 s away on this clock: waited for.
    let started = Instant::now();
    let during = take(&ids, 5000).await;
    assert!(
        increasing(&[before, during.clone()].concat()),
        "no timestamp reused"
    );
    assert!(started.elapsed() >= Duration::from_millis(1400), "waited");
    let after = during[during.len() - 1];

    clock.shift(-60_000);
    // Within the tick it was in, the sequence goes on: an id above.
    let mut last = after;
    let err = loop {
        match ids.next().await {
            Ok(id) => {
                assert!(id > last);
                last = id;
            }
            Err(err) => break err,
        }
    };
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains("behind"), "{err}");
    // Once the clock is right again, ids go on above the last one.
    clock.shift(60_000);
    assert!(ids.next().await.expect("clock back") > last);
}

#[tokio::test(start_paused = true)]
async fn a_successor_on_the_slot_starts_above_the_ticks_its_predecessor_used() {
    let store = memory();
    let ahead = TestClock::new();
    ahead.shift(700); // this machine's clock is 0.7 s ahead
    let behind = TestClock::new();
    let first = builder(&store, &ahead).build().expect("first");
    let issued = take(&first, 100).await;
    first.release().await.expect("release");

    let second = builder(&store, &behind).build().expect("second");
    let started = Instant::now();
    let next = second.next().await.expect("next");
    assert_eq!(second.worker(), Some(0), "the same worker id");
    assert!(
        next > *issued.last().expect("ids"),
        "above the predecessor's ids"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "waited for its clock"
    );
}

const HOUR_MS: i64 = 3_600_000;

/// A generator on `store` whose clock is `offset_ms` off, in `layout`.
fn off_by(store: &Arc<dyn VersionedStore>, offset_ms: i64, layout: Layout) -> Snowflake {
    let clock = TestClock::new();
    clock.shift(offset_ms);
    builder(store, &clock)
        .layout(layout)
        .build()
        .expect("build")
}

/// A process whose clock ran an hour ahead leaves worker id 0 marked an
/// hour ahead: the next processes pass it over for the next free worker
/// id, rather than refuse for an hour, and the mark stays for whoever
/// takes it again.
#[tokio::test(start_paused = true)]
async fn a_free_worker_id_marked_too_far_ahead_is_passed_over_for_the_next() {
    let store = memory();
    let layout = Layout::default();
    let ahead = off_by(&store, HOUR_MS, layout);
    let from_ahead = take(&ahead, 100).await;
    assert_eq!(ahead.worker(), Some(0));
    ahead.release().await.expect("release");

    let right = off_by(&store, 0, layout);
    let from_right = take(&right, 5000).await;
    assert_eq!(right.worker(), Some(1), "worker id 0 passed over");
    assert!(increasing(&from_right));
    assert!(from_right.iter().all(|&id| layout.decode(id).worker == 1));

    // A process whose own clock is an hour behind passes over both (worker
    // id 1 is held, worker id 0's mark two hours ahead of it) and issues
    // ids of older timestamps on a fresh worker id.
    let behind = off_by(&store, -HOUR_MS, layout);
    let from_behind = take(&behind, 100).await;
    assert_eq!(behind.worker(), Some(2));
    assert!(increasing(&from_behind));
    assert!(from_behind[from_behind.len() - 1] < from_right[0]);

    // Worker id 0 kept its mark: a process on the hour-ahead clock takes
    // it again and goes on above the ids issued on it.
    let again = off_by(&store, HOUR_MS, layout);
    let from_again = take(&again, 100).await;
    assert_eq!(again.worker(), Some(0));
    assert!(from_again[0] > from_ahead[from_ahead.len() - 1]);

    let all: HashSet<u64> = [from_ahead, from_right, from_behind, from_again]
        .iter()
        .flatten()
        .copied()
        .collect();
    assert_eq!(all.len(), 5300, "every id unique");
}

/// Only when every worker id is held or marked too far ahead does a
/// process refuse, naming both counts and `max_clock_wait`: at once when
/// none is held, else once no held one was freed in time.
#[tokio::test(start_paused = true)]
async fn when_every_worker_id_is_held_or_marked_too_far_ahead_it_refuses_naming_both() {
    let store = memory();
    let layout = Layout::default().worker_bits(1);
    let ahead = off_by(&store, HOUR_MS, layout);
    take(&ahead, 10).await;
    ahead.release().await.expect("release");
    let holder = off_by(&store, 0, layout);
    take(&holder, 10).await;
    assert_eq!(holder.worker(), Some(1));

    let clock = TestClock::new();
    let refused = builder(&store, &clock)
        .layout(layout)
        .acquire_timeout(Duration::from_secs(2))
        .build()
        .expect("build");
    let err = refused.next().await.expect_err("held or marked ahead");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    let message = err.to_string();
    for part in [
        "of its 2, 1 held and 1 free but marked",
        "max_clock_wait (1s)",
        "within 2s",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    // Once the held one is given back, it is taken.
    holder.release().await.expect("release");
    refused.next().await.expect("worker id 1 freed");
    assert_eq!(refused.worker(), Some(1));
    refused.release().await.expect("release");

    // Both marked ahead (by processes 2 h and 1 h ahead), none held: it
    // refuses at once.
    let two_hours = off_by(&store, 2 * HOUR_MS, layout);
    take(&two_hours, 10).await;
    two_hours.release().await.expect("release");
    let one_hour = off_by(&store, HOUR_MS, layout);
    take(&one_hour, 10).await;
    assert_eq!(one_hour.worker(), Some(1), "worker id 0 passed over");
    one_hour.release().await.expect("release");
    let started = Instant::now();
    let err = off_by(&store, 0, layout)
        .next()
        .await
        .expect_err("every worker id marked ahead");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(
        err.to_string()
            .contains("of its 2, 0 held and 2 free but marked"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(1), "no wait");
}

#[tokio::test(start_paused = true)]
async fn a_silent_holder_s_worker_id_comes_back_after_its_lease_above_its_ticks() {
    let TwoWorkers {
        cut: silent,
        store,
        clock,
        layout,
        a,
        b,
    } = two_workers();
    let from_a = take(&a, 10).await;
    take(&b, 1).await;
    // `a` goes silent, as a crashed process does: no renewal, no release.
    silent.down.store(true, Ordering::SeqCst);

    let c = builder(&store, &clock)
        .layout(layout)
        .acquire_timeout(Duration::from_secs(20))
        .build()
        .expect("c");
    let started = Instant::now();
    let id = c
        .next()
        .await
        .expect("the silent holder's worker id comes back");
    assert_eq!(c.worker(), Some(0));
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "only after its lease"
    );
    assert!(id > *from_a.last().expect("ids"));
    assert_eq!(a.worker(), None, "the silent one knows it holds nothing");
}

#[tokio::test(start_paused = true)]
async fn when_every_worker_id_is_held_the_wait_is_bounded_and_names_the_capacity() {
    let store = memory();
    let clock = TestClock::new();
    let layout = Layout::default().worker_bits(1);
    let held: Vec<Snowflake> = (0..2)
        .map(|_| {
            builder(&store, &clock)
                .layout(layout)
                .build()
                .expect("build")
        })
        .collect();
    for ids in &held {
        ids.next().await.expect("next");
    }
    let third = builder(&store, &clock)
        .layout(layout)
        .acquire_timeout(Duration::from_secs(5))
        .build()
        .expect("third");
    let err = third.next().await.expect_err("no worker id free");
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    assert!(err.to_string().contains("all 2 worker ids"), "{err}");

    let waiting = tokio::spawn({
        let third = third.clone();
        async move { third.next().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held[1].release().await.expect("release");
    waiting
        .await
        .expect("join")
        .expect("granted once one is free");
    assert_eq!(third.worker(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_generator_cut_off_from_the_store_stops_before_its_lease_could_end() {
    let store = Arc::new(Partitioned {
        inner: MemoryStore::new(),
        down: AtomicBool::new(false),
    });
    let dyn_store: Arc<dyn VersionedStore> = store.clone();
    let clock = TestClock::new();
    let ids = builder(&dyn_store, &clock).build().expect("build");
    let before = ids.next().await.expect("next");
    store.down.store(true, Ordering::SeqCst);
    // Ids keep coming while the lease is surely still its own...
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = ids.next().await.expect("within the lease");
    assert!(during > before);
    // ...and stop a tenth of a lease before it could end for others.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let err = ids.next().await.expect_err("no id without a lease");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(ids.worker(), None);

    store.down.store(false, Ordering::SeqCst);
    let after = ids.next().await.expect("leased again");
    assert!(after > during);
}

#[tokio::test(start_paused = true)]
async fn issuing_costs_one_write_per_lease_renewal() {
    let counting = Arc::new(CountingStore::new(memory()));
    let store: Arc<dyn VersionedStore> = counting.clone();
    let clock = TestClock::new();
    let ids = builder(&store, &clock).build().expect("build");
    // The layout row, the lock's grant and the first mark (a beat).
    ids.next().await.expect("first");
    let setup = counting.counts().puts;
    assert_eq!(setup, 3, "layout, grant, first mark");
    // Ten leases of steady issuing: a renewal every lease/3, nothing else.
    let started = Instant::now();
    let mut last = 0;
    while started.elapsed() < Duration::from_secs(30) {
        let id = ids.next().await.expect("next");
        assert!(id > last);
        last = id;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let writes = counting.counts().puts - setup;
    assert!(
        (29..=31).contains(&writes),
        "{writes} writes in 30 s of a 3 s lease: one per renewal (every 1 s)"
    );
    ids.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_successor_far_behind_starts_above_what_a_cut_off_holder_issued_to_its_end() {
    let TwoWorkers {
        cut,
        store,
        layout,
        a,
        b,
        ..
    } = two_workers();
    let mut from_a = take(&a, 1).await;
    take(&b, 1).await;
    // Cut off from the store, `a` issues until it stops, a tenth of a
    // lease before its lease could end.
    cut.down.store(true, Ordering::SeqCst);
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        match a.next().await {
            Ok(id) => from_a.push(id),
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
                break;
            }
        }
    }
    assert!(from_a.len() > 200, "issued {} ids", from_a.len());
    // Its successor's clock is 4 s behind: only the mark the lock's row
    // kept tells it where `a` may have got to.
    let behind = TestClock::new();
    behind.shift(-4_000);
    let c = builder(&store, &behind)
        .layout(layout)
        .max_clock_wait(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(20))
        .build()
        .expect("c");
    let first = c.next().await.expect("the cut-off holder's worker id");
    assert_eq!(c.worker(), Some(0));
    let last = *from_a.last().expect("ids");
    assert!(
        layout.decode(first).tick > layout.decode(last).tick,
        "{first} above {last}"
    );
}

#[tokio::test(start_paused = true)]
async fn clients_with_another_layout_are_refused() {
    let store = memory();
    let clock = TestClock::new();
    builder(&store, &clock)
        .build()
        .expect("a")
        .next()
        .await
        .expect("next");
    let other = builder(&store, &clock)
        .layout(Layout::default().worker_bits(9).sequence_bits(13))
        .build()
        .expect("builds: checked at the first call");
    let err = other.next().await.expect_err("another layout");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("another layout"), "{err}");
}

#[test]
fn bad_names_and_layouts_are_refused_at_build() {
    let store = memory();
    let err = Snowflake::builder(store.clone(), "bad/name")
        .build()
        .expect_err("name");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = Snowflake::builder(store.clone(), "ids")
        .layout(Layout::default().timestamp_bits(30))
        .build()
        .expect_err("too short");
    assert!(err.to_string().contains("years"), "{err}");
    let err = Snowflake::builder(store, "ids")
        .lease(Duration::from_millis(1))
        .build()
        .expect_err("lease");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}
