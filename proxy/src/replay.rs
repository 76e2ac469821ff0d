//! Replay: send one recorded side of a connection to a live peer and compare its answers
//! with the recorded ones.
//!
//! The frames `side` sent on one connection are sent in recorded order to a fresh
//! connection to `to`, framed with the route's channel codec (or one text message
//! each on a message transport). After each request the replayer waits, up to the
//! deadline, for the reply correlated with it (JSON-RPC `id`, envelope
//! `correlation_id`; whatever the contract's binding names) and compares it with
//! the reply recorded from the other side: `same`, `differs` (with the JSON
//! pointer of every difference), or `missing`. Other frames (notifications,
//! events, replies to the peer's own requests) are sent without waiting.
//!
//! Frames the peer sends that answer nothing we sent are matched by kind and
//! method against the frames it sent in the recording; what the peer sends beyond
//! the recording is `extra`, what it sent in the recording but not now is `unseen`.
//!
//! Ignored when comparing: members named [`DEFAULT_IGNORE`] at any depth (clocks),
//! the replier's own message id for envelope bindings with a separate correlation
//! member (kernel's response `id`), and whatever [`ReplayOptions::ignore`] adds. A
//! recorded `"[REDACTED]"` matches any string or number. Secrets were redacted when
//! recording, so a frame that must carry one (xsession's auth line) is sent with the
//! value given in [`ReplayOptions::secrets`], or as `[REDACTED]` if none is given.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use contract::model::{Binding, Kind};
use contract::wire::{ChannelCodec, Wire};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::inspect::Dir;
use crate::record::{Reader, Record, RecordError};
use crate::redact::{REDACTED, is_secret_key};
use contract_transport::conn::{BoxIo, BoxMsg, Conn, Msg};
use contract_transport::endpoint::{Endpoint, EndpointError, Options};

/// Member names ignored at any depth when comparing replies: they carry clocks.
pub const DEFAULT_IGNORE: &[&str] = &["timestamp", "ts", "time"];
/// Differences listed per reply; more are counted, not listed.
pub const MAX_DIFFS: usize = 20;
/// Frames buffered from the peer while a send is in progress.
const INBOX: usize = 4096;

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Connection to replay (default: the first that has a frame from `side`).
    pub conn: Option<u64>,
    /// How long to wait for each reply, and for each send.
    pub deadline: Duration,
    /// How long to keep listening for late or extra frames after the last frame.
    pub settle: Duration,
    /// More to ignore when comparing: a JSON pointer (`/payload/session_id`) or a member name
    /// ignored at any depth (`request_id`).
    pub ignore: Vec<String>,
    /// Secret values to send in place of `[REDACTED]`: (member name, value).
    pub secrets: Vec<(String, String)>,
    /// Contract name or path, instead of the one the recording carries or names.
    pub contract: Option<String>,
    /// Endpoint options for connecting: TLS; the ALPN and WebSocket subprotocols
    /// default to what the recording's contract fixes.
    pub endpoint: Options,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            conn: None,
            deadline: Duration::from_secs(5),
            settle: Duration::from_millis(300),
            ignore: Vec::new(),
            secrets: Vec::new(),
            contract: None,
            endpoint: Options::default(),
        }
    }
}

/// Errors that stop a replay before it has a report.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The recording could not be read.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// No connection to replay.
    #[error("{0}")]
    NoConnection(String),
    /// The recorded route or contract is not usable here.
    #[error("{0}")]
    Setup(String),
    /// The contract does not load.
    #[error(transparent)]
    Contract(#[from] contract::LoadError),
    /// The contract does not compile for the wire.
    #[error(transparent)]
    Wire(#[from] contract::wire::WireError),
    /// Connecting failed.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
}

/// One difference between the recorded and the live reply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// JSON pointer (`""` is the whole message).
    pub path: String,
    /// Recorded value (absent: the member was not there).
    pub expected: Option<Value>,
    /// Live value (absent: the member is not there).
    pub actual: Option<Value>,
}

