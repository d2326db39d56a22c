//! `bakery bench`: the command-line front of the benchmark framework
//! ([`bakery_bench`]): the arguments, which stores to measure, the plan,
//! the console output and the exit status. Everything that measures and
//! reports lives in the framework.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bakery_bench::process::WorkerCommand;
use bakery_bench::report::{self, text::Written};
use bakery_bench::{BenchError, Plan, ProcessPlan, Report};
use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::parser::ValueSource;
use clap::Args;

use crate::output::{self, CliError};

/// The most clients one cell may have.
const MAX_CLIENTS: u32 = 1024;
/// The most rounds of cells one run may have.
const MAX_ROUNDS: i64 = 25;
/// The shortest and longest `--duration`.
const MIN_DURATION: Duration = Duration::from_millis(10);
const MAX_DURATION: Duration = Duration::from_secs(3600);

/// The long help of `bakery bench` (`bakery bench --help`).
pub const LONG_ABOUT: &str = "\
Benchmark stores side by side: the same workloads, clients and duration on \
every --uri, with native peers as reference.

Each cell (store × workload × --clients count) runs for --duration after one \
untimed warm-up operation per client (--rounds times, interleaved, reporting \
its median round), and reports throughput, latency \
p50/p99/p999 (every operation timed into an HDR histogram), store round trips \
per operation (the store is wrapped in a CountingStore), conflicts per \
operation, errors, and the fairness of the clients' shares. Workloads: `cas` \
(read-modify-write increments with put_if_version, on one shared key, on a \
key per client, and on a key per client with 4 KiB rows: what the store \
charges for a larger row) and `sequence` (next() from a Sequence handle per client with \
the default settings, in one process and as a node each) and `lock` (acquire + \
release of one lock by every client: the fair FIFO lock with and without store \
notifications, and the old try-and-back-off lock; fairness is Jain's \
index over the clients' grants, plus the longest run of grants to one \
client while another was asking and the mean size of the rows written), `rwlock` \
(write() or read() + release of one RwLock by every client: client 0, 4, 8, … \
writes, the others read; no writer may overlap another grant, readers may \
overlap each other), `once` (Idempotency::run on a new key and on a completed one), \
`consumer` (Consumer::process of increasing keys, a partition per client \
and one shared partition) and `outbox` (a message emitted in its own \
PostgreSQL transaction until the relay applied it to a consumer on the \
store; needs a postgres --uri as the source, otherwise skipped with the \
reason). When a postgres, redis or etcd URI is given (and that backend is \
compiled in), the native peers run in the same tables, one connection per \
client: PostgreSQL nextval() (plain, and with CACHE --block-size) and Redis \
INCRBY for sequences; PostgreSQL advisory locks, the Redis lock a user \
writes (SET NX PX tried with a jittered back-off, a Lua compare-and-delete \
release) and etcd's own lock for locks (and, beside memory://, tokio::sync::Mutex and a strict FIFO lock on \
tokio oneshots whose hand-off is the runtime's own); a PostgreSQL processed-keys table (INSERT … ON CONFLICT and the \
state update in one transaction, and as one statement) for the consumer. \
At the end the performance targets are checked (met / not met; \
never an error).

Without --uri, bench measures `memory://` and the embedded SQLite backend on a \
fresh file in a temporary directory — never your data, and BAKERY_URI is \
ignored. Every key (under bench/, seq/bench-, once/bench- and \
consumer/bench-), sequence, table, replication slot and native object a cell \
creates has a name unique to the run and is deleted afterwards (best \
effort); a deleted key leaves its tombstone (last version) behind, as every \
bakery key does.

--out DIR writes results.json (every number, plus machine, server versions \
and settings), report.md (the full Markdown report; scripts/bench-report.sh \
turns it into docs/BENCHMARKS.md), and SVG charts (throughput by clients, \
latency distributions). A progress bar runs on stderr when it is a terminal.

Exit status: 0 when every cell ran without errors, 1 when some operation \
failed (the tables are still printed) or a store cannot be opened, 2 on a \
usage error. With --allow-errors, failed operations (a timeout under \
contention, an outage) only show in the `errors` column, and 1 means a \
failed check: overlapping grants, an id twice, a lost increment.

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

    /// Where the `--uri` values came from (clap's `value_source`), recorded
    /// by `cli::parse`: only values typed on the command line are measured.
    #[arg(skip)]
    pub uri_source: Option<ValueSource>,

    /// Workload(s) to run, comma-separated, or all.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = bakery_bench::ALL_WORKLOADS,
        value_name = "WORKLOAD",
        value_parser = workload_parser()
    )]
    pub workload: Vec<String>,

    /// Concurrent clients, one cell per count: `--clients 1,4,16`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,16",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLIENTS))
    )]
    pub clients: Vec<u32>,

    /// Timed part of each cell: `500ms`, `2s`, `1m` (10ms to 1h). A cell
    /// runs on until its clients did one operation each on average, a lock
    /// cell until they have 5 grants each (at most 5 × D): fewer cannot
    /// show whether the lock is fair.
    #[arg(long, default_value = "1s", value_name = "D", value_parser = parse_duration)]
    pub duration: Duration,

    /// Run every cell N times, in interleaved rounds (every cell once, then
    /// every cell again, …), and report each cell's median round; the
    /// results keep every round's rate, and the lock-scaling target shows
    /// its spread. For a shared or noisy machine: a burst of load then
    /// spoils one round of many cells, not the one run of a cell.
    #[arg(
        long,
        default_value_t = 1,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=MAX_ROUNDS)
    )]
    pub rounds: u32,

    /// The CACHE of the cached `nextval()` peer (bakery's sequence runs
    /// with its default, adaptive block).
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

    /// Worker threads of the async runtime the clients run on. Default:
    /// the runtime's (one per core, or `TOKIO_WORKER_THREADS`). An
    /// application with one thread sees in-process hand-offs without the
    /// cost of moving tasks between threads; results.json records the
    /// count the run had.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub worker_threads: Option<u16>,

    /// Also run the lock, rwlock and sequence cells (and their native peers)
    /// across processes, one cell per count: `--processes 1,4,16,64`. Each
    /// client is then an OS process of its own (this binary again, with
    /// its own connection and a runtime of --worker-threads, default 1),
    /// all started at one instant; the parent merges their figures and
    /// checks their grants and ids together (no overlap, a reader never
    /// beside a writer, no lost increment of a shared counter, fencing
    /// tokens in grant order, no id twice).
    /// Needs stores the processes share (not memory://).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLIENTS))
    )]
    pub processes: Vec<u32>,

    /// Exit 0 although operations failed, as long as no cell failed a
    /// check (overlapping grants, duplicate ids, a lost increment): the
    /// failures are figures of the run (the `errors` column), not a broken
    /// guarantee.
    #[arg(long)]
    pub allow_errors: bool,

    /// A MariaDB or MySQL server, `mysql://user:password@host:port/db`,
    /// whose `GET_LOCK()` + `RELEASE_LOCK()` (prepared once, a connection
    /// per client) is measured as a lock peer beside every PostgreSQL
    /// `--uri`, in process and across processes. Needs a bakery built with
    /// the `mariadb` feature.
    #[arg(long, value_name = "URL")]
    pub mariadb: Option<String>,

    /// Run as a worker process of a cell across processes: the job on
    /// stdin, the outcome on stdout (started by `--processes`, not by
    /// hand).
    #[arg(long, hide = true)]
    pub worker: bool,
}

