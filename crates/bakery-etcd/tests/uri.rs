//! URI parsing and configuration checks: no server needed.

use std::time::Duration;

use bakery_etcd::{EtcdConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_TIMEOUT, SCHEMES};

#[test]
fn schemes() {
    assert_eq!(SCHEMES, ["etcd"]);
}

#[test]
fn defaults() {
    let config = EtcdConfig::from_uri("etcd://127.0.0.1:2379").unwrap();
    assert_eq!(config.endpoints(), ["127.0.0.1:2379"]);
    assert_eq!(config.prefix(), DEFAULT_PREFIX);
    assert_eq!(config.prefix(), "bakery/");
    assert_eq!(config.timeout(), DEFAULT_TIMEOUT);
    assert_eq!(config.connect_timeout(), DEFAULT_CONNECT_TIMEOUT);
    assert_eq!(config.user(), None);
    assert!(!config.has_password());
    assert_eq!(config, EtcdConfig::new(["127.0.0.1:2379"]));
    assert!(config.validate().is_ok());
}

#[tokio::test]
async fn connect_rejects_bad_uris_before_any_network() {
    let connect = bakery_etcd::EtcdStore::connect("etcd://h?prefix=nope");
    bakery_testkit::options::refused_before_network("etcd", connect).await;
}

