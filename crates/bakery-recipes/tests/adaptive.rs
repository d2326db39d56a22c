//! Adaptive block sizing, on tokio's paused clock (deterministic: no real
//! time passes).

use std::sync::Arc;
use std::time::Duration;

use bakery_core::MemoryStore;
use bakery_recipes::sequence::Sequence;

async fn block_of(store: &MemoryStore) -> u64 {
    Sequence::inspect(store, "adaptive")
        .await
        .expect("inspect")
        .expect("exists")
        .block_size
}

#[tokio::test(start_paused = true)]
async fn blocks_grow_when_used_fast_and_shrink_when_used_slowly() {
    let store = Arc::new(MemoryStore::new());
    let seq = Sequence::builder(store.clone(), "adaptive")
        .adaptive(10, 80)
        .target_block_duration(Duration::from_secs(10))
        .prefetch(false)
        .build()
        .expect("seq");
    // Used up instantly: each next block doubles, up to the maximum.
    let mut sizes = Vec::new();
    for _ in 0..5 {
        let block = block_of_next(&seq, &store).await;
        sizes.push(block);
    }
    assert_eq!(sizes, vec![10, 20, 40, 80, 80]);
    // Each block now lasts 60 s (> 2 × target): the size halves to the minimum.
    let mut sizes = Vec::new();
    for _ in 0..4 {
        tokio::time::advance(Duration::from_secs(60)).await;
        sizes.push(block_of_next(&seq, &store).await);
    }
    assert_eq!(sizes, vec![40, 20, 10, 10]);
}

/// Use up the current block and take one id from the next; returns the
/// size of the block that id came from.
async fn block_of_next(seq: &Sequence, store: &MemoryStore) -> u64 {
    let before = seq.stats().reservations;
    while seq.stats().reservations == before {
        seq.next().await.expect("next");
    }
    block_of(store).await
}

#[tokio::test]
async fn ids_are_exhausted_with_a_typed_error_near_u64_max() {
    let store = Arc::new(MemoryStore::new());
    let seq = Sequence::builder(store, "edge")
        .start(u64::MAX - 5)
        .block_size(3)
        .prefetch(false)
        .build()
        .expect("seq");
    let ids = seq.next_batch(3).await.expect("three fit");
    assert_eq!(
        ids.iter().collect::<Vec<_>>(),
        vec![u64::MAX - 5, u64::MAX - 4, u64::MAX - 3]
    );
    let err = seq.next_batch(3).await.expect_err("would overflow");
    assert_eq!(err.kind(), bakery_core::ErrorKind::Exhausted);
}
