//! Faults on every transport pair: the proxy keeps its word when a peer dies,
//! resets, half-closes, stalls, trickles or churns.
//!
//! Each case runs on pairs of byte-stream transports the proxy relays (unix, tcp
//! and quic clients; unix, tcp and quic upstreams), with the jobs contract
//! (tests/fixtures/jobs.json, not a built-in) so nothing here leans on a protocol's
//! own code. Every case asserts what the far side observes (byte-exactly where the
//! fault leaves bytes to compare), that the proxy says what happened, and that it
//! still relays a fresh connection afterwards. Every wait has a deadline.

use std::time::{Duration, Instant};

use contract_transport::conn::BoxIo;
use contract_transport::endpoint::Options;
use contract_transport::endpoint::tls::TlsOpts;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

mod common;
mod harness;

use harness::{Churn, DEADLINE, Proxy, ep, rss_kib, settled, wait_for};

/// How a peer reaches the proxy, or the proxy its upstream.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Unix,
    Tcp,
    Quic,
}

/// The upstream's listener.
enum Up {
    Unix(tokio::net::UnixListener),
    Tcp(tokio::net::TcpListener),
    Quic(contract_transport::endpoint::quic::QuicListener),
    /// Unplugged: nothing listens any more.
    Gone,
}

impl Up {
    async fn accept(&self) -> std::io::Result<BoxIo> {
        Ok(match self {
            Up::Unix(l) => Box::new(l.accept().await?.0),
            Up::Tcp(l) => Box::new(l.accept().await?.0),
            Up::Quic(l) => l.accept().await?.0,
            Up::Gone => return Err(std::io::ErrorKind::NotConnected.into()),
        })
    }
}

/// One proxy between a client transport and an upstream transport.
struct Rig {
    p: Proxy,
    client: Kind,
    listen: String,
    up: std::sync::Arc<Up>,
    quic: Option<Options>,
    _pki: harness::Pki,
    _dir: tempfile::TempDir,
}

fn jobs_path() -> String {
    common::root()
        .join("proxy/tests/fixtures/jobs.json")
        .display()
        .to_string()
}

fn jobs_contract() -> contract::Contract {
    contract::load(std::path::Path::new(&jobs_path())).expect("jobs")
}

