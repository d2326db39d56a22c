//! DynamoConfig: the URI forms, the options, the refusals and the
//! redaction. No server.

use std::time::Duration;

use bakery_core::ErrorKind;
use bakery_dynamodb::{DynamoConfig, DEFAULT_TABLE, DEFAULT_TIMEOUT};

fn refused(uri: &str, needle: &str) {
    let err = DynamoConfig::from_uri(uri).expect_err(uri);
    assert_eq!(err.kind(), ErrorKind::Config, "{uri}: {err}");
    assert!(err.message().contains(needle), "{uri}: {err}");
    assert!(!err.to_string().contains("s3cret"), "{uri}: {err}");
}

#[test]
fn forms_and_defaults() {
    let c = DynamoConfig::from_uri("dynamodb://us-east-1").unwrap();
    assert_eq!(
        (c.region(), c.table(), c.endpoint()),
        ("us-east-1", DEFAULT_TABLE, None)
    );
    assert_eq!(c.timeout(), DEFAULT_TIMEOUT);
    assert!(!c.has_static_credentials());
    assert!(!c.accept_data_loss());
    let c = DynamoConfig::from_uri("DynamoDB://eu-west-3/t_1.x-y").unwrap();
    assert_eq!(c.table(), "t_1.x-y");
    let c =
        DynamoConfig::from_uri("dynamodb://us-east-1?table=abc&timeout_ms=5&accept_data_loss=true")
            .unwrap();
    assert_eq!(
        (c.table(), c.timeout(), c.accept_data_loss()),
        ("abc", Duration::from_millis(5), true)
    );
    // The same table twice is one table.
    assert_eq!(
        DynamoConfig::from_uri("dynamodb://us-east-1/abc?table=abc")
            .unwrap()
            .table(),
        "abc"
    );
    let c = DynamoConfig::from_uri(
        "dynamodb://AK%2FID:s3%40cret@us-east-1?endpoint=https://ddb.local:8443/",
    )
    .unwrap();
    assert!(c.has_static_credentials());
    assert_eq!(c.endpoint(), Some("https://ddb.local:8443/"));
    let shown = format!("{c} {c:?}");
    assert!(
        !shown.contains("s3") && shown.contains("AK/ID:***@"),
        "{shown}"
    );
}

#[test]
fn refusals_name_the_part() {
    refused("mongodb://us-east-1", "not a dynamodb URI");
    refused("dynamodb://", "region");
    refused("dynamodb://US_EAST", "region");
    refused("dynamodb://us-east-1/ab", "table");
    refused("dynamodb://us-east-1/abc/", "table");
    refused("dynamodb://us-east-1/a%20b", "table");
    refused("dynamodb://us-east-1/abc?table=abd", "two tables");
    refused("dynamodb://us-east-1?endpoint=ftp://x", "endpoint");
    refused("dynamodb://us-east-1?endpoint=nohost", "endpoint");
    refused(
        "dynamodb://us-east-1?endpoint=http://u:s3cret@h:1",
        "endpoint",
    );
    refused("dynamodb://us-east-1?timeout_ms=0", "timeout_ms");
    refused(
        "dynamodb://us-east-1?durability_recheck_ms=0",
        "durability_recheck_ms",
    );
    refused("dynamodb://us-east-1?nosuch=1", "nosuch");
    refused("dynamodb://keyonly@us-east-1", "without a password");
    refused("dynamodb://:s3cret@us-east-1", "user name is empty");
    refused("dynamodb://k:s3cret@us-east-1#frag", "fragment");
}
