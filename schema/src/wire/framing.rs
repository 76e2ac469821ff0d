//! Sans-IO frame codecs, configured from a contract channel's `framing`.
//!
//! Each codec consumes bytes from a `BytesMut` and yields whole frames; the
//! caller feeds whatever a read returned, split or merged at any byte. Every
//! length is checked against its cap before a byte of the frame is buffered or
//! reserved, so a hostile `0xFFFFFFFF` prefix costs nothing. The codecs
//! implement tokio-util's `Decoder`/`Encoder`, which do no I/O themselves; the
//! tokio layer wraps them in `FramedRead`/`FramedWrite`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::access::Limits;
use crate::model::{ByteOrder, Channel, Contract, Framing, LengthCounts, LineMeasure};

/// Why bytes do not make a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A length prefix or header announces more than the cap allows.
    #[error("frame of {len} bytes exceeds the {max}-byte cap")]
    Oversize {
        /// Announced length.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// An NDJSON line is longer than its cap, in the contract's measure.
    #[error("line exceeds {max} {measure}")]
    LineTooLong {
        /// The cap.
        max: u64,
        /// What was counted.
        measure: &'static str,
    },
    /// A binary frame's length is smaller than its own header.
    #[error("binary frame length {len} is shorter than its {header}-byte header")]
    ShortFrame {
        /// Announced length.
        len: u64,
        /// Header bytes that must follow the length field.
        header: u64,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({buffered} bytes buffered)")]
    Truncated {
        /// Bytes of the partial frame.
        buffered: usize,
    },
    /// A frame's first byte arrived, and the rest did not within the framing's
    /// `frameDeadline` (only through the tokio layer, which owns the clock).
    #[error("a frame stayed incomplete {:.1} s after its first byte ({limit}, {buffered} bytes buffered)", .after.as_secs_f64())]
    Incomplete {
        /// The deadline limit's name.
        limit: String,
        /// Its value.
        after: std::time::Duration,
        /// Bytes of the partial frame.
        buffered: usize,
    },
    /// A `header-delimited` header section runs past its cap without its empty line.
    #[error("header section exceeds {max} bytes without its closing empty line")]
    HeaderTooLong {
        /// The cap.
        max: u64,
    },
    /// A `header-delimited` header section breaks the contract's header rules.
    #[error("bad frame header: {0}")]
    BadHeader(String),
    /// A message given to an NDJSON encoder contains a newline.
    #[error("an NDJSON message may not contain a raw newline")]
    EmbeddedNewline,
    /// A header value does not fit its field.
    #[error("header field {name} does not fit in {bytes} bytes")]
    FieldOverflow {
        /// Field name.
        name: String,
        /// Field width.
        bytes: u8,
    },
    /// The contract's framing cannot be built (e.g. unsupported width).
    #[error("unsupported framing: {0}")]
    Unsupported(String),
    /// I/O error from the transport (only through the tokio adapters).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn read_uint(buf: &[u8], order: ByteOrder) -> u64 {
    let mut v: u64 = 0;
    match order {
        ByteOrder::Big => {
            for b in buf {
                v = (v << 8) | u64::from(*b);
            }
        }
        ByteOrder::Little => {
            for b in buf.iter().rev() {
                v = (v << 8) | u64::from(*b);
            }
        }
    }
    v
}

fn put_uint(dst: &mut BytesMut, v: u64, width: usize, order: ByteOrder) {
    let be = v.to_be_bytes();
    let bytes = &be[8 - width..];
    match order {
        ByteOrder::Big => dst.put_slice(bytes),
        ByteOrder::Little => {
            for b in bytes.iter().rev() {
                dst.put_u8(*b);
            }
        }
    }
}

fn fits(v: u64, width: usize) -> bool {
    width >= 8 || v < (1u64 << (8 * width))
}

/// `[length][payload]` framing: kernel control, rukh.
#[derive(Debug, Clone)]
pub struct LengthPrefixed {
    width: usize,
    order: ByteOrder,
    max: u64,
}

impl LengthPrefixed {
    /// A codec with a `width`-byte prefix and a payload cap of `max` bytes.
    pub fn new(width: u8, order: ByteOrder, max: u64) -> Result<Self, FrameError> {
        if !(1..=8).contains(&width) {
            return Err(FrameError::Unsupported(format!(
                "{width}-byte length prefix"
            )));
        }
        Ok(LengthPrefixed {
            width: width.into(),
            order,
            max,
        })
    }

    /// The payload cap.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The length prefix's width in bytes.
    pub fn width(&self) -> usize {
        self.width
    }
}

impl Decoder for LengthPrefixed {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if src.len() < self.width {
            return Ok(None);
        }
        let len = read_uint(&src[..self.width], self.order);
        if len > self.max {
            return Err(FrameError::Oversize { len, max: self.max });
        }
        // Safe: len ≤ max, which the contract bounds far below usize::MAX.
        let len = len as usize;
        let total = self.width + len;
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(self.width);
        Ok(Some(src.split_to(len).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(f) => Ok(Some(f)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated {
                buffered: src.len(),
            }),
        }
    }
}

impl Encoder<&[u8]> for LengthPrefixed {
    type Error = FrameError;

    fn encode(&mut self, item: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        let len = item.len() as u64;
        if len > self.max {
            return Err(FrameError::Oversize { len, max: self.max });
        }
        dst.reserve(self.width + item.len());
        put_uint(dst, len, self.width, self.order);
        dst.put_slice(item);
        Ok(())
    }
}

/// A decoded binary frame: header values in contract order (after the length), then payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryFrame {
    /// Header field values, excluding the length field.
    pub fields: Vec<u64>,
    /// Opaque payload bytes.
    pub payload: Bytes,
}