/// How one request fared.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Status {
    /// The reply equals the recorded one (ignoring what varies legitimately).
    Same,
    /// The reply differs.
    Differs {
        /// Differences, at most [`MAX_DIFFS`].
        diffs: Vec<Diff>,
        /// Differences beyond those listed.
        more: usize,
    },
    /// No reply within the deadline (or before the peer closed).
    Missing {
        /// How long it waited, in milliseconds.
        waited_ms: f64,
        /// Why it stopped waiting.
        why: String,
    },
    /// Never sent: the connection failed first.
    NotSent {
        /// Why.
        why: String,
    },
}

/// One request sent, and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestOutcome {
    /// Position among the frames sent (1-based).
    pub index: usize,
    /// Method.
    pub method: Option<String>,
    /// Request id.
    pub id: Value,
    /// Outcome.
    #[serde(flatten)]
    pub status: Status,
    /// Reply latency in milliseconds.
    pub latency_ms: Option<f64>,
    /// The live reply breaks the contract (why), besides any difference.
    pub violation: Option<String>,
}

/// A frame from the peer that was not expected, or an expected one that did not come.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stray {
    /// Message kind, if it could be read.
    pub kind: Option<Kind>,
    /// Method, if any.
    pub method: Option<String>,
    /// Id, or the id it answers.
    pub id: Option<Value>,
    /// What is wrong with it.
    pub why: String,
}

/// The result of a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Recording file.
    pub recording: String,
    /// Where it was replayed to.
    pub to: String,
    /// Route of the replayed connection.
    pub route: String,
    /// Connection id in the recording.
    pub conn: u64,
    /// Side replayed.
    pub side: Dir,
    /// Frames sent.
    pub sent: usize,
    /// Requests, in order.
    pub requests: Vec<RequestOutcome>,
    /// Frames the peer sent that the recording does not have (late or unknown replies too).
    pub extra: Vec<Stray>,
    /// Frames the peer sent in the recording (not replies) that did not come now.
    pub unseen: Vec<Stray>,
    /// How the connection ended, if the peer ended it.
    pub closed: Option<String>,
}

impl ReplayReport {
    /// Whether everything matched: every request `same`, nothing extra or unseen.
    pub fn is_clean(&self) -> bool {
        self.requests.iter().all(|r| r.status == Status::Same)
            && self.extra.is_empty()
            && self.unseen.is_empty()
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The report as text lines, summary last.
    pub fn text_lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "replay of {} conn {} (route {}, side {}) to {}: {} frames sent, {} requests",
            self.recording,
            self.conn,
            self.route,
            if self.side == Dir::Up { "up" } else { "down" },
            self.to,
            self.sent,
            self.requests.len()
        )];
        for r in &self.requests {
            let head = format!(
                "  #{} {} id {}",
                r.index,
                r.method.as_deref().unwrap_or("-"),
                r.id
            );
            let lat = r
                .latency_ms
                .map(|l| format!(" ({l:.1}ms)"))
                .unwrap_or_default();
            let viol = r
                .violation
                .as_ref()
                .map(|v| format!(" [reply breaks the contract: {v}]"))
                .unwrap_or_default();
            match &r.status {
                Status::Same => out.push(format!("{head}: same{lat}{viol}")),
                Status::Differs { diffs, more } => {
                    out.push(format!("{head}: DIFFERS{lat}{viol}"));
                    for d in diffs {
                        out.push(format!(
                            "      {}: expected {}, got {}",
                            if d.path.is_empty() {
                                "(whole)"
                            } else {
                                &d.path
                            },
                            short(d.expected.as_ref()),
                            short(d.actual.as_ref())
                        ));
                    }
                    if *more > 0 {
                        out.push(format!("      … and {more} more"));
                    }
                }
                Status::Missing { waited_ms, why } => {
                    out.push(format!("{head}: MISSING after {waited_ms:.0}ms ({why})"))
                }
                Status::NotSent { why } => out.push(format!("{head}: NOT SENT ({why})")),
            }
        }
        let stray = |s: &Stray| {
            format!(
                "{} {} id {}: {}",
                s.kind
                    .map(|k| k.name().to_string())
                    .unwrap_or_else(|| "?".into()),
                s.method.as_deref().unwrap_or("-"),
                s.id.as_ref()
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                s.why
            )
        };
        out.extend(self.extra.iter().map(|s| format!("  EXTRA {}", stray(s))));
        out.extend(self.unseen.iter().map(|s| format!("  UNSEEN {}", stray(s))));
        if let Some(c) = &self.closed {
            out.push(format!("  peer closed: {c}"));
        }
        let count = |f: fn(&Status) -> bool| self.requests.iter().filter(|r| f(&r.status)).count();
        out.push(format!(
            "{}: {} same, {} differ, {} missing, {} not sent, {} extra, {} unseen",
            if self.is_clean() { "OK" } else { "DIFFERENT" },
            count(|s| matches!(s, Status::Same)),
            count(|s| matches!(s, Status::Differs { .. })),
            count(|s| matches!(s, Status::Missing { .. })),
            count(|s| matches!(s, Status::NotSent { .. })),
            self.extra.len(),
            self.unseen.len()
        ));
        out
    }
}

