//! The capability flags, verified: each case checks that a backend which
//! claims a [`Capabilities`] flag behaves as the flag's docs promise,
//! using a second store opened on the same target.
//!
//! | flag | claimed: the case asserts | not claimed |
//! |---|---|---|
//! | PERSISTENT | a row written through store A is read back (value and version) through a store B opened after A was dropped, and B's put at that version applies | with SHARED neither: B does not see the row (the rows lived in A) |
//! | SHARED | two stores open at once see one state: each one's writes are the other's conflicts, with the other's row | B does not see A's rows, and its writes do not reach A |
//! | LINEARIZABLE_READS | 50 acknowledged writes from two writers, each read back through another store right after its ack; concurrent readers never see a version older than one acknowledged before the read began, nor older than their own last read | nothing asserted |
//!
//! WATCH is checked in `watch.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bakery_core::{
    Bytes, Capabilities, DeleteOutcome, Key, PutOutcome, Row, Version, VersionedStore,
};

use crate::{target_case, unique_key, Target, TargetCase};

pub(crate) fn cases() -> Vec<TargetCase> {
    vec![
        target_case!("capabilities", PERSISTENT, persistent_rows_survive_a_reopen),
        target_case!("capabilities", SHARED, shared_stores_see_one_state),
        target_case!(
            "capabilities",
            LINEARIZABLE_READS,
            linearizable_reads_see_every_acknowledged_write
        ),
    ]
}

fn applied(outcome: PutOutcome, what: &str) -> Row {
    match outcome {
        PutOutcome::Applied(row) => row,
        PutOutcome::Conflict(current) => {
            panic!("{what}: expected Applied, got Conflict({current:?})")
        }
    }
}

async fn put(
    store: &dyn VersionedStore,
    key: &Key,
    expected: Option<Version>,
    value: &'static str,
) -> PutOutcome {
    store
        .put_if_version(key, expected, Bytes::from_static(value.as_bytes()))
        .await
        .unwrap_or_else(|e| panic!("put {key} at {expected:?}: {e}"))
}

async fn get(store: &dyn VersionedStore, key: &Key) -> Option<Row> {
    store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"))
}

/// The claims of a reopened store must be the claims of the first: recipes
/// decide on them, whichever connection they hold.
fn same_claims(first: &dyn VersionedStore, again: &dyn VersionedStore) -> Capabilities {
    let caps = first.capabilities();
    assert_eq!(
        again.capabilities(),
        caps,
        "a second store on the same target claims other capabilities"
    );
    caps
}

/// PERSISTENT: rows outlive the store that wrote them. Store A writes two
/// versions and is dropped; store B, opened afterwards on the same target,
/// reads the last one back unchanged and can update it at its version.
///
/// A server restart cannot be provoked from a case, so this proves that
/// the rows live outside the process's store object; for an in-process
/// backend a reopen IS a restart of its storage.
async fn persistent_rows_survive_a_reopen(target: Target) {
    let first = target.store();
    let key = unique_key("persistent");
    let a = target.reopen().await;
    let caps = same_claims(&*first, &*a);
    let v1 = applied(put(&*a, &key, None, "before").await, "create through A");
    let v2 = applied(
        put(&*a, &key, Some(v1.version), "persisted").await,
        "update through A",
    );
    drop(a);
    let b = target.reopen().await;
    let read = get(&*b, &key).await;
    if caps.contains(Capabilities::PERSISTENT) {
        assert_eq!(
            read,
            Some(v2.clone()),
            "claims PERSISTENT, but a store reopened after the writer was dropped \
             does not read back the row it wrote (value and version)"
        );
        let v3 = applied(
            put(&*b, &key, Some(v2.version), "after").await,
            "claims PERSISTENT: a put at the version read back after a reopen",
        );
        assert!(
            v3.version > v2.version,
            "version after a reopen must exceed the persisted one: {} -> {}",
            v2.version,
            v3.version
        );
        assert_eq!(
            put(&*b, &key, Some(v1.version), "stale").await,
            PutOutcome::Conflict(Some(v3.clone())),
            "claims PERSISTENT: a version from before the reopen must still conflict"
        );
        assert_eq!(get(&*b, &key).await, Some(v3));
    } else if !caps.contains(Capabilities::SHARED) {
        // Neither persistent nor shared: the rows lived in the dropped store.
        assert_eq!(
            read, None,
            "claims neither PERSISTENT nor SHARED, yet a reopened store reads the \
             row of a dropped one (the claim is missing)"
        );
    } else {
        eprintln!(
            "capabilities::persistent: {} does not claim PERSISTENT; \
             a restart cannot be provoked here, nothing to assert",
            first.backend()
        );
    }
}

