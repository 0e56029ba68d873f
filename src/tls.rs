//! TLS with rustls (ring), for the listeners that speak it: the RESP listener
//! (`--resp-tls-cert`) and the cluster listener (`--cluster-tls-cert`). A leaf: files in, a
//! server or client configuration out, with errors that name the flag and the file.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;

/// The certificates of a PEM file, or an error naming `flag` and the file.
pub fn certificates(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!("{flag} {}: no certificate in it", path.display()));
    }
    Ok(chain)
}

/// An acceptor for the certificate chain at `cert` and the private key at `key` (PEM); the
/// flags' names go into the errors.
pub fn acceptor(
    flags: (&str, &str),
    cert: &Path,
    key: &Path,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    let chain = certificates(flags.0, cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("{} {}: {e}", flags.1, key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("{} and {}: {e}", flags.0, flags.1))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
