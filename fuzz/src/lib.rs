//! Helpers shared by the fuzz targets: the compiled built-in contracts, a
//! fuzzer-controlled way to split one input into the chunks a transport might
//! deliver, and a driver that pushes those chunks through a frame decoder.

use std::sync::Arc;

use bytes::BytesMut;
use contract::model::Framing;
use contract::wire::Wire;
use contract::wire::framing::{DEFAULT_CAP, limit_bytes};
use tokio_util::codec::Decoder;

/// The built-in contract `name` compiled for the wire, or `None` if it does not load.
pub fn wire(name: &str) -> Option<Wire> {
    let c = contract::builtin(name).ok()?;
    Wire::new(Arc::new(c)).ok()
}

/// A contract from its JSON text compiled for the wire (an example contract that is
/// not built in), or `None` if it does not load.
pub fn wire_from_text(origin: &str, text: &str) -> Option<Wire> {
    let c = contract::from_str(origin, text).ok()?;
    Wire::new(Arc::new(c)).ok()
}

/// `wire_from_text` of a file embedded at compile time, built once per process.
#[macro_export]
macro_rules! static_wire_file {
    ($path:literal) => {{
        static W: std::sync::LazyLock<Option<contract::wire::Wire>> =
            std::sync::LazyLock::new(|| $crate::wire_from_text($path, include_str!($path)));
        W.as_ref()
    }};
}

/// `wire(name)`, built once per process.
#[macro_export]
macro_rules! static_wire {
    ($name:literal) => {{
        static W: std::sync::LazyLock<Option<contract::wire::Wire>> =
            std::sync::LazyLock::new(|| $crate::wire($name));
        W.as_ref()
    }};
}

/// The cap the contract's framing puts on one frame of `channel`: payload bytes
/// (length-prefixed, header-delimited), bytes after the length field (binary), line
/// units (NDJSON) or message bytes (WebSocket).
pub fn framing_cap(wire: &Wire, channel: &str) -> Option<u64> {
    let c = wire.contract();
    let cap = |name: &Option<String>| match name {
        Some(n) => limit_bytes(c, n).ok(),
        None => Some(DEFAULT_CAP),
    };
    match &c.channels.get(channel)?.framing {
        Framing::LengthPrefixed { max_payload, .. } => cap(max_payload),
        Framing::Binary { max_frame, .. } => cap(max_frame),
        Framing::Ndjson { max_line, .. } => limit_bytes(c, max_line).ok(),
        Framing::WebsocketText { max_message, .. } => cap(max_message),
        Framing::HeaderDelimited { max_payload, .. } => cap(max_payload),
    }
}

/// Split an input into the chunks a transport delivers: the first byte `n`
/// gives `n % 16` cut points, each a 2-byte little-endian offset (taken modulo
/// the stream length); everything after them is the byte stream.
pub fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let Some((&n, rest)) = data.split_first() else {
        return Vec::new();
    };
    let (head, stream) = rest.split_at(rest.len().min(2 * usize::from(n % 16)));
    let mut cuts: Vec<usize> = head
        .chunks_exact(2)
        .map(|p| usize::from(u16::from_le_bytes([p[0], p[1]])) % (stream.len() + 1))
        .collect();
    cuts.sort_unstable();
    cuts.push(stream.len());
    let mut at = 0;
    cuts.into_iter()
        .map(|c| {
            let chunk = &stream[at..c];
            at = c;
            chunk
        })
        .collect()
}

/// Feed the chunks of `data` to `codec` as reads would, calling `decode` after
/// each one until it wants more bytes, then `decode_eof` until the buffer is
/// exhausted. Stops at the first error, as a stream would. Every frame goes to
/// `each`; a frame that consumed no input (an endless loop) is a failure.
pub fn feed<D: Decoder>(codec: &mut D, data: &[u8], mut each: impl FnMut(D::Item)) {
    let mut buf = BytesMut::new();
    for chunk in chunks(data) {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    assert!(buf.len() < before, "decode yielded a frame without consuming input");
                    each(frame);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    loop {
        let before = buf.len();
        match codec.decode_eof(&mut buf) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before, "decode_eof yielded a frame without consuming input");
                each(frame);
            }
            Ok(None) | Err(_) => return,
        }
    }
}
