//! `bakery once run|show|forget`: run a command at most once per key across
//! every machine sharing the store, and replay its result to later callers.

use std::ffi::OsString;
use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bakery::once::{Execution, Idempotency, OnBusy, OnFailure, RunError, Status};
use bakery::{Bytes, VersionedStore};
use clap::{Args, Subcommand};
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::lock::{exit_code, forward, parse_duration, signal, EXIT_BUSY};
use crate::output::{self, CliError};

/// `bakery once …`
#[derive(Debug, Subcommand)]
pub enum OnceCommand {
    /// Run COMMAND at most once for KEY, across every process on the store.
    ///
    /// The first caller runs COMMAND (its stdout is shown and stored; stderr
    /// passes through) and records its exit status. Later callers with the
    /// same KEY do not run it: they print the stored stdout and exit with
    /// the stored status. A caller arriving while it runs waits for it (or
    /// exits 75 with --no-wait). If the runner dies, another caller takes
    /// over after --lease. The same KEY with a different COMMAND is refused
    /// (exit 1). COMMAND gets BAKERY_ONCE_KEY and BAKERY_FENCING_TOKEN (1 for
    /// the first run, larger after a takeover).
    Run(OnceRunArgs),

    /// Show the stored record of KEY (status, attempt, exit status).
    Show(OnceKeyArgs),

    /// Delete the record of KEY so that it runs again.
    Forget(OnceKeyArgs),
}

/// Arguments of `bakery once run`.
#[derive(Debug, Args)]
pub struct OnceRunArgs {
    /// The key: ASCII letters, digits and `_ - . : @ + =` (no `/`).
    pub key: String,

    /// Keys live in a scope (a name); the same key in two scopes is two keys.
    #[arg(long, default_value = "cli")]
    pub scope: String,

    /// Forget the result this long after it finished, e.g. `24h` (default:
    /// keep it forever).
    #[arg(long, value_parser = parse_duration)]
    pub expire: Option<Duration>,

    /// How long this process may stay silent before another caller takes
    /// over (heartbeats every lease/3).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub lease: Duration,

    /// Exit 75 at once if another caller is running KEY.
    #[arg(long)]
    pub no_wait: bool,

    /// A non-zero exit releases KEY so the next caller runs COMMAND again
    /// (default: the failure is stored and replayed like a success).
    #[arg(long)]
    pub retry_failures: bool,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Arguments of `bakery once show|forget`.
#[derive(Debug, Args)]
pub struct OnceKeyArgs {
    /// The key.
    pub key: String,

    /// The scope, as for `once run`.
    #[arg(long, default_value = "cli")]
    pub scope: String,
}

/// What a run stores: the exit status, then COMMAND's stdout.
fn encode(status: u8, stdout: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(stdout.len() + 1);
    out.push(status);
    out.extend_from_slice(stdout);
    out.into()
}

fn decode(stored: &[u8]) -> Result<(u8, &[u8]), CliError> {
    stored
        .split_first()
        .map(|(status, stdout)| (*status, stdout))
        .ok_or_else(|| {
            CliError::Message("the stored result is empty (not written by bakery once)".into())
        })
}

/// Why the command did not produce a result to store.
#[derive(Debug)]
enum CommandFailure {
    /// It could not be started, or waiting for it failed.
    Start(String),
    /// It exited non-zero and --retry-failures is set.
    Exited(u8),
}

impl std::fmt::Display for CommandFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandFailure::Start(m) => f.write_str(m),
            CommandFailure::Exited(code) => write!(f, "exited with status {code}"),
        }
    }
}

