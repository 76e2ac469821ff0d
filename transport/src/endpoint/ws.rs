//! `ws://` and `wss://`, as server and as client, through tokio-tungstenite.
//!
//! The proxy must negotiate as if it were not there: a client's handshake is
//! read here but answered only once the upstream has answered ([`PendingWs`]),
//! so the upstream's 101 (with the subprotocol it chose), 401 or 426 reaches the
//! client as given. tungstenite's server handshake answers inside a synchronous
//! callback and cannot wait for an upstream, so the request head is read and
//! checked here (at most [`MAX_REQUEST_HEAD`] bytes, under a deadline) and the
//! 101 is written here; everything after the head is tungstenite's. Handshakes
//! run in their own tasks, so a client that never finishes its request cannot
//! hold up the others.
//!
//! Ping and pong are per hop: tungstenite answers pings, each side sends its own
//! every [`WsSettings::ping_interval`], and neither is relayed. Close frames are
//! relayed with their code and reason (1000, 4001…4009, anything valid).
//!
//! Size caps: tungstenite buffers at most [`MAX_MESSAGE_BYTES`] for one incoming
//! message or frame, so a hostile peer cannot make it allocate without bound; a
//! larger message is answered with close 1009 and an error. The contract's own,
//! smaller cap is the relay's to enforce.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore, mpsc};
use tokio::time::{Instant, Interval, MissedTickBehavior, timeout};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::{ProtocolError, SubProtocolError};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::{self, HeaderValue, header};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame as WsCloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};

use super::{EndpointError, Options};
use crate::conn::{BoxIo, BoxMsg, CloseFrame, Hello, HttpRefusal, Msg};

/// How often each side sends its own ping when nothing else is configured: the
/// toolchannel contract's `wsPingIntervalSeconds`.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);

/// The largest incoming message (and frame) tungstenite will buffer.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The largest HTTP request head a client may send before its upgrade is refused (431).
pub const MAX_REQUEST_HEAD: usize = 16 << 10;

/// How long a handshake may take: TLS, the request head, our answer, or the
/// whole client handshake towards an upstream.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// Handshakes in progress at once per listener; more clients wait in the kernel's
/// backlog. Each holds a task, its socket and a head buffer (with TLS, a session's
/// buffers too) for at most [`HANDSHAKE_DEADLINE`]. The budget is large because a
/// small one is a slowloris's target: 64 clients trickling their heads used to keep
/// every other client waiting out the deadline.
const MAX_PENDING_HANDSHAKES: usize = 1024;

/// Finished handshakes waiting for `accept`.
const ACCEPT_QUEUE: usize = 16;

/// The most headers a request head may carry.
const MAX_HEADERS: usize = 64;

/// The most of an upstream's refusal body relayed to the client.
const MAX_REFUSAL_BODY: usize = 64 << 10;

/// A close frame's reason is at most 123 bytes (125 minus the code).
const MAX_CLOSE_REASON: usize = 123;
/// Upgrade Required (RFC 7231 §6.5.15): RFC 6455's answer to a WebSocket version the
/// server does not speak, and this listener's to a subprotocol offer where the contract
/// names no status of its own.
const UPGRADE_REQUIRED: u16 = 426;

/// Unread bytes drained after a refusal, so the client reads the answer
/// instead of a reset.
const REFUSAL_DRAIN: usize = 64 << 10;

/// WebSocket tuning for one listener or connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsSettings {
    /// Send our own ping this often (`None`: never).
    pub ping_interval: Option<Duration>,
    /// Largest incoming message or frame tungstenite buffers.
    pub max_message_bytes: usize,
    /// Deadline for each handshake.
    pub handshake_deadline: Duration,
}

/// What a WebSocket connection reads at once. tungstenite allocates it for every
/// connection up front (two per proxied session), and grows it to hold a large frame, which
/// it then reads in chunks of this size: at 2 KiB an idle session costs 12 KiB less than at
/// 8 KiB, and a 64 KiB message costs no more to relay (`cargo bench -p contract-proxy
/// --bench relay`, its WebSocket part; docs/benchmarks.md).
pub const WS_READ_BUFFER: usize = 2 * 1024;
/// Small writes gather up to this before they reach the socket (the relay flushes
/// after each batch anyway).
pub const WS_WRITE_BUFFER: usize = 8 * 1024;

impl Default for WsSettings {
    fn default() -> Self {
        WsSettings {
            ping_interval: Some(DEFAULT_PING_INTERVAL),
            max_message_bytes: MAX_MESSAGE_BYTES,
            handshake_deadline: HANDSHAKE_DEADLINE,
        }
    }
}

impl WsSettings {
    fn config(&self) -> WebSocketConfig {
        // Small buffers to start with (tungstenite's default is 128 KiB each way, per
        // connection): an idle connection costs little, and they grow for a large message.
        let base = WebSocketConfig::default()
            .read_buffer_size(WS_READ_BUFFER)
            .write_buffer_size(WS_WRITE_BUFFER);
        // Writes queue only while the socket is blocked; the bound leaves room for one
        // whole message of the largest size on top of the usual batching buffer.
        let max_write = base
            .write_buffer_size
            .saturating_add(self.max_message_bytes)
            .saturating_add(64 << 10);
        base.max_message_size(Some(self.max_message_bytes))
            .max_frame_size(Some(self.max_message_bytes))
            .max_write_buffer_size(max_write)
    }
}

