//! toolchannel's own hooks and its one hand-written check (seed 004 «Канал
//! инструментов», digest P4, contract `schema/contracts/toolchannel.json`).
//!
//! The hooks open every session the derived suite plays, over the real WebSocket.
//! Who dials follows the contract (`connects: worker`). Playing the host, the suite
//! listens and a launched worker (`exec:CMD … {url} {token} {session} …`) dials it with
//! its Bearer token; playing the worker, the suite dials a launched host (`exec:CMD …
//! {listen} {token} {session} …`) with the token. Each check starts the implementation
//! afresh with a fresh token and session id. A target the suite does not launch
//! (`ws://…`) needs `--param token=… --param session=…`.
//!
//! The check left hand-written, `toolchannel.release` (playing the worker): the host
//! never releases idle or explicitly while one of its tools/call is unanswered, and its
//! release carries releaseGraceSeconds. The data has no rule of the form "not while a
//! request of another method is pending" yet. Everything else the seed implies is
//! derived: the handshake, identity and the effective version (`agreements`), heartbeats
//! (`timer.*`, the engine's `limit.raised` in `behaviour`), redials, exits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use contract::model::Kind;
use contract::wire::Wire;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

use super::door::{Door, knock_on};
use super::session::{free_port, fresh, unsendable};
use super::{Check, Ctx, Failure, Got, Row, Stdout, Target, Verdict, first_channel, str_at};
use contract_transport::conn::{BoxMsg, CloseFrame, Hello, Msg};
use contract_transport::endpoint::ws::WsListener;
use contract_transport::endpoint::{Endpoint, Listener, Options};

/// The request path of the WebSocket the suite serves or dials for a launched target.
const PATH: &str = "/worker";
/// How long the suite holds a host's `tools/call` in the release check.
const HOLD: Duration = Duration::from_millis(1200);
/// How often the suite heartbeats while it waits for a host to release (faster than the
/// interval: a host that releases after N heartbeats gets there quickly).
const RELEASE_BEAT: Duration = Duration::from_millis(150);
/// The name and tag the suite announces.
const SUITE_TAG: &str = "contract-proxy-conformance";

bodies! {
    w_release => worker_release,
}

/// The suite for `role` (`host` or `worker`); `None` for another role.
pub fn checks(role: &str) -> Option<Vec<Check>> {
    let rows: Vec<Row> = vec![(
        "toolchannel.release",
        "agentfy/release never during a tools/call unless deadline/failed, carrying the token's sessionId and releaseGraceSeconds",
        "4. agentfy/release; P4.8 #18, #19 (T-5, T-12, T-52)",
        Err(
            "the worker's release report and its close 4005 are the derived end.hostSession.releasing (the transition's `ends`, T-68)",
        ),
        Ok(w_release),
    )];
    super::table(role, ["host", "worker"], rows)
}

// ---------------------------------------------------------------------------------------------
// What the contract says, by name.

/// The contract's values the suite uses, looked up by name once per check.
struct K {
    wire: Arc<Wire>,
    channel: String,
    /// Channel majors (WebSocket subprotocols), first = the one spoken.
    majors: Vec<String>,
    /// MCP protocol versions.
    mcp: Vec<String>,
    /// Channel minors listed by the contract.
    minors: Vec<String>,
}

