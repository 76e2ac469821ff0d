//! Faults where one side is not a plain byte stream: the WebSocket bridge (ws and
//! wss, in front of a unix upstream and behind a unix client) and the process
//! stand-ins (the proxy's own stdio as the client, an `exec:` child as the upstream).
//!
//! faults.rs covers byte stream to byte stream. The cases here are the same faults,
//! written once over a [`Peer`] that is either a byte stream or a WebSocket
//! (tokio-tungstenite, over rustls for wss), so each case states what the far side
//! observes in its own terms: a line or a text message, EOF or a close frame with
//! its code. The contract is tests/fixtures/jobs.json (NDJSON, not a built-in): one
//! text message on the WebSocket side is one line on the other.
//!
//! The `exec:` upstream is socat relaying its stdio to a unix socket the test
//! holds, so the test plays the child's far end while a real child process sits
//! in between.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract_transport::conn::BoxIo;
use contract_transport::endpoint::tls::{self, TlsOpts};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

mod common;
mod harness;

use harness::{Churn, DEADLINE, Proxy, ep, rss_kib, settled, wait_for};

/// A transport on one side of the proxy.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Unix,
    Ws,
    Wss,
    /// The proxy's own stdin/stdout (client side only).
    Stdio,
    /// A child process (`exec:`), here socat in front of a unix socket (upstream only).
    Exec,
}

impl Side {
    fn is_ws(self) -> bool {
        matches!(self, Side::Ws | Side::Wss)
    }
}

type Ws = WebSocketStream<BoxIo>;

/// One side as the test holds it.
enum Peer {
    Bytes { io: BoxIo, buf: Vec<u8> },
    Ws { ws: Box<Ws>, client: bool },
}

/// What a peer observed next.
#[derive(PartialEq)]
enum Got {
    /// A line (without its newline) or a text message.
    Text(String),
    /// Bytes that EOF cut off before a newline.
    Partial(String),
    /// EOF on a byte stream; a WebSocket that ended after its closing handshake.
    End,
    /// A close frame and its code.
    Close(Option<u16>),
    /// A read error, or a WebSocket that ended without a close frame.
    Broken(String),
}

/// Long texts (the bulk lines) are cut in failure messages.
impl std::fmt::Debug for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = |t: &str| -> String {
            match t.char_indices().nth(120) {
                Some((i, _)) => format!("{}… ({} bytes)", &t[..i], t.len()),
                None => t.to_string(),
            }
        };
        match self {
            Got::Text(t) => write!(f, "Text({:?})", cut(t)),
            Got::Partial(t) => write!(f, "Partial({:?})", cut(t)),
            Got::End => write!(f, "End"),
            Got::Close(c) => write!(f, "Close({c:?})"),
            Got::Broken(e) => write!(f, "Broken({e:?})"),
        }
    }
}

