//! A deterministic simulation of a [`LamportMutex`] group over a simulated
//! network, with the checks of the seed's three requirements.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::clock::{ProcessId, Timestamp};
use super::mutex::{LamportMutex, Message, MutexError, Output, State};

/// The largest group [`simulate`] runs (per-channel tables grow as N²).
pub const MAX_SIM_PROCESSES: u32 = 1024;

/// One simulation: the group, the workload, the network, and the
/// negative-control knobs.
///
/// Everything random is drawn from a ChaCha8 stream keyed by `seed` alone,
/// with bounded draws computed here rather than by `rand`'s distributions,
/// so a seed gives the same trace on every platform and every `rand`
/// version.
///
/// ```
/// use bakery_recipes::lamport::{simulate, SimConfig};
///
/// let report = simulate(&SimConfig { requests: 5, ..SimConfig::new(3, 42) })?;
/// assert!(report.passed(), "{}", report.verdicts);
/// assert_eq!(report.grants.len(), 5);
/// # Ok::<(), bakery_recipes::lamport::SimConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimConfig {
    /// Processes in the group, `P0..P{processes-1}` (1 to
    /// [`MAX_SIM_PROCESSES`]).
    pub processes: u32,
    /// The seed of every random choice.
    pub seed: u64,
    /// Lock requests issued in all (each process requests, holds, releases,
    /// thinks, and requests again while any are left).
    pub requests: u32,
    /// Message delays are drawn from `1..=max_delay` ticks of simulated time
    /// (at least 1).
    pub max_delay: u64,
    /// Time a process waits before (re)requesting: `0..=max_think`.
    pub max_think: u64,
    /// Time a process holds the lock: `0..=max_hold`.
    pub max_hold: u64,
    /// Deliver each channel's messages in send order. NEGATIVE CONTROL when
    /// `false`: each message gets its own random delay, so later messages
    /// overtake earlier ones, breaking the algorithm's FIFO assumption.
    pub fifo: bool,
    /// Apply rule 3.2 (enter only after hearing a later-stamped message from
    /// every other process). NEGATIVE CONTROL when `false`: the machines
    /// enter as soon as their request heads their own queue.
    pub heard_from_all_rule: bool,
    /// Record the event trace ([`SimReport::trace`]). The checks run either
    /// way; bulk runs switch it off for speed.
    pub record_trace: bool,
}

impl SimConfig {
    /// The correct algorithm on FIFO channels, `2 × processes` requests,
    /// delays up to 10, think time up to 20, hold time up to 5, with a trace.
    pub fn new(processes: u32, seed: u64) -> Self {
        SimConfig {
            processes,
            seed,
            requests: processes.saturating_mul(2),
            max_delay: 10,
            max_think: 20,
            max_hold: 5,
            fifo: true,
            heard_from_all_rule: true,
            record_trace: true,
        }
    }
}

/// A [`SimConfig`] that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimConfigError {
    /// `processes` outside `1..=MAX_SIM_PROCESSES`.
    #[error("processes must be 1 to {MAX_SIM_PROCESSES}, not {0}")]
    Processes(u32),
    /// `max_delay` of 0: a message needs at least one tick in flight.
    #[error("max_delay must be at least 1")]
    ZeroDelay,
}

/// What happened, in one line of the trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TraceKind {
    /// The process asked for the lock with `request` (rule 1).
    Request {
        /// The new request.
        request: Timestamp,
    },
    /// The process sent `message` to `to`.
    Send {
        /// The addressee.
        to: ProcessId,
        /// The message.
        message: Message,
    },
    /// The process received `message` (its sender is `message.stamp`).
    Receive {
        /// The message.
        message: Message,
    },
    /// The process entered the critical section with `request` (rule 3).
    Enter {
        /// The granted request.
        request: Timestamp,
    },
    /// The process left the critical section of `request` (rule 4).
    Release {
        /// The released request.
        request: Timestamp,
    },
    /// The process refused `message`; the simulation stops here.
    Reject {
        /// The message.
        message: Message,
        /// Why, as the machine put it.
        error: String,
    },
}