/// A binary frame codec: a length field, fixed header fields, payload (kernel data channel).
#[derive(Debug, Clone)]
pub struct BinaryCodec {
    order: ByteOrder,
    len_width: usize,
    counts: LengthCounts,
    /// (name, width) of each header field after the length.
    fields: Vec<(String, usize)>,
    header_rest: usize,
    max: u64,
}

impl BinaryCodec {
    /// Index of a named header field in [`BinaryFrame::fields`].
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|(n, _)| n == name)
    }

    /// Names of the header fields after the length.
    pub fn field_names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(n, _)| n.as_str())
    }

    fn body_len(&self, len: u64) -> Result<u64, FrameError> {
        match self.counts {
            LengthCounts::RestOfFrame => {
                len.checked_sub(self.header_rest as u64)
                    .ok_or(FrameError::ShortFrame {
                        len,
                        header: self.header_rest as u64,
                    })
            }
            LengthCounts::Payload => Ok(len),
        }
    }
}

impl Decoder for BinaryCodec {
    type Item = BinaryFrame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BinaryFrame>, FrameError> {
        if src.len() < self.len_width {
            return Ok(None);
        }
        let len = read_uint(&src[..self.len_width], self.order);
        let payload_len = self.body_len(len)?;
        let rest = payload_len + self.header_rest as u64;
        if rest > self.max {
            return Err(FrameError::Oversize {
                len: rest,
                max: self.max,
            });
        }
        let total = self.len_width + rest as usize;
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(self.len_width);
        let mut fields = Vec::with_capacity(self.fields.len());
        for (_, w) in &self.fields {
            fields.push(read_uint(&src[..*w], self.order));
            src.advance(*w);
        }
        let payload = src.split_to(payload_len as usize).freeze();
        Ok(Some(BinaryFrame { fields, payload }))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BinaryFrame>, FrameError> {
        match self.decode(src)? {
            Some(f) => Ok(Some(f)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated {
                buffered: src.len(),
            }),
        }
    }
}

impl Encoder<&BinaryFrame> for BinaryCodec {
    type Error = FrameError;

