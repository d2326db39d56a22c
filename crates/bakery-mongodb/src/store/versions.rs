//! The `insert` strategy: one immutable document per version, made atomic
//! by the unique `_id` index alone. The argument is in docs.md; the names
//! below follow it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bakery_core::{Bytes, DeleteOutcome, Error, Key, PutOutcome, Result, Row, Version};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{doc, Binary, Bson, Document};
use tracing::Instrument;

use super::{
    binary, exhausted, field_value, field_version, lost_races, read_lags, Call, Inner, MongoStore,
    MAX_ATTEMPTS,
};
use crate::error::{self, is_duplicate_key};
use crate::BACKEND;

/// How many ancestors' tokens a version document carries. A writer
/// confirms its insert by finding its token in the newest document's
/// ancestry; if more than this many versions were written in between, it
/// cannot tell and reports an unknown outcome.
pub(crate) const ANCESTRY: usize = 64;

/// Background prunes allowed at once per store; beyond that a prune is
/// skipped (the next one deletes everything it would have).
const MAX_PRUNING: usize = 4;

/// The `_id` of version `version` of `key`: `key#` and the version in 20
/// zero-padded digits, so that string order is version order. `#` cannot
/// occur in a key.
pub(crate) fn version_id(key: &str, version: i64) -> String {
    format!("{key}#{version:020}")
}

/// One version document, decoded and checked.
#[derive(Debug, Clone)]
struct VersionDoc {
    version: i64,
    /// `None`: a tombstone.
    value: Option<Bytes>,
    /// Unique to this document (its writer's `ObjectId`).
    token: ObjectId,
    /// The tokens of the versions below it, newest first (at most
    /// [`ANCESTRY`]).
    ancestry: Vec<ObjectId>,
}

impl VersionDoc {
    fn live(&self, key: &Key) -> Option<Row> {
        Row::live(key, self.value.clone(), self.version.unsigned_abs())
    }
}

/// Whether a just-inserted version is on the line of versions that leads to
/// the newest document.
#[derive(Debug, PartialEq, Eq)]
enum Lineage {
    /// It is the newest, or the newest descends from it: the write applied.
    Ours,
    /// Another document holds its place in the newest's ancestry: it was
    /// inserted into a slot freed by pruning, after the key had moved on.
    /// The write did not apply.
    Stale,
    /// Cannot tell (more than [`ANCESTRY`] versions since, or documents
    /// missing that should be there).
    Unknown(String),
}

fn lineage(newest: &VersionDoc, version: i64, token: ObjectId) -> Lineage {
    let Some(distance) = newest.version.checked_sub(version) else {
        return Lineage::Unknown("version arithmetic overflowed".into());
    };
    if distance < 0 {
        return Lineage::Unknown(format!(
            "the newest version read back is {}, below the {version} just inserted (reads lag writes: check w and readConcernLevel)",
            newest.version
        ));
    }
    if distance == 0 {
        return if newest.token == token {
            Lineage::Ours
        } else {
            Lineage::Unknown(format!(
                "version {version} was replaced by another document (deleted behind bakery's back?)"
            ))
        };
    }
    let index = usize::try_from(distance - 1).unwrap_or(usize::MAX);
    if index >= ANCESTRY {
        return Lineage::Unknown(format!(
            "{distance} versions were written since, more than the {ANCESTRY} a document remembers"
        ));
    }
    match newest.ancestry.get(index) {
        Some(ancestor) if *ancestor == token => Lineage::Ours,
        Some(_) => Lineage::Stale,
        None => Lineage::Unknown(format!(
            "version {} remembers {} ancestors, fewer than expected",
            newest.version,
            newest.ancestry.len()
        )),
    }
}

impl MongoStore {
    /// The newest version document of `key`, tombstone included.
    async fn v_newest(&self, call: &Call, key: &Key) -> Result<Option<VersionDoc>> {
        let doc = self
            .coll()
            .find_one(doc! {"k": key.as_str()})
            .sort(doc! {"ver": -1})
            .await
            .map_err(|e| call.read_err(e))?;
        doc.map(|doc| decode_version(self.collection_name(), key, &doc))
            .transpose()
    }

    pub(crate) async fn v_get(&self, call: &Call, key: &Key) -> Result<Option<Row>> {
        Ok(self.v_newest(call, key).await?.and_then(|d| d.live(key)))
    }

    pub(crate) async fn v_put(
        &self,
        call: &Call,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        Ok(
            match self.v_write(call, key, expected, Some(value)).await? {
                Written::Applied(row) => PutOutcome::Applied(row),
                Written::Conflict(current) => PutOutcome::Conflict(current),
            },
        )
    }

    pub(crate) async fn v_delete(
        &self,
        call: &Call,
        key: &Key,
        expected: Version,
    ) -> Result<DeleteOutcome> {
        Ok(match self.v_write(call, key, Some(expected), None).await? {
            Written::Applied(_) => DeleteOutcome::Deleted,
            Written::Conflict(current) => DeleteOutcome::Conflict(current),
        })
    }

