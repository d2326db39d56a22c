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

/// What the check at open and each re-check find: a table with replicas in
/// other regions (a global table), and one with another id than at open.
pub(crate) fn table_hazards(
    table: &str,
    opened: Option<&str>,
    now: &TableDescription,
) -> Vec<Hazard> {
    let mut found = Vec::new();
    let regions: Vec<&str> = now
        .replicas()
        .iter()
        .filter_map(|replica| replica.region_name())
        .collect();
    if !regions.is_empty() {
        found.push(Hazard::new(
            "replicas",
            format!("{table} replicated to {}", regions.join(", ")),
            "a global table accepts conditional writes in every region and reconciles them later (last writer wins): two regions can both apply a write at the same version, so ids and fencing tokens repeat",
            "use a table without replicas (one region) for bakery",
        ));
    }
    if let (Some(opened), Some(id)) = (opened, now.table_id()) {
        if opened != id {
            found.push(Hazard::new(
                "table",
                format!("{table} re-created (id {id}, was {opened})"),
                "the table was deleted and created again under the store: its versions started over, so sequence ids and fencing tokens repeat",
                "reopen the stores on the new table only if nothing issued from the old one is still in use",
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::ReplicaDescription;

    use super::*;

    #[test]
    fn a_global_table_and_a_re_created_one_are_hazards() {
        let plain = TableDescription::builder().table_id("id-1").build();
        assert!(table_hazards("t", Some("id-1"), &plain).is_empty());
        let recreated = TableDescription::builder().table_id("id-2").build();
        let found = table_hazards("t", Some("id-1"), &recreated);
        assert_eq!(found.len(), 1);
        let global = TableDescription::builder()
            .table_id("id-1")
            .replicas(
                ReplicaDescription::builder()
                    .region_name("eu-west-1")
                    .build(),
            )
            .build();
        let found = table_hazards("t", Some("id-1"), &global);
        assert_eq!(found.len(), 1);
        let message = format!("{found:?}");
        assert!(message.contains("eu-west-1"), "{message}");
    }
}
