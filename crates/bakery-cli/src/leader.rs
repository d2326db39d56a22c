//! `bakery leader run|show`: leader election from the shell.

use std::io::Write;
use std::sync::Arc;

use bakery::election::{Election, Leader, Leadership};
use bakery::VersionedStore;
use clap::{Args, Subcommand};

use crate::lock::{run_granted, HeldArgs};
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
    Show {
        /// Election name.
        name: String,
    },
}

impl LeaderCommand {
    /// The election the command names.
    pub fn name(&self) -> &str {
        match self {
            LeaderCommand::Run(args) => &args.held.name,
            LeaderCommand::Show { name } => name,
        }
    }
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
    // The lock underneath: its name is what BAKERY_LOCK_NAME and the
    // messages show (`bakery lock show` it for the queue of candidates).
    let lock_name = format!("{}{}", bakery::election::LOCK_PREFIX, args.held.name);
    let campaign = election.campaign().await;
    run_granted(
        campaign.map(Leadership::into_lock_guard),
        &lock_name,
        &args.held.command,
    )
    .await
}

/// `bakery leader show`.
pub async fn show(store: Arc<dyn VersionedStore>, name: &str, json: bool) -> Result<(), CliError> {
    let election = Election::builder(store, name).build()?;
    let leader = output::found(election.leader().await?, || {
        format!("election {} has no leader", name)
    })?;
    output::print_named(name, "leader", &leader, json, |out| {
        write_leader(out, name, &leader)
    })
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
