//! The exactly-once consumer a PostgreSQL user writes by hand: a
//! "processed keys" table beside the state, both changed in one
//! transaction. The native counterpart of the `consumer` workload's
//! partition-per-client variant: each client owns a partition (a row of the
//! state table) and processes increasing keys, adding 1 to its counter.
//!
//! Two forms, two peers:
//! - [`ProcessedKeys::transaction`]: `BEGIN`; `INSERT INTO processed … ON
//!   CONFLICT DO NOTHING`; if a row was inserted, `UPDATE state SET counter
//!   = counter + 1`; `COMMIT` — four requests per new message;
//! - [`ProcessedKeys::statement`]: the same in one statement (a CTE whose
//!   `UPDATE` runs only if the `INSERT` inserted), one request.
//!
//! Unlike bakery's consumer, which keeps one mark per partition, the
//! processed table keeps every key (it grows by a row per message).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bakery::backends::postgres::tokio_postgres::{Client, Statement};

use super::driver::{op_error, peer_error};
use super::postgres::{session, sessions};
use crate::error::BenchError;
use crate::model::{BenchClient, CellSpec, Finish, OpError, Peer, PreparedCell, RoundTrips};

/// The hand-written processed-keys consumer, in one of its two forms.
#[derive(Debug, Clone)]
pub struct ProcessedKeys {
    uri: String,
    /// One CTE statement instead of four requests.
    one_statement: bool,
}

impl ProcessedKeys {
    /// `BEGIN`, `INSERT … ON CONFLICT DO NOTHING`, `UPDATE` if inserted,
    /// `COMMIT`, on the server of `uri` (a bakery postgres URI).
    pub fn transaction(uri: &str) -> Self {
        ProcessedKeys {
            uri: uri.to_string(),
            one_statement: false,
        }
    }

    /// The insert and the update as one statement (one request).
    pub fn statement(uri: &str) -> Self {
        ProcessedKeys {
            uri: uri.to_string(),
            one_statement: true,
        }
    }
}

#[async_trait]
impl Peer for ProcessedKeys {
    fn workload(&self) -> &'static str {
        "consumer"
    }

    fn label(&self) -> String {
        if self.one_statement {
            "processed-keys table, one CTE statement".to_string()
        } else {
            "processed-keys table, BEGIN/INSERT/UPDATE/COMMIT".to_string()
        }
    }

    async fn setup(&self, cell: &CellSpec, sent: RoundTrips) -> Result<PreparedCell, BenchError> {
        let admin = session(self, &self.uri).await?;
        // Our names (lowercase letters, digits, `_`): safe to splice.
        let base = cell.sql_name();
        let tables = Tables {
            processed: format!("{base}_processed"),
            state: format!("{base}_state"),
        };
        admin
            .batch_execute(&format!(
                "CREATE TABLE {processed} (partition TEXT, key BIGINT, PRIMARY KEY (partition, key));
                 CREATE TABLE {state} (partition TEXT PRIMARY KEY, counter BIGINT NOT NULL);
                 INSERT INTO {state} SELECT 'p' || i, 0 FROM generate_series(0, {last}) AS i;",
                processed = tables.processed,
                state = tables.state,
                last = cell.clients.saturating_sub(1),
            ))
            .await
            .map_err(|e| peer_error("postgres", self, "cannot create the tables", e))?;
        let applied = Arc::new(AtomicU64::new(0));
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        let sessions = sessions(self, &self.uri, cell.clients).await?;
        for (index, client) in sessions.into_iter().enumerate() {
            let statements = tables
                .prepare(&client, self.one_statement)
                .await
                .map_err(|e| peer_error("postgres", self, "cannot prepare", e))?;
            clients.push(Box::new(ProcessedClient {
                client,
                statements,
                partition: format!("p{index}"),
                key: 0,
                round_trips: sent.clone(),
                applied: applied.clone(),
            }));
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(ProcessedFinish {
                admin,
                tables,
                applied,
            })),
        })
    }
}

/// The cell's two tables.
struct Tables {
    processed: String,
    state: String,
}

/// What a client sends: the two statements, or the one.
enum Statements {
    Transaction {
        insert: Statement,
        update: Statement,
    },
    One(Statement),
}

