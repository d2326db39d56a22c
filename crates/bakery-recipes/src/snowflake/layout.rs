//! The bit layout of a snowflake id: `timestamp | worker | sequence`, below
//! a sign bit that stays 0 (ids fit a signed 64-bit column: Java `long`,
//! PostgreSQL `bigint`).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bakery_core::{Error, Result};
use serde::{Deserialize, Serialize};

use super::KEY_PREFIX;

/// 2026-01-01T00:00:00Z in milliseconds since the Unix epoch: the default
/// epoch.
pub const DEFAULT_EPOCH_MS: u64 = 1_767_225_600_000;

/// The fewest years from now a layout must last ([`Layout::check`]).
pub const MIN_YEARS: f64 = 10.0;

/// Bits an id may use: 63, the sign bit stays 0.
pub const ID_BITS: u32 = 63;

/// Most worker bits: worker ids are `u16`, each a leased slot.
pub const MAX_WORKER_BITS: u32 = 16;

const MS_PER_YEAR: f64 = 365.2425 * 24.0 * 3600.0 * 1000.0;

/// How an id is cut into timestamp, worker and sequence, and from when and in
/// which unit its timestamp counts. Every client of one snowflake must use
/// the same layout: the first stores it, and the others are refused when
/// theirs differs.
///
/// The default is Twitter's: 41 bits of milliseconds since
/// [`DEFAULT_EPOCH_MS`] (until 2095), 10 worker bits (1,024 workers), 12
/// sequence bits (4,096 ids per millisecond per worker).
///
/// ```
/// use bakery_recipes::snowflake::Layout;
///
/// let layout = Layout::default();
/// let id = layout.encode(1_000, 7, 3).expect("fits");
/// let parts = layout.decode(id);
/// assert_eq!((parts.tick, parts.worker, parts.sequence), (1_000, 7, 3));
/// assert_eq!(parts.unix_ms, layout.epoch_ms() + 1_000);
///
/// // Sonyflake's: 10 ms ticks, 16 worker bits, 8 sequence bits.
/// let sonyflake = Layout::default().unit_ms(10).timestamp_bits(39).worker_bits(16).sequence_bits(8);
/// assert_eq!(sonyflake.workers(), 65_536);
/// assert!(sonyflake.check_at(layout.epoch_ms()).is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    epoch_ms: u64,
    unit_ms: u64,
    timestamp_bits: u32,
    worker_bits: u32,
    sequence_bits: u32,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            epoch_ms: DEFAULT_EPOCH_MS,
            unit_ms: 1,
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
        }
    }
}

/// An id taken apart by [`Layout::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Decoded {
    /// The id.
    pub id: u64,
    /// When it was issued, milliseconds since the Unix epoch (the start of
    /// its tick).
    pub unix_ms: u64,
    /// Ticks since the layout's epoch.
    pub tick: u64,
    /// The worker id (the leased slot) that issued it.
    pub worker: u32,
    /// Its place within the tick.
    pub sequence: u64,
}

impl Layout {
    /// The epoch, milliseconds since the Unix epoch (default
    /// [`DEFAULT_EPOCH_MS`]). Not after now, or ids cannot be issued.
    pub fn epoch_ms(self) -> u64 {
        self.epoch_ms
    }

    /// Set the epoch, milliseconds since the Unix epoch.
    pub fn epoch(mut self, epoch_ms: u64) -> Self {
        self.epoch_ms = epoch_ms;
        self
    }

    /// The length of one tick of the timestamp, milliseconds (default 1).
    pub fn unit(self) -> u64 {
        self.unit_ms
    }

    /// Set the length of one tick, milliseconds (at least 1).
    pub fn unit_ms(mut self, unit_ms: u64) -> Self {
        self.unit_ms = unit_ms;
        self
    }

    /// Set the bits of the timestamp (default 41).
    pub fn timestamp_bits(mut self, bits: u32) -> Self {
        self.timestamp_bits = bits;
        self
    }

    /// Set the bits of the worker id (default 10; 1 to
    /// [`MAX_WORKER_BITS`]).
    pub fn worker_bits(mut self, bits: u32) -> Self {
        self.worker_bits = bits;
        self
    }

    /// Set the bits of the sequence within a tick (default 12; at least 1).
    pub fn sequence_bits(mut self, bits: u32) -> Self {
        self.sequence_bits = bits;
        self
    }

    /// The bits of the timestamp, the worker id and the sequence.
    pub fn bits(self) -> (u32, u32, u32) {
        (self.timestamp_bits, self.worker_bits, self.sequence_bits)
    }

    /// How many workers can issue ids at once: `2^worker_bits`.
    pub fn workers(self) -> u32 {
        1u32 << self.worker_bits.min(MAX_WORKER_BITS)
    }

    /// How many ids one worker can issue per tick: `2^sequence_bits`.
    pub fn ids_per_tick(self) -> u64 {
        1u64 << self.sequence_bits.min(ID_BITS)
    }

    /// The largest tick the timestamp can hold.
    pub fn max_tick(self) -> u64 {
        (1u64 << self.timestamp_bits.min(ID_BITS)) - 1
    }

