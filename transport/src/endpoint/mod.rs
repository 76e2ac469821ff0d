//! Endpoints: where the proxy listens and where it connects.
//!
//! One module per transport behind one small surface: an [`Endpoint`] parses
//! from its CLI form, listens or connects, and hands out a [`Conn`] already
//! boxed, so relay and inspection code never see a transport type.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::conn::{Conn, Hello, HttpRefusal};

mod child_io;
#[cfg(windows)]
pub mod pipe;
#[cfg(windows)]
mod pipe_acl;
#[cfg(unix)]
pub mod process;
#[cfg(windows)]
#[path = "process_windows.rs"]
pub mod process;
pub mod quic;
pub mod tcp;
pub mod tls;
pub mod tls_tcp;
#[cfg(unix)]
pub mod unix;
pub mod ws;

/// How long a connect (including any handshake) may take before the route gives up on it.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// Errors setting up endpoints.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The text is not an endpoint this build supports.
    #[error("bad endpoint {text:?}: {why}")]
    Parse {
        /// What was given.
        text: String,
        /// Why it is refused.
        why: String,
    },
    /// Listening failed.
    #[error("cannot listen on {endpoint}: {source}")]
    Listen {
        /// Endpoint.
        endpoint: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Connecting failed.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// Endpoint.
        endpoint: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The upstream refused the handshake at the HTTP level; the client gets the same answer.
    #[error("{endpoint} refused the handshake: {refusal}")]
    Refused {
        /// Endpoint.
        endpoint: String,
        /// What it answered.
        refusal: HttpRefusal,
    },
    /// TLS set-up failed (certificate, key, pin or CA).
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The endpoint kind exists on another platform only.
    #[error("{0} is not available on this platform")]
    Platform(String),
}

/// An endpoint, as written on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `unix:PATH`.
    Unix(PathBuf),
    /// `tcp:HOST:PORT`, or `tcp:PORT` for loopback.
    Tcp(String),
    /// `ws://HOST:PORT/PATH` or `wss://…`.
    Ws {
        /// `wss`.
        tls: bool,
        /// `HOST:PORT`.
        addr: String,
        /// `/PATH` (at least `/`).
        path: String,
    },
    /// `quic://HOST:PORT`.
    Quic(String),
    /// `tls://HOST:PORT`: TCP with TLS.
    Tls(String),
    /// `exec:CMD ARGS…`: a child's stdin/stdout.
    Exec(Vec<String>),
    /// `stdio`: the proxy's own stdin/stdout (listen only).
    Stdio,
    /// `fd:N`: an inherited, already-connected descriptor (listen only).
    Fd(i32),
    /// `exec-fd:N:CMD ARGS…`: a child given a fresh socketpair end as its fd N (upstream only).
    ExecFd {
        /// The descriptor number the child expects.
        fd: i32,
        /// Command and arguments.
        argv: Vec<String>,
    },
    /// `pipe:NAME`: a Windows named pipe `\\.\pipe\NAME`.
    Pipe(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
            Endpoint::Ws { tls, addr, path } => {
                write!(f, "{}://{addr}{path}", if *tls { "wss" } else { "ws" })
            }
            Endpoint::Quic(a) => write!(f, "quic://{a}"),
            Endpoint::Tls(a) => write!(f, "tls://{a}"),
            Endpoint::Exec(argv) => write!(
                f,
                "exec:{}",
                shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_default()
            ),
            Endpoint::Stdio => write!(f, "stdio"),
            Endpoint::Fd(n) => write!(f, "fd:{n}"),
            Endpoint::ExecFd { fd, argv } => write!(
                f,
                "exec-fd:{fd}:{}",
                shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_default()
            ),
            Endpoint::Pipe(n) => write!(f, "pipe:{n}"),
        }
    }
}

fn host_port(a: &str) -> bool {
    a.rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
}

/// The host of `HOST:PORT` without an IPv6 literal's brackets: the name a TLS client
/// checks the certificate against.
fn tls_host(addr: &str) -> Option<&str> {
    addr.rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .filter(|h| !h.is_empty())
}

