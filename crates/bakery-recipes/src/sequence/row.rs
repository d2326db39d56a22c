//! The stored form of a sequence: one JSON row per sequence name.

use bakery_core::{Bytes, Error, Row};
use serde::{Deserialize, Serialize};

/// The row's value. `(next, node)` is a Lamport timestamp: the value of
/// the counter and the node that last moved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SequenceRow {
    /// The first id not yet reserved by anyone.
    pub next: u64,
    /// The node that made the last reservation.
    pub node: String,
    /// The size of the last reservation.
    pub block: u64,
    /// Set when the sequence was handed back to the generator it was
    /// migrated from: no client may reserve from it until it is raised again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
}

impl SequenceRow {
    pub(crate) fn decode(row: &Row) -> Result<Self, Error> {
        serde_json::from_slice(&row.value).map_err(|e| {
            Error::corrupt(
                "sequence",
                format!("row {} is not a bakery sequence: {e}", row.key),
            )
            .with_source(e)
        })
    }

    /// The row, if reservations may be made from it.
    pub(crate) fn open(&self, name: &str) -> Result<&Self, Error> {
        if self.closed {
            return Err(Error::config(
                "sequence",
                format!(
                    "sequence {name} was handed back to the generator it was migrated from \
                     (its ids come from there now, above {}); `bakery migrate --apply` \
                     reopens it",
                    self.next.saturating_sub(1)
                ),
            ));
        }
        Ok(self)
    }

    pub(crate) fn encode(&self) -> Result<Bytes, Error> {
        serde_json::to_vec(self)
            .map(Bytes::from)
            .map_err(|e| Error::new(bakery_core::ErrorKind::Internal, "sequence", e.to_string()))
    }
}
