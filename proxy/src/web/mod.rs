//! The web view (`--web ADDR`): a small HTTP server over the flows the proxy sees.
//!
//! [`store::Store`] keeps the newest rows (one per inspected frame) within a row and a
//! byte bound, counting what it evicts; it is a relay [`crate::relay::Sink`] for a live
//! run and is filled from a recording for `show --web`. [`server`] serves the embedded
//! front end (`proxy/web/`, built assets committed in `proxy/web/dist/`), the JSON API
//! the front end pages through, a live tick over server-sent events, the sequence
//! diagram ([`diagram`]) and Prometheus `/metrics` ([`metrics`]). docs/web.md has the
//! API.

pub mod detail;
pub mod diagram;
pub mod metrics;
pub mod server;
pub mod store;

use std::sync::{Arc, OnceLock};

use crate::relay::Shared;

/// Rows the view keeps unless `--web-keep` says otherwise.
pub const KEEP_DEFAULT: usize = 200_000;
/// The trace link unless `--web-trace-url` says otherwise: Jaeger's UI on this machine.
pub const TRACE_URL_DEFAULT: &str = "http://localhost:16686/trace/{trace_id}";
/// How long the demo waits for its page to open before it plays anyway.
pub const PAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The parts of a web view made before the proxy binds (its sinks), and what it serves.
pub struct Plan {
    /// The rows (a relay sink).
    pub store: Arc<store::Store>,
    /// The metrics (a relay sink).
    pub metrics: Arc<metrics::Metrics>,
    relay: Arc<OnceLock<Arc<Shared>>>,
}

impl Plan {
    /// A store and metrics as `--web-keep` asks.
    pub fn new(a: &crate::cli::WebArgs) -> Plan {
        let bounds = store::Bounds {
            rows: a.web_keep.max(1),
            ..store::Bounds::default()
        };
        Plan::with(store::Store::new(bounds))
    }

    /// A plan over a filled `store` (a recording).
    pub fn with(store: Arc<store::Store>) -> Plan {
        let relay = Arc::new(OnceLock::new());
        let metrics = metrics::Metrics::new(relay.clone(), store.clone());
        Plan {
            store,
            metrics,
            relay,
        }
    }

    /// The view of `routes`.
    pub fn app(self, routes: Vec<server::WebRoute>) -> server::App {
        server::App::new(self.store, self.metrics, self.relay, routes)
    }

    /// Serve the view of the run `bound` on `addr` (its routes, its relay counters, its
    /// `mode`, trace links from `trace_url`), and say where.
    pub async fn serve_run(
        self,
        addr: std::net::SocketAddr,
        bound: &crate::server::Bound,
        mode: Option<String>,
        trace_url: Option<String>,
    ) -> std::io::Result<server::Serving> {
        let mut app = self.app(bound.web_routes());
        app.mode = mode;
        app.trace_url = trace_url;
        app.relay.get_or_init(|| bound.shared());
        serve_saying(addr, app).await
    }
}

/// Serve `app` on `addr` and say where on stderr, as every command with `--web` does.
pub async fn serve_saying(
    addr: std::net::SocketAddr,
    app: server::App,
) -> std::io::Result<server::Serving> {
    let w = server::serve(addr, app).await?;
    eprintln!("contract-proxy: web: {}", w.url);
    if w.local.ip().is_unspecified() {
        eprintln!(
            "contract-proxy: web: listening on every interface ({}); from another machine, use this machine's address with the same token",
            w.local
        );
    }
    Ok(w)
}
