//! TLS against a server with `ssl=on`, when one is given:
//! `BAKERY_POSTGRES_TLS_URI` (e.g. `postgres://postgres@localhost:25433/postgres`,
//! the host named `localhost` in the certificate) and
//! `BAKERY_POSTGRES_TLS_CA` (the PEM file of the CA that signed the server's
//! certificate, whose subjectAltName is `DNS:localhost` only). Without them
//! the test prints why and returns, on CI too: the project's scripts start
//! no TLS server.

mod common;

use bakery_core::{ErrorKind, Key, VersionedStore};
use bakery_postgres::PostgresStore;
use common::with_options as with;

fn tls_server() -> Option<(String, String)> {
    match (
        std::env::var("BAKERY_POSTGRES_TLS_URI"),
        std::env::var("BAKERY_POSTGRES_TLS_CA"),
    ) {
        (Ok(uri), Ok(ca)) if !uri.is_empty() && !ca.is_empty() => Some((uri, ca)),
        _ => {
            eprintln!(
                "tls: skipped: set BAKERY_POSTGRES_TLS_URI and BAKERY_POSTGRES_TLS_CA to test against a TLS server"
            );
            None
        }
    }
}

#[tokio::test]
async fn sslmodes_check_what_libpq_checks() {
    let Some((uri, ca)) = tls_server() else {
        return;
    };
    let by_ip = uri.replace("localhost", "127.0.0.1");
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
            .unwrap_or_else(|e| panic!("{e}"));
        let key = Key::new("tls/probe").unwrap();
        store.get(&key).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let other_ca = std::path::Path::new(&ca).with_file_name("other-ca.pem");
    let mut refused = vec![
        // Host name not in the certificate.
        with(&by_ip, &format!("sslmode=verify-full&sslrootcert={ca}")),
        // A self-signed CA is not in the Mozilla store.
        with(&uri, "sslmode=verify-full&sslrootcert=system"),
        with(&uri, "sslmode=require&sslrootcert=system"),
    ];
    if other_ca.exists() {
        refused.push(with(
            &uri,
            &format!("sslmode=verify-ca&sslrootcert={}", other_ca.display()),
        ));
    }
    for target in refused {
        let err = PostgresStore::connect(&target).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{target}: {err}");
        assert!(err.message().contains("TLS"), "{err}");
    }
}