/// Why a WebSocket connect failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server answered the handshake with an HTTP refusal (401, 426…).
    #[error("refused: {0}")]
    Refused(HttpRefusal),
    /// Transport or protocol failure.
    #[error(transparent)]
    Io(io::Error),
    /// TLS set-up failure.
    #[error(transparent)]
    Tls(super::tls::TlsError),
}

/// Pick the subprotocol a listener answers with when the upstream is not a
/// WebSocket and cannot choose: the client's first offer that is `supported`.
/// With nothing supported configured, none is chosen; with no match, the
/// answer is `refused` (the contract's status; 426 Upgrade Required where it
/// names none) listing what is supported.
pub fn choose_subprotocol(
    offered: &[String],
    supported: &[String],
    refused: Option<u16>,
) -> Result<Option<String>, HttpRefusal> {
    if supported.is_empty() {
        return Ok(None);
    }
    if let Some(p) = offered.iter().find(|p| supported.contains(p)) {
        return Ok(Some(p.clone()));
    }
    let list = supported.join(", ");
    Err(HttpRefusal {
        status: refused.unwrap_or(UPGRADE_REQUIRED),
        headers: vec![
            ("Sec-WebSocket-Protocol".into(), list.clone()),
            ("Content-Type".into(), "text/plain; charset=utf-8".into()),
        ],
        body: Bytes::from(format!(
            "unsupported subprotocol: offered [{}], supported [{list}]\n",
            offered.join(", ")
        )),
    })
}

/// A WebSocket server.
pub struct WsListener {
    queue: Mutex<mpsc::Receiver<Accepted>>,
    local: String,
    fingerprint: Option<String>,
    cert_pem: Option<String>,
    acceptor: tokio::task::AbortHandle,
}

impl Drop for WsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// What [`WsListener::accept_next`] yields.
pub enum Accepted {
    /// A well-formed upgrade request, waiting for an answer.
    Pending(PendingWs),
    /// A client that was answered with an error (or dropped) by the listener itself.
    Rejected(Rejection),
}

/// A client the listener turned away, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Who connected (`?` when the accept itself failed).
    pub peer: String,
    /// The HTTP status it was given, if any was sent.
    pub status: Option<u16>,
    /// What was wrong.
    pub why: String,
}

/// A client whose handshake request has been read but not yet answered.
pub struct PendingWs {
    io: BoxIo,
    /// Bytes read past the request head (a client may pipeline its first frames).
    rest: Vec<u8>,
    key: String,
    hello: Hello,
    peer: String,
    settings: WsSettings,
}

impl WsListener {
    /// Bind `addr`, serving `path`.
    pub async fn bind(
        addr: &str,
        path: &str,
        tls: bool,
        opts: &Options,
    ) -> Result<Self, EndpointError> {
        Self::bind_with(addr, path, tls, opts, WsSettings::default()).await
    }

    /// [`WsListener::bind`] with explicit settings.
    pub async fn bind_with(
        addr: &str,
        path: &str,
        tls: bool,
        opts: &Options,
        settings: WsSettings,
    ) -> Result<Self, EndpointError> {
        let scheme = if tls { "wss" } else { "ws" };
        let (acceptor, fingerprint, cert_pem) = if tls {
            let st = super::tls::server(&opts.tls, &[b"http/1.1".to_vec()])?;
            (
                Some(TlsAcceptor::from(st.config)),
                Some(st.fingerprint),
                st.cert_pem,
            )
        } else {
            (None, None, None)
        };
        let listen_err = |source| EndpointError::Listen {
            endpoint: format!("{scheme}://{addr}{path}"),
            source,
        };
        let tcp = TcpListener::bind(addr).await.map_err(listen_err)?;
        let bound = tcp.local_addr().map_err(listen_err)?;
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        let job = Acceptor {
            tcp,
            path: path.to_string(),
            tls: acceptor,
            settings,
            tx,
        };
        let task = tokio::spawn(job.run());
        Ok(WsListener {
            queue: Mutex::new(rx),
            local: format!("{scheme}://{bound}{path}"),
            fingerprint,
            cert_pem,
            acceptor: task.abort_handle(),
        })
    }

    /// Where it listens (the real port when 0 was asked for).
    pub fn local(&self) -> String {
        self.local.clone()
    }

    /// SHA-256 fingerprint of the certificate a `wss` listener presents.
    pub fn fingerprint(&self) -> Option<&str> {
        self.fingerprint.as_deref()
    }

    /// The PEM of the certificate a `wss` listener generated for itself (none
    /// when `--cert` was given), for clients that trust it as their CA.
    pub fn cert_pem(&self) -> Option<&str> {
        self.cert_pem.as_deref()
    }

