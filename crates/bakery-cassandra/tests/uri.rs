//! URI parsing and configuration checks: no server needed.

use std::time::Duration;

use bakery_cassandra::{
    CassandraConfig, CassandraStore, Consistency, Replication, Serial, DEFAULT_KEYSPACE,
    DEFAULT_PORT, DEFAULT_TABLE, DEFAULT_TIMEOUT, SCHEMES,
};

#[test]
fn schemes() {
    assert_eq!(SCHEMES, ["cassandra", "scylla"]);
}

#[test]
fn defaults() {
    let config = CassandraConfig::from_uri("cassandra://127.0.0.1:19042/bakery").unwrap();
    assert_eq!(config.scheme(), "cassandra");
    assert_eq!(config.hosts(), ["127.0.0.1:19042"]);
    assert_eq!(config.keyspace(), DEFAULT_KEYSPACE);
    assert_eq!(config.table(), DEFAULT_TABLE);
    assert_eq!(config.table(), "bakery_rows");
    assert_eq!(config.replication(), &Replication::Simple(1));
    assert_eq!(config.serial(), Serial::Serial);
    assert_eq!(config.consistency(), Consistency::Quorum);
    assert_eq!(config.timeout(), DEFAULT_TIMEOUT);
    assert_eq!(config.timeout(), Duration::from_millis(10_000));
    assert_eq!(config.user(), None);
    assert!(!config.has_password());
    assert!(!config.accept_data_loss());
    assert_eq!(config, CassandraConfig::new(["127.0.0.1:19042"]));
    assert!(config.validate().is_ok());
    assert_eq!(DEFAULT_PORT, 9042);
}

