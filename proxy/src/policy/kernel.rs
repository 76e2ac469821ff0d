//! kernel: per-stream byte credit on the data channel, as a sans-IO gate.
//!
//! Who grants whom (§8, K-9, K-10): the core opens every binary stream
//! (stream.open, stream_id in the payload); the stream's RECEIVER grants its
//! sender credit with stream.credit on the control channel (envelope
//! stream_id, payload.bytes); credit is additive, starts at
//! initialCreditBytes (0), and only payload bytes count (not the 12 header
//! bytes after the length). Which party receives depends on the stream kind,
//! which the contract states only in prose, so the gate pins the receiver as
//! the party of the first stream.credit and flags credit from the other one.
//!
//! The gate sits on the data path: [`CreditGate::offer`] forwards a frame the
//! credit covers, HOLDS one beyond it (a conforming sender never gets there as
//! long as the relay applies a stream.credit before forwarding it; holding only
//! absorbs a race between the control and data relays), and once the stream's
//! queue is full the excess is a credit overrun (K-10): [`GateDecision::Exceeded`]
//! with the error protocol.credit_exceeded and the stream.close messages the
//! relay sends. Queue bound (contract decision needed): the held frames of one
//! stream together, counted by their length-field value (header after the
//! length + payload), fit in one maximal data frame, dataFrameMax. Streams
//! have independent queues, so one stream never blocks another.
//!
//! Frames for a stream the gate does not know (never opened, or closed) are
//! forwarded: per K-3 the receiver discards them silently.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use contract::Contract;
use contract::wire::{Message, Wire};
use serde_json::{Value, json};

use super::{Act, Ctx, DataRuling, Policy, Ruling, SharedState, error_seed};

/// One data frame, as the relay read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// Stream id (header).
    pub stream: u64,
    /// Sequence number (header).
    pub seq: u64,
    /// Payload bytes, which is what credit counts.
    pub payload_len: u64,
    /// The whole encoded frame (length field included), forwarded as is.
    pub bytes: Bytes,
}

/// What to do with an offered data frame.
#[derive(Debug, Clone, PartialEq)]
pub enum GateDecision {
    /// Forward it now.
    Forward(Held),
    /// Held until credit covers it; a later [`Act::Release`] (or
    /// [`CreditGate::grant`]) returns it.
    Hold,
    /// Credit overrun: discard the frame (counted) and send the messages.
    Exceeded(Box<Overrun>),
}

/// A credit overrun (K-10): the stream is closed for both sides.
#[derive(Debug, Clone, PartialEq)]
pub struct Overrun {
    /// The ruling (act Discard: the frame is dropped and counted).
    pub ruling: Ruling,
    /// Control-channel messages for the data's sender, as its receiver would
    /// send them: error protocol.credit_exceeded with the stream_id, then stream.close.
    pub to_sender: Vec<Value>,
    /// Control-channel message for the data's receiver: stream.close, so the
    /// stream ends on its side too.
    pub to_receiver: Vec<Value>,
    /// Party that sent the data (None when no credit was ever granted).
    pub sender: Option<String>,
    /// Party that receives it.
    pub receiver: Option<String>,
    /// Held frames dropped with the stream.
    pub dropped_held: usize,
}

#[derive(Debug, Default)]
struct Stream {
    credit: u64,
    queue: VecDeque<Held>,
    /// Sum of the held frames' length-field values.
    queued: u64,
    /// Party that grants credit (the data's receiver), pinned by the first stream.credit.
    receiver: Option<String>,
    /// Envelope version and trace id of the stream.open, for messages about the stream.
    v: Value,
    trace: Value,
}

/// One kernel session's credit bookkeeping (see the module docs).
#[derive(Debug)]
pub struct CreditGate {
    session: u64,
    initial: u64,
    /// Header bytes after the length field (charged per held frame).
    header: u64,
    /// Bound of one stream's queue, in length-field bytes.
    bound: u64,
    code: Value,
    category: Value,
    retryable: Value,
    seed: String,
    parties: Vec<String>,
    streams: HashMap<u64, Stream>,
    next_id: u64,
}