impl std::fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for l in self.text_lines() {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}

/// Compact JSON, cut at 80 characters.
fn short(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "(absent)".into();
    };
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// What to compare and what to skip.
struct Ignore {
    keys: HashSet<String>,
    pointers: HashSet<String>,
}

impl Ignore {
    fn skips(&self, pointer: &str, key: &str) -> bool {
        self.keys.contains(key) || self.pointers.contains(pointer)
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Every difference between `expected` and `actual`, as JSON pointers.
fn diff(path: &str, expected: &Value, actual: &Value, ign: &Ignore, out: &mut Vec<Diff>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}/{}", escape(k));
                if ign.skips(&p, k) {
                    continue;
                }
                match a.get(k) {
                    Some(av) => diff(&p, ev, av, ign, out),
                    None => out.push(Diff {
                        path: p,
                        expected: Some(ev.clone()),
                        actual: None,
                    }),
                }
            }
            for (k, av) in a {
                let p = format!("{path}/{}", escape(k));
                if !e.contains_key(k) && !ign.skips(&p, k) {
                    out.push(Diff {
                        path: p,
                        expected: None,
                        actual: Some(av.clone()),
                    });
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            for i in 0..e.len().max(a.len()) {
                let p = format!("{path}/{i}");
                match (e.get(i), a.get(i)) {
                    (Some(ev), Some(av)) => diff(&p, ev, av, ign, out),
                    (ev, av) => out.push(Diff {
                        path: p,
                        expected: ev.cloned(),
                        actual: av.cloned(),
                    }),
                }
            }
        }
        (Value::String(e), Value::String(_) | Value::Number(_)) if e == REDACTED => {}
        (e, a) if e == a => {}
        (e, a) => out.push(Diff {
            path: path.to_string(),
            expected: Some(e.clone()),
            actual: Some(a.clone()),
        }),
    }
}

/// Put the given secrets back where the recording has `[REDACTED]`.
fn unredact(v: &mut Value, secrets: &[(String, String)]) -> bool {
    match v {
        Value::Object(map) => {
            let mut changed = false;
            for (k, m) in map.iter_mut() {
                if m.as_str() == Some(REDACTED)
                    && is_secret_key(k)
                    && let Some((_, s)) = secrets.iter().find(|(n, _)| n.eq_ignore_ascii_case(k))
                {
                    *m = Value::String(s.clone());
                    changed = true;
                } else {
                    changed |= unredact(m, secrets);
                }
            }
            changed
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |c, i| unredact(i, secrets) | c),
        _ => false,
    }
}

