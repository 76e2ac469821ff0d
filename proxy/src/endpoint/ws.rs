//! `ws://` and `wss://`, as server and as client, through tokio-tungstenite.
//!
//! PLACEHOLDER (issue 6): not implemented yet; every call fails loudly.

use std::io;

use super::{EndpointError, Options};
use crate::conn::{BoxMsg, Hello, HttpRefusal};

/// Why a WebSocket connect failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The server answered the handshake with an HTTP refusal (401, 426…).
    Refused(HttpRefusal),
    /// Transport or protocol failure.
    Io(io::Error),
    /// TLS set-up failure.
    Tls(super::tls::TlsError),
}

/// A WebSocket server.
pub struct WsListener {
    _private: (),
}

/// A client whose handshake request has been read but not yet answered.
pub struct PendingWs {
    hello: Hello,
}

impl WsListener {
    /// Bind `addr`, serving `path`.
    pub async fn bind(
        addr: &str,
        _path: &str,
        _tls: bool,
        _opts: &Options,
    ) -> Result<Self, EndpointError> {
        Err(EndpointError::Listen {
            endpoint: format!("ws://{addr}"),
            source: io::Error::new(
                io::ErrorKind::Unsupported,
                "WebSocket is not implemented yet (issue 6)",
            ),
        })
    }

    /// Where it listens.
    pub fn local(&self) -> String {
        "ws://?".into()
    }

    /// Read the next client's handshake request.
    pub async fn accept(&self) -> io::Result<PendingWs> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "WebSocket is not implemented yet",
        ))
    }
}

impl PendingWs {
    /// What the client asked for.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Who connected.
    pub fn peer(&self) -> String {
        String::new()
    }

    /// Complete the handshake (101), choosing `subprotocol`.
    pub async fn accept(self, _subprotocol: Option<&str>) -> io::Result<BoxMsg> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "WebSocket is not implemented yet",
        ))
    }

    /// Answer the handshake with the upstream's refusal.
    pub async fn refuse(self, _refusal: &HttpRefusal) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "WebSocket is not implemented yet",
        ))
    }
}

/// Connect to `addr` `path`, passing on the client's `hello`.
pub async fn connect(
    _addr: &str,
    _path: &str,
    _tls: bool,
    _opts: &Options,
    _hello: Option<&Hello>,
) -> Result<(BoxMsg, Option<String>), ConnectError> {
    Err(ConnectError::Io(io::Error::new(
        io::ErrorKind::Unsupported,
        "WebSocket is not implemented yet (issue 6)",
    )))
}
