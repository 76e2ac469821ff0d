//! Sans-IO inspection: one frame in, one verdict and one decision out.
//!
//! An [`Inspector`] holds one connection's state: the contract's compiled
//! [`Wire`], the requests in flight (for latency and result checking), and the
//! counters that contract limits count toward (toolchannel's bad frames). The
//! relay hands it every frame it would forward; it never does I/O, so tests
//! feed it frames and assert the exact sequence of events and actions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use contract::model::{ActionKind, Binding, Kind};
use contract::wire::{BinaryFrame, FrameError, Violation, ViolationClass, Wire};
use serde::Serialize;
use serde_json::{Value, json};

use contract_policy::engine::credit::DataFields;
pub use contract_policy::{Closing, Dir, closing_with};

/// Observe flags violations and forwards everything; enforce refuses them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Forward everything, flag violations.
    #[default]
    Observe,
    /// Refuse violating frames with the contract's own reply or close; never forward them.
    Enforce,
}

/// What the inspector says about one frame.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Route name.
    pub route: String,
    /// Connection number within the proxy run.
    pub conn: u64,
    /// The session this connection belongs to: the connection number of its
    /// primary-channel connection (kernel: control and data share one).
    pub session: u64,
    /// The contract's channel.
    pub channel: String,
    /// Direction.
    pub dir: Dir,
    /// Sending party.
    pub from: String,
    /// Receiving party.
    pub to: String,
    /// Message kind (absent when the frame could not be classified, and for data frames).
    pub kind: Option<Kind>,
    /// Method, if known.
    pub method: Option<String>,
    /// Message id or the id it answers.
    pub id: Option<Value>,
    /// Data frames: stream id and sequence number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<(u64, u64)>,
    /// Frame size in bytes (payload, without the framing).
    pub size: usize,
    /// Time since the request, for replies.
    #[serde(serialize_with = "ser_ms")]
    pub latency: Option<Duration>,
    /// Trace id, as carried.
    pub trace: Option<String>,
    /// The error code an error reply carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// `ok`, or the violation.
    pub verdict: Verdict,
    /// What enforce mode did about it (or, in observe mode, what it would have done).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl Event {
    /// An event that says only where a frame went and how big it was: kind, method, id and
    /// the rest are filled in by whoever decoded it; the verdict starts as `Ok`.
    pub fn bare(
        route: &str,
        conn: u64,
        session: u64,
        channel: &str,
        dir: Dir,
        (from, to): (String, String),
        size: usize,
    ) -> Self {
        Event {
            route: route.to_string(),
            conn,
            session,
            channel: channel.to_string(),
            dir,
            from,
            to,
            kind: None,
            method: None,
            id: None,
            stream: None,
            size,
            latency: None,
            trace: None,
            error: None,
            verdict: Verdict::Ok,
            action: None,
        }
    }
}

fn ser_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64() * 1000.0),
        None => s.serialize_none(),
    }
}

/// The verdict on one frame.
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
    /// One line for people: `ok`, `VIOLATION <class> <code> <reason>`, `FRAMING <reason>`.
    pub fn text(&self) -> String {
        match self {
            Verdict::Ok => "ok".into(),
            Verdict::Violation {
                class,
                code,
                reason,
                ..
            } => format!(
                "VIOLATION {class} {} {reason}",
                code.as_ref().map(|c| c.to_string()).unwrap_or_default()
            ),
            Verdict::Framing { reason } => format!("FRAMING {reason}"),
        }
    }

    fn of(v: &Violation) -> Self {
        Verdict::Violation {
            class: v.class.name(),
            code: v.code.clone(),
            seed: v.seed.clone(),
            reason: v.reason.clone(),
        }
    }

    /// Whether the contract accepts the frame.
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok)
    }
}

/// What the relay does with the frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Pass it on.
    Forward,
    /// Pass it on, and also answer the sender with `reply`.
    ForwardAnd {
        /// Sent back to the sender.
        reply: Bytes,
    },
    /// Not now: a data frame beyond its stream's credit waits in the credit gate,
    /// and is written once a grant covers it (enforce mode).
    Hold,
    /// Do not pass it on: answer the sender with `reply` (a frame payload), then close if asked.
    Refuse {
        /// The contract's error reply, sent back to the sender.
        reply: Option<Bytes>,
        /// Close the connection afterwards.
        close: Option<Closing>,
    },
}

