//! `bakery lock run|try|show` and `bakery fence read|write`: the fair lock
//! and fenced values from the shell.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use bakery::fence::{Fenced, FencedRead, FencedValue, FencedWrite};
use bakery::lock::{Lock, LockBuilder, LockGuard, LockState, LostReason};
use bakery::{ErrorKind, VersionedStore};
use bakery::{Permit, ReadGuard, WriteGuard};
use clap::{Args, Subcommand};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use std::future::Future;
use tokio::process::{Child, Command};

use crate::output::{self, CliError};

/// Exit status of `lock try` when the lock is busy, and of `lock run` when
/// `--timeout` passes (EX_TEMPFAIL: try again later).
pub const EXIT_BUSY: u8 = 75;

/// How long COMMAND gets to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// `bakery lock …`
#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Run COMMAND while holding the lock NAME; wait in FIFO order for it.
    ///
    /// COMMAND gets the grant's fencing token in BAKERY_FENCING_TOKEN (and
    /// the lock's name in BAKERY_LOCK_NAME); pass it to whatever it writes
    /// (e.g. `bakery fence write`) so a holder that outlived its lease is
    /// refused. bakery exits with COMMAND's status (128+N if killed by signal
    /// N). If the lock is lost while COMMAND runs (its lease ran out and
    /// another client took over), bakery says so on stderr, stops COMMAND
    /// (SIGTERM, then SIGKILL after 5 s) and exits 1. With --timeout, gives
    /// up with status 75 if the lock is not granted in time.
    Run(RunArgs),

    /// Run COMMAND only if the lock NAME is free and nobody waits for it;
    /// otherwise exit 75 at once without running it.
    Try(TryArgs),

    /// Show a lock's holder, fencing token and queue. Exits 1 if the lock was
    /// never taken.
    Show {
        /// Lock name.
        name: String,
    },
}

impl LockCommand {
    /// The lock the command names.
    pub fn name(&self) -> &str {
        match self {
            LockCommand::Run(args) => &args.held.name,
            LockCommand::Try(args) => &args.name,
            LockCommand::Show { name } => name,
        }
    }
}

/// Arguments of `bakery lock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub held: HeldArgs,

    #[command(flatten)]
    pub job: JobArgs,
}

/// What every `run` of the lock family takes: `lock run`, `leader run`,
/// `semaphore run`, `rwlock read` and `rwlock write`.
#[derive(Debug, Args)]
pub struct HeldArgs {
    /// Name: ASCII letters, digits and `_ - . : @ + =` (no `/`).
    pub name: String,

    /// Lease: how long the grant survives this process's silence
    /// (heartbeats every lease/3), e.g. `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub lease: Duration,

    /// Give up (exit 75) if not granted within this long, e.g. `30s`.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Arguments of `bakery lock try`.
#[derive(Debug, Args)]
pub struct TryArgs {
    /// Lock name.
    pub name: String,

    /// Lease, as for `lock run`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub lease: Duration,

    #[command(flatten)]
    pub job: JobArgs,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Job-lock options of `bakery lock run` and `bakery lock try`.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// Hold the lock at most this long: then release it and stop COMMAND
    /// (SIGTERM, then SIGKILL), exit 1. E.g. `15m`.
    #[arg(long, value_parser = parse_duration)]
    pub at_most: Option<Duration>,

    /// Hold the lock at least this long, even if COMMAND ends sooner (this
    /// process waits, renewing the lease): a fast job then does not run
    /// twice when another node's scheduler fires a little later. E.g. `30s`.
    #[arg(long, value_parser = parse_duration)]
    pub at_least: Option<Duration>,

    /// A small value stored with the grant and shown by `bakery lock show`
    /// (e.g. this node's address), at most 1024 bytes.
    #[arg(long)]
    pub data: Option<String>,
}

impl JobArgs {
    fn apply(&self, mut builder: LockBuilder) -> LockBuilder {
        if let Some(at_most) = self.at_most {
            builder = builder.lock_at_most_for(at_most);
        }
        if let Some(at_least) = self.at_least {
            builder = builder.lock_at_least_for(at_least);
        }
        if let Some(data) = &self.data {
            builder = builder.data(data.clone());
        }
        builder
    }
}

/// `bakery fence …`
#[derive(Debug, Subcommand)]
pub enum FenceCommand {
    /// Print a fenced value (with --json also the token that wrote it).
    /// Inside `bakery lock run` (or with --token) the read raises the fence
    /// to the holder's token first, so a read-modify-write cannot lose an
    /// update to an older holder. Exits 1 if it was never written, or if a
    /// newer token was seen.
    Read(FenceReadArgs),

