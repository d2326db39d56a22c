//! `bakery verify`: check a store — the user's own deployment and settings —
//! the way the project's tests check every backend: recorded concurrent
//! workloads, then a linearizability check of every `put_if_version`, and
//! the sequence, fencing and lock-order checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bakery::VersionedStore;
use bakery_verify::{verify, Config};
use clap::Args;

use crate::lock::parse_duration;
use crate::output::{self, CliError};

/// Arguments of `bakery verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Concurrent clients in each workload (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients: u32,
    /// Longest time each of the three workloads runs.
    #[arg(long, default_value = "10s", value_name = "D", value_parser = parse_duration)]
    pub duration: Duration,
    /// Keys the compare-and-set workload spreads over (1 to 1000): fewer
    /// keys, more contention.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub keys: u32,
    /// Store calls per client in the compare-and-set workload.
    #[arg(long, default_value_t = 500, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub ops: u64,
    /// Seed of the clients' choices (a failing run can be repeated).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where to write the recorded history (JSON) when a check fails;
    /// default: `bakery-verify-<namespace>.json` in the current directory.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
}

/// Run the checks on `store`; exit status 0 only when every check holds,
/// 1 when one fails (the history is written then) or cannot conclude.
pub async fn run(
    store: Arc<dyn VersionedStore>,
    args: &VerifyArgs,
    json: bool,
) -> Result<(), CliError> {
    let config = Config {
        clients: args.clients as usize,
        keys: args.keys as usize,
        duration: args.duration,
        cas_ops: args.ops,
        seed: args.seed,
        ..Config::default()
    };
    let report = verify(store, &config)
        .await
        .map_err(|e| CliError::Message(format!("verify: {e}")))?;
    let mut written = None;
    if !report.passed() {
        let path = args
            .history
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("bakery-verify-{}.json", report.namespace)));
        let history = report
            .history
            .to_json()
            .map_err(|e| CliError::Message(format!("verify: cannot encode the history: {e}")))?;
        std::fs::write(&path, history).map_err(|e| {
            CliError::Message(format!(
                "verify: cannot write the history to {}: {e}",
                path.display()
            ))
        })?;
        written = Some(path);
    }
    let value = output::json_if(json, || {
        let mut value = serde_json::to_value(&report)?;
        if let (Some(object), Some(path)) = (value.as_object_mut(), &written) {
            object.insert("history_file".into(), path.display().to_string().into());
        }
        Ok(value)
    })?;
    output::print(value, |out| {
        use std::io::Write;
        write!(out, "{report}")?;
        if let Some(path) = &written {
            writeln!(out, "history written to {}", path.display())?;
        }
        Ok(())
    })?;
    if report.passed() {
        Ok(())
    } else {
        Err(CliError::Exit(1))
    }
}
