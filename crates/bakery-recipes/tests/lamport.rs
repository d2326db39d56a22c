//! Lamport's mutex: the seed's worked examples as scripted scenarios, the
//! seed's three requirements checked over many seeded simulations, the
//! negative controls that must fail, and runs on the tokio transport.
//!
//! Everything here is deterministic and sleeps nowhere: the simulations run
//! on simulated time, the tokio tests only wait on the protocol itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bakery_recipes::lamport::{
    first_failure, simulate, LamportMutex, LocalGroup, Message, MessageKind, MutexError, Output,
    ProcessId, SimConfig, SimReport, State, Timestamp, TraceKind, TransportError, Verdict,
};

const P0: ProcessId = ProcessId(0);
const P1: ProcessId = ProcessId(1);
const P2: ProcessId = ProcessId(2);

/// The message `outputs` address to `to` (each input of these scenarios
/// sends at most one per peer).
fn sent_to(outputs: &[Output], to: ProcessId) -> Message {
    outputs
        .iter()
        .find_map(|output| match output {
            Output::Send { to: t, message } if *t == to => Some(*message),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no message for {to} in {outputs:?}"))
}

fn entered(outputs: &[Output]) -> Option<Timestamp> {
    outputs.iter().find_map(|output| match output {
        Output::Enter { request } => Some(*request),
        Output::Send { .. } => None,
    })
}

/// The seed's figure 6, node by node: P0, P1, P2 with clocks 25, 22, 20.
/// P0 requests first in real time with [25:0]; P2 a little later with
/// [20:2]. The two requests are concurrent, so the total order decides:
/// [20:2] ⇒ [25:0], and P2 is granted first although P0 collects both ACKs
/// earlier. (The seed's step 3 prints "[25:0] < [20:2]"; its conclusion —
/// P2's request goes first — is the one that follows from the order.)
#[test]
fn seed_race_with_clocks_25_22_20_grants_p2_first() {
    // The figure labels each node with the clock of its event; a request is
    // the next event of a clock one below.
    let mut p0 = LamportMutex::with_clock(P0, 3, 24).unwrap();
    let mut p1 = LamportMutex::with_clock(P1, 3, 21).unwrap();
    let mut p2 = LamportMutex::with_clock(P2, 3, 19).unwrap();

    // a: P0 sends [25:0] to P1 and P2.
    let a = p0.request().unwrap();
    assert_eq!(sent_to(&a, P1).stamp, Timestamp::new(25, P0));
    assert_eq!(sent_to(&a, P2).kind, MessageKind::Request);
    assert_eq!(p1.now().time, 21, "P1 has not heard anything yet");
    // d: P2 sends [20:2] to P0 and P1.
    let d = p2.request().unwrap();
    assert_eq!(sent_to(&d, P0).stamp, Timestamp::new(20, P2));

    // f: P2 receives [25:0], queues it behind its own [20:2], and ACKs.
    let f = p2.receive(sent_to(&a, P2)).unwrap();
    assert_eq!(
        p2.queue().collect::<Vec<_>>(),
        [Timestamp::new(20, P2), Timestamp::new(25, P0)]
    );
    assert_eq!(sent_to(&f, P0).stamp, Timestamp::new(26, P2)); // max(20, 25) + 1
    assert_eq!(entered(&f), None, "P2 has not heard from P1 yet");

    // h: P0 receives [20:2] and puts it at the head of its queue.
    let h = p0.receive(sent_to(&d, P0)).unwrap();
    assert_eq!(p0.queue().next(), Some(Timestamp::new(20, P2)));
    assert_eq!(sent_to(&h, P2).stamp, Timestamp::new(26, P0));

    // P1 receives both requests (P0's first) and ACKs each.
    let ack1_to_p0 = p1.receive(sent_to(&a, P1)).unwrap();
    let ack1_to_p2 = p1.receive(sent_to(&d, P1)).unwrap();
    assert_eq!(sent_to(&ack1_to_p0, P0).stamp, Timestamp::new(26, P1));
    assert_eq!(sent_to(&ack1_to_p2, P2).stamp, Timestamp::new(27, P1));

    // m: P0 has both ACKs; rule 3.2 holds but 3.1 does not.
    assert_eq!(p0.receive(sent_to(&ack1_to_p0, P0)).unwrap(), []);
    assert_eq!(p0.receive(sent_to(&f, P0)).unwrap(), []);
    let why = p0.entry_conditions().unwrap();
    assert!(why.heard_later_from_all, "{why:?}");
    assert!(!why.heads_queue, "{why:?}");

    // n: P2 collects the ACKs of P0 and P1, heads its queue, and enters.
    // (P0's REQUEST, stamped 25, was already a message later than 20:P2:
    // rule 3.2 counts any message, so only P1's silence held P2 back.)
    assert_eq!(p2.receive(sent_to(&h, P2)).unwrap(), []);
    let why = p2.entry_conditions().unwrap();
    assert!(why.heads_queue && !why.heard_later_from_all, "{why:?}");
    let n = p2.receive(sent_to(&ack1_to_p2, P2)).unwrap();
    assert_eq!(entered(&n), Some(Timestamp::new(20, P2)));
    assert!(p2.is_holding());
    assert!(!p0.is_holding() && !p1.is_holding());

    // And when P2 releases, P0 is next (rules 4, 5, then 3 again).
    let release = p2.release().unwrap();
    assert_eq!(p1.receive(sent_to(&release, P1)).unwrap(), []);
    let granted = p0.receive(sent_to(&release, P0)).unwrap();
    assert_eq!(entered(&granted), Some(Timestamp::new(25, P0)));
    assert_eq!(p1.queue().collect::<Vec<_>>(), [Timestamp::new(25, P0)]);
}

/// The seed's figure 5: P0 requests [1:0] and is granted; P1 requests
/// later, collects its ACKs (3.2 holds) but waits behind [1:0] (3.1 fails)
/// until P0's release.
#[test]
fn seed_figure_5_second_request_waits_for_the_release() {
    let mut m: Vec<LamportMutex> = (0..3)
        .map(|i| LamportMutex::new(ProcessId(i), 3).unwrap())
        .collect();
    let request0 = m[0].request().unwrap();
    assert_eq!(sent_to(&request0, P1).stamp, Timestamp::new(1, P0));
    let ack1 = m[1].receive(sent_to(&request0, P1)).unwrap();
    let ack2 = m[2].receive(sent_to(&request0, P2)).unwrap();
    assert_eq!(m[0].receive(sent_to(&ack1, P0)).unwrap(), []);
    // g: both ACKs in.
    let g = m[0].receive(sent_to(&ack2, P0)).unwrap();
    assert_eq!(entered(&g), Some(Timestamp::new(1, P0)));

    // h: P1 requests; its request sorts after [1:0].
    let request1 = m[1].request().unwrap();
    let State::Waiting { request: r1 } = m[1].state() else {
        panic!("{:?}", m[1].state())
    };
    assert!(Timestamp::new(1, P0) < r1);
    let ack0 = m[0].receive(sent_to(&request1, P0)).unwrap();
    let ack2 = m[2].receive(sent_to(&request1, P2)).unwrap();
    assert_eq!(m[1].receive(sent_to(&ack0, P1)).unwrap(), []);
    // n: both ACKs in, still second in the queue.
    assert_eq!(m[1].receive(sent_to(&ack2, P1)).unwrap(), []);
    let why = m[1].entry_conditions().unwrap();
    assert!(why.heard_later_from_all && !why.heads_queue, "{why:?}");

    let release = m[0].release().unwrap();
    assert_eq!(m[2].receive(sent_to(&release, P2)).unwrap(), []);
    let granted = m[1].receive(sent_to(&release, P1)).unwrap();
    assert_eq!(entered(&granted), Some(r1));
}

/// A varied but reproducible configuration per seed: 2 to 6 processes,
/// 1 to 12 requests, delays, think and hold times from "all at once" to
/// "spread out".
fn varied(seed: u64) -> SimConfig {
    let pick = |values: &[u64], salt: u64| values[((seed / salt) % values.len() as u64) as usize];
    SimConfig {
        processes: 2 + (seed % 5) as u32,
        requests: 1 + ((seed / 5) % 12) as u32,
        max_delay: pick(&[1, 2, 5, 20], 60),
        max_think: pick(&[0, 3, 30], 240),
        max_hold: pick(&[0, 2, 10], 720),
        record_trace: false,
        ..SimConfig::new(2, seed)
    }
}

const SEEDS: u64 = 10_000;

#[test]
fn the_three_requirements_hold_over_10k_seeds() {
    let started = Instant::now();
    let (mut grants, mut messages, mut contended) = (0usize, 0u64, 0u64);
    for seed in 0..SEEDS {
        let config = varied(seed);
        let report = simulate(&config).unwrap();
        assert!(
            report.passed(),
            "seed {seed} ({config:?}):\n{}",
            report.verdicts
        );
        assert_eq!(report.grants.len(), config.requests as usize, "seed {seed}");
        grants += report.grants.len();
        messages += report.messages;
        contended += u64::from(report.max_outstanding >= 2);
    }
    // The workload must actually make processes compete for the lock.
    assert!(
        contended * 2 > SEEDS,
        "only {contended} runs had contention"
    );
    eprintln!(
        "{SEEDS} seeds: {grants} grants, {messages} messages, {contended} contended runs, {:?}",
        started.elapsed()
    );
}

/// The trace of a run obeys the clock rules: each process's clock only
/// grows; a send carries the sender's clock; a receive lands past the
/// message's stamp (send → receive implies C(send) < C(receive)).
#[test]
fn traces_obey_the_clock_condition() {
    for seed in 0..300 {
        let report = simulate(&SimConfig {
            record_trace: true,
            ..varied(seed)
        })
        .unwrap();
        assert!(report.passed(), "seed {seed}");
        let mut last_clock: HashMap<ProcessId, u64> = HashMap::new();
        for event in &report.trace {
            let last = last_clock.insert(event.process, event.clock).unwrap_or(0);
            assert!(
                event.clock >= last,
                "seed {seed}: clock went back at {event}"
            );
            match &event.kind {
                TraceKind::Send { message, .. } => {
                    assert_eq!(message.stamp, Timestamp::new(event.clock, event.process));
                }
                TraceKind::Receive { message } => {
                    assert!(event.clock > message.stamp.time, "seed {seed}: {event}");
                }
                TraceKind::Request { request } => {
                    assert_eq!(*request, Timestamp::new(event.clock, event.process));
                }
                _ => {}
            }
        }
    }
}

#[test]
fn a_seed_gives_the_same_run_every_time() {
    let config = SimConfig::new(4, 7);
    let first = simulate(&config).unwrap();
    let second = simulate(&config).unwrap();
    assert_eq!(first, second);
    assert!(!first.trace.is_empty());
    let other = simulate(&SimConfig::new(4, 8)).unwrap();
    assert_ne!(first.trace, other.trace);
    // The first lines, pinned: a change here changes every recorded trace
    // (and what `bakery lamport simulate` prints for a seed).
    let head: Vec<String> = first
        .trace
        .iter()
        .take(6)
        .map(ToString::to_string)
        .collect();
    assert_eq!(head, PINNED_HEAD, "{head:#?}");
}

const PINNED_HEAD: [&str; 6] = [
    "t=0 P2 [C=1] request 1:P2",
    "t=0 P2 [C=1] send REQUEST(1:P2) -> P0",
    "t=0 P2 [C=1] send REQUEST(1:P2) -> P1",
    "t=0 P2 [C=1] send REQUEST(1:P2) -> P3",
    "t=4 P0 [C=2] recv REQUEST(1:P2) <- P2",
    "t=4 P0 [C=2] send ACK(2:P0) -> P2",
];

/// The first seed (of `limit`) whose run breaks mutual exclusion under
/// `broken`, and how many runs failed any check before it.
fn first_exclusion_violation(
    limit: u64,
    broken: impl Fn(SimConfig) -> SimConfig,
) -> Option<(u64, SimReport, u64)> {
    let mut other_failures = 0;
    for seed in 0..limit {
        let report = simulate(&broken(varied(seed))).unwrap();
        if !report.verdicts.mutual_exclusion.is_ok() {
            return Some((seed, report, other_failures));
        }
        other_failures += u64::from(!report.passed());
    }
    None
}

/// NEGATIVE CONTROL: without FIFO channels a later ACK can overtake an
/// earlier REQUEST, and two processes enter together. The checks must see
/// it.
#[test]
fn negative_control_non_fifo_channels_break_mutual_exclusion() {
    let found = first_exclusion_violation(2_000, |config| SimConfig {
        fifo: false,
        max_delay: config.max_delay.max(5),
        ..config
    });
    let (seed, report, other_failures) = found.expect("a violation within 2000 seeds");
    let Verdict::Violated(detail) = &report.verdicts.mutual_exclusion else {
        unreachable!()
    };
    eprintln!(
        "non-FIFO: mutual exclusion violated at seed {seed} \
         ({other_failures} earlier runs failed other checks): {detail}"
    );
    assert!(!report.passed());
}

/// NEGATIVE CONTROL: without rule 3.2 a process enters as soon as its own
/// request heads its own queue, before it can know of earlier requests.
#[test]
fn negative_control_without_heard_from_all_breaks_mutual_exclusion() {
    let found = first_exclusion_violation(200, |config| SimConfig {
        heard_from_all_rule: false,
        ..config
    });
    let (seed, report, _) = found.expect("a violation within 200 seeds");
    eprintln!(
        "rule 3.2 off: mutual exclusion violated at seed {seed}: {}",
        report.verdicts.mutual_exclusion
    );
    // The bulk helper finds it too.
    let report = first_failure(0..200, |seed| SimConfig {
        heard_from_all_rule: false,
        ..varied(seed)
    })
    .unwrap()
    .expect("a failure within 200 seeds");
    assert!(!report.passed());
}

#[test]
fn bad_configurations_are_refused() {
    assert!(simulate(&SimConfig::new(0, 1)).is_err());
    assert!(simulate(&SimConfig {
        max_delay: 0,
        ..SimConfig::new(2, 1)
    })
    .is_err());
    // Extreme but valid values neither panic nor overflow.
    let report = simulate(&SimConfig {
        max_delay: u64::MAX,
        max_think: u64::MAX,
        max_hold: u64::MAX,
        ..SimConfig::new(3, 5)
    })
    .unwrap();
    assert_eq!(report.grants.len(), 6);
}

#[test]
fn messages_round_trip_through_json_and_are_validated_on_arrival() {
    let release = Message::new(
        Timestamp::new(9, P1),
        MessageKind::Release { request_time: 4 },
    );
    let json = serde_json::to_string(&release).unwrap();
    assert_eq!(
        json,
        r#"{"stamp":{"time":9,"process":1},"kind":"release","request_time":4}"#
    );
    let back: Message = serde_json::from_str(&json).unwrap();
    assert_eq!(back, release);
    // Well-formed JSON, wrong content: refused, not a panic.
    let forged: Message =
        serde_json::from_str(r#"{"stamp":{"time":3,"process":4000000000},"kind":"ack"}"#).unwrap();
    let mut p0 = LamportMutex::new(P0, 2).unwrap();
    assert!(matches!(
        p0.receive(forged),
        Err(MutexError::UnknownProcess { .. })
    ));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap()
}

/// The machines on tokio, for real: 4 processes, each locking 50 times
/// from its own task on a multi-threaded runtime.
#[test]
fn tokio_transport_keeps_mutual_exclusion_and_order() {
    const PROCESSES: u32 = 4;
    const ROUNDS: usize = 50;
    runtime().block_on(async {
        let group = LocalGroup::spawn(PROCESSES).unwrap();
        let inside = Arc::new(AtomicBool::new(false));
        let grants = Arc::new(Mutex::new(Vec::new()));
        let workers: Vec<_> = group
            .nodes()
            .iter()
            .cloned()
            .map(|node| {
                let (inside, grants) = (Arc::clone(&inside), Arc::clone(&grants));
                tokio::spawn(async move {
                    for _ in 0..ROUNDS {
                        let request = node.lock().await?;
                        assert!(!inside.swap(true, Ordering::SeqCst), "two inside");
                        grants.lock().unwrap().push(request);
                        tokio::task::yield_now().await; // let the others try
                        inside.store(false, Ordering::SeqCst);
                        node.unlock().await?;
                    }
                    Ok::<(), TransportError>(())
                })
            })
            .collect();
        for worker in workers {
            worker.await.unwrap().unwrap();
        }
        group.shutdown().await.unwrap();
        let grants = grants.lock().unwrap();
        assert_eq!(grants.len(), PROCESSES as usize * ROUNDS);
        assert!(
            grants.windows(2).all(|w| w[0] < w[1]),
            "grants out of total order"
        );
    });
}

#[test]
fn tokio_transport_misuse_and_cancellation() {
    runtime().block_on(async {
        let group = LocalGroup::spawn(3).unwrap();
        let nodes = group.nodes().to_vec();
        assert!(group.node(ProcessId(3)).is_none());
        assert_eq!(
            nodes[0].unlock().await,
            Err(TransportError::Mutex(MutexError::NotHolding {
                state: State::Idle
            }))
        );

        let held = nodes[0].lock().await.unwrap();
        // P1 starts waiting, then gives up; its request is still queued
        // everywhere and is granted (and released at once) after P0.
        let p1 = nodes[1].clone();
        let waiting = tokio::spawn(async move { p1.lock().await });
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        nodes[0].unlock().await.unwrap();

        // P2 still gets the lock: P1's abandoned request did not wedge the group.
        let next = nodes[2].lock().await.unwrap();
        assert!(held < next);
        nodes[2].unlock().await.unwrap();
        // P1 can lock again (taking over its abandoned request if it is still
        // waiting, or with a new one).
        nodes[1].lock().await.unwrap();
        assert!(matches!(
            nodes[1].lock().await,
            Err(TransportError::Mutex(MutexError::AlreadyRequested { .. }))
        ));
        nodes[1].unlock().await.unwrap();
        group.shutdown().await.unwrap();
        assert_eq!(
            nodes[0].lock().await,
            Err(TransportError::Stopped(ProcessId(0)))
        );
    });
}

#[test]
fn a_lock_dropped_after_its_grant_releases_it() {
    runtime().block_on(async {
        let group = LocalGroup::spawn(2).unwrap();
        let nodes = group.nodes().to_vec();
        // Grant P1 while nobody awaits the grant: poll lock() until the
        // request is sent, then drop the future.
        for _ in 0..20 {
            let p1 = nodes[1].clone();
            let attempt = tokio::spawn(async move { p1.lock().await });
            tokio::task::yield_now().await;
            attempt.abort();
            if let Ok(Ok(_)) = attempt.await {
                // It completed before the abort: release it ourselves.
                nodes[1].unlock().await.unwrap();
            }
        }
        // Whatever state each attempt died in, P0 gets the lock.
        nodes[0].lock().await.unwrap();
        nodes[0].unlock().await.unwrap();
        group.shutdown().await.unwrap();
    });
}

#[test]
fn a_group_outside_a_runtime_is_an_error() {
    assert_eq!(LocalGroup::spawn(2).unwrap_err(), TransportError::NoRuntime);
    runtime().block_on(async {
        assert_eq!(
            LocalGroup::spawn(0).unwrap_err(),
            TransportError::Mutex(MutexError::NoProcesses)
        );
    });
}