    /// Store VALUE if TOKEN is at least the largest token the value has
    /// seen; otherwise refuse (exit 1) and keep the newer value.
    Write(FenceWriteArgs),
}

/// Arguments of `bakery fence read`.
#[derive(Debug, Args)]
pub struct FenceReadArgs {
    /// Name of the fenced value.
    pub name: String,

    /// Read as the holder of this fencing token (`bakery lock run` exports
    /// it): the fence is raised to it first, so holders with older tokens
    /// can no longer write; refused (exit 1) if a newer token was seen.
    #[arg(long, env = "BAKERY_FENCING_TOKEN")]
    pub token: Option<u64>,
}

/// Arguments of `bakery fence write`.
#[derive(Debug, Args)]
pub struct FenceWriteArgs {
    /// Name of the fenced value.
    pub name: String,

    /// The value to store.
    pub value: String,

    /// Fencing token of the writer; `bakery lock run` exports it.
    #[arg(long, env = "BAKERY_FENCING_TOKEN")]
    pub token: u64,
}

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(duration)
}

/// `bakery lock run`.
pub async fn run(store: Arc<dyn VersionedStore>, args: &RunArgs) -> Result<u8, CliError> {
    let held = &args.held;
    let mut builder = args
        .job
        .apply(Lock::builder(store, &held.name).lease(held.lease));
    if let Some(timeout) = held.timeout {
        builder = builder.acquire_timeout(timeout);
    }
    let lock = builder.build()?;
    run_granted(lock.acquire().await, &held.name, &held.command).await
}

/// `bakery lock try`.
pub async fn try_run(store: Arc<dyn VersionedStore>, args: &TryArgs) -> Result<u8, CliError> {
    let lock = args
        .job
        .apply(Lock::builder(store, &args.name).lease(args.lease))
        .build()?;
    match lock.try_acquire().await? {
        Some(guard) => run_while_held(guard, &args.name, &args.command).await,
        None => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "bakery: lock {} is busy; not running the command",
                args.name
            );
            Ok(EXIT_BUSY)
        }
    }
}

/// A grant COMMAND can run under: a lock guard (a leadership's too), a
/// permit, a read or a write hold.
pub(crate) trait Grant {
    fn token(&self) -> u64;
    fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static;
    fn release(self) -> impl Future<Output = bakery::Result<()>>;
}

/// The guards have the same methods (the recipes make them with one macro)
/// but no trait of their own.
macro_rules! grant {
    ($($guard:ty),+) => {$(
        impl Grant for $guard {
            fn token(&self) -> u64 {
                <$guard>::token(self)
            }
            fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
                <$guard>::lost(self)
            }
            fn release(self) -> impl Future<Output = bakery::Result<()>> {
                <$guard>::release(self)
            }
        }
    )+};
}
grant!(LockGuard, Permit, ReadGuard, WriteGuard);

/// Run COMMAND under the grant `asked` for; if `--timeout` passed first,
/// say so and exit 75 (EX_TEMPFAIL) without running it.
pub(crate) async fn run_granted(
    asked: bakery::Result<impl Grant>,
    name: &str,
    command: &[OsString],
) -> Result<u8, CliError> {
    match asked {
        Ok(grant) => run_while_held(grant, name, command).await,
        Err(err) if err.kind() == ErrorKind::TimedOut => {
            output::report(&CliError::from(err));
            Ok(EXIT_BUSY)
        }
        Err(err) => Err(err.into()),
    }
}

