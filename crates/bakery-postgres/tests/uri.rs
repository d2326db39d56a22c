//! URI parsing: no server needed.

use std::path::PathBuf;
use std::time::Duration;

use bakery_core::ErrorKind;
use bakery_postgres::{
    PostgresConfig, RootCert, SslMode, TableName, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE,
    DEFAULT_TABLE, DEFAULT_TIMEOUT, SCHEMES,
};

const SECRET: &str = "hunter2-SECRET";

#[test]
fn schemes() {
    assert_eq!(SCHEMES, &["postgres", "postgresql"]);
}

/// A multi-byte character where `://` should follow the scheme once made
/// the scheme check slice inside it (a panic); found by tests/uri_properties.rs.
#[test]
fn a_multibyte_character_after_the_scheme_is_a_config_error() {
    for uri in [
        "postgres:\u{11461}",
        "postgresql:\u{e9}",
        "postgres\u{e9}//h/db",
    ] {
        let err = PostgresConfig::from_uri(uri).expect_err(uri);
        assert_eq!(err.kind(), ErrorKind::Config, "{uri}: {err}");
    }
}

/// `?…@&password=SECRET`: the driver's split (credentials up to the first
/// `@`) makes `&password=SECRET` the host. Refused without echoing it;
/// found by tests/uri_properties.rs.
#[test]
fn a_host_that_is_not_a_host_name_is_refused_without_echoing_it() {
    let uri = format!("postgres://?timeout_ms=@&password={SECRET}");
    let err = PostgresConfig::from_uri(&uri).expect_err("a host with `&` and `=`");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(!err.to_string().contains(SECRET), "{err}");
    for good in [
        "postgres://u@localhost/db",
        "postgres://u@127.0.0.1:5432/db",
        "postgres://u@[::1]:5432/db",
        "postgres://u@db-1.example_x.com/db",
    ] {
        PostgresConfig::from_uri(good).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[test]
fn defaults() {
    let config = PostgresConfig::from_uri("postgres://postgres@127.0.0.1:15432/bakery").unwrap();
    assert_eq!(config.table().to_string(), DEFAULT_TABLE);
    assert_eq!(config.table().schema(), None);
    assert_eq!(config.pool_size(), DEFAULT_POOL_SIZE);
    assert_eq!(config.pool_size(), 16);
    assert_eq!(config.timeout(), Some(DEFAULT_TIMEOUT));
    assert_eq!(config.timeout(), Some(Duration::from_millis(10_000)));
    assert_eq!(config.connect_timeout(), DEFAULT_CONNECT_TIMEOUT);
    assert_eq!(config.ssl_mode(), SslMode::Prefer);
    assert_eq!(config.root_cert(), None);
    assert_eq!(config.user(), Some("postgres"));
    assert_eq!(config.dbname(), Some("bakery"));
    assert!(!config.has_password());
    assert!(!config.accept_data_loss());
    assert!(!config.to_string().contains("accept_data_loss"));
}

#[test]
fn good_uris() {
    let cases = [
        "postgres://u@h/db",
        "postgresql://u@h/db",
        "POSTGRES://u@h/db",
        "postgres://u@h:5433/db",
        "postgres://u:p@h1:1,h2:2/db",
        "postgres://u@[::1]:5432/db",
        "postgres://u@h",
        "postgres://h/db?user=u",
        "postgres://u@/db?host=/var/run/postgresql",
        "postgres://u@h/db?",
        "postgres://u@h/db?application_name=me&connect_timeout=3&keepalives=1",
        "postgres://u@h/db?target_session_attrs=read-write&options=-c%20work_mem%3D4MB",
        "postgres://u@h/db?sslmode=disable",
        "postgres://u@h/db?sslmode=verify-full&sslrootcert=system",
        "postgres://u@h/db?table=T_1&pool_size=1&timeout_ms=1",
        "postgres://u@h/db?table=s.t&pool_size=1024&timeout_ms=3600000",
    ];
    for uri in cases {
        let config = PostgresConfig::from_uri(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert!(config.validate().is_ok(), "{uri}");
    }
}

#[test]
fn options_are_split_between_bakery_and_the_driver() {
    let config = PostgresConfig::from_uri(
        "postgresql://app@db:6000/orders?application_name=svc&table=locks.rows&connect_timeout=2&pool_size=3&timeout_ms=250&sslmode=require&sslrootcert=%2Fetc%2Fca.pem",
    )
    .unwrap();
    assert_eq!(config.table().schema(), Some("locks"));
    assert_eq!(config.table().name(), "rows");
    assert_eq!(config.pool_size(), 3);
    assert_eq!(config.timeout(), Some(Duration::from_millis(250)));
    assert_eq!(config.connect_timeout(), Duration::from_secs(2));
    assert_eq!(config.ssl_mode(), SslMode::Require);
    assert_eq!(
        config.root_cert(),
        Some(&RootCert::File(PathBuf::from("/etc/ca.pem")))
    );
    assert_eq!(config.dbname(), Some("orders"));
    assert_eq!(
        config.to_string(),
        "postgres://app@db:6000/orders?table=locks.rows&pool_size=3&timeout_ms=250&connect_timeout=2&sslmode=require&sslrootcert=/etc/ca.pem&application_name=svc"
    );
}

/// Bad URIs: config errors naming the problem.
const REFUSED: &[(&str, &str)] = &[
    ("sqlite://x.db", "not a postgres URI"),
    ("postgres:/u@h/db", "not a postgres URI"),
    ("postgres", "not a postgres URI"),
    ("postgres://h/db", "no user"),
    ("postgres://u@/db", "no host"),
    ("postgres://u@h/db?table=", "`table`"),
    ("postgres://u@h/db?table=1abc", "`table`"),
    ("postgres://u@h/db?table=a-b", "`table`"),
    ("postgres://u@h/db?table=a.b.c", "`table`"),
    ("postgres://u@h/db?table=a;drop%20table%20x", "`table`"),
    ("postgres://u@h/db?table=%22x%22", "`table`"),
    ("postgres://u@h/db?table=pg_catalog.t", "`pg_`"),
    ("postgres://u@h/db?pool_size=0", "`pool_size`"),
    ("postgres://u@h/db?pool_size=1025", "`pool_size`"),
    ("postgres://u@h/db?pool_size=many", "`pool_size`"),
    ("postgres://u@h/db?sslmode=allow", "`sslmode`"),
    ("postgres://u@h/db?sslmode=verify-full", "sslrootcert"),
    ("postgres://u@h/db?sslmode=verify-ca", "sslrootcert"),
    (
        "postgres://u@h/db?sslmode=disable&sslrootcert=system",
        "sslrootcert",
    ),
    ("postgres://u@h/db?sslrootcert=", "`sslrootcert`"),
    ("postgres://u@h/db?port=x", "port"),
    ("postgres://u@h/db?keepalives", "`keepalives` has no value"),
    ("postgres://u@h/db?sslcert=/x.pem", "sslcert"),
];

bakery_testkit::shared_option_rules! {
    /// The rules every backend's options share (`timeout_ms=0`, which
    /// meant "no limit" here, is refused like every other duration of 0),
    /// through the split between bakery's options and the driver's.
    ///
    /// And `accept_data_loss`: the shared checks every backend passes.
    PostgresConfig: "postgres://u@h/db",
    refused: REFUSED,
    longest: &[("postgres://u@h/db?table={}", 63)],
    built: |accept| {
        let config = PostgresConfig::from_uri("postgres://u@h/db").unwrap();
        config.with_accept_data_loss(accept)
    },
}

#[test]
fn builder() {
    let config = PostgresConfig::from_uri("postgres://u@h/db")
        .unwrap()
        .with_table(TableName::parse("other").unwrap())
        .with_pool_size(2)
        .with_timeout(Some(Duration::from_secs(1)))
        .with_connect_timeout(Duration::from_secs(7))
        .with_ssl_mode(SslMode::VerifyCa)
        .with_root_cert(Some(RootCert::System));
    assert!(config.validate().is_ok());
    assert_eq!(config.table().name(), "other");
    assert_eq!(config.connect_timeout(), Duration::from_secs(7));
    for bad in [
        config.clone().with_pool_size(0),
        config.clone().with_pool_size(1025),
        config.clone().with_root_cert(None),
        config
            .clone()
            .with_ssl_mode(SslMode::Disable)
            .with_root_cert(Some(RootCert::System)),
        config
            .clone()
            .with_timeout(Some(Duration::from_secs(u64::from(u32::MAX)))),
    ] {
        assert_eq!(bad.validate().unwrap_err().kind(), ErrorKind::Config);
    }
    let unbounded = config.with_timeout(Some(Duration::ZERO));
    assert_eq!(unbounded.timeout(), None);
    // No bound is not a URI option value: it is shown as no option.
    assert!(!unbounded.to_string().contains("timeout_ms"), "{unbounded}");
}

#[test]
fn an_unknown_option_lists_bakery_options() {
    bakery_testkit::options::refused_naming(
        "postgres",
        "postgres://u@h/db?colour=blue",
        &[
            "colour",
            "(known: ",
            "table",
            "sslrootcert",
            "accept_data_loss",
            "keepalives_idle",
        ],
        PostgresConfig::from_uri,
    );
}

#[test]
fn a_schema_and_a_table_of_63_bytes_each() {
    let longest = format!("postgres://u@h/db?table=s{0}.t{0}", "x".repeat(62));
    assert!(PostgresConfig::from_uri(&longest).is_ok());
}

#[test]
fn password_is_redacted_in_debug_and_display() {
    let uris = [
        format!("postgres://app:{SECRET}@db/x"),
        format!("postgresql://app:{SECRET}@db:5433,db2/x?table=t"),
        format!("postgres://app@db/x?password={SECRET}"),
        format!("postgres://db/x?user=app&password={SECRET}&sslmode=require"),
    ];
    let parse = PostgresConfig::from_uri;
    for config in bakery_testkit::options::secret_redacted(SECRET, &[":***@"], &uris, parse) {
        assert!(config.has_password(), "{config}");
    }
}

#[test]
fn password_is_never_in_errors() {
    // Every kind of bad URI, each with a password in it.
    let uris = [
        format!("postgres://app:{SECRET}@db/x?colour=blue"),
        format!("postgres://app:{SECRET}@db/x?port=nope"),
        format!("postgres://app:{SECRET}@db/x?table=bad-name"),
        format!("postgres://app:{SECRET}@db/x?pool_size=0"),
        format!("postgres://app:{SECRET}@db/x?sslmode=verify-full"),
        format!("postgres://app:{SECRET}@/x"),
        format!("postgres://:{SECRET}@db/x"),
        format!("postgres://db/x?password={SECRET}"),
        format!("postgres://db/x?user=u&password={SECRET}&timeout_ms=x"),
        format!("postgres://app:{SECRET}@db/x?table=%zz"),
        format!("postgres://app:{SECRET}?table=x@db/x?table=y&table=z"),
        format!("mysql://app:{SECRET}@db/x"),
    ];
    bakery_testkit::options::secret_never_shown(SECRET, &uris, PostgresConfig::from_uri);
}

#[test]
fn a_question_mark_in_the_password_is_not_an_option() {
    let config = PostgresConfig::from_uri(&format!("postgres://app:a?b{SECRET}@db/x?table=t"))
        .expect("`?` before `@` belongs to the password");
    assert_eq!(config.table().name(), "t");
    assert_eq!(config.dbname(), Some("x"));
    assert!(!config.to_string().contains(SECRET));
}

#[test]
fn table_names() {
    let t = TableName::parse("Rows").unwrap();
    assert_eq!(t.quoted(), "\"Rows\"");
    assert_eq!(t.to_string(), "Rows");
    let t = TableName::parse("_s.order").unwrap();
    assert_eq!(t.quoted(), "\"_s\".\"order\"");
    let invalid = [
        "",
        ".",
        "a.",
        ".a",
        "a b",
        "a\"b",
        "ü",
        "a.b.c",
        "pg_toast.t",
    ];
    bakery_testkit::options::invalid(invalid, |bad| TableName::parse(bad));
}