impl Rig {
    async fn new(client: Kind, upstream: Kind, mode: &str) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = harness::make_pki("faults test CA");
        let (up, up_ep) = match upstream {
            Kind::Unix => {
                let path = dir.path().join("up.sock");
                let l = tokio::net::UnixListener::bind(&path).expect("bind");
                (Up::Unix(l), ep(&path))
            }
            Kind::Tcp => {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let a = l.local_addr().expect("addr");
                (Up::Tcp(l), format!("tcp:{a}"))
            }
            Kind::Quic => {
                let tls = TlsOpts {
                    cert: Some(pki.cert.clone()),
                    key: Some(pki.key.clone()),
                    ..TlsOpts::default()
                };
                let l = contract_transport::endpoint::quic::QuicListener::bind(
                    "127.0.0.1:0",
                    &Options::for_contract(&jobs_contract(), "main", tls),
                )
                .expect("bind");
                let at = l.local();
                (Up::Quic(l), at)
            }
        };
        let sock = dir.path().join("p.sock");
        let listen_ep = match client {
            Kind::Unix => ep(&sock),
            Kind::Tcp => "tcp:0".to_string(),
            Kind::Quic => "quic://127.0.0.1:0".to_string(),
        };
        let (cert, key) = (
            pki.cert.display().to_string(),
            pki.key.display().to_string(),
        );
        let mut args = vec![
            "--contract".to_string(),
            jobs_path(),
            "--client".into(),
            "client".into(),
            "--mode".into(),
            mode.into(),
            "--listen".into(),
            listen_ep,
            "--upstream".into(),
            up_ep,
        ];
        if matches!(client, Kind::Quic) {
            args.extend(["--cert".into(), cert, "--key".into(), key]);
        }
        if matches!(upstream, Kind::Quic) {
            args.extend(["--ca".into(), pki.ca.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let p = harness::run(&args);
        let listen = match client {
            Kind::Unix => {
                wait_for(&sock).await;
                sock.display().to_string()
            }
            Kind::Tcp => p.url().trim_start_matches("tcp:").to_string(),
            Kind::Quic => p.url().trim_start_matches("quic://").to_string(),
        };
        let quic = matches!(client, Kind::Quic).then(|| {
            Options::for_contract(
                &jobs_contract(),
                "main",
                TlsOpts {
                    ca: Some(pki.ca.clone()),
                    ..TlsOpts::default()
                },
            )
        });
        Rig {
            p,
            client,
            listen,
            up: std::sync::Arc::new(up),
            quic,
            _pki: pki,
            _dir: dir,
        }
    }

    /// A client connection to the proxy.
    async fn dial(&self) -> BoxIo {
        timeout(DEADLINE, async {
            match self.client {
                Kind::Unix => Box::new(
                    tokio::net::UnixStream::connect(&self.listen)
                        .await
                        .expect("connect"),
                ) as BoxIo,
                Kind::Tcp => Box::new(
                    tokio::net::TcpStream::connect(&self.listen)
                        .await
                        .expect("connect"),
                ),
                Kind::Quic => {
                    let o = self.quic.as_ref().expect("quic options");
                    contract_transport::endpoint::quic::connect(&self.listen, o)
                        .await
                        .expect("connect")
                }
            }
        })
        .await
        .expect("connected in time")
    }

    /// The upstream's side of the next connection the proxy makes.
    async fn accept(&self) -> BoxIo {
        timeout(DEADLINE, self.up.accept())
            .await
            .expect("the proxy dials the upstream in time")
            .expect("accept")
    }

    /// A client and the upstream's end of it. A QUIC stream reaches the proxy with
    /// its first byte, so the client speaks first: `hello` goes up before the accept.
    async fn pair(&self, hello: &[u8]) -> (BoxIo, BoxIo) {
        let mut c = self.dial().await;
        c.write_all(hello).await.expect("hello");
        let mut u = self.accept().await;
        let got = read_exactly(&mut u, hello.len()).await;
        assert_eq!(got, hello, "the hello reaches the upstream as sent");
        (c, u)
    }

    /// The proxy still relays: a fresh connection carries a request and its answer.
    async fn still_relays(&mut self) {
        let (mut c, mut u) = self.pair(&line(&request("c:1", "hello"))).await;
        let reply = line(&serde_json::json!({"jsonrpc":"2.0","id":"c:1","result":{"features":[]}}));
        u.write_all(&reply).await.expect("reply");
        assert_eq!(read_exactly(&mut c, reply.len()).await, reply);
    }
}

fn request(id: &str, method: &str) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
}

fn line(v: &Value) -> Vec<u8> {
    let mut b = serde_json::to_vec(v).expect("json");
    b.push(b'\n');
    b
}

async fn read_exactly(s: &mut BoxIo, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    timeout(DEADLINE, s.read_exact(&mut b))
        .await
        .expect("bytes in time")
        .expect("read");
    b
}

/// Everything up to the end, and whether the end was clean (EOF, not an error).
async fn to_end(s: &mut BoxIo) -> (Vec<u8>, Result<(), String>) {
    let mut got = Vec::new();
    let r = timeout(DEADLINE, s.read_to_end(&mut got))
        .await
        .expect("the connection ends in time");
    (got, r.map(|_| ()).map_err(|e| e.to_string()))
}

/// The upstream dies after half a reply (its process exits: the socket closes
/// with everything read). The client gets exactly the half that was sent, then EOF,
/// as it would without the proxy; the proxy reports the broken frame.
async fn upstream_dies_mid_frame(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "observe").await;
    let (mut c, mut u) = r.pair(&line(&request("c:1", "hello"))).await;
    let half = br#"{"jsonrpc":"2.0","id":"c:1","res"#;
    u.write_all(half).await.expect("half a reply");
    drop(u);
    let (got, end) = to_end(&mut c).await;
    assert_eq!(got, half, "the client sees the half reply, byte for byte");
    assert_eq!(end, Ok(()), "then a clean EOF");
    let ev =
        r.p.until("the broken reply", |e| {
            e["dir"] == "down" && e["verdict"]["verdict"] != "ok"
        })
        .await;
    assert_eq!(ev["size"], half.len(), "{ev}");
    r.still_relays().await;
}

