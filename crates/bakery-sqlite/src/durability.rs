//! What can lose an acknowledged write here: with WAL (always on for a
//! file), `synchronous=normal` commits without an fsync, so a power loss or
//! an OS crash can undo the last commits. Refused unless the URI says
//! `accept_data_loss=true` (see [`bakery_core::durability`]). An in-memory
//! database promises nothing across a restart and claims no PERSISTENT.

use bakery_core::durability::{check as refuse_hazards, Hazard};
use bakery_core::Result;

use crate::BACKEND;

/// Refuse a configuration that can lose acknowledged writes: a file
/// database at `synchronous=normal` without `accept_data_loss`.
pub(crate) fn check(
    synchronous_normal: bool,
    in_memory: bool,
    accept_data_loss: bool,
) -> Result<()> {
    if !synchronous_normal || in_memory {
        return Ok(());
    }
    refuse_hazards(
        BACKEND,
        &[Hazard::new(
            "synchronous",
            "normal",
            "in WAL mode a power loss or OS crash can undo the last commits",
            "synchronous=full, bakery's default",
        )],
        accept_data_loss,
    )
}
