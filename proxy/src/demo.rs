//! `contract-proxy demo`: a scripted kernel session through a real proxy, with
//! nothing to install beyond the build.
//!
//! Two in-process peers speak the kernel contract (`schema/contracts/kernel.json`)
//! through the proxy, assembled as `contract-proxy run` assembles it ([`crate::server::Proxy`]): a control
//! route and its paired data route, observe mode, the live view ([`Logger`]), a
//! recording ([`crate::record::Recorder`]) and, when a collector is configured, OTLP traces
//! ([`Tracer`]). The shell listens on the upstream sockets; the core dials the
//! proxy's (control, then data: K-1). The script then walks the protocol's main
//! exchanges: the handshake, a streamed answer, a credit-controlled audio stream
//! (initial credit 0, K-10), a permission ask, a long task that is cancelled, a
//! heartbeat both ways, and an orderly close.
//!
//! Every message starts as one of the contract's own examples, with ids,
//! correlation ids, stream ids and one trace id per action made consistent; the
//! sender validates it before it goes and the receiver when it arrives, so a
//! demo whose peers disagree with the contract fails at the step that broke,
//! whatever the proxy says. Every wait has a deadline naming its step.
//!
//! The summary counts what the proxy relayed per channel and direction and per
//! method, and lists its violations: a correct session has none, and the hidden
//! `--break-rule` flag makes one on purpose to show the count can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use contract::Contract;
use contract::io::{Connection, IoError};
use contract::model::{Kind, Part};
use contract::wire::framing::BinaryCodec;
use contract::wire::{BinaryFrame, ChannelCodec, Message, Violation, Wire};
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::Framed;

use crate::config::{ConfigError, RouteSpec};
use crate::inspect::{Inspection, Mode, Verdict};
use crate::log::{Format, Logger};
use crate::record::RecordError;
use crate::relay::{Route, Sink};
use crate::server::{Proxy, ProxyError, Recording};
use crate::trace::{OtlpConfig, TraceError, TraceStats, Tracer};
use contract_transport::conn::{BoxIo, Conn};
use contract_transport::endpoint::{Endpoint, EndpointError, Listener};

/// How long a peer waits for any one message before its step fails.
pub const WAIT: Duration = Duration::from_secs(10);
/// How long one whole step may take.
pub const STEP_DEADLINE: Duration = Duration::from_secs(30);
/// Payload bytes per audio frame.
const AUDIO_FRAME: usize = 1024;
/// Credit the shell grants at first, then once more after playing what it got.
const FIRST_CREDIT: u64 = 4 * AUDIO_FRAME as u64;
const SECOND_CREDIT: u64 = 2 * AUDIO_FRAME as u64;
/// Violations and actions kept for the summary; more are only counted.
const LIST_MAX: usize = 100;
/// Distinct method keys counted; more are counted under one overflow key.
const METHODS_MAX: usize = 256;
/// Name of the route that carries the control channel (the data route adds `.data`).
const ROUTE: &str = "kernel";

/// `contract-proxy demo` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Live view format.
    #[arg(long, value_enum, default_value = "pretty")]
    pub log: Format,
    /// Write the recording here (default: demo.cprec in a fresh temporary directory, kept).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Export traces over OTLP to this collector, e.g. http://localhost:4317
    /// (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT if set, else no traces).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Directory for the sockets (default: a fresh temporary directory, removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Break one contract rule on purpose, to show that the demo's verdict can fail.
    #[arg(long, value_enum, hide = true)]
    pub break_rule: Option<BreakRule>,
    /// The web view: with --web the script starts once the printed page is open (or
    /// after a minute), and the view stays up after it until Ctrl-C.
    #[command(flatten)]
    pub web: crate::cli::WebArgs,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs {
            log: Format::Pretty,
            record: None,
            otlp: None,
            dir: None,
            break_rule: None,
            web: crate::cli::WebArgs::default(),
        }
    }
}

/// A rule the demo can break on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BreakRule {
    /// The shell sends a request whose method the contract does not have (protocol.unknown_method).
    UnknownMethod,
}

/// Why the demo could not run at all (a failing step is reported in the summary instead).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The routes did not resolve.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A socket could not be set up.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// A file or directory operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The recording could not be created.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The OTLP exporter could not be set up.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// This platform has no socket transport the demo knows.
    #[error("the demo needs unix sockets or TCP loopback")]
    Unsupported,
}

impl From<ProxyError> for DemoError {
    fn from(e: ProxyError) -> Self {
        match e {
            ProxyError::Listen { source, .. } => DemoError::Endpoint(source),
            ProxyError::Record(e) => DemoError::Record(e),
            ProxyError::NoRoutes => DemoError::Unsupported,
        }
    }
}

impl DemoError {
    /// The process exit code: 2 for what the user can fix (a path, a URL, a socket in use), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            DemoError::Config(_)
            | DemoError::Endpoint(_)
            | DemoError::Record(_)
            | DemoError::Trace(TraceError::Config(_)) => 2,
            _ => 1,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The summary.

/// How one step ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum StepOutcome {
    /// Completed.
    Done {
        /// Wall time of the whole step, in milliseconds.
        ms: f64,
        /// What happened, in one line.
        detail: String,
    },
    /// Failed; the steps after it did not run.
    Failed {
        /// Why, naming what was awaited.
        why: String,
    },
    /// Not run because an earlier step failed.
    NotRun,
}

/// One step of the script.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    /// Short name (`hello`, `streamed-answer`…).
    pub name: &'static str,
    /// What the step does.
    pub title: &'static str,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: StepOutcome,
    /// Trace ids of the step's actions (`trace_id` of its messages; with OTLP, the trace ids).
    pub traces: Vec<String>,
}

/// Frames the proxy relayed one way on one channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Relayed {
    /// The contract's channel.
    pub channel: String,
    /// Sending party.
    pub from: String,
    /// Receiving party.
    pub to: String,
    /// Frames.
    pub frames: u64,
}

/// A data stream as the proxy saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StreamSeen {
    /// Frames.
    pub frames: u64,
    /// Payload bytes.
    pub bytes: u64,
}

/// A violation the proxy flagged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ViolationSeen {
    /// Channel.
    pub channel: String,
    /// Sender.
    pub from: String,
    /// Method, if known.
    pub method: Option<String>,
    /// Violation class (`unknown-request`, `sequence`, `framing`…).
    pub class: String,
    /// The contract's code for it.
    pub code: Option<Value>,
    /// Why.
    pub reason: String,
    /// What enforce mode does (or, observing, would have done) about it.
    pub action: Option<String>,
}

/// Where the recording went.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum RecordingOutcome {
    /// Written and flushed.
    Written {
        /// The file.
        path: PathBuf,
        /// Records in it (header not counted).
        records: u64,
        /// File size.
        bytes: u64,
        /// Secret values replaced.
        redacted: u64,
        /// Records not written because the writer had stopped; 0 in a good run. (The
        /// recording backpressures the relay rather than drop what does not fit.)
        lost: u64,
    },
    /// The writer failed; the file holds what was written before.
    Failed {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
        /// Records lost.
        lost: u64,
    },
}

/// What became of the traces.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum TracesOutcome {
    /// Neither `--otlp` nor `OTEL_EXPORTER_OTLP_*` asked for traces.
    NotConfigured,
    /// Exported (or tried to).
    Exported {
        /// Collector, as configured.
        endpoint: String,
        /// Spans the collector accepted.
        spans: u64,
        /// Spans dropped (collector down, queue full).
        dropped: u64,
        /// The last export error, if any.
        last_error: Option<String>,
    },
    /// Shutting the exporter down failed.
    Failed {
        /// Collector, as configured.
        endpoint: String,
        /// Why.
        why: String,
    },
}

