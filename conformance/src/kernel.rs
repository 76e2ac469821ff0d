//! The kernel suite: the seed's §15 checks that data cannot state, played as the shell
//! against a real core (`--play shell`) or as the core against a real shell
//! (`--play core`). The §13 heartbeat is derived from the contract's limits
//! (`kernel.derived.timer.*`).
//!
//! A black-box shell can only make a core act through commands, so the suite
//! drives the core with `command.handle` texts every reference core understands
//! (documented in docs/conformance.md): `conformance:speak SECONDS`,
//! `conformance:stream`, `conformance:task SECONDS` and `conformance:power-off`.
//! A core that ignores them makes the checks that need them skip, with the reason.
//! Playing the core, the suite answers whatever the shell's own script sends and
//! provokes the rest itself (streams, permission asks, unknown methods, silence).
//!
//! One rule, one failing check: every check validates what it waits for; a
//! message without `trace_id` is reported by kernel.derived.messages only, the trace
//! an answer or an action's message carries by the derived call and cue checks
//! (`trace.answersInherit`, the cues' `traced`), and credit by kernel.15.5 only.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use contract::model::Kind;
use contract::wire::{BinaryFrame, Message, Violation};
use serde_json::{Value, json};

use super::session::with_meanwhile;
use super::{Check, Ctx, Failure, Got, Incoming, Peer, Row, Verdict, now_secs, pass, skip, str_at};

/// Credit granted per step in the credit check.
const CREDIT_STEP: u64 = 4096;
/// How long the credit check waits for data beyond what it granted.
const OVERRUN_WINDOW: Duration = Duration::from_millis(400);

bodies! {
    c_5 => core_5,
    s_6 => shell_6, c_6 => core_6,
    c_7 => core_7,
    s_8 => shell_8,
    s_9 => shell_9, c_9 => core_9,
    s_10 => shell_10,
    s_11 => shell_11, c_11 => core_11,
}

/// The suite for `role` (`shell` or `core`), in the seed's order; `None` for another role.
pub fn checks(role: &str) -> Option<Vec<Check>> {
    let rows: Vec<Row> = vec![
        (
            "kernel.15.5",
            "the data sender never exceeds granted credit (initial credit 0)",
            "§8, §15 item 5 (4.0-D08, K-10)",
            Err(
                "the core's data is judged by the contract's credit entry and speech cue: kernel.derived.credit.streams",
            ),
            Ok(c_5),
        ),
        (
            "kernel.15.6",
            "a PCM stream does not degrade control-channel latency",
            "§2, §15 item 6 (4.0-D07, 4.0-F02)",
            Ok(s_6),
            Ok(c_6),
        ),
        (
            "kernel.15.7",
            "a long task emits progress, a partial result and exactly one final event",
            "§9, §15 item 7 (4.0-D09, K-26)",
            Err(
                "the core's side is derived from the contract's task cue and machine: kernel.derived.cue.task",
            ),
            Ok(c_7),
        ),
        (
            "kernel.15.8",
            "cancel: receipt first, then task.cancelled; a finished task answers done and emits no cancelled",
            "§9, §15 item 8 (K-28)",
            Ok(s_8),
            Err(
                "the core answers task.cancel; the shell only asks (run --play shell against a core)",
            ),
        ),
        (
            "kernel.15.9",
            "a dangerous action without a valid confirmation is rejected; confirmation_id never travels",
            "§11, §15 item 9 (4.0-C05, K-18)",
            Ok(s_9),
            Ok(c_9),
        ),
        (
            "kernel.15.10",
            "an expired confirmation is rejected (late yes grants nothing)",
            "§11, §15 item 10 (K-19)",
            Ok(s_10),
            Err(
                "the core enforces ttl and expiry (K-19); nothing the shell sends can make an expired confirmation valid",
            ),
        ),
        (
            "kernel.15.11",
            "after a crash: restart and a new handshake; nothing of the old session survives",
            "§13, §15 item 11 (4.0-F12, K-20)",
            Ok(s_11),
            Ok(c_11),
        ),
    ];
    super::table(role, ["shell", "core"], rows)
}

// ---------------------------------------------------------------------------------------------
// One session, as the suite plays it.

fn nonce() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

fn vtext(v: &Violation) -> String {
    let code = v
        .code
        .as_ref()
        .and_then(Value::as_str)
        .map(|c| format!("{c}, "))
        .unwrap_or_default();
    format!("{code}{}: {}", v.class.name(), v.reason)
}

struct Sess {
    p: Peer,
    /// The suite plays the shell.
    shell: bool,
    other: String,
    v: u64,
    /// The highest protocol version the contract names: the one the suite speaks.
    version: u64,
    /// The capabilities the played party declares in the contract's example of its
    /// declaration (`parties.<role>.declares`).
    caps: Vec<String>,
    traces: u64,
    tag: u64,
    wait: Duration,
    /// Capabilities the implementation declared in the handshake.
    other_caps: Vec<String>,
    /// How a background permission.request is answered (playing the shell).
    grant: bool,
    granted: HashMap<u64, u64>,
    received: HashMap<u64, u64>,
    frames: HashMap<u64, u64>,
    /// Credit the implementation granted us, per stream (playing the core).
    allowance: HashMap<u64, u64>,
    /// The first credit overrun seen, with its frame.
    over: Option<Failure>,
    /// Streams the implementation opened: id → kind.
    opened: HashMap<u64, String>,
    closed: HashSet<u64>,
    notes: Vec<String>,
    /// Answers and rejected messages nobody waited for, since the current wait began:
    /// a wait that fails shows them, since a misdirected reply is the usual reason.
    unclaimed: Vec<Got>,
}

/// Unclaimed messages kept per wait (the report shows at most this many).
const UNCLAIMED_MAX: usize = 8;