/// The values of `--workload`: the framework's registry, then `all`.
fn workload_parser() -> PossibleValuesParser {
    let mut values: Vec<PossibleValue> = bakery_bench::workloads::registry()
        .iter()
        .map(|w| PossibleValue::new(w.name).help(w.summary))
        .collect();
    values.push(PossibleValue::new(bakery_bench::ALL_WORKLOADS).help("Every available workload."));
    PossibleValuesParser::new(values)
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
/// `--json`), write `--out`. Exits 1 when some cell had errors (after
/// printing and writing everything).
pub async fn run(args: &BenchArgs, json: bool) -> Result<(), CliError> {
    if args.worker {
        bakery_bench::process::worker_on_stdio().await?;
        return Ok(());
    }
    let report = bakery_bench::run(plan(args)?).await?;
    let charts = match &args.out {
        Some(dir) => report::write_files(&report, dir)?,
        None => Vec::new(),
    };
    print(&report, json, args.out.as_deref(), &charts)?;
    let written = match &args.out {
        Some(dir) => format!("; results written to {}", dir.display()),
        None => String::new(),
    };
    let errors = report.cells_with_errors();
    let verdict = verdict(report.cells_with_violations(), errors, args.allow_errors);
    if verdict.is_ok() && errors > 0 {
        eprintln!(
            "bakery: note: {errors} of the measured cells had failed operations (see the `errors` column); no check failed"
        );
    }
    verdict.map_err(|message| CliError::Message(format!("{message}{written})")))
}

/// The exit of a run whose `violations` cells failed a check and `errors`
/// cells had errors: an error message (to be closed with a parenthesis)
/// unless it passes.
fn verdict(violations: usize, errors: usize, allow_errors: bool) -> Result<(), String> {
    match (violations, errors) {
        (0, 0) => Ok(()),
        (0, _) if allow_errors => Ok(()),
        (0, cells) => Err(format!(
            "{cells} of the measured cells had errors (see the `errors` column"
        )),
        (cells, _) => Err(format!(
            "{cells} of the measured cells failed a check: overlapping grants, an id twice or a lost increment (see the `errors` column"
        )),
    }
}

/// The framework's plan from the arguments. The stores are the `--uri`
/// values typed on the command line (before or after `bench`); a value
/// from BAKERY_URI is ignored: a benchmark must not load a store by
/// accident, so without `--uri` it measures throwaway stores.
fn plan(args: &BenchArgs) -> Result<Plan, CliError> {
    let uris = if args.uri_source == Some(ValueSource::CommandLine) {
        args.uris.clone()
    } else {
        if !args.uris.is_empty() {
            eprintln!("bakery: note: bench ignores BAKERY_URI; pass --uri to benchmark that store");
        }
        Vec::new()
    };
    let processes = if args.processes.is_empty() {
        None
    } else {
        let program = std::env::current_exe().map_err(|e| {
            CliError::Message(format!(
                "--processes: cannot find this program to re-run: {e}"
            ))
        })?;
        let threads = args.worker_threads.unwrap_or(1);
        Some(ProcessPlan {
            counts: args.processes.iter().map(|&n| n as usize).collect(),
            worker: WorkerCommand {
                program,
                args: vec![
                    "bench".into(),
                    "--worker".into(),
                    "--worker-threads".into(),
                    threads.to_string(),
                ],
            },
        })
    };
    let mariadb = args.mariadb.as_deref().map(mariadb_peer).transpose()?;
    if mariadb.is_some() && !uris.iter().any(|uri| uri.starts_with("postgres")) {
        eprintln!("bakery: note: --mariadb runs beside a PostgreSQL --uri; there is none");
    }
    Ok(Plan {
        workloads: args.workload.clone(),
        uris,
        clients: args.clients.iter().map(|&n| n as usize).collect(),
        duration: args.duration,
        rounds: args.rounds as usize,
        block_size: args.block_size,
        command: command_line(),
        progress: true,
        processes,
        mariadb,
    })
}

/// The `--mariadb` server, refused unless it is a `mysql://` or
/// `mariadb://` URL and this build has the peer.
fn mariadb_peer(url: &str) -> Result<String, CliError> {
    if !(url.starts_with("mysql://") || url.starts_with("mariadb://")) {
        return Err(CliError::Message(format!(
            "--mariadb {}: not a mysql:// or mariadb:// URL",
            bakery::redact(url)
        )));
    }
    if !cfg!(feature = "mariadb") {
        return Err(CliError::Message(
            "--mariadb: this bakery was built without the `mariadb` feature (build with `--features mariadb`)"
                .into(),
        ));
    }
    Ok(url.to_string())
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

/// The console output: the report as JSON, or the tables.
fn print(
    report: &Report,
    json: bool,
    out: Option<&Path>,
    charts: &[String],
) -> Result<(), CliError> {
    let mut stdout = output::stdout();
    if json {
        writeln!(stdout, "{}", report::json::to_string(report)?)?;
    } else {
        let written = out.map(|dir| Written { dir, charts });
        write!(stdout, "{}", report::text::render(report, written))?;
    }
    stdout.flush()?;
    Ok(())
}

impl From<BenchError> for CliError {
    fn from(err: BenchError) -> Self {
        match err {
            BenchError::Store { target, source } => {
                CliError::with_context(source, format!("store {target}"))
            }
            other => CliError::Message(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::verdict;

    #[test]
    fn failed_operations_pass_only_when_allowed_and_a_failed_check_never() {
        assert!(verdict(0, 0, false).is_ok());
        assert!(verdict(0, 3, false).is_err());
        assert!(verdict(0, 3, true).is_ok());
        for allow in [false, true] {
            let refused = verdict(1, 3, allow).expect_err("a failed check");
            assert!(refused.contains("failed a check"), "{refused}");
        }
    }
}