/// What the demo did and what the proxy saw. `Display` prints it for people;
/// it serializes to JSON for `--log json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DemoSummary {
    /// Live view format the demo ran with (decides how [`DemoSummary::print`] prints).
    #[serde(skip)]
    pub format: Format,
    /// Every step, in order.
    pub steps: Vec<StepReport>,
    /// Where the proxy listened and where it connected.
    pub routes: Vec<String>,
    /// Connections the proxy relayed.
    pub connections: u64,
    /// Frames the proxy inspected.
    pub frames: u64,
    /// Frames per channel and direction.
    pub relayed: Vec<Relayed>,
    /// Frames per `method kind` (`hello request`, `hello response`, `stream.chunk event`) and `data`.
    pub methods: BTreeMap<String, u64>,
    /// Data streams by stream id.
    pub data_streams: BTreeMap<u64, StreamSeen>,
    /// Session numbers the proxy gave each channel's frames (control and data share one, K-1).
    pub sessions: BTreeMap<String, BTreeSet<u64>>,
    /// Frames that broke the contract.
    pub violations: u64,
    /// The first of them, with the contract's codes.
    pub violation_list: Vec<ViolationSeen>,
    /// Frames refused (enforce mode only; the demo observes).
    pub refused: u64,
    /// Enforcement actions the proxy reported (observing: what it would have done).
    pub actions: Vec<String>,
    /// The recording.
    pub recording: RecordingOutcome,
    /// The traces.
    pub traces: TracesOutcome,
}

impl DemoSummary {
    /// Whether every step completed and the proxy found nothing wrong.
    pub fn passed(&self) -> bool {
        self.violations == 0
            && self
                .steps
                .iter()
                .all(|s| matches!(s.outcome, StepOutcome::Done { .. }))
    }

    /// 0 when [`passed`](Self::passed), else 1.
    pub fn exit_code(&self) -> i32 {
        if self.passed() { 0 } else { 1 }
    }

    /// Print to standard output: the text in pretty mode, one `{"summary": …}` line in JSON mode.
    pub fn print(&self) {
        match self.format {
            Format::Pretty => println!("{self}"),
            Format::Json => println!("{}", json!({ "summary": self, "passed": self.passed() })),
        }
    }
}

