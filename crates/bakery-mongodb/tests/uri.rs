//! URI parsing, defaults, validation and redaction: no server needed.

use std::time::Duration;

use bakery_core::ErrorKind;
use bakery_mongodb::mongodb::options::{Acknowledgment, ReadConcern, ReadConcernLevel};
use bakery_mongodb::{CasStrategy, MongoConfig, MongoStore, DEFAULT_COLLECTION, SCHEMES};

#[test]
fn schemes() {
    assert!(SCHEMES.contains(&"mongodb"));
    assert_eq!(
        SCHEMES.contains(&"mongodb+srv"),
        cfg!(feature = "srv"),
        "mongodb+srv is answered exactly when the `srv` feature is on"
    );
}

#[test]
fn defaults() {
    let config = MongoConfig::from_uri("mongodb://127.0.0.1:17017/bakery").unwrap();
    assert_eq!(config.cas(), None, "chosen at open by the server");
    assert!(!config.allow_unproven_update());
    assert!(!config.accept_data_loss());
    assert_eq!(config.database(), "bakery");
    assert_eq!(config.collection(), DEFAULT_COLLECTION);
    assert_eq!(config.timeout(), Duration::from_secs(10));
    assert!(
        !config.retry_writes(),
        "retryWrites is off unless asked for"
    );
    assert_eq!(config.write_concern().w, Some(Acknowledgment::Majority));
    assert_eq!(
        config.write_concern().journal,
        Some(true),
        "writes wait for the journal unless the URI says otherwise"
    );
    assert_eq!(config.read_concern(), ReadConcern::majority());
    assert_eq!(config.username(), None);
    assert!(!config.has_password());
    assert_eq!(
        config.to_string(),
        "mongodb://127.0.0.1:17017/bakery?cas=auto&collection=bakery_rows&timeout_ms=10000"
    );

    // No database in the URI: bakery's own.
    for uri in ["mongodb://h", "mongodb://h/", "mongodb://h:1/?w=1"] {
        let config = MongoConfig::from_uri(uri).unwrap();
        assert_eq!(config.database(), "bakery", "{uri}");
    }
}

#[test]
fn bakery_options_and_driver_options() {
    let config = MongoConfig::from_uri(
        "MongoDB://app:pw@a:1,b:2/orders?replicaSet=rs0&cas=insert&collection=seq.rows&timeout_ms=250\
         &w=2&wtimeoutMS=500&readConcernLevel=linearizable&retryWrites=true&authSource=admin&directConnection=false",
    )
    .unwrap();
    assert_eq!(config.cas(), Some(CasStrategy::Insert));
    assert_eq!(config.collection(), "seq.rows");
    assert_eq!(config.database(), "orders");
    assert_eq!(config.timeout(), Duration::from_millis(250));
    assert_eq!(config.username(), Some("app"));
    assert!(config.has_password());
    assert!(config.retry_writes(), "the user's retryWrites wins");
    let w = config.write_concern();
    assert_eq!(w.w, Some(Acknowledgment::Nodes(2)));
    assert_eq!(w.w_timeout, Some(Duration::from_millis(500)));
    assert_eq!(config.read_concern().level, ReadConcernLevel::Linearizable);
    assert_eq!(
        config.to_string(),
        "mongodb://app:***@a:1,b:2/orders?cas=insert&collection=seq.rows&timeout_ms=250\
         &replicaSet=rs0&w=2&wtimeoutMS=500&readConcernLevel=linearizable&retryWrites=true\
         &authSource=admin&directConnection=false"
    );

    // Only `wtimeoutMS`: `w` still defaults to majority.
    let config = MongoConfig::from_uri("mongodb://h/db?wtimeoutMS=100").unwrap();
    assert_eq!(config.write_concern().w, Some(Acknowledgment::Majority));

    let config = MongoConfig::from_uri("mongodb://h/db")
        .unwrap()
        .with_cas(CasStrategy::Insert)
        .with_collection("other")
        .with_database("elsewhere")
        .with_timeout(Duration::from_secs(2));
    assert!(config.validate().is_ok());
    assert_eq!(
        config.to_string(),
        "mongodb://h/elsewhere?cas=insert&collection=other&timeout_ms=2000"
    );
}

