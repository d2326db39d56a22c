//! `bakery serve` under load, measured side by side in one run on one
//! machine, the load generator on loopback:
//!
//! - (a) single-id `POST /v1/sequences/{name}/next` against `GET /healthz`
//!   of the same server (a constant body: the HTTP floor), at 1 and 64
//!   keep-alive connections;
//! - (b) a thin client that reserves blocks (`/reserve?size=N`) and hands
//!   the ids out from memory;
//! - (c) lock acquire + release over HTTP at 1, 4 and 16 clients, each with
//!   its own session, against the same lock in this process
//!   (`bakery::Lock` on the same store);
//! - (d) with `--client NAME=COMMAND`, the clients in other languages
//!   (clients/): ids from reserved blocks and lock acquire + release, each
//!   client's own bench, a process of its own against the same server.
//!
//! On a SQLite file in a temporary directory, on memory://, and on
//! PostgreSQL when `BAKERY_POSTGRES_URI` is set (or on the `--uri` given).
//! The server is `target/release/bakery serve`, a process of its own: the
//! measured server is the one operators run, with its own runtime, and the
//! generator's tasks never share its worker threads.
//!
//! ```sh
//! cargo build --release -p bakery-cli --features serve
//! cargo bench -p bakery-serve --bench serve -- [--duration 5s] [--out FILE]
//! ```
//!
//! Prints the Markdown section of docs/BENCHMARKS.md (scripts/bench-serve.sh
//! puts it there) and exits non-zero when a check failed (an id twice,
//! overlapping blocks, two holders at once, a token not above the one
//! before) or a cell could not run.

mod args;
mod blocks;
mod clients;
mod cpu;
mod http;
mod load;
mod locks;
mod report;
mod server;
mod stats;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bakery::{Key, VersionedStore};

use crate::args::{Args, USAGE};
use crate::blocks::BlockCell;
use crate::load::{LoadCell, Route};
use crate::locks::{GrpcLocks, HttpLocks, InProcessLocks, LockCell};
use crate::report::{Run, StoreRun};
use crate::server::Server;

/// The acquire timeout of the HTTP lock clients (the API's default wait).
const ACQUIRE_TIMEOUT: Duration = bakery_serve::DEFAULT_WAIT;

