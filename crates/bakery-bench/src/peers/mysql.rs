//! MySQL / MariaDB through the raw driver: an `AUTO_INCREMENT` insert per
//! id (the sequence a MySQL user already has, Leaf's and Tinyid's anchor),
//! and a conditional update of a row of its own (the raw counterpart of
//! bakery's `put_if_version`).

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use bakery::backends::mysql::mysql_async::prelude::Queryable;
use bakery::backends::mysql::mysql_async::{self, Conn, Opts, Statement};

use super::driver::{connected, peer_error, within_connect_timeout, without_options, NextIds};
use crate::error::BenchError;
use crate::model::{BenchClient, CellSpec, Finish, OpError, Peer, PreparedCell, RoundTrips};

pub use mysql_async::Error;

/// Options of bakery's mysql URIs that the driver does not take.
const BAKERY_OPTIONS: &[&str] = &[
    "table",
    "pool_size",
    "timeout_ms",
    "connect_timeout_ms",
    "accept_data_loss",
    "durability_recheck_ms",
];

/// The driver's URL of a bakery mysql `uri`: bakery's own options removed,
/// `mariadb://` spelled `mysql://`.
///
/// ```
/// assert_eq!(
///     bakery_bench::peers::mysql::driver_uri("mariadb://u:p@h:3306/db?table=t&pool_size=2"),
///     "mysql://u:p@h:3306/db"
/// );
/// ```
pub fn driver_uri(uri: &str) -> String {
    let stripped = without_options(uri, BAKERY_OPTIONS);
    match stripped.split_once("://") {
        Some((_, rest)) => format!("mysql://{rest}"),
        None => stripped,
    }
}

/// One plain connection to the server of a bakery mysql `uri`.
pub async fn connect(uri: &str) -> Result<Conn, String> {
    let opts = Opts::from_url(&driver_uri(uri)).map_err(|e| e.to_string())?;
    within_connect_timeout(Conn::new(opts)).await
}

/// A conditional update through the raw driver: one row `(key, value,
/// version)` in an InnoDB table of its own, updated with the statement
/// bakery's store prepares, `UPDATE … SET value = ?, version = version + 1
/// WHERE key = ? AND version = ?`, applied when one row is affected.
/// Chained by version: each update expects the version the previous one
/// produced.
#[derive(Debug)]
pub struct RawCas {
    table: String,
    update: Statement,
    version: AtomicI64,
}

impl RawCas {
    /// Create the table `table` (a plain identifier: it is spliced into the
    /// SQL) with its one row at version 1, and prepare the update.
    pub async fn create(conn: &mut Conn, table: &str) -> Result<RawCas, Error> {
        conn.query_drop(format!(
            "CREATE TABLE {table} (`key` VARBINARY(512) NOT NULL PRIMARY KEY, \
             `value` LONGBLOB NULL, `version` BIGINT NOT NULL) ENGINE = InnoDB; \
             INSERT INTO {table} VALUES ('k', 'v', 1)"
        ))
        .await?;
        let update = conn
            .prep(format!(
                "UPDATE {table} SET `value` = ?, `version` = `version` + 1 \
                 WHERE `key` = ? AND `version` = ? AND `value` IS NOT NULL"
            ))
            .await?;
        Ok(RawCas {
            table: table.to_string(),
            update,
            version: AtomicI64::new(1),
        })
    }

    /// One conditional update to `value`: `false` if the row was not at the
    /// expected version (someone else wrote it).
    pub async fn update(&self, conn: &mut Conn, value: &[u8]) -> Result<bool, Error> {
        let expected = self.version.load(Ordering::Relaxed);
        conn.exec_drop(&self.update, (value, &b"k"[..], expected))
            .await?;
        if conn.affected_rows() != 1 {
            return Ok(false);
        }
        self.version.store(expected + 1, Ordering::Relaxed);
        Ok(true)
    }

    /// Drop the table.
    pub async fn drop_table(&self, conn: &mut Conn) -> Result<(), Error> {
        conn.query_drop(format!("DROP TABLE IF EXISTS {}", self.table))
            .await
    }
}

/// Create the table `name` (a plain identifier) whose `AUTO_INCREMENT`
/// column hands out ids, and prepare its insert on `conn`.
pub async fn auto_increment_table(conn: &mut Conn, name: &str) -> Result<Statement, Error> {
    conn.query_drop(format!(
        "CREATE TABLE IF NOT EXISTS {name} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) ENGINE = InnoDB"
    ))
    .await?;
    prepare_insert(conn, name).await
}

/// Prepare `INSERT INTO <name> () VALUES ()` on `conn`.
pub async fn prepare_insert(conn: &mut Conn, name: &str) -> Result<Statement, Error> {
    conn.prep(format!("INSERT INTO {name} () VALUES ()")).await
}

/// One id: an insert whose `AUTO_INCREMENT` value is the reply's
/// `LAST_INSERT_ID` (one round trip, one committed row).
pub async fn insert_id(conn: &mut Conn, insert: &Statement) -> Result<i64, Error> {
    conn.exec_drop(insert, ()).await?;
    let id = conn.last_insert_id().unwrap_or(0);
    Ok(i64::try_from(id).unwrap_or(i64::MAX))
}

/// `INSERT INTO t () VALUES ()` on an `AUTO_INCREMENT` table of its own,
/// one connection per client: every id a committed insert (one round trip,
/// one redo log flush), as Leaf's and Tinyid's MySQL anchors and
/// uid-generator's worker table take theirs.
#[derive(Debug, Clone)]
pub struct AutoIncrement {
    uri: String,
}

impl AutoIncrement {
    /// The peer on the server of the bakery mysql `uri`.
    pub fn new(uri: &str) -> Self {
        AutoIncrement {
            uri: uri.to_string(),
        }
    }
}

#[async_trait]
impl Peer for AutoIncrement {
    fn workload(&self) -> &'static str {
        "sequence"
    }

    fn label(&self) -> String {
        "AUTO_INCREMENT insert per id".to_string()
    }

    async fn setup(&self, cell: &CellSpec, sent: RoundTrips) -> Result<PreparedCell, BenchError> {
        let mut admin = connected("mysql", self, connect(&self.uri)).await?;
        // The name is ours (lowercase letters, digits, `_`).
        let table = cell.sql_name();
        auto_increment_table(&mut admin, &table)
            .await
            .map_err(|e| peer_error("mysql", self, "cannot create the table", e))?;
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for _ in 0..cell.clients {
            let mut conn = connected("mysql", self, connect(&self.uri)).await?;
            let insert = prepare_insert(&mut conn, &table)
                .await
                .map_err(|e| peer_error("mysql", self, "cannot prepare the insert", e))?;
            clients.push(Box::new(AutoIncrementClient {
                conn,
                insert,
                ids: NextIds::new(cell, &sent),
            }));
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(DropTable { admin, table })),
        })
    }
}

struct AutoIncrementClient {
    conn: Conn,
    insert: Statement,
    ids: NextIds,
}

#[async_trait]
impl BenchClient for AutoIncrementClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let request = insert_id(&mut self.conn, &self.insert);
        self.ids.next("AUTO_INCREMENT insert", request).await
    }
}

/// Drops the cell's table (best effort: a leftover is harmless).
struct DropTable {
    admin: Conn,
    table: String,
}

#[async_trait]
impl Finish for DropTable {
    async fn finish(mut self: Box<Self>, _had_errors: bool) -> Vec<String> {
        let _ = self
            .admin
            .query_drop(format!("DROP TABLE IF EXISTS {}", self.table))
            .await;
        Vec::new()
    }
}
