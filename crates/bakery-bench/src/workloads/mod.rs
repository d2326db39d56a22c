//! The workloads run on every bakery store, one file each, and their
//! registry: the one list of them.
//!
//! Adding a workload is one file implementing
//! [`Workload`] plus one line in [`registry`].

mod cas;
mod cleanup;
mod consumer;
pub mod lock;
mod once;
mod outbox;
mod sequence;

use crate::model::Workload;

pub use cas::CasWorkload;
pub use consumer::ConsumerWorkload;
pub use lock::LockWorkload;
pub use once::OnceWorkload;
pub use outbox::OutboxWorkload;
pub use sequence::SequenceWorkload;

/// Every workload this build runs, in the order a plan of all of them runs
/// them. The one list: a plan, a command's `--workload` choices and its
/// help all come from here.
pub fn registry() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(CasWorkload),
        Box::new(SequenceWorkload),
        Box::new(LockWorkload),
        Box::new(OnceWorkload),
        Box::new(ConsumerWorkload),
        Box::new(OutboxWorkload),
    ]
}

/// The names of the [`registry`]'s workloads, in order.
pub fn names() -> Vec<&'static str> {
    registry().iter().map(|w| w.name()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_summarised() {
        let names = names();
        assert_eq!(
            names,
            ["cas", "sequence", "lock", "once", "consumer", "outbox"]
        );
        for workload in registry() {
            assert!(!workload.summary().is_empty(), "{}", workload.name());
            assert!(!workload.variants().is_empty(), "{}", workload.name());
        }
    }
}
