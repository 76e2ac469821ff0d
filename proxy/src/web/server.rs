//! The HTTP side of the web view: the embedded page, the JSON API, the live tick, the
//! diagram and `/metrics` (docs/web.md), behind a token whenever it listens beyond
//! loopback.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::relay::Shared;
use crate::web::detail;
use crate::web::diagram::{self, DiagramFormat};
use crate::web::metrics::Metrics;
use crate::web::store::{Query, Store};

const INDEX: &str = include_str!("../../web/dist/index.html");
const APP_JS: &str = include_str!("../../web/dist/assets/app.js");
const APP_CSS: &str = include_str!("../../web/dist/assets/app.css");
/// The cookie that carries the token after the first visit.
const COOKIE: &str = "contract_proxy_token";
/// The live stream's ticks come at most this often.
const TICK: Duration = Duration::from_millis(250);

/// One route, as the page names it, with its contract.
#[derive(Clone)]
pub struct WebRoute {
    /// Route name.
    pub name: String,
    /// The contract's channel.
    pub channel: String,
    /// Where it listens.
    pub listen: String,
    /// Where it connects.
    pub upstream: String,
    /// The party that connects.
    pub client: String,
    /// The route's contract.
    pub contract: Arc<contract::Contract>,
    /// The contract as a JSON document, made once when a detail first needs it.
    document: OnceLock<Value>,
}

impl WebRoute {
    /// Route `name` on `channel` from `listen` to `upstream`, `client` connecting, under
    /// `contract`.
    pub fn new(
        name: String,
        channel: String,
        (listen, upstream): (String, String),
        client: String,
        contract: Arc<contract::Contract>,
    ) -> WebRoute {
        WebRoute {
            name,
            channel,
            listen,
            upstream,
            client,
            contract,
            document: OnceLock::new(),
        }
    }

    /// The contract as a JSON document, to resolve the pointers a detail names.
    pub fn document(&self) -> &Value {
        (self.document).get_or_init(|| serde_json::to_value(&*self.contract).unwrap_or(Value::Null))
    }
}

/// What the view serves.
pub struct App {
    /// The rows.
    pub store: Arc<Store>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The routes.
    pub routes: Vec<WebRoute>,
    /// `live` or `recording`.
    pub source: &'static str,
    /// `observe` or `enforce` for a run.
    pub mode: Option<String>,
    /// A trace link template with `{trace_id}`, when the run exports traces.
    pub trace_url: Option<String>,
    /// The run's relay counters, once it is bound.
    pub relay: Arc<OnceLock<Arc<Shared>>>,
    token: Option<String>,
}

/// The view listening.
pub struct Serving {
    /// The URL to open (with the token when one is required).
    pub url: String,
    /// Where it listens.
    pub local: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Serving {
    /// Stop serving: open live streams end, the listener closes.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

impl App {
    /// The route `name`, else the first route.
    fn route(&self, name: &str) -> Option<&WebRoute> {
        (self.routes.iter().find(|r| r.name == name)).or(self.routes.first())
    }

    /// The sequence diagram of `session` (`None`: the oldest kept row's), under the
    /// contract of its route; `None` when the view has no routes.
    pub fn diagram(&self, session: Option<u64>, format: DiagramFormat) -> Option<String> {
        let rows = self.store.session_rows(session);
        let name = rows.first().map(|r| r.event.route.as_str()).unwrap_or("");
        let route = self.route(name)?;
        Some(diagram::render(&route.contract, &rows, None, format))
    }
}

/// Listen on `addr` and serve `app`; a token is made when `addr` is not loopback.
pub async fn serve(addr: SocketAddr, mut app: App) -> std::io::Result<Serving> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        app.token = Some(token()?);
    }
    let shown = if local.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), local.port())
    } else {
        local
    };
    let url = match &app.token {
        Some(t) => format!("http://{shown}/?token={t}"),
        None => format!("http://{shown}/"),
    };
    let (stop, stop_rx) = watch::channel(false);
    let router = router(Arc::new(app), stop_rx.clone());
    let mut done = stop_rx;
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = done.wait_for(|s| *s).await;
            })
            .await
    });
    Ok(Serving {
        url,
        local,
        stop,
        task,
    })
}

