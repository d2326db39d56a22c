//! Cassandra and ScyllaDB through the raw driver: a lightweight
//! transaction on a row of its own (the raw counterpart of bakery's
//! `put_if_version`), through the session of a bakery store.

use std::sync::atomic::{AtomicI64, Ordering};

use bakery::backends::cassandra::scylla::statement::prepared::PreparedStatement;
use bakery::backends::cassandra::scylla::statement::SerialConsistency;
use bakery::backends::cassandra::scylla::value::{CqlValue, Row as CqlRow};
use bakery::backends::cassandra::CassandraStore;

/// A conditional update through the raw driver: one row `(key, value,
/// version)` in a table of its own (in the store's keyspace), updated by
/// the lightweight transaction bakery's store makes (`UPDATE … IF version
/// = ?` at SERIAL), issued raw through the same session. Chained by
/// version: each update expects the version the previous one produced.
#[derive(Debug)]
pub struct RawCas {
    keyspace: String,
    table: String,
    update: PreparedStatement,
    version: AtomicI64,
}

impl RawCas {
    /// Create the table `table` (a plain identifier) in `store`'s keyspace,
    /// with its one row at version 1.
    pub async fn create(store: &CassandraStore, table: &str) -> Result<RawCas, String> {
        let keyspace = store.config().keyspace().to_string();
        let session = store.session();
        let failed = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE \"{keyspace}\".\"{table}\" \
                     (key text PRIMARY KEY, value blob, version bigint)"
                ),
                (),
            )
            .await
            .map_err(|e| failed("create table", &e))?;
        session
            .await_schema_agreement()
            .await
            .map_err(|e| failed("schema agreement", &e))?;
        session
            .query_unpaged(
                format!(
                    "INSERT INTO \"{keyspace}\".\"{table}\" (key, value, version) \
                     VALUES ('k', 0x00, 1)"
                ),
                (),
            )
            .await
            .map_err(|e| failed("insert", &e))?;
        let mut update = session
            .prepare(format!(
                "UPDATE \"{keyspace}\".\"{table}\" SET value = ?, version = ? \
                 WHERE key = 'k' IF version = ?"
            ))
            .await
            .map_err(|e| failed("prepare", &e))?;
        update.set_serial_consistency(Some(SerialConsistency::Serial));
        Ok(RawCas {
            keyspace,
            table: table.to_string(),
            update,
            version: AtomicI64::new(1),
        })
    }

    /// One conditional update to `value`: `false` if the row was not at the
    /// expected version (someone else wrote it).
    pub async fn update(&self, store: &CassandraStore, value: &[u8]) -> Result<bool, String> {
        let expected = self.version.load(Ordering::Relaxed);
        let rows = store
            .session()
            .execute_unpaged(&self.update, (value, expected + 1, expected))
            .await
            .map_err(|e| e.to_string())?
            .into_rows_result()
            .map_err(|e| e.to_string())?;
        // An applied LWT answers `[applied]` alone; one that did not apply
        // adds the row's columns.
        let applied = match rows.first_row::<(bool,)>() {
            Ok((applied,)) => applied,
            Err(_) => {
                let row = rows
                    .first_row::<CqlRow>()
                    .map_err(|e| format!("LWT reply: {e}"))?;
                match row.columns.first() {
                    Some(Some(CqlValue::Boolean(applied))) => *applied,
                    _ => return Err("LWT reply: `[applied]` is not a boolean".to_string()),
                }
            }
        };
        if applied {
            self.version.store(expected + 1, Ordering::Relaxed);
        }
        Ok(applied)
    }

    /// Drop the table.
    pub async fn drop_table(&self, store: &CassandraStore) -> Result<(), String> {
        store
            .session()
            .query_unpaged(
                format!(
                    "DROP TABLE IF EXISTS \"{}\".\"{}\"",
                    self.keyspace, self.table
                ),
                (),
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