fn argv(text: &str) -> Option<Vec<String>> {
    shlex::split(text).filter(|v| !v.is_empty())
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(s: &str) -> Result<Self, EndpointError> {
        let bad = |why: &str| EndpointError::Parse {
            text: s.to_string(),
            why: why.to_string(),
        };
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(bad("unix: needs a path"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(p)));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            // A bare port means loopback: the proxy never listens on every interface unasked.
            if a.parse::<u16>().is_ok() {
                return Ok(Endpoint::Tcp(format!("127.0.0.1:{a}")));
            }
            if !host_port(a) {
                return Err(bad("tcp: needs PORT (loopback) or HOST:PORT"));
            }
            return Ok(Endpoint::Tcp(a.to_string()));
        }
        for (scheme, tls) in [("ws://", false), ("wss://", true)] {
            if let Some(rest) = s.strip_prefix(scheme) {
                let (addr, path) = match rest.find('/') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, "/"),
                };
                if !host_port(addr) {
                    return Err(bad(
                        "ws:// and wss:// need HOST:PORT, then an optional /PATH",
                    ));
                }
                return Ok(Endpoint::Ws {
                    tls,
                    addr: addr.to_string(),
                    path: path.to_string(),
                });
            }
        }
        if let Some(a) = s.strip_prefix("quic://") {
            if !host_port(a) {
                return Err(bad("quic:// needs HOST:PORT"));
            }
            return Ok(Endpoint::Quic(a.to_string()));
        }
        if let Some(a) = s.strip_prefix("tls://") {
            if !host_port(a) {
                return Err(bad("tls:// needs HOST:PORT"));
            }
            return Ok(Endpoint::Tls(a.to_string()));
        }
        if let Some(cmd) = s.strip_prefix("exec:") {
            return argv(cmd)
                .map(Endpoint::Exec)
                .ok_or_else(|| bad("exec: needs a command (shell-style quoting)"));
        }
        if s == "stdio" {
            return Ok(Endpoint::Stdio);
        }
        if let Some(n) = s.strip_prefix("fd:") {
            return n
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .map(Endpoint::Fd)
                .ok_or_else(|| bad("fd: needs a descriptor number"));
        }
        if let Some(rest) = s.strip_prefix("exec-fd:") {
            let (n, cmd) = rest
                .split_once(':')
                .ok_or_else(|| bad("exec-fd: needs N:CMD"))?;
            let fd = n
                .parse::<i32>()
                .ok()
                .filter(|n| *n > 2)
                .ok_or_else(|| bad("exec-fd: N must be a descriptor number above 2"))?;
            let argv = argv(cmd).ok_or_else(|| bad("exec-fd:N: needs a command"))?;
            return Ok(Endpoint::ExecFd { fd, argv });
        }
        if let Some(n) = s.strip_prefix("pipe:") {
            if n.is_empty() || n.contains(['/', '\\']) {
                return Err(bad("pipe: needs a pipe name without slashes"));
            }
            return Ok(Endpoint::Pipe(n.to_string()));
        }
        Err(bad(
            "supported: unix:PATH, tcp:[HOST:]PORT, ws://HOST:PORT/PATH, wss://…, quic://HOST:PORT, tls://HOST:PORT, exec:CMD, stdio, fd:N, exec-fd:N:CMD, pipe:NAME",
        ))
    }
}

/// Options shared by endpoints that need them.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// TLS for wss, quic and tls.
    pub tls: tls::TlsOpts,
    /// The ALPN protocol id for quic and tls: the contract and its major version (e.g. `kernel/1`).
    pub alpn: Vec<u8>,
    /// Subprotocols a WebSocket listener accepts when the upstream is not a WebSocket.
    pub subprotocols: Vec<String>,
    /// The HTTP status such a listener refuses an offer of none of them with: the
    /// contract's `upgrade.subprotocol`, else 426 (Upgrade Required).
    pub subprotocol_refused: Option<u16>,
    /// The QUIC client endpoints connections made with these options share.
    pub quic_clients: quic::ClientEndpoints,
}

impl Options {
    /// What the contract fixes for `channel`: the QUIC ALPN (`<contract>/<major>`), the
    /// WebSocket subprotocols of a `websocket-text` framing and the status refusing an
    /// offer of none of them. TLS stays as given.
    pub fn for_contract(c: &contract::Contract, channel: &str, tls: tls::TlsOpts) -> Self {
        let ch = c.channels.get(channel);
        let subprotocols = ch.map_or_else(Vec::new, |ch| ch.framing.subprotocols().to_vec());
        let subprotocol_refused = ch
            .and_then(|ch| ch.upgrade.as_ref())
            .and_then(|u| u.subprotocol.as_ref())
            .map(|r| r.refused);
        let major = c.version.split('.').next().unwrap_or("0");
        Options {
            tls,
            alpn: format!("{}/{major}", c.name).into_bytes(),
            subprotocols,
            subprotocol_refused,
            quic_clients: quic::ClientEndpoints::default(),
        }
    }
}