impl Peer {
    fn bytes(io: BoxIo) -> Peer {
        Peer::Bytes {
            io,
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, text: &str) {
        match self {
            Peer::Bytes { io, .. } => {
                let mut line = text.as_bytes().to_vec();
                line.push(b'\n');
                io.write_all(&line).await.expect("write a line");
            }
            Peer::Ws { ws, .. } => ws.send(Message::text(text)).await.expect("send"),
        }
    }

    /// The next thing seen, within the deadline.
    async fn recv(&mut self) -> Got {
        timeout(DEADLINE, self.recv_now())
            .await
            .expect("the peer sees something in time")
    }

    async fn recv_now(&mut self) -> Got {
        match self {
            Peer::Bytes { io, buf } => loop {
                if let Some(i) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=i).collect();
                    return Got::Text(String::from_utf8_lossy(&line[..i]).into_owned());
                }
                let mut chunk = [0u8; 8192];
                match io.read(&mut chunk).await {
                    Ok(0) if buf.is_empty() => return Got::End,
                    Ok(0) => {
                        let rest = std::mem::take(buf);
                        return Got::Partial(String::from_utf8_lossy(&rest).into_owned());
                    }
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) => return Got::Broken(e.to_string()),
                }
            },
            Peer::Ws { ws, .. } => loop {
                match ws.next().await {
                    Some(Ok(Message::Text(t))) => return Got::Text(t.to_string()),
                    Some(Ok(Message::Close(f))) => {
                        return Got::Close(f.map(|f| u16::from(f.code)));
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(other)) => panic!("an unexpected message: {other:?}"),
                    Some(Err(e)) => return Got::Broken(e.to_string()),
                    None => return Got::End,
                }
            },
        }
    }

    async fn expect_text(&mut self, want: &str) {
        assert_eq!(self.recv().await, Got::Text(want.to_string()));
    }

    /// The peer's connection ends cleanly: EOF on a byte stream; on a WebSocket a
    /// close frame with `code`, then the end of the connection.
    async fn expect_end(&mut self, code: u16) {
        match self {
            Peer::Bytes { .. } => assert_eq!(self.recv().await, Got::End, "a clean EOF"),
            Peer::Ws { .. } => {
                assert_eq!(self.recv().await, Got::Close(Some(code)), "the close");
                let after = self.recv().await;
                assert!(
                    matches!(&after, Got::End)
                        || matches!(&after, Got::Broken(e) if e.contains("closed")),
                    "then the end: {after:?}"
                );
            }
        }
    }

    /// End this side as its transport does: shutdown(Write), or a close frame (1000).
    async fn end(&mut self) {
        match self {
            Peer::Bytes { io, .. } => io.shutdown().await.expect("half-close"),
            Peer::Ws { ws, .. } => {
                let bye = CloseFrame {
                    code: CloseCode::Normal,
                    reason: "done".into(),
                };
                // The stream's own close (with a frame), not the Sink's.
                Ws::close(ws, Some(bye)).await.expect("close")
            }
        }
    }

    /// Send half of `text` and die: half a line, or a frame that stops halfway.
    async fn die_mid_frame(self, text: &str) {
        let half = &text.as_bytes()[..text.len() / 2];
        let mut io = match self {
            Peer::Bytes { mut io, .. } => {
                io.write_all(half).await.expect("half a line");
                io
            }
            Peer::Ws { mut ws, client } => {
                ws.flush().await.expect("flush");
                let frame = ws_frame_head(text.len(), client);
                let io = ws.get_mut();
                io.write_all(&frame).await.expect("a frame head");
                // A masked payload with a zero mask is the payload itself.
                io.write_all(half).await.expect("half a payload");
                ws.into_inner()
            }
        };
        io.flush().await.expect("flush");
        drop(io);
    }
}

/// The head of one text frame of `len` bytes (under 64 KiB); a client's is masked
/// (with a zero mask, so its payload goes as is).
fn ws_frame_head(len: usize, client: bool) -> Vec<u8> {
    let mask = if client { 0x80 } else { 0 };
    let mut f = vec![0x81];
    match u16::try_from(len) {
        Ok(n) if n < 126 => f.push(mask | n as u8),
        Ok(n) => {
            f.push(mask | 126);
            f.extend_from_slice(&n.to_be_bytes());
        }
        Err(_) => panic!("a frame head for {len} bytes"),
    }
    if client {
        f.extend_from_slice(&[0; 4]);
    }
    f
}

fn request(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "hello", "params": {}}).to_string()
}

fn reply(id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"features": []}}).to_string()
}

/// A notification of about `size` bytes (the job name pads it).
fn bulk(size: usize) -> String {
    json!({"jsonrpc": "2.0", "method": "job.end", "params": {"job": "x".repeat(size)}}).to_string()
}

fn jobs_path() -> String {
    common::root()
        .join("proxy/tests/fixtures/jobs.json")
        .display()
        .to_string()
}

/// Where the upstream listens (the test's side of it).
enum Back {
    /// A unix socket: the upstream itself, or the far end of the `exec:` child.
    Unix(UnixListener),
    Ws(TcpListener, Option<tokio_rustls::TlsAcceptor>),
    /// Unplugged: nothing listens any more.
    Gone,
}