    /// The next well-formed upgrade request. Clients refused by the listener
    /// itself (400, 404, 431, timeouts) are skipped; use
    /// [`WsListener::accept_next`] to see (and log) them.
    pub async fn accept(&self) -> io::Result<PendingWs> {
        loop {
            if let Accepted::Pending(p) = self.accept_next().await? {
                return Ok(p);
            }
        }
    }

    /// The next client: a pending upgrade, or one the listener turned away.
    pub async fn accept_next(&self) -> io::Result<Accepted> {
        self.queue.lock().await.recv().await.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("{}: the acceptor stopped", self.local),
            )
        })
    }
}

/// The listener's background half: accepts TCP and runs each handshake in its own task.
struct Acceptor {
    tcp: TcpListener,
    path: String,
    tls: Option<TlsAcceptor>,
    settings: WsSettings,
    tx: mpsc::Sender<Accepted>,
}

impl Acceptor {
    async fn run(self) {
        let permits = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
        let path: Arc<str> = Arc::from(self.path.as_str());
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let (tcp, peer) = match self.tcp.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Resets before accept and descriptor exhaustion are both transient for a
                    // listener: report, back off a little instead of spinning, go on.
                    let r = Rejection {
                        peer: "?".into(),
                        status: None,
                        why: format!("accept failed: {e}"),
                    };
                    if self.tx.send(Accepted::Rejected(r)).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let tx = self.tx.clone();
            let tls = self.tls.clone();
            let path = path.clone();
            let settings = self.settings;
            tokio::spawn(async move {
                let _permit = permit;
                deliver(tx, handshake(tcp, peer, &path, tls, settings).await).await;
            });
        }
    }
}

/// Hand a finished handshake to `accept`, or, if nobody takes it within the
/// deadline, tell the client the proxy is busy.
async fn deliver(tx: mpsc::Sender<Accepted>, out: Accepted) {
    let deadline = match &out {
        Accepted::Pending(p) => p.settings.handshake_deadline,
        Accepted::Rejected(_) => HANDSHAKE_DEADLINE,
    };
    match timeout(deadline, tx.reserve()).await {
        Ok(Ok(slot)) => slot.send(out),
        // The listener is gone: its connections go with it.
        Ok(Err(_)) => {}
        Err(_) => {
            if let Accepted::Pending(p) = out {
                let busy = plain_refusal(503, "the proxy did not take the connection in time");
                // The client is told 503; there is no one left to tell that it was.
                let _ = p.refuse(&busy).await;
            }
        }
    }
}

/// TLS (for wss), then the request head, checked; refusals are answered here.
async fn handshake(
    tcp: TcpStream,
    peer: SocketAddr,
    path: &str,
    tls: Option<TlsAcceptor>,
    settings: WsSettings,
) -> Accepted {
    let peer = peer.to_string();
    let reject = |status: Option<u16>, why: String| {
        Accepted::Rejected(Rejection {
            peer: peer.clone(),
            status,
            why,
        })
    };
    if let Err(e) = tcp.set_nodelay(true) {
        return reject(None, format!("cannot set TCP_NODELAY: {e}"));
    }
    let work = async {
        let mut io: BoxIo = match tls {
            Some(a) => match a.accept(tcp).await {
                Ok(s) => Box::new(s),
                Err(e) => return reject(None, format!("TLS handshake failed: {e}")),
            },
            None => Box::new(tcp),
        };
        let (head, rest) = match read_head(&mut io).await {
            Ok(x) => x,
            Err(HeadError::Io(e)) => return reject(None, format!("reading the request: {e}")),
            Err(HeadError::Closed) => {
                return reject(None, "closed before a complete request head".into());
            }
            Err(HeadError::TooLarge) => {
                let r = plain_refusal(431, "request head too large");
                let sent = write_refusal(&mut io, &r).await;
                return reject(Some(431), outcome("request head too large", sent));
            }
        };
        match parse_upgrade(&head, path) {
            Ok((hello, key)) => Accepted::Pending(PendingWs {
                io,
                rest,
                key,
                hello,
                peer: peer.clone(),
                settings,
            }),
            Err(r) => {
                let why = String::from_utf8_lossy(&r.body).trim().to_string();
                let sent = write_refusal(&mut io, &r).await;
                reject(Some(r.status), outcome(&why, sent))
            }
        }
    };
    match timeout(settings.handshake_deadline, work).await {
        Ok(a) => a,
        Err(_) => reject(
            None,
            format!(
                "no complete handshake within {:?}",
                settings.handshake_deadline
            ),
        ),
    }
}

fn outcome(why: &str, sent: io::Result<()>) -> String {
    match sent {
        Ok(()) => why.to_string(),
        Err(e) => format!("{why} (answer not delivered: {e})"),
    }
}

enum HeadError {
    Io(io::Error),
    Closed,
    TooLarge,
}

/// Read until the blank line that ends an HTTP request head, at most
/// [`MAX_REQUEST_HEAD`] bytes. Returns the head and whatever followed it.
async fn read_head<S: AsyncRead + Unpin>(io: &mut S) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let room = MAX_REQUEST_HEAD - buf.len();
        if room == 0 {
            return Err(HeadError::TooLarge);
        }
        let want = room.min(chunk.len());
        let n = io.read(&mut chunk[..want]).await.map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + i + 4;
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
    }
}

