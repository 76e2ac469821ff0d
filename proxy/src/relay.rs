//! The tokio layer: accept, connect upstream, and pump frames both ways
//! through the inspector.
//!
//! Each direction reads what is available, cuts it into the contract's frames,
//! asks the inspector about each, and writes the ones it may pass in one write
//! before reading again: a slow receiver backpressures the sender with nothing
//! queued in between but one read and the frame being assembled (bounded by the
//! contract's frame cap). Frames are re-encoded for the far side's transport,
//! which is how a length-prefixed or NDJSON stream bridges to WebSocket
//! messages and back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use contract::wire::{BinaryFrame, ChannelCodec, FrameError, Wire};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Mutex, watch};
use tokio_util::codec::{Decoder, Encoder};

use crate::inspect::{Closing, Decision, Dir, Effect, Inspection, Inspector, Mode};
use crate::log::Logger;
use contract_transport::conn::{BoxIo, BoxMsg, CloseFrame, Conn, Hello, Msg};
use contract_transport::endpoint::process::ChildProc;
use contract_transport::endpoint::{Connected, Endpoint, Incoming, Listener, Options};

/// The most a direction reads at once.
pub const CHUNK: usize = 64 * 1024;
/// The least: where a connection's reads start. A read that fills what it was given
/// doubles the next one (up to [`CHUNK`]), one that uses under a quarter halves it,
/// so an idle connection holds small buffers and a busy one reads in large chunks.
pub const READ_MIN: usize = 4 * 1024;

/// How long a connection on a session's second channel waits for its primary connection.
pub const SESSION_JOIN_WAIT: Duration = Duration::from_secs(1);

/// How long a stand-in's launcher connection may drain after its child exited.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(1);

/// How long a closed connection keeps reading, and discarding, until its peer ends too.
pub const LINGER: Duration = Duration::from_secs(2);

/// How long a stop waits for connections to close before it gives up on them.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// One route: a listener, an upstream, and how to inspect what passes.
#[derive(Clone)]
pub struct Route {
    /// Name shown in logs.
    pub name: String,
    /// The contract, compiled.
    pub wire: Arc<Wire>,
    /// Channel of the contract this route carries.
    pub channel: String,
    /// Party that connects to the listener.
    pub client: String,
    /// Party behind the upstream.
    pub server: String,
    /// Where to connect.
    pub upstream: Endpoint,
    /// Endpoint options (TLS, ALPN, subprotocols).
    pub opts: Options,
    /// Observe or enforce.
    pub mode: Mode,
    /// Token buckets from the route's `[[route.ratelimit]]`, shared by its connections.
    pub ratelimit: Option<Arc<std::sync::Mutex<crate::policy::ratelimit::RateLimiter>>>,
    /// What the route says about its upstream beyond the contract.
    pub rules: crate::policy::RouteRules,
}

/// Where inspection results go: the live view and any other sink.
pub trait Sink: Send + Sync {
    /// One inspected frame on `route`; `raw` is the frame's payload as it travelled.
    fn frame(&self, route: &Route, ins: &Inspection, raw: &[u8]);
    /// A connection-level note (opened, closed, refused).
    fn note(&self, route: &str, conn: u64, text: &str);
    /// A batch of frames read together was written on, `took` after it was read: the
    /// time the proxy added (inspection, enforcement, the write).
    fn relayed(&self, _route: &Route, _took: Duration) {}
}

impl Sink for Logger {
    fn frame(&self, _route: &Route, ins: &Inspection, _raw: &[u8]) {
        self.event(&ins.event);
    }
    fn note(&self, route: &str, conn: u64, text: &str) {
        Logger::note(self, route, &format!("#{conn} {text}"));
    }
}

/// Counters over a whole proxy run.
#[derive(Debug, Default)]
pub struct Stats {
    /// Frames inspected.
    pub frames: AtomicU64,
    /// Frames that broke the contract.
    pub violations: AtomicU64,
    /// Frames refused under enforcement (not forwarded).
    pub refused: AtomicU64,
    /// Connections relayed.
    pub connections: AtomicU64,
    /// Data frames held for credit (enforce mode), each written once a grant covered it.
    pub held: AtomicU64,
    /// Their payload bytes.
    pub held_bytes: AtomicU64,
    /// Messages the proxy sent as a party would (kernel overrun: error and stream.close).
    pub sent: AtomicU64,
    /// Connections closed on another connection's word (a claim superseded them).
    pub closed: AtomicU64,
    /// Drop reports delivered where the dropped message said (xsession: a delivery_status
    /// to the sender's inbox).
    pub notified: AtomicU64,
    /// Drop reports that could not be delivered (the address gone or too slow).
    pub notify_failed: AtomicU64,
    /// Bytes a peer sent after its connection was closed, read and dropped.
    pub discarded: AtomicU64,
}

impl Stats {
    /// One line for the end of a run: what enforcement did besides refusing.
    pub fn enforcement_line(&self) -> String {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{} held for credit, {} sent on a party's behalf, {} connections closed, {} drop reports sent ({} failed), {} bytes discarded after a close",
            n(&self.held),
            n(&self.sent),
            n(&self.closed),
            n(&self.notified),
            n(&self.notify_failed),
            n(&self.discarded)
        )
    }
}

/// Orders for a connection from elsewhere in the run.
enum Ctl {
    /// Close it (another connection superseded it).
    Close(Closing),
    /// Frames released by credit wait in the session's outbox: write them.
    Wake,
    /// Send these messages toward party `to`.
    Send { to: String, messages: Vec<Bytes> },
}

/// A live connection, as the rest of the run can reach it.
struct ConnCtl {
    session: u64,
    /// It carries binary data frames (kernel data channel): released frames go here.
    data: bool,
    /// Boxed orders: the channel allocates a block of slots up front for every
    /// connection, and orders are rare (about 1.3 KiB per idle connection inline).
    tx: tokio::sync::mpsc::UnboundedSender<Box<Ctl>>,
}

/// What every connection of a run shares.
pub struct Shared {
    /// Where events go.
    pub sinks: Vec<Arc<dyn Sink>>,
    /// Counters.
    pub stats: Stats,
    next_conn: AtomicU64,
    /// Contracts whose primary channel some route of this run relays.
    primaries: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Primary-channel connections still waiting for their paired channels: (contract, conn, channels paired).
    sessions: std::sync::Mutex<Vec<(String, u64, Vec<String>)>>,
    /// Flips to true when the proxy is asked to stop.
    pub stop: watch::Receiver<bool>,
    /// The recording, written with backpressure: a slow disk slows the relay, nothing is dropped.
    recorder: Option<crate::record::RecordSink>,
    /// Records that could not be written (the recorder stopped); shown at the end.
    pub unrecorded: AtomicU64,
    /// Cross-connection state of the contracts' stateful rules.
    pub policy: Arc<crate::policy::SharedState>,
    /// Live connections, so one connection's rule can act on another. The order
    /// channels are unbounded but carry little: one close, wakes, and a credit
    /// overrun's few messages per stream.
    conns: std::sync::Mutex<std::collections::HashMap<u64, ConnCtl>>,
}