/// One proxy between a client side and an upstream side.
struct Rig {
    p: Proxy,
    front: Side,
    /// The unix path or ws(s) URL clients dial.
    listen: String,
    up: Arc<tokio::sync::Mutex<Back>>,
    up_path: PathBuf,
    /// The one client of a stdio front, until taken.
    stdio: Option<BoxIo>,
    pki: harness::Pki,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn new(front: Side, back: Side, mode: &str) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = harness::make_pki("bridge faults CA");
        let up_path = dir.path().join("up.sock");
        let (up, up_ep) = upstream_side(back, &up_path, &pki).await;
        let mut args: Vec<String> = ["--contract", &jobs_path(), "--client", "client"]
            .iter()
            .map(|s| s.to_string())
            .chain(["--mode".into(), mode.into(), "--upstream".into(), up_ep])
            .collect();
        if back == Side::Wss {
            args.extend(["--ca".into(), pki.ca.display().to_string()]);
        }
        let sock = dir.path().join("p.sock");
        let (p, stdio, listen) = start(front, args, &sock, &pki).await;
        Rig {
            p,
            front,
            listen,
            up: Arc::new(tokio::sync::Mutex::new(up)),
            up_path,
            stdio,
            pki,
            _dir: dir,
        }
    }

    /// A client connection to the proxy (the stdio front's one and only).
    async fn dial(&mut self) -> Peer {
        match self.front {
            Side::Unix => {
                let s = tokio::net::UnixStream::connect(&self.listen)
                    .await
                    .expect("connect");
                Peer::bytes(Box::new(s))
            }
            Side::Stdio => Peer::bytes(self.stdio.take().expect("stdio has one client")),
            _ => {
                let ca = (self.front == Side::Wss).then_some(&self.pki.ca);
                ws_dial(&self.listen, ca).await
            }
        }
    }

    /// The upstream's side of the next connection the proxy makes.
    async fn accept(&self) -> Peer {
        timeout(DEADLINE, accept_on(&self.up))
            .await
            .expect("the proxy dials the upstream in time")
    }

    /// A client and the upstream's end of it, a request already across.
    async fn pair(&mut self) -> (Peer, Peer) {
        let mut c = self.dial().await;
        c.send(&request("c:1")).await;
        let mut u = self.accept().await;
        u.expect_text(&request("c:1")).await;
        (c, u)
    }

    /// The proxy still relays: a fresh connection carries a request and its answer.
    /// A stdio front has had its one connection: once both sides are let go, the
    /// proxy exits instead, and 0.
    async fn still_relays(&mut self) {
        if self.front == Side::Stdio {
            let st = self.p.exited().await;
            assert!(st.success(), "the proxy exits 0 after its one client: {st}");
            return;
        }
        let (mut c, mut u) = self.pair().await;
        u.send(&reply("c:1")).await;
        c.expect_text(&reply("c:1")).await;
    }

    /// Take the upstream away.
    async fn unplug(&mut self) {
        let _ = std::fs::remove_file(&self.up_path);
        *self.up.lock().await = Back::Gone;
    }

    /// How a clean end of the upstream shows on a WebSocket client.
    fn normal(&self) -> u16 {
        u16::from(CloseCode::Normal)
    }
}

/// The upstream's listener for `back`, and the proxy's `--upstream` for it.
async fn upstream_side(back: Side, up_path: &Path, pki: &harness::Pki) -> (Back, String) {
    match back {
        Side::Unix => (Back::Unix(bind_unix(up_path)), ep(up_path)),
        Side::Exec => (
            Back::Unix(bind_unix(up_path)),
            // -t: socat waits this long for the other direction after one ends;
            // its default (0.5 s) would cut a half-closed exchange short.
            // shut-close: the far end's EOF closes socat's stdout, as a child
            // that is done writing does (a pipe has no half-close of its own).
            format!(
                "exec:socat -t 10 STDIO,shut-close UNIX-CONNECT:{}",
                up_path.display()
            ),
        ),
        Side::Ws | Side::Wss => {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = l.local_addr().expect("addr");
            let (tls, scheme) = if back == Side::Wss {
                (Some(acceptor(pki)), "wss")
            } else {
                (None, "ws")
            };
            (Back::Ws(l, tls), format!("{scheme}://{addr}/jobs"))
        }
        Side::Stdio => panic!("stdio is a client side"),
    }
}

