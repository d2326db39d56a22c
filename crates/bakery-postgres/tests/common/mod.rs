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
    raw_client_in(uri, None).await
}

/// [`raw_client`] in database `dbname` (`None`: the URI's).
pub async fn raw_client_in(uri: &str, dbname: Option<&str>) -> tokio_postgres::Client {
    // The driver does not know bakery's options.
    let base = uri.split('?').next().unwrap_or(uri);
    let target = match dbname {
        Some(db) => format!("{base}?dbname={db}"),
        None => base.to_string(),
    };
    let (client, connection) = tokio_postgres::connect(&target, tokio_postgres::NoTls)
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

/// A database no other test or run uses, created on the server of `uri`
/// with `settings` as its defaults (`ALTER DATABASE … SET name = value`,
/// values written as SQL). Returns its name and `uri` pointed at it. Drop
/// it with [`drop_database`]; a failing test keeps it for a look.
pub async fn scratch_database(
    uri: &str,
    prefix: &str,
    settings: &[(&str, &str)],
) -> (String, String) {
    let name = unique_table(prefix);
    let admin = raw_client(uri).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("CREATE DATABASE");
    for (setting, value) in settings {
        set_database_default(uri, &name, setting, value).await;
    }
    let scratch_uri = with_options(uri, &format!("dbname={name}"));
    (name, scratch_uri)
}

/// `ALTER DATABASE name SET setting = value`: new sessions get it.
pub async fn set_database_default(uri: &str, name: &str, setting: &str, value: &str) {
    raw_client(uri)
        .await
        .batch_execute(&format!("ALTER DATABASE {name} SET {setting} = {value}"))
        .await
        .expect("ALTER DATABASE … SET");
}

/// Drop a database made by [`scratch_database`], ending its sessions.
pub async fn drop_database(uri: &str, name: &str) {
    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    if let Err(e) = raw_client(uri).await.batch_execute(&sql).await {
        eprintln!("cleanup: {sql}: {e}");
    }
}
