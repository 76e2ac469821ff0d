//! OpenTelemetry traces of relayed exchanges, exported over OTLP (gRPC or HTTP/protobuf).
//!
//! [`Tracer`] is a relay [`Sink`]: every inspected frame becomes span bookkeeping
//! through `tracing` + `tracing-opentelemetry` on a private dispatcher (nothing
//! global is installed). A request and its reply (response, error, or the
//! connection's end) form one span whose duration is the exchange's latency as the
//! inspector measured it (`proxy.latency_ns`: request read to reply read);
//! events, notifications, stream chunks, data frames and heartbeats become span
//! events on the span they belong to, never traces of their own. Violations and
//! enforcement actions become `contract.violation` / `contract.enforcement` span
//! events on the span they concern.
//!
//! Which trace a message lands in:
//! - a contract whose envelope carries a trace id (kernel `trace_id`): one trace
//!   per trace id, whose 128-bit id is derived from it ([`carried_trace_id`]: the
//!   value itself when it is 32 hex digits, else the first 16 bytes of its SHA-256),
//!   under a root span `{contract} trace` that lives as long as the session;
//! - JSON-RPC: the W3C `traceparent` in `params._meta` (MCP's convention) when
//!   present, otherwise one trace per session under a root span `{contract} session`.
//!
//! Exporting never blocks the relay: a span that ends goes into a bounded queue
//! with `try_send`, and one export thread batches it to the collector. When the
//! queue is full or an export fails, the spans are dropped and counted
//! ([`Tracer::dropped`]). Per-connection state is bounded too (pending request
//! spans, trace roots, sessions), and what does not fit is counted.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use contract::model::{Binding, Kind};
use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    TracerProvider as _,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};
use serde_json::Value;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use crate::inspect::{Decision, Dir, Event, Inspection, Verdict};
use crate::relay::{Route, Sink};
use contract_transport::endpoint::Endpoint;

/// Request spans waiting for their reply, per connection; requests beyond are counted, not spanned.
pub const PENDING_MAX: usize = 1024;
/// Trace roots (one per carried trace id) open per session; the oldest is ended to make room.
pub const ROOTS_MAX: usize = 1024;
/// Sessions tracked at once; the oldest is ended to make room.
pub const SESSIONS_MAX: usize = 4096;
/// Data streams mapped to their trace per session.
pub const STREAMS_MAX: usize = 1024;
/// Data frames recorded as span events per root; later ones are only counted.
pub const DATA_EVENTS_MAX: u64 = 32;
/// Longest attribute text taken from the wire.
const ATTR_MAX: usize = 1024;
/// Service name when neither the config nor `OTEL_SERVICE_NAME` gives one.
pub const DEFAULT_SERVICE: &str = "contract-proxy";
/// How long building the exporter may take.
const BUILD_DEADLINE: Duration = Duration::from_secs(10);
/// How often the export thread looks at its control messages while idle.
const TICK: Duration = Duration::from_millis(100);

const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const ENV_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";

/// Errors setting up, flushing or stopping the tracer.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The OTLP settings (flag or environment) are unusable.
    #[error("OTLP configuration: {0}")]
    Config(String),
    /// The exporter could not be built.
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    /// Flushing or shutting down did not finish within its deadline.
    #[error("OTLP export did not finish within {after:?}; {dropped} spans dropped in all")]
    Timeout {
        /// The deadline.
        after: Duration,
        /// Spans dropped over the whole run, including those still queued.
        dropped: u64,
    },
    /// The exporter failed to shut down.
    #[error("OTLP shutdown: {0}")]
    Shutdown(String),
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (collector port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (collector port 4318, path `/v1/traces`).
    HttpProtobuf,
}

impl std::str::FromStr for Protocol {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<Self, TraceError> {
        match s.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            other => Err(TraceError::Config(format!(
                "OTLP protocol {other:?}: this build speaks grpc and http/protobuf"
            ))),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        })
    }
}

/// Where and how to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The collector's base URL (`--otlp`); `None` leaves it to `OTEL_EXPORTER_OTLP_*`.
    pub endpoint: Option<String>,
    /// The transport; `None` reads `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`, else infers it from the URL.
    pub protocol: Option<Protocol>,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// Spans the export queue holds; more are dropped and counted (`OTEL_BSP_MAX_QUEUE_SIZE`).
    pub queue_size: usize,
    /// Spans per export (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
    pub batch_size: usize,
    /// Longest a span waits in the queue before its batch goes out (`OTEL_BSP_SCHEDULE_DELAY`).
    pub schedule_delay: Duration,
    /// How long [`Tracer::shutdown`] and [`Tracer::flush`] may take.
    pub deadline: Duration,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            endpoint: None,
            protocol: None,
            service_name: DEFAULT_SERVICE.into(),
            queue_size: 2048,
            batch_size: 512,
            schedule_delay: Duration::from_millis(1000),
            deadline: Duration::from_secs(5),
        }
    }
}

impl OtlpConfig {
    /// Settings from `--otlp URL` and the standard environment. `None` when nothing asks for
    /// traces: no URL, no `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, or `OTEL_SDK_DISABLED=true` /
    /// `OTEL_TRACES_EXPORTER=none` without a URL.
    pub fn from_env(cli_url: Option<&str>) -> Result<Option<OtlpConfig>, TraceError> {
        Self::from_lookup(cli_url, |k| std::env::var(k).ok())
    }