    fn encode(&mut self, item: &BinaryFrame, dst: &mut BytesMut) -> Result<(), FrameError> {
        if item.fields.len() != self.fields.len() {
            return Err(FrameError::Unsupported(format!(
                "frame has {} header values, framing declares {}",
                item.fields.len(),
                self.fields.len()
            )));
        }
        let rest = (self.header_rest + item.payload.len()) as u64;
        if rest > self.max {
            return Err(FrameError::Oversize {
                len: rest,
                max: self.max,
            });
        }
        let len = match self.counts {
            LengthCounts::RestOfFrame => rest,
            LengthCounts::Payload => item.payload.len() as u64,
        };
        if !fits(len, self.len_width) {
            return Err(FrameError::FieldOverflow {
                name: "length".into(),
                bytes: self.len_width as u8,
            });
        }
        for ((name, w), v) in self.fields.iter().zip(&item.fields) {
            if !fits(*v, *w) {
                return Err(FrameError::FieldOverflow {
                    name: name.clone(),
                    bytes: *w as u8,
                });
            }
        }
        dst.reserve(self.len_width + rest as usize);
        put_uint(dst, len, self.len_width, self.order);
        for ((_, w), v) in self.fields.iter().zip(&item.fields) {
            put_uint(dst, *v, *w, self.order);
        }
        dst.put_slice(&item.payload);
        Ok(())
    }
}

/// Newline-delimited JSON, with the line cap counted in bytes or UTF-16 code units.
#[derive(Debug, Clone)]
pub struct Ndjson {
    max: u64,
    measure: LineMeasure,
    /// Bytes of the buffer already scanned (no newline in them).
    scanned: usize,
    /// Units counted in the scanned bytes.
    units: u64,
}

impl Ndjson {
    /// A codec capping lines at `max` units of `measure`.
    pub fn new(max: u64, measure: LineMeasure) -> Self {
        Ndjson {
            max,
            measure,
            scanned: 0,
            units: 0,
        }
    }

    fn measure_name(&self) -> &'static str {
        match self.measure {
            LineMeasure::Bytes => "bytes",
            LineMeasure::Utf16Units => "UTF-16 code units",
        }
    }

    /// Units in a finished line, not counting the newline (and a `\r` before it).
    pub fn line_units(&self, line: &[u8]) -> u64 {
        self.count_units(line)
    }

    /// Units in `bytes`: for UTF-16, lead bytes of 4-byte sequences make a
    /// surrogate pair, continuation bytes make nothing, and a stray invalid byte
    /// counts one (the JSON layer rejects invalid UTF-8 later). Counted in blocks of 127 bytes summed as `u8` (at most
    /// 2 units a byte, so a block cannot overflow), which the compiler
    /// vectorises: the per-byte loop made NDJSON the slowest framing.
    fn count_units(&self, bytes: &[u8]) -> u64 {
        match self.measure {
            LineMeasure::Bytes => bytes.len() as u64,
            LineMeasure::Utf16Units => bytes
                .chunks(127)
                .map(|block| {
                    let n: u8 = block
                        .iter()
                        .map(|&b| u8::from((b as i8) >= -64) + u8::from((0xF0..=0xF7).contains(&b)))
                        .sum();
                    u64::from(n)
                })
                .sum(),
        }
    }
}

