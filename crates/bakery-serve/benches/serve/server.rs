//! The server under test: `bakery --uri URI serve --listen 127.0.0.1:0`, a
//! process of its own (its runtime, its two worker threads), started the
//! way an operator starts it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// How long the server may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the calls in flight may take to finish after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `bakery serve`; killed if dropped before [`Server::stop`].
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    // Kept open: the server's stdout stays a live pipe.
    _stdout: Lines<BufReader<ChildStdout>>,
}

/// The `bakery` binary: `explicit`, or `target/<profile>/bakery` beside this
/// bench's own binary (`target/<profile>/deps/serve-…`).
pub fn binary(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|err| format!("where is this bench: {err}"))?
            .parent()
            .and_then(Path::parent)
            .map(|profile| profile.join("bakery"))
            .ok_or("cannot tell the target directory from this bench's path")?,
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no bakery binary at {}: build it with `cargo build --release -p bakery-cli \
             --features serve,postgres` (scripts/bench-serve.sh does), or name one with --bakery",
            path.display()
        ))
    }
}

impl Server {
    pub async fn start(binary: &Path, uri: &str) -> Result<Server, String> {
        let mut child = Command::new(binary)
            .arg("--uri")
            .arg(uri)
            .arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .env_remove("BAKERY_URI")
            // No log lines (an access-log event per request) on its stderr.
            .env_remove("BAKERY_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("starting {}: {err}", binary.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("the server's stdout was not piped")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_TIMEOUT, lines.next_line())
            .await
            .map_err(|_| format!("bakery serve said nothing for {START_TIMEOUT:?}"))?
            .map_err(|err| format!("reading bakery serve's stdout: {err}"))?
            .ok_or("bakery serve exited before it listened")?;
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|addr| addr.trim().parse().ok())
            .ok_or_else(|| {
                format!("bakery serve printed {line:?}, not `listening on http://ADDR`")
            })?;
        Ok(Server {
            child,
            addr,
            _stdout: lines,
        })
    }

    /// SIGTERM, then wait: the server must stop cleanly.
    pub async fn stop(mut self) -> Result<(), String> {
        let pid = self
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or("the server already exited")?;
        kill(Pid::from_raw(pid), Signal::SIGTERM)
            .map_err(|err| format!("SIGTERM to the server ({pid}): {err}"))?;
        let status: ExitStatus = tokio::time::timeout(STOP_TIMEOUT, self.child.wait())
            .await
            .map_err(|_| format!("bakery serve still running {STOP_TIMEOUT:?} after SIGTERM"))?
            .map_err(|err| format!("waiting for the server: {err}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("bakery serve stopped with {status}"))
        }
    }
}
