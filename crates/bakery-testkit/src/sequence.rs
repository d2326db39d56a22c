//! The sequence recipe on a real store.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use bakery_core::{Bytes, CountingStore, DeleteOutcome, ErrorKind, Key, VersionedStore};
use bakery_recipes::sequence::{Sequence, KEY_PREFIX};

use crate::faults::{Fault, FaultStore};
use crate::support::{assert_corrupt, on_clients};
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("sequence":
        ids_start_at_one_and_increase,
        eight_clients_10000_ids_unique_and_increasing,
        block_size_one_is_strictly_increasing_across_clients,
        conflicting_reservation_retries_without_a_read,
        handles_built_alike_are_one_client,
        unknown_outcome_is_never_reused,
        failed_prefetch_is_retried_inline,
        prefetch_reserves_before_the_block_runs_out,
        next_batch_spans_blocks,
        row_records_the_reserving_node,
        corrupt_row_is_a_typed_error_and_kept,
        deleted_row_is_refused_not_restarted,
        invalid_names_are_rejected,
    )
}

fn build(store: &Arc<dyn VersionedStore>, name: &str, block: u64) -> Sequence {
    with_prefetch(store, name, block, true)
}

/// A sequence of `block`-id blocks without prefetch: each block is
/// reserved when the previous one runs out, no sooner.
fn unprefetched(store: &Arc<dyn VersionedStore>, name: &str, block: u64) -> Sequence {
    with_prefetch(store, name, block, false)
}

fn with_prefetch(store: &Arc<dyn VersionedStore>, name: &str, block: u64, on: bool) -> Sequence {
    let builder = Sequence::builder(store.clone(), name).block_size(block);
    builder
        .prefetch(on)
        .build()
        .expect("valid sequence settings")
}

/// A client of its own, as another process would be: handles built alike
/// in one process share one client, so each gets its own node id.
fn client(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    block: u64,
    prefetch: bool,
    node: usize,
) -> Sequence {
    Sequence::builder(store.clone(), name)
        .block_size(block)
        .prefetch(prefetch)
        .node_id(format!("client-{node}"))
        .build()
        .expect("valid sequence settings")
}

async fn ids_start_at_one_and_increase(store: Arc<dyn VersionedStore>) {
    let seq = build(&store, &unique_name("start"), 3);
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(seq.next().await.expect("next"));
    }
    assert_eq!(
        ids,
        (1..=10).collect::<Vec<_>>(),
        "one client alone gets 1, 2, 3, …"
    );
}

