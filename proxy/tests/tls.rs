//! `tls://` endpoints over real TCP sockets on 127.0.0.1: the listener and client
//! against each other, against Python's `ssl` (OpenSSL, a third-party TLS stack) in
//! both roles, and the proxy binary relaying tls:// to unix and unix to tls://.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use contract_transport::endpoint::tls::TlsOpts;
use contract_transport::endpoint::tls_tcp::{self, Accepted, TlsListener};
use contract_transport::endpoint::{EndpointError, Options};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

mod harness;
use harness::{frame, make_pki, read_all, within};

const ALPN: &[u8] = b"test/1";

fn addr_of(l: &TlsListener) -> String {
    l.local()
        .strip_prefix("tls://")
        .expect("tls:// prefix")
        .to_string()
}

#[tokio::test]
async fn pinned_self_signed_echoes_a_mebibyte_and_half_closes() {
    let listener = TlsListener::bind("127.0.0.1:0", &opts(TlsOpts::default()))
        .await
        .expect("bind");
    let addr = addr_of(&listener);
    assert!(!addr.ends_with(":0"), "real port: {addr}");
    let fp = listener.fingerprint().to_string();
    const LEN: usize = 1 << 20;
    let payload: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let expect = payload.clone();
    let server = tokio::spawn(async move {
        let Accepted::Conn(mut io, peer) =
            within("accept", listener.accept()).await.expect("accept")
        else {
            panic!("the handshake failed");
        };
        assert!(peer.starts_with("127.0.0.1:"), "{peer}");
        let got = within("server read", read_all(&mut io, LEN as u64)).await;
        assert!(got == expect, "server got {} bytes", got.len());
        within("server write", io.write_all(&got))
            .await
            .expect("echo");
        io.shutdown().await.expect("close_notify");
    });
    let mut io = within("connect", tls_tcp::connect(&addr, &pinned(&fp)))
        .await
        .expect("connect with the pin");
    within("client write", io.write_all(&payload))
        .await
        .expect("write");
    io.shutdown().await.expect("half-close");
    let back = within("client read", read_all(&mut io, LEN as u64)).await;
    within("server done", server).await.expect("server task");
    assert!(back == payload, "echo differs ({} bytes)", back.len());
}

#[tokio::test]
async fn wrong_pin_and_another_alpn_fail_and_the_listener_says_why() {
    let listener = TlsListener::bind("127.0.0.1:0", &opts(TlsOpts::default()))
        .await
        .expect("bind");
    let addr = addr_of(&listener);
    let wrong = "00".repeat(32);
    let refused = within("connect", tls_tcp::connect(&addr, &pinned(&wrong))).await;
    assert!(
        matches!(refused, Err(EndpointError::Connect { .. })),
        "a wrong pin is refused: {:?}",
        refused.err()
    );
    let Accepted::Rejected(peer, why) = within("accept", listener.accept()).await.expect("accept")
    else {
        panic!("the wrong pin's connection reached accept as a connection");
    };
    assert!(peer.starts_with("127.0.0.1:"), "{peer}");
    assert!(why.contains("TLS handshake failed"), "{why}");

    let mut other = pinned(listener.fingerprint());
    other.alpn = b"other/1".to_vec();
    let refused = within("connect", tls_tcp::connect(&addr, &other)).await;
    assert!(refused.is_err(), "another ALPN id is refused");
    let Accepted::Rejected(_, why) = within("accept", listener.accept()).await.expect("accept")
    else {
        panic!("the other ALPN's connection reached accept as a connection");
    };
    assert!(why.contains("none of them test/1"), "{why}");

    let no_trust = opts(TlsOpts::default());
    assert!(
        tls_tcp::connect(&addr, &no_trust).await.is_err(),
        "a client must say how it trusts the server"
    );
}

/// Python's `ssl` module (OpenSSL). `client HOST PORT CAFILE ALPN|-` sends stdin's bytes
/// (one frame), reads one frame back, closes (without `close_notify`, as Python's `close`
/// does), and prints the ALPN id chosen and the frame, hex. `server CERT KEY ALPN` prints
/// `PORT n`, then answers one client's JSON-RPC request with an empty result.
const PY_SSL: &str = r#"
import json, socket, ssl, sys
def exactly(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b: raise SystemExit("closed after %d of %d bytes" % (len(out), n))
        out += b
    return out
def frame(s):
    head = exactly(s, 4)
    return head + exactly(s, int.from_bytes(head, "big"))
if sys.argv[1] == "client":
    host, port, cafile, alpn = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    ctx = ssl.create_default_context(cafile=cafile)
    if alpn != "-": ctx.set_alpn_protocols([alpn])
    s = ctx.wrap_socket(socket.create_connection((host, port)), server_hostname=host)
    print(s.selected_alpn_protocol() or "-")
    s.sendall(sys.stdin.buffer.read())
    print(frame(s).hex())
    s.close()
else:
    cert, key, alpn = sys.argv[2], sys.argv[3], sys.argv[4]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols([alpn])
    l = socket.create_server(("127.0.0.1", 0))
    print("PORT", l.getsockname()[1], flush=True)
    c, _ = l.accept()
    s = ctx.wrap_socket(c, server_side=True)
    req = json.loads(frame(s)[4:])
    body = json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {}}, separators=(",", ":")).encode()
    s.sendall(len(body).to_bytes(4, "big") + body)
    s.close()