    /// Write version n + 1 (`value: None`: a tombstone) if the newest
    /// version is `expected` (`None`: if the key is absent).
    async fn v_write(
        &self,
        call: &Call,
        key: &Key,
        expected: Option<Version>,
        value: Option<Bytes>,
    ) -> Result<Written> {
        for attempt in 1..=MAX_ATTEMPTS {
            // 1. Read the newest version; it must be what the caller expects.
            let newest = self.v_newest(call, key).await?;
            let base = match (expected, &newest) {
                (Some(n), Some(doc)) if doc.value.is_some() && doc.version.unsigned_abs() == n => {
                    Some(doc)
                }
                (None, None) => None,
                (None, Some(doc)) if doc.value.is_none() => Some(doc),
                _ => {
                    let current = newest.and_then(|d| d.live(key));
                    tracing::debug!(current = ?current.as_ref().map(|r| r.version), "conflict");
                    return Ok(Written::Conflict(current));
                }
            };
            let version = match base {
                Some(base) => base.version.checked_add(1).ok_or_else(|| exhausted(key))?,
                None => 1,
            };
            let token = ObjectId::new();
            let ancestry: Vec<u8> = base
                .map(|b| {
                    std::iter::once(b.token)
                        .chain(b.ancestry.iter().copied())
                        .take(ANCESTRY)
                        .flat_map(|token| token.bytes())
                        .collect()
                })
                .unwrap_or_default();
            let id = version_id(key.as_str(), version);
            let mut doc = doc! {
                "_id": id.as_str(),
                "k": key.as_str(),
                "ver": version,
                "tok": token,
                "anc": Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: ancestry }),
            };
            match &value {
                Some(value) => doc.insert("v", binary(value)),
                None => doc.insert("dead", true),
            };

            // 2. Insert version n + 1: the unique `_id` lets one writer win.
            call.sending();
            match self.coll().insert_one(doc).await {
                Ok(_) => {}
                Err(e) if is_duplicate_key(&e) => {
                    call.settled();
                    let current = self.v_newest(call, key).await?.and_then(|d| d.live(key));
                    if read_lags(&current, expected, attempt).await {
                        continue;
                    }
                    return Ok(Written::Conflict(current));
                }
                Err(e) => return Err(call.write_err(e)),
            }

            // 3. Confirm: the insert applied only if the newest version
            //    descends from it (a pruned slot can take a late insert).
            let Some(newest) = self.v_newest(call, key).await? else {
                return Err(Error::in_doubt(
                    BACKEND,
                    call.op,
                    format!(
                        "version {version} of row `{key}` was inserted but no version can be read back"
                    ),
                ));
            };
            match lineage(&newest, version, token) {
                Lineage::Ours => {
                    call.settled();
                    tracing::debug!(version, attempt, "applied");
                    self.prune_later(key, version);
                    return Ok(Written::Applied(Row::new(
                        key,
                        value.unwrap_or_default(),
                        version.unsigned_abs(),
                    )));
                }
                Lineage::Stale => {
                    call.settled();
                    tracing::debug!(
                        version,
                        newest = newest.version,
                        "late insert into a pruned slot; not applied"
                    );
                    self.remove_later(id, token);
                    let current = newest.live(key);
                    if current.as_ref().map(|r| r.version) == expected {
                        continue;
                    }
                    return Ok(Written::Conflict(current));
                }
                Lineage::Unknown(why) => {
                    return Err(Error::in_doubt(
                        BACKEND,
                        call.op,
                        format!(
                            "version {version} of row `{key}` was inserted but cannot be confirmed: {why}"
                        ),
                    ));
                }
            }
        }
        Err(lost_races(call.op, key))
    }

    /// After version `version` applied, delete the versions two and more
    /// below it in the background, on every other version: a key keeps at
    /// most three documents (plus late inserts not yet removed).
    fn prune_later(&self, key: &Key, version: i64) {
        if version < 3 || version % 2 == 0 {
            return;
        }
        let Some(guard) = PruneGuard::take(&self.inner) else {
            tracing::debug!("too many prunes under way; skipped");
            return;
        };
        let coll = self.coll().clone();
        let limit = self.config().timeout();
        let key = key.as_str().to_string();
        let task = async move {
            let prune = coll.delete_many(doc! {"k": key.as_str(), "ver": {"$lte": version - 2}});
            match tokio::time::timeout(limit, prune).await {
                Ok(Ok(result)) => {
                    tracing::debug!(deleted = result.deleted_count, "pruned old versions")
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %error::driver_message(&e), "pruning failed; the next write retries")
                }
                Err(_) => tracing::debug!("pruning timed out; the next write retries"),
            }
            drop(guard);
        };
        tokio::spawn(task.in_current_span());
    }

    /// Remove a late insert (never the newest version, never on anyone's
    /// line), in the background; pruning removes it too otherwise.
    fn remove_later(&self, id: String, token: ObjectId) {
        let coll = self.coll().clone();
        let limit = self.config().timeout();
        let task = async move {
            let remove = coll.delete_one(doc! {"_id": id.as_str(), "tok": token});
            if let Ok(Err(e)) = tokio::time::timeout(limit, remove).await {
                tracing::debug!(error = %error::driver_message(&e), "removing a late insert failed");
            }
        };
        tokio::spawn(task.in_current_span());
    }
}