/// One accepted connection, or a WebSocket handshake waiting for the upstream's answer.
pub enum Incoming {
    /// Ready to relay.
    Conn {
        /// The connection.
        conn: Conn,
        /// Who connected, for logs.
        peer: String,
    },
    /// A WebSocket client whose handshake is answered only once the upstream has answered.
    Ws(ws::PendingWs),
    /// A client the listener itself turned away (bad upgrade request), for the log.
    Rejected {
        /// Who connected.
        peer: String,
        /// Why, and the status it got.
        why: String,
    },
}

/// An upstream connection.
pub struct Connected {
    /// The connection.
    pub conn: Conn,
    /// The subprotocol the upstream chose (WebSocket).
    pub subprotocol: Option<String>,
    /// The child process behind it (exec, exec-fd); the proxy reports its exit.
    pub child: Option<process::ChildProc>,
}

impl Connected {
    /// A plain connection with nothing attached.
    pub fn plain(conn: Conn) -> Self {
        Connected {
            conn,
            subprotocol: None,
            child: None,
        }
    }
}

/// A bound listener.
pub enum Listener {
    /// Unix socket.
    #[cfg(unix)]
    Unix(tokio::net::UnixListener),
    /// TCP socket.
    Tcp(tokio::net::TcpListener),
    /// WebSocket server.
    Ws(ws::WsListener),
    /// QUIC server.
    Quic(quic::QuicListener),
    /// TLS-over-TCP server.
    Tls(tls_tcp::TlsListener),
    /// One connection that already exists (stdio, fd:N); taken by the first accept.
    Once(tokio::sync::Mutex<Option<(Conn, String)>>, String),
    /// Windows named pipe server.
    #[cfg(windows)]
    Pipe(pipe::PipeListener),
}

impl Listener {
    /// Where it actually listens (the real port when 0 was asked for).
    pub fn local(&self) -> String {
        match self {
            #[cfg(unix)]
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
                .unwrap_or_else(|| "unix:?".into()),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| "tcp:?".into()),
            Listener::Ws(l) => l.local(),
            Listener::Quic(l) => l.local(),
            Listener::Tls(l) => l.local(),
            Listener::Once(_, name) => name.clone(),
            #[cfg(windows)]
            Listener::Pipe(l) => l.local(),
        }
    }

    /// The SHA-256 fingerprint of the certificate a TLS listener presents.
    pub fn fingerprint(&self) -> Option<String> {
        match self {
            Listener::Quic(l) => Some(l.fingerprint().to_string()),
            Listener::Tls(l) => Some(l.fingerprint().to_string()),
            Listener::Ws(l) => l.fingerprint().map(str::to_string),
            _ => None,
        }
    }

    /// Whether this listener yields exactly one connection (the route ends with it).
    pub fn is_once(&self) -> bool {
        matches!(self, Listener::Once(..))
    }

    /// Accept the next connection. A [`Listener::Once`] waits forever after its one.
    pub async fn accept(&self) -> std::io::Result<Incoming> {
        match self {
            #[cfg(unix)]
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok(Incoming::Conn {
                    conn: Conn::Stream(Box::new(s)),
                    peer: "unix".into(),
                })
            }
            Listener::Tcp(l) => {
                let (s, peer) = tcp::accept(l).await?;
                Ok(Incoming::Conn {
                    conn: Conn::Stream(Box::new(s)),
                    peer,
                })
            }
            Listener::Ws(l) => Ok(match l.accept_next().await? {
                ws::Accepted::Pending(p) => Incoming::Ws(p),
                ws::Accepted::Rejected(r) => Incoming::Rejected {
                    why: match r.status {
                        Some(s) => format!("answered {s}: {}", r.why),
                        None => r.why,
                    },
                    peer: r.peer,
                },
            }),
            Listener::Quic(l) => {
                let (io, peer) = l.accept().await?;
                Ok(Incoming::Conn {
                    conn: Conn::Stream(io),
                    peer,
                })
            }
            Listener::Tls(l) => Ok(match l.accept().await? {
                tls_tcp::Accepted::Conn(io, peer) => Incoming::Conn {
                    conn: Conn::Stream(io),
                    peer,
                },
                tls_tcp::Accepted::Rejected(peer, why) => Incoming::Rejected { peer, why },
            }),
            Listener::Once(slot, _) => match slot.lock().await.take() {
                Some((conn, peer)) => Ok(Incoming::Conn { conn, peer }),
                None => std::future::pending().await,
            },
            #[cfg(windows)]
            Listener::Pipe(l) => {
                let io = l.accept().await?;
                Ok(Incoming::Conn {
                    conn: Conn::Stream(io),
                    peer: "pipe".into(),
                })
            }
        }
    }
}

