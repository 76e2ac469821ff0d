//! Sans-IO inspection: bytes of one direction in, inspection events out.
//!
//! An [`Inspector`] owns one connection's codecs (one per direction), the
//! contract's compiled [`Wire`] and a table of requests in flight. The relay
//! feeds it every chunk it forwards; it never does I/O and never blocks, so the
//! relay decides what to do with what it reports.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use contract::model::Kind;
use contract::wire::{ChannelCodec, Violation, Wire};
use serde::Serialize;
use serde_json::Value;
use tokio_util::codec::Decoder;

/// Which way bytes travel on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// From the connecting side to the upstream.
    Up,
    /// From the upstream back to the connecting side.
    Down,
}

/// What the inspector says about one message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Route name.
    pub route: String,
    /// Direction.
    pub dir: Dir,
    /// Sending party.
    pub from: String,
    /// Receiving party.
    pub to: String,
    /// Message kind (absent when the message could not be classified).
    pub kind: Option<Kind>,
    /// Method, if known.
    pub method: Option<String>,
    /// Message id or the id it answers.
    pub id: Option<Value>,
    /// Frame size in bytes.
    pub size: usize,
    /// Time since the request, for replies.
    #[serde(serialize_with = "ser_ms")]
    pub latency: Option<Duration>,
    /// Trace id, as carried.
    pub trace: Option<String>,
    /// `ok`, or the violation.
    pub verdict: Verdict,
}

fn ser_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64() * 1000.0),
        None => s.serialize_none(),
    }
}

/// The verdict on one message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// The contract accepts it.
    Ok,
    /// The contract rejects it.
    Violation {
        /// Violation class.
        class: &'static str,
        /// The contract's code for it.
        code: Option<Value>,
        /// Seed rule.
        seed: Option<String>,
        /// Why.
        reason: String,
    },
    /// The byte stream broke the framing: nothing after this point can be decoded.
    Framing {
        /// Why.
        reason: String,
    },
}

impl Verdict {
    fn of(v: &Violation) -> Self {
        Verdict::Violation {
            class: v.class.name(),
            code: v.code.clone(),
            seed: v.seed.clone(),
            reason: v.reason.clone(),
        }
    }
}

struct Side {
    codec: ChannelCodec,
    buf: BytesMut,
    broken: bool,
}

/// One connection's inspector.
pub struct Inspector {
    wire: Arc<Wire>,
    route: String,
    channel: String,
    /// Party sending `Up`, and party sending `Down`.
    parties: (String, String),
    up: Side,
    down: Side,
    pending: HashMap<(Dir, String), (String, Instant)>,
    pending_cap: usize,
}

impl Inspector {
    /// Inspect `channel` of `wire`, where `client` connects (sends `Up`) and `server` answers.
    pub fn new(
        wire: Arc<Wire>,
        route: &str,
        channel: &str,
        client: &str,
        server: &str,
    ) -> Result<Self, contract::wire::WireError> {
        let codec = wire.codec(channel)?;
        let side = |codec: ChannelCodec| Side {
            codec,
            buf: BytesMut::new(),
            broken: false,
        };
        Ok(Inspector {
            route: route.to_string(),
            channel: channel.to_string(),
            parties: (client.to_string(), server.to_string()),
            up: side(codec.clone()),
            down: side(codec),
            wire,
            pending: HashMap::new(),
            pending_cap: contract::io::DEFAULT_PENDING,
        })
    }

    /// Feed bytes that travelled `dir`; returns an event per complete message.
    pub fn feed(&mut self, dir: Dir, bytes: &[u8], now: Instant) -> Vec<Event> {
        let mut frames = Vec::new();
        let side = match dir {
            Dir::Up => &mut self.up,
            Dir::Down => &mut self.down,
        };
        if side.broken {
            return Vec::new();
        }
        side.buf.extend_from_slice(bytes);
        let mut framing_error = None;
        loop {
            let next = match &mut side.codec {
                ChannelCodec::LengthPrefixed(c) => c.decode(&mut side.buf),
                ChannelCodec::Ndjson(c) => c.decode(&mut side.buf),
                ChannelCodec::Message(c) => {
                    // Message transports hand over whole messages.
                    let msg = side.buf.split().freeze();
                    if msg.is_empty() {
                        Ok(None)
                    } else {
                        c.check(&msg).map(|()| Some(msg))
                    }
                }
                ChannelCodec::Binary(_) => Ok(None),
            };
            match next {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => {
                    side.broken = true;
                    side.buf.clear();
                    framing_error = Some(e.to_string());
                    break;
                }
            }
        }
        let mut events: Vec<Event> = frames.iter().map(|f| self.classify(dir, f, now)).collect();
        if let Some(reason) = framing_error {
            let (from, to) = self.ends(dir);
            events.push(Event {
                route: self.route.clone(),
                dir,
                from,
                to,
                kind: None,
                method: None,
                id: None,
                size: 0,
                latency: None,
                trace: None,
                verdict: Verdict::Framing { reason },
            });
        }
        events
    }