#[test]
fn good_uris() {
    let cases: &[(&str, &[&str])] = &[
        ("etcd://localhost", &["localhost:2379"]),
        ("etcd://localhost/", &["localhost:2379"]),
        ("ETCD://h:1", &["h:1"]),
        ("etcd://h:2379/?", &["h:2379"]),
        ("etcd://a:1,b:2,c", &["a:1", "b:2", "c:2379"]),
        ("etcd://[::1]:12379", &["[::1]:12379"]),
        ("etcd://[::1]", &["[::1]:2379"]),
        (
            "etcd://[fe80::1],10.0.0.1:2",
            &["[fe80::1]:2379", "10.0.0.1:2"],
        ),
        (
            "etcd://etcd-0.etcd_svc.local:2379",
            &["etcd-0.etcd_svc.local:2379"],
        ),
        ("etcd://h:2379?prefix=x/&", &["h:2379"]),
    ];
    for (uri, endpoints) in cases {
        let config = EtcdConfig::from_uri(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert_eq!(config.endpoints(), *endpoints, "{uri}");
    }
}

#[test]
fn options() {
    let config = EtcdConfig::from_uri(
        "etcd://h:2379/?prefix=%2Fapps%2Fbakery%2F&timeout_ms=250&connect_timeout_ms=100",
    )
    .unwrap();
    assert_eq!(config.prefix(), "/apps/bakery/");
    assert_eq!(config.timeout(), Duration::from_millis(250));
    assert_eq!(config.connect_timeout(), Duration::from_millis(100));
    let config = EtcdConfig::from_uri("etcd://h?prefix=a-b_c.d:e@f+g=h/i/").unwrap();
    assert_eq!(config.prefix(), "a-b_c.d:e@f+g=h/i/");
    let longest = format!("etcd://h?prefix={}/", "p".repeat(127));
    assert_eq!(EtcdConfig::from_uri(&longest).unwrap().prefix().len(), 128);
}

/// Bad URIs: config errors naming the problem.
const REFUSED: &[(&str, &str)] = &[
    ("redis://h:6379", "not an etcd URI"),
    ("etcd:h:2379", "not an etcd URI"),
    ("etcd", "not an etcd URI"),
    ("etcds://h:2379", "TLS"),
    ("etcd://", "no host"),
    ("etcd:///?prefix=x/", "no host"),
    ("etcd://h:2379/db", "path"),
    ("etcd://h:2379//", "path"),
    ("etcd://h:0", "port"),
    ("etcd://h:65536", "port"),
    ("etcd://h:-1", "port"),
    ("etcd://h:", "port"),
    ("etcd://a,,b", "no host"),
    ("etcd://h,", "no host"),
    ("etcd://:2379", "no host"),
    ("etcd://h%20x:1", "host"),
    ("etcd://[::1", "`]`"),
    ("etcd://[zz]:1", "IPv6"),
    ("etcd://[::1]x", "after `]`"),
    ("etcd://h?prefix=", "`prefix`"),
    ("etcd://h?prefix=bakery", "end with `/`"),
    ("etcd://h?prefix=/", "empty `/` segment"),
    ("etcd://h?prefix=a//b/", "empty `/` segment"),
    ("etcd://h?prefix=a%20b/", "contains"),
    ("etcd://h?prefix=caf%C3%A9/", "contains"),
    ("etcd://h?user=alice", "without a password"),
    ("etcd://alice@h", "without a password"),
    ("etcd://h?password=x", "without a user"),
    ("etcd://:pw@h", "user name is empty"),
    ("etcd://u:p@h?user=v", "user twice"),
    ("etcd://u:p@h?password=q", "password twice"),
    ("etcd://h?prefix=%ff/", "UTF-8"),
];

/// The rules every backend's options share (unknown, twice, no value, bad
/// escapes, duration bounds), on both duration options.
#[test]
fn shared_option_rules() {
    bakery_testkit::options::Shared {
        backend: "etcd",
        base: "etcd://h:2379/?prefix=p/",
        durations: &["timeout_ms", "connect_timeout_ms"],
        parse: EtcdConfig::from_uri,
        accept_data_loss: None,
        shown: Some(EtcdConfig::to_string),
        built: None,
        refused: REFUSED,
        longest: &[("etcd://h?prefix={}/", 127)],
    }
    .check();
}

#[test]
fn credentials_in_userinfo_or_query() {
    let a = EtcdConfig::from_uri("etcd://alice:s3cret@h:2379").unwrap();
    let b = EtcdConfig::from_uri("etcd://h:2379/?user=alice&password=s3cret").unwrap();
    let c = EtcdConfig::new(["h:2379"]).with_user("alice", "s3cret");
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!(a.user(), Some("alice"));
    assert!(a.has_password());
    // Mixed, and percent-encoded (an `@`, `:` and `/` in the password).
    let d = EtcdConfig::from_uri("etcd://alice@h:2379?password=p%40ss%3Aw%2Frd").unwrap();
    assert_eq!(d, EtcdConfig::new(["h"]).with_user("alice", "p@ss:w/rd"));
    let e = EtcdConfig::from_uri("etcd://al%20ice:p%40ss:w%2Frd@h").unwrap();
    assert_eq!(e, EtcdConfig::new(["h"]).with_user("al ice", "p@ss:w/rd"));
    // An unencoded `@` in the password: the last `@` ends the userinfo.
    let f = EtcdConfig::from_uri("etcd://alice:p@ss@h").unwrap();
    assert_eq!(f, EtcdConfig::new(["h"]).with_user("alice", "p@ss"));
}

#[test]
fn passwords_are_never_printed() {
    bakery_testkit::options::secret_redacted(
        "hunter2secret",
        &["***", "alice"],
        &[
            "etcd://alice:hunter2secret@h:2379",
            "etcd://h:2379/?user=alice&password=hunter2secret",
        ],
        EtcdConfig::from_uri,
    );
    let config = EtcdConfig::from_uri("etcd://alice:pw@h:1/?prefix=p/&timeout_ms=7").unwrap();
    assert_eq!(
        config.to_string(),
        "etcd://alice:***@h:1/?prefix=p/&timeout_ms=7&connect_timeout_ms=5000"
    );
    // Display is a URI that parses back (to the same config, less the password).
    let plain = EtcdConfig::from_uri("etcd://a:1,[::1]:2/?prefix=x/y/&timeout_ms=9").unwrap();
    assert_eq!(EtcdConfig::from_uri(&plain.to_string()).unwrap(), plain);
    // Nor in errors about the rest of the URI.
    let uris = [
        "etcd://alice:hunter2secret@h:2379/?colour=blue",
        "etcd://alice:hunter2secret@h:2379/?password=x",
        "etcd://alice:hunter2secret@h:notaport",
        "etcd://alice:hunter2secret@",
        "etcd://alice:hunter2secret",
        "etcd://alice:hunter2/secret@h",
        "etcd://alice:%zzhunter2secret@h",
        "etcd://h/?user=alice&password=%zzhunter2secret",
        "etcd://h/?password=hunter2secret",
    ];
    bakery_testkit::options::secret_never_shown("hunter2", &uris, EtcdConfig::from_uri);
}

#[test]
fn builder_is_validated() {
    assert!(EtcdConfig::new(["h"]).validate().is_ok());
    let invalid = [
        EtcdConfig::new(Vec::<String>::new()),
        EtcdConfig::new(["h:x"]),
        EtcdConfig::new(["h"]).with_prefix("no-slash"),
        EtcdConfig::new(["h"]).with_prefix(""),
        EtcdConfig::new(["h"]).with_timeout(Duration::ZERO),
        EtcdConfig::new(["h"]).with_connect_timeout(Duration::from_secs(7200)),
        EtcdConfig::new(["h"]).with_user("", "pw"),
    ];
    bakery_testkit::options::invalid(invalid, EtcdConfig::validate);
}
