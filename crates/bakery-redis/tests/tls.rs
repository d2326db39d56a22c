//! `rediss://` against the Redis that `scripts/backends.sh start redis` runs
//! with a TLS port besides its plain one: `BAKERY_REDIS_TLS_URI` names it by
//! `localhost`, the only name in its certificate, and `BAKERY_REDIS_TLS_CA`
//! is the PEM file of the CA that signed it; `other-ca.pem` next to that
//! file is a second CA that signed nothing (the wrong trust anchor). When a
//! variable is unset the tests fail under `CI=true` and say why and return
//! elsewhere.
#![cfg(feature = "tls")]

mod common;

use std::sync::Arc;

use bakery_core::VersionedStore;
use bakery_redis::{RedisConfig, RedisStore};
use bakery_testkit::options::{certificate_refused, written_over_tls, TlsServer};
use bakery_testkit::proxy::with_option;
use common::{cleanup, server_uri, unique_prefix, STRATEGIES};

/// The TLS server of `scripts/backends.sh start redis` (its URI has no
/// `ca_file`).
fn tls_server(test: &str) -> Option<TlsServer> {
    bakery_testkit::options::tls_server("redis", test)
}

#[tokio::test]
async fn rediss_with_the_ca_passes_the_cas_cases_with_both_strategies() {
    let Some(server) = tls_server("rediss_cas") else {
        return;
    };
    let config = RedisConfig::from_uri(&with_option(&server.uri, "ca_file", &server.ca))
        .unwrap_or_else(|e| panic!("{}: {e}", server.uri));
    assert!(config.tls(), "{} is not rediss://", server.uri);
    for strategy in STRATEGIES {
        let store = RedisStore::open(
            config
                .clone()
                .with_cas(strategy)
                .with_prefix(unique_prefix("tls")),
        )
        .await
        .unwrap_or_else(|e| panic!("{strategy}: {e}"));
        let store: Arc<dyn VersionedStore> = Arc::new(store);
        let cases: Vec<_> = bakery_testkit::cases()
            .into_iter()
            .filter(|case| case.name.starts_with("cas::"))
            .collect();
        // The 1600-increment race tests the CAS, which TLS is below; it runs
        // on plain TCP (tests/server.rs, the conformance suite). The churn
        // case still has 8 tasks on TLS connections at once.
        const RACE: &str = "cas::race_of_8_tasks_loses_no_update";
        assert!(cases.iter().any(|case| case.name == RACE), "no case {RACE}");
        for case in cases.iter().filter(|case| case.name != RACE) {
            case.run_on(store.clone()).await;
        }
    }
}

/// The TLS port is the plain port's server: a write over TLS is read back
/// over plain TCP.
#[tokio::test]
async fn the_tls_port_serves_the_same_data_as_the_plain_port() {
    let (Some(server), Some(plain)) = (tls_server("same_server"), server_uri("same_server")) else {
        return;
    };
    let prefix = unique_prefix("tls_same");
    let open = |uri: String| {
        let prefix = prefix.clone();
        async move {
            let config = RedisConfig::from_uri(&uri)
                .unwrap_or_else(|e| panic!("{uri}: {e}"))
                .with_prefix(prefix);
            RedisStore::open(config)
                .await
                .unwrap_or_else(|e| panic!("{uri}: {e}"))
        }
    };
    let tls = open(with_option(&server.uri, "ca_file", &server.ca)).await;
    let tcp = open(plain.clone()).await;
    written_over_tls(&tls, &tcp, "tls/same").await;
    cleanup(&plain, &tcp).await;
}

#[tokio::test]
async fn a_certificate_that_fails_the_check_is_refused_naming_the_problem() {
    let Some(TlsServer { uri, ca, other_ca }) = tls_server("refused") else {
        return;
    };
    let by_ip = uri.replace("localhost", "127.0.0.1");
    assert_ne!(
        by_ip, uri,
        "BAKERY_REDIS_TLS_URI must name the host localhost"
    );
    let refused = [
        // Signed by a CA we were not told to trust.
        (
            with_option(&uri, "ca_file", &other_ca.display().to_string()),
            "UnknownIssuer",
        ),
        // The system roots do not hold a private CA.
        (uri.clone(), "UnknownIssuer"),
        // The right CA, but the certificate names localhost, not 127.0.0.1.
        (with_option(&by_ip, "ca_file", &ca), "not valid for name"),
    ];
    for (target, problem) in refused {
        certificate_refused(&target, problem, RedisStore::connect(&target).await);
    }
}