/// One event of a simulation: when, where, the process's clock after it,
/// and what.
///
/// Displayed as one line of the seed's diagrams, in text:
/// `t=4 P1 [C=3] send REQUEST(3:P1) -> P2`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceEvent {
    /// Simulated time.
    pub at: u64,
    /// The process it happened at.
    pub process: ProcessId,
    /// That process's Lamport clock right after the event.
    pub clock: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: TraceKind,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={} {} [C={}] ", self.at, self.process, self.clock)?;
        match &self.kind {
            TraceKind::Request { request } => write!(f, "request {request}"),
            TraceKind::Send { to, message } => write!(f, "send {message} -> {to}"),
            TraceKind::Receive { message } => {
                write!(f, "recv {message} <- {}", message.from())
            }
            TraceKind::Enter { request } => write!(f, "ENTER critical section ({request})"),
            TraceKind::Release { request } => write!(f, "LEAVE critical section ({request})"),
            TraceKind::Reject { message, error } => {
                write!(f, "REJECT {message} <- {}: {error}", message.from())
            }
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "detail", rename_all = "snake_case")]
pub enum Verdict {
    /// The property held over the whole run.
    Ok,
    /// The property was violated: the first violation, in words.
    Violated(String),
}

impl Verdict {
    /// True for [`Verdict::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Ok => f.write_str("ok"),
            Verdict::Violated(detail) => write!(f, "VIOLATED: {detail}"),
        }
    }
}

/// The seed's three requirements, checked over one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdicts {
    /// Requirement 1: never two processes in the critical section at once.
    pub mutual_exclusion: Verdict,
    /// Requirement 2: grants in the total order of the requests (each
    /// granted once, and every grant's request later than the previous).
    pub grant_order: Verdict,
    /// Requirement 3: every request granted (every holder releases in the
    /// workload), no process still waiting when the network is quiet, and no
    /// message refused.
    pub liveness: Verdict,
}

impl Verdicts {
    /// All three hold.
    pub fn all_ok(&self) -> bool {
        self.mutual_exclusion.is_ok() && self.grant_order.is_ok() && self.liveness.is_ok()
    }
}

impl fmt::Display for Verdicts {
    /// One line per check.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "mutual exclusion: {}", self.mutual_exclusion)?;
        writeln!(f, "grant order: {}", self.grant_order)?;
        write!(f, "liveness: {}", self.liveness)
    }
}

/// Everything one simulation produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimReport {
    /// The configuration it ran.
    pub config: SimConfig,
    /// Every event in order (empty unless [`SimConfig::record_trace`]).
    pub trace: Vec<TraceEvent>,
    /// Every request issued, in issue order.
    pub requests: Vec<Timestamp>,
    /// Every grant, in grant order.
    pub grants: Vec<Timestamp>,
    /// Messages delivered.
    pub messages: u64,
    /// The most requests outstanding at once (2 or more means the run had
    /// contention to resolve).
    pub max_outstanding: usize,
    /// Simulated time of the last event.
    pub end_time: u64,
    /// The checks.
    pub verdicts: Verdicts,
}

impl SimReport {
    /// All checks passed.
    pub fn passed(&self) -> bool {
        self.verdicts.all_ok()
    }
}

/// Run one simulation: N [`LamportMutex`] machines exchanging messages over
/// a simulated network (random delays, FIFO per channel unless the negative
/// control says otherwise), under a random request/hold/release workload,
/// until no event is left. Then judge the run.
///
/// The run always ends: every message answers a request or a release, and
/// the workload issues [`SimConfig::requests`] of those. A machine that
/// refuses a message stops the run (liveness then fails with the reason).
pub fn simulate(config: &SimConfig) -> Result<SimReport, SimConfigError> {
    if config.processes == 0 || config.processes > MAX_SIM_PROCESSES {
        return Err(SimConfigError::Processes(config.processes));
    }
    if config.max_delay == 0 {
        return Err(SimConfigError::ZeroDelay);
    }
    let mut sim = Sim::new(config)?;
    sim.run();
    Ok(sim.finish())
}

/// Something scheduled to happen at a simulated time.
#[derive(Debug)]
enum Event {
    /// The process wants the lock (if requests are left).
    Wake(ProcessId),
    /// The holder is done.
    Leave(ProcessId),
    /// A message arrives.
    Deliver { to: ProcessId, message: Message },
}

/// An event in the agenda, ordered by time, then by scheduling order (so
/// equal times keep FIFO order and the run is deterministic).
#[derive(Debug)]
struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Sim<'a> {
    config: &'a SimConfig,
    rng: ChaCha8Rng,
    machines: Vec<LamportMutex>,
    agenda: BinaryHeap<Reverse<Scheduled>>,
    next_seq: u64,
    now: u64,
    /// Per channel `from * n + to`: when its latest message arrives (FIFO).
    channel_tail: Vec<u64>,
    requests_left: u32,
    holders: BTreeSet<ProcessId>,
    report: SimReport,
    stopped: Option<String>,
}

