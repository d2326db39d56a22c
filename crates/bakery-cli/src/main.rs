//! `bakery`: sequences, fair locks, fencing, Lamport simulations and
//! benchmarks from the shell, on any backend bakery supports.
//!
//! Exit status: 0 success, 1 runtime error (one line on stderr), 2 usage error.

#[cfg(feature = "bench")]
mod bench;
mod cli;
mod lamport;
mod leader;
mod lock;
#[cfg(feature = "migrate")]
mod migrate;
#[cfg(not(all(
    feature = "bench",
    feature = "migrate",
    feature = "outbox",
    feature = "prometheus",
    feature = "serve"
)))]
mod missing;
mod once;
#[cfg(feature = "outbox")]
mod outbox;
mod output;
mod rwlock;
mod semaphore;
mod seq;
#[cfg(feature = "serve")]
mod serve;
mod snowflake;
mod verify;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bakery::VersionedStore;
use bakery_core::{Operation, RetryPolicy, RetryStore};

use crate::cli::{Cli, Command, SeqCommand};
use crate::lock::{FenceCommand, LockCommand};
use crate::output::CliError;

fn main() -> ExitCode {
    output::install_panic_hook();
    install_logging();
    let cli = cli::parse();
    // Benchmark clients run in parallel on every core, as separate client
    // processes would; everything else is one thread.
    let mut builder = match &cli.command {
        #[cfg(feature = "bench")]
        Command::Bench(args) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if let Some(threads) = args.worker_threads {
                builder.worker_threads(usize::from(threads));
            }
            builder
        }
        // A service answers its clients on every core.
        #[cfg(feature = "serve")]
        Command::Serve(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            output::report(&CliError::Message(format!(
                "cannot start the async runtime: {err}"
            )));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): stop quietly.
        Err(err) if err.is_broken_pipe() => ExitCode::SUCCESS,
        Err(CliError::Exit(code)) => ExitCode::from(code),
        Err(err) => {
            output::report(&err);
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    if let Some(addr) = cli.metrics_addr {
        serve_metrics(addr)?;
    }
    match &cli.command {
        Command::Backends => backends(cli.json),
        // Simulated processes only: no store is opened.
        Command::Lamport(lamport::LamportCommand::Simulate(args)) => {
            lamport::simulate(args, cli.json)
        }
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::run(args, cli.json).await,
        #[cfg(not(feature = "bench"))]
        Command::Bench(_) => Err(missing::refuse("bench", "bench")),
        Command::Lock(command) => {
            let store = open_named(&cli, command.name()).await?;
            exited(match command {
                LockCommand::Run(args) => lock::run(store, args).await?,
                LockCommand::Try(args) => lock::try_run(store, args).await?,
                LockCommand::Show { name } => return lock::show(&*store, name, cli.json).await,
            })
        }
        Command::Leader(command) => {
            let store = open_named(&cli, command.name()).await?;
            exited(match command {
                leader::LeaderCommand::Run(args) => leader::run(store, args).await?,
                leader::LeaderCommand::Show { name } => {
                    return leader::show(store, name, cli.json).await
                }
            })
        }
        Command::Semaphore(command) => {
            let store = open_named(&cli, command.name()).await?;
            exited(match command {
                semaphore::SemaphoreCommand::Run(args) => semaphore::run(store, args).await?,
                semaphore::SemaphoreCommand::Show { name } => {
                    return semaphore::show(&*store, name, cli.json).await
                }
            })
        }
        Command::Rwlock(command) => {
            let store = open_named(&cli, command.name()).await?;
            exited(match command {
                rwlock::RwlockCommand::Read(args) => rwlock::run(store, args, false).await?,
                rwlock::RwlockCommand::Write(args) => rwlock::run(store, args, true).await?,
                rwlock::RwlockCommand::Show { name } => {
                    return rwlock::show(&*store, name, cli.json).await
                }
            })
        }
        Command::Fence(command) => {
            let name = match command {
                FenceCommand::Read(args) => &args.name,
                FenceCommand::Write(args) => &args.name,
            };
            let store = open_named(&cli, name).await?;
            match command {
                FenceCommand::Read(args) => lock::fence_read(store, args, cli.json).await,
                FenceCommand::Write(args) => lock::fence_write(store, args).await,
            }
        }
        Command::Once(command) => {
            let (key, scope) = match command {
                once::OnceCommand::Run(args) => (&args.key, &args.scope),
                once::OnceCommand::Show(args) | once::OnceCommand::Forget(args) => {
                    (&args.key, &args.scope)
                }
            };
            bakery::validate_name(key)?;
            bakery::validate_name(scope)?;
            let (store, _) = open(cli.uri.as_deref(), cli.retries).await?;
            match command {
                once::OnceCommand::Run(args) => exited(once::run(store, args).await?),
                once::OnceCommand::Show(args) => once::show(store, args, cli.json).await,
                once::OnceCommand::Forget(args) => once::forget(store, args).await,
            }
        }
        #[cfg(not(feature = "outbox"))]
        Command::Outbox(_) => Err(missing::refuse("outbox", "outbox")),
        #[cfg(feature = "outbox")]
        Command::Outbox(outbox::OutboxCommand::Emit(args)) => outbox::emit_one(args).await,
        #[cfg(feature = "outbox")]
        Command::Outbox(outbox::OutboxCommand::Relay(args)) => {
            outbox::relay(args, async |uri: &str| {
                Ok(open(Some(uri), cli.retries).await?.0)
            })
            .await
        }
        #[cfg(feature = "outbox")]
        Command::Outbox(outbox::OutboxCommand::Show(args)) => {
            let (store, _) = open(cli.uri.as_deref(), cli.retries).await?;
            outbox::show(store, args, cli.json).await
        }
        Command::Verify(args) => {
            let (store, _) = open(cli.uri.as_deref(), cli.retries).await?;
            verify::run(store, args, cli.json).await
        }
        #[cfg(feature = "serve")]
        Command::Serve(args) => {
            // Its /metrics shows the store's calls.
            METRICS_SERVED.store(true, Ordering::Relaxed);
            let (store, _) = open(cli.uri.as_deref(), cli.retries).await?;
            serve::run(store, args).await
        }
        #[cfg(not(feature = "serve"))]
        Command::Serve(_) => Err(missing::refuse("serve", "serve")),
        #[cfg(feature = "migrate")]
        Command::Migrate(args) => {
            let (store, _) = open(cli.uri.as_deref(), cli.retries).await?;
            migrate::run(store, args, cli.json).await
        }
        #[cfg(not(feature = "migrate"))]
        Command::Migrate(_) => Err(missing::refuse("migrate", "migrate")),
        Command::Snowflake(command) => {
            if let Some(name) = command.name() {
                bakery::validate_name(name)?;
            }
            let open_store = async || Ok(open(cli.uri.as_deref(), cli.retries).await?.0);
            match command {
                snowflake::SnowflakeCommand::Next(args) => {
                    snowflake::next(open_store().await?, args, cli.json).await
                }
                snowflake::SnowflakeCommand::Decode(args) => {
                    snowflake::decode(open_store, args, cli.json).await
                }
                snowflake::SnowflakeCommand::Layout(args) => {
                    snowflake::layout(open_store, args, cli.json).await
                }
            }
        }
        Command::Seq(SeqCommand::Next(args)) => {
            let store = open_named(&cli, &args.name).await?;
            seq::next(store, args, cli.json).await
        }
        Command::Seq(SeqCommand::Show(args)) => {
            bakery::validate_name(&args.name)?;
            let (store, shown_uri) = open(cli.uri.as_deref(), cli.retries).await?;
            seq::show(&*store, &shown_uri, args, cli.json).await
        }
    }
}

/// Check `name` before touching (or creating) any store, then open the
/// store of `cli`.
async fn open_named(cli: &Cli, name: &str) -> Result<Arc<dyn VersionedStore>, CliError> {
    bakery::validate_name(name)?;
    Ok(open(cli.uri.as_deref(), cli.retries).await?.0)
}

/// A command's exit status as `run`'s result: 0 is success, any other
/// status is passed on.
fn exited(status: u8) -> Result<(), CliError> {
    match status {
        0 => Ok(()),
        code => Err(CliError::Exit(code)),
    }
}

/// Connect to `uri`, or to the default SQLite file (creating its directory).
/// Also returns the URI with any password hidden, for display.
///
/// With `retries` above 0 (`--retries`, 4 by default), opening the store
/// and every call of the store returned are retried up to `retries` times
/// when they fail before taking effect ([`ErrorKind::Unavailable`]: a
/// connection refused or reset, a busy server), never when a write's
/// outcome is unknown. Through a fault proxy that resets half of the
/// connections to PostgreSQL, 126 of 240 `bakery seq next` calls failed
/// without it, every one while connecting, and 8 of 240 with it
/// (tests/retry.rs).
///
/// [`ErrorKind::Unavailable`]: bakery::ErrorKind::Unavailable
/// With `BAKERY_LOG` set (e.g. `warn`, `bakery=debug`), log to stderr what
/// the library reports through `tracing`: retries, lost locks, evictions.
/// Off by default, so an error stays one line on stderr.
fn install_logging() {
    let Ok(directives) = std::env::var("BAKERY_LOG") else {
        return;
    };
    let filter = match tracing_subscriber::EnvFilter::try_new(&directives) {
        Ok(filter) => filter,
        Err(err) => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "bakery: BAKERY_LOG={directives:?} is not a log filter ({err}); logging off"
            );
            return;
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Set once metrics are served (`--metrics-addr`, or `bakery serve`'s
/// `/metrics`): stores are opened metered.
static METRICS_SERVED: AtomicBool = AtomicBool::new(false);

/// Serve Prometheus metrics at `addr` from this runtime.
#[cfg(feature = "prometheus")]
fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), CliError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| CliError::Message(format!("cannot serve metrics at {addr}: {e}")))?;
    METRICS_SERVED.store(true, Ordering::Relaxed);
    Ok(())
}

