//! `tls://HOST:PORT`: the channel's own framing over TCP with TLS (tokio-rustls),
//! for a channel that leaves the machine without WebSocket or QUIC.
//!
//! Certificates and trust are those of `wss://` and `quic://` ([`super::tls`]):
//! `--cert/--key` or a self-signed certificate whose fingerprint is printed, and a
//! client that says how it trusts the server (`--pin` or `--ca`). Both sides offer
//! the contract's ALPN id (`<contract>/<major>`, as QUIC does); a client offering
//! other ids fails the handshake, a client offering none (`openssl s_client`,
//! socat) is served, since plain TLS, unlike QUIC, does not require ALPN.
//!
//! A peer that closes its TCP connection without TLS's `close_notify` (Python's
//! `ssl` on `close()`, and many others) reads as an end of stream, not an error:
//! every channel delimits its own messages, so a message cut short is still caught,
//! by the framing, which is what the rustls manual advises for such protocols.
//!
//! Handshakes run in tasks of their own, at most [`MAX_PENDING`] at once and each
//! within [`HANDSHAKE_DEADLINE`], so a slow or silent client never holds up the
//! next one; a failed handshake reaches `accept` as a rejection, for the log.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore, mpsc};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::{EndpointError, Options, tls};
use crate::conn::BoxIo;

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further clients wait in the kernel's backlog.
pub const MAX_PENDING: usize = 64;
/// Finished handshakes waiting for `accept`.
const READY_QUEUE: usize = 64;

/// What [`TlsListener::accept`] yields.
pub enum Accepted {
    /// A client past its handshake, and its address.
    Conn(BoxIo, String),
    /// A client whose handshake failed or timed out: its address and why.
    Rejected(String, String),
}

/// A TLS-over-TCP server.
pub struct TlsListener {
    local: String,
    fingerprint: String,
    cert_pem: Option<String>,
    ready: Mutex<mpsc::Receiver<Accepted>>,
    task: tokio::task::AbortHandle,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn alpn(opts: &Options) -> Vec<Vec<u8>> {
    if opts.alpn.is_empty() {
        Vec::new()
    } else {
        vec![opts.alpn.clone()]
    }
}

impl TlsListener {
    /// Bind `addr` with TLS from `opts` and start taking handshakes.
    pub async fn bind(addr: &str, opts: &Options) -> Result<Self, EndpointError> {
        let err = |source| EndpointError::Listen {
            endpoint: format!("tls://{addr}"),
            source,
        };
        let made = tls::server(&opts.tls, &alpn(opts))?;
        let tcp = TcpListener::bind(addr).await.map_err(err)?;
        let local = tcp.local_addr().map_err(err)?;
        let (tx, rx) = mpsc::channel(READY_QUEUE);
        let speaks: Arc<str> = String::from_utf8_lossy(&opts.alpn).into();
        let acceptor = TlsAcceptor::from(made.config);
        let task = tokio::spawn(accept_loop(tcp, acceptor, speaks, tx));
        Ok(TlsListener {
            local: format!("tls://{local}"),
            fingerprint: made.fingerprint,
            cert_pem: made.cert_pem,
            ready: Mutex::new(rx),
            task: task.abort_handle(),
        })
    }

    /// Where it listens: `tls://IP:PORT`, with the real port when 0 was asked for.
    pub fn local(&self) -> String {
        self.local.clone()
    }

    /// SHA-256 of the certificate presented, uppercase hex with `:` (what clients `--pin`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The generated certificate as PEM (None when it came from `--cert`).
    pub fn cert_pem(&self) -> Option<&str> {
        self.cert_pem.as_deref()
    }

    /// The next client past its handshake, or one whose handshake failed.
    pub async fn accept(&self) -> io::Result<Accepted> {
        self.ready.lock().await.recv().await.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("{}: the acceptor stopped", self.local),
            )
        })
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    speaks: Arc<str>,
    ready: mpsc::Sender<Accepted>,
) {
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
    loop {
        let Ok(permit) = pending.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match tcp.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Transient for a listener (a reset before accept, no descriptors left):
                // report it, back off a little instead of spinning, go on.
                let why = format!("accept failed: {e}");
                if ready
                    .send(Accepted::Rejected("?".into(), why))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, ready, speaks) = (acceptor.clone(), ready.clone(), speaks.clone());
        tokio::spawn(async move {
            let peer = peer.to_string();
            let out = match handshake(&acceptor, stream, &speaks).await {
                Ok(io) => Accepted::Conn(io, peer),
                Err(why) => Accepted::Rejected(peer, why),
            };
            drop(permit);
            // A send error means the listener is gone; the connection goes with it.
            let _ = ready.send(out).await;
        });
    }
}

async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    speaks: &str,
) -> Result<BoxIo, String> {
    stream
        .set_nodelay(true)
        .map_err(|e| format!("cannot set TCP_NODELAY: {e}"))?;
    match tokio::time::timeout(HANDSHAKE_DEADLINE, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Ok(Box::new(EndIsEof(s))),
        Ok(Err(e)) => match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::NoApplicationProtocol) => Err(format!(
                "TLS handshake failed: the client offered ALPN ids, none of them {speaks}"
            )),
            _ => Err(format!("TLS handshake failed: {e}")),
        },
        Err(_) => Err(format!(
            "no TLS handshake within {} s",
            HANDSHAKE_DEADLINE.as_secs()
        )),
    }
}

/// Connect to `addr` and finish the TLS handshake.
///
/// The server name is the host part as written: an IP literal is checked against the
/// certificate's IP addresses, a name against its DNS names; with `--pin` only the
/// fingerprint counts. The caller's deadline bounds the whole dial.
pub async fn connect(addr: &str, opts: &Options) -> Result<BoxIo, EndpointError> {
    let err = |source| EndpointError::Connect {
        endpoint: format!("tls://{addr}"),
        source,
    };
    let bad = |why: String| err(io::Error::new(io::ErrorKind::InvalidInput, why));
    let host = super::tls_host(addr).ok_or_else(|| bad("needs HOST:PORT".into()))?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| bad(format!("bad TLS server name {host:?}: {e}")))?;
    let config = tls::client(&opts.tls, &alpn(opts))?;
    let tcp = TcpStream::connect(addr).await.map_err(err)?;
    tcp.set_nodelay(true).map_err(err)?;
    let stream = TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(err)?;
    Ok(Box::new(EndIsEof(stream)))
}

/// A TLS stream on which a close without `close_notify` reads as end of stream.
struct EndIsEof<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for EndIsEof<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for EndIsEof<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, b)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