#[test]
fn strategies_parse_and_print() {
    assert_eq!(CasStrategy::Insert.to_string(), "insert");
    assert_eq!(CasStrategy::Update.as_str(), "update");
    for (uri, cas) in [
        ("mongodb://h/db?cas=auto", None),
        ("mongodb://h/db?cas=update", Some(CasStrategy::Update)),
        ("mongodb://h/db?cas=insert", Some(CasStrategy::Insert)),
    ] {
        assert_eq!(MongoConfig::from_uri(uri).unwrap().cas(), cas, "{uri}");
    }
    // Any case, as every named value of every backend's options.
    assert_eq!(
        MongoConfig::from_uri("mongodb://h/db?cas=AUTO")
            .unwrap()
            .cas(),
        None
    );
    assert_eq!(
        MongoConfig::from_uri("mongodb://h/db?cas=Insert")
            .unwrap()
            .cas(),
        Some(CasStrategy::Insert)
    );
    for value in ["lua", "auto2", ""] {
        let err = MongoConfig::from_uri(&format!("mongodb://h/db?cas={value}")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.message().contains("`auto`, `update` or `insert`"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn connect_rejects_a_bad_uri_before_the_network() {
    let connect = MongoStore::connect("mongodb://h/db?cas=maybe");
    bakery_testkit::options::refused_before_network("mongodb", connect).await;
}

#[test]
fn opt_ins_parse_print_and_refuse_bad_values() {
    let config = MongoConfig::from_uri(
        "mongodb://h/db?cas=update&allow_unproven_update=true&accept_data_loss=TRUE",
    )
    .unwrap();
    assert!(config.allow_unproven_update());
    assert!(config.accept_data_loss());
    assert_eq!(
        config.to_string(),
        "mongodb://h/db?cas=update&collection=bakery_rows&timeout_ms=10000\
         &allow_unproven_update=true&accept_data_loss=true"
    );
    let config = MongoConfig::from_uri("mongodb://h/db?allow_unproven_update=false").unwrap();
    assert!(!config.allow_unproven_update());
    let config = MongoConfig::from_uri("mongodb://h/db")
        .unwrap()
        .with_allow_unproven_update(true)
        .with_accept_data_loss(true)
        .with_cas(None);
    assert!(config.allow_unproven_update() && config.accept_data_loss());
    assert_eq!(config.cas(), None);

    let uri = "mongodb://h/db?allow_unproven_update=yes";
    let err = MongoConfig::from_uri(uri).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{uri}");
    assert!(
        err.message().contains("`allow_unproven_update`"),
        "{uri}: {err}"
    );
}

#[test]
fn write_concerns_that_lose_acknowledged_writes_are_hazards() {
    use bakery_mongodb::mongodb::bson::doc;
    use bakery_mongodb::ServerInfo;

    let standalone = ServerInfo::identify(&doc! {}, &doc! {}, &["h"]);
    let three = ServerInfo::identify(
        &doc! {},
        &doc! {"setName": "rs0", "hosts": ["a:1", "b:1", "c:1"]},
        &["a"],
    );
    let hazards = |uri: &str, server: &ServerInfo| {
        MongoConfig::from_uri(uri)
            .unwrap()
            .durability_hazards(server)
            .into_iter()
            .map(|h| h.setting)
            .collect::<Vec<_>>()
    };
    assert!(hazards("mongodb://h/db", &standalone).is_empty());
    assert!(hazards("mongodb://h/db", &three).is_empty());
    assert_eq!(
        hazards("mongodb://h/db?journal=false", &standalone),
        ["journal"]
    );
    // w=1 is w=majority on a standalone server, not on a replica set.
    assert!(hazards("mongodb://h/db?w=1", &standalone).is_empty());
    assert_eq!(hazards("mongodb://h/db?w=1", &three), ["w"]);
    assert!(
        hazards("mongodb://h/db?w=2", &three).is_empty(),
        "2 of 3 is a majority"
    );
    // What a live store's re-check sees after the set grew to 5 members.
    let five = ServerInfo::identify(
        &doc! {},
        &doc! {"setName": "rs0", "hosts": ["a:1", "b:1", "c:1"], "passives": ["d:1", "e:1"]},
        &["a"],
    );
    assert_eq!(hazards("mongodb://h/db?w=2", &five), ["w"], "2 of 5 is not");
    assert!(hazards("mongodb://h/db", &five).is_empty(), "majority is");
    assert_eq!(
        hazards("mongodb://h/db?w=1&journal=false", &three),
        ["journal", "w"]
    );
}

#[test]
fn builder_is_validated() {
    let builder = MongoConfig::from_uri("mongodb://h/db").unwrap();
    bakery_testkit::options::invalid(
        [
            builder.clone().with_collection("bad name"),
            builder.with_timeout(Duration::ZERO),
        ],
        MongoConfig::validate,
    );
}

#[test]
fn passwords_are_never_printed() {
    let secret = "hunter2-s3cret";
    let config =
        MongoConfig::from_uri(&format!("mongodb://app:{secret}@h:1/db?cas=insert")).unwrap();
    let debug = format!("{config:?}");
    let display = config.to_string();
    assert!(!debug.contains(secret), "{debug}");
    assert!(!display.contains(secret), "{display}");
    assert_eq!(
        display,
        "mongodb://app:***@h:1/db?cas=insert&collection=bakery_rows&timeout_ms=10000"
    );
    assert_eq!(debug, format!("MongoConfig({display})"));

    // Secret-bearing driver options are redacted too.
    let config = MongoConfig::from_uri(
        "mongodb://u@h/db?authMechanism=MONGODB-OIDC&authMechanismProperties=ENVIRONMENT:azure,TOKEN_RESOURCE:tok3n",
    )
    .unwrap();
    assert!(!config.to_string().contains("tok3n"), "{config}");
    assert!(config.to_string().contains("authMechanismProperties=***"));

    // Nor in the errors of bad URIs that carry one, percent-encoded or not.
    let uris = [
        format!("mongodb://u:{secret}@h/db?colour=blue"),
        format!("mongodb://u:{secret}@h/db?cas=maybe"),
        format!("mongodb://u:{secret}@h:99999/db"),
        format!("mongodb://u:{secret}@/db"),
        format!("mongodb://u:{secret}%zz@h/db"),
        format!("mongodb://u:{secret}%40x@h/d.b"),
        format!("mysql://u:{secret}@h"),
        format!("mongodb://u:{secret}@h/db#frag"),
        format!("mongodb://u:{secret}:more@h/db"),
    ];
    bakery_testkit::options::secret_never_shown(secret, &uris, MongoConfig::from_uri);
}

#[cfg(not(feature = "srv"))]
#[test]
fn srv_needs_the_feature() {
    let err = MongoConfig::from_uri("mongodb+srv://u:pw@cluster.example/db").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.message().contains("`srv` feature"), "{err}");
}

#[cfg(feature = "srv")]
#[test]
fn srv_parses_without_the_network() {
    let config = MongoConfig::from_uri("mongodb+srv://u:pw@cluster.example/db?cas=insert").unwrap();
    assert_eq!(
        config.to_string(),
        "mongodb+srv://u:***@cluster.example/db?cas=insert&collection=bakery_rows&timeout_ms=10000"
    );
}

/// Bad URIs: config errors naming the problem.
const REFUSED: &[(&str, &str)] = &[
    ("postgres://h/db", "not a mongodb URI"),
    ("mongodb:h", "not a mongodb URI"),
    ("mongo://h", "not a mongodb URI"),
    ("mongodb://", "no host"),
    ("mongodb:///db", "no host"),
    ("mongodb://h/db?cas=lua", "`cas`"),
    ("mongodb://h/db?cas=", "`cas`"),
    ("mongodb://h/db?collection=", "`collection`"),
    ("mongodb://h/db?collection=system.users", "`collection`"),
    ("mongodb://h/db?collection=a$b", "`collection`"),
    ("mongodb://h/db?collection=.x", "`collection`"),
    ("mongodb://h/db?collection=a%20b", "`collection`"),
    ("mongodb://h/db?w=0", "w=0"),
    ("mongodb://h/db?readPreference=secondary", "readPreference"),
    ("mongodb://h/db#frag", "fragment"),
    ("mongodb://h/d.b", "database"),
    ("mongodb://h:99999/db", "mongodb URI"),
];

bakery_testkit::shared_option_rules! {
    /// The option rules every backend shares: unknown, repeated and
    /// valueless options, escapes, and the bounds of `timeout_ms`; and
    /// `accept_data_loss`: the shared checks every backend passes.
    MongoConfig: "mongodb://h/db?w=majority",
    refused: REFUSED,
    longest: &[("mongodb://h/db?collection={}", 120)],
}

/// An option that neither bakery nor the driver knows is refused as
/// unknown, naming bakery's options and the driver's.
#[test]
fn unknown_options_name_both_sets() {
    let err = MongoConfig::from_uri("mongodb://h/db?replicaset=rs0&colour=blue").unwrap_err();
    assert!(
        err.message().starts_with(
            "unknown mongodb URI option `colour` (known: cas, collection, timeout_ms, allow_unproven_update, accept_data_loss, durability_recheck_ms, and the driver's)"
        ),
        "{err}"
    );
}