impl Decoder for Ndjson {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let start = self.scanned;
        let newline = memchr::memchr(b'\n', &src[start..]).map(|i| start + i);
        let end = newline.unwrap_or(src.len());
        self.units += self.count_units(&src[start..end]);
        let mut units = self.units;
        if let Some(nl) = newline
            && nl > 0
            && src[nl - 1] == b'\r'
        {
            units -= 1;
        }
        // A trailing `\r` still waiting for its `\n` may not count: allow one unit of slack
        // while the line is open, and check exactly once it is closed.
        let slack = u64::from(newline.is_none() && end > 0 && src[end - 1] == b'\r');
        if units > self.max + slack {
            let max = self.max;
            let measure = self.measure_name();
            self.scanned = 0;
            self.units = 0;
            return Err(FrameError::LineTooLong { max, measure });
        }
        match newline {
            None => {
                self.scanned = end;
                Ok(None)
            }
            Some(nl) => {
                self.scanned = 0;
                self.units = 0;
                let mut line = src.split_to(nl + 1);
                line.truncate(nl);
                if line.last() == Some(&b'\r') {
                    line.truncate(nl - 1);
                }
                Ok(Some(line.freeze()))
            }
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(f) => Ok(Some(f)),
            None if src.is_empty() => Ok(None),
            // A last line without its newline is still a line (one message per connection,
            // ended by half-close, is how xsession senders write).
            None => {
                self.scanned = 0;
                self.units = 0;
                let mut line = src.split_to(src.len());
                if line.last() == Some(&b'\r') {
                    line.truncate(line.len() - 1);
                }
                // `decode` allowed one unit of slack for a `\r` awaiting its `\n`: re-check.
                if self.count_units(&line) > self.max {
                    return Err(FrameError::LineTooLong {
                        max: self.max,
                        measure: self.measure_name(),
                    });
                }
                Ok(Some(line.freeze()))
            }
        }
    }
}

impl Encoder<&[u8]> for Ndjson {
    type Error = FrameError;

    fn encode(&mut self, item: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        if memchr::memchr(b'\n', item).is_some() {
            return Err(FrameError::EmbeddedNewline);
        }
        if self.line_units(item) > self.max {
            return Err(FrameError::LineTooLong {
                max: self.max,
                measure: self.measure_name(),
            });
        }
        dst.reserve(item.len() + 1);
        dst.put_slice(item);
        dst.put_u8(b'\n');
        Ok(())
    }
}

/// Whole messages delivered by a message transport (one per WebSocket text message).
#[derive(Debug, Clone, Copy)]
pub struct MessageCap {
    /// Largest message accepted, in bytes.
    pub max: u64,
}

impl MessageCap {
    /// Check one delivered message against the cap.
    pub fn check(&self, msg: &[u8]) -> Result<(), FrameError> {
        let len = msg.len() as u64;
        if len > self.max {
            return Err(FrameError::Oversize { len, max: self.max });
        }
        Ok(())
    }
}

/// The codec a channel's framing calls for.
#[derive(Debug, Clone)]
pub enum ChannelCodec {
    /// Length-prefixed JSON.
    LengthPrefixed(LengthPrefixed),
    /// Binary frames with a header.
    Binary(BinaryCodec),
    /// Newline-delimited JSON.
    Ndjson(Ndjson),
    /// Header lines, then a body of the announced length (LSP, DAP).
    HeaderDelimited(super::headers::HeaderDelimited),
    /// One message per transport message.
    Message(MessageCap),
}

fn not_a_json_stream() -> FrameError {
    FrameError::Unsupported("the channel does not frame JSON on a byte stream".into())
}

/// Largest frame any codec accepts when a contract sets no cap.
pub const DEFAULT_CAP: u64 = 16 * 1024 * 1024;

/// A limit as a positive duration (a deadline, in seconds or ms).
pub fn duration_of(limits: &Limits, name: &str) -> Result<std::time::Duration, FrameError> {
    match limits.duration(name) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(FrameError::Unsupported(format!("limit {name:?} is zero"))),
        Err(e) => Err(FrameError::Unsupported(e.to_string())),
    }
}

/// A limit as a cap in bytes (or UTF-16 units, or a count).
pub fn cap_of(limits: &Limits, name: &str) -> Result<u64, FrameError> {
    limits
        .cap(name)
        .map_err(|e| FrameError::Unsupported(e.to_string()))
}

