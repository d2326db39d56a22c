//! `bakery outbox emit|relay`: a PostgreSQL transactional outbox read from
//! logical decoding and delivered exactly once into any bakery store.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bakery::VersionedStore;
use bakery_outbox::{emit, ConsumerSink, Digest, JsonLines, Relay};
use bakery_recipes::consumer::Consumer;
use clap::{Args, Subcommand};

use crate::lock::parse_duration;
use crate::output::{self, CliError};

/// `bakery outbox …`
#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// Emit one message (as its own transaction) — what a producer does
    /// inside its own transaction with the library's `emit`.
    Emit(EmitArgs),

    /// Deliver every committed message from a logical replication slot, in
    /// commit order, keyed by (commit LSN, message LSN).
    ///
    /// With `--to -` (the default) each message is printed as a JSON line
    /// (at least once: a relay restarted before it confirmed prints the
    /// batch again). With `--to URI` each message is applied exactly once to
    /// a high-water-mark consumer on that bakery store (partition = the
    /// message's prefix; state = count and chained SHA-256, see `bakery
    /// outbox show`). The slot is advanced only after the sink acknowledged
    /// the batch, so a crash re-delivers and never loses.
    Relay(RelayArgs),

    /// Show a consumer partition's mark and digest (`--to` store).
    Show(ShowArgs),
}

/// Arguments of `bakery outbox emit`.
#[derive(Debug, Args)]
pub struct EmitArgs {
    /// The PostgreSQL database (postgres://…, no TLS).
    #[arg(long)]
    pub from: String,
    /// The message's prefix (a name).
    #[arg(long)]
    pub prefix: String,
    /// The payload (UTF-8 text).
    pub payload: String,
}

/// Arguments of `bakery outbox relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// The PostgreSQL database (postgres://…, no TLS; wal_level=logical).
    #[arg(long)]
    pub from: String,
    /// The replication slot (created, plugin pgoutput, if missing).
    #[arg(long)]
    pub slot: String,
    /// Deliver only messages with this prefix.
    #[arg(long)]
    pub prefix: Option<String>,
    /// `-` for JSON lines on stdout, or a bakery store URI for exactly-once
    /// delivery into a consumer there.
    #[arg(long, default_value = "-")]
    pub to: String,
    /// The consumer's name on the `--to` store (default: the slot's name).
    #[arg(long)]
    pub consumer: Option<String>,
    /// Stop when the slot has nothing more to deliver.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// Changes decoded per batch.
    #[arg(long, default_value_t = 1000)]
    pub batch: i32,
    /// How often to look for new messages when idle.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub poll: Duration,
}

/// Arguments of `bakery outbox show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The consumer's name (the slot's name unless --consumer was given).
    pub consumer: String,
    /// The partition (the messages' prefix).
    pub partition: String,
}

/// `bakery outbox emit`.
pub async fn emit_one(args: &EmitArgs) -> Result<(), CliError> {
    let client = bakery_outbox::connect(&args.from)
        .await
        .map_err(|e| CliError::with_context(e, format!("source {}", bakery::redact(&args.from))))?;
    let lsn = emit(&client, &args.prefix, args.payload.as_bytes()).await?;
    println!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff);
    Ok(())
}

/// `bakery outbox relay`.
pub async fn relay(
    args: &RelayArgs,
    open: impl AsyncFnOnce(&str) -> Result<Arc<dyn VersionedStore>, CliError>,
) -> Result<(), CliError> {
    let mut relay = Relay::connect(&args.from, &args.slot)
        .await
        .map_err(|e| CliError::with_context(e, format!("source {}", bakery::redact(&args.from))))?;
    if let Some(prefix) = &args.prefix {
        relay = relay.prefix(prefix)?;
    }
    let (stats, consumer) = if args.to == "-" {
        let mut sink = JsonLines::new(std::io::stdout());
        let stats = relay
            .run(&mut sink, args.batch, args.poll, args.exit_when_idle)
            .await?;
        (stats, String::new())
    } else {
        let store = open(&args.to).await?;
        let name = args.consumer.as_deref().unwrap_or(&args.slot);
        let mut sink = ConsumerSink::digest(Consumer::builder(store, name).build()?);
        let stats = relay
            .run(&mut sink, args.batch, args.poll, args.exit_when_idle)
            .await?;
        (
            stats,
            format!(": {} applied, {} duplicates", sink.applied, sink.duplicates),
        )
    };
    eprintln!(
        "bakery: outbox relay: {} messages delivered in {} transactions ({} batches){consumer}",
        stats.delivered, stats.transactions, stats.batches
    );
    Ok(())
}

/// `bakery outbox show`.
pub async fn show(
    store: Arc<dyn VersionedStore>,
    args: &ShowArgs,
    json: bool,
) -> Result<(), CliError> {
    let consumer = Consumer::builder(store, &args.consumer).build()?;
    let (mark, digest) = output::found(consumer.state::<Digest>(&args.partition).await?, || {
        format!(
            "consumer {} has no partition {}",
            args.consumer, args.partition
        )
    })?;
    let value = json.then(
        || serde_json::json!({ "mark": mark.to_string(), "count": digest.count, "sha256": digest.sha256 }),
    );
    output::print(value, |out| {
        writeln!(out, "mark:   {mark}")?;
        writeln!(out, "count:  {}", digest.count)?;
        writeln!(out, "sha256: {}", digest.sha256)
    })
}
