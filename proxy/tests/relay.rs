//! The proxy binary between a real client and a real server over unix sockets:
//! bytes arrive intact both ways, and the JSON live view shows each message
//! decoded, validated, matched to its request, or flagged.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_proxy(contract: &str, listen: &Path, upstream: &Path) -> Proxy {
    start_proxy_with(contract, listen, upstream, &[])
}

fn start_proxy_with(contract: &str, listen: &Path, upstream: &Path, extra: &[&str]) -> Proxy {
    let child = Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
        .args(["run", "--contract", contract, "--log", "json"])
        .args(extra)
        .arg("--listen")
        .arg(format!("unix:{}", listen.display()))
        .arg("--upstream")
        .arg(format!("unix:{}", upstream.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("proxy starts");
    Proxy(child)
}

async fn wait_for(path: &Path) {
    for _ in 0..200 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", path.display());
}

/// rukh's first exchange, from the contract's own examples: nothing may come before it.
fn rukh_initialize() -> (String, String) {
    let c = contract::builtin("rukh").expect("rukh");
    let ex = &c.methods["rukh.initialize"].examples;
    let part = |p: contract::model::Part| {
        let e = ex.iter().find(|e| e.part == p).expect("example");
        serde_json::to_string(&e.message).expect("json")
    };
    (
        part(contract::model::Part::Call),
        part(contract::model::Part::Result),
    )
}

fn frame(body: &str) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Read `n` JSON lines from the proxy's stdout, with a deadline.
fn read_events(proxy: &mut Proxy, n: usize) -> Vec<Value> {
    let stdout = proxy.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    while out.len() < n {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("an event line in time");
        let v: Value = serde_json::from_str(&line).expect("json line");
        // Connection notes share the stream; only inspection events count here.
        if v.get("verdict").is_some() {
            out.push(v);
        }
    }
    out
}

#[tokio::test]
async fn rukh_request_and_response_through_the_proxy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("proxy/ext.sock");
    let upstream = dir.path().join("ext.sock");
    let server = UnixListener::bind(&upstream).expect("bind upstream");
    let mut proxy = start_proxy("rukh", &listen, &upstream);
    wait_for(&listen).await;

    let server_task = tokio::spawn(async move {
        let (mut s, _) = server.accept().await.expect("accept");
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.expect("len");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).await.expect("body");
        s.write_all(&frame(&rukh_initialize().1))
            .await
            .expect("reply");
        body
    });

    let mut c = UnixStream::connect(&listen)
        .await
        .expect("connect to proxy");
    let (init, init_result) = rukh_initialize();
    let req = init.as_str();
    c.write_all(&frame(req)).await.expect("send");
    let mut len = [0u8; 4];
    c.read_exact(&mut len).await.expect("reply len");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    c.read_exact(&mut body).await.expect("reply body");
    assert_eq!(body, init_result.as_bytes());
    assert_eq!(
        server_task.await.expect("server"),
        req.as_bytes(),
        "upstream got the exact bytes"
    );

    // A duplicate key is forwarded (observe mode) but flagged with rukh's parse code.
    c.write_all(&frame(
        r#"{"jsonrpc":"2.0","id":"c:2","id":"c:3","method":"rukh.close"}"#,
    ))
    .await
    .expect("send bad");

    let ev = read_events(&mut proxy, 3);
    assert_eq!(ev[0]["method"], "rukh.initialize");
    assert_eq!(ev[0]["from"], "core");
    assert_eq!(ev[0]["verdict"]["verdict"], "ok", "{}", ev[0]);
    assert_eq!(ev[1]["kind"], "response");
    assert_eq!(
        ev[1]["method"], "rukh.initialize",
        "the response is matched to its request"
    );
    assert!(ev[1]["latency"].as_f64().is_some(), "latency shown");
    assert_eq!(ev[2]["verdict"]["verdict"], "violation");
    assert_eq!(ev[2]["verdict"]["class"], "parse");
    assert_eq!(ev[2]["verdict"]["code"], -32700);
}

#[test]
fn bad_endpoint_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
        .args([
            "run",
            "--contract",
            "rukh",
            "--listen",
            "bogus://x:1",
            "--upstream",
            "unix:/tmp/x",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad endpoint \"bogus://x:1\""), "{err}");
}

