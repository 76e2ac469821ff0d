//! QUIC and TLS endpoints over real UDP sockets on 127.0.0.1: the proxy's own
//! listener and client against each other, and against aioquic (a third-party
//! QUIC stack) in both roles.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use contract_transport::endpoint::quic::{self, QuicListener};
use contract_transport::endpoint::tls::{TlsError, TlsOpts};
use contract_transport::endpoint::{EndpointError, Options};
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const ALPN: &[u8] = b"test/1";
mod harness;
use harness::{frame, make_pki, read_all, within};

/// SHA-256, formatted as the listener prints it, computed here independently.
fn sha256_colon_hex(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

async fn wait_failed(l: &QuicListener, at_least: u64) {
    within("listener counts the failed handshake", async {
        while l.failed_handshakes() < at_least {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn pinned_self_signed_echoes_a_mebibyte_and_half_closes() {
    let listener = QuicListener::bind("127.0.0.1:0", &opts(TlsOpts::default())).expect("bind");
    let local = listener.local();
    assert!(local.starts_with("quic://127.0.0.1:"), "{local}");
    assert!(!local.ends_with(":0"), "real port: {local}");
    let fp = listener.fingerprint().to_string();
    let pem = listener.cert_pem().expect("generated cert has a PEM");
    let der = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes());
    assert_eq!(sha256_colon_hex(&der.expect("pem parses")), fp);

    const LEN: usize = 1 << 20;
    let payload: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let expect = payload.clone();
    let server = tokio::spawn(async move {
        let (mut io, peer) = within("accept", listener.accept()).await.expect("accept");
        assert!(peer.starts_with("127.0.0.1:"), "{peer}");
        // EOF here while the client still waits for the echo: a half-close, not a close.
        let got = within("server read", read_all(&mut io, LEN as u64)).await;
        assert!(
            got == expect,
            "server got {} bytes, not the payload",
            got.len()
        );
        within("server write", io.write_all(&got))
            .await
            .expect("echo");
        io.shutdown().await.expect("finish");
        io.shutdown().await.expect("a second shutdown is harmless");
        // Dropped at once: the linger must still deliver everything.
    });
    // Lower case without colons is the same pin.
    let client_pin = fp.replace(':', "").to_lowercase();
    let mut io = within("connect", quic::connect(&local[7..], &pinned(&client_pin)))
        .await
        .expect("connect with the pin");
    within("client write", io.write_all(&payload))
        .await
        .expect("write");
    io.shutdown().await.expect("half-close");
    within("server done", server).await.expect("server task");
    // The server's connection has been dropped by now; data it wrote must still be readable.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let back = within("client read", read_all(&mut io, LEN as u64)).await;
    assert_eq!(back.len(), LEN);
    assert!(back == payload, "echo differs");
}

#[tokio::test]
async fn wrong_pin_missing_trust_and_alpn_mismatch_are_refused() {
    let listener = QuicListener::bind("127.0.0.1:0", &opts(TlsOpts::default())).expect("bind");
    let addr = listener.local()[7..].to_string();

    let wrong = "00".repeat(32);
    let e = within("connect", quic::connect(&addr, &pinned(&wrong)))
        .await
        .err()
        .expect("wrong pin refused")
        .to_string();
    assert!(e.contains("does not match --pin"), "{e}");
    wait_failed(&listener, 1).await;

    let e = within("connect", quic::connect(&addr, &opts(TlsOpts::default())))
        .await
        .err()
        .expect("no trust refused");
    assert!(matches!(e, EndpointError::Tls(TlsError::NoTrust)), "{e}");
    let text = e.to_string();
    assert!(text.contains("--pin") && text.contains("--ca"), "{text}");

    let e = within("connect", quic::connect(&addr, &pinned("not hex")))
        .await
        .err()
        .expect("bad pin text refused");
    assert!(
        matches!(e, EndpointError::Tls(TlsError::BadPin { .. })),
        "{e}"
    );

    let mut other = pinned(listener.fingerprint());
    other.alpn = b"other/1".to_vec();
    let e = within("connect", quic::connect(&addr, &other))
        .await
        .err()
        .expect("ALPN mismatch refused")
        .to_string();
    assert!(e.to_lowercase().contains("protocol"), "{e}");
    wait_failed(&listener, 2).await;

    // The listener outlived the failures: a right client still gets through.
    let fp = listener.fingerprint().to_string();
    let server = tokio::spawn(async move {
        let (mut io, _) = within("accept", listener.accept()).await.expect("accept");
        let got = within("read", read_all(&mut io, 64)).await;
        io.write_all(&got).await.expect("echo");
        io.shutdown().await.expect("finish");
        (got, listener.failed_handshakes())
    });
    let mut io = within("connect", quic::connect(&addr, &pinned(&fp)))
        .await
        .expect("right client");
    io.write_all(b"still here").await.expect("write");
    io.shutdown().await.expect("half-close");
    let back = within("read", read_all(&mut io, 64)).await;
    let (got, failed) = within("server", server).await.expect("server task");
    assert_eq!(got, b"still here");
    assert_eq!(back, b"still here");
    assert_eq!(failed, 2, "the good client is not counted as failed");
}

#[tokio::test]
async fn ca_bundle_verifies_a_leaf_served_from_files() {
    let pki = make_pki("contract-proxy test CA");
    let served = opts(TlsOpts {
        cert: Some(pki.cert.clone()),
        key: Some(pki.key.clone()),
        ..TlsOpts::default()
    });
    let listener = QuicListener::bind("127.0.0.1:0", &served).expect("bind");
    assert_eq!(listener.fingerprint(), sha256_colon_hex(&pki.leaf_der));
    assert!(
        listener.cert_pem().is_none(),
        "no PEM for a certificate from files"
    );
    let addr = listener.local()[7..].to_string();

    // A different CA does not vouch for this leaf.
    let stranger = make_pki("some other CA");
    let e = within(
        "connect",
        quic::connect(
            &addr,
            &opts(TlsOpts {
                ca: Some(stranger.ca.clone()),
                ..TlsOpts::default()
            }),
        ),
    )
    .await
    .err()
    .expect("unknown issuer refused")
    .to_string();
    assert!(e.to_lowercase().contains("issuer"), "{e}");

    let server = tokio::spawn(async move {
        let (mut io, _) = within("accept", listener.accept()).await.expect("accept");
        let got = within("read", read_all(&mut io, 64)).await;
        io.write_all(b"pong").await.expect("write");
        io.shutdown().await.expect("finish");
        got
    });
    let with_ca = opts(TlsOpts {
        ca: Some(pki.ca.clone()),
        ..TlsOpts::default()
    });
    let mut io = within("connect", quic::connect(&addr, &with_ca))
        .await
        .expect("CA-verified connect");
    io.write_all(b"ping").await.expect("write");
    io.shutdown().await.expect("half-close");
    assert_eq!(within("read", read_all(&mut io, 64)).await, b"pong");
    assert_eq!(
        within("server", server).await.expect("server task"),
        b"ping"
    );

    // Only one of --cert/--key is a clear error.
    let half = opts(TlsOpts {
        cert: Some(pki.cert.clone()),
        ..TlsOpts::default()
    });
    let e = QuicListener::bind("127.0.0.1:0", &half)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("--key"), "{e}");
    // A key file without a key names the file.
    let bad = opts(TlsOpts {
        cert: Some(pki.cert.clone()),
        key: Some(pki.cert.clone()),
        ..TlsOpts::default()
    });
    let e = QuicListener::bind("127.0.0.1:0", &bad)
        .err()
        .expect("refused");
    assert!(
        matches!(e, EndpointError::Tls(TlsError::NoKey(ref p)) if *p == pki.cert),
        "{e}"
    );
}

fn python() -> PathBuf {
    let py = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../.venv-peers/bin/python"
    ));
    assert!(
        py.exists(),
        "{} missing: run scripts/peers-venv.sh to install the third-party peers",
        py.display()
    );
    py.to_path_buf()
}

fn peer_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(name)
}

