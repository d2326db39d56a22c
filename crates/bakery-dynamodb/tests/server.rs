//! DynamoStore against a real server (`BAKERY_DYNAMODB_URI`: dynalite from
//! `scripts/backends.sh start dynamodb`): what only a server has — the item
//! layout and tombstones, damaged items, the table made on demand and a
//! table of another shape. The contract itself, races included, is the
//! conformance suite's (`cargo test -p bakery --features dynamodb --test
//! conformance -- dynamodb`).

use std::collections::HashMap;

use bakery_core::{ErrorKind, Key, VersionedStore};
use bakery_dynamodb::aws_sdk_dynamodb::primitives::Blob;
use bakery_dynamodb::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use bakery_dynamodb::{DynamoStore, KEY_ATTR, VALUE_ATTR, VERSION_ATTR};
use bakery_testkit::corrupt;

fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_DYNAMODB_URI", test)
}

fn with_table(uri: &str, table: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}table={table}")
}

/// A store on a new table of its own (made on demand by the open).
async fn fresh(uri: &str, test: &str) -> (DynamoStore, String) {
    let table = bakery_testkit::unique_ident(&format!("bk_{test}"));
    let store = DynamoStore::connect(&with_table(uri, &table))
        .await
        .unwrap_or_else(|e| panic!("open a new table {table}: {e}"));
    (store, table)
}

async fn drop_table(store: &DynamoStore) {
    let _ = store
        .client()
        .delete_table()
        .table_name(store.config().table())
        .send()
        .await;
}

/// The item behind `k`, as stored: `(value, version)`; `None` when absent.
async fn raw(store: &DynamoStore, k: &str) -> corrupt::StoredRow {
    let out = store
        .client()
        .get_item()
        .table_name(store.config().table())
        .key(KEY_ATTR, AttributeValue::S(k.to_string()))
        .consistent_read(true)
        .send()
        .await
        .expect("raw get");
    let item = out.item()?;
    let value = match item.get(VALUE_ATTR) {
        Some(AttributeValue::B(b)) => Some(b.as_ref().to_vec()),
        _ => None,
    };
    let version = match item.get(VERSION_ATTR) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    };
    Some((value, version))
}

async fn put_raw(store: &DynamoStore, item: HashMap<String, AttributeValue>) {
    store
        .client()
        .put_item()
        .table_name(store.config().table())
        .set_item(Some(item))
        .send()
        .await
        .expect("raw put");
}

#[tokio::test]
async fn tombstones_keep_the_version_and_items_have_bakerys_layout() {
    let Some(uri) = server_uri("tombstones") else {
        return;
    };
    let (store, _) = fresh(&uri, "life").await;
    assert_eq!(store.backend(), "dynamodb");
    corrupt::tombstone_life_cycle(&store, async |k| raw(&store, k).await).await;
    drop_table(&store).await;
}

#[tokio::test]
async fn damaged_items_are_corrupt_errors_and_kept() {
    let Some(uri) = server_uri("damaged") else {
        return;
    };
    let (store, _) = fresh(&uri, "damaged").await;
    let s = |text: &str| AttributeValue::S(text.to_string());
    let n = |text: &str| AttributeValue::N(text.to_string());
    let b = AttributeValue::B(Blob::new(b"x".to_vec()));
    let items: [(&str, Vec<(&str, AttributeValue)>); 6] = [
        (
            "d/zero",
            vec![(VERSION_ATTR, n("0")), (VALUE_ATTR, b.clone())],
        ),
        (
            "d/neg",
            vec![(VERSION_ATTR, n("-5")), (VALUE_ATTR, b.clone())],
        ),
        (
            "d/huge",
            vec![
                (VERSION_ATTR, n("99999999999999999999999")),
                (VALUE_ATTR, b.clone()),
            ],
        ),
        (
            "d/strver",
            vec![(VERSION_ATTR, s("3")), (VALUE_ATTR, b.clone())],
        ),
        ("d/noversion", vec![(VALUE_ATTR, b.clone())]),
        (
            "d/strvalue",
            vec![(VERSION_ATTR, n("3")), (VALUE_ATTR, s("x"))],
        ),
    ];
    for (k, attrs) in &items {
        let mut item: HashMap<String, AttributeValue> = attrs
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect();
        item.insert(KEY_ATTR.to_string(), s(k));
        put_raw(&store, item).await;
    }
    for (k, _) in &items {
        corrupt::rejected(&store, "dynamodb", k, &[Some(3), None], 3, async |k| {
            raw(&store, k).await
        })
        .await;
    }
    // A tombstone whose version is no number: a create over it is refused
    // by the server's own type check, and reported as the damage it is.
    let mut item = HashMap::from([
        (KEY_ATTR.to_string(), s("d/strtomb")),
        (VERSION_ATTR.to_string(), s("2")),
    ]);
    item.remove(VALUE_ATTR);
    put_raw(&store, item).await;
    corrupt::rejected(&store, "dynamodb", "d/strtomb", &[None], 2, async |k| {
        raw(&store, k).await
    })
    .await;
    drop_table(&store).await;
}

#[tokio::test]
async fn a_table_of_another_key_schema_is_refused() {
    let Some(uri) = server_uri("key schema") else {
        return;
    };
    let (store, _) = fresh(&uri, "schema_probe").await;
    let table = bakery_testkit::unique_ident("bk_schema");
    let attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .unwrap()
    };
    store
        .client()
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute("pk"))
        .attribute_definitions(attribute("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .send()
        .await
        .expect("create a foreign table");
    let err = DynamoStore::connect(&with_table(&uri, &table))
        .await
        .expect_err("a foreign key schema");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    bakery_testkit::assert_mentions(
        &err,
        &[&table, "pk (HASH)", "sk (RANGE)", "partition key `k`"],
    );
    let _ = store
        .client()
        .delete_table()
        .table_name(&table)
        .send()
        .await;
    drop_table(&store).await;
}

/// The table made on demand is bakery's shape, on-demand capacity, and a
/// second open uses it as it is (rows kept).
#[tokio::test]
async fn the_table_is_made_on_demand_and_reused() {
    let Some(uri) = server_uri("on demand") else {
        return;
    };
    let (store, table) = fresh(&uri, "demand").await;
    let described = store
        .client()
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .expect("describe")
        .table
        .expect("a table");
    let keys: Vec<_> = described
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name().to_string(), k.key_type().clone()))
        .collect();
    assert_eq!(keys, vec![(KEY_ATTR.to_string(), KeyType::Hash)]);
    assert_eq!(
        described
            .billing_mode_summary()
            .and_then(|b| b.billing_mode()),
        Some(&BillingMode::PayPerRequest)
    );
    let key = Key::new("kept").unwrap();
    let row = bakery_testkit::applied(&store, &key, None, "v").await;
    let again = DynamoStore::connect(&with_table(&uri, &table))
        .await
        .expect("reopen");
    assert_eq!(again.get(&key).await.unwrap(), Some(row));
    drop_table(&store).await;
}
