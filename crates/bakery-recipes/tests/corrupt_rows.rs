//! Property tests: a recipe's stored row damaged in any way — random bytes,
//! or a valid row truncated, with a byte flipped, inserted or a number
//! replaced — makes every call on it either work (the damage left a valid
//! row) or fail with an [`ErrorKind::Corrupt`] error; never a panic, a
//! hang or another kind, and a failed call leaves the row as it was.
//!
//! Each case starts from the row the recipe itself wrote on a
//! [`MemoryStore`], so the mutations reach deep into the decoders rather
//! than stopping at the first byte.

use std::sync::Arc;

use bakery_core::{Bytes, ErrorKind, Key, MemoryStore, Row, VersionedStore};
use bakery_recipes::consumer::Consumer;
use bakery_recipes::fence::{FencedValue, FencedWrite};
use bakery_recipes::lock::Lock;
use bakery_recipes::once::{Idempotency, OnBusy, RunError};
use bakery_recipes::sequence::Sequence;
use bakery_recipes::time::TimeService;
use proptest::prelude::*;

/// How a valid row is damaged.
#[derive(Debug, Clone)]
enum Damage {
    /// Replaced by arbitrary bytes.
    Replace(Vec<u8>),
    /// Cut at a position (modulo the length).
    Truncate(usize),
    /// One byte XOR-ed with a non-zero mask.
    Flip(usize, u8),
    /// One byte inserted.
    Insert(usize, u8),
    /// The n-th run of ASCII digits replaced by another number (huge,
    /// zero, negative or non-numeric text).
    Number(usize, String),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..48).prop_map(Damage::Replace),
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Damage::Flip(at, mask)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Damage::Insert(at, byte)),
        (
            0..6usize,
            prop_oneof![
                Just("0".to_string()),
                Just("-1".to_string()),
                Just("18446744073709551616".to_string()),
                Just("340282366920938463463374607431768211456".to_string()),
                Just("1e3".to_string()),
                Just("null".to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
            ]
        )
            .prop_map(|(nth, text)| Damage::Number(nth, text)),
    ]
}

impl Damage {
    fn apply(&self, valid: &[u8]) -> Vec<u8> {
        let mut bytes = valid.to_vec();
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        match self {
            Damage::Replace(other) => return other.clone(),
            Damage::Truncate(i) => bytes.truncate(at(*i, valid.len())),
            Damage::Flip(i, mask) => {
                if !bytes.is_empty() {
                    let i = at(*i, bytes.len());
                    bytes[i] ^= mask;
                }
            }
            Damage::Insert(i, byte) => bytes.insert(at(*i, valid.len() + 1), *byte),
            Damage::Number(nth, text) => {
                let runs = digit_runs(valid);
                if let Some(&(start, end)) = runs.get(nth % runs.len().max(1)) {
                    bytes.splice(start..end, text.bytes());
                }
            }
        }
        bytes
    }
}

