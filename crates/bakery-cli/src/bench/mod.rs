//! `bakery bench`: the same workloads on every given store, side by side,
//! with native peers (PostgreSQL `nextval()`, Redis `INCRBY`) as reference.
//!
//! Layout: the clap arguments and the entry point are here; [`session`]
//! runs the cells, [`runner`] times one cell, the workloads live in one
//! file each ([`cas`], [`sequence`]; registered in [`workload::registry`]),
//! the native peers in [`peers`], and [`report`] renders the results
//! (console tables, JSON, SVG, Markdown).

mod cas;
mod checks;
mod error;
mod lock;
mod machine;
mod peers;
mod report;
mod runner;
mod sequence;
mod session;
mod stats;
mod versions;
mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args, ValueEnum};

use crate::output::{self, CliError};
use error::BenchError;
use report::Report;
use session::Plan;

/// The most clients one cell may have.
const MAX_CLIENTS: u32 = 1024;
/// The shortest and longest `--duration`.
const MIN_DURATION: Duration = Duration::from_millis(10);
const MAX_DURATION: Duration = Duration::from_secs(3600);

/// The long help of `bakery bench` (`bakery bench --help`).
pub const LONG_ABOUT: &str = "\
Benchmark stores side by side: the same workloads, clients and duration on \
every --uri, with native peers as reference.

Each cell (store × workload × --clients count) runs for --duration after one \
untimed warm-up operation per client, and reports throughput, latency \
p50/p99/p999 (every operation timed into an HDR histogram), store round trips \
per operation (the store is wrapped in a CountingStore), conflicts per \
operation, errors, and the fairness of the clients' shares. Workloads: `cas` \
(read-modify-write increments with put_if_version, on one shared key and on a \
key per client) and `sequence` (next() from a Sequence handle per client, \
--block-size ids per reservation, background prefetch on) and `lock` (acquire + \
release of one lock by every client: the fair FIFO lock with and without store \
notifications, and the old try-and-back-off lock; fairness is Jain's \
index over the clients' grants, plus the longest run of grants to one \
client). When a postgres, redis or etcd URI is given (and that backend is \
compiled in), the native peers run in the same tables, one connection per \
client: PostgreSQL nextval() (plain, and with CACHE --block-size) and Redis \
INCRBY for sequences; PostgreSQL advisory locks and etcd's own lock for \
locks. At the end the performance targets are checked (met / not met; \
never an error).

Without --uri, bench measures `memory://` and the embedded SQLite backend on a \
fresh file in a temporary directory — never your data, and BAKERY_URI is \
ignored. Every key (under bench/ and seq/bench-), sequence and native object \
a cell creates has a name unique to the run and is deleted afterwards (best \
effort); a deleted key leaves its tombstone (last version) behind, as every \
bakery key does.

--out DIR writes results.json (every number, plus machine, server versions \
and settings), report.md (the full Markdown report; scripts/bench-report.sh \
turns it into docs/BENCHMARKS.md), and SVG charts (throughput by clients, \
latency distributions). A progress bar runs on stderr when it is a terminal.

Exit status: 0 when every cell ran without errors, 1 when some operation \
failed (the tables are still printed) or a store cannot be opened, 2 on a \
usage error.

Examples:
  bakery bench
  bakery bench --workload sequence --clients 1,8 --duration 2s
  bakery bench --uri postgres://app@db/app --uri redis://127.0.0.1/0 --out bench-out";

