//! OpenTelemetry traces of relayed exchanges, exported over OTLP (gRPC or HTTP/protobuf).
//!
//! [`Tracer`] is a relay [`Sink`]. The relay's threads only take down what the tracer
//! needs of each frame ([`fact`]: the event, the time, and the ids and trace ids its
//! message carries) and hand it over in batches. Spans are made from those on the
//! tracer's own thread ([`book`]), with the OpenTelemetry SDK directly and every start,
//! event and end time taken from the facts, so a span lasts as long as its exchange did
//! however late it is built. (`tracing-opentelemetry` stamps a span's start and end when
//! it is created and closed, which is why it is not used here.)
//!
//! A request and its reply (response, error, or the connection's end) form one span whose
//! duration is the exchange's latency as the inspector measured it (`proxy.latency_ns`:
//! request read to reply read); events, notifications, stream chunks, data frames and
//! heartbeats become span events on the span they belong to, never traces of their own.
//! Violations and enforcement actions become `contract.violation` /
//! `contract.enforcement` span events on the span they concern.
//!
//! Which trace a message lands in:
//! - a contract whose envelope carries a trace id (kernel `trace_id`): one trace
//!   per trace id, whose 128-bit id is derived from it ([`carried_trace_id`]: the
//!   value itself when it is 32 hex digits, else the first 16 bytes of its SHA-256),
//!   under a root span `{contract} trace` that lives as long as the session;
//! - JSON-RPC: the W3C `traceparent` in `params._meta` (MCP's convention) when
//!   present, otherwise one trace per session under a root span `{contract} session`.
//!
//! Nothing here makes the relay wait or drops a frame's facts: past
//! [`BOOK_HIGH_WATER`] waiting facts, the relay books them itself. Exporting never
//! blocks: an ended span goes into a bounded queue with `try_send`, and one export
//! thread batches it to the collector ([`export`]). When that queue is full or an export
//! fails, the spans are dropped and counted ([`Tracer::dropped`]). Per-connection state
//! is bounded too (pending request spans, trace roots, sessions), and what does not fit
//! is counted.

mod book;
mod export;
mod fact;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::background::{Batcher, Cadence, Priority};
use crate::inspect::Inspection;
use crate::relay::{Route, Sink};
use book::{Book, Ids};
use contract_transport::endpoint::Endpoint;
use export::{Counters, QueueProcessor};
use fact::{Fact, Item, RouteFacts};

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
/// How often the tracer's thread books what the relay handed over, while frames come.
const BOOK_EVERY: Duration = Duration::from_millis(10);
/// Facts waiting to be booked past which the relay books them itself.
pub const BOOK_HIGH_WATER: usize = 4096;
/// Where a reply records the exchange's latency as the inspector measured it.
const LATENCY_NS: &str = "proxy.latency_ns";

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
    /// Batches of facts a relay thread made into spans itself, the span maker (in the idle
    /// class) having fallen [`BOOK_HIGH_WATER`] behind.
    pub booked_by_relay: u64,
    /// The last export error, if any.
    pub last_error: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// The sink.

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
    /// Frames and notes on their way to the book's thread.
    items: Batcher<Item>,
    book: Arc<Mutex<Book>>,
    provider: SdkTracerProvider,
    counters: Arc<Counters>,
    /// Each route's facts, made once.
    routes: Mutex<HashMap<String, Arc<RouteFacts>>>,
    closed: AtomicBool,
    deadline: Duration,
}

impl Tracer {
    /// Build the exporter and the span pipeline. Spans are made on a thread of their own
    /// from what the relay hands over; the exporter works on threads of its own too (gRPC:
    /// a one-thread runtime for its connection; HTTP: its blocking client).
    pub fn new(cfg: &OtlpConfig) -> Result<Tracer, TraceError> {
        Self::build(cfg, &|k| std::env::var(k).ok())
    }

    fn build(cfg: &OtlpConfig, var: &dyn Fn(&str) -> Option<String>) -> Result<Tracer, TraceError> {
        // reqwest may be built with rustls and no provider: give it ring, never aws-lc-rs.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (protocol, endpoint) = cfg.resolve(var)?;
        let counters = Arc::new(Counters::default());
        let (spans, ctl) = export::spawn(cfg, protocol, endpoint, &counters)?;
        let processor = QueueProcessor {
            spans,
            ctl,
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
        let book = Arc::new(Mutex::new(Book::new(otel, counters.clone())));
        let booking = book.clone();
        let cadence = Cadence {
            name: "otlp-spans",
            every: BOOK_EVERY,
            priority: Priority::Idle,
            high_water: BOOK_HIGH_WATER,
        };
        let items = Batcher::new(
            cadence,
            256,
            Box::new(move |batch: &mut Vec<Item>| {
                if let Ok(mut b) = booking.lock() {
                    for item in batch.drain(..) {
                        b.take(item);
                    }
                }
            }),
        );
        Ok(Tracer {
            inner: Arc::new(Inner {
                items,
                book,
                provider,
                counters,
                routes: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(false),
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
            unspanned: c.unspanned.load(Ordering::Relaxed),
            evicted: c.evicted.load(Ordering::Relaxed),
            failed_exports: c.failed_exports.load(Ordering::Relaxed),
            booked_by_relay: self.inner.items.handed_on_by_pushers(),
            last_error: c.last_error.lock().ok().and_then(|l| l.clone()),
        }
    }

    /// Export every span that has ended so far, waiting at most the configured deadline.
    /// Blocks: from async code, call it through `spawn_blocking`.
    pub fn flush(&self) -> Result<(), TraceError> {
        self.inner.items.flush();
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
        self.inner.closed.store(true, Ordering::Release);
        self.inner.items.flush();
        if let Ok(mut b) = self.inner.book.lock() {
            b.close(SystemTime::now());
        }
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

impl Inner {
    /// The route's facts, made on its first frame.
    fn route(&self, route: &Route) -> Arc<RouteFacts> {
        let Ok(mut routes) = self.routes.lock() else {
            return Arc::new(RouteFacts::of(route));
        };
        match routes.get(&route.name) {
            Some(f) if f.describes(route) => f.clone(),
            _ => {
                let f = Arc::new(RouteFacts::of(route));
                routes.insert(route.name.clone(), f.clone());
                f
            }
        }
    }
}

impl Sink for Tracer {
    fn frame(&self, route: &Route, ins: &Inspection, _raw: &[u8]) {
        if self.inner.closed.load(Ordering::Acquire) {
            return;
        }
        let fact = Fact::of(route, self.inner.route(route), ins, SystemTime::now());
        self.inner
            .items
            .push(|items| items.push(Item::Frame(Box::new(fact))));
    }

    fn note(&self, _route: &str, conn: u64, text: &str) {
        if self.inner.closed.load(Ordering::Acquire) {
            return;
        }
        let at = SystemTime::now();
        let text = text.to_string();
        self.inner
            .items
            .push(|items| items.push(Item::Note { conn, text, at }));
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
