//! Lamport's logical clock and the timestamps it hands out.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The largest clock value accepted from outside (a received message, a
/// starting value).
///
/// Half the `u64` range: a clock that starts at or jumps to this value still
/// has 2^63 local events left before it could overflow, which no process
/// lives to see. Anything larger is refused with [`ClockError::TooLarge`]
/// instead of letting a hostile or corrupt stamp wrap the clock around.
pub const MAX_TIME: u64 = u64::MAX / 2;

/// A process of the system, `P0`, `P1`, …: the tie-breaker of the total
/// order.
///
/// ```
/// use bakery_recipes::lamport::ProcessId;
///
/// assert_eq!(ProcessId(2).to_string(), "P2");
/// assert!(ProcessId(0) < ProcessId(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProcessId(pub u32);

impl ProcessId {
    /// The id as an index into per-process tables.
    pub(crate) fn index(self) -> usize {
        // u32 always fits in usize on the platforms tokio supports.
        self.0 as usize
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "P{}", self.0)
    }
}

/// A Lamport timestamp `time:process`, e.g. `25:P0`.
///
/// [`Ord`] is the seed's total order ⇒: compare `time` first and break ties
/// with the process id (`a ⇒ b` iff `C(a) < C(b)`, or `C(a) = C(b)` and
/// `Pa < Pb`). It extends happened-before: if `a → b` then `a < b`. The
/// converse does NOT hold: `a < b` may be two concurrent events (`a ∥ b`),
/// so a timestamp comparison alone never proves causality; see
/// [`Timestamp::happened_before`] for what two timestamps can decide.
///
/// ```
/// use bakery_recipes::lamport::{ProcessId, Timestamp};
///
/// let p0 = Timestamp::new(25, ProcessId(0));
/// let p2 = Timestamp::new(20, ProcessId(2));
/// assert!(p2 < p0); // the seed's race: [20:2] heads the queue, not [25:0]
/// assert!(Timestamp::new(7, ProcessId(1)) < Timestamp::new(7, ProcessId(2))); // tie: by process
/// assert_eq!(p0.to_string(), "25:P0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timestamp {
    /// The clock value `C` of the event. Compared first.
    pub time: u64,
    /// The process whose clock produced it. Breaks ties.
    pub process: ProcessId,
}

impl Timestamp {
    /// The timestamp `time:process`.
    pub const fn new(time: u64, process: ProcessId) -> Self {
        Timestamp { time, process }
    }

    /// What two timestamps can say about happened-before (`self → later`),
    /// assuming both stamp events of processes that follow the clock rules
    /// (every event ticks, every receive jumps past the sender's stamp):
    ///
    /// - `Some(false)` when `self.time >= later.time`: by the clock
    ///   condition (`a → b` implies `C(a) < C(b)`), `self` did not happen
    ///   before `later`.
    /// - `Some(true)` when both are events of the same process and
    ///   `self.time < later.time`: a process's clock strictly increases, so
    ///   the earlier stamp is the earlier event of that process.
    /// - `None` otherwise: `C(a) < C(b)` on different processes is necessary
    ///   for `a → b` but not sufficient — the events may be concurrent.
    ///   Deciding it needs more than a clock (vector clocks, or the message
    ///   history).
    ///
    /// ```
    /// use bakery_recipes::lamport::{ProcessId, Timestamp};
    ///
    /// let (a, b) = (ProcessId(0), ProcessId(1));
    /// // The seed's figure 2: C(e) = 2 < C(d) = 3, yet e ∥ d.
    /// let e = Timestamp::new(2, b);
    /// let d = Timestamp::new(3, a);
    /// assert_eq!(e.happened_before(&d), None); // cannot tell
    /// assert_eq!(d.happened_before(&e), Some(false)); // certainly not
    /// assert_eq!(Timestamp::new(1, a).happened_before(&d), Some(true)); // same process
    /// ```
    pub fn happened_before(&self, later: &Timestamp) -> Option<bool> {
        if self.time >= later.time {
            Some(false)
        } else if self.process == later.process {
            Some(true)
        } else {
            None
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.time, self.process)
    }
}

/// A clock value refused by a [`LamportClock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClockError {
    /// A received or starting value above [`MAX_TIME`].
    #[error("clock value {time} is above the largest accepted value {MAX_TIME}")]
    TooLarge {
        /// The value refused.
        time: u64,
    },
}