/// Arguments of `bakery bench` (its help text is [`LONG_ABOUT`]).
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Store to benchmark; repeat for several. Default: `memory://` and a
    /// temporary SQLite file.
    // The id is the global `--uri`'s, so this definition replaces it for
    // `bench` (one value there, a list here).
    #[arg(id = "uri", long = "uri", value_name = "URI")]
    pub uris: Vec<String>,

    /// Workload(s) to run: cas, sequence, lock, or all.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "all",
        value_name = "WORKLOAD"
    )]
    pub workload: Vec<WorkloadChoice>,

    /// Concurrent clients, one cell per count: `--clients 1,4,16`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,16",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLIENTS))
    )]
    pub clients: Vec<u32>,

    /// Timed part of each cell: `500ms`, `2s`, `1m` (10ms to 1h).
    #[arg(long, default_value = "1s", value_name = "D", value_parser = parse_duration)]
    pub duration: Duration,

    /// Ids a sequence reserves per store write (also the CACHE of the
    /// cached `nextval()` peer).
    #[arg(
        long,
        default_value_t = 1000,
        value_name = "B",
        value_parser = clap::value_parser!(u64).range(1..=1_000_000_000)
    )]
    pub block_size: u64,

    /// Write results.json, report.md and SVG charts into this directory
    /// (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// A value of `--workload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadChoice {
    /// Increments with put_if_version.
    Cas,
    /// Sequence::next().
    Sequence,
    /// Lock acquire + release: the fair lock (with and without store
    /// notifications) and the old try-and-back-off lock.
    Lock,
    /// Every available workload.
    All,
}

impl WorkloadChoice {
    fn name(self) -> &'static str {
        match self {
            WorkloadChoice::Cas => "cas",
            WorkloadChoice::Sequence => "sequence",
            WorkloadChoice::Lock => "lock",
            WorkloadChoice::All => "all",
        }
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("{e} (expected e.g. 500ms, 2s, 1m)"))?;
    if duration < MIN_DURATION || duration > MAX_DURATION {
        return Err(format!(
            "must be from {} to {}",
            humantime::format_duration(MIN_DURATION),
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(duration)
}

/// Run `bakery bench`: measure, print the tables (or the JSON with
/// `--json`), write `--out`.
pub async fn run(args: &BenchArgs, json: bool) -> Result<(), CliError> {
    let plan = plan(args)?;
    // The clients need a multi-threaded runtime of their own (the CLI's is
    // single-threaded); it runs on a blocking thread of the CLI's runtime.
    let report = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| BenchError::Internal(format!("cannot start the async runtime: {e}")))?;
        runtime.block_on(session::execute(plan))
    })
    .await
    .map_err(|e| BenchError::Internal(format!("the benchmark thread died: {e}")))??;

    let charts = match &args.out {
        Some(dir) => write_files(&report, dir)?,
        None => Vec::new(),
    };
    print(&report, json, args.out.as_deref(), &charts)?;
    match report.cells_with_errors() {
        0 => Ok(()),
        cells => Err(BenchError::CellsHadErrors {
            cells,
            written: args.out.clone(),
        }
        .into()),
    }
}

/// Check the arguments and resolve the defaults.
fn plan(args: &BenchArgs) -> Result<Plan, CliError> {
    let registry = workload::registry();
    let available = || {
        registry
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut wanted: Vec<&'static str> = Vec::new();
    for choice in &args.workload {
        let names: Vec<&'static str> = match choice {
            WorkloadChoice::All => registry.iter().map(|w| w.name()).collect(),
            one => vec![one.name()],
        };
        for name in names {
            if !registry.iter().any(|w| w.name() == name) {
                return Err(BenchError::NotAvailable {
                    name,
                    available: available(),
                }
                .into());
            }
            if !wanted.contains(&name) {
                wanted.push(name);
            }
        }
    }
    let workloads = registry
        .into_iter()
        .filter(|w| wanted.contains(&w.name()))
        .collect();

    let mut clients: Vec<usize> = args.clients.iter().map(|&n| n as usize).collect();
    clients.sort_unstable();
    clients.dedup();

    let mut uris = args.uris.clone();
    if !uris.is_empty() && uri_came_from_environment() {
        eprintln!("bakery: note: bench ignores BAKERY_URI; pass --uri to benchmark that store");
        uris.clear();
    }
    let mut scratch = None;
    if uris.is_empty() {
        uris.push("memory://".to_string());
        if bakery::schemes().contains(&"sqlite") {
            let dir = tempfile::Builder::new()
                .prefix("bakery-bench-")
                .tempdir()
                .map_err(|e| {
                    CliError::Message(format!("cannot create a temporary directory: {e}"))
                })?;
            let file = dir.path().join("bench.db");
            let uri = crate::cli::sqlite_uri(&file).ok_or_else(|| {
                CliError::Message(format!(
                    "the temporary path {} is not valid UTF-8; pass --uri",
                    file.display()
                ))
            })?;
            uris.push(uri);
            scratch = Some(dir);
        }
    }

    Ok(Plan {
        workloads,
        uris,
        clients,
        duration: args.duration,
        block_size: args.block_size,
        command: command_line(),
        scratch,
    })
}