/// The HTTP lock clients' session TTL: the API's default, or longer than a
/// cell and its setup, so that no keepalive is needed while they measure.
fn session_ttl(args: &Args) -> Duration {
    (args.warmup + args.duration + Duration::from_secs(30))
        .clamp(bakery_serve::DEFAULT_TTL, bakery_serve::MAX_TTL)
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("serve bench: {err}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if !args.bench {
        eprintln!(
            "serve bench: not run (only `cargo bench -p bakery-serve --bench serve` runs it)"
        );
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads)
        .enable_all()
        .build()
        .expect("the load generator's tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(failures) if failures.is_empty() => ExitCode::SUCCESS,
        Ok(failures) => {
            for failure in failures {
                eprintln!("serve bench: FAILED: {failure}");
            }
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("serve bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Run every store's cells, print the report; the failures (broken
/// guarantees, cells that could not run) come back.
async fn run(args: Args) -> Result<Vec<String>, String> {
    let binary = server::binary(args.bakery.as_deref())?;
    let scratch = tempfile::tempdir().map_err(|err| format!("a temporary directory: {err}"))?;
    let uris = if args.uris.is_empty() {
        let mut uris = vec![
            format!("sqlite://{}/serve-bench.db", scratch.path().display()),
            "memory://".to_string(),
        ];
        if let Some(postgres) = std::env::var("BAKERY_POSTGRES_URI")
            .ok()
            .filter(|uri| !uri.is_empty())
        {
            uris.push(postgres);
        }
        uris
    } else {
        args.uris.clone()
    };
    let mut run = Run::begin(&args);
    let tag = format!(
        "{:x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    );
    for uri in &uris {
        run.stores
            .push(measure_store(&args, &binary, uri, &tag).await);
    }
    run.finish();
    let markdown = report::markdown(&run);
    print!("{markdown}");
    let failures = run.failures();
    if let Some(out) = &args.out {
        if failures.is_empty() {
            std::fs::write(out, &markdown)
                .map_err(|err| format!("writing {}: {err}", out.display()))?;
            eprintln!("serve bench: wrote {}", out.display());
        } else {
            eprintln!("serve bench: {} left alone: the run failed", out.display());
        }
    }
    Ok(failures)
}

/// Every cell of one store, round after round. A round starts a server and
/// runs the server's cells (single ids against the floor, the thin
/// client, the lock over HTTP), stops it, then runs the in-process lock's
/// cells: nothing else uses the store meanwhile. A slower or busier moment
/// of the machine then falls on one round of every cell, and each cell is
/// shown by its median round. A cell that cannot run is noted, not fatal.
async fn measure_store(args: &Args, binary: &std::path::Path, uri: &str, tag: &str) -> StoreRun {
    let mut store = StoreRun::new(uri);
    let label = store.label.clone();
    for round in 1..=args.rounds {
        eprintln!(
            "serve bench: {label}: round {round}: starting {} serve",
            binary.display()
        );
        match Server::start(binary, uri).await {
            Ok(server) => {
                measure_server(args, server.addr, &mut store, tag, round).await;
                if let Err(err) = server.stop().await {
                    store.failed.push(err);
                }
            }
            Err(err) => {
                store.failed.push(err);
                break;
            }
        }
        match bakery::connect(uri).await {
            Ok(connected) => {
                measure_in_process(args, &connected, &mut store, tag, round).await;
                if round == args.rounds {
                    for name in &store.sequences {
                        delete_quietly(&connected, bakery::sequence::KEY_PREFIX, name).await;
                    }
                    for name in &store.lock_names {
                        delete_quietly(&connected, bakery::lock::KEY_PREFIX, name).await;
                    }
                }
            }
            Err(err) => store.failed.push(format!("connecting in process: {err}")),
        }
    }
    store
}

/// One round of the server's cells.
async fn measure_server(
    args: &Args,
    addr: std::net::SocketAddr,
    store: &mut StoreRun,
    tag: &str,
    round: usize,
) {
    let label = store.label.clone();
    for connections in args.connection_counts() {
        // The floor, then the ids, each on a fresh sequence.
        for route in [Route::Floor, Route::Next] {
            let name = format!("serve-bench-{tag}-{label}-next-{connections}-{round}");
            let cell = load::run(
                addr,
                route,
                round,
                &name,
                connections,
                args.warmup,
                args.duration,
            )
            .await;
            if route == Route::Next {
                store.sequences.push(name);
            }
            if let Some(cell) = noted(&mut store.failed, &label, cell) {
                progress_load(&label, &cell);
                store.loads.push(cell);
            }
        }
    }
    for &size in &args.block_sizes {
        let name = format!("serve-bench-{tag}-{label}-block-{size}-{round}");
        let cell = blocks::run(addr, &name, size, round, args.warmup, args.duration).await;
        store.sequences.push(name);
        if let Some(cell) = noted(&mut store.failed, &label, cell) {
            progress_block(&label, &cell);
            store.blocks.push(cell);
        }
    }
    let http = HttpLocks {
        addr,
        ttl: session_ttl(args),
        timeout: ACQUIRE_TIMEOUT,
    };
    let grpc = GrpcLocks {
        addr,
        ttl: session_ttl(args),
        timeout: ACQUIRE_TIMEOUT,
    };
    for &clients in &args.lock_clients {
        let name = format!("serve-bench-{tag}-{label}-http-{clients}-{round}");
        let cell = locks::run(&http, &name, clients, round, args.warmup, args.duration).await;
        store.lock_names.push(name);
        if let Some(cell) = noted(&mut store.failed, &label, cell) {
            progress_lock(&label, &cell);
            store.http_locks.push(cell);
        }
        let name = format!("serve-bench-{tag}-{label}-grpc-{clients}-{round}");
        let cell = locks::run(&grpc, &name, clients, round, args.warmup, args.duration).await;
        store.lock_names.push(name);
        if let Some(cell) = noted(&mut store.failed, &label, cell) {
            progress_lock(&label, &cell);
            store.grpc_locks.push(cell);
        }
    }
    for (client, command) in &args.clients {
        let cell = clients::run(addr, client, command, args.duration).await;
        if let Some(cell) = noted(&mut store.failed, &label, cell) {
            eprintln!(
                "serve bench: {label}: round {round}: {client} client: {} ids/s (blocks of {}), {} lock ops/s",
                report::rate(cell.ids_per_sec),
                cell.block,
                report::rate(cell.lock_pairs_per_sec)
            );
            store.clients.push(cell);
        }
    }
}

/// One round of the in-process lock's cells, the server stopped.
async fn measure_in_process(
    args: &Args,
    connected: &Arc<dyn VersionedStore>,
    store: &mut StoreRun,
    tag: &str,
    round: usize,
) {
    let label = store.label.clone();
    for per_acquire in [false, true] {
        let target = InProcessLocks {
            store: connected.clone(),
            per_acquire,
        };
        let kind = if per_acquire { "built" } else { "local" };
        for &clients in &args.lock_clients {
            let name = format!("serve-bench-{tag}-{label}-{kind}-{clients}-{round}");
            let cell = locks::run(&target, &name, clients, round, args.warmup, args.duration).await;
            store.lock_names.push(name);
            if let Some(cell) = noted(&mut store.failed, &label, cell) {
                progress_lock(&label, &cell);
                if per_acquire {
                    store.service_locks.push(cell);
                } else {
                    store.local_locks.push(cell);
                }
            }
        }
    }
}

/// The cell, or its error noted among the store's failures.
fn noted<T>(failed: &mut Vec<String>, label: &str, cell: Result<T, String>) -> Option<T> {
    match cell {
        Ok(cell) => Some(cell),
        Err(err) => {
            eprintln!("serve bench: {label}: a cell could not run: {err}");
            failed.push(err);
            None
        }
    }
}

fn progress_load(label: &str, cell: &LoadCell) {
    eprintln!(
        "serve bench: {label}: round {}: {} × {}: {}/s, p50 {}, p99 {}, {} errors, {} ids checked",
        cell.round,
        cell.route.label(),
        cell.connections,
        report::rate(cell.per_sec),
        report::nanos(cell.tally.at(0.5)),
        report::nanos(cell.tally.at(0.99)),
        cell.tally.errors,
        cell.ids
    );
}

fn progress_block(label: &str, cell: &BlockCell) {
    eprintln!(
        "serve bench: {label}: round {}: thin client, blocks of {}: {} ids/s ({} ids), {} reservations, {} errors",
        cell.round,
        cell.size,
        report::rate(cell.per_sec),
        cell.ids,
        cell.reserves.count(),
        cell.reserves.errors
    );
}

fn progress_lock(label: &str, cell: &LockCell) {
    eprintln!(
        "serve bench: {label}: round {}: {} × {}: {}/s, p50 {}, p99 {}, {} errors",
        cell.round,
        cell.implementation,
        cell.clients,
        report::rate(cell.per_sec),
        report::nanos(cell.tally.at(0.5)),
        report::nanos(cell.tally.at(0.99)),
        cell.tally.errors
    );
}

/// Remove a row the bench made (best effort: on a throwaway store it does
/// not matter, on a shared server it keeps the table small).
async fn delete_quietly(store: &Arc<dyn VersionedStore>, prefix: &str, name: &str) {
    let Ok(key) = Key::with_prefix(prefix, name) else {
        return;
    };
    if let Ok(Some(row)) = store.get(&key).await {
        let _ = store.delete_if_version(&key, row.version).await;
    }
}
