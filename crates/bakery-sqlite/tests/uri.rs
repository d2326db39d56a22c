//! URI parsing and the config checks: no database needed.

use std::path::PathBuf;
use std::time::Duration;

use bakery_core::ErrorKind;
use bakery_sqlite::{
    Location, SqliteConfig, Synchronous, DEFAULT_BUSY_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_TABLE,
};

fn file(path: &str) -> Location {
    Location::File(PathBuf::from(path))
}

#[test]
fn good_uris() {
    let cases: &[(&str, Location)] = &[
        ("sqlite://relative/path.db", file("relative/path.db")),
        ("sqlite:///abs/path.db", file("/abs/path.db")),
        ("sqlite:relative.db", file("relative.db")),
        ("sqlite:/abs.db", file("/abs.db")),
        ("SQLite://upper.db", file("upper.db")),
        ("sqlite::memory:", Location::Memory),
        ("sqlite://:memory:", Location::Memory),
        ("sqlite::memory:?table=t", Location::Memory),
        ("sqlite://with%20space.db", file("with space.db")),
        ("sqlite:///tmp/caf%C3%A9.db", file("/tmp/café.db")),
        ("sqlite://a.db?", file("a.db")),
        ("sqlite://a.db?create=false&", file("a.db")),
    ];
    for (uri, location) in cases {
        let config = SqliteConfig::from_uri(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert_eq!(config.location(), location, "{uri}");
    }
}

#[test]
fn defaults() {
    let config = SqliteConfig::from_uri("sqlite://a.db").unwrap();
    assert_eq!(config, SqliteConfig::new("a.db"));
    assert_eq!(config.table(), DEFAULT_TABLE);
    assert_eq!(config.busy_timeout(), DEFAULT_BUSY_TIMEOUT);
    assert!(config.create_if_missing());
    assert_eq!(config.synchronous(), Synchronous::Full);
    assert!(!config.accept_data_loss());
    assert_eq!(config.pool_size(), DEFAULT_POOL_SIZE);
    let memory = SqliteConfig::from_uri("sqlite::memory:").unwrap();
    assert_eq!(memory, SqliteConfig::memory());
    assert_eq!(memory, SqliteConfig::new(":memory:"));
    assert_eq!(memory.pool_size(), 1);
}

#[test]
fn synchronous_normal_on_a_file_needs_the_data_loss_opt_in() {
    bakery_testkit::options::refused_naming(
        "sqlite",
        "sqlite://a.db?synchronous=normal",
        &[
            "synchronous = normal",
            "power loss",
            "synchronous=full",
            "accept_data_loss=true",
        ],
        SqliteConfig::from_uri,
    );
    let builder = SqliteConfig::new("a.db").with_synchronous(Synchronous::Normal);
    assert_eq!(builder.validate().unwrap_err().kind(), ErrorKind::Config);
    assert!(builder.with_accept_data_loss(true).validate().is_ok());

    let accepted =
        SqliteConfig::from_uri("sqlite://a.db?synchronous=normal&accept_data_loss=true").unwrap();
    assert_eq!(accepted.synchronous(), Synchronous::Normal);
    assert!(accepted.accept_data_loss());
    // In memory nothing survives anyway: no opt-in needed.
    assert!(SqliteConfig::from_uri("sqlite::memory:?synchronous=normal").is_ok());
}

/// Bad URIs: config errors naming the problem.
const REFUSED: &[(&str, &str)] = &[
    ("postgres://h/db", "not a sqlite URI"),
    ("sqlite", "not a sqlite URI"),
    ("sqlite:", "empty path"),
    ("sqlite://", "empty path"),
    ("sqlite://?table=t", "empty path"),
    ("sqlite:///", "directory"),
    ("sqlite://dir/", "directory"),
    ("sqlite://a%2.db", "percent-encoding"),
    ("sqlite://a%zz.db", "percent-encoding"),
    ("sqlite://a%ff.db", "UTF-8"),
    ("sqlite://a.db?table=", "`table`"),
    ("sqlite://a.db?table=1abc", "`table`"),
    ("sqlite://a.db?table=a-b", "`table`"),
    ("sqlite://a.db?table=a;drop", "`table`"),
    ("sqlite://a.db?table=sqlite_master", "`table`"),
    ("sqlite://a.db?create=yes", "`create`"),
    ("sqlite://a.db?synchronous=off", "`synchronous`"),
    ("sqlite://a.db?pool_size=0", "`pool_size`"),
    ("sqlite://a.db?pool_size=65", "`pool_size`"),
    ("sqlite::memory:?pool_size=2", "`pool_size`"),
];

/// The rules every backend's options share (`busy_timeout_ms=0`, which
/// meant "do not wait for a lock", is refused like every other duration of
/// 0), and `accept_data_loss`: the shared checks every backend passes (with
/// `synchronous=normal`, the setting it unlocks).
#[test]
fn shared_option_rules() {
    bakery_testkit::options::Shared {
        backend: "sqlite",
        base: "sqlite://a.db",
        durations: &["busy_timeout_ms"],
        parse: SqliteConfig::from_uri,
        accept_data_loss: Some(SqliteConfig::accept_data_loss),
        shown: None,
        built: None,
        refused: REFUSED,
        longest: &[("sqlite://a.db?table={}", 63)],
    }
    .check();
}

#[test]
fn options() {
    let config = SqliteConfig::from_uri(
        "sqlite://a.db?table=My_Rows2&busy_timeout_ms=1&create=false&synchronous=FULL&pool_size=2",
    )
    .unwrap();
    assert!(!config.create_if_missing());
    assert_eq!(config.table(), "My_Rows2");
    assert_eq!(config.busy_timeout(), Duration::from_millis(1));
    assert_eq!(config.synchronous(), Synchronous::Full);
    assert_eq!(config.pool_size(), 2);
    let config =
        SqliteConfig::from_uri("sqlite://a.db?synchronous=extra&table=_x&create=TRUE").unwrap();
    assert_eq!(config.synchronous(), Synchronous::Extra);
    assert_eq!(config.table(), "_x");
    assert!(config.create_if_missing());
    let config =
        SqliteConfig::from_uri("sqlite://a.db?synchronous=Normal&accept_data_loss=true").unwrap();
    assert_eq!(config.synchronous(), Synchronous::Normal);
    assert_eq!(
        SqliteConfig::from_uri("sqlite::memory:?pool_size=1")
            .unwrap()
            .pool_size(),
        1
    );
}

#[test]
fn builder_is_validated() {
    assert!(SqliteConfig::new("a.db").validate().is_ok());
    let invalid = [
        SqliteConfig::new("a.db").with_table("bad name"),
        SqliteConfig::new("a.db").with_pool_size(0),
        SqliteConfig::new("a.db").with_busy_timeout(Duration::from_secs(u64::MAX)),
        SqliteConfig::new(""),
        SqliteConfig::memory().with_pool_size(2),
    ];
    bakery_testkit::options::invalid(invalid, SqliteConfig::validate);
}