/// True when `bench`'s `--uri` values came from BAKERY_URI: clap hands the
/// global option's environment value down to `bench`, whose default must
/// stay the throwaway stores (a benchmark must not load a store by accident).
/// The parsed arguments do not say where a value came from, so this asks
/// clap again about the same command line.
fn uri_came_from_environment() -> bool {
    let Ok(matches) = crate::cli::command().try_get_matches_from(std::env::args_os()) else {
        return false;
    };
    matches
        .subcommand_matches("bench")
        .and_then(|bench| bench.value_source("uri"))
        == Some(ValueSource::EnvVariable)
}

/// The command line as typed, passwords hidden, arguments with spaces or
/// shell characters quoted.
fn command_line() -> String {
    let mut words: Vec<String> = vec!["bakery".to_string()];
    words.extend(std::env::args_os().skip(1).map(|arg| {
        let arg = bakery::redact(&arg.to_string_lossy());
        let plain = arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
        if plain && !arg.is_empty() {
            arg
        } else {
            format!("'{}'", arg.replace('\'', r"'\''"))
        }
    }));
    words.join(" ")
}

/// results.json, the charts and report.md into `dir`; returns the chart
/// file names.
fn write_files(report: &Report, dir: &std::path::Path) -> Result<Vec<String>, BenchError> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    report::json::write(report, dir)?;
    let charts = report::svg::write_all(report, dir)?;
    report::markdown::write(report, &charts, dir)?;
    Ok(charts)
}

/// The console output: the report as JSON, or the tables.
fn print(
    report: &Report,
    json: bool,
    out: Option<&std::path::Path>,
    charts: &[String],
) -> Result<(), CliError> {
    let mut stdout = output::stdout();
    if json {
        writeln!(stdout, "{}", report::json::to_string(report)?)?;
        stdout.flush()?;
        return Ok(());
    }
    writeln!(
        stdout,
        "bakery bench: {} per cell; {}",
        humantime::format_duration(Duration::from_millis(report.settings.duration_ms)),
        report.machine.one_line()
    )?;
    writeln!(stdout)?;
    write!(stdout, "{}", report::table::targets_table(report).to_text())?;
    for workload in &report.workloads {
        writeln!(stdout)?;
        writeln!(stdout, "{}", workload.title)?;
        write!(
            stdout,
            "{}",
            report::table::workload_table(report, workload).to_text()
        )?;
    }
    let errors = report::table::error_lines(report);
    if !errors.is_empty() {
        writeln!(stdout)?;
        writeln!(stdout, "errors")?;
        for line in errors {
            writeln!(stdout, "  {line}")?;
        }
    }
    writeln!(stdout)?;
    writeln!(stdout, "targets (measured, never asserted)")?;
    write!(stdout, "{}", report::table::checks_table(report).to_text())?;
    if let Some(dir) = out {
        writeln!(stdout)?;
        writeln!(
            stdout,
            "wrote {}: {}, {}, {}",
            dir.display(),
            report::json::FILE,
            report::markdown::FILE,
            charts.join(", ")
        )?;
    }
    stdout.flush()?;
    Ok(())
}
