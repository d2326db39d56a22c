//! Lamport clocks and Lamport's distributed mutual exclusion (Leslie
//! Lamport, "Time, Clocks, and the Ordering of Events in a Distributed
//! System", 1978).
//!
//! - [`LamportClock`] and [`Timestamp`]: tick on a local event, stamp on
//!   send, `max(C, C_msg) + 1` on receive; `(time, process)` totally orders
//!   all events consistently with happened-before (`a → b` implies
//!   `C(a) < C(b)`; the converse does not hold, see
//!   [`Timestamp::happened_before`]).
//! - [`LamportMutex`]: the mutual exclusion algorithm as a sans-IO state
//!   machine. Inputs are [`request`](LamportMutex::request),
//!   [`release`](LamportMutex::release) and incoming [`Message`]s; outputs
//!   are messages to send and "enter now" events ([`Output`]). No sockets,
//!   no async, no clock of its own: the caller moves the messages.
//! - [`simulate`]: a deterministic, seeded simulation of N machines over a
//!   network with random delays, checking the seed's three requirements:
//!   mutual exclusion, grants in the total order of the requests, every
//!   request granted. Its negative-control knobs ([`SimConfig::fifo`],
//!   [`SimConfig::heard_from_all_rule`]) break the algorithm on purpose, to
//!   show the checks catch it.
//! - [`LocalGroup`]: the same machines on tokio, one task per process,
//!   in-process channels.
//!
//! # Limits
//!
//! The algorithm's own assumptions, which nothing here can lift:
//!
//! - **FIFO channels.** Messages between two processes must arrive in send
//!   order, and none may be lost. A machine refuses a message stamped no
//!   later than one it already has from the same sender
//!   ([`MutexError::OutOfOrder`]), but by then a reordering may already have
//!   let two processes in: the simulation with [`SimConfig::fifo`] off finds
//!   such runs.
//! - **Every process alive, and a fixed group.** A process enters only
//!   after hearing from every other process; one crashed, paused or
//!   partitioned process blocks every other forever, and there is no way to
//!   join or leave. Where crash tolerance matters, use the store-backed
//!   lock (`bakery::Lock`, leases and fencing tokens on one versioned row),
//!   not this.
//! - **Cost.** `3(N-1)` messages per critical section (REQUEST, ACK and
//!   RELEASE to and from every other process).
//! - **Order is logical, not real time.** Grants follow the total order of
//!   the request stamps, which agrees with causality inside the system but
//!   not with events outside it: a user who asks on P1, then phones a friend
//!   who asks on P2, may be served second (the seed's Beijing–Shanghai
//!   example). Carry a stamp through the outside channel to fix that.
//!
//! # Example
//!
//! The seed's race (its figure 6): P0, P1, P2 with clocks around 25, 22,
//! 20. P0 requests first in real time (`25:P0`), P2 a little later
//! (`20:P2`). The two requests are concurrent, and in the total order
//! `20:P2` comes first, so P2 is granted first even though P0 collected
//! both ACKs before.
//!
//! ```
//! use bakery_recipes::lamport::{LamportMutex, Message, Output, ProcessId, Timestamp};
//!
//! let (p0, p1, p2) = (ProcessId(0), ProcessId(1), ProcessId(2));
//! // Each clock is one below the seed's node labels: the request is the next event.
//! let mut m = [
//!     LamportMutex::with_clock(p0, 3, 24)?,
//!     LamportMutex::with_clock(p1, 3, 21)?,
//!     LamportMutex::with_clock(p2, 3, 19)?,
//! ];
//! // The message `out` sends to `to` (each input here sends at most one per peer).
//! let to = |out: &[Output], to: ProcessId| -> Message {
//!     out.iter()
//!         .find_map(|o| match o {
//!             Output::Send { to: t, message } if *t == to => Some(*message),
//!             _ => None,
//!         })
//!         .expect("a message for that peer")
//! };
//! let req0 = m[0].request()?; // node a: REQUEST(25:P0)
//! let req2 = m[2].request()?; // node d: REQUEST(20:P2)
//! assert_eq!(to(&req0, p1).stamp, Timestamp::new(25, p0));
//! assert_eq!(to(&req2, p0).stamp, Timestamp::new(20, p2));
//! let ack2_0 = m[2].receive(to(&req0, p2))?; // f: P2 queues 25:P0 behind 20:P2
//! let ack0_2 = m[0].receive(to(&req2, p0))?; // h: P0 queues 20:P2 ahead of 25:P0
//! let ack1_0 = m[1].receive(to(&req0, p1))?;
//! let ack1_2 = m[1].receive(to(&req2, p1))?;
//! // m: P0 has both ACKs but its request does not head its queue.
//! assert!(m[0].receive(to(&ack1_0, p0))?.is_empty());
//! assert!(m[0].receive(to(&ack2_0, p0))?.is_empty());
//! let why = m[0].entry_conditions().expect("P0 waits");
//! assert!(why.heard_later_from_all && !why.heads_queue);
//! // n: P2 has both ACKs and heads its queue: it enters.
//! assert!(m[2].receive(to(&ack0_2, p2))?.is_empty());
//! let grant = m[2].receive(to(&ack1_2, p2))?;
//! assert_eq!(grant, [Output::Enter { request: Timestamp::new(20, p2) }]);
//! # Ok::<(), bakery_recipes::lamport::MutexError>(())
//! ```

mod clock;
mod mutex;
mod sim;
mod transport;

pub use clock::{ClockError, LamportClock, ProcessId, Timestamp, MAX_TIME};
pub use mutex::{EntryConditions, LamportMutex, Message, MessageKind, MutexError, Output, State};
pub use sim::{
    first_failure, simulate, SimConfig, SimConfigError, SimReport, TraceEvent, TraceKind, Verdict,
    Verdicts, MAX_SIM_PROCESSES,
};
pub use transport::{LocalGroup, Node, TransportError};
