//! The leased FIFO queue under the lock, the semaphore and the read-write
//! lock (and, through the lock, leader election): one row per name holding
//! the last fencing token, the holders and the queue, written only with
//! `put_if_version`. The recipes differ in their grant rule alone
//! ([`Rule`]: one holder, N permits, readers or one writer) and in their
//! row's form ([`row::Shape`]); everything else lives here once, the way
//! tokio builds its `Mutex`, `RwLock` and `Semaphore` on one semaphore.
//!
//! | file | what |
//! |---|---|
//! | `state.rs` | the row's state and its transitions (take, join, fill, release, withdraw, evict, beat) |
//! | `row.rs` | its stored forms, one per recipe, with the bare-id queue and the cached queue JSON |
//! | `writer.rs` | one writer per process and row: the process's requests share conditional writes |
//! | `arrival.rs` | a process's acquisitions send their first request in the order they were called |
//! | `dispatch.rs` | one listener per process and row hands each row to the waiters it grants |
//! | `silence.rs` | what this process saw of each holder's heartbeat, to evict one silent for a lease |
//! | `handle.rs` | a recipe handle's checked settings |
//! | `acquire.rs` | the acquire loop, the try that never queues, withdrawal of a request given up |
//! | `hold.rs`, `lease.rs` | a held grant: heartbeat, release, hold limits, lost signal, reentrancy |
//! | `give_back.rs` | withdrawals and releases that failed, tried again in the background |
//!
//! # How it works
//! - **Order without clocks.** An acquisition takes a free grant with one
//!   write, or appends itself to the queue with one write. The queue is in
//!   the order those writes applied, so grants are FIFO with no clock
//!   involved, and a newcomer never passes a waiter (a reader never passes
//!   a queued writer).
//! - **Direct hand-off.** A release (an eviction, a withdrawal) grants the
//!   head of the queue while it fits, in the same write, each grant with
//!   the next fencing token. The new holder learns it from a wake-up or its
//!   next read; its lease runs from its last request before (which the
//!   hand-off followed), so taking over costs no write.
//! - **One writer per process.** A process's requests of one row go
//!   through one writer, which applies those waiting together to the
//!   newest row in one conditional write (in order, so FIFO holds).
//!   Clients in one process never conflict with each other, and a release
//!   often carries the next enqueues. Their first requests reach the
//!   writer in the order they called `acquire`.
//! - **Leases without synchronized clocks.** A holder advances its
//!   heartbeat counter every lease/3. A waiter that sees the same (holder,
//!   heartbeat) for a whole lease *on its own monotonic clock* evicts it,
//!   with a write that applies only while that heartbeat still stands. A
//!   grant not claimed within its lease is evicted the same way. The count
//!   is kept per process and row.
//! - **Giving back.** A request given up is withdrawn, and a grant whose
//!   release failed is released, in the background until the store
//!   answers: a fault leaves no request behind for a lease to clear.
//! - **Wake-ups.** A waiter registers with its process's dispatcher for
//!   the row before its enqueue write. The dispatcher listens to the store
//!   once for the whole process (a watch where the backend has one, else
//!   one poll) and hands each row only to the waiters it grants. A write of
//!   the same process hands its row to the dispatcher directly, and a
//!   write that grants a waiter elsewhere notifies the other processes.
//!   Every waiter still reads at least every lease/4.

pub(crate) mod acquire;
mod arrival;

mod dispatch;
pub(crate) mod give_back;
pub(crate) mod handle;
pub(crate) mod hold;
mod lease;
pub(crate) mod row;
mod silence;
pub(crate) mod state;
pub(crate) mod writer;

#[cfg(test)]
use arrival::order;
#[cfg(test)]
mod turns;