/// The proxy with `args`, listening as `front` says: it, the stdio client (for a
/// stdio front), and where other clients dial.
async fn start(
    front: Side,
    mut args: Vec<String>,
    sock: &Path,
    pki: &harness::Pki,
) -> (Proxy, Option<BoxIo>, String) {
    let listen = match front {
        Side::Unix => ep(sock),
        Side::Ws => "ws://127.0.0.1:0/jobs".into(),
        Side::Wss => {
            let (cert, key) = (pki.cert.display(), pki.key.display());
            args.extend([
                "--cert".into(),
                cert.to_string(),
                "--key".into(),
                key.to_string(),
            ]);
            "wss://127.0.0.1:0/jobs".into()
        }
        Side::Stdio => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (p, io) = harness::run_stdio(&args);
            return (p, Some(io), String::new());
        }
        Side::Exec => panic!("exec is an upstream side"),
    };
    args.extend(["--listen".into(), listen]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let p = harness::run(&args);
    let at = if front == Side::Unix {
        wait_for(sock).await;
        sock.display().to_string()
    } else {
        p.url()
    };
    (p, None, at)
}

fn bind_unix(path: &Path) -> UnixListener {
    UnixListener::bind(path).expect("bind")
}

fn acceptor(pki: &harness::Pki) -> tokio_rustls::TlsAcceptor {
    let opts = TlsOpts {
        cert: Some(pki.cert.clone()),
        key: Some(pki.key.clone()),
        ..TlsOpts::default()
    };
    let server = tls::server(&opts, &[]).expect("server TLS");
    tokio_rustls::TlsAcceptor::from(server.config)
}

async fn accept_on(up: &tokio::sync::Mutex<Back>) -> Peer {
    let back = up.lock().await;
    match &*back {
        Back::Unix(l) => Peer::bytes(Box::new(l.accept().await.expect("accept").0)),
        Back::Ws(l, tls) => {
            let (s, _) = l.accept().await.expect("accept");
            let io: BoxIo = match tls {
                Some(a) => Box::new(a.accept(s).await.expect("TLS")),
                None => Box::new(s),
            };
            let ws = tokio_tungstenite::accept_async(io).await.expect("upgrade");
            Peer::Ws {
                ws: Box::new(ws),
                client: false,
            }
        }
        Back::Gone => panic!("the upstream is gone"),
    }
}

/// A tokio-tungstenite client of `url`, over rustls trusting `ca` for wss.
async fn ws_dial(url: &str, ca: Option<&PathBuf>) -> Peer {
    ws_try(url, ca).await.expect("101")
}

/// [`ws_dial`], with the upgrade's failure returned.
async fn ws_try(
    url: &str,
    ca: Option<&PathBuf>,
) -> Result<Peer, tokio_tungstenite::tungstenite::Error> {
    let addr = url
        .split_once("://")
        .and_then(|(_, r)| r.split('/').next())
        .expect("ws://ADDR/PATH");
    let io = timeout(DEADLINE, async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        match ca {
            None => Box::new(tcp) as BoxIo,
            Some(ca) => {
                let opts = TlsOpts {
                    ca: Some(ca.clone()),
                    ..TlsOpts::default()
                };
                let config = tls::client(&opts, &[]).expect("client TLS");
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await
                    .expect("TLS");
                Box::new(tls)
            }
        }
    })
    .await
    .expect("connected in time");
    let (ws, _) = timeout(DEADLINE, tokio_tungstenite::client_async(url, io))
        .await
        .expect("the upgrade answered in time")?;
    Ok(Peer::Ws {
        ws: Box::new(ws),
        client: true,
    })
}

// ---------------------------------------------------------------------------
// The cases, each for a (client side, upstream side) pair.