fn plain_refusal(status: u16, why: &str) -> HttpRefusal {
    HttpRefusal {
        status,
        headers: vec![("Content-Type".into(), "text/plain; charset=utf-8".into())],
        body: Bytes::from(format!("{why}\n")),
    }
}

/// RFC 7230 `token`: what header names and subprotocol names are made of.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header value that can be written back without breaking the response.
fn is_safe_value(s: &str) -> bool {
    s.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// Whether a comma-separated header lists `token` (case-insensitively).
fn lists_token(values: &[&[u8]], token: &str) -> bool {
    values.iter().any(|v| {
        v.split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Check an HTTP request head as a WebSocket upgrade for `path` (RFC 6455 §4.2.1).
/// Returns what the client asked for and its `Sec-WebSocket-Key`, or the refusal to send.
pub fn parse_upgrade(head: &[u8], path: &str) -> Result<(Hello, String), HttpRefusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            return Err(plain_refusal(431, "too many request headers"));
        }
        _ => return Err(plain_refusal(400, "malformed HTTP request")),
    }
    let target = req.path.unwrap_or_default();
    let route = target.split('?').next().unwrap_or_default();
    if route != path {
        return Err(plain_refusal(404, &format!("no WebSocket at {route:?}")));
    }
    if req.method != Some("GET") || req.version != Some(1) {
        return Err(plain_refusal(400, "a WebSocket upgrade is an HTTP/1.1 GET"));
    }
    let all = |name: &str| -> Vec<&[u8]> {
        req.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
            .collect()
    };
    let one = |name: &str| -> Result<Option<&str>, HttpRefusal> {
        match all(name).as_slice() {
            [] => Ok(None),
            [v] => std::str::from_utf8(v)
                .ok()
                .filter(|s| is_safe_value(s))
                .map(|s| Some(s.trim()))
                .ok_or_else(|| plain_refusal(400, &format!("unreadable {name} header"))),
            _ => Err(plain_refusal(400, &format!("more than one {name} header"))),
        }
    };
    if !lists_token(&all("Upgrade"), "websocket") || !lists_token(&all("Connection"), "upgrade") {
        return Err(plain_refusal(
            400,
            "not a WebSocket upgrade (Upgrade: websocket and Connection: Upgrade are required)",
        ));
    }
    if one("Sec-WebSocket-Version")? != Some("13") {
        let mut r = plain_refusal(
            UPGRADE_REQUIRED,
            "unsupported WebSocket version (13 is spoken)",
        );
        r.headers
            .push(("Sec-WebSocket-Version".into(), "13".into()));
        return Err(r);
    }
    let key = one("Sec-WebSocket-Key")?
        .filter(|k| {
            // Base64 of 16 bytes: 22 characters and `==`.
            k.len() == 24
                && k.ends_with("==")
                && k[..22]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        })
        .ok_or_else(|| plain_refusal(400, "missing or malformed Sec-WebSocket-Key"))?
        .to_string();
    let mut subprotocols = Vec::new();
    for v in all("Sec-WebSocket-Protocol") {
        let text = std::str::from_utf8(v)
            .map_err(|_| plain_refusal(400, "unreadable Sec-WebSocket-Protocol header"))?;
        for p in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if !is_token(p) {
                return Err(plain_refusal(
                    400,
                    "malformed Sec-WebSocket-Protocol header",
                ));
            }
            subprotocols.push(p.to_string());
        }
    }
    let authorization = one("Authorization")?.map(str::to_string);
    Ok((
        Hello {
            path: target.to_string(),
            subprotocols,
            authorization,
        },
        key,
    ))
}

/// Headers a refusal never carries through: the proxy frames the response itself.
const HOP_BY_HOP: [&str; 4] = [
    "content-length",
    "connection",
    "transfer-encoding",
    "keep-alive",
];