/// Key for a JSON id in maps: its canonical text.
fn key(id: &Value) -> String {
    id.to_string()
}

enum Step {
    Request {
        raw: Vec<u8>,
        id: Value,
        method: Option<String>,
    },
    Send(Vec<u8>),
}

/// One recorded frame of the peer that is not a reply: (kind, method, id).
type Unsolicited = (Option<Kind>, Option<String>, Option<Value>);

/// What the recording says: the steps to send and what the peer answered.
struct Plan {
    route: String,
    channel: String,
    me: String,
    peer: String,
    steps: Vec<Step>,
    expected: HashMap<String, VecDeque<Value>>,
    recorded_unsolicited: Vec<Unsolicited>,
    methods: HashMap<String, String>,
}

fn choose_conn(path: &Path, side: Dir, want: Option<u64>) -> Result<u64, ReplayError> {
    if let Some(c) = want {
        return Ok(c);
    }
    for rec in Reader::open(path)? {
        let rec = rec?;
        if rec.direction() == Some(side) {
            return Ok(rec.conn);
        }
    }
    Err(ReplayError::NoConnection(format!(
        "{}: no connection has a frame sent {}",
        path.display(),
        if side == Dir::Up { "up" } else { "down" }
    )))
}

fn plan(
    path: &Path,
    side: Dir,
    opts: &ReplayOptions,
) -> Result<(Plan, Arc<Wire>, u64), ReplayError> {
    let conn = choose_conn(path, side, opts.conn)?;
    let reader = Reader::open(path)?;
    let header = reader.header().clone();
    let mut frames: Vec<Record> = Vec::new();
    for rec in reader {
        let rec = rec?;
        if rec.conn == conn && rec.direction().is_some() {
            frames.push(rec);
        }
    }
    let first = frames.first().ok_or_else(|| {
        ReplayError::NoConnection(format!(
            "{}: connection {conn} has no frames",
            path.display()
        ))
    })?;
    let route_name = first.route.clone();
    let channel = first.channel.clone();
    let route = header.route(&route_name).ok_or_else(|| {
        ReplayError::Setup(format!(
            "{}: route {route_name:?} is not in the header",
            path.display()
        ))
    })?;
    let wire = Arc::new(Wire::new(Arc::new(crate::record::route_contract(
        path,
        &header,
        route,
        opts.contract.as_deref(),
    )?))?);
    let (me, peer) = match side {
        Dir::Up => (route.client.clone(), route.server.clone()),
        Dir::Down => (route.server.clone(), route.client.clone()),
    };
    let mut p = Plan {
        route: route_name,
        channel,
        me,
        peer,
        steps: Vec::new(),
        expected: HashMap::new(),
        recorded_unsolicited: Vec::new(),
        methods: HashMap::new(),
    };
    for rec in frames {
        let mine = rec.direction() == Some(side);
        let from = if mine { &p.me } else { &p.peer };
        let methods = &p.methods;
        let msg = match wire.decode_with(&p.channel, from, &rec.raw, &|id| {
            methods.get(&key(id)).cloned()
        }) {
            Ok(m) => Some(m),
            Err(v) => v.partial.map(|b| *b),
        };
        if mine {
            let mut raw = rec.raw;
            if !opts.secrets.is_empty()
                && let Ok(mut v) = serde_json::from_slice::<Value>(&raw)
                && unredact(&mut v, &opts.secrets)
                && let Ok(r) = serde_json::to_vec(&v)
            {
                raw = r;
            }
            match msg {
                Some(m) if m.kind == Kind::Request && m.id.is_some() => {
                    let id = m.id.unwrap_or(Value::Null);
                    if let Some(method) = &m.method {
                        p.methods.insert(key(&id), method.clone());
                    }
                    p.steps.push(Step::Request {
                        raw,
                        id,
                        method: m.method,
                    });
                }
                _ => p.steps.push(Step::Send(raw)),
            }
        } else {
            match msg {
                Some(m)
                    if matches!(m.kind, Kind::Response | Kind::Error)
                        && m.correlation.is_some() =>
                {
                    let k = m.correlation.as_ref().map(key).unwrap_or_default();
                    p.expected.entry(k).or_default().push_back(m.value);
                }
                Some(m) => p.recorded_unsolicited.push((Some(m.kind), m.method, m.id)),
                None => p.recorded_unsolicited.push((None, None, None)),
            }
        }
    }
    Ok((p, wire, conn))
}

