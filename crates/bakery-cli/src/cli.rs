//! Command-line surface: the clap types, and where the default store lives.

use std::path::PathBuf;

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::output::MAX_COUNT;

/// `--retries` when not given: [`bakery_core::RetryPolicy`]'s default of
/// five attempts in all.
pub const DEFAULT_RETRIES: u32 = 4;

/// The most `--retries` accepted (the 10 s limit ends them sooner anyway).
pub const MAX_RETRIES: u32 = 100;

/// Unique monotonic sequences and fair distributed locks on the database you
/// already run, from the shell.
///
/// Every command works on one store, named by a URI (`--uri` or `BAKERY_URI`).
/// Without one, bakery uses an embedded SQLite file (see below), which is
/// safe to share between processes on this machine.
#[derive(Debug, Parser)]
#[command(name = "bakery", version)]
pub struct Cli {
    /// Store to use, e.g. `sqlite:///var/lib/app/bakery.db` or `memory://`
    /// (`bakery backends` lists the schemes of this build). Default: the
    /// embedded SQLite file (path computed at run time, see `command()`).
    #[arg(
        long,
        global = true,
        env = "BAKERY_URI",
        hide_env_values = true,
        value_name = "URI",
        display_order = 100
    )]
    pub uri: Option<String>,

    /// Print JSON instead of plain text.
    #[arg(long, global = true, display_order = 101)]
    pub json: bool,

    /// Retry opening the store, and each store call, that failed before it
    /// could take effect (connection refused or reset, server busy) up to N
    /// times, with jittered exponential backoff from 50 ms to 2 s, none
    /// starting after 10 s. 0: never retry. A write whose reply was lost
    /// (its outcome unknown) is never retried. Not used by `bench`.
    #[arg(
        long,
        global = true,
        env = "BAKERY_RETRIES",
        value_name = "N",
        default_value_t = DEFAULT_RETRIES,
        value_parser = clap::value_parser!(u32).range(0..=MAX_RETRIES as i64),
        display_order = 102
    )]
    pub retries: u32,

    /// Serve Prometheus metrics at http://ADDR/metrics while the command
    /// runs (e.g. `127.0.0.1:9464`): the store calls (`bakery_store_*`) and
    /// the recipes' (`bakery_lock_*`, `bakery_sequence_*`). For the
    /// long-running commands: `lock run`, `leader run`, `outbox relay`.
    #[arg(
        long,
        global = true,
        env = "BAKERY_METRICS_ADDR",
        value_name = "ADDR",
        display_order = 103
    )]
    pub metrics_addr: Option<std::net::SocketAddr>,

    #[command(subcommand)]
    pub command: Command,
}

