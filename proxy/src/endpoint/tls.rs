//! TLS for `wss://` and `quic://`: certificates from `--cert/--key`, or a
//! self-signed one whose SHA-256 fingerprint is printed; clients pin that
//! fingerprint with `--pin` or trust a CA bundle with `--ca`.
//!
//! PLACEHOLDER (issue 6): not implemented yet; every call fails loudly.

use std::path::PathBuf;
use std::sync::Arc;

/// TLS options from the command line or config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOpts {
    /// PEM certificate chain (server).
    pub cert: Option<PathBuf>,
    /// PEM private key (server).
    pub key: Option<PathBuf>,
    /// SHA-256 fingerprint of the server certificate to accept (client), hex, `:` optional.
    pub pin: Option<String>,
    /// PEM CA bundle to trust (client).
    pub ca: Option<PathBuf>,
}

/// TLS errors.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Not built yet.
    #[error("TLS is not implemented yet (issue 6)")]
    NotImplemented,
}

/// A server configuration and the fingerprint of the certificate it presents.
pub struct ServerTls {
    /// rustls configuration.
    pub config: Arc<rustls::ServerConfig>,
    /// SHA-256 of the end-entity certificate, hex with `:` separators.
    pub fingerprint: String,
}

/// Build a server configuration offering `alpn`.
pub fn server(_opts: &TlsOpts, _alpn: &[Vec<u8>]) -> Result<ServerTls, TlsError> {
    Err(TlsError::NotImplemented)
}

/// Build a client configuration offering `alpn`.
pub fn client(_opts: &TlsOpts, _alpn: &[Vec<u8>]) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    Err(TlsError::NotImplemented)
}