/// Write `r` as an HTTP response and end the connection.
async fn write_refusal(io: &mut BoxIo, r: &HttpRefusal) -> io::Result<()> {
    // Only error statuses make sense here; anything else from a confused upstream becomes 502.
    let status = if (300..=599).contains(&r.status) {
        r.status
    } else {
        502
    };
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Refused");
    let body = &r.body[..r.body.len().min(MAX_REFUSAL_BODY)];
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n");
    for (k, v) in &r.headers {
        if is_token(k) && is_safe_value(v) && !HOP_BY_HOP.iter().any(|h| k.eq_ignore_ascii_case(h))
        {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    io.write_all(out.as_bytes()).await?;
    io.write_all(body).await?;
    io.flush().await?;
    io.shutdown().await?;
    // Closing with unread input makes the kernel send a reset, which can destroy the
    // answer before the client reads it; drain briefly first.
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    let drain = async {
        while drained < REFUSAL_DRAIN {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = timeout(Duration::from_millis(500), drain).await;
    Ok(())
}

impl PendingWs {
    /// What the client asked for.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Who connected.
    pub fn peer(&self) -> String {
        self.peer.clone()
    }

    /// Complete the handshake (101), choosing `subprotocol`.
    pub async fn accept(mut self, subprotocol: Option<&str>) -> io::Result<BoxMsg> {
        let mut head = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
            derive_accept_key(self.key.as_bytes())
        );
        if let Some(p) = subprotocol {
            if !is_token(p) {
                let r = plain_refusal(502, "the upstream chose a malformed subprotocol");
                self.refuse(&r).await?;
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("malformed subprotocol {p:?}"),
                ));
            }
            head.push_str(&format!("Sec-WebSocket-Protocol: {p}\r\n"));
        }
        head.push_str("\r\n");
        let deadline = self.settings.handshake_deadline;
        let write = async {
            self.io.write_all(head.as_bytes()).await?;
            self.io.flush().await
        };
        timeout(deadline, write).await.map_err(|_| {
            io::Error::new(io::ErrorKind::TimedOut, "writing the 101 answer timed out")
        })??;
        let ws = WebSocketStream::from_partially_read(
            self.io,
            self.rest,
            Role::Server,
            Some(self.settings.config()),
        )
        .await;
        Ok(Box::new(WsMsg::new(ws, self.settings.ping_interval)))
    }

    /// Answer the handshake with the upstream's refusal, then close.
    pub async fn refuse(mut self, refusal: &HttpRefusal) -> io::Result<()> {
        timeout(
            self.settings.handshake_deadline,
            write_refusal(&mut self.io, refusal),
        )
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "writing the refusal timed out"))?
    }
}

/// Connect to `addr` `path`, passing on the client's `hello`.
pub async fn connect(
    addr: &str,
    path: &str,
    tls: bool,
    opts: &Options,
    hello: Option<&Hello>,
) -> Result<(BoxMsg, Option<String>), ConnectError> {
    connect_with(addr, path, tls, opts, hello, WsSettings::default()).await
}

/// [`connect`] with explicit settings. Offers the client's subprotocols and
/// `Authorization` from `hello`, or, with no client handshake to pass on (the
/// client side is not a WebSocket), `opts.subprotocols` and no `Authorization`.
/// Returns the subprotocol the server chose.
pub async fn connect_with(
    addr: &str,
    path: &str,
    tls: bool,
    opts: &Options,
    hello: Option<&Hello>,
    settings: WsSettings,
) -> Result<(BoxMsg, Option<String>), ConnectError> {
    match timeout(
        settings.handshake_deadline,
        connect_inner(addr, path, tls, opts, hello, settings),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(ConnectError::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("WebSocket handshake with {addr} timed out"),
        ))),
    }
}

/// The request target upstream: its own path, plus the client's query string
/// when the upstream path has none (tokens and session ids often ride there).
fn upstream_target(path: &str, client_target: Option<&str>) -> String {
    match client_target.and_then(|t| t.split_once('?')) {
        Some((_, q)) if !path.contains('?') => format!("{path}?{q}"),
        _ => path.to_string(),
    }
}

fn invalid_input(what: String) -> ConnectError {
    ConnectError::Io(io::Error::new(io::ErrorKind::InvalidInput, what))
}

async fn connect_inner(
    addr: &str,
    path: &str,
    tls: bool,
    opts: &Options,
    hello: Option<&Hello>,
    settings: WsSettings,
) -> Result<(BoxMsg, Option<String>), ConnectError> {
    let scheme = if tls { "wss" } else { "ws" };
    let target = upstream_target(path, hello.map(|h| h.path.as_str()));
    let mut request = format!("{scheme}://{addr}{target}")
        .into_client_request()
        .map_err(|e| invalid_input(format!("bad WebSocket URL: {e}")))?;
    let (protocols, auth) = match hello {
        Some(h) => (h.subprotocols.as_slice(), h.authorization.as_deref()),
        None => (opts.subprotocols.as_slice(), None),
    };
    if !protocols.is_empty() {
        let v = HeaderValue::from_str(&protocols.join(", "))
            .map_err(|_| invalid_input("malformed subprotocol list".into()))?;
        request
            .headers_mut()
            .insert(header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    if let Some(a) = auth {
        let mut v = HeaderValue::from_str(a)
            .map_err(|_| invalid_input("malformed Authorization header".into()))?;
        v.set_sensitive(true);
        request.headers_mut().insert(header::AUTHORIZATION, v);
    }
    let client_tls = if tls {
        Some(super::tls::client(&opts.tls, &[b"http/1.1".to_vec()]).map_err(ConnectError::Tls)?)
    } else {
        None
    };
    let tcp = TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
    tcp.set_nodelay(true).map_err(ConnectError::Io)?;
    let io: BoxIo = match client_tls {
        Some(cfg) => {
            let host = super::tls_host(addr).unwrap_or(addr);
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| invalid_input(format!("bad TLS server name {host:?}: {e}")))?;
            Box::new(
                TlsConnector::from(cfg)
                    .connect(name, tcp)
                    .await
                    .map_err(ConnectError::Io)?,
            )
        }
        None => Box::new(tcp),
    };
    match tokio_tungstenite::client_async_with_config(request, io, Some(settings.config())).await {
        Ok((ws, resp)) => {
            let chosen = resp
                .headers()
                .get(header::SEC_WEBSOCKET_PROTOCOL)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Ok((Box::new(WsMsg::new(ws, settings.ping_interval)), chosen))
        }
        Err(tungstenite::Error::Http(resp)) => Err(ConnectError::Refused(refusal_from(&resp))),
        Err(tungstenite::Error::Protocol(ProtocolError::SecWebSocketSubProtocolError(
            SubProtocolError::NoSubProtocol,
        ))) => Err(ConnectError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the upstream accepted without choosing any of the offered subprotocols [{}]",
                protocols.join(", ")
            ),
        ))),
        Err(e) => Err(ConnectError::Io(ws_io_error(e))),
    }
}

