//! `bakery snowflake next|decode|layout`: time-ordered 64-bit ids on a
//! leased worker id, from the shell.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bakery::snowflake::{format_unix_ms, Clock, Decoded, Layout, Snowflake, SystemClock};
use bakery::VersionedStore;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::lock::parse_duration;
use crate::output::{self, CliError, MAX_COUNT};

/// Ids generated between two writes to stdout (no store call is waited
/// for while stdout is locked).
const CHUNK: u64 = 65_536;

/// `bakery snowflake …`
#[derive(Debug, Subcommand)]
pub enum SnowflakeCommand {
    /// Print the next ids of snowflake NAME, one per line.
    ///
    /// Takes the lowest free worker id (a leased slot in the store; waits,
    /// at most --wait, when every one is held), prints the ids, and gives
    /// the worker id back. Ids are unique across every process using the
    /// store, strictly increasing within one call, and ordered by time
    /// across machines to within their clocks' difference.
    Next(NextArgs),

    /// Take an id apart: its time, worker id and sequence.
    Decode(DecodeArgs),

    /// Show a layout: its fields, its capacity and until when it lasts.
    /// Exits 1 if it cannot work or lasts less than 10 years from now.
    Layout(LayoutCommandArgs),
}

impl SnowflakeCommand {
    /// The snowflake the command names in the store, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            SnowflakeCommand::Next(args) => Some(&args.name),
            SnowflakeCommand::Decode(args) => args.stored.name.as_deref(),
            SnowflakeCommand::Layout(args) => args.stored.name.as_deref(),
        }
    }
}

/// The layout options shared by the subcommands.
#[derive(Debug, Clone, Args)]
pub struct LayoutArgs {
    /// The epoch the timestamp counts from (RFC 3339).
    #[arg(long, value_name = "TIME", default_value = "2026-01-01T00:00:00Z", value_parser = parse_epoch)]
    pub epoch: u64,

    /// The length of one tick of the timestamp (whole milliseconds).
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = parse_tick)]
    pub tick: u64,

    /// Bits of the timestamp.
    #[arg(long, value_name = "BITS", default_value_t = 41)]
    pub timestamp_bits: u32,

    /// Bits of the worker id: 2^BITS processes at once.
    #[arg(long, value_name = "BITS", default_value_t = 10)]
    pub worker_bits: u32,

    /// Bits of the sequence: 2^BITS ids per tick per worker.
    #[arg(long, value_name = "BITS", default_value_t = 12)]
    pub sequence_bits: u32,
}

impl LayoutArgs {
    /// The layout the options give (not checked yet).
    pub fn layout(&self) -> Layout {
        Layout::default()
            .epoch(self.epoch)
            .unit_ms(self.tick)
            .timestamp_bits(self.timestamp_bits)
            .worker_bits(self.worker_bits)
            .sequence_bits(self.sequence_bits)
    }
}

/// `--name`: read the layout of a stored snowflake instead.
#[derive(Debug, Clone, Args)]
pub struct StoredLayout {
    /// Use the layout stored for snowflake NAME (the layout options are
    /// then ignored).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
}

/// Arguments of `bakery snowflake next`.
#[derive(Debug, Args)]
pub struct NextArgs {
    /// Snowflake name: ASCII letters, digits and `_ - . : @ + =` (no `/`).
    pub name: String,

    /// How many ids to print (1 to 10000000).
    #[arg(
        short = 'n',
        long,
        default_value_t = 1,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..=MAX_COUNT)
    )]
    pub count: u64,

    #[command(flatten)]
    pub layout: LayoutArgs,

    /// How long the worker id survives this process's silence.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub lease: Duration,

    /// How long to wait for a worker id when every one is held.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub wait: Duration,

    /// How long to wait for a clock that is behind the last tick the
    /// worker id used, before failing.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub max_clock_wait: Duration,
}

/// Arguments of `bakery snowflake decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The id.
    pub id: u64,

    #[command(flatten)]
    pub layout: LayoutArgs,

    #[command(flatten)]
    pub stored: StoredLayout,
}

/// Arguments of `bakery snowflake layout`.
#[derive(Debug, Args)]
pub struct LayoutCommandArgs {
    #[command(flatten)]
    pub layout: LayoutArgs,

    #[command(flatten)]
    pub stored: StoredLayout,
}

fn parse_epoch(text: &str) -> Result<u64, String> {
    let time = humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("{e} (e.g. 2026-01-01T00:00:00Z)"))?;
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "before 1970".to_string())?;
    u64::try_from(since.as_millis()).map_err(|_| "too far in the future".to_string())
}

fn parse_tick(text: &str) -> Result<u64, String> {
    let tick = parse_duration(text)?;
    if tick.subsec_nanos() % 1_000_000 != 0 {
        return Err("must be whole milliseconds".into());
    }
    u64::try_from(tick.as_millis()).map_err(|_| "too long".to_string())
}

