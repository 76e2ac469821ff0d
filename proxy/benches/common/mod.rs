//! Helpers the benches share: child processes, percentiles, memory, and the
//! WebSocket peers. Each bench uses a part of them.
#![allow(dead_code)]
#![allow(clippy::result_large_err)] // tungstenite's handshake callback type, not ours

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// A child process killed and reaped when dropped.
pub struct Kill(pub Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// contract-proxy `run ARGS`, its JSON log going to `log`, a file, as a user would keep it.
pub fn proxy<S: AsRef<OsStr>>(log: &Path, args: &[S]) -> Kill {
    let out = std::fs::File::create(log).expect("log file");
    Kill(
        Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
            .args(["run", "--log", "json"])
            .args(args)
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("proxy starts"),
    )
}

/// socat relaying a unix listener to `to` (a socat address), a process per connection.
pub fn socat(listen: &Path, to: &str) -> Kill {
    Kill(
        Command::new("socat")
            .arg(format!(
                "UNIX-LISTEN:{},fork,backlog=1024",
                listen.display()
            ))
            .arg(to)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat is installed"),
    )
}

/// websocat (at `ws`) relaying WebSocket messages from `port` to the echo host at `echo`;
/// text messages stay text (the contract carries JSON-RPC in text messages).
pub fn websocat(ws: &Path, port: u16, echo: u16) -> Kill {
    Kill(
        Command::new(ws)
            .args(["-t", "-E"])
            .arg(format!("ws-l:127.0.0.1:{port}"))
            .arg(format!("ws://127.0.0.1:{echo}/"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("websocat"),
    )
}

/// A TCP port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Wait until a listener's socket file exists.
pub async fn wait_for(p: &Path) {
    for _ in 0..400 {
        if p.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", p.display());
}

/// A number from the environment, or `default`.
pub fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p` quantile of sorted samples.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A field of /proc/PID/status in KiB (VmRSS, VmHWM); 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The processes whose parent is `pid` (socat forks one per connection).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("PPid:"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|n| n.parse::<u32>().ok())
                })
                == Some(pid)
        })
        .collect()
}

/// The peers' Python: `PEERS_PYTHON`, else the repo's `.venv-peers`, else `python3` (the
/// benches' peers need nothing beyond the standard library).
pub fn peers_python() -> PathBuf {
    let venv = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../.venv-peers/bin/python"
    ));
    (std::env::var_os("PEERS_PYTHON").map(PathBuf::from))
        .or_else(|| venv.exists().then_some(venv))
        .unwrap_or_else(|| "python3".into())
}

/// websocat from .venv-peers, installed there by `scripts/setup.sh peers` when missing;
/// None, with the reason printed, when it cannot be had.
pub fn websocat_path() -> Option<PathBuf> {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let ws = root.join(".venv-peers/bin/websocat");
    if ws.exists() {
        return Some(ws);
    }
    println!("websocat missing: installing it with scripts/setup.sh peers");
    let st = Command::new(root.join("scripts/setup.sh"))
        .arg("peers")
        .status();
    match st {
        Ok(st) if st.success() && ws.exists() => Some(ws),
        other => {
            println!(
                "WebSocket part skipped: scripts/setup.sh peers did not provide {} ({other:?})",
                ws.display()
            );
            None
        }
    }
}

/// The first of `method`'s examples that is its `part` (call, result, error).
fn example<'c>(
    c: &'c contract::model::Contract,
    method: &str,
    part: contract::model::Part,
) -> &'c Value {
    let ex = c.methods[method].examples.iter().find(|e| e.part == part);
    &ex.expect("an example").message
}

/// toolchannel's handshake and a heartbeat's exchange, from the contract's own examples:
/// the host's `initialize`, the worker's result, `notifications/initialized` and
/// `agentfy/ready`, the host's `tools/list` and the worker's list; then the worker's
/// `agentfy/heartbeat` and the host's answer. Heartbeats after the handshake are valid
/// traffic, the proxy's normal path.
struct Toolchannel {
    /// The session the examples serve (the value their `sessionId` agreement settles),
    /// replaced by each connection's own: one live socket per session.
    session: String,
    /// What the host sends first, then what the worker answers with, in order.
    host_opens: Value,
    worker_answers: [Value; 3],
    host_lists: Value,
    worker_lists: Value,
    beat: Value,
    beat_answer: Value,
    call: Value,
    call_result: Value,
}

/// The examples, taken once.
static TOOLCHANNEL: std::sync::LazyLock<Toolchannel> =
    std::sync::LazyLock::new(Toolchannel::from_contract);

impl Toolchannel {
    fn from_contract() -> Self {
        use contract::model::Part;
        let c = contract::builtin("toolchannel").expect("toolchannel");
        let first = |method: &str, part: Part| example(&c, method, part).clone();
        let host_opens = first("initialize", Part::Call);
        let settled = &c.agreements["sessionId"].settled[0];
        assert_eq!(
            settled.method, "initialize",
            "the host's initialize settles the session"
        );
        let session = host_opens.pointer(&settled.pointer).and_then(Value::as_str);
        Toolchannel {
            session: session.expect("the examples' session").to_string(),
            host_opens,
            worker_answers: [
                first("initialize", Part::Result),
                first("notifications/initialized", Part::Call),
                first("agentfy/ready", Part::Call),
            ],
            host_lists: first("tools/list", Part::Call),
            worker_lists: first("tools/list", Part::Result),
            beat: first("agentfy/heartbeat", Part::Call),
            beat_answer: first("agentfy/heartbeat", Part::Result),
            call: first("tools/call", Part::Call),
            call_result: first("tools/call", Part::Result),
        }
    }

    /// `text`, JSON of an example, as session `session`'s.
    fn as_session(&self, text: String, session: &str) -> String {
        text.replace(
            &json!(self.session).to_string(),
            &json!(session).to_string(),
        )
    }

    /// Example `m` as session `session`'s message.
    fn text(&self, m: &Value, session: &str) -> tokio_tungstenite::tungstenite::Message {
        tokio_tungstenite::tungstenite::Message::text(self.as_session(m.to_string(), session))
    }

    /// Example `m` with id `id`, as session `session`'s message.
    fn with_id(
        &self,
        m: &Value,
        id: Value,
        session: &str,
    ) -> tokio_tungstenite::tungstenite::Message {
        let mut m = m.clone();
        m["id"] = id;
        self.text(&m, session)
    }

    /// The worker's result to the call with id `id`, its first text padded to `size`
    /// bytes of JSON (a file's contents, say).
    fn call_result(&self, session: &str, id: &Value, size: usize) -> String {
        let make = |fill: &str| {
            let mut m = self.call_result.clone();
            m["id"] = id.clone();
            m["result"]["content"][0]["text"] = json!(fill);
            m
        };
        let padded = String::from_utf8(pad_to(make, size)).expect("utf-8");
        self.as_session(padded, session)
    }
}

/// The next text message on `ws`, as JSON.
async fn next_json<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Option<Value>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match ws.next().await? {
            Ok(m) if m.is_text() => return serde_json::from_str(m.to_text().ok()?).ok(),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

/// A toolchannel host: the handshake ([`Toolchannel`]) on each connection, then an answer
/// to every heartbeat (and, as a heartbeat's answer, to anything else it is sent).
pub async fn ws_echo(l: tokio::net::TcpListener) {
    ws_host(l, false).await
}

/// A toolchannel host that, after the handshake, sends `tools/call`s: the first at once,
/// the next as each result comes, for the worker to time (see [`called_round_trip`]).
/// The contract's direction for a tool call, so valid traffic. (Not a mode of
/// [`ws_echo`] chosen by the session: websocat does not pass the token on.)
pub async fn ws_caller(l: tokio::net::TcpListener) {
    ws_host(l, true).await
}

async fn ws_host(l: tokio::net::TcpListener, called: bool) {
    loop {
        let Ok((s, _)) = l.accept().await else { return };
        tokio::spawn(async move {
            let _ = s.set_nodelay(true);
            // The session is the token's (toolchannel's host takes it from the token's sub).
            let token = std::sync::Mutex::new(String::new());
            let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(s, |req: &tokio_tungstenite::tungstenite::handshake::server::Request, mut resp: tokio_tungstenite::tungstenite::handshake::server::Response| {
                let bearer = req.headers().get("Authorization").and_then(|h| h.to_str().ok());
                if let (Some(b), Ok(mut t)) = (bearer.and_then(|b| b.strip_prefix("Bearer ")), token.lock()) {
                    *t = b.to_string();
                }
                if req.headers().get("Sec-WebSocket-Protocol").is_some() {
                    resp.headers_mut().insert("Sec-WebSocket-Protocol", "agentfy.worker.v1".parse().expect("header"));
                }
                Ok(resp)
            })
            .await
            else {
                return;
            };
            let t = &*TOOLCHANNEL;
            let session = token.lock().map(|t| t.clone()).unwrap_or_default();
            let text = |v: &Value| t.text(v, &session);
            if ws.send(text(&t.host_opens)).await.is_err() {
                return;
            }
            for _ in &t.worker_answers {
                if next_json(&mut ws).await.is_none() {
                    return;
                }
            }
            if ws.send(text(&t.host_lists)).await.is_err() || next_json(&mut ws).await.is_none() {
                return;
            }
            let mut id = 0;
            loop {
                id += 1;
                if called
                    && ws
                        .send(t.with_id(&t.call, json!(id), &session))
                        .await
                        .is_err()
                {
                    return;
                }
                let Some(v) = next_json(&mut ws).await else {
                    return;
                };
                if !called
                    && ws
                        .send(t.with_id(&t.beat_answer, v["id"].clone(), &session))
                        .await
                        .is_err()
                {
                    return;
                }
            }
        });
    }
}

/// A client's WebSocket.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The session [`ws_connect`] serves.
pub const WS_SESSION: &str = "bench";

/// A toolchannel worker's WebSocket connection to `port` for session [`WS_SESSION`].
pub async fn ws_connect(port: u16) -> Ws {
    ws_connect_as(port, WS_SESSION).await
}

/// A toolchannel worker's WebSocket connection to `port` for `session` (subprotocol and
/// token as the contract asks), retried while the listener comes up, its handshake done.
pub async fn ws_connect_as(port: u16, session: &str) -> Ws {
    let mut ws = ws_dial(port, session).await;
    let t = &*TOOLCHANNEL;
    let text = |v: &Value| t.text(v, session);
    next_json(&mut ws).await.expect("the host's initialize");
    for m in &t.worker_answers {
        ws.send(text(m)).await.expect("the worker's handshake");
    }
    next_json(&mut ws).await.expect("the host's tools/list");
    ws.send(text(&t.worker_lists))
        .await
        .expect("the worker's tools");
    ws
}

async fn ws_dial(port: u16, session: &str) -> Ws {
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("ws://127.0.0.1:{port}/"),
    )
    .expect("request");
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "agentfy.worker.v1".parse().expect("header"),
    );
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {session}").parse().expect("header"),
    );
    for _ in 0..400 {
        // Without TCP_NODELAY a reply can wait on the delayed ACK (tens of ms), as every
        // peer in the path sets it (the proxy, the echo, websocat).
        if let Ok((c, _)) =
            tokio_tungstenite::connect_async_with_config(req.clone(), None, true).await
        {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("cannot connect to port {port}");
}

/// One toolchannel heartbeat request of session [`WS_SESSION`] and its answer; the round trip.
pub async fn heartbeat(c: &mut Ws, id: u64) -> Duration {
    heartbeat_as(c, WS_SESSION, id).await
}

/// One toolchannel heartbeat request of `session` and its answer; the round trip.
pub async fn heartbeat_as(c: &mut Ws, session: &str, id: u64) -> Duration {
    let tc = &*TOOLCHANNEL;
    let t = Instant::now();
    c.send(tc.with_id(&tc.beat, json!(id), session))
        .await
        .expect("send");
    answer(c).await;
    t.elapsed()
}

/// On a connection to a [`ws_caller`], the worker's result to `call` (padded to
/// `size` bytes) and the host's next call; the round trip, and that call.
pub async fn called_round_trip(c: &mut Ws, call: &Value, size: usize) -> (Duration, Value) {
    let result = TOOLCHANNEL.call_result(WS_SESSION, &call["id"], size);
    let t = Instant::now();
    c.send(tokio_tungstenite::tungstenite::Message::text(result))
        .await
        .expect("send");
    let next = next_json(c).await.expect("the host's next call");
    (t.elapsed(), next)
}

/// The host's first call on a connection to a [`ws_caller`].
pub async fn first_call(c: &mut Ws) -> Value {
    next_json(c).await.expect("the host's first call")
}

/// Wait for the next text message.
async fn answer(c: &mut Ws) {
    loop {
        match c.next().await {
            Some(Ok(r)) if r.is_text() => return,
            Some(Ok(_)) => continue,
            other => panic!("no reply: {other:?}"),
        }
    }
}

/// A rukh message padded to `target` bytes of JSON by `make`'s filler string.
pub fn pad_to(make: impl Fn(&str) -> Value, target: usize) -> Vec<u8> {
    let base = serde_json::to_vec(&make("")).expect("json").len();
    let fill = "x".repeat(target.saturating_sub(base));
    serde_json::to_vec(&make(&fill)).expect("json")
}

/// A rukh `rukh.call` with id `e:ID`.
pub fn call(id: u64, fill: &str) -> Value {
    json!({"jsonrpc":"2.0","id":format!("e:{id}"),"method":"rukh.call","params":{"operation":"fs.read","version":"1","input":{"path":fill},"timeoutMs":1000}})
}

/// The result answering `id`.
pub fn result(id: &Value, fill: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"result":{"output":{"text":fill}}})
}

/// `body` with its 4-byte big-endian length.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// One length-prefixed frame into `buf`.
pub async fn read_frame(
    s: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    buf.resize(u32::from_be_bytes(len) as usize, 0);
    s.read_exact(buf).await?;
    Ok(())
}

/// The frames the proxy flagged in its JSON log at `log` (none when there is no log).
/// A flagged frame takes a longer path than a valid one: the count says which was measured.
pub fn violations(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.matches(r#""verdict":"violation""#).count()
}

/// The class and reason of the first frame the proxy flagged in its log at `log`.
pub fn first_violation(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text
        .lines()
        .find(|l| l.contains(r#""verdict":"violation""#))?;
    let v: Value = serde_json::from_str(line).ok()?;
    Some(format!(
        "{}: {}",
        v["verdict"]["class"], v["verdict"]["reason"]
    ))
}

/// rukh's opening, from the contract's own examples: the core's `rukh.initialize`, the
/// extension's result confirming it, and the core's `rukh.invoke`. The extension may call
/// the core only after it (the session machine's `Running`), so a bench whose calls come
/// after it has the proxy inspect valid traffic, its normal path.
pub struct RukhOpening {
    pub initialize: Vec<u8>,
    pub confirm: Vec<u8>,
    pub invoke: Vec<u8>,
}

impl RukhOpening {
    pub fn from_contract() -> Self {
        use contract::model::Part;
        let c = contract::builtin("rukh").expect("rukh");
        let first =
            |method: &str, part: Part| serde_json::to_vec(example(&c, method, part)).expect("json");
        RukhOpening {
            initialize: first("rukh.initialize", Part::Call),
            confirm: first("rukh.initialize", Part::Result),
            invoke: first("rukh.invoke", Part::Call),
        }
    }

    /// The core's side of it on `s`.
    pub async fn as_core(
        &self,
        s: &mut (impl AsyncRead + tokio::io::AsyncWrite + Unpin),
    ) -> std::io::Result<()> {
        s.write_all(&frame(&self.initialize)).await?;
        read_frame(s, &mut Vec::new()).await?;
        s.write_all(&frame(&self.invoke)).await
    }

    /// The extension's side of it on `s`.
    pub async fn as_extension(
        &self,
        s: &mut (impl AsyncRead + tokio::io::AsyncWrite + Unpin),
    ) -> std::io::Result<()> {
        read_frame(s, &mut Vec::new()).await?;
        s.write_all(&frame(&self.confirm)).await?;
        read_frame(s, &mut Vec::new()).await
    }

    /// The three messages as one JSON object, for peers in other languages.
    pub fn to_json(&self) -> Value {
        let v = |b: &[u8]| serde_json::from_slice::<Value>(b).expect("json");
        json!({
            "initialize": v(&self.initialize),
            "confirm": v(&self.confirm),
            "invoke": v(&self.invoke),
        })
    }
}

/// The rukh core side: opens each session with `opening` where given, then answers each
/// rukh.call with a result of the same size class.
pub async fn echo_server(
    l: tokio::net::UnixListener,
    target: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    opening: Option<std::sync::Arc<RukhOpening>>,
) {
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let (target, opening) = (target.clone(), opening.clone());
        tokio::spawn(async move {
            if let Some(o) = opening
                && o.as_core(&mut s).await.is_err()
            {
                return;
            }
            let mut buf = Vec::new();
            while read_frame(&mut s, &mut buf).await.is_ok() {
                let Ok(v) = serde_json::from_slice::<Value>(&buf) else {
                    return;
                };
                let size = target.load(std::sync::atomic::Ordering::Relaxed);
                let reply = pad_to(|f| result(&v["id"], f), size);
                if s.write_all(&frame(&reply)).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// A control envelope, framed.
pub fn control(v: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(v).expect("json");
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// One control envelope.
pub async fn read_control(s: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Value> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// The kernel's examples the benches send: hello and settings.describe with their
/// results, stream.open and stream.credit.
pub struct Kernel {
    pub hello: Value,
    pub hello_result: Value,
    pub describe: Value,
    pub described: Value,
    pub stream_open: Value,
    pub stream_credit: Value,
}

impl Kernel {
    pub fn new() -> Self {
        let c = contract::builtin("kernel").expect("kernel");
        let ex = |m: &str, part: contract::model::Part| {
            c.methods[m]
                .examples
                .iter()
                .find(|e| e.part == part)
                .map(|e| e.message.clone())
                .unwrap_or_else(|| panic!("a {m} example"))
        };
        use contract::model::Part;
        // The core opens the stream it sends on (audio.output); the shell grants its credit.
        let sent_by = |m: &str, from: &str| {
            c.methods[m]
                .examples
                .iter()
                .find(|e| {
                    e.from.as_deref() == Some(from)
                        && e.message["payload"]["kind"]
                            .as_str()
                            .is_none_or(|k| k == "audio.output")
                })
                .map(|e| e.message.clone())
                .unwrap_or_else(|| panic!("a {m} example from the {from}"))
        };
        Kernel {
            hello: ex("hello", Part::Call),
            hello_result: ex("hello", Part::Result),
            describe: ex("settings.describe", Part::Call),
            described: ex("settings.describe", Part::Result),
            stream_open: sent_by("stream.open", "core"),
            stream_credit: sent_by("stream.credit", "shell"),
        }
    }
}

/// A kernel session's way to the shell: the shell's two listeners, where the core
/// connects, and what relays between them.
pub struct KernelRoute {
    /// The shell's control and data listeners.
    pub shell: (tokio::net::UnixListener, tokio::net::UnixListener),
    /// Where the core connects, control and data.
    pub via: (PathBuf, PathBuf),
    /// Nothing (direct), a socat per channel, or one proxy pairing both channels.
    pub relays: Vec<Kill>,
}

/// [`KernelRoute`] for `path` ("direct", "socat", or the proxy for anything else, with
/// `proxy_args` before its endpoints and its JSON log in `log`); sockets are `name(part)`.
pub fn kernel_route(
    name: impl Fn(&str) -> PathBuf,
    path: &str,
    log: &Path,
    proxy_args: &[&str],
) -> KernelRoute {
    let (uc, ud) = (name("shell-c"), name("shell-d"));
    let shell = (
        tokio::net::UnixListener::bind(&uc).expect("bind"),
        tokio::net::UnixListener::bind(&ud).expect("bind"),
    );
    let (vc, vd) = (name("via-c"), name("via-d"));
    let unix = |p: &Path| format!("unix:{}", p.display());
    let to = |p: &Path| format!("UNIX-CONNECT:{}", p.display());
    let (via, relays) = match path {
        "direct" => ((uc, ud), vec![]),
        "socat" => {
            let relays = vec![socat(&vc, &to(&uc)), socat(&vd, &to(&ud))];
            ((vc, vd), relays)
        }
        _ => {
            let (lc, luc, ld, lud) = (unix(&vc), unix(&uc), unix(&vd), unix(&ud));
            let ends = [
                "--listen",
                &lc,
                "--upstream",
                &luc,
                "--pair-listen",
                &ld,
                "--pair-upstream",
                &lud,
            ];
            let args: Vec<&str> = ["--contract", "kernel"]
                .iter()
                .chain(proxy_args)
                .chain(&ends)
                .copied()
                .collect();
            let relays = vec![proxy(log, &args)];
            ((vc, vd), relays)
        }
    };
    KernelRoute { shell, via, relays }
}