impl std::fmt::Display for DemoSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "\ncontract-proxy demo: kernel session through the proxy: {}",
            if self.passed() { "PASSED" } else { "FAILED" }
        )?;
        for r in &self.routes {
            writeln!(f, "  route {r}")?;
        }
        writeln!(f, "steps:")?;
        for (i, s) in self.steps.iter().enumerate() {
            match &s.outcome {
                StepOutcome::Done { ms, detail } => writeln!(
                    f,
                    "  {:>2}. {:<16} ok  {:>9.3} ms  {detail}{}",
                    i + 1,
                    s.name,
                    ms,
                    if s.traces.is_empty() {
                        String::new()
                    } else {
                        format!(" [trace {}]", s.traces.join(", "))
                    }
                )?,
                StepOutcome::Failed { why } => {
                    writeln!(f, "  {:>2}. {:<16} FAILED  {why}", i + 1, s.name)?
                }
                StepOutcome::NotRun => writeln!(f, "  {:>2}. {:<16} not run", i + 1, s.name)?,
            }
        }
        writeln!(
            f,
            "relayed: {} connections, {} frames",
            self.connections, self.frames
        )?;
        for r in &self.relayed {
            writeln!(f, "  {:<8} {} → {}: {}", r.channel, r.from, r.to, r.frames)?;
        }
        let methods: Vec<String> = self
            .methods
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect();
        writeln!(f, "by method: {}", methods.join(", "))?;
        for (id, s) in &self.data_streams {
            writeln!(
                f,
                "data stream {id}: {} frames, {} payload bytes",
                s.frames, s.bytes
            )?;
        }
        writeln!(f, "violations: {}", self.violations)?;
        for v in &self.violation_list {
            writeln!(
                f,
                "  {} from {} on {}: {} {} ({}){}",
                v.method.as_deref().unwrap_or("-"),
                v.from,
                v.channel,
                v.class,
                v.code.as_ref().map(Value::to_string).unwrap_or_default(),
                v.reason,
                v.action
                    .as_ref()
                    .map(|a| format!(" [{a}]"))
                    .unwrap_or_default()
            )?;
        }
        if self.actions.is_empty() {
            writeln!(
                f,
                "enforcement actions: none (observe mode; {} refused)",
                self.refused
            )?;
        } else {
            writeln!(
                f,
                "enforcement actions ({} refused): {}",
                self.refused,
                self.actions.join("; ")
            )?;
        }
        match &self.recording {
            RecordingOutcome::Written {
                path,
                records,
                bytes,
                redacted,
                lost,
            } => {
                writeln!(
                    f,
                    "recording: {} ({records} records, {bytes} bytes, {redacted} values redacted); view it with `contract-proxy show {}`",
                    path.display(),
                    path.display()
                )?;
                if *lost > 0 {
                    writeln!(
                        f,
                        "  WARNING: {lost} records were not written (the recorder stopped)"
                    )?;
                }
            }
            RecordingOutcome::Failed { path, why, lost } => writeln!(
                f,
                "recording: FAILED at {}: {why} ({lost} records lost)",
                path.display()
            )?,
        }
        match &self.traces {
            TracesOutcome::NotConfigured => writeln!(
                f,
                "traces: not configured (pass --otlp URL or set OTEL_EXPORTER_OTLP_ENDPOINT)"
            )?,
            TracesOutcome::Exported {
                endpoint,
                spans,
                dropped,
                last_error,
            } => {
                write!(
                    f,
                    "traces: {spans} spans exported to {endpoint}, {dropped} dropped"
                )?;
                if let Some(e) = last_error {
                    write!(f, " (last error: {e})")?;
                }
                writeln!(f)?;
            }
            TracesOutcome::Failed { endpoint, why } => {
                writeln!(f, "traces: export to {endpoint} FAILED: {why}")?
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Sinks the demo adds to the proxy.

#[derive(Default)]
struct TallyInner {
    relayed: BTreeMap<(String, String, String), u64>,
    methods: BTreeMap<String, u64>,
    streams: BTreeMap<u64, StreamSeen>,
    sessions: BTreeMap<String, BTreeSet<u64>>,
    violations: Vec<ViolationSeen>,
    actions: Vec<String>,
}

/// Counts what the proxy relayed, for the summary.
#[derive(Default)]
struct Tally(Mutex<TallyInner>);

impl Sink for Tally {
    fn frame(&self, _route: &Route, ins: &Inspection, _raw: &[u8]) {
        let e = &ins.event;
        let Ok(mut t) = self.0.lock() else {
            return;
        };
        *t.relayed
            .entry((e.channel.clone(), e.from.clone(), e.to.clone()))
            .or_default() += 1;
        let key = match (&e.stream, &e.method, e.kind) {
            (Some(_), _, _) => "data".to_string(),
            (None, Some(m), Some(k)) => format!("{m} {}", k.name()),
            (None, Some(m), None) => m.clone(),
            (None, None, Some(k)) => format!("? {}", k.name()),
            (None, None, None) => "?".to_string(),
        };
        let key = if t.methods.len() < METHODS_MAX || t.methods.contains_key(&key) {
            key
        } else {
            "(more methods)".to_string()
        };
        *t.methods.entry(key).or_default() += 1;
        if let Some((stream, _)) = e.stream
            && (t.streams.len() < METHODS_MAX || t.streams.contains_key(&stream))
        {
            let s = t.streams.entry(stream).or_default();
            s.frames += 1;
            s.bytes += e.size as u64;
        }
        let sessions = t.sessions.entry(e.channel.clone()).or_default();
        if sessions.len() < METHODS_MAX {
            sessions.insert(e.session);
        }
        let seen = match &e.verdict {
            Verdict::Ok => None,
            Verdict::Violation {
                class,
                code,
                reason,
                ..
            } => Some((class.to_string(), code.clone(), reason.clone())),
            Verdict::Framing { reason } => Some(("framing".to_string(), None, reason.clone())),
        };
        if let Some((class, code, reason)) = seen
            && t.violations.len() < LIST_MAX
        {
            t.violations.push(ViolationSeen {
                channel: e.channel.clone(),
                from: e.from.clone(),
                method: e.method.clone(),
                class,
                code,
                reason,
                action: e.action.clone(),
            });
        }
        if let Some(a) = &e.action
            && t.actions.len() < LIST_MAX
        {
            t.actions.push(format!(
                "{} {}: {a}",
                e.method.as_deref().unwrap_or("-"),
                e.from
            ));
        }
    }

    fn note(&self, _route: &str, _conn: u64, _text: &str) {}
}

// ---------------------------------------------------------------------------------------------
// The peers.

/// One party's ends of the two channels. The control channel is a
/// [`Connection`], which validates everything sent and received.
struct Peer {
    me: &'static str,
    prefix: &'static str,
    control: Connection<BoxIo>,
    data: Option<Framed<BoxIo, BinaryCodec>>,
    data_codec: BinaryCodec,
    next_id: u64,
}

fn stream_of(conn: Conn, what: &str) -> Result<BoxIo, String> {
    match conn {
        Conn::Stream(io) => Ok(io),
        Conn::Messages(_) => Err(format!("{what}: a message transport, not a byte stream")),
    }
}

impl Peer {
    fn new(
        me: &'static str,
        other: &'static str,
        prefix: &'static str,
        wire: Arc<Wire>,
        control: BoxIo,
    ) -> Result<Self, String> {
        let data_codec = match wire.codec("data").map_err(|e| e.to_string())? {
            ChannelCodec::Binary(c) => c,
            _ => return Err("the kernel data channel is not binary-framed".into()),
        };
        let control =
            Connection::new(control, wire, "control", me, other).map_err(|e| e.to_string())?;
        Ok(Peer {
            me,
            prefix,
            control,
            data: None,
            data_codec,
            next_id: 0,
        })
    }

    fn attach_data(&mut self, io: BoxIo) {
        self.data = Some(Framed::new(io, self.data_codec.clone()));
    }

    /// A fresh message id: `s-0001` for the shell, `c-0001` for the core (K-5).
    fn id(&mut self) -> String {
        self.next_id += 1;
        format!("{}-{:04}", self.prefix, self.next_id)
    }

    /// Validate `msg` as this party's and send it.
    async fn send(&mut self, msg: &Value) -> Result<Message, String> {
        let me = self.me;
        match tokio::time::timeout(WAIT, self.control.send(msg)).await {
            Ok(Ok(m)) => Ok(m),
            Ok(Err(IoError::Violation(v))) => Err(format!(
                "{me} would send a message the contract rejects ({}): {}",
                v.class.name(),
                v.reason
            )),
            Ok(Err(e)) => Err(format!("{me} could not send: {e}")),
            Err(_) => Err(format!("{me} could not send within {WAIT:?}")),
        }
    }

    /// Send without validating (only for `--break-rule`).
    async fn send_unchecked(&mut self, msg: &Value) -> Result<(), String> {
        let me = self.me;
        let bytes = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        match tokio::time::timeout(WAIT, self.control.send_unchecked(&bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("{me} could not send: {e}")),
            Err(_) => Err(format!("{me} could not send within {WAIT:?}")),
        }
    }

    /// The next control message, decoded; `Err(violation)` inside when the contract rejects it.
    async fn recv_any(&mut self, what: &str) -> Result<Result<Message, Box<Violation>>, String> {
        let me = self.me;
        match tokio::time::timeout(WAIT, self.control.recv()).await {
            Err(_) => Err(format!("{me} waited {WAIT:?} for {what}")),
            Ok(Ok(None)) => Err(format!(
                "{me}: the control channel ended while waiting for {what}"
            )),
            Ok(Ok(Some(m))) => Ok(Ok(m)),
            Ok(Err(IoError::Violation(v))) => Ok(Err(v)),
            Ok(Err(e)) => Err(format!(
                "{me}: control framing broke while waiting for {what}: {e}"
            )),
        }
    }

    /// The next control message, which must be a valid `kind` of `method`.
    async fn expect(&mut self, kind: Kind, method: &str) -> Result<Message, String> {
        let what = format!("{method} {}", kind.name());
        let m = self.recv_any(&what).await?.map_err(|v| {
            format!(
                "{} received a message the contract rejects ({}) while waiting for {what}: {}",
                self.me,
                v.class.name(),
                v.reason
            )
        })?;
        if m.kind != kind || m.method.as_deref() != Some(method) {
            return Err(format!(
                "{} expected {what}, got {} {}",
                self.me,
                m.method.as_deref().unwrap_or("?"),
                m.kind.name()
            ));
        }
        Ok(m)
    }

    /// Like [`Peer::expect`] for a reply, which must also answer `request`.
    async fn expect_reply(
        &mut self,
        kind: Kind,
        method: &str,
        request: &Message,
    ) -> Result<Message, String> {
        let m = self.expect(kind, method).await?;
        if m.correlation != request.id {
            return Err(format!(
                "{}: the {method} reply answers {:?}, not {:?}",
                self.me, m.correlation, request.id
            ));
        }
        Ok(m)
    }

    fn data(&mut self) -> Result<&mut Framed<BoxIo, BinaryCodec>, String> {
        let me = self.me;
        self.data
            .as_mut()
            .ok_or_else(|| format!("{me} has no data channel"))
    }

    async fn send_data(&mut self, stream: u64, seq: u64, payload: Bytes) -> Result<(), String> {
        let me = self.me;
        let frame = BinaryFrame {
            fields: vec![stream, seq],
            payload,
        };
        let data = self.data()?;
        match tokio::time::timeout(WAIT, data.send(&frame)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("{me} could not send a data frame: {e}")),
            Err(_) => Err(format!("{me} could not send a data frame within {WAIT:?}")),
        }
    }

    async fn recv_data(&mut self, what: &str) -> Result<BinaryFrame, String> {
        let me = self.me;
        let data = self.data()?;
        match tokio::time::timeout(WAIT, data.next()).await {
            Err(_) => Err(format!("{me} waited {WAIT:?} for {what}")),
            Ok(None) => Err(format!(
                "{me}: the data channel ended while waiting for {what}"
            )),
            Ok(Some(Err(e))) => Err(format!("{me}: data framing broke: {e}")),
            Ok(Some(Ok(f))) => Ok(f),
        }
    }

    /// Half-close a channel: flush, then shut the write side.
    async fn shut(&mut self, data: bool) -> Result<(), String> {
        let me = self.me;
        let closed = if data {
            let io = self.data()?.get_mut();
            tokio::time::timeout(WAIT, io.shutdown())
                .await
                .map(|r| r.map_err(|e| e.to_string()))
        } else {
            tokio::time::timeout(WAIT, self.control.close())
                .await
                .map(|r| r.map_err(|e| e.to_string()))
        };
        match closed {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("{me} could not close: {e}")),
            Err(_) => Err(format!("{me} could not close within {WAIT:?}")),
        }
    }

    /// Wait for the other side's end of a channel; anything else arriving first is a failure.
    async fn expect_end(&mut self, data: bool) -> Result<(), String> {
        let me = self.me;
        let channel = if data { "data" } else { "control" };
        let ended = if data {
            let d = self.data()?;
            match tokio::time::timeout(WAIT, d.next()).await {
                Err(_) => None,
                Ok(None) => Some(Ok(())),
                Ok(Some(Ok(f))) => Some(Err(format!(
                    "a data frame (stream_id/seq {:?}, {} bytes)",
                    f.fields,
                    f.payload.len()
                ))),
                Ok(Some(Err(e))) => Some(Err(e.to_string())),
            }
        } else {
            match tokio::time::timeout(WAIT, self.control.recv()).await {
                Err(_) => None,
                Ok(Ok(None)) => Some(Ok(())),
                Ok(Ok(Some(m))) => Some(Err(format!(
                    "{} {}",
                    m.method.as_deref().unwrap_or("?"),
                    m.kind.name()
                ))),
                Ok(Err(e)) => Some(Err(e.to_string())),
            }
        };
        match ended {
            Some(Ok(())) => Ok(()),
            Some(Err(got)) => Err(format!(
                "{me} expected the end of the {channel} channel, got {got}"
            )),
            None => Err(format!(
                "{me} waited {WAIT:?} for the end of the {channel} channel"
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The script.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Hello,
    BrokenRule(BreakRule),
    StreamedAnswer,
    AudioStream,
    Permission,
    CancelledTask,
    Heartbeat,
    Close,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Hello => "hello",
            Step::BrokenRule(_) => "broken-rule",
            Step::StreamedAnswer => "streamed-answer",
            Step::AudioStream => "audio-stream",
            Step::Permission => "permission",
            Step::CancelledTask => "cancelled-task",
            Step::Heartbeat => "heartbeat",
            Step::Close => "close",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Step::Hello => {
                "core dials control; hello ⇄ response (versions, capabilities); core dials data (K-1)"
            }
            Step::BrokenRule(BreakRule::UnknownMethod) => {
                "ON PURPOSE: the shell sends a request for a method the contract does not have"
            }
            Step::StreamedAnswer => {
                "command.handle → response opening a text stream → stream.chunk ×3 → stream.end"
            }
            Step::AudioStream => {
                "stream.open audio.output; credit 0 until stream.credit (K-10); data frames within credit; more credit; stream.close"
            }
            Step::Permission => "permission.request (core → shell) → the user allows once",
            Step::CancelledTask => {
                "command.handle → task id → task.progress; task.cancel → accepted → task.cancelled (one final event)"
            }
            Step::Heartbeat => "ping → pong, both ways (K-13)",
            Step::Close => "orderly close of the data channel, then the control channel",
        }
    }
}

/// Seconds since the epoch, as the envelope's timestamp (K-6).
fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| (d.as_millis() as f64) / 1000.0)
        .unwrap_or(0.0)
}