/// The upstream dies after a reply and half of another. A byte-stream upstream's
/// half is bytes: a byte-stream client gets them as sent, a WebSocket client gets
/// them as one last message; half a WebSocket frame is no message, and nothing of
/// it crosses. Then the client's connection ends cleanly; the proxy reports it.
async fn upstream_dies_mid_frame(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "observe").await;
    let (mut c, mut u) = r.pair().await;
    let second = reply("c:2");
    u.send(&reply("c:1")).await;
    u.die_mid_frame(&second).await;
    c.expect_text(&reply("c:1")).await;
    expect_half(&mut c, front, back, &second).await;
    c.expect_end(r.normal()).await;
    if back.is_ws() {
        // "… without a close frame", or under TLS "… without sending TLS close_notify".
        let note = r.p.note("upstream side:").await;
        assert!(note.contains("without"), "{note}");
    } else {
        r.p.until("the broken reply", |e| {
            e["dir"] == "down" && e["verdict"]["verdict"] != "ok"
        })
        .await;
    }
    drop(c);
    r.still_relays().await;
}

/// What `far` sees of `text` that its peer on `near` left half-written: a byte
/// stream's half goes on as sent (as one last message to a WebSocket); half a
/// WebSocket frame is no message, and nothing of it goes on.
async fn expect_half(far: &mut Peer, far_side: Side, near_side: Side, text: &str) {
    if near_side.is_ws() {
        return;
    }
    let half = text[..text.len() / 2].to_string();
    let want = if far_side.is_ws() {
        Got::Text(half)
    } else {
        Got::Partial(half)
    };
    assert_eq!(far.recv().await, want, "the half, as sent");
}

/// The client dies after a request and half of another: the mirror image.
async fn client_dies_mid_frame(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "observe").await;
    let (c, mut u) = r.pair().await;
    let second = request("c:2");
    c.die_mid_frame(&second).await;
    expect_half(&mut u, back, front, &second).await;
    u.expect_end(r.normal()).await;
    drop(u);
    r.still_relays().await;
}

/// The client ends first (shutdown, or a close frame) right after a request. The
/// upstream sees the request, then the end; the reply it sends after still reaches
/// the client, and then the client's connection ends.
async fn client_ends_first(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "enforce").await;
    let (mut c, mut u) = r.pair().await;
    c.end().await;
    if front.is_ws() {
        return websocket_client_ends_first(r, c, u).await;
    }
    if back.is_ws() {
        // A WebSocket cannot send after it answers a close, so the host replies
        // before it reads the one on its way.
        u.send(&reply("c:1")).await;
        u.expect_end(r.normal()).await;
    } else {
        u.expect_end(r.normal()).await;
        u.send(&reply("c:1")).await;
        u.end().await;
    }
    c.expect_text(&reply("c:1")).await;
    c.expect_end(r.normal()).await;
    drop((c, u));
    r.still_relays().await;
}

/// A WebSocket's close ends both directions (nothing can be sent to it after), so
/// the proxy answers it at once and ends the upstream; what the upstream still sends
/// is read, dropped and counted, never left unread.
async fn websocket_client_ends_first(mut r: Rig, mut c: Peer, mut u: Peer) {
    c.expect_end(r.normal()).await;
    u.expect_end(r.normal()).await;
    let late = reply("c:1");
    u.send(&late).await;
    u.end().await;
    let note = r.p.note("after the close: dropped").await;
    let from_upstream = count_in(&note, "from the upstream");
    assert_eq!(from_upstream, Some(late.len() + 1), "{note}");
    r.still_relays().await;
    // The end-of-run counters add the drop up.
    let summary = r.p.stop_and_summary().await;
    let discarded = summary
        .iter()
        .find_map(|l| count_in(l, "bytes discarded after a close"));
    assert_eq!(discarded, Some(late.len() + 1), "{summary:?}");
}

/// The number that opens the comma-separated part of `line` that holds `what`
/// ("…, 54 from the upstream" → 54).
fn count_in(line: &str, what: &str) -> Option<usize> {
    let part = line.split(", ").find(|p| p.contains(what))?;
    part.split_whitespace().next()?.parse().ok()
}