"#;

async fn py_client(addr: &str, cafile: &Path, alpn: &str, send: &[u8]) -> (String, Vec<u8>) {
    let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", PY_SSL, "client", host, port])
        .arg(cafile)
        .arg(alpn)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(send).await.expect("to python");
    drop(stdin);
    let out = within("python client", child.wait_with_output())
        .await
        .expect("python client ends");
    assert!(out.status.success(), "python client: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines = text.lines();
    let chosen = lines.next().unwrap_or_default().to_string();
    let hex = lines.next().unwrap_or_default();
    let bytes = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    (chosen, bytes)
}

#[tokio::test]
async fn openssl_clients_with_and_without_alpn_are_served() {
    let listener = TlsListener::bind("127.0.0.1:0", &opts(TlsOpts::default()))
        .await
        .expect("bind");
    let addr = addr_of(&listener);
    let dir = tempfile::tempdir().expect("tempdir");
    let cafile = dir.path().join("server.pem");
    std::fs::write(&cafile, listener.cert_pem().expect("pem")).expect("write pem");
    let alpn = String::from_utf8(ALPN.to_vec()).expect("utf-8");
    for offered in [alpn.as_str(), "-"] {
        let server = async {
            let Accepted::Conn(mut io, _) =
                within("accept", listener.accept()).await.expect("accept")
            else {
                panic!("OpenSSL's handshake (ALPN {offered}) was refused");
            };
            let got = within("read", harness::read_frame(&mut io)).await;
            io.write_all(&frame(&got)).await.expect("echo");
            // Python closes without close_notify: that reads as the end, not an error.
            assert!(within("end", read_all(&mut io, 0)).await.is_empty());
        };
        let sent = frame(r#"{"hello":1}"#);
        let ((chosen, back), ()) = tokio::join!(py_client(&addr, &cafile, offered, &sent), server);
        assert_eq!(chosen, offered, "the ALPN id OpenSSL saw chosen");
        assert_eq!(back, sent, "echoed through OpenSSL");
    }
}

#[tokio::test]
async fn proxy_binary_relays_openssl_over_tls_to_unix_and_unix_to_an_openssl_server() {
    let pki = make_pki("contract-proxy tls test CA");
    let (cert, key) = (
        pki.cert.display().to_string(),
        pki.key.display().to_string(),
    );
    let alpn = harness::contract_alpn("rukh");

    // Proxy B: unix in, tls:// out to an OpenSSL server that checks the ALPN id.
    let mut server = tokio::process::Command::new("python3")
        .args(["-c", PY_SSL, "server", &cert, &key, &alpn])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    let stdout = server.stdout.take().expect("stdout");
    within("server port", BufReader::new(stdout).read_line(&mut line))
        .await
        .expect("PORT line");
    let port = line
        .trim()
        .strip_prefix("PORT ")
        .expect("PORT n")
        .to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let b_sock = dir.path().join("b.sock");
    let ca = pki.ca.display().to_string();
    let b_up = format!("tls://127.0.0.1:{port}");
    let b_listen = format!("unix:{}", b_sock.display());
    let _b = harness::run(&[
        "--contract",
        "rukh",
        "--ca",
        &ca,
        "--listen",
        &b_listen,
        "--upstream",
        &b_up,
    ]);
    // Proxy A: tls:// in (an OpenSSL client), unix out to proxy B.
    let a = harness::run(&[
        "--contract",
        "rukh",
        "--cert",
        &cert,
        "--key",
        &key,
        "--listen",
        "tls://127.0.0.1:0",
        "--upstream",
        &b_listen,
    ]);
    let a_addr = a.url().strip_prefix("tls://").expect("tls://").to_string();
    within("proxy B listens", async {
        while !harness::ready(&b_sock) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    let request = r#"{"jsonrpc":"2.0","id":"c:1","method":"rukh.close","params":{}}"#;
    let (chosen, back) = py_client(&a_addr, &pki.ca, &alpn, &frame(request)).await;
    assert_eq!(chosen, alpn, "proxy A chose the contract's ALPN id");
    assert_eq!(
        back,
        frame(r#"{"jsonrpc":"2.0","id":"c:1","result":{}}"#),
        "OpenSSL -> A (tls) -> B (unix) -> OpenSSL server (tls) and back"
    );
}

fn opts(tls: TlsOpts) -> Options {
    harness::secure_opts(ALPN, tls)
}

fn pinned(pin: &str) -> Options {
    harness::pinned_opts(ALPN, pin)
}