impl Endpoint {
    /// Bind.
    pub async fn listen(&self, opts: &Options) -> Result<Listener, EndpointError> {
        let err = |source| EndpointError::Listen {
            endpoint: self.to_string(),
            source,
        };
        match self {
            #[cfg(unix)]
            Endpoint::Unix(path) => Ok(Listener::Unix(unix::listen(path).map_err(err)?)),
            Endpoint::Tcp(addr) => Ok(Listener::Tcp(tcp::listen(addr).await.map_err(err)?)),
            Endpoint::Ws { tls, addr, path } => Ok(Listener::Ws(
                ws::WsListener::bind(addr, path, *tls, opts).await?,
            )),
            Endpoint::Quic(addr) => Ok(Listener::Quic(quic::QuicListener::bind(addr, opts)?)),
            Endpoint::Tls(addr) => Ok(Listener::Tls(
                tls_tcp::TlsListener::bind(addr, opts).await?,
            )),
            Endpoint::Stdio => Ok(Listener::Once(
                tokio::sync::Mutex::new(Some((Conn::Stream(process::stdio()), "stdio".into()))),
                "stdio".into(),
            )),
            #[cfg(unix)]
            Endpoint::Fd(n) => Ok(Listener::Once(
                tokio::sync::Mutex::new(Some((
                    Conn::Stream(process::inherited_fd(*n).map_err(err)?),
                    format!("fd:{n}"),
                ))),
                format!("fd:{n}"),
            )),
            #[cfg(windows)]
            Endpoint::Pipe(name) => Ok(Listener::Pipe(pipe::PipeListener::bind(name).map_err(err)?)),
            Endpoint::Exec(_) | Endpoint::ExecFd { .. } => Err(EndpointError::Parse {
                text: self.to_string(),
                why: "exec endpoints are upstream only (listen on stdio or fd:N to stand in for a program)".into(),
            }),
            #[allow(unreachable_patterns)]
            other => Err(EndpointError::Platform(other.to_string())),
        }
    }