/// The layout a command works with: the stored one of `--name`, or the
/// options'.
async fn layout_of(
    open: impl AsyncFnOnce() -> Result<Arc<dyn VersionedStore>, CliError>,
    layout: &LayoutArgs,
    stored: &StoredLayout,
) -> Result<Layout, CliError> {
    match &stored.name {
        Some(name) => {
            let store = open().await?;
            output::found(Snowflake::stored_layout(&*store, name).await?, || {
                format!("snowflake {name} does not exist")
            })
        }
        None => Ok(layout.layout()),
    }
}

/// `bakery snowflake next`.
pub async fn next(
    store: Arc<dyn VersionedStore>,
    args: &NextArgs,
    json: bool,
) -> Result<(), CliError> {
    let ids = Snowflake::builder(store, &args.name)
        .layout(args.layout.layout())
        .lease(args.lease)
        .acquire_timeout(args.wait)
        .max_clock_wait(args.max_clock_wait)
        .build()?;
    let mut left = args.count;
    let mut first = true;
    let result = async {
        while left > 0 {
            let chunk = ids.next_batch(CHUNK.min(left)).await?;
            left -= chunk.len();
            let mut out = output::stdout();
            if json {
                if first {
                    out.write_all(b"{\"name\":")?;
                    serde_json::to_writer(&mut out, ids.name()).map_err(std::io::Error::from)?;
                    write!(
                        out,
                        ",\"worker\":{},\"ids\":[",
                        ids.worker().unwrap_or_default()
                    )?;
                }
                for (i, id) in chunk.iter().enumerate() {
                    if !first || i > 0 {
                        out.write_all(b",")?;
                    }
                    write!(out, "{id}")?;
                }
                if left == 0 {
                    out.write_all(b"]}\n")?;
                }
            } else {
                for id in chunk.iter() {
                    writeln!(out, "{id}")?;
                }
            }
            out.flush()?;
            first = false;
        }
        Ok::<(), CliError>(())
    }
    .await;
    // Give the worker id back even when printing failed (a closed pipe).
    let released = ids.release().await;
    result?;
    released?;
    Ok(())
}

/// `bakery snowflake decode`.
pub async fn decode(
    open: impl AsyncFnOnce() -> Result<Arc<dyn VersionedStore>, CliError>,
    args: &DecodeArgs,
    json: bool,
) -> Result<(), CliError> {
    let layout = layout_of(open, &args.layout, &args.stored).await?;
    let parts: Decoded = layout.decode(args.id);
    let value = output::json_if(json, || {
        Ok(json!({
            "id": parts.id,
            "time": format_unix_ms(parts.unix_ms),
            "unix_ms": parts.unix_ms,
            "tick": parts.tick,
            "worker": parts.worker,
            "sequence": parts.sequence,
        }))
    })?;
    output::print(value, |out| {
        writeln!(out, "id        {}", parts.id)?;
        writeln!(out, "time      {}", format_unix_ms(parts.unix_ms))?;
        writeln!(out, "worker    {}", parts.worker)?;
        writeln!(out, "sequence  {}", parts.sequence)?;
        writeln!(out, "tick      {}", parts.tick)
    })
}

/// `bakery snowflake layout`.
pub async fn layout(
    open: impl AsyncFnOnce() -> Result<Arc<dyn VersionedStore>, CliError>,
    args: &LayoutCommandArgs,
    json: bool,
) -> Result<(), CliError> {
    let layout = layout_of(open, &args.layout, &args.stored).await?;
    let now = SystemClock.unix_ms();
    let checked = layout.check_at(now);
    let (t, w, s) = layout.bits();
    let per_second = layout.ids_per_tick() as f64 * 1000.0 / layout.unit().max(1) as f64;
    let years = layout.years_left(now);
    let value = output::json_if(json, || {
        Ok(json!({
            "epoch": format_unix_ms(layout.epoch_ms()),
            "tick_ms": layout.unit(),
            "timestamp_bits": t,
            "worker_bits": w,
            "sequence_bits": s,
            "workers": layout.workers(),
            "ids_per_tick": layout.ids_per_tick(),
            "ids_per_second_per_worker": per_second,
            "ends": format_unix_ms(layout.ends_ms()),
            "years_left": years,
            "ok": checked.is_ok(),
        }))
    })?;
    output::print(value, |out| {
        writeln!(
            out,
            "bits      {t} timestamp + {w} worker + {s} sequence (+ sign bit 0)"
        )?;
        writeln!(out, "epoch     {}", format_unix_ms(layout.epoch_ms()))?;
        writeln!(out, "tick      {} ms", layout.unit())?;
        writeln!(out, "workers   {} at once", layout.workers())?;
        writeln!(
            out,
            "ids       {} per tick per worker ({per_second:.0}/s)",
            layout.ids_per_tick()
        )?;
        writeln!(
            out,
            "lasts     until {} ({years:.1} years from now)",
            format_unix_ms(layout.ends_ms())
        )
    })?;
    checked.map_err(CliError::from)
}