/// The top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sequences: unique, strictly increasing ids shared by every process
    /// that uses the same store.
    #[command(subcommand)]
    Seq(SeqCommand),

    /// Time-ordered 64-bit ids (Snowflake): timestamp, worker id, sequence;
    /// the worker id a lease in the store, so no two processes share one.
    #[command(subcommand)]
    Snowflake(crate::snowflake::SnowflakeCommand),

    /// Fair distributed locks: run a command while holding a lock, granted
    /// in the order requested, with a lease and a fencing token.
    #[command(subcommand)]
    Lock(crate::lock::LockCommand),

    /// Leader election: run a command while leading, candidates served in
    /// the order they campaigned, each term a fencing token.
    #[command(subcommand)]
    Leader(crate::leader::LeaderCommand),

    /// Counting semaphores: run a command while holding one of N leased
    /// permits, granted in the order requested, each with a fencing token.
    #[command(subcommand)]
    Semaphore(crate::semaphore::SemaphoreCommand),

    /// Read-write locks: run a command while holding a lock shared with
    /// other readers, or exclusively as the writer (writers are not
    /// starved), each grant with a lease and a fencing token.
    #[command(subcommand)]
    Rwlock(crate::rwlock::RwlockCommand),

    /// Fenced values: writes carrying a lock's fencing token, refused when
    /// a newer holder has written.
    #[command(subcommand)]
    Fence(crate::lock::FenceCommand),

    /// Run a command at most once per key across every machine sharing the
    /// store, and replay its output and exit status to later callers.
    #[command(subcommand)]
    Once(crate::once::OnceCommand),

    /// A PostgreSQL transactional outbox: messages written into the WAL by
    /// the producer's own transaction, relayed in commit order and applied
    /// exactly once into any bakery store.
    #[cfg(feature = "outbox")]
    #[command(subcommand)]
    Outbox(crate::outbox::OutboxCommand),
    /// A PostgreSQL transactional outbox (not in this build: cargo feature
    /// `outbox`).
    #[cfg(not(feature = "outbox"))]
    Outbox(crate::missing::Missing),

    /// Lamport clocks and Lamport's distributed mutual exclusion, simulated
    /// (no store involved).
    #[command(subcommand)]
    Lamport(crate::lamport::LamportCommand),

    /// Move PostgreSQL sequences (serial, identity) or MariaDB
    /// AUTO_INCREMENT tables and sequences onto bakery sequences in the
    /// store `--uri` names, with no id handed out twice.
    ///
    /// Shows the plan unless --apply is given. With --apply each generator
    /// is fenced first (a forgotten writer gets an error, never a colliding
    /// id), read under the fence, and its bakery sequence is created or
    /// raised above it — never lowered. Running it again changes nothing.
    /// --rollback hands the generators back. Exit status 0 only when every
    /// selected generator is safe.
    #[cfg(feature = "migrate")]
    Migrate(crate::migrate::MigrateArgs),
    /// Move PostgreSQL or MariaDB generators onto bakery sequences (not in
    /// this build: cargo feature `migrate`).
    #[cfg(not(feature = "migrate"))]
    Migrate(crate::missing::Missing),

    /// Serve the store's sequences, locks, semaphores, RW locks, elections,
    /// fenced values and idempotency keys over HTTP/JSON (and Leaf's and
    /// Tinyid's routes) to programs in any language; prints `listening on
    /// http://ADDR` once it accepts calls; on Ctrl-C or SIGTERM ends its
    /// sessions (releasing their grants) and finishes the calls in flight.
    #[cfg(feature = "serve")]
    Serve(crate::serve::ServeArgs),
    /// Serve ids, locks and idempotency over HTTP/JSON (not in this build:
    /// cargo feature `serve`).
    #[cfg(not(feature = "serve"))]
    Serve(crate::missing::Missing),

    /// Check a store as bakery's own tests check every backend: concurrent
    /// recorded workloads, then every compare-and-set checked for
    /// linearizability, sequence ids for duplicates, fenced writes for
    /// stale tokens and lock grants for FIFO order.
    ///
    /// Run it against your own deployment and settings. Exit status 0 only
    /// when every check holds; on a failure the recorded history is written
    /// to a file. Its rows stay under a `verify-…` namespace.
    Verify(crate::verify::VerifyArgs),
    /// List the URI schemes compiled into this build.
    Backends,

    /// Benchmark stores side by side: throughput, latency percentiles,
    /// round trips per operation, with native peers as reference.
    #[cfg(feature = "bench")]
    #[command(long_about = crate::bench::LONG_ABOUT)]
    Bench(crate::bench::BenchArgs),
    /// Benchmark stores side by side (not in this build: cargo feature
    /// `bench`).
    #[cfg(not(feature = "bench"))]
    Bench(crate::missing::Missing),
}

/// `bakery seq …`
#[derive(Debug, Subcommand)]
pub enum SeqCommand {
    /// Hand out the next ids of a sequence, one per line.
    ///
    /// The ids are unique across every process and machine using the same
    /// store and strictly increasing within one call. The sequence is created
    /// on first use, starting at 1. Ids are reserved in blocks; the part of a
    /// block this process does not print is never handed out (a gap).
    Next(NextArgs),

    /// Show the stored state of a sequence (next unreserved id, last
    /// reserving node, row version, block size). Exits 1 if it does not exist.
    Show(ShowArgs),
}