#[test]
fn good_uris() {
    let cases: &[(&str, &[&str], &str)] = &[
        ("cassandra://localhost", &["localhost:9042"], "bakery"),
        ("cassandra://localhost/", &["localhost:9042"], "bakery"),
        ("cassandra://localhost/ks", &["localhost:9042"], "ks"),
        ("CASSANDRA://h:1/ks", &["h:1"], "ks"),
        ("scylla://h/ks?", &["h:9042"], "ks"),
        ("cassandra://h?table=t", &["h:9042"], "bakery"),
        (
            "cassandra://a:1,b:2,c/Orders_2",
            &["a:1", "b:2", "c:9042"],
            "Orders_2",
        ),
        ("cassandra://[::1]:19042/ks", &["[::1]:19042"], "ks"),
        ("cassandra://[::1]/ks", &["[::1]:9042"], "ks"),
        (
            "cassandra://[fe80::1],10.0.0.1:2/ks",
            &["[fe80::1]:9042", "10.0.0.1:2"],
            "ks",
        ),
        (
            "cassandra://node-0.cass_svc.local:9042/ks",
            &["node-0.cass_svc.local:9042"],
            "ks",
        ),
        ("cassandra://h/ks?table=t&", &["h:9042"], "ks"),
    ];
    for (uri, hosts, keyspace) in cases {
        let config = CassandraConfig::from_uri(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert_eq!(config.hosts(), *hosts, "{uri}");
        assert_eq!(config.keyspace(), *keyspace, "{uri}");
    }
    assert_eq!(
        CassandraConfig::from_uri("scylla://h/ks").unwrap().scheme(),
        "scylla"
    );
}

#[test]
fn options() {
    let config = CassandraConfig::from_uri(
        "cassandra://h/ks?table=Locks_1&replication=rf=3&serial=LOCAL_SERIAL&consistency=local_quorum&timeout_ms=250",
    )
    .unwrap();
    assert_eq!(config.replication(), &Replication::Simple(3));
    assert_eq!(config.table(), "Locks_1");
    assert_eq!(config.serial(), Serial::LocalSerial);
    assert_eq!(config.consistency(), Consistency::LocalQuorum);
    assert_eq!(config.timeout(), Duration::from_millis(250));

    let config =
        CassandraConfig::from_uri("cassandra://h/ks?replication=dc%3Ddc1%3A3%2Cdc-2.east%3A2")
            .unwrap();
    assert_eq!(
        config.replication(),
        &Replication::NetworkTopology(vec![("dc1".into(), 3), ("dc-2.east".into(), 2)])
    );
    let config = CassandraConfig::from_uri("cassandra://h/ks?replication=dc=dc1:1").unwrap();
    assert_eq!(
        config.replication(),
        &Replication::NetworkTopology(vec![("dc1".into(), 1)])
    );
    for (name, level) in [
        ("any", Consistency::Any),
        ("one", Consistency::One),
        ("TWO", Consistency::Two),
        ("three", Consistency::Three),
        ("quorum", Consistency::Quorum),
        ("all", Consistency::All),
        ("local_quorum", Consistency::LocalQuorum),
        ("each_quorum", Consistency::EachQuorum),
        ("local_one", Consistency::LocalOne),
    ] {
        let config =
            CassandraConfig::from_uri(&format!("cassandra://h/ks?consistency={name}")).unwrap();
        assert_eq!(config.consistency(), level, "{name}");
        assert_eq!(level.as_str(), name.to_ascii_lowercase());
    }
    let longest = format!("cassandra://h/k{0}?table=t{0}", "x".repeat(47));
    let config = CassandraConfig::from_uri(&longest).unwrap();
    assert_eq!(config.keyspace().len(), 48);
    assert_eq!(config.table().len(), 48);
}

/// Bad URIs: config errors naming the problem.
const REFUSED: &[(&str, &str)] = &[
    ("etcd://h:2379", "not a cassandra URI"),
    ("cassandra:h:9042", "not a cassandra URI"),
    ("cassandra", "not a cassandra URI"),
    ("cassandra://", "no host"),
    ("cassandra:///ks", "no host"),
    ("cassandra://h:0/ks", "port"),
    ("cassandra://h:65536/ks", "port"),
    ("cassandra://h:-1/ks", "port"),
    ("cassandra://h:/ks", "port"),
    ("cassandra://a,,b/ks", "no host"),
    ("cassandra://h,/ks", "no host"),
    ("cassandra://:9042/ks", "no host"),
    ("cassandra://h%20x/ks", "host"),
    ("cassandra://[::1/ks", "`]`"),
    ("cassandra://[zz]:1/ks", "IPv6"),
    ("cassandra://[::1]x/ks", "after `]`"),
    ("cassandra://h/ks/more", "one keyspace"),
    ("cassandra://h/bad-name", "`keyspace`"),
    ("cassandra://h/1abc", "`keyspace`"),
    ("cassandra://h/system", "reserved"),
    ("cassandra://h/System_auth", "reserved"),
    ("cassandra://h/ks?table=", "`table`"),
    ("cassandra://h/ks?table=a.b", "`table`"),
    ("cassandra://h/ks?table=_x", "`table`"),
    ("cassandra://h/ks?table=%22x%22", "`table`"),
    ("cassandra://h/ks?replication=3", "`replication`"),
    ("cassandra://h/ks?replication=rf=0", "out of range"),
    ("cassandra://h/ks?replication=rf=101", "out of range"),
    ("cassandra://h/ks?replication=rf=x", "`replication`"),
    ("cassandra://h/ks?replication=rf=%2B3", "`replication`"),
    ("cassandra://h/ks?replication=dc=", "`replication`"),
    ("cassandra://h/ks?replication=dc=dc1", "`replication`"),
    ("cassandra://h/ks?replication=dc=dc1:0", "out of range"),
    ("cassandra://h/ks?replication=dc=d'c:1", "data center name"),
    ("cassandra://h/ks?replication=dc=a:1,a:2", "named twice"),
    ("cassandra://h/ks?serial=quorum", "`serial`"),
    ("cassandra://h/ks?consistency=serial", "`consistency`"),
    ("cassandra://h/ks?consistency=lots", "`consistency`"),
    ("cassandra://h/ks?user=alice", "without a password"),
    ("cassandra://alice@h/ks", "without a password"),
    ("cassandra://h/ks?password=x", "without a user"),
    ("cassandra://:pw@h/ks", "user name is empty"),
    ("cassandra://u:p@h/ks?user=v", "user twice"),
    ("cassandra://u:p@h/ks?password=q", "password twice"),
    ("cassandra://h/ks?table=%ff", "UTF-8"),
];

bakery_testkit::shared_option_rules! {
    /// The rules every backend's options share (unknown, twice, no value,
    /// bad escapes, duration bounds), and `accept_data_loss`: the shared
    /// checks every backend passes.
    CassandraConfig: "cassandra://h/ks?table=t",
    refused: REFUSED,
    longest: &[("cassandra://h/{}", 48), ("cassandra://h/ks?table={}", 48)],
    built: |accept| {
        CassandraConfig::new(["h"])
            .with_keyspace("ks")
            .with_table("t")
            .with_accept_data_loss(accept)
    },
}

/// `accept_data_loss` is listed among the known options.
#[test]
fn accept_data_loss_is_a_known_option() {
    let err = CassandraConfig::from_uri("cassandra://h/ks?accept_data=true").unwrap_err();
    assert!(err.message().contains("accept_data_loss"), "{err}");
}

#[test]
fn credentials_in_userinfo_or_query() {
    let a = CassandraConfig::from_uri("cassandra://alice:s3cret@h:9042/ks").unwrap();
    let b = CassandraConfig::from_uri("cassandra://h/ks?user=alice&password=s3cret").unwrap();
    let c = CassandraConfig::new(["h"])
        .with_keyspace("ks")
        .with_user("alice", "s3cret");
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!(a.user(), Some("alice"));
    assert!(a.has_password());
    let expected = CassandraConfig::new(["h"])
        .with_keyspace("ks")
        .with_user("alice", "p@ss:w/rd?");
    // Percent-encoded, in the userinfo or the query.
    for uri in [
        "cassandra://alice@h/ks?password=p%40ss%3Aw%2Frd%3F",
        "cassandra://alice:p%40ss%3Aw%2Frd%3F@h/ks",
        // Unencoded `@`, `:`, `/` and `?`: the last `@` before the options
        // ends the userinfo.
        "cassandra://alice:p@ss:w/rd?@h/ks",
    ] {
        assert_eq!(
            CassandraConfig::from_uri(uri).unwrap_or_else(|e| panic!("{uri}: {e}")),
            expected,
            "{uri}"
        );
    }
    // An `@` inside an option value is not userinfo.
    let d = CassandraConfig::from_uri("cassandra://h/ks?user=bob&password=a@b").unwrap();
    assert_eq!(
        d,
        CassandraConfig::new(["h"])
            .with_keyspace("ks")
            .with_user("bob", "a@b")
    );
}

const SECRET: &str = "hunter2secret";

#[test]
fn passwords_are_never_printed() {
    let uris = [
        format!("cassandra://alice:{SECRET}@h:9042/ks"),
        format!("scylla://h/ks?user=alice&password={SECRET}&table=t"),
    ];
    bakery_testkit::options::secret_redacted(
        SECRET,
        &["***", "alice"],
        &uris,
        CassandraConfig::from_uri,
    );
    let config = CassandraConfig::from_uri("cassandra://alice:pw@h:1/ks?timeout_ms=7").unwrap();
    assert_eq!(
        config.to_string(),
        "cassandra://alice:***@h:1/ks?table=bakery_rows&replication=rf=1&serial=serial&consistency=quorum&timeout_ms=7"
    );
    // Display is a URI that parses back (to the same config, less the password).
    let plain = CassandraConfig::from_uri(
        "scylla://a:1,[::1]:2/ks?table=t&replication=dc=x:2,y:3&serial=local_serial&consistency=one&timeout_ms=9",
    )
    .unwrap();
    assert_eq!(
        CassandraConfig::from_uri(&plain.to_string()).unwrap(),
        plain
    );
}

#[test]
fn passwords_are_never_in_errors() {
    let uris = [
        format!("cassandra://alice:{SECRET}@h/ks?colour=blue"),
        format!("cassandra://alice:{SECRET}@h/ks?password=x"),
        format!("cassandra://alice:{SECRET}@h:notaport/ks"),
        format!("cassandra://alice:{SECRET}@/ks"),
        format!("cassandra://alice:{SECRET}"),
        format!("cassandra://alice:{SECRET}/ks"),
        format!("cassandra://alice:%zz{SECRET}@h/ks"),
        format!("cassandra://h/ks?user=alice&password=%zz{SECRET}"),
        format!("cassandra://h/ks?password={SECRET}"),
        format!("cassandra://alice:{SECRET}@h/bad-keyspace"),
        format!("cassandra://alice:{SECRET}@h/ks?timeout_ms=0"),
        format!("mysql://alice:{SECRET}@h/ks"),
    ];
    bakery_testkit::options::secret_never_shown(SECRET, &uris, CassandraConfig::from_uri);
}

#[test]
fn builder_is_validated() {
    assert!(CassandraConfig::new(["h"]).validate().is_ok());
    assert!(CassandraConfig::new(["h"])
        .with_replication(Replication::NetworkTopology(vec![("dc1".into(), 3)]))
        .with_serial(Serial::LocalSerial)
        .with_consistency(Consistency::LocalQuorum)
        .validate()
        .is_ok());
    let invalid = [
        CassandraConfig::new(Vec::<String>::new()),
        CassandraConfig::new(["h:x"]),
        CassandraConfig::new(["h"]).with_keyspace(""),
        CassandraConfig::new(["h"]).with_keyspace("system_schema"),
        CassandraConfig::new(["h"]).with_table("a b"),
        CassandraConfig::new(["h"]).with_replication(Replication::Simple(0)),
        CassandraConfig::new(["h"]).with_replication(Replication::NetworkTopology(vec![])),
        CassandraConfig::new(["h"]).with_timeout(Duration::ZERO),
        CassandraConfig::new(["h"]).with_timeout(Duration::from_secs(7200)),
        CassandraConfig::new(["h"]).with_user("", "pw"),
    ];
    bakery_testkit::options::invalid(invalid, CassandraConfig::validate);
}

#[tokio::test]
async fn connect_rejects_bad_uris_before_any_network() {
    use bakery_testkit::options::refused_before_network;
    refused_before_network(
        "cassandra",
        CassandraStore::connect("cassandra://h/ks?table=no-good"),
    )
    .await;
    let system = CassandraConfig::new(["h"]).with_keyspace("system");
    refused_before_network("cassandra", CassandraStore::open(system)).await;
}