impl<'a> Sim<'a> {
    fn new(config: &'a SimConfig) -> Result<Self, SimConfigError> {
        let n = config.processes;
        let machines = (0..n)
            .map(|i| {
                let mut machine = LamportMutex::new(ProcessId(i), n)?;
                if !config.heard_from_all_rule {
                    machine.disable_heard_from_all_rule();
                }
                Ok(machine)
            })
            .collect::<Result<Vec<_>, MutexError>>()
            .map_err(|_| SimConfigError::Processes(n))?;
        // The seed is the key, byte for byte: no dependence on how a
        // `rand_core` version expands a u64 seed.
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&config.seed.to_le_bytes());
        let mut sim = Sim {
            config,
            rng: ChaCha8Rng::from_seed(key),
            machines,
            agenda: BinaryHeap::new(),
            next_seq: 0,
            now: 0,
            channel_tail: vec![0; (n as usize) * (n as usize)],
            requests_left: config.requests,
            holders: BTreeSet::new(),
            report: SimReport {
                config: config.clone(),
                trace: Vec::new(),
                requests: Vec::new(),
                grants: Vec::new(),
                messages: 0,
                max_outstanding: 0,
                end_time: 0,
                verdicts: Verdicts {
                    mutual_exclusion: Verdict::Ok,
                    grant_order: Verdict::Ok,
                    liveness: Verdict::Ok,
                },
            },
            stopped: None,
        };
        for i in 0..n {
            let think = sim.draw(config.max_think);
            sim.schedule(think, Event::Wake(ProcessId(i)));
        }
        Ok(sim)
    }

    /// A uniform-enough draw from `0..=max` (Lemire's multiply-shift on one
    /// 64-bit word; the bias is below 2^-40 for the small ranges used here,
    /// and the result depends on the ChaCha8 stream alone).
    fn draw(&mut self, max: u64) -> u64 {
        let span = u128::from(max) + 1;
        ((u128::from(self.rng.next_u64()) * span) >> 64) as u64
    }

    fn schedule(&mut self, at: u64, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.agenda.push(Reverse(Scheduled { at, seq, event }));
    }

    fn record(&mut self, process: ProcessId, kind: TraceKind) {
        if self.config.record_trace {
            let clock = self.machines[process.index()].now().time;
            self.report.trace.push(TraceEvent {
                at: self.now,
                process,
                clock,
                kind,
            });
        }
    }

    fn run(&mut self) {
        while self.stopped.is_none() {
            let Some(Reverse(next)) = self.agenda.pop() else {
                break;
            };
            self.now = next.at;
            match next.event {
                Event::Wake(process) => self.wake(process),
                Event::Leave(process) => self.leave(process),
                Event::Deliver { to, message } => self.deliver(to, message),
            }
        }
        self.report.end_time = self.now;
    }

    fn wake(&mut self, process: ProcessId) {
        if self.requests_left == 0 {
            return; // the workload is done: this process retires
        }
        self.requests_left -= 1;
        match self.machines[process.index()].request() {
            Ok(outputs) => {
                let request = self.machines[process.index()].now();
                self.report.requests.push(request);
                self.record(process, TraceKind::Request { request });
                let outstanding = self
                    .machines
                    .iter()
                    .filter(|m| m.state() != State::Idle)
                    .count();
                self.report.max_outstanding = self.report.max_outstanding.max(outstanding);
                self.carry_out(process, outputs);
            }
            // The workload only wakes idle processes; a refusal is a bug in
            // the harness or the machine, and stops the run.
            Err(err) => self.stop(format!("t={} {process} request refused: {err}", self.now)),
        }
    }

    fn leave(&mut self, process: ProcessId) {
        let machine = &mut self.machines[process.index()];
        let State::Holding { request } = machine.state() else {
            let state = machine.state();
            return self.stop(format!("t={} {process} leaves while {state}", self.now));
        };
        match machine.release() {
            Ok(outputs) => {
                self.holders.remove(&process);
                self.record(process, TraceKind::Release { request });
                self.carry_out(process, outputs);
                let think = self.draw(self.config.max_think);
                self.schedule(self.now.saturating_add(think), Event::Wake(process));
            }
            Err(err) => self.stop(format!("t={} {process} release refused: {err}", self.now)),
        }
    }

    fn deliver(&mut self, to: ProcessId, message: Message) {
        self.report.messages += 1;
        match self.machines[to.index()].receive(message) {
            Ok(outputs) => {
                self.record(to, TraceKind::Receive { message });
                self.carry_out(to, outputs);
            }
            Err(err) => {
                self.record(
                    to,
                    TraceKind::Reject {
                        message,
                        error: err.to_string(),
                    },
                );
                self.stop(format!("t={} {to} refused {message}: {err}", self.now));
            }
        }
    }

    fn stop(&mut self, reason: String) {
        self.stopped = Some(reason);
    }

    /// Put a machine's outputs into the world: messages onto the network,
    /// grants into the critical section.
    fn carry_out(&mut self, process: ProcessId, outputs: Vec<Output>) {
        for output in outputs {
            match output {
                Output::Send { to, message } => {
                    self.record(process, TraceKind::Send { to, message });
                    let delay = 1 + self.draw(self.config.max_delay - 1);
                    let mut at = self.now.saturating_add(delay);
                    let channel = process.index() * self.config.processes as usize + to.index();
                    if self.config.fifo {
                        // Never before the channel's previous message; on a
                        // tie the scheduling order keeps them in sequence.
                        at = at.max(self.channel_tail[channel]);
                        self.channel_tail[channel] = at;
                    }
                    self.schedule(at, Event::Deliver { to, message });
                }
                Output::Enter { request } => self.enter(process, request),
            }
        }
    }

    fn enter(&mut self, process: ProcessId, request: Timestamp) {
        self.record(process, TraceKind::Enter { request });
        if self.report.verdicts.mutual_exclusion.is_ok() {
            if let Some(holder) = self.holders.iter().next() {
                let held = self.machines[holder.index()].state();
                self.report.verdicts.mutual_exclusion = Verdict::Violated(format!(
                    "t={} {process} entered with {request} while {holder} was {held}",
                    self.now
                ));
            }
        }
        self.holders.insert(process);
        if self.report.verdicts.grant_order.is_ok() {
            if let Some(&previous) = self.report.grants.last() {
                if request <= previous {
                    self.report.verdicts.grant_order = Verdict::Violated(format!(
                        "t={} {request} granted after {previous}",
                        self.now
                    ));
                }
            }
        }
        self.report.grants.push(request);
        let hold = self.draw(self.config.max_hold);
        self.schedule(self.now.saturating_add(hold), Event::Leave(process));
    }

    fn finish(mut self) -> SimReport {
        let report = &mut self.report;
        report.verdicts.liveness = if let Some(reason) = self.stopped.take() {
            Verdict::Violated(format!("run stopped: {reason}"))
        } else {
            let granted: BTreeSet<Timestamp> = report.grants.iter().copied().collect();
            let never: Vec<String> = report
                .requests
                .iter()
                .filter(|r| !granted.contains(r))
                .map(ToString::to_string)
                .collect();
            let still: Vec<String> = self
                .machines
                .iter()
                .filter(|m| m.state() != State::Idle)
                .map(|m| format!("{} {}", m.id(), m.state()))
                .collect();
            if !never.is_empty() {
                Verdict::Violated(format!(
                    "network quiet at t={} with requests never granted: {}",
                    report.end_time,
                    never.join(", ")
                ))
            } else if !still.is_empty() {
                Verdict::Violated(format!(
                    "network quiet at t={} with {}",
                    report.end_time,
                    still.join(", ")
                ))
            } else {
                Verdict::Ok
            }
        };
        self.report
    }
}

/// Run [`simulate`] for every seed in `seeds` with `make_config(seed)` and
/// return the first report that failed, if any: the bulk form of the
/// checks, and how the negative controls are searched.
///
/// ```
/// use bakery_recipes::lamport::{first_failure, SimConfig};
///
/// let broken = first_failure(0..100, |seed| SimConfig {
///     heard_from_all_rule: false, // NEGATIVE CONTROL
///     record_trace: false,
///     ..SimConfig::new(3, seed)
/// })?;
/// let report = broken.expect("the broken rule is caught");
/// assert!(!report.passed());
/// println!("seed {}:\n{}", report.config.seed, report.verdicts);
/// # Ok::<(), bakery_recipes::lamport::SimConfigError>(())
/// ```
pub fn first_failure(
    seeds: impl IntoIterator<Item = u64>,
    mut make_config: impl FnMut(u64) -> SimConfig,
) -> Result<Option<SimReport>, SimConfigError> {
    for seed in seeds {
        let report = simulate(&make_config(seed))?;
        if !report.passed() {
            return Ok(Some(report));
        }
    }
    Ok(None)
}
