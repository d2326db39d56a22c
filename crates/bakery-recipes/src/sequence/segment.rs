//! The lock-free fast path: the current block of ids, claimed with one
//! `fetch_add` on a single atomic word.
//!
//! `state` packs `generation << OFFSET_BITS | offset`. Two slots hold the
//! blocks of generations `g` and `g + 1` (`slots[g & 1]`), each guarded by a
//! seqlock on its generation so a reader that was preempted across a block
//! switch notices and retries instead of handing out an id from the wrong
//! block. Installing a block (rare, serialized by the caller) writes the
//! other slot, then moves `state` to the new generation at offset 0.

use std::ops::Range;
use std::sync::atomic::{fence, AtomicU64, Ordering};

const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const GEN_MASK: u64 = (1 << (64 - OFFSET_BITS)) - 1;
/// Marks a slot being rewritten.
const WRITING: u64 = u64::MAX;

/// The largest block one segment can hold; larger requests are split.
pub(crate) const MAX_SEGMENT: u64 = 1 << 32;

#[derive(Debug)]
struct Slot {
    generation: AtomicU64,
    base: AtomicU64,
    len: AtomicU64,
}

/// What a claim found.
pub(crate) enum Claim {
    /// Ids `range` are ours; `crossed_trigger` is true for exactly one
    /// claimer per block: the one that should start the prefetch.
    Ids {
        range: Range<u64>,
        crossed_trigger: bool,
    },
    /// The block of `generation` is used up (or was being replaced).
    Exhausted { generation: u64 },
}

#[derive(Debug)]
pub(crate) struct Segments {
    state: AtomicU64,
    slots: [Slot; 2],
    /// Offset within the current block at which the next block is prefetched.
    trigger: AtomicU64,
}

impl Segments {
    /// Starts at generation 0 with an empty block: the first claim refills.
    pub(crate) fn new() -> Self {
        let empty = || Slot {
            generation: AtomicU64::new(0),
            base: AtomicU64::new(0),
            len: AtomicU64::new(0),
        };
        Segments {
            state: AtomicU64::new(0),
            slots: [empty(), empty()],
            trigger: AtomicU64::new(u64::MAX),
        }
    }

    /// Read the block of `generation`, or `None` if its slot was reused.
    ///
    /// The caller read `generation` from `state` with Acquire, after the
    /// install's Release store of it: the slot's values for `generation`
    /// are visible, so only a later rewrite (for `generation + 2`) can
    /// spoil them, and the check after the reads sees that rewrite's
    /// `WRITING` mark whenever a read saw one of its values (the fences
    /// pair). No check before the reads is needed: one load less on the
    /// hot path.
    #[inline]
    fn block(&self, generation: u64) -> Option<(u64, u64)> {
        let slot = &self.slots[(generation & 1) as usize];
        let base = slot.base.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let after = slot.generation.load(Ordering::Relaxed);
        (after == generation).then_some((base, len))
    }

    /// Claim one id: the hot path of `Sequence::next`.
    #[inline]
    pub(crate) fn claim_one(&self) -> Claim {
        let word = self.state.fetch_add(1, Ordering::AcqRel);
        let (generation, offset) = (word >> OFFSET_BITS, word & OFFSET_MASK);
        match self.block(generation) {
            Some((base, len)) if offset < len => Claim::Ids {
                range: base + offset..base + offset + 1,
                crossed_trigger: offset == self.trigger.load(Ordering::Relaxed),
            },
            _ => Claim::Exhausted { generation },
        }
    }

    /// Claim up to `want` ids from the current block (at least one unless
    /// exhausted).
    pub(crate) fn claim_many(&self, want: u64) -> Claim {
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            let (generation, offset) = (word >> OFFSET_BITS, word & OFFSET_MASK);
            let Some((base, len)) = self.block(generation).filter(|(_, len)| offset < *len) else {
                return Claim::Exhausted { generation };
            };
            let take = want.min(len - offset);
            match self.state.compare_exchange_weak(
                word,
                word + take,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let trigger = self.trigger.load(Ordering::Relaxed);
                    return Claim::Ids {
                        range: base + offset..base + offset + take,
                        crossed_trigger: (offset..offset + take).contains(&trigger),
                    };
                }
                Err(now) => word = now,
            }
        }
    }

    /// The generation now being served.
    pub(crate) fn generation(&self) -> u64 {
        self.state.load(Ordering::Acquire) >> OFFSET_BITS
    }

    /// Replace the current block with `ids`. Callers serialize installs.
    /// `trigger` is the offset whose claimer starts the next prefetch
    /// (`u64::MAX`: never).
    pub(crate) fn install(&self, ids: Range<u64>, trigger: u64) {
        debug_assert!(ids.end - ids.start <= MAX_SEGMENT);
        let next = (self.generation() + 1) & GEN_MASK;
        let slot = &self.slots[(next & 1) as usize];
        slot.generation.store(WRITING, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.base.store(ids.start, Ordering::Relaxed);
        slot.len.store(ids.end - ids.start, Ordering::Relaxed);
        slot.generation.store(next, Ordering::Release);
        self.trigger.store(trigger, Ordering::Relaxed);
        self.state.store(next << OFFSET_BITS, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    #[test]
    fn empty_segments_are_exhausted() {
        let s = Segments::new();
        assert!(matches!(s.claim_one(), Claim::Exhausted { generation: 0 }));
        assert!(matches!(
            s.claim_many(5),
            Claim::Exhausted { generation: 0 }
        ));
    }

    #[test]
    fn claims_stay_inside_the_installed_block() {
        let s = Segments::new();
        s.install(100..103, 1);
        let mut got = vec![];
        let mut triggers = 0;
        while let Claim::Ids {
            range,
            crossed_trigger,
        } = s.claim_one()
        {
            got.extend(range);
            triggers += usize::from(crossed_trigger);
        }
        assert_eq!(got, vec![100, 101, 102]);
        assert_eq!(triggers, 1);
        s.install(200..210, u64::MAX);
        let Claim::Ids { range, .. } = s.claim_many(4) else {
            panic!("block installed")
        };
        assert_eq!(range, 200..204);
        let Claim::Ids { range, .. } = s.claim_many(100) else {
            panic!("block has 6 left")
        };
        assert_eq!(range, 204..210);
    }

    /// Threads claim while another thread keeps installing disjoint blocks:
    /// every id handed out lies in an installed block and none repeats.
    #[test]
    fn concurrent_claims_across_installs_never_repeat() {
        let s = Arc::new(Segments::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let claimers: Vec<_> = (0..3)
            .map(|i| {
                let (s, seen, stop) = (s.clone(), seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut mine = vec![];
                    while !stop.load(Ordering::Relaxed) {
                        let claim = if i == 0 {
                            s.claim_many(3)
                        } else {
                            s.claim_one()
                        };
                        if let Claim::Ids { range, .. } = claim {
                            mine.extend(range);
                        }
                    }
                    seen.lock().unwrap().extend(mine);
                })
            })
            .collect();
        // Blocks of 7 ids with holes of 3 between them.
        for b in 0..20_000u64 {
            s.install(b * 10..b * 10 + 7, u64::MAX);
        }
        stop.store(true, Ordering::Relaxed);
        for c in claimers {
            c.join().unwrap();
        }
        let seen = seen.lock().unwrap();
        let unique: HashSet<_> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "an id was handed out twice");
        assert!(
            seen.iter().all(|id| id % 10 < 7),
            "an id outside every block"
        );
    }
}