    /// When the last tick ends, milliseconds since the Unix epoch
    /// (saturating).
    pub fn ends_ms(self) -> u64 {
        let span = u128::from(self.max_tick()) + 1;
        let end = u128::from(self.epoch_ms) + span * u128::from(self.unit_ms);
        u64::try_from(end).unwrap_or(u64::MAX)
    }

    /// Years from `now_ms` (milliseconds since the Unix epoch) until the
    /// timestamp runs out.
    pub fn years_left(self, now_ms: u64) -> f64 {
        self.ends_ms().saturating_sub(now_ms) as f64 / MS_PER_YEAR
    }

    /// [`check_at`](Self::check_at) now.
    pub fn check(self) -> Result<()> {
        self.check_at(unix_ms_now())
    }

    /// Refuse a layout that cannot work or will not last: more than 63
    /// bits in all, a worker or sequence field of 0 bits, more than
    /// [`MAX_WORKER_BITS`] worker bits, a tick of 0 ms, an epoch after
    /// `now_ms`, or fewer than [`MIN_YEARS`] years left from `now_ms`
    /// ([`ErrorKind::InvalidInput`](bakery_core::ErrorKind::InvalidInput),
    /// saying how long it would last).
    pub fn check_at(self, now_ms: u64) -> Result<()> {
        let refuse = |why: String| Err(Error::invalid_input(KEY_PREFIX, why));
        let (t, w, s) = self.bits();
        if t == 0 || w == 0 || s == 0 {
            return refuse(format!(
                "every field needs at least one bit: timestamp {t}, worker {w}, sequence {s}"
            ));
        }
        if t + w + s > ID_BITS {
            return refuse(format!(
                "timestamp {t} + worker {w} + sequence {s} bits = {} > {ID_BITS} (the sign bit stays 0)",
                t + w + s
            ));
        }
        if w > MAX_WORKER_BITS {
            return refuse(format!(
                "{w} worker bits: at most {MAX_WORKER_BITS} (each worker id is a leased slot)"
            ));
        }
        if self.unit_ms == 0 {
            return refuse("the tick must be at least 1 ms".to_string());
        }
        if self.epoch_ms > now_ms {
            return refuse(format!(
                "the epoch ({}) is in the future",
                format_unix_ms(self.epoch_ms)
            ));
        }
        let years = self.years_left(now_ms);
        if years < MIN_YEARS {
            return refuse(format!(
                "this layout runs out on {} ({years:.1} years from now); it must last at least \
                 {MIN_YEARS} years: give the timestamp more bits, a longer tick or a later epoch",
                format_unix_ms(self.ends_ms())
            ));
        }
        Ok(())
    }

    /// The id of `sequence` in `tick` on `worker`; `None` when a part does
    /// not fit its bits.
    pub fn encode(self, tick: u64, worker: u32, sequence: u64) -> Option<u64> {
        if tick > self.max_tick() || worker >= self.workers() || sequence >= self.ids_per_tick() {
            return None;
        }
        Some(
            (tick << (self.worker_bits + self.sequence_bits))
                | (u64::from(worker) << self.sequence_bits)
                | sequence,
        )
    }

    /// Take `id` apart. Any `u64` decodes (bits above the layout's are
    /// ignored); only ids this layout issued mean anything.
    pub fn decode(self, id: u64) -> Decoded {
        let sequence = id & (self.ids_per_tick() - 1);
        let worker = (id >> self.sequence_bits) & (u64::from(self.workers()) - 1);
        let tick = (id >> (self.worker_bits + self.sequence_bits)) & self.max_tick();
        Decoded {
            id,
            unix_ms: self.unix_ms_of(tick),
            tick,
            // Masked to at most 16 bits above.
            worker: u32::try_from(worker).unwrap_or(u32::MAX),
            sequence,
        }
    }

    /// The tick of `unix_ms`; `None` before the epoch.
    pub fn tick_of(self, unix_ms: u64) -> Option<u64> {
        unix_ms
            .checked_sub(self.epoch_ms)
            .map(|since| since / self.unit_ms.max(1))
    }

    /// When `tick` starts, milliseconds since the Unix epoch (saturating).
    pub fn unix_ms_of(self, tick: u64) -> u64 {
        tick.saturating_mul(self.unit_ms)
            .saturating_add(self.epoch_ms)
    }

    /// How many whole ticks `duration` holds, at least 1.
    pub(crate) fn ticks_in(self, duration: Duration) -> u64 {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        (ms / self.unit_ms.max(1)).max(1)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, w, s) = self.bits();
        write!(
            f,
            "epoch {}, tick {} ms, {t} timestamp + {w} worker + {s} sequence bits",
            format_unix_ms(self.epoch_ms),
            self.unit_ms
        )
    }
}