/// The client dies after half a request: the upstream gets the half, then EOF.
async fn client_dies_mid_frame(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "observe").await;
    let (mut c, mut u) = r.pair(&line(&request("c:1", "hello"))).await;
    let half = br#"{"jsonrpc":"2.0","id":"c:2","meth"#;
    c.write_all(half).await.expect("half a request");
    c.flush().await.expect("flush");
    drop(c);
    let (got, end) = to_end(&mut u).await;
    assert_eq!(
        got, half,
        "the upstream sees the half request, byte for byte"
    );
    assert_eq!(end, Ok(()), "then a clean EOF");
    r.p.until("the broken request", |e| {
        e["dir"] == "up" && e["verdict"]["verdict"] != "ok"
    })
    .await;
    r.still_relays().await;
}

/// The client ends its side first: its last request still arrives, the upstream
/// sees EOF, answers, ends its side, and the client gets the answer and EOF.
async fn half_close_client_first(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "enforce").await;
    let (mut c, mut u) = r.pair(&line(&request("c:1", "hello"))).await;
    c.shutdown().await.expect("client half-close");
    let (got, end) = to_end(&mut u).await;
    assert_eq!(
        (got.as_slice(), end),
        (&b""[..], Ok(())),
        "the upstream sees EOF"
    );
    let reply = line(&serde_json::json!({"jsonrpc":"2.0","id":"c:1","result":{"features":[]}}));
    u.write_all(&reply).await.expect("reply after EOF");
    u.shutdown().await.expect("upstream half-close");
    let (got, end) = to_end(&mut c).await;
    assert_eq!(got, reply, "the answer crosses the half-closed connection");
    assert_eq!(end, Ok(()));
    r.still_relays().await;
}

/// The upstream ends its side first: the client sees EOF and can still send.
async fn half_close_upstream_first(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "enforce").await;
    let (mut c, mut u) = r.pair(&line(&request("c:1", "hello"))).await;
    let reply = line(&serde_json::json!({"jsonrpc":"2.0","id":"c:1","result":{"features":[]}}));
    u.write_all(&reply).await.expect("reply");
    u.shutdown().await.expect("upstream half-close");
    let (got, end) = to_end(&mut c).await;
    assert_eq!(
        (got, end),
        (reply, Ok(())),
        "the client gets the answer, then EOF"
    );
    let next = line(&request("c:2", "job.start"));
    let next = {
        let mut v: Value = serde_json::from_slice(&next).expect("json");
        v["params"] = serde_json::json!({"job": "j1", "owner": "ann"});
        line(&v)
    };
    c.write_all(&next).await.expect("the client still sends");
    c.shutdown().await.expect("client half-close");
    let (got, end) = to_end(&mut u).await;
    assert_eq!((got, end), (next, Ok(())), "the request crosses, then EOF");
    r.still_relays().await;
}

/// The upstream accepts and never reads. The client is pushed back (its writes
/// stall) long before the proxy buffers more than a bounded amount.
async fn upstream_never_reads(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "observe").await;
    let (mut c, u) = r.pair(&line(&request("c:1", "hello"))).await;
    let rss0 = rss_kib(r.p.pid());
    let chunk = {
        let mut v = request("c:2", "job.end");
        v["params"] = serde_json::json!({"job": "x".repeat(60_000)});
        v.as_object_mut().map(|o| o.remove("id"));
        line(&v)
    };
    let mut sent = 0usize;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match timeout(Duration::from_millis(300), c.write_all(&chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            Ok(Err(e)) => panic!("write: {e}"),
            Err(_) => break,
        }
    }
    let grew = rss_kib(r.p.pid()).saturating_sub(rss0);
    eprintln!("in before the push-back: {sent} bytes; the proxy grew {grew} KiB");
    assert!(
        sent < MAX_IN_FLIGHT,
        "the client was never pushed back: {sent} bytes went in"
    );
    assert!(
        grew < MAX_GROWTH_KIB,
        "the proxy grew {grew} KiB holding a stalled upstream's bytes"
    );
    drop((c, u));
    r.still_relays().await;
}

