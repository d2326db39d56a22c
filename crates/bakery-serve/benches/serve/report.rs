//! The run's results and its Markdown section of docs/BENCHMARKS.md (the
//! machine table and number formats of `bakery bench`'s report).

use std::fmt::Write as _;
use std::time::SystemTime;

use bakery_bench::machine::Machine;

use crate::args::Args;
use crate::blocks::BlockCell;
use crate::clients::ClientCell;
use crate::cpu::Sample;
use crate::load::{LoadCell, Route};
use crate::locks::LockCell;

pub use bakery_bench::format::{nanos, rate};

/// Goals of issue 51: single ids at this share of the floor and this rate
/// (64 connections), the thin client's ids/s, and what the lock service may
/// add per HTTP call (in loopback round trips).
const FLOOR_SHARE: f64 = 0.7;
const NEXT_PER_SEC: f64 = 50_000.0;
const BLOCK_IDS_PER_SEC: f64 = 10_000_000.0;
const ADDED_ROUND_TRIPS: f64 = 1.0;

/// The whole run.
pub struct Run {
    pub args: Args,
    pub started: SystemTime,
    pub finished: SystemTime,
    pub machine: Machine,
    /// `/proc/loadavg`'s three load averages when the run began.
    pub load: Option<String>,
    cpu_start: Option<Sample>,
    /// CPUs other processes kept busy during the run, on average.
    pub others: Option<f64>,
    pub stores: Vec<StoreRun>,
}

/// One store's cells.
pub struct StoreRun {
    /// The scheme: sqlite, memory, postgres.
    pub label: String,
    /// The URI, password redacted; a temporary SQLite file is shown as such.
    pub shown_uri: String,
    pub loads: Vec<LoadCell>,
    pub blocks: Vec<BlockCell>,
    pub http_locks: Vec<LockCell>,
    pub grpc_locks: Vec<LockCell>,
    pub local_locks: Vec<LockCell>,
    /// The in-process lock used as the service uses it (a handle per
    /// acquire): where the service's cost beyond HTTP comes from.
    pub service_locks: Vec<LockCell>,
    /// The clients in other languages, against the same server.
    pub clients: Vec<ClientCell>,
    /// Cells that could not run, and a server that did not stop cleanly.
    pub failed: Vec<String>,
    /// The sequences and locks the cells made (deleted afterwards).
    pub sequences: Vec<String>,
    pub lock_names: Vec<String>,
}

impl StoreRun {
    /// Every lock cell: HTTP, gRPC, in process, built per acquire.
    fn lock_cells(&self) -> impl Iterator<Item = &LockCell> {
        (self.http_locks.iter())
            .chain(&self.grpc_locks)
            .chain(&self.local_locks)
            .chain(&self.service_locks)
    }
}

impl StoreRun {
    pub fn new(uri: &str) -> StoreRun {
        let label = uri.split_once("://").map_or(uri, |(scheme, _)| scheme);
        let label = match label {
            "postgresql" => "postgres",
            other => other,
        };
        let shown_uri = if label == "sqlite" && uri.contains("/serve-bench.db") {
            "sqlite://$TMPDIR/…/serve-bench.db (a fresh file)".to_string()
        } else {
            bakery::redact(uri)
        };
        StoreRun {
            label: label.to_string(),
            shown_uri,
            loads: Vec::new(),
            blocks: Vec::new(),
            http_locks: Vec::new(),
            grpc_locks: Vec::new(),
            local_locks: Vec::new(),
            service_locks: Vec::new(),
            clients: Vec::new(),
            failed: Vec::new(),
            sequences: Vec::new(),
            lock_names: Vec::new(),
        }
    }

    /// The median round of a single-id or floor cell.
    fn load(&self, route: Route, connections: usize) -> Option<&LoadCell> {
        median(
            self.loads
                .iter()
                .filter(|cell| cell.route == route && cell.connections == connections),
            |cell| cell.per_sec,
        )
    }