/// The [start, end) ranges of ASCII digit runs in `bytes`.
fn digit_runs(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = None;
    for (i, b) in bytes.iter().enumerate() {
        match (b.is_ascii_digit(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                runs.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        runs.push((s, bytes.len()));
    }
    runs
}

/// One case: a recipe's row on a fresh [`MemoryStore`], damaged once the
/// recipe has written it, then every call on it checked.
struct Case {
    memory: Arc<MemoryStore>,
    damage: Damage,
    /// The row as stored now; `None` until [`Case::damage`].
    damaged: Option<Row>,
}

impl Case {
    /// Run `case` on a current-thread runtime with a fresh store.
    fn run(
        damage: Damage,
        case: impl AsyncFnOnce(&mut Case) -> Result<(), TestCaseError>,
    ) -> Result<(), TestCaseError> {
        let mut this = Case {
            memory: Arc::new(MemoryStore::new()),
            damage,
            damaged: None,
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(case(&mut this))
    }

    /// The store, as the recipes take it.
    fn store(&self) -> Arc<dyn VersionedStore> {
        self.memory.clone()
    }

    /// Overwrite the row the recipe wrote at `prefix`/`name` with the
    /// damage applied.
    async fn damage_at(&mut self, prefix: &str, name: &str) {
        self.damage(Key::with_prefix(prefix, name).unwrap()).await;
    }

    /// Overwrite `key`'s row (which the recipe wrote) with the damage
    /// applied.
    async fn damage(&mut self, key: Key) {
        let valid = self
            .memory
            .get(&key)
            .await
            .unwrap()
            .expect("the recipe wrote its row");
        let bytes = self.damage.apply(&valid.value);
        let damaged = self
            .memory
            .put_if_version(&key, Some(valid.version), Bytes::from(bytes))
            .await
            .unwrap()
            .applied()
            .expect("nobody else writes");
        self.damaged = Some(damaged);
    }

    /// A call on the damaged row: Ok (the damage left a valid row, which
    /// becomes the damaged row now stored), or a Corrupt error after which
    /// the row is unchanged.
    async fn check<T>(
        &mut self,
        call: &str,
        result: Result<T, bakery_core::Error>,
    ) -> Result<(), TestCaseError> {
        let damaged = self.damaged.as_mut().expect("the row is damaged first");
        let now = self.memory.get(&damaged.key).await.unwrap();
        match result {
            Ok(_) => {
                if let Some(now) = now {
                    *damaged = now;
                }
            }
            Err(err) => {
                prop_assert_eq!(
                    err.kind(),
                    ErrorKind::Corrupt,
                    "{} on {:?}: {}",
                    call,
                    String::from_utf8_lossy(&damaged.value),
                    err
                );
                prop_assert_eq!(
                    now.as_ref(),
                    Some(&*damaged),
                    "{} changed a corrupt row",
                    call
                );
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn sequence_rows(damage in damage()) {
        Case::run(damage, async |case| {
            let store = case.store();
            let build = || Sequence::builder(store.clone(), "s").block_size(10).build().unwrap();
            build().next().await.unwrap();
            case.damage_at(bakery_recipes::sequence::KEY_PREFIX, "s").await;
            case.check("inspect", Sequence::inspect(&*store, "s").await).await?;
            case.check("next", build().next().await).await
        })?;
    }

    #[test]
    fn lock_rows(damage in damage()) {
        Case::run(damage, async |case| {
            let store = case.store();
            let lock = Lock::builder(store.clone(), "l").build().unwrap();
            let guard = lock.try_acquire().await.unwrap().expect("free");
            case.damage_at(bakery_recipes::lock::KEY_PREFIX, "l").await;
            case.check("inspect", Lock::inspect(&*store, "l").await).await?;
            let other = Lock::builder(store, "l").build().unwrap();
            case.check("try_acquire", other.try_acquire().await).await?;
            drop(guard);
            Ok(())
        })?;
    }

    #[test]
    fn fenced_rows(damage in damage()) {
        Case::run(damage, async |case| {
            let value = FencedValue::new(case.store(), "f").unwrap();
            let first = value.write(7, Bytes::from_static(b"data")).await.unwrap();
            assert!(matches!(first, FencedWrite::Accepted(_)), "{first:?}");
            case.damage_at(bakery_recipes::fence::KEY_PREFIX, "f").await;
            case.check("read", value.read().await).await?;
            case.check("read_fenced", value.read_fenced(8).await).await?;
            case.check("write", value.write(9, Bytes::from_static(b"more")).await).await
        })?;
    }

    #[test]
    fn time_rows(damage in damage()) {
        Case::run(damage, async |case| {
            let time = TimeService::new(case.store(), "t").unwrap();
            time.advance_to(1_000).await.unwrap();
            case.damage_at(bakery_recipes::time::KEY_PREFIX, "t").await;
            case.check("read", time.read().await).await?;
            case.check("advance_to", time.advance_to(2_000).await).await
        })?;
    }

    #[test]
    fn idempotency_rows(damage in damage()) {
        Case::run(damage, async |case| {
            // Fail at once on a record that reads as running: no waiting.
            let once = Idempotency::builder(case.store(), "scope")
                .on_busy(OnBusy::Fail)
                .build()
                .unwrap();
            let op = |_| async { Ok::<_, String>(Bytes::from_static(b"result")) };
            once.run_bytes("k", b"payload", op).await.unwrap();
            case.damage(once.row_key("k").unwrap()).await;
            case.check("inspect", once.inspect("k").await).await?;
            // A damaged row that still decodes may give any outcome but a
            // store error: that is the recipe's normal behaviour.
            if let Err(RunError::Store(err)) = once.run_bytes("k", b"payload", op).await {
                case.check("run_bytes", Err::<(), _>(err)).await?;
            }
            Ok(())
        })?;
    }

    #[test]
    fn consumer_rows(damage in damage()) {
        Case::run(damage, async |case| {
            let consumer = Consumer::builder(case.store(), "c").build().unwrap();
            let add = |state: Option<&[u8]>| {
                let mut next = state.unwrap_or_default().to_vec();
                next.push(b'+');
                next
            };
            consumer.process_bytes("p", 5, add).await.unwrap();
            case.damage(consumer.row_key("p").unwrap()).await;
            case.check("state_bytes", consumer.state_bytes("p").await).await?;
            case.check("process_bytes", consumer.process_bytes("p", 6, add).await).await
        })?;
    }
}
