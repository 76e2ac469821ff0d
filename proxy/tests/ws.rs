//! WebSocket endpoints against real, third-party peers over loopback sockets.
//!
//! A tiny relay harness stands in for the proxy's relay: a [`WsListener`] faces
//! the client, [`ws::connect`] faces the upstream with the client's handshake,
//! and messages are forwarded both ways. Peers: Python `websockets`
//! (tests/peers/ws_server.py, ws_client.py), websocat, and tokio-tungstenite
//! where a peer must misbehave on purpose (stay silent, send too much).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use contract_transport::conn::{BoxMsg, CloseFrame, HttpRefusal, Msg};
use contract_transport::endpoint::Options;
use contract_transport::endpoint::tls::TlsOpts;
use contract_transport::endpoint::ws::{self, Accepted, ConnectError, WsListener, WsSettings};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

/// Deadline for any single step of a test.
mod common;
mod harness;

const T: Duration = Duration::from_secs(20);

const PROTO: &str = "agentfy.worker.v1";

fn venv() -> PathBuf {
    let v = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv-peers"));
    assert!(
        v.join("bin/python").exists() && v.join("bin/websocat").exists(),
        "peer venv missing at {}: run scripts/peers-venv.sh",
        v.display()
    );
    v
}

fn python() -> PathBuf {
    venv().join("bin/python")
}

fn peer(script: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers")).join(script)
}

/// The Python `websockets` upstream (tests/peers/ws_server.py), with its JSON-lines report.
struct Server {
    peer: common::PyPeer,
    port: u16,
}

impl Server {
    async fn start(args: &[&str]) -> Server {
        let mut peer = common::PyPeer::start("ws_server.py", args);
        let port = peer.port().await;
        Server { peer, port }
    }