    /// The median round of a thin-client cell.
    fn block(&self, size: u64) -> Option<&BlockCell> {
        median(
            self.blocks.iter().filter(|cell| cell.size == size),
            |cell| cell.per_sec,
        )
    }

    /// One loopback HTTP round trip: the floor's p50 at one connection.
    fn round_trip_ns(&self) -> Option<u64> {
        self.load(Route::Floor, 1).map(|cell| cell.tally.at(0.5))
    }
}

impl Run {
    pub fn begin(args: &Args) -> Run {
        Run {
            args: args.clone(),
            started: SystemTime::now(),
            finished: SystemTime::now(),
            machine: Machine::detect(),
            load: std::fs::read_to_string("/proc/loadavg").ok().map(|line| {
                line.split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
            stores: Vec::new(),
            cpu_start: Sample::now(),
            others: None,
        }
    }

    pub fn finish(&mut self) {
        self.finished = SystemTime::now();
        self.others = self
            .cpu_start
            .zip(Sample::now())
            .and_then(|(start, end)| start.others_until(&end, self.machine.logical_cpus));
    }

    /// Broken guarantees and cells that could not run.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for store in &self.stores {
            let label = &store.label;
            failures.extend(store.failed.iter().map(|err| format!("{label}: {err}")));
            for cell in &store.loads {
                failures.extend(cell.problems.iter().map(|p| {
                    format!(
                        "{label}: {} × {}: {p}",
                        cell.route.label(),
                        cell.connections
                    )
                }));
            }
            for cell in &store.blocks {
                failures.extend(
                    cell.problems
                        .iter()
                        .map(|p| format!("{label}: blocks of {}: {p}", cell.size)),
                );
            }
            for cell in store.lock_cells() {
                failures.extend(
                    cell.problems.iter().map(|p| {
                        format!("{label}: {} × {}: {p}", cell.implementation, cell.clients)
                    }),
                );
            }
        }
        failures
    }
}

/// The section, from its `##` heading on (scripts/bench-serve.sh adds the
/// markers around it).
pub fn markdown(run: &Run) -> String {
    let mut md = String::new();
    let args = &run.args;
    let _ = writeln!(md, "## bakery serve over HTTP\n");
    let _ = writeln!(
        md,
        "_Generated by `scripts/bench-serve.sh` (the bench `cargo bench -p bakery-serve --bench \
         serve`); `scripts/bench-report.sh` keeps this section. Do not edit by hand._\n"
    );
    let mut command = String::from("cargo bench -p bakery-serve --bench serve");
    if !args.given.is_empty() {
        command.push_str(" -- ");
        command.push_str(&args.given.join(" "));
    }
    let _ = writeln!(md, "```sh\n{command}\n```\n");
    let _ = writeln!(
        md,
        "Run from {} to {} (UTC) with bakery {}.\n",
        humantime::format_rfc3339_seconds(run.started),
        humantime::format_rfc3339_seconds(run.finished),
        env!("CARGO_PKG_VERSION")
    );

    let m = &run.machine;
    let _ = writeln!(md, "| | |\n|---|---|");
    md.push_str(&m.table_rows());
    if let Some(load) = &run.load {
        let _ = writeln!(
            md,
            "| load average before the run | {load} (1, 5, 15 min) |"
        );
    }
    if let Some(others) = run.others {
        let _ = writeln!(
            md,
            "| other processes during the run | {others:.2} CPUs busy on average (all CPUs' busy \
             time, /proc/stat, minus the bench's and its servers') |"
        );
    }
    let _ = writeln!(
        md,
        "| server | `bakery --uri URI serve --listen 127.0.0.1:0` (release build), a process of \
         its own: tokio multi-thread runtime, {} worker threads (one per CPU) |",
        m.logical_cpus
    );
    let _ = writeln!(
        md,
        "| load generator | the bench's process: tokio multi-thread runtime, {} worker threads; \
         hyper's HTTP/1.1 connection-level client, one keep-alive connection per client task \
         (TCP_NODELAY), closed loop: a client sends its next request when it has read the \
         answer to the last; loopback |",
        args.client_threads
    );
    let _ = writeln!(
        md,
        "| cells | {} warm-up, then {} timed; every request (operation) timed, HDR histogram \
         (3 significant digits); errors = answers other than the route's success status \
         (200; 204 for a release) and failed requests, warm-up included |",
        humantime::format_duration(args.warmup),
        humantime::format_duration(args.duration)
    );
    let _ = writeln!(
        md,
        "| rounds | {}: a round starts a fresh server, runs every cell of the server (single \
         ids and the floor, the thin client, the lock over HTTP), stops it and runs the \
         in-process lock's cells; every row is its cell's median round (by rate), each \
         round's rate beside it, and its errors are those of all rounds |",
        args.rounds
    );
    let stores: Vec<String> = run
        .stores
        .iter()
        .map(|store| format!("{}: {}", store.label, store.shown_uri))
        .collect();
    let _ = writeln!(md, "| stores | {} |\n", stores.join("; "));
    let _ = writeln!(
        md,
        "The server, the load generator and the store share the machine's {} CPUs: every \
         figure below is what one machine does with both ends of the connection, not what a \
         server would do with its cores to itself. The server runs as `bakery serve` does in \
         production, a process of its own, so its runtime and worker threads are only its own; \
         the in-process lock rows run in the bench's process after the server has stopped.\n",
        m.logical_cpus
    );

    single_ids(&mut md, run);
    thin_client(&mut md, run);
    locks(&mut md, run);
    other_clients(&mut md, run);
    goals(&mut md, run);
    errors(&mut md, run);
    md
}

