//! The `cas` workload: read-modify-write increments of a counter with
//! `put_if_version`, the primitive every recipe is built on.
//!
//! Each client keeps the last row it saw; an increment is one
//! `put_if_version` at that row's version, and a conflict retries with the
//! row the store handed back (no second read). Two variants:
//! - **shared key**: every client increments the same counter, so the
//!   conflicts per successful increment show what contention costs;
//! - **own key**: one counter per client, no contention: the store's
//!   plain conditional-write rate;
//! - **own key, 4 KiB rows**: the same with every row padded to
//!   [`LARGE_ROW`] bytes, about the size of a lock row with 64 waiters in
//!   its queue: set side by side with *own key*, it shows what the store
//!   itself charges for a larger row (a fsync of more pages, a larger
//!   replicated log entry), which no recipe built on one row can avoid.
//!
//! Afterwards the counters are read back: their sum must equal the
//! successful increments (a lost update would show here).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bakery::{Bytes, Key, PutOutcome, Row, VersionedStore};

use super::prelude::*;

/// Conflicts one increment may meet before it gives up with an error, so
/// a pathological store cannot spin a client forever.
const MAX_CONFLICTS_PER_OP: u32 = 100_000;

/// The `cas` workload.
#[derive(Debug, Clone, Copy)]
pub struct CasWorkload;

const SHARED: Variant = Variant::new("shared-key", "put_if_version, shared key");
pub(crate) const OWN: Variant = Variant::new("own-key", "put_if_version, key per client");
pub(crate) const OWN_LARGE: Variant =
    Variant::new("own-key-4k", "put_if_version, key per client, 4 KiB rows");

/// The row size of the [`OWN_LARGE`] variant, in bytes.
pub const LARGE_ROW: usize = 4096;

/// The `cas` workload as the registry lists it.
pub const SPEC: WorkloadSpec =
    WorkloadSpec::new("cas", "ops", &[SHARED, OWN, OWN_LARGE], &CasWorkload)
        .summary("Increments with put_if_version.")
        .title(
            "cas: read-modify-write increments with put_if_version (ops/s = successful increments)",
        );

#[async_trait]
impl Workload for CasWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        let key_of = |name: String| Key::new(name).map_err(prepare_error("cas", store));
        let keys: Vec<Key> = if cell.variant == OWN.id || cell.variant == OWN_LARGE.id {
            (0..cell.clients)
                .map(|i| key_of(format!("bench/{}/counter-{i}", cell.tag)))
                .collect::<Result<_, _>>()?
        } else {
            vec![key_of(format!("bench/{}/counter", cell.tag))?]
        };
        let applied = Arc::new(AtomicU64::new(0));
        let counted: Arc<dyn VersionedStore> = store.counted.clone();
        let clients = (0..cell.clients)
            .map(|i| {
                Box::new(CasClient {
                    store: counted.clone(),
                    key: keys[i % keys.len()].clone(),
                    current: None,
                    fresh: false,
                    filler: if cell.variant == OWN_LARGE.id {
                        filler(LARGE_ROW)
                    } else {
                        Vec::new()
                    },
                    applied: applied.clone(),
                }) as Box<dyn BenchClient>
            })
            .collect();
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(CasFinish {
                store: store.raw.clone(),
                keys,
                applied,
            })),
        })
    }
}

/// One client incrementing its counter.
struct CasClient {
    store: Arc<dyn VersionedStore>,
    key: Key,
    /// The last row seen (`None`: absent, when `fresh`).
    current: Option<Row>,
    /// False until the first read, and again after an error (whose write
    /// may or may not have applied), so the next increment re-reads.
    fresh: bool,
    /// What every written row is padded with, up to its length (empty: no
    /// padding). Made once, so a write costs the client a copy, not the
    /// making of 4 KiB (which on the memory store would be the cost
    /// measured).
    filler: Vec<u8>,
    /// Successful increments of the whole cell.
    applied: Arc<AtomicU64>,
}

#[async_trait]
impl BenchClient for CasClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let result = self.increment().await;
        if result.is_err() {
            self.fresh = false;
        }
        result
    }
}

