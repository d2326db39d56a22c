//! MongoDB through the raw driver: the native write each of bakery's
//! MongoDB strategies rests on (the raw counterpart of bakery's
//! `put_if_version`).

use std::sync::atomic::{AtomicI64, Ordering};

use bakery::backends::mongodb::mongodb::bson::spec::BinarySubtype;
use bakery::backends::mongodb::mongodb::bson::{doc, Binary, Document};
use bakery::backends::mongodb::mongodb::error::Error;
use bakery::backends::mongodb::mongodb::options::CollectionOptions;
use bakery::backends::mongodb::mongodb::{Client, Collection};
use bakery::backends::mongodb::MongoConfig;

use super::driver::without_options;

/// A bakery mongodb `uri` as the driver takes it: without bakery's `cas`
/// option.
pub fn driver_uri(uri: &str) -> String {
    without_options(uri, &["cas"])
}

/// A conditional write through the raw driver: one insert of an immutable
/// document under a unique `_id` (what `cas=insert` does; a duplicate
/// `_id` is the conflict), into a collection of its own in database
/// `bakery`, acknowledged as bakery's writes are (the URI's write concern,
/// else `w=majority` and `journal=true`): the comparison is of the same
/// durable write, not of a write a crash may forget.
#[derive(Debug)]
pub struct RawInsert {
    collection: Collection<Document>,
    next: AtomicI64,
}

impl RawInsert {
    /// Connect to the server of `uri` and use the collection `name`.
    pub async fn connect(uri: &str, name: &str) -> Result<RawInsert, Error> {
        let concern = MongoConfig::from_uri(uri)
            .map_err(|e| Error::custom(format!("{uri}: {e}")))?
            .write_concern();
        let client = Client::with_uri_str(driver_uri(uri)).await?;
        let options = CollectionOptions::builder().write_concern(concern).build();
        Ok(RawInsert {
            collection: client
                .database("bakery")
                .collection_with_options(name, options),
            next: AtomicI64::new(1),
        })
    }

    /// Insert the next version's document holding `value`.
    pub async fn insert(&self, value: &[u8]) -> Result<(), Error> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let value = Binary {
            subtype: BinarySubtype::Generic,
            bytes: value.to_vec(),
        };
        self.collection
            .insert_one(doc! { "_id": format!("k#{n:020}"), "v": value, "ver": n })
            .await
            .map(|_| ())
    }

    /// Drop the collection.
    pub async fn drop_collection(&self) -> Result<(), Error> {
        self.collection.drop().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_cas_option_is_dropped() {
        assert_eq!(driver_uri("mongodb://h/db"), "mongodb://h/db");
        assert_eq!(driver_uri("mongodb://h/db?cas=insert"), "mongodb://h/db");
        assert_eq!(
            driver_uri("mongodb://h/db?cas=insert&replicaSet=rs"),
            "mongodb://h/db?replicaSet=rs"
        );
    }
}