fn single_ids(md: &mut String, run: &Run) {
    let _ = writeln!(md, "### Single ids against the HTTP floor\n");
    let _ = writeln!(
        md,
        "`POST /v1/sequences/{{name}}/next?count=1` (one id per request, from the server's \
         block) beside `GET /healthz` of the same server, whose constant body is the most any \
         route can answer; at 1 connection the floor's p50 is one loopback HTTP round trip. \
         × floor: req/s over the floor's at the same connections (median rounds). The ids of \
         every round were checked: none twice, increasing on each connection. At 1 \
         connection nothing else keeps the CPUs busy, so every request waits for sleeping \
         threads (and on a virtual machine, CPUs) to wake: those rows vary the most from \
         round to round.\n"
    );
    let _ = writeln!(
        md,
        "| store | route | connections | req/s | × floor | p50 | p99 | p999 | errors | req/s of each round |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for store in &run.stores {
        for connections in run.args.connection_counts() {
            for route in [Route::Floor, Route::Next] {
                let Some(cell) = store.load(route, connections) else {
                    continue;
                };
                let floor = store.load(Route::Floor, connections);
                let share = floor
                    .filter(|floor| floor.per_sec > 0.0)
                    .map_or_else(|| "-".into(), |floor| ratio(cell.per_sec / floor.per_sec));
                // In the order they ran.
                let rounds: Vec<&LoadCell> = store
                    .loads
                    .iter()
                    .filter(|round| round.route == route && round.connections == connections)
                    .collect();
                let each: Vec<String> = rounds.iter().map(|round| rate(round.per_sec)).collect();
                let errors: u64 = rounds.iter().map(|round| round.tally.errors).sum();
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    store.label,
                    route.label(),
                    connections,
                    rate(cell.per_sec),
                    share,
                    nanos(cell.tally.at(0.5)),
                    nanos(cell.tally.at(0.99)),
                    nanos(cell.tally.at(0.999)),
                    errors,
                    each.join(", ")
                );
            }
        }
    }
    let _ = writeln!(md);
}