impl Sess {
    fn new(p: Peer, cx: &Ctx) -> Self {
        Sess {
            p,
            shell: cx.role == "shell",
            other: cx.other.clone(),
            v: version(cx.wire.contract()),
            version: version(cx.wire.contract()),
            caps: declared(cx.wire.contract(), &cx.role),
            traces: 0,
            tag: nonce() & 0xffff_ffff,
            wait: cx.opts.deadline,
            other_caps: Vec::new(),
            grant: false,
            granted: HashMap::new(),
            received: HashMap::new(),
            frames: HashMap::new(),
            allowance: HashMap::new(),
            over: None,
            opened: HashMap::new(),
            closed: HashSet::new(),
            unclaimed: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn soon(&self) -> Instant {
        Instant::now() + self.wait
    }

    fn trace(&mut self) -> String {
        self.traces += 1;
        format!("t-conf-{:08x}-{}", self.tag, self.traces)
    }

    fn bad(&self, g: &Got, why: impl Into<String>) -> Failure {
        Failure::new(why).with(format!("control frame from the {}", self.other), &g.raw)
    }

    fn env(&mut self, kind: &str, method: Option<&str>, trace: &str, payload: Value) -> Value {
        let id = self.p.id();
        let mut m = json!({
            "v": self.v, "type": kind, "id": id,
            "timestamp": now_secs(), "trace_id": trace, "payload": payload,
        });
        if let (Some(method), Some(o)) = (method, m.as_object_mut()) {
            o.insert("method".into(), json!(method));
        }
        m
    }

    async fn send(&mut self, m: &Value) -> Result<Message, Failure> {
        self.p.send(m).await
    }

    async fn request(
        &mut self,
        method: &str,
        trace: &str,
        payload: Value,
    ) -> Result<Message, Failure> {
        let m = self.env("request", Some(method), trace, payload);
        self.send(&m).await
    }

    async fn event(
        &mut self,
        method: &str,
        trace: &str,
        payload: Value,
        stream: Option<u64>,
    ) -> Result<Message, Failure> {
        let mut m = self.env("event", Some(method), trace, payload);
        if let (Some(s), Some(o)) = (stream, m.as_object_mut()) {
            o.insert("stream_id".into(), json!(s));
        }
        self.send(&m).await
    }

    fn trace_of(&mut self, m: &Message) -> String {
        match &m.trace {
            Some(t) => t.clone(),
            None => self.trace(),
        }
    }

    async fn reply(&mut self, to: &Message, payload: Value) -> Result<(), Failure> {
        let t = self.trace_of(to);
        let mut m = self.env("response", None, &t, payload);
        if let (Some(id), Some(o)) = (&to.id, m.as_object_mut()) {
            o.insert("correlation_id".into(), id.clone());
        }
        self.send(&m).await.map(drop)
    }

    async fn reply_error(
        &mut self,
        id: Option<Value>,
        trace: &str,
        code: &str,
        retryable: bool,
        message: &str,
        details: Value,
    ) -> Result<(), Failure> {
        let mut body = json!({"code": code, "category": code.split('.').next().unwrap_or("protocol"), "retryable": retryable, "message": message});
        if details.is_object()
            && let Some(o) = body.as_object_mut()
        {
            o.insert("details".into(), details);
        }
        let mut m = self.env("error", None, trace, body);
        if let (Some(id), Some(o)) = (id, m.as_object_mut()) {
            o.insert("correlation_id".into(), id);
        }
        self.send(&m).await.map(drop)
    }

    async fn grant_credit(&mut self, stream: u64, bytes: u64, trace: &str) -> Result<(), Failure> {
        *self.granted.entry(stream).or_default() += bytes;
        self.event(
            "stream.credit",
            trace,
            json!({"bytes": bytes}),
            Some(stream),
        )
        .await
        .map(drop)
    }

    fn account(&mut self, frame: &BinaryFrame, raw: &Bytes) {
        let stream = frame.fields.first().copied().unwrap_or(0);
        let seq = frame.fields.get(1).copied().unwrap_or(0);
        let n = frame.payload.len() as u64;
        let got = {
            let r = self.received.entry(stream).or_default();
            *r += n;
            *r
        };
        *self.frames.entry(stream).or_default() += 1;
        let granted = self.granted.get(&stream).copied().unwrap_or(0);
        if got > granted && self.over.is_none() {
            let before = if granted == 0 {
                " (before any stream.credit: initial credit is 0)"
            } else {
                ""
            };
            self.over = Some(
                Failure::new(format!(
                    "stream {stream}: {got} payload bytes received, only {granted} granted{before}; frame seq {seq} carried {n} bytes"
                ))
                .with(format!("data frame stream {stream} seq {seq}"), raw),
            );
        }
    }

    /// Answer what the implementation sends that the check is not waiting for, as a
    /// plain conforming peer would, so its own script goes on.
    async fn background(&mut self, g: &Got) -> Result<(), Failure> {
        let m = match &g.msg {
            Ok(m) => m.clone(),
            Err(v) => {
                let is_request = type_of(g) == Some("request");
                if is_request && let Some(id) = g.at_ptr("/id").cloned() {
                    let code = v
                        .code
                        .as_ref()
                        .and_then(Value::as_str)
                        .unwrap_or("protocol.invalid_envelope")
                        .to_string();
                    let t = g
                        .at_ptr("/trace_id")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    let t = t.unwrap_or_else(|| self.trace());
                    let details = if v.details.is_object() {
                        v.details.clone()
                    } else {
                        json!({})
                    };
                    self.reply_error(
                        Some(id),
                        &t,
                        &code,
                        false,
                        "the message breaks the contract",
                        details,
                    )
                    .await?;
                }
                return Ok(());
            }
        };
        let method = m.method.clone().unwrap_or_default();
        match m.kind {
            Kind::Event => match method.as_str() {
                "ping" => {
                    let t = self.trace_of(&m);
                    let mut pong = self.env("event", Some("pong"), &t, json!({}));
                    if let (Some(id), Some(o)) = (&m.id, pong.as_object_mut()) {
                        o.insert("correlation_id".into(), id.clone());
                    }
                    self.send(&pong).await?;
                }
                "stream.open" => {
                    if let (Some(id), Some(kind)) = (
                        m.value
                            .pointer("/payload/stream_id")
                            .and_then(Value::as_u64),
                        str_at(&m.value, "/payload/kind"),
                    ) {
                        self.opened.insert(id, kind.to_string());
                    }
                }
                "stream.close" => {
                    if let Some(id) = m.value.get("stream_id").and_then(Value::as_u64) {
                        self.closed.insert(id);
                    }
                }
                "stream.credit" => {
                    if let (Some(id), Some(b)) = (
                        m.value.get("stream_id").and_then(Value::as_u64),
                        m.value.pointer("/payload/bytes").and_then(Value::as_u64),
                    ) {
                        *self.allowance.entry(id).or_default() += b;
                    }
                }
                _ => {}
            },
            Kind::Request => {
                let payload = match (self.shell, method.as_str()) {
                    (true, "permission.request") => {
                        let rid = m
                            .value
                            .pointer("/payload/request_id")
                            .cloned()
                            .unwrap_or(json!("?"));
                        if self.grant {
                            Some(json!({"request_id": rid, "granted": true, "scope": "once"}))
                        } else {
                            Some(json!({"request_id": rid, "granted": false}))
                        }
                    }
                    (true, "programs.index") => Some(json!({"programs": []})),
                    (false, "command.handle") => Some(json!({"text": "ok"})),
                    (false, "task.cancel") => Some(json!({"accepted": false, "status": "unknown"})),
                    (false, "settings.describe") => Some(json!({"settings": {}})),
                    _ => None,
                };
                match payload {
                    Some(p) => self.reply(&m, p).await?,
                    None => {
                        let t = self.trace_of(&m);
                        self.reply_error(
                            m.id.clone(),
                            &t,
                            "protocol.unknown_method",
                            false,
                            "unknown method",
                            json!({"method": method}),
                        )
                        .await?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Pump both channels until `want` takes something, the control channel ends or `until`.
    async fn pump(
        &mut self,
        until: Instant,
        want: &mut (dyn FnMut(&Incoming) -> bool + Send),
    ) -> Result<Incoming, Failure> {
        loop {
            let inc = self.p.next(until).await;
            match &inc {
                Incoming::Control(g) => {
                    if want(&inc) {
                        return Ok(inc);
                    }
                    let g = g.clone();
                    let answer = matches!(type_of(&g), Some("response" | "error"));
                    if (answer || g.msg.is_err()) && self.unclaimed.len() < UNCLAIMED_MAX {
                        self.unclaimed.push((*g).clone());
                    }
                    self.background(&g).await?;
                }
                Incoming::Data { frame, raw, .. } => {
                    let (f, r) = (frame.clone(), raw.clone());
                    self.account(&f, &r);
                    if want(&inc) {
                        return Ok(inc);
                    }
                }
                Incoming::DataEnd(why) => {
                    if want(&inc) {
                        return Ok(inc);
                    }
                    self.notes.push(format!("the data channel ended: {why}"));
                }
                Incoming::ControlEnd(_) | Incoming::Timeout => return Ok(inc),
            }
        }
    }

    /// The next control message matching `pred`; a timeout or the channel's end fails.
    async fn wait_for(
        &mut self,
        what: &str,
        until: Instant,
        pred: impl Fn(&Got) -> bool + Send + Sync,
    ) -> Result<Got, Failure> {
        let start = Instant::now();
        self.unclaimed.clear();
        let failure = match self
            .pump(until, &mut |i| matches!(i, Incoming::Control(g) if pred(g)))
            .await?
        {
            Incoming::Control(g) => return Ok(*g),
            Incoming::ControlEnd(why) => Failure::new(format!(
                "the {} ended the control channel ({why}) while the suite waited for {what}",
                self.other
            )),
            _ => Failure::new(format!(
                "waited {:.1} s for {what} from the {}",
                start.elapsed().as_secs_f64(),
                self.other
            )),
        };
        Err(with_meanwhile(failure, std::mem::take(&mut self.unclaimed)))
    }

    /// The reply (response or error) to `req`.
    async fn reply_to(&mut self, req: &Message, what: &str) -> Result<Got, Failure> {
        let id = req.id.clone();
        let until = self.soon();
        self.wait_for(what, until, move |g| {
            g.at_ptr("/correlation_id") == id.as_ref()
                && matches!(type_of(g), Some("response" | "error"))
        })
        .await
    }

    /// A valid reply to `req`; a rejected one fails with its bytes.
    async fn valid_reply(&mut self, req: &Message, what: &str) -> Result<(Got, Message), Failure> {
        let g = self.reply_to(req, what).await?;
        match &g.msg {
            Ok(m) => {
                let m = m.clone();
                Ok((g, m))
            }
            Err(v) => Err(self.bad(&g, format!("the {what} breaks the contract: {}", vtext(v)))),
        }
    }

    /// Let `dur` pass, answering whatever comes; the end reason if the control channel ends.
    async fn idle(&mut self, dur: Duration) -> Result<Option<String>, Failure> {
        let until = Instant::now() + dur;
        loop {
            match self.pump(until, &mut |_| false).await? {
                Incoming::ControlEnd(why) => return Ok(Some(why)),
                Incoming::Timeout => return Ok(None),
                _ => {}
            }
        }
    }

    fn caps_value(caps: &[String]) -> Value {
        json!(caps)
    }

    /// Playing the shell: send hello and return the core's reply as it came.
    async fn hello(
        &mut self,
        versions: &[u64],
        caps: &[String],
    ) -> Result<(Message, Got), Failure> {
        let t = self.trace();
        self.v = self.version;
        let req = self
            .request("hello", &t, json!({"protocol_versions": versions, "shell_version": "4.0.0-conformance", "capabilities": Self::caps_value(caps), "locale": "ru"}))
            .await?;
        let g = self.reply_to(&req, "the hello reply").await?;
        Ok((req, g))
    }

    /// Playing the shell: the core's hello reply `g` as a valid response; a refusal fails
    /// with `refused`.
    fn hello_response(&self, g: &Got, refused: &str) -> Result<Message, Failure> {
        match &g.msg {
            Ok(m) if m.kind == Kind::Response => Ok(m.clone()),
            Ok(_) => Err(self.bad(g, refused)),
            Err(v) => Err(self.bad(
                g,
                format!("the hello reply breaks the contract: {}", vtext(v)),
            )),
        }
    }

    /// Playing the shell: a successful handshake offering `[1]`.
    async fn handshake(&mut self, caps: &[String]) -> Result<Message, Failure> {
        let (_, g) = self.hello(&[self.version], caps).await?;
        let m = self.hello_response(&g, "the core refused a hello offering version 1")?;
        self.v = m
            .value
            .pointer("/payload/protocol_version")
            .and_then(Value::as_u64)
            .unwrap_or(self.version);
        self.other_caps = caps_of(&m.value);
        Ok(m)
    }

    /// Playing the core: the shell's first message, which must be hello.
    async fn await_hello(&mut self) -> Result<Message, Failure> {
        let until = self.soon();
        let g = self.wait_for("hello", until, |_| true).await?;
        match &g.msg {
            Ok(m) if m.kind == Kind::Request && m.method.as_deref() == Some("hello") => {
                Ok(m.clone())
            }
            Ok(_) => Err(self.bad(&g, "the shell's first message is not hello (§4)")),
            Err(v) => Err(self.bad(
                &g,
                format!("the shell's hello breaks the contract: {}", vtext(v)),
            )),
        }
    }

    /// Playing the core: answer `hello` offering `[1]`; the negotiated version, or `None` after
    /// answering protocol.incompatible.
    async fn answer_hello(
        &mut self,
        hello: &Message,
        caps: &[String],
    ) -> Result<Option<u64>, Failure> {
        self.v = self.version;
        let offered = versions_of(&hello.value, "/payload/protocol_versions");
        self.other_caps = caps_of(&hello.value);
        if !offered.contains(&self.version) {
            let t = self.trace_of(hello);
            self.reply_error(
                hello.id.clone(),
                &t,
                "protocol.incompatible",
                false,
                &format!(
                    "The shell implements protocol versions {offered:?}, this core only version 1."
                ),
                json!({"shell_versions": offered, "core_versions": [self.version]}),
            )
            .await?;
            return Ok(None);
        }
        let sid = format!("conf-{:08x}", self.tag);
        self.reply(hello, json!({"protocol_versions": [self.version], "protocol_version": self.version, "core_version": "4.0.0-conformance", "capabilities": Self::caps_value(caps), "session_id": sid})).await?;
        Ok(Some(self.version))
    }

    /// Playing the core: a successful handshake.
    async fn handshake_core(&mut self, caps: &[String]) -> Result<Message, Failure> {
        let hello = self.await_hello().await?;
        match self.answer_hello(&hello, caps).await? {
            Some(_) => Ok(hello),
            None => Err(Failure::new(format!(
                "the shell's hello does not offer version 1: {:?}",
                versions_of(&hello.value, "/payload/protocol_versions")
            ))),
        }
    }

    /// Playing the core: `None` when the shell declared `cap` and has a data channel, else
    /// the check's end (a skip saying `why_not`, or a failure without a data channel).
    fn pcm_peer(&self, cap: &str, why_not: &str) -> Result<Option<Verdict>, Failure> {
        if !self.other_caps.iter().any(|c| c == cap) {
            return Ok(Some(Verdict::Skip(why_not.to_string())));
        }
        if !self.p.has_data() {
            return Err(Failure::new("no data channel with the shell"));
        }
        Ok(None)
    }

    /// Playing the core: announce a 16 kHz mono PCM stream of `kind` as `stream`.
    async fn open_pcm(&mut self, kind: &str, stream: u64, trace: &str) -> Result<(), Failure> {
        self.event("stream.open", trace, json!({"kind": kind, "stream_id": stream, "format": {"encoding": "pcm_s16le", "rate": 16000, "channels": 1}}), None)
            .await
            .map(drop)
    }

    /// One ping → pong round trip; the time it took.
    async fn ping(&mut self) -> Result<Duration, Failure> {
        let t = self.trace();
        let start = Instant::now();
        let ping = self.event("ping", &t, json!({}), None).await?;
        let id = ping.id.clone();
        let until = self.soon();
        self.wait_for("the pong", until, move |g| {
            g.method() == Some("pong") && g.at_ptr("/correlation_id") == id.as_ref()
        })
        .await?;
        Ok(start.elapsed())
    }
}

/// The highest protocol version the contract names (its first `versions` entry).
fn version(c: &contract::Contract) -> u64 {
    let values = c
        .versions
        .first()
        .map(|v| v.values.as_slice())
        .unwrap_or_default();
    values.iter().filter_map(Value::as_u64).max().unwrap_or(1)
}

/// The capabilities `party` declares in the contract's example of its declaration
/// (`parties.<party>.declares`): what the suite declares playing `party`.
fn declared(c: &contract::Contract, party: &str) -> Vec<String> {
    let Some(d) = c.parties.get(party).and_then(|p| p.declares.as_ref()) else {
        return Vec::new();
    };
    let example = super::derived::example_of(c, &d.method, d.part, party);
    let list = example.as_ref().and_then(|e| e.pointer(&d.pointer));
    let names = list
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str));
    names
        .map(|n| n.map(String::from).collect())
        .unwrap_or_default()
}

fn caps_of(v: &Value) -> Vec<String> {
    v.pointer("/payload/capabilities")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn versions_of(v: &Value, ptr: &str) -> Vec<u64> {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

async fn open(cx: &mut Ctx) -> Result<Sess, Failure> {
    let p = cx.open().await?;
    Ok(Sess::new(p, cx))
}

/// Playing the shell: a fresh session through the handshake, every capability declared.
async fn shell_session(cx: &mut Ctx) -> Result<Sess, Failure> {
    let mut s = open(cx).await?;
    s.handshake(&s.caps.clone()).await?;
    Ok(s)
}

/// Playing the core: a fresh session through the handshake, every capability declared.
async fn core_session(cx: &mut Ctx) -> Result<Sess, Failure> {
    let mut s = open(cx).await?;
    s.handshake_core(&s.caps.clone()).await?;
    Ok(s)
}

/// The `type` of an envelope.
fn type_of(g: &Got) -> Option<&str> {
    g.at_ptr("/type").and_then(Value::as_str)
}

/// The error code an error envelope carries (`""` without one).
fn code_of(g: &Got) -> &str {
    g.at_ptr("/payload/code")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Send `conformance:<what>` as a typed command; the request.
async fn command(s: &mut Sess, text: &str, trace: &str) -> Result<Message, Failure> {
    s.request(
        "command.handle",
        trace,
        json!({"text": text, "source": "typed"}),
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// 5. Credit.

/// Playing the receiver of `stream`: check credit 0 holds, then grant step by step.
async fn credit_rounds(
    s: &mut Sess,
    stream: u64,
    trace: &str,
    rounds: u32,
) -> Result<(u64, u64), Failure> {
    s.idle(OVERRUN_WINDOW).await?;
    if let Some(f) = s.over.take() {
        return Err(f);
    }
    for _ in 0..rounds {
        s.grant_credit(stream, CREDIT_STEP, trace).await?;
        let until = s.soon();
        // Take data until what was granted has arrived, then watch a while for more.
        loop {
            let granted = s.granted.get(&stream).copied().unwrap_or(0);
            let got = s.received.get(&stream).copied().unwrap_or(0);
            if got >= granted || s.closed.contains(&stream) {
                break;
            }
            // Control messages come back too, so a stream.close that ends the stream
            // early is seen at once rather than after the deadline.
            match s
                .pump(until, &mut |i| {
                    matches!(i, Incoming::Data { .. } | Incoming::Control(_))
                })
                .await?
            {
                Incoming::Timeout => break,
                Incoming::ControlEnd(why) => {
                    return Err(Failure::new(format!("the control channel ended: {why}")));
                }
                Incoming::Control(g) => s.background(&g).await?,
                _ => {}
            }
            if let Some(f) = s.over.take() {
                return Err(f);
            }
        }
        s.idle(OVERRUN_WINDOW).await?;
        if let Some(f) = s.over.take() {
            return Err(f);
        }
        if s.closed.contains(&stream) {
            break;
        }
    }
    Ok((
        s.received.get(&stream).copied().unwrap_or(0),
        s.granted.get(&stream).copied().unwrap_or(0),
    ))
}

/// Playing the shell: `conformance:speak SECS`; the audio.output stream the core opens for
/// it, or a skip verdict when none opens.
async fn speak(s: &mut Sess, secs: u64, trace: &str) -> Result<Result<u64, Verdict>, Failure> {
    let text = format!("conformance:speak {secs}");
    command(s, &text, trace).await?;
    let until = s.soon();
    let open = s.wait_for("stream.open audio.output", until, |g| {
        g.is(Kind::Event, "stream.open")
            && g.at_ptr("/payload/kind").and_then(Value::as_str) == Some("audio.output")
    });
    match open.await {
        Ok(g) => Ok(Ok(g
            .at_ptr("/payload/stream_id")
            .and_then(Value::as_u64)
            .unwrap_or(0))),
        Err(_) => Ok(Err(Verdict::Skip(format!(
            "the core opened no audio.output stream for {text:?} (see docs/conformance.md)"
        )))),
    }
}

async fn core_5(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = core_session(cx).await?;
    if let Some(v) = s.pcm_peer(
        "audio.input",
        "the shell did not declare audio.input: it sends no microphone stream",
    )? {
        return Ok(v);
    }
    let t = s.trace();
    let stream = 11;
    s.open_pcm("audio.input", stream, &t).await?;
    let (got, granted) = credit_rounds(&mut s, stream, &t, 4).await?;
    s.event("stream.close", &t, json!({}), Some(stream)).await?;
    if got == 0 {
        return skip(format!(
            "the shell sent no microphone audio on stream {stream} with {granted} bytes of credit"
        ));
    }
    pass(format!(
        "stream {stream}: nothing before the first credit; {got} bytes, never beyond the {granted} granted"
    ))
}

// ---------------------------------------------------------------------------------------------
// 6. Control latency under PCM load.

fn judge_latency(base: &[Duration], loaded: &[Duration]) -> Result<String, String> {
    let max = |v: &[Duration]| v.iter().copied().max().unwrap_or_default();
    // The first idle ping of a fresh process pays its warm-up (a JIT, lazy loading):
    // it is no baseline.
    let base = if base.len() > 1 { &base[1..] } else { base };
    let allowed = max(base) * 5 + Duration::from_millis(250);
    let worst = max(loaded);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let text = format!(
        "ping round trips: idle max {:.1} ms, under load max {:.1} ms over {} pings (allowed {:.1} ms)",
        ms(max(base)),
        ms(worst),
        loaded.len(),
        ms(allowed)
    );
    if worst > allowed { Err(text) } else { Ok(text) }
}

/// Pass with the round trips and `detail` when the load did not degrade them, else fail.
fn latency_verdict(
    base: &[Duration],
    loaded: &[Duration],
    detail: String,
) -> Result<Verdict, Failure> {
    match judge_latency(base, loaded) {
        Ok(text) => pass(format!("{text}; {detail}")),
        Err(text) => Err(Failure::new(format!(
            "control latency degraded under PCM load: {text}"
        ))),
    }
}

async fn shell_6(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = shell_session(cx).await?;
    let mut base = Vec::new();
    for _ in 0..5 {
        base.push(s.ping().await?);
    }
    let t = s.trace();
    let stream = match speak(&mut s, 30, &t).await? {
        Ok(stream) => stream,
        Err(v) => return Ok(v),
    };
    // Enough credit for the whole utterance: the core is never held back by credit.
    s.grant_credit(stream, 4 << 20, &t).await?;
    let mut loaded = Vec::new();
    // Phase 1: the suite does not read the data channel, so the core's data writes back up.
    s.p.pause_data = true;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        loaded.push(s.ping().await?);
    }
    // Phase 2: read the data as it flows and keep pinging.
    s.p.pause_data = false;
    for _ in 0..10 {
        loaded.push(s.ping().await?);
        s.idle(Duration::from_millis(30)).await?;
    }
    let frames = s.frames.get(&stream).copied().unwrap_or(0);
    if frames == 0 {
        return skip(format!(
            "no audio arrived on stream {stream}: there was no load to measure"
        ));
    }
    latency_verdict(
        &base,
        &loaded,
        format!("{frames} audio frames on stream {stream}"),
    )
}

async fn core_6(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = core_session(cx).await?;
    if let Some(v) = s.pcm_peer(
        "audio.output",
        "the shell did not declare audio.output: it plays no synthesis stream",
    )? {
        return Ok(v);
    }
    let mut base = Vec::new();
    for _ in 0..5 {
        base.push(s.ping().await?);
    }
    let t = s.trace();
    let stream = 12;
    s.open_pcm("audio.output", stream, &t).await?;
    let frame = 2048usize;
    let mut seq = 0u64;
    let mut sent = 0u64;
    let mut loaded = Vec::new();
    let end = Instant::now() + Duration::from_millis(1500);
    let mut next_ping = Instant::now();
    while Instant::now() < end {
        let allow = s.allowance.get(&stream).copied().unwrap_or(0);
        if allow >= frame as u64 {
            s.p.send_data(vec![stream, seq], Bytes::from(vec![0u8; frame]), s.wait)
                .await?;
            s.allowance.insert(stream, allow - frame as u64);
            seq += 1;
            sent += frame as u64;
        }
        if Instant::now() >= next_ping {
            loaded.push(s.ping().await?);
            next_ping = Instant::now() + Duration::from_millis(100);
        }
        let wait = if s.allowance.get(&stream).copied().unwrap_or(0) >= frame as u64 {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(20)
        };
        s.idle(wait).await?;
    }
    s.event("stream.close", &t, json!({}), Some(stream)).await?;
    if sent == 0 {
        return Err(Failure::new(format!(
            "the shell granted no credit on audio.output stream {stream} in 1.5 s (it must grant as it plays, §8)"
        )));
    }
    latency_verdict(
        &base,
        &loaded,
        format!("{sent} bytes of PCM sent in {seq} frames"),
    )
}

// ---------------------------------------------------------------------------------------------
// 7. Long task.

const FINALS: [&str; 3] = ["task.done", "task.failed", "task.cancelled"];

fn task_event_for<'a>(g: &'a Got, task: &str) -> Option<&'a str> {
    let m = g.method()?;
    (m.starts_with("task.") && g.at_ptr("/payload/task_id").and_then(Value::as_str) == Some(task))
        .then_some(m)
}

/// Whether `g` is the final event (done, failed, cancelled) of `task`.
fn is_final_of(g: &Got, task: &str) -> bool {
    task_event_for(g, task).is_some_and(|m| FINALS.contains(&m))
}

/// The final event of `task`, waited for as `what` until `until`.
async fn task_final(s: &mut Sess, task: &str, what: &str, until: Instant) -> Result<Got, Failure> {
    let tk = task.to_string();
    s.wait_for(what, until, move |g| is_final_of(g, &tk)).await
}

/// Whether a task.cancel receipt says `{accepted, status}`.
fn receipt_is(m: &Message, accepted: bool, status: &str) -> bool {
    m.value.pointer("/payload/accepted") == Some(&json!(accepted))
        && str_at(&m.value, "/payload/status") == Some(status)
}

/// Start `conformance:task N`; the task id, or a skip verdict.
async fn start_task(
    s: &mut Sess,
    secs: u64,
    trace: &str,
) -> Result<Result<String, Verdict>, Failure> {
    let text = format!("conformance:task {secs}");
    let req = command(s, &text, trace).await?;
    let (g, m) = s.valid_reply(&req, "the reply to a task command").await?;
    match m.value.pointer("/payload/task_id").and_then(Value::as_str) {
        Some(t) => Ok(Ok(t.to_string())),
        None => {
            let _ = g;
            Ok(Err(Verdict::Skip(format!(
                "the core started no task for {text:?} (see docs/conformance.md)"
            ))))
        }
    }
}

async fn core_7(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = core_session(cx).await?;
    let until = s.soon();
    let g = match s
        .wait_for("a command.handle from the shell's script", until, |g| {
            g.is(Kind::Request, "command.handle")
        })
        .await
    {
        Ok(g) => g,
        Err(_) => return skip("the shell sent no command.handle to answer with a long task"),
    };
    let Some(cmd) = g.ok().cloned() else {
        return Err(s.bad(&g, "the command breaks the contract"));
    };
    let secs = cx.opts.task_seconds;
    let task = format!("task-conf-{:x}", s.tag);
    let t = s.trace_of(&cmd);
    s.reply(&cmd, json!({"task_id": task})).await?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        let fraction = (start.elapsed().as_secs_f64() / secs as f64).min(1.0);
        s.event(
            "task.progress",
            &t,
            json!({"task_id": task, "fraction": fraction, "message": "working"}),
            None,
        )
        .await?;
        if n == secs / 2 {
            s.event(
                "task.partial",
                &t,
                json!({"task_id": task, "data": {"step": n}}),
                None,
            )
            .await?;
        }
        n += 1;
        if let Some(why) = s.idle(Duration::from_secs(1)).await? {
            return Err(Failure::new(format!(
                "the shell closed the control channel {:.1} s into a {secs} s task: {why}",
                start.elapsed().as_secs_f64()
            )));
        }
    }
    s.event(
        "task.done",
        &t,
        json!({"task_id": task, "result": "done"}),
        None,
    )
    .await?;
    let rtt = s.ping().await?;
    if let Some(g) = s.p.log.iter().find(|g| g.is(Kind::Request, "task.cancel")) {
        s.notes.push(format!(
            "the shell cancelled: {}",
            String::from_utf8_lossy(&g.raw)
        ));
    }
    pass(format!(
        "the shell followed {task} for {secs} s ({n} progress events, one task.done) and still answered a ping in {:.1} ms",
        rtt.as_secs_f64() * 1000.0
    ))
}

// ---------------------------------------------------------------------------------------------
// 8. Cancel ordering.

async fn cancel(s: &mut Sess, task: &str, trace: &str) -> Result<(Got, Message), Failure> {
    let req = s
        .request("task.cancel", trace, json!({"task_id": task}))
        .await?;
    s.valid_reply(&req, "the task.cancel receipt").await
}

/// Cancel `task`; a receipt other than `{accepted, status}` fails with `why`.
async fn cancel_receipt(
    s: &mut Sess,
    task: &str,
    trace: &str,
    (accepted, status): (bool, &str),
    why: impl Into<String>,
) -> Result<(), Failure> {
    let (g, r) = cancel(s, task, trace).await?;
    if !receipt_is(&r, accepted, status) {
        return Err(s.bad(&g, why));
    }
    Ok(())
}

async fn shell_8(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = shell_session(cx).await?;
    // A running task: receipt {accepted: true, status: running} first, then task.cancelled.
    let t = s.trace();
    let task = match start_task(&mut s, 30, &t).await? {
        Ok(task) => task,
        Err(v) => return Ok(v),
    };
    let until = s.soon();
    let tk = task.clone();
    s.wait_for(&format!("a task.progress of {task}"), until, move |g| {
        task_event_for(g, &tk) == Some("task.progress")
    })
    .await?;
    let mark = s.p.log.len();
    cancel_receipt(
        &mut s,
        &task,
        &t,
        (true, "running"),
        "cancelling a running task: the receipt is not {accepted: true, status: running}",
    )
    .await?;
    let pos_receipt = s.p.log.len();
    for g in s.p.log[mark..pos_receipt].iter() {
        if is_final_of(g, &task) {
            return Err(s.bad(
                g,
                format!("{task} reported its end before the task.cancel receipt"),
            ));
        }
    }
    let until = s.soon();
    let fin = task_final(&mut s, &task, &format!("task.cancelled for {task}"), until).await?;
    if fin.method() != Some("task.cancelled") {
        return Err(s.bad(
            &fin,
            format!(
                "after an accepted cancel {task} ended with {}",
                fin.method().unwrap_or("?")
            ),
        ));
    }
    s.idle(Duration::from_secs(1)).await?;
    let finals = s.p.log[mark..]
        .iter()
        .filter(|g| is_final_of(g, &task))
        .count();
    if finals != 1 {
        return Err(s.bad(
            &fin,
            format!("{task} sent {finals} final events after the cancel"),
        ));
    }
    // A finished task: {accepted: false, status: done}, no task.cancelled.
    let t2 = s.trace();
    let done = match start_task(&mut s, 1, &t2).await? {
        Ok(task) => task,
        Err(v) => return Ok(v),
    };
    let until = Instant::now() + Duration::from_secs(1) + s.wait;
    let fin2 = task_final(&mut s, &done, &format!("task.done of {done}"), until).await?;
    if fin2.method() != Some("task.done") {
        return Err(s.bad(
            &fin2,
            format!("a 1 s task ended with {}", fin2.method().unwrap_or("?")),
        ));
    }
    let mark2 = s.p.log.len();
    cancel_receipt(
        &mut s,
        &done,
        &t2,
        (false, "done"),
        "cancelling a finished task: the receipt is not {accepted: false, status: done}",
    )
    .await?;
    s.idle(Duration::from_secs(1)).await?;
    if let Some(g) = s.p.log[mark2..]
        .iter()
        .find(|g| task_event_for(g, &done) == Some("task.cancelled"))
    {
        return Err(s.bad(
            g,
            format!("{done} had finished, yet a task.cancelled followed the cancel"),
        ));
    }
    // An unknown task (implied check 21).
    cancel_receipt(
        &mut s,
        "task-conformance-unknown",
        &t2,
        (false, "unknown"),
        "cancelling an unknown task: the receipt is not {accepted: false, status: unknown}",
    )
    .await?;
    pass(format!(
        "{task}: receipt running, then one task.cancelled; {done}: done, receipt done, no cancelled; unknown task: unknown"
    ))
}

// ---------------------------------------------------------------------------------------------
// 9, 10. Confirmations.

fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(o) => o.contains_key(key) || o.values().any(|x| has_key(x, key)),
        Value::Array(a) => a.iter().any(|x| has_key(x, key)),
        _ => false,
    }
}

/// `conformance:power-off`: what came first, a permission.request or the command's reply.
async fn power_off(s: &mut Sess, trace: &str) -> Result<(Message, Got), Failure> {
    let req = command(s, "conformance:power-off", trace).await?;
    let id = req.id.clone();
    let until = s.soon();
    let g = s
        .wait_for(
            "a permission.request or the reply to conformance:power-off",
            until,
            move |g| {
                g.method() == Some("permission.request")
                    || g.at_ptr("/correlation_id") == id.as_ref()
            },
        )
        .await?;
    Ok((req, g))
}

fn is_rejection(g: &Got) -> Result<String, String> {
    let ty = type_of(g).unwrap_or("");
    let code = code_of(g);
    if ty != "error" {
        return Err(format!("a {ty} (the action went ahead)"));
    }
    if !(code.starts_with("confirmation.") || code.starts_with("permission.")) {
        return Err(format!(
            "error {code:?}, not a confirmation.* or permission.* code"
        ));
    }
    if g.at_ptr("/payload/retryable") != Some(&json!(false)) {
        return Err(format!(
            "error {code} marked retryable (the same call fails again)"
        ));
    }
    Ok(code.to_string())
}

/// A power-off the core answered without asking: a refusal skips (what the check needs the
/// ask for is `untested`), anything else means the dangerous action ran.
fn unasked(s: &Sess, reply: &Got, untested: &str) -> Result<Verdict, Failure> {
    match is_rejection(reply) {
        Ok(code) => skip(format!(
            "the core refused conformance:power-off with {code} without asking; {untested}"
        )),
        Err(why) => Err(s.bad(
            reply,
            format!("the dangerous action ran without a confirmation: {why}"),
        )),
    }
}

async fn answer_permission(s: &mut Sess, ask: &Got, granted: bool) -> Result<(), Failure> {
    let Some(m) = ask.ok().cloned() else {
        return Err(s.bad(ask, "the permission.request breaks the contract"));
    };
    let rid = m
        .value
        .pointer("/payload/request_id")
        .cloned()
        .unwrap_or(json!("?"));
    let p = if granted {
        json!({"request_id": rid, "granted": true, "scope": "once"})
    } else {
        json!({"request_id": rid, "granted": false})
    };
    s.reply(&m, p).await
}

async fn shell_9(cx: &mut Ctx) -> Result<Verdict, Failure> {
    // Without the permissions capability the core cannot ask, so it must refuse outright.
    let mut s = open(cx).await?;
    let asks = cx.wire.contract().methods.get("permission.request");
    let asks = asks.and_then(|m| m.capability.as_deref());
    let caps: Vec<String> = s
        .caps
        .iter()
        .filter(|c| Some(c.as_str()) != asks)
        .cloned()
        .collect();
    s.handshake(&caps).await?;
    let t = s.trace();
    let (_, g) = power_off(&mut s, &t).await?;
    if g.method() == Some("permission.request") {
        return Err(s.bad(
            &g,
            "the shell did not declare permissions, yet the core asked it (capability rule)",
        ));
    }
    let refused0 = is_rejection(&g).map_err(|why| {
        s.bad(
            &g,
            format!("power-off without any way to confirm was answered with {why}"),
        )
    })?;
    drop(s);
    let mut s = shell_session(cx).await?;
    // Denied: rejected.
    let t = s.trace();
    let (req, ask) = power_off(&mut s, &t).await?;
    if ask.method() != Some("permission.request") {
        return unasked(&s, &ask, "the grant path is untested");
    }
    if let Some(v) = ask.value()
        && has_key(v, "confirmation_id")
    {
        return Err(s.bad(
            &ask,
            "permission.request carries confirmation_id, which never travels (§11)",
        ));
    }
    answer_permission(&mut s, &ask, false).await?;
    let g = s.reply_to(&req, "the reply to a denied power-off").await?;
    let refused = is_rejection(&g).map_err(|why| {
        s.bad(
            &g,
            format!("after the user said no, power-off was answered with {why}"),
        )
    })?;
    // Granted once: runs once; the next identical call needs a new confirmation.
    let t = s.trace();
    let (req, ask) = power_off(&mut s, &t).await?;
    if ask.method() != Some("permission.request") {
        return Err(s.bad(&ask, "the second power-off did not ask for permission"));
    }
    answer_permission(&mut s, &ask, true).await?;
    let (g, _) = s
        .valid_reply(&req, "the reply to a granted power-off")
        .await?;
    if type_of(&g) != Some("response") {
        return Err(s.bad(&g, "granted once, power-off still failed"));
    }
    let t = s.trace();
    let (req, ask) = power_off(&mut s, &t).await?;
    if ask.method() != Some("permission.request") {
        return Err(s.bad(&ask, "a once-granted confirmation was used again: the third power-off ran without asking (single use, §11)"));
    }
    answer_permission(&mut s, &ask, false).await?;
    let g = s.reply_to(&req, "the reply to the third power-off").await?;
    is_rejection(&g).map_err(|why| {
        s.bad(
            &g,
            format!("denied again, power-off was answered with {why}"),
        )
    })?;
    for g in &s.p.log {
        if g.value().is_some_and(|v| has_key(v, "confirmation_id")) {
            return Err(s.bad(
                g,
                "a message carries confirmation_id, which never travels (§11)",
            ));
        }
    }
    pass(format!(
        "no permissions capability → {refused0}; denied → {refused}; granted once → ran once, the next call asked again"
    ))
}

async fn core_9(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = core_session(cx).await?;
    if !s.other_caps.iter().any(|c| c == "permissions") {
        return skip("the shell did not declare permissions: the core may not ask it");
    }
    let t = s.trace();
    let rid = format!("ask-conf-{:x}", s.tag);
    let req = s.request("permission.request", &t, json!({"request_id": rid, "permission": "system.power", "action": "shutdown", "reason": "conformance check", "preview": "Компьютер будет выключен немедленно.", "ttl": 30})).await?;
    let (g, m) = s
        .valid_reply(&req, "the answer to permission.request")
        .await?;
    if m.kind != Kind::Response {
        return Err(s.bad(&g, "the shell answered permission.request with an error"));
    }
    if str_at(&m.value, "/payload/request_id") != Some(rid.as_str()) {
        return Err(s.bad(
            &g,
            format!("the answer does not echo request_id {rid:?} (K-18)"),
        ));
    }
    s.idle(Duration::from_millis(500)).await?;
    for g in &s.p.log {
        if g.value().is_some_and(|v| has_key(v, "confirmation_id")) {
            return Err(s.bad(g, "the shell sent confirmation_id: only the core issues confirmations, and they never travel (§11)"));
        }
    }
    let granted = m.value.pointer("/payload/granted") == Some(&json!(true));
    pass(format!(
        "the shell answered {rid} granted={granted}, echoing request_id; no confirmation_id on the wire"
    ))
}

async fn shell_10(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = shell_session(cx).await?;
    let t = s.trace();
    let (req, ask) = power_off(&mut s, &t).await?;
    if ask.method() != Some("permission.request") {
        return unasked(&s, &ask, "expiry is untested");
    }
    let ttl = ask
        .at_ptr("/payload/ttl")
        .and_then(Value::as_u64)
        .unwrap_or(60);
    let need = Duration::from_secs(ttl + 1) + s.wait;
    if need + Duration::from_secs(5) > cx.opts.check_deadline {
        return skip(format!(
            "permission ttl is {ttl} s, longer than --check-deadline allows to wait out (start the core with a shorter ttl or raise --check-deadline)"
        ));
    }
    // Wait the window out (answering nothing), then say yes too late.
    let id = req.id.clone();
    let until = Instant::now() + Duration::from_secs(ttl) + Duration::from_millis(1200);
    let early = s.pump(until, &mut |i| matches!(i, Incoming::Control(g) if g.at_ptr("/correlation_id") == id.as_ref())).await?;
    let reply = match early {
        Incoming::Control(g) => *g,
        _ => {
            answer_permission(&mut s, &ask, true).await?;
            s.reply_to(&req, "the reply to power-off after a late yes")
                .await?
        }
    };
    let code = is_rejection(&reply).map_err(|why| {
        s.bad(
            &reply,
            format!("a yes after ttl {ttl} s expired was answered with {why} (default deny)"),
        )
    })?;
    pass(format!(
        "ttl {ttl} s ran out, a late yes granted nothing: {code}, retryable false"
    ))
}

// ---------------------------------------------------------------------------------------------
// 11. Crash and restart.

async fn shell_11(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = open(cx).await?;
    let first = s.handshake(&s.caps.clone()).await?;
    let sid1 = str_at(&first.value, "/payload/session_id")
        .unwrap_or("")
        .to_string();
    let t = s.trace();
    let task = match start_task(&mut s, 30, &t).await? {
        Ok(task) => task,
        Err(v) => return Ok(v),
    };
    // The shell "crashes": both channels vanish at once.
    s.p.drop_channels();
    drop(s);
    let mut exited = String::from("core process not watched (external target)");
    if cx.launches() {
        match cx.child_exit(cx.opts.deadline).await {
            Some(Some(code)) => {
                exited = format!("the core exited ({code}) when the shell vanished")
            }
            Some(None) => {
                return Err(Failure::new(format!(
                    "the core was still running {:?} after the shell vanished (§13: the core exits)",
                    cx.opts.deadline
                )));
            }
            None => {}
        }
    }
    let mut s = open(cx).await?;
    let t = s.trace();
    let req = command(&mut s, "hello", &t).await?;
    let g = s
        .reply_to(
            &req,
            "the reply to a command before hello in the new session",
        )
        .await?;
    if code_of(&g) != "protocol.not_ready" {
        return Err(s.bad(&g, "a new session answered a command before hello: state was restored, not rebuilt by a new handshake"));
    }
    let second = s.handshake(&s.caps.clone()).await?;
    let sid2 = str_at(&second.value, "/payload/session_id")
        .unwrap_or("")
        .to_string();
    if sid1 == sid2 {
        s.notes.push(format!(
            "both handshakes returned session_id {sid1:?} (K-20: new on every handshake)"
        ));
    }
    let mark = s.p.log.len();
    cancel_receipt(
        &mut s,
        &task,
        &t,
        (false, "unknown"),
        format!("{task} of the crashed session survived the restart (tasks are forgotten, §13)"),
    )
    .await?;
    s.idle(Duration::from_secs(1)).await?;
    if let Some(g) = s.p.log[mark..]
        .iter()
        .find(|g| g.method() == Some("task.cancelled"))
    {
        return Err(s.bad(
            g,
            "a task.cancelled was sent for a task forgotten on the crash",
        ));
    }
    cx.notes.append(&mut s.notes);
    pass(format!(
        "{exited}; the new session required hello (protocol.not_ready before it), session {sid1:?} → {sid2:?}; {task} is unknown"
    ))
}

async fn core_11(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = core_session(cx).await?;
    s.idle(Duration::from_millis(300)).await?;
    // The core "crashes": both channels vanish.
    s.p.drop_channels();
    drop(s);
    let Some(p) = cx.reopen().await? else {
        return skip(
            "a pipe target cannot be reached twice; use exec:CMD with {control}/{data} or socket endpoints",
        );
    };
    let mut s = Sess::new(p, cx);
    let hello = s.await_hello().await?;
    s.answer_hello(&hello, &s.caps.clone()).await?;
    s.ping().await?;
    pass(
        "after the core vanished the shell took a new core connection and repeated the handshake (hello first)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_roles_list_every_check() {
        for role in ["shell", "core"] {
            let c = checks(role).expect("role");
            let ids: Vec<_> = c.iter().map(|c| c.id.as_ref()).collect();
            assert_eq!(ids.len(), 7, "{ids:?}");
            assert_eq!(ids[0], "kernel.15.5");
            assert!(ids.contains(&"kernel.15.11"));
        }
        assert!(checks("proxy").is_none());
        assert!(
            checks("core")
                .expect("core")
                .iter()
                .filter(|c| c.body.is_err())
                .count()
                == 2
        );
    }

    #[test]
    fn latency_judgement() {
        let ms = Duration::from_millis;
        assert!(judge_latency(&[ms(1), ms(2)], &[ms(3), ms(200)]).is_ok());
        assert!(judge_latency(&[ms(1), ms(2)], &[ms(3), ms(900)]).is_err());
    }
}
