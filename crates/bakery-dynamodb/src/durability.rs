//! The durability check: what can be checked of a DynamoDB table at open
//! and while a store is live. DynamoDB itself has no setting under which an
//! acknowledged write is lost (AWS's documentation; crate docs, "What rests
//! on AWS's documentation"), so what is checked is the table: that it is
//! bakery's (its key schema), that it can take writes (its status), and
//! that it is still the table the store opened (its id).

use aws_sdk_dynamodb::types::{KeyType, ScalarAttributeType, TableDescription};
use bakery_core::durability::Hazard;
use bakery_core::{Error, Result};

use crate::{BACKEND, KEY_ATTR};

/// The key schema bakery's items need: `k`, a string, the only key.
pub(crate) fn check_key_schema(table: &str, described: &TableDescription) -> Result<()> {
    let keys = described.key_schema();
    let hash_is_k = matches!(keys, [only] if only.attribute_name() == KEY_ATTR && only.key_type() == &KeyType::Hash);
    let k_is_string = described
        .attribute_definitions()
        .iter()
        .any(|d| d.attribute_name() == KEY_ATTR && d.attribute_type() == &ScalarAttributeType::S);
    if hash_is_k && k_is_string {
        return Ok(());
    }
    let found = keys
        .iter()
        .map(|k| format!("{} ({})", k.attribute_name(), k.key_type().as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::config(
        BACKEND,
        format!(
            "table {table:?} has key schema [{found}], not bakery's (partition key `{KEY_ATTR}` of type S, no sort key): \
             use another table (`table=`)"
        ),
    ))
}

/// What the re-check found: a table with another id than at open.
pub(crate) fn table_hazards(
    table: &str,
    opened: Option<&str>,
    now: &TableDescription,
) -> Vec<Hazard> {
    match (opened, now.table_id()) {
        (Some(opened), Some(now)) if opened != now => vec![Hazard::new(
            "table",
            format!("{table} re-created (id {now}, was {opened})"),
            "the table was deleted and created again under the store: its versions started over, so sequence ids and fencing tokens repeat",
            "reopen the stores on the new table only if nothing issued from the old one is still in use",
        )],
        _ => Vec::new(),
    }
}