    /// [`OtlpConfig::from_env`] with the variables looked up by `var`.
    pub fn from_lookup(
        cli_url: Option<&str>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpConfig>, TraceError> {
        let var = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if cli_url.is_none() {
            let off = |k: &str, v: &str| var(k).is_some_and(|x| x.eq_ignore_ascii_case(v));
            if off("OTEL_SDK_DISABLED", "true") || off("OTEL_TRACES_EXPORTER", "none") {
                return Ok(None);
            }
            if var(ENV_TRACES_ENDPOINT).is_none() && var(ENV_ENDPOINT).is_none() {
                return Ok(None);
            }
        }
        let mut cfg = OtlpConfig {
            endpoint: cli_url.map(str::to_string),
            protocol: var(ENV_TRACES_PROTOCOL)
                .or_else(|| var(ENV_PROTOCOL))
                .map(|p| p.parse())
                .transpose()?,
            ..OtlpConfig::default()
        };
        if let Some(n) = var("OTEL_SERVICE_NAME") {
            cfg.service_name = n;
        }
        let count = |k: &str, v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| TraceError::Config(format!("{k}={v:?}: expected a positive count")))
        };
        if let Some(v) = var("OTEL_BSP_MAX_QUEUE_SIZE") {
            cfg.queue_size = count("OTEL_BSP_MAX_QUEUE_SIZE", v)?;
        }
        if let Some(v) = var("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") {
            cfg.batch_size = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", v)?;
        }
        if let Some(v) = var("OTEL_BSP_SCHEDULE_DELAY") {
            cfg.schedule_delay = Duration::from_millis(count("OTEL_BSP_SCHEDULE_DELAY", v)? as u64);
        }
        Ok(Some(cfg))
    }

    /// The transport and the endpoint to hand the exporter builder (`None`: it reads the
    /// environment itself, as the OTLP exporter specification says).
    fn resolve(
        &self,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(Protocol, Option<String>), TraceError> {
        let var = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let given = self.endpoint.as_deref().map(str::trim);
        if let Some(url) = given
            && !url.starts_with("http://")
            && !url.starts_with("https://")
        {
            return Err(TraceError::Config(format!(
                "OTLP endpoint {url:?}: expected a URL such as http://localhost:4317"
            )));
        }
        let seen = given
            .map(str::to_string)
            .or_else(|| var(ENV_TRACES_ENDPOINT))
            .or_else(|| var(ENV_ENDPOINT));
        if seen.as_deref().is_some_and(|u| u.starts_with("https://")) {
            return Err(TraceError::Config(
                "https OTLP endpoints need TLS, which this build leaves out: use a local collector over http://".into(),
            ));
        }
        let protocol = self
            .protocol
            .unwrap_or_else(|| infer_protocol(seen.as_deref()));
        let endpoint = match protocol {
            Protocol::Grpc => given.map(str::to_string),
            // Like OTEL_EXPORTER_OTLP_ENDPOINT, the flag names the collector; the signal path is ours to add.
            Protocol::HttpProtobuf => given.map(|u| {
                if u.trim_end_matches('/').ends_with("/v1/traces") {
                    u.to_string()
                } else {
                    format!("{}/v1/traces", u.trim_end_matches('/'))
                }
            }),
        };
        Ok((protocol, endpoint))
    }
}

/// The collector's port 4318 or a `/v1/traces` path mean OTLP/HTTP; anything else gRPC.
fn infer_protocol(url: Option<&str>) -> Protocol {
    let Some(url) = url else {
        return Protocol::Grpc;
    };
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let port = authority.rsplit_once(':').map(|(_, p)| p);
    if port == Some("4318") || path.trim_end_matches('/').ends_with("/v1/traces") {
        Protocol::HttpProtobuf
    } else {
        Protocol::Grpc
    }
}

/// The OTel trace id for a trace id carried in an envelope: the value itself when it is
/// 32 hex digits (and not all zero), else the first 16 bytes of its SHA-256. Anyone who knows
/// the carried id can compute this one and find the whole chain.
pub fn carried_trace_id(carried: &str) -> TraceId {
    if carried.len() == 32
        && carried.bytes().all(|b| b.is_ascii_hexdigit())
        && let Ok(id) = TraceId::from_hex(carried)
        && id != TraceId::INVALID
    {
        return id;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, carried.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    TraceId::from_bytes(bytes)
}

/// A W3C `traceparent` (`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`) as a remote
/// span context; `None` when malformed or all-zero.
pub fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let mut parts = text.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    // Version 00 has exactly four fields; later versions may append more.
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(version, 2) || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        trace,
        span,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// `network.transport`, `server.address` and `server.port` of an upstream endpoint.
pub fn network_attributes(ep: &Endpoint) -> Vec<KeyValue> {
    let (transport, address): (&'static str, Option<String>) = match ep {
        Endpoint::Unix(p) => ("unix", Some(p.display().to_string())),
        Endpoint::Tcp(a) | Endpoint::Tls(a) | Endpoint::Ws { addr: a, .. } => {
            ("tcp", Some(a.clone()))
        }
        Endpoint::Quic(a) => ("quic", Some(a.clone())),
        Endpoint::Exec(argv) => ("pipe", argv.first().cloned()),
        // A socketpair end handed to the child.
        Endpoint::ExecFd { argv, .. } => ("unix", argv.first().cloned()),
        Endpoint::Stdio | Endpoint::Fd(_) => ("pipe", None),
        Endpoint::Pipe(n) => ("pipe", Some(format!(r"\\.\pipe\{n}"))),
    };
    let mut out = vec![KeyValue::new("network.transport", transport)];
    let Some(address) = address else {
        return out;
    };
    let host_port = matches!(
        ep,
        Endpoint::Tcp(_) | Endpoint::Tls(_) | Endpoint::Ws { .. } | Endpoint::Quic(_)
    );
    match address.rsplit_once(':').filter(|_| host_port) {
        Some((host, port)) if port.parse::<u16>().is_ok() => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            out.push(KeyValue::new("server.address", host.to_string()));
            if let Ok(p) = port.parse::<u16>() {
                out.push(KeyValue::new("server.port", i64::from(p)));
            }
        }
        _ => out.push(KeyValue::new("server.address", address)),
    }
    out
}

/// Counters of a run, for the exit summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans dropped: queue full, export failed, or still queued at the shutdown deadline.
    pub dropped: u64,
    /// Requests not given a span because their connection already had [`PENDING_MAX`] pending.
    pub unspanned: u64,
    /// Trace roots and sessions ended early to stay within [`ROOTS_MAX`] / [`SESSIONS_MAX`].
    pub evicted: u64,
    /// Export calls that failed.
    pub failed_exports: u64,
    /// The last export error, if any.
    pub last_error: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Export: a bounded queue in front of one export thread.

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    rejected: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
    lost: AtomicU64,
    failed_exports: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    fn dropped(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
            + self.failed.load(Ordering::Relaxed)
            + self.lost.load(Ordering::Relaxed)
    }
}

enum Ctl {
    Resource(Resource),
    Flush(SyncSender<()>),
    Shutdown(Instant, SyncSender<OTelSdkResult>),
}

/// The SDK's batch processor counts its drops but does not say how many; this one does.
#[derive(Debug)]
struct QueueProcessor {
    spans: SyncSender<SpanData>,
    ctl: Sender<Ctl>,
    counters: Arc<Counters>,
    closed: AtomicBool,
    deadline: Duration,
}

/// Where a reply records the exchange's latency as the inspector measured it.
const LATENCY_NS: &str = "proxy.latency_ns";

