//! HTTPS: the certificate and key files, and serving over rustls.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use tokio::net::TcpListener;

use crate::{ServeConfig, ServeError};

/// The protocols offered in the handshake, preferred first: HTTP/2 so that
/// gRPC can share the port, HTTP/1.1 for every other client.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The rustls settings of `config`'s certificate and key, or `None` when it
/// serves plain HTTP. Reads both files.
pub(crate) fn server_config(config: &ServeConfig) -> Result<Option<Arc<ServerConfig>>, ServeError> {
    let (Some(cert_path), Some(key_path)) = (config.tls_cert(), config.tls_key()) else {
        // `ServeConfig::check` refuses one without the other.
        return Ok(None);
    };
    let certs = certificates(cert_path)?;
    let key = private_key(key_path)?;
    // The provider is named rather than taken from the process default: with
    // both rustls providers compiled in, the default would be ambiguous.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| failed(cert_path, err.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|err| {
            failed(
                key_path,
                format!(
                    "unusable with the certificate {}: {err}",
                    cert_path.display()
                ),
            )
        })?;
    tls.alpn_protocols = ALPN.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(Some(Arc::new(tls)))
}

/// The certificate chain in the PEM file at `path`, leaf first.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ServeError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| failed(path, format!("not a PEM certificate chain: {err}")))?;
    if certs.is_empty() {
        return Err(failed(path, "no PEM CERTIFICATE block in it".into()));
    }
    Ok(certs)
}

/// The private key in the PEM file at `path`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ServeError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|err| match err {
        pem::Error::NoItemsFound => failed(
            path,
            "no PEM PRIVATE KEY block (PKCS#8, PKCS#1 or SEC1) in it".into(),
        ),
        err => failed(path, format!("not a PEM private key: {err}")),
    })
}

/// Read once at start-up: a blocking read of a small file is harmless.
fn read(path: &Path) -> Result<Vec<u8>, ServeError> {
    std::fs::read(path).map_err(|err| failed(path, err.to_string()))
}

fn failed(path: &Path, reason: String) -> ServeError {
    ServeError::Tls {
        path: path.to_owned(),
        reason,
    }
}

/// Serve `app` over TLS on `listener` until `shutdown` completes, then stop
/// accepting and wait for the connections to finish their calls (HTTP/1.1
/// connections close after the request in flight; HTTP/2 ones get a GOAWAY).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let handle = axum_server::Handle::<SocketAddr>::new();
    let server =
        axum_server::from_tcp_rustls(listener.into_std()?, RustlsConfig::from_config(tls))?
            // No Nagle delay (see `serve_on`).
            .map(|rustls| rustls.acceptor(axum_server::accept::NoDelayAcceptor::new()))
            .handle(handle.clone());
    // Never completes: the select below ends when the server returns, after
    // the graceful shutdown this asks for, or on an error.
    let stop = async {
        shutdown.await;
        handle.graceful_shutdown(None);
        std::future::pending::<Infallible>().await
    };
    tokio::select! {
        served = server.serve(app.into_make_service_with_connect_info::<SocketAddr>()) => {
            Ok(served?)
        }
        never = stop => match never {},
    }
}