/// `bakery once run`; returns the exit status.
pub async fn run(store: Arc<dyn VersionedStore>, args: &OnceRunArgs) -> Result<u8, CliError> {
    let mut builder = Idempotency::builder(store, &args.scope)
        .lease(args.lease)
        .on_busy(if args.no_wait {
            OnBusy::Fail
        } else {
            OnBusy::Wait
        })
        .on_failure(OnFailure::Release);
    if let Some(expire) = args.expire {
        builder = builder.expire_after(expire);
    }
    let once = builder.build()?;
    // The payload is the command line: the same key with another command
    // is a mistake, refused.
    let payload = args
        .command
        .iter()
        .map(|a| a.as_encoded_bytes())
        .collect::<Vec<_>>()
        .join(&0u8);
    let command = &args.command;
    let key = &args.key;
    let retry_failures = args.retry_failures;
    let ran = once
        .run_bytes(key, &payload, |attempt| async move {
            let (status, stdout) = spawn_and_tee(command, key, attempt.token()).await?;
            if status != 0 && retry_failures {
                return Err(CommandFailure::Exited(status));
            }
            Ok(encode(status, &stdout))
        })
        .await;
    match ran {
        Ok(Execution::Executed(stored)) => Ok(decode(&stored)?.0),
        Ok(Execution::Replayed(stored)) => {
            let (status, stdout) = decode(&stored)?;
            let _ = writeln!(
                std::io::stderr().lock(),
                "bakery: {key} already ran; replaying its output and exit status {status}"
            );
            let mut out = output::stdout();
            out.write_all(stdout)?;
            out.flush()?;
            Ok(status)
        }
        Err(RunError::Failed(CommandFailure::Exited(status))) => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "bakery: {key} exited with status {status}; released for a retry"
            );
            Ok(status)
        }
        Err(RunError::Failed(CommandFailure::Start(message))) => Err(CliError::Message(message)),
        Err(RunError::InProgress { owner, attempt, .. }) => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "bakery: {key} is running at {owner} (attempt {attempt}); not waiting"
            );
            Ok(EXIT_BUSY)
        }
        Err(RunError::Store(err)) => Err(err.into()),
        Err(other) => Err(CliError::Message(other.to_string())),
    }
}

/// Run COMMAND, copying its stdout to ours as it comes and keeping a copy.
/// SIGTERM/SIGINT are passed on; the key stays claimed until it exits.
async fn spawn_and_tee(
    command: &[OsString],
    key: &str,
    token: u64,
) -> Result<(u8, Vec<u8>), CommandFailure> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| CommandFailure::Start("no COMMAND given after --".into()))?;
    let mut child = Command::new(program)
        .args(args)
        .env("BAKERY_ONCE_KEY", key)
        .env("BAKERY_FENCING_TOKEN", token.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| {
            CommandFailure::Start(format!("cannot run {}: {e}", program.to_string_lossy()))
        })?;
    let mut pipe = child
        .stdout
        .take()
        .ok_or_else(|| CommandFailure::Start("no stdout pipe".into()))?;
    let started = |e: CliError| CommandFailure::Start(e.to_string());
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate()).map_err(started)?;
    let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt()).map_err(started)?;
    let mut captured = Vec::new();
    let mut buf = vec![0u8; 8192];
    let mut open = true;
    let status = loop {
        tokio::select! {
            read = pipe.read(&mut buf), if open => match read {
                Ok(0) | Err(_) => open = false,
                Ok(n) => {
                    captured.extend_from_slice(&buf[..n]);
                    // Our own stdout may be closed; the copy is still stored.
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(&buf[..n]).and_then(|()| out.flush());
                }
            },
            status = child.wait(), if !open => {
                break status.map_err(|e| CommandFailure::Start(format!("waiting for the command: {e}")))?;
            }
            _ = terminate.recv() => forward(&child, Signal::SIGTERM),
            _ = interrupt.recv() => forward(&child, Signal::SIGINT),
        }
    };
    Ok((exit_code(status), captured))
}

/// `bakery once show`.
pub async fn show(
    store: Arc<dyn VersionedStore>,
    args: &OnceKeyArgs,
    json: bool,
) -> Result<(), CliError> {
    let once = Idempotency::builder(store, &args.scope).build()?;
    let record = output::found(once.inspect(&args.key).await?, || {
        format!(
            "key {} has no record (never run, released or forgotten)",
            args.key
        )
    })?;
    let exit = match record.status {
        Status::Completed => Some(decode(&record.result_bytes()?)?.0),
        _ => None,
    };
    let value = json.then(
        || json!({ "key": args.key, "scope": args.scope, "record": record, "exit_status": exit }),
    );
    output::print(value, |out| {
        let status = match record.status {
            Status::InProgress => "in progress",
            Status::Completed => "completed",
            Status::Failed => "failed",
        };
        writeln!(out, "key:     {} (scope {})", args.key, args.scope)?;
        writeln!(out, "status:  {status}")?;
        writeln!(out, "attempt: {}", record.attempt)?;
        if let Some(w) = &record.worker {
            writeln!(out, "worker:  {} (lease {} ms)", w.owner, w.lease_ms)?;
        }
        if let Some(code) = exit {
            writeln!(out, "exit:    {code}")?;
        }
        Ok(())
    })
}

/// `bakery once forget`.
pub async fn forget(store: Arc<dyn VersionedStore>, args: &OnceKeyArgs) -> Result<(), CliError> {
    let once = Idempotency::builder(store, &args.scope).build()?;
    if once.forget(&args.key).await? {
        Ok(())
    } else {
        Err(CliError::Message(format!("key {} has no record", args.key)))
    }
}
