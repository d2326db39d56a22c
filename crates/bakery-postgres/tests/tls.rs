//! TLS against the PostgreSQL that `scripts/backends.sh start postgres` runs
//! with `ssl=on`: `BAKERY_POSTGRES_TLS_URI` names it by `localhost`, the
//! only name in its certificate, and `BAKERY_POSTGRES_TLS_CA` is the PEM
//! file of the CA that signed it; `other-ca.pem` next to that file is a
//! second CA that signed nothing (the wrong trust anchor). A server without
//! TLS is `BAKERY_POSTGRES_PRIMARY_URI` (`scripts/backends.sh start
//! postgres_primary`, no `ssl=on`). When a variable is unset the tests fail
//! under `CI=true` and say why and return elsewhere.

mod common;

use bakery_core::{ErrorKind, Key, VersionedStore};
use bakery_postgres::PostgresStore;
use bakery_testkit::options::{certificate_refused, written_over_tls, TlsServer};
use common::{drop_tables, raw_client, unique_table, with_options as with};

/// The TLS server of `scripts/backends.sh start postgres`.
fn tls_server(test: &str) -> Option<TlsServer> {
    bakery_testkit::options::tls_server("postgres", test)
}

/// Whether the server of `uri` has TLS on (`SHOW ssl`).
async fn server_ssl(uri: &str) -> bool {
    let row = raw_client(uri)
        .await
        .query_one("SHOW ssl", &[])
        .await
        .expect("SHOW ssl");
    row.get::<_, String>(0) == "on"
}

/// Whether every session of `application_name` is encrypted, and how many
/// there are (`pg_stat_ssl`, from a plain connection of our own).
async fn sessions_encrypted(uri: &str, application_name: &str) -> (bool, i64) {
    let row = raw_client(uri)
        .await
        .query_one(
            "SELECT coalesce(bool_and(s.ssl), false), count(*) FROM pg_stat_ssl s \
             JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
            &[&application_name],
        )
        .await
        .expect("pg_stat_ssl");
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn verify_full_against_the_ca_connects_encrypted_and_puts() {
    let Some(server) = tls_server("verify_full") else {
        return;
    };
    assert!(server_ssl(&server.uri).await, "{}: ssl is off", server.uri);
    let table = unique_table("bk_tls");
    let target = with(
        &server.uri,
        &format!(
            "sslmode=verify-full&sslrootcert={}&table={table}&application_name={table}",
            server.ca
        ),
    );
    let store = PostgresStore::connect(&target)
        .await
        .unwrap_or_else(|e| panic!("{target}: {e}"));
    written_over_tls(&store, &store, "tls/verify-full").await;
    // The server itself says the store's sessions are TLS.
    let (encrypted, sessions) = sessions_encrypted(&server.uri, &table).await;
    assert!(sessions > 0, "no session named {table}");
    assert!(encrypted, "a session of {table} is not encrypted");
    drop(store);
    drop_tables(&server.uri, &[&table]).await;
}

#[tokio::test]
async fn sslmodes_check_what_libpq_checks() {
    let Some(TlsServer { uri, ca, other_ca }) = tls_server("sslmodes") else {
        return;
    };
    let other_ca = other_ca.display();
    let by_ip = uri.replace("localhost", "127.0.0.1");
    assert_ne!(
        by_ip, uri,
        "BAKERY_POSTGRES_TLS_URI must name the host localhost"
    );
    let ok = [
        with(&uri, "sslmode=require"),
        with(&uri, "sslmode=prefer"),
        with(&uri, &format!("sslmode=verify-full&sslrootcert={ca}")),
        with(&uri, &format!("sslmode=verify-ca&sslrootcert={ca}")),
        // The certificate does not name 127.0.0.1: verify-ca does not care.
        with(&by_ip, &format!("sslmode=verify-ca&sslrootcert={ca}")),
        with(&by_ip, "sslmode=require"),
    ];
    for target in ok {
        let store = PostgresStore::connect(&target)
            .await
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let key = Key::new("tls/probe").unwrap();
        store
            .get(&key)
            .await
            .unwrap_or_else(|e| panic!("{target}: {e}"));
    }
    // Each refusal names what is wrong with the certificate.
    let refused = [
        (
            with(&by_ip, &format!("sslmode=verify-full&sslrootcert={ca}")),
            "not valid for name",
        ),
        (
            with(&uri, &format!("sslmode=verify-full&sslrootcert={other_ca}")),
            "UnknownIssuer",
        ),
        (
            with(&uri, &format!("sslmode=verify-ca&sslrootcert={other_ca}")),
            "UnknownIssuer",
        ),
        (
            with(&uri, &format!("sslmode=require&sslrootcert={other_ca}")),
            "UnknownIssuer",
        ),
        // A private CA is not in the Mozilla store.
        (
            with(&uri, "sslmode=verify-full&sslrootcert=system"),
            "UnknownIssuer",
        ),
    ];
    for (target, problem) in refused {
        certificate_refused(&target, problem, PostgresStore::connect(&target).await);
    }
}

#[tokio::test]
async fn require_refuses_a_server_without_tls() {
    let Some(plain) = bakery_testkit::server_uri("BAKERY_POSTGRES_PRIMARY_URI", "require_plain")
    else {
        return;
    };
    let Some(server) = tls_server("require_plain") else {
        return;
    };
    assert!(!server_ssl(&plain).await, "{plain}: ssl is on");
    // Its asynchronous standby would make bakery refuse it; only TLS is
    // tested here.
    let plain = with(&plain, "accept_data_loss=true");
    // `prefer` falls back to plain TCP; the others insist on TLS.
    let store = PostgresStore::connect(&with(&plain, "sslmode=prefer"))
        .await
        .unwrap_or_else(|e| panic!("{plain}: {e}"));
    store.get(&Key::new("tls/plain").unwrap()).await.unwrap();
    for extra in [
        "sslmode=require".to_string(),
        format!("sslmode=verify-full&sslrootcert={}", server.ca),
    ] {
        let target = with(&plain, &extra);
        let err = PostgresStore::connect(&target).await.unwrap_err();
        eprintln!("{target}: {err}");
        assert_eq!(err.kind(), ErrorKind::Config, "{target}: {err}");
        assert!(
            err.message().contains("server does not support TLS"),
            "{target}: {err}"
        );
    }
}
