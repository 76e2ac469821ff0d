//! The two kernel peers: `kernel-peer core` (dials the shell's control and
//! data endpoints, K-1) and `kernel-peer shell` (listens on both and takes one
//! core session after another, as a shell that restarts its core would).
//!
//! They speak the contract through the wire layer (`contract::wire::Wire`
//! validates what they send and receive), keep control and data on separate
//! writer tasks (a blocked data write never holds up a control message,
//! 4.0-D07), run the §13 heartbeat, and understand the suite's
//! `conformance:*` commands (docs/conformance.md). Each takes one `--break`:
//! the core's `credit` ignores the credit after the first grant; the shell's
//! `trace-id` sends the third request of its script without `trace_id`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use contract::ids::IdCounter;
use contract::io::{JsonCodec, SkipOversize};
use contract::model::{ActionKind, Kind};
use contract::wire::framing::BinaryCodec;
use contract::wire::{
    BinaryFrame, ChannelCodec, Correlator, FrameError, Message, ViolationClass, Wire,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, ReadHalf};
use tokio::sync::{Notify, mpsc};
use tokio_util::codec::{FramedRead, FramedWrite};

use contract_transport::conn::{BoxIo, Conn};
use contract_transport::endpoint::{Endpoint, Incoming, Listener, Options};

/// How long a connect or accept of the data channel may take.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// Control messages queued for the writer; a full queue is reported, never silent.
const OUT_QUEUE: usize = 4096;
/// Data frames queued for the writer (small: credit, not the queue, bounds what is in flight).
const DATA_QUEUE: usize = 8;
/// Payload bytes per audio frame.
const AUDIO_FRAME: usize = 1024;
/// Bytes per second of 16 kHz mono pcm_s16le.
const PCM_RATE: u64 = 32_000;

/// The peers.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum PeerCmd {
    /// A kernel core: dials the shell's control and data endpoints.
    Core(CoreArgs),
    /// A kernel shell: listens on control and data and takes core sessions one after another.
    Shell(ShellArgs),
}

/// `kernel-peer core` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CoreArgs {
    /// The shell's control endpoint (unix:PATH, tcp:HOST:PORT).
    #[arg(long)]
    pub control: String,
    /// The shell's data endpoint.
    #[arg(long)]
    pub data: String,
    /// Permission ttl in seconds put in permission.request.
    #[arg(long, default_value_t = 60)]
    pub ttl: u64,
    /// Break one rule on purpose.
    #[arg(long = "break", value_enum)]
    pub break_rule: Option<CoreBreak>,
}

/// Rules the core can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CoreBreak {
    /// After the first stream.credit, send all audio regardless of credit.
    Credit,
    /// Answer `conformance:stream` with a correlation_id the shell never sent.
    Correlation,
    /// Answer settings.describe with a control frame one byte over controlPayloadMax.
    Oversize,
    /// Answer invalid params (protocol.invalid_payload) with another category than the
    /// catalog's.
    Category,
    /// After answering a plain command, send a task.progress event with an empty payload.
    Event,
    /// After answering a plain command, ask permission.request whatever the shell declared.
    Capability,
    /// Open the audio.output stream of `conformance:speak` whatever the shell declared.
    SpeechUndeclared,
    /// After answering a plain command, stream a text whose last chunk comes after its
    /// stream.end (the text-stream machine's terminal state).
    AfterEnd,
    /// End every task with two task.done events.
    DoneTwice,
    /// Send the chunks of `conformance:stream` on a fresh trace instead of the command's.
    StreamTrace,
    /// Ping after half of heartbeatSilenceSeconds of silence.
    EarlyPing,
    /// Never declare a silent shell dead: keep pinging.
    Immortal,
}

/// `kernel-peer shell` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ShellArgs {
    /// Control endpoint to listen on.
    #[arg(long)]
    pub control: String,
    /// Data endpoint to listen on.
    #[arg(long)]
    pub data: String,
    /// Protocol versions to offer, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub versions: Vec<u64>,
    /// Exit after this many core sessions (0: never).
    #[arg(long, default_value_t = 0)]
    pub sessions: u64,
    /// Seconds to wait for a core to connect before giving up.
    #[arg(long, default_value_t = 120)]
    pub accept_timeout: u64,
    /// End the script with `conformance:speak N`: the core speaks N seconds of audio on
    /// the data channel, under the credit the shell grants (0: no audio).
    #[arg(long, default_value_t = 0)]
    pub speak: u64,
    /// Break one rule on purpose.
    #[arg(long = "break", value_enum)]
    pub break_rule: Option<ShellBreak>,
}

/// Rules the shell can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShellBreak {
    /// The third request of the script goes out without trace_id.
    TraceId,
    /// Answer programs.index on a fresh trace instead of the request's.
    AnswerTrace,
}

/// Why a peer stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// Bad arguments (endpoint).
    #[error("{0}")]
    Usage(String),
    /// A transport or protocol failure.
    #[error("{0}")]
    Failed(String),
}

/// Run a peer; its exit code.
pub async fn run(which: PeerCmd) -> Result<i32, PeerError> {
    match which {
        PeerCmd::Core(a) => core(kernel_wire()?, a).await,
        PeerCmd::Shell(a) => shell(kernel_wire()?, a).await,
    }
}

/// Seconds since the epoch, the envelope's `timestamp`.
fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as f64 / 1000.0)
        .unwrap_or(0.0)
}

fn kernel_wire() -> Result<Arc<Wire>, PeerError> {
    let c = contract::resolve("kernel").map_err(|e| PeerError::Failed(e.to_string()))?;
    Wire::new(Arc::new(c))
        .map(Arc::new)
        .map_err(|e| PeerError::Failed(e.to_string()))
}

