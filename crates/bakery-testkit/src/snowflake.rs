//! The snowflake recipe on a real store: worker ids leased from it, their
//! marks kept in their locks' rows.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Bytes, ErrorKind, Key, VersionedStore};
use bakery_recipes::snowflake::{Clock, Layout, Snowflake, SystemClock, KEY_PREFIX};

use crate::faults::{Fault, FaultStore};
use crate::support::{assert_corrupt, on_clients};
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("snowflake":
        eight_clients_hold_distinct_worker_ids_and_never_collide,
        a_released_worker_id_goes_on_above_its_last_id,
        a_full_worker_table_is_a_bounded_wait_naming_its_capacity,
        a_worker_id_marked_too_far_ahead_is_passed_over,
        a_client_with_another_layout_is_refused,
        corrupt_rows_are_typed_errors_and_kept,
        unknown_outcomes_while_leasing_are_settled_by_a_read,
    )
}

fn build(store: &Arc<dyn VersionedStore>, name: &str, layout: Layout) -> Snowflake {
    Snowflake::builder(store.clone(), name)
        .layout(layout)
        .build()
        .expect("valid snowflake settings")
}

async fn take(ids: &Snowflake, n: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(ids.next().await.expect("next"));
    }
    out
}

/// 8 clients, each a generator of its own (on a store of its own in the
/// separate topology), 20,000 ids each, all holding their worker ids at
/// once: 8 worker ids, every id unique, each client's increasing.
async fn eight_clients_hold_distinct_worker_ids_and_never_collide(clients: Clients) {
    const CLIENTS: usize = 8;
    const IDS: usize = 20_000;
    let name = unique_name("eight");
    let layout = Layout::default();
    let per_client = on_clients(&clients, CLIENTS, |_, store| {
        let ids = build(&store, &name, layout);
        async move {
            let issued = take(&ids, IDS).await;
            // Held until every client is done.
            (issued, ids)
        }
    });
    let per_client = per_client.await;
    let mut all = HashSet::new();
    let mut workers = HashSet::new();
    for (client, (ids, generator)) in per_client.iter().enumerate() {
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            panic!(
                "client {client}: ids not increasing: {} then {}",
                w[0], w[1]
            );
        }
        let worker = generator.worker().expect("still held");
        assert!(
            ids.iter().all(|&id| layout.decode(id).worker == worker),
            "client {client}: ids of another worker id than {worker}"
        );
        workers.insert(worker);
        for &id in ids {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(workers.len(), CLIENTS, "distinct worker ids: {workers:?}");
    assert!(
        workers.iter().all(|&w| w < CLIENTS as u32),
        "the lowest free worker ids: {workers:?}"
    );
    for (_, generator) in per_client {
        generator.release().await.expect("release");
    }
}

async fn a_released_worker_id_goes_on_above_its_last_id(store: Arc<dyn VersionedStore>) {
    let name = unique_name("reuse");
    let first = build(&store, &name, Layout::default());
    let before = take(&first, 1000).await;
    let worker = first.worker().expect("held");
    first.release().await.expect("release");
    let second = build(&store, &name, Layout::default());
    let after = take(&second, 10).await;
    assert_eq!(
        second.worker(),
        Some(worker),
        "the freed worker id is the lowest"
    );
    assert!(
        after[0] > before[before.len() - 1],
        "the next holder starts above the last id: {} after {}",
        after[0],
        before[before.len() - 1]
    );
    second.release().await.expect("release");
}

async fn a_full_worker_table_is_a_bounded_wait_naming_its_capacity(store: Arc<dyn VersionedStore>) {
    let name = unique_name("full");
    let layout = Layout::default().worker_bits(1);
    let held = [build(&store, &name, layout), build(&store, &name, layout)];
    for ids in &held {
        ids.next().await.expect("next");
    }
    let third = Snowflake::builder(store.clone(), &name)
        .layout(layout)
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .expect("build");
    let err = third.next().await.expect_err("every worker id is held");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    crate::assert_mentions(&err, &["all 2 worker ids", "worker bits"]);
    for ids in held {
        ids.release().await.expect("release");
    }
    assert!(third.next().await.is_ok(), "a worker id is free again");
    third.release().await.expect("release");
}

/// The system clock, an hour ahead.
struct HourAhead;

impl Clock for HourAhead {
    fn unix_ms(&self) -> u64 {
        SystemClock.unix_ms() + 3_600_000
    }
}

/// A client whose clock ran an hour ahead leaves worker id 0 marked an
/// hour ahead: a client on the right clock passes it over and takes worker
/// id 1 rather than refuse for an hour; with that one held too, a third
/// refuses, naming both counts and `max_clock_wait`; the mark stays for
/// the next holder of worker id 0.
async fn a_worker_id_marked_too_far_ahead_is_passed_over(store: Arc<dyn VersionedStore>) {
    let name = unique_name("ahead");
    let layout = Layout::default().worker_bits(1);
    let hour_ahead = || {
        Snowflake::builder(store.clone(), &name)
            .layout(layout)
            .clock(Arc::new(HourAhead))
            .build()
            .expect("build")
    };
    let ahead = hour_ahead();
    let from_ahead = take(&ahead, 100).await;
    assert_eq!(ahead.worker(), Some(0));
    ahead.release().await.expect("release");

    let right = build(&store, &name, layout);
    let from_right = take(&right, 1000).await;
    assert_eq!(right.worker(), Some(1), "worker id 0 passed over");
    assert!(from_right.windows(2).all(|w| w[0] < w[1]), "increasing");
    assert!(
        from_right.iter().all(|&id| layout.decode(id).worker == 1),
        "on worker id 1"
    );

    let third = Snowflake::builder(store.clone(), &name)
        .layout(layout)
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .expect("build");
    let err = third
        .next()
        .await
        .expect_err("every worker id held or marked ahead");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    crate::assert_mentions(
        &err,
        &["1 held and 1 free but marked", "ahead", "max_clock_wait"],
    );
    right.release().await.expect("release");

    let again = hour_ahead();
    let from_again = take(&again, 10).await;
    assert_eq!(again.worker(), Some(0), "the lowest usable on its clock");
    assert!(
        from_again[0] > from_ahead[from_ahead.len() - 1],
        "above the ids issued on worker id 0: its mark was kept"
    );
    again.release().await.expect("release");
    let all: HashSet<u64> = [from_ahead, from_right, from_again]
        .iter()
        .flatten()
        .copied()
        .collect();
    assert_eq!(all.len(), 1110, "every id unique");
}

async fn a_client_with_another_layout_is_refused(store: Arc<dyn VersionedStore>) {
    let name = unique_name("layout");
    let first = build(&store, &name, Layout::default());
    first.next().await.expect("next");
    let other = build(
        &store,
        &name,
        Layout::default().worker_bits(8).sequence_bits(14),
    );
    let err = other.next().await.expect_err("another layout");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert_eq!(
        Snowflake::stored_layout(&*store, &name)
            .await
            .expect("read"),
        Some(Layout::default()),
        "the first layout stays"
    );
    first.release().await.expect("release");
}

async fn corrupt_rows_are_typed_errors_and_kept(store: Arc<dyn VersionedStore>) {
    let garbage = Bytes::from_static(b"\xffnot json");
    // The layout row `snowflake/NAME`, and the lock row (with its mark) of
    // worker id 0, the first one taken: `lock/snowflake.NAME.w0`.
    for (case, prefix, row) in [
        ("corrupt-layout", KEY_PREFIX, "{name}"),
        (
            "corrupt-mark",
            bakery_recipes::lock::KEY_PREFIX,
            "snowflake.{name}.w0",
        ),
    ] {
        let name = unique_name(case);
        let key = Key::with_prefix(prefix, &row.replace("{name}", &name)).expect("key");
        store
            .put_if_version(&key, None, garbage.clone())
            .await
            .expect("put")
            .applied()
            .expect("a new row");
        let result = build(&store, &name, Layout::default()).next().await;
        assert_corrupt(result, case);
        assert_kept(&store, &key, &garbage).await;
    }
}

async fn assert_kept(store: &Arc<dyn VersionedStore>, key: &Key, value: &Bytes) {
    let row = store.get(key).await.expect("get").expect("the row is kept");
    assert_eq!(&row.value, value, "{key} unchanged");
}

/// The writes of a first lease whose outcomes are unknown (the layout's
/// creation and the worker id's take, each reply lost after it applied,
/// then a request lost) are settled by reading their rows: the generator
/// leases worker id 0 and issues ids, not the store's error.
async fn unknown_outcomes_while_leasing_are_settled_by_a_read(store: Arc<dyn VersionedStore>) {
    let name = unique_name("unknown");
    let faulty = Arc::new(FaultStore::new(store.clone()));
    faulty.script([Fault::LoseReply, Fault::LoseReply, Fault::LoseRequest]);
    let ids = build(
        &(faulty.clone() as Arc<dyn VersionedStore>),
        &name,
        Layout::default(),
    );
    let issued = take(&ids, 100).await;
    assert_eq!(ids.worker(), Some(0), "the lowest worker id, taken once");
    assert_eq!(faulty.remaining(), 0, "every write met its fault");
    assert!(issued.windows(2).all(|w| w[0] < w[1]), "increasing");
    ids.release().await.expect("release");
    let again = build(&store, &name, Layout::default());
    assert!(
        take(&again, 1).await[0] > issued[issued.len() - 1],
        "the next holder starts above the last id"
    );
    again.release().await.expect("release");
}