/// The upstream replies and ends first: the client gets the reply, then the end.
async fn upstream_ends_first(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "enforce").await;
    let (mut c, mut u) = r.pair().await;
    u.send(&reply("c:1")).await;
    u.end().await;
    c.expect_text(&reply("c:1")).await;
    c.expect_end(r.normal()).await;
    drop((c, u));
    r.still_relays().await;
}

/// Bytes a stalled path may take in: socket buffers on both hops and the proxy's own.
const MAX_IN_FLIGHT: usize = 32 << 20;
/// How much the proxy may grow while a stalled path is full.
const MAX_GROWTH_KIB: u64 = 16 << 10;

/// The upstream takes the connection and never reads: the client is pushed back
/// (its sends stall) long before the proxy holds more than a bounded amount.
async fn upstream_never_reads(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "observe").await;
    let (mut c, u) = r.pair().await;
    let rss0 = rss_kib(r.p.pid());
    let chunk = bulk(60_000);
    let mut sent = 0usize;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match timeout(Duration::from_millis(300), c.send(&chunk)).await {
            Ok(()) => sent += chunk.len(),
            Err(_) => break,
        }
    }
    let grew = rss_kib(r.p.pid()).saturating_sub(rss0);
    eprintln!("in before the push-back: {sent} bytes; the proxy grew {grew} KiB");
    assert!(
        sent < MAX_IN_FLIGHT,
        "never pushed back: {sent} bytes went in"
    );
    assert!(grew < MAX_GROWTH_KIB, "the proxy grew {grew} KiB");
    drop((c, u));
    r.still_relays().await;
}

/// An upstream that answers every request line or message, until each ends.
fn answering_upstream(r: &Rig) -> tokio::task::JoinHandle<()> {
    let up = r.up.clone();
    tokio::spawn(async move {
        loop {
            let mut u = accept_on(&up).await;
            tokio::spawn(async move {
                loop {
                    match u.recv().await {
                        Got::Text(t) => {
                            let v: Value = serde_json::from_str(&t).unwrap_or_default();
                            if let Some(id) = v["id"].as_str() {
                                u.send(&reply(id)).await;
                            }
                        }
                        // The next read sends the close's answer, then sees the end.
                        Got::Close(_) => continue,
                        _ => break,
                    }
                }
            });
        }
    })
}

/// One short connection: a request, its answer, the client's end, the proxy's.
async fn one_exchange(r: &mut Rig) {
    let mut c = r.dial().await;
    c.send(&request("c:1")).await;
    c.expect_text(&reply("c:1")).await;
    c.end().await;
    c.expect_end(r.normal()).await;
}

/// What the proxy may grow by over the measured churn.
const MAX_CHURN_GROWTH_KIB: u64 = 512;

/// Many short connections leave no file descriptor and no memory behind
/// (`harness::Churn`: memory judged by its trend, after a warm-up of `n`).
async fn churn(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "enforce").await;
    let answering = answering_upstream(&r);
    // A TLS handshake (about 25 ms in a debug build) or a process launch per
    // connection is dear: fewer of them.
    let n = match (front, back) {
        (Side::Wss, _) | (_, Side::Wss) => 500,
        (_, Side::Exec) => 1_000,
        _ => 5_000,
    };
    for _ in 0..n {
        one_exchange(&mut r).await;
    }
    let mut meter = Churn::start(r.p.pid()).await;
    for _ in 0..Churn::PHASES {
        for _ in 0..n {
            one_exchange(&mut r).await;
        }
        if meter.phase_ends_level(n, MAX_CHURN_GROWTH_KIB).await {
            answering.abort();
            return;
        }
    }
    meter.leaked(n)
}