fn thin_client(md: &mut String, run: &Run) {
    let _ = writeln!(md, "### Ids by reserved block (a thin client)\n");
    let _ = writeln!(
        md,
        "One client reserves a block over HTTP (`POST /v1/sequences/{{name}}/reserve?size=N`), \
         hands its ids out from memory one at a time, and reserves the next block when it runs \
         out, on one keep-alive connection. ids/s: ids handed out in the timed part over its \
         length, the reservation requests' time included (they are waited for: no prefetch). \
         Checked: the blocks do not overlap, every id is above the one before.\n"
    );
    let _ = writeln!(
        md,
        "| store | block size | ids/s | reservations | reserve p50 | reserve p99 | errors | ids/s of each round |"
    );
    let _ = writeln!(
        md,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for store in &run.stores {
        for &size in &run.args.block_sizes {
            let Some(cell) = store.block(size) else {
                continue;
            };
            let rounds = || store.blocks.iter().filter(|cell| cell.size == size);
            let errors: u64 = rounds().map(|cell| cell.reserves.errors).sum();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                store.label,
                thousands(size),
                rate(cell.per_sec),
                cell.reserves.count(),
                nanos(cell.reserves.at(0.5)),
                nanos(cell.reserves.at(0.99)),
                errors,
                each_round(rounds(), |cell| cell.per_sec)
            );
        }
    }
    let _ = writeln!(md);
}

fn locks(md: &mut String, run: &Run) {
    let _ = writeln!(md, "### Lock acquire + release\n");
    let _ = writeln!(
        md,
        "Every client acquires and releases one lock, again and again; one operation is \
         acquire + release. Over HTTP each client has its own session (`POST /v1/sessions`, \
         its TTL longer than the cell, closed afterwards) and connection, and makes two calls \
         per operation (`POST /v1/locks/{{name}}/acquire`, a long poll, and `…/release`); the \
         server takes each grant with `bakery::Lock` on its store, for the session. In \
         process each client has its own `bakery::Lock` handle on the same store (for \
         memory://, a store of the bench's own), with the same default lease. The service \
         keeps, per session, the `bakery::Lock` handle its acquires were served with (owner: \
         the session), so a session's next acquire starts from the row the handle last saw, as \
         an in-process handle does; the rows *built per acquire* build a handle for every \
         acquire in process — the service's first design — to show what that cost. Checked in \
         the critical section: no other client inside, every fencing token above the one \
         before.\n"
    );
    let _ = writeln!(
        md,
        "| store | implementation | clients | ops/s | p50 | p99 | p999 | errors | ops/s of each round |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for store in &run.stores {
        for cells in [
            &store.http_locks,
            &store.grpc_locks,
            &store.local_locks,
            &store.service_locks,
        ] {
            for &clients in &run.args.lock_clients {
                let Some(cell) = lock(cells, clients) else {
                    continue;
                };
                let rounds = || cells.iter().filter(|cell| cell.clients == clients);
                let errors: u64 = rounds().map(|cell| cell.tally.errors).sum();
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    store.label,
                    cell.implementation,
                    clients,
                    rate(cell.per_sec),
                    nanos(cell.tally.at(0.5)),
                    nanos(cell.tally.at(0.99)),
                    nanos(cell.tally.at(0.999)),
                    errors,
                    each_round(rounds(), |cell| cell.per_sec)
                );
            }
        }
    }
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "What the service adds per operation (HTTP or gRPC minus in process, same store and clients, \
         median rounds). \
         A round trip is one loopback HTTP round trip of the same server: the floor's p50 at 1 \
         connection. At 1 client an operation is two calls, so the service adds at most one \
         round trip per call when p50 added ≤ 2 round trips. With several clients the lock is \
         always wanted, and its throughput is one hand-off after another: time per grant = \
         1 / ops/s; a hand-off over HTTP is the release call going in and the grant's answer \
         coming out, one round trip.\n"
    );
    let _ = writeln!(
        md,
        "| store | protocol | clients | round trip | p50 added | p99 added | per call at p50 | time per grant added | p50 added by a handle per acquire (in process) |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for store in &run.stores {
        let Some(trip) = store.round_trip_ns() else {
            continue;
        };
        for (protocol, http, local) in lock_pairs(run, store) {
            let added_p50 = signed_ns(http.tally.at(0.5), local.tally.at(0.5));
            let added_p99 = signed_ns(http.tally.at(0.99), local.tally.at(0.99));
            let per_grant = grant_ns(http) - grant_ns(local);
            let by_handle = lock(&store.service_locks, http.clients).map_or_else(
                || "-".to_string(),
                |cell| signed(signed_ns(cell.tally.at(0.5), local.tally.at(0.5))),
            );
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} ({} round trips) | {} | {} round trips | {} ({} round trips) | {} |",
                store.label,
                protocol,
                http.clients,
                nanos(trip),
                signed(added_p50),
                trips(added_p50, trip),
                signed(added_p99),
                trips(added_p50 / 2.0, trip),
                signed(per_grant),
                trips(per_grant, trip),
                by_handle
            );
        }
    }
    let _ = writeln!(md);
}