/// SHARED: two stores open at once on the same target see one state —
/// each one's writes are the other's conflicts, carrying the other's row.
/// Not claimed: the second store sees nothing of the first.
async fn shared_stores_see_one_state(target: Target) {
    let a = target.store();
    let b = target.reopen().await;
    let caps = same_claims(&*a, &*b);
    let key = unique_key("shared");
    let v1 = applied(put(&*a, &key, None, "from-a").await, "create through A");
    if !caps.contains(Capabilities::SHARED) {
        assert_eq!(
            get(&*b, &key).await,
            None,
            "does not claim SHARED, yet a second store reads the first one's row \
             (the claim is missing)"
        );
        let own = applied(
            put(&*b, &key, None, "from-b").await,
            "does not claim SHARED: B's create of a key only A holds",
        );
        assert_eq!(&own.value[..], b"from-b");
        assert_eq!(get(&*a, &key).await, Some(v1), "B's write reached A");
        return;
    }
    let claims = "claims SHARED";
    assert_eq!(
        get(&*b, &key).await,
        Some(v1.clone()),
        "{claims}: B does not read A's row"
    );
    assert_eq!(
        put(&*b, &key, None, "from-b").await,
        PutOutcome::Conflict(Some(v1.clone())),
        "{claims}: B's create of a key A created must conflict with A's row"
    );
    let v2 = applied(
        put(&*a, &key, Some(v1.version), "a-again").await,
        "update through A",
    );
    assert_eq!(
        put(&*b, &key, Some(v1.version), "b-stale").await,
        PutOutcome::Conflict(Some(v2.clone())),
        "{claims}: B's stale put must conflict and return A's row"
    );
    let v3 = applied(
        put(&*b, &key, Some(v2.version), "from-b").await,
        "claims SHARED: B's put at A's version",
    );
    assert!(v3.version > v2.version, "{v2:?} -> {v3:?}");
    assert_eq!(
        get(&*a, &key).await,
        Some(v3.clone()),
        "{claims}: A does not read B's row"
    );
    assert_eq!(
        put(&*a, &key, Some(v2.version), "a-stale").await,
        PutOutcome::Conflict(Some(v3.clone())),
        "{claims}: A's stale put must conflict and return B's row"
    );
    let deleted = a
        .delete_if_version(&key, v3.version)
        .await
        .unwrap_or_else(|e| panic!("delete through A: {e}"));
    assert_eq!(deleted, DeleteOutcome::Deleted);
    assert_eq!(
        get(&*b, &key).await,
        None,
        "{claims}: B still reads a row A deleted"
    );
    assert_eq!(
        put(&*b, &key, Some(v3.version), "zombie").await,
        PutOutcome::Conflict(None),
        "{claims}: B updated a row A deleted"
    );
}

/// Acknowledged writes each writer makes.
const ROUNDS: usize = 50;
/// Writers racing on the key, each through its own store.
const WRITERS: usize = 2;
/// Reads each concurrent reader makes at least.
const MIN_READS: usize = 10;

