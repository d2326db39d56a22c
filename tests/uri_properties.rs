//! Property tests on the URIs every backend parses: any text — random, or
//! a well-formed URI with random options, values, credentials and hosts —
//! gives a configuration or a [`ErrorKind::Config`] error; never a panic.
//! A password in the URI never appears in an error message, in a
//! configuration's `Debug`, or in [`bakery::redact`]'s output.
//!
//! Parsing only: no server is contacted.

#![cfg(feature = "all-backends")]

use std::fmt::Debug;

use bakery::backends::{cassandra, dynamodb, etcd, mongodb, mysql, postgres, redis, sqlite};
use bakery::ErrorKind;
use proptest::prelude::*;

/// A password no generated text contains by chance.
const SECRET: &str = "Pw7zQx9Secret";

/// Every backend's URI parser, by scheme, giving the configuration's
/// `Debug` text.
fn parse(scheme: &str, uri: &str) -> Result<String, bakery::Error> {
    fn debug<T: Debug>(config: T) -> String {
        format!("{config:?}")
    }
    match scheme {
        "sqlite" => sqlite::SqliteConfig::from_uri(uri).map(debug),
        "postgres" | "postgresql" => postgres::PostgresConfig::from_uri(uri).map(debug),
        "redis" | "rediss" => redis::RedisConfig::from_uri(uri).map(debug),
        "etcd" => etcd::EtcdConfig::from_uri(uri).map(debug),
        "mongodb" | "mongodb+srv" => mongodb::MongoConfig::from_uri(uri).map(debug),
        "mysql" | "mariadb" => mysql::MysqlConfig::from_uri(uri).map(debug),
        "dynamodb" => dynamodb::DynamoConfig::from_uri(uri).map(debug),
        _ => cassandra::CassandraConfig::from_uri(uri).map(debug),
    }
}

const SCHEMES: &[&str] = &[
    "sqlite",
    "postgres",
    "postgresql",
    "redis",
    "rediss",
    "etcd",
    "mongodb",
    "mongodb+srv",
    "cassandra",
    "scylla",
    "mysql",
    "mariadb",
    "dynamodb",
];

/// Option names the backends know (and some they do not).
const OPTIONS: &[&str] = &[
    "timeout_ms",
    "pool_size",
    "table",
    "collection",
    "keyspace",
    "prefix",
    "cas",
    "tls",
    "user",
    "password",
    "accept_data_loss",
    "allow_unproven_update",
    "consistency",
    "serial_consistency",
    "replication",
    "dbname",
    "sslmode",
    "journal",
    "w",
    "busy_timeout_ms",
    "lease_ms",
    "endpoint",
    "nosuch",
    "",
];

fn option_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("0".to_string()),
        Just("+5".to_string()),
        Just("-1".to_string()),
        Just("5s".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("update".to_string()),
        Just("watch".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("%zz".to_string()),
        Just("a%26b%3Dc".to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        "[ -~]{0,12}",
    ]
}

prop_compose! {
    /// A URI shaped like the documented ones, with random parts.
    fn shaped_uri()(
        scheme in prop::sample::select(SCHEMES),
        user in prop::option::of("[a-z@%:]{0,6}"),
        with_secret in any::<bool>(),
        hosts in prop::collection::vec(("[a-z0-9.\\[\\]:-]{0,12}", prop::option::of(any::<u32>())), 0..3),
        path in "(/[a-zA-Z0-9_. %-]{0,10}){0,2}",
        options in prop::collection::vec((prop::sample::select(OPTIONS), option_value()), 0..5),
        sqlite_memory in any::<bool>(),
    ) -> (String, String) {
        if scheme == "sqlite" && sqlite_memory {
            return ("sqlite".to_string(), "sqlite::memory:".to_string());
        }
        let mut uri = format!("{scheme}://");
        // A sqlite URI has no user part: what would be one is a path.
        if let Some(user) = user.filter(|_| scheme != "sqlite") {
            uri.push_str(&user);
            if with_secret {
                uri.push(':');
                uri.push_str(SECRET);
            }
            uri.push('@');
        }
        let hosts: Vec<String> = hosts
            .into_iter()
            .map(|(host, port)| match port {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
            .collect();
        uri.push_str(&hosts.join(","));
        uri.push_str(&path);
        if !options.is_empty() {
            let query: Vec<String> = options
                .into_iter()
                .map(|(name, value)| {
                    if name == "password" {
                        format!("password={SECRET}")
                    } else {
                        format!("{name}={value}")
                    }
                })
                .collect();
            uri.push('?');
            uri.push_str(&query.join("&"));
        }
        (scheme.to_string(), uri)
    }
}

/// The checks every parse must pass.
fn check(scheme: &str, uri: &str) -> Result<(), TestCaseError> {
    match parse(scheme, uri) {
        Ok(debug) => prop_assert!(
            !debug.contains(SECRET),
            "{uri}: Debug shows the password: {debug}"
        ),
        Err(err) => {
            prop_assert_eq!(err.kind(), ErrorKind::Config, "{}: {}", uri, err);
            let message = err.to_string();
            prop_assert!(
                !message.contains(SECRET),
                "{uri}: the error shows the password: {message}"
            );
        }
    }
    let redacted = bakery::redact(uri);
    prop_assert!(
        !redacted.contains(SECRET),
        "{uri}: redact kept the password: {redacted}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn shaped_uris_parse_or_give_a_config_error_without_the_password((scheme, uri) in shaped_uri()) {
        check(&scheme, &uri)?;
    }

    #[test]
    fn any_text_after_a_scheme_parses_or_gives_a_config_error(
        scheme in prop::sample::select(SCHEMES),
        rest in "\\PC{0,40}",
    ) {
        check(scheme, &format!("{scheme}:{rest}"))?;
    }
}
