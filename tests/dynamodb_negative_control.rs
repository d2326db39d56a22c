//! A real negative control for the DynamoDB backend: the conformance suite
//! must FAIL a DynamoDB store whose writes drop their `ConditionExpression`.
//!
//! `Unconditional` issues the same `UpdateItem` as `DynamoStore` (`SET v,
//! ver = if_not_exists(ver, 0) + 1` on the same table, through the same SDK
//! client) with no condition: every write applies. The suite's race case
//! (8 tasks incrementing one counter by compare-and-set) must catch it
//! losing updates against the real server; the same case on the real
//! store must pass. Needs `BAKERY_DYNAMODB_URI` (FAILS under `CI=true`
//! without it).

#![cfg(feature = "dynamodb")]

use std::collections::HashMap;
use std::sync::Arc;

use bakery::backends::dynamodb::aws_sdk_dynamodb::primitives::Blob;
use bakery::backends::dynamodb::aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use bakery::backends::dynamodb::{DynamoStore, KEY_ATTR, VALUE_ATTR, VERSION_ATTR};
use bakery::{
    Bytes, Capabilities, DeleteOutcome, Error, Key, PutOutcome, Result, Row, Version,
    VersionedStore,
};
use bakery_core::async_trait;

/// Races before concluding that the suite cannot catch a dropped condition.
const ATTEMPTS: usize = 5;

/// `DynamoStore`'s writes without their condition; reads are the store's.
#[derive(Debug)]
struct Unconditional(DynamoStore);

impl Unconditional {
    async fn update(
        &self,
        key: &Key,
        update: &str,
        values: HashMap<String, AttributeValue>,
    ) -> Result<Option<Version>> {
        let mut request = self
            .0
            .client()
            .update_item()
            .table_name(self.0.config().table())
            .key(KEY_ATTR, AttributeValue::S(key.as_str().to_string()))
            .update_expression(update)
            .expression_attribute_names("#v", VALUE_ATTR)
            .return_values(ReturnValue::UpdatedNew);
        if update.contains("#ver") {
            request = request.expression_attribute_names("#ver", VERSION_ATTR);
        }
        let out = request
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .send()
            .await
            .map_err(|e| Error::config("negative control", e.to_string()))?;
        Ok(match out.attributes().and_then(|a| a.get(VERSION_ATTR)) {
            Some(AttributeValue::N(n)) => n.parse().ok(),
            _ => None,
        })
    }
}

#[async_trait]
impl VersionedStore for Unconditional {
    fn backend(&self) -> &'static str {
        "dynamodb"
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        self.0.get(key).await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        _expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let values = HashMap::from([
            (
                ":v".to_string(),
                AttributeValue::B(Blob::new(value.to_vec())),
            ),
            (":zero".to_string(), AttributeValue::N("0".into())),
            (":one".to_string(), AttributeValue::N("1".into())),
        ]);
        let version = self
            .update(
                key,
                "SET #v = :v, #ver = if_not_exists(#ver, :zero) + :one",
                values,
            )
            .await?
            .unwrap_or(1);
        Ok(PutOutcome::Applied(Row::new(key, value, version)))
    }

    async fn delete_if_version(&self, key: &Key, _expected: Version) -> Result<DeleteOutcome> {
        self.update(key, "REMOVE #v", HashMap::new()).await?;
        Ok(DeleteOutcome::Deleted)
    }
}

fn race_fails_once(runtime: &tokio::runtime::Runtime, store: Arc<dyn VersionedStore>) -> bool {
    let case = bakery_testkit::cases()
        .into_iter()
        .find(|c| c.name == "cas::race_of_8_tasks_loses_no_update")
        .expect("the race case exists");
    runtime.block_on(async { tokio::spawn(case.run_on(store)).await.is_err() })
}

#[test]
fn a_dropped_condition_loses_updates_and_the_suite_sees_it() {
    let Some(uri) = bakery_testkit::server_uri("BAKERY_DYNAMODB_URI", "dynamodb negative control")
    else {
        return;
    };
    let runtime = bakery_testkit::runtime(4);
    let store = runtime
        .block_on(DynamoStore::connect(&uri))
        .expect("open the DynamoDB test server");
    let real: Arc<dyn VersionedStore> = Arc::new(store.clone());
    assert!(
        !race_fails_once(&runtime, real),
        "the real DynamoStore lost an update: the conditional write is broken"
    );
    let broken: Arc<dyn VersionedStore> = Arc::new(Unconditional(store));
    let detected_at = (1..=ATTEMPTS).find(|_| race_fails_once(&runtime, broken.clone()));
    match detected_at {
        Some(attempt) => eprintln!(
            "negative control: the race case caught the unconditional DynamoDB store (attempt {attempt} of {ATTEMPTS})"
        ),
        None => panic!(
            "{ATTEMPTS} races of 8 tasks on a store with no ConditionExpression lost no update: the suite can no longer fail"
        ),
    }
}