/// A declared version's string values, as listed.
fn version_values(c: &contract::model::Contract, name: &str) -> Vec<String> {
    c.version_values(name)
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

impl K {
    fn new(cx: &Ctx) -> Result<Arc<K>, Failure> {
        let c = cx.wire.contract();
        let channel = first_channel(&cx.wire)?;
        let k = K {
            wire: cx.wire.clone(),
            channel,
            majors: version_values(c, "channelMajor"),
            mcp: version_values(c, "mcpProtocolVersion"),
            minors: version_values(c, "channelVersion"),
        };
        if k.majors.is_empty() || k.mcp.is_empty() || k.minors.is_empty() {
            return Err(Failure::new(
                "the contract lists no channelMajor, mcpProtocolVersion or channelVersion values",
            ));
        }
        Ok(Arc::new(k))
    }

    fn err(&self, name: &str) -> Result<i64, Failure> {
        super::int_error(self.wire.contract(), name)
    }

    /// A named value of an integer code table.
    fn table_code(&self, table: &str, name: &str) -> Result<u16, Failure> {
        let v = &self.wire.contract().code(table, name)?.value;
        v.as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| Failure::new(format!("{table} {name} is {v}, not a 16-bit code")))
    }

    fn close(&self, name: &str) -> Result<u16, Failure> {
        self.table_code("closeCodes", name)
    }

    fn limit(&self, name: &str) -> Result<f64, Failure> {
        Ok(self.wire.limits().number(name)?)
    }

    /// A close reason of at most `closeReasonMaxBytes` (values truncated, never dropped, T-16).
    fn reason(&self, text: String) -> String {
        let max = self
            .limit("closeReasonMaxBytes")
            .map(|m| m as usize)
            .unwrap_or(usize::MAX);
        let mut r = text;
        while r.len() > max {
            r.pop();
        }
        r
    }
}

fn secs(v: f64) -> Result<Duration, Failure> {
    if v.is_finite() && (0.0..1e9).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(Failure::new(format!("not a duration: {v}")))
    }
}