/// Something enforcement does beyond this frame's own fate: the relay carries it out.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Data frames a grant released toward this frame's receiver: write them first, in order.
    Write(Vec<crate::policy::Held>),
    /// Send these messages, as the party that would have, on session `session`'s
    /// primary connection, toward party `to` (kernel: a credit overrun's error and stream.close).
    Send {
        /// The session (its primary connection's number).
        session: u64,
        /// Receiving party.
        to: String,
        /// Frame payloads.
        messages: Vec<Bytes>,
    },
    /// Frames released by credit wait for session `session`'s data connection to write them.
    Wake {
        /// The session.
        session: u64,
    },
    /// Close another connection (toolchannel: a superseded socket gets 4009).
    CloseConn {
        /// Connection to close.
        conn: u64,
        /// How.
        close: Closing,
    },
    /// Report a dropped frame where it says, as its receiver would (see
    /// [`crate::policy::Act::Notify`]).
    Notify {
        /// The address (for xsession, the sender's inbox socket).
        to: String,
        /// The messages (they may carry a secret: never logged).
        messages: Vec<Value>,
    },
}

/// What a frame's recorded bytes hold, so a capture can frame them again as they travelled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RawForm {
    /// A message's payload: the channel's framing goes around it.
    #[default]
    Payload,
    /// A binary frame's payload, with its header values after the length, in wire order.
    Data(Vec<u64>),
    /// The bytes as they travelled, framing included: what a broken framing left.
    AsTravelled,
    /// A binary message on a message transport.
    BinaryMessage,
    /// No frame: an event about the connection (a deadline, the close).
    NoFrame,
}

/// The outcome of inspecting one frame.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// For the live view, log, recording and traces.
    pub event: Event,
    /// What the frame's bytes are, for the recording.
    pub form: RawForm,
    /// The decoded message, when it parsed.
    pub message: Option<Value>,
    /// What to do with the frame.
    pub decision: Decision,
    /// What else enforcement does about it.
    pub effects: Vec<Effect>,
}

/// One connection's inspector.
pub struct Inspector {
    wire: Arc<Wire>,
    route: String,
    conn: u64,
    session: u64,
    channel: String,
    mode: Mode,
    /// Party sending `Up`, and party sending `Down`.
    parties: (String, String),
    pending: HashMap<(Dir, String), (String, Instant)>,
    pending_cap: usize,
    /// Counts toward contract limits, per direction (a limit counts on the receiving side).
    counts: HashMap<(Dir, String), u64>,
    /// Next sequence number expected per data stream and direction.
    seqs: HashMap<(Dir, u64), u64>,
    /// Where this channel's binary frames keep the credit key and the sequence number
    /// (found once, read per frame).
    data_fields: DataFields,
    next_id: u64,
    /// The contract's stateful rules for this connection (request ids, admission, refusals).
    policy: Option<Box<dyn crate::policy::Policy>>,
    /// Token buckets of the route's `[[route.ratelimit]]`.
    ratelimit: Option<Arc<std::sync::Mutex<crate::policy::ratelimit::RateLimiter>>>,
    /// Effects of the frame being inspected, handed out with its [`Inspection`].
    effects: Vec<Effect>,
}

impl Inspector {
    /// Inspect `channel` of `wire`, where `client` connects (sends `Up`) and `server` answers.
    pub fn new(
        wire: Arc<Wire>,
        route: &str,
        conn: u64,
        channel: &str,
        (client, server): (&str, &str),
        mode: Mode,
    ) -> Result<Self, contract::wire::WireError> {
        wire.channel_wire(channel)?;
        let data_fields = DataFields::new(wire.contract(), channel);
        Ok(Inspector {
            route: route.to_string(),
            conn,
            session: conn,
            channel: channel.to_string(),
            mode,
            parties: (client.to_string(), server.to_string()),
            wire,
            pending: HashMap::new(),
            pending_cap: contract::io::DEFAULT_PENDING,
            counts: HashMap::new(),
            seqs: HashMap::new(),
            data_fields,
            next_id: 0,
            policy: None,
            ratelimit: None,
            effects: Vec::new(),
        })
    }

    /// Judge decoded frames also by `policy` (the contract's stateful rules) and `ratelimit`.
    pub fn with_rules(
        mut self,
        policy: Option<Box<dyn crate::policy::Policy>>,
        ratelimit: Option<Arc<std::sync::Mutex<crate::policy::ratelimit::RateLimiter>>>,
    ) -> Self {
        self.policy = policy;
        self.ratelimit = ratelimit;
        self
    }