/// Arguments of `bakery seq next`.
#[derive(Debug, Args)]
pub struct NextArgs {
    /// Sequence name: ASCII letters, digits and `_ - . : @ + =` (no `/`).
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

    /// Ids reserved per write to the store (recorded in the sequence row).
    /// Default: the --count, so this process reserves exactly what it prints,
    /// in one write. A smaller block makes ceil(count / block) writes, each of
    /// one block; a block larger than --count leaves the rest unused (a gap).
    #[arg(
        short = 'b',
        long,
        value_name = "B",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub block_size: Option<u64>,
}

/// Arguments of `bakery seq show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Sequence name.
    pub name: String,
}

/// The embedded SQLite file used when no URI is given:
/// `<data dir>/bakery/bakery.db` (`$XDG_DATA_HOME` or `~/.local/share` on
/// Linux), or `./bakery.db` when the platform has no data directory.
pub fn default_db_path() -> PathBuf {
    match dirs::data_dir() {
        Some(dir) => dir.join("bakery").join("bakery.db"),
        None => PathBuf::from("bakery.db"),
    }
}

/// Text shown after the options of `bakery --help` / `bakery -h`.
fn after_help() -> String {
    format!(
        "Default store (no --uri, no BAKERY_URI):\n  \
         {}\n\n\
         Exit status: 0 success (also when the reader of stdout goes away early),\n  \
         1 runtime error (one line on stderr: `bakery: error: ...`), 2 usage error.",
        {
            let path = default_db_path();
            bakery::sqlite_uri(&path).unwrap_or_else(|| format!("sqlite://{}", path.display()))
        }
    )
}

/// The clap command with the computed help text attached (the default
/// database path depends on the platform and the environment).
pub fn command() -> clap::Command {
    let default = default_db_path();
    let uri_help = format!(
        "Store URI, e.g. `sqlite:///var/lib/app/bakery.db` or `memory://` \
         (schemes: `bakery backends`). Default: the SQLite file {}",
        default.display()
    );
    Cli::command()
        .mut_arg("uri", |arg| arg.help(uri_help))
        .after_help(after_help())
}

/// Parse the process arguments; on a usage error (or `--help`/`--version`)
/// clap prints and exits with its own status (2, or 0 for help).
///
/// For `bench`, this is also where the `--uri` values' source is recorded
/// (typed, or from BAKERY_URI): clap knows it only here.
pub fn parse() -> Cli {
    match from_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(err) => err.format(&mut command()).exit(),
    }
}

