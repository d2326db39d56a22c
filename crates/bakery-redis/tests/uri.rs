//! URI parsing and configuration: no server needed.

use std::time::Duration;

use bakery_redis::{
    CasStrategy, RedisConfig, RedisStore, DEFAULT_POOL_SIZE, DEFAULT_PORT, DEFAULT_PREFIX,
    DEFAULT_TIMEOUT, MAX_WAIT_REPLICAS, SCHEMES,
};

#[test]
fn schemes() {
    assert!(SCHEMES.contains(&"redis"));
    assert_eq!(SCHEMES.contains(&"rediss"), cfg!(feature = "tls"));
}

#[test]
fn defaults() {
    let config = RedisConfig::from_uri("redis://localhost").unwrap();
    assert_eq!(config, RedisConfig::new("localhost"));
    assert!(!config.tls());
    assert_eq!(config.host(), "localhost");
    assert_eq!(config.port(), DEFAULT_PORT);
    assert_eq!(config.db(), 0);
    assert_eq!(config.username(), None);
    assert!(!config.has_password());
    assert_eq!(config.prefix(), DEFAULT_PREFIX);
    assert_eq!(config.cas(), CasStrategy::Script);
    assert_eq!(config.cas(), CasStrategy::default());
    assert_eq!(config.timeout(), DEFAULT_TIMEOUT);
    assert_eq!(config.pool_size(), DEFAULT_POOL_SIZE);
    assert_eq!(config.ca_file(), None);
    assert!(!config.accept_data_loss());
}

#[test]
fn good_uris() {
    /// (uri, host, port, db, user, has password)
    type Case<'a> = (&'a str, &'a str, u16, i64, Option<&'a str>, bool);
    let cases: &[Case] = &[
        (
            "redis://127.0.0.1:16379/0",
            "127.0.0.1",
            16379,
            0,
            None,
            false,
        ),
        (
            "redis://127.0.0.1:16379",
            "127.0.0.1",
            16379,
            0,
            None,
            false,
        ),
        (
            "redis://127.0.0.1:16379/",
            "127.0.0.1",
            16379,
            0,
            None,
            false,
        ),
        (
            "REDIS://Host.Example/15",
            "host.example",
            6379,
            15,
            None,
            false,
        ),
        ("redis://[::1]:7000/3", "::1", 7000, 3, None, false),
        ("redis://:pw@h", "h", 6379, 0, None, true),
        ("redis://user:pw@h:1/2", "h", 1, 2, Some("user"), true),
        (
            "redis://us%40er:p%3Aw%2F@h",
            "h",
            6379,
            0,
            Some("us@er"),
            true,
        ),
        ("redis://h?", "h", 6379, 0, None, false),
        ("redis://h/1?prefix=a:&", "h", 6379, 1, None, false),
    ];
    for (uri, host, port, db, user, password) in cases {
        let config = RedisConfig::from_uri(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert_eq!(config.host(), *host, "{uri}");
        assert_eq!(config.port(), *port, "{uri}");
        assert_eq!(config.db(), *db, "{uri}");
        assert_eq!(config.username(), *user, "{uri}");
        assert_eq!(config.has_password(), *password, "{uri}");
        assert!(!config.tls(), "{uri}");
    }
}

#[cfg(feature = "tls")]
#[test]
fn rediss_is_tls() {
    let config = RedisConfig::from_uri("rediss://:pw@cache.example:6380/0").unwrap();
    assert!(config.tls());
    assert_eq!(config.port(), 6380);
    let config = RedisConfig::from_uri("rediss://h?ca_file=/etc/ssl/my%20ca.pem").unwrap();
    assert_eq!(
        config.ca_file(),
        Some(std::path::Path::new("/etc/ssl/my ca.pem"))
    );
    assert!(config.to_string().starts_with("rediss://h:6379/0?"));
}

#[test]
fn options() {
    let config =
        RedisConfig::from_uri("redis://h/0?prefix=app%3Aseq:&cas=watch&timeout_ms=250&pool_size=3")
            .unwrap();
    assert_eq!(config.prefix(), "app:seq:");
    assert_eq!(config.cas(), CasStrategy::Watch);
    assert_eq!(config.timeout(), Duration::from_millis(250));
    assert_eq!(config.pool_size(), 3);
    let config = RedisConfig::from_uri("redis://h?cas=script&timeout_ms=1&pool_size=256").unwrap();
    assert_eq!(config.cas(), CasStrategy::Script);
    assert_eq!(config.timeout(), Duration::from_millis(1));
    assert_eq!(config.pool_size(), 256);
    let config = RedisConfig::from_uri("redis://h?prefix={tag}:x/y.z@a+b=c-d_").unwrap();
    assert_eq!(config.prefix(), "{tag}:x/y.z@a+b=c-d_");
    assert_eq!(CasStrategy::Watch.to_string(), "watch");
    // Named values are read in any case, as on every backend.
    assert_eq!(
        RedisConfig::from_uri("redis://h/0?cas=WATCH")
            .unwrap()
            .cas(),
        CasStrategy::Watch
    );
    assert_eq!(CasStrategy::Script.as_str(), "script");
}

