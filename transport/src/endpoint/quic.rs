//! `quic://HOST:PORT` through quinn: each relayed connection is one
//! bidirectional stream; the ALPN names the contract and its major version.
//!
//! The listener presents `--cert/--key` or a fresh self-signed certificate (its
//! SHA-256 is [`QuicListener::fingerprint`], for clients' `--pin`); a client
//! offering another ALPN fails the handshake. Handshakes run in the background,
//! so a slow or failing client never holds up the next one: [`QuicListener::accept`]
//! only returns streams that are ready, and fails only when the endpoint is gone.
//!
//! A connection carries exactly one bidirectional stream, opened by the
//! client. A QUIC stream becomes visible to the server with its first byte, so
//! the client side must speak first (true of every contract relayed so far); a
//! server-speaks-first protocol would wait at accept until the client writes.
//!
//! [`QuicStream`] holds its connection (and, client side, its endpoint) for as
//! long as it lives, `shutdown` finishes the send stream (a half-close, as on
//! TCP), and dropping it lingers in the background until the peer has
//! acknowledged everything sent, so closing the connection loses no data.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Mutex, Semaphore, mpsc};

use super::tls::{self, TlsError};
use super::{CONNECT_DEADLINE, EndpointError, Options};
use crate::conn::{BoxIo, CloseCode};

/// How long a client has to finish its handshake and open its stream.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further clients are refused until one ends.
pub const MAX_PENDING: usize = 64;

/// The first pause before dialing again a server that refused the handshake;
/// it doubles up to [`REFUSED_MAX_PAUSE`], all within the dial's deadline.
const REFUSED_FIRST_PAUSE: Duration = Duration::from_millis(10);
const REFUSED_MAX_PAUSE: Duration = Duration::from_millis(250);
/// Connections past their handshake still waiting to open their stream. A QUIC
/// stream shows only with its first byte, so a client that connects and has not
/// spoken yet (a proxy in front of this one, holding a half-received frame) waits
/// here, under its own budget, instead of blocking new handshakes.
pub const MAX_WAITING: usize = 1024;
/// Ready streams waiting for `accept`.
const READY_QUEUE: usize = 16;
/// How long a dropped stream waits for the peer to acknowledge what was sent.
pub const LINGER: Duration = Duration::from_secs(5);
/// Keep-alives make an idle relayed session outlive quinn's idle timeout.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

fn transport(streams: u8) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    // Only the client opens a stream, and only one: the peer gets no credit for more.
    t.max_concurrent_bidi_streams(streams.into())
        .max_concurrent_uni_streams(0u8.into())
        .keep_alive_interval(Some(KEEP_ALIVE));
    Arc::new(t)
}

fn alpn(opts: &Options) -> Result<Vec<Vec<u8>>, TlsError> {
    if opts.alpn.is_empty() {
        return Err(TlsError::Quic(
            "no ALPN protocol id (the contract name and major version, e.g. kernel/1)".into(),
        ));
    }
    Ok(vec![opts.alpn.clone()])
}

/// A QUIC server endpoint.
pub struct QuicListener {
    endpoint: quinn::Endpoint,
    local: SocketAddr,
    fingerprint: String,
    cert_pem: Option<String>,
    ready: Mutex<mpsc::Receiver<(QuicStream, SocketAddr)>>,
    failed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl QuicListener {
    /// Bind `addr` with TLS from `opts` and start taking handshakes.
    ///
    /// Must run inside a tokio runtime. A host name is resolved here, blocking,
    /// once at start-up; the first address it yields is bound.
    pub fn bind(addr: &str, opts: &Options) -> Result<Self, EndpointError> {
        let err = |source| EndpointError::Listen {
            endpoint: format!("quic://{addr}"),
            source,
        };
        let sock = match addr.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => addr.to_socket_addrs().map_err(err)?.next().ok_or_else(|| {
                err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "host has no address",
                ))
            })?,
        };
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| err(io::Error::other(format!("needs a tokio runtime: {e}"))))?;
        let made = tls::server(&opts.tls, &alpn(opts)?)?;
        let crypto =
            QuicServerConfig::try_from(made.config).map_err(|e| TlsError::Quic(e.to_string()))?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(transport(1));
        let endpoint = quinn::Endpoint::server(config, sock).map_err(err)?;
        let local = endpoint.local_addr().map_err(err)?;
        let (tx, rx) = mpsc::channel(READY_QUEUE);
        let failed = Arc::new(AtomicU64::new(0));
        let task = runtime.spawn(accept_loop(endpoint.clone(), tx, failed.clone()));
        Ok(QuicListener {
            endpoint,
            local,
            fingerprint: made.fingerprint,
            cert_pem: made.cert_pem,
            ready: Mutex::new(rx),
            failed,
            task,
        })
    }

    /// Where it listens: `quic://IP:PORT`, with the real port when 0 was asked for.
    pub fn local(&self) -> String {
        format!("quic://{}", self.local)
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// SHA-256 of the certificate presented, uppercase hex with `:` (what clients `--pin`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The generated certificate as PEM (None when it came from `--cert`), for
    /// peers that trust a CA file rather than a fingerprint.
    pub fn cert_pem(&self) -> Option<&str> {
        self.cert_pem.as_deref()
    }

    /// Clients dropped so far: failed or timed-out handshakes, no stream within
    /// [`HANDSHAKE_DEADLINE`], refused because [`MAX_PENDING`] were in progress, or closed
    /// because [`MAX_WAITING`] connections were already waiting to open their stream.
    pub fn failed_handshakes(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// The next connection's first bidirectional stream, and the peer address.
    ///
    /// A client whose handshake fails is counted in [`Self::failed_handshakes`]
    /// and skipped; this fails only when the endpoint has stopped.
    pub async fn accept(&self) -> io::Result<(BoxIo, String)> {
        match self.ready.lock().await.recv().await {
            Some((stream, peer)) => Ok((Box::new(stream), peer.to_string())),
            None => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the QUIC endpoint has stopped",
            )),
        }
    }
}