fn obj<'a>(v: &'a mut Value, what: &str) -> Result<&'a mut Map<String, Value>, String> {
    v.as_object_mut()
        .ok_or_else(|| format!("{what} is not a JSON object"))
}

fn payload_mut(v: &mut Value) -> Result<&mut Map<String, Value>, String> {
    obj(v, "message")?
        .entry("payload")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| "payload is not a JSON object".to_string())
}

/// One audio frame of a 440 Hz tone, 24 kHz mono pcm_s16le, continuing from frame `n`.
fn tone(n: u64) -> Bytes {
    let samples = AUDIO_FRAME / 2;
    let mut out = Vec::with_capacity(AUDIO_FRAME);
    for i in 0..samples {
        let t = (n as f64 * samples as f64 + i as f64) / 24_000.0;
        let s = ((t * 440.0 * std::f64::consts::TAU).sin() * 8_000.0) as i16;
        out.extend_from_slice(&s.to_le_bytes());
    }
    Bytes::from(out)
}

struct Session {
    contract: Arc<Contract>,
    shell: Peer,
    core: Peer,
    data_listener: Arc<Listener>,
    data_dial: Endpoint,
    logger: Arc<Logger>,
    nonce: u64,
    traces: u64,
    /// Trace ids born in the current step.
    step_traces: Vec<String>,
    version: u64,
    next_stream: u64,
    tasks: u64,
}