impl Shared {
    /// Shared state with these sinks and an optional recording, stopping when `stop` turns
    /// true. Assembled by [`crate::server::Proxy`].
    pub(crate) fn new(
        sinks: Vec<Arc<dyn Sink>>,
        recorder: Option<crate::record::RecordSink>,
        stop: watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Shared {
            recorder,
            unrecorded: AtomicU64::new(0),
            policy: Arc::new(crate::policy::SharedState::new()),
            sinks,
            stats: Stats::default(),
            next_conn: AtomicU64::new(1),
            sessions: std::sync::Mutex::new(Vec::new()),
            primaries: std::sync::Mutex::new(std::collections::HashSet::new()),
            conns: std::sync::Mutex::new(std::collections::HashMap::new()),
            stop,
        })
    }

    /// The session a new connection joins. A connection on a contract's primary
    /// channel (the first that carries JSON) opens one; a connection on another
    /// channel joins the oldest open session not yet holding that channel, since
    /// the kernel's core dials data right after control (K-1).
    async fn join_session(&self, route: &Route, conn: u64) -> u64 {
        // The partner channel may be accepted a moment before its primary: wait briefly for
        // it, but only when this run relays that contract's primary channel at all.
        let expects_primary = self
            .primaries
            .lock()
            .is_ok_and(|p| p.contains(&route.wire.contract().name));
        if !expects_primary {
            return self.try_join_session(route, conn).unwrap_or(conn);
        }
        let deadline = Instant::now() + SESSION_JOIN_WAIT;
        loop {
            match self.try_join_session(route, conn) {
                Some(s) => return s,
                None if Instant::now() >= deadline => return conn,
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn try_join_session(&self, route: &Route, conn: u64) -> Option<u64> {
        let c = route.wire.contract();
        let primary = c
            .channels
            .iter()
            .find(|(_, ch)| ch.binding.is_some())
            .map(|(k, _)| k.as_str());
        let Ok(mut sessions) = self.sessions.lock() else {
            return Some(conn);
        };
        if primary == Some(route.channel.as_str()) {
            if c.channels.len() > 1 {
                // Bounded: a session that never gets its partner is forgotten after 1024 newer ones.
                if sessions.len() >= 1024 {
                    sessions.remove(0);
                }
                sessions.push((c.name.clone(), conn, Vec::new()));
            }
            return Some(conn);
        }
        sessions
            .iter_mut()
            .find(|(name, _, paired)| *name == c.name && !paired.contains(&route.channel))
            .map(|(_, session, paired)| {
                paired.push(route.channel.clone());
                *session
            })
    }

    fn leave_session(&self, conn: u64) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.retain(|(_, s, _)| *s != conn);
        }
    }

    fn ctl(&self, conn: u64, order: Ctl) -> bool {
        self.conns
            .lock()
            .ok()
            .and_then(|c| c.get(&conn).map(|c| c.tx.send(Box::new(order)).is_ok()))
            .unwrap_or(false)
    }

    /// Carry out the effects that reach beyond the frame's own connection.
    /// ([`Effect::Write`] is the pump's own business.)
    fn carry_out(self: &Arc<Self>, route: &Route, conn: u64, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Write(_) => {}
                Effect::Send {
                    session,
                    to,
                    messages,
                } => {
                    let n = messages.len() as u64;
                    if self.ctl(session, Ctl::Send { to, messages }) {
                        self.stats.sent.fetch_add(n, Ordering::Relaxed);
                    } else {
                        self.note(
                            &route.name,
                            conn,
                            &format!("session #{session}'s primary connection is gone: {n} message(s) not sent"),
                        );
                    }
                }
                Effect::Wake { session } => {
                    let targets: Vec<_> = self
                        .conns
                        .lock()
                        .map(|c| {
                            c.values()
                                .filter(|c| c.session == session && c.data)
                                .map(|c| c.tx.clone())
                                .collect()
                        })
                        .unwrap_or_default();
                    for t in targets {
                        let _ = t.send(Box::new(Ctl::Wake));
                    }
                }
                Effect::CloseConn { conn: other, close } => {
                    if self.ctl(other, Ctl::Close(close)) {
                        self.stats.closed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Effect::Notify { to, messages } => {
                    let (shared, name) = (self.clone(), route.name.clone());
                    let framed = frame_all(route, &messages);
                    tokio::spawn(async move {
                        let to_inbox = to;
                        match notify(&to_inbox, framed).await {
                            Ok(()) => {
                                shared.stats.notified.fetch_add(1, Ordering::Relaxed);
                                shared.note(&name, conn, &format!("report sent to {to_inbox}"));
                            }
                            Err(e) => {
                                shared.stats.notify_failed.fetch_add(1, Ordering::Relaxed);
                                shared.note(
                                    &name,
                                    conn,
                                    &format!("report to {to_inbox} not delivered: {e}"),
                                );
                            }
                        }
                    });
                }
            }
        }
    }

    fn note(&self, route: &str, conn: u64, text: &str) {
        for s in &self.sinks {
            s.note(route, conn, text);
        }
        if let Some(r) = &self.recorder
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let (r, rec) = (r.clone(), crate::record::Record::note(route, conn, text));
            rt.spawn(async move { r.record(rec).await });
        }
    }

    async fn write_record(&self, ins: &Inspection, raw: &[u8]) {
        if let Some(r) = &self.recorder
            && r.record(crate::record::Record::inspected(raw, ins))
                .await
                .is_err()
        {
            self.unrecorded.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn record(&self, route: &Route, ins: &Inspection, raw: &[u8]) {
        self.stats.frames.fetch_add(1, Ordering::Relaxed);
        if !ins.event.verdict.is_ok() {
            self.stats.violations.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(ins.decision, Decision::Refuse { .. }) {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
        }
        for s in &self.sinks {
            s.frame(route, ins, raw);
        }
    }
}

/// How long delivering one drop report (xsession: a delivery_status) may take.
pub const NOTIFY_DEADLINE: Duration = Duration::from_secs(5);

/// `messages` framed as the route's channel frames them (a report is written there, as the
/// dropped message's receiver would: xsession's auth line, then the delivery_status).
fn frame_all(route: &Route, messages: &[serde_json::Value]) -> std::io::Result<Vec<u8>> {
    let mut codec = stream_codec(&route.wire, &route.channel).map_err(std::io::Error::other)?;
    let mut out = bytes::BytesMut::new();
    for m in messages {
        let body = serde_json::to_vec(m).map_err(io_err)?;
        codec
            .encode_json(&body, &mut out)
            .map_err(std::io::Error::other)?;
    }
    Ok(out.to_vec())
}

/// Dial `inbox` (a unix socket: the address a report names), write `framed`, half-close.
async fn notify(inbox: &str, framed: std::io::Result<Vec<u8>>) -> std::io::Result<()> {
    let framed = framed?;
    #[cfg(unix)]
    {
        let send = async {
            let mut s = tokio::net::UnixStream::connect(inbox).await?;
            s.write_all(&framed).await?;
            s.shutdown().await
        };
        tokio::time::timeout(NOTIFY_DEADLINE, send)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "inbox too slow"))?
    }
    #[cfg(not(unix))]
    {
        let _ = (inbox, framed);
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "reports are dialed on unix sockets",
        ))
    }
}