impl App {
    /// A view of `store` with no token yet ([`serve`] decides), reading the run's relay
    /// counters from `relay` once it is set.
    pub fn new(
        store: Arc<Store>,
        metrics: Arc<Metrics>,
        relay: Arc<OnceLock<Arc<Shared>>>,
        routes: Vec<WebRoute>,
    ) -> App {
        App {
            store,
            metrics,
            routes,
            source: "live",
            mode: None,
            trace_url: None,
            relay,
            token: None,
        }
    }
}

fn token() -> std::io::Result<String> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| std::io::Error::other("no random bytes for the web view's token"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The handlers' state: the view, and the flag that ends live streams when it stops.
type Ctx = (Arc<App>, watch::Receiver<bool>);

fn router(app: Arc<App>, stop: watch::Receiver<bool>) -> Router {
    let state: Ctx = (app.clone(), stop);
    Router::new()
        .route(
            "/",
            get(|| async { page(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/assets/app.js",
            get(|| async { page(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/app.css",
            get(|| async { page(APP_CSS, "text/css; charset=utf-8") }),
        )
        .route("/api/info", get(info))
        .route("/api/rows", get(rows))
        .route("/api/rows/{n}", get(row))
        .route("/api/sessions", get(sessions))
        .route("/api/stats", get(stats))
        .route("/api/live", get(live))
        .route("/api/diagram", get(diagram))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(app, auth))
        .with_state(state)
}

fn page(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn bad(status: StatusCode, text: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// Every request needs the token when there is one: in the query (which also sets the
/// cookie) or the cookie.
async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let Some(want) = app.token.as_deref() else {
        return next.run(req).await;
    };
    let in_query = params(req.uri().query())
        .iter()
        .any(|(k, v)| k == "token" && v == want);
    let in_cookie = (req.headers().get_all(header::COOKIE).iter())
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(k, v)| k == COOKIE && v == want);
    if !in_query && !in_cookie {
        return bad(
            StatusCode::UNAUTHORIZED,
            "this view needs its token: open the URL contract-proxy printed on start\n".into(),
        );
    }
    let mut resp = next.run(req).await;
    if in_query {
        let c = format!("{COOKIE}={want}; HttpOnly; SameSite=Strict; Path=/");
        if let Ok(v) = HeaderValue::from_str(&c) {
            resp.headers_mut().insert(header::SET_COOKIE, v);
        }
    }
    resp
}

fn params(q: Option<&str>) -> Vec<(String, String)> {
    q.and_then(|q| serde_urlencoded::from_str(q).ok())
        .unwrap_or_default()
}

async fn info(State((app, _)): State<Ctx>) -> Response {
    let first = app.routes.first();
    let routes: Vec<Value> = (app.routes.iter())
        .map(|r| json!({"name": r.name, "channel": r.channel, "listen": r.listen, "upstream": r.upstream, "client": r.client, "contract": r.contract.name}))
        .collect();
    axum::Json(json!({
        "contract": first.map(|r| r.contract.name.clone()),
        "version": first.map(|r| r.contract.version.clone()),
        "source": app.source,
        "mode": app.mode,
        "routes": routes,
        "trace_url": app.trace_url,
        "keep": app.store.bounds().rows,
    }))
    .into_response()
}

/// `/api/rows`: the query from its parameters, or a 400 naming what is wrong.
fn query(q: Option<&str>) -> Result<Query, String> {
    let mut out = Query {
        limit: 100,
        ..Query::default()
    };
    let num = |k: &str, v: &str| {
        v.parse::<u64>()
            .map_err(|_| format!("{k}={v:?} is not a number"))
    };
    for (k, v) in params(q) {
        match k.as_str() {
            "filter" => out.filters.push(v.parse()?),
            "q" if !v.is_empty() => out.text = Some(v),
            "q" => {}
            "session" if v.is_empty() || v == "all" => {}
            "session" => out.session = Some(num(&k, &v)?),
            "offset" => out.offset = usize::try_from(num(&k, &v)?).unwrap_or(usize::MAX),
            "limit" => out.limit = usize::try_from(num(&k, &v)?).unwrap_or(usize::MAX),
            "token" => {}
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    Ok(out)
}

async fn rows(State((app, _)): State<Ctx>, req: Request) -> Response {
    match query(req.uri().query()) {
        Ok(q) => axum::Json(app.store.page(&q)).into_response(),
        Err(e) => bad(StatusCode::BAD_REQUEST, e),
    }
}

async fn row(State((app, _)): State<Ctx>, Path(n): Path<u64>) -> Response {
    let Some((row, pair)) = app.store.get(n) else {
        return bad(StatusCode::NOT_FOUND, format!("row {n} is not kept\n"));
    };
    let route = app.route(&row.event.route);
    let trace = app.trace_url.as_deref();
    axum::Json(detail::detail(route, &row, pair, trace)).into_response()
}

async fn sessions(State((app, _)): State<Ctx>) -> Response {
    axum::Json(app.store.sessions()).into_response()
}

fn stats_of(app: &App) -> Value {
    let c = app.store.counts();
    let mut v = serde_json::to_value(&c).unwrap_or(Value::Null);
    let relay = app.relay.get().map(|r| {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &r.stats;
        let drops = r.unrecorded.load(Relaxed) + s.notify_failed.load(Relaxed);
        (
            s.refused.load(Relaxed),
            s.held.load(Relaxed),
            s.sent.load(Relaxed),
            drops,
        )
    });
    let (refused, held, sent, drops) = relay.unwrap_or_default();
    if let Value::Object(m) = &mut v {
        m.insert("refused".into(), refused.into());
        m.insert("held".into(), held.into());
        m.insert("sent".into(), sent.into());
        m.insert("drops".into(), drops.into());
    }
    v
}

async fn stats(State((app, _)): State<Ctx>) -> Response {
    axum::Json(stats_of(&app)).into_response()
}

/// Server-sent `tick` events: one at once, then one after each change, at most every
/// [`TICK`]; the stream ends when the view stops.
///
/// The first tick is the state before this stream counted as a watcher: whoever waits for
/// a watcher (the demo's script) starts after it, so a page's first tick shows the session
/// before it began. The receiver starts marked changed, so whatever happened between that
/// snapshot and the subscription still reaches the page one tick later.
async fn live(State((app, stop)): State<Ctx>) -> impl IntoResponse {
    let first = stats_of(&app);
    let mut rx = app.store.subscribe();
    rx.mark_changed();
    let stream = futures_util::stream::unfold(
        (rx, stop, app, Some(first)),
        |(mut rx, mut stop, app, first)| async move {
            let stats = match first {
                Some(stats) => stats,
                None => {
                    tokio::select! {
                        r = rx.changed() => r.ok()?,
                        _ = stop.wait_for(|s| *s) => return None,
                    }
                    tokio::time::sleep(TICK).await;
                    rx.borrow_and_update();
                    stats_of(&app)
                }
            };
            let ev = SseEvent::default().event("tick").json_data(stats);
            let ev = ev.unwrap_or_else(|_| SseEvent::default().event("tick"));
            Some((Ok::<_, Infallible>(ev), (rx, stop, app, None)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

async fn diagram(State((app, _)): State<Ctx>, req: Request) -> Response {
    let mut session = None;
    let mut format = DiagramFormat::Svg;
    for (k, v) in params(req.uri().query()) {
        match (k.as_str(), v.as_str()) {
            ("session", "" | "all") => {}
            ("session", s) => match s.parse() {
                Ok(s) => session = Some(s),
                Err(_) => return bad(StatusCode::BAD_REQUEST, format!("session={s:?}")),
            },
            ("format", "svg") => format = DiagramFormat::Svg,
            ("format", "mermaid") => format = DiagramFormat::Mermaid,
            ("format", f) => return bad(StatusCode::BAD_REQUEST, format!("format={f:?}")),
            _ => {}
        }
    }
    let Some(text) = app.diagram(session, format) else {
        return bad(StatusCode::NOT_FOUND, "no routes\n".into());
    };
    let kind = match format {
        DiagramFormat::Svg => "image/svg+xml",
        DiagramFormat::Mermaid => "text/plain; charset=utf-8",
    };
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}

async fn metrics(State((app, _)): State<Ctx>) -> Response {
    match app.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => bad(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
