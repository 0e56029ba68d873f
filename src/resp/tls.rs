//! TLS for the RESP listener (`--resp-tls-cert`, `--resp-tls-key`), with rustls: the hosted
//! service speaks only TLS, and clients configured for it (`rediss://`, `redis-cli --tls`,
//! redis-py's `ssl=True`) connect as they are.

use std::path::Path;

/// An acceptor for the certificate chain at `cert` and the private key at `key` (PEM), or an
/// error naming the file and what is wrong with it.
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    crate::tls::acceptor(("--resp-tls-cert", "--resp-tls-key"), cert, key)
}
