//! `bakery serve`: the store's sequences over HTTP/JSON.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use bakery::VersionedStore;
use bakery_serve::{ServeConfig, DEFAULT_LISTEN, DEFAULT_SEGMENT_SIZE};
use tokio::signal::unix::{signal, SignalKind};

use crate::output::{self, CliError};

/// `bakery serve` options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Only loopback addresses are accepted (the
    /// service has no access tokens yet): put an authenticating proxy in
    /// front to reach it from elsewhere. Port 0 picks a free port.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Ids per Tinyid segment (`/tinyid/id/nextSegmentId`).
    #[arg(long, default_value_t = DEFAULT_SEGMENT_SIZE)]
    pub segment_size: u64,
}

/// Listen, say where on stdout, and serve until Ctrl-C or SIGTERM; the
/// calls in flight finish first.
pub async fn run(store: Arc<dyn VersionedStore>, args: &ServeArgs) -> Result<(), CliError> {
    let config = ServeConfig::default()
        .with_listen(args.listen)
        .with_segment_size(args.segment_size);
    let listener = bakery_serve::bind(&config).await.map_err(failed)?;
    let addr = listener.local_addr()?;
    // Before the line is out: a SIGTERM sent as soon as it is read stops
    // the server gracefully rather than killing it.
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut out = output::stdout();
    writeln!(out, "listening on http://{addr}")?;
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