impl Session {
    /// The core dials the proxy's control socket; the proxy dials the shell.
    async fn connect(
        wire: Arc<Wire>,
        control_listener: &Listener,
        control_dial: &Endpoint,
        data_listener: Arc<Listener>,
        data_dial: Endpoint,
        logger: Arc<Logger>,
        nonce: u64,
    ) -> Result<Self, String> {
        let opts = contract_transport::endpoint::Options::default();
        let (core, shell) = tokio::join!(
            control_dial.connect(&opts, None),
            tokio::time::timeout(WAIT, control_listener.accept())
        );
        let core = core.map_err(|e| format!("core: {e}"))?;
        let shell = match shell {
            Ok(Ok(contract_transport::endpoint::Incoming::Conn { conn, .. })) => conn,
            Ok(Ok(_)) => return Err("shell: unexpected WebSocket handshake".into()),
            Ok(Err(e)) => return Err(format!("shell: accept failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "shell waited {WAIT:?} for the proxy to connect the control channel"
                ));
            }
        };
        let core = stream_of(core.conn, "core control")?;
        let shell = stream_of(shell, "shell control")?;
        let contract = wire.contract().clone();
        Ok(Session {
            contract,
            core: Peer::new("core", "shell", "c", wire.clone(), core)?,
            shell: Peer::new("shell", "core", "s", wire, shell)?,
            data_listener,
            data_dial,
            logger,
            nonce,
            traces: 0,
            step_traces: Vec::new(),
            version: 1,
            next_stream: 7,
            tasks: 18,
        })
    }

    /// A fresh trace id for one action: 32 hex digits, so OTLP uses it as is.
    fn trace(&mut self) -> String {
        self.traces += 1;
        let t = format!("{:016x}{:016x}", self.nonce, self.traces);
        self.step_traces.push(t.clone());
        t
    }

    /// The contract's first example of `method`'s `part` whose title contains `title`.
    fn example(&self, method: &str, part: Part, title: &str) -> Result<Value, String> {
        self.contract
            .methods
            .get(method)
            .and_then(|m| {
                m.examples
                    .iter()
                    .find(|e| e.part == part && e.title.contains(title))
            })
            .map(|e| e.message.clone())
            .ok_or_else(|| {
                format!("the kernel contract has no {part:?} example of {method} titled …{title}…")
            })
    }

    /// An example of `method`, stamped as a new message of `sender` in action `trace`.
    fn message(
        &mut self,
        sender: Side,
        method: &str,
        part: Part,
        title: &str,
        trace: &str,
    ) -> Result<Value, String> {
        let mut v = self.example(method, part, title)?;
        let id = match sender {
            Side::Shell => self.shell.id(),
            Side::Core => self.core.id(),
        };
        let o = obj(&mut v, "example")?;
        o.insert("v".into(), json!(self.version));
        o.insert("id".into(), json!(id));
        o.insert("timestamp".into(), json!(now_secs()));
        o.insert("trace_id".into(), json!(trace));
        o.remove("correlation_id");
        o.remove("stream_id");
        Ok(v)
    }

    /// A reply to `to`, from the contract's example, correlated and in the same action.
    fn reply(
        &mut self,
        sender: Side,
        method: &str,
        part: Part,
        title: &str,
        to: &Message,
    ) -> Result<Value, String> {
        let trace = to.trace.clone().unwrap_or_else(|| self.trace());
        let mut v = self.message(sender, method, part, title, &trace)?;
        let id = to.id.clone().ok_or("the request has no id")?;
        obj(&mut v, "reply")?.insert("correlation_id".into(), id);
        Ok(v)
    }

    fn note(&self, text: &str) {
        self.logger.note("demo", text);
    }

    async fn run(&mut self, step: Step) -> Result<String, String> {
        match step {
            Step::Hello => self.hello().await,
            Step::BrokenRule(rule) => self.broken(rule).await,
            Step::StreamedAnswer => self.streamed_answer().await,
            Step::AudioStream => self.audio_stream().await,
            Step::Permission => self.permission().await,
            Step::CancelledTask => self.cancelled_task().await,
            Step::Heartbeat => self.heartbeat().await,
            Step::Close => self.close().await,
        }
    }

    async fn hello(&mut self) -> Result<String, String> {
        let t = self.trace();
        let req = self.message(Side::Shell, "hello", Part::Call, "", &t)?;
        let req = self.shell.send(&req).await?;
        let got = self.core.expect(Kind::Request, "hello").await?;
        let versions = |v: &Value, who: &str| -> Result<Vec<u64>, String> {
            v.pointer("/payload/protocol_versions")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .ok_or_else(|| format!("{who}'s hello has no protocol_versions"))
        };
        let caps = |m: &Message| -> Vec<String> {
            m.value
                .pointer("/payload/capabilities")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let offered = versions(&got.value, "the shell")?;
        let mut resp = self.reply(Side::Core, "hello", Part::Result, "negotiated", &got)?;
        let ours = versions(&resp, "the core")?;
        let Some(common) = offered.iter().filter(|v| ours.contains(v)).max().copied() else {
            return Err(format!(
                "no common protocol version: shell {offered:?}, core {ours:?}"
            ));
        };
        let p = payload_mut(&mut resp)?;
        p.insert("protocol_version".into(), json!(common));
        p.insert(
            "session_id".into(),
            json!(format!("{:08x}", self.nonce as u32)),
        );
        self.core.send(&resp).await?;
        let answer = self
            .shell
            .expect_reply(Kind::Response, "hello", &req)
            .await?;
        self.version = common;
        // Data after the handshake: by then the proxy has the control connection's session open,
        // so the data connection joins it.
        let opts = contract_transport::endpoint::Options::default();
        let (core, shell) = tokio::join!(
            self.data_dial.connect(&opts, None),
            tokio::time::timeout(WAIT, self.data_listener.accept())
        );
        let core = core.map_err(|e| format!("core dialling data: {e}"))?;
        let shell = match shell {
            Ok(Ok(contract_transport::endpoint::Incoming::Conn { conn, .. })) => conn,
            Ok(Ok(_)) => return Err("shell: unexpected WebSocket handshake on data".into()),
            Ok(Err(e)) => return Err(format!("shell: data accept failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "shell waited {WAIT:?} for the proxy to connect the data channel"
                ));
            }
        };
        self.core.attach_data(stream_of(core.conn, "core data")?);
        self.shell.attach_data(stream_of(shell, "shell data")?);
        Ok(format!(
            "protocol v{common} (shell offered {offered:?}, core {ours:?}); shell: {}; core: {}; data channel up",
            caps(&got).join(" "),
            caps(&answer).join(" ")
        ))
    }

    async fn broken(&mut self, rule: BreakRule) -> Result<String, String> {
        match rule {
            BreakRule::UnknownMethod => {
                let t = self.trace();
                let mut bad = self.message(Side::Shell, "command.handle", Part::Call, "", &t)?;
                obj(&mut bad, "request")?.insert("method".into(), json!("command.teleport"));
                self.note("the shell breaks the contract: request command.teleport");
                self.shell.send_unchecked(&bad).await?;
                let v = match self.core.recv_any("command.teleport").await? {
                    Err(v) => v,
                    Ok(m) => {
                        return Err(format!(
                            "the core accepted {:?}, which the contract does not have",
                            m.method
                        ));
                    }
                };
                // The core answers as the contract says: the violation's code, in an error reply.
                let code = v
                    .code
                    .clone()
                    .ok_or("the contract gives no code for an unknown request")?;
                let entry = self.contract.error_for(&code);
                let category = entry
                    .map(|e| json!(e.category))
                    .unwrap_or(json!("protocol"));
                let retryable = entry.map(|e| e.retryable).unwrap_or(false);
                let id = bad
                    .get("id")
                    .cloned()
                    .ok_or("the broken request has no id")?;
                let core_id = self.core.id();
                let err = json!({
                    "v": self.version, "type": "error", "id": core_id,
                    "correlation_id": id, "timestamp": now_secs(), "trace_id": t,
                    "payload": {"code": code, "category": category, "retryable": retryable,
                                "message": v.reason, "details": {"method": "command.teleport"}}
                });
                self.core.send(&err).await?;
                let got = self.shell.recv_any("the error reply").await?.map_err(|v| {
                    format!("the shell rejected the core's error reply: {}", v.reason)
                })?;
                if got.kind != Kind::Error || got.correlation.as_ref() != Some(&id) {
                    return Err(format!(
                        "the shell expected an error answering {id}, got {:?}",
                        got.value
                    ));
                }
                Ok(format!(
                    "the core answered {code} ({}); the proxy must flag it",
                    v.class.name()
                ))
            }
        }
    }

    async fn streamed_answer(&mut self) -> Result<String, String> {
        let t = self.trace();
        let mut req = self.message(Side::Shell, "command.handle", Part::Call, "", &t)?;
        let p = payload_mut(&mut req)?;
        p.insert("text".into(), json!("What is the capital of Australia?"));
        p.insert("source".into(), json!("typed"));
        let req = self.shell.send(&req).await?;
        let got = self.core.expect(Kind::Request, "command.handle").await?;
        let stream = self.next_stream;
        self.next_stream += 1;
        let mut resp = self.reply(
            Side::Core,
            "command.handle",
            Part::Result,
            "text stream",
            &got,
        )?;
        payload_mut(&mut resp)?.insert("stream_id".into(), json!(stream));
        self.core.send(&resp).await?;
        let answer = self
            .shell
            .expect_reply(Kind::Response, "command.handle", &req)
            .await?;
        if answer.value.pointer("/payload/stream_id") != Some(&json!(stream)) {
            return Err(format!(
                "the shell expected text stream {stream}, got {:?}",
                answer.value.get("payload")
            ));
        }
        let pieces = ["The capital of Australia ", "is Canberra", "."];
        let mut text = String::new();
        for piece in pieces {
            let mut chunk = self.message(Side::Core, "stream.chunk", Part::Call, "", &t)?;
            obj(&mut chunk, "chunk")?.insert("stream_id".into(), json!(stream));
            payload_mut(&mut chunk)?.insert("text".into(), json!(piece));
            self.core.send(&chunk).await?;
            let got = self.shell.expect(Kind::Event, "stream.chunk").await?;
            if got.value.get("stream_id") != Some(&json!(stream)) {
                return Err(format!("a chunk of the wrong stream: {:?}", got.value));
            }
            text.push_str(
                got.value
                    .pointer("/payload/text")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            );
        }
        let mut end = self.message(Side::Core, "stream.end", Part::Call, "done", &t)?;
        obj(&mut end, "end")?.insert("stream_id".into(), json!(stream));
        self.core.send(&end).await?;
        let got = self.shell.expect(Kind::Event, "stream.end").await?;
        let reason = got
            .value
            .pointer("/payload/reason")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if reason != "done" || text != pieces.concat() {
            return Err(format!(
                "the shell assembled {text:?}, stream ended {reason:?}"
            ));
        }
        Ok(format!(
            "text stream {stream}: {text:?} in {} chunks, ended done",
            pieces.len()
        ))
    }

    async fn audio_stream(&mut self) -> Result<String, String> {
        let t = self.trace();
        let stream = self.next_stream;
        self.next_stream += 1;
        let mut open = self.message(
            Side::Core,
            "stream.open",
            Part::Call,
            "speech-synthesis",
            &t,
        )?;
        payload_mut(&mut open)?.insert("stream_id".into(), json!(stream));
        self.core.send(&open).await?;
        let got = self.shell.expect(Kind::Event, "stream.open").await?;
        let kind = got
            .value
            .pointer("/payload/kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if kind != "audio.output" || got.value.pointer("/payload/stream_id") != Some(&json!(stream))
        {
            return Err(format!(
                "the shell expected audio.output stream {stream}: {:?}",
                got.value
            ));
        }
        // K-10: the core's allowance starts at 0 and grows only with the shell's stream.credit.
        let mut allowance: u64 = 0;
        let mut granted: u64 = 0;
        let mut received: u64 = 0;
        let mut seq: u64 = 0;
        let mut blocked = 0;
        for credit in [FIRST_CREDIT, SECOND_CREDIT] {
            if allowance < AUDIO_FRAME as u64 {
                blocked += 1;
                self.note(&format!(
                    "core holds stream {stream}: credit {allowance} < one frame, waiting for stream.credit"
                ));
            }
            let mut c = self.message(Side::Shell, "stream.credit", Part::Call, "synthesis", &t)?;
            obj(&mut c, "credit")?.insert("stream_id".into(), json!(stream));
            payload_mut(&mut c)?.insert("bytes".into(), json!(credit));
            self.shell.send(&c).await?;
            granted += credit;
            let got = self.core.expect(Kind::Event, "stream.credit").await?;
            if got.value.get("stream_id") != Some(&json!(stream)) {
                return Err(format!("credit for the wrong stream: {:?}", got.value));
            }
            allowance += got
                .value
                .pointer("/payload/bytes")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            while allowance >= AUDIO_FRAME as u64 {
                let pcm = tone(seq);
                self.core.send_data(stream, seq, pcm.clone()).await?;
                allowance -= AUDIO_FRAME as u64;
                let f = self
                    .shell
                    .recv_data(&format!("audio frame {seq} of stream {stream}"))
                    .await?;
                if f.fields != [stream, seq] || f.payload != pcm {
                    return Err(format!(
                        "the shell expected frame (stream {stream}, seq {seq}, {AUDIO_FRAME} bytes), got {:?} with {} bytes",
                        f.fields,
                        f.payload.len()
                    ));
                }
                received += f.payload.len() as u64;
                if received > granted {
                    return Err(format!(
                        "stream {stream}: {received} bytes received, only {granted} granted (K-10)"
                    ));
                }
                seq += 1;
            }
        }
        let mut close = self.message(Side::Core, "stream.close", Part::Call, "", &t)?;
        obj(&mut close, "close")?.insert("stream_id".into(), json!(stream));
        self.core.send(&close).await?;
        let got = self.shell.expect(Kind::Event, "stream.close").await?;
        if got.value.get("stream_id") != Some(&json!(stream)) {
            return Err(format!("the wrong stream closed: {:?}", got.value));
        }
        Ok(format!(
            "audio.output stream {stream}: {seq} frames, {received} bytes within credit {FIRST_CREDIT}+{SECOND_CREDIT}; the core waited for credit {blocked} times; closed"
        ))
    }

    async fn permission(&mut self) -> Result<String, String> {
        let t = self.trace();
        let ask = format!("ask-{:08x}", self.nonce as u32);
        let mut req = self.message(Side::Core, "permission.request", Part::Call, "", &t)?;
        payload_mut(&mut req)?.insert("request_id".into(), json!(ask));
        let req = self.core.send(&req).await?;
        let got = self
            .shell
            .expect(Kind::Request, "permission.request")
            .await?;
        let what = format!(
            "{} {}",
            got.value
                .pointer("/payload/permission")
                .and_then(Value::as_str)
                .unwrap_or("?"),
            got.value
                .pointer("/payload/action")
                .and_then(Value::as_str)
                .unwrap_or("?")
        );
        let echo = got
            .value
            .pointer("/payload/request_id")
            .cloned()
            .unwrap_or(Value::Null);
        // K-18: the answer echoes request_id and correlates to the request's envelope id.
        let mut resp = self.reply(
            Side::Shell,
            "permission.request",
            Part::Result,
            "allows once",
            &got,
        )?;
        payload_mut(&mut resp)?.insert("request_id".into(), echo);
        self.shell.send(&resp).await?;
        let answer = self
            .core
            .expect_reply(Kind::Response, "permission.request", &req)
            .await?;
        let granted = answer.value.pointer("/payload/granted") == Some(&json!(true));
        if !granted || answer.value.pointer("/payload/request_id") != Some(&json!(ask)) {
            return Err(format!(
                "the core expected a grant for {ask}: {:?}",
                answer.value.get("payload")
            ));
        }
        Ok(format!("{what}: granted once (request_id {ask})"))
    }

    async fn cancelled_task(&mut self) -> Result<String, String> {
        let t = self.trace();
        let mut req = self.message(Side::Shell, "command.handle", Part::Call, "", &t)?;
        let p = payload_mut(&mut req)?;
        p.insert(
            "text".into(),
            json!("Index every document in my home folder"),
        );
        p.insert("source".into(), json!("typed"));
        let req = self.shell.send(&req).await?;
        let got = self.core.expect(Kind::Request, "command.handle").await?;
        self.tasks += 1;
        let task = format!("task-{}", self.tasks);
        let mut resp = self.reply(
            Side::Core,
            "command.handle",
            Part::Result,
            "long task",
            &got,
        )?;
        payload_mut(&mut resp)?.insert("task_id".into(), json!(task));
        self.core.send(&resp).await?;
        let answer = self
            .shell
            .expect_reply(Kind::Response, "command.handle", &req)
            .await?;
        if answer.value.pointer("/payload/task_id") != Some(&json!(task)) {
            return Err(format!(
                "the shell expected task {task}: {:?}",
                answer.value.get("payload")
            ));
        }
        for (fraction, text) in [(0.1, "Listing folders"), (0.25, "Reading documents")] {
            let mut ev = self.message(Side::Core, "task.progress", Part::Call, "", &t)?;
            let p = payload_mut(&mut ev)?;
            p.insert("task_id".into(), json!(task));
            p.insert("fraction".into(), json!(fraction));
            p.insert("message".into(), json!(text));
            self.core.send(&ev).await?;
            self.shell.expect(Kind::Event, "task.progress").await?;
        }
        // The user clicks cancel: same task, same trace.
        let mut cancel = self.message(Side::Shell, "task.cancel", Part::Call, "", &t)?;
        payload_mut(&mut cancel)?.insert("task_id".into(), json!(task));
        let cancel = self.shell.send(&cancel).await?;
        let got = self.core.expect(Kind::Request, "task.cancel").await?;
        if got.value.pointer("/payload/task_id") != Some(&json!(task)) {
            return Err(format!("the core was asked to cancel {:?}", got.value));
        }
        let receipt = self.reply(Side::Core, "task.cancel", Part::Result, "accepted", &got)?;
        self.core.send(&receipt).await?;
        let r = self
            .shell
            .expect_reply(Kind::Response, "task.cancel", &cancel)
            .await?;
        if r.value.pointer("/payload/accepted") != Some(&json!(true)) {
            return Err(format!("cancel not accepted: {:?}", r.value.get("payload")));
        }
        let mut fin = self.message(Side::Core, "task.cancelled", Part::Call, "", &t)?;
        payload_mut(&mut fin)?.insert("task_id".into(), json!(task));
        self.core.send(&fin).await?;
        let got = self.shell.expect(Kind::Event, "task.cancelled").await?;
        if got.value.pointer("/payload/task_id") != Some(&json!(task)) {
            return Err(format!("task.cancelled for {:?}", got.value));
        }
        Ok(format!(
            "{task}: 2 progress events, cancel accepted while running, one final task.cancelled"
        ))
    }

    async fn heartbeat(&mut self) -> Result<String, String> {
        let mut out = Vec::new();
        for (pinger, ponger) in [(Side::Shell, Side::Core), (Side::Core, Side::Shell)] {
            // K-31: a heartbeat is no user action, so each ping gets a fresh trace id.
            let t = self.trace();
            let start = Instant::now();
            let ping = self.message(pinger, "ping", Part::Call, "", &t)?;
            let ping = self.side(pinger).send(&ping).await?;
            let got = self.side(ponger).expect(Kind::Event, "ping").await?;
            // K-13: pong's correlation_id is the ping's id.
            let pong = self.reply(ponger, "pong", Part::Call, "", &got)?;
            self.side(ponger).send(&pong).await?;
            let back = self.side(pinger).expect(Kind::Event, "pong").await?;
            if back.correlation != ping.id {
                return Err(format!(
                    "pong answers {:?}, not the ping {:?}",
                    back.correlation, ping.id
                ));
            }
            out.push(format!(
                "{}→{} {:.3} ms",
                pinger.name(),
                ponger.name(),
                start.elapsed().as_secs_f64() * 1000.0
            ));
        }
        Ok(format!("ping/pong {}", out.join(", ")))
    }

    fn side(&mut self, s: Side) -> &mut Peer {
        match s {
            Side::Shell => &mut self.shell,
            Side::Core => &mut self.core,
        }
    }

    async fn close(&mut self) -> Result<String, String> {
        // The core ends (it is the client, K-1); the shell answers each end with its own.
        for data in [true, false] {
            self.core.shut(data).await?;
            self.shell.expect_end(data).await?;
            self.shell.shut(data).await?;
            self.core.expect_end(data).await?;
        }
        Ok("data, then control: each side half-closed and saw the other's end".into())
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Shell,
    Core,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Shell => "shell",
            Side::Core => "core",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Setup and teardown.

/// A fresh private directory under the system's temporary directory.
fn fresh_dir() -> Result<PathBuf, DemoError> {
    let base = std::env::temp_dir();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut last = None;
    for attempt in 0..16u32 {
        let dir = base.join(format!(
            "contract-proxy-demo-{}-{:x}-{attempt}",
            std::process::id(),
            stamp
        ));
        #[cfg_attr(not(unix), allow(unused_mut))]
        let mut b = std::fs::DirBuilder::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            b.mode(0o700);
        }
        match b.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(source) => {
                return Err(DemoError::Io {
                    what: format!("creating {}", dir.display()),
                    source,
                });
            }
        }
    }
    Err(DemoError::Io {
        what: format!("creating a directory under {}", base.display()),
        source: last.unwrap_or_else(|| std::io::Error::other("no attempt made")),
    })
}

