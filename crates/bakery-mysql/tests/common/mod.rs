//! Helpers shared by the integration tests.
#![allow(dead_code)]

use bakery_mysql::mysql_async::prelude::Queryable;
use bakery_mysql::mysql_async::{self, Conn, Opts, OptsBuilder};
use bakery_mysql::MysqlStore;

/// The server under test, from `BAKERY_MARIADB_URI`. When it is unset a
/// developer run prints why and skips (`None`); under `CI=true` it fails.
pub fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_MARIADB_URI", test)
}

/// `uri` with `extra` options appended.
pub fn with_options(uri: &str, extra: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{extra}")
}

pub use bakery_testkit::unique_ident as unique_table;

fn base(uri: &str) -> String {
    let base = uri.split('?').next().unwrap_or(uri);
    match base.split_once("://") {
        Some((_, rest)) => format!("mysql://{rest}"),
        None => base.to_string(),
    }
}

/// A plain driver connection as the URI's user, to set up and inspect
/// tables behind the store.
pub async fn raw_conn(uri: &str) -> Conn {
    let opts = Opts::from_url(&base(uri)).expect("BAKERY_MARIADB_URI parses");
    Conn::new(opts)
        .await
        .expect("raw connection to BAKERY_MARIADB_URI")
}

/// A connection as root (no password over TCP on the test server, see
/// scripts/backends/mariadb.sh), for server settings.
pub async fn root_conn(uri: &str) -> Conn {
    let opts = Opts::from_url(&base(uri)).expect("BAKERY_MARIADB_URI parses");
    let opts = OptsBuilder::from_opts(opts)
        .user(Some("root"))
        .pass(None::<String>);
    Conn::new(opts)
        .await
        .expect("root connection to the MariaDB test server")
}

pub async fn exec(conn: &mut Conn, sql: &str) {
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The stored row of `key` as the table holds it, read behind the store.
pub async fn raw_row(
    conn: &mut Conn,
    table: &str,
    key: &str,
) -> bakery_testkit::corrupt::StoredRow {
    conn.exec_first::<(Option<Vec<u8>>, Option<i64>), _, _>(
        format!("SELECT `value`, `version` FROM {table} WHERE `key` = ?"),
        (key.as_bytes(),),
    )
    .await
    .expect("raw read")
}

pub async fn open(uri: &str, extra: &str) -> MysqlStore {
    MysqlStore::connect(&with_options(uri, extra))
        .await
        .unwrap_or_else(|e| panic!("open {extra}: {e}"))
}

pub async fn drop_tables(uri: &str, names: &[&str]) {
    let mut conn = raw_conn(uri).await;
    for name in names {
        if let Err(e) = conn
            .query_drop(format!("DROP TABLE IF EXISTS {name}"))
            .await
        {
            eprintln!("cleanup: {name}: {e}");
        }
    }
}

pub fn error_text(e: &mysql_async::Error) -> String {
    e.to_string()
}