/// What the reader task hands over.
enum In {
    Frame(Bytes),
    Binary(Bytes),
    Closed(String),
}

enum Out {
    Stream(WriteHalf<BoxIo>, ChannelCodec),
    Msgs(SplitSink<BoxMsg, Msg>),
}

impl Out {
    async fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Stream(w, codec) => {
                let mut b = BytesMut::new();
                codec
                    .encode_json(frame, &mut b)
                    .map_err(std::io::Error::other)?;
                w.write_all(&b).await?;
                w.flush().await
            }
            Out::Msgs(s) => s.send(Msg::Text(Bytes::copy_from_slice(frame))).await,
        }
    }

    async fn close(&mut self) -> std::io::Result<()> {
        match self {
            Out::Stream(w, _) => w.shutdown().await,
            Out::Msgs(s) => s.close().await,
        }
    }
}

async fn read_stream(mut r: ReadHalf<BoxIo>, mut codec: ChannelCodec, tx: mpsc::Sender<In>) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        loop {
            let next = codec.decode_json(&mut buf, false);
            match next {
                Ok(Some(f)) => {
                    if tx.send(In::Frame(f)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.send(In::Closed(format!("framing broken: {e}"))).await;
                    return;
                }
            }
        }
        buf.reserve(8 * 1024);
        match r.read_buf(&mut buf).await {
            Ok(0) => {
                let why = if buf.is_empty() {
                    "end of stream".to_string()
                } else {
                    format!("end of stream inside a frame ({} bytes)", buf.len())
                };
                let _ = tx.send(In::Closed(why)).await;
                return;
            }
            Ok(_) => {}
            Err(e) => {
                let _ = tx.send(In::Closed(format!("read failed: {e}"))).await;
                return;
            }
        }
    }
}

async fn read_msgs(mut s: SplitStream<BoxMsg>, tx: mpsc::Sender<In>) {
    while let Some(m) = s.next().await {
        let item = match m {
            Ok(Msg::Text(b)) => In::Frame(b),
            Ok(Msg::Binary(b)) => In::Binary(b),
            Ok(Msg::Close(c)) => In::Closed(match c {
                Some(c) => format!("close {} {}", c.code, c.reason),
                None => "close".into(),
            }),
            Err(e) => In::Closed(format!("read failed: {e}")),
        };
        let last = matches!(item, In::Closed(_));
        if tx.send(item).await.is_err() || last {
            return;
        }
    }
    let _ = tx.send(In::Closed("end of stream".into())).await;
}

/// What has come back so far.
struct Inbox {
    rx: mpsc::Receiver<In>,
    buffered: VecDeque<In>,
    closed: Option<String>,
    awaiting: HashMap<String, Instant>,
    resolved: HashSet<String>,
    got: HashMap<String, (Value, Option<String>, Instant)>,
    received_other: Vec<Unsolicited>,
    extra: Vec<Stray>,
}

