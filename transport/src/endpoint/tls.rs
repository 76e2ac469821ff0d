//! TLS for `wss://` and `quic://`: certificates from `--cert/--key`, or a
//! self-signed one whose SHA-256 fingerprint is printed; clients pin that
//! fingerprint with `--pin` or trust a CA bundle with `--ca`.
//!
//! Every configuration is built on the ring provider passed in explicitly, so
//! no process-wide default provider has to be installed. A client must say how
//! it trusts the server (`--pin` or `--ca`, or both): there is no insecure mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Names the generated self-signed certificate is valid for: loopback only,
/// since a generated certificate is meant for local use and pinning.
pub const SELF_SIGNED_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

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
    /// Only one of `--cert` and `--key` was given.
    #[error("--cert and --key go together: give both, or neither for a self-signed certificate")]
    CertKeyPair,
    /// A certificate file could not be read or parsed.
    #[error("cannot read certificates from {path}: {source}")]
    CertFile {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate file holds no certificate.
    #[error("{0} holds no PEM certificate")]
    NoCert(PathBuf),
    /// The key file could not be read or parsed.
    #[error("cannot read the private key from {path}: {source}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: rustls::pki_types::pem::Error,
    },
    /// The key file holds no private key.
    #[error("{0} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey(PathBuf),
    /// The self-signed certificate could not be generated.
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A client was given neither a pin nor a CA bundle.
    #[error(
        "no way to trust the server: give --pin SHA256 (the fingerprint the server printed) or --ca FILE"
    )]
    NoTrust,
    /// The pin is not a SHA-256 fingerprint.
    #[error("bad --pin {text:?}: expected 64 hex digits (':' separators optional)")]
    BadPin {
        /// What was given.
        text: String,
    },
    /// The CA bundle could not be read, or holds no usable certificate.
    #[error("cannot use CA bundle {path}: {why}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the configuration (e.g. key does not match certificate).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The TLS configuration cannot carry QUIC (no TLS 1.3 AES-128-GCM suite).
    #[error("TLS configuration unusable for QUIC: {0}")]
    Quic(String),
}

/// A server configuration and the fingerprint of the certificate it presents.
pub struct ServerTls {
    /// rustls configuration.
    pub config: Arc<rustls::ServerConfig>,
    /// SHA-256 of the end-entity certificate, hex with `:` separators.
    pub fingerprint: String,
    /// The end-entity certificate as PEM when it was generated here (None when
    /// it came from `--cert`, whose file the operator already has). Peers that
    /// cannot pin a fingerprint can trust this PEM as their CA file.
    pub cert_pem: Option<String>,
}