/// The upstream is gone: the client is turned away cleanly (EOF, or close 1011 on
/// a WebSocket: the server could not do its part), and the proxy says why.
async fn upstream_gone(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "enforce").await;
    r.unplug().await;
    let tries = if front == Side::Stdio { 1 } else { 3 };
    for _ in 0..tries {
        if front.is_ws() {
            // The upgrade is answered by the gateway's status, before any WebSocket.
            let ca = (front == Side::Wss).then_some(&r.pki.ca);
            match ws_try(&r.listen, ca).await {
                Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                    assert_eq!(resp.status(), 502, "bad gateway");
                }
                other => panic!("a 502 answer, got {:?}", other.map(|_| "101")),
            }
            continue;
        }
        let mut c = r.dial().await;
        if front != Side::Stdio {
            c.send(&request("c:1")).await;
        }
        let code = if back == Side::Exec {
            // The child starts and exits at once: an upstream that ended, not one
            // that could not be reached.
            r.normal()
        } else {
            u16::from(CloseCode::Error)
        };
        c.expect_end(code).await;
    }
    let note = if back == Side::Exec {
        "exited"
    } else {
        "cannot connect"
    };
    r.p.note(note).await;
}

/// SIGTERM while the client streams: the proxy stops taking, writes on every frame
/// it took (each one it logged reaches the upstream, whole), ends both sides (1001
/// on a WebSocket) and exits 0.
async fn sigterm_mid_transfer(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "observe").await;
    let (mut c, mut u) = r.pair().await;
    let chunk = bulk(60_000);
    let total = TRANSFER / chunk.len();
    let sent = chunk.clone();
    let writer = tokio::spawn(async move {
        for _ in 0..total {
            if timeout(DEADLINE, c.send_lossy(&sent)).await != Ok(true) {
                break;
            }
        }
        c
    });
    let mut got = 0usize;
    let mut signalled = false;
    let end = loop {
        match u.recv().await {
            Got::Text(t) => {
                assert!(t == chunk, "a whole message or line, as sent");
                got += 1;
            }
            other => break other,
        }
        if !signalled && got * chunk.len() > TRANSFER / 5 {
            r.p.signal("TERM");
            signalled = true;
        }
    };
    assert!(signalled, "the transfer ended before the signal");
    let code = u16::from(CloseCode::Away);
    if back.is_ws() {
        assert_eq!(end, Got::Close(Some(code)), "the host gets 1001");
        // Answer it, as a host does.
        let _ = u.recv().await;
    } else {
        assert_eq!(end, Got::End, "the upstream gets EOF");
    }
    let st = r.p.exited().await;
    assert!(st.success(), "the proxy exits 0 on SIGTERM: {st}");
    let mut c = timeout(DEADLINE, writer)
        .await
        .expect("the client stops")
        .expect("join");
    if front.is_ws() {
        assert_eq!(
            c.recv_past_text().await,
            Got::Close(Some(code)),
            "1001 to the client"
        );
    }
    let up = r.p.logged_up("job.end").await;
    assert_eq!(
        up, got,
        "every frame the proxy logged going up reached the upstream"
    );
}

/// What the SIGTERM case streams (the signal goes at a fifth of it).
const TRANSFER: usize = 100 << 20;

impl Peer {
    /// `send`, reporting a failure instead of panicking (the peer may be gone).
    async fn send_lossy(&mut self, text: &str) -> bool {
        match self {
            Peer::Bytes { io, .. } => {
                let mut line = text.as_bytes().to_vec();
                line.push(b'\n');
                io.write_all(&line).await.is_ok()
            }
            Peer::Ws { ws, .. } => ws.send(Message::text(text)).await.is_ok(),
        }
    }

    /// The next thing seen that is not a text message.
    async fn recv_past_text(&mut self) -> Got {
        loop {
            match self.recv().await {
                Got::Text(_) => continue,
                other => return other,
            }
        }
    }
}

/// A WebSocket client sends a close frame and keeps sending: nothing after the close
/// reaches the upstream, which sees the lines before it and then EOF.
async fn client_keeps_sending_after_its_close(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "observe").await;
    let (mut c, mut u) = r.pair().await;
    c.end().await;
    if let Peer::Ws { ws, .. } = &mut c {
        for n in 0..3 {
            let text = request(&format!("after:{n}"));
            let mut frame = ws_frame_head(text.len(), true);
            frame.extend_from_slice(text.as_bytes());
            // The proxy may already have let go: a failed write is part of the case.
            let _ = ws.get_mut().write_all(&frame).await;
        }
    }
    u.expect_end(r.normal()).await;
    assert_eq!(
        c.recv().await,
        Got::Close(Some(r.normal())),
        "the close answer"
    );
    r.still_relays().await;
}

