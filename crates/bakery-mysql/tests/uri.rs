//! URIs: what parses, what is refused and how, and that no password leaks.

use std::time::Duration;

use bakery_core::ErrorKind;
use bakery_mysql::{MysqlConfig, DEFAULT_POOL_SIZE, DEFAULT_TABLE};

fn refused(uri: &str) -> bakery_core::Error {
    let e = MysqlConfig::from_uri(uri).expect_err(uri);
    assert_eq!(e.kind(), ErrorKind::Config, "{uri}: {e}");
    assert_eq!(e.backend(), "mysql");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    e
}

#[test]
fn both_schemes_parse_to_the_same_config() {
    let a = MysqlConfig::from_uri("mysql://u:s3cret@h:3307/db").unwrap();
    let b = MysqlConfig::from_uri("MariaDB://u:s3cret@h:3307/db").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.table().to_string(), DEFAULT_TABLE);
    assert_eq!(a.pool_size(), DEFAULT_POOL_SIZE);
    assert_eq!(a.user(), Some("u"));
    assert_eq!(a.database(), Some("db"));
    assert!(a.has_password());
    assert!(!a.accept_data_loss());
    for shown in [a.to_string(), format!("{a:?}")] {
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("u:***@h:3307/db"), "{shown}");
    }
}

#[test]
fn options_are_read_and_shown_back() {
    let c = MysqlConfig::from_uri(
        "mysql://u@h/db?table=other.rows&pool_size=3&timeout_ms=250&connect_timeout_ms=100&accept_data_loss=true&durability_recheck_ms=50&tcp_keepalive=1000",
    )
    .unwrap();
    assert_eq!(c.table().database(), Some("other"));
    assert_eq!(c.pool_size(), 3);
    assert_eq!(c.timeout(), Some(Duration::from_millis(250)));
    assert_eq!(c.connect_timeout(), Duration::from_millis(100));
    assert!(c.accept_data_loss());
    assert_eq!(c.durability_recheck(), Duration::from_millis(50));
    let again = MysqlConfig::from_uri(&c.to_string()).unwrap();
    assert_eq!(again.table(), c.table());
    assert_eq!(again.pool_size(), 3);
    assert!(again.accept_data_loss());
    assert!(again.returning(), "the default");
    let plain = MysqlConfig::from_uri("mariadb://u@h/db?returning=false").unwrap();
    assert!(!plain.returning());
    assert!(!MysqlConfig::from_uri(&plain.to_string())
        .unwrap()
        .returning());
}

#[test]
fn bad_uris_are_config_errors_naming_the_problem() {
    bakery_testkit::assert_mentions(refused("postgres://u@h/db"), &["not a mysql URI"]);
    bakery_testkit::assert_mentions(refused("mysql://h/db"), &["no user"]);
    bakery_testkit::assert_mentions(refused("mysql://u:s3cret@h"), &["no database"]);
    bakery_testkit::assert_mentions(refused("mysql://u:s3cret@h/db?table=a;b"), &["table"]);
    bakery_testkit::assert_mentions(refused("mysql://u:s3cret@h/db?table=a.b.c"), &["table"]);
    bakery_testkit::assert_mentions(refused("mysql://u:s3cret@h/db?pool_size=0"), &["pool_size"]);
    bakery_testkit::assert_mentions(
        refused("mysql://u:s3cret@h/db?timeout_ms=0"),
        &["timeout_ms"],
    );
    bakery_testkit::assert_mentions(
        refused("mysql://u:s3cret@h/db?accept_data_loss=maybe"),
        &["accept_data_loss"],
    );
    bakery_testkit::assert_mentions(refused("mysql://u:s3cret@h/db?nonsense=1"), &["nonsense"]);
    for driver in [
        "pool_max=4",
        "pool_min=1",
        "client_found_rows=true",
        "reset_connection=true",
    ] {
        let name = driver.split('=').next().unwrap();
        bakery_testkit::assert_mentions(
            refused(&format!("mysql://u:s3cret@h/db?{driver}")),
            &[name, "not accepted"],
        );
    }
    // A database in the table name stands in for one in the path.
    assert!(MysqlConfig::from_uri("mysql://u@h?table=db.rows").is_ok());
}
