//! `bakery semaphore run|show`: N leased permits from the shell.

use std::io::Write;
use std::sync::Arc;

use bakery::semaphore::SemaphoreState;
use bakery::{ErrorKind, Semaphore, VersionedStore};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::lock::{run_while_held, HeldArgs, EXIT_BUSY};
use crate::output::{self, CliError};

/// `bakery semaphore …`
#[derive(Debug, Subcommand)]
pub enum SemaphoreCommand {
    /// Run COMMAND while holding one of NAME's N permits (granted in FIFO
    /// order); the permit's fencing token is in BAKERY_FENCING_TOKEN. Exits
    /// with COMMAND's status; stops COMMAND (exit 1) if the permit is lost.
    Run(RunArgs),

    /// Show NAME's permits, holders and queue. Exits 1 if it was never used.
    Show(ShowArgs),
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

/// Arguments of `bakery semaphore show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Semaphore name.
    pub name: String,
}

impl SemaphoreCommand {
    /// The semaphore the command names.
    pub fn name(&self) -> &str {
        match self {
            SemaphoreCommand::Run(args) => &args.held.name,
            SemaphoreCommand::Show(args) => &args.name,
        }
    }
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
    let permit = match semaphore.acquire().await {
        Ok(permit) => permit,
        Err(err) if err.kind() == ErrorKind::TimedOut => {
            output::report(&CliError::from(err));
            return Ok(EXIT_BUSY);
        }
        Err(err) => return Err(err.into()),
    };
    let (token, lost) = (permit.token(), permit.lost());
    run_while_held(
        token,
        lost,
        || permit.release(),
        &args.held.name,
        &args.held.command,
    )
    .await
}

/// `bakery semaphore show`.
pub async fn show(store: &dyn VersionedStore, args: &ShowArgs, json: bool) -> Result<(), CliError> {
    let Some(state) = Semaphore::inspect(store, &args.name).await? else {
        return Err(CliError::Message(format!(
            "semaphore {} does not exist (never used)",
            args.name
        )));
    };
    let value = json.then(|| json!({ "name": args.name, "state": state }));
    output::print(value, |out| write_state(out, &args.name, &state))
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
        writeln!(
            out,
            "  holder {} (request {}, token {}, heartbeat {})",
            holder.owner, holder.id, holder.token, holder.beat
        )?;
    }
    writeln!(out, "queue:     {} waiting", state.queue.len())?;
    for (position, waiter) in state.queue.iter().enumerate() {
        writeln!(
            out,
            "  {}. {} (request {})",
            position + 1,
            waiter.owner,
            waiter.id
        )?;
    }
    Ok(())
}
