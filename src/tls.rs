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

/// Whether a peer dialling `ip` would accept the certificate chain at `cert`, trusting only
/// the authority at `ca` (the check a node's peers make): an error that says why not, at
/// start-up rather than as a cluster that silently elects no leader.
pub fn check_chain_for(
    flags: (&str, &str),
    cert: &Path,
    ca: &Path,
    ip: std::net::IpAddr,
) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier;
    let chain = certificates(flags.0, cert)?;
    let mut roots = rustls::RootCertStore::empty();
    for c in certificates(flags.1, ca)? {
        roots
            .add(c)
            .map_err(|e| format!("{} {}: {e}", flags.1, ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("{}: {e}", flags.1))?;
    let (end, rest) = chain.split_first().ok_or("no certificate")?;
    let name = rustls_pki_types::ServerName::IpAddress(ip.into());
    verifier
        .verify_server_cert(end, rest, &name, &[], rustls_pki_types::UnixTime::now())
        .map(|_| ())
        .map_err(|e| {
            format!(
                "{} {}: a peer dialling {ip} would refuse it ({e}); it must be an end entity's certificate (not a CA's) that names {ip} and chains to {} {}",
                flags.0,
                cert.display(),
                flags.1,
                ca.display()
            )
        })
}
