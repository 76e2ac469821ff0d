//! `header-delimited` framing: `Name: value\r\n` lines, an empty line, then a body whose
//! length a named header gives (the LSP and DAP base protocol).
//!
//! The header section is capped before it is parsed and the announced body length is
//! capped before a byte of the body is reserved, so a peer that never ends its header or
//! announces `Content-Length: 99999999999` costs at most the header cap. The header set
//! is validated against the contract: the length header exactly once, as plain decimal;
//! required fields present; listed values only; unknown fields rejected or skipped as
//! the contract says.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::framing::FrameError;
use crate::model::{HeaderLine, UnknownHeaders};

/// Header section cap when the contract names none: generous for two or three fields.
pub const DEFAULT_HEADER_CAP: u64 = 8 * 1024;

const END: &[u8] = b"\r\n\r\n";

/// The `header-delimited` codec of one channel.
#[derive(Debug, Clone)]
pub struct HeaderDelimited {
    length_header: String,
    headers: Vec<HeaderLine>,
    unknown: UnknownHeaders,
    max_header: u64,
    max: u64,
    /// Bytes of the buffer already searched for the end of the header section.
    scanned: usize,
    /// The parsed header of the frame now buffering: header bytes, body bytes.
    pending: Option<(usize, usize)>,
}

impl HeaderDelimited {
    /// A codec for `length_header` and the listed `headers`, with caps on the header
    /// section and on the body.
    pub fn new(
        length_header: &str,
        headers: Vec<HeaderLine>,
        unknown: UnknownHeaders,
        max_header: u64,
        max: u64,
    ) -> Self {
        HeaderDelimited {
            length_header: length_header.to_string(),
            headers,
            unknown,
            max_header,
            max,
            scanned: 0,
            pending: None,
        }
    }

    /// The body cap.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Set the body cap (see [`super::framing::ChannelCodec::with_cap`]).
    pub(crate) fn set_max(&mut self, max: u64) {
        self.max = max;
    }

    fn bad(why: impl Into<String>) -> FrameError {
        FrameError::BadHeader(why.into())
    }

    /// Parse and validate a header section (without its closing `\r\n\r\n`): the body length.
    fn parse(&self, section: &[u8]) -> Result<u64, FrameError> {
        let text = std::str::from_utf8(section)
            .ok()
            .filter(|t| t.is_ascii())
            .ok_or_else(|| Self::bad("the header section is not ASCII"))?;
        let mut length = None;
        let mut seen: Vec<&str> = Vec::new();
        for line in text.split("\r\n") {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| Self::bad(format!("header line {line:?} has no ':'")))?;
            if name.is_empty() || !name.bytes().all(is_token) {
                return Err(Self::bad(format!("{name:?} is not a header field name")));
            }
            if seen.iter().any(|s| s.eq_ignore_ascii_case(name)) {
                return Err(Self::bad(format!("header field {name} is repeated")));
            }
            seen.push(name);
            let value = value.trim_matches([' ', '\t']);
            if name.eq_ignore_ascii_case(&self.length_header) {
                length = Some(self.length(name, value)?);
            } else {
                self.check_field(name, value)?;
            }
        }
        if let Some(h) = self
            .headers
            .iter()
            .find(|h| h.required && !seen.iter().any(|s| s.eq_ignore_ascii_case(&h.name)))
        {
            return Err(Self::bad(format!(
                "required header field {} is missing",
                h.name
            )));
        }
        length.ok_or_else(|| Self::bad(format!("no {} header field", self.length_header)))
    }

    /// The body length, plain decimal digits only, checked against the cap.
    fn length(&self, name: &str, value: &str) -> Result<u64, FrameError> {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Self::bad(format!(
                "{name}: {value:?} is not a decimal length"
            )));
        }
        match value.parse::<u64>() {
            Ok(len) if len <= self.max => Ok(len),
            Ok(len) => Err(FrameError::Oversize { len, max: self.max }),
            Err(_) => Err(FrameError::Oversize {
                len: u64::MAX,
                max: self.max,
            }),
        }
    }

    fn check_field(&self, name: &str, value: &str) -> Result<(), FrameError> {
        match self
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
        {
            None if self.unknown == UnknownHeaders::Ignore => Ok(()),
            None => Err(Self::bad(format!(
                "header field {name} is not in the contract"
            ))),
            Some(h) if h.values.is_empty() => Ok(()),
            Some(h) if h.values.iter().any(|v| v.eq_ignore_ascii_case(value)) => Ok(()),
            Some(h) => Err(Self::bad(format!(
                "{name}: {value:?} is none of {}",
                h.values.join(", ")
            ))),
        }
    }

    /// Find the end of the header section, within the cap.
    fn header_end(&mut self, src: &BytesMut) -> Result<Option<usize>, FrameError> {
        let window = src.len().min(self.max_header as usize);
        let from = self.scanned.saturating_sub(END.len() - 1);
        if let Some(i) = memchr::memmem::find(&src[from..window], END) {
            return Ok(Some(from + i));
        }
        if src.len() as u64 >= self.max_header {
            return Err(FrameError::HeaderTooLong {
                max: self.max_header,
            });
        }
        self.scanned = window;
        Ok(None)
    }

    fn reset(&mut self) {
        self.scanned = 0;
        self.pending = None;
    }
}