/// Lamport's logical clock of one process.
///
/// The rules of the seed: every event increments the clock
/// ([`tick`](Self::tick)); a message carries the clock of its send event
/// ([`send`](Self::send)); a receiver sets `C = max(C, C_msg) + 1`
/// ([`receive`](Self::receive)). Each call is ONE atomic step, so the clock
/// can be shared between threads (`&self`, no lock): every call returns a
/// distinct time, greater than every time returned before it.
///
/// ```
/// use bakery_recipes::lamport::{LamportClock, ProcessId};
///
/// let a = LamportClock::new(ProcessId(0));
/// let b = LamportClock::new(ProcessId(1));
/// assert_eq!(a.tick().time, 1); // a local event
/// let sent = a.send(); // stamp the message
/// assert_eq!(sent.time, 2);
/// let received = b.receive(sent.time)?; // max(0, 2) + 1
/// assert_eq!(received.time, 3);
/// assert!(sent < received); // send → receive, and the clocks agree
/// # Ok::<(), bakery_recipes::lamport::ClockError>(())
/// ```
#[derive(Debug)]
pub struct LamportClock {
    process: ProcessId,
    time: AtomicU64,
}

impl LamportClock {
    /// A clock at 0 for `process`: its first event is stamped 1.
    pub const fn new(process: ProcessId) -> Self {
        LamportClock {
            process,
            time: AtomicU64::new(0),
        }
    }

    /// A clock already at `time` (its next event is stamped `time + 1`),
    /// e.g. to replay a scenario. Refuses values above [`MAX_TIME`].
    pub fn starting_at(process: ProcessId, time: u64) -> Result<Self, ClockError> {
        check(time)?;
        Ok(LamportClock {
            process,
            time: AtomicU64::new(time),
        })
    }

    /// The process this clock belongs to.
    pub fn process(&self) -> ProcessId {
        self.process
    }

    /// The current value, without an event. Another thread may move the
    /// clock right after; this is a reading, not a stamp.
    pub fn now(&self) -> Timestamp {
        Timestamp::new(self.time.load(Ordering::Acquire), self.process)
    }

    /// A local event: increment and return the new stamp.
    pub fn tick(&self) -> Timestamp {
        // Wrapping would need 2^63 events past MAX_TIME (see there); it is
        // spelled out so that no build can panic here.
        let previous = self.time.fetch_add(1, Ordering::AcqRel);
        Timestamp::new(previous.wrapping_add(1), self.process)
    }

    /// A send event: a tick whose stamp the message carries.
    pub fn send(&self) -> Timestamp {
        self.tick()
    }

    /// A receive event for a message stamped `sent`: `C = max(C, sent) + 1`,
    /// returned. Refuses (clock unchanged) a stamp above [`MAX_TIME`].
    pub fn receive(&self, sent: u64) -> Result<Timestamp, ClockError> {
        check(sent)?;
        let update = |current: u64| Some(current.max(sent).wrapping_add(1));
        // `fetch_update` returns the value it replaced; the closure never
        // returns None, so both arms carry that value.
        let previous = match self
            .time
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, update)
        {
            Ok(previous) | Err(previous) => previous,
        };
        Ok(Timestamp::new(
            previous.max(sent).wrapping_add(1),
            self.process,
        ))
    }
}

fn check(time: u64) -> Result<(), ClockError> {
    if time > MAX_TIME {
        Err(ClockError::TooLarge { time })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn total_order_is_time_then_process() {
        let mut stamps = [
            Timestamp::new(3, ProcessId(0)),
            Timestamp::new(2, ProcessId(1)),
            Timestamp::new(2, ProcessId(0)),
            Timestamp::new(1, ProcessId(9)),
        ];
        stamps.sort();
        let shown: Vec<String> = stamps.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["1:P9", "2:P0", "2:P1", "3:P0"]);
    }

    #[test]
    fn receive_jumps_past_the_sender() {
        let clock = LamportClock::starting_at(ProcessId(1), 10).unwrap();
        assert_eq!(clock.receive(3).unwrap().time, 11); // local clock ahead
        assert_eq!(clock.receive(40).unwrap().time, 41); // message ahead
        assert_eq!(clock.now().time, 41);
    }

    #[test]
    fn hostile_stamps_are_refused() {
        let clock = LamportClock::new(ProcessId(0));
        assert_eq!(
            clock.receive(u64::MAX),
            Err(ClockError::TooLarge { time: u64::MAX })
        );
        assert_eq!(clock.now().time, 0);
        assert_eq!(clock.receive(MAX_TIME).unwrap().time, MAX_TIME + 1);
        assert!(LamportClock::starting_at(ProcessId(0), MAX_TIME + 1).is_err());
    }

    #[test]
    fn concurrent_events_get_distinct_increasing_times() {
        let clock = Arc::new(LamportClock::new(ProcessId(0)));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let clock = Arc::clone(&clock);
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    for i in 0..1000u64 {
                        let stamp = if i % 2 == 0 {
                            clock.tick()
                        } else {
                            clock.receive(i * t).unwrap()
                        };
                        seen.push(stamp.time);
                    }
                    seen
                })
            })
            .collect();
        let mut all = HashSet::new();
        for thread in threads {
            let seen = thread.join().unwrap();
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]),
                "per-thread increasing"
            );
            for time in seen {
                assert!(all.insert(time), "time {time} handed out twice");
            }
        }
    }
}