    /// The next report line with `"event": name`, skipping others.
    async fn event(&mut self, name: &str) -> Value {
        self.peer.event(name).await
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Run ws_client.py to its end and return its report lines.
async fn client(url: &str, mode: &str, extra: &[&str]) -> Vec<Value> {
    let out = timeout(
        T,
        Command::new(python())
            .arg(peer("ws_client.py"))
            .args([url, mode])
            .args(extra)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("ws_client.py finishes in time")
    .expect("ws_client.py runs");
    assert!(
        out.status.success(),
        "ws_client.py failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

fn events<'a>(lines: &'a [Value], name: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["event"] == name).collect()
}

/// What the harness did with one client.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Refused(u16),
    /// Relayed; the close frames forwarded, as (direction, frame).
    Relayed(Vec<(&'static str, Option<CloseFrame>)>),
    Failed(String),
}

/// The harness: accepts on `listener`, dials `upstream` with each client's
/// handshake, answers the client with the upstream's answer, relays messages.
fn harness(
    listener: WsListener,
    upstream: String,
    up_path: &str,
    up_tls: bool,
    opts: Options,
) -> (mpsc::UnboundedReceiver<Seen>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let up_path = up_path.to_string();
    let task = tokio::spawn(async move {
        loop {
            let Ok(pending) = listener.accept().await else {
                return;
            };
            let (tx, upstream, up_path, opts) =
                (tx.clone(), upstream.clone(), up_path.clone(), opts.clone());
            tokio::spawn(async move {
                let hello = pending.hello().clone();
                let seen = match ws::connect(&upstream, &up_path, up_tls, &opts, Some(&hello)).await
                {
                    Ok((up, chosen)) => match pending.accept(chosen.as_deref()).await {
                        Ok(down) => pump(down, up).await,
                        Err(e) => Seen::Failed(format!("answering 101: {e}")),
                    },
                    Err(ConnectError::Refused(r)) => match pending.refuse(&r).await {
                        Ok(()) => Seen::Refused(r.status),
                        Err(e) => Seen::Failed(format!("relaying {r}: {e}")),
                    },
                    Err(e) => {
                        let r = HttpRefusal {
                            status: 502,
                            headers: vec![],
                            body: Bytes::from(e.to_string()),
                        };
                        let _ = pending.refuse(&r).await;
                        Seen::Failed(e.to_string())
                    }
                };
                let _ = tx.send(seen);
            });
        }
    });
    (rx, task)
}

/// Forward messages both ways until both directions have ended.
async fn pump(down: BoxMsg, up: BoxMsg) -> Seen {
    let (down_tx, down_rx) = down.split();
    let (up_tx, up_rx) = up.split();
    let (a, b) = tokio::join!(
        forward("client->upstream", down_rx, up_tx),
        forward("upstream->client", up_rx, down_tx)
    );
    match (a, b) {
        (Ok(mut a), Ok(b)) => {
            a.extend(b);
            Seen::Relayed(a)
        }
        (a, b) => Seen::Failed(format!("{:?} / {:?}", a.err(), b.err())),
    }
}

async fn forward(
    dir: &'static str,
    mut from: futures_util::stream::SplitStream<BoxMsg>,
    mut to: futures_util::stream::SplitSink<BoxMsg, Msg>,
) -> Result<Vec<(&'static str, Option<CloseFrame>)>, String> {
    let mut closes = Vec::new();
    let run = async {
        while let Some(m) = from.next().await {
            let m = m.map_err(|e| format!("{dir} read: {e}"))?;
            if let Msg::Close(f) = &m {
                closes.push((dir, f.clone()));
            }
            to.send(m).await.map_err(|e| format!("{dir} write: {e}"))?;
        }
        to.close().await.map_err(|e| format!("{dir} close: {e}"))
    };
    timeout(T, run)
        .await
        .map_err(|_| format!("{dir} did not finish"))??;
    Ok(closes)
}

async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    timeout(T, rx.recv())
        .await
        .expect("the harness finished a connection in time")
        .expect("harness alive")
}

async fn ws_listener(opts: &Options) -> WsListener {
    WsListener::bind("127.0.0.1:0", "/worker", false, opts)
        .await
        .expect("bind")
}

fn port_of(local: &str) -> String {
    // "ws://127.0.0.1:PORT/worker" -> "127.0.0.1:PORT"
    local
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("listener address")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_and_server_through_the_harness() {
    let mut server = Server::start(&[]).await;
    let listener = ws_listener(&Options::default()).await;
    let url = listener.local();
    let (mut seen, task) = harness(
        listener,
        server.addr(),
        "/worker",
        false,
        Options::default(),
    );

    // Echo both ways, then the upstream closes 4009 "superseded".
    let out = client(&url, "echo", &["--token", "t0k", "--protocol", PROTO]).await;
    let up = server.event("upgrade").await;
    assert_eq!(up["authorization"], "Bearer t0k", "token passed on: {up}");
    assert_eq!(up["subprotocols"], serde_json::json!([PROTO]));
    assert_eq!(up["path"], "/worker");
    assert_eq!(events(&out, "open")[0]["subprotocol"], PROTO, "{out:?}");
    let echoes = events(&out, "echo");
    assert_eq!(echoes.len(), 4, "{out:?}");
    for e in &echoes {
        assert_eq!(e["same"], true, "echo intact: {e}");
    }
    assert_eq!(echoes[2]["len"], 1 << 20);
    let closed = events(&out, "closed");
    assert_eq!(closed.len(), 1, "{out:?}");
    assert_eq!(closed[0]["code"], 4009);
    assert_eq!(closed[0]["reason"], "superseded");
    let Seen::Relayed(closes) = next_seen(&mut seen).await else {
        panic!("relayed")
    };
    assert!(
        closes.contains(&(
            "upstream->client",
            Some(CloseFrame {
                code: 4009,
                reason: "superseded".into()
            })
        )),
        "{closes:?}"
    );

    // The client closes 4005 "released": the upstream sees exactly that.
    let out = client(
        &url,
        "closeby:4005:released",
        &["--token", "t0k", "--protocol", PROTO],
    )
    .await;
    let s = server.event("closed").await; // the first connection's
    assert_eq!(s["code"], 4009, "{s}");
    let s = server.event("closed").await;
    assert_eq!(
        (s["code"].clone(), s["reason"].clone()),
        (4005.into(), "released".into())
    );
    let c = events(&out, "closed");
    assert_eq!(
        c[0]["code"], 4005,
        "the close is answered with its own code: {out:?}"
    );
    assert!(matches!(next_seen(&mut seen).await, Seen::Relayed(_)));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_refusals_reach_the_client_as_given() {
    let mut server = Server::start(&[]).await;
    let listener = ws_listener(&Options::default()).await;
    let url = listener.local();
    let (mut seen, task) = harness(
        listener,
        server.addr(),
        "/worker",
        false,
        Options::default(),
    );

    let out = client(&url, "echo", &["--protocol", PROTO]).await;
    let up = server.event("upgrade").await;
    assert_eq!(up["authorization"], Value::Null);
    assert_eq!(server.event("refused").await["status"], 401);
    let r = events(&out, "refused");
    assert_eq!(r.len(), 1, "{out:?}");
    assert_eq!(r[0]["status"], 401);
    assert_eq!(r[0]["headers"]["WWW-Authenticate"], "Bearer");
    assert_eq!(r[0]["body"], "bad or missing token\n");
    assert_eq!(next_seen(&mut seen).await, Seen::Refused(401));

    let out = client(
        &url,
        "echo",
        &["--token", "t0k", "--protocol", "agentfy.worker.v2"],
    )
    .await;
    let up = server.event("upgrade").await;
    assert_eq!(up["subprotocols"], serde_json::json!(["agentfy.worker.v2"]));
    assert_eq!(server.event("refused").await["status"], 426);
    let r = events(&out, "refused");
    assert_eq!(r.len(), 1, "{out:?}");
    assert_eq!(r[0]["status"], 426);
    assert_eq!(r[0]["headers"]["Sec-WebSocket-Protocol"], PROTO);
    assert_eq!(next_seen(&mut seen).await, Seen::Refused(426));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocat_through_the_harness() {
    let mut server = Server::start(&[]).await;
    let listener = ws_listener(&Options::default()).await;
    let url = listener.local();
    let (mut seen, task) = harness(
        listener,
        server.addr(),
        "/worker",
        false,
        Options::default(),
    );
    let mut child = Command::new(venv().join("bin/websocat"))
        .args([
            "--text",
            "--protocol",
            PROTO,
            "-H=Authorization: Bearer t0k",
        ])
        .arg(&url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("websocat starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let sent = [
        "first line",
        "second: {\"jsonrpc\":\"2.0\"}",
        "dritte Zeile ✓",
    ];
    for s in sent {
        stdin
            .write_all(format!("{s}\n").as_bytes())
            .await
            .expect("write");
        let got = timeout(T, lines.next_line())
            .await
            .expect("echo in time")
            .expect("read")
            .expect("a line");
        assert_eq!(got, s);
    }
    let up = server.event("upgrade").await;
    assert_eq!(up["authorization"], "Bearer t0k");
    assert_eq!(up["subprotocols"], serde_json::json!([PROTO]));
    drop(stdin);
    let status = timeout(T, child.wait())
        .await
        .expect("websocat exits after EOF")
        .expect("wait");
    assert!(status.success(), "websocat: {status}");
    // websocat closes without a status code; the upstream must see exactly that (1005).
    let closed = server.event("closed").await;
    assert_eq!(
        closed["code"], 1005,
        "websocat's close reached the upstream as sent: {closed}"
    );
    assert!(matches!(next_seen(&mut seen).await, Seen::Relayed(_)));
    task.abort();
}

/// An upstream that completes the handshake and then does not read until told:
/// it cannot answer a ping, so any pong the client gets is the proxy's own.
// tungstenite's handshake callback type fixes the (large) error type.
#[allow(clippy::result_large_err)]
async fn silent_upstream() -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Vec<Message>>,
) {
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = tcp.local_addr().expect("addr").to_string();
    let (go, wait) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let (s, _) = tcp.accept().await.expect("accept");
        let ws = tokio_tungstenite::accept_hdr_async(s, |req: &Request, mut resp: Response| {
            if let Some(p) = req.headers().get("Sec-WebSocket-Protocol") {
                resp.headers_mut()
                    .insert("Sec-WebSocket-Protocol", p.clone());
            }
            Ok(resp)
        });
        let mut ws = timeout(T, ws)
            .await
            .expect("handshake in time")
            .expect("handshake");
        let _ = timeout(T, wait).await;
        let mut got = Vec::new();
        // Reading on after the close frame flushes tungstenite's close reply.
        while let Ok(Some(Ok(m))) = timeout(Duration::from_secs(5), ws.next()).await {
            got.push(m);
        }
        got
    });
    (addr, go, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_is_answered_per_hop_and_not_relayed() {
    let (addr, go, upstream) = silent_upstream().await;
    let listener = ws_listener(&Options::default()).await;
    let url = listener.local();
    let (mut seen, task) = harness(listener, addr, "/", false, Options::default());
    let out = client(&url, "ping", &["--protocol", PROTO]).await;
    let pong = events(&out, "pong");
    assert_eq!(
        pong.len(),
        1,
        "pong from the proxy while the upstream is silent: {out:?}"
    );
    assert!(pong[0]["ms"].as_f64().expect("ms") < 3000.0);
    go.send(()).expect("upstream waiting");
    let got = timeout(T, upstream)
        .await
        .expect("upstream done")
        .expect("join");
    assert!(
        !got.iter()
            .any(|m| matches!(m, Message::Ping(p) if p.as_ref() == b"client-ping")),
        "the client's ping was relayed: {got:?}"
    );
    assert!(
        matches!(got.last(), Some(Message::Close(Some(f))) if u16::from(f.code) == 1000),
        "the client's close was relayed: {got:?}"
    );
    let s = next_seen(&mut seen).await;
    assert!(matches!(s, Seen::Relayed(_)), "{s:?}");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_pings_go_out_on_both_sides() {
    let fast = WsSettings {
        ping_interval: Some(Duration::from_millis(100)),
        ..WsSettings::default()
    };
    // Server side: a tokio-tungstenite client sees our pings while we read.
    let listener = WsListener::bind_with("127.0.0.1:0", "/", false, &Options::default(), fast)
        .await
        .expect("bind");
    let url = listener.local();
    let dial = tokio::spawn(async move {
        let (mut ws, _) = timeout(T, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect in time")
            .expect("connect");
        let m = timeout(T, ws.next()).await.expect("a frame in time");
        matches!(m, Some(Ok(Message::Ping(_))))
    });
    let pending = timeout(T, listener.accept())
        .await
        .expect("accept")
        .expect("ok");
    let mut conn = pending.accept(None).await.expect("101");
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = conn.next().await {} });
    assert!(
        timeout(T, dial).await.expect("done").expect("join"),
        "a ping arrived"
    );
    reader.abort();

    // Client side: a tokio-tungstenite server sees our pings while we read.
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = tcp.local_addr().expect("addr").to_string();
    let serve = tokio::spawn(async move {
        let (s, _) = tcp.accept().await.expect("accept");
        let mut ws = tokio_tungstenite::accept_async(s).await.expect("handshake");
        let m = timeout(T, ws.next()).await.expect("a frame in time");
        matches!(m, Some(Ok(Message::Ping(_))))
    });
    let (mut conn, chosen) = ws::connect_with(&addr, "/", false, &Options::default(), None, fast)
        .await
        .expect("connect");
    assert_eq!(chosen, None);
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = conn.next().await {} });
    assert!(
        timeout(T, serve).await.expect("done").expect("join"),
        "a ping arrived"
    );
    reader.abort();
}

/// Send raw bytes to a listener and read the HTTP answer.
async fn raw_request(addr: String, bytes: Vec<u8>) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    // The head may be refused before all of it is sent; that is what is tested.
    let _ = s.write_all(&bytes).await;
    let mut out = Vec::new();
    let _ = timeout(T, s.read_to_end(&mut out))
        .await
        .expect("answer in time");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_refuses_what_is_not_an_upgrade() {
    let listener = ws_listener(&Options::default()).await;
    let addr = port_of(&listener.local());
    let upgrade = |path: &str, version: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: {version}\r\n\r\n"
        )
    };
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (upgrade("/elsewhere", "13").into_bytes(), 404),
        (b"GET /worker HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 400),
        (upgrade("/worker", "8").into_bytes(), 426),
        (
            format!("GET /worker HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000)).into_bytes(),
            431,
        ),
    ];
    for (req, status) in cases {
        let answer = raw_request(addr.clone(), req).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{status}: {answer:?}"
        );
        if status == 426 {
            assert!(answer.contains("Sec-WebSocket-Version: 13\r\n"), "{answer}");
        }
        let Accepted::Rejected(r) = timeout(T, listener.accept_next())
            .await
            .expect("in time")
            .expect("listener alive")
        else {
            panic!("{status} should be a rejection");
        };
        assert_eq!(r.status, Some(status), "{r:?}");
    }
    // A client that sends nothing does not hold up the next one.
    let _idle = TcpStream::connect(&addr).await.expect("connect");
    let answer = tokio::spawn(raw_request(
        addr.clone(),
        upgrade("/worker", "13").into_bytes(),
    ));
    let pending = timeout(T, listener.accept())
        .await
        .expect("in time")
        .expect("ok");
    assert_eq!(pending.hello().path, "/worker");
    let conn = pending.accept(Some("p1")).await.expect("101");
    drop(conn);
    let answer = timeout(T, answer).await.expect("in time").expect("join");
    assert!(answer.starts_with("HTTP/1.1 101 "), "{answer}");
    assert!(
        answer.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains("Sec-WebSocket-Protocol: p1\r\n"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridging_offers_the_configured_subprotocols_and_maps_refusals() {
    let mut server = Server::start(&[]).await;
    let opts = Options {
        subprotocols: vec!["agentfy.worker.v2".into(), PROTO.into()],
        ..Options::default()
    };
    let r = ws::connect(&server.addr(), "/bridge", false, &opts, None).await;
    let Err(ConnectError::Refused(r)) = r else {
        panic!("401 expected, got {:?}", r.map(|x| x.1));
    };
    assert_eq!(r.status, 401);
    assert!(
        r.headers
            .contains(&("WWW-Authenticate".into(), "Bearer".into())),
        "{r}"
    );
    assert_eq!(r.body.as_ref(), b"bad or missing token\n");
    let up = server.event("upgrade").await;
    assert_eq!(up["authorization"], Value::Null);
    assert_eq!(up["path"], "/bridge");
    assert_eq!(
        up["subprotocols"],
        serde_json::json!(["agentfy.worker.v2", PROTO])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_answered_with_1009() {
    let small = WsSettings {
        max_message_bytes: 1024,
        ..WsSettings::default()
    };
    let listener = WsListener::bind_with("127.0.0.1:0", "/", false, &Options::default(), small)
        .await
        .expect("bind");
    let url = listener.local();
    let dial = tokio::spawn(async move {
        let (mut ws, _) = tokio_tungstenite::connect_async(url.into_client_request().expect("url"))
            .await
            .expect("connect");
        ws.send(Message::text("small")).await.expect("send");
        ws.send(Message::binary(vec![7u8; 4096]))
            .await
            .expect("send");
        loop {
            match timeout(T, ws.next()).await.expect("in time") {
                Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                other => panic!("no close frame: {other:?}"),
            }
        }
    });
    let pending = timeout(T, listener.accept())
        .await
        .expect("accept")
        .expect("ok");
    let mut conn = pending.accept(None).await.expect("101");
    let first = timeout(T, conn.next()).await.expect("in time");
    assert_eq!(
        first.map(|r| r.ok()),
        Some(Some(Msg::Text(Bytes::from("small"))))
    );
    let second = timeout(T, conn.next()).await.expect("in time");
    assert!(
        matches!(&second, Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData),
        "{second:?}"
    );
    let _ = timeout(T, conn.close()).await;
    assert_eq!(
        timeout(T, dial).await.expect("done").expect("join"),
        Some(1009)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_on_both_sides() {
    // Upstream: a wss listener of ours with a generated certificate, echoing.
    let up = WsListener::bind("127.0.0.1:0", "/up", true, &Options::default())
        .await
        .expect("wss bind");
    let pin = up.fingerprint().expect("fingerprint").to_string();
    let up_addr = port_of(&up.local());
    let echo = tokio::spawn(async move {
        let pending = timeout(T, up.accept()).await.expect("in time").expect("ok");
        let hello = pending.hello().clone();
        let mut conn = pending.accept(Some(PROTO)).await.expect("101");
        while let Some(Ok(m)) = conn.next().await {
            let end = matches!(m, Msg::Close(_));
            if conn.send(m).await.is_err() || end {
                break;
            }
        }
        hello
    });
    // Front: a wss listener; the Python client trusts its generated certificate.
    let front = WsListener::bind("127.0.0.1:0", "/worker", true, &Options::default())
        .await
        .expect("wss bind");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("front.pem");
    std::fs::write(&ca, front.cert_pem().expect("generated")).expect("write pem");
    let url = front.local();
    assert!(url.starts_with("wss://"), "{url}");
    let opts = Options {
        tls: TlsOpts {
            pin: Some(pin),
            ..TlsOpts::default()
        },
        ..Options::default()
    };
    let (mut seen, task) = harness(front, up_addr, "/up", true, opts);
    let out = client(
        &url,
        "closeby:4005:released",
        &[
            "--token",
            "t0k",
            "--protocol",
            PROTO,
            "--ca",
            ca.to_str().expect("utf-8 path"),
        ],
    )
    .await;
    assert_eq!(events(&out, "open")[0]["subprotocol"], PROTO, "{out:?}");
    assert_eq!(events(&out, "closed")[0]["code"], 4005, "{out:?}");
    let hello = timeout(T, echo).await.expect("done").expect("join");
    assert_eq!(hello.authorization.as_deref(), Some("Bearer t0k"));
    assert_eq!(hello.subprotocols, [PROTO]);
    let s = next_seen(&mut seen).await;
    assert!(matches!(s, Seen::Relayed(_)), "{s:?}");
    task.abort();

    // A wrong pin is a TLS failure, not a refusal.
    let other = WsListener::bind("127.0.0.1:0", "/", true, &Options::default())
        .await
        .expect("wss bind");
    let bad = Options {
        tls: TlsOpts {
            pin: Some("00".repeat(32)),
            ..TlsOpts::default()
        },
        ..Options::default()
    };
    let r = ws::connect(&port_of(&other.local()), "/", true, &bad, None).await;
    assert!(
        matches!(&r, Err(ConnectError::Io(e)) if e.to_string().contains("does not match --pin")),
        "{:?}",
        r.err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sdk_client_and_server_through_the_harness() {
    let mut server = Command::new(python())
        .arg(peer("ws_mcp_server.py"))
        .arg("0")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("ws_mcp_server.py starts");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let mut next = async || -> Value {
        let line = timeout(T, lines.next_line())
            .await
            .expect("server line in time")
            .expect("read")
            .expect("server alive (mcp missing? run scripts/peers-venv.sh)");
        serde_json::from_str(&line).expect("json line")
    };
    let port = next().await["port"].as_u64().expect("port");
    let listener = WsListener::bind("127.0.0.1:0", "/mcp", false, &Options::default())
        .await
        .expect("bind");
    let url = listener.local();
    let (mut seen, task) = harness(
        listener,
        format!("127.0.0.1:{port}"),
        "/mcp",
        false,
        Options::default(),
    );
    let out = timeout(
        T,
        Command::new(python())
            .arg(peer("ws_mcp_client.py"))
            .arg(&url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("mcp client in time")
    .expect("mcp client runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines_out: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(
        events(&lines_out, "initialized")[0]["server"],
        "ws-mcp-peer"
    );
    assert_eq!(
        events(&lines_out, "tools")[0]["names"],
        serde_json::json!(["echo"])
    );
    let r = events(&lines_out, "result")[0];
    assert_eq!(r["text"], r["sent"], "{r}");
    assert_eq!(r["isError"], false);
    let call = next().await;
    assert_eq!(call["event"], "call");
    assert_eq!(call["arguments"]["text"], r["sent"]);
    let s = next_seen(&mut seen).await;
    assert!(matches!(s, Seen::Relayed(_)), "{s:?}");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_relays_the_toolchannel_over_ws() {
    let mut server = Server::start(&[]).await;
    let upstream = format!("ws://{}/worker", server.addr());
    let mut proxy = harness::run(&[
        "--contract",
        "toolchannel",
        "--listen",
        "ws://127.0.0.1:0/worker",
        "--upstream",
        &upstream,
    ]);
    let url = proxy.url();
    let out = client(&url, "echo", &["--token", "t0k", "--protocol", PROTO]).await;
    assert_eq!(events(&out, "open")[0]["subprotocol"], PROTO, "{out:?}");
    assert!(
        events(&out, "echo").iter().all(|e| e["same"] == true),
        "{out:?}"
    );
    assert_eq!(events(&out, "echo").len(), 4);
    let closed = events(&out, "closed");
    assert_eq!(
        (closed[0]["code"].clone(), closed[0]["reason"].clone()),
        (4009.into(), "superseded".into()),
        "{out:?}"
    );
    let up = server.event("upgrade").await;
    assert_eq!(up["authorization"], "Bearer t0k");
    assert_eq!(up["subprotocols"], serde_json::json!([PROTO]));
    // The live view saw the first text both ways on the ws channel.
    for dir in ["up", "down"] {
        proxy
            .until(&format!("the first text going {dir}"), |v| {
                v["channel"] == "ws" && v["dir"] == dir && v["size"] == 23
            })
            .await;
    }

    let out = client(&url, "echo", &["--protocol", PROTO]).await;
    assert_eq!(events(&out, "refused")[0]["status"], 401, "{out:?}");
    assert_eq!(
        events(&out, "refused")[0]["headers"]["WWW-Authenticate"],
        "Bearer"
    );
    let out = client(
        &url,
        "echo",
        &["--token", "t0k", "--protocol", "agentfy.worker.v2"],
    )
    .await;
    let r = events(&out, "refused");
    assert_eq!(r[0]["status"], 426, "{out:?}");
    assert_eq!(r[0]["headers"]["Sec-WebSocket-Protocol"], PROTO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_relays_the_mcp_sdk_websocket_transport() {
    let mut server = Command::new(python())
        .arg(peer("ws_mcp_server.py"))
        .arg("0")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("ws_mcp_server.py starts");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let line = timeout(T, lines.next_line())
        .await
        .expect("server line in time")
        .expect("read")
        .expect("server alive (mcp missing? run scripts/peers-venv.sh)");
    let port = serde_json::from_str::<Value>(&line).expect("json")["port"]
        .as_u64()
        .expect("port");
    let upstream = format!("ws://127.0.0.1:{port}/mcp");
    // The MCP client is the toolchannel's host (the worker is the MCP server).
    let mut proxy = harness::run(&[
        "--contract",
        "toolchannel",
        "--client",
        "host",
        "--listen",
        "ws://127.0.0.1:0/mcp",
        "--upstream",
        &upstream,
    ]);
    let url = proxy.url();
    let out = timeout(
        T,
        Command::new(python())
            .arg(peer("ws_mcp_client.py"))
            .arg(&url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("mcp client in time")
    .expect("mcp client runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(
        events(&got, "tools")[0]["names"],
        serde_json::json!(["echo"])
    );
    let r = events(&got, "result")[0];
    assert_eq!(r["text"], r["sent"], "{r}");
    for method in ["initialize", "tools/list", "tools/call"] {
        proxy
            .until(method, |v| v["channel"] == "ws" && v["method"] == method)
            .await;
    }
}
