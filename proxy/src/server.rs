//! One way to assemble and run a proxy, in the manner of mini-redis `server::run`.
//!
//! [`Proxy`] gathers the routes, the sinks, an optional recording and an optional tracer;
//! [`Proxy::bind`] listens on every route (so a caller learns the real addresses before any
//! traffic); [`Bound::run`] relays until the caller's shutdown future resolves, a route
//! fails, or a one-connection route (a stand-in) ends, then drains, finishes the recording
//! and the traces, and reports what happened in a [`Finished`]. `contract-proxy run`, the
//! demo and the in-process tests all go through here, so they share one recording policy:
//! backpressure. A slow disk slows the relay; a record is lost only when the recorder has
//! stopped, and each such record is counted.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Resolved;
use crate::record::{Header, Outputs, RecordStats, Recorder, RouteInfo};
use crate::relay::{Route, RouteEnd, SHUTDOWN_DEADLINE, Shared, Sink, Stats, serve};
use crate::trace::{TraceStats, Tracer};
use contract_transport::endpoint::Listener;

/// Why a proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No routes were given.
    #[error("no routes to relay")]
    NoRoutes,
    /// A route's listener could not be bound (the error names the endpoint).
    #[error("{source}")]
    Listen {
        /// The route.
        route: String,
        /// Why.
        source: contract_transport::endpoint::EndpointError,
    },
    /// The recording file could not be created.
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
}

/// A proxy being assembled: routes, sinks, recording, tracer.
pub struct Proxy {
    routes: Vec<Resolved>,
    sinks: Vec<Arc<dyn Sink>>,
    outputs: Outputs,
    tracer: Option<Tracer>,
}

impl Proxy {
    /// A proxy for these routes, with no sinks yet.
    pub fn new(routes: Vec<Resolved>) -> Self {
        Proxy {
            routes,
            sinks: Vec::new(),
            outputs: Outputs::default(),
            tracer: None,
        }
    }

    /// Send every inspected frame and note to `sink` too.
    pub fn sink(&mut self, sink: Arc<dyn Sink>) -> &mut Self {
        self.sinks.push(sink);
        self
    }

    /// Record every frame and note to `path`, which must not exist.
    pub fn record(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.outputs.recording = Some(path.into());
        self
    }

    /// Write every frame to `path` as pcapng as it passes (see docs/wireshark.md).
    pub fn pcap(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.outputs.pcap = Some(path.into());
        self
    }

    /// Export spans through `tracer`; the run shuts it down at the end.
    pub fn tracer(&mut self, tracer: Tracer) -> &mut Self {
        self.tracer = Some(tracer);
        self
    }

    /// Listen on every route, and create the recording with the addresses bound.
    pub async fn bind(self) -> Result<Bound, ProxyError> {
        let Proxy {
            routes,
            mut sinks,
            outputs,
            tracer,
        } = self;
        let first = routes
            .first()
            .ok_or(ProxyError::NoRoutes)?
            .route
            .wire
            .clone();
        let mut listeners = Vec::with_capacity(routes.len());
        for r in routes {
            let l = r
                .listen
                .listen(&r.route.opts)
                .await
                .map_err(|source| ProxyError::Listen {
                    route: r.route.name.clone(),
                    source,
                })?;
            listeners.push((l, r.route));
        }
        let recorder = if outputs == Outputs::default() {
            None
        } else {
            let infos = listeners.iter().map(|(l, r)| route_info(l, r)).collect();
            let header = Header::new(first.contract(), infos);
            Some((Recorder::start(&outputs, header)?, outputs))
        };
        if let Some(t) = &tracer {
            sinks.push(Arc::new(t.clone()));
        }
        let (stop, stop_rx) = watch::channel(false);
        let shared = Shared::new(sinks, recorder.as_ref().map(|(r, _)| r.sink()), stop_rx);
        Ok(Bound {
            listeners,
            shared,
            stop,
            recorder,
            tracer,
        })
    }
}

/// What a recording's header says of one bound route.
fn route_info(l: &Listener, r: &Route) -> RouteInfo {
    let c = r.wire.contract();
    RouteInfo {
        name: r.name.clone(),
        listen: l.local(),
        upstream: r.upstream.to_string(),
        channel: r.channel.clone(),
        client: r.client.clone(),
        server: r.server.clone(),
        contract: c.name.clone(),
        contract_version: c.version.clone(),
        contract_json: crate::record::contract_document(c),
    }
}

/// One route as bound.
#[derive(Debug, Clone)]
pub struct BoundRoute {
    /// The route's name.
    pub name: String,
    /// Where it actually listens (the real port when 0 was asked for).
    pub local: String,
    /// The SHA-256 fingerprint of a TLS listener's certificate.
    pub fingerprint: Option<String>,
    /// One line for a person: the address, the upstream, the contract and channel, who
    /// connects, the mode.
    pub summary: String,
}

/// A proxy listening on every route, not yet relaying.
pub struct Bound {
    listeners: Vec<(Listener, Route)>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    recorder: Option<(Recorder, Outputs)>,
    tracer: Option<Tracer>,
}

