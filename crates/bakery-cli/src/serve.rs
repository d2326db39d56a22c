//! `bakery serve`: the store's sequences, locks and idempotency keys over
//! HTTP/JSON.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bakery::VersionedStore;
use bakery_serve::{ServeConfig, DEFAULT_LISTEN, DEFAULT_MAX_SESSIONS, DEFAULT_SEGMENT_SIZE};
use tokio::signal::unix::{signal, SignalKind};

use crate::output::{self, CliError};

/// `bakery serve` options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Without --tokens only loopback addresses are
    /// accepted. Port 0 picks a free port.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Require bearer tokens listed in this TOML file, each scoped to name
    /// prefixes and operations (read, ids, locks, once, admin); see the
    /// README. Needed to listen beyond loopback.
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// Lease of the grants held for sessions (e.g. 10s, 500ms): if this
    /// process dies, waiters elsewhere are served this long after its last
    /// renewal.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub lease: Duration,
    /// Most sessions open at once.
    #[arg(long, default_value_t = DEFAULT_MAX_SESSIONS)]
    pub max_sessions: usize,
    /// Ids per Tinyid segment (`/tinyid/id/nextSegmentId`).
    #[arg(long, default_value_t = DEFAULT_SEGMENT_SIZE)]
    pub segment_size: u64,
    /// Serve HTTPS with the PEM certificate chain in this file (leaf
    /// first), offering HTTP/2 and HTTP/1.1. Needs --tls-key.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert's
    /// certificate. Needs --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// Listen, say where on stdout, and serve until Ctrl-C or SIGTERM; the
/// calls in flight finish first.
pub async fn run(store: Arc<dyn VersionedStore>, args: &ServeArgs) -> Result<(), CliError> {
    let mut config = ServeConfig::default()
        .with_listen(args.listen)
        .with_lease(args.lease)
        .with_max_sessions(args.max_sessions)
        .with_segment_size(args.segment_size);
    if let Some(tokens) = &args.tokens {
        config = config.with_tokens_file(tokens);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config = config.with_tls_cert(cert).with_tls_key(key);
    }
    let scheme = if config.tls_cert().is_some() {
        "https"
    } else {
        "http"
    };
    let listener = bakery_serve::bind(&config).await.map_err(failed)?;
    let addr = listener.local_addr()?;
    // Before the line is out: a SIGTERM sent as soon as it is read stops
    // the server gracefully rather than killing it.
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut out = output::stdout();
    writeln!(out, "listening on {scheme}://{addr}")?;
    out.flush()?;
    let stop = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    bakery_serve::serve_on(listener, store, &config, stop)
        .await
        .map_err(failed)
}

fn failed(err: bakery_serve::ServeError) -> CliError {
    CliError::Message(err.to_string())
}
