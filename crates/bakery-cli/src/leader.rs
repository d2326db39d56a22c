//! `bakery leader run|show`: leader election from the shell.

use std::io::Write;
use std::sync::Arc;

use bakery::election::{Election, Leader};
use bakery::{ErrorKind, VersionedStore};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::lock::{run_while_held, HeldArgs, EXIT_BUSY};
use crate::output::{self, CliError};

/// `bakery leader …`
#[derive(Debug, Subcommand)]
pub enum LeaderCommand {
    /// Campaign for leadership of NAME (in FIFO order among candidates) and
    /// run COMMAND while leading; the term is in BAKERY_FENCING_TOKEN. Exits
    /// with COMMAND's status; stops COMMAND (exit 1) if leadership is lost.
    Run(RunArgs),

    /// Show NAME's leader: its value, term and owner. Exits 1 if nobody
    /// leads.
    Show(ShowArgs),
}

/// Arguments of `bakery leader run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub held: HeldArgs,

    /// The value published while leading (e.g. this node's address).
    #[arg(long)]
    pub value: Option<String>,
}

/// Arguments of `bakery leader show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Election name.
    pub name: String,
}

impl LeaderCommand {
    /// The election the command names.
    pub fn name(&self) -> &str {
        match self {
            LeaderCommand::Run(args) => &args.held.name,
            LeaderCommand::Show(args) => &args.name,
        }
    }
}

/// `bakery leader run`.
pub async fn run(store: Arc<dyn VersionedStore>, args: &RunArgs) -> Result<u8, CliError> {
    let mut builder = Election::builder(store, &args.held.name).lease(args.held.lease);
    if let Some(value) = &args.value {
        builder = builder.value(value.clone());
    }
    if let Some(timeout) = args.held.timeout {
        builder = builder.campaign_timeout(timeout);
    }
    let election = builder.build()?;
    let leadership = match election.campaign().await {
        Ok(leadership) => leadership,
        Err(err) if err.kind() == ErrorKind::TimedOut => {
            output::report(&CliError::from(err));
            return Ok(EXIT_BUSY);
        }
        Err(err) => return Err(err.into()),
    };
    // The lock underneath: its name is what BAKERY_LOCK_NAME and the
    // messages show (`bakery lock show` it for the queue of candidates).
    let lock_name = format!("{}{}", bakery::election::LOCK_PREFIX, args.held.name);
    let guard = leadership.into_lock_guard();
    let (token, lost) = (guard.token(), guard.lost());
    run_while_held(
        token,
        lost,
        || guard.release(),
        &lock_name,
        &args.held.command,
    )
    .await
}

/// `bakery leader show`.
pub async fn show(
    store: Arc<dyn VersionedStore>,
    args: &ShowArgs,
    json: bool,
) -> Result<(), CliError> {
    let election = Election::builder(store, &args.name).build()?;
    let Some(leader) = election.leader().await? else {
        return Err(CliError::Message(format!(
            "election {} has no leader",
            args.name
        )));
    };
    let value = json.then(|| json!({ "name": args.name, "leader": leader }));
    output::print(value, |out| write_leader(out, &args.name, &leader))
}

fn write_leader(out: &mut impl Write, name: &str, leader: &Leader) -> std::io::Result<()> {
    writeln!(out, "election: {name}")?;
    writeln!(out, "term:     {}", leader.term)?;
    writeln!(out, "leader:   {} (campaign {})", leader.owner, leader.id)?;
    if let Some(value) = &leader.value {
        writeln!(out, "value:    {value}")?;
    }
    Ok(())
}