impl CreditGate {
    /// A gate for `session` with the contract's limits.
    pub fn new(c: &Contract, session: u64) -> Self {
        let limits = c.evaluated_limits();
        let code = json!("protocol.credit_exceeded");
        let entry = c.error_for(&code);
        CreditGate {
            session,
            initial: limits.cap("initialCreditBytes").unwrap_or(0),
            header: limits.cap("dataFrameHeaderAfterLength").unwrap_or(0),
            bound: limits.cap("dataFrameMax").unwrap_or(0),
            category: entry.map(|e| json!(e.category)).unwrap_or(Value::Null),
            retryable: entry.map(|e| json!(e.retryable)).unwrap_or(Value::Null),
            seed: c.note_seed("K-10"),
            code: if entry.is_some() { code } else { Value::Null },
            parties: c.parties.keys().cloned().collect(),
            streams: HashMap::new(),
            next_id: 0,
        }
    }

    /// stream.open: the stream exists with the initial credit. `v` and `trace`
    /// come from the stream.open envelope. False when it was already open.
    pub fn open(&mut self, stream: u64, v: Value, trace: Value) -> bool {
        let fresh = !self.streams.contains_key(&stream);
        self.streams.insert(
            stream,
            Stream {
                credit: self.initial,
                v,
                trace,
                ..Stream::default()
            },
        );
        fresh
    }

    /// stream.credit: add `bytes` to the stream's allowance and release the held
    /// frames now covered, in order. An unknown stream is ignored (K-3: late).
    pub fn grant(&mut self, stream: u64, bytes: u64) -> Vec<Held> {
        let Some(s) = self.streams.get_mut(&stream) else {
            return vec![];
        };
        s.credit = s.credit.saturating_add(bytes);
        let mut out = Vec::new();
        while let Some(f) = s.queue.front() {
            if f.payload_len > s.credit {
                break;
            }
            s.credit -= f.payload_len;
            s.queued = s.queued.saturating_sub(self.header + f.payload_len);
            if let Some(f) = s.queue.pop_front() {
                out.push(f);
            }
        }
        out
    }

    /// Pin (or check) the party that grants credit on `stream`. False when
    /// another party already granted it.
    pub fn granted_by(&mut self, stream: u64, party: &str) -> bool {
        match self.streams.get_mut(&stream) {
            Some(s) => match &s.receiver {
                Some(r) => r == party,
                None => {
                    s.receiver = Some(party.to_string());
                    true
                }
            },
            None => true,
        }
    }

    /// Enforce mode: a data frame for its stream (see [`GateDecision`]).
    pub fn offer(&mut self, frame: Held) -> GateDecision {
        let header = self.header;
        let bound = self.bound;
        let Some(s) = self.streams.get_mut(&frame.stream) else {
            return GateDecision::Forward(frame);
        };
        if s.queue.is_empty() && frame.payload_len <= s.credit {
            s.credit -= frame.payload_len;
            return GateDecision::Forward(frame);
        }
        let cost = header.saturating_add(frame.payload_len);
        if s.queued.saturating_add(cost) <= bound {
            s.queued += cost;
            s.queue.push_back(frame);
            return GateDecision::Hold;
        }
        let credit = s.credit;
        let stream = frame.stream;
        let reason = format!(
            "stream {stream}: frame seq {} of {} payload bytes beyond the granted credit ({credit} left, {} bytes already held)",
            frame.seq, frame.payload_len, s.queued
        );
        GateDecision::Exceeded(Box::new(self.overrun(stream, reason)))
    }