impl Drop for QuicListener {
    fn drop(&mut self) {
        self.task.abort();
        // New clients are refused; streams already handed out keep their connections.
        self.endpoint.set_server_config(None);
    }
}

async fn accept_loop(
    endpoint: quinn::Endpoint,
    ready: mpsc::Sender<(QuicStream, SocketAddr)>,
    failed: Arc<AtomicU64>,
) {
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
    let waiting = Arc::new(Semaphore::new(MAX_WAITING));
    while let Some(incoming) = endpoint.accept().await {
        let Ok(permit) = pending.clone().try_acquire_owned() else {
            incoming.refuse();
            failed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let ready = ready.clone();
        let failed = failed.clone();
        let waiting = waiting.clone();
        tokio::spawn(async move {
            let peer = incoming.remote_address();
            let first = async {
                let conn = incoming.await.ok()?;
                drop(permit);
                // Held until the stream is queued: waiting streams count, apart.
                let Ok(_waiting) = waiting.try_acquire_owned() else {
                    conn.close(0u8.into(), b"too many connections waiting to speak");
                    return None;
                };
                let (send, recv) = conn.accept_bi().await.ok()?;
                Some(QuicStream::new(conn, send, recv, None))
            };
            match tokio::time::timeout(HANDSHAKE_DEADLINE, first).await {
                // A send error means the listener is gone; the stream's drop closes it.
                Ok(Some(stream)) => drop(ready.send((stream, peer)).await),
                _ => {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}

/// Connect to `addr` and open one bidirectional stream.
///
/// The TLS server name is the host part as written: an IP literal is checked
/// against the certificate's IP addresses (the self-signed one covers
/// 127.0.0.1 and ::1), a name against its DNS names; with `--pin` only the
/// fingerprint counts. Each resolved address is tried in turn.
pub async fn connect(addr: &str, opts: &Options) -> Result<BoxIo, EndpointError> {
    let err = |source| EndpointError::Connect {
        endpoint: format!("quic://{addr}"),
        source,
    };
    let host = super::tls_host(addr).ok_or_else(|| {
        err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "needs HOST:PORT",
        ))
    })?;
    let tls = tls::client(&opts.tls, &alpn(opts)?)?;
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport(0));
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr).await.map_err(err)?.collect();
    let per_try = CONNECT_DEADLINE / u32::try_from(addrs.len().max(1)).unwrap_or(u32::MAX);
    let mut last = io::Error::new(io::ErrorKind::NotFound, "host has no address");
    for to in addrs {
        let opening = open(to, host, config.clone(), &opts.quic_clients);
        match tokio::time::timeout(per_try, opening).await {
            Ok(Ok(stream)) => return Ok(Box::new(stream)),
            Ok(Err(e)) => last = e,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "QUIC handshake timed out"),
        }
    }
    Err(err(last))
}

async fn open(
    to: SocketAddr,
    host: &str,
    config: quinn::ClientConfig,
    clients: &ClientEndpoints,
) -> io::Result<QuicStream> {
    let endpoint = clients.for_address(to)?;
    let mut pause = REFUSED_FIRST_PAUSE;
    let conn = loop {
        let connecting = endpoint
            .connect_with(config.clone(), to, host)
            .map_err(io::Error::other)?;
        match connecting.await {
            Ok(conn) => break conn,
            // A server at its handshake cap (ours: MAX_PENDING) refuses; that is
            // "busy, come back", so try again until the caller's deadline.
            Err(quinn::ConnectionError::ConnectionClosed(c))
                if c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(REFUSED_MAX_PAUSE);
            }
            Err(e) => return Err(io::Error::other(e)),
        }
    };
    let (send, recv) = conn.open_bi().await.map_err(io::Error::other)?;
    Ok(QuicStream::new(conn, send, recv, Some(clients.clone())))
}

/// The client endpoints (one per address family) that the QUIC connections made with
/// one [`Options`] share: one UDP socket and one driver for a route's upstream
/// connections, where each connection used to open its own (memory and a socket
/// per connection). Clones share them.
#[derive(Clone, Default)]
pub struct ClientEndpoints(Arc<std::sync::Mutex<[Option<quinn::Endpoint>; 2]>>);

