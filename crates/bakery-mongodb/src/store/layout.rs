//! The layout marker: one document naming the strategy a collection's rows
//! are written with, so that an open checks the layout with one read by
//! `_id` instead of a search through every row.
//!
//! Why a marker: the two strategies keep different documents (crate docs),
//! and a store opened with one on a collection the other wrote would start
//! every key afresh — a sequence would hand out its ids again. Looking for a
//! document of the other layout is a query no index answers (`{k: {$exists:
//! false}}`): FerretDB runs it as a scan of the whole collection, 2.7 s on
//! 20,000 version documents, longer than an open's timeout. The marker is
//! also claimed with a unique `_id`, so two stores of different strategies
//! opening one empty collection at once cannot both succeed.

use bakery_core::{Error, Operation, Result};
use mongodb::bson::{doc, Bson, Document};

use super::MongoStore;
use crate::error::{is_duplicate_key, map_err, Stage};
use crate::{CasStrategy, BACKEND};

/// The `_id` of the layout marker: the one document of a collection that is
/// not a row, `{_id: "#bakery-layout", cas: "update" | "insert"}`, written
/// by the first store that opens the collection. A store of the other
/// strategy is refused at open ([`MongoStore::open`]). `#` cannot occur in
/// a key, and a version document's `_id` has a key before its `#`: no row
/// can take this `_id`.
///
/// ```
/// // Tools that read the collection directly skip the marker:
/// use bakery_mongodb::mongodb::bson::doc;
/// let rows_only = doc! {"_id": {"$ne": bakery_mongodb::LAYOUT_ID}};
/// assert_eq!(bakery_mongodb::LAYOUT_ID, "#bakery-layout");
/// # let _ = rows_only;
/// ```
pub const LAYOUT_ID: &str = "#bakery-layout";

impl MongoStore {
    /// Refuse a collection whose rows (or marker) belong to the other
    /// strategy; on a collection without a marker, look for a row of the
    /// other layout once (collections from before the marker), then claim
    /// the collection for this store's strategy.
    pub(super) async fn claim_layout(&self) -> Result<()> {
        if let Some(claimed) = self.read_layout().await? {
            return self.same_layout(claimed);
        }
        self.refuse_unmarked_rows().await?;
        let marker = doc! {"_id": LAYOUT_ID, "cas": self.strategy().as_str()};
        match self.coll().insert_one(marker).await {
            Ok(_) => Ok(()),
            // Another store claimed it between our read and our insert.
            Err(e) if is_duplicate_key(&e) => match self.read_layout().await? {
                Some(claimed) => self.same_layout(claimed),
                None => Err(Error::not_sent(
                    bakery_core::ErrorKind::Unavailable,
                    BACKEND,
                    Operation::Open,
                    format!(
                        "the layout marker of collection {:?} was claimed and removed while opening; retry",
                        self.collection_name()
                    ),
                )),
            },
            Err(e) => Err(map_err(e, Operation::Open, Stage::Connect)),
        }
    }

    /// The strategy the marker names, if there is a marker.
    async fn read_layout(&self) -> Result<Option<CasStrategy>> {
        let found = self
            .coll()
            .find_one(doc! {"_id": LAYOUT_ID})
            .await
            .map_err(|e| map_err(e, Operation::Open, Stage::Read))?;
        found.map(|marker| self.decode_layout(&marker)).transpose()
    }

    fn decode_layout(&self, marker: &Document) -> Result<CasStrategy> {
        match marker.get("cas") {
            Some(Bson::String(s)) if s == CasStrategy::Update.as_str() => Ok(CasStrategy::Update),
            Some(Bson::String(s)) if s == CasStrategy::Insert.as_str() => Ok(CasStrategy::Insert),
            other => Err(Error::corrupt(
                BACKEND,
                format!(
                    "the layout marker `{LAYOUT_ID}` of collection {:?} has `cas` {}; expected \"update\" or \"insert\" \
                     (bakery wrote it: fix or remove it only knowing which strategy wrote the rows)",
                    self.collection_name(),
                    other.map_or_else(|| "missing".to_string(), |v| v.to_string()),
                ),
            )),
        }
    }

    fn same_layout(&self, claimed: CasStrategy) -> Result<()> {
        if claimed == self.strategy() {
            Ok(())
        } else {
            Err(self.other_layout(claimed, "is marked as written"))
        }
    }

    /// A collection from before the marker: look for one row of the other
    /// layout. This search reads the whole collection on servers without an
    /// index for it, but runs once: the marker is written right after.
    async fn refuse_unmarked_rows(&self) -> Result<()> {
        let (other, filter) = match self.strategy() {
            // `insert` documents carry `k`; `update` documents never do.
            CasStrategy::Update => (CasStrategy::Insert, doc! {"k": {"$exists": true}}),
            CasStrategy::Insert => (
                CasStrategy::Update,
                doc! {"k": {"$exists": false}, "_id": {"$ne": LAYOUT_ID}},
            ),
        };
        let found = self
            .coll()
            .find_one(filter)
            .projection(doc! {"_id": 1})
            .await
            .map_err(|e| map_err(e, Operation::Open, Stage::Read))?;
        match found {
            None => Ok(()),
            Some(_) => Err(self.other_layout(other, "holds rows written")),
        }
    }

    fn other_layout(&self, other: CasStrategy, how: &str) -> Error {
        Error::config(
            BACKEND,
            format!(
                "collection {:?} {how} with cas={other}, but this store would use cas={} on {}: \
                 every key would start afresh and a sequence would hand out its ids again. \
                 Open it with cas={other}{}, or use another collection (`collection=`)",
                self.collection_name(),
                self.strategy(),
                self.server(),
                if other == CasStrategy::Update && !self.server().update_is_proven() {
                    " and allow_unproven_update=true (only if concurrent writers are impossible or the server is verified atomic)"
                } else {
                    ""
                }
            ),
        )
    }
}