    /// When the policy next has something to say about time passing (a missed deadline).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.policy.as_ref().and_then(|p| p.next_deadline())
    }

    /// The connection opened: arms the policy's deadlines; an inspection per ruling
    /// (xsession's connection cap refuses the connection).
    pub fn open(&mut self, now: Instant) -> Vec<Inspection> {
        let route = self.route.clone();
        let Some(p) = self.policy.as_mut() else {
            return Vec::new();
        };
        let rulings = p
            .on_open(&route, now)
            .into_iter()
            .map(|r| (self.conn, r))
            .collect();
        self.connection_rulings(rulings, "(open)")
    }

    /// The connection ended: the policy forgets it (connection counts, live sockets,
    /// held frames); an inspection per thing worth reporting (held frames dropped).
    pub fn close(&mut self, now: Instant) -> Vec<Inspection> {
        let (from, to) = self.ends(Dir::Up);
        let Some(p) = self.policy.as_mut() else {
            return Vec::new();
        };
        let ctx = crate::policy::Ctx {
            route: &self.route,
            conn: self.conn,
            session: self.session,
            dir: Dir::Up,
            from: &from,
            to: &to,
            now,
        };
        let rulings = p
            .on_close(&ctx)
            .into_iter()
            .map(|r| (self.conn, r))
            .collect();
        self.connection_rulings(rulings, "(close)")
    }

    /// Time passed: an inspection per missed deadline (the contract's code, what enforce does).
    pub fn tick(&mut self, now: Instant) -> Vec<Inspection> {
        let Some(p) = self.policy.as_mut() else {
            return Vec::new();
        };
        let rulings = p.on_tick(now);
        self.connection_rulings(rulings, "(deadline)")
    }

    fn connection_rulings(
        &mut self,
        rulings: Vec<(u64, crate::policy::Ruling)>,
        what: &str,
    ) -> Vec<Inspection> {
        let mut out = Vec::new();
        for (_conn, r) in rulings {
            let mut event = self.blank(Dir::Up, 0, Verdict::Ok);
            event.method = Some(what.into());
            let decision = self.apply(vec![r], &mut event).unwrap_or(Decision::Forward);
            out.push(Inspection {
                event,
                form: RawForm::NoFrame,
                message: None,
                decision,
                effects: std::mem::take(&mut self.effects),
            });
        }
        out
    }

    /// Ask the policy and the rate limits about a decoded message.
    fn rulings(
        &mut self,
        dir: Dir,
        msg: &contract::wire::Message,
        size: usize,
        now: Instant,
    ) -> Vec<crate::policy::Ruling> {
        let (from, to) = self.ends(dir);
        let mut out = Vec::new();
        if msg.kind == Kind::Error
            && let Some(code) = self.error_code(&msg.value)
        {
            out.extend(contract_policy::engine::unknown_error_code(
                self.wire.contract(),
                msg,
                &code,
            ));
        }
        if let Some(p) = self.policy.as_mut() {
            let ctx = crate::policy::Ctx {
                route: &self.route,
                conn: self.conn,
                session: self.session,
                dir,
                from: &from,
                to: &to,
                now,
            };
            out.extend(p.on_message(&ctx, msg, size));
        }
        // Route rate limits count what the route's clients send (see policy::ratelimit).
        if let Some(r) = self.ratelimit.as_ref().filter(|_| dir == Dir::Up)
            && let Ok(mut r) = r.lock()
        {
            out.extend(r.check_message(msg, now));
        }
        out
    }

    /// Ask the policy about a frame the wire layer rejected before any rule saw it.
    fn unread_rulings(&mut self, dir: Dir, now: Instant) -> Vec<crate::policy::Ruling> {
        let (from, to) = self.ends(dir);
        let Some(p) = self.policy.as_mut() else {
            return Vec::new();
        };
        let ctx = crate::policy::Ctx {
            route: &self.route,
            conn: self.conn,
            session: self.session,
            dir,
            from: &from,
            to: &to,
            now,
        };
        p.on_unreadable(&ctx)
    }

    /// Turn rulings into the event's verdict and action, and the decision.
    fn apply(
        &mut self,
        rulings: Vec<crate::policy::Ruling>,
        event: &mut Event,
    ) -> Option<Decision> {
        use crate::policy::Act;
        rulings.first()?;
        // Releasing held frames is bookkeeping, not a broken rule.
        if let Some(first) = rulings
            .iter()
            .find(|r| !matches!(r.act, Act::Release { .. }))
            && event.verdict.is_ok()
        {
            event.verdict = Verdict::Violation {
                class: first.rule,
                code: first.code.clone(),
                seed: Some(first.seed.clone()),
                reason: first.reason.clone(),
            };
        }
        let mut said = Vec::new();
        let mut decision = Decision::Forward;
        for r in rulings {
            let text = match &r.act {
                Act::Flag => format!("{}: flagged", r.rule),
                Act::Refuse { reply, close } => {
                    let mut t = format!("{}: refused", r.rule);
                    if let Some(code) = reply.as_ref().and_then(|v| {
                        v.pointer("/error/code")
                            .or_else(|| v.pointer("/payload/code"))
                            .cloned()
                    }) {
                        t.push_str(&format!(", replied {code}"));
                    }
                    match close {
                        Some(Closing::Code(f)) => t.push_str(&format!(", closed {}", f.code)),
                        Some(Closing::Drop) => t.push_str(", dropped the connection"),
                        None => {}
                    }
                    if matches!(decision, Decision::Forward) {
                        decision = Decision::Refuse {
                            reply: reply.as_ref().map(|v| Bytes::from(v.to_string())),
                            close: close.clone(),
                        };
                    }
                    t
                }
                Act::Discard => {
                    if matches!(decision, Decision::Forward) {
                        decision = Decision::Refuse {
                            reply: None,
                            close: None,
                        };
                    }
                    format!("{}: discarded", r.rule)
                }
                Act::Also { to_sender } => {
                    if matches!(decision, Decision::Forward) {
                        decision = Decision::ForwardAnd {
                            reply: Bytes::from(to_sender.to_string()),
                        };
                    }
                    format!("{}: forwarded and answered", r.rule)
                }
                Act::Notify { to, messages } => {
                    if matches!(decision, Decision::Forward) {
                        decision = Decision::Refuse {
                            reply: None,
                            close: None,
                        };
                    }
                    if self.mode == Mode::Enforce {
                        self.effects.push(Effect::Notify {
                            to: to.clone(),
                            messages: messages.clone(),
                        });
                    }
                    format!("{}: dropped, reported to the sender", r.rule)
                }
                Act::CloseConn { conn, close } => {
                    if self.mode == Mode::Enforce {
                        self.effects.push(Effect::CloseConn {
                            conn: *conn,
                            close: close.clone(),
                        });
                    }
                    match close {
                        Closing::Code(f) => {
                            format!("{}: closed connection #{conn} {}", r.rule, f.code)
                        }
                        Closing::Drop => format!("{}: dropped connection #{conn}", r.rule),
                    }
                }
                Act::Release { frames } => {
                    // Held frames exist only in enforce mode; releasing them is never a verdict.
                    self.effects.push(Effect::Wake {
                        session: self.session,
                    });
                    format!("{}: {} held frame(s) released", r.rule, frames.len())
                }
            };
            said.push(text);
        }
        let text = said.join("; ");
        Some(match self.mode {
            Mode::Observe => {
                event.action = Some(format!("would have: {text}"));
                Decision::Forward
            }
            Mode::Enforce => {
                event.action = Some(text);
                decision
            }
        })
    }

    /// Mark this connection as part of session `session` (see [`Event::session`]).
    pub fn set_session(&mut self, session: u64) {
        self.session = session;
    }

    fn ends(&self, dir: Dir) -> (String, String) {
        match dir {
            Dir::Up => (self.parties.0.clone(), self.parties.1.clone()),
            Dir::Down => (self.parties.1.clone(), self.parties.0.clone()),
        }
    }

    fn blank(&self, dir: Dir, size: usize, verdict: Verdict) -> Event {
        let mut e = Event::bare(
            &self.route,
            self.conn,
            self.session,
            &self.channel,
            dir,
            self.ends(dir),
            size,
        );
        e.verdict = verdict;
        e
    }

    /// The stream framing broke (oversize length, truncated frame, bad line): report it with
    /// the contract's code for oversize frames where it has one. The relay decides whether
    /// the rest of the stream can still pass (observe mode, same framing on both sides).
    pub fn framing_error(&mut self, dir: Dir, err: &FrameError) -> Inspection {
        let mut event = self.blank(
            dir,
            0,
            Verdict::Framing {
                reason: err.to_string(),
            },
        );
        let mut decision = Decision::Forward;
        if matches!(err, FrameError::Oversize { .. }) {
            let v = self
                .wire
                .violation(ViolationClass::Oversize, err.to_string());
            event.verdict = Verdict::of(&v);
            decision = self.enforce(&v, None, &mut event);
        } else if self.mode == Mode::Enforce {
            decision = Decision::Refuse {
                reply: None,
                close: Some(Closing::Drop),
            };
            event.action = Some("dropped the connection: framing broken".into());
        }
        Inspection {
            event,
            form: RawForm::AsTravelled,
            message: None,
            decision,
            effects: std::mem::take(&mut self.effects),
        }
    }

    /// Inspect a binary message that arrived on a message transport whose contract carries text.
    pub fn binary_message(&mut self, dir: Dir, size: usize) -> Inspection {
        let v = self.wire.violation(
            ViolationClass::Invalid,
            "binary message where the contract carries text",
        );
        let mut event = self.blank(dir, size, Verdict::of(&v));
        let decision = self.enforce(&v, None, &mut event);
        Inspection {
            event,
            form: RawForm::BinaryMessage,
            message: None,
            decision,
            effects: std::mem::take(&mut self.effects),
        }
    }

    /// Inspect one data-channel frame: stream and sequence are reported, a gap is
    /// flagged, and the contract's credit rules (kernel) decide whether it may pass
    /// now. `encoded` is the whole frame as it travels (what a held frame is written as).
    pub fn data_frame(
        &mut self,
        dir: Dir,
        frame: &BinaryFrame,
        encoded: Bytes,
        now: Instant,
    ) -> Inspection {
        use crate::policy::GateDecision;
        let (stream, seq) = (self.data_fields.key(frame), self.data_fields.seq(frame));
        let mut verdict = Verdict::Ok;
        // The contract's `sequence` field, where it names one: a gap is flagged.
        if self.data_fields.has_sequence() {
            let expected = self.seqs.entry((dir, stream)).or_insert(0);
            if seq != *expected {
                verdict = Verdict::Violation {
                    class: "sequence",
                    code: None,
                    seed: None,
                    reason: format!("stream {stream}: seq {seq}, expected {expected}"),
                };
            }
            *expected = seq.wrapping_add(1);
        }
        let mut event = self.blank(dir, frame.payload.len(), verdict);
        event.stream = Some((stream, seq));
        event.method = Some("data".into());
        let (from, to) = self.ends(dir);
        let mut decision = Decision::Forward;
        if let Some(p) = self.policy.as_mut() {
            let ctx = crate::policy::Ctx {
                route: &self.route,
                conn: self.conn,
                session: self.session,
                dir,
                from: &from,
                to: &to,
                now,
            };
            let held = self.data_fields.held(frame, encoded);
            let r = p.on_data(&ctx, held, self.mode == Mode::Enforce);
            if !r.ready.is_empty() {
                self.effects.push(Effect::Write(r.ready));
            }
            let overrun = match r.decision {
                GateDecision::Forward(_) => None,
                GateDecision::Hold => {
                    decision = Decision::Hold;
                    event.action = Some(format!(
                        "held: stream {stream} is beyond its credit; written when {to} grants more"
                    ));
                    None
                }
                GateDecision::Exceeded(o) => Some(o),
            };
            if let Some(d) = self.apply(r.ruling.into_iter().collect(), &mut event) {
                decision = d;
            }
            if let Some(o) = overrun
                && self.mode == Mode::Enforce
            {
                // K-10: the receiver's answer to an overrun, sent as the receiver would.
                let encode = |v: &[Value]| -> Vec<Bytes> {
                    v.iter().map(|m| Bytes::from(m.to_string())).collect()
                };
                for (party, msgs) in [(&from, &o.to_sender), (&to, &o.to_receiver)] {
                    self.effects.push(Effect::Send {
                        session: self.session,
                        to: party.clone(),
                        messages: encode(msgs),
                    });
                }
                if let Some(a) = event.action.as_mut() {
                    a.push_str(&format!(
                        "; sent {} to {from}, {} to {to} (on {})",
                        o.said.0,
                        o.said.1,
                        self.channel_of_primary()
                    ));
                    if o.dropped_held > 0 {
                        a.push_str(&format!(", {} held frame(s) dropped", o.dropped_held));
                    }
                }
            }
        }
        Inspection {
            event,
            form: RawForm::Data(frame.fields.clone()),
            message: None,
            decision,
            effects: std::mem::take(&mut self.effects),
        }
    }

    /// The contract's primary channel (the one carrying JSON), for messages about another channel.
    fn channel_of_primary(&self) -> String {
        self.wire
            .contract()
            .channels
            .iter()
            .find(|(_, c)| c.binding.is_some())
            .map(|(k, _)| k.clone())
            .unwrap_or_default()
    }

    /// How long one frame may stay incomplete (rukh's `incompleteFrameSeconds`).
    pub fn incomplete_frame_limit(&self) -> Option<Duration> {
        self.policy
            .as_ref()
            .and_then(|p| p.incomplete_frame())
            .map(|(d, _)| d)
    }

    /// A frame travelling `dir` stayed incomplete past [`Inspector::incomplete_frame_limit`].
    pub fn incomplete_frame(&mut self, dir: Dir) -> Inspection {
        let mut event = self.blank(dir, 0, Verdict::Ok);
        event.method = Some("(incomplete frame)".into());
        let ruling = self
            .policy
            .as_ref()
            .and_then(|p| p.incomplete_frame())
            .map(|(_, r)| r);
        let decision = self
            .apply(ruling.into_iter().collect(), &mut event)
            .unwrap_or(Decision::Forward);
        Inspection {
            event,
            form: RawForm::NoFrame,
            message: None,
            decision,
            effects: std::mem::take(&mut self.effects),
        }
    }

    /// Inspect one JSON frame that travelled `dir`.
    pub fn frame(&mut self, dir: Dir, frame: &[u8], now: Instant) -> Inspection {
        let (from, _) = self.ends(dir);
        let reverse = dir.reverse();
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
        let (msg, violation) = match decoded {
            Ok(m) => (Some(m), None),
            Err(v) => (v.partial.clone().map(|b| *b), Some(v)),
        };
        let mut event = self.blank(
            dir,
            frame.len(),
            violation.as_ref().map(Verdict::of).unwrap_or(Verdict::Ok),
        );
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
                        event.latency = Some(now.saturating_duration_since(t));
                    }
                }
                _ => {}
            }
            event.kind = Some(m.kind);
            event.method = m.method.clone().or(answered.map(|(m, _)| m));
            event.id = m.id.clone().or(m.correlation.clone());
            event.trace = m.trace.clone();
            if m.kind == Kind::Error {
                event.error = self.error_code(&m.value);
            }
        }
        // The stateful rules see every message the wire layer accepted, and unknown requests
        // (toolchannel answers sampling/* with its own code, not the generic one).
        let rulings = match (&msg, &violation) {
            (Some(m), None) => self.rulings(dir, m, frame.len(), now),
            (Some(m), Some(v)) if v.class == ViolationClass::UnknownRequest => {
                self.rulings(dir, m, frame.len(), now)
            }
            _ => self.unread_rulings(dir, now),
        };
        let decision = match self.apply(rulings, &mut event) {
            Some(d) => d,
            None => match &violation {
                Some(v) => self.enforce(v, msg.as_ref(), &mut event),
                None => Decision::Forward,
            },
        };
        Inspection {
            event,
            form: RawForm::Payload,
            message: msg.map(|m| m.value),
            decision,
            effects: std::mem::take(&mut self.effects),
        }
    }

    fn error_code(&self, v: &Value) -> Option<Value> {
        let body = self.wire.contract().error_body_pointer(&self.channel)?;
        v.pointer(&format!("{body}/code")).cloned()
    }

    fn binding(&self) -> Option<&Binding> {
        self.wire
            .contract()
            .channels
            .get(&self.channel)
            .and_then(|c| c.binding.as_ref())
    }

    /// Decide what enforce mode does about `v`; in observe mode say what it would do.
    fn enforce(
        &mut self,
        v: &Violation,
        msg: Option<&contract::wire::Message>,
        event: &mut Event,
    ) -> Decision {
        let mut reply = None;
        let mut close = None;
        let mut said = Vec::new();
        match v.action {
            Some(ActionKind::ReplyError) => {
                // A request can be answered, and so can a frame whose kind cannot be known
                // (unreadable, or not a message at all: answered with its id, else id null).
                let answerable = matches!(v.class, ViolationClass::Parse | ViolationClass::Invalid)
                    || msg.is_none_or(|m| m.kind == Kind::Request);
                if answerable && let Some(code) = &v.code {
                    reply = self.error_reply(code, &v.reason, msg, &v.details);
                    said.push(format!("replied {code}"));
                } else {
                    said.push("discarded".into());
                }
            }
            Some(ActionKind::Close) => {
                let (c, text) = closing_with(v.code.as_ref(), v.class.name().into());
                close = Some(c);
                said.push(text);
            }
            Some(ActionKind::DropConnection) | Some(ActionKind::Fail) => {
                close = Some(Closing::Drop);
                said.push("dropped the connection".into());
            }
            Some(ActionKind::Ignore) | None => said.push("discarded".into()),
        }
        if let Some(limit) = &v.count_toward {
            let n = self.counts.entry((event.dir, limit.clone())).or_insert(0);
            *n += 1;
            let n = *n;
            let limits = self.wire.limits();
            let max = limits.count(limit).ok();
            said.push(format!(
                "{limit} {n}/{}",
                max.map(|m| m.to_string()).unwrap_or_else(|| "?".into())
            ));
            if let Some(max) = max
                && n >= max
                && let Some(action) = limits.action(limit).cloned()
            {
                let (c, text) = closing_with(action.code.as_ref(), format!("{limit} reached"));
                close = Some(c);
                said.push(text);
            }
        }
        let text = said.join(", ");
        match self.mode {
            Mode::Observe => {
                event.action = Some(format!("would have {text}"));
                Decision::Forward
            }
            Mode::Enforce => {
                event.action = Some(text);
                Decision::Refuse { reply, close }
            }
        }
    }

    /// The contract's error reply to `msg` (or to an unreadable frame, with a null id).
    fn error_reply(
        &mut self,
        code: &Value,
        reason: &str,
        msg: Option<&contract::wire::Message>,
        details: &Value,
    ) -> Option<Bytes> {
        let id = msg.and_then(|m| m.id.clone());
        let value = match self.binding()?.clone() {
            Binding::Jsonrpc { .. } => {
                let mut error = json!({"code": code, "message": reason});
                if !details.is_null() {
                    error["data"] = details.clone();
                }
                json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null), "error": error})
            }
            Binding::Envelope {
                kind,
                kinds,
                id: id_ptr,
                correlation,
                trace,
                version,
                timestamp,
                payload,
                ..
            } => {
                let entry = self.wire.contract().error_for(code).cloned();
                let mut body = json!({"code": code, "message": reason});
                if let Some(e) = entry {
                    body["category"] = json!(e.category);
                    body["retryable"] = json!(e.retryable);
                }
                if !details.is_null() {
                    body["details"] = details.clone();
                }
                self.next_id += 1;
                let error_kind = kinds
                    .iter()
                    .find(|(_, k)| **k == Kind::Error)
                    .map(|(w, _)| w.clone())
                    .unwrap_or_else(|| "error".into());
                let mut out = json!({});
                // The binding's pointers may reach into nested objects (`/meta/trace`).
                let mut put = |ptr: &str, v: Value| contract::set_pointer(&mut out, ptr, v);
                put(&kind, json!(error_kind));
                if let Some(p) = &id_ptr {
                    put(p, json!(format!("proxy-{}-{}", self.conn, self.next_id)));
                }
                if let (Some(c), Some(id)) = (&correlation, id) {
                    put(c, id);
                }
                if let (Some(t), Some(tr)) = (&trace, msg.and_then(|m| m.trace.clone())) {
                    put(t, json!(tr));
                }
                if let Some(vp) = &version {
                    let v = msg
                        .and_then(|m| m.value.pointer(vp).cloned())
                        .unwrap_or(json!(1));
                    put(vp, v);
                }
                if let Some(t) = &timestamp {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                    put(t, json!(now.map(|d| d.as_secs_f64()).unwrap_or(0.0)));
                }
                put(&payload, body);
                out
            }
            _ => return None,
        };
        Some(Bytes::from(value.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contract::wire::CloseFrame;

    fn inspector(name: &str, channel: &str, parties: (&str, &str), mode: Mode) -> Inspector {
        let wire =
            Arc::new(Wire::new(Arc::new(contract::builtin(name).expect("builtin"))).expect("wire"));
        Inspector::new(wire, "r", 1, channel, parties, mode).expect("inspector")
    }

    #[test]
    fn request_then_response_gives_latency_and_method() {
        let mut ins = inspector("rukh", "ipc", ("core", "extension"), Mode::Observe);
        let t0 = Instant::now();
        let req = br#"{"jsonrpc":"2.0","id":"c:1","method":"rukh.close","params":{}}"#;
        let i = ins.frame(Dir::Up, req, t0);
        assert_eq!(i.event.method.as_deref(), Some("rukh.close"));
        assert_eq!(i.decision, Decision::Forward);
        let resp = br#"{"jsonrpc":"2.0","id":"c:1","result":{}}"#;
        let i = ins.frame(Dir::Down, resp, t0 + Duration::from_millis(5));
        assert_eq!(i.event.kind, Some(Kind::Response));
        assert_eq!(i.event.method.as_deref(), Some("rukh.close"));
        assert_eq!(i.event.latency, Some(Duration::from_millis(5)));
    }

    #[test]
    fn observe_flags_and_forwards_enforce_replies_with_the_contract_code() {
        let bad = br#"{"jsonrpc":"2.0","id":"c:1","id":"c:2"}"#;
        let mut ins = inspector("rukh", "ipc", ("core", "extension"), Mode::Observe);
        let i = ins.frame(Dir::Up, bad, Instant::now());
        assert!(
            matches!(&i.event.verdict, Verdict::Violation { class: "parse", code: Some(c), .. } if c == &json!(-32700))
        );
        assert_eq!(i.decision, Decision::Forward);
        assert!(
            i.event
                .action
                .as_deref()
                .is_some_and(|a| a.starts_with("would have"))
        );

        let mut ins = inspector("toolchannel", "ws", ("worker", "host"), Mode::Enforce);
        let Decision::Refuse {
            reply: Some(r),
            close: None,
        } = ins.frame(Dir::Up, b"{nope", Instant::now()).decision
        else {
            panic!("enforce refuses with a reply");
        };
        let r: Value = serde_json::from_slice(&r).expect("json");
        assert_eq!(
            r,
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":r["error"]["message"]}})
        );
    }

    #[test]
    fn ten_bad_frames_close_toolchannel_with_its_limit_code() {
        let mut ins = inspector("toolchannel", "ws", ("worker", "host"), Mode::Enforce);
        let max = ins.wire.limits().count("badFramesMax").expect("limit") as usize;
        for n in 1..=max {
            let i = ins.frame(Dir::Up, b"[]", Instant::now());
            let Decision::Refuse { reply, close } = i.decision else {
                panic!("refused")
            };
            assert!(reply.is_some(), "every bad frame is answered");
            if n < max {
                assert_eq!(close, None, "frame {n}");
            } else {
                assert!(
                    matches!(close, Some(Closing::Code(CloseFrame { code: 4006, .. }))),
                    "{close:?}"
                );
            }
        }
    }

    #[test]
    fn kernel_error_reply_is_a_valid_kernel_error() {
        let mut ins = inspector("kernel", "control", ("core", "shell"), Mode::Enforce);
        // A request for a method the contract does not know.
        let req = br#"{"v":1,"type":"request","id":"c-1","timestamp":1.0,"trace_id":"t-1","method":"no.such","payload":{}}"#;
        let i = ins.frame(Dir::Up, req, Instant::now());
        let Decision::Refuse { reply: Some(r), .. } = i.decision else {
            panic!("refused: {:?}", i.event)
        };
        let wire = ins.wire.clone();
        let m = wire
            .decode("control", "shell", &r, Some("no.such"))
            .expect("the reply is valid kernel");
        assert_eq!(m.kind, Kind::Error);
        assert_eq!(m.correlation, Some(json!("c-1")));
        assert_eq!(m.trace.as_deref(), Some("t-1"));
        assert_eq!(m.value["payload"]["code"], json!("protocol.unknown_method"));
    }

    #[test]
    fn a_missed_handshake_deadline_is_reported_when_time_passes() {
        let wire = Arc::new(
            Wire::new(Arc::new(contract::builtin("toolchannel").expect("builtin"))).expect("wire"),
        );
        let shared = Arc::new(crate::policy::SharedState::new());
        let policy = crate::policy::for_contract(&wire, &shared, 1, 1);
        let mut ins = Inspector::new(wire, "r", 1, "ws", ("worker", "host"), Mode::Observe)
            .expect("inspector")
            .with_rules(Some(policy), None);
        let t0 = Instant::now();
        assert!(ins.open(t0).is_empty());
        let due = ins
            .next_deadline()
            .expect("the handshake deadline is armed at open");
        assert!(due > t0);
        assert!(ins.tick(t0).is_empty(), "nothing before the deadline");
        let late = ins.tick(due);
        assert_eq!(late.len(), 1);
        assert!(
            // The worker's handshakeSeconds (no initialize) runs out first: its close code.
            matches!(&late[0].event.verdict, Verdict::Violation { code: Some(c), .. } if c == &json!(1001)),
            "{:?}",
            late[0].event
        );
        assert_eq!(
            late[0].decision,
            Decision::Forward,
            "observe mode only reports"
        );
    }

    #[test]
    fn data_frames_report_stream_and_flag_a_gap() {
        let mut ins = inspector("kernel", "data", ("core", "shell"), Mode::Observe);
        let f = |seq| BinaryFrame {
            fields: vec![7, seq],
            payload: Bytes::from_static(b"pcm"),
        };
        assert!(
            ins.data_frame(Dir::Down, &f(0), Bytes::new(), Instant::now())
                .event
                .verdict
                .is_ok()
        );
        let now = Instant::now();
        assert!(
            ins.data_frame(Dir::Down, &f(1), Bytes::new(), now)
                .event
                .verdict
                .is_ok()
        );
        let gap = ins.data_frame(Dir::Down, &f(3), Bytes::new(), now).event;
        assert_eq!(gap.stream, Some((7, 3)));
        assert!(!gap.verdict.is_ok());
    }

    /// Only a framing that names its `sequence` field has gaps: without it, the second
    /// header field is just data (a contract of one's own need not number its frames).
    #[test]
    fn a_framing_without_a_sequence_field_has_no_gaps() {
        let text = contract::BUILTIN
            .iter()
            .find(|(n, _)| *n == "kernel")
            .map(|(_, t)| *t);
        let mut doc: Value = serde_json::from_str(text.expect("kernel")).expect("json");
        let framing = doc.pointer_mut("/channels/data/framing").expect("framing");
        assert_eq!(
            framing["sequence"], "seq",
            "the kernel numbers its data frames"
        );
        framing.as_object_mut().expect("object").remove("sequence");
        let c = contract::from_str("unnumbered", &doc.to_string()).expect("contract");
        let wire = Arc::new(Wire::new(Arc::new(c)).expect("wire"));
        let mut ins = Inspector::new(wire, "r", 1, "data", ("core", "shell"), Mode::Observe)
            .expect("inspector");
        for n in [5, 1, 9] {
            let f = BinaryFrame {
                fields: vec![7, n],
                payload: Bytes::from_static(b"pcm"),
            };
            let event = ins
                .data_frame(Dir::Down, &f, Bytes::new(), Instant::now())
                .event;
            assert!(event.verdict.is_ok(), "{n}: {:?}", event.verdict);
        }
    }
}
