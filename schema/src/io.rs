//! Typed, validated message I/O on any `AsyncRead + AsyncWrite`.
//!
//! This is the tokio layer over the sans-IO wire: a [`Connection`] frames
//! bytes with the channel's codec, validates every message in both directions
//! against the contract (so the generated Rust types never see a frame the
//! contract rejects), and matches responses to requests. Generated SDKs use it
//! through a few lines of glue; see `contractgen generate --lang rust`.

use std::sync::{Arc, OnceLock};

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::codec::{Decoder, Encoder};

use crate::model::Kind;
use crate::wire::framing::{LengthPrefixed, Ndjson};
use crate::wire::{ChannelCodec, Correlator, FrameError, Message, Violation, Wire, WireError};

/// Errors on a [`Connection`].
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The byte stream broke the framing.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A message broke the contract.
    #[error("contract violation ({}): {}", .0.class.name(), .0.reason)]
    Violation(Box<Violation>),
    /// A message did not fit the requested Rust type.
    #[error("message does not fit the type: {0}")]
    Type(#[from] serde_json::Error),
    /// The channel cannot carry JSON messages over a byte stream.
    #[error("channel {0} has no stream framing for JSON messages")]
    NotAStreamChannel(String),
    /// The contract could not be compiled.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The embedded contract is broken (a generator bug).
    #[error("embedded contract: {0}")]
    Embedded(String),
}

impl From<Violation> for IoError {
    fn from(v: Violation) -> Self {
        IoError::Violation(Box::new(v))
    }
}

/// The stream codecs that carry JSON messages.
#[derive(Debug, Clone)]
pub enum JsonCodec {
    /// Length-prefixed frames.
    LengthPrefixed(LengthPrefixed),
    /// NDJSON lines.
    Ndjson(Ndjson),
    /// Header lines and a body (LSP, DAP).
    HeaderDelimited(crate::wire::headers::HeaderDelimited),
}

impl Decoder for JsonCodec {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self {
            JsonCodec::LengthPrefixed(c) => c.decode(src),
            JsonCodec::Ndjson(c) => c.decode(src),
            JsonCodec::HeaderDelimited(c) => c.decode(src),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self {
            JsonCodec::LengthPrefixed(c) => c.decode_eof(src),
            JsonCodec::Ndjson(c) => c.decode_eof(src),
            JsonCodec::HeaderDelimited(c) => c.decode_eof(src),
        }
    }
}

impl Encoder<Bytes> for JsonCodec {
    type Error = FrameError;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        match self {
            JsonCodec::LengthPrefixed(c) => c.encode(&item[..], dst),
            JsonCodec::Ndjson(c) => c.encode(&item[..], dst),
            JsonCodec::HeaderDelimited(c) => c.encode(&item[..], dst),
        }
    }
}

impl JsonCodec {
    /// The JSON stream codec of `channel`, if it has one.
    pub fn for_channel(wire: &Wire, channel: &str) -> Result<Self, IoError> {
        match wire.codec(channel)? {
            ChannelCodec::LengthPrefixed(c) => Ok(JsonCodec::LengthPrefixed(c)),
            ChannelCodec::Ndjson(c) => Ok(JsonCodec::Ndjson(c)),
            ChannelCodec::HeaderDelimited(c) => Ok(JsonCodec::HeaderDelimited(c)),
            _ => Err(IoError::NotAStreamChannel(channel.to_string())),
        }
    }
}

/// A [`JsonCodec`] that lives through an oversize length-prefixed frame, for a receiver
/// the contract tells to skip it and report (the kernel: `protocol.frame_too_large`, the
/// connection stays up): the announced bytes are read and dropped, never buffered, and the
/// frame comes out as an [`FrameError::Oversize`] item; the next frame decodes as usual.
/// Any other framing error (and an oversize line or body, which has no length to skip by)
/// still ends the stream.
#[derive(Debug, Clone)]
pub struct SkipOversize {
    inner: JsonCodec,
    /// Bytes of a skipped frame still to drop.
    skip: u64,
}