/// LINEARIZABLE_READS: a read sees every write acknowledged before it
/// began. Two writers (each on its own store when the backend is SHARED)
/// make 50 acknowledged updates each of one key; after every ack the
/// writer reads the key through yet another store and must see that
/// version or a later one. Two readers loop meanwhile: a read never
/// returns a version older than the newest acknowledged before it began,
/// nor older than the reader's previous read; and every version read
/// carries the value written at it.
async fn linearizable_reads_see_every_acknowledged_write(target: Target) {
    let first = target.store();
    let caps = first.capabilities();
    if !caps.contains(Capabilities::LINEARIZABLE_READS) {
        eprintln!(
            "capabilities::linearizable_reads: {} does not claim LINEARIZABLE_READS; \
             nothing to assert",
            first.backend()
        );
        return;
    }
    // Without SHARED, a second store would be another state: use the first.
    let shared = caps.contains(Capabilities::SHARED);
    let mut stores = vec![first.clone()];
    for _ in 0..WRITERS + 1 {
        stores.push(if shared {
            target.reopen().await
        } else {
            first.clone()
        });
    }
    // stores[0]: writer 0 and reader 0; stores[1]: the post-ack reader and
    // reader 1; stores[2..]: the other writers.
    let reader_store = stores[1].clone();
    let key = unique_key("linearizable");
    let written: Arc<Mutex<HashMap<Version, String>>> = Arc::default();
    let created = applied(put(&*first, &key, None, "w-init").await, "create");
    written
        .lock()
        .unwrap()
        .insert(created.version, "w-init".into());
    assert_eq!(
        get(&*reader_store, &key).await,
        Some(created.clone()),
        "claims LINEARIZABLE_READS: another store does not read an acknowledged create"
    );
    let acked = Arc::new(AtomicU64::new(created.version));
    let done = Arc::new(AtomicBool::new(false));

    let readers: Vec<_> = (0..2)
        .map(|r| {
            let store = stores[r].clone();
            let (key, acked, done) = (key.clone(), acked.clone(), done.clone());
            tokio::spawn(async move {
                let mut seen: Vec<(Version, Bytes)> = Vec::new();
                let mut last = 0;
                // Until the writers are done, and at least a few reads each.
                while !(done.load(Ordering::SeqCst) && seen.len() >= MIN_READS) {
                    let floor = acked.load(Ordering::SeqCst);
                    let row = get(&*store, &key).await.expect("the key exists");
                    assert!(
                        row.version >= floor,
                        "claims LINEARIZABLE_READS: reader {r} read version {} after \
                         version {floor} was acknowledged",
                        row.version
                    );
                    assert!(
                        row.version >= last,
                        "claims LINEARIZABLE_READS: reader {r} read version {} after \
                         having read version {last}",
                        row.version
                    );
                    last = row.version;
                    seen.push((row.version, row.value));
                    tokio::task::yield_now().await;
                }
                seen
            })
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = if w == 0 {
                stores[0].clone()
            } else {
                stores[1 + w].clone()
            };
            let reader = reader_store.clone();
            let (key, acked, written) = (key.clone(), acked.clone(), written.clone());
            tokio::spawn(async move {
                let mut current = Some(get(&*store, &key).await.expect("created"));
                let mut made = 0;
                while made < ROUNDS {
                    let value = format!("w{w}-{made}");
                    let expected = current.as_ref().map(|row| row.version);
                    let outcome = store
                        .put_if_version(&key, expected, Bytes::from(value.clone()))
                        .await
                        .unwrap_or_else(|e| panic!("writer {w}: put: {e}"));
                    let row = match outcome {
                        PutOutcome::Conflict(now) => {
                            current = now;
                            continue;
                        }
                        PutOutcome::Applied(row) => row,
                    };
                    written.lock().unwrap().insert(row.version, value);
                    acked.fetch_max(row.version, Ordering::SeqCst);
                    made += 1;
                    // A read begun after the ack, through another store.
                    let seen = get(&*reader, &key).await.expect("the key exists");
                    assert!(
                        seen.version >= row.version,
                        "claims LINEARIZABLE_READS: writer {w}'s put was acknowledged at \
                         version {}, then another store read version {} ({seen:?})",
                        row.version,
                        seen.version
                    );
                    if seen.version == row.version {
                        assert_eq!(seen, row, "the read of an acknowledged version");
                    }
                    current = Some(row);
                }
            })
        })
        .collect();

    let mut failure = None;
    for writer in writers {
        if let Err(e) = writer.await {
            failure.get_or_insert(e);
        }
    }
    done.store(true, Ordering::SeqCst);
    let mut reads = 0;
    for reader in readers {
        match reader.await {
            Ok(seen) => {
                let written = written.lock().unwrap();
                for (version, value) in &seen {
                    // Every write applied was acknowledged and recorded
                    // before its writer finished.
                    let expected = written.get(version).unwrap_or_else(|| {
                        panic!("a read returned version {version}, which no write made")
                    });
                    assert_eq!(
                        &value[..],
                        expected.as_bytes(),
                        "version {version} read with another value than written"
                    );
                }
                reads += seen.len();
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("a writer or reader task failed: {e}");
    }
    let last = get(&*first, &key).await.expect("the key exists");
    assert_eq!(
        last.version,
        acked.load(Ordering::SeqCst),
        "the final read is not the last acknowledged write"
    );
    assert!(reads >= 2 * MIN_READS, "the readers read {reads} times");
}
