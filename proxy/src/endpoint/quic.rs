//! `quic://HOST:PORT` through quinn: each relayed connection is one
//! bidirectional stream; the ALPN names the contract and its major version.
//!
//! PLACEHOLDER (issue 6): not implemented yet; every call fails loudly.

use std::io;

use super::{EndpointError, Options};
use crate::conn::BoxIo;

/// A QUIC server endpoint.
pub struct QuicListener {
    _private: (),
}

fn unimplemented_quic(addr: &str) -> EndpointError {
    EndpointError::Listen {
        endpoint: format!("quic://{addr}"),
        source: io::Error::new(
            io::ErrorKind::Unsupported,
            "QUIC is not implemented yet (issue 6)",
        ),
    }
}

impl QuicListener {
    /// Bind `addr` with TLS from `opts`.
    pub fn bind(addr: &str, _opts: &Options) -> Result<Self, EndpointError> {
        Err(unimplemented_quic(addr))
    }

    /// Where it listens.
    pub fn local(&self) -> String {
        "quic://?".into()
    }

    /// The next connection's first bidirectional stream, and the peer address.
    pub async fn accept(&self) -> io::Result<(BoxIo, String)> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "QUIC is not implemented yet",
        ))
    }
}

/// Connect to `addr` and open one bidirectional stream.
pub async fn connect(addr: &str, _opts: &Options) -> Result<BoxIo, EndpointError> {
    Err(unimplemented_quic(addr))
}