/// `--metrics-addr` on a build without the exporter.
#[cfg(not(feature = "prometheus"))]
fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), CliError> {
    let _ = addr;
    Err(missing::refuse("--metrics-addr", "prometheus"))
}

async fn open(
    uri: Option<&str>,
    retries: u32,
) -> Result<(Arc<dyn VersionedStore>, String), CliError> {
    let uri = match uri {
        Some(uri) => uri.to_owned(),
        None => default_uri()?,
    };
    let shown = bakery::redact(&uri);
    let policy = RetryPolicy::default().max_attempts(retries.saturating_add(1));
    // Opening only reads, or creates the table if it is missing: as safe
    // to repeat as a refused call.
    match policy
        .retry(Operation::Open, || bakery::connect(&uri))
        .await
    {
        Ok(store) => {
            // Metrics inside the retries: every attempt is counted.
            let store: Arc<dyn VersionedStore> = if METRICS_SERVED.load(Ordering::Relaxed) {
                Arc::new(bakery::MetricsStore::new(store))
            } else {
                store
            };
            if retries == 0 {
                Ok((store, shown))
            } else {
                Ok((Arc::new(RetryStore::new(store, policy)), shown))
            }
        }
        Err(err) => Err(CliError::with_context(err, format!("store {shown}"))),
    }
}

/// `sqlite://<data dir>/bakery/bakery.db`, with the directory created.
fn default_uri() -> Result<String, CliError> {
    if !bakery::schemes().contains(&"sqlite") {
        return Err(CliError::Message(format!(
            "no --uri given and the default backend (sqlite) is not compiled in; compiled in: {}",
            bakery::schemes().join(", ")
        )));
    }
    let path = cli::default_db_path();
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|err| {
            CliError::Message(format!(
                "cannot create the data directory {}: {err} (or pass --uri)",
                dir.display()
            ))
        })?;
    }
    bakery::sqlite_uri(&path).ok_or_else(|| {
        CliError::Message(format!(
            "the default database path {} is not valid UTF-8; pass --uri",
            path.display()
        ))
    })
}

/// `bakery backends`: the URI schemes of this build.
fn backends(json: bool) -> Result<(), CliError> {
    let schemes = bakery::schemes();
    let value = json.then(|| serde_json::json!({ "schemes": schemes }));
    output::print(value, |out| {
        for scheme in &schemes {
            writeln!(out, "{scheme}")?;
        }
        Ok(())
    })
}
