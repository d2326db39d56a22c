#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod arrival;
mod beats;
pub mod consumer;
mod dispatch;
pub mod election;
pub mod fence;
mod give_back;
mod grant;
mod held;
pub mod keys;
pub mod lamport;
pub mod lock;
pub mod metrics;
pub mod once;
mod per_process;
pub mod rwlock;
pub mod semaphore;
pub mod sequence;
mod silence;
pub mod time;
mod turn;