/// Bad URIs: config errors naming the problem.
const REFUSED: &[(&str, &str)] = &[
    ("postgres://h/db", "not a redis URI"),
    ("redis", "not a redis URI"),
    ("redis:h", "not a redis URI"),
    ("redis+unix:///tmp/redis.sock", "not a redis URI"),
    ("redis://", "no host"),
    ("redis:///0", "no host"),
    ("redis://h:99999", "does not parse"),
    ("redis://h:port", "does not parse"),
    ("redis://h/db", "database number"),
    ("redis://h/-1", "database number"),
    ("redis://h/0/1", "database number"),
    ("redis://h/0#insecure", "fragment"),
    ("redis://h?password=x", "`password`"),
    ("redis://h?prefix=", "`prefix`"),
    ("redis://h?prefix=has%20space", "`prefix`"),
    ("redis://h?prefix=star*", "`prefix`"),
    ("redis://h?cas=lua", "`cas`"),
    ("redis://h?cas=", "`cas`"),
    ("redis://h?pool_size=0", "`pool_size`"),
    ("redis://h?pool_size=257", "`pool_size`"),
    ("redis://h?wait_replicas=256", "`wait_replicas`"),
    ("redis://h?wait_replicas=-1", "`wait_replicas`"),
    ("redis://h?wait_replicas=", "`wait_replicas`"),
    ("redis://h?ca_file=/x.pem", "`ca_file`"),
    ("redis://user@h", "without a password"),
];

bakery_testkit::shared_option_rules! {
    /// The option rules every backend shares: unknown, repeated and
    /// valueless options, escapes, and the bounds of `timeout_ms`; and
    /// `accept_data_loss`: the shared checks every backend passes.
    RedisConfig: "redis://h/0",
    refused: REFUSED,
    longest: &[("redis://h?prefix={}", 128)],
    built: |accept| RedisConfig::new("h").with_accept_data_loss(accept),
}

/// `wait_replicas`: unset by default (the replicas connected at open),
/// 0 to 255, shown in `Display`, the same from the URI and the builder.
#[test]
fn wait_replicas_option() {
    assert_eq!(
        RedisConfig::from_uri("redis://h").unwrap().wait_replicas(),
        None
    );
    for n in [0, 1, MAX_WAIT_REPLICAS] {
        let config = RedisConfig::from_uri(&format!("redis://h?wait_replicas={n}")).unwrap();
        assert_eq!(config.wait_replicas(), Some(n));
        assert_eq!(config, RedisConfig::new("h").with_wait_replicas(n));
        assert!(
            config.to_string().ends_with(&format!("&wait_replicas={n}")),
            "{config}"
        );
    }
    let err = RedisConfig::new("h")
        .with_wait_replicas(MAX_WAIT_REPLICAS + 1)
        .validate()
        .unwrap_err();
    assert!(err.message().contains("from 0 to 255"), "{err}");
}

#[test]
fn builder_is_validated() {
    assert!(RedisConfig::new("h").validate().is_ok());
    let invalid = [
        RedisConfig::new(""),
        RedisConfig::new("h").with_prefix(""),
        RedisConfig::new("h").with_prefix("a b"),
        RedisConfig::new("h").with_timeout(Duration::ZERO),
        RedisConfig::new("h").with_timeout(Duration::from_secs(7200)),
        RedisConfig::new("h").with_pool_size(0),
        RedisConfig::new("h").with_db(-1),
        RedisConfig::new("h").with_username("u"),
        RedisConfig::new("h").with_ca_file("/x.pem"),
    ];
    bakery_testkit::options::invalid(invalid, RedisConfig::validate);
}

#[test]
fn passwords_are_never_printed() {
    let secret = "hunter2-s3cret";
    let config = RedisConfig::from_uri(&format!("redis://app:{secret}@h:1/2?cas=watch")).unwrap();
    let debug = format!("{config:?}");
    let display = config.to_string();
    assert!(!debug.contains(secret), "{debug}");
    assert!(!display.contains(secret), "{display}");
    assert!(debug.contains("password: Some(\"***\")"), "{debug}");
    assert_eq!(
        display,
        "redis://app:***@h:1/2?prefix=bakery:&cas=watch&timeout_ms=5000&pool_size=16"
    );
    let password_only = RedisConfig::new("h").with_password(secret);
    assert!(password_only
        .to_string()
        .starts_with("redis://:***@h:6379/0"));
    assert!(!format!("{password_only:?}").contains(secret));

    // Nor in the errors of bad URIs that carry one.
    let uris = [
        format!("redis://u:{secret}@h?colour=blue"),
        format!("redis://u:{secret}@h/db"),
        format!("redis://u:{secret}@"),
        format!("redis://u:{secret}@h:99999"),
        format!("redis://u:{secret}%zz@h"),
        format!("mysql://u:{secret}@h"),
        format!("redis://u:{secret}@h#frag"),
    ];
    bakery_testkit::options::secret_never_shown(secret, &uris, RedisConfig::from_uri);
}

#[tokio::test]
async fn connect_rejects_a_bad_uri_before_the_network() {
    let connect = RedisStore::connect("redis://h?cas=maybe");
    bakery_testkit::options::refused_before_network("redis", connect).await;
}