/// Start an answered request's span [`LATENCY_NS`] before it ended. The tracer runs behind
/// the relay, on a task of its own, so its clock stamps a frame when it gets to it, not
/// when the frame arrived; the inspector's latency (request read to reply read) is the
/// exchange's own.
fn at_latency(span: &mut SpanData) {
    let latency = span
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == LATENCY_NS)
        .and_then(|kv| match kv.value {
            opentelemetry::Value::I64(n) => u64::try_from(n).ok(),
            _ => None,
        });
    if let Some(start) = latency.and_then(|n| span.end_time.checked_sub(Duration::from_nanos(n))) {
        span.start_time = start;
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, mut span: SpanData) {
        at_latency(&mut span);
        if self.closed.load(Ordering::Acquire) {
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match self.spans.try_send(span) {
            Ok(()) => self.counters.accepted.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.counters.rejected.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (tx, rx) = mpsc::sync_channel(1);
        self.ctl
            .send(Ctl::Flush(tx))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        rx.recv_timeout(self.deadline)
            .map_err(|_| OTelSdkError::Timeout(self.deadline))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.ctl
            .send(Ctl::Shutdown(Instant::now() + timeout, tx))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        // The thread answers by the deadline unless an export call is stuck past it.
        match rx.recv_timeout(timeout + TICK) {
            Ok(r) => r,
            Err(_) => Err(OTelSdkError::Timeout(timeout)),
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.ctl.send(Ctl::Resource(resource.clone()));
    }
}

/// The export thread: owns the exporter, batches what the queue holds.
struct Worker {
    exporter: opentelemetry_otlp::SpanExporter,
    spans: Receiver<SpanData>,
    ctl: Receiver<Ctl>,
    counters: Arc<Counters>,
    batch_size: usize,
    delay: Duration,
}

impl Worker {
    fn run(mut self) {
        let mut batch = Vec::with_capacity(self.batch_size);
        let mut due = Instant::now() + self.delay;
        loop {
            while let Ok(c) = self.ctl.try_recv() {
                match c {
                    Ctl::Resource(r) => self.exporter.set_resource(&r),
                    Ctl::Flush(done) => {
                        self.drain(&mut batch, None);
                        let _ = done.try_send(());
                    }
                    Ctl::Shutdown(deadline, done) => {
                        self.drain(&mut batch, Some(deadline));
                        let left = deadline.saturating_duration_since(Instant::now());
                        let r = self
                            .exporter
                            .shutdown_with_timeout(left.max(Duration::from_millis(10)));
                        let _ = done.try_send(r);
                        return;
                    }
                }
            }
            let wait = due.saturating_duration_since(Instant::now()).min(TICK);
            match self.spans.recv_timeout(wait) {
                Ok(s) => {
                    batch.push(s);
                    self.fill(&mut batch);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // The provider is gone without a shutdown: send what is left, once.
                    self.drain(&mut batch, Some(Instant::now() + BUILD_DEADLINE));
                    let _ = self.exporter.shutdown();
                    return;
                }
            }
            let now = Instant::now();
            if batch.len() >= self.batch_size || (now >= due && !batch.is_empty()) {
                self.export(&mut batch);
            }
            if now >= due {
                due = now + self.delay;
            }
        }
    }

    fn fill(&self, batch: &mut Vec<SpanData>) {
        while batch.len() < self.batch_size {
            match self.spans.try_recv() {
                Ok(s) => batch.push(s),
                Err(_) => break,
            }
        }
    }

    /// Export everything queued; past `deadline`, count the rest as dropped instead.
    fn drain(&self, batch: &mut Vec<SpanData>, deadline: Option<Instant>) {
        loop {
            self.fill(batch);
            if batch.is_empty() {
                return;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let rest = batch.len() as u64 + self.spans.try_iter().count() as u64;
                batch.clear();
                self.counters.lost.fetch_add(rest, Ordering::Relaxed);
                return;
            }
            self.export(batch);
        }
    }

    fn export(&self, batch: &mut Vec<SpanData>) {
        let spans = std::mem::replace(batch, Vec::with_capacity(self.batch_size));
        let n = spans.len() as u64;
        // Bounded by the exporter's own timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s) and retries.
        match block_on(self.exporter.export(spans)) {
            Ok(()) => {
                self.counters.exported.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                self.counters.failed.fetch_add(n, Ordering::Relaxed);
                self.counters.failed_exports.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = self.counters.last_error.lock() {
                    *last = Some(e.to_string());
                }
            }
        }
    }
}

/// Run one future to completion on this (non-runtime) thread. The gRPC exporter's I/O runs
/// on the export runtime's thread; the HTTP exporter's blocking client needs a thread that
/// is not inside a runtime. Both are satisfied here.
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// The gRPC exporter's one-thread runtime; the HTTP exporter needs none.
fn export_runtime(protocol: Protocol) -> Result<Option<tokio::runtime::Runtime>, TraceError> {
    match protocol {
        Protocol::Grpc => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-io")
            .on_thread_start(crate::background::background_thread)
            .enable_all()
            .build()
            .map(Some)
            .map_err(|e| TraceError::Exporter(format!("cannot start the export runtime: {e}"))),
        Protocol::HttpProtobuf => Ok(None),
    }
}

fn build_exporter(
    protocol: Protocol,
    endpoint: Option<String>,
) -> Result<opentelemetry_otlp::SpanExporter, TraceError> {
    let built = match protocol {
        Protocol::Grpc => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc);
            if let Some(e) = endpoint {
                b = b.with_endpoint(e);
            }
            b.build()
        }
        Protocol::HttpProtobuf => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(e) = endpoint {
                b = b.with_endpoint(e);
            }
            b.build()
        }
    };
    built.map_err(|e| TraceError::Exporter(e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Trace ids: a root for a carried trace id gets the derived id.

thread_local! {
    /// The trace id the next root span built on this thread must have.
    static FORCED_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Random ids, except a root span started by [`Inner::forced_root`], which takes the id derived
/// from its carried trace id (the SDK asks the generator, synchronously, when the span starts).
#[derive(Debug, Default)]
struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        FORCED_TRACE
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }
    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

// ---------------------------------------------------------------------------------------------
// Span bookkeeping.

/// A relay sink that turns exchanges into OpenTelemetry spans. Cheap to clone: clones share
/// one exporter, and [`Tracer::shutdown`] on any of them stops all.
#[derive(Clone)]
pub struct Tracer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("stats", &self.stats())
            .finish()
    }
}

struct Inner {
    dispatch: tracing::Dispatch,
    provider: SdkTracerProvider,
    counters: Arc<Counters>,
    state: Mutex<State>,
    unspanned: AtomicU64,
    evicted: AtomicU64,
    deadline: Duration,
}

#[derive(Default)]
struct State {
    closed: bool,
    sessions: BTreeMap<u64, Session>,
    conns: BTreeMap<u64, ConnState>,
}

struct ConnState {
    session: u64,
    pending: HashMap<(Dir, String), Pending>,
}

struct Pending {
    span: tracing::Span,
    /// MCP `params._meta.progressToken`, to attach `notifications/progress` to this request.
    progress: Option<String>,
}

#[derive(Default)]
struct Session {
    root: Option<Root>,
    traces: HashMap<String, Root>,
    order: VecDeque<String>,
    streams: HashMap<u64, String>,
    conns: Vec<u64>,
    /// The application's own session id (MCP `sessionId`), once seen.
    app_session: Option<String>,
}