/// [`cap_of`] for one look-up: evaluates the contract's limits first. Compiling a wire
/// evaluates them once and uses [`cap_of`].
pub fn limit_bytes(contract: &Contract, name: &str) -> Result<u64, FrameError> {
    cap_of(&contract.evaluated_limits(), name)
}

impl ChannelCodec {
    /// The largest frame the codec accepts: payload bytes (UTF-16 units for such lines);
    /// for binary frames, the payload cap.
    pub fn cap(&self) -> u64 {
        match self {
            ChannelCodec::LengthPrefixed(c) => c.max,
            ChannelCodec::Binary(c) => c.max,
            ChannelCodec::Ndjson(c) => c.max,
            ChannelCodec::HeaderDelimited(c) => c.max(),
            ChannelCodec::Message(c) => c.max,
        }
    }

    /// `payload`'s length as [`Self::cap`] counts it: bytes, or UTF-16 units for lines
    /// counted so.
    pub fn measure(&self, payload: &[u8]) -> u64 {
        match self {
            ChannelCodec::Ndjson(c) => c.line_units(payload),
            _ => payload.len() as u64,
        }
    }

    /// Whether [`Self::cap`] counts bytes.
    pub fn counts_bytes(&self) -> bool {
        match self {
            ChannelCodec::Ndjson(c) => c.measure == LineMeasure::Bytes,
            _ => true,
        }
    }