/// Client goals: ids per second from reserved blocks in one process.
const CLIENT_ID_GOALS: [(&str, f64); 3] = [("python", 1e6), ("go", 1e7), ("ts", 1e7)];

fn other_clients(md: &mut String, run: &Run) {
    if run.args.clients.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "### The clients in other languages
"
    );
    let _ = writeln!(
        md,
        "Each client (clients/python, clients/go, clients/ts) runs its own bench as a \
         process of its own against the same server, in the same round as the cells above \
         (clients/README.md): *ids/s* is `Sequence.next()` in one process from the blocks it \
         reserves (`/reserve?size=block`, the next block fetched in the background), *lock \
         ops/s* acquire + release of one uncontended lock, one after the other, through the \
         client's `Lock` (a session of its own, kept alive in the background). Beside it, the \
         lock over the Rust HTTP client of this bench and in process (`bakery::Lock` on the \
         same store), 1 client, median rounds.\n"
    );
    let _ = writeln!(
        md,
        "| store | client | ids/s | block | goal | lock ops/s | ÷ Rust over HTTP | ÷ Rust in process | each round (ids/s; lock ops/s) |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |"
    );
    for store in &run.stores {
        let http = lock(&store.http_locks, 1);
        let local = lock(&store.local_locks, 1);
        for (client, _) in &run.args.clients {
            let rounds = || store.clients.iter().filter(|cell| &cell.client == client);
            let Some(cell) = median(rounds(), |cell| cell.ids_per_sec) else {
                continue;
            };
            let locks = median(rounds(), |cell| cell.lock_pairs_per_sec)
                .map_or(0.0, |cell| cell.lock_pairs_per_sec);
            let goal = CLIENT_ID_GOALS
                .iter()
                .find(|(name, _)| name == client)
                .map_or_else(
                    || "-".to_string(),
                    |&(_, goal)| {
                        let status = if cell.ids_per_sec >= goal {
                            "met"
                        } else {
                            "not met"
                        };
                        format!("≥ {}/s: {status}", rate(goal))
                    },
                );
            let versus = |cell: Option<&LockCell>| {
                cell.map_or_else(|| "-".to_string(), |cell| ratio(locks / cell.per_sec))
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {}; {} |",
                store.label,
                client,
                rate(cell.ids_per_sec),
                thousands(cell.block),
                goal,
                rate(locks),
                versus(http),
                versus(local),
                each_round(rounds(), |cell| cell.ids_per_sec),
                each_round(rounds(), |cell| cell.lock_pairs_per_sec)
            );
        }
    }
    let _ = writeln!(md);
}

/// The median round among `cells` by `rate` (the slower of the middle two).
fn median<'a, T>(cells: impl Iterator<Item = &'a T>, rate: impl Fn(&T) -> f64) -> Option<&'a T> {
    let mut cells: Vec<&T> = cells.collect();
    cells.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    cells.get(cells.len().saturating_sub(1) / 2).copied()
}

/// The median round of the lock cells of `clients` clients.
fn lock(cells: &[LockCell], clients: usize) -> Option<&LockCell> {
    median(
        cells.iter().filter(|cell| cell.clients == clients),
        |cell| cell.per_sec,
    )
}