struct Root {
    span: tracing::Span,
    data_frames: u64,
    data_bytes: u64,
}

impl Root {
    fn new(span: tracing::Span) -> Self {
        Root {
            span,
            data_frames: 0,
            data_bytes: 0,
        }
    }

    /// The span, with its data counters written, ready to be dropped (which ends it).
    fn finish(self) -> tracing::Span {
        if self.data_frames > 0 {
            self.span
                .set_attribute("proxy.data.frames", self.data_frames as i64);
            self.span
                .set_attribute("proxy.data.bytes", self.data_bytes as i64);
        }
        self.span
    }
}

impl Session {
    fn finish(self, out: &mut Vec<tracing::Span>) {
        for (_, r) in self.traces {
            out.push(r.finish());
        }
        if let Some(r) = self.root {
            out.push(r.finish());
        }
    }
}

/// What the route's contract says about locating ids and traces in a message.
struct Shape<'a> {
    contract: &'a str,
    binding: Option<&'a Binding>,
}

impl<'a> Shape<'a> {
    fn of(route: &'a Route) -> Self {
        let c = route.wire.contract();
        Shape {
            contract: c.name.as_str(),
            binding: c
                .channels
                .get(&route.channel)
                .and_then(|ch| ch.binding.as_ref()),
        }
    }

    fn jsonrpc(&self) -> bool {
        matches!(self.binding, Some(Binding::Jsonrpc { .. }))
    }

    fn mcp(&self) -> bool {
        self.contract == "toolchannel"
            || matches!(self.binding, Some(Binding::Jsonrpc { trace: Some(t), .. }) if t == "/params/_meta/traceparent")
    }

    fn id_ptr(&self) -> Option<&str> {
        match self.binding? {
            Binding::Jsonrpc { .. } => Some("/id"),
            Binding::Envelope { id, .. } | Binding::Tagged { id, .. } => id.as_deref(),
        }
    }

    fn correlation_ptr(&self) -> Option<&str> {
        match self.binding? {
            Binding::Jsonrpc { .. } => Some("/id"),
            Binding::Envelope { correlation, .. } | Binding::Tagged { correlation, .. } => {
                correlation.as_deref()
            }
        }
    }

    /// A trace id the envelope carries (kernel `trace_id`).
    fn carried_trace(&self, msg: Option<&Value>) -> Option<String> {
        let Some(Binding::Envelope { trace: Some(p), .. }) = self.binding else {
            return None;
        };
        msg?.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }

    /// A W3C parent in `params._meta` (or wherever the contract's trace pointer says).
    fn traceparent(&self, msg: Option<&Value>) -> Option<SpanContext> {
        let Some(Binding::Jsonrpc { trace, .. }) = self.binding else {
            return None;
        };
        let ptr = trace.as_deref().unwrap_or("/params/_meta/traceparent");
        msg?.pointer(ptr)
            .and_then(Value::as_str)
            .and_then(parse_traceparent)
    }

    fn error_message(&self, msg: Option<&Value>) -> Option<String> {
        let ptr = match self.binding? {
            Binding::Jsonrpc { .. } => "/error/message".to_string(),
            Binding::Envelope { payload, .. } => format!("{payload}/message"),
            Binding::Tagged { .. } => return None,
        };
        msg?.pointer(&ptr).and_then(Value::as_str).map(clip)
    }

    /// A data stream a control message names (`stream_id` in the envelope or its payload).
    fn stream_id(&self, msg: Option<&Value>) -> Option<u64> {
        let Some(Binding::Envelope { payload, .. }) = self.binding else {
            return None;
        };
        let m = msg?;
        m.pointer("/stream_id")
            .or_else(|| m.pointer(&format!("{payload}/stream_id")))
            .and_then(Value::as_u64)
    }
}

fn clip(s: &str) -> String {
    if s.len() <= ATTR_MAX {
        return s.to_string();
    }
    let mut end = ATTR_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// An id or code as attribute text: strings bare, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => clip(s),
        other => clip(&other.to_string()),
    }
}

fn dir_name(d: Dir) -> &'static str {
    match d {
        Dir::Up => "up",
        Dir::Down => "down",
    }
}

fn kind_name(k: Option<Kind>) -> &'static str {
    match k {
        Some(Kind::Request) => "request",
        Some(Kind::Response) => "response",
        Some(Kind::Notification) => "notification",
        Some(Kind::Event) => "event",
        Some(Kind::Error) => "error",
        None => "frame",
    }
}

/// Liveness traffic goes to the session, whatever trace id it carries: one trace per ping helps nobody.
fn is_heartbeat(method: Option<&str>) -> bool {
    method.is_some_and(|m| m == "ping" || m == "pong" || m.ends_with("heartbeat"))
}

fn set_all(span: &tracing::Span, attrs: Vec<KeyValue>) {
    for kv in attrs {
        span.set_attribute(kv.key, kv.value);
    }
}

/// Attributes every span of a route carries.
fn route_attrs(route: &Route, shape: &Shape<'_>, session: u64) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new(
            "rpc.system.name",
            if shape.jsonrpc() {
                "jsonrpc".to_string()
            } else {
                shape.contract.to_string()
            },
        ),
        KeyValue::new("contract.name", shape.contract.to_string()),
        KeyValue::new("contract.channel", route.channel.clone()),
        KeyValue::new("proxy.route", route.name.clone()),
        KeyValue::new("proxy.session", session as i64),
    ];
    a.extend(network_attributes(&route.upstream));
    a
}

/// Attributes of one frame, for its span or its span event.
fn frame_attrs(ev: &Event, shape: &Shape<'_>, msg: Option<&Value>) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("proxy.direction", dir_name(ev.dir)),
        KeyValue::new("contract.from", ev.from.clone()),
        KeyValue::new("contract.to", ev.to.clone()),
        KeyValue::new("contract.kind", kind_name(ev.kind)),
        KeyValue::new("proxy.conn", ev.conn as i64),
        KeyValue::new("proxy.bytes", ev.size as i64),
    ];
    if let Some(m) = &ev.method {
        a.push(KeyValue::new("rpc.method", clip(m)));
        if shape.mcp() {
            a.push(KeyValue::new("mcp.method.name", clip(m)));
        }
    }
    if let Some(id) = &ev.id {
        a.push(KeyValue::new("contract.message.id", text(id)));
    }
    if let Some(t) = shape.carried_trace(msg) {
        a.push(KeyValue::new(
            format!("{}.trace_id", shape.contract),
            clip(&t),
        ));
    }
    if let Some((stream, seq)) = ev.stream {
        a.push(KeyValue::new("proxy.data.stream", stream as i64));
        a.push(KeyValue::new("proxy.data.seq", seq as i64));
    }
    a
}

