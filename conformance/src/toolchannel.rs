//! toolchannel's own hooks (seed 004 «Канал
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
//! Nothing is hand-written any more: everything the seed implies is derived, the
//! handshake, identity and the effective version (`agreements`), heartbeats (`timer.*`,
//! the engine's `limit.raised` in `behaviour`), no idle or explicit release during a
//! tools/call and its grace (`notWhile`, a `repeats` carrier: `not-while.agentfy/release`),
//! redials, exits.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::door::{Door, knock_on};
use super::session::{free_port, fresh};
use super::{Check, Ctx, Failure, Stdout, Target};
use contract_transport::conn::{BoxMsg, Hello};
use contract_transport::endpoint::ws::WsListener;
use contract_transport::endpoint::{Endpoint, Listener, Options};

/// The request path of the WebSocket the suite serves or dials for a launched target.
const PATH: &str = "/worker";

/// The suite for `role` (`host` or `worker`): every check is derived; `None` for another
/// role.
pub fn checks(role: &str) -> Option<Vec<Check>> {
    super::table(role, ["host", "worker"], Vec::new())
}

// ---------------------------------------------------------------------------------------------
// What the contract says, by name.

/// The contract's values the hooks use, looked up by name once per session.
struct K {
    /// The channel major the suite speaks: the first WebSocket subprotocol listed.
    major: String,
}

impl K {
    fn new(cx: &Ctx) -> Result<Arc<K>, Failure> {
        let c = cx.wire.contract();
        let major = (c.version_values("channelMajor").first())
            .and_then(|v| v.as_str().map(str::to_string))
            .ok_or_else(|| Failure::new("the contract lists no channelMajor value"))?;
        Ok(Arc::new(K { major }))
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
    p.accept(Some(&k.major))
        .await
        .map_err(|e| Failure::new(format!("completing the worker's upgrade: {e}")))
}

/// The upgrade a valid worker sends: the token and the spoken major.
async fn dial_host(cx: &mut Ctx, k: &Arc<K>, b: &Berth) -> Result<BoxMsg, Failure> {
    let hello = Hello {
        path: b.path.clone(),
        subprotocols: vec![k.major.clone()],
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
