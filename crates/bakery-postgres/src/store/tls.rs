//! TLS for the driver: rustls with the `ring` provider, checking the
//! server's certificate the way libpq's `sslmode` says.

use std::sync::Arc;

use bakery_core::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::BACKEND;
use crate::{PostgresConfig, RootCert, SslMode};

/// The TLS connector for `config`. Reads the `sslrootcert` file, if any.
pub(crate) fn connector(config: &PostgresConfig) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match (config.ssl_mode(), config.root_cert()) {
        (SslMode::VerifyFull, Some(root)) => webpki(root, &provider)?,
        // libpq's `prefer` and `require` without a root: encryption only,
        // the certificate is not checked (`validate` refuses verify-* here).
        // `verify-ca`, and `require`/`prefer` with a root (as in libpq):
        // the chain must lead to the root; the host name is not checked.
        (_, root) => Arc::new(Lenient {
            chain: root.map(|root| webpki(root, &provider)).transpose()?,
            provider: provider.clone(),
        }),
    };
    let tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(BACKEND, format!("TLS setup: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(tls))
}

fn webpki(root: &RootCert, provider: &Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>> {
    let mut roots = RootCertStore::empty();
    match root {
        RootCert::System => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        RootCert::File(path) => {
            let bad = |what: String| {
                Error::config(
                    BACKEND,
                    format!("postgres option `sslrootcert`: {}: {what}", path.display()),
                )
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(e.to_string()))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            let (added, _ignored) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(bad("holds no usable PEM certificate".to_string()));
            }
        }
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| Error::config(BACKEND, format!("TLS setup: {e}")))
}

/// libpq's checks short of `verify-full`. Without `chain` any certificate
/// is accepted (`require` without a root); with it the chain is checked
/// against the roots and a name mismatch is forgiven (`verify-ca`: webpki
/// checks the chain before the name, so a name error means the chain was
/// good). Either way the handshake signatures are checked, so the session
/// is at least bound to the certificate the server presented.
#[derive(Debug)]
struct Lenient {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
