//! Prometheus metrics of a run, in the `prometheus-client` crate's exposition format.
//!
//! Per-frame series (messages, violations, frame sizes, response latency) are kept here as
//! the frames pass; the relay's own counters (refused, held, sent…) and the web store's
//! evictions are read at scrape time. A method label is the method only when the route's
//! contract knows it, so a peer inventing names cannot grow the series without bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::inspect::{Event, Inspection, Verdict};
use crate::relay::{Route, Shared, Sink};
use crate::trace::Tracer;
use crate::web::store::Store;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Message {
    route: String,
    channel: String,
    method: String,
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Broken {
    route: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Channel {
    route: String,
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Method {
    route: String,
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOnly {
    route: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The metrics of one run (or one recording shown).
pub struct Metrics {
    registry: Registry,
    messages: Family<Message, Counter>,
    violations: Family<Broken, Counter>,
    sizes: Histograms<Channel>,
    latency: Histograms<Method>,
    relay: Histograms<RouteOnly>,
    tracer: Arc<OnceLock<Tracer>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn size_histogram() -> Histogram {
    // 16 B to 16 MiB, by fours.
    Histogram::new(exponential_buckets(16.0, 4.0, 11))
}

fn relay_histogram() -> Histogram {
    // 10 µs to about 10 s, by fours.
    Histogram::new(exponential_buckets(1e-5, 4.0, 11))
}

fn latency_histogram() -> Histogram {
    // 100 µs to about 100 s, by fours.
    Histogram::new(exponential_buckets(1e-4, 4.0, 11))
}

impl Metrics {
    /// Metrics reading the relay's counters from `relay` once a run sets it (never, for
    /// a recording) and the evictions from `store`.
    pub fn new(relay: Arc<OnceLock<Arc<Shared>>>, store: Arc<Store>) -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("contract_proxy");
        let messages = Family::<Message, Counter>::default();
        let violations = Family::<Broken, Counter>::default();
        let sizes: Histograms<Channel> = Family::new_with_constructor(size_histogram);
        let latency: Histograms<Method> = Family::new_with_constructor(latency_histogram);
        let relay_time: Histograms<RouteOnly> = Family::new_with_constructor(relay_histogram);
        registry.register(
            "messages",
            "Frames inspected, by route, channel, method and verdict",
            messages.clone(),
        );
        registry.register(
            "violations",
            "Frames that broke the contract, by route and class",
            violations.clone(),
        );
        registry.register_with_unit(
            "frame_size",
            "Frame payload sizes",
            Unit::Bytes,
            sizes.clone(),
        );
        registry.register_with_unit(
            "response_latency",
            "Time from a request to its answer, as the proxy saw them",
            Unit::Seconds,
            latency.clone(),
        );
        let tracer = Arc::new(OnceLock::new());
        let counters = Counters {
            relay,
            store,
            tracer: tracer.clone(),
        };
        registry.register_with_unit(
            "relay_latency",
            "Time from reading a batch of frames to having written it on, per route",
            Unit::Seconds,
            relay_time.clone(),
        );
        registry.register_collector(Box::new(counters));
        Arc::new(Metrics {
            registry,
            messages,
            violations,
            sizes,
            latency,
            relay: relay_time,
            tracer,
        })
    }

    /// Count `tracer`'s exported and dropped spans too.
    pub fn trace_with(&self, tracer: Tracer) {
        let _ = self.tracer.set(tracer);
    }

    /// Count one frame of `route` (whose contract knows `known` methods).
    pub fn observe(&self, route: &str, known: impl Fn(&str) -> bool, e: &Event) {
        let method = match e.method.as_deref() {
            Some(m) if m == "data" || known(m) => m.to_string(),
            Some(_) => "unknown".into(),
            None => "none".into(),
        };
        let verdict = match &e.verdict {
            Verdict::Ok => "ok",
            Verdict::Violation { .. } => "violation",
            Verdict::Framing { .. } => "framing",
        };
        let route = route.to_string();
        self.messages
            .get_or_create(&Message {
                route: route.clone(),
                channel: e.channel.clone(),
                method: method.clone(),
                verdict: verdict.into(),
            })
            .inc();
        if let Some(class) = crate::web::store::violation_class(&e.verdict) {
            let class = class.to_string();
            let key = Broken {
                route: route.clone(),
                class,
            };
            self.violations.get_or_create(&key).inc();
        }
        let ch = Channel {
            route: route.clone(),
            channel: e.channel.clone(),
        };
        self.sizes.get_or_create(&ch).observe(e.size as f64);
        if let Some(l) = e.latency {
            let key = Method { route, method };
            self.latency.get_or_create(&key).observe(l.as_secs_f64());
        }
    }

    /// The exposition text.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl Sink for Metrics {
    fn frame(&self, route: &Route, ins: &Inspection, _raw: &[u8]) {
        let c = route.wire.contract();
        self.observe(&route.name, |m| c.methods.contains_key(m), &ins.event);
    }

    fn note(&self, _route: &str, _conn: u64, _text: &str) {}

    fn relayed(&self, route: &Route, took: std::time::Duration) {
        let key = RouteOnly {
            route: route.name.clone(),
        };
        self.relay.get_or_create(&key).observe(took.as_secs_f64());
    }
}

/// Counters read at scrape time.
struct Counters {
    relay: Arc<OnceLock<Arc<Shared>>>,
    store: Arc<Store>,
    tracer: Arc<OnceLock<Tracer>>,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counters")
    }
}

impl Collector for Counters {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut one = |name: &str, help: &str, v: u64| {
            let c = ConstCounter::new(v);
            let m = enc.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)
        };
        one(
            "web_rows_evicted",
            "Rows the web view no longer keeps (its bound reached)",
            self.store.counts().evicted,
        )?;
        if let Some(t) = self.tracer.get() {
            let st = t.stats();
            one(
                "trace_spans_exported",
                "Spans the OTLP collector accepted",
                st.exported,
            )?;
            one(
                "trace_spans_dropped",
                "Spans dropped: export queue full, export failed, or past the shutdown deadline",
                st.dropped,
            )?;
        }
        let Some(relay) = self.relay.get() else {
            return Ok(());
        };
        let s = &relay.stats;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        one(
            "refused",
            "Frames not forwarded under enforcement",
            n(&s.refused),
        )?;
        one("held", "Data frames held for credit", n(&s.held))?;
        one(
            "held_bytes",
            "Payload bytes of the data frames held for credit",
            n(&s.held_bytes),
        )?;
        one(
            "sent",
            "Messages the proxy sent on a party's behalf",
            n(&s.sent),
        )?;
        one("connections", "Connections relayed", n(&s.connections))?;
        one(
            "discarded_bytes",
            "Bytes a peer sent after its connection was closed, read and dropped",
            n(&s.discarded),
        )?;
        one(
            "unrecorded",
            "Records the recording could not take",
            relay.unrecorded.load(Ordering::Relaxed),
        )
    }
}