/// Violation and enforcement events for the span the frame concerns.
fn verdict_events(span: &tracing::Span, ev: &Event, ins: &Inspection, route: &Route) {
    match &ev.verdict {
        Verdict::Ok => {}
        Verdict::Violation {
            class,
            code,
            seed,
            reason,
        } => {
            let mut a = vec![
                KeyValue::new("contract.violation.class", *class),
                KeyValue::new("contract.violation.reason", clip(reason)),
                KeyValue::new("proxy.direction", dir_name(ev.dir)),
                KeyValue::new("contract.kind", kind_name(ev.kind)),
            ];
            if let Some(c) = code {
                a.push(KeyValue::new("contract.violation.code", text(c)));
            }
            if let Some(s) = seed {
                a.push(KeyValue::new("contract.violation.seed", clip(s)));
            }
            if let Some(m) = &ev.method {
                a.push(KeyValue::new("rpc.method", clip(m)));
            }
            span.add_event("contract.violation", a);
        }
        Verdict::Framing { reason } => {
            span.add_event(
                "contract.framing_error",
                vec![
                    KeyValue::new("contract.violation.reason", clip(reason)),
                    KeyValue::new("proxy.direction", dir_name(ev.dir)),
                ],
            );
        }
    }
    if let Some(action) = &ev.action {
        span.add_event(
            "contract.enforcement",
            vec![
                KeyValue::new("contract.action", clip(action)),
                KeyValue::new(
                    "contract.mode",
                    format!("{:?}", route.mode).to_ascii_lowercase(),
                ),
                KeyValue::new(
                    "contract.refused",
                    matches!(ins.decision, Decision::Refuse { .. }),
                ),
            ],
        );
    }
}

/// Where a request span hangs.
enum Parent {
    Local(tracing::Span),
    Remote(SpanContext),
}

impl Tracer {
    /// Build the exporter and the span pipeline. The exporter works on threads of its own
    /// (gRPC: a one-thread runtime for its connection; HTTP: its blocking client).
    pub fn new(cfg: &OtlpConfig) -> Result<Tracer, TraceError> {
        Self::build(cfg, &|k| std::env::var(k).ok())
    }

    fn build(cfg: &OtlpConfig, var: &dyn Fn(&str) -> Option<String>) -> Result<Tracer, TraceError> {
        // reqwest may be built with rustls and no provider: give it ring, never aws-lc-rs.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (protocol, endpoint) = cfg.resolve(var)?;
        let batch_size = cfg.batch_size.max(1);
        let (span_tx, span_rx) = mpsc::sync_channel(cfg.queue_size.max(1));
        let (ctl_tx, ctl_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let counters = Arc::new(Counters::default());
        let worker_counters = counters.clone();
        let delay = cfg.schedule_delay;
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                crate::background::background_thread();
                // The gRPC exporter's connection lives on a runtime of its own, one thread
                // (built here, so it is dropped here, outside any async context): an export
                // (encoding a batch, writing HTTP/2) never takes a relay thread's turn.
                let io = match export_runtime(protocol) {
                    Ok(io) => io,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _rt = io.as_ref().map(|r| r.enter());
                let exporter = match build_exporter(protocol, endpoint) {
                    Ok(e) => e,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                Worker {
                    exporter,
                    spans: span_rx,
                    ctl: ctl_rx,
                    counters: worker_counters,
                    batch_size,
                    delay,
                }
                .run();
            })
            .map_err(|e| TraceError::Exporter(format!("cannot start the export thread: {e}")))?;
        ready_rx
            .recv_timeout(BUILD_DEADLINE)
            .map_err(|_| TraceError::Exporter("the exporter was not built in time".into()))??;
        let processor = QueueProcessor {
            spans: span_tx,
            ctl: ctl_tx,
            counters: counters.clone(),
            closed: AtomicBool::new(false),
            deadline: cfg.deadline,
        };
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_id_generator(Ids::default())
            .with_resource(
                Resource::builder()
                    .with_service_name(cfg.service_name.clone())
                    .build(),
            )
            .build();
        let otel = provider.tracer_with_scope(
            InstrumentationScope::builder("contract-proxy")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        let layer = tracing_opentelemetry::layer()
            .with_tracer(otel)
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        Ok(Tracer {
            inner: Arc::new(Inner {
                dispatch,
                provider,
                counters,
                state: Mutex::new(State::default()),
                unspanned: AtomicU64::new(0),
                evicted: AtomicU64::new(0),
                deadline: cfg.deadline,
            }),
        })
    }

    /// Spans dropped so far: the export queue was full, or an export failed.
    pub fn dropped(&self) -> u64 {
        self.inner.counters.dropped()
    }

    /// How long a flush or the shutdown may take.
    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    /// Counters so far.
    pub fn stats(&self) -> TraceStats {
        let c = &self.inner.counters;
        TraceStats {
            exported: c.exported.load(Ordering::Relaxed),
            dropped: c.dropped(),
            unspanned: self.inner.unspanned.load(Ordering::Relaxed),
            evicted: self.inner.evicted.load(Ordering::Relaxed),
            failed_exports: c.failed_exports.load(Ordering::Relaxed),
            last_error: c.last_error.lock().ok().and_then(|l| l.clone()),
        }
    }

    /// Export every span that has ended so far, waiting at most the configured deadline.
    /// Blocks: from async code, call it through `spawn_blocking`.
    pub fn flush(&self) -> Result<(), TraceError> {
        self.inner.provider.force_flush().map_err(|e| match e {
            OTelSdkError::Timeout(after) => TraceError::Timeout {
                after,
                dropped: self.dropped(),
            },
            other => TraceError::Shutdown(other.to_string()),
        })
    }

    /// End every open span (a request still waiting is marked unanswered), export what is
    /// queued within the configured deadline, and stop. Later frames are ignored. Blocks up to
    /// the deadline: from async code, call it through `spawn_blocking`.
    pub fn shutdown(self) -> Result<TraceStats, TraceError> {
        let mut ending = Vec::new();
        if let Ok(mut st) = self.inner.state.lock() {
            st.closed = true;
            let conns = std::mem::take(&mut st.conns);
            for (_, c) in conns {
                end_pending(c.pending, "the proxy stopped before the reply", &mut ending);
            }
            let sessions = std::mem::take(&mut st.sessions);
            for (_, s) in sessions {
                s.finish(&mut ending);
            }
        }
        self.inner.release(ending);
        let r = self
            .inner
            .provider
            .shutdown_with_timeout(self.inner.deadline);
        let mut stats = self.stats();
        match r {
            Ok(()) | Err(OTelSdkError::AlreadyShutdown) => Ok(stats),
            Err(OTelSdkError::Timeout(after)) => {
                // Whatever was queued and not yet exported or counted is lost now.
                let c = &self.inner.counters;
                let accepted = c.accepted.load(Ordering::Relaxed);
                let settled = c.exported.load(Ordering::Relaxed)
                    + c.failed.load(Ordering::Relaxed)
                    + c.lost.load(Ordering::Relaxed);
                stats.dropped += accepted.saturating_sub(settled);
                Err(TraceError::Timeout {
                    after,
                    dropped: stats.dropped,
                })
            }
            Err(e) => Err(TraceError::Shutdown(e.to_string())),
        }
    }
}

/// End pending request spans that will get no reply.
fn end_pending(pending: HashMap<(Dir, String), Pending>, why: &str, out: &mut Vec<tracing::Span>) {
    for (_, p) in pending {
        p.span.set_attribute("error.type", "proxy.unanswered");
        p.span.set_status(Status::error(why.to_string()));
        out.push(p.span);
    }
}

impl Inner {
    fn new_span(&self, parent: Option<&tracing::Span>, name: String, kind: &str) -> tracing::Span {
        tracing::dispatcher::with_default(&self.dispatch, || match parent {
            Some(p) => tracing::info_span!(
                target: "contract_proxy::trace",
                parent: p,
                "exchange",
                otel.name = %name,
                otel.kind = %kind
            ),
            None => tracing::info_span!(
                target: "contract_proxy::trace",
                parent: None,
                "exchange",
                otel.name = %name,
                otel.kind = %kind
            ),
        })
    }

    /// A root span with the given trace id: started at once, while the id generator is told.
    fn forced_root(&self, name: String, trace: TraceId, attrs: Vec<KeyValue>) -> tracing::Span {
        let span = self.new_span(None, name, "internal");
        set_all(&span, attrs);
        FORCED_TRACE.with(|f| f.set(Some(trace)));
        let _ = span.context();
        FORCED_TRACE.with(|f| f.set(None));
        span
    }

    fn session_root<'s>(
        &self,
        session: &'s mut Session,
        route: &Route,
        shape: &Shape<'_>,
        id: u64,
    ) -> &'s mut Root {
        session.root.get_or_insert_with(|| {
            let span = self.new_span(None, format!("{} session", shape.contract), "internal");
            set_all(&span, route_attrs(route, shape, id));
            if let Some(s) = &session.app_session {
                span.set_attribute(session_key(shape), s.clone());
            }
            Root::new(span)
        })
    }