impl SkipOversize {
    /// Skip oversize frames of `inner`.
    pub fn new(inner: JsonCodec) -> Self {
        SkipOversize { inner, skip: 0 }
    }

    /// Drop what is left of a skipped frame; whether it is all gone.
    fn drop_skipped(&mut self, src: &mut BytesMut) -> bool {
        let n = usize::try_from(self.skip).map_or(src.len(), |s| s.min(src.len()));
        let _ = src.split_to(n);
        self.skip -= n as u64;
        self.skip == 0
    }
}

impl Decoder for SkipOversize {
    type Item = Result<Bytes, FrameError>;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, FrameError> {
        if !self.drop_skipped(src) {
            return Ok(None);
        }
        let width = match &self.inner {
            JsonCodec::LengthPrefixed(c) => Some(c.width()),
            _ => None,
        };
        match (width, self.inner.decode(src)) {
            (Some(width), Err(FrameError::Oversize { len, max })) => {
                let _ = src.split_to(width);
                self.skip = len;
                self.drop_skipped(src);
                Ok(Some(Err(FrameError::Oversize { len, max })))
            }
            (_, r) => r.map(|f| f.map(Ok)),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, FrameError> {
        match self.decode(src)? {
            Some(f) => Ok(Some(f)),
            None if src.is_empty() && self.skip == 0 => Ok(None),
            None => Err(FrameError::Truncated {
                buffered: src.len(),
            }),
        }
    }
}

impl Encoder<Bytes> for SkipOversize {
    type Error = FrameError;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.inner.encode(item, dst)
    }
}

/// One side of one channel: validated messages in and out.
///
/// Reads go through our own buffer rather than `Framed`, because the framing's
/// `frameDeadline` runs from the first byte of a frame, which only the read loop
/// sees arrive.
pub struct Connection<T> {
    io: T,
    codec: JsonCodec,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// The framing's `frameDeadline` (limit name, value), if it has one.
    deadline: Option<(String, Duration)>,
    /// When the first byte of the frame still incomplete in `rbuf` was seen.
    started: Option<Instant>,
    wire: Arc<Wire>,
    channel: String,
    me: String,
    peer: String,
    pending: Correlator,
}

/// Requests in flight a connection remembers per side before refusing more.
pub const DEFAULT_PENDING: usize = 1024;

/// Bytes asked of the transport per read; a frame's own length decides the rest.
const READ_CHUNK: usize = 8 * 1024;

impl<T: AsyncRead + AsyncWrite + Unpin> Connection<T> {
    /// Speak `channel` of `wire` as party `me` to party `peer` over `io`.
    pub fn new(
        io: T,
        wire: Arc<Wire>,
        channel: &str,
        me: &str,
        peer: &str,
    ) -> Result<Self, IoError> {
        let codec = JsonCodec::for_channel(&wire, channel)?;
        let deadline = wire
            .frame_deadline(channel)
            .map(|(n, d)| (n.to_string(), d));
        Ok(Connection {
            io,
            codec,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            deadline,
            started: None,
            wire,
            channel: channel.to_string(),
            me: me.to_string(),
            peer: peer.to_string(),
            pending: Correlator::new(DEFAULT_PENDING),
        })
    }

    /// The next frame's bytes, or `None` at a clean end of stream.
    ///
    /// Cancel-safe: bytes read before a cancellation stay buffered, and the
    /// frame's clock keeps running from its first byte.
    async fn next_frame(&mut self) -> Result<Option<Bytes>, IoError> {
        loop {
            if let Some(frame) = self.codec.decode(&mut self.rbuf)? {
                self.started = None;
                return Ok(Some(frame));
            }
            if !self.rbuf.is_empty() && self.started.is_none() {
                self.started = Some(Instant::now());
            }
            if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK {
                self.rbuf.reserve(READ_CHUNK);
            }
            let read = self.io.read_buf(&mut self.rbuf);
            let n = match (&self.deadline, self.started) {
                (Some((limit, after)), Some(t0)) => {
                    match tokio::time::timeout_at(t0 + *after, read).await {
                        Ok(n) => n.map_err(FrameError::from)?,
                        Err(_) => {
                            return Err(FrameError::Incomplete {
                                limit: limit.clone(),
                                after: *after,
                                buffered: self.rbuf.len(),
                            }
                            .into());
                        }
                    }
                }
                _ => read.await.map_err(FrameError::from)?,
            };
            if n == 0 {
                return Ok(self.codec.decode_eof(&mut self.rbuf)?);
            }
        }
    }