    /// Observe mode: spend credit for a frame that is forwarded anyway; a Flag
    /// ruling when it overran (the stream stays open, credit drops to 0).
    pub fn account(&mut self, stream: u64, payload_len: u64) -> Option<Ruling> {
        let s = self.streams.get_mut(&stream)?;
        if payload_len <= s.credit {
            s.credit -= payload_len;
            return None;
        }
        let credit = s.credit;
        s.credit = 0;
        Some(Ruling {
            rule: "kernel.credit.exceeded",
            seed: self.seed.clone(),
            code: Some(self.code.clone()),
            reason: format!(
                "stream {stream}: {payload_len} payload bytes beyond the granted credit ({credit} left)"
            ),
            act: Act::Flag,
        })
    }

    /// stream.close: forget the stream; the number of held frames dropped with it.
    pub fn close(&mut self, stream: u64) -> usize {
        self.streams
            .remove(&stream)
            .map(|s| s.queue.len())
            .unwrap_or(0)
    }

    /// Held frames of every stream.
    pub fn held_frames(&self) -> usize {
        self.streams.values().map(|s| s.queue.len()).sum()
    }

    /// Whether `stream` is open (a stream.open was seen and no close or overrun since).
    pub fn knows(&self, stream: u64) -> bool {
        self.streams.contains_key(&stream)
    }

    /// Unspent credit of a stream.
    pub fn credit(&self, stream: u64) -> Option<u64> {
        self.streams.get(&stream).map(|s| s.credit)
    }

    fn overrun(&mut self, stream: u64, reason: String) -> Overrun {
        let s = self.streams.remove(&stream).unwrap_or_default();
        let receiver = s.receiver.clone();
        let sender = receiver
            .as_ref()
            .and_then(|r| self.parties.iter().find(|p| *p != r).cloned());
        let error = self.envelope(
            &s,
            stream,
            json!({
                "type": "error",
                "payload": {
                    "code": self.code,
                    "category": self.category,
                    "retryable": self.retryable,
                    "message": reason,
                }
            }),
        );
        let close_s = self.stream_close(&s, stream);
        let close_r = self.stream_close(&s, stream);
        Overrun {
            ruling: Ruling {
                rule: "kernel.credit.exceeded",
                seed: self.seed.clone(),
                code: Some(self.code.clone()),
                reason,
                act: Act::Discard,
            },
            to_sender: vec![error, close_s],
            to_receiver: vec![close_r],
            sender,
            receiver,
            dropped_held: s.queue.len(),
        }
    }

    fn stream_close(&mut self, s: &Stream, stream: u64) -> Value {
        self.envelope(
            s,
            stream,
            json!({"type": "event", "method": "stream.close", "payload": {}}),
        )
    }

    /// Fill the envelope fields K-4 makes mandatory around `body`.
    fn envelope(&mut self, s: &Stream, stream: u64, mut body: Value) -> Value {
        self.next_id += 1;
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        body["v"] = s.v.clone();
        body["id"] = json!(format!("proxy-{}-{}", self.session, self.next_id));
        body["timestamp"] = json!(ts);
        body["trace_id"] = s.trace.clone();
        body["stream_id"] = json!(stream);
        body
    }
}

/// kernel's control-channel policy: feeds stream.open / stream.credit /
/// stream.close to the session's [`CreditGate`].
pub struct KernelPolicy {
    wire: Arc<Wire>,
    shared: Arc<SharedState>,
    conn: u64,
    session: u64,
}

impl KernelPolicy {
    /// A policy for connection `conn` of kernel session `session`.
    pub fn new(wire: Arc<Wire>, shared: Arc<SharedState>, conn: u64, session: u64) -> Self {
        KernelPolicy {
            wire,
            shared,
            conn,
            session,
        }
    }
}

fn u64_at(v: &Value, ptr: &str) -> Option<u64> {
    v.pointer(ptr).and_then(Value::as_u64)
}