fn stream_of(c: Conn) -> Result<BoxIo, PeerError> {
    match c {
        Conn::Stream(io) => Ok(io),
        Conn::Messages(_) => Err(PeerError::Usage(
            "the reference peers speak over byte streams (unix:, tcp:, quic://)".into(),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The link: framed halves and writer tasks.

/// The sending side shared by a peer's tasks: message ids, the version, the queues.
#[derive(Clone)]
struct Out {
    me: &'static str,
    prefix: &'static str,
    wire: Arc<Wire>,
    ids: Arc<AtomicU64>,
    v: Arc<AtomicU64>,
    tx: mpsc::Sender<Bytes>,
    data: Option<mpsc::Sender<BinaryFrame>>,
    /// `--break category`: this code's errors carry another category than the catalog's.
    off_catalog: Option<String>,
}

impl Out {
    fn id(&self) -> String {
        format!(
            "{}-{:04}",
            self.prefix,
            self.ids.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    fn msg(&self, kind: &str, method: Option<&str>, trace: &str, payload: Value) -> Value {
        let mut m = json!({"v": self.v.load(Ordering::Relaxed), "type": kind, "id": self.id(), "timestamp": now_secs(), "trace_id": trace, "payload": payload});
        if let (Some(method), Some(o)) = (method, m.as_object_mut()) {
            o.insert("method".into(), json!(method));
        }
        m
    }

    fn push(&self, m: &Value, check: bool) {
        let Ok(bytes) = serde_json::to_vec(m) else {
            return;
        };
        if check && let Err(v) = self.wire.decode("control", self.me, &bytes, None) {
            eprintln!(
                "{}: not sending a message the contract rejects ({}): {}",
                self.me,
                v.class.name(),
                v.reason
            );
            return;
        }
        if let Err(e) = self.tx.try_send(Bytes::from(bytes)) {
            eprintln!("{}: control queue: {e}; a message was not sent", self.me);
        }
    }

    fn send(&self, m: &Value) {
        self.push(m, true);
    }

    fn event(&self, method: &str, trace: &str, payload: Value, stream: Option<u64>) {
        let mut m = self.msg("event", Some(method), trace, payload);
        if let (Some(s), Some(o)) = (stream, m.as_object_mut()) {
            o.insert("stream_id".into(), json!(s));
        }
        self.send(&m);
    }

    /// Answer the ping `to` with a pong on `trace`.
    fn pong(&self, to: &Message, trace: &str) {
        let mut pong = self.msg("event", Some("pong"), trace, json!({}));
        if let (Some(id), Some(o)) = (&to.id, pong.as_object_mut()) {
            o.insert("correlation_id".into(), id.clone());
        }
        self.send(&pong);
    }

    fn request(&self, method: &str, trace: &str, payload: Value) -> Value {
        let m = self.msg("request", Some(method), trace, payload);
        self.send(&m);
        m
    }

    fn reply(&self, to: &Value, payload: Value) {
        let t = to
            .get("trace_id")
            .and_then(Value::as_str)
            .unwrap_or("t-none")
            .to_string();
        let mut m = self.msg("response", None, &t, payload);
        if let (Some(id), Some(o)) = (to.get("id"), m.as_object_mut()) {
            o.insert("correlation_id".into(), id.clone());
        }
        self.push(&m, false);
    }

    fn error(
        &self,
        to: Option<&Value>,
        trace: Option<&str>,
        code: &str,
        message: &str,
        details: Value,
    ) {
        let trace = trace
            .map(str::to_string)
            .unwrap_or_else(|| format!("t-{}", self.id()));
        // Category and retryable are the catalog's, never the caller's to restate.
        let c = self.wire.contract();
        let entry = c.error_for(&json!(code));
        let mut category = entry.map_or("protocol", |e| e.category.as_str());
        let retryable = entry.is_some_and(|e| e.retryable);
        let broken = self.off_catalog.as_deref() == Some(code);
        if broken && let Some(other) = c.errors.iter().find(|e| e.category != category) {
            eprintln!(
                "{}: --break category: {code} as {}",
                self.me, other.category
            );
            category = other.category.as_str();
        }
        let mut body =
            json!({"code": code, "category": category, "retryable": retryable, "message": message});
        if details.is_object()
            && let Some(o) = body.as_object_mut()
        {
            o.insert("details".into(), details);
        }
        let mut m = self.msg("error", None, &trace, body);
        if let (Some(id), Some(o)) = (to, m.as_object_mut()) {
            o.insert("correlation_id".into(), id.clone());
        }
        // A broken error is sent as is: checking it would stop it.
        self.push(&m, !broken);
    }
}

struct Link {
    out: Out,
    /// Control frames; an oversize one is skipped unread and comes out as its error (K-2).
    control: FramedRead<ReadHalf<BoxIo>, SkipOversize>,
    data: Option<FramedRead<ReadHalf<BoxIo>, BinaryCodec>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Link {
    fn new(
        wire: &Arc<Wire>,
        me: &'static str,
        control: BoxIo,
        data: Option<BoxIo>,
    ) -> Result<Self, PeerError> {
        let codec = JsonCodec::for_channel(wire, "control")
            .map_err(|e| PeerError::Failed(e.to_string()))?;
        let dcodec = match wire.codec("data") {
            Ok(ChannelCodec::Binary(c)) => c,
            _ => {
                return Err(PeerError::Failed(
                    "the kernel data channel is not binary".into(),
                ));
            }
        };
        let (r, w) = tokio::io::split(control);
        let (tx, mut rx) = mpsc::channel::<Bytes>(OUT_QUEUE);
        let cap = match &codec {
            JsonCodec::LengthPrefixed(c) => c.max(),
            _ => u64::MAX,
        };
        let mut fw = FramedWrite::new(w, codec.clone());
        let mut writers = vec![tokio::spawn(async move {
            while let Some(b) = rx.recv().await {
                // Only `--break oversize` queues a payload over the cap, which the codec
                // refuses to frame: its 4-byte big-endian prefix is written by hand.
                let sent = match u32::try_from(b.len()) {
                    Ok(n) if u64::from(n) > cap => {
                        let io = fw.get_mut();
                        let r = io.write_all(&n.to_be_bytes()).await;
                        r.is_ok() && io.write_all(&b).await.is_ok()
                    }
                    _ => fw.send(b).await.is_ok(),
                };
                if !sent {
                    break;
                }
            }
        })];
        let (data_tx, data_rd) = match data {
            Some(d) => {
                let (dr, dw) = tokio::io::split(d);
                let (dtx, mut drx) = mpsc::channel::<BinaryFrame>(DATA_QUEUE);
                let mut dfw = FramedWrite::new(dw, dcodec.clone());
                writers.push(tokio::spawn(async move {
                    while let Some(f) = drx.recv().await {
                        if dfw.send(&f).await.is_err() {
                            break;
                        }
                    }
                }));
                (Some(dtx), Some(FramedRead::new(dr, dcodec)))
            }
            None => (None, None),
        };
        Ok(Link {
            out: Out {
                me,
                prefix: if me == "core" { "c" } else { "s" },
                wire: wire.clone(),
                ids: Arc::new(AtomicU64::new(0)),
                v: Arc::new(AtomicU64::new(1)),
                tx,
                data: data_tx,
                off_catalog: None,
            },
            control: FramedRead::new(r, SkipOversize::new(codec)),
            data: data_rd,
            writers,
        })
    }

    fn abort(&self) {
        for w in &self.writers {
            w.abort();
        }
    }
}

/// The next frame of the data channel. Its end, or a frame that does not decode, closes it:
/// `None` then and ever after (a `select!` branch waiting for `Some` is left out).
async fn data_frame(
    data: &mut Option<FramedRead<ReadHalf<BoxIo>, BinaryCodec>>,
) -> Option<BinaryFrame> {
    let next = data.as_mut()?.next().await;
    match next {
        Some(Ok(f)) => Some(f),
        None | Some(Err(_)) => {
            *data = None;
            None
        }
    }
}

/// The §13 silence counter: any message resets it; a ping after `silence`, another each
/// `answer` after the last one went unanswered, dead `answer` after the `missed`th and no
/// sooner than silence + missed × answer after the peer's last word (the contract's limits). Each wait runs from the ping it follows, so a late tick never
/// shortens the next one.
struct Liveness {
    last_rx: Instant,
    last_ping: Option<Instant>,
    pings: u32,
    silence: Duration,
    answer: Duration,
    missed: u32,
    /// How much earlier than due each ping goes (none but for `--break early-ping`).
    early: Duration,
}

enum Beat {
    Nothing,
    Ping,
    Dead,
}

impl Liveness {
    fn new(wire: &Wire) -> Result<Self, PeerError> {
        let scale = contract::env_time_scale().map_err(PeerError::Usage)?;
        let l = wire.limits().clone().time_scaled(scale);
        let failed = |e: contract::AccessError| PeerError::Failed(e.to_string());
        let missed = l.count("missedPingsDead").map_err(failed)?;
        Ok(Liveness {
            last_rx: Instant::now(),
            last_ping: None,
            pings: 0,
            silence: l.duration("heartbeatSilenceSeconds").map_err(failed)?,
            answer: l.duration("pingAnswerSeconds").map_err(failed)?,
            missed: u32::try_from(missed).unwrap_or(u32::MAX),
            early: Duration::ZERO,
        })
    }

    fn heard(&mut self) {
        self.last_rx = Instant::now();
        self.last_ping = None;
        self.pings = 0;
    }

    fn tick(&mut self) -> Beat {
        let (since, wait) = match self.last_ping {
            None => (self.last_rx.elapsed(), self.silence),
            Some(p) => (p.elapsed(), self.answer),
        };
        if self.pings >= self.missed {
            // Dead a whole deadAfterSilenceSeconds after the peer's last word, however
            // early the pings went.
            let dead_at = self.silence + self.answer * self.missed;
            return match since >= wait && self.last_rx.elapsed() >= dead_at {
                true => Beat::Dead,
                false => Beat::Nothing,
            };
        }
        if since + self.early < wait {
            return Beat::Nothing;
        }
        self.pings += 1;
        self.last_ping = Some(Instant::now());
        Beat::Ping
    }
}

/// A stream's credit, shared between the reader (grants) and the sender task.
struct Credit {
    avail: Mutex<u64>,
    granted_once: std::sync::atomic::AtomicBool,
    closed: std::sync::atomic::AtomicBool,
    notify: Notify,
}

impl Credit {
    fn new() -> Arc<Self> {
        Arc::new(Credit {
            avail: Mutex::new(0),
            granted_once: std::sync::atomic::AtomicBool::new(false),
            closed: std::sync::atomic::AtomicBool::new(false),
            notify: Notify::new(),
        })
    }

    fn add(&self, n: u64) {
        let mut a = self.avail.lock().unwrap_or_else(PoisonError::into_inner);
        *a = a.saturating_add(n);
        self.granted_once.store(true, Ordering::Relaxed);
        self.notify.notify_one();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// Take up to `want` bytes of credit, waiting for some (at most `wait`); 0 when none came.
    async fn take(&self, want: u64, wait: Duration, ignore_credit: bool) -> u64 {
        let until = Instant::now() + wait;
        loop {
            if self.closed.load(Ordering::Relaxed) {
                return 0;
            }
            if ignore_credit && self.granted_once.load(Ordering::Relaxed) {
                return want;
            }
            {
                let mut a = self.avail.lock().unwrap_or_else(PoisonError::into_inner);
                if *a > 0 {
                    let n = want.min(*a);
                    *a -= n;
                    return n;
                }
            }
            if tokio::time::timeout_at(until.into(), self.notify.notified())
                .await
                .is_err()
            {
                return 0;
            }
        }
    }
}

/// A stream id of an event (`u64::MAX`, no stream, without one).
fn stream_of_event(m: &Message) -> u64 {
    m.value
        .get("stream_id")
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX)
}

/// A `stream.credit` for one of the peer's own streams in `credits`: more to send.
fn credit_granted(credits: &HashMap<u64, Arc<Credit>>, m: &Message) {
    let b = m
        .value
        .pointer("/payload/bytes")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if let Some(c) = credits.get(&stream_of_event(m)) {
        c.add(b);
    }
}

/// A `stream.close` of one of the peer's own streams: its sender stops. The stream's id.
fn credit_closed(credits: &mut HashMap<u64, Arc<Credit>>, m: &Message) -> u64 {
    let s = stream_of_event(m);
    if let Some(c) = credits.remove(&s) {
        c.close();
    }
    s
}

/// Send `total` bytes of a 440 Hz tone on `stream`, within credit (unless `ignore_credit`).
async fn send_pcm(
    out: Out,
    stream: u64,
    total: u64,
    credit: Arc<Credit>,
    ignore_credit: bool,
    trace: String,
    close_after: bool,
) {
    let Some(data) = out.data.clone() else { return };
    let mut sent = 0u64;
    let mut seq = 0u64;
    while sent < total {
        let want = (total - sent).min(AUDIO_FRAME as u64);
        let n = credit
            .take(want, Duration::from_secs(60), ignore_credit)
            .await;
        if n == 0 {
            break;
        }
        let payload: Vec<u8> = (0..n)
            .map(|i| (((sent + i) as f64 * 0.0863).sin() * 100.0) as i8 as u8)
            .collect();
        if data
            .send(BinaryFrame {
                fields: vec![stream, seq],
                payload: Bytes::from(payload),
            })
            .await
            .is_err()
        {
            return;
        }
        seq += 1;
        sent += n;
    }
    if close_after && !credit.closed.load(Ordering::Relaxed) {
        out.event("stream.close", &trace, json!({}), Some(stream));
    }
}

fn decode(
    wire: &Wire,
    from: &str,
    bytes: &[u8],
    pending: &Correlator,
    me: &str,
) -> Result<Message, Box<contract::wire::Violation>> {
    wire.decode_with("control", from, bytes, &|id| pending.peek(me, id))
        .map_err(Box::new)
}

/// A request whose id breaks its sender's rules in the contract (`parties.*.ids`: the
/// kernel's ids are unique in a session, K-5) gets the rules' error, as the proxy's
/// engine would give it: its code and the reason, or `None` when the id is fine.
fn id_broken(
    wire: &Wire,
    from: &str,
    ids: &mut IdCounter,
    m: &Message,
) -> Option<(String, String)> {
    if m.kind != Kind::Request {
        return None;
    }
    let rules = wire.contract().parties.get(from)?.ids.as_ref()?;
    let broke = ids.admit(rules, m.id.as_ref()?).err()?;
    let code = rules.action.as_ref()?.code.as_ref()?.as_str()?.to_string();
    Some((code, format!("{}: {}", broke.rule, broke.why)))
}

fn track(pending: &mut Correlator, m: &Message, sender: &str, other: &str) {
    match m.kind {
        Kind::Request => {
            if let (Some(id), Some(method)) = (&m.id, &m.method) {
                let _ = pending.open(sender, id, method);
            }
        }
        Kind::Response | Kind::Error => {
            if let Some(id) = &m.correlation {
                let _ = pending.close(other, id);
            }
        }
        _ => {}
    }
}

/// A control frame over the cap was skipped unread: report it, without a correlation_id
/// (its id was never read), as the contract's oversize rule says (K-2).
fn answer_oversize(out: &Out, wire: &Wire, e: &FrameError, not_ready: bool) {
    let v = wire.violation(ViolationClass::Oversize, e.to_string());
    answer_violation(out, &v, &[], not_ready);
}

/// Answer a message the contract rejects as K-15 says: requests get the violation's code,
/// events are ignored. `not_ready` answers everything but hello before the handshake.
fn answer_violation(out: &Out, v: &contract::wire::Violation, raw: &[u8], not_ready: bool) {
    let partial = v
        .partial
        .as_ref()
        .map(|p| p.value.clone())
        .or_else(|| serde_json::from_slice::<Value>(raw).ok())
        .unwrap_or(Value::Null);
    let id = partial.get("id").cloned();
    let trace = partial.get("trace_id").and_then(Value::as_str);
    let is_event = partial.get("type").and_then(Value::as_str) == Some("event");
    let method = partial.get("method").and_then(Value::as_str).unwrap_or("");
    if not_ready
        && method != "hello"
        && !matches!(v.class, ViolationClass::Parse | ViolationClass::Invalid)
    {
        out.error(
            id.as_ref(),
            trace,
            "protocol.not_ready",
            "Рукопожатие ещё не выполнено.",
            json!({"method": method}),
        );
        return;
    }
    if is_event
        && matches!(
            v.class,
            ViolationClass::InvalidParams
                | ViolationClass::WrongDirection
                | ViolationClass::UnknownNotification
        )
    {
        return;
    }
    if v.action != Some(ActionKind::ReplyError) {
        return;
    }
    let code = v
        .code
        .as_ref()
        .and_then(Value::as_str)
        .unwrap_or("protocol.invalid_envelope");
    let details = if v.details.is_object() {
        v.details.clone()
    } else {
        json!({})
    };
    out.error(id.as_ref(), trace, code, &v.reason, details);
}

// ---------------------------------------------------------------------------------------------
// The core.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Running,
    Cancelling,
    Done,
    Cancelled,
}

struct Ask {
    request_id: String,
    command: Value,
    fingerprint: String,
}

/// A confirmation the core issued to itself after a yes (§11): never on the wire.
struct Confirmation {
    fingerprint: String,
    expires: Instant,
    used: bool,
}

enum Internal {
    AskExpired(String),
}

async fn core(wire: Arc<Wire>, a: CoreArgs) -> Result<i32, PeerError> {
    let parse = |s: &str| {
        s.parse::<Endpoint>()
            .map_err(|e| PeerError::Usage(e.to_string()))
    };
    let (ce, de) = (parse(&a.control)?, parse(&a.data)?);
    let opts = Options::default();
    let control = ce
        .connect(&opts, None)
        .await
        .map_err(|e| PeerError::Failed(e.to_string()))?;
    let data = de
        .connect(&opts, None)
        .await
        .map_err(|e| PeerError::Failed(e.to_string()))?;
    let mut link = Link::new(
        &wire,
        "core",
        stream_of(control.conn)?,
        Some(stream_of(data.conn)?),
    )?;
    if a.break_rule == Some(CoreBreak::Category) {
        // The code the contract answers invalid params with.
        let code = wire.violation(ViolationClass::InvalidParams, "").code;
        let code = code.as_ref().and_then(Value::as_str).map(str::to_string);
        link.out.off_catalog = code;
    }
    let out = link.out.clone();
    let ignore_credit = a.break_rule == Some(CoreBreak::Credit);
    let mut pending = Correlator::new(contract::io::DEFAULT_PENDING);
    // The shell's request ids, checked by its rules in the contract.
    let mut shell_ids = IdCounter::new();
    let mut ready = false;
    let mut shell_caps: Vec<String> = Vec::new();
    let mut live = Liveness::new(&wire)?;
    match a.break_rule {
        Some(CoreBreak::EarlyPing) => live.early = live.silence / 2,
        Some(CoreBreak::Immortal) => live.missed = u32::MAX,
        _ => {}
    }
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let (itx, mut irx) = mpsc::channel::<Internal>(64);
    let tasks: Arc<Mutex<HashMap<String, TaskState>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut credits: HashMap<u64, Arc<Credit>> = HashMap::new();
    let mut asks: HashMap<String, Ask> = HashMap::new();
    let mut confirmations: HashMap<String, Confirmation> = HashMap::new();
    let mut next_stream = 7u64;
    let mut next_task = 0u64;
    let mut next_ask = 0u64;
    let session = format!(
        "{:08x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    let code = loop {
        tokio::select! {
            f = link.control.next() => {
                let bytes = match f {
                    None => break 0,
                    Some(Err(e)) => { eprintln!("core: control framing: {e}"); break 1; }
                    Some(Ok(Err(e))) => { answer_oversize(&out, &wire, &e, !ready); continue; }
                    Some(Ok(Ok(b))) => b,
                };
                live.heard();
                let m = match decode(&wire, "shell", &bytes, &pending, "core") {
                    Ok(m) => m,
                    Err(v) => { answer_violation(&out, &v, &bytes, !ready); continue; }
                };
                if let Some((code, why)) = id_broken(&wire, "shell", &mut shell_ids, &m) {
                    out.error(m.id.as_ref(), m.trace.as_deref(), &code, &why, json!({"fields": ["id"]}));
                    continue;
                }
                track(&mut pending, &m, "shell", "core");
                let method = m.method.clone().unwrap_or_default();
                let trace = m.trace.clone().unwrap_or_else(|| "t-none".into());
                if !ready {
                    if m.kind == Kind::Request && method == "hello" {
                        let offered: Vec<u64> = m.value.pointer("/payload/protocol_versions").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
                        if offered.contains(&1) {
                            shell_caps = m.value.pointer("/payload/capabilities").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default();
                            out.reply(&m.value, json!({"protocol_versions": [1], "protocol_version": 1, "core_version": "4.0.0-rust", "capabilities": ["stt", "tts", "reminders", "llm", "plugins"], "session_id": session}));
                            ready = true;
                        } else {
                            out.error(m.id.as_ref(), Some(&trace), "protocol.incompatible", &format!("Оболочка поддерживает версии протокола {offered:?}, ядро — только версию 1. Обновите оболочку или ядро."), json!({"shell_versions": offered, "core_versions": [1]}));
                        }
                    } else if m.kind != Kind::Response && m.kind != Kind::Error {
                        out.error(m.id.as_ref(), Some(&trace), "protocol.not_ready", "Рукопожатие ещё не выполнено.", json!({"method": method}));
                    }
                    continue;
                }
                if m.value.get("v").and_then(Value::as_u64) != Some(1) {
                    out.error(m.id.as_ref(), Some(&trace), "protocol.invalid_envelope", "v is not the negotiated version", json!({"fields": ["v"]}));
                    continue;
                }
                match (m.kind, method.as_str()) {
                    (Kind::Request, "hello") => out.error(m.id.as_ref(), Some(&trace), "protocol.unknown_method", "the handshake is done", json!({"method": "hello"})),
                    (Kind::Request, "command.handle") => {
                        let text = m.value.pointer("/payload/text").and_then(Value::as_str).unwrap_or("").to_string();
                        let mut words = text.split_whitespace();
                        let verb = words.next().unwrap_or("");
                        let n: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(1).clamp(1, 3600);
                        match verb {
                            "conformance:speak" => {
                                out.reply(&m.value, json!({"text": "Говорю."}));
                                if shell_caps.iter().any(|c| c == "audio.output") || a.break_rule == Some(CoreBreak::SpeechUndeclared) {
                                    let s = next_stream; next_stream += 1;
                                    out.event("stream.open", &trace, json!({"kind": "audio.output", "stream_id": s, "format": {"encoding": "pcm_s16le", "rate": 16000, "channels": 1}}), None);
                                    let c = Credit::new();
                                    credits.insert(s, c.clone());
                                    tokio::spawn(send_pcm(out.clone(), s, n * PCM_RATE, c, ignore_credit, trace.clone(), true));
                                }
                            }
                            "conformance:stream" => {
                                let s = next_stream; next_stream += 1;
                                let mut to = m.value.clone();
                                if a.break_rule == Some(CoreBreak::Correlation) {
                                    to["id"] = json!("s-never-sent");
                                }
                                out.reply(&to, json!({"stream_id": s}));
                                let chunks = match a.break_rule {
                                    Some(CoreBreak::StreamTrace) => format!("t-{}", out.id()),
                                    _ => trace.clone(),
                                };
                                for piece in ["Столица Австралии — ", "Канберра", "."] {
                                    out.event("stream.chunk", &chunks, json!({"text": piece}), Some(s));
                                }
                                out.event("stream.end", &trace, json!({"reason": "done"}), Some(s));
                            }
                            "conformance:task" => {
                                next_task += 1;
                                let id = format!("task-{next_task}");
                                out.reply(&m.value, json!({"task_id": id}));
                                tasks.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), TaskState::Running);
                                let finals = if a.break_rule == Some(CoreBreak::DoneTwice) { 2 } else { 1 };
                                tokio::spawn(run_task(out.clone(), tasks.clone(), (id, finals), n, trace.clone()));
                            }
                            "conformance:power-off" => {
                                let fingerprint = "power_action:shutdown".to_string();
                                if !shell_caps.iter().any(|c| c == "permissions") {
                                    // Nobody can confirm: the tool refuses without a confirmation.
                                    if let Err((code, msg)) = power_action(&mut confirmations, &fingerprint, None) {
                                        out.error(m.id.as_ref(), Some(&trace), code, msg, json!({"tool": "power_action"}));
                                    }
                                    continue;
                                }
                                next_ask += 1;
                                let request_id = format!("ask-{next_ask:04}");
                                let req = out.request("permission.request", &trace, json!({"request_id": request_id, "permission": "system.power", "action": "shutdown", "reason": "Пользователь сказал «выключи компьютер»", "preview": "Компьютер будет выключен немедленно.", "ttl": a.ttl}));
                                if let (Some(id), Some(method)) = (req.get("id"), req.get("method").and_then(Value::as_str)) {
                                    let _ = pending.open("core", id, method);
                                }
                                let env_id = req.get("id").and_then(Value::as_str).unwrap_or("").to_string();
                                asks.insert(env_id.clone(), Ask { request_id, command: m.value.clone(), fingerprint });
                                let itx = itx.clone();
                                let ttl = Duration::from_secs(a.ttl);
                                tokio::spawn(async move {
                                    tokio::time::sleep(ttl).await;
                                    let _ = itx.send(Internal::AskExpired(env_id)).await;
                                });
                            }
                            _ => {
                                out.reply(&m.value, json!({"text": format!("Вы сказали: {text}")}));
                                if a.break_rule == Some(CoreBreak::Event) {
                                    // Unchecked: the point is a message the contract rejects.
                                    out.push(&out.msg("event", Some("task.progress"), &trace, json!({})), false);
                                }
                                if a.break_rule == Some(CoreBreak::AfterEnd) {
                                    let s = next_stream; next_stream += 1;
                                    out.event("stream.chunk", &trace, json!({"text": "Готово"}), Some(s));
                                    out.event("stream.end", &trace, json!({"reason": "done"}), Some(s));
                                    out.event("stream.chunk", &trace, json!({"text": "."}), Some(s));
                                }
                                if a.break_rule == Some(CoreBreak::Capability) {
                                    out.request("permission.request", &trace, json!({"request_id": format!("ask-{}", out.id()), "permission": "system.power", "action": "shutdown", "reason": "--break capability", "preview": "Компьютер будет выключен.", "ttl": a.ttl}));
                                }
                            }
                        }
                    }
                    (Kind::Request, "task.cancel") => {
                        let id = m.value.pointer("/payload/task_id").and_then(Value::as_str).unwrap_or("");
                        let mut t = tasks.lock().unwrap_or_else(PoisonError::into_inner);
                        // The receipt is queued before the runner can see Cancelling: receipt first (§9).
                        match t.get(id).copied() {
                            Some(TaskState::Running) => {
                                out.reply(&m.value, json!({"accepted": true, "status": "running"}));
                                t.insert(id.to_string(), TaskState::Cancelling);
                            }
                            Some(TaskState::Done) => out.reply(&m.value, json!({"accepted": false, "status": "done"})),
                            Some(TaskState::Cancelled | TaskState::Cancelling) => out.reply(&m.value, json!({"accepted": false, "status": "cancelled"})),
                            None => out.reply(&m.value, json!({"accepted": false, "status": "unknown"})),
                        }
                    }
                    (Kind::Request, "settings.describe") if a.break_rule == Some(CoreBreak::Oversize) => {
                        let cap = wire.limits().cap("controlPayloadMax").unwrap_or(0);
                        let pad = "x".repeat(usize::try_from(cap).unwrap_or(0));
                        eprintln!("core: --break oversize: answering settings.describe with more than {cap} bytes");
                        out.reply(&m.value, json!({"settings": {"voice.enabled": true}, "pad": pad}));
                    }
                    (Kind::Request, "settings.describe") => out.reply(&m.value, json!({"settings": {"voice.enabled": true}})),
                    (Kind::Request, _) => out.error(m.id.as_ref(), Some(&trace), "protocol.unknown_method", "unknown method", json!({"method": method})),
                    (Kind::Response | Kind::Error, _) => {
                        let corr = m.correlation.as_ref().and_then(Value::as_str).unwrap_or("").to_string();
                        let Some(ask) = asks.remove(&corr) else { continue };
                        let ct = ask.command.get("trace_id").and_then(Value::as_str).map(str::to_string);
                        let granted = m.kind == Kind::Response
                            && m.value.pointer("/payload/granted") == Some(&json!(true))
                            && m.value.pointer("/payload/request_id").and_then(Value::as_str) == Some(ask.request_id.as_str());
                        if !granted {
                            out.error(ask.command.get("id"), ct.as_deref(), "permission.denied", "Пользователь не разрешил выключение.", json!({"permission": "system.power"}));
                            continue;
                        }
                        // Yes: the core issues itself a single-use confirmation and calls the tool with it.
                        let cid = format!("conf-{}", out.id());
                        confirmations.insert(cid.clone(), Confirmation { fingerprint: ask.fingerprint.clone(), expires: Instant::now() + Duration::from_secs(a.ttl), used: false });
                        match power_action(&mut confirmations, &ask.fingerprint, Some(&cid)) {
                            Ok(()) => out.reply(&ask.command, json!({"text": "Выключаю компьютер."})),
                            Err((code, msg)) => out.error(ask.command.get("id"), ct.as_deref(), code, msg, json!({"tool": "power_action"})),
                        }
                    }
                    (Kind::Event, "ping") => out.pong(&m, &trace),
                    (Kind::Event, "stream.credit") => credit_granted(&credits, &m),
                    (Kind::Event, "stream.close") => { credit_closed(&mut credits, &m); }
                    _ => {}
                }
            }
            Some(f) = data_frame(&mut link.data) => {
                // Microphone audio: "processed" at once, so its credit is given back (K-10).
                let s = f.fields.first().copied().unwrap_or(0);
                out.event("stream.credit", "t-mic", json!({"bytes": f.payload.len().max(1)}), Some(s));
            }
            Some(Internal::AskExpired(env_id)) = irx.recv() => {
                if let Some(ask) = asks.remove(&env_id) {
                    let ct = ask.command.get("trace_id").and_then(Value::as_str).map(str::to_string);
                    out.error(ask.command.get("id"), ct.as_deref(), "permission.expired", "Время на ответ истекло: выключение отменено.", json!({"permission": "system.power"}));
                }
            }
            _ = tick.tick() => {
                if !ready { continue; }
                match live.tick() {
                    Beat::Nothing => {}
                    Beat::Ping => out.event("ping", &format!("t-ping-{}", out.id()), json!({}), None),
                    Beat::Dead => { eprintln!("core: the shell missed {} pings: it is dead, exiting", live.missed); break 1; }
                }
            }
        }
    };
    for c in credits.values() {
        c.close();
    }
    link.abort();
    Ok(code)
}

/// The dangerous tool: runs only with a valid, unexpired, unused confirmation for these arguments.
fn power_action(
    confirmations: &mut HashMap<String, Confirmation>,
    fingerprint: &str,
    id: Option<&str>,
) -> Result<(), (&'static str, &'static str)> {
    let Some(id) = id else {
        return Err((
            "confirmation.required",
            "Для выключения компьютера нужно подтверждение.",
        ));
    };
    let Some(c) = confirmations.get_mut(id) else {
        return Err(("confirmation.required", "Подтверждение не найдено."));
    };
    if c.fingerprint != fingerprint {
        return Err((
            "confirmation.required",
            "Подтверждение выдано для другого вызова.",
        ));
    }
    if c.used || Instant::now() > c.expires {
        return Err((
            "confirmation.expired",
            "Подтверждение истекло или уже использовано.",
        ));
    }
    c.used = true;
    Ok(())
}

/// Run task `id` for `secs`, ending it with `finals` task.done events (more than one only
/// under `--break done-twice`).
async fn run_task(
    out: Out,
    tasks: Arc<Mutex<HashMap<String, TaskState>>>,
    (id, finals): (String, usize),
    secs: u64,
    trace: String,
) {
    let start = Instant::now();
    let total = Duration::from_secs(secs);
    let mut partial_sent = false;
    let mut next_progress = Instant::now();
    loop {
        {
            let mut t = tasks.lock().unwrap_or_else(PoisonError::into_inner);
            match t.get(&id).copied() {
                Some(TaskState::Cancelling) => {
                    out.event("task.cancelled", &trace, json!({"task_id": id}), None);
                    t.insert(id.clone(), TaskState::Cancelled);
                    return;
                }
                Some(TaskState::Running) => {}
                _ => return,
            }
            if start.elapsed() >= total {
                for _ in 0..finals {
                    let done = json!({"task_id": id, "result": "Готово."});
                    out.event("task.done", &trace, done, None);
                }
                t.insert(id.clone(), TaskState::Done);
                return;
            }
            if Instant::now() >= next_progress {
                let fraction = (start.elapsed().as_secs_f64() / secs as f64).min(1.0);
                out.event(
                    "task.progress",
                    &trace,
                    json!({"task_id": id, "fraction": fraction, "message": "Работаю"}),
                    None,
                );
                next_progress = Instant::now() + Duration::from_millis(500);
            }
            if !partial_sent && start.elapsed() * 2 >= total.min(Duration::from_secs(1)) {
                out.event(
                    "task.partial",
                    &trace,
                    json!({"task_id": id, "data": {"half": true}}),
                    None,
                );
                partial_sent = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The shell.

async fn accept(l: &Listener, wait: Duration) -> Result<Option<BoxIo>, PeerError> {
    match tokio::time::timeout(wait, l.accept()).await {
        Err(_) => Ok(None),
        Ok(Err(e)) => Err(PeerError::Failed(format!("accept: {e}"))),
        Ok(Ok(Incoming::Conn { conn, .. })) => stream_of(conn).map(Some),
        Ok(Ok(_)) => Err(PeerError::Usage(
            "the reference shell listens on byte-stream endpoints only".into(),
        )),
    }
}

async fn shell(wire: Arc<Wire>, a: ShellArgs) -> Result<i32, PeerError> {
    let parse = |s: &str| {
        s.parse::<Endpoint>()
            .map_err(|e| PeerError::Usage(e.to_string()))
    };
    let opts = Options::default();
    let lc = parse(&a.control)?
        .listen(&opts)
        .await
        .map_err(|e| PeerError::Usage(e.to_string()))?;
    let ld = parse(&a.data)?
        .listen(&opts)
        .await
        .map_err(|e| PeerError::Usage(e.to_string()))?;
    eprintln!("shell: listening on {} and {}", lc.local(), ld.local());
    let mut sessions = 0u64;
    loop {
        let Some(control) = accept(&lc, Duration::from_secs(a.accept_timeout)).await? else {
            eprintln!("shell: no core connected within {} s", a.accept_timeout);
            return Ok(if sessions > 0 { 0 } else { 1 });
        };
        let data = accept(&ld, CONNECT_WAIT).await?;
        if data.is_none() {
            eprintln!("shell: the core connected no data channel within {CONNECT_WAIT:?}");
        }
        sessions += 1;
        let end = shell_session(&wire, &a, control, data).await;
        eprintln!("shell: session {sessions} ended: {end}; waiting for the core to restart");
        if a.sessions != 0 && sessions >= a.sessions {
            return Ok(0);
        }
    }
}

async fn shell_session(
    wire: &Arc<Wire>,
    a: &ShellArgs,
    control: BoxIo,
    data: Option<BoxIo>,
) -> String {
    let mut link = match Link::new(wire, "shell", control, data) {
        Ok(l) => l,
        Err(e) => return e.to_string(),
    };
    let out = link.out.clone();
    let mut pending = Correlator::new(contract::io::DEFAULT_PENDING);
    // The core's request ids, checked by its rules in the contract.
    let mut core_ids = IdCounter::new();
    let mut traces = 0u64;
    let mut trace = || {
        traces += 1;
        format!("t-shell-{traces}")
    };
    let hello = out.request("hello", &trace(), json!({"protocol_versions": a.versions, "shell_version": "4.0.0-rust", "capabilities": ["audio.input", "audio.output", "permissions", "window.actions"], "locale": "ru"}));
    if let (Some(id), Some(m)) = (hello.get("id"), hello.get("method").and_then(Value::as_str)) {
        let _ = pending.open("shell", id, m);
    }
    let hello_deadline = Instant::now() + CONNECT_WAIT;
    let mut ready = false;
    let mut script: Vec<(&str, Value)> = vec![
        (
            "command.handle",
            json!({"text": "привет", "source": "typed"}),
        ),
        ("settings.describe", json!({})),
        (
            "command.handle",
            json!({"text": "который час", "source": "voice"}),
        ),
        (
            "command.handle",
            json!({"text": "спасибо", "source": "typed"}),
        ),
    ];
    let speak = format!("conformance:speak {}", a.speak);
    if a.speak > 0 {
        script.push(("command.handle", json!({"text": speak, "source": "typed"})));
    }
    script.reverse();
    let mut sent_script = 0usize;
    let mut live = match Liveness::new(wire) {
        Ok(l) => l,
        Err(e) => return e.to_string(),
    };
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut mic: HashMap<u64, Arc<Credit>> = HashMap::new();
    let mut playing: HashSet<u64> = HashSet::new();
    let end = loop {
        tokio::select! {
            f = link.control.next() => {
                let bytes = match f {
                    None => break "the core closed the control channel".to_string(),
                    Some(Err(e)) => break format!("control framing: {e}"),
                    Some(Ok(Err(e))) => { answer_oversize(&out, wire, &e, !ready); continue; }
                    Some(Ok(Ok(b))) => b,
                };
                live.heard();
                let m = match decode(wire, "core", &bytes, &pending, "shell") {
                    Ok(m) => m,
                    Err(v) => { answer_violation(&out, &v, &bytes, !ready); continue; }
                };
                if let Some((code, why)) = id_broken(wire, "core", &mut core_ids, &m) {
                    out.error(m.id.as_ref(), m.trace.as_deref(), &code, &why, json!({"fields": ["id"]}));
                    continue;
                }
                track(&mut pending, &m, "core", "shell");
                let method = m.method.clone().unwrap_or_default();
                if !ready {
                    if m.correlation.as_ref() == hello.get("id") {
                        match m.kind {
                            Kind::Response => {
                                let v = m.value.pointer("/payload/protocol_version").and_then(Value::as_u64).unwrap_or(1);
                                out.v.store(v, Ordering::Relaxed);
                                ready = true;
                            }
                            _ => {
                                let text = m.value.pointer("/payload/message").and_then(Value::as_str).unwrap_or("");
                                eprintln!("shell: the core refused the handshake: {text}");
                                break "handshake refused".to_string();
                            }
                        }
                    } else if m.kind == Kind::Request {
                        // The shell mirrors the session machine: before the handshake a
                        // request gets protocol.not_ready, as the core's would.
                        out.error(m.id.as_ref(), m.trace.as_deref(), "protocol.not_ready", "the handshake is not done", json!({"method": method}));
                    }
                    continue;
                }
                match (m.kind, method.as_str()) {
                    (Kind::Request, "permission.request") => {
                        let rid = m.value.pointer("/payload/request_id").cloned().unwrap_or(json!("?"));
                        out.reply(&m.value, json!({"request_id": rid, "granted": true, "scope": "once"}));
                    }
                    (Kind::Request, "programs.index") => {
                        let mut to = m.value.clone();
                        if a.break_rule == Some(ShellBreak::AnswerTrace) {
                            to["trace_id"] = json!(trace());
                        }
                        out.reply(&to, json!({"programs": [{"name": "Telegram", "path": "/usr/bin/telegram-desktop", "aliases": ["телеграм"]}]}));
                    }
                    (Kind::Request, _) => out.error(m.id.as_ref(), m.trace.as_deref(), "protocol.unknown_method", "unknown method", json!({"method": method})),
                    (Kind::Event, "ping") => {
                        let t = m.trace.clone().unwrap_or_else(&mut trace);
                        out.pong(&m, &t);
                    }
                    (Kind::Event, "stream.open") => {
                        let s = m.value.pointer("/payload/stream_id").and_then(Value::as_u64).unwrap_or(0);
                        let t = m.trace.clone().unwrap_or_else(&mut trace);
                        match m.value.pointer("/payload/kind").and_then(Value::as_str) {
                            Some("audio.output") => {
                                playing.insert(s);
                                out.event("stream.credit", &t, json!({"bytes": 16384}), Some(s));
                            }
                            Some("audio.input") => {
                                let c = Credit::new();
                                mic.insert(s, c.clone());
                                tokio::spawn(send_pcm(out.clone(), s, 30 * PCM_RATE, c, false, t, false));
                            }
                            _ => {}
                        }
                    }
                    (Kind::Event, "stream.credit") => credit_granted(&mic, &m),
                    (Kind::Event, "stream.close") => {
                        let s = credit_closed(&mut mic, &m);
                        playing.remove(&s);
                    }
                    _ => {}
                }
            }
            Some(f) = data_frame(&mut link.data) => {
                // Played: the bytes are processed, so their credit is granted back (K-10).
                let s = f.fields.first().copied().unwrap_or(0);
                if playing.contains(&s) && !f.payload.is_empty() {
                    out.event("stream.credit", "t-play", json!({"bytes": f.payload.len()}), Some(s));
                }
            }
            _ = tick.tick() => {
                if !ready {
                    if Instant::now() > hello_deadline { break "no hello reply within 10 s".to_string(); }
                    continue;
                }
                if let Some((method, payload)) = script.pop() {
                    sent_script += 1;
                    let t = trace();
                    let mut msg = out.msg("request", Some(method), &t, payload);
                    if sent_script == 3 && a.break_rule == Some(ShellBreak::TraceId) {
                        if let Some(o) = msg.as_object_mut() { o.remove("trace_id"); }
                        out.push(&msg, false);
                    } else {
                        out.send(&msg);
                    }
                    if let (Some(id), Some(o)) = (msg.get("id"), msg.get("method").and_then(Value::as_str)) {
                        let _ = pending.open("shell", id, o);
                    }
                }
                match live.tick() {
                    Beat::Nothing => {}
                    Beat::Ping => out.event("ping", &trace(), json!({}), None),
                    Beat::Dead => break format!("the core missed {} pings: dead", live.missed),
                }
            }
        }
    };
    for c in mic.values() {
        c.close();
    }
    // Let queued messages go out, then drop the session (the core sees the channels end).
    tokio::time::sleep(Duration::from_millis(50)).await;
    link.abort();
    end
}
