//! The toolchannel suite (seed 004 «Канал инструментов», digest P4, contract
//! `schema/contracts/toolchannel.json`): the lifecycle checks the seed implies
//! (digest P4.8), played as the host against a real worker (`--play host`) or as
//! the worker against a real host (`--play worker`), over the real WebSocket.
//!
//! Who dials follows the contract (`connects: worker`). Playing the host, the
//! suite listens and a launched worker (`exec:CMD … {url} {token} {session} …`)
//! dials it with its Bearer token; playing the worker, the suite dials a launched
//! host (`exec:CMD … {listen} {token} {session} …`) with the token. Each check
//! starts the implementation afresh with a fresh token and session id, so checks
//! never see each other's sessions. A target the suite does not launch
//! (`ws://…`) needs `--param token=… --param session=…`; the checks that judge a
//! process's exit code then note that it cannot be seen.
//!
//! One rule, one failing check: every check tolerates what another check judges
//! (the handshake order is judged by `toolchannel.handshake.order` only, the
//! reverse-capability refusals by the derived `call.<method>` checks only), and
//! whatever the implementation sends that a check is not waiting for is answered
//! as a plain conforming peer would (heartbeats, tool calls, unknown requests).
//! Codes, close codes, exit codes, limits and version names come from the
//! contract; the only numbers of the suite's own are its short test profile
//! (budgets sent in `initialize`, never above the contract's defaults) and the
//! slack it allows around timers.

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
use contract_transport::endpoint::{Endpoint, Incoming, Listener, Options};

/// The request path of the WebSocket the suite serves or dials for a launched target.
const PATH: &str = "/worker";
/// The suite's own short profile, sent as budgets when it plays the host: each value is
/// lowered to the contract's default if that is smaller (budgets may only be lowered).
/// Short so that heartbeats, the ready acknowledgement and redials happen within seconds.
const SHORT_PROFILE: [(&str, f64); 7] = [
    ("handshakeSeconds", 5.0),
    ("readySeconds", 10.0),
    ("readyAckSeconds", 5.0),
    ("heartbeatIntervalSeconds", 1.0),
    ("heartbeatGraceSeconds", 3.0),
    ("releaseGraceSeconds", 5.0),
    ("reconnectWindowSeconds", 20.0),
];
/// Slack allowed after a timer (scheduling, a loaded machine, a Python start-up).
const SLACK: Duration = Duration::from_millis(2500);
/// How much earlier than its budget a timer may fire (clock granularity of the peers).
const EARLY: Duration = Duration::from_millis(400);
/// How long the suite watches for something that must not happen before it acts.
const QUIET: Duration = Duration::from_millis(700);
/// How long the suite holds a host's `tools/call` in the release check.
const HOLD: Duration = Duration::from_millis(1200);
/// How often the suite heartbeats while it waits for a host to release (faster than the
/// interval: a host that releases after N heartbeats gets there quickly).
const RELEASE_BEAT: Duration = Duration::from_millis(150);
/// The name and tag the suite announces.
const SUITE_TAG: &str = "contract-proxy-conformance";

bodies! {
    h_init => host_init, w_init => worker_init,
    h_mismatch => host_mismatch, w_mismatch => worker_mismatch,
    h_channel => host_channel, w_channel => worker_channel,
    h_heartbeat => host_heartbeat, w_heartbeat => worker_heartbeat,
    w_release => worker_release,
}

