//! `bakery lamport simulate`: Lamport's distributed mutex on a simulated
//! network, printed as the seed's diagrams in text, with the checks'
//! verdicts. Opens no store.

use std::io::Write;

use bakery_recipes::lamport::{simulate as run_simulation, SimConfig, SimReport};
use clap::{Args, Subcommand, ValueEnum};

use crate::output::{self, CliError};

/// The most processes `bakery lamport simulate` runs.
pub const MAX_PROCESSES: u32 = 32;
/// The most lock requests `bakery lamport simulate` issues.
pub const MAX_STEPS: u32 = 10_000;

/// `bakery lamport …`
#[derive(Debug, Subcommand)]
pub enum LamportCommand {
    /// Simulate Lamport's distributed mutual exclusion (no store involved).
    ///
    /// N processes exchange REQUEST, ACK and RELEASE messages over a
    /// simulated network with random delays (FIFO per channel) under a random
    /// request/hold/release workload. Prints one line per event with the
    /// process's Lamport clock, e.g.
    /// `t=4 P1 [C=3] send REQUEST(3:P1) -> P2`, then the verdicts of the
    /// three checks: mutual exclusion, grants in the total order of the
    /// requests, every request granted. The same seed prints the same run.
    /// Exits 0 when all checks pass, 1 otherwise.
    Simulate(SimulateArgs),
}

/// Arguments of `bakery lamport simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Processes in the group (2 to 32), named P0, P1, …
    #[arg(
        long,
        default_value_t = 3,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(2..=i64::from(MAX_PROCESSES))
    )]
    pub processes: u32,

    /// Seed of every random choice (delays, think and hold times).
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,

    /// Lock requests to issue across all processes (1 to 10000); each is
    /// held a while and released. Default: twice the processes.
    #[arg(
        long,
        value_name = "K",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_STEPS))
    )]
    pub steps: Option<u32>,

    /// Run a deliberately broken variant, to watch the checks catch it:
    /// `non-fifo` lets messages overtake each other on a channel,
    /// `skip-heard-from-all` enters without hearing a later message from
    /// every other process (rule 3.2).
    #[arg(long, value_enum, value_name = "VARIANT")]
    pub negative_control: Option<NegativeControl>,
}

/// The deliberately broken variants of `--negative-control`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NegativeControl {
    /// Channels that reorder messages (the algorithm needs FIFO).
    NonFifo,
    /// Enter when the request heads the queue, without rule 3.2.
    SkipHeardFromAll,
}

/// Run the simulation and print it; an error (exit 1) when a check fails.
pub fn simulate(args: &SimulateArgs, json: bool) -> Result<(), CliError> {
    let mut config = SimConfig::new(args.processes, args.seed);
    if let Some(steps) = args.steps {
        config.requests = steps;
    }
    match args.negative_control {
        Some(NegativeControl::NonFifo) => config.fifo = false,
        Some(NegativeControl::SkipHeardFromAll) => config.heard_from_all_rule = false,
        None => {}
    }
    let report = run_simulation(&config)
        .map_err(|err| CliError::Message(format!("lamport simulation: {err}")))?;

    let mut out = output::stdout();
    if json {
        write_json(&mut out, &report)?;
    } else {
        write_text(&mut out, &report)?;
    }
    out.flush()?;

    if report.passed() {
        Ok(())
    } else {
        let verdicts = &report.verdicts;
        let failed: Vec<&str> = [
            ("mutual exclusion", verdicts.mutual_exclusion.is_ok()),
            ("grant order", verdicts.grant_order.is_ok()),
            ("liveness", verdicts.liveness.is_ok()),
        ]
        .into_iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| name)
        .collect();
        Err(CliError::Message(format!(
            "lamport simulation (seed {}): check failed: {}",
            config.seed,
            failed.join(", ")
        )))
    }
}

fn describe(config: &SimConfig) -> String {
    let mut channels = if config.fifo {
        "FIFO channels".to_owned()
    } else {
        "NON-FIFO channels (negative control)".to_owned()
    };
    if !config.heard_from_all_rule {
        channels.push_str(", rule 3.2 OFF (negative control)");
    }
    format!(
        "{} processes, seed {}, {} requests, message delay 1..={}, {channels}",
        config.processes, config.seed, config.requests, config.max_delay
    )
}

fn write_text(out: &mut impl Write, report: &SimReport) -> std::io::Result<()> {
    writeln!(out, "# Lamport mutex: {}", describe(&report.config))?;
    for event in &report.trace {
        writeln!(out, "{event}")?;
    }
    let grants: Vec<String> = report.grants.iter().map(ToString::to_string).collect();
    writeln!(
        out,
        "# {} grants, {} messages, ended at t={}: {}",
        report.grants.len(),
        report.messages,
        report.end_time,
        grants.join(" ")
    )?;
    writeln!(out, "{}", report.verdicts)
}

/// `{"config":…,"events":[…],"grants":[…],"verdicts":{…},"passed":…}`,
/// streamed event by event; each event also carries its text line.
fn write_json(out: &mut impl Write, report: &SimReport) -> std::io::Result<()> {
    out.write_all(b"{\"config\":")?;
    serde_json::to_writer(&mut *out, &report.config)?;
    out.write_all(b",\"events\":[")?;
    for (i, event) in report.trace.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let mut value = serde_json::to_value(event)?;
        if let Some(fields) = value.as_object_mut() {
            fields.insert("text".to_owned(), event.to_string().into());
        }
        serde_json::to_writer(&mut *out, &value)?;
    }
    out.write_all(b"],\"grants\":")?;
    serde_json::to_writer(&mut *out, &report.grants)?;
    out.write_all(b",\"messages\":")?;
    serde_json::to_writer(&mut *out, &report.messages)?;
    out.write_all(b",\"verdicts\":")?;
    serde_json::to_writer(&mut *out, &report.verdicts)?;
    write!(out, ",\"passed\":{}}}", report.passed())?;
    out.write_all(b"\n")
}