impl Inbox {
    fn absorb(&mut self, item: In, wire: &Wire, plan: &Plan) {
        let bytes = match item {
            In::Frame(b) => b,
            In::Binary(b) => {
                self.extra.push(Stray {
                    kind: None,
                    method: None,
                    id: None,
                    why: format!("binary message of {} bytes", b.len()),
                });
                return;
            }
            In::Closed(why) => {
                self.closed.get_or_insert(why);
                return;
            }
        };
        let decoded = wire.decode_with(&plan.channel, &plan.peer, &bytes, &|id| {
            plan.methods.get(&key(id)).cloned()
        });
        let (msg, violation) = match decoded {
            Ok(m) => (Some(m), None),
            Err(v) => (v.partial.map(|b| *b), Some(v.reason)),
        };
        let Some(m) = msg else {
            self.extra.push(Stray {
                kind: None,
                method: None,
                id: None,
                why: format!(
                    "unreadable frame: {}",
                    violation.unwrap_or_else(|| "not a message".into())
                ),
            });
            return;
        };
        if matches!(m.kind, Kind::Response | Kind::Error)
            && let Some(corr) = &m.correlation
        {
            let k = key(corr);
            if self.awaiting.remove(&k).is_some() {
                self.got.insert(k, (m.value, violation, Instant::now()));
            } else {
                let why = if self.resolved.contains(&k) {
                    "late reply (already reported missing) or a second reply"
                } else {
                    "reply to no request of this replay"
                };
                self.extra.push(Stray {
                    kind: Some(m.kind),
                    method: plan.methods.get(&k).cloned(),
                    id: Some(corr.clone()),
                    why: why.into(),
                });
            }
            return;
        }
        self.received_other.push((Some(m.kind), m.method, m.id));
    }

    /// The next item from the peer, by `deadline`.
    async fn next(&mut self, deadline: Instant) -> Option<In> {
        if let Some(i) = self.buffered.pop_front() {
            return Some(i);
        }
        if self.closed.is_some() {
            return None;
        }
        match tokio::time::timeout_at(deadline, self.rx.recv()).await {
            Ok(Some(i)) => Some(i),
            Ok(None) => {
                self.closed.get_or_insert_with(|| "reader stopped".into());
                None
            }
            Err(_) => None,
        }
    }
}

/// Send `frame`, keeping the inbox drained meanwhile (a peer blocked on writing to us must
/// not block our write to it), by `deadline`.
async fn send_frame(
    out: &mut Out,
    inbox: &mut Inbox,
    frame: &[u8],
    deadline: Instant,
) -> Result<(), String> {
    let fut = out.send(frame);
    tokio::pin!(fut);
    let rx = &mut inbox.rx;
    let buffered = &mut inbox.buffered;
    let sent = tokio::time::timeout_at(deadline, async {
        loop {
            tokio::select! {
                r = &mut fut => return r,
                Some(i) = rx.recv(), if buffered.len() < INBOX => buffered.push_back(i),
            }
        }
    })
    .await;
    match sent {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("send failed: {e}")),
        Err(_) => Err("send did not complete within the deadline".into()),
    }
}

