//! Bridging and plain peers through the proxy binary: a WebSocket client
//! relayed to an NDJSON unix upstream and back, and a plain Python client
//! speaking rukh's length-prefixed framing over unix and tcp.

use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

mod harness;
use harness::{DEADLINE, frame, read_frame, rukh_initialize};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The first example call of toolchannel's `method`.
fn example(method: &str) -> Value {
    let c = contract::builtin("toolchannel").expect("toolchannel");
    c.methods[method].examples[0].message.clone()
}

/// toolchannel's WebSocket channel bridged to a unix socket: each text message
/// becomes one NDJSON line upstream and each line comes back as one text message,
/// with the contract's subprotocol negotiated by the proxy.
#[tokio::test]
async fn websocket_messages_bridge_to_ndjson_lines_and_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = dir.path().join("host.sock");
    let host = UnixListener::bind(&upstream).expect("bind");
    let port = free_port();
    let mut p = harness::run(&[
        "--contract",
        "toolchannel",
        "--listen",
        &format!("ws://127.0.0.1:{port}/worker"),
        "--upstream",
        &format!("unix:{}", upstream.display()),
    ]);
    p.url(); // listening
    let server = tokio::spawn(async move {
        let (s, _) = host.accept().await.expect("accept");
        let (r, mut w) = tokio::io::split(s);
        let mut lines = tokio::io::BufReader::new(r).lines();
        let line = lines.next_line().await.expect("read").expect("a line");
        // The host's first word on a new session: initialize (hostSession: handshaking).
        let init = example("initialize");
        w.write_all(format!("{init}\n").as_bytes())
            .await
            .expect("initialize");
        line
    });
    let mut req = format!("ws://127.0.0.1:{port}/worker")
        .into_client_request()
        .expect("request");
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "agentfy.worker.v1".parse().expect("header"),
    );
    let (mut ws, resp) = tokio::time::timeout(DEADLINE, async {
        loop {
            match tokio_tungstenite::connect_async(req.clone()).await {
                Ok(c) => return c,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("proxy accepts in time");
    assert_eq!(
        resp.headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|v| v.to_str().ok()),
        Some("agentfy.worker.v1"),
        "the proxy negotiated the contract's subprotocol"
    );
    // A log line the worker may send at any point of the session.
    let log = example("notifications/message").to_string();
    ws.send(Message::text(log.clone())).await.expect("send");
    let back = tokio::time::timeout(DEADLINE, ws.next())
        .await
        .expect("reply in time")
        .expect("open")
        .expect("message");
    let back: Value = serde_json::from_str(back.to_text().expect("text")).expect("json");
    assert_eq!(back, example("initialize"), "one line became one message");
    assert_eq!(
        server.await.expect("server"),
        log,
        "one message became one line, unchanged"
    );
    let ev = p.events(2).await;
    assert_eq!(ev[0]["method"], "notifications/message");
    assert_eq!(ev[1]["method"], "initialize");
    assert!(ev.iter().all(|e| e["verdict"]["verdict"] == "ok"), "{ev:?}");
}

const PY_CLIENT: &str = r#"
import json, socket, struct, sys
kind, addr, body = sys.argv[1], sys.argv[2], sys.argv[3].encode()
if kind == "unix":
    s = socket.socket(socket.AF_UNIX)
    s.connect(addr)
else:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
s.settimeout(10)
s.sendall(struct.pack(">I", len(body)) + body)
n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
print(s.recv(n, socket.MSG_WAITALL).decode())
"#;

/// A rukh extension that answers initialize with the contract's example result.
async fn answer_initialize<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
) -> Vec<u8> {
    let body = read_frame(&mut s).await;
    let (_, result) = rukh_initialize();
    s.write_all(&frame(result)).await.expect("reply");
    body
}

fn python(kind: &str, addr: &str, body: &str) -> std::process::Child {
    Command::new("python3")
        .args(["-c", PY_CLIENT, kind, addr, body])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3")
}

async fn python_output(child: std::process::Child) -> String {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("python ran");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A plain Python client (struct-packed length prefix, no SDK) through the
/// proxy, over a unix socket and over tcp, to a real rukh extension stand-in.
#[tokio::test]
async fn a_plain_python_client_over_unix_and_tcp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (init, result) = rukh_initialize();
    let (init, result) = (
        String::from_utf8(init).expect("utf-8"),
        String::from_utf8(result).expect("utf-8"),
    );

    let listen = dir.path().join("p.sock");
    let upstream = dir.path().join("ext.sock");
    let ext = UnixListener::bind(&upstream).expect("bind");
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--listen",
        &format!("unix:{}", listen.display()),
        "--upstream",
        &format!("unix:{}", upstream.display()),
    ]);
    p.url(); // listening
    let client = python("unix", listen.to_str().expect("utf-8"), &init);
    let (s, _) = tokio::time::timeout(DEADLINE, ext.accept())
        .await
        .expect("in time")
        .expect("accept");
    assert_eq!(answer_initialize(s).await, init.as_bytes());
    assert_eq!(python_output(client).await, result);
    let ev = p.events(2).await;
    assert_eq!(
        (ev[0]["method"].as_str(), ev[1]["kind"].as_str()),
        (Some("rukh.initialize"), Some("response"))
    );

    let ext = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let up = ext.local_addr().expect("addr");
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--listen",
        "tcp:0",
        "--upstream",
        &format!("tcp:{up}"),
    ]);
    let local = p.url();
    let addr = local.strip_prefix("tcp:").expect("tcp banner").to_string();
    let client = python("tcp", &addr, &init);
    let (s, _) = tokio::time::timeout(DEADLINE, ext.accept())
        .await
        .expect("in time")
        .expect("accept");
    assert_eq!(answer_initialize(s).await, init.as_bytes());
    assert_eq!(python_output(client).await, result);
    let ev = p.events(2).await;
    assert!(ev.iter().all(|e| e["verdict"]["verdict"] == "ok"), "{ev:?}");
}