    /// What [`Self::cap`] counts, for messages: "bytes" or "UTF-16 code units".
    pub fn unit(&self) -> &'static str {
        match self {
            ChannelCodec::Ndjson(c) => c.measure_name(),
            _ => "bytes",
        }
    }

    /// The same framing with its cap set to `max`: a test peer that must send a frame over
    /// the contract's cap frames it exactly as a conforming sender frames any other.
    pub fn with_cap(mut self, max: u64) -> Self {
        match &mut self {
            ChannelCodec::LengthPrefixed(c) => c.max = max,
            ChannelCodec::Binary(c) => c.max = max,
            ChannelCodec::Ndjson(c) => c.max = max,
            ChannelCodec::HeaderDelimited(c) => c.set_max(max),
            ChannelCodec::Message(c) => c.max = max,
        }
        self
    }

    /// Frame one JSON message for a byte stream (length-prefixed, NDJSON, header-delimited).
    pub fn encode_json(&mut self, item: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        match self {
            ChannelCodec::LengthPrefixed(c) => c.encode(item, dst),
            ChannelCodec::Ndjson(c) => c.encode(item, dst),
            ChannelCodec::HeaderDelimited(c) => c.encode(item, dst),
            ChannelCodec::Binary(_) | ChannelCodec::Message(_) => Err(not_a_json_stream()),
        }
    }

    /// The next JSON message of a byte stream, if a whole one is buffered; at `eof`, the
    /// buffer must hold whole frames only.
    pub fn decode_json(
        &mut self,
        src: &mut BytesMut,
        eof: bool,
    ) -> Result<Option<Bytes>, FrameError> {
        fn step<D: Decoder<Item = Bytes, Error = FrameError>>(
            d: &mut D,
            src: &mut BytesMut,
            eof: bool,
        ) -> Result<Option<Bytes>, FrameError> {
            if eof {
                d.decode_eof(src)
            } else {
                d.decode(src)
            }
        }
        match self {
            ChannelCodec::LengthPrefixed(c) => step(c, src, eof),
            ChannelCodec::Ndjson(c) => step(c, src, eof),
            ChannelCodec::HeaderDelimited(c) => step(c, src, eof),
            ChannelCodec::Binary(_) | ChannelCodec::Message(_) => Err(not_a_json_stream()),
        }
    }

    /// Build the codec for `channel`, its caps read from the contract's `limits`.
    pub fn for_channel(limits: &Limits, channel: &Channel) -> Result<Self, FrameError> {
        let cap = |name: &Option<String>| -> Result<u64, FrameError> {
            match name {
                Some(n) => cap_of(limits, n),
                None => Ok(DEFAULT_CAP),
            }
        };
        Ok(match &channel.framing {
            Framing::LengthPrefixed {
                length_bytes,
                byte_order,
                max_payload,
                ..
            } => ChannelCodec::LengthPrefixed(LengthPrefixed::new(
                *length_bytes,
                *byte_order,
                cap(max_payload)?,
            )?),
            Framing::Binary {
                byte_order,
                header,
                max_frame,
                ..
            } => {
                let (first, rest) = header.split_first().ok_or_else(|| {
                    FrameError::Unsupported("binary framing without header".into())
                })?;
                let counts = first.counts.ok_or_else(|| {
                    FrameError::Unsupported("first header field must be the length".into())
                })?;
                let check_width = |w: u8| {
                    if (1..=8).contains(&w) {
                        Ok(usize::from(w))
                    } else {
                        Err(FrameError::Unsupported(format!("{w}-byte header field")))
                    }
                };
                let mut fields = Vec::new();
                for f in rest {
                    fields.push((f.name.clone(), check_width(f.bytes)?));
                }
                let header_rest = fields.iter().map(|(_, w)| w).sum();
                ChannelCodec::Binary(BinaryCodec {
                    order: *byte_order,
                    len_width: check_width(first.bytes)?,
                    counts,
                    fields,
                    header_rest,
                    max: cap(max_frame)?,
                })
            }
            Framing::Ndjson {
                max_line,
                line_measure,
                ..
            } => ChannelCodec::Ndjson(Ndjson::new(cap_of(limits, max_line)?, *line_measure)),
            Framing::HeaderDelimited {
                length_header,
                max_payload,
                max_header,
                headers,
                unknown_headers,
                ..
            } => ChannelCodec::HeaderDelimited(super::headers::HeaderDelimited::new(
                length_header,
                headers.clone(),
                *unknown_headers,
                match max_header {
                    Some(n) => cap_of(limits, n)?,
                    None => super::headers::DEFAULT_HEADER_CAP,
                },
                cap(max_payload)?,
            )),
            Framing::WebsocketText { max_message, .. } => ChannelCodec::Message(MessageCap {
                max: cap(max_message)?,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_prefix_is_refused_before_allocation() {
        let mut c = LengthPrefixed::new(4, ByteOrder::Big, 1 << 20).expect("codec");
        let mut buf = BytesMut::from(&[0xFF, 0xFF, 0xFF, 0xFF][..]);
        let cap_before = buf.capacity();
        let e = c.decode(&mut buf).expect_err("oversize");
        assert!(matches!(
            e,
            FrameError::Oversize {
                len: 0xFFFF_FFFF,
                max: 1048576
            }
        ));
        assert_eq!(buf.capacity(), cap_before, "nothing was reserved");
    }

    #[test]
    fn binary_frame_header_and_payload() {
        let ch: Channel = serde_json::from_value(serde_json::json!({
            "description": "d", "transports": ["unix"], "seed": "s",
            "framing": {"kind": "binary", "byteOrder": "big", "header": [
                {"name": "length", "bytes": 4, "counts": "rest-of-frame", "description": "l"},
                {"name": "stream_id", "bytes": 4, "description": "s"},
                {"name": "seq", "bytes": 8, "description": "q"}]}
        }))
        .expect("channel");
        let contract: Contract =
            serde_json::from_str(include_str!("../../tests/fixtures/minimal.json"))
                .expect("fixture");
        let limits = contract.evaluated_limits();
        let ChannelCodec::Binary(mut c) = ChannelCodec::for_channel(&limits, &ch).expect("codec")
        else {
            panic!("binary expected")
        };
        let mut buf = BytesMut::new();
        let f = BinaryFrame {
            fields: vec![7, 1],
            payload: Bytes::from_static(b"pcm"),
        };
        c.encode(&f, &mut buf).expect("encode");
        assert_eq!(
            &buf[..4],
            &[0, 0, 0, 15],
            "length counts stream_id + seq + payload"
        );
        assert_eq!(c.decode(&mut buf).expect("ok"), Some(f));
        let mut short = BytesMut::from(&[0, 0, 0, 3, 1, 2, 3][..]);
        assert!(matches!(
            c.decode(&mut short),
            Err(FrameError::ShortFrame { len: 3, header: 12 })
        ));
    }

    #[test]
    fn ndjson_counts_utf16_units() {
        let mut c = Ndjson::new(4, LineMeasure::Utf16Units);
        // "ééé😀" is 3 + 2 = 5 units but 10 bytes: too long.
        let mut buf = BytesMut::from("ééé😀\n".as_bytes());
        assert!(matches!(
            c.decode(&mut buf),
            Err(FrameError::LineTooLong { max: 4, .. })
        ));
        // "ééé" + "€" is 4 units, 9 bytes: fits even though bytes exceed the cap.
        let mut c = Ndjson::new(4, LineMeasure::Utf16Units);
        let mut buf = BytesMut::from("éé€é\r\n".as_bytes());
        assert_eq!(
            c.decode(&mut buf).expect("ok").as_deref(),
            Some("éé€é".as_bytes())
        );
    }

    #[test]
    fn a_codec_measures_a_frame_as_its_cap_counts() {
        let units = ChannelCodec::Ndjson(Ndjson::new(4, LineMeasure::Utf16Units));
        assert_eq!(
            (units.measure("é😀".as_bytes()), units.unit()),
            (3, "UTF-16 code units")
        );
        assert!(!units.counts_bytes());
        let bytes = ChannelCodec::Ndjson(Ndjson::new(4, LineMeasure::Bytes));
        assert_eq!(
            (bytes.measure("é😀".as_bytes()), bytes.unit()),
            (6, "bytes")
        );
        assert!(bytes.counts_bytes());
    }

    #[test]
    fn block_counting_matches_the_per_byte_rule() {
        let c = Ndjson::new(u64::MAX, LineMeasure::Utf16Units);
        let per_byte = |bytes: &[u8]| -> u64 {
            bytes
                .iter()
                .map(|b| match b {
                    0x80..=0xBF => 0,
                    0xF0..=0xF7 => 2,
                    _ => 1,
                })
                .sum()
        };
        let mut all: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        all.extend("aé€😀".repeat(300).as_bytes());
        for len in [0, 1, 126, 127, 128, 254, 255, 4096, all.len()] {
            assert_eq!(
                c.line_units(&all[..len]),
                per_byte(&all[..len]),
                "len {len}"
            );
        }
        assert_eq!(
            c.line_units("😀".as_bytes()),
            "😀".encode_utf16().count() as u64
        );
    }

    #[test]
    fn last_line_without_newline_respects_the_cap() {
        let mut c = Ndjson::new(4, LineMeasure::Bytes);
        let mut buf = BytesMut::from(&b"1234\r"[..]);
        assert_eq!(
            c.decode_eof(&mut buf).expect("fits").as_deref(),
            Some(&b"1234"[..])
        );
        let mut c = Ndjson::new(4, LineMeasure::Bytes);
        let mut buf = BytesMut::from(&b"12345"[..]);
        assert!(c.decode_eof(&mut buf).is_err());
    }

    #[test]
    fn ndjson_rejects_an_endless_line_while_it_streams() {
        let mut c = Ndjson::new(8, LineMeasure::Bytes);
        let mut buf = BytesMut::from(&b"12345"[..]);
        assert!(c.decode(&mut buf).expect("partial").is_none());
        buf.extend_from_slice(b"6789");
        assert!(matches!(
            c.decode(&mut buf),
            Err(FrameError::LineTooLong { .. })
        ));
    }
}