/// Replay the frames `side` sent on one recorded connection to `to`, and compare the replies.
pub async fn replay(
    path: &Path,
    to: &Endpoint,
    side: Dir,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let (plan, wire, conn) = plan(path, side, opts)?;
    let codec = wire.codec(&plan.channel)?;
    // The recording's contract fixes the ALPN and subprotocols, as `run` derives them,
    // unless the caller set its own.
    let mut endpoint =
        Options::for_contract(wire.contract(), &plan.channel, opts.endpoint.tls.clone());
    if !opts.endpoint.alpn.is_empty() {
        endpoint.alpn = opts.endpoint.alpn.clone();
    }
    if !opts.endpoint.subprotocols.is_empty() {
        endpoint.subprotocols = opts.endpoint.subprotocols.clone();
    }
    let connected = to.connect(&endpoint, None).await?;
    let (tx, rx) = mpsc::channel(256);
    let (mut out, reader) = match connected.conn {
        Conn::Stream(io) => {
            if !matches!(
                codec,
                ChannelCodec::LengthPrefixed(_)
                    | ChannelCodec::Ndjson(_)
                    | ChannelCodec::HeaderDelimited(_)
            ) {
                return Err(ReplayError::Setup(format!(
                    "channel {} is not a JSON byte-stream framing; it cannot be replayed over {to}",
                    plan.channel
                )));
            }
            let (r, w) = tokio::io::split(io);
            let reader = tokio::spawn(read_stream(r, codec.clone(), tx));
            (Out::Stream(w, codec), reader)
        }
        Conn::Messages(m) => {
            let (sink, stream) = m.split();
            (Out::Msgs(sink), tokio::spawn(read_msgs(stream, tx)))
        }
    };
    let mut ignore = Ignore {
        keys: DEFAULT_IGNORE.iter().map(|s| s.to_string()).collect(),
        pointers: HashSet::new(),
    };
    for i in &opts.ignore {
        if i.starts_with('/') {
            ignore.pointers.insert(i.clone());
        } else {
            ignore.keys.insert(i.clone());
        }
    }
    // The replier's own message id varies; the correlation member is what ties it to us.
    match wire
        .contract()
        .channels
        .get(&plan.channel)
        .and_then(|c| c.binding.as_ref())
    {
        Some(Binding::Envelope {
            id: Some(id),
            correlation: Some(_),
            ..
        })
        | Some(Binding::Tagged {
            id: Some(id),
            correlation: Some(_),
            ..
        }) => {
            ignore.pointers.insert(id.clone());
        }
        _ => {}
    }

    let mut inbox = Inbox {
        rx,
        buffered: VecDeque::new(),
        closed: None,
        awaiting: HashMap::new(),
        resolved: HashSet::new(),
        got: HashMap::new(),
        received_other: Vec::new(),
        extra: Vec::new(),
    };
    let mut expected = plan.expected.clone();
    let mut requests = Vec::new();
    let mut sent = 0;
    let mut failed: Option<String> = None;
    for (n, step) in plan.steps.iter().enumerate() {
        let (raw, request) = match step {
            Step::Request { raw, id, method } => (raw, Some((id, method))),
            Step::Send(raw) => (raw, None),
        };
        if let Some(why) = &failed {
            if let Some((id, method)) = request {
                requests.push(RequestOutcome {
                    index: n + 1,
                    method: method.clone(),
                    id: id.clone(),
                    status: Status::NotSent { why: why.clone() },
                    latency_ms: None,
                    violation: None,
                });
            }
            continue;
        }
        let k = request.map(|(id, _)| key(id));
        let t0 = Instant::now();
        if let Some(k) = &k {
            inbox.awaiting.insert(k.clone(), t0);
        }
        if let Err(why) = send_frame(&mut out, &mut inbox, raw, t0 + opts.deadline).await {
            failed = Some(why.clone());
            if let Some((id, method)) = request {
                inbox.awaiting.remove(k.as_deref().unwrap_or_default());
                requests.push(RequestOutcome {
                    index: n + 1,
                    method: method.clone(),
                    id: id.clone(),
                    status: Status::NotSent { why },
                    latency_ms: None,
                    violation: None,
                });
            }
            continue;
        }
        sent += 1;
        // Absorb whatever came while sending.
        while let Some(i) = inbox.buffered.pop_front() {
            inbox.absorb(i, &wire, &plan);
        }
        let (Some((id, method)), Some(k)) = (request, k) else {
            continue;
        };
        let deadline = t0 + opts.deadline;
        while !inbox.got.contains_key(&k) {
            match inbox.next(deadline).await {
                Some(i) => inbox.absorb(i, &wire, &plan),
                None => break,
            }
        }
        inbox.awaiting.remove(&k);
        inbox.resolved.insert(k.clone());
        let want = expected.get_mut(&k).and_then(VecDeque::pop_front);
        let outcome = match inbox.got.remove(&k) {
            None => RequestOutcome {
                index: n + 1,
                method: method.clone(),
                id: id.clone(),
                status: Status::Missing {
                    waited_ms: t0.elapsed().as_secs_f64() * 1000.0,
                    why: match &inbox.closed {
                        Some(c) => format!("peer closed: {c}"),
                        None => format!("no reply within {:?}", opts.deadline),
                    },
                },
                latency_ms: None,
                violation: None,
            },
            Some((value, violation, at)) => {
                let mut diffs = Vec::new();
                match &want {
                    Some(w) => diff("", w, &value, &ignore, &mut diffs),
                    None => diffs.push(Diff {
                        path: String::new(),
                        expected: None,
                        actual: Some(value),
                    }),
                }
                let status = if diffs.is_empty() {
                    Status::Same
                } else {
                    let more = diffs.len().saturating_sub(MAX_DIFFS);
                    diffs.truncate(MAX_DIFFS);
                    Status::Differs { diffs, more }
                };
                RequestOutcome {
                    index: n + 1,
                    method: method.clone(),
                    id: id.clone(),
                    status,
                    latency_ms: Some(at.saturating_duration_since(t0).as_secs_f64() * 1000.0),
                    violation,
                }
            }
        };
        requests.push(outcome);
    }
    // Late frames: events after the last request, replies that were slow.
    let settle = Instant::now() + opts.settle;
    while let Some(i) = inbox.next(settle).await {
        inbox.absorb(i, &wire, &plan);
    }
    let _ = tokio::time::timeout(opts.deadline, out.close()).await;
    reader.abort();

    // Match what the peer sent on its own against what it sent in the recording.
    let mut recorded = plan.recorded_unsolicited.clone();
    let mut extra = inbox.extra;
    for (kind, method, id) in inbox.received_other {
        match recorded
            .iter()
            .position(|(k, m, _)| *k == kind && *m == method)
        {
            Some(i) => {
                recorded.remove(i);
            }
            None => extra.push(Stray {
                kind,
                method,
                id,
                why: "not in the recording".into(),
            }),
        }
    }
    let unseen = recorded
        .into_iter()
        .map(|(kind, method, id)| Stray {
            kind,
            method,
            id,
            why: "in the recording, not received".into(),
        })
        .collect();
    Ok(ReplayReport {
        recording: path.display().to_string(),
        to: to.to_string(),
        route: plan.route,
        conn,
        side,
        sent,
        requests,
        extra,
        unseen,
        closed: inbox.closed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ign() -> Ignore {
        Ignore {
            keys: DEFAULT_IGNORE.iter().map(|s| s.to_string()).collect(),
            pointers: ["/id".to_string()].into(),
        }
    }

    #[test]
    fn diff_lists_paths_and_skips_ignored_members() {
        let e =
            json!({"v":1,"id":"c-1","timestamp":1.0,"payload":{"a":[1,2,3],"b":"x","t":{"ts":5}}});
        let a =
            json!({"v":1,"id":"c-9","timestamp":2.0,"payload":{"a":[1,5],"c":true,"t":{"ts":6}}});
        let mut out = Vec::new();
        diff("", &e, &a, &ign(), &mut out);
        let paths: Vec<&str> = out.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            ["/payload/a/1", "/payload/a/2", "/payload/b", "/payload/c"]
        );
        assert_eq!(out[1].actual, None);
        let mut same = Vec::new();
        diff(
            "",
            &json!({"token": REDACTED}),
            &json!({"token": "live"}),
            &ign(),
            &mut same,
        );
        assert!(same.is_empty(), "a redacted expectation matches any value");
    }

    #[test]
    fn secrets_are_put_back_only_where_redacted() {
        let mut v = json!({"type":"auth","token":REDACTED,"nested":[{"replyToken":REDACTED}],"other":REDACTED});
        let s = vec![
            ("token".to_string(), "T".to_string()),
            ("replytoken".into(), "R".into()),
        ];
        assert!(unredact(&mut v, &s));
        assert_eq!(
            v,
            json!({"type":"auth","token":"T","nested":[{"replyToken":"R"}],"other":REDACTED})
        );
    }
}
