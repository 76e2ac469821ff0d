//! What transports hand to the relay: a connection, boxed, of one of two shapes.
//!
//! Byte streams (unix, tcp, quic streams, pipes, fds) carry the contract's own
//! stream framing; message transports (WebSocket) carry one frame per message.
//! The relay bridges between the two, so protocol code never sees a transport
//! type, only [`Conn`].

use std::io;

use bytes::Bytes;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite};

/// A bidirectional byte stream of any transport. `Any`, so a transport that can say
/// more than EOF when it ends (QUIC's application error code) can be found again.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + std::any::Any {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// A boxed byte stream.
pub type BoxIo = Box<dyn Io>;

/// Where a byte stream's transport keeps the close code to end with: the relay
/// sets the contract's code, the transport sends it as it closes (QUIC's
/// CONNECTION_CLOSE). Streams without such a code (unix, tcp) end with EOF alone.
#[derive(Debug, Clone, Default)]
pub struct CloseCode(std::sync::Arc<std::sync::Mutex<Option<CloseFrame>>>);

impl CloseCode {
    /// The code and reason to close with.
    pub fn set(&self, frame: CloseFrame) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(frame);
        }
    }

    /// The code set, if any.
    pub fn get(&self) -> Option<CloseFrame> {
        self.0.lock().ok().and_then(|s| s.clone())
    }
}

/// One message of a message transport. Ping and pong stay inside the transport
/// (they are per hop); everything else reaches the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A text message: one frame of the contract.
    Text(Bytes),
    /// A binary message (a contract may call it an invalid frame).
    Binary(Bytes),
    /// The peer closed, with its code and reason if it gave them.
    Close(Option<CloseFrame>),
}

/// A close code and reason, relayed as given: the wire layer's type, so the sans-IO
/// policies that decide a close and the transports that send it share one.
pub use contract::wire::CloseFrame;

/// A message connection: a stream of incoming messages and a sink for outgoing ones.
/// `Sink::close` sends a normal close if no [`Msg::Close`] was sent.
pub trait MsgIo:
    Stream<Item = io::Result<Msg>> + Sink<Msg, Error = io::Error> + Send + Unpin
{
}
impl<T: Stream<Item = io::Result<Msg>> + Sink<Msg, Error = io::Error> + Send + Unpin> MsgIo for T {}

/// A boxed message connection.
pub type BoxMsg = Box<dyn MsgIo>;

/// A connection as the relay sees it.
pub enum Conn {
    /// Bytes, framed by the contract's stream framing.
    Stream(BoxIo),
    /// Whole messages.
    Messages(BoxMsg),
}

impl Conn {
    /// Whether this connection carries whole messages.
    pub fn is_messages(&self) -> bool {
        matches!(self, Conn::Messages(_))
    }
}

/// What the connecting side asked for in its opening handshake, passed on to
/// the upstream so both ends negotiate as if the proxy were not there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello {
    /// Request path (WebSocket).
    pub path: String,
    /// Offered subprotocols, in order.
    pub subprotocols: Vec<String>,
    /// The `Authorization` header, passed through as is (never logged).
    pub authorization: Option<String>,
}

/// An upstream's refusal at the HTTP level, relayed to the client as the same status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRefusal {
    /// Status code (401, 426…).
    pub status: u16,
    /// Headers worth passing on (e.g. `Sec-WebSocket-Protocol` listing supported versions).
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: Bytes,
}

impl std::fmt::Display for HttpRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}", self.status)?;
        for (k, v) in &self.headers {
            write!(f, " {k}: {v}")?;
        }
        Ok(())
    }
}