    fn ends(&self, dir: Dir) -> (String, String) {
        match dir {
            Dir::Up => (self.parties.0.clone(), self.parties.1.clone()),
            Dir::Down => (self.parties.1.clone(), self.parties.0.clone()),
        }
    }

    fn classify(&mut self, dir: Dir, frame: &[u8], now: Instant) -> Event {
        let (from, to) = self.ends(dir);
        let reverse = match dir {
            Dir::Up => Dir::Down,
            Dir::Down => Dir::Up,
        };
        // A reply's correlation id names a request that travelled the other way.
        let answered: std::cell::RefCell<Option<(String, Instant)>> = std::cell::RefCell::new(None);
        let pending = &self.pending;
        let decoded = self.wire.decode_with(&self.channel, &from, frame, &|id| {
            let hit = pending.get(&(reverse, id.to_string())).cloned();
            let method = hit.as_ref().map(|(m, _)| m.clone());
            *answered.borrow_mut() = hit;
            method
        });
        let answered = answered.into_inner();
        let (msg, verdict) = match decoded {
            Ok(m) => (Some(m), Verdict::Ok),
            Err(v) => (v.partial.clone().map(|b| *b), Verdict::of(&v)),
        };
        let mut latency = None;
        if let Some(m) = &msg {
            match m.kind {
                Kind::Request => {
                    if let (Some(id), Some(method)) = (&m.id, &m.method)
                        && self.pending.len() < self.pending_cap
                    {
                        self.pending
                            .insert((dir, id.to_string()), (method.clone(), now));
                    }
                }
                Kind::Response | Kind::Error => {
                    if let Some(id) = &m.correlation
                        && let Some((_, t)) = self.pending.remove(&(reverse, id.to_string()))
                    {
                        latency = Some(now.saturating_duration_since(t));
                    }
                }
                _ => {}
            }
        }
        Event {
            route: self.route.clone(),
            dir,
            from,
            to,
            kind: msg.as_ref().map(|m| m.kind),
            method: msg
                .as_ref()
                .and_then(|m| m.method.clone())
                .or(answered.map(|(m, _)| m)),
            id: msg
                .as_ref()
                .and_then(|m| m.id.clone().or(m.correlation.clone())),
            size: frame.len(),
            latency,
            trace: msg.as_ref().and_then(|m| m.trace.clone()),
            verdict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(body: &str) -> Vec<u8> {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body.as_bytes());
        out
    }

    #[test]
    fn request_then_response_gives_latency_and_method() {
        let wire =
            Arc::new(Wire::new(Arc::new(contract::builtin("rukh").expect("rukh"))).expect("wire"));
        let mut ins = Inspector::new(wire, "r", "ipc", "core", "extension").expect("inspector");
        let t0 = Instant::now();
        let req = framed(r#"{"jsonrpc":"2.0","id":"c:1","method":"rukh.close","params":{}}"#);
        // Split the frame to show reassembly.
        assert!(ins.feed(Dir::Up, &req[..7], t0).is_empty());
        let ev = ins.feed(Dir::Up, &req[7..], t0);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].method.as_deref(), Some("rukh.close"));
        let resp = framed(r#"{"jsonrpc":"2.0","id":"c:1","result":{}}"#);
        let ev = ins.feed(Dir::Down, &resp, t0 + Duration::from_millis(5));
        assert_eq!(ev[0].kind, Some(Kind::Response));
        assert_eq!(ev[0].method.as_deref(), Some("rukh.close"));
        assert_eq!(ev[0].latency, Some(Duration::from_millis(5)));
    }

    #[test]
    fn violations_and_framing_errors_are_reported() {
        let wire =
            Arc::new(Wire::new(Arc::new(contract::builtin("rukh").expect("rukh"))).expect("wire"));
        let mut ins = Inspector::new(wire, "r", "ipc", "core", "extension").expect("inspector");
        let now = Instant::now();
        let ev = ins.feed(
            Dir::Up,
            &framed(r#"{"jsonrpc":"2.0","id":"c:1","id":"c:2"}"#),
            now,
        );
        assert!(
            matches!(&ev[0].verdict, Verdict::Violation { class: "parse", code: Some(c), .. } if c == &serde_json::json!(-32700))
        );
        let ev = ins.feed(Dir::Down, &[0xFF, 0xFF, 0xFF, 0xFF], now);
        assert!(matches!(&ev[0].verdict, Verdict::Framing { .. }));
        assert!(
            ins.feed(Dir::Down, b"more", now).is_empty(),
            "a broken direction stays silent"
        );
    }
}