/// The parts of an upstream's refusal the client needs to decide what to do.
fn refusal_from(resp: &http::Response<Option<Vec<u8>>>) -> HttpRefusal {
    const KEEP: [&str; 6] = [
        "Sec-WebSocket-Protocol",
        "Sec-WebSocket-Version",
        "WWW-Authenticate",
        "Content-Type",
        "Retry-After",
        "Upgrade",
    ];
    let mut headers = Vec::new();
    for name in KEEP {
        for v in resp.headers().get_all(name) {
            if let Ok(v) = v.to_str() {
                headers.push((name.to_string(), v.to_string()));
            }
        }
    }
    let body = resp
        .body()
        .as_deref()
        .map(|b| Bytes::copy_from_slice(&b[..b.len().min(MAX_REFUSAL_BODY)]))
        .unwrap_or_default();
    HttpRefusal {
        status: resp.status().as_u16(),
        headers,
        body,
    }
}

fn ws_io_error(e: tungstenite::Error) -> io::Error {
    use tungstenite::Error as E;
    match e {
        E::Io(e) => e,
        E::ConnectionClosed | E::AlreadyClosed => {
            io::Error::new(io::ErrorKind::BrokenPipe, "the WebSocket is closed")
        }
        E::Protocol(ProtocolError::ResetWithoutClosingHandshake) => io::Error::new(
            io::ErrorKind::ConnectionReset,
            "the peer dropped the connection without a close frame",
        ),
        other => io::Error::new(io::ErrorKind::InvalidData, format!("WebSocket: {other}")),
    }
}

/// A tungstenite stream seen as [`Msg`]s: pings are answered and sent here, not surfaced.
struct WsMsg {
    ws: WebSocketStream<BoxIo>,
    ping: Option<Interval>,
    /// A pong or ping is queued in tungstenite and must be flushed.
    flush_pending: bool,
    close_sent: bool,
    close_received: bool,
    /// A close code that cannot go on the wire (1006, 1015) was relayed: end the
    /// transport without a close frame, which is how the far peer sees it too.
    abort: bool,
    abort_flushed: bool,
    /// The transport has been shut down after the close handshake.
    shut: bool,
}

impl WsMsg {
    fn new(ws: WebSocketStream<BoxIo>, every: Option<Duration>) -> Self {
        let ping = every.filter(|d| !d.is_zero()).map(|d| {
            let mut iv = tokio::time::interval_at(Instant::now() + d, d);
            iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
            iv
        });
        WsMsg {
            ws,
            ping,
            flush_pending: false,
            close_sent: false,
            close_received: false,
            abort: false,
            abort_flushed: false,
            shut: false,
        }
    }

    /// Queue our own ping when the interval is due. A blocked writer skips the
    /// ping: the next tick tries again, and traffic is flowing anyway.
    fn poll_ping(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(iv) = self.ping.as_mut() else {
            return Ok(());
        };
        let mut due = false;
        while iv.poll_tick(cx).is_ready() {
            due = true;
        }
        if !due || self.close_sent || self.close_received || self.abort {
            return Ok(());
        }
        if let Poll::Ready(r) = Pin::new(&mut self.ws).poll_ready(cx) {
            r.map_err(ws_io_error)?;
            Pin::new(&mut self.ws)
                .start_send(Message::Ping(Bytes::new()))
                .map_err(ws_io_error)?;
            self.flush_pending = true;
        }
        Ok(())
    }

    /// After a peer's message was too big: tell it with 1009, best effort (the
    /// error goes to the relay either way, and the relay's close flushes it).
    fn send_too_big(&mut self, cx: &mut Context<'_>) {
        if self.close_sent || self.close_received {
            return;
        }
        self.close_sent = true;
        let frame = WsCloseFrame {
            code: CloseCode::Size,
            reason: Utf8Bytes::from_static("message too big"),
        };
        if let Poll::Ready(Ok(())) = Pin::new(&mut self.ws).poll_ready(cx)
            && Pin::new(&mut self.ws)
                .start_send(Message::Close(Some(frame)))
                .is_ok()
        {
            self.flush_pending = true;
            let _ = Pin::new(&mut self.ws).poll_flush(cx);
        }
    }

    fn poll_abort(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.abort_flushed {
            let r = futures_util::ready!(Pin::new(&mut self.ws).poll_flush(cx));
            self.abort_flushed = true;
            r.map_err(ws_io_error)?;
        }
        Pin::new(self.ws.get_mut()).poll_shutdown(cx)
    }
}