/// The [`Cli`] of parsed arguments, with what the derived parser cannot
/// carry: where `bench`'s `--uri` values came from.
fn from_matches(matches: &ArgMatches) -> Result<Cli, clap::Error> {
    #[cfg_attr(not(feature = "bench"), allow(unused_mut))]
    let mut cli = Cli::from_arg_matches(matches)?;
    #[cfg(feature = "bench")]
    if let (Command::Bench(args), Some(("bench", bench))) = (&mut cli.command, matches.subcommand())
    {
        args.uri_source = bench.value_source("uri");
    }
    Ok(cli)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn count_is_bounded() {
        let parse = |args: &[&str]| {
            command()
                .try_get_matches_from(args)
                .and_then(|m| Cli::from_arg_matches(&m))
        };
        assert!(parse(&["bakery", "seq", "next", "x", "--count", "0"]).is_err());
        assert!(parse(&["bakery", "seq", "next", "x", "--count", "10000001"]).is_err());
        assert!(parse(&["bakery", "seq", "next", "x", "--count", "10000000"]).is_ok());
        assert!(parse(&["bakery", "seq", "next", "x", "--block-size", "0"]).is_err());
        assert!(parse(&["bakery", "--retries", "-1", "seq", "next", "x"]).is_err());
        assert!(parse(&["bakery", "seq", "next", "x", "--retries", "101"]).is_err());
        let retries = |args: &[&str]| {
            parse(args)
                .map(|cli| cli.retries)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            retries(&["bakery", "seq", "next", "x"]),
            Ok(DEFAULT_RETRIES)
        );
        assert_eq!(
            retries(&["bakery", "seq", "next", "x", "--retries", "0"]),
            Ok(0)
        );
        assert_eq!(
            retries(&["bakery", "--retries", "7", "lock", "show", "x"]),
            Ok(7)
        );
        let cli = parse(&["bakery", "seq", "next", "x", "--json"]).map_err(|e| e.to_string());
        match cli {
            Ok(Cli {
                json: true,
                command: Command::Seq(SeqCommand::Next(args)),
                ..
            }) => {
                assert_eq!(args.count, 1);
                assert_eq!(args.block_size, None);
            }
            other => panic!("unexpected parse: {other:?}"),
        }
    }

    #[cfg(feature = "bench")]
    #[test]
    fn bench_knows_where_its_uris_came_from() {
        use clap::parser::ValueSource;
        let source = |args: &[&str]| {
            let matches = command()
                .try_get_matches_from(args)
                .map_err(|e| e.to_string());
            match from_matches(&matches.expect("parses")).map_err(|e| e.to_string()) {
                Ok(Cli {
                    command: Command::Bench(args),
                    ..
                }) => (args.uri_source, args.uris),
                other => panic!("unexpected parse: {other:?}"),
            }
        };
        let typed = Some(ValueSource::CommandLine);
        let memory = vec!["memory://".to_string()];
        assert_eq!(source(&["bakery", "bench"]), (None, Vec::new()));
        assert_eq!(
            source(&["bakery", "bench", "--uri", "memory://"]),
            (typed, memory.clone())
        );
        // The global option before the subcommand is typed too.
        assert_eq!(
            source(&["bakery", "--uri", "memory://", "bench"]),
            (typed, memory)
        );
    }

    /// Every subcommand path (`["lock", "run"]`) with its long options.
    fn vocabulary() -> Vec<(Vec<String>, Vec<String>)> {
        fn walk(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, Vec<String>)>) {
            let longs = cmd
                .get_arguments()
                .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                .collect();
            out.push((path.clone(), longs));
            for sub in cmd.get_subcommands() {
                let mut path = path.clone();
                path.push(sub.get_name().to_string());
                walk(sub, path, out);
            }
        }
        let mut out = Vec::new();
        walk(&command(), Vec::new(), &mut out);
        out
    }

    fn value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just(String::new()),
            Just("0".to_string()),
            Just("-1".to_string()),
            Just("0s".to_string()),
            Just("10s".to_string()),
            Just("99999999999999h".to_string()),
            Just("18446744073709551616".to_string()),
            Just("memory://".to_string()),
            Just("sqlite::memory:".to_string()),
            Just("nosuch://x".to_string()),
            Just("a=b".to_string()),
            Just("--".to_string()),
            "\\PC{0,16}",
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 1_000, ..Default::default() })]

        /// Any argument list built from the real subcommands and options,
        /// with random values (and random words), is parsed or refused
        /// with a usage error: never a panic.
        #[test]
        fn random_command_lines_parse_or_are_usage_errors(
            which in proptest::prelude::any::<proptest::sample::Index>(),
            options in proptest::collection::vec(
                (proptest::prelude::any::<proptest::sample::Index>(), value(), proptest::prelude::any::<bool>()),
                0..6,
            ),
        ) {
            let vocabulary = vocabulary();
            let (path, longs) = &vocabulary[which.index(vocabulary.len())];
            let mut args = vec!["bakery".to_string()];
            args.extend(path.iter().cloned());
            for (option, value, as_word) in options {
                if as_word || longs.is_empty() {
                    args.push(value);
                } else {
                    args.push(longs[option.index(longs.len())].clone());
                    args.push(value);
                }
            }
            // Either outcome is fine; a panic fails the test.
            let _ = command().try_get_matches_from(&args).and_then(|m| from_matches(&m));
        }
    }
}