/// The rates of every round of a cell, in the order they ran.
fn each_round<'a, T: 'a>(
    cells: impl Iterator<Item = &'a T>,
    rate_of: impl Fn(&T) -> f64,
) -> String {
    cells
        .map(|cell| rate(rate_of(cell)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The HTTP and in-process median cells of each client count.
/// Each remote cell (HTTP, then gRPC) beside the in-process cell of as
/// many clients, with the protocol's name.
fn lock_pairs<'a>(
    run: &'a Run,
    store: &'a StoreRun,
) -> impl Iterator<Item = (&'static str, &'a LockCell, &'a LockCell)> + 'a {
    [("HTTP", &store.http_locks), ("gRPC", &store.grpc_locks)]
        .into_iter()
        .flat_map(move |(protocol, remote)| {
            run.args.lock_clients.iter().filter_map(move |&clients| {
                let pair = lock(remote, clients).zip(lock(&store.local_locks, clients));
                pair.map(|(remote, local)| (protocol, remote, local))
            })
        })
}

fn goals(md: &mut String, run: &Run) {
    let args = &run.args;
    let _ = writeln!(md, "### Goals\n");
    let _ = writeln!(md, "| status | goal | result |\n| --- | --- | --- |");
    let mut share = Vec::new();
    let mut next = Vec::new();
    for store in &run.stores {
        if let (Some(floor), Some(cell)) = (
            store.load(Route::Floor, args.connections),
            store.load(Route::Next, args.connections),
        ) {
            if floor.per_sec > 0.0 {
                share.push((store.label.as_str(), cell.per_sec / floor.per_sec));
            }
            next.push((store.label.as_str(), cell.per_sec));
        }
    }
    goal(
        md,
        &format!(
            "single-id next ≥ {FLOOR_SHARE} × the HTTP floor (GET /healthz, same server) at {} \
             connections",
            args.connections
        ),
        &share,
        |value| value >= FLOOR_SHARE,
        ratio,
    );
    goal(
        md,
        &format!(
            "single-id next ≥ {} req/s at {} connections",
            rate(NEXT_PER_SEC),
            args.connections
        ),
        &next,
        |value| value >= NEXT_PER_SEC,
        |value| format!("{}/s", rate(value)),
    );
    let largest = args.block_sizes.iter().copied().max().unwrap_or(0);
    let blocks: Vec<(&str, f64)> = run
        .stores
        .iter()
        .filter_map(|store| {
            store
                .block(largest)
                .map(|cell| (store.label.as_str(), cell.per_sec))
        })
        .collect();
    goal(
        md,
        &format!(
            "thin client ≥ {} ids/s, blocks of {}, reservations included",
            rate(BLOCK_IDS_PER_SEC),
            thousands(largest)
        ),
        &blocks,
        |value| value >= BLOCK_IDS_PER_SEC,
        |value| format!("{}/s", rate(value)),
    );
    let mut per_call = Vec::new();
    for store in &run.stores {
        let Some(trip) = store.round_trip_ns() else {
            continue;
        };
        for (protocol, http, local) in lock_pairs(run, store) {
            let added = if http.clients == 1 {
                signed_ns(http.tally.at(0.5), local.tally.at(0.5)) / 2.0
            } else {
                grant_ns(http) - grant_ns(local)
            };
            let label = format!("{} {protocol} at {}", store.label, clients(http.clients));
            per_call.push((label, added / trip as f64));
        }
    }
    let per_call: Vec<(&str, f64)> = per_call
        .iter()
        .map(|(label, value)| (label.as_str(), *value))
        .collect();
    goal(
        md,
        &format!(
            "the lock over HTTP or gRPC adds ≤ {ADDED_ROUND_TRIPS} loopback round trip per call \
             (at 1 client: half the p50 added; with more: the time per grant added)"
        ),
        &per_call,
        |value| value <= ADDED_ROUND_TRIPS,
        |value| format!("{} round trips", minus(format!("{value:.2}"))),
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Two designs of the service's lock were measured. The first built a `bakery::Lock` \
         for every acquire: each acquire then read the row before its conditional write, one \
         more store round trip (on PostgreSQL about +0.4 ms, 3.8 loopback round trips per call \
         at 1 client). The second, kept, holds a handle per session and lock: on memory:// the \
         service then adds one loopback round trip per call at 1 client, the HTTP call itself. \
         What is left on SQLite and PostgreSQL is not store work (the same conditional writes, \
         and on SQLite the same two fsyncs per operation over HTTP and in process, by strace) \
         but the hops an in-process lock never makes: each call crosses from the client's \
         process to the server's runtime, to the store's connection or blocking thread and \
         back, on 2 CPUs shared by both processes and the store; and with several clients every \
         hand-off waits for the release call to arrive and the waiter's answer to leave. A \
         client that wants fewer hops per grant holds the grant longer (a lease, not a call, \
         keeps it) or runs the lock in process.\n"
    );
}

/// One row of the goals table: met when every value passes.
fn goal(
    md: &mut String,
    name: &str,
    values: &[(&str, f64)],
    passes: impl Fn(f64) -> bool,
    show: impl Fn(f64) -> String,
) {
    if values.is_empty() {
        let _ = writeln!(md, "| not measured | {name} | - |");
        return;
    }
    let status = if values.iter().all(|&(_, value)| passes(value)) {
        "met"
    } else {
        "not met"
    };
    let shown: Vec<String> = values
        .iter()
        .map(|&(label, value)| {
            let mark = if passes(value) { "" } else { " (missed)" };
            format!("{label} {}{mark}", show(value))
        })
        .collect();
    let _ = writeln!(md, "| {status} | {name} | {} |", shown.join(", "));
}

fn errors(md: &mut String, run: &Run) {
    let mut lines = Vec::new();
    for store in &run.stores {
        let label = &store.label;
        for cell in &store.loads {
            if let Some(first) = &cell.tally.first_error {
                lines.push(format!(
                    "{label} · {} × {}: {} error(s), first: {first}",
                    cell.route.label(),
                    cell.connections,
                    cell.tally.errors
                ));
            }
        }
        for cell in &store.blocks {
            if let Some(first) = &cell.reserves.first_error {
                lines.push(format!(
                    "{label} · blocks of {}: {} error(s), first: {first}",
                    cell.size, cell.reserves.errors
                ));
            }
        }
        for cell in store.lock_cells() {
            if let Some(first) = &cell.tally.first_error {
                lines.push(format!(
                    "{label} · {} × {}: {} error(s), first: {first}",
                    cell.implementation, cell.clients, cell.tally.errors
                ));
            }
        }
        for failed in &store.failed {
            lines.push(format!("{label}: {failed}"));
        }
    }
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(md, "### Errors\n");
    for line in lines {
        let _ = writeln!(md, "- {}", line.replace('\n', " "));
    }
    let _ = writeln!(md);
}

/// `a - b` in nanoseconds, as a float (it may be negative).
fn signed_ns(a: u64, b: u64) -> f64 {
    a as f64 - b as f64
}

/// The time one grant takes of the lock's throughput, in nanoseconds.
fn grant_ns(cell: &LockCell) -> f64 {
    if cell.per_sec > 0.0 {
        1e9 / cell.per_sec
    } else {
        f64::INFINITY
    }
}

fn signed(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let sign = if ns < 0.0 { "−" } else { "+" };
    format!("{sign}{}", nanos(ns.abs().round() as u64))
}

fn trips(ns: f64, trip: u64) -> String {
    if trip == 0 || !ns.is_finite() {
        "-".into()
    } else {
        minus(format!("{:.2}", ns / trip as f64))
    }
}

/// A negative number with the minus sign the durations use.
fn minus(number: String) -> String {
    match number.strip_prefix('-') {
        Some(rest) => format!("−{rest}"),
        None => number,
    }
}

fn ratio(value: f64) -> String {
    format!("{value:.2}×")
}

fn clients(n: usize) -> String {
    if n == 1 {
        "1 client".into()
    } else {
        format!("{n} clients")
    }
}

/// `100000` as `100,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
