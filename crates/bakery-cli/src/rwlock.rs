//! `bakery rwlock read|write|show`: a read-write lock from the shell.

use std::io::Write;
use std::sync::Arc;

use bakery::rwlock::RwLockState;
use bakery::{ErrorKind, RwLock, VersionedStore};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::lock::{run_while_held, HeldArgs, EXIT_BUSY};
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
    Show(ShowArgs),
}

/// Arguments of `bakery rwlock show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Lock name.
    pub name: String,
}

impl RwlockCommand {
    /// The lock the command names.
    pub fn name(&self) -> &str {
        match self {
            RwlockCommand::Read(args) | RwlockCommand::Write(args) => &args.name,
            RwlockCommand::Show(args) => &args.name,
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
    let busy = |err: bakery::Error| -> Result<u8, CliError> {
        if err.kind() == ErrorKind::TimedOut {
            output::report(&CliError::from(err));
            Ok(EXIT_BUSY)
        } else {
            Err(err.into())
        }
    };
    if write {
        let guard = match lock.write().await {
            Ok(guard) => guard,
            Err(err) => return busy(err),
        };
        let (token, lost) = (guard.token(), guard.lost());
        run_while_held(token, lost, || guard.release(), &args.name, &args.command).await
    } else {
        let guard = match lock.read().await {
            Ok(guard) => guard,
            Err(err) => return busy(err),
        };
        let (token, lost) = (guard.token(), guard.lost());
        run_while_held(token, lost, || guard.release(), &args.name, &args.command).await
    }
}

/// `bakery rwlock show`.
pub async fn show(store: &dyn VersionedStore, args: &ShowArgs, json: bool) -> Result<(), CliError> {
    let Some(state) = RwLock::inspect(store, &args.name).await? else {
        return Err(CliError::Message(format!(
            "rwlock {} does not exist (never used)",
            args.name
        )));
    };
    let value = json.then(|| json!({ "name": args.name, "state": state }));
    output::print(value, |out| write_state(out, &args.name, &state))
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
        writeln!(
            out,
            "  {} {} (request {}, token {}, heartbeat {})",
            holder.mode, holder.owner, holder.id, holder.token, holder.beat
        )?;
    }
    writeln!(out, "queue:   {} waiting", state.queue.len())?;
    for (position, waiter) in state.queue.iter().enumerate() {
        writeln!(
            out,
            "  {}. {} {} (request {})",
            position + 1,
            waiter.mode,
            waiter.owner,
            waiter.id
        )?;
    }
    Ok(())
}