    /// Connect, within [`CONNECT_DEADLINE`]. `hello` is the client's handshake, passed on
    /// to a WebSocket upstream.
    pub async fn connect(
        &self,
        opts: &Options,
        hello: Option<&Hello>,
    ) -> Result<Connected, EndpointError> {
        let err = |source| EndpointError::Connect {
            endpoint: self.to_string(),
            source,
        };
        let fut = async {
            Ok(match self {
                #[cfg(unix)]
                Endpoint::Unix(p) => {
                    Connected::plain(Conn::Stream(Box::new(unix::connect(p).await.map_err(err)?)))
                }
                Endpoint::Tcp(a) => {
                    Connected::plain(Conn::Stream(Box::new(tcp::connect(a).await.map_err(err)?)))
                }
                Endpoint::Ws { tls, addr, path } => {
                    let (conn, subprotocol) = ws::connect(addr, path, *tls, opts, hello)
                        .await
                        .map_err(|e| match e {
                            ws::ConnectError::Refused(refusal) => EndpointError::Refused {
                                endpoint: self.to_string(),
                                refusal,
                            },
                            ws::ConnectError::Io(e) => err(e),
                            ws::ConnectError::Tls(e) => EndpointError::Tls(e),
                        })?;
                    Connected {
                        conn: Conn::Messages(conn),
                        subprotocol,
                        child: None,
                    }
                }
                Endpoint::Quic(a) => Connected::plain(Conn::Stream(quic::connect(a, opts).await?)),
                Endpoint::Tls(a) => {
                    Connected::plain(Conn::Stream(tls_tcp::connect(a, opts).await?))
                }
                Endpoint::Exec(argv) => {
                    let (io, child) = process::spawn_exec(argv).map_err(err)?;
                    Connected {
                        conn: Conn::Stream(io),
                        subprotocol: None,
                        child: Some(child),
                    }
                }
                #[cfg(unix)]
                Endpoint::ExecFd { fd, argv } => {
                    let (io, child) = process::spawn_exec_fd(*fd, argv).map_err(err)?;
                    Connected {
                        conn: Conn::Stream(io),
                        subprotocol: None,
                        child: Some(child),
                    }
                }
                #[cfg(windows)]
                Endpoint::Pipe(name) => {
                    Connected::plain(Conn::Stream(pipe::connect(name).await.map_err(err)?))
                }
                Endpoint::Stdio | Endpoint::Fd(_) => {
                    return Err(EndpointError::Parse {
                        text: self.to_string(),
                        why: "stdio and fd:N are listen only (use exec or exec-fd upstream)".into(),
                    });
                }
                #[allow(unreachable_patterns)]
                other => return Err(EndpointError::Platform(other.to_string())),
            })
        };
        match tokio::time::timeout(CONNECT_DEADLINE, fut).await {
            Ok(r) => r,
            Err(_) => Err(err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect deadline passed",
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        let ok = |s: &str| s.parse::<Endpoint>().expect(s);
        assert_eq!(ok("tcp:9000"), Endpoint::Tcp("127.0.0.1:9000".into()));
        assert_eq!(ok("tcp:[::1]:9000"), Endpoint::Tcp("[::1]:9000".into()));
        assert_eq!(ok("unix:/run/x.sock"), Endpoint::Unix("/run/x.sock".into()));
        assert_eq!(
            ok("wss://127.0.0.1:8443/worker"),
            Endpoint::Ws {
                tls: true,
                addr: "127.0.0.1:8443".into(),
                path: "/worker".into()
            }
        );
        assert_eq!(
            ok("ws://localhost:80"),
            Endpoint::Ws {
                tls: false,
                addr: "localhost:80".into(),
                path: "/".into()
            }
        );
        assert_eq!(
            ok("quic://127.0.0.1:4433"),
            Endpoint::Quic("127.0.0.1:4433".into())
        );
        assert_eq!(ok("tls://[::1]:8443"), Endpoint::Tls("[::1]:8443".into()));
        assert_eq!(tls_host("[::1]:8443"), Some("::1"));
        assert_eq!(tls_host("localhost:1"), Some("localhost"));
        assert_eq!(tls_host(":1"), None);
        assert_eq!(tls_host("nohost"), None);
        assert_eq!(
            ok("exec:python3 -c 'print(1)'"),
            Endpoint::Exec(vec!["python3".into(), "-c".into(), "print(1)".into()])
        );
        assert_eq!(ok("stdio"), Endpoint::Stdio);
        assert_eq!(ok("fd:3"), Endpoint::Fd(3));
        assert_eq!(
            ok("exec-fd:3:ext --x"),
            Endpoint::ExecFd {
                fd: 3,
                argv: vec!["ext".into(), "--x".into()]
            }
        );
        assert_eq!(ok("pipe:kernel-1"), Endpoint::Pipe("kernel-1".into()));
        for bad in [
            "tcp:",
            "tcp:host",
            "unix:",
            "ws://h/p",
            "quic://h",
            "tls://h",
            "tls://:1",
            "exec:",
            "fd:x",
            "exec-fd:1:x",
            "exec-fd:3:",
            "pipe:a/b",
            "nonsense",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
        for text in [
            "unix:/a",
            "tcp:127.0.0.1:1",
            "wss://h:1/p",
            "quic://h:2",
            "tls://h:3",
            "exec:a 'b c'",
            "stdio",
            "fd:4",
            "exec-fd:3:x y",
            "pipe:n",
        ] {
            assert_eq!(ok(text).to_string(), text, "display round-trips");
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn unix_listener_refuses_a_symlink_and_sets_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("real");
        std::fs::write(&target, b"").expect("write");
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let opts = Options::default();
        assert!(
            Endpoint::Unix(link).listen(&opts).await.is_err(),
            "symlink refused"
        );
        let sock = dir.path().join("made/by/proxy/p.sock");
        let _l = Endpoint::Unix(sock.clone())
            .listen(&opts)
            .await
            .expect("listen");
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&sock), 0o600);
        assert_eq!(mode(sock.parent().expect("dir")), 0o700);
        let again = Endpoint::Unix(sock).listen(&opts).await;
        assert!(
            matches!(again, Err(EndpointError::Listen { ref source, .. }) if source.kind() == std::io::ErrorKind::AddrInUse),
            "a live socket is not stolen: {:?}",
            again.err()
        );
    }
}