/// Run COMMAND while `grant` is held: stop it if the grant is lost, pass
/// stop signals on, then release. `name` is exported as BAKERY_LOCK_NAME,
/// the grant's token as BAKERY_FENCING_TOKEN.
async fn run_while_held(
    grant: impl Grant,
    name: &str,
    command: &[OsString],
) -> Result<u8, CliError> {
    let lost = grant.lost();
    let (program, args) = command
        .split_first()
        .ok_or_else(|| CliError::Message("no COMMAND given after --".into()))?;
    let mut child = match Command::new(program)
        .args(args)
        .env("BAKERY_FENCING_TOKEN", grant.token().to_string())
        .env("BAKERY_LOCK_NAME", name)
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            let _ = grant.release().await;
            return Err(CliError::Message(format!(
                "cannot run {}: {err}",
                program.to_string_lossy()
            )));
        }
    };
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt())?;
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            reason = &mut lost => {
                output::report(&CliError::Message(format!(
                    "lock {name} lost ({reason}); stopping the command"
                )));
                stop(&mut child).await?;
                return Ok(1);
            }
            // Pass a stop request on to the command and keep holding the
            // lock until it has exited.
            _ = terminate.recv() => forward(&child, Signal::SIGTERM),
            _ = interrupt.recv() => forward(&child, Signal::SIGINT),
        }
    };
    match grant.release().await {
        Ok(()) => Ok(exit_code(status)),
        Err(err) if err.kind() == ErrorKind::Lost => {
            output::report(&CliError::Message(format!(
                "lock {name} was lost while the command ran (token no longer current): {err}"
            )));
            Ok(1)
        }
        Err(err) => Err(err.into()),
    }
}

pub(crate) fn signal(
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal, CliError> {
    tokio::signal::unix::signal(kind)
        .map_err(|e| CliError::Message(format!("cannot install a signal handler: {e}")))
}

pub(crate) fn forward(child: &Child, signal: Signal) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// SIGTERM, then SIGKILL if COMMAND has not exited after the grace period.
async fn stop(child: &mut Child) -> Result<(), CliError> {
    forward(child, Signal::SIGTERM);
    if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
        child.kill().await?;
    }
    Ok(())
}

/// COMMAND's status as ours: its code, or 128+N when killed by signal N.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

/// `bakery lock show`.
pub async fn show(store: &dyn VersionedStore, name: &str, json: bool) -> Result<(), CliError> {
    let state = Lock::inspect(store, name).await?;
    output::show_state("lock", name, "never taken", state, json, write_state)
}

fn write_state(out: &mut impl Write, name: &str, state: &LockState) -> std::io::Result<()> {
    writeln!(out, "lock:   {name}")?;
    writeln!(out, "token:  {}", state.token)?;
    match &state.holder {
        Some(holder) => writeln!(
            out,
            "holder: {} (request {}, heartbeat {}{}, lease {})",
            holder.owner,
            holder.id,
            holder.beat,
            if holder.beat == 0 {
                ", handed over, not yet claimed"
            } else {
                ""
            },
            humantime::format_duration(Duration::from_millis(holder.lease_ms))
        )?,
        None => writeln!(out, "holder: none (free)")?,
    }
    if let Some(data) = state.holder.as_ref().and_then(|h| h.data.as_ref()) {
        writeln!(out, "data:   {data}")?;
    }
    let waiters = state.queue.iter().map(|w| (&w.owner, &w.id));
    output::write_queue(out, "queue:  ", waiters)
}

/// `bakery fence read`.
pub async fn fence_read(
    store: Arc<dyn VersionedStore>,
    args: &FenceReadArgs,
    json: bool,
) -> Result<(), CliError> {
    let value = FencedValue::new(store, &args.name)?;
    let fenced = match args.token {
        None => value.read().await?,
        Some(token) => match value.read_fenced(token).await? {
            FencedRead::Current(data) => data.map(|data| Fenced { token, data }),
            FencedRead::Rejected { highest } => {
                return Err(CliError::Message(format!(
                    "fenced read of {} refused: token {token} is older than {highest} (the lock has moved on)",
                    args.name
                )))
            }
        },
    };
    let fenced = output::found(fenced, || {
        format!("fenced value {} does not exist", args.name)
    })?;
    let value = json.then(|| {
        let data = String::from_utf8_lossy(&fenced.data);
        json!({ "name": args.name, "token": fenced.token, "value": data })
    });
    output::print(value, |out| {
        out.write_all(&fenced.data)?;
        writeln!(out)
    })
}

/// `bakery fence write`.
pub async fn fence_write(
    store: Arc<dyn VersionedStore>,
    args: &FenceWriteArgs,
) -> Result<(), CliError> {
    let value = FencedValue::new(store, &args.name)?;
    match value
        .write(args.token, args.value.clone().into_bytes().into())
        .await?
    {
        FencedWrite::Accepted(_) => Ok(()),
        FencedWrite::Rejected { highest } => Err(CliError::Message(format!(
            "fenced write to {} rejected: token {} is older than {highest} (another holder wrote since)",
            args.name, args.token
        ))),
    }
}