    fn trace_root<'s>(
        &self,
        session: &'s mut Session,
        carried: &str,
        route: &Route,
        shape: &Shape<'_>,
        id: u64,
    ) -> &'s mut Root {
        if !session.traces.contains_key(carried)
            && session.traces.len() >= ROOTS_MAX
            && let Some(old) = session.order.pop_front()
            && let Some(r) = session.traces.remove(&old)
        {
            self.evicted.fetch_add(1, Ordering::Relaxed);
            drop(r.finish());
        }
        let order = &mut session.order;
        session
            .traces
            .entry(carried.to_string())
            .or_insert_with(|| {
                order.push_back(carried.to_string());
                let mut attrs = route_attrs(route, shape, id);
                attrs.push(KeyValue::new(
                    format!("{}.trace_id", shape.contract),
                    clip(carried),
                ));
                Root::new(self.forced_root(
                    format!("{} trace", shape.contract),
                    carried_trace_id(carried),
                    attrs,
                ))
            })
    }

    /// Register the connection and its session, making room if needed.
    fn touch(&self, st: &mut State, conn: u64, session: u64, ending: &mut Vec<tracing::Span>) {
        if !st.sessions.contains_key(&session)
            && st.sessions.len() >= SESSIONS_MAX
            && let Some((_, old)) = st.sessions.pop_first()
        {
            self.evicted.fetch_add(1, Ordering::Relaxed);
            for c in &old.conns {
                if let Some(cs) = st.conns.remove(c) {
                    end_pending(cs.pending, "evicted: too many sessions", ending);
                }
            }
            old.finish(ending);
        }
        let s = st.sessions.entry(session).or_default();
        if !s.conns.contains(&conn) {
            s.conns.push(conn);
        }
        st.conns.entry(conn).or_insert_with(|| ConnState {
            session,
            pending: HashMap::new(),
        });
    }

    fn frame(&self, route: &Route, ins: &Inspection) {
        let mut ending = Vec::new();
        {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            if st.closed {
                return;
            }
            self.frame_locked(&mut st, route, ins, &mut ending);
        }
        self.release(ending);
    }

    /// End spans: outside the state lock (ending hands a span to the export queue), and with
    /// this tracer's dispatcher as the default, because the registry releases a closing
    /// child's hold on its parent through the default dispatcher: elsewhere a root whose
    /// children closed would never close.
    fn release(&self, spans: Vec<tracing::Span>) {
        if !spans.is_empty() {
            tracing::dispatcher::with_default(&self.dispatch, || drop(spans));
        }
    }

    fn frame_locked(
        &self,
        st: &mut State,
        route: &Route,
        ins: &Inspection,
        ending: &mut Vec<tracing::Span>,
    ) {
        let ev = &ins.event;
        let msg = ins.message.as_ref();
        let shape = Shape::of(route);
        self.touch(st, ev.conn, ev.session, ending);
        let State {
            sessions, conns, ..
        } = st;
        let (Some(session), Some(conn)) = (sessions.get_mut(&ev.session), conns.get_mut(&ev.conn))
        else {
            return;
        };
        let carried = shape.carried_trace(msg);
        // What later data frames and spans need to know.
        if let (Some(t), Some(sid)) = (&carried, shape.stream_id(msg))
            && (session.streams.len() < STREAMS_MAX || session.streams.contains_key(&sid))
        {
            session.streams.insert(sid, t.clone());
        }
        if session.app_session.is_none()
            && let Some(s) = msg.and_then(|m| {
                m.pointer("/params/sessionId")
                    .or_else(|| m.pointer("/result/sessionId"))
                    .and_then(Value::as_str)
            })
        {
            session.app_session = Some(clip(s));
            if let Some(r) = &session.root {
                r.span.set_attribute(session_key(&shape), clip(s));
            }
        }
        let request_id = shape.id_ptr().and_then(|p| msg?.pointer(p)).cloned();
        let correlation = shape
            .correlation_ptr()
            .and_then(|p| msg?.pointer(p))
            .cloned();
        match ev.kind {
            Some(Kind::Request) if request_id.is_some() && ev.method.is_some() => {
                let id = request_id.unwrap_or(Value::Null);
                self.request(session, conn, route, &shape, ins, carried, &id, ending);
            }
            Some(Kind::Response | Kind::Error) if correlation.is_some() => {
                let key = (
                    ev.dir.reverse(),
                    correlation
                        .as_ref()
                        .map(Value::to_string)
                        .unwrap_or_default(),
                );
                match conn.pending.remove(&key) {
                    Some(p) => {
                        self.reply(&p.span, &shape, ins, route);
                        ending.push(p.span);
                    }
                    None => self.other(session, conn, route, &shape, ins, carried, ending),
                }
            }
            _ => self.other(session, conn, route, &shape, ins, carried, ending),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        session: &mut Session,
        conn: &mut ConnState,
        route: &Route,
        shape: &Shape<'_>,
        ins: &Inspection,
        carried: Option<String>,
        id: &Value,
        ending: &mut Vec<tracing::Span>,
    ) {
        let ev = &ins.event;
        let msg = ins.message.as_ref();
        let method = ev.method.clone().unwrap_or_default();
        let refused = matches!(ins.decision, Decision::Refuse { .. });
        if conn.pending.len() >= PENDING_MAX && !refused {
            self.unspanned.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let parent = match (&carried, shape.traceparent(msg)) {
            (Some(t), _) if !is_heartbeat(Some(method.as_str())) => Parent::Local(
                self.trace_root(session, t, route, shape, ev.session)
                    .span
                    .clone(),
            ),
            (_, Some(sc)) => Parent::Remote(sc),
            _ => Parent::Local(
                self.session_root(session, route, shape, ev.session)
                    .span
                    .clone(),
            ),
        };
        let tool = (shape.mcp() && method == "tools/call")
            .then(|| msg?.pointer("/params/name").and_then(Value::as_str))
            .flatten();
        let name = match tool {
            Some(t) => format!("{method} {}", clip(t)),
            None => clip(&method),
        };
        let span = match &parent {
            Parent::Local(p) => self.new_span(Some(p), name, "client"),
            Parent::Remote(sc) => {
                let s = self.new_span(None, name, "client");
                let _ = s
                    .set_parent(opentelemetry::Context::new().with_remote_span_context(sc.clone()));
                s
            }
        };
        let mut attrs = route_attrs(route, shape, ev.session);
        attrs.extend(frame_attrs(ev, shape, msg));
        attrs.push(KeyValue::new("proxy.request.bytes", ev.size as i64));
        if shape.jsonrpc() {
            attrs.push(KeyValue::new("jsonrpc.request.id", text(id)));
            attrs.push(KeyValue::new("jsonrpc.protocol.version", "2.0"));
        } else {
            attrs.push(KeyValue::new("contract.request.id", text(id)));
        }
        if let Some(t) = tool {
            attrs.push(KeyValue::new("gen_ai.tool.name", clip(t)));
            attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        if let Some(s) = &session.app_session {
            attrs.push(KeyValue::new(session_key(shape), s.clone()));
        }
        set_all(&span, attrs);
        verdict_events(&span, ev, ins, route);
        if refused {
            // The proxy answered in the upstream's place: the exchange ends here.
            let code = match &ev.verdict {
                Verdict::Violation { code: Some(c), .. } => text(c),
                Verdict::Violation { class, .. } => format!("contract.{class}"),
                _ => "contract.refused".into(),
            };
            span.set_attribute("rpc.response.status_code", code.clone());
            span.set_attribute("error.type", code);
            span.set_status(Status::error(
                ev.action
                    .clone()
                    .unwrap_or_else(|| "refused by the proxy".into()),
            ));
            ending.push(span);
            return;
        }
        let progress = msg
            .and_then(|m| m.pointer("/params/_meta/progressToken"))
            .map(Value::to_string);
        if let Some(old) = conn
            .pending
            .insert((ev.dir, id.to_string()), Pending { span, progress })
        {
            old.span.set_attribute("error.type", "proxy.superseded");
            old.span.set_status(Status::error(
                "another request reused this id before the reply".to_string(),
            ));
            ending.push(old.span);
        }
    }

    fn reply(&self, span: &tracing::Span, shape: &Shape<'_>, ins: &Inspection, route: &Route) {
        let ev = &ins.event;
        let msg = ins.message.as_ref();
        span.set_attribute("proxy.response.bytes", ev.size as i64);
        span.set_attribute("proxy.reply.kind", kind_name(ev.kind));
        if let Some(l) = ev.latency {
            span.set_attribute(LATENCY_NS, i64::try_from(l.as_nanos()).unwrap_or(i64::MAX));
        }
        if !shape.jsonrpc()
            && let Some(id) = &ev.id
        {
            span.set_attribute("contract.response.id", text(id));
        }
        verdict_events(span, ev, ins, route);
        if ev.kind == Some(Kind::Error) {
            let code = ev
                .error
                .as_ref()
                .map(text)
                .unwrap_or_else(|| "error".into());
            span.set_attribute("rpc.response.status_code", code.clone());
            span.set_attribute("error.type", code.clone());
            span.set_status(Status::error(shape.error_message(msg).unwrap_or(code)));
        } else if matches!(ins.decision, Decision::Refuse { .. }) {
            span.set_attribute("error.type", "contract.refused");
            span.set_status(Status::error(
                ev.action
                    .clone()
                    .unwrap_or_else(|| "reply refused by the proxy".into()),
            ));
        }
    }

    /// Events, notifications, data frames, heartbeats and unmatched replies: span events.
    #[allow(clippy::too_many_arguments)]
    fn other(
        &self,
        session: &mut Session,
        conn: &mut ConnState,
        route: &Route,
        shape: &Shape<'_>,
        ins: &Inspection,
        carried: Option<String>,
        ending: &mut Vec<tracing::Span>,
    ) {
        let ev = &ins.event;
        let msg = ins.message.as_ref();
        let name = ev
            .method
            .as_deref()
            .map(clip)
            .unwrap_or_else(|| kind_name(ev.kind).to_string());
        let mut attrs = frame_attrs(ev, shape, msg);
        if let Some(e) = &ev.error {
            attrs.push(KeyValue::new("rpc.response.status_code", text(e)));
        }
        // Data frames: on their stream's trace, counted; the first few (and any gap) as events.
        if let Some((stream, _)) = ev.stream {
            let root = match session.streams.get(&stream).cloned() {
                Some(t) => self.trace_root(session, &t, route, shape, ev.session),
                None => self.session_root(session, route, shape, ev.session),
            };
            root.data_frames += 1;
            root.data_bytes += ev.size as u64;
            if root.data_frames <= DATA_EVENTS_MAX || !ev.verdict.is_ok() {
                root.span.add_event("data", attrs);
            }
            verdict_events(&root.span, ev, ins, route);
            return;
        }
        let method = ev.method.as_deref();
        // MCP progress belongs to the request that asked for it.
        if shape.mcp()
            && method == Some("notifications/progress")
            && let Some(token) = msg
                .and_then(|m| m.pointer("/params/progressToken"))
                .map(Value::to_string)
            && let Some(p) = conn
                .pending
                .values()
                .find(|p| p.progress.as_deref() == Some(token.as_str()))
        {
            p.span.add_event(name, attrs);
            verdict_events(&p.span, ev, ins, route);
            return;
        }
        if !is_heartbeat(method) {
            if let Some(t) = &carried {
                let root = self.trace_root(session, t, route, shape, ev.session);
                root.span.add_event(name, attrs);
                verdict_events(&root.span, ev, ins, route);
                return;
            }
            if let Some(sc) = shape.traceparent(msg) {
                // A one-way message in the sender's trace: a span of its own, ended at once.
                let s = self.new_span(None, name, "producer");
                let _ = s.set_parent(opentelemetry::Context::new().with_remote_span_context(sc));
                let mut a = route_attrs(route, shape, ev.session);
                a.extend(attrs);
                set_all(&s, a);
                verdict_events(&s, ev, ins, route);
                ending.push(s);
                return;
            }
        }
        let root = self.session_root(session, route, shape, ev.session);
        root.span.add_event(name, attrs);
        verdict_events(&root.span, ev, ins, route);
    }

    fn note(&self, conn: u64, text: &str) {
        let mut ending = Vec::new();
        {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            if st.closed {
                return;
            }
            let Some(session_id) = st.conns.get(&conn).map(|c| c.session) else {
                return;
            };
            if let Some(r) = st.sessions.get(&session_id).and_then(|s| s.root.as_ref()) {
                r.span.add_event(
                    "proxy.note",
                    vec![
                        KeyValue::new("proxy.note", clip(text)),
                        KeyValue::new("proxy.conn", conn as i64),
                    ],
                );
            }
            // The relay's last word on a connection.
            if text == "closed"
                && let Some(c) = st.conns.remove(&conn)
            {
                end_pending(
                    c.pending,
                    "the connection closed before the reply",
                    &mut ending,
                );
                let empty = match st.sessions.get_mut(&session_id) {
                    Some(s) => {
                        s.conns.retain(|x| *x != conn);
                        s.conns.is_empty()
                    }
                    None => false,
                };
                if empty && let Some(s) = st.sessions.remove(&session_id) {
                    s.finish(&mut ending);
                }
            }
        }
        self.release(ending);
    }
}

/// MCP names the application session `mcp.session.id`; other contracts get the generic key.
fn session_key(shape: &Shape<'_>) -> &'static str {
    if shape.mcp() {
        "mcp.session.id"
    } else {
        "session.id"
    }
}

impl Sink for Tracer {
    fn frame(&self, route: &Route, ins: &Inspection, _raw: &[u8]) {
        self.inner.frame(route, ins);
    }

    fn note(&self, _route: &str, conn: u64, text: &str) {
        self.inner.note(conn, text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn carried_ids_derive_deterministically() {
        let hex = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(carried_trace_id(hex).to_string(), hex);
        let a = carried_trace_id("t-8f23");
        assert_eq!(a, carried_trace_id("t-8f23"));
        assert_ne!(a, carried_trace_id("t-8f24"));
        let digest = ring::digest::digest(&ring::digest::SHA256, b"t-8f23");
        let want: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(a.to_string(), want);
        // All-zero is not a trace id: hashed like any other text.
        let zero = "0".repeat(32);
        assert_ne!(carried_trace_id(&zero), TraceId::INVALID);
    }

    #[test]
    fn traceparent_parses_and_rejects() {
        let sc = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .expect("valid");
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319x-b7ad6b7169203331-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn config_follows_flag_then_environment() {
        assert_eq!(
            OtlpConfig::from_lookup(None, lookup(&[])).expect("ok"),
            None
        );
        let cfg = OtlpConfig::from_lookup(Some("http://localhost:4317"), lookup(&[]))
            .expect("ok")
            .expect("on");
        assert_eq!(cfg.service_name, DEFAULT_SERVICE);
        let none = |_: &str| -> Option<String> { None };
        assert_eq!(
            cfg.resolve(&none).expect("resolves"),
            (Protocol::Grpc, Some("http://localhost:4317".into()))
        );
        let env = lookup(&[
            (ENV_ENDPOINT, "http://collector:4318"),
            ("OTEL_SERVICE_NAME", "edge-proxy"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
        ]);
        let cfg = OtlpConfig::from_lookup(None, &env)
            .expect("ok")
            .expect("on");
        assert_eq!(cfg.service_name, "edge-proxy");
        assert_eq!(cfg.queue_size, 64);
        // The environment's endpoint is left to the exporter; the port says HTTP.
        assert_eq!(
            cfg.resolve(&env).expect("ok"),
            (Protocol::HttpProtobuf, None)
        );
        let env = lookup(&[(ENV_PROTOCOL, "http/protobuf")]);
        let cfg = OtlpConfig::from_lookup(Some("http://127.0.0.1:9999/"), &env)
            .expect("ok")
            .expect("on");
        assert_eq!(
            cfg.resolve(&env).expect("ok"),
            (
                Protocol::HttpProtobuf,
                Some("http://127.0.0.1:9999/v1/traces".into())
            )
        );
        let off = lookup(&[
            (ENV_ENDPOINT, "http://x:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert_eq!(OtlpConfig::from_lookup(None, off).expect("ok"), None);
        assert!(
            OtlpConfig::from_lookup(
                None,
                lookup(&[(ENV_ENDPOINT, "http://x:4317"), (ENV_PROTOCOL, "http/json")])
            )
            .is_err()
        );
        let cfg = OtlpConfig::from_lookup(Some("localhost:4317"), lookup(&[]))
            .expect("ok")
            .expect("on");
        assert!(cfg.resolve(&none).is_err());
        let cfg = OtlpConfig::from_lookup(Some("https://collector:4317"), lookup(&[]))
            .expect("ok")
            .expect("on");
        assert!(cfg.resolve(&none).is_err());
    }

    #[test]
    fn network_attributes_follow_the_upstream() {
        let get = |ep: &str| -> HashMap<String, String> {
            network_attributes(&ep.parse::<Endpoint>().expect("endpoint"))
                .into_iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect()
        };
        let u = get("unix:/run/shell.sock");
        assert_eq!(u["network.transport"], "unix");
        assert_eq!(u["server.address"], "/run/shell.sock");
        let t = get("tcp:db.local:5000");
        assert_eq!(t["network.transport"], "tcp");
        assert_eq!(t["server.address"], "db.local");
        assert_eq!(t["server.port"], "5000");
        assert_eq!(get("quic://127.0.0.1:4433")["network.transport"], "quic");
        assert_eq!(get("exec:worker --stdio")["network.transport"], "pipe");
    }
}
