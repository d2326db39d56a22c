//! The durability check at open: the write-concern settings under which
//! an acknowledged write can be lost (crate docs, "Consistency and
//! durability"). FerretDB ignores write concerns; its durability is its
//! PostgreSQL's, which bakery cannot see through it.

use bakery_core::durability::Hazard;
use mongodb::options::Acknowledgment;

use crate::{MongoConfig, ServerInfo};

impl MongoConfig {
    /// The write-concern settings under which an acknowledged write can be
    /// lost on `server`: `journal=false`; `w` below `majority` on a replica
    /// set (a failover rolls back writes the old primary acknowledged).
    pub fn durability_hazards(&self, server: &ServerInfo) -> Vec<Hazard> {
        let concern = self.write_concern();
        let mut hazards = Vec::new();
        if concern.journal == Some(false) {
            hazards.push(Hazard::new(
                "journal",
                "false",
                "a write is acknowledged before it is in the journal; a crash in the next 100 ms forgets it",
                "journal=true (bakery's default)",
            ));
        }
        if server.replica_set().is_some() || server.is_router() {
            // A router does not report its shards' sizes: only `majority`
            // is known to be enough there.
            let majority = if server.is_router() {
                usize::MAX
            } else {
                server.members() / 2 + 1
            };
            let weak = match &concern.w {
                Some(Acknowledgment::Nodes(n)) if (*n as usize) < majority => Some(n.to_string()),
                Some(Acknowledgment::Custom(tag)) => Some(tag.clone()),
                _ => None,
            };
            if let Some(w) = weak {
                hazards.push(Hazard::new(
                    "w",
                    w,
                    "a write acknowledged by fewer than a majority is rolled back when the primary fails over",
                    "w=majority (bakery's default)",
                ));
            }
        }
        hazards
    }
}