impl Policy for KernelPolicy {
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, _size: usize) -> Vec<Ruling> {
        let c = self.wire.contract().clone();
        let v = &msg.value;
        match msg.method.as_deref() {
            Some("stream.open") => {
                let Some(stream) = u64_at(v, "/payload/stream_id") else {
                    return vec![];
                };
                let ver = v.get("v").cloned().unwrap_or(Value::Null);
                let trace = v.get("trace_id").cloned().unwrap_or(Value::Null);
                let fresh = self
                    .shared
                    .with_gate(self.session, &c, |g| g.open(stream, ver, trace));
                if fresh {
                    return vec![];
                }
                vec![Ruling {
                    rule: "kernel.stream.reopen",
                    seed: c.note_seed("K-9"),
                    code: None,
                    reason: format!("stream.open for stream {stream}, which is already open"),
                    act: Act::Flag,
                }]
            }
            Some("stream.credit") => {
                let (Some(stream), Some(bytes)) =
                    (u64_at(v, "/stream_id"), u64_at(v, "/payload/bytes"))
                else {
                    return vec![];
                };
                let Some(frames) = self.shared.grant(self.session, &c, stream, bytes, ctx.from)
                else {
                    return vec![Ruling {
                        rule: "kernel.credit.grantor",
                        seed: c.note_seed("K-10"),
                        code: None,
                        reason: format!(
                            "stream {stream}: {} granted credit, but the other party is the stream's receiver",
                            ctx.from
                        ),
                        act: Act::Flag,
                    }];
                };
                if frames.is_empty() {
                    return vec![];
                }
                vec![Ruling {
                    rule: "kernel.credit.release",
                    seed: c.note_seed("K-10"),
                    code: None,
                    reason: format!(
                        "stream {stream}: {} held frame(s) now covered by credit",
                        frames.len()
                    ),
                    act: Act::Release { frames },
                }]
            }
            Some("stream.close") => {
                let Some(stream) = u64_at(v, "/stream_id") else {
                    return vec![];
                };
                let dropped = self.shared.with_gate(self.session, &c, |g| g.close(stream));
                if dropped == 0 {
                    return vec![];
                }
                vec![Ruling {
                    rule: "kernel.credit.closed-held",
                    seed: c.note_seed("K-3"),
                    code: None,
                    reason: format!(
                        "stream {stream} closed with {dropped} held frame(s): dropped, as its receiver would"
                    ),
                    act: Act::Flag,
                }]
            }
            _ => vec![],
        }
    }

    fn on_data(&mut self, ctx: &Ctx, frame: Held, enforce: bool) -> DataRuling {
        if !self.shared.knows_stream(self.session, frame.stream) {
            // K-38: forwarded (the receiver discards it, K-3), and flagged.
            let c = self.wire.contract();
            return DataRuling {
                ready: self.shared.take_released(self.session, ctx.to),
                ruling: Some(Ruling {
                    rule: "kernel.stream.unknown",
                    seed: c.note_seed("K-38"),
                    code: None,
                    reason: format!(
                        "data for stream {}, which is not open (never opened, closed, or closed by an overrun)",
                        frame.stream
                    ),
                    act: Act::Flag,
                }),
                decision: GateDecision::Forward(frame),
            };
        }
        if enforce {
            let (ready, decision) = self.shared.offer_in_order(self.session, ctx.to, frame);
            let ruling = match &decision {
                GateDecision::Exceeded(o) => Some(o.ruling.clone()),
                _ => None,
            };
            return DataRuling {
                ready,
                decision,
                ruling,
            };
        }
        let ruling = self
            .shared
            .account(self.session, frame.stream, frame.payload_len);
        DataRuling {
            ready: Vec::new(),
            decision: GateDecision::Forward(frame),
            ruling,
        }
    }

    fn on_close(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        // The session's primary (control) connection carries the session number.
        if self.conn != self.session {
            return vec![];
        }
        let dropped = self.shared.drop_gate(self.session);
        if dropped == 0 {
            return vec![];
        }
        let c = self.wire.contract();
        vec![Ruling {
            rule: "kernel.credit.closed-held",
            seed: error_seed(c, &json!("protocol.credit_exceeded")),
            code: None,
            reason: format!("session ended with {dropped} held data frame(s): dropped"),
            act: Act::Flag,
        }]
    }
}
