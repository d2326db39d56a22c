#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod beats;
pub mod consumer;
pub mod election;
pub mod fence;
mod grant;
mod id_batch;
pub mod keys;
pub mod lamport;
pub mod lock;
pub mod metrics;
pub mod once;
mod per_process;
mod queue;
pub mod rwlock;
pub mod semaphore;
pub mod sequence;
pub mod snowflake;
pub mod time;