enum Written {
    Applied(Row),
    Conflict(Option<Row>),
}

/// Counts a background prune for as long as it lives.
struct PruneGuard(Arc<Inner>);

impl PruneGuard {
    fn take(inner: &Arc<Inner>) -> Option<PruneGuard> {
        let before = inner.pruning.fetch_add(1, Ordering::Relaxed);
        let guard = PruneGuard(inner.clone());
        (before < MAX_PRUNING).then_some(guard)
    }
}

impl Drop for PruneGuard {
    fn drop(&mut self) {
        self.0.pruning.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Decode `{_id: "key#…", k, ver, v | dead, tok, anc}`; anything else is
/// [`ErrorKind::Corrupt`] naming the key, never a panic.
fn decode_version(collection: &str, key: &Key, doc: &Document) -> Result<VersionDoc> {
    let id = match doc.get("_id") {
        Some(Bson::String(id)) => id.as_str(),
        Some(other) => {
            return Err(error::corrupt(
                collection,
                key,
                &format!("{other}"),
                format!(
                    "`_id` is a BSON {:?}; expected \"{key}#<version>\"",
                    other.element_type()
                ),
            ))
        }
        None => {
            return Err(error::corrupt(
                collection,
                key,
                "(no _id)",
                "the document has no `_id`",
            ))
        }
    };
    let version = field_version(collection, key, id, doc)?;
    let version = i64::try_from(version).unwrap_or(i64::MAX);
    if id != version_id(key.as_str(), version) {
        return Err(error::corrupt(
            collection,
            key,
            id,
            format!("`_id` does not match `ver` {version}"),
        ));
    }
    let (value, _) = field_value(collection, key, id, doc)?;
    let token = match doc.get("tok") {
        Some(Bson::ObjectId(token)) => *token,
        _ => {
            return Err(error::corrupt(
                collection,
                key,
                id,
                "field `tok` is missing or not an ObjectId",
            ))
        }
    };
    let ancestry = match doc.get("anc") {
        None => Vec::new(),
        Some(Bson::Binary(bin)) if bin.bytes.len() % 12 == 0 => bin
            .bytes
            .chunks_exact(12)
            .map(|chunk| {
                let mut bytes = [0u8; 12];
                bytes.copy_from_slice(chunk);
                ObjectId::from_bytes(bytes)
            })
            .collect(),
        Some(_) => {
            return Err(error::corrupt(
                collection,
                key,
                id,
                "field `anc` is not binary data of 12-byte ObjectIds",
            ))
        }
    };
    Ok(VersionDoc {
        version,
        value,
        token,
        ancestry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc_at(version: i64, token: ObjectId, ancestry: Vec<ObjectId>) -> VersionDoc {
        VersionDoc {
            version,
            value: Some(Bytes::from_static(b"x")),
            token,
            ancestry,
        }
    }

    #[test]
    fn ids_sort_like_versions() {
        assert_eq!(version_id("k", 42), "k#00000000000000000042");
        assert_eq!(version_id("k", i64::MAX).len(), 2 + 20);
        assert!(version_id("k", 9) < version_id("k", 10));
        // `#` sorts below every character a key may contain, so one key's
        // versions never interleave with another key's.
        assert!(version_id("a", i64::MAX) < version_id("a-b", 1));
        assert!(version_id("a", i64::MAX).as_str() < "a+");
    }

    #[test]
    fn lineage_decides_from_the_newest_document() {
        let (mine, other, older) = (ObjectId::new(), ObjectId::new(), ObjectId::new());
        assert_eq!(
            lineage(&doc_at(5, mine, vec![older]), 5, mine),
            Lineage::Ours
        );
        assert_eq!(
            lineage(&doc_at(7, other, vec![older, mine]), 5, mine),
            Lineage::Ours
        );
        assert_eq!(
            lineage(&doc_at(7, other, vec![older, other]), 5, mine),
            Lineage::Stale
        );
        assert!(matches!(
            lineage(&doc_at(5, other, vec![]), 5, mine),
            Lineage::Unknown(_)
        ));
        assert!(matches!(
            lineage(&doc_at(4, other, vec![]), 5, mine),
            Lineage::Unknown(_)
        ));
        assert!(matches!(
            lineage(
                &doc_at(5 + ANCESTRY as i64 + 1, other, vec![older; ANCESTRY]),
                5,
                mine
            ),
            Lineage::Unknown(_)
        ));
        let mut chain = vec![older; ANCESTRY];
        chain[ANCESTRY - 1] = mine;
        assert_eq!(
            lineage(&doc_at(5 + ANCESTRY as i64, other, chain), 5, mine),
            Lineage::Ours
        );
        assert!(matches!(
            lineage(&doc_at(7, other, vec![older]), 5, mine),
            Lineage::Unknown(_)
        ));
    }
}
