//! The workloads run on every bakery store, one file each, and their
//! registry: the one list of them.
//!
//! Adding a workload is one file declaring its
//! [`WorkloadSpec`] (as `SPEC`) and implementing
//! [`Workload`](crate::model::Workload), plus one line in [`registry`].

pub(crate) mod cas;
mod cleanup;
mod consumer;
pub mod lock;
mod once;
mod outbox;
pub mod rwlock;
mod sequence;

use crate::model::WorkloadSpec;

/// What every workload file uses: the model it implements, its error and
/// the shared clean-up helpers.
mod prelude {
    pub(super) use async_trait::async_trait;

    pub(super) use super::cleanup::{delete_quietly, prepare_error, DeleteRowFinish, Tally};
    pub(super) use crate::error::BenchError;
    pub(super) use crate::model::{
        BenchClient, CellSpec, CellStore, Finish, OpError, PreparedCell, RoundTrips, Variant,
        Workload, WorkloadSpec,
    };
}

pub use cas::CasWorkload;
pub use consumer::ConsumerWorkload;
pub use lock::LockWorkload;
pub use once::OnceWorkload;
pub use outbox::OutboxWorkload;
pub use rwlock::RwLockWorkload;
pub use sequence::SequenceWorkload;

/// Every workload this build runs, in the order a plan of all of them runs
/// them. The one list: a plan, a command's `--workload` choices and its
/// help all come from here.
pub fn registry() -> [&'static WorkloadSpec; 7] {
    [
        &cas::SPEC,
        &sequence::SPEC,
        &lock::SPEC,
        &rwlock::SPEC,
        &once::SPEC,
        &consumer::SPEC,
        &outbox::SPEC,
    ]
}

/// The names of the [`registry`]'s workloads, in order.
pub fn names() -> Vec<&'static str> {
    registry().iter().map(|w| w.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_summarised() {
        let names = names();
        assert_eq!(
            names,
            ["cas", "sequence", "lock", "rwlock", "once", "consumer", "outbox"]
        );
        for workload in registry() {
            let name = workload.name;
            assert!(!workload.summary.is_empty(), "{name}");
            assert!(!workload.variants.is_empty(), "{name}");
            let title = workload.title_for(4096);
            assert!(title.starts_with(&format!("{name}: ")), "{title}");
            assert!(!title.contains("{block_size}"), "{title}");
        }
        assert!(sequence::SPEC.title_for(4096).contains("CACHE 4096"));
    }
}