/// 8 clients (each its own node, as separate processes would be) × 10,000
/// ids; small blocks so the clients contend on the row.
async fn eight_clients_10000_ids_unique_and_increasing(clients: Clients) {
    const CLIENTS: usize = 8;
    const IDS: usize = 10_000;
    let name = unique_name("eight");
    let per_client = on_clients(&clients, CLIENTS, |client, store| {
        let seq = self::client(&store, &name, 100 + client as u64 * 37, true, client);
        async move {
            let mut ids = Vec::with_capacity(IDS);
            while ids.len() < IDS {
                if client % 2 == 0 {
                    ids.push(seq.next().await.expect("next"));
                } else {
                    let want = (IDS - ids.len()).min(250) as u64;
                    ids.extend(seq.next_batch(want).await.expect("next_batch"));
                }
            }
            ids
        }
    });
    let mut all = HashSet::new();
    for (client, ids) in per_client.await.into_iter().enumerate() {
        assert_eq!(ids.len(), IDS);
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            panic!(
                "client {client}: ids not increasing: {} then {}",
                w[0], w[1]
            );
        }
        for id in ids {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(all.len(), CLIENTS * IDS);
}

/// With block size 1 each id is one CAS, so real-time order holds across
/// clients: an id obtained after another was returned is larger.
async fn block_size_one_is_strictly_increasing_across_clients(topology: Clients) {
    let name = unique_name("strict");
    let stores = topology.clients(7).await;
    let clients: Vec<_> = (0..3)
        .map(|n| client(&stores[n], &name, 1, true, n))
        .collect();
    let mut last = 0;
    for round in 0..20 {
        let id = clients[round % 3].next().await.expect("next");
        assert!(id > last, "round {round}: {id} after {last}");
        last = id;
    }
    // Concurrent clients: whenever one call ended before another began, its
    // id is smaller.
    let tasks: Vec<_> = (0..4)
        .map(|n| {
            let seq = client(&stores[3 + n], &name, 1, true, 3 + n);
            tokio::spawn(async move {
                let mut ops = Vec::new();
                for _ in 0..25 {
                    let began = Instant::now();
                    let id = seq.next().await.expect("next");
                    ops.push((began, Instant::now(), id));
                }
                ops
            })
        })
        .collect();
    let mut ops = Vec::new();
    for task in tasks {
        ops.extend(task.await.expect("client panicked"));
    }
    for a in &ops {
        for b in &ops {
            if a.1 < b.0 {
                assert!(
                    a.2 < b.2,
                    "id {} returned before id {} was asked for, yet is larger",
                    a.2,
                    b.2
                );
            }
        }
    }
}

async fn conflicting_reservation_retries_without_a_read(store: Arc<dyn VersionedStore>) {
    let counting = Arc::new(CountingStore::new(store));
    let dyn_store: Arc<dyn VersionedStore> = counting.clone();
    let name = unique_name("noread");
    let a = client(&dyn_store, &name, 10, false, 1);
    let b = client(&dyn_store, &name, 10, false, 2);
    assert_eq!(a.next().await.expect("a"), 1);
    // b's first CAS ("create") conflicts and retries with the returned row.
    assert_eq!(b.next().await.expect("b"), 11);
    let counts = counting.counts();
    assert_eq!(counts.gets, 0, "no read was needed: {counts:?}");
    assert_eq!(
        counts.puts, 3,
        "create, conflicting create, update: {counts:?}"
    );
    assert_eq!(b.stats().conflicts, 1);
}

/// Handles built alike in one process (a handle per request, say) are one
/// client: they serve one block, so the second handle costs no round trip
/// and leaves no gap. Another node id is another client.
async fn handles_built_alike_are_one_client(store: Arc<dyn VersionedStore>) {
    let counting = Arc::new(CountingStore::new(store));
    let dyn_store: Arc<dyn VersionedStore> = counting.clone();
    let name = unique_name("alike");
    let first = unprefetched(&dyn_store, &name, 10);
    let second = unprefetched(&dyn_store, &name, 10);
    assert_eq!(first.next().await.expect("first"), 1);
    assert_eq!(second.next().await.expect("second"), 2, "the same block");
    assert_eq!(first.next().await.expect("first again"), 3);
    assert_eq!(counting.counts().puts, 1, "one reservation for both");
    // Other settings, or another node id: another client, another block.
    let other_block = unprefetched(&dyn_store, &name, 5);
    assert_eq!(other_block.next().await.expect("other block size"), 11);
    let other_node = client(&dyn_store, &name, 10, false, 1);
    assert_eq!(other_node.next().await.expect("other node"), 16);
    // Once every handle of a client is gone, the next one starts afresh:
    // the rest of the old block (4..=10) is a gap, never handed out again.
    drop((first, second));
    let fresh = unprefetched(&dyn_store, &name, 10);
    assert_eq!(fresh.next().await.expect("fresh"), 26);
}

async fn unknown_outcome_is_never_reused(store: Arc<dyn VersionedStore>) {
    let faulty = Arc::new(FaultStore::new(store.clone()));
    let dyn_store: Arc<dyn VersionedStore> = faulty.clone();
    let name = unique_name("unknown");
    let seq = unprefetched(&dyn_store, &name, 10);
    let first: Vec<_> = seq
        .next_batch(10)
        .await
        .expect("first block")
        .into_iter()
        .collect();
    assert_eq!(first, (1..=10).collect::<Vec<_>>());

    // The reservation of 11..=20 applies but its reply is lost.
    faulty.script([Fault::LoseReply]);
    let err = seq.next().await.expect_err("the reply was lost");
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    let state = Sequence::inspect(&*store, &name)
        .await
        .expect("inspect")
        .expect("exists");
    assert_eq!(state.next, 21, "the lost reservation did apply");
    let id = seq.next().await.expect("next after the unknown outcome");
    assert!(
        id >= 21,
        "id {id} comes from the range whose reservation outcome was unknown"
    );
    assert_eq!(seq.stats().abandoned, 1);

    // A request lost before it applied: the retry CASes at the same version,
    // so at most one of the two can ever apply and the range is safely ours.
    let rest = seq.next_batch(9).await.expect("rest of the block");
    assert_eq!(
        rest.iter().collect::<Vec<_>>(),
        (22..=30).collect::<Vec<_>>()
    );
    faulty.script([Fault::LoseRequest]);
    let err = seq.next().await.expect_err("the request was lost");
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    assert_eq!(seq.next().await.expect("retry"), 31);
    let state = Sequence::inspect(&*store, &name)
        .await
        .expect("inspect")
        .expect("exists");
    assert_eq!(state.next, 41);
}

async fn failed_prefetch_is_retried_inline(store: Arc<dyn VersionedStore>) {
    let faulty = Arc::new(FaultStore::new(store));
    let dyn_store: Arc<dyn VersionedStore> = faulty.clone();
    let seq = Sequence::builder(dyn_store, &unique_name("prefetch-fault"))
        .block_size(10)
        .prefetch_at(0.0)
        .build()
        .expect("seq");
    assert_eq!(seq.next().await.expect("first"), 1);
    // The prefetch started by the first id; make the NEXT reservation fail
    // with a lost reply. Whatever the timing, ids stay unique and increasing.
    faulty.script([Fault::LoseReply, Fault::Refuse]);
    let mut ids = vec![1];
    for _ in 0..40 {
        match seq.next().await {
            Ok(id) => ids.push(id),
            Err(e) => assert!(e.is_temporary(), "only injected faults may surface: {e}"),
        }
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "not increasing: {ids:?}"
    );
    assert_eq!(faulty.remaining(), 0, "both faults were hit");
}

async fn prefetch_reserves_before_the_block_runs_out(store: Arc<dyn VersionedStore>) {
    let seq = Sequence::builder(store, &unique_name("prefetch"))
        .block_size(100)
        .prefetch_at(0.2)
        .build()
        .expect("seq");
    let mut last = 0;
    for block in 0..5 {
        for _ in 0..21 {
            last = seq.next().await.expect("next");
        }
        // The 21st id crossed the 20% mark: the next block is on its way.
        seq.prefetched().await;
        for _ in 21..100 {
            let id = seq.next().await.expect("next");
            assert!(id > last);
            last = id;
        }
        let stats = seq.stats();
        assert_eq!(
            stats.waits, 1,
            "block {block}: only the very first block was waited for: {stats:?}"
        );
        assert_eq!(stats.reservations, block + 2, "{stats:?}");
    }
}

async fn next_batch_spans_blocks(store: Arc<dyn VersionedStore>) {
    let seq = unprefetched(&store, &unique_name("batch"), 7);
    let first = seq.next().await.expect("next");
    let batch = seq.next_batch(20).await.expect("batch");
    assert_eq!(batch.len(), 20);
    let ids: Vec<_> = batch.iter().collect();
    assert!(
        ids[0] > first && ids.windows(2).all(|w| w[0] < w[1]),
        "{ids:?}"
    );
    // 6 left in the first block, then one reservation of the remaining 14.
    assert_eq!(seq.stats().reservations, 2);
    assert_eq!(ids, (2..22).collect::<Vec<_>>());
}

async fn row_records_the_reserving_node(store: Arc<dyn VersionedStore>) {
    let name = unique_name("node");
    let seq = Sequence::builder(store.clone(), &name)
        .block_size(50)
        .prefetch(false)
        .node_id("node-a")
        .build()
        .expect("seq");
    assert_eq!(seq.next().await.expect("next"), 1);
    let state = Sequence::inspect(&*store, &name)
        .await
        .expect("inspect")
        .expect("exists");
    assert_eq!(
        (state.next, state.node.as_str(), state.block_size),
        (51, "node-a", 50)
    );
    assert!(Sequence::inspect(&*store, &unique_name("none"))
        .await
        .expect("inspect")
        .is_none());
}

async fn corrupt_row_is_a_typed_error_and_kept(store: Arc<dyn VersionedStore>) {
    let name = unique_name("corrupt");
    let key = Key::with_prefix(KEY_PREFIX, &name).expect("key");
    let junk = Bytes::from_static(b"\xff not json {");
    let row = store
        .put_if_version(&key, None, junk.clone())
        .await
        .expect("plant junk");
    assert!(row.is_applied());
    let seq = build(&store, &name, 10);
    assert_corrupt(seq.next().await, "junk is not a sequence");
    assert_corrupt(Sequence::inspect(&*store, &name).await, "inspect junk");
    let kept = store.get(&key).await.expect("get").expect("row kept");
    assert_eq!(kept.value, junk, "the foreign row must not be overwritten");
}

async fn deleted_row_is_refused_not_restarted(store: Arc<dyn VersionedStore>) {
    let name = unique_name("deleted");
    let seq = unprefetched(&store, &name, 2);
    assert_eq!(seq.next().await.expect("1"), 1);
    assert_eq!(seq.next().await.expect("2"), 2);
    let key = Key::with_prefix(KEY_PREFIX, &name).expect("key");
    let row = store.get(&key).await.expect("get").expect("exists");
    assert_eq!(
        store
            .delete_if_version(&key, row.version)
            .await
            .expect("delete"),
        DeleteOutcome::Deleted
    );
    let err = seq
        .next()
        .await
        .expect_err("restarting at 1 would repeat ids");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
}

async fn invalid_names_are_rejected(store: Arc<dyn VersionedStore>) {
    for bad in ["", "a/b", "a b", "naïve", "../etc"] {
        let err = Sequence::builder(store.clone(), bad)
            .build()
            .expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}: {err}");
    }
    let err = Sequence::builder(store, "ok")
        .block_size(0)
        .build()
        .expect_err("block 0");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}