impl CasClient {
    async fn increment(&mut self) -> Result<(), OpError> {
        if !self.fresh {
            self.current = self.store.get(&self.key).await?;
            self.fresh = true;
        }
        for _ in 0..MAX_CONFLICTS_PER_OP {
            let (count, expected) = match &self.current {
                Some(row) => (decode(row)?, Some(row.version)),
                None => (0, None),
            };
            let next = encode(count + 1, &self.filler);
            match self.store.put_if_version(&self.key, expected, next).await? {
                PutOutcome::Applied(row) => {
                    self.current = Some(row);
                    self.applied.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                // Counted by the CountingStore; retry with the row handed back.
                PutOutcome::Conflict(now) => self.current = now,
            }
        }
        Err(OpError(format!(
            "gave up after {MAX_CONFLICTS_PER_OP} conflicts on {}",
            self.key
        )))
    }
}

/// The row of counter `count`: ASCII decimal, then (when `filler` is not
/// empty) a space and the end of `filler`, so the row is as long as
/// `filler`.
fn encode(count: u64, filler: &[u8]) -> Bytes {
    let mut row = count.to_string().into_bytes();
    if row.len() < filler.len() {
        row.push(b' ');
        row.extend_from_slice(&filler[row.len()..]);
    }
    Bytes::from(row)
}

/// `len` printable bytes that do not repeat like spaces do, so a store
/// that compresses its values (PostgreSQL compresses any over 2 KiB)
/// still writes about `len` bytes.
fn filler(len: usize) -> Vec<u8> {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    // xorshift64: any fixed seed will do.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            CHARS[(state % CHARS.len() as u64) as usize]
        })
        .collect()
}

/// The counter a row holds (ASCII decimal, maybe followed by a space and
/// filler).
fn decode(row: &Row) -> Result<u64, OpError> {
    std::str::from_utf8(&row.value)
        .ok()
        .and_then(|text| text.split(' ').next()?.parse().ok())
        .ok_or_else(|| OpError(format!("row {} does not hold a counter", row.key)))
}

/// Checks that no increment was lost, then deletes the counters.
struct CasFinish {
    store: Arc<dyn VersionedStore>,
    keys: Vec<Key>,
    applied: Arc<AtomicU64>,
}

#[async_trait]
impl Finish for CasFinish {
    async fn finish(self: Box<Self>, had_errors: bool) -> Vec<String> {
        let mut tally = Tally::default();
        for key in &self.keys {
            tally.add(match self.store.get(key).await {
                Ok(row) => row
                    .map(|row| decode(&row))
                    .transpose()
                    .map_err(|OpError(message)| message),
                Err(err) => Err(format!("cannot read back {key}: {err}")),
            });
            delete_quietly(&*self.store, key).await;
        }
        let applied = self.applied.load(Ordering::Relaxed);
        tally.problems(applied, had_errors, |stored, applied| {
            format!(
                "lost update: the counters hold {stored} but {applied} increments were acknowledged"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(value: Bytes) -> Row {
        Row::new(&Key::new("bench/t/counter").expect("key"), value, 1)
    }

    #[test]
    fn a_padded_row_has_the_large_size_and_reads_back_its_counter() {
        let filler = filler(LARGE_ROW);
        for count in [7, 42, 123_456_789] {
            let padded = encode(count, &filler);
            assert_eq!(padded.len(), LARGE_ROW);
            assert_eq!(decode(&row(padded)).expect("counter"), count);
        }
        // Not spaces or one repeated byte: every filler character occurs.
        let distinct: std::collections::BTreeSet<u8> = filler.iter().copied().collect();
        assert_eq!(distinct.len(), 64, "{distinct:?}");
        let plain = encode(42, &[]);
        assert_eq!(&plain[..], b"42");
        assert_eq!(decode(&row(plain)).expect("counter"), 42);
    }

    #[test]
    fn a_row_without_a_counter_is_reported() {
        let err = decode(&row(Bytes::from_static(b"x 12"))).expect_err("not a counter");
        assert!(err.0.contains("does not hold a counter"), "{}", err.0);
    }
}