/// socat as the real upstream: an echo server. The echoed request comes back
/// from the extension side, so the live view must flag it as travelling the
/// wrong way while the bytes still arrive intact (observe mode).
#[tokio::test]
async fn socat_echo_upstream_is_relayed_and_the_echo_is_flagged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("p.sock");
    let upstream = dir.path().join("echo.sock");
    let mut socat = Command::new("socat")
        .arg(format!("UNIX-LISTEN:{},fork", upstream.display()))
        .arg("EXEC:cat")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("socat is installed (scripts/test.sh installs it)");
    wait_for(&upstream).await;
    // Only violations are shown: the clean request is filtered out of the view.
    let mut proxy = start_proxy_with(
        "rukh",
        &listen,
        &upstream,
        &["--filter", "verdict=violation"],
    );
    wait_for(&listen).await;

    let mut c = UnixStream::connect(&listen).await.expect("connect");
    let req = frame(&rukh_initialize().0);
    c.write_all(&req).await.expect("send");
    let mut back = vec![0u8; req.len()];
    tokio::time::timeout(Duration::from_secs(10), c.read_exact(&mut back))
        .await
        .expect("echo in time")
        .expect("echo");
    assert_eq!(back, req, "socat echoed the exact bytes through the proxy");

    let ev = read_events(&mut proxy, 1);
    let _ = socat.kill();
    let _ = socat.wait();
    assert_eq!(
        ev[0]["from"], "extension",
        "the clean request was filtered out: {}",
        ev[0]
    );
    assert_eq!(ev[0]["verdict"]["class"], "wrong-direction", "{}", ev[0]);
}

/// xsession's pattern: one NDJSON message per connection, ended by a
/// half-close. The half-close must travel through the proxy so the inbox sees
/// EOF, and the live view must show the frame decoded.
#[tokio::test]
async fn xsession_one_message_with_half_close_survives_the_proxy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("inbox-proxy.sock");
    let upstream = dir.path().join("inbox.sock");
    let inbox = UnixListener::bind(&upstream).expect("bind inbox");
    let mut proxy = start_proxy("xsession", &listen, &upstream);
    wait_for(&listen).await;

    let c = contract::builtin("xsession").expect("contract");
    let line = serde_json::to_string(&c.methods["user"].examples[0].message).expect("ser") + "\n";
    let reader = tokio::spawn(async move {
        let (mut s, _) = inbox.accept().await.expect("accept");
        let mut all = Vec::new();
        // Reads to EOF: only returns if the sender's half-close came through.
        s.read_to_end(&mut all).await.expect("read to eof");
        all
    });
    let mut sender = UnixStream::connect(&listen).await.expect("connect");
    sender.write_all(line.as_bytes()).await.expect("send");
    sender.shutdown().await.expect("half-close");
    let got = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("EOF in time")
        .expect("reader");
    assert_eq!(got, line.as_bytes());

    let ev = read_events(&mut proxy, 1);
    assert_eq!(ev[0]["method"], "user");
    assert_eq!(ev[0]["from"], "sender");
    assert_eq!(ev[0]["verdict"]["verdict"], "ok", "{}", ev[0]);
}

/// TCP on both sides, with the proxy on an ephemeral loopback port it reports.
#[tokio::test]
async fn tcp_listen_and_upstream() {
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let up_port = upstream.local_addr().expect("addr").port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
        .args([
            "run",
            "--contract",
            "rukh",
            "--log",
            "json",
            "--listen",
            "tcp:0",
        ])
        .arg("--upstream")
        .arg(format!("tcp:127.0.0.1:{up_port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("proxy starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut proxy = Proxy(child);
    let mut first = String::new();
    BufReader::new(stderr)
        .read_line(&mut first)
        .expect("banner");
    let listen = first
        .split("listening on tcp:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("banner names the bound address")
        .to_string();
    assert!(
        listen.starts_with("127.0.0.1:"),
        "loopback by default: {listen}"
    );

    let server = tokio::spawn(async move {
        let (mut s, _) = upstream.accept().await.expect("accept");
        let mut buf = vec![0u8; 4];
        s.read_exact(&mut buf).await.expect("len");
        let mut body = vec![0u8; u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize];
        s.read_exact(&mut body).await.expect("body");
        body
    });
    let mut c = tokio::net::TcpStream::connect(&listen)
        .await
        .expect("connect");
    let req = rukh_initialize().0;
    c.write_all(&frame(&req)).await.expect("send");
    assert_eq!(server.await.expect("server"), req.as_bytes());
    let ev = read_events(&mut proxy, 1);
    assert_eq!(ev[0]["method"], "rukh.initialize");
    assert_eq!(ev[0]["verdict"]["verdict"], "ok");
}