    /// The next validated message, or `None` at a clean end of stream.
    pub async fn recv(&mut self) -> Result<Option<Message>, IoError> {
        let Some(frame) = self.next_frame().await? else {
            return Ok(None);
        };
        let pending = &self.pending;
        let me = &self.me;
        let msg = self
            .wire
            .decode_with(&self.channel, &self.peer, &frame, &|id| {
                pending.peek(me, id)
            })?;
        self.track(&msg, false);
        Ok(Some(msg))
    }

    /// The next validated message, also deserialized into `M`.
    pub async fn recv_as<M: DeserializeOwned>(&mut self) -> Result<Option<(Message, M)>, IoError> {
        match self.recv().await? {
            None => Ok(None),
            Some(m) => {
                let typed = serde_json::from_value(m.value.clone())?;
                Ok(Some((m, typed)))
            }
        }
    }

    /// Validate `msg` as sent by this side and write it.
    pub async fn send<M: Serialize>(&mut self, msg: &M) -> Result<Message, IoError> {
        let bytes = serde_json::to_vec(msg)?;
        let pending = &self.pending;
        let peer = &self.peer;
        let m = self
            .wire
            .decode_with(&self.channel, &self.me, &bytes, &|id| {
                pending.peek(peer, id)
            })?;
        self.send_unchecked(&bytes).await?;
        self.track(&m, true);
        Ok(m)
    }

    /// Write `bytes` as one frame without validating them. Only for tools that
    /// break a rule on purpose (conformance suites, demos of a violation); the
    /// frame is not tracked as a request.
    pub async fn send_unchecked(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        self.wbuf.clear();
        self.codec
            .encode(Bytes::copy_from_slice(bytes), &mut self.wbuf)?;
        self.io
            .write_all(&self.wbuf)
            .await
            .map_err(FrameError::from)?;
        self.io.flush().await.map_err(FrameError::from)?;
        Ok(())
    }

    /// Flush and shut down the write half.
    pub async fn close(&mut self) -> Result<(), IoError> {
        self.io.shutdown().await.map_err(FrameError::from)?;
        Ok(())
    }

    fn track(&mut self, m: &Message, outgoing: bool) {
        let (sender, other) = if outgoing {
            (&self.me, &self.peer)
        } else {
            (&self.peer, &self.me)
        };
        match m.kind {
            Kind::Request => {
                if let (Some(id), Some(method)) = (&m.id, &m.method) {
                    let _ = self.pending.open(sender, id, method);
                }
            }
            Kind::Response | Kind::Error => {
                if let Some(id) = &m.correlation {
                    // A reply closes the entry of the side that asked: the other one.
                    let _ = self.pending.close(other, id);
                }
            }
            _ => {}
        }
    }
}

/// A contract compiled on first use from JSON text embedded in generated code.
pub struct Embedded {
    text: &'static str,
    cell: OnceLock<Result<Arc<Wire>, String>>,
}

impl Embedded {
    /// Wrap embedded contract text.
    pub const fn new(text: &'static str) -> Self {
        Embedded {
            text,
            cell: OnceLock::new(),
        }
    }

    /// The compiled wire of the embedded contract.
    pub fn wire(&self) -> Result<&Arc<Wire>, IoError> {
        self.cell
            .get_or_init(|| {
                let c = crate::from_str("embedded", self.text).map_err(|e| e.to_string())?;
                Wire::new(Arc::new(c))
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| IoError::Embedded(e.clone()))
    }

    /// The embedded contract's JSON text.
    pub fn text(&self) -> &'static str {
        self.text
    }
}