impl Stream for WsMsg {
    type Item = io::Result<Msg>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Err(e) = this.poll_ping(cx) {
            return Poll::Ready(Some(Err(e)));
        }
        loop {
            if this.flush_pending {
                match Pin::new(&mut this.ws).poll_flush(cx) {
                    Poll::Ready(Ok(())) => this.flush_pending = false,
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(ws_io_error(e)))),
                    // The write waker is registered; reading goes on meanwhile.
                    Poll::Pending => {}
                }
            }
            let msg = match futures_util::ready!(Pin::new(&mut this.ws).poll_next(cx)) {
                None => {
                    // The close handshake is complete. The server must end the TCP
                    // connection first (RFC 6455 §7.1.1) and the client waits for it,
                    // so end it now rather than when the relay drops both halves.
                    if !this.shut {
                        // The connection is over either way; a failed shutdown
                        // (peer already gone) changes nothing for the relay.
                        let _ = futures_util::ready!(Pin::new(this.ws.get_mut()).poll_shutdown(cx));
                        this.shut = true;
                    }
                    return Poll::Ready(None);
                }
                Some(Ok(m)) => m,
                // Once the peer's close frame is in, the conversation is over: a
                // transport that then ends uncleanly (no TLS close_notify, a reset)
                // loses nothing.
                Some(Err(_)) if this.close_received => return Poll::Ready(None),
                Some(Err(e)) => {
                    if matches!(e, tungstenite::Error::Capacity(_)) {
                        this.send_too_big(cx);
                    }
                    return Poll::Ready(Some(Err(ws_io_error(e))));
                }
            };
            return Poll::Ready(Some(Ok(match msg {
                Message::Text(t) => Msg::Text(Bytes::from(t)),
                Message::Binary(b) => Msg::Binary(b),
                Message::Close(f) => {
                    this.close_received = true;
                    Msg::Close(f.map(|f| CloseFrame {
                        code: u16::from(f.code),
                        reason: f.reason.as_str().to_string(),
                    }))
                }
                // tungstenite has queued the pong; it goes out with the flush above.
                Message::Ping(_) => {
                    this.flush_pending = true;
                    continue;
                }
                Message::Pong(_) | Message::Frame(_) => continue,
            })));
        }
    }
}

/// Cut a close reason to what fits in a close frame, on a character boundary.
fn close_reason(reason: &str) -> Utf8Bytes {
    let mut end = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Utf8Bytes::from(&reason[..end])
}

