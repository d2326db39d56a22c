#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod decode;
mod sink;

use std::time::Duration;

use bakery_core::{Bytes, Error, ErrorKind, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, GenericClient, NoTls};

pub use sink::{ConsumerSink, Digest, JsonLines, Sink};
/// The driver, for the producer's own transactions.
pub use tokio_postgres;

const BACKEND: &str = "outbox";

/// The publication the relay reads through: it has no tables, so the
/// server filters table changes out and only logical messages arrive.
pub const PUBLICATION: &str = "bakery_outbox";

/// Emit `payload` under `prefix` in the caller's transaction (or as its own
/// transaction when `client` is not in one). It is delivered only if that
/// transaction commits. Returns the message's LSN.
///
/// `prefix` follows the name rules (ASCII letters, digits, `_ - . : @ + =`),
/// so that it can name a consumer partition.
pub async fn emit(client: &impl GenericClient, prefix: &str, payload: &[u8]) -> Result<u64> {
    bakery_core::validate_name(prefix)?;
    let row = client
        .query_one(
            "SELECT pg_logical_emit_message(true, $1::text, $2::bytea)::text",
            &[&prefix, &payload],
        )
        .await
        .map_err(|e| pg_error(e, "emitting a message"))?;
    let lsn: String = row.get(0);
    decode::parse_lsn(&lsn)
}

/// Open a client on `uri` (a `postgres://` URL, without TLS), its
/// connection driven by a background task.
pub async fn connect(uri: &str) -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(uri, NoTls)
        .await
        .map_err(|e| pg_error(e, "connecting"))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "outbox: connection closed");
        }
    });
    Ok(client)
}

/// How long [`Relay::run`] retries temporary errors before it gives up.
pub const RETRY_FOR: Duration = Duration::from_secs(30);

/// One delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `(commit LSN << 64) | message LSN`: strictly increasing in delivery
    /// order.
    pub key: u128,
    /// LSN of the commit of the message's transaction.
    pub commit_lsn: u64,
    /// LSN of the message itself.
    pub lsn: u64,
    /// The id of the transaction that emitted it.
    pub xid: u32,
    /// The prefix given to [`emit`].
    pub prefix: String,
    /// The payload given to [`emit`].
    pub payload: Bytes,
}

/// One committed transaction's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// Its commit LSN.
    pub commit_lsn: u64,
    /// The end of its commit record: confirming up to here acknowledges it.
    pub end_lsn: u64,
    /// Its messages, in the order they were emitted.
    pub messages: Vec<Message>,
}

/// What one [`Relay::peek`] returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Committed transactions, in commit order.
    pub transactions: Vec<Transaction>,
}

impl Batch {
    /// Every message of the batch, in delivery order.
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        self.transactions.iter().flat_map(|t| t.messages.iter())
    }

    /// True when nothing was decoded.
    pub fn is_empty(&self) -> bool {
        self.transactions.is_empty()
    }
}

/// Counts of a [`Relay::run`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Batches read.
    pub batches: u64,
    /// Transactions read.
    pub transactions: u64,
    /// Messages handed to the sink (those matching the prefix).
    pub delivered: u64,
}

