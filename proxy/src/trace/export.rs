//! Export: a bounded queue of ended spans in front of one export thread, which batches
//! them to the collector. Nothing here waits on the relay or makes it wait: a span that
//! finds the queue full is dropped and counted, and so is a batch whose export fails.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};

use super::{BUILD_DEADLINE, LATENCY_NS, Protocol, TICK, TraceError};

/// What happened to spans, shared by the book, the queue and the export thread.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub accepted: AtomicU64,
    pub rejected: AtomicU64,
    pub exported: AtomicU64,
    pub failed: AtomicU64,
    pub lost: AtomicU64,
    pub failed_exports: AtomicU64,
    pub last_error: Mutex<Option<String>>,
    /// Requests given no span: their connection had [`super::PENDING_MAX`] pending.
    pub unspanned: AtomicU64,
    /// Trace roots and sessions ended early to make room.
    pub evicted: AtomicU64,
}

impl Counters {
    pub fn dropped(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
            + self.failed.load(Ordering::Relaxed)
            + self.lost.load(Ordering::Relaxed)
    }
}

pub(super) enum Ctl {
    Resource(Resource),
    Flush(SyncSender<()>),
    Shutdown(Instant, SyncSender<OTelSdkResult>),
}

/// The SDK's batch processor counts its drops but does not say how many; this one does.
#[derive(Debug)]
pub(super) struct QueueProcessor {
    pub spans: SyncSender<SpanData>,
    pub ctl: Sender<Ctl>,
    pub counters: Arc<Counters>,
    pub closed: AtomicBool,
    pub deadline: Duration,
}

/// Start an answered request's span [`LATENCY_NS`] before it ended. The request's span
/// starts when the tracer was handed the request, a little after the relay read it; the
/// inspector's latency (request read to reply read) is the exchange's own.
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
pub(super) struct Worker {
    pub exporter: opentelemetry_otlp::SpanExporter,
    pub spans: Receiver<SpanData>,
    pub ctl: Receiver<Ctl>,
    pub counters: Arc<Counters>,
    pub batch_size: usize,
    pub delay: Duration,
}

impl Worker {
    pub fn run(mut self) {
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
pub(super) fn export_runtime(
    protocol: Protocol,
) -> Result<Option<tokio::runtime::Runtime>, TraceError> {
    match protocol {
        Protocol::Grpc => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-io")
            .on_thread_start(crate::background::idle_thread)
            .enable_all()
            .build()
            .map(Some)
            .map_err(|e| TraceError::Exporter(format!("cannot start the export runtime: {e}"))),
        Protocol::HttpProtobuf => Ok(None),
    }
}

pub(super) fn build_exporter(
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

/// Start the export thread; the queue's sending ends once its exporter is built.
pub(super) fn spawn(
    cfg: &super::OtlpConfig,
    protocol: Protocol,
    endpoint: Option<String>,
    counters: &Arc<Counters>,
) -> Result<(SyncSender<SpanData>, Sender<Ctl>), TraceError> {
    let batch_size = cfg.batch_size.max(1);
    let (span_tx, span_rx) = mpsc::sync_channel(cfg.queue_size.max(1));
    let (ctl_tx, ctl_rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    let worker_counters = counters.clone();
    let delay = cfg.schedule_delay;
    std::thread::Builder::new()
        .name("otlp-export".into())
        .spawn(move || {
            crate::background::idle_thread();
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
    Ok((span_tx, ctl_tx))
}
