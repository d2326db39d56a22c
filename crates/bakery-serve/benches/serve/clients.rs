//! The clients of `bakery serve` in other languages (clients/python,
//! clients/go, clients/ts), each its own process against the same server as
//! the other cells: ids per second from the blocks it reserves, and lock
//! acquire + release per second on one uncontended lock. Each client's own
//! bench command measures; this runs it and reads its one JSON line.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::process::Command;

/// How long a client's bench may take beyond its measured time (its
/// runtime's start, its warm-up, its teardown).
const GRACE: Duration = Duration::from_secs(120);

/// One client's figures in one round.
#[derive(Debug, Clone)]
pub struct ClientCell {
    pub client: String,
    pub ids_per_sec: f64,
    pub block: u64,
    pub lock_pairs_per_sec: f64,
}

/// The JSON line a client's bench prints (clients/README.md).
#[derive(Debug, Deserialize)]
struct Reported {
    ids_per_s: f64,
    block: u64,
    lock_ops_per_s: f64,
}

/// Run `command` (by `sh -c`, from the repository root) against the server
/// at `addr` for `duration`.
pub async fn run(
    addr: SocketAddr,
    client: &str,
    command: &str,
    duration: Duration,
) -> Result<ClientCell, String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let seconds = duration.as_secs_f64().max(1.0);
    let child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(&repo)
        .env("BAKERY_URL", format!("http://{addr}"))
        .env("BAKERY_BENCH_SECONDS", format!("{seconds}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("{client}: starting `{command}`: {err}"))?;
    let limit = Duration::from_secs_f64(seconds * 2.0) + GRACE;
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| format!("{client}: `{command}` ran longer than {limit:?}"))?
        .map_err(|err| format!("{client}: `{command}`: {err}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{client}: `{command}` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let line = (stdout.lines().rev())
        .find(|line| line.trim_start().starts_with('{'))
        .ok_or_else(|| format!("{client}: `{command}` printed no JSON line: {stdout}"))?;
    let reported: Reported = serde_json::from_str(line)
        .map_err(|err| format!("{client}: `{command}` printed {line:?}: {err}"))?;
    let figures = [reported.ids_per_s, reported.lock_ops_per_s];
    if figures.iter().any(|f| !f.is_finite() || *f <= 0.0) {
        return Err(format!("{client}: `{command}` reported {line}"));
    }
    Ok(ClientCell {
        client: client.to_owned(),
        ids_per_sec: reported.ids_per_s,
        block: reported.block,
        lock_pairs_per_sec: reported.lock_ops_per_s,
    })
}
