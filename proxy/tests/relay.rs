//! The proxy binary between a real client and a real server over unix sockets:
//! bytes arrive intact both ways, and the JSON live view shows each message
//! decoded, validated, matched to its request, or flagged.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

mod harness;
use harness::{Proxy, ep, frame, read_frame, rukh_initialize, wait_for};

fn start_proxy(contract: &str, listen: &Path, upstream: &Path) -> Proxy {
    start_proxy_with(contract, listen, upstream, &[])
}

fn start_proxy_with(contract: &str, listen: &Path, upstream: &Path, extra: &[&str]) -> Proxy {
    let mut args = vec!["--contract", contract];
    args.extend_from_slice(extra);
    let (listen, upstream) = (ep(listen), ep(upstream));
    args.extend(["--listen", &listen, "--upstream", &upstream]);
    harness::run(&args)
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
        let body = read_frame(&mut s).await;
        s.write_all(&frame(rukh_initialize().1))
            .await
            .expect("reply");
        body
    });

    let mut c = UnixStream::connect(&listen)
        .await
        .expect("connect to proxy");
    let (init, init_result) = rukh_initialize();
    c.write_all(&frame(&init)).await.expect("send");
    assert_eq!(read_frame(&mut c).await, init_result);
    assert_eq!(
        server_task.await.expect("server"),
        init,
        "upstream got the exact bytes"
    );

    // A duplicate key is forwarded (observe mode) but flagged with rukh's parse code.
    c.write_all(&frame(
        r#"{"jsonrpc":"2.0","id":"c:2","id":"c:3","method":"rukh.close"}"#,
    ))
    .await
    .expect("send bad");

    let ev = proxy.events(3).await;
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

    let ev = proxy.events(1).await;
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

    let ev = proxy.events(1).await;
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
    let upstream_ep = format!("tcp:127.0.0.1:{up_port}");
    let mut proxy = harness::run(&[
        "--contract",
        "rukh",
        "--listen",
        "tcp:0",
        "--upstream",
        &upstream_ep,
    ]);
    let listen = proxy
        .url()
        .strip_prefix("tcp:")
        .expect("banner names the bound tcp address")
        .to_string();
    assert!(
        listen.starts_with("127.0.0.1:"),
        "loopback by default: {listen}"
    );

    let server = tokio::spawn(async move {
        let (mut s, _) = upstream.accept().await.expect("accept");
        read_frame(&mut s).await
    });
    let mut c = tokio::net::TcpStream::connect(&listen)
        .await
        .expect("connect");
    let req = rukh_initialize().0;
    c.write_all(&frame(&req)).await.expect("send");
    assert_eq!(server.await.expect("server"), req);
    let ev = proxy.events(1).await;
    assert_eq!(ev[0]["method"], "rukh.initialize");
    assert_eq!(ev[0]["verdict"]["verdict"], "ok");
}