impl Sink<Msg> for WsMsg {
    type Error = io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.abort {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.ws).poll_ready(cx).map_err(ws_io_error)
    }

    fn start_send(self: Pin<&mut Self>, msg: Msg) -> io::Result<()> {
        let this = self.get_mut();
        if this.abort {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the WebSocket was ended without a close frame",
            ));
        }
        let m = match msg {
            Msg::Text(b) => Message::Text(Utf8Bytes::try_from(b).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, "text message is not UTF-8")
            })?),
            Msg::Binary(b) => Message::Binary(b),
            Msg::Close(f) => {
                if this.close_sent || this.close_received {
                    // Either we closed already, or the peer did and tungstenite has
                    // answered it with the same code: the handshake is complete.
                    return Ok(());
                }
                this.close_sent = true;
                match f {
                    None | Some(CloseFrame { code: 1005, .. }) => Message::Close(None),
                    Some(CloseFrame {
                        code: 1006 | 1015, ..
                    }) => {
                        this.abort = true;
                        return Ok(());
                    }
                    Some(CloseFrame { code, reason }) => {
                        let code = CloseCode::from(code);
                        if !code.is_allowed() {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidInput,
                                format!("close code {} cannot be sent", u16::from(code)),
                            ));
                        }
                        Message::Close(Some(WsCloseFrame {
                            code,
                            reason: close_reason(&reason),
                        }))
                    }
                }
            }
        };
        Pin::new(&mut this.ws).start_send(m).map_err(ws_io_error)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.abort {
            return this.poll_abort(cx);
        }
        let r = futures_util::ready!(Pin::new(&mut this.ws).poll_flush(cx));
        this.flush_pending = false;
        Poll::Ready(r.map_err(ws_io_error))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.abort {
            return this.poll_abort(cx);
        }
        if !this.close_sent && !this.close_received {
            // tungstenite's own close sends no code (1005 at the peer); the contract
            // of `Sink::close` is a normal close.
            futures_util::ready!(Pin::new(&mut this.ws).poll_ready(cx)).map_err(ws_io_error)?;
            this.close_sent = true;
            let frame = WsCloseFrame {
                code: CloseCode::Normal,
                reason: Utf8Bytes::default(),
            };
            Pin::new(&mut this.ws)
                .start_send(Message::Close(Some(frame)))
                .map_err(ws_io_error)?;
        }
        match futures_util::ready!(Pin::new(&mut this.ws).poll_close(cx)) {
            // Both closes have crossed already: nothing is left to do.
            Ok(())
            | Err(tungstenite::Error::AlreadyClosed | tungstenite::Error::ConnectionClosed) => {
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(ws_io_error(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(lines: &[&str]) -> Vec<u8> {
        let mut s = lines.join("\r\n");
        s.push_str("\r\n\r\n");
        s.into_bytes()
    }

    const KEY: &str = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==";

    #[test]
    fn a_good_upgrade_yields_its_hello() {
        let h = head(&[
            "GET /worker?s=1 HTTP/1.1",
            "Host: x",
            "Upgrade: WebSocket",
            "Connection: keep-alive, Upgrade",
            KEY,
            "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Protocol: agentfy.worker.v2, agentfy.worker.v1",
            "Sec-WebSocket-Protocol: other",
            "Authorization: Bearer t0k",
        ]);
        let (hello, key) = parse_upgrade(&h, "/worker").expect("valid");
        assert_eq!(key, "dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(hello.path, "/worker?s=1");
        assert_eq!(
            hello.subprotocols,
            ["agentfy.worker.v2", "agentfy.worker.v1", "other"]
        );
        assert_eq!(hello.authorization.as_deref(), Some("Bearer t0k"));
        // RFC 6455 §1.3's worked example.
        assert_eq!(
            derive_accept_key(key.as_bytes()),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn bad_upgrades_get_their_statuses() {
        let status =
            |lines: &[&str], path: &str| parse_upgrade(&head(lines), path).err().map(|r| r.status);
        let base = [
            "GET / HTTP/1.1",
            "Upgrade: websocket",
            "Connection: Upgrade",
            KEY,
            "Sec-WebSocket-Version: 13",
        ];
        assert_eq!(status(&base, "/"), None);
        assert_eq!(status(&base, "/other"), Some(404));
        let mut post = base;
        post[0] = "POST / HTTP/1.1";
        assert_eq!(status(&post, "/"), Some(400));
        assert_eq!(status(&base[..2], "/"), Some(400), "no Connection: Upgrade");
        let mut v8 = base;
        v8[4] = "Sec-WebSocket-Version: 8";
        let r = parse_upgrade(&head(&v8), "/").expect_err("426");
        assert_eq!(r.status, 426);
        assert!(
            r.headers
                .contains(&("Sec-WebSocket-Version".into(), "13".into()))
        );
        let mut badkey = base;
        badkey[3] = "Sec-WebSocket-Key: short";
        assert_eq!(status(&badkey, "/"), Some(400));
        let mut twoauth = base.to_vec();
        twoauth.extend(["Authorization: a", "Authorization: b"]);
        assert_eq!(status(&twoauth, "/"), Some(400));
        let mut badproto = base.to_vec();
        badproto.push("Sec-WebSocket-Protocol: a b");
        assert_eq!(status(&badproto, "/"), Some(400));
        assert_eq!(
            parse_upgrade(b"\x00\x01garbage\r\n\r\n", "/")
                .err()
                .map(|r| r.status),
            Some(400)
        );
    }

    /// Found by the ws_upgrade fuzz target: a tab inside a field value is HTTP and is
    /// passed on as it came; a CR or LF inside one never gets through.
    #[test]
    fn field_values_keep_tabs_and_never_carry_line_breaks() {
        let mut lines = vec![
            "GET /worker HTTP/1.1",
            "Upgrade: websocket",
            "Connection: Upgrade",
            KEY,
            "Sec-WebSocket-Version: 13",
            "Authorization: Bea\ter t0k",
        ];
        let (hello, _) = parse_upgrade(&head(&lines), "/worker").expect("a tab is allowed");
        assert_eq!(hello.authorization.as_deref(), Some("Bea\ter t0k"));
        lines[5] = "Authorization: a\rX-Injected: 1";
        let got = parse_upgrade(&head(&lines), "/worker");
        assert!(
            got.as_ref()
                .map(|(h, _)| h.authorization.as_deref().is_none_or(|a| !a.contains('\r')))
                .unwrap_or(true),
            "{got:?}"
        );
    }

    #[test]
    fn subprotocol_choice() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(choose_subprotocol(&s(&["a"]), &[], None), Ok(None));
        assert_eq!(
            choose_subprotocol(&s(&["x", "b", "a"]), &s(&["a", "b"]), None),
            Ok(Some("b".into())),
            "the client's order wins"
        );
        let r = choose_subprotocol(&s(&["v2"]), &s(&["v1", "v0"]), None).expect_err("refused");
        assert_eq!(r.status, UPGRADE_REQUIRED);
        assert!(
            r.headers
                .contains(&("Sec-WebSocket-Protocol".into(), "v1, v0".into()))
        );
        assert!(choose_subprotocol(&[], &s(&["v1"]), None).is_err());
        // A contract's own status wins over the default.
        let r = choose_subprotocol(&s(&["v2"]), &s(&["v1"]), Some(400)).expect_err("refused");
        assert_eq!(r.status, 400);
    }

    #[test]
    fn targets_and_reasons() {
        assert_eq!(upstream_target("/up", Some("/in?s=1")), "/up?s=1");
        assert_eq!(upstream_target("/up?a=b", Some("/in?s=1")), "/up?a=b");
        assert_eq!(upstream_target("/up", None), "/up");
        let long = "é".repeat(100);
        let r = close_reason(&long);
        assert!(r.len() <= MAX_CLOSE_REASON && r.len().is_multiple_of(2));
    }
}