/// Removes the sockets the demo bound, and its temporary directory unless the
/// recording is in it, however the run ends.
#[derive(Default)]
struct Cleanup {
    sockets: Vec<PathBuf>,
    work: Option<PathBuf>,
}

impl Cleanup {
    fn bound(&mut self, l: Listener) -> Listener {
        self.socket(&l.local());
        l
    }

    /// Remove the socket at endpoint `local`, if it is one, at the end.
    fn socket(&mut self, local: &str) {
        if let Some(p) = local.strip_prefix("unix:") {
            self.sockets.push(PathBuf::from(p));
        }
    }
}

/// The summary's word on the recording the proxy finished.
fn recording_outcome(r: Option<&Recording>, path: &Path) -> RecordingOutcome {
    let Some(r) = r else {
        return RecordingOutcome::Failed {
            path: path.to_path_buf(),
            why: "the proxy kept no recording".into(),
            lost: 0,
        };
    };
    match &r.result {
        Ok(st) => RecordingOutcome::Written {
            path: r.path.clone().unwrap_or_else(|| path.to_path_buf()),
            records: st.records,
            bytes: st.bytes,
            redacted: st.redacted,
            lost: r.unrecorded,
        },
        Err(why) => RecordingOutcome::Failed {
            path: r.path.clone().unwrap_or_else(|| path.to_path_buf()),
            why: why.clone(),
            lost: r.unrecorded,
        },
    }
}

