//! DynamoDB through the raw SDK: DynamoDB's own conditional write (the raw
//! counterpart of bakery's `put_if_version`), as a user doing optimistic
//! locking by hand writes it.

use std::sync::atomic::{AtomicU64, Ordering};

use bakery::backends::dynamodb::aws_sdk_dynamodb::operation::put_item::PutItemError;
use bakery::backends::dynamodb::aws_sdk_dynamodb::primitives::Blob;
use bakery::backends::dynamodb::aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure,
};
use bakery::backends::dynamodb::aws_sdk_dynamodb::Client;
use bakery::backends::dynamodb::{DynamoStore, KEY_ATTR, VALUE_ATTR, VERSION_ATTR};

/// A conditional write through the raw SDK, on the client and table of a
/// bakery store: one
/// `PutItem` of the whole item `{k, ver: n + 1, v}` with
/// `ConditionExpression: ver = :n` (the first with
/// `attribute_not_exists(k)`), on a key of its own.
#[derive(Debug)]
pub struct RawPut {
    client: Client,
    table: String,
    key: String,
    /// The version the next write expects (0: none yet).
    current: AtomicU64,
    /// Whether the condition carries bakery's guard on the value's type
    /// (and asks for the item on a refusal), as bakery's update does.
    guarded: bool,
}

impl RawPut {
    /// The raw writer beside `store`, on the key `key`.
    pub fn new(store: &DynamoStore, key: &str) -> RawPut {
        RawPut {
            client: store.client().clone(),
            table: store.config().table().to_string(),
            key: key.to_string(),
            current: AtomicU64::new(0),
            guarded: false,
        }
    }

    /// The same, with bakery's whole condition: `ver = :n AND
    /// (attribute_type(v, B) OR v = :empty)` and
    /// `ReturnValuesOnConditionCheckFailure=ALL_OLD` — the request bakery's
    /// update sends, issued raw (what the server's evaluation of the guard
    /// costs is then on both sides).
    pub fn guarded(store: &DynamoStore, key: &str) -> RawPut {
        RawPut {
            guarded: true,
            ..RawPut::new(store, key)
        }
    }

    /// Write `value` at the next version; `false` when the condition failed
    /// (someone else wrote the key).
    pub async fn put(&self, value: &[u8]) -> Result<bool, String> {
        let n = self.current.load(Ordering::Relaxed);
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(KEY_ATTR, AttributeValue::S(self.key.clone()))
            .item(VERSION_ATTR, AttributeValue::N((n + 1).to_string()))
            .item(VALUE_ATTR, AttributeValue::B(Blob::new(value.to_vec())));
        let request = if n == 0 {
            request
                .condition_expression("attribute_not_exists(#k)")
                .expression_attribute_names("#k", KEY_ATTR)
        } else if self.guarded {
            request
                .condition_expression("#ver = :n AND (attribute_type(#v, :binary) OR #v = :empty)")
                .expression_attribute_names("#ver", VERSION_ATTR)
                .expression_attribute_names("#v", VALUE_ATTR)
                .expression_attribute_values(":n", AttributeValue::N(n.to_string()))
                .expression_attribute_values(":binary", AttributeValue::S("B".into()))
                .expression_attribute_values(":empty", AttributeValue::B(Blob::new(Vec::new())))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
        } else {
            request
                .condition_expression("#ver = :n")
                .expression_attribute_names("#ver", VERSION_ATTR)
                .expression_attribute_values(":n", AttributeValue::N(n.to_string()))
        };
        match request.send().await {
            Ok(_) => {
                self.current.store(n + 1, Ordering::Relaxed);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(
                bakery::backends::dynamodb::aws_sdk_dynamodb::error::DisplayErrorContext(e)
                    .to_string(),
            ),
        }
    }
}