/// 200 connections each trickle their WebSocket upgrade (or TLS hello) a byte a
/// second; meanwhile another client is served as usual, and once they go the proxy
/// holds no file for them.
async fn slowloris(front: Side, back: Side) {
    let mut r = Rig::new(front, back, "enforce").await;
    let _up = answering_upstream(&r);
    one_exchange(&mut r).await;
    let pid = r.p.pid();
    let (fds0, _) = settled(pid, None).await;
    let opening = opening_bytes(&r);
    let addr = r
        .listen
        .split_once("://")
        .and_then(|(_, a)| a.split('/').next());
    let addr = addr.expect("ADDR").to_string();
    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        s.write_all(&opening[..1]).await.expect("a byte");
        slow.push(s);
    }
    for b in &opening[1..3] {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for s in &mut slow {
            // The proxy may have given up on it already: that is allowed.
            let _ = s.write_all(&[*b]).await;
        }
        one_exchange(&mut r).await;
    }
    drop(slow);
    let (fds, _) = settled(pid, Some(fds0)).await;
    assert_eq!(fds, fds0, "the slow connections left nothing open");
    one_exchange(&mut r).await;
}

const SLOW: usize = 200;

/// The first bytes a client sends: the upgrade request, or for wss a TLS ClientHello.
fn opening_bytes(r: &Rig) -> Vec<u8> {
    if r.front != Side::Wss {
        return b"GET /jobs HTTP/1.1\r\n".to_vec();
    }
    let opts = TlsOpts {
        ca: Some(r.pki.ca.clone()),
        ..TlsOpts::default()
    };
    let config = tls::client(&opts, &[]).expect("client TLS");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut conn = rustls::ClientConnection::new(config, name).expect("client");
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).expect("a ClientHello");
    hello
}

macro_rules! cases {
    ($pair:ident: $front:expr, $back:expr; $($case:ident)*) => {
        mod $pair {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() { super::$case($front, $back).await }
            )*
        }
    };
}

cases!(ws_to_unix: Side::Ws, Side::Unix;
    upstream_dies_mid_frame client_dies_mid_frame client_ends_first upstream_ends_first
    upstream_never_reads churn upstream_gone sigterm_mid_transfer
    client_keeps_sending_after_its_close slowloris);
cases!(wss_to_unix: Side::Wss, Side::Unix;
    upstream_dies_mid_frame client_dies_mid_frame client_ends_first upstream_ends_first
    upstream_never_reads churn upstream_gone sigterm_mid_transfer
    client_keeps_sending_after_its_close slowloris);
cases!(unix_to_ws: Side::Unix, Side::Ws;
    upstream_dies_mid_frame client_dies_mid_frame client_ends_first upstream_ends_first
    upstream_never_reads churn upstream_gone sigterm_mid_transfer);
cases!(unix_to_wss: Side::Unix, Side::Wss;
    upstream_dies_mid_frame client_dies_mid_frame client_ends_first upstream_ends_first
    upstream_never_reads churn upstream_gone sigterm_mid_transfer);
cases!(unix_to_exec: Side::Unix, Side::Exec;
    upstream_dies_mid_frame client_dies_mid_frame client_ends_first upstream_ends_first
    upstream_never_reads churn upstream_gone sigterm_mid_transfer);
cases!(stdio_to_unix: Side::Stdio, Side::Unix;
    upstream_dies_mid_frame client_dies_mid_frame client_ends_first upstream_ends_first
    upstream_never_reads upstream_gone sigterm_mid_transfer);
// SIGTERM to a stand-in in front of a child goes to the child (tests/process.rs).
cases!(stdio_to_exec: Side::Stdio, Side::Exec;
    upstream_dies_mid_frame client_dies_mid_frame client_ends_first upstream_ends_first
    upstream_gone);