/// The ring provider, explicitly, so nothing depends on a process default.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// SHA-256 of `der`, uppercase hex with `:` separators (as `openssl x509 -fingerprint -sha256`).
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parse a pin: 64 hex digits, any case, `:` separators optional.
fn parse_pin(text: &str) -> Result<[u8; 32], TlsError> {
    let bad = || TlsError::BadPin {
        text: text.to_string(),
    };
    let hex: Vec<u8> = text.trim().bytes().filter(|b| *b != b':').collect();
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let s = std::str::from_utf8(pair).map_err(|_| bad())?;
        *slot = u8::from_str_radix(s, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |source| TlsError::CertFile {
        path: path.to_path_buf(),
        source,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    if chain.is_empty() {
        return Err(TlsError::NoCert(path.to_path_buf()));
    }
    Ok(chain)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| match source {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey(path.to_path_buf()),
        source => TlsError::KeyFile {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Build a server configuration offering `alpn`.
///
/// With `--cert` and `--key` it presents that chain; with neither it generates a
/// self-signed certificate for [`SELF_SIGNED_NAMES`] (fresh on every call).
pub fn server(opts: &TlsOpts, alpn: &[Vec<u8>]) -> Result<ServerTls, TlsError> {
    let (chain, key, cert_pem) = match (&opts.cert, &opts.key) {
        (Some(cert), Some(key)) => (load_chain(cert)?, load_key(key)?, None),
        (None, None) => {
            let made = rcgen::generate_simple_self_signed(
                SELF_SIGNED_NAMES
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>(),
            )?;
            let key = PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
            let pem = made.cert.pem();
            (vec![made.cert.der().clone()], key, Some(pem))
        }
        _ => return Err(TlsError::CertKeyPair),
    };
    // load_chain never returns an empty chain; the fallback only keeps this total.
    let fingerprint = chain.first().map(|c| fingerprint(c)).unwrap_or_default();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = alpn.to_vec();
    Ok(ServerTls {
        config: Arc::new(config),
        fingerprint,
        cert_pem,
    })
}

/// Build a client configuration offering `alpn`.
///
/// `--ca` verifies the chain and the server name against that bundle; `--pin`
/// accepts exactly the certificate with that SHA-256 (names and dates are not
/// checked: the pin is the identity); both together require both.
pub fn client(opts: &TlsOpts, alpn: &[Vec<u8>]) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = provider();
    let pin = opts.pin.as_deref().map(parse_pin).transpose()?;
    let webpki = match &opts.ca {
        Some(path) => Some(
            WebPkiServerVerifier::builder_with_provider(
                Arc::new(load_roots(path)?),
                provider.clone(),
            )
            .build()
            .map_err(|e| TlsError::CaFile {
                path: path.clone(),
                why: e.to_string(),
            })?,
        ),
        None => None,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut config = match (pin, webpki) {
        (None, None) => return Err(TlsError::NoTrust),
        (None, Some(webpki)) => builder.with_webpki_verifier(webpki).with_no_client_auth(),
        (Some(pin), webpki) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin,
                webpki,
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
    };
    config.alpn_protocols = alpn.to_vec();
    Ok(Arc::new(config))
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let err = |e: rustls::pki_types::pem::Error| TlsError::CaFile {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(err)? {
        roots
            .add(cert.map_err(err)?)
            .map_err(|e| TlsError::CaFile {
                path: path.to_path_buf(),
                why: e.to_string(),
            })?;
    }
    if roots.is_empty() {
        return Err(TlsError::CaFile {
            path: path.to_path_buf(),
            why: "no PEM certificate in it".into(),
        });
    }
    Ok(roots)
}

/// The presented certificate is not the pinned one.
#[derive(thiserror::Error)]
#[error("server certificate SHA-256 {got} does not match --pin")]
struct PinMismatch {
    got: String,
}

// rustls shows a custom certificate error with `{:?}`; make that the readable text.
impl std::fmt::Debug for PinMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Accepts exactly the pinned end-entity certificate (and, with `--ca` as well,
/// only if the chain also verifies); handshake signatures are always checked,
/// so the peer must hold the pinned certificate's key.
#[derive(Debug)]
struct PinVerifier {
    pin: [u8; 32],
    webpki: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let digest = ring::digest::digest(&ring::digest::SHA256, end_entity);
        // Certificates are public, so a plain comparison leaks nothing worth hiding.
        if digest.as_ref() != self.pin {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(PinMismatch {
                    got: fingerprint(end_entity),
                }))),
            ));
        }
        match &self.webpki {
            Some(v) => {
                v.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
            None => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_parse_with_or_without_colons_in_any_case() {
        let fp = fingerprint(b"x");
        assert_eq!(fp.len(), 32 * 3 - 1);
        let bytes = parse_pin(&fp).expect("printed form");
        assert_eq!(
            parse_pin(&fp.replace(':', "").to_lowercase()).expect("bare"),
            bytes
        );
        let short = &fp[..fp.len() - 1];
        let long = format!("{fp}:00");
        let not_hex = format!("G{}", &fp[1..]);
        for bad in ["", "zz", short, &long, &not_hex] {
            assert!(parse_pin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn server_needs_both_cert_and_key_and_client_needs_trust() {
        let half = TlsOpts {
            cert: Some("/nonexistent/c.pem".into()),
            ..TlsOpts::default()
        };
        assert!(matches!(server(&half, &[]), Err(TlsError::CertKeyPair)));
        assert!(matches!(
            client(&TlsOpts::default(), &[]),
            Err(TlsError::NoTrust)
        ));
        let made = server(&TlsOpts::default(), &[b"x/1".to_vec()]).expect("self-signed");
        assert_eq!(made.config.alpn_protocols, vec![b"x/1".to_vec()]);
        assert!(made.cert_pem.is_some());
    }

    #[test]
    fn missing_files_name_their_path() {
        let opts = TlsOpts {
            cert: Some("/nonexistent/c.pem".into()),
            key: Some("/nonexistent/k.pem".into()),
            ..TlsOpts::default()
        };
        let e = server(&opts, &[]).err().expect("refused").to_string();
        assert!(e.contains("/nonexistent/c.pem"), "{e}");
        let opts = TlsOpts {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsOpts::default()
        };
        let e = client(&opts, &[]).expect_err("refused").to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