/// Bytes a stalled path may take in: socket buffers on both hops and the proxy's own.
const MAX_IN_FLIGHT: usize = 32 << 20;
/// How much the proxy may grow while a stalled path is full.
const MAX_GROWTH_KIB: u64 = 16 << 10;

/// An upstream that reads every connection to its end, then lets go.
fn drain_upstream(r: &Rig) -> tokio::task::JoinHandle<()> {
    let up = r.up.clone();
    tokio::spawn(async move {
        while let Ok(mut s) = up.accept().await {
            tokio::spawn(async move {
                let mut sink = [0u8; 4096];
                while let Ok(n) = s.read(&mut sink).await
                    && n > 0
                {}
            });
        }
    })
}

/// Many short connections (one request each) leave no file descriptor and no
/// memory behind: after the churn the proxy is back to where it was.
async fn churn(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "enforce").await;
    let hello = line(&request("c:1", "hello"));
    let draining = drain_upstream(&r);
    for _ in 0..WARM_UP {
        one_request(&r, &hello).await;
    }
    // Past the warm-up the allocator has its pools: what stays per connection shows, as
    // a trend over phases (`harness::Churn`). (A QUIC upstream's connections share the
    // route's client endpoint; when each opened its own, RSS after 1,000 swung by tens of
    // MiB between runs.)
    let mut meter = Churn::start(r.p.pid()).await;
    let n = churn_size(client, upstream);
    for phase in 1..=Churn::PHASES {
        for _ in 0..n {
            one_request(&r, &hello).await;
        }
        if meter.phase_ends_level(n, MAX_CHURN_GROWTH_KIB).await {
            break;
        }
        if phase == Churn::PHASES {
            meter.leaked(n);
        }
    }
    draining.abort();
    r.still_relays().await;
}

const WARM_UP: usize = 500;

/// What the proxy may grow by over the churn (a leak of 100 bytes a connection
/// is 500 KiB over 5,000).
const MAX_CHURN_GROWTH_KIB: u64 = 512;

/// One short connection: a request, the client's end, then the proxy's.
async fn one_request(r: &Rig, hello: &[u8]) {
    let mut c = r.dial().await;
    c.write_all(hello).await.expect("hello");
    c.shutdown().await.expect("half-close");
    let (_, end) = to_end(&mut c).await;
    assert_eq!(end, Ok(()));
}

/// QUIC handshakes are dear in a debug build: fewer of them.
fn churn_size(client: Kind, upstream: Kind) -> usize {
    match (client, upstream) {
        (Kind::Quic, _) | (_, Kind::Quic) => 1_000,
        _ => 5_000,
    }
}

/// A notification of about `size` bytes on one line (the job name pads it).
fn bulk_line(size: usize) -> Vec<u8> {
    let mut v = serde_json::json!({"jsonrpc": "2.0", "method": "job.end", "params": {"job": ""}});
    let base = line(&v).len();
    v["params"]["job"] = Value::String("x".repeat(size.saturating_sub(base)));
    line(&v)
}