impl std::fmt::Debug for ClientEndpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientEndpoints")
    }
}

impl ClientEndpoints {
    fn for_address(&self, to: SocketAddr) -> io::Result<quinn::Endpoint> {
        let mut slots = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = &mut slots[usize::from(to.is_ipv6())];
        if let Some(e) = slot {
            return Ok(e.clone());
        }
        let bind: SocketAddr = if to.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let e = quinn::Endpoint::client(bind)?;
        *slot = Some(e.clone());
        Ok(e)
    }

    /// Whether nothing but the caller holds these endpoints (the options that made
    /// them are gone): then a closing connection must keep them until it is sent.
    fn is_last(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    async fn wait_idle(&self) {
        let endpoints: Vec<quinn::Endpoint> = {
            let slots = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            slots.iter().flatten().cloned().collect()
        };
        for e in endpoints {
            e.wait_idle().await;
        }
    }
}

/// One QUIC bidirectional stream as a byte stream, owning its connection.
pub struct QuicStream {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    conn: quinn::Connection,
    /// A client's endpoints, kept so their driver outlives the stream.
    endpoint: Option<ClientEndpoints>,
    finished: bool,
    /// The application error code the connection closes with (0 unless set).
    close: CloseCode,
}

/// The close code slot of a QUIC stream, or `None` for any other byte stream.
pub fn close_code(io: &BoxIo) -> Option<CloseCode> {
    let any: &dyn std::any::Any = io.as_ref();
    any.downcast_ref::<QuicStream>().map(|q| q.close.clone())
}

impl QuicStream {
    fn new(
        conn: quinn::Connection,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        endpoint: Option<ClientEndpoints>,
    ) -> Self {
        QuicStream {
            send,
            recv,
            conn,
            endpoint,
            finished: false,
            close: CloseCode::default(),
        }
    }

    /// The connection under this stream.
    pub fn connection(&self) -> &quinn::Connection {
        &self.conn
    }
}

impl AsyncRead for QuicStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for QuicStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        AsyncWrite::poll_write(Pin::new(&mut self.get_mut().send), cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncWrite::poll_flush(Pin::new(&mut self.get_mut().send), cx)
    }

    /// Finishes the send stream: the peer reads EOF once it has everything.
    /// Idempotent, as a second shutdown of a TCP socket is.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.finished {
            this.send.finish().map_err(io::Error::from)?;
            this.finished = true;
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for QuicStream {
    fn drop(&mut self) {
        // Like closing a TCP socket: what was written still arrives, then EOF.
        // (Fails only if already finished or reset; nothing more to do then.)
        if !self.finished {
            let _ = self.send.finish();
        }
        // Without a runtime nothing can linger; dropping closes the connection at once.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let acked = self.send.stopped();
        let conn = self.conn.clone();
        let endpoint = self.endpoint.clone();
        let (code, reason) = match self.close.get() {
            Some(f) => (u64::from(f.code), f.reason.into_bytes()),
            None => (0, b"done".to_vec()),
        };
        runtime.spawn(async move {
            let _ = tokio::time::timeout(LINGER, acked).await;
            conn.close(quinn::VarInt::from_u64(code).unwrap_or_default(), &reason);
            // Lets the close frame go out before the client's socket goes away. A
            // route's shared endpoints stay with the route, and waiting for them to
            // be idle would wait on its other connections.
            if let Some(clients) = endpoint
                && clients.is_last()
            {
                let _ = tokio::time::timeout(LINGER, clients.wait_idle()).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that refuses its first three handshakes (as ours does past
    /// [`MAX_PENDING`]) is dialed again until it takes one.
    #[tokio::test]
    async fn a_refused_dial_is_tried_again_until_the_server_has_room() {
        let mut opts = Options {
            alpn: b"test/1".to_vec(),
            ..Options::default()
        };
        let made = tls::server(&opts.tls, &alpn(&opts).expect("alpn")).expect("tls");
        let crypto = QuicServerConfig::try_from(made.config).expect("quic tls");
        let config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        let server =
            quinn::Endpoint::server(config, (Ipv4Addr::LOCALHOST, 0).into()).expect("bind");
        let addr = server.local_addr().expect("addr");
        let echo = tokio::spawn(async move {
            for _ in 0..3 {
                server.accept().await.expect("incoming").refuse();
            }
            let conn = server
                .accept()
                .await
                .expect("incoming")
                .await
                .expect("conn");
            let (mut send, mut recv) = conn.accept_bi().await.expect("stream");
            let mut b = [0u8; 1];
            recv.read_exact(&mut b).await.expect("a byte");
            send.write_all(&b).await.expect("echo");
            send.finish().expect("finish");
            conn.closed().await
        });
        opts.tls.pin = Some(made.fingerprint);
        let mut s = tokio::time::timeout(CONNECT_DEADLINE, connect(&addr.to_string(), &opts))
            .await
            .expect("within the dial's deadline")
            .expect("connected on the fourth try");
        s.write_all(b"x").await.expect("write");
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.expect("echoed");
        assert_eq!(&b, b"x");
        drop(s);
        echo.abort();
    }
}