/// The suite for `role` (`host` or `worker`); `None` for another role.
pub fn checks(role: &str) -> Option<Vec<Check>> {
    let rows: Vec<Row> = vec![
        (
            "toolchannel.handshake.initialize",
            "initialize first, capabilities {}, _meta.agentfy {sessionId = token sub, channelVersion, profile, budgets without dialSeconds}; the result carries protocolVersion and the worker's own sessionId, channelVersion, instanceId, attempt 0",
            "1. initialize (request and result); Identity; P4.8 #4, #5 (T-3, T-15, T-44)",
            Ok(h_init),
            Ok(w_init),
        ),
        (
            "toolchannel.session.mismatch",
            "result sessionId ≠ token sub → -32002 SESSION_MISMATCH, close 4002, no tools/list; the worker exits 77",
            "Identity; Error codes; P4.8 #6 (T-3, T-4, T-16)",
            Ok(h_mismatch),
            Ok(w_mismatch),
        ),
        (
            "toolchannel.version.channel",
            "every heartbeat carries the effective channelVersion min(host, worker); a wrong one → -32001 and close 4001 carrying both values",
            "Version rule (channel minor); 3. agentfy/heartbeat; P4.8 #17 (T-4, T-16)",
            Ok(h_channel),
            Ok(w_channel),
        ),
        (
            "toolchannel.heartbeat",
            "agentfy/heartbeat every heartbeatIntervalSeconds from serving, carrying the worker's sessionId; answered with continue, idleBudgetSeconds, execBudgetSeconds (never raised); continue: false is the derived end.hostSession.running",
            "3. agentfy/heartbeat; P4.8 #12, #16 (T-8, T-11, T-17)",
            Ok(h_heartbeat),
            Ok(w_heartbeat),
        ),
        (
            "toolchannel.release",
            "agentfy/release never during a tools/call unless deadline/failed, carrying the token's sessionId and releaseGraceSeconds",
            "4. agentfy/release; P4.8 #18, #19 (T-5, T-12, T-52)",
            Err(
                "the worker's release report and its close 4005 are the derived end.hostSession.releasing (the transition's `ends`, T-68)",
            ),
            Ok(w_release),
        ),
    ];
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
    budget_keys: Vec<String>,
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
        let budget_keys = c
            .defs
            .get("Budgets")
            .and_then(|b| b.get("properties"))
            .and_then(Value::as_object)
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        let k = K {
            wire: cx.wire.clone(),
            channel,
            majors: version_values(c, "channelMajor"),
            mcp: version_values(c, "mcpProtocolVersion"),
            minors: version_values(c, "channelVersion"),
            budget_keys,
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

    /// The worker exit `table`'s value `code` maps to.
    fn worker_exit(&self, table: &str, code: u16) -> Result<i32, Failure> {
        let v = self.wire.contract().code_for(table, &json!(code))?;
        v.mapped("workerExit")
            .and_then(Value::as_i64)
            .and_then(|e| i32::try_from(e).ok())
            .ok_or_else(|| Failure::new(format!("{table} {code} maps no workerExit")))
    }

    fn limit(&self, name: &str) -> Result<f64, Failure> {
        Ok(self.wire.limits().number(name)?)
    }

    /// The exit a worker owes after receiving close `code`.
    fn exit_after_close(&self, code: u16) -> Result<i32, Failure> {
        self.worker_exit("closeCodes", code)
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

    /// The lowest channel minor of the spoken major (`1.0.0`): no worker is below it.
    fn lowest_minor(&self) -> String {
        let major = semver(&self.minors[0]).map(|v| v.0).unwrap_or(1);
        format!("{major}.0.0")
    }

    fn highest_minor(&self) -> String {
        self.minors
            .iter()
            .max_by_key(|v| semver(v))
            .cloned()
            .unwrap_or_else(|| self.minors[0].clone())
    }

    /// The budgets the suite sends when it plays the host.
    fn short_budgets(&self) -> Result<serde_json::Map<String, Value>, Failure> {
        let mut out = serde_json::Map::new();
        for key in &self.budget_keys {
            let contract = self.limit(key)?;
            let mine = SHORT_PROFILE
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| *v)
                .unwrap_or(contract);
            out.insert(key.clone(), json!(mine.min(contract).max(1.0) as u64));
        }
        Ok(out)
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

fn code_of(g: &Got) -> Option<i64> {
    g.at_ptr("/error/code").and_then(Value::as_i64)
}

/// Whether `g` answers the request `id` (a result or an error).
fn answers(g: &Got, id: &Value) -> bool {
    g.value().is_some_and(|v| {
        v.get("method").is_none()
            && v.get("id") == Some(id)
            && (v.get("result").is_some() || v.get("error").is_some())
    })
}

fn is_request(g: &Got, method: &str) -> bool {
    g.ok()
        .is_some_and(|m| m.kind == Kind::Request && m.method.as_deref() == Some(method))
}

fn is_notification(g: &Got, method: &str) -> bool {
    g.value().is_some_and(|v| {
        v.get("id").is_none() && v.get("method").and_then(Value::as_str) == Some(method)
    })
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

/// An end of the connection that is not close `want` fails, as the end of waiting for `what`.
fn close_is(want: u16, code: Option<u16>, reason: &str, what: &str) -> Result<(), Failure> {
    if code == Some(want) {
        Ok(())
    } else {
        Err(closed(what, code, reason))
    }
}

/// A close reason that must name both `a` and `b` (the two sides' versions, T-16).
fn carries_both(close: u16, reason: &str, a: &str, b: &str) -> Result<(), Failure> {
    if reason.contains(a) && reason.contains(b) {
        return Ok(());
    }
    Err(Failure::new(format!(
        "close {close} does not carry both versions ({a}, {b})"
    ))
    .with("close reason", reason.as_bytes()))
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

    /// Send bytes as one text message, unvalidated (probes that break the contract).
    async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.put(Msg::Text(Bytes::copy_from_slice(bytes))).await
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

    /// A request the contract forbids the suite's party to send (a probe), sent as is.
    async fn request_raw(&mut self, method: &str, params: Value) -> Result<Value, Failure> {
        let id = self.id();
        let m = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(m.to_string().as_bytes()).await?;
        self.mine.insert(key(&id), method.to_string());
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

    async fn reply_raw(&mut self, id: &Value, result: Value) -> Result<(), Failure> {
        self.theirs.remove(&key(id));
        let m = json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.send_raw(m.to_string().as_bytes()).await
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
    launched: bool,
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
                launched: true,
            })
        }
        Err(l) => {
            let (token, session) = given(cx)?;
            Ok(Dock {
                l,
                token,
                session,
                launched: false,
            })
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
    /// The suite plays the host.
    host: bool,
    /// The token's sub (the session id the host believes).
    sid: String,
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
    /// Playing the host: the worker's heartbeats, reverse requests and answers.
    answer_hb: bool,
    beats: Vec<Got>,
    reverse: Vec<Got>,
    init_id: Option<Value>,
    result: Option<Got>,
    ready: Option<Got>,
    tools: Vec<String>,
    notes: Vec<String>,
}

impl Sess {
    fn new(k: &Arc<K>, host: bool, io: BoxMsg, sid: &str, wait: Duration) -> Self {
        let (me, other) = if host {
            ("host", "worker")
        } else {
            ("worker", "host")
        };
        Sess {
            ch: Chan::new(k, me, other, io),
            k: k.clone(),
            host,
            sid: sid.to_string(),
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
            answer_hb: true,
            beats: Vec::new(),
            reverse: Vec::new(),
            init_id: None,
            result: None,
            ready: None,
            tools: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn soon(&self) -> Instant {
        Instant::now() + self.wait
    }

    fn other(&self) -> &'static str {
        if self.host { "worker" } else { "host" }
    }

    fn bad(&self, g: &Got, why: impl Into<String>) -> Failure {
        evidence(Failure::new(why), self.other(), g)
    }

    /// An error answer `g` with code `want`; any other answer to what the suite sent (`sent`)
    /// fails, saying what it got (`tail` ends the text).
    fn coded(&self, g: &Got, want: i64, sent: &str, tail: &str) -> Result<(), Failure> {
        if code_of(g) == Some(want) {
            return Ok(());
        }
        Err(self.bad(
            g,
            format!(
                "{sent} got {:?}; the contract says {want}{tail}",
                code_of(g)
            ),
        ))
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

    /// Playing the host: the result of a heartbeat, the budgets unchanged.
    fn beat_result(&self, cont: bool) -> Value {
        json!({"continue": cont,
            "idleBudgetSeconds": self.budgets.get("idleSeconds").cloned().unwrap_or(json!(1)),
            "execBudgetSeconds": self.budgets.get("maxExecSeconds").cloned().unwrap_or(json!(1))})
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
        if self.host {
            match method.as_str() {
                "agentfy/heartbeat" if g.ok().is_some() => {
                    self.beats.push(g.clone());
                    if self.answer_hb {
                        let r = self.beat_result(true);
                        self.ch.reply(&id, r).await?;
                    }
                }
                m if m.starts_with("sampling/") => {
                    self.reverse.push(g.clone());
                    let code = self.k.err("SAMPLING_DISABLED")?;
                    self.ch.error(&id, code, "SAMPLING_DISABLED").await?;
                }
                m => {
                    if m.starts_with("elicitation/") || m.starts_with("roots/") {
                        self.reverse.push(g.clone());
                    }
                    let code = self.k.err("CAPABILITY_NOT_NEGOTIATED")?;
                    self.ch
                        .error(&id, code, "CAPABILITY_NOT_NEGOTIATED")
                        .await?;
                }
            }
            return Ok(());
        }
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
                        return Err(Failure::new(format!(
                            "no {what} from the {} in time",
                            self.other()
                        )));
                    }
                    self.tick().await?;
                }
            }
        }
    }

    /// The answer to request `id`.
    async fn answer(&mut self, what: &str, id: &Value, until: Instant) -> Result<Got, Failure> {
        let id = id.clone();
        self.until(what, until, |g| answers(g, &id).then(|| g.clone()))
            .await
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

    /// Send a heartbeat (with `version`, else the effective channelVersion) and return the
    /// answer, `what` naming it in a failure.
    async fn beat(&mut self, what: &str, version: Option<&str>) -> Result<Got, Failure> {
        let p = self.heartbeat_params(version);
        let id = self.ch.request("agentfy/heartbeat", p).await?;
        self.answer(what, &id, self.soon()).await
    }

    /// Read for `dur`; the first frame `bad` flags is returned (after the background saw it).
    async fn watch(
        &mut self,
        dur: Duration,
        mut bad: impl FnMut(&Got) -> bool,
    ) -> Result<Option<Got>, Failure> {
        let until = Instant::now() + dur;
        loop {
            let stop = self.stop(until);
            match self.ch.next(stop).await {
                Ev::Frame(g) => {
                    if bad(&g) {
                        return Ok(Some(*g));
                    }
                    self.background(&g).await?;
                }
                Ev::End(code, reason) => {
                    return Err(closed("nothing (a quiet watch)", code, &reason));
                }
                Ev::Timeout => {
                    if Instant::now() >= until {
                        return Ok(None);
                    }
                    self.tick().await?;
                }
            }
        }
    }

    /// Read until the connection ends, which must be close `want`: its reason and when it
    /// came. `what` names the wait (in a timeout), `judged` the close looked for (in a
    /// failure when the connection ends otherwise).
    async fn closes(
        &mut self,
        want: u16,
        what: &str,
        judged: &str,
        until: Instant,
    ) -> Result<(String, Instant), Failure> {
        let (code, reason, at) = self.end(what, until).await?;
        close_is(want, code, &reason, judged)?;
        Ok((reason, at))
    }

    /// Read until the connection ends: its close code and reason.
    async fn end(
        &mut self,
        what: &str,
        until: Instant,
    ) -> Result<(Option<u16>, String, Instant), Failure> {
        loop {
            let stop = self.stop(until);
            match self.ch.next(stop).await {
                // Best effort: the other side is closing, a reply may find the socket gone.
                Ev::Frame(g) => {
                    let _ = self.background(&g).await;
                }
                Ev::End(code, reason) => return Ok((code, reason, Instant::now())),
                Ev::Timeout => {
                    if Instant::now() >= until {
                        return Err(Failure::new(format!(
                            "the {} did not {what} in time",
                            self.other()
                        )));
                    }
                    let _ = self.tick().await;
                }
            }
        }
    }

    // --- playing the host ---------------------------------------------------------------

    fn init_params(&self, minor: &str, protocol: &str) -> Value {
        json!({
            "protocolVersion": protocol,
            "clientInfo": {"name": "agentfy-worker-gateway", "version": SUITE_TAG},
            "capabilities": {},
            "_meta": {"agentfy": {
                "sessionId": self.sid, "channelVersion": minor,
                "profile": "light", "budgets": self.budgets,
            }}
        })
    }

    /// Send initialize offering the newest channel minor and the spoken MCP version, and
    /// return its result (an error answer fails).
    async fn init(&mut self) -> Result<Got, Failure> {
        let p = self.init_params(&self.k.highest_minor(), &self.k.mcp[0]);
        self.initialize(p, false).await
    }

    /// Send initialize and return its result (an error answer fails).
    async fn initialize(&mut self, params: Value, raw: bool) -> Result<Got, Failure> {
        let id = if raw {
            self.ch.request_raw("initialize", params).await?
        } else {
            self.ch.request("initialize", params).await?
        };
        self.init_id = Some(id.clone());
        let until = self.soon();
        let g = self.answer("initialize result", &id, until).await?;
        if g.at_ptr("/error").is_some() {
            return Err(self.bad(&g, "the worker refused initialize"));
        }
        if let Err(v) = &g.msg {
            return Err(self.bad(
                &g,
                format!("the initialize result breaks the contract: {}", v.reason),
            ));
        }
        self.result = Some(g.clone());
        Ok(g)
    }

    /// After the result: wait for notifications/initialized and agentfy/ready (in any
    /// order; toolchannel.handshake.order judges it), then tools/list → serving.
    async fn serve(&mut self) -> Result<(), Failure> {
        let until = self.soon();
        let (mut init, mut ready) = (false, false);
        while !(init && ready) {
            let g = self
                .until("notifications/initialized and agentfy/ready", until, |g| {
                    (is_notification(g, "notifications/initialized")
                        || is_notification(g, "agentfy/ready"))
                    .then(|| g.clone())
                })
                .await?;
            if is_notification(&g, "agentfy/ready") {
                ready = true;
                self.ready = Some(g);
            } else {
                init = true;
            }
        }
        let id = self.ch.request("tools/list", json!({})).await?;
        let g = self.answer("tools/list result", &id, self.soon()).await?;
        if g.at_ptr("/error").is_some() || g.msg.is_err() {
            return Err(self.bad(&g, "tools/list was not answered with a valid result"));
        }
        self.tools = g
            .at_ptr("/result/tools")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        self.running_at = Some(Instant::now());
        Ok(())
    }

    fn result_meta(&self, field: &str) -> Option<Value> {
        self.result
            .as_ref()
            .and_then(|g| g.at_ptr(&format!("/result/_meta/agentfy/{field}")))
            .cloned()
    }

    // --- playing the worker -------------------------------------------------------------

    /// Wait for initialize and answer it (the result edited by `edit`; `raw` skips the
    /// suite's own validation, for probes); returns the initialize request.
    async fn accept_initialize(
        &mut self,
        edit: impl FnOnce(&mut Value),
        raw: bool,
    ) -> Result<Got, Failure> {
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
        let mut result = json!({
            "protocolVersion": protocol,
            "serverInfo": {"name": "agentfy-worker", "version": SUITE_TAG},
            "capabilities": {"tools": {"listChanged": true}},
            "_meta": {"agentfy": {
                "sessionId": self.own_sid, "channelVersion": self.minor,
                "instanceId": self.instance, "attempt": self.attempt,
            }}
        });
        edit(&mut result);
        let id = v.get("id").cloned().unwrap_or(Value::Null);
        if raw {
            self.ch.reply_raw(&id, result).await?;
        } else {
            self.ch.reply(&id, result).await?;
        }
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

    /// Stop heartbeating and let what is in flight (the host's first tools/call) settle
    /// before a probe the host answers by closing: a frame crossing a host's close and
    /// exit resets the socket and destroys the close frame.
    async fn settle(&mut self) -> Result<(), Failure> {
        self.hb_every = None;
        self.watch(QUIET, |_| false).await.map(drop)
    }

    /// The whole handshake, heartbeats on at the budget interval.
    async fn up(&mut self) -> Result<(), Failure> {
        self.accept_initialize(|_| {}, false).await?;
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

/// Playing the host: the worker's next dial within `wait`, admitted as a session.
async fn host_admit(
    cx: &mut Ctx,
    k: &Arc<K>,
    dock: &Dock,
    wait: Duration,
) -> Result<Sess, Failure> {
    let io = admit(cx, k, &dock.l, wait).await?;
    Ok(Sess::new(k, true, io, &dock.session, cx.opts.deadline))
}

/// Playing the host: a launched (or dialing) worker, admitted, as a session.
async fn host_session(cx: &mut Ctx, k: &Arc<K>) -> Result<(Dock, Sess), Failure> {
    let dock = worker_dock(cx).await?;
    let mut s = host_admit(cx, k, &dock, cx.opts.deadline).await?;
    s.budgets = k.short_budgets()?;
    Ok((dock, s))
}

/// Playing the host: a session through to serving.
async fn host_up(cx: &mut Ctx, k: &Arc<K>) -> Result<(Dock, Sess), Failure> {
    let (dock, mut s) = host_session(cx, k).await?;
    s.init().await?;
    s.serve().await?;
    Ok((dock, s))
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
    Ok(Sess::new(k, false, io, &b.session, cx.opts.deadline))
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

/// How a host ended a connection it had to refuse after the initialize result.
struct Refused {
    code: Option<u16>,
    reason: String,
    /// An error response with the code looked for arrived before the close.
    error_frame: bool,
}

/// Playing the worker, after an initialize result the host must refuse: wait for its
/// close. Nothing is sent at first (a host that closes and exits would reset a socket
/// with unread frames, destroying its close frame); a host still silent after
/// [`QUIET`] gets `notifications/initialized` and `agentfy/ready`, in case it decides
/// later. A tools/list or tools/call means the host went on with the session.
async fn refused(s: &mut Sess, what: &str, code: Option<i64>) -> Result<Refused, Failure> {
    let mut error_frame = false;
    let mut nudged = false;
    let until = s.soon();
    loop {
        let stop = if nudged {
            until
        } else {
            (Instant::now() + QUIET).min(until)
        };
        match s.ch.next(stop).await {
            Ev::Frame(g) => {
                if is_request(&g, "tools/list") || is_request(&g, "tools/call") {
                    return Err(s.bad(&g, format!("the host went on with a session after {what}")));
                }
                if code.is_some() && code_of(&g) == code {
                    error_frame = true;
                }
            }
            Ev::Timeout if !nudged && Instant::now() < until => {
                nudged = true;
                // Best effort: the host may be closing meanwhile.
                let _ = s.initialized().await;
                let _ = s.ready().await;
            }
            Ev::Timeout => {
                return Err(Failure::new(format!(
                    "the host did not close within {:?} after {what}",
                    s.wait
                )));
            }
            Ev::End(c, reason) => {
                return Ok(Refused {
                    code: c,
                    reason,
                    error_frame,
                });
            }
        }
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
// handshake

async fn host_init(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let k = K::new(cx)?;
    let (dock, s) = host_up(cx, &k).await?;
    let Some(g) = s.result.clone() else {
        return Err(Failure::new("no initialize result"));
    };
    let pv = g
        .at_ptr("/result/protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !k.mcp.iter().any(|m| m == pv) {
        return Err(s.bad(
            &g,
            format!("result protocolVersion {pv:?} is not one the contract lists"),
        ));
    }
    let sid = s.result_meta("sessionId");
    if dock.launched && sid.as_ref().and_then(Value::as_str) != Some(dock.session.as_str()) {
        return Err(s.bad(
            &g,
            format!(
                "result _meta.agentfy.sessionId is not the worker's own SESSION_ID {:?} (T-3)",
                dock.session
            ),
        ));
    }
    let cv = s.result_meta("channelVersion");
    let cv = cv.as_ref().and_then(Value::as_str).unwrap_or("");
    let host_major = semver(&k.highest_minor()).map(|v| v.0);
    if semver(cv).map(|v| v.0) != host_major {
        return Err(s.bad(
            &g,
            format!("result channelVersion {cv:?} is not a semver of the channel major"),
        ));
    }
    if s.result_meta("instanceId")
        .as_ref()
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(s.bad(&g, "result _meta.agentfy.instanceId is missing or empty"));
    }
    let attempt = s.result_meta("attempt").and_then(|v| v.as_u64());
    if attempt != Some(0) {
        return Err(s.bad(
            &g,
            format!("attempt on the first dial is {attempt:?}, not 0"),
        ));
    }
    if let Some(r) = s.ready.clone() {
        let rs = r.at_ptr("/params/sessionId").and_then(Value::as_str);
        if dock.launched && rs != Some(dock.session.as_str()) {
            return Err(s.bad(
                &r,
                "agentfy/ready carries another sessionId than the worker's own",
            ));
        }
    }
    pass(
        &s,
        format!("protocolVersion {pv}, channelVersion {cv}, attempt 0, own sessionId"),
    )
}

async fn worker_init(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (_, b, mut s) = worker_session(cx).await?;
    let g = s.accept_initialize(|_| {}, false).await?;
    if let Some(first) = s.ch.log.first()
        && !is_request(first, "initialize")
    {
        return Err(s.bad(first, "the host's first frame after 101 is not initialize"));
    }
    if let Err(v) = &g.msg {
        return Err(s.bad(&g, format!("initialize breaks the contract: {}", v.reason)));
    }
    let caps = g.at_ptr("/params/capabilities");
    if caps
        .and_then(Value::as_object)
        .is_none_or(|o| !o.is_empty())
    {
        return Err(s.bad(
            &g,
            "initialize capabilities are not {} (no sampling, elicitation, roots)",
        ));
    }
    let sid = g
        .at_ptr("/params/_meta/agentfy/sessionId")
        .and_then(Value::as_str);
    if sid != Some(b.session.as_str()) {
        return Err(s.bad(
            &g,
            format!(
                "initialize _meta.agentfy.sessionId is not the token's sub {:?}",
                b.session
            ),
        ));
    }
    for field in ["channelVersion", "profile", "budgets"] {
        if g.at_ptr(&format!("/params/_meta/agentfy/{field}"))
            .is_none()
        {
            return Err(s.bad(&g, format!("initialize _meta.agentfy has no {field}")));
        }
    }
    if g.at_ptr("/params/_meta/agentfy/budgets/dialSeconds")
        .is_some()
    {
        return Err(s.bad(
            &g,
            "initialize budgets carry dialSeconds (deliberately absent)",
        ));
    }
    s.hb_every = Some(secs(s.budget("heartbeatIntervalSeconds")?)?);
    s.initialized().await?;
    s.ready().await?;
    s.listed().await?;
    pass(
        &s,
        "initialize first, capabilities {}, sessionId = token sub, budgets without dialSeconds"
            .into(),
    )
}

// ---------------------------------------------------------------------------------------------
// identity and redials

async fn host_mismatch(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let k = K::new(cx)?;
    let (dock, mut s) = host_session(cx, &k).await?;
    // The suite's token sub differs from the SESSION_ID the worker was given.
    s.sid = fresh("sub");
    let g = s.init().await?;
    let got = g
        .at_ptr("/result/_meta/agentfy/sessionId")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if got == s.sid {
        return Err(s.bad(&g, "the worker echoed the host's sessionId instead of returning its own SESSION_ID (T-3): the mismatch check becomes vacuous"));
    }
    if dock.launched && got != dock.session {
        return Err(s.bad(
            &g,
            format!(
                "the result sessionId is not the worker's SESSION_ID {:?}",
                dock.session
            ),
        ));
    }
    let code = k.err("SESSION_MISMATCH")?;
    let close = k.close("SESSION_REJECTED")?;
    let reason = format!("{code} SESSION_MISMATCH expected={} got={got}", s.sid);
    s.ch.close(close, &reason).await;
    let want = k.exit_after_close(close)?;
    let seen = super::derived::exit_owed(cx, want, &format!("close {close} ({code})")).await?;
    if dock.launched
        && let Ok(Ok(Incoming::Ws(_))) = tokio::time::timeout(Duration::ZERO, dock.l.accept()).await
    {
        return Err(Failure::new(format!(
            "the worker redialed after close {close}"
        )));
    }
    pass(&s, format!("own sessionId returned; {seen}"))
}

async fn worker_mismatch(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (k, _, mut s) = worker_session(cx).await?;
    s.own_sid = fresh("other-session");
    s.accept_initialize(|_| {}, false).await?;
    let code = k.err("SESSION_MISMATCH")?;
    let want = k.close("SESSION_REJECTED")?;
    let r = refused(
        &mut s,
        "a result whose sessionId is not the token's sub",
        Some(code),
    )
    .await?;
    close_is(want, r.code, &r.reason, &format!("close {want}")).map_err(|f| {
        f.with(
            "expected",
            format!("close {want} carrying {code}").as_bytes(),
        )
    })?;
    if !r.error_frame && !r.reason.contains(&code.to_string()) {
        return Err(Failure::new(format!(
            "close {want} carries no {code} (neither an error frame nor the close reason, T-4)"
        ))
        .with("close reason", r.reason.as_bytes()));
    }
    pass(&s, format!("close {want} {:?}", r.reason))
}

// ---------------------------------------------------------------------------------------------
// versions

async fn host_channel(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let k = K::new(cx)?;
    let (_dock, mut s) = host_session(cx, &k).await?;
    let mine = k.lowest_minor();
    let p = s.init_params(&mine, &k.mcp[0]);
    s.initialize(p, false).await?;
    s.serve().await?;
    let theirs = s
        .result_meta("channelVersion")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let effective = match (semver(&mine), semver(&theirs)) {
        (Some(a), Some(b)) if b < a => theirs.clone(),
        _ => mine.clone(),
    };
    let every = secs(s.budget("heartbeatIntervalSeconds")?)?;
    for n in 1..=2 {
        let until = Instant::now() + every + SLACK;
        let g = s
            .request_of(&format!("heartbeat {n}"), "agentfy/heartbeat", until)
            .await?;
        let v = g
            .at_ptr("/params/channelVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if v != effective {
            return Err(s.bad(&g, format!("heartbeat channelVersion {v:?}; min(host {mine}, worker {theirs}) is {effective}")));
        }
        s.background(&g).await?;
    }
    pass(
        &s,
        format!("heartbeats carry {effective} = min(host {mine}, worker {theirs})"),
    )
}

async fn worker_channel(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (k, _, mut s) = worker_session(cx).await?;
    s.up().await?;
    s.settle().await?;
    let effective = s.effective.clone().unwrap_or_default();
    let wrong = match semver(&effective) {
        Some((a, b, c)) => format!("{a}.{b}.{}", c + 1),
        None => k.highest_minor(),
    };
    s.hb_every = None;
    let g = s
        .beat(
            "the answer to a heartbeat with a wrong channelVersion",
            Some(&wrong),
        )
        .await?;
    let want = k.err("CHANNEL_VERSION_MISMATCH")?;
    let sent = format!("a heartbeat with channelVersion {wrong} (effective {effective})");
    s.coded(&g, want, &sent, "")?;
    let close = k.close("VERSION_UNSUPPORTED")?;
    let judged = format!("close {close} after {want}");
    let (reason, _) = s
        .closes(close, &format!("close {close}"), &judged, s.soon())
        .await?;
    carries_both(close, &reason, &effective, &wrong)?;
    pass(&s, format!("{want}, then close {close} {reason:?}"))
}

// ---------------------------------------------------------------------------------------------
// heartbeats and deadlines

async fn host_heartbeat(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let k = K::new(cx)?;
    let (dock, mut s) = host_up(cx, &k).await?;
    let every = secs(s.budget("heartbeatIntervalSeconds")?)?;
    let mut last = s.running_at.unwrap_or_else(Instant::now);
    let mut beats = Vec::new();
    for n in 1..=3 {
        let until = last + every + SLACK;
        let g = s
            .request_of(&format!("heartbeat {n}"), "agentfy/heartbeat", until)
            .await?;
        let gap = g.at.duration_since(last);
        if gap + EARLY < every {
            return Err(s.bad(&g, format!("heartbeat {n} came {gap:?} after the previous one (or serving); the interval is {every:?}")));
        }
        let sid = g.at_ptr("/params/sessionId").and_then(Value::as_str);
        if dock.launched && sid != Some(dock.session.as_str()) {
            return Err(s.bad(
                &g,
                "the heartbeat carries another sessionId than the worker's",
            ));
        }
        beats.push(format!("{:.1}s", gap.as_secs_f64()));
        last = g.at;
        let id = g.at_ptr("/id").cloned().unwrap_or(Value::Null);
        let r = s.beat_result(true);
        s.ch.reply(&id, r).await?;
    }
    pass(&s, format!("heartbeats after {}", beats.join(", ")))
}

async fn worker_heartbeat(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (_, _, mut s) = worker_session(cx).await?;
    s.up().await?;
    let idle = s.budget("idleSeconds")?;
    let exec = s.budget("maxExecSeconds")?;
    let every = secs(s.budget("heartbeatIntervalSeconds")?)?;
    let until = Instant::now() + every * 2 + SLACK;
    while s.hb_answers.len() < 2 {
        if Instant::now() >= until {
            return Err(Failure::new(format!(
                "{} of 2 heartbeats answered within {:?}",
                s.hb_answers.len(),
                every * 2 + SLACK
            )));
        }
        s.watch(Duration::from_millis(200), |_| false).await?;
    }
    for g in s.hb_answers.clone() {
        if g.at_ptr("/error").is_some() || g.msg.is_err() {
            return Err(s.bad(&g, "a heartbeat was not answered with a valid result"));
        }
        let ib = g
            .at_ptr("/result/idleBudgetSeconds")
            .and_then(Value::as_f64)
            .unwrap_or(f64::MAX);
        let eb = g
            .at_ptr("/result/execBudgetSeconds")
            .and_then(Value::as_f64)
            .unwrap_or(f64::MAX);
        if ib > idle || eb > exec {
            return Err(s.bad(&g, format!("the heartbeat answer raises a budget (idle {ib} > {idle} or exec {eb} > {exec}); budgets may only be lowered")));
        }
    }
    pass(
        &s,
        format!("2 heartbeats answered with continue and budgets ≤ idle {idle}, exec {exec}"),
    )
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