/// The summary's word on the traces the proxy shut down.
fn traces_outcome(r: &Result<TraceStats, String>, cfg: &OtlpConfig) -> TracesOutcome {
    let endpoint = cfg
        .endpoint
        .clone()
        .unwrap_or_else(|| "OTEL_EXPORTER_OTLP_* endpoint".into());
    match r {
        Ok(s) => TracesOutcome::Exported {
            endpoint,
            spans: s.exported,
            dropped: s.dropped,
            last_error: s.last_error.clone(),
        },
        Err(why) => TracesOutcome::Failed {
            endpoint,
            why: why.clone(),
        },
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        #[cfg(unix)]
        for p in &self.sockets {
            use std::os::unix::fs::FileTypeExt;
            // Only our sockets: never a file someone put there since.
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(p);
            }
        }
        if let Some(w) = &self.work {
            // Fails, keeping it, when the recording is in it.
            let _ = std::fs::remove_dir(w);
        }
    }
}

/// Endpoint text for socket `name` in `dir`.
#[cfg(unix)]
fn socket(dir: &Path, name: &str) -> String {
    format!("unix:{}", dir.join(name).display())
}

/// Without unix sockets the demo uses TCP on loopback; the directory only holds the recording.
#[cfg(not(unix))]
fn socket(_dir: &Path, _name: &str) -> String {
    "tcp:127.0.0.1:0".into()
}

fn nonce() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}

/// Run the demo: set up the peers and the proxy, play the script, tear down, summarize.
/// `Err` only when it could not start; a failing step is in the summary (exit code 1).
/// A web view asked for is stopped at the end.
pub async fn run(args: DemoArgs) -> Result<DemoSummary, DemoError> {
    let (summary, web) = run_with_web(args).await?;
    if let Some(w) = web {
        w.stop().await;
    }
    Ok(summary)
}