/// SIGTERM while the client streams 100 MiB: the proxy stops taking bytes, writes
/// on every frame it took (each one it logged reaches the upstream, whole), and
/// exits within its shutdown deadline.
async fn sigterm_mid_transfer(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "observe").await;
    let hello = line(&request("c:1", "hello"));
    let (mut c, mut u) = r.pair(&hello).await;
    let chunk = bulk_line(60_000);
    let total = TRANSFER / chunk.len();
    let writer = tokio::spawn(async move {
        for _ in 0..total {
            if c.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = c.shutdown().await;
        let (_, end) = to_end(&mut c).await;
        end
    });
    let mut got = Vec::with_capacity(TRANSFER);
    let mut buf = vec![0u8; 1 << 16];
    let mut signalled = None;
    let end = loop {
        match timeout(DEADLINE, u.read(&mut buf)).await {
            Err(_) => panic!("the upstream read stalled at {} bytes", got.len()),
            Ok(Err(e)) => break Err(e.to_string()),
            Ok(Ok(0)) => break Ok(()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
        if signalled.is_none() && got.len() > TRANSFER / 5 {
            r.p.signal("TERM");
            signalled = Some(Instant::now());
        }
    };
    assert!(signalled.is_some(), "the transfer ended before the signal");
    assert_eq!(end, Ok(()), "the upstream's side ends with EOF");
    let status = r.p.exited().await;
    assert!(status.success(), "the proxy exits 0 on SIGTERM: {status}");
    let _ = timeout(DEADLINE, writer).await.expect("the client ends");
    assert!(got.ends_with(b"\n"), "the upstream got whole lines only");
    let lines = got.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
    // The hello was read before the count began.
    let up = r.p.logged_up("job.end").await;
    assert_eq!(
        up, lines,
        "every frame the proxy logged going up reached the upstream"
    );
}

/// Bytes the SIGTERM case streams.
const TRANSFER: usize = 100 << 20;

impl Rig {
    /// Take the upstream away: its listener closes (and a unix socket's file goes).
    fn unplug(&mut self) {
        if let Up::Unix(l) = self.up.as_ref()
            && let Ok(a) = l.local_addr()
            && let Some(p) = a.as_pathname()
        {
            let _ = std::fs::remove_file(p);
        }
        self.up = std::sync::Arc::new(Up::Gone);
    }
}

/// The upstream is gone: each client is turned away with a clean end (no reset,
/// no bytes), the proxy says why, and it keeps accepting.
async fn upstream_gone(client: Kind, upstream: Kind) {
    let mut r = Rig::new(client, upstream, "enforce").await;
    r.unplug();
    // A QUIC upstream that is gone does not answer at all: each try waits out the
    // connect deadline, so one is enough.
    let tries = if matches!(upstream, Kind::Quic) { 1 } else { 3 };
    for _ in 0..tries {
        let mut c = r.dial().await;
        c.write_all(&line(&request("c:1", "hello")))
            .await
            .expect("hello");
        let mut got = Vec::new();
        let end = timeout(DEADLINE * 2, c.read_to_end(&mut got))
            .await
            .expect("turned away in time")
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(
            (got.as_slice(), end),
            (&b""[..], Ok(())),
            "turned away cleanly"
        );
    }
    let note = r.p.note("cannot connect").await;
    assert!(
        note.contains("upstream") || note.contains("connect"),
        "{note}"
    );
}

/// The upstream's accept queue is full, so its kernel ignores the proxy's SYN:
/// the connect deadline ends the wait, and the client gets a clean end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_accepts_is_given_up_on_at_the_connect_deadline() {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let addr = sock.local_addr().expect("addr");
    let _listener = sock.listen(0).expect("listen");
    // Fill the queue; nobody ever accepts.
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = timeout(
            Duration::from_millis(300),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            fillers.push(s);
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sock_path = dir.path().join("p.sock");
    let mut p = harness::run(&[
        "--contract",
        &jobs_path(),
        "--listen",
        &ep(&sock_path),
        "--upstream",
        &format!("tcp:{addr}"),
    ]);
    wait_for(&sock_path).await;
    let mut c: BoxIo = Box::new(
        tokio::net::UnixStream::connect(&sock_path)
            .await
            .expect("connect"),
    );
    c.write_all(&line(&request("c:1", "hello")))
        .await
        .expect("hello");
    let began = Instant::now();
    let mut got = Vec::new();
    let end = timeout(DEADLINE * 2, c.read_to_end(&mut got))
        .await
        .expect("turned away within the connect deadline");
    assert!(
        end.is_ok() && got.is_empty(),
        "a clean end: {end:?} {got:?}"
    );
    assert!(
        began.elapsed() >= contract_transport::endpoint::CONNECT_DEADLINE / 2,
        "the proxy waited for the upstream"
    );
    let note = p.note("connect deadline passed").await;
    assert!(note.contains(&addr.to_string()), "{note}");
}

/// An upstream that answers every request line with a result carrying its id.
fn answering_upstream(r: &Rig) -> tokio::task::JoinHandle<()> {
    use tokio::io::AsyncBufReadExt;
    let up = r.up.clone();
    tokio::spawn(async move {
        while let Ok(s) = up.accept().await {
            tokio::spawn(async move {
                let (rd, mut wr) = tokio::io::split(s);
                let mut lines = tokio::io::BufReader::new(rd).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    let Ok(v) = serde_json::from_str::<Value>(&l) else {
                        continue;
                    };
                    let reply = serde_json::json!({"jsonrpc": "2.0", "id": v["id"], "result": {"features": []}});
                    if wr.write_all(&line(&reply)).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// A request through the answering upstream, and its answer.
async fn probe(r: &Rig) {
    let mut c = r.dial().await;
    c.write_all(&line(&request("c:1", "hello")))
        .await
        .expect("hello");
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\n") {
        let n = timeout(DEADLINE, c.read(&mut b))
            .await
            .expect("the answer in time")
            .expect("read");
        assert!(n > 0, "EOF before the answer");
        got.push(b[0]);
    }
    let v: Value = serde_json::from_slice(&got).expect("json");
    assert_eq!(v["id"], "c:1", "{v}");
}

/// 200 connections each trickle a byte a second; meanwhile another client is
/// served as usual, and once they go the proxy holds no file for them.
async fn slowloris(client: Kind, upstream: Kind) {
    let r = Rig::new(client, upstream, "enforce").await;
    let _up = answering_upstream(&r);
    probe(&r).await;
    let pid = r.p.pid();
    let (fds0, _) = settled(pid, None).await;
    let text = br#"{"jsonrpc":"2.0""#;
    let mut slow = Vec::with_capacity(SLOW);
    // Each starts with its first byte: a QUIC stream only shows at its first byte,
    // and the listener caps the handshakes still waiting for one.
    for _ in 0..SLOW {
        let mut c = r.dial().await;
        c.write_all(&text[..1]).await.expect("a byte");
        slow.push(c);
    }
    for b in &text[1..3] {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for c in &mut slow {
            c.write_all(&[*b]).await.expect("a byte");
        }
        probe(&r).await;
    }
    drop(slow);
    let (fds, _) = settled(pid, Some(fds0)).await;
    assert_eq!(fds, fds0, "the slow connections left nothing open");
    probe(&r).await;
}

const SLOW: usize = 200;

/// The client resets (TCP RST) with half a request sent: the upstream gets a
/// clean EOF, never more than the half, and the proxy says what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_mid_frame_ends_the_upstream_cleanly() {
    let mut r = Rig::new(Kind::Tcp, Kind::Tcp, "observe").await;
    let mut c = tokio::net::TcpStream::connect(&r.listen)
        .await
        .expect("connect");
    let hello = line(&request("c:1", "hello"));
    c.write_all(&hello).await.expect("hello");
    let mut u = r.accept().await;
    assert_eq!(read_exactly(&mut u, hello.len()).await, hello);
    let half = br#"{"jsonrpc":"2.0","id":"c:2","meth"#;
    c.write_all(half).await.expect("half");
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.set_zero_linger().expect("linger 0");
    drop(c);
    let (got, end) = to_end(&mut u).await;
    assert_eq!(end, Ok(()), "the upstream sees a clean EOF");
    assert!(half.starts_with(&got), "no more than the half: {got:?}");
    r.p.note("reset").await;
    r.still_relays().await;
}

macro_rules! pairs {
    ($($pair:ident: $client:expr, $upstream:expr;)*) => {$(
        mod $pair {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn upstream_dies_mid_frame() { super::upstream_dies_mid_frame($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn client_dies_mid_frame() { super::client_dies_mid_frame($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn half_close_client_first() { super::half_close_client_first($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn half_close_upstream_first() { super::half_close_upstream_first($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn upstream_never_reads() { super::upstream_never_reads($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn churn() { super::churn($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn upstream_gone() { super::upstream_gone($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn slowloris() { super::slowloris($client, $upstream).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sigterm_mid_transfer() { super::sigterm_mid_transfer($client, $upstream).await }
        }
    )*};
}

pairs! {
    unix_to_unix: Kind::Unix, Kind::Unix;
    tcp_to_tcp: Kind::Tcp, Kind::Tcp;
    quic_to_unix: Kind::Quic, Kind::Unix;
    unix_to_tcp: Kind::Unix, Kind::Tcp;
    tcp_to_quic: Kind::Tcp, Kind::Quic;
}

// ---------------------------------------------------------------------------
// WebSocket on both sides: Python `websockets` as the upstream (the toolchannel-like
// echo host of tests/peers/ws_server.py), the proxy between, the client raw or
// tokio-tungstenite.

/// The upstream (tests/peers/ws_server.py) and a proxy in front of it.
struct WsRig {
    p: Proxy,
    url: String,
    host: common::PyPeer,
}

impl WsRig {
    async fn new() -> WsRig {
        let mut host = common::PyPeer::start("ws_server.py", &[]);
        let port = host.port().await;
        let (p, url) =
            harness::toolchannel(&format!("ws://127.0.0.1:{port}/worker"), "observe", 1.0);
        WsRig { p, url, host }
    }

    /// The host's reports up to its `closed`.
    async fn host_until_closed(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let v = self.host.next().await;
            let done = v["event"] == "closed";
            out.push(v);
            if done {
                return out;
            }
        }
    }

    fn subprotocol() -> String {
        let c = contract::builtin("toolchannel").expect("toolchannel");
        match &c.channels["ws"].framing {
            contract::model::Framing::WebsocketText { subprotocols, .. } => {
                subprotocols.first().cloned().expect("a subprotocol")
            }
            other => panic!("ws framing: {other:?}"),
        }
    }

    /// A raw TCP connection through the upgrade, ready for hand-made frames.
    async fn raw(&mut self) -> tokio::net::TcpStream {
        let rest = self.url.trim_start_matches("ws://");
        let (addr, path) = rest.split_once('/').expect("ws://ADDR/PATH");
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "GET /{path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: {}\r\nAuthorization: Bearer t0k\r\n\r\n",
            Self::subprotocol()
        );
        s.write_all(head.as_bytes()).await.expect("upgrade");
        let mut got = Vec::new();
        let mut b = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            let n = timeout(DEADLINE, s.read(&mut b))
                .await
                .expect("101 in time")
                .expect("read");
            assert!(n > 0, "EOF in the upgrade answer");
            got.push(b[0]);
        }
        assert!(
            got.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&got)
        );
        self.host.event("open").await;
        s
    }
}

/// A masked client frame (payload under 126 bytes).
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// A server frame as read off the wire: (opcode, payload), unmasked.
async fn server_frame(s: &mut tokio::net::TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    match timeout(DEADLINE, s.read_exact(&mut h))
        .await
        .expect("a frame in time")
    {
        Ok(_) => {}
        Err(_) => return None,
    }
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).await.expect("length");
            u16::from_be_bytes(l) as usize
        }
        127 => panic!("no large frames expected here"),
        n => n as usize,
    };
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await.expect("payload");
    Some((h[0] & 0x0f, p))
}

/// A client that sends its close and then keeps sending: nothing after the close
/// reaches the upstream, the client gets the one close answer, then EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_peer_that_keeps_sending_after_its_close_is_not_heard() {
    let mut r = WsRig::new().await;
    let mut s = r.raw().await;
    s.write_all(&client_frame(0x1, b"before"))
        .await
        .expect("text");
    assert_eq!(server_frame(&mut s).await, Some((0x1, b"before".to_vec())));
    let mut close = 1000u16.to_be_bytes().to_vec();
    close.extend_from_slice(b"bye");
    s.write_all(&client_frame(0x8, &close))
        .await
        .expect("close");
    for _ in 0..3 {
        // The peer may already have let go: a failed write is part of what is tested.
        let _ = s.write_all(&client_frame(0x1, b"after the close")).await;
    }
    let (op, payload) = server_frame(&mut s).await.expect("the close answer");
    assert_eq!(op, 0x8, "a close frame");
    assert_eq!(
        &payload[..2],
        &1000u16.to_be_bytes(),
        "with the client's code"
    );
    let mut tail = Vec::new();
    let end = timeout(DEADLINE, s.read_to_end(&mut tail))
        .await
        .expect("the proxy ends the connection in time");
    assert!(end.is_ok() && tail.is_empty(), "then EOF: {end:?} {tail:?}");
    let host = r.host_until_closed().await;
    assert_eq!(
        host.iter().filter(|e| e["event"] == "message").count(),
        1,
        "only the text before the close reached the host: {host:?}"
    );
    assert_eq!(host.last().map(|e| e["code"].clone()), Some(1000.into()));
}

/// SIGTERM: the client and the host each get close 1001, and the proxy exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_both_websocket_sides_with_1001() {
    let mut r = WsRig::new().await;
    let mut s = r.raw().await;
    s.write_all(&client_frame(0x1, b"x")).await.expect("text");
    assert_eq!(server_frame(&mut s).await, Some((0x1, b"x".to_vec())));
    r.p.signal("TERM");
    let (op, payload) = server_frame(&mut s).await.expect("a close");
    assert_eq!((op, &payload[..2]), (0x8, &1001u16.to_be_bytes()[..]));
    // Answer it, as a client does.
    s.write_all(&client_frame(0x8, &payload[..2]))
        .await
        .expect("close answer");
    let host = r.host_until_closed().await;
    assert_eq!(host.last().map(|e| e["code"].clone()), Some(1001.into()));
    assert!(r.p.exited().await.success());
}

/// The host dies (no close frame): the client's connection ends without one too,
/// promptly, as a direct connection would; the proxy keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_host_that_dies_ends_the_client_without_a_close_frame() {
    let mut r = WsRig::new().await;
    let mut s = r.raw().await;
    s.write_all(&client_frame(0x1, b"x")).await.expect("text");
    assert_eq!(server_frame(&mut s).await, Some((0x1, b"x".to_vec())));
    r.host.kill().await;
    let mut tail = Vec::new();
    let end = timeout(DEADLINE, s.read_to_end(&mut tail))
        .await
        .expect("the client's connection ends in time");
    assert!(
        end.is_ok() && tail.is_empty(),
        "EOF, no close frame: {end:?} {tail:?}"
    );
    r.p.note("closed").await;
}

/// A WebSocket host that completes the upgrade and then never reads: the client is
/// pushed back (its sends stall) while the proxy's memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_host_that_never_reads_pushes_the_client_back() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let host = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = host.local_addr().expect("addr");
    let stalled = tokio::spawn(async move {
        let (mut s, _) = host.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await.expect("head");
            head.push(b[0]);
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let key = text
            .lines()
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            .expect("a key")
            .trim()
            .to_string();
        let proto = WsRig::subprotocol();
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {proto}\r\n\r\n"
        );
        s.write_all(answer.as_bytes()).await.expect("101");
        // Hold the socket, never read it.
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(s);
    });
    let (p, url) = harness::toolchannel(&format!("ws://{addr}/worker"), "observe", 1.0);
    let mut req = url.into_client_request().expect("request");
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        WsRig::subprotocol().parse().expect("header"),
    );
    let (mut ws, _) = timeout(DEADLINE, tokio_tungstenite::connect_async(req))
        .await
        .expect("101 in time")
        .expect("101");
    let rss0 = rss_kib(p.pid());
    let text = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"pad":"{}"}}}}"#,
        "x".repeat(60_000)
    );
    let mut sent = 0usize;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match timeout(
            Duration::from_millis(300),
            ws.send(Message::text(text.clone())),
        )
        .await
        {
            Ok(Ok(())) => sent += text.len(),
            Ok(Err(e)) => panic!("send: {e}"),
            Err(_) => break,
        }
    }
    let grew = rss_kib(p.pid()).saturating_sub(rss0);
    eprintln!("in before the push-back: {sent} bytes; the proxy grew {grew} KiB");
    assert!(
        sent < MAX_IN_FLIGHT,
        "the client was never pushed back: {sent} bytes went in"
    );
    assert!(grew < MAX_GROWTH_KIB, "the proxy grew {grew} KiB");
    stalled.abort();
}