#[tokio::test]
async fn aioquic_client_talks_to_the_listener() {
    let listener = QuicListener::bind("127.0.0.1:0", &opts(TlsOpts::default())).expect("bind");
    let dir = tempfile::tempdir().expect("tempdir");
    let cafile = dir.path().join("server.pem");
    std::fs::write(&cafile, listener.cert_pem().expect("pem")).expect("write pem");
    let port = listener.local_addr().port().to_string();

    let request = r#"{"type":"request","method":"ping","id":1}"#;
    let reply = frame(r#"{"type":"response","id":1,"payload":"pong"}"#);
    let expect_reply = reply.clone();
    let server = tokio::spawn(async move {
        let (mut io, _) = within("accept", listener.accept()).await.expect("accept");
        let got = within("read", read_all(&mut io, 4096)).await;
        io.write_all(&expect_reply).await.expect("reply");
        io.shutdown().await.expect("finish");
        got
    });
    let child = tokio::process::Command::new(python())
        .arg(peer_script("quic_client.py"))
        .args(["127.0.0.1", &port, "test/1"])
        .arg(&cafile)
        .arg(request)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn aioquic client");
    let out = within("aioquic client", child.wait_with_output())
        .await
        .expect("client output");
    assert!(
        out.status.success(),
        "aioquic client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = within("server", server).await.expect("server task");
    assert_eq!(got, frame(request), "the listener got the client's frame");
    let hex = String::from_utf8(out.stdout).expect("utf8");
    let back: Vec<u8> = (0..hex.trim().len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex.trim()[i..i + 2], 16).expect("hex"))
        .collect();
    assert_eq!(back, reply, "the client got the listener's frame");
}

#[tokio::test]
async fn aioquic_client_with_another_alpn_is_refused() {
    let listener = QuicListener::bind("127.0.0.1:0", &opts(TlsOpts::default())).expect("bind");
    let dir = tempfile::tempdir().expect("tempdir");
    let cafile = dir.path().join("server.pem");
    std::fs::write(&cafile, listener.cert_pem().expect("pem")).expect("write pem");
    let port = listener.local_addr().port().to_string();
    let out = within(
        "aioquic client",
        tokio::process::Command::new(python())
            .arg(peer_script("quic_client.py"))
            .args(["127.0.0.1", &port, "other/1"])
            .arg(&cafile)
            .arg("{}")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("client output");
    assert!(!out.status.success(), "a foreign ALPN must not get through");
    wait_failed(&listener, 1).await;
}

/// An aioquic echo server on 127.0.0.1, killed when dropped.
struct PyServer {
    _child: tokio::process::Child,
    port: u16,
}

async fn py_server(cert: &Path, key: &Path) -> PyServer {
    let mut child = tokio::process::Command::new(python())
        .arg(peer_script("quic_server.py"))
        .arg(cert)
        .arg(key)
        .arg("test/1")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn aioquic server");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    within(
        "aioquic server ready",
        BufReader::new(stdout).read_line(&mut line),
    )
    .await
    .expect("read PORT line");
    let port = line
        .trim()
        .strip_prefix("PORT ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("aioquic server said {line:?}"));
    PyServer {
        _child: child,
        port,
    }
}

async fn ask(addr: &str, o: &Options, json: &str) -> Result<Vec<u8>, EndpointError> {
    let mut io = within("connect", quic::connect(addr, o)).await?;
    within("write", io.write_all(&frame(json)))
        .await
        .expect("write");
    io.shutdown().await.expect("half-close");
    Ok(within("read", read_all(&mut io, 4096)).await)
}

#[tokio::test]
async fn connect_reaches_an_aioquic_server_by_pin_and_by_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, made.cert.pem()).expect("cert");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("key");
    let server = py_server(&cert, &key).await;
    let addr = format!("127.0.0.1:{}", server.port);

    let pin = sha256_colon_hex(made.cert.der());
    let got = ask(&addr, &pinned(&pin), r#"{"n":1}"#)
        .await
        .expect("pinned");
    assert_eq!(got, frame(r#"{"echo":{"n":1}}"#));

    let e = ask(&addr, &pinned(&"AB".repeat(32)), "{}")
        .await
        .expect_err("wrong pin refused");
    assert!(e.to_string().contains("does not match --pin"), "{e}");

    let mut foreign = pinned(&pin);
    foreign.alpn = b"other/1".to_vec();
    assert!(
        ask(&addr, &foreign, "{}").await.is_err(),
        "aioquic refuses a foreign ALPN too"
    );

    let pki = make_pki("contract-proxy test CA");
    let ca_server = py_server(&pki.cert, &pki.key).await;
    let with_ca = opts(TlsOpts {
        ca: Some(pki.ca.clone()),
        ..TlsOpts::default()
    });
    let got = ask(
        &format!("127.0.0.1:{}", ca_server.port),
        &with_ca,
        r#"[true]"#,
    )
    .await
    .expect("CA-verified");
    assert_eq!(got, frame(r#"{"echo":[true]}"#));
}

#[tokio::test]
async fn proxy_binary_relays_quic_to_unix_with_half_close() {
    let pki = make_pki("contract-proxy test CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let up_path = dir.path().join("up.sock");
    let upstream = tokio::net::UnixListener::bind(&up_path).expect("bind upstream");
    let (cert, key) = (
        pki.cert.display().to_string(),
        pki.key.display().to_string(),
    );
    let up = format!("unix:{}", up_path.display());
    let proxy = harness::run(&[
        "--contract",
        "rukh",
        "--cert",
        &cert,
        "--key",
        &key,
        "--listen",
        "quic://127.0.0.1:0",
        "--upstream",
        &up,
    ]);
    let addr = proxy
        .url()
        .strip_prefix("quic://")
        .expect("the proxy says where it listens")
        .to_string();
    assert!(!addr.ends_with(":0"), "the real port is printed: {addr}");

    let mut o = opts(TlsOpts {
        ca: Some(pki.ca.clone()),
        ..TlsOpts::default()
    });
    o.alpn = b"rukh/99".to_vec();
    assert!(
        within("connect", quic::connect(&addr, &o)).await.is_err(),
        "another major is refused"
    );
    o.alpn = harness::contract_alpn("rukh").into_bytes();

    let request = r#"{"jsonrpc":"2.0","id":"c:1","method":"rukh.close","params":{}}"#;
    let reply = r#"{"jsonrpc":"2.0","id":"c:1","result":{}}"#;
    let server = tokio::spawn(async move {
        let (mut s, _) = within("upstream accept", upstream.accept())
            .await
            .expect("accept");
        // EOF relayed from the QUIC client's finish, while the reply is still to come.
        let got = within("upstream read", read_all(&mut s, 4096)).await;
        s.write_all(&frame(reply)).await.expect("reply");
        s.shutdown().await.expect("half-close");
        got
    });
    let mut io = within("connect", quic::connect(&addr, &o))
        .await
        .expect("connect through the proxy");
    io.write_all(&frame(request)).await.expect("send");
    io.shutdown().await.expect("half-close");
    let back = within("reply", read_all(&mut io, 4096)).await;
    assert_eq!(
        within("upstream", server).await.expect("upstream task"),
        frame(request),
        "the upstream got the exact bytes"
    );
    assert_eq!(back, frame(reply), "the client got the upstream's reply");
}

fn opts(tls: TlsOpts) -> Options {
    harness::secure_opts(ALPN, tls)
}

fn pinned(pin: &str) -> Options {
    harness::pinned_opts(ALPN, pin)
}
