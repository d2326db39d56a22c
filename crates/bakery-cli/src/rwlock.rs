//! `bakery rwlock read|write|show`: a read-write lock from the shell.

use std::io::Write;
use std::sync::Arc;

use bakery::rwlock::RwLockState;
use bakery::{RwLock, VersionedStore};
use clap::Subcommand;

use crate::lock::{run_granted, HeldArgs};
use crate::output::{self, CliError};

/// `bakery rwlock …`
#[derive(Debug, Subcommand)]
pub enum RwlockCommand {
    /// Run COMMAND while holding NAME for reading (shared with other
    /// readers, never with a writer); granted in FIFO order, behind any
    /// writer that asked earlier. The grant's fencing token is in
    /// BAKERY_FENCING_TOKEN. Exits with COMMAND's status; stops COMMAND
    /// (exit 1) if the lock is lost.
    Read(HeldArgs),

    /// Run COMMAND while holding NAME for writing (nobody else holds it);
    /// otherwise as `read`.
    Write(HeldArgs),

    /// Show NAME's holders and queue. Exits 1 if it was never used.
    Show {
        /// Lock name.
        name: String,
    },
}

impl RwlockCommand {
    /// The lock the command names.
    pub fn name(&self) -> &str {
        match self {
            RwlockCommand::Read(args) | RwlockCommand::Write(args) => &args.name,
            RwlockCommand::Show { name } => name,
        }
    }
}

/// `bakery rwlock read` (`write` false) or `bakery rwlock write`.
pub async fn run(
    store: Arc<dyn VersionedStore>,
    args: &HeldArgs,
    write: bool,
) -> Result<u8, CliError> {
    let mut builder = RwLock::builder(store, &args.name).lease(args.lease);
    if let Some(timeout) = args.timeout {
        builder = builder.acquire_timeout(timeout);
    }
    let lock = builder.build()?;
    if write {
        run_granted(lock.write().await, &args.name, &args.command).await
    } else {
        run_granted(lock.read().await, &args.name, &args.command).await
    }
}

/// `bakery rwlock show`.
pub async fn show(store: &dyn VersionedStore, name: &str, json: bool) -> Result<(), CliError> {
    let state = RwLock::inspect(store, name).await?;
    output::show_state("rwlock", name, "never used", state, json, write_state)
}

fn write_state(out: &mut impl Write, name: &str, state: &RwLockState) -> std::io::Result<()> {
    writeln!(out, "rwlock:  {name}")?;
    let held = if state.has_writer() {
        "a writer".to_owned()
    } else {
        format!("{} readers", state.readers())
    };
    writeln!(out, "held by: {held}")?;
    writeln!(out, "token:   {}", state.token)?;
    for holder in &state.holders {
        let who = format!("{} {}", holder.mode, holder.owner);
        output::write_holder(out, &who, &holder.id, holder.token, holder.beat)?;
    }
    let waiters = state
        .queue
        .iter()
        .map(|w| (format!("{} {}", w.mode, w.owner), &w.id));
    output::write_queue(out, "queue:   ", waiters)
}
