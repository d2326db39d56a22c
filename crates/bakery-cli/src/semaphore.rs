//! `bakery semaphore run|show`: N leased permits from the shell.

use std::io::Write;
use std::sync::Arc;

use bakery::semaphore::SemaphoreState;
use bakery::{Semaphore, VersionedStore};
use clap::{Args, Subcommand};

use crate::lock::{run_granted, HeldArgs};
use crate::output::{self, CliError};

/// `bakery semaphore …`
#[derive(Debug, Subcommand)]
pub enum SemaphoreCommand {
    /// Run COMMAND while holding one of NAME's N permits (granted in FIFO
    /// order); the permit's fencing token is in BAKERY_FENCING_TOKEN. Exits
    /// with COMMAND's status; stops COMMAND (exit 1) if the permit is lost.
    Run(RunArgs),

    /// Show NAME's permits, holders and queue. Exits 1 if it was never used.
    Show {
        /// Semaphore name.
        name: String,
    },
}

impl SemaphoreCommand {
    /// The semaphore the command names.
    pub fn name(&self) -> &str {
        match self {
            SemaphoreCommand::Run(args) => &args.held.name,
            SemaphoreCommand::Show { name } => name,
        }
    }
}

/// Arguments of `bakery semaphore run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub held: HeldArgs,

    /// How many permits the semaphore has; every client must give the same.
    #[arg(long, value_name = "N")]
    pub permits: u32,
}

/// `bakery semaphore run`.
pub async fn run(store: Arc<dyn VersionedStore>, args: &RunArgs) -> Result<u8, CliError> {
    let mut builder = Semaphore::builder(store, &args.held.name)
        .permits(args.permits)
        .lease(args.held.lease);
    if let Some(timeout) = args.held.timeout {
        builder = builder.acquire_timeout(timeout);
    }
    let semaphore = builder.build()?;
    run_granted(
        semaphore.acquire().await,
        &args.held.name,
        &args.held.command,
    )
    .await
}

/// `bakery semaphore show`.
pub async fn show(store: &dyn VersionedStore, name: &str, json: bool) -> Result<(), CliError> {
    let state = Semaphore::inspect(store, name).await?;
    output::show_state("semaphore", name, "never used", state, json, write_state)
}

fn write_state(out: &mut impl Write, name: &str, state: &SemaphoreState) -> std::io::Result<()> {
    writeln!(out, "semaphore: {name}")?;
    writeln!(
        out,
        "permits:   {} ({} held)",
        state.permits,
        state.holders.len()
    )?;
    writeln!(out, "token:     {}", state.token)?;
    for holder in &state.holders {
        let who = format!("holder {}", holder.owner);
        output::write_holder(out, &who, &holder.id, holder.token, holder.beat)?;
    }
    let waiters = state.queue.iter().map(|w| (&w.owner, &w.id));
    output::write_queue(out, "queue:     ", waiters)
}