/// [`run`], handing back the web view (`--web`) still serving, for the caller to stop.
pub async fn run_with_web(
    args: DemoArgs,
) -> Result<(DemoSummary, Option<crate::web::server::Serving>), DemoError> {
    // Checked first, so a bad URL costs no directory.
    let otlp = OtlpConfig::from_env(args.otlp.as_deref())?;
    let tracer = match &otlp {
        Some(cfg) => Some(Tracer::new(cfg)?),
        None => None,
    };
    let mut cleanup = Cleanup::default();
    let sock_dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            let d = fresh_dir()?;
            cleanup.work = Some(d.clone());
            d
        }
    };
    let record_path = match &args.record {
        Some(p) => p.clone(),
        None => {
            let d = match &cleanup.work {
                Some(d) => d.clone(),
                None => {
                    let d = fresh_dir()?;
                    cleanup.work = Some(d.clone());
                    d
                }
            };
            d.join("demo.cprec")
        }
    };

    // The shell listens first: the proxy dials it for each connection the core makes.
    let opts = contract_transport::endpoint::Options::default();
    let shell_control: Endpoint = socket(&sock_dir, "control.shell").parse()?;
    let shell_data: Endpoint = socket(&sock_dir, "data.shell").parse()?;
    let shell_control = cleanup.bound(shell_control.listen(&opts).await?);
    let shell_data = Arc::new(cleanup.bound(shell_data.listen(&opts).await?));

    let specs = [
        RouteSpec {
            name: Some(ROUTE.into()),
            contract: "kernel".into(),
            channel: Some("control".into()),
            listen: socket(&sock_dir, "control.proxy"),
            upstream: shell_control.local(),
            mode: Some(Mode::Observe),
            ..RouteSpec::default()
        },
        RouteSpec {
            name: Some(format!("{ROUTE}.data")),
            contract: "kernel".into(),
            channel: Some("data".into()),
            listen: socket(&sock_dir, "data.proxy"),
            upstream: shell_data.local(),
            mode: Some(Mode::Observe),
            ..RouteSpec::default()
        },
    ];
    let resolved = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| spec.resolve(i, Mode::Observe))
        .collect::<Result<Vec<_>, _>>()?;
    let wire = resolved
        .first()
        .map(|r| r.route.wire.clone())
        .ok_or(DemoError::Unsupported)?;

    // Sinks: the live view, the tally, the recording, the traces.
    let logger = Arc::new(Logger::new(args.log, Vec::new()));
    let tally = Arc::new(Tally::default());
    let mut proxy = Proxy::new(resolved);
    proxy
        .sink(logger.clone())
        .sink(tally.clone())
        .record(&record_path);
    let plan = args.web.web.map(|_| crate::web::Plan::new(&args.web));
    if let Some(p) = &plan {
        proxy.sink(p.store.clone()).sink(p.metrics.clone());
    }
    if let Some(t) = tracer {
        if let Some(p) = &plan {
            p.metrics.trace_with(t.clone());
        }
        proxy.tracer(t);
    }
    let bound = proxy.bind().await?;
    let web = match (plan, args.web.web) {
        (Some(p), Some(addr)) => {
            Some(demo_web(p, addr, &bound, &args, otlp.is_some(), &logger).await?)
        }
        _ => None,
    };
    let mut routes = Vec::new();
    let mut dials = Vec::new();
    for r in bound.routes() {
        cleanup.socket(&r.local);
        dials.push(r.local.parse::<Endpoint>()?);
        logger.note("demo", &format!("proxy {}: {}", r.name, r.summary));
        routes.push(format!("{}: {}", r.name, r.summary));
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(bound.run(async {
        let _ = stop_rx.await;
    }));

    // The script.
    let mut steps = vec![Step::Hello];
    if let Some(rule) = args.break_rule {
        steps.push(Step::BrokenRule(rule));
    }
    steps.extend([
        Step::StreamedAnswer,
        Step::AudioStream,
        Step::Permission,
        Step::CancelledTask,
        Step::Heartbeat,
        Step::Close,
    ]);
    let total = steps.len();
    let mut reports: Vec<StepReport> = Vec::with_capacity(total);
    let mut session: Option<Session> = None;
    let mut failed = false;
    for (i, step) in steps.into_iter().enumerate() {
        let mut report = StepReport {
            name: step.name(),
            title: step.title(),
            outcome: StepOutcome::NotRun,
            traces: Vec::new(),
        };
        if failed {
            reports.push(report);
            continue;
        }
        logger.note(
            "demo",
            &format!(
                "── step {}/{total} {}: {}",
                i + 1,
                step.name(),
                step.title()
            ),
        );
        let start = Instant::now();
        let body = async {
            if session.is_none() {
                session = Some(
                    Session::connect(
                        wire.clone(),
                        &shell_control,
                        &dials[0],
                        shell_data.clone(),
                        dials.get(1).cloned().ok_or("no data route")?,
                        logger.clone(),
                        nonce(),
                    )
                    .await?,
                );
            }
            match session.as_mut() {
                Some(s) => s.run(step).await,
                None => Err("no session".to_string()),
            }
        };
        let r = tokio::time::timeout(STEP_DEADLINE, body).await;
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        if let Some(s) = session.as_mut() {
            report.traces = std::mem::take(&mut s.step_traces);
        }
        report.outcome = match r {
            Ok(Ok(detail)) => {
                logger.note(
                    "demo",
                    &format!(
                        "✓ step {}/{total} {} in {ms:.3} ms: {detail}",
                        i + 1,
                        step.name()
                    ),
                );
                StepOutcome::Done { ms, detail }
            }
            Ok(Err(why)) => StepOutcome::Failed {
                why: format!("step {} ({}): {why}", i + 1, step.name()),
            },
            Err(_) => StepOutcome::Failed {
                why: format!(
                    "step {} ({}) did not finish within {STEP_DEADLINE:?}",
                    i + 1,
                    step.name()
                ),
            },
        };
        if let StepOutcome::Failed { why } = &report.outcome {
            logger.note("demo", &format!("✗ {why}"));
            failed = true;
        }
        reports.push(report);
    }
    // A failed script may leave connections open: dropping the peers closes them.
    drop(session);

    // Stop the proxy: it lets every connection finish, then finishes the recording and traces.
    let _ = stop_tx.send(());
    let done = match running.await {
        Ok(done) => done,
        Err(e) => {
            return Err(DemoError::Io {
                what: "running the proxy".into(),
                source: std::io::Error::other(e),
            });
        }
    };
    for f in &done.failures {
        logger.note("demo", f);
    }
    // The summary is printed after the live view's last line.
    logger.flush();
    drop(shell_control);
    drop(shell_data);
    let recording = recording_outcome(done.recording.as_ref(), &record_path);
    let traces = match (&done.traces, &otlp) {
        (Some(r), Some(cfg)) => traces_outcome(r, cfg),
        _ => TracesOutcome::NotConfigured,
    };
    let stats = done.stats();
    let t = match tally.0.lock() {
        Ok(mut t) => std::mem::take(&mut *t),
        Err(_) => TallyInner::default(),
    };
    let summary = DemoSummary {
        format: args.log,
        steps: reports,
        routes,
        connections: stats.connections.load(Ordering::Relaxed),
        frames: stats.frames.load(Ordering::Relaxed),
        relayed: t
            .relayed
            .into_iter()
            .map(|((channel, from, to), frames)| Relayed {
                channel,
                from,
                to,
                frames,
            })
            .collect(),
        methods: t.methods,
        data_streams: t.streams,
        sessions: t.sessions,
        violations: stats.violations.load(Ordering::Relaxed),
        violation_list: t.violations,
        refused: stats.refused.load(Ordering::Relaxed),
        actions: t.actions,
        recording,
        traces,
    };
    Ok((summary, web))
}

/// Serve the demo's web view and wait until its page is open (or [`crate::web::PAGE_WAIT`]),
/// so the person who asked for it sees the session live.
async fn demo_web(
    plan: crate::web::Plan,
    addr: std::net::SocketAddr,
    bound: &crate::server::Bound,
    args: &DemoArgs,
    traced: bool,
    logger: &Logger,
) -> Result<crate::web::server::Serving, DemoError> {
    let store = plan.store.clone();
    let trace_url = traced.then(|| args.web.web_trace_url.clone());
    let w = (plan
        .serve_run(addr, bound, Some("observe".into()), trace_url)
        .await)
        .map_err(|source| DemoError::Io {
            what: format!("the web view on {addr}"),
            source,
        })?;
    let wait = crate::web::PAGE_WAIT;
    logger.note(
        "demo",
        &format!(
            "open {} — the script starts when the page is open (or in {wait:?})",
            w.url
        ),
    );
    let deadline = Instant::now() + wait;
    while store.watchers() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(w)
}