/// RFC 9110 `tchar`: the characters a header field name may hold.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Decoder for HeaderDelimited {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let (head, body) = match self.pending {
            Some(p) => p,
            None => {
                let Some(end) = self.header_end(src).inspect_err(|_| self.reset())? else {
                    return Ok(None);
                };
                let len = self.parse(&src[..end]).inspect_err(|_| self.reset())?;
                // len ≤ max, which a contract keeps far below usize::MAX.
                let p = (end + END.len(), len as usize);
                self.pending = Some(p);
                p
            }
        };
        if src.len() < head + body {
            src.reserve(head + body - src.len());
            return Ok(None);
        }
        self.reset();
        src.advance(head);
        Ok(Some(src.split_to(body).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(f) => Ok(Some(f)),
            None if src.is_empty() => Ok(None),
            None => {
                let buffered = src.len();
                self.reset();
                Err(FrameError::Truncated { buffered })
            }
        }
    }
}

impl Encoder<&[u8]> for HeaderDelimited {
    type Error = FrameError;

    fn encode(&mut self, item: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        let len = item.len() as u64;
        if len > self.max {
            return Err(FrameError::Oversize { len, max: self.max });
        }
        let mut head = format!("{}: {len}\r\n", self.length_header);
        for h in self.headers.iter().filter(|h| h.required) {
            let value = h.values.first().ok_or_else(|| {
                FrameError::Unsupported(format!(
                    "required header field {} lists no value to send",
                    h.name
                ))
            })?;
            head.push_str(&format!("{}: {value}\r\n", h.name));
        }
        head.push_str("\r\n");
        dst.reserve(head.len() + item.len());
        dst.put_slice(head.as_bytes());
        dst.put_slice(item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsp(max_header: u64, max: u64) -> HeaderDelimited {
        let content_type = HeaderLine {
            name: "Content-Type".into(),
            required: false,
            values: vec![
                "application/vscode-jsonrpc; charset=utf-8".into(),
                "application/vscode-jsonrpc; charset=utf8".into(),
            ],
            description: "d".into(),
        };
        HeaderDelimited::new(
            "Content-Length",
            vec![content_type],
            UnknownHeaders::Reject,
            max_header,
            max,
        )
    }

    #[test]
    fn frames_split_at_every_byte_decode_the_same() {
        let wire = b"Content-Length: 2\r\n\r\n{}content-type: application/vscode-jsonrpc; charset=UTF-8\r\nContent-Length:3\r\n\r\n[1]";
        for split in 0..wire.len() {
            let mut c = lsp(128, 16);
            let mut buf = BytesMut::from(&wire[..split]);
            let mut out = Vec::new();
            while let Some(f) = c.decode(&mut buf).expect("valid") {
                out.push(f);
            }
            buf.extend_from_slice(&wire[split..]);
            while let Some(f) = c.decode(&mut buf).expect("valid") {
                out.push(f);
            }
            assert_eq!(out, [&b"{}"[..], &b"[1]"[..]], "split at {split}");
        }
    }

    #[test]
    fn an_oversize_length_is_refused_before_the_body_is_reserved() {
        let mut c = lsp(64, 16);
        let mut buf = BytesMut::from(&b"Content-Length: 99999999999999999999999\r\n\r\n"[..]);
        let cap = buf.capacity();
        assert!(matches!(
            c.decode(&mut buf),
            Err(FrameError::Oversize { max: 16, .. })
        ));
        assert_eq!(buf.capacity(), cap);
    }

    #[test]
    fn an_endless_header_stops_at_the_cap() {
        let mut c = lsp(32, 16);
        let mut buf = BytesMut::from(&b"Content-Length: 2\r\nX-Pad: "[..]);
        assert!(c.decode(&mut buf).expect("partial").is_none());
        buf.extend_from_slice(&[b'a'; 40]);
        assert!(matches!(
            c.decode(&mut buf),
            Err(FrameError::HeaderTooLong { max: 32 })
        ));
    }

    #[test]
    fn each_bad_header_gets_its_own_error() {
        for (wire, want) in [
            (
                &b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}"[..],
                "none of",
            ),
            (
                b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
                "repeated",
            ),
            (b"Content-Length: -2\r\n\r\n{}", "not a decimal length"),
            (b"Content-Length: 0x2\r\n\r\n{}", "not a decimal length"),
            (
                b"X-Other: 1\r\nContent-Length: 2\r\n\r\n{}",
                "not in the contract",
            ),
            (b"Content-Length 2\r\n\r\n{}", "has no ':'"),
            (
                b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}",
                "no Content-Length",
            ),
            (b"Bad Name: 1\r\n\r\n", "not a header field name"),
        ] {
            let mut c = lsp(128, 16);
            let e = c.decode(&mut BytesMut::from(wire)).expect_err("refused");
            assert!(
                e.to_string().contains(want),
                "{e} for {:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }

    #[test]
    fn encode_writes_what_decode_reads() {
        let mut c = lsp(128, 64);
        let mut buf = BytesMut::new();
        c.encode(&b"{\"id\":1}"[..], &mut buf).expect("fits");
        assert_eq!(&buf[..], b"Content-Length: 8\r\n\r\n{\"id\":1}");
        assert_eq!(
            c.decode(&mut buf).expect("ok").as_deref(),
            Some(&b"{\"id\":1}"[..])
        );
        assert!(c.encode(&[b' '; 65][..], &mut buf).is_err());
        let mut buf = BytesMut::from(&b"Content-Length: 8\r\n\r\n{\"id\""[..]);
        assert!(matches!(
            c.decode_eof(&mut buf),
            Err(FrameError::Truncated { .. })
        ));
    }
}