/// Resolves at `t`, or never.
async fn at(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

/// Resolves once the stop flag turns true (or its sender is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// How a route ended.
#[derive(Debug, Default)]
pub struct RouteEnd {
    /// Exit status of the upstream child (exec, exec-fd), when the route had one connection.
    pub child: Option<std::process::ExitStatus>,
}

/// Accept connections until stopped, relaying each. A one-connection listener
/// (stdio, fd:N) ends the route with its connection, reporting the child's exit.
pub(crate) async fn serve(
    listener: Listener,
    route: Route,
    shared: Arc<Shared>,
) -> std::io::Result<RouteEnd> {
    let route = Arc::new(route);
    let mut stop = shared.stop.clone();
    let mut tasks = tokio::task::JoinSet::new();
    let once = listener.is_once();
    let c = route.wire.contract();
    let primary = c
        .channels
        .iter()
        .find(|(_, ch)| ch.binding.is_some())
        .map(|(k, _)| k);
    if primary == Some(&route.channel)
        && let Ok(mut p) = shared.primaries.lock()
    {
        p.insert(c.name.clone());
    }
    loop {
        let incoming = tokio::select! {
            r = listener.accept() => r,
            () = stopped(&mut stop) => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if once {
                    return Ok(done.unwrap_or_default());
                }
                // A finished connection's task is reaped here: a JoinSet keeps every
                // finished task until it is joined, which grew the proxy per connection.
                continue;
            }
        };
        let incoming = match incoming {
            Ok(i) => i,
            // One client's failed handshake or accept must not end the route.
            Err(e) if !once => {
                shared.note(&route.name, 0, &format!("accept failed: {e}"));
                continue;
            }
            Err(e) => return Err(e),
        };
        // Shared, not cloned: a route's names and endpoints are the same for every
        // connection, and a copy each was allocations and room in every connection's task.
        let route = route.clone();
        let shared = shared.clone();
        tasks.spawn(async move {
            let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
            shared.stats.connections.fetch_add(1, Ordering::Relaxed);
            match handle(incoming, &route, &shared, conn, once).await {
                Ok(end) => end,
                Err(e) => {
                    shared.note(&route.name, conn, &e);
                    RouteEnd::default()
                }
            }
        });
    }
    // Stopping: each connection closes itself on the stop signal; wait at most one deadline.
    let _ = tokio::time::timeout(SHUTDOWN_DEADLINE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    Ok(RouteEnd::default())
}

/// The answer to a WebSocket upgrade whose upstream cannot be reached.
fn bad_gateway() -> contract_transport::conn::HttpRefusal {
    contract_transport::conn::HttpRefusal {
        status: 502,
        headers: Vec::new(),
        body: Bytes::new(),
    }
}

/// Connect upstream for one accepted client, then relay.
async fn handle(
    incoming: Incoming,
    route: &Route,
    shared: &Arc<Shared>,
    conn: u64,
    // A one-connection listener (stdio, fd:N): its child ends the route.
    once: bool,
) -> Result<RouteEnd, String> {
    // The dial, the relay and the child's end are boxed: a task is as large as the largest
    // state of its future, and a dial (TLS, QUIC, WebSocket handshakes) is large and
    // short-lived; boxed, its memory goes back once the upstream is reached, instead of
    // staying with every idle connection.
    let (
        client,
        Connected {
            conn: up, child, ..
        },
    ) = Box::pin(dial(incoming, route, shared, conn)).await?;
    let mut end = RouteEnd::default();
    let relayed = match child {
        Some(child) => {
            let relaying = relay_with_child(child, (client, up), route, shared, conn, once);
            let (relayed, exited) = Box::pin(relaying).await;
            end.child = exited;
            relayed
        }
        None => Box::pin(relay(client, up, route, shared, conn)).await,
    };
    if let Err(e) = relayed {
        shared.note(&route.name, conn, &e);
    }
    Ok(end)
}

/// Connect upstream for one accepted client, answering a pending WebSocket handshake
/// with the upstream's own answer.
async fn dial(
    incoming: Incoming,
    route: &Route,
    shared: &Arc<Shared>,
    conn: u64,
) -> Result<(Conn, Connected), String> {
    let pair = match incoming {
        Incoming::Conn { conn: c, peer } => {
            shared.note(&route.name, conn, &format!("connected from {peer}"));
            match Box::pin(route.upstream.connect(&route.opts, None)).await {
                Ok(up) => (c, up),
                Err(e) => {
                    turn_away(c).await;
                    return Err(e.to_string());
                }
            }
        }
        Incoming::Rejected { peer, why } => {
            return Err(format!("turned away {peer}: {why}"));
        }
        Incoming::Ws(pending) => {
            let hello: Hello = pending.hello().clone();
            // The query string can carry credentials: only the path is shown.
            let path = hello.path.split('?').next().unwrap_or_default();
            shared.note(
                &route.name,
                conn,
                &format!(
                    "websocket from {} path {path} offering {:?}",
                    pending.peer(),
                    hello.subprotocols
                ),
            );
            let is_ws_upstream = matches!(route.upstream, Endpoint::Ws { .. });
            if !is_ws_upstream {
                // Bridging: the proxy answers the handshake itself, with the contract's subprotocols.
                match contract_transport::endpoint::ws::choose_subprotocol(
                    &hello.subprotocols,
                    &route.opts.subprotocols,
                    route.opts.subprotocol_refused,
                ) {
                    Ok(sub) => {
                        let up = match Box::pin(route.upstream.connect(&route.opts, None)).await {
                            Ok(up) => up,
                            Err(e) => {
                                let _ = pending.refuse(&bad_gateway()).await;
                                return Err(e.to_string());
                            }
                        };
                        let c = Box::pin(pending.accept(sub.as_deref()))
                            .await
                            .map_err(|e| e.to_string())?;
                        (Conn::Messages(c), up)
                    }
                    Err(refusal) => {
                        let text = format!("refused the handshake: {refusal}");
                        pending.refuse(&refusal).await.map_err(|e| e.to_string())?;
                        return Err(text);
                    }
                }
            } else {
                match Box::pin(route.upstream.connect(&route.opts, Some(&hello))).await {
                    Ok(up) => {
                        let c = Box::pin(pending.accept(up.subprotocol.as_deref()))
                            .await
                            .map_err(|e| e.to_string())?;
                        (Conn::Messages(c), up)
                    }
                    Err(contract_transport::endpoint::EndpointError::Refused {
                        refusal, ..
                    }) => {
                        let text = format!("upstream refused the handshake: {refusal}; passed on");
                        pending.refuse(&refusal).await.map_err(|e| e.to_string())?;
                        return Err(text);
                    }
                    Err(e) => {
                        let _ = pending.refuse(&bad_gateway()).await;
                        return Err(e.to_string());
                    }
                }
            }
        }
    };
    Ok(pair)
}

/// Relay a connection whose upstream is a child of ours, and wait for the child; its exit
/// status when the route ends with it.
async fn relay_with_child(
    child: ChildProc,
    pair: (Conn, Conn),
    route: &Route,
    shared: &Arc<Shared>,
    conn: u64,
    once: bool,
) -> (Result<(), String>, Option<std::process::ExitStatus>) {
    if once {
        stand_in(child, pair, route, shared, conn).await
    } else {
        (reap_after(child, pair, route, shared, conn).await, None)
    }
}

/// A stand-in (stdio, fd:N) lives exactly as long as its child, as the launcher expects:
/// when the child exits, what it wrote drains to the launcher within one deadline, and
/// the route ends even if the launcher still holds its end open.
async fn stand_in(
    mut child: ChildProc,
    (client, up): (Conn, Conn),
    route: &Route,
    shared: &Arc<Shared>,
    conn: u64,
) -> (Result<(), String>, Option<std::process::ExitStatus>) {
    let forwarding = match child.forward_signals() {
        Ok(f) => Some(f),
        Err(e) => {
            let text = format!("cannot forward signals to the child: {e}");
            shared.note(&route.name, conn, &text);
            None
        }
    };
    let mut relaying = Box::pin(relay(client, up, route, shared, conn));
    let (relayed, status) = tokio::select! {
        r = &mut relaying => (r, child.wait().await),
        st = child.wait() => {
            let r = match tokio::time::timeout(DRAIN_DEADLINE, &mut relaying).await {
                Ok(r) => r,
                Err(_) => Ok(()),
            };
            (r, st)
        }
    };
    if let Some(f) = forwarding {
        f.abort();
    }
    match status {
        Ok(st) => {
            shared.note(&route.name, conn, &format!("child exited: {st}"));
            (relayed, Some(st))
        }
        Err(e) => {
            shared.note(&route.name, conn, &format!("waiting for the child: {e}"));
            (relayed, None)
        }
    }
}

/// A child per connection gets one deadline to finish after its connection closed.
async fn reap_after(
    mut child: ChildProc,
    (client, up): (Conn, Conn),
    route: &Route,
    shared: &Arc<Shared>,
    conn: u64,
) -> Result<(), String> {
    let relayed = Box::pin(relay(client, up, route, shared, conn)).await;
    let status = match tokio::time::timeout(SHUTDOWN_DEADLINE, child.wait()).await {
        Ok(r) => r,
        Err(_) => {
            let text = "child still running after its connection closed: terminating it";
            shared.note(&route.name, conn, text);
            child.terminate(SHUTDOWN_DEADLINE).await
        }
    };
    match status {
        Ok(st) => shared.note(&route.name, conn, &format!("child exited: {st}")),
        Err(e) => shared.note(&route.name, conn, &format!("waiting for the child: {e}")),
    }
    relayed
}

enum Frame {
    Json(Bytes),
    Data(BinaryFrame),
}

enum Item {
    Frame(Frame),
    /// The stream's last frame, which only its end terminated (an NDJSON line with
    /// no newline), and its bytes: a byte stream gets those, never a newline added.
    Last(Frame, Bytes),
    /// A binary message on a message transport.
    BinaryMsg(Bytes),
    /// The framing broke; `rest` is what was buffered, passed on raw in observe mode.
    Broken(FrameError, Bytes),
    /// A whole message over the channel's cap.
    Oversize(FrameError, Bytes),
    /// Bytes after a framing break, passed on raw.
    Raw(Bytes),
    /// The sender ended: EOF on a stream, or a close with its code.
    End(Option<CloseFrame>),
}

enum FrameIn {
    Stream {
        rd: ReadHalf<BoxIo>,
        codec: ChannelCodec,
        buf: BytesMut,
        /// How much the next read may take: between [`READ_MIN`] and [`CHUNK`].
        want: usize,
        raw: bool,
        /// When the first byte of the frame still incomplete in `buf` arrived.
        partial: Option<Instant>,
    },
    Msgs(SplitStream<BoxMsg>, u64),
}

impl FrameIn {
    /// When the frame being assembled started arriving (a byte stream with a partial frame).
    fn partial_since(&self) -> Option<Instant> {
        match self {
            FrameIn::Stream {
                partial,
                raw: false,
                ..
            } => *partial,
            _ => None,
        }
    }

    fn decode_one(
        codec: &mut ChannelCodec,
        buf: &mut BytesMut,
        eof: bool,
    ) -> Result<Option<Frame>, FrameError> {
        Ok(match codec {
            ChannelCodec::LengthPrefixed(c) => if eof {
                c.decode_eof(buf)?
            } else {
                c.decode(buf)?
            }
            .map(Frame::Json),
            ChannelCodec::Ndjson(c) => if eof {
                c.decode_eof(buf)?
            } else {
                c.decode(buf)?
            }
            .map(Frame::Json),
            ChannelCodec::HeaderDelimited(c) => if eof {
                c.decode_eof(buf)?
            } else {
                c.decode(buf)?
            }
            .map(Frame::Json),
            ChannelCodec::Binary(c) => if eof {
                c.decode_eof(buf)?
            } else {
                c.decode(buf)?
            }
            .map(Frame::Data),
            // A message channel carried over a byte stream: one frame per line, the usual bridge.
            ChannelCodec::Message(_) => {
                return Err(FrameError::Unsupported(
                    "a message channel needs a message transport on both sides or NDJSON".into(),
                ));
            }
        })
    }

    /// Discard everything up to the peer's end. Memory stays at one small buffer:
    /// nothing is framed, and a message transport caps what it buffers.
    /// What is dropped is counted into `dropped` as it goes (the caller may give up
    /// at a deadline).
    async fn drain(&mut self, dropped: &mut u64) {
        match self {
            FrameIn::Stream { rd, buf, .. } => {
                *dropped += buf.len() as u64;
                buf.clear();
                discard(rd, dropped).await;
            }
            FrameIn::Msgs(s, _) => {
                while let Some(Ok(m)) = s.next().await {
                    if let Msg::Text(b) | Msg::Binary(b) = m {
                        *dropped += b.len() as u64;
                    }
                }
            }
        }
    }

    /// Everything available now: at least one item, or an error.
    async fn next_batch(&mut self, out: &mut Vec<Item>) -> std::io::Result<()> {
        match self {
            FrameIn::Stream {
                rd,
                codec,
                buf,
                want,
                raw,
                partial,
            } => loop {
                if !*raw {
                    loop {
                        match Self::decode_one(codec, buf, false) {
                            Ok(Some(f)) => out.push(Item::Frame(f)),
                            Ok(None) => break,
                            Err(e) => {
                                *raw = true;
                                out.push(Item::Broken(e, buf.split().freeze()));
                                break;
                            }
                        }
                    }
                    // A frame that completed restarts the clock for the bytes after it.
                    let began = partial.is_none();
                    *partial = match (buf.is_empty(), out.is_empty()) {
                        (true, _) => None,
                        (false, false) => Some(Instant::now()),
                        (false, true) => partial.or_else(|| Some(Instant::now())),
                    };
                    // A frame that just began: back to the caller, empty-handed, so it
                    // arms the frame's deadline before waiting for the rest.
                    if !out.is_empty() || (began && partial.is_some()) {
                        return Ok(());
                    }
                }
                buf.reserve(*want);
                let n = rd.read_buf(buf).await?;
                *want = match n {
                    n if n >= *want => (*want * 2).min(CHUNK),
                    n if n < *want / 4 => (*want / 2).max(READ_MIN),
                    _ => *want,
                };
                if n == 0 {
                    if !*raw {
                        let rest = Bytes::copy_from_slice(buf);
                        match Self::decode_one(codec, buf, true) {
                            Ok(Some(f)) => out.push(Item::Last(f, rest)),
                            Ok(None) => {}
                            Err(e) => out.push(Item::Broken(e, buf.split().freeze())),
                        }
                    } else if !buf.is_empty() {
                        out.push(Item::Raw(buf.split().freeze()));
                    }
                    out.push(Item::End(None));
                    return Ok(());
                }
                if *raw {
                    out.push(Item::Raw(buf.split().freeze()));
                    return Ok(());
                }
            },
            FrameIn::Msgs(s, cap) => {
                match s.next().await {
                    Some(Ok(Msg::Text(t))) if t.len() as u64 > *cap => out.push(Item::Oversize(
                        FrameError::Oversize {
                            len: t.len() as u64,
                            max: *cap,
                        },
                        t,
                    )),
                    Some(Ok(Msg::Text(t))) => out.push(Item::Frame(Frame::Json(t))),
                    Some(Ok(Msg::Binary(b))) => out.push(Item::BinaryMsg(b)),
                    Some(Ok(Msg::Close(c))) => out.push(Item::End(c)),
                    Some(Err(e)) => return Err(e),
                    None => out.push(Item::End(None)),
                }
                Ok(())
            }
        }
    }
}

/// Read and throw away a byte stream up to its end (or an error), counting into
/// `dropped` as it goes, in one small buffer. The buffer is on the heap: a connection
/// ends once, and on the stack it made every connection's future, idle ones included,
/// 4 KiB larger for each place that may discard.
async fn discard<R: AsyncRead + Unpin>(rd: &mut R, dropped: &mut u64) {
    let mut scrap = vec![0u8; 4096];
    while let Ok(n) = rd.read(&mut scrap).await
        && n > 0
    {
        *dropped += n as u64;
    }
}

/// End a client whose upstream cannot be reached: EOF (or a WebSocket close 1011),
/// then what it already sent is read and discarded, so it sees a clean end and
/// not a reset.
async fn turn_away(c: Conn) {
    let _ = tokio::time::timeout(LINGER, async {
        match c {
            Conn::Stream(mut io) => {
                let _ = io.shutdown().await;
                discard(&mut io, &mut 0).await;
            }
            Conn::Messages(mut m) => {
                let close = CloseFrame {
                    code: 1011,
                    reason: "upstream unavailable".into(),
                };
                let _ = m.send(Msg::Close(Some(close))).await;
                while let Some(Ok(_)) = m.next().await {}
            }
        }
    })
    .await;
}

/// A message transport's close ends both directions: nothing can reach that peer
/// after it (RFC 6455 §5.5.1), so the connection closes now, and what the other side
/// still sends is read, counted and dropped by the linger.
fn closed_by_message_peer(close: Option<CloseFrame>) -> PumpEnd {
    PumpEnd::Closed(Closing::Code(close.unwrap_or(CloseFrame {
        code: 1005,
        reason: String::new(),
    })))
}

/// A byte stream ended: a half-close, passed on as EOF; on a message transport it is
/// a normal close (1000, not a close without a status).
async fn pass_stream_end(to: &mut FrameOut) {
    let close = match to {
        FrameOut::Msgs(_) => Some(CloseFrame {
            code: 1000,
            reason: String::new(),
        }),
        FrameOut::Stream { .. } => None,
    };
    let _ = to.end(close).await;
}

/// The close a stop sends both peers.
fn stopping() -> Closing {
    Closing::Code(CloseFrame {
        code: 1001,
        reason: "proxy stopping".into(),
    })
}

/// Let a pump that heard the stop finish the frames it took, within the drain deadline.
async fn wind_down<F: Future>(pump: &mut std::pin::Pin<&mut F>, done: bool) {
    if !done {
        let _ = tokio::time::timeout(DRAIN_DEADLINE, pump.as_mut()).await;
    }
}

/// Read and discard until both peers have ended (EOF, or the close handshake is
/// complete), within [`LINGER`]. Letting go of a socket with unread bytes makes the
/// kernel send a reset, and a reset destroys what was still in flight: the close
/// frame or the last error envelope the contract says the peer must see (RFC 6455
/// §7.1.1 asks for the closing handshake for the same reason).
/// Returns the bytes dropped from each side (client, upstream), frames they had
/// begun included.
async fn linger(client: &mut FrameIn, upstream: &mut FrameIn) -> (u64, u64) {
    let (mut c, mut u) = (0, 0);
    let _ = tokio::time::timeout(LINGER, async {
        tokio::join!(client.drain(&mut c), upstream.drain(&mut u));
    })
    .await;
    (c, u)
}

enum FrameOut {
    Stream {
        wr: WriteHalf<BoxIo>,
        codec: ChannelCodec,
        out: BytesMut,
        /// Where the transport takes a close code of its own (QUIC), if it does.
        code: Option<contract_transport::conn::CloseCode>,
    },
    Msgs(SplitSink<BoxMsg, Msg>),
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

impl FrameOut {
    async fn push(&mut self, f: &Frame) -> std::io::Result<()> {
        match (self, f) {
            (FrameOut::Stream { codec, out, .. }, Frame::Json(b)) => {
                codec.encode_json(b.as_ref(), out).map_err(io_err)
            }
            (
                FrameOut::Stream {
                    codec: ChannelCodec::Binary(c),
                    out,
                    ..
                },
                Frame::Data(d),
            ) => c.encode(d, out).map_err(io_err),
            (FrameOut::Msgs(s), Frame::Json(b)) => s.feed(Msg::Text(b.clone())).await,
            _ => Err(io_err("data frames cannot be bridged to this transport")),
        }
    }

    /// A stream's last, unterminated frame: as it came on a byte stream, as a frame
    /// on a message transport.
    async fn push_last(&mut self, f: &Frame, raw: &[u8]) -> std::io::Result<()> {
        match self {
            FrameOut::Stream { .. } => self.push_raw(raw).await,
            FrameOut::Msgs(_) => self.push(f).await,
        }
    }

    async fn push_binary(&mut self, b: Bytes) -> std::io::Result<()> {
        match self {
            FrameOut::Msgs(s) => s.feed(Msg::Binary(b)).await,
            FrameOut::Stream { .. } => {
                Err(io_err("a binary message has no frame on a byte stream"))
            }
        }
    }

    async fn push_raw(&mut self, raw: &[u8]) -> std::io::Result<()> {
        match self {
            FrameOut::Stream { out, .. } => {
                out.extend_from_slice(raw);
                Ok(())
            }
            FrameOut::Msgs(_) => Err(io_err(
                "unframed bytes cannot be bridged to a message transport",
            )),
        }
    }

    /// Write what the receiver takes now, without waiting: what it does not take
    /// stays buffered for [`flush`](Self::flush).
    fn try_flush(&mut self) -> std::io::Result<()> {
        use futures_util::FutureExt;
        match self {
            FrameOut::Stream { wr, out, .. } => {
                // A `write` dropped before it is ready has written nothing.
                while !out.is_empty() {
                    match wr.write(out).now_or_never() {
                        Some(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                        Some(Ok(n)) => bytes::Buf::advance(out, n),
                        Some(Err(e)) => return Err(e),
                        None => return Ok(()),
                    }
                }
                wr.flush().now_or_never().unwrap_or(Ok(()))
            }
            FrameOut::Msgs(s) => s.flush().now_or_never().unwrap_or(Ok(())),
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        match self {
            FrameOut::Stream { wr, out, .. } => {
                if !out.is_empty() {
                    wr.write_all(out).await?;
                    out.clear();
                }
                wr.flush().await
            }
            FrameOut::Msgs(s) => s.flush().await,
        }
    }

    /// End this side: half-close a stream, or send the close (code passed through).
    async fn end(&mut self, close: Option<CloseFrame>) -> std::io::Result<()> {
        let _ = self.flush().await;
        match self {
            FrameOut::Stream { wr, code, .. } => {
                // 1005 and 1006 mean "no code": the stream just ends.
                if let (Some(slot), Some(f)) = (code, close)
                    && !matches!(f.code, 1005 | 1006)
                {
                    slot.set(f);
                }
                wr.shutdown().await
            }
            FrameOut::Msgs(s) => {
                let r = s.send(Msg::Close(close)).await;
                let _ = s.close().await;
                r
            }
        }
    }
}

fn split(conn: Conn, codec: &ChannelCodec, cap: u64) -> (FrameIn, FrameOut) {
    match conn {
        Conn::Stream(io) => {
            let code = contract_transport::endpoint::quic::close_code(&io);
            let (rd, wr) = tokio::io::split(io);
            (
                FrameIn::Stream {
                    rd,
                    codec: codec.clone(),
                    buf: BytesMut::with_capacity(READ_MIN),
                    want: READ_MIN,
                    raw: false,
                    partial: None,
                },
                FrameOut::Stream {
                    wr,
                    codec: codec.clone(),
                    out: BytesMut::new(),
                    code,
                },
            )
        }
        Conn::Messages(m) => {
            let (tx, rx) = m.split();
            (FrameIn::Msgs(rx, cap), FrameOut::Msgs(tx))
        }
    }
}

/// The codec for the byte-stream side of a channel. A message channel (one
/// frame per WebSocket message) bridged to a byte stream uses NDJSON there.
fn stream_codec(wire: &Wire, channel: &str) -> Result<ChannelCodec, String> {
    let codec = wire.codec(channel).map_err(|e| e.to_string())?;
    Ok(match codec {
        ChannelCodec::Message(cap) => ChannelCodec::Ndjson(contract::wire::framing::Ndjson::new(
            cap.max,
            contract::model::LineMeasure::Bytes,
        )),
        other => other,
    })
}

/// How one direction ended.
enum PumpEnd {
    /// The sender finished; its close (if any) was passed on.
    Done,
    /// The proxy is stopping: the pump read nothing more, and wrote on all it took.
    Stopped,
    /// The inspector closed the connection (enforce mode).
    Closed(Closing),
}

struct Ends {
    client: Arc<Mutex<FrameOut>>,
    upstream: Arc<Mutex<FrameOut>>,
}

impl Ends {
    fn toward(&self, dir: Dir) -> &Arc<Mutex<FrameOut>> {
        match dir {
            Dir::Up => &self.upstream,
            Dir::Down => &self.client,
        }
    }
}

/// Relay one client connection and its upstream connection until both directions end.
pub async fn relay(
    client: Conn,
    upstream: Conn,
    route: &Route,
    shared: &Arc<Shared>,
    conn: u64,
) -> Result<(), String> {
    let codec = stream_codec(&route.wire, &route.channel)?;
    // The session first: nothing of this connection's state waits across that wait, so
    // none of it takes room in the future twice.
    let session = shared.join_session(route, conn).await;
    let inspector = Inspector::new(
        route.wire.clone(),
        &route.name,
        conn,
        &route.channel,
        (&route.client, &route.server),
        route.mode,
    )
    .map_err(|e| e.to_string())?;
    if session != conn {
        shared.note(&route.name, conn, &format!("joins session #{session}"));
    }
    let policy = crate::policy::for_route(
        &route.wire,
        &shared.policy,
        conn,
        session,
        route.rules.clone(),
    );
    let mut inspector = inspector.with_rules(Some(policy), route.ratelimit.clone());
    inspector.set_session(session);
    let inspector = std::sync::Mutex::new(inspector);
    let cap = match route.wire.codec(&route.channel) {
        Ok(ChannelCodec::Message(c)) => c.max,
        _ => contract::wire::framing::DEFAULT_CAP,
    };
    let (mut cin, cout) = split(client, &codec, cap);
    let (mut uin, uout) = split(upstream, &codec, cap);
    let ends = Ends {
        client: Arc::new(Mutex::new(cout)),
        upstream: Arc::new(Mutex::new(uout)),
    };
    let (ctl_tx, ctl_rx) = tokio::sync::mpsc::unbounded_channel();
    if let Ok(mut conns) = shared.conns.lock() {
        conns.insert(
            conn,
            ConnCtl {
                session,
                data: matches!(codec, ChannelCodec::Binary(_)),
                tx: ctl_tx,
            },
        );
    }
    let (rec, recording) = recorder(route, shared);
    let pumping = Pumping {
        ends: &ends,
        inspector: &inspector,
        route,
        shared,
        rec: &rec,
    };
    let result = {
        // Pinned where they are made: a future moved into a pin later kept its first place
        // too, 3 KiB per pump for every connection.
        tokio::pin! {
            let up = pump(Dir::Up, &mut cin, codec.clone(), pumping);
            let down = pump(Dir::Down, &mut uin, codec.clone(), pumping);
            // Orders from other connections run beside the pumps, never inside a select arm:
            // they take the same write locks the pumps hold while a write waits.
            let orders = injector(ctl_rx, &ends, route, shared, (conn, session));
        }
        let mut stop = shared.stop.clone();
        let ends = &ends;
        // Boxed: a connection closes once, and inline the close's future (two locks and two
        // ends, WebSocket close frames included) would be part of every idle connection.
        let closing = |c: Closing| {
            Box::pin(async move {
                let frame = match c {
                    Closing::Code(f) => Some(f),
                    // Dropped, not closed: a WebSocket ends with no close frame (1006 at the
                    // peer, as when a peer dies), never with a close that says "no status".
                    Closing::Drop => Some(CloseFrame {
                        code: 1006,
                        reason: String::new(),
                    }),
                };
                // A pump stuck writing to a peer that stopped reading holds its end's lock:
                // give up after the deadline (dropping the connection closes it anyway).
                let _ = tokio::time::timeout(DRAIN_DEADLINE, async {
                    let _ = ends.client.lock().await.end(frame.clone()).await;
                    let _ = ends.upstream.lock().await.end(frame).await;
                })
                .await;
            })
        };
        let mut up_done = false;
        let mut down_done = false;
        let mut result = Ok(());
        let opened = inspector
            .lock()
            .map(|mut i| i.open(Instant::now()))
            .unwrap_or_default();
        for seen in boxed(opened) {
            let refused = match &seen.0.decision {
                Decision::Refuse { close: Some(c), .. } => Some(c.clone()),
                _ => None,
            };
            let _ = rec.send(Some(seen)).await;
            if let Some(c) = refused {
                closing(c).await;
                up_done = true;
                down_done = true;
            }
        }
        // A deadline that fired and was not moved is not waited on again (no busy loop).
        let mut fired: Option<Instant> = None;
        while !(up_done && down_done) {
            let deadline = inspector
                .lock()
                .ok()
                .and_then(|i| i.next_deadline())
                .filter(|d| Some(*d) != fired);
            tokio::select! {
                () = at(deadline) => {
                    // A missed deadline (toolchannel handshake, ready, heartbeat gap; xsession line).
                    fired = deadline;
                    let ticked = inspector.lock().map(|mut i| i.tick(Instant::now())).unwrap_or_default();
                    let mut close = None;
                    for seen in boxed(ticked) {
                        if let Decision::Refuse { close: Some(c), .. } = &seen.0.decision {
                            close = Some(c.clone());
                        }
                        let _ = rec.send(Some(seen)).await;
                    }
                    if let Some(c) = close {
                        closing(c).await;
                        break;
                    }
                }
                r = &mut up, if !up_done => {
                    up_done = true;
                    match r {
                        Ok(PumpEnd::Done) => {}
                        Ok(PumpEnd::Stopped) => { wind_down(&mut down, down_done).await; closing(stopping()).await; break; }
                        Ok(PumpEnd::Closed(c)) => { closing(c).await; break; }
                        Err(e) => { result = Err(format!("client side: {e}")); closing(Closing::Drop).await; break; }
                    }
                }
                r = &mut down, if !down_done => {
                    down_done = true;
                    match r {
                        Ok(PumpEnd::Done) => {}
                        Ok(PumpEnd::Stopped) => { wind_down(&mut up, up_done).await; closing(stopping()).await; break; }
                        Ok(PumpEnd::Closed(c)) => { closing(c).await; break; }
                        Err(e) => { result = Err(format!("upstream side: {e}")); closing(Closing::Drop).await; break; }
                    }
                }
                c = &mut orders => {
                    closing(c).await;
                    break;
                }
                () = stopped(&mut stop) => {
                    // The pumps heard it too: they finish writing what they took.
                    tokio::join!(wind_down(&mut up, up_done), wind_down(&mut down, down_done));
                    closing(stopping()).await;
                    break;
                }
            }
        }
        result
    };
    // Both ends have been told (EOF or a close): hear them out before letting go.
    let (from_client, from_upstream) = Box::pin(linger(&mut cin, &mut uin)).await;
    if from_client + from_upstream > 0 {
        shared
            .stats
            .discarded
            .fetch_add(from_client + from_upstream, Ordering::Relaxed);
        shared.note(
            &route.name,
            conn,
            &format!(
                "after the close: dropped {from_client} bytes from the client, {from_upstream} from the upstream"
            ),
        );
    }
    let closed = inspector
        .lock()
        .map(|mut i| i.close(Instant::now()))
        .unwrap_or_default();
    for seen in boxed(closed) {
        let _ = rec.send(Some(seen)).await;
    }
    // Everything inspected reaches the sinks before the connection is reported closed.
    let _ = rec.send(None).await;
    if tokio::time::timeout(SHUTDOWN_DEADLINE, recording)
        .await
        .is_err()
    {
        shared.note(&route.name, conn, "the recorder did not finish in time");
    }
    if let Ok(mut conns) = shared.conns.lock() {
        conns.remove(&conn);
    }
    shared.leave_session(conn);
    shared.note(&route.name, conn, "closed");
    result
}

/// An inspected frame and its bytes. Boxed: the recorder's queue allocates its slots in
/// blocks, and every future that sends holds its value, so an unboxed inspection (700
/// bytes) cost each connection tens of KiB idle.
type Seen = Box<(Inspection, Bytes)>;

/// Inspections of no frame (a connection's open, a deadline, its close), each boxed
/// before the loop that sends them waits: an inspection the loop held would take its room
/// in the connection's future for good.
fn boxed(all: Vec<Inspection>) -> impl Iterator<Item = Seen> {
    all.into_iter().map(|i| Box::new((i, Bytes::new())))
}

/// Inspected frames on their way to the sinks and the recording; `None` ends the queue.
type Rec = tokio::sync::mpsc::Sender<Option<Seen>>;

/// Frames a connection's sinks may lag behind its relay. Small, since each entry
/// holds its frame: the bound is on memory as much as on lag.
const RECORD_QUEUE: usize = 16;

/// The connection's recorder: the live view, traces and the recording see each
/// frame in the order it was inspected, on a task of their own, so their work is
/// not on the frame's way to its receiver. A frame is queued before the frame
/// answering it can be inspected (enforce mode queues it before writing it,
/// observe mode under the inspector's lock: [`Ahead`]), so a reply is never
/// shown before its request. A full queue slows the relay; nothing is dropped.
fn recorder(route: &Route, shared: &Arc<Shared>) -> (Rec, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Option<Seen>>(RECORD_QUEUE);
    let (route, shared) = (route.clone(), shared.clone());
    let task = tokio::spawn(async move {
        while let Some(Some(seen)) = rx.recv().await {
            let (ins, raw) = &*seen;
            shared.record(&route, ins, raw);
            if shared.recorder.is_some() {
                // Boxed: only a recording run writes records, and inline the write's
                // future would be part of every connection's recorder.
                Box::pin(shared.write_record(ins, raw)).await;
            }
        }
    });
    (tx, task)
}

/// Carry out other connections' orders on this one until one says to close it.
async fn injector(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Box<Ctl>>,
    ends: &Ends,
    route: &Route,
    shared: &Arc<Shared>,
    (conn, session): (u64, u64),
) -> Closing {
    // The party each direction writes to.
    let toward = |party: &str| {
        if party == route.server {
            Some(Dir::Up)
        } else if party == route.client {
            Some(Dir::Down)
        } else {
            None
        }
    };
    while let Some(order) = rx.recv().await {
        match *order {
            Ctl::Close(c) => return c,
            Ctl::Wake => {
                for (dir, party) in [(Dir::Up, &route.server), (Dir::Down, &route.client)] {
                    // Taken under the write lock, so a frame the pump forwards next cannot overtake.
                    let mut to = ends.toward(dir).lock().await;
                    let frames = shared.policy.take_released(session, party);
                    if frames.is_empty() {
                        continue;
                    }
                    let mut r = Ok(());
                    for f in &frames {
                        r = r.and(to.push_raw(&f.bytes).await);
                    }
                    if let Err(e) = r.and(to.flush().await) {
                        shared.note(
                            &route.name,
                            conn,
                            &format!("released frames not written: {e}"),
                        );
                    }
                }
            }
            Ctl::Send {
                to: party,
                messages,
            } => {
                let Some(dir) = toward(&party) else {
                    continue;
                };
                let mut to = ends.toward(dir).lock().await;
                let mut r = Ok(());
                for m in &messages {
                    r = r.and(to.push(&Frame::Json(m.clone())).await);
                }
                if let Err(e) = r.and(to.flush().await) {
                    shared.note(
                        &route.name,
                        conn,
                        &format!("messages to {party} not written: {e}"),
                    );
                }
            }
        }
    }
    // The sender lives in `Shared` until this connection ends: never reached while relaying.
    std::future::pending().await
}

/// What both pumps of a connection share.
#[derive(Clone, Copy)]
struct Pumping<'a> {
    ends: &'a Ends,
    inspector: &'a std::sync::Mutex<Inspector>,
    route: &'a Route,
    shared: &'a Arc<Shared>,
    rec: &'a Rec,
}

async fn pump(
    dir: Dir,
    from: &mut FrameIn,
    mut codec: ChannelCodec,
    p: Pumping<'_>,
) -> std::io::Result<PumpEnd> {
    let Pumping {
        ends,
        inspector,
        route,
        shared,
        rec,
    } = p;
    let mut items = Vec::with_capacity(64);
    let mut replies: Vec<Bytes> = Vec::new();
    let mut stop = shared.stop.clone();
    let incomplete_limit = inspector
        .lock()
        .ok()
        .and_then(|i| i.incomplete_frame_limit());
    // The partial frame (by its start) whose deadline already fired: reported once.
    let mut fired: Option<Instant> = None;
    // Held data frames are written later, as they travelled: keep their encoding (enforce only).
    let keep_encoded = route.mode == Mode::Enforce && matches!(codec, ChannelCodec::Binary(_));
    loop {
        items.clear();
        let deadline = incomplete_limit
            .zip(from.partial_since())
            .filter(|(_, since)| Some(*since) != fired)
            .map(|(limit, since)| since + limit);
        tokio::select! {
            // Cancel-safe: a batch is decoded only once its bytes are in, and then
            // returned without another wait.
            r = from.next_batch(&mut items) => r?,
            () = stopped(&mut stop) => return Ok(PumpEnd::Stopped),
            () = at(deadline) => {
                fired = from.partial_since();
                let seen: Seen = {
                    let Ok(mut i) = inspector.lock() else {
                        return Err(io_err("inspector poisoned"));
                    };
                    Box::new((i.incomplete_frame(dir), Bytes::new()))
                };
                let close = match &seen.0.decision {
                    Decision::Refuse { close: Some(c), .. } => Some(c.clone()),
                    _ => None,
                };
                let _ = rec.send(Some(seen)).await;
                if let Some(c) = close {
                    return Ok(PumpEnd::Closed(c));
                }
                continue;
            }
        }
        let now = Instant::now();
        let mut to = ends.toward(dir).lock().await;
        let mut close = None;
        let mut ended = None;
        if route.mode == Mode::Observe && may_forward_ahead(route) {
            let ahead = Ahead {
                dir,
                now,
                inspector,
                rec,
            };
            if let Some(c) = ahead.forward(&mut items, &mut to, shared, route).await? {
                return Ok(PumpEnd::Closed(c));
            }
        }
        for item in items.drain(..) {
            let inspected = {
                let Ok(mut i) = inspector.lock() else {
                    return Err(io_err("inspector poisoned"));
                };
                inspect_item(&mut i, dir, &item, now, keep_encoded.then_some(&mut codec))?
            };
            let Some(mut seen) = inspected else {
                match item {
                    Item::End(c) => ended = Some(c),
                    Item::Raw(r) => to.push_raw(&r).await?,
                    _ => {}
                }
                continue;
            };
            let effects = std::mem::take(&mut seen.0.effects);
            let decision = seen.0.decision.clone();
            let conn = seen.0.event.conn;
            let _ = rec.send(Some(seen)).await;
            // Frames released by credit go out before this one.
            for e in &effects {
                if let Effect::Write(frames) = e {
                    for f in frames {
                        to.push_raw(&f.bytes).await?;
                    }
                }
            }
            if !effects.is_empty() {
                shared.carry_out(route, conn, effects);
            }
            match decision {
                Decision::ForwardAnd { reply } => {
                    replies.push(reply);
                    match item {
                        Item::Frame(f) => to.push(&f).await?,
                        Item::Last(f, raw) => to.push_last(&f, &raw).await?,
                        _ => {}
                    }
                }
                Decision::Forward => match item {
                    Item::Frame(f) => to.push(&f).await?,
                    Item::Last(f, raw) => to.push_last(&f, &raw).await?,
                    Item::BinaryMsg(b) => to.push_binary(b).await?,
                    Item::Oversize(_, t) => to.push(&Frame::Json(t)).await?,
                    // Observe mode keeps the bytes flowing when both sides share the framing.
                    Item::Broken(_, rest) if to.push_raw(&rest).await.is_err() => {
                        close = Some(Closing::Drop);
                        break;
                    }
                    _ => {}
                },
                Decision::Hold => {
                    shared.stats.held.fetch_add(1, Ordering::Relaxed);
                    if let Item::Frame(Frame::Data(d)) | Item::Last(Frame::Data(d), _) = &item {
                        let n = d.payload.len() as u64;
                        shared.stats.held_bytes.fetch_add(n, Ordering::Relaxed);
                    }
                }
                Decision::Refuse { reply, close: c } => {
                    replies.extend(reply);
                    if c.is_some() {
                        close = c;
                        break;
                    }
                }
            }
        }
        to.flush().await?;
        drop(to);
        let took = now.elapsed();
        for s in &shared.sinks {
            s.relayed(route, took);
        }
        if !replies.is_empty() {
            let mut back = ends.toward(dir.reverse()).lock().await;
            for r in replies.drain(..) {
                back.push(&Frame::Json(r)).await?;
            }
            back.flush().await?;
        }
        if let Some(c) = close {
            return Ok(PumpEnd::Closed(c));
        }
        if let Some(c) = ended {
            if matches!(from, FrameIn::Msgs(..)) {
                return Ok(closed_by_message_peer(c));
            }
            pass_stream_end(&mut *ends.toward(dir).lock().await).await;
            return Ok(PumpEnd::Done);
        }
    }
}

/// What the inspector says of one item, and the bytes to record with it; `None` for
/// what it does not inspect (raw bytes after a framing break, the sender's end).
/// `codec` is given when a data frame's encoding is kept (enforce mode may hold it).
fn inspect_item(
    i: &mut Inspector,
    dir: Dir,
    item: &Item,
    now: Instant,
    codec: Option<&mut ChannelCodec>,
) -> std::io::Result<Option<Seen>> {
    // Boxed at once: the pump holds it across awaits (the recorder's queue), and inline
    // it would be part of every connection's future, idle ones included.
    Ok(match item {
        Item::Frame(Frame::Json(b)) | Item::Last(Frame::Json(b), _) => {
            Some(Box::new((i.frame(dir, b, now), b.clone())))
        }
        Item::Frame(Frame::Data(d)) | Item::Last(Frame::Data(d), _) => {
            let encoded = match codec {
                Some(c) => encode_data(c, d)?,
                None => Bytes::new(),
            };
            Some(Box::new((
                i.data_frame(dir, d, encoded, now),
                d.payload.clone(),
            )))
        }
        Item::BinaryMsg(b) => Some(Box::new((i.binary_message(dir, b.len()), b.clone()))),
        Item::Broken(e, rest) | Item::Oversize(e, rest) => {
            Some(Box::new((i.framing_error(dir, e), rest.clone())))
        }
        Item::Raw(_) | Item::End(_) => None,
    })
}

/// Whether observe mode may forward a batch before inspecting it. Not where frames on
/// another connection are judged by what these frames grant (credit across a kernel
/// session's channels): the peer answers a forwarded grant at once, and its data could
/// be judged before the grant was seen, a credit overrun that never happened.
fn may_forward_ahead(route: &Route) -> bool {
    route.wire.contract().credit.is_empty()
}

/// Observe mode's fast path: a batch's leading frames go out before they are
/// inspected, so the inspection overlaps the receiver's own work instead of
/// delaying every frame. Observe mode forwards every frame whatever its verdict,
/// so only the order of what is seen must be kept: the frames are inspected and
/// queued for the sinks under the inspector's lock, taken before the bytes can
/// reach the receiver, so an answer (inspected by the other direction's pump
/// under the same lock) is never seen before the frame it answers. The queue's
/// places are reserved first, since nothing may wait while the lock is held.
struct Ahead<'a> {
    dir: Dir,
    now: Instant,
    inspector: &'a std::sync::Mutex<Inspector>,
    rec: &'a Rec,
}

impl Ahead<'_> {
    /// Forward and inspect the leading frames of `items`, removing them, as many
    /// at a time as the queue holds; the rest takes the usual path. A close the
    /// inspection asks for is returned.
    async fn forward(
        &self,
        items: &mut Vec<Item>,
        to: &mut FrameOut,
        shared: &Arc<Shared>,
        route: &Route,
    ) -> std::io::Result<Option<Closing>> {
        loop {
            let n = items
                .iter()
                .take(RECORD_QUEUE)
                .take_while(|i| matches!(i, Item::Frame(_) | Item::Last(..)))
                .count();
            // A closed queue refuses every reservation: the usual path then.
            if n == 0 || self.rec.is_closed() {
                return Ok(None);
            }
            if let Some(c) = self.forward_some(n, items, to, shared, route).await? {
                return Ok(Some(c));
            }
        }
    }

    /// The first `n` items (frames, at most the queue's size) of `items`.
    async fn forward_some(
        &self,
        n: usize,
        items: &mut Vec<Item>,
        to: &mut FrameOut,
        shared: &Arc<Shared>,
        route: &Route,
    ) -> std::io::Result<Option<Closing>> {
        let Ok(places) = self.rec.reserve_many(n).await else {
            return Ok(None);
        };
        // A receiver that is gone fails the pump, but only once its frames are seen.
        let mut sent = Ok(());
        for item in &items[..n] {
            sent = match item {
                Item::Frame(f) => to.push(f).await,
                Item::Last(f, raw) => to.push_last(f, raw).await,
                _ => Ok(()),
            };
            if sent.is_err() {
                break;
            }
        }
        let mut close = None;
        let mut effects = Vec::new();
        let mut conn = 0;
        {
            let Ok(mut i) = self.inspector.lock() else {
                return Err(io_err("inspector poisoned"));
            };
            if sent.is_ok() {
                sent = to.try_flush();
            }
            for (item, place) in items.drain(..n).zip(places) {
                let Some(mut seen) = inspect_item(&mut i, self.dir, &item, self.now, None)? else {
                    continue;
                };
                effects.append(&mut seen.0.effects);
                conn = seen.0.event.conn;
                if let Decision::Refuse { close: Some(c), .. } = &seen.0.decision {
                    close = Some(c.clone());
                }
                place.send(Some(seen));
            }
            sent?;
        }
        to.flush().await?;
        if !effects.is_empty() {
            shared.carry_out(route, conn, effects);
        }
        Ok(close)
    }
}

/// A data frame encoded as it travels (length field included).
fn encode_data(codec: &mut ChannelCodec, d: &BinaryFrame) -> std::io::Result<Bytes> {
    let ChannelCodec::Binary(c) = codec else {
        return Err(io_err("a data frame on a channel without binary framing"));
    };
    let mut out = BytesMut::with_capacity(d.payload.len() + 32);
    c.encode(d, &mut out).map_err(io_err)?;
    Ok(out.freeze())
}
