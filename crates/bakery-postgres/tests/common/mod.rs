//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The server under test, from `BAKERY_POSTGRES_URI`. When it is unset a
/// developer run prints why and skips (`None`); under `CI=true` it fails.
pub fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_POSTGRES_URI", test)
}

/// `uri` with `extra` options appended.
pub fn with_options(uri: &str, extra: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{extra}")
}

/// A table name no other test or run uses.
pub fn unique_table(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A plain driver connection, to set up and inspect tables behind the store.
pub async fn raw_client(uri: &str) -> tokio_postgres::Client {
    // The driver does not know bakery's options.
    let base = uri.split('?').next().unwrap_or(uri);
    let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("raw connection to BAKERY_POSTGRES_URI");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Drop the tables and views a passing test made (a failing one keeps them
/// for a look). Best effort: an error here is only printed.
pub async fn drop_tables(uri: &str, names: &[&str]) {
    let client = raw_client(uri).await;
    for name in names {
        for kind in ["VIEW", "TABLE"] {
            let sql = format!("DROP {kind} IF EXISTS {name}");
            if let Err(e) = client.batch_execute(&sql).await {
                if e.code() != Some(&tokio_postgres::error::SqlState::WRONG_OBJECT_TYPE) {
                    eprintln!("cleanup: {sql}: {e}");
                }
            }
        }
    }
}