impl Tables {
    async fn prepare(
        &self,
        client: &Client,
        one_statement: bool,
    ) -> Result<Statements, bakery::backends::postgres::tokio_postgres::Error> {
        let Tables { processed, state } = self;
        let insert = format!(
            "INSERT INTO {processed} (partition, key) VALUES ($1, $2) ON CONFLICT DO NOTHING"
        );
        let update = format!("UPDATE {state} SET counter = counter + 1 WHERE partition = $1");
        Ok(if one_statement {
            Statements::One(
                client
                    .prepare(&format!(
                        "WITH inserted AS ({insert} RETURNING 1) \
                         {update} AND EXISTS (SELECT 1 FROM inserted)"
                    ))
                    .await?,
            )
        } else {
            Statements::Transaction {
                insert: client.prepare(&insert).await?,
                update: client.prepare(&update).await?,
            }
        })
    }
}

struct ProcessedClient {
    client: Client,
    statements: Statements,
    partition: String,
    /// The last key processed (keys start at 1).
    key: i64,
    round_trips: RoundTrips,
    /// Messages applied by every client of the cell.
    applied: Arc<AtomicU64>,
}

impl ProcessedClient {
    /// Process the next key: true if it was applied (new).
    async fn process(&mut self) -> Result<bool, OpError> {
        self.key += 1;
        let params: [&(dyn bakery::backends::postgres::tokio_postgres::types::ToSql + Sync); 2] =
            [&self.partition, &self.key];
        let trips = &self.round_trips;
        match &self.statements {
            Statements::One(statement) => {
                trips.fetch_add(1, Ordering::Relaxed);
                let updated = self
                    .client
                    .execute(statement, &params)
                    .await
                    .map_err(|e| op_error("insert + update", e))?;
                Ok(updated == 1)
            }
            Statements::Transaction { insert, update } => {
                trips.fetch_add(1, Ordering::Relaxed);
                let tx = self
                    .client
                    .transaction()
                    .await
                    .map_err(|e| op_error("BEGIN", e))?;
                trips.fetch_add(1, Ordering::Relaxed);
                let inserted = tx
                    .execute(insert, &params)
                    .await
                    .map_err(|e| op_error("INSERT … ON CONFLICT", e))?;
                if inserted == 1 {
                    trips.fetch_add(1, Ordering::Relaxed);
                    tx.execute(update, &params[..1])
                        .await
                        .map_err(|e| op_error("UPDATE", e))?;
                }
                trips.fetch_add(1, Ordering::Relaxed);
                tx.commit().await.map_err(|e| op_error("COMMIT", e))?;
                Ok(inserted == 1)
            }
        }
    }
}

#[async_trait]
impl BenchClient for ProcessedClient {
    async fn op(&mut self) -> Result<(), OpError> {
        if !self.process().await? {
            return Err(OpError(format!(
                "key {} of {} was new but not inserted",
                self.key, self.partition
            )));
        }
        self.applied.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Checks that the counters add up to the messages applied (and to the
/// processed rows), then drops the tables.
struct ProcessedFinish {
    admin: Client,
    tables: Tables,
    applied: Arc<AtomicU64>,
}

#[async_trait]
impl Finish for ProcessedFinish {
    async fn finish(self: Box<Self>, had_errors: bool) -> Vec<String> {
        let Tables { processed, state } = &self.tables;
        let mut problems = Vec::new();
        let counted = self
            .admin
            .query_one(
                &format!(
                    "SELECT (SELECT COALESCE(sum(counter), 0)::BIGINT FROM {state}), \
                            (SELECT count(*) FROM {processed})"
                ),
                &[],
            )
            .await
            .and_then(|row| Ok((row.try_get::<_, i64>(0)?, row.try_get::<_, i64>(1)?)));
        match counted {
            Ok((counters, rows)) => {
                let applied =
                    i64::try_from(self.applied.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
                // A failed COMMIT may still have committed: with errors the
                // tables may hold more than was acknowledged, never less.
                let lost = if had_errors {
                    counters < applied
                } else {
                    counters != applied
                };
                if lost || counters != rows {
                    problems.push(format!(
                        "the counters hold {counters} and the processed table {rows} rows, \
                         but {applied} messages were acknowledged"
                    ));
                }
            }
            Err(e) => problems.push(format!("cannot read the tables back: {e}")),
        }
        // Best effort: a leftover table is harmless.
        let _ = self
            .admin
            .batch_execute(&format!("DROP TABLE IF EXISTS {processed}, {state}"))
            .await;
        problems
    }
}
