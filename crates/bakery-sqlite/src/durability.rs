//! What can lose an acknowledged write here: with WAL (always on for a
//! file), `synchronous=normal` commits without an fsync, so a power loss or
//! an OS crash can undo the last commits. Refused unless the URI says
//! `accept_data_loss=true` (see [`bakery_core::durability`]). An in-memory
//! database promises nothing across a restart and claims no PERSISTENT.

use bakery_core::durability::{check as refuse_hazards, Hazard};
use bakery_core::Result;

use crate::config::{SqliteConfig, Synchronous};
use crate::BACKEND;

/// Refuse a configuration that can lose acknowledged writes.
pub(crate) fn check(config: &SqliteConfig) -> Result<()> {
    if config.synchronous() != Synchronous::Normal || config.is_memory() {
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
        config.accept_data_loss(),
    )
}