/// Milliseconds since the Unix epoch, now (0 if the clock is before it).
pub(crate) fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `unix_ms` as an RFC 3339 date and time (UTC), to the millisecond.
pub fn format_unix_ms(unix_ms: u64) -> String {
    // RFC 3339 ends with the year 9999.
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    if unix_ms >= YEAR_10000_MS {
        return format!("{unix_ms} ms after 1970");
    }
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_default_lasts_until_2095_and_is_checked() {
        let layout = Layout::default();
        assert_eq!(
            format_unix_ms(layout.epoch_ms()),
            "2026-01-01T00:00:00.000Z"
        );
        assert!(format_unix_ms(layout.ends_ms()).starts_with("2095-09-"));
        assert!(layout.check_at(DEFAULT_EPOCH_MS).is_ok());
        assert_eq!(layout.workers(), 1024);
        assert_eq!(layout.ids_per_tick(), 4096);
    }

    #[test]
    fn layouts_that_cannot_work_or_last_are_refused() {
        let now = DEFAULT_EPOCH_MS + 1;
        let refused = |layout: Layout, says: &str| {
            let err = layout.check_at(now).expect_err("refused");
            assert_eq!(err.kind(), bakery_core::ErrorKind::InvalidInput);
            assert!(err.message().contains(says), "{err}");
        };
        let base = Layout::default();
        refused(base.timestamp_bits(42), "> 63");
        refused(base.worker_bits(0), "at least one bit");
        refused(base.sequence_bits(0), "at least one bit");
        refused(base.worker_bits(17).sequence_bits(5), "at most 16");
        refused(base.unit_ms(0), "at least 1 ms");
        refused(base.epoch(now + 1), "in the future");
        // Baidu uid-generator's 28 bits of seconds: 8.5 years.
        refused(base.timestamp_bits(28).unit_ms(1000), "years from now");
        // 35 bits of ms lasts a year: not even close.
        refused(base.timestamp_bits(35), "at least 10 years");
        // An old epoch eats the years: 40 bits of ms from 1970 ran out in 2004.
        refused(base.epoch(0).timestamp_bits(40), "2004-11-03");
    }

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(format_unix_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_unix_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            format_unix_ms(u64::MAX),
            format!("{} ms after 1970", u64::MAX)
        );
    }

    fn layouts() -> impl Strategy<Value = Layout> {
        (1u32..=16, 1u32..=20, 1u64..=1000, 0u64..=DEFAULT_EPOCH_MS).prop_flat_map(
            |(w, s, unit, epoch)| {
                (1u32..=(ID_BITS - w - s)).prop_map(move |t| {
                    Layout::default()
                        .worker_bits(w)
                        .sequence_bits(s)
                        .timestamp_bits(t)
                        .unit_ms(unit)
                        .epoch(epoch)
                })
            },
        )
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(layout in layouts(), tick: u64, worker: u32, sequence: u64) {
            let tick = tick & layout.max_tick();
            let worker = worker % layout.workers();
            let sequence = sequence % layout.ids_per_tick();
            let id = layout.encode(tick, worker, sequence).expect("fits");
            prop_assert!(id <= i64::MAX as u64, "the sign bit stays 0");
            let parts = layout.decode(id);
            prop_assert_eq!((parts.tick, parts.worker, parts.sequence), (tick, worker, sequence));
            prop_assert_eq!(parts.unix_ms, layout.unix_ms_of(tick));
        }

        #[test]
        fn parts_out_of_range_do_not_encode(layout in layouts(), extra in 1u64..1000) {
            prop_assert!(layout.encode(layout.max_tick().saturating_add(extra), 0, 0).is_none()
                || layout.max_tick() == u64::MAX);
            prop_assert!(layout.encode(0, layout.workers(), 0).is_none());
            prop_assert!(layout.encode(0, 0, layout.ids_per_tick()).is_none());
        }

        #[test]
        fn ids_order_like_their_parts(layout in layouts(), a: (u64, u32, u64), b: (u64, u32, u64)) {
            let part = |(t, w, s): (u64, u32, u64)| {
                (t & layout.max_tick(), w % layout.workers(), s % layout.ids_per_tick())
            };
            let (a, b) = (part(a), part(b));
            let id = |(t, w, s)| layout.encode(t, w, s).expect("fits");
            prop_assert_eq!(id(a).cmp(&id(b)), a.cmp(&b));
        }

        #[test]
        fn ticks_round_trip_through_time(layout in layouts(), tick: u64) {
            let tick = tick & layout.max_tick();
            let ms = layout.unix_ms_of(tick);
            prop_assume!(ms < u64::MAX);
            prop_assert_eq!(layout.tick_of(ms), Some(tick));
            prop_assert_eq!(layout.tick_of(ms + layout.unit() - 1), Some(tick));
            prop_assert_eq!(layout.tick_of(layout.epoch_ms().wrapping_sub(1)).filter(|_| layout.epoch_ms() > 0), None);
        }

        #[test]
        fn years_left_shrink_with_time(layout in layouts(), a in 0u64..4_000_000_000_000, b in 0u64..4_000_000_000_000) {
            let (early, late) = (a.min(b), a.max(b));
            prop_assert!(layout.years_left(early) >= layout.years_left(late));
        }
    }
}
