#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod fence;
pub mod lamport;
pub mod lock;
pub mod sequence;
pub mod time;