impl Bound {
    /// The routes as bound, in the order given.
    pub fn routes(&self) -> Vec<BoundRoute> {
        self.listeners
            .iter()
            .map(|(l, r)| BoundRoute {
                name: r.name.clone(),
                local: l.local(),
                fingerprint: l.fingerprint(),
                summary: format!(
                    "{} → {} ({} / {}, {} connects, {:?} mode)",
                    l.local(),
                    r.upstream,
                    r.wire.contract().name,
                    r.channel,
                    r.client,
                    r.mode,
                ),
            })
            .collect()
    }

    /// The routes as the web view names them, with their contracts.
    pub fn web_routes(&self) -> Vec<crate::web::server::WebRoute> {
        (self.listeners.iter())
            .map(|(l, r)| {
                crate::web::server::WebRoute::new(
                    r.name.clone(),
                    r.channel.clone(),
                    (l.local(), r.upstream.to_string()),
                    r.client.clone(),
                    r.wire.contract().clone(),
                )
            })
            .collect()
    }

    /// What every connection of the run shares (its counters, for the web view).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Relay until `shutdown` resolves, a route fails, or a one-connection route ends;
    /// then let connections close (within [`SHUTDOWN_DEADLINE`]), finish the recording and
    /// the traces, and say what happened.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Finished {
        let Bound {
            listeners,
            shared,
            stop,
            recorder,
            tracer,
        } = self;
        let once = listeners.iter().any(|(l, _)| l.is_once());
        let mut set = JoinSet::new();
        for (l, route) in listeners {
            set.spawn(serve(l, route, shared.clone()));
        }
        let mut ended = Ended::default();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                done = set.join_next() => match done {
                    None => break,
                    Some(done) => {
                        if ended.route(done) || once {
                            let _ = stop.send(true);
                        }
                    }
                },
                () = &mut shutdown, if !*stop.borrow() => {
                    let _ = stop.send(true);
                    // Each route gives its connections SHUTDOWN_DEADLINE; past a little more, abort.
                    let grace = SHUTDOWN_DEADLINE + Duration::from_secs(5);
                    if tokio::time::timeout(grace, drain(&mut set, &mut ended)).await.is_err() {
                        set.abort_all();
                        ended.failures.push("routes did not stop in time: aborted".into());
                    }
                    break;
                }
            }
        }
        let traces = match tracer {
            Some(t) => Some(shut_tracer(t).await),
            None => None,
        };
        let recording = match recorder {
            Some((r, outputs)) => Some(Recording {
                path: outputs.recording,
                pcap: outputs.pcap,
                result: r.finish().await.map_err(|e| e.to_string()),
                unrecorded: shared.unrecorded.load(Ordering::Relaxed),
            }),
            None => None,
        };
        Finished {
            shared,
            failures: ended.failures,
            child: ended.child,
            recording,
            traces,
        }
    }
}

/// What the route tasks reported as they ended.
#[derive(Default)]
struct Ended {
    failures: Vec<String>,
    child: Option<std::process::ExitStatus>,
}

type RouteTask = Result<std::io::Result<RouteEnd>, tokio::task::JoinError>;

impl Ended {
    /// Take one route task's end; true when it failed (the run stops then).
    fn route(&mut self, done: RouteTask) -> bool {
        match done {
            Ok(Ok(end)) => {
                if let Some(st) = end.child {
                    self.child = Some(st);
                }
                false
            }
            Ok(Err(e)) => {
                self.failures.push(format!("a route failed: {e}"));
                true
            }
            Err(e) => {
                self.failures.push(format!("a route task failed: {e}"));
                true
            }
        }
    }
}

async fn drain(set: &mut JoinSet<std::io::Result<RouteEnd>>, ended: &mut Ended) {
    while let Some(done) = set.join_next().await {
        ended.route(done);
    }
}

/// Shut the tracer down off the runtime (it blocks up to its own deadline), within a bound.
async fn shut_tracer(t: Tracer) -> Result<TraceStats, String> {
    let limit = t.deadline() + Duration::from_secs(5);
    match tokio::time::timeout(limit, tokio::task::spawn_blocking(move || t.shutdown())).await {
        Ok(Ok(r)) => r.map_err(|e| e.to_string()),
        Ok(Err(e)) => Err(format!("the shutdown task died: {e}")),
        Err(_) => Err(format!("shutdown did not finish within {limit:?}")),
    }
}

/// How a recording ended.
#[derive(Debug)]
pub struct Recording {
    /// The recording file, if one was asked for.
    pub path: Option<PathBuf>,
    /// The pcapng file, if one was asked for.
    pub pcap: Option<PathBuf>,
    /// What it holds, or why it could not be finished.
    pub result: Result<RecordStats, String>,
    /// Records that could not be written because the recorder had stopped.
    pub unrecorded: u64,
}

/// What a finished run did.
pub struct Finished {
    shared: Arc<Shared>,
    /// Routes that failed, and a stop that had to abort.
    pub failures: Vec<String>,
    /// Exit status of a stand-in's child.
    pub child: Option<std::process::ExitStatus>,
    /// The recording, when one was asked for.
    pub recording: Option<Recording>,
    /// The traces' export, when a tracer was given.
    pub traces: Option<Result<TraceStats, String>>,
}

impl Finished {
    /// The run's counters.
    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }
}
