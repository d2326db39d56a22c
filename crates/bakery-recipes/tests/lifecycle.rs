//! A sequence's background work ends with its last handle (paused clock:
//! deterministic, no real time passes).

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{
    async_trait, Bytes, Capabilities, CountingStore, Key, MemoryStore, PutOutcome, Result, Row,
    StoreLayer, Version, VersionedStore,
};
use bakery_recipes::sequence::Sequence;

/// Forwards every call after a delay: a slow server.
#[derive(Debug)]
struct SlowStore(Arc<CountingStore>);

#[async_trait]
impl StoreLayer for SlowStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.0.as_ref()
    }
    fn backend(&self) -> &'static str {
        "slow"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::empty()
    }
    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        a_second_later(self.inner().get(key)).await
    }
    // A reservation (the prefetch's too) takes a second.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        a_second_later(self.inner().put_if_version(key, expected, value)).await
    }
}

/// Runs `call` (lazy until awaited) after a second.
async fn a_second_later<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::sleep(Duration::from_secs(1)).await;
    call.await
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_aborts_the_prefetch() {
    let counting = Arc::new(CountingStore::new(Arc::new(MemoryStore::new())));
    let store = Arc::new(SlowStore(counting.clone()));
    let seq = Sequence::builder(store, "s")
        .block_size(10)
        .prefetch_at(0.0)
        .build()
        .expect("seq");
    let clone = seq.clone();
    assert_eq!(seq.next().await.expect("first"), 1); // starts the prefetch
    assert_eq!(seq.stats().prefetches, 1);
    drop(seq);
    // A clone is still alive: the prefetch goes on and lands.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(counting.counts().puts, 2, "first block + prefetched block");
    // The clone uses the prefetched block, starting the next prefetch, then goes.
    for _ in 0..10 {
        clone.next().await.expect("next");
    }
    assert_eq!(clone.stats().prefetches, 2);
    drop(clone);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        counting.counts().puts,
        2,
        "the last handle's prefetch was aborted before it reached the store"
    );
}