fn semver(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.split(['-', '+']).next()?;
    let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

fn is_request(g: &Got, method: &str) -> bool {
    g.ok()
        .is_some_and(|m| m.kind == Kind::Request && m.method.as_deref() == Some(method))
}

fn evidence(f: Failure, who: &str, g: &Got) -> Failure {
    f.with(format!("frame from the {who}"), &g.raw)
}

fn closed(what: &str, code: Option<u16>, reason: &str) -> Failure {
    let c = code
        .map(|c| c.to_string())
        .unwrap_or_else(|| "no close frame".into());
    Failure::new(format!(
        "the connection ended ({c}) while waiting for {what}"
    ))
    .with("close reason", reason.as_bytes())
}

// ---------------------------------------------------------------------------------------------
// One WebSocket connection, every message validated against the contract.

enum Ev {
    Frame(Box<Got>),
    End(Option<u16>, String),
    Timeout,
}

struct Chan {
    k: Arc<K>,
    me: String,
    other: String,
    io: Option<BoxMsg>,
    /// Requests the suite sent: id → method (picks the result schema of the answer).
    mine: HashMap<String, String>,
    /// Requests the implementation sent: id → method.
    theirs: HashMap<String, String>,
    next_id: i64,
    ended: Option<(Option<u16>, String)>,
    /// Every frame received, in order.
    log: Vec<Got>,
}

fn key(id: &Value) -> String {
    id.to_string()
}

impl Chan {
    fn new(k: &Arc<K>, me: &str, other: &str, io: BoxMsg) -> Self {
        Chan {
            k: k.clone(),
            me: me.to_string(),
            other: other.to_string(),
            io: Some(io),
            mine: HashMap::new(),
            theirs: HashMap::new(),
            next_id: 0,
            ended: None,
            log: Vec::new(),
        }
    }

    async fn put(&mut self, m: Msg) -> Result<(), Failure> {
        let wait = Duration::from_secs(10);
        let Some(io) = self.io.as_mut() else {
            return Err(Failure::new("the connection is closed"));
        };
        match tokio::time::timeout(wait, io.send(m)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::new(format!("the suite could not send: {e}"))),
            Err(_) => Err(Failure::new(format!(
                "the suite could not send within {wait:?} (the {} does not read)",
                self.other
            ))),
        }
    }

    /// Validate `msg` as the suite's party's message and send it.
    async fn send(&mut self, msg: &Value) -> Result<(), Failure> {
        let bytes = serde_json::to_vec(msg).map_err(|e| Failure::new(e.to_string()))?;
        let m = {
            let theirs = &self.theirs;
            self.k
                .wire
                .decode_with(&self.k.channel, &self.me, &bytes, &|id| {
                    theirs.get(&key(id)).cloned()
                })
                .map_err(|v| unsendable(&self.me, &v, &bytes))?
        };
        self.put(Msg::Text(Bytes::from(bytes))).await?;
        match m.kind {
            Kind::Request => {
                if let (Some(id), Some(method)) = (&m.id, &m.method) {
                    self.mine.insert(key(id), method.clone());
                }
            }
            Kind::Response | Kind::Error => {
                if let Some(id) = m.value.get("id") {
                    self.theirs.remove(&key(id));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn id(&mut self) -> Value {
        self.next_id += 1;
        json!(self.next_id)
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<Value, Failure> {
        let id = self.id();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        Ok(id)
    }

    async fn notify(&mut self, method: &str, params: Option<Value>) -> Result<(), Failure> {
        let mut m = json!({"jsonrpc": "2.0", "method": method});
        if let (Some(p), Some(o)) = (params, m.as_object_mut()) {
            o.insert("params".into(), p);
        }
        self.send(&m).await
    }

    async fn reply(&mut self, id: &Value, result: Value) -> Result<(), Failure> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await
    }

    async fn error(&mut self, id: &Value, code: i64, message: &str) -> Result<(), Failure> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
            .await
    }

    /// Close with `code` and `reason`, then stop reading.
    async fn close(&mut self, code: u16, reason: &str) {
        let reason = self.k.reason(reason.to_string());
        if let Some(mut io) = self.io.take() {
            let wait = Duration::from_secs(2);
            let _ = tokio::time::timeout(wait, async {
                let _ = io
                    .send(Msg::Close(Some(CloseFrame {
                        code,
                        reason: reason.clone(),
                    })))
                    .await;
                // The closing handshake: read (and drop) until the peer's close. Dropping the
                // socket with its frames unread would reset the connection, and a reset can
                // destroy the close frame before the peer reads its code.
                while let Some(Ok(m)) = io.next().await {
                    if matches!(m, Msg::Close(_)) {
                        break;
                    }
                }
                let _ = io.close().await;
            })
            .await;
        }
        self.ended = Some((Some(code), format!("closed by the suite: {reason}")));
    }

    fn decode(&mut self, payload: Bytes) -> Got {
        let msg = {
            let mine = &self.mine;
            self.k
                .wire
                .decode_with(&self.k.channel, &self.other, &payload, &|id| {
                    mine.get(&key(id)).cloned()
                })
        };
        if let Ok(m) = &msg
            && m.kind == Kind::Request
            && let (Some(id), Some(method)) = (&m.id, &m.method)
        {
            self.theirs.insert(key(id), method.clone());
        }
        let got = Got {
            raw: payload,
            msg: msg.map_err(Box::new),
            at: Instant::now(),
        };
        self.log.push(got.clone());
        got
    }

    async fn next(&mut self, until: Instant) -> Ev {
        if let Some((c, r)) = &self.ended {
            return Ev::End(*c, r.clone());
        }
        let Some(io) = self.io.as_mut() else {
            return Ev::End(None, "closed".into());
        };
        let got = tokio::time::timeout_at(until.into(), io.next()).await;
        let end = |s: &mut Self, code: Option<u16>, reason: String| {
            s.io = None;
            s.ended = Some((code, reason.clone()));
            Ev::End(code, reason)
        };
        match got {
            Err(_) => Ev::Timeout,
            Ok(None) => end(self, None, "end of stream".into()),
            Ok(Some(Err(e))) => end(self, None, e.to_string()),
            Ok(Some(Ok(Msg::Close(f)))) => match f {
                Some(f) => end(self, Some(f.code), f.reason),
                None => end(self, None, "close frame without a code".into()),
            },
            Ok(Some(Ok(Msg::Text(b) | Msg::Binary(b)))) => Ev::Frame(Box::new(self.decode(b))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reaching the implementation.

/// The derived checks' sessions, opened the way the hand-written checks open theirs:
/// playing the host, the worker launched with a fresh token and session id (or dialing
/// in with the `--param` ones) and its upgrade admitted; playing the worker, the host
/// launched (or named) and dialed with the token. The contract's examples carry one
/// session id: the session's own stands in for it ([`Ctx::aliases`]).
pub const HOOKS: super::Hooks = super::Hooks {
    opener: Some(open_session),
    door: Some(door),
};

/// A session's upgrade, unanswered, for the derived `upgrade.*` checks: the worker
/// launched with a fresh token and dialing in, or the host launched and named.
fn door(cx: &mut Ctx) -> super::BodyFutureOf<'_, Door> {
    Box::pin(async move {
        if cx.role == "host" {
            let dock = worker_dock(cx).await?;
            let wait = cx.opts.deadline;
            let p = cx.unless_failed(knock_on(&dock.l, wait)).await?;
            cx.token = Some(dock.token.clone());
            cx.hold(dock);
            return Ok(Door::Knock(p));
        }
        let b = host_berth(cx).await?;
        cx.token = Some(b.token.clone());
        Ok(Door::Dial {
            addr: b.addr,
            path: b.path,
            tls: false,
        })
    })
}

fn open_session(cx: &mut Ctx) -> super::BodyFutureOf<'_, super::Peer> {
    Box::pin(async move {
        let k = K::new(cx)?;
        let (io, session) = match cx.role.as_str() {
            "host" => {
                let dock = worker_dock(cx).await?;
                let wait = cx.opts.deadline;
                let io = admit(cx, &k, &dock.l, wait).await?;
                let session = dock.session.clone();
                cx.again = Some(next_dial(k.clone(), dock.l.clone()));
                cx.hold(dock);
                (io, session)
            }
            _ => {
                let b = host_berth(cx).await?;
                let io = dial_host(cx, &k, &b).await?;
                let session = b.session.clone();
                cx.again = Some(redial(k.clone(), b));
                (io, session)
            }
        };
        cx.aliases = example_session(cx)
            .map(|e| (e, Value::String(session)))
            .into_iter()
            .collect();
        cx.peer_on(contract_transport::conn::Conn::Messages(io))
    })
}

/// One more connection to the host a session reached, with the same token (the claims
/// check's redials).
fn redial(k: Arc<K>, b: Berth) -> super::session::Again {
    let b = Arc::new(b);
    Box::new(move |cx: &mut Ctx| {
        let (k, b) = (k.clone(), b.clone());
        Box::pin(async move {
            let io = dial_host(cx, &k, &b).await?;
            cx.peer_on(contract_transport::conn::Conn::Messages(io))
        })
    })
}

/// The launched worker's next dial to the listener it dialed (the redial checks).
fn next_dial(k: Arc<K>, l: Arc<Listener>) -> super::session::Again {
    Box::new(move |cx: &mut Ctx| {
        let (k, l) = (k.clone(), l.clone());
        Box::pin(async move {
            let wait = cx.opts.deadline;
            let io = admit(cx, &k, &l, wait).await?;
            cx.peer_on(contract_transport::conn::Conn::Messages(io))
        })
    })
}

/// The session id the contract's initialize example carries.
fn example_session(cx: &Ctx) -> Option<Value> {
    let m = cx.wire.contract().methods.get("initialize")?;
    m.examples
        .iter()
        .find(|e| e.part == contract::model::Part::Call)
        .and_then(|e| e.message.pointer("/params/_meta/agentfy/sessionId"))
        .cloned()
}

/// Where a worker under test dials the suite (the suite plays the host).
struct Dock {
    l: Arc<Listener>,
    token: String,
    /// The SESSION_ID the worker was given.
    session: String,
}

/// Where the suite dials a host under test (the suite plays the worker).
struct Berth {
    addr: String,
    path: String,
    token: String,
    /// The token's sub: the session id the host believes.
    session: String,
}

fn fill(argv: &[String], subs: &[(&str, String)]) -> Vec<String> {
    argv.iter()
        .map(|a| {
            let mut a = a.clone();
            for (k, v) in subs {
                a = a.replace(&format!("{{{k}}}"), v);
            }
            a
        })
        .collect()
}

/// Launch the target with its placeholders filled in and a fresh token and session id,
/// which it returns.
fn start(
    cx: &mut Ctx,
    argv: &[String],
    url: String,
    listen: String,
    port: String,
) -> Result<(String, String), Failure> {
    let (token, session) = (fresh("token"), fresh("session"));
    let argv = fill(
        argv,
        &[
            ("url", url),
            ("listen", listen),
            ("port", port),
            ("token", token.clone()),
            ("session", session.clone()),
        ],
    );
    cx.spawn(&argv, Stdout::Discard)?;
    Ok((token, session))
}

/// Token and session of a target the suite does not launch (`--param`).
fn given(cx: &Ctx) -> Result<(String, String), Failure> {
    match (cx.opts.param("token"), cx.opts.param("session")) {
        (Some(t), Some(s)) => Ok((t.to_string(), s.to_string())),
        _ => Err(Failure::new(
            "a target the suite does not launch needs --param token=TOKEN --param session=SESSION_ID",
        )),
    }
}

/// Listen, and start the worker (or wait for one) that dials the suite.
async fn worker_dock(cx: &mut Ctx) -> Result<Dock, Failure> {
    let target = match cx.target() {
        Target::Template { argv } => Ok(argv.clone()),
        Target::Accept { control, .. } => Err(control.clone()),
        _ => {
            return Err(Failure::new(
                "--play host needs --target exec:CMD with {url} (and {token}, {session}) or a ws://HOST:PORT/PATH to listen on",
            ));
        }
    };
    match target {
        Ok(argv) => {
            let l = WsListener::bind("127.0.0.1:0", PATH, false, &Options::default())
                .await
                .map_err(|e| Failure::new(format!("cannot listen for the worker: {e}")))?;
            let url = l.local();
            let listen = url
                .trim_start_matches("ws://")
                .trim_end_matches(PATH)
                .to_string();
            let port = listen.rsplit(':').next().unwrap_or("").to_string();
            let (token, session) = start(cx, &argv, url, listen, port)?;
            Ok(Dock {
                l: Arc::new(Listener::Ws(l)),
                token,
                session,
            })
        }
        Err(l) => {
            let (token, session) = given(cx)?;
            Ok(Dock { l, token, session })
        }
    }
}

/// Start the host (or name the one that listens) the suite dials.
async fn host_berth(cx: &mut Ctx) -> Result<Berth, Failure> {
    let target = match cx.target() {
        Target::Template { argv } => Ok(argv.clone()),
        Target::Dial {
            control:
                Endpoint::Ws {
                    tls: false,
                    addr,
                    path,
                },
            ..
        } => Err((addr.clone(), path.clone())),
        _ => {
            return Err(Failure::new(
                "--play worker needs --target exec:CMD with {listen} or {url} (and {token}, {session}) or a ws://HOST:PORT/PATH to dial",
            ));
        }
    };
    match target {
        Ok(argv) => {
            let port = free_port().await?;
            let addr = format!("127.0.0.1:{port}");
            let url = format!("ws://{addr}{PATH}");
            let (token, session) = start(cx, &argv, url, addr.clone(), port.to_string())?;
            Ok(Berth {
                addr,
                path: PATH.to_string(),
                token,
                session,
            })
        }
        Err((addr, path)) => {
            let (token, session) = given(cx)?;
            Ok(Berth {
                addr,
                path,
                token,
                session,
            })
        }
    }
}

/// The worker's next dial to `l` within `wait`, answered with 101 and the spoken major. A
/// worker that exits with an error first never dials: that fails at once.
async fn admit(cx: &mut Ctx, k: &K, l: &Listener, wait: Duration) -> Result<BoxMsg, Failure> {
    let p = cx.unless_failed(knock_on(l, wait)).await?;
    p.accept(Some(&k.majors[0]))
        .await
        .map_err(|e| Failure::new(format!("completing the worker's upgrade: {e}")))
}

// ---------------------------------------------------------------------------------------------
// A session, as the suite plays it.

struct Sess {
    ch: Chan,
    k: Arc<K>,
    wait: Duration,
    /// Budgets: those sent (playing the host) or received (playing the worker).
    budgets: serde_json::Map<String, Value>,
    /// Playing the worker: its identity and versions.
    own_sid: String,
    instance: String,
    attempt: u64,
    minor: String,
    effective: Option<String>,
    hb_every: Option<Duration>,
    hb_next: Option<Instant>,
    hb_answers: Vec<Got>,
    hold_calls: bool,
    held: Vec<(Value, Instant)>,
    release: Option<Got>,
    /// The check waits for the release (no note when it comes).
    expect_release: bool,
    running_at: Option<Instant>,
    started: Instant,
    notes: Vec<String>,
}

impl Sess {
    fn new(k: &Arc<K>, io: BoxMsg, sid: &str, wait: Duration) -> Self {
        Sess {
            ch: Chan::new(k, "worker", "host", io),
            k: k.clone(),
            wait,
            budgets: serde_json::Map::new(),
            own_sid: sid.to_string(),
            instance: fresh("instance"),
            attempt: 0,
            minor: k.minors[0].clone(),
            effective: None,
            hb_every: None,
            hb_next: None,
            hb_answers: Vec::new(),
            hold_calls: false,
            held: Vec::new(),
            release: None,
            expect_release: false,
            running_at: None,
            started: Instant::now(),
            notes: Vec::new(),
        }
    }

    fn soon(&self) -> Instant {
        Instant::now() + self.wait
    }

    fn bad(&self, g: &Got, why: impl Into<String>) -> Failure {
        evidence(Failure::new(why), "host", g)
    }

    fn budget(&self, name: &str) -> Result<f64, Failure> {
        self.budgets
            .get(name)
            .and_then(Value::as_f64)
            .ok_or_else(|| Failure::new(format!("no budget {name} in initialize")))
    }

    /// Send a heartbeat when one is due (playing the worker).
    async fn tick(&mut self) -> Result<(), Failure> {
        if let (Some(every), Some(due)) = (self.hb_every, self.hb_next)
            && Instant::now() >= due
        {
            self.hb_next = Some(Instant::now() + every);
            let p = self.heartbeat_params(None);
            self.ch.request("agentfy/heartbeat", p).await?;
        }
        Ok(())
    }

    fn heartbeat_params(&self, version: Option<&str>) -> Value {
        json!({
            "sessionId": self.own_sid,
            "idleSeconds": 0,
            "execSeconds": self.started.elapsed().as_secs(),
            "activeToolCalls": self.held.len(),
            "workspaceBytes": 0,
            "channelVersion": version.map(str::to_string).or_else(|| self.effective.clone()).unwrap_or_else(|| self.minor.clone()),
        })
    }

    fn stop(&self, until: Instant) -> Instant {
        match self.hb_next {
            Some(d) if d < until && self.hb_every.is_some() => d,
            _ => until,
        }
    }

    /// Answer what the implementation sends that the check is not waiting for.
    async fn background(&mut self, g: &Got) -> Result<(), Failure> {
        let v = match g.value() {
            Some(v) => v.clone(),
            None => return Ok(()),
        };
        let method = v
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let id = v.get("id").cloned();
        if method.is_empty() {
            // An answer to one of ours: keep heartbeat answers for the checks.
            if let Some(id) = &id
                && self.ch.mine.get(&key(id)).map(String::as_str) == Some("agentfy/heartbeat")
            {
                self.hb_answers.push(g.clone());
            }
            return Ok(());
        }
        let Some(id) = id else {
            return Ok(()); // notifications are logged (Chan::log), never answered
        };
        match method.as_str() {
            "tools/list" => {
                self.ch.reply(&id, json!({"tools": [echo_tool()]})).await?;
                self.running();
            }
            "tools/call" if self.hold_calls => self.held.push((id, Instant::now())),
            "tools/call" => self.ch.reply(&id, echo_result()).await?,
            "agentfy/release" => {
                self.release = Some(g.clone());
                self.ch
                    .reply(
                        &id,
                        json!({"accepted": true, "outputsFlushed": true, "outputs": []}),
                    )
                    .await?;
                let code = self.k.close("RELEASED")?;
                self.ch.close(code, &format!("{code} released")).await;
                if !self.expect_release {
                    self.notes
                        .push("the host released the session during the check".into());
                }
            }
            _ => {
                let code = self.k.err("CAPABILITY_NOT_NEGOTIATED")?;
                self.ch
                    .error(&id, code, "CAPABILITY_NOT_NEGOTIATED")
                    .await?;
            }
        }
        Ok(())
    }

    fn running(&mut self) {
        if self.running_at.is_none() {
            self.running_at = Some(Instant::now());
            if let Some(every) = self.hb_every {
                self.hb_next = Some(Instant::now() + every);
            }
        }
    }

    /// Read until `pick` takes a frame; everything else is answered in the background.
    async fn until<T>(
        &mut self,
        what: &str,
        until: Instant,
        mut pick: impl FnMut(&Got) -> Option<T>,
    ) -> Result<T, Failure> {
        loop {
            let stop = self.stop(until);
            match self.ch.next(stop).await {
                Ev::Frame(g) => {
                    if let Some(t) = pick(&g) {
                        return Ok(t);
                    }
                    self.background(&g).await?;
                }
                Ev::End(code, reason) => return Err(closed(what, code, &reason)),
                Ev::Timeout => {
                    if Instant::now() >= until {
                        return Err(Failure::new(format!("no {what} from the host in time")));
                    }
                    self.tick().await?;
                }
            }
        }
    }

    /// The next `method` request of the implementation (`what` names it in a failure).
    async fn request_of(
        &mut self,
        what: &str,
        method: &str,
        until: Instant,
    ) -> Result<Got, Failure> {
        self.until(what, until, |g| is_request(g, method).then(|| g.clone()))
            .await
    }

    /// Wait for initialize and answer it; returns the initialize request.
    async fn accept_initialize(&mut self) -> Result<Got, Failure> {
        let until = self.soon();
        let g = self.request_of("initialize", "initialize", until).await?;
        let v = g.value().cloned().unwrap_or(Value::Null);
        if let Some(b) = v
            .pointer("/params/_meta/agentfy/budgets")
            .and_then(Value::as_object)
        {
            self.budgets = b.clone();
        }
        let host_minor = str_at(&v, "/params/_meta/agentfy/channelVersion").unwrap_or("");
        self.effective = Some(
            if semver(host_minor).is_some_and(|h| semver(&self.minor).is_some_and(|w| h < w)) {
                host_minor.to_string()
            } else {
                self.minor.clone()
            },
        );
        let asked = str_at(&v, "/params/protocolVersion").unwrap_or("");
        let protocol = if self.k.mcp.iter().any(|m| m == asked) {
            asked.to_string()
        } else {
            self.k.mcp[0].clone()
        };
        let result = json!({
            "protocolVersion": protocol,
            "serverInfo": {"name": "agentfy-worker", "version": SUITE_TAG},
            "capabilities": {"tools": {"listChanged": true}},
            "_meta": {"agentfy": {
                "sessionId": self.own_sid, "channelVersion": self.minor,
                "instanceId": self.instance, "attempt": self.attempt,
            }}
        });
        let id = v.get("id").cloned().unwrap_or(Value::Null);
        self.ch.reply(&id, result).await?;
        Ok(g)
    }

    async fn initialized(&mut self) -> Result<(), Failure> {
        self.ch.notify("notifications/initialized", None).await
    }

    async fn ready(&mut self) -> Result<(), Failure> {
        let p = json!({"sessionId": self.own_sid, "tools": ["echo"], "workspace": "/workspace", "bootMillis": 0});
        self.ch.notify("agentfy/ready", Some(p)).await
    }

    /// Wait for tools/list and answer it: the session is running.
    async fn listed(&mut self) -> Result<(), Failure> {
        let until = self.soon();
        let g = self.request_of("tools/list", "tools/list", until).await?;
        self.background(&g).await
    }

    /// The whole handshake, heartbeats on at the budget interval.
    async fn up(&mut self) -> Result<(), Failure> {
        self.accept_initialize().await?;
        self.hb_every = Some(secs(self.budget("heartbeatIntervalSeconds")?)?);
        self.initialized().await?;
        self.ready().await?;
        self.listed().await
    }
}

fn echo_tool() -> Value {
    json!({"name": "echo", "description": "Return the given text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}})
}

fn echo_result() -> Value {
    json!({"content": [{"type": "text", "text": "conformance"}]})
}

/// Playing the worker: a launched (or listening) host, dialed; the contract, the berth and
/// the session.
async fn worker_session(cx: &mut Ctx) -> Result<(Arc<K>, Berth, Sess), Failure> {
    let k = K::new(cx)?;
    let b = host_berth(cx).await?;
    let s = worker_dial(cx, &k, &b).await?;
    Ok((k, b, s))
}

/// Playing the worker: dial the host with the token and the spoken major.
async fn worker_dial(cx: &mut Ctx, k: &Arc<K>, b: &Berth) -> Result<Sess, Failure> {
    let io = dial_host(cx, k, b).await?;
    Ok(Sess::new(k, io, &b.session, cx.opts.deadline))
}

/// The upgrade a valid worker sends: the token and the spoken major.
async fn dial_host(cx: &mut Ctx, k: &Arc<K>, b: &Berth) -> Result<BoxMsg, Failure> {
    let hello = Hello {
        path: b.path.clone(),
        subprotocols: vec![k.majors[0].clone()],
        authorization: Some(format!("Bearer {}", b.token)),
    };
    match cx.knock((&b.addr, &b.path, false), &hello).await? {
        Ok(io) => Ok(io),
        Err(r) => Err(
            Failure::new(format!("the host refused a valid upgrade: {r}"))
                .with("response body", &r.body),
        ),
    }
}

fn pass(s: &Sess, what: String) -> Result<Verdict, Failure> {
    if s.notes.is_empty() {
        Ok(Verdict::Pass(what))
    } else {
        Ok(Verdict::Pass(format!(
            "{what} (note: {})",
            s.notes.join("; ")
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// release

async fn worker_release(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (k, b, mut s) = worker_session(cx).await?;
    s.hold_calls = true;
    s.up().await?;
    s.hb_every = Some(RELEASE_BEAT);
    s.hb_next = Some(Instant::now());
    let until = Instant::now() + cx.opts.check_deadline.mul_f64(0.8);
    let mut calls = 0;
    let rel = loop {
        // Answer held calls after HOLD; a release (idle/explicit) meanwhile breaks the rule.
        let due = s.held.first().map(|(_, at)| *at + HOLD);
        let stop = due.unwrap_or(Instant::now() + RELEASE_BEAT).min(until);
        let got = s
            .request_of("agentfy/release", "agentfy/release", stop)
            .await;
        match got {
            Ok(g) => break g,
            Err(f) if s.ch.ended.is_some() || Instant::now() >= until => return Err(f),
            Err(_) => {
                if s.held
                    .first()
                    .is_some_and(|(_, at)| Instant::now() >= *at + HOLD)
                {
                    let (id, _) = s.held.remove(0);
                    s.ch.reply(&id, echo_result()).await?;
                    calls += 1;
                }
            }
        }
    };
    let reason = rel
        .at_ptr("/params/reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !s.held.is_empty() && (reason == "idle" || reason == "explicit") {
        return Err(s.bad(
            &rel,
            format!("agentfy/release (reason {reason}) while a tools/call is in flight"),
        ));
    }
    if let Err(v) = &rel.msg {
        return Err(s.bad(
            &rel,
            format!("agentfy/release breaks the contract: {}", v.reason),
        ));
    }
    if rel.at_ptr("/params/sessionId").and_then(Value::as_str) != Some(b.session.as_str()) {
        return Err(s.bad(
            &rel,
            "agentfy/release carries another sessionId than the token's sub",
        ));
    }
    let grace = s.budgets.get("releaseGraceSeconds").cloned();
    if rel.at_ptr("/params/graceSeconds").cloned() != grace {
        return Err(s.bad(
            &rel,
            format!("graceSeconds is not releaseGraceSeconds {grace:?} (T-52)"),
        ));
    }
    s.hb_every = None;
    s.expect_release = true;
    s.background(&rel).await?;
    let closed_with = k.close("RELEASED")?;
    pass(
        &s,
        format!(
            "{calls} tools/call answered after {HOLD:?} with no release meanwhile; release reason {reason}; report sent, closed {closed_with}"
        ),
    )
}