/// Reads committed messages from a logical replication slot. See the
/// [crate docs](crate).
pub struct Relay {
    client: Client,
    slot: String,
    prefix: Option<String>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("slot", &self.slot)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Relay {
    /// Connect to `uri` (a `postgres://` URL, without TLS) and use slot
    /// `slot`, creating it (plugin `pgoutput`) and the publication
    /// [`PUBLICATION`] if missing. A slot of another plugin, of another
    /// database, or a physical one is refused with a Config error.
    pub async fn connect(uri: &str, slot: &str) -> Result<Relay> {
        check_slot_name(slot)?;
        let client = connect(uri).await?;
        match client
            .batch_execute(&format!("CREATE PUBLICATION {PUBLICATION}"))
            .await
        {
            Ok(()) => {}
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_OBJECT) => {}
            Err(e) => return Err(pg_error(e, "creating the publication")),
        }
        let existing = client
            .query_opt(
                "SELECT plugin, slot_type, database = current_database() \
                 FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(|e| pg_error(e, "looking up the slot"))?;
        match existing {
            Some(row) => {
                let plugin: Option<String> = row.get(0);
                let kind: String = row.get(1);
                let here: Option<bool> = row.get(2);
                if kind != "logical" || plugin.as_deref() != Some("pgoutput") || here != Some(true)
                {
                    return Err(Error::config(
                        BACKEND,
                        format!(
                            "slot {slot:?} is a {kind} slot of plugin {} in {}; the relay needs a logical pgoutput slot of this database (pick another --slot)",
                            plugin.as_deref().unwrap_or("none"),
                            if here == Some(true) { "this database" } else { "another database" }
                        ),
                    ));
                }
            }
            None => {
                tracing::info!(slot, "outbox: creating the logical replication slot");
                match client
                    .execute(
                        "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                        &[&slot],
                    )
                    .await
                {
                    Ok(_) => {}
                    // Created by a relay starting at the same moment.
                    Err(e) if e.code() == Some(&SqlState::DUPLICATE_OBJECT) => {}
                    Err(e) => return Err(pg_error(e, "creating the slot")),
                }
            }
        }
        Ok(Relay {
            client,
            slot: slot.to_owned(),
            prefix: None,
        })
    }

    /// Deliver only messages with this prefix (the others are read and
    /// confirmed, not delivered).
    pub fn prefix(mut self, prefix: &str) -> Result<Relay> {
        bakery_core::validate_name(prefix)?;
        self.prefix = Some(prefix.to_owned());
        Ok(self)
    }

    /// The slot's name.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// Read (without confirming) up to about `max_changes` decoded changes:
    /// whole committed transactions, in commit order, messages filtered by
    /// the prefix. The same messages come again until [`confirm`](Self::confirm).
    pub async fn peek(&self, max_changes: i32) -> Result<Batch> {
        let rows = self
            .client
            .query(
                "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, $2, \
                 'proto_version', '1', 'publication_names', $3, 'messages', 'true')",
                &[&self.slot, &max_changes.max(1), &PUBLICATION],
            )
            .await
            .map_err(|e| self.slot_error(e, "reading the slot"))?;
        let mut batch = decode::Decoder::default();
        for row in rows {
            let data: &[u8] = row.get(0);
            batch.feed(data)?;
        }
        let mut batch = batch.finish();
        if let Some(prefix) = &self.prefix {
            for txn in &mut batch.transactions {
                txn.messages.retain(|m| &m.prefix == prefix);
            }
        }
        Ok(batch)
    }

    /// Acknowledge every transaction of `batch`: the slot moves past them
    /// and they are not read again.
    ///
    /// The slot is moved to one byte past the start of the last commit
    /// record, not to the record's end: decoding skips exactly the
    /// transactions whose commit starts before that point, and the target
    /// stays inside WAL already flushed. Advancing to the end of the last
    /// commit — when that is also the end of the WAL — was measured on
    /// PostgreSQL 15 to sometimes carry the slot past a transaction that
    /// committed meanwhile, which was then never decoded. Should the server
    /// still report a position past the batch, this fails with
    /// [`ErrorKind::Internal`] naming both positions, instead of losing
    /// messages silently.
    pub async fn confirm(&self, batch: &Batch) -> Result<()> {
        let Some(last) = batch.transactions.last() else {
            return Ok(());
        };
        let target = last.commit_lsn + 1;
        let row = self
            .client
            .query_one(
                "SELECT end_lsn::text FROM pg_replication_slot_advance($1, $2::text::pg_lsn)",
                &[&self.slot, &decode::format_lsn(target)],
            )
            .await
            .map_err(|e| self.slot_error(e, "confirming"))?;
        let reached = decode::parse_lsn(&row.try_get::<_, String>(0).map_err(|e| {
            Error::corrupt(BACKEND, format!("pg_replication_slot_advance replied: {e}"))
        })?)?;
        match reached <= last.end_lsn {
            true => Ok(()),
            false => Err(Error::new(
                ErrorKind::Internal,
                BACKEND,
                format!(
                    "slot {} moved to {} when asked for {}: transactions committed \
                     after {} may have been skipped",
                    self.slot,
                    decode::format_lsn(reached),
                    decode::format_lsn(target),
                    decode::format_lsn(last.end_lsn)
                ),
            )),
        }
    }

    /// Deliver every committed message to `sink`, batch by batch, confirming
    /// each batch only after the sink acknowledged all of it. Returns when
    /// the slot is drained and `exit_when_idle` is set; otherwise polls every
    /// `poll` for more, forever.
    ///
    /// A temporary error (the slot still held by a relay that was just
    /// killed, a server restarting, a sink store unavailable) is retried
    /// from the last confirmed position for up to [`RETRY_FOR`]: the batch
    /// comes again and a deduplicating sink drops what it already applied.
    pub async fn run(
        &self,
        sink: &mut dyn Sink,
        batch_size: i32,
        poll: Duration,
        exit_when_idle: bool,
    ) -> Result<RelayStats> {
        let mut stats = RelayStats::default();
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            match self.step(sink, batch_size, &mut stats).await {
                Ok(delivered) => {
                    failing_since = None;
                    if !delivered {
                        if exit_when_idle {
                            return Ok(stats);
                        }
                        tokio::time::sleep(poll).await;
                    }
                }
                Err(e) if e.is_temporary() => {
                    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= RETRY_FOR {
                        return Err(e);
                    }
                    tracing::warn!(slot = %self.slot, error = %e, "outbox: retrying");
                    tokio::time::sleep(poll.max(Duration::from_millis(50))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One batch: read, deliver, flush, confirm. False when there was none.
    async fn step(
        &self,
        sink: &mut dyn Sink,
        batch_size: i32,
        stats: &mut RelayStats,
    ) -> Result<bool> {
        let batch = self.peek(batch_size).await?;
        if batch.is_empty() {
            return Ok(false);
        }
        for message in batch.messages() {
            sink.deliver(message).await?;
            stats.delivered += 1;
        }
        sink.flush().await?;
        self.confirm(&batch).await?;
        stats.batches += 1;
        stats.transactions += batch.transactions.len() as u64;
        Ok(true)
    }

    /// Drop the slot (the server stops keeping WAL for it).
    pub async fn drop_slot(self) -> Result<()> {
        self.client
            .execute("SELECT pg_drop_replication_slot($1)", &[&self.slot])
            .await
            .map_err(|e| self.slot_error(e, "dropping the slot"))?;
        Ok(())
    }

    fn slot_error(&self, e: tokio_postgres::Error, doing: &str) -> Error {
        if e.code() == Some(&SqlState::UNDEFINED_OBJECT) {
            return Error::config(
                BACKEND,
                format!(
                    "{doing}: slot {:?} does not exist (dropped while the relay ran?); messages emitted since it was dropped are lost to it — not recreating it silently",
                    self.slot
                ),
            )
            .with_source(e);
        }
        if e.code() == Some(&SqlState::OBJECT_IN_USE) {
            return Error::new(
                ErrorKind::Unavailable,
                BACKEND,
                format!("{doing}: slot {:?} is in use by another relay", self.slot),
            )
            .with_source(e);
        }
        pg_error(e, doing)
    }
}

fn check_slot_name(slot: &str) -> Result<()> {
    // PostgreSQL's rule: lower-case letters, digits and underscores, at
    // most 63 characters.
    let ok = !slot.is_empty()
        && slot.len() <= 63
        && slot
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_input(
            BACKEND,
            format!("slot name {slot:?}: use 1 to 63 lower-case letters, digits and underscores"),
        ))
    }
}

fn pg_error(e: tokio_postgres::Error, doing: &str) -> Error {
    bakery_postgres::client_error(e, BACKEND, doing)
}
