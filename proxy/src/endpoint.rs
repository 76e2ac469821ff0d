//! Endpoints: where the proxy listens and where it connects.
//!
//! One small surface for every transport: an [`Endpoint`] parses from the CLI
//! form, listens or connects, and hands out connections already boxed as
//! [`BoxIo`], so relay and inspection code never see a transport type.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

/// A bidirectional byte stream of any transport.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A boxed connection.
pub type BoxIo = Box<dyn Io>;

/// How long a connect may take before the route gives up on it.
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
}

/// An endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `unix:PATH`.
    Unix(PathBuf),
    /// `tcp:HOST:PORT`.
    Tcp(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
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
            let ok = a
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(bad("tcp: needs PORT (loopback) or HOST:PORT"));
            }
            return Ok(Endpoint::Tcp(a.to_string()));
        }
        Err(bad(
            "supported: unix:PATH, tcp:HOST:PORT (ws, quic, exec, stdio and fd endpoints are not implemented yet)",
        ))
    }
}

/// A bound listener.
pub enum Listener {
    /// Unix socket.
    Unix(UnixListener),
    /// TCP socket.
    Tcp(TcpListener),
}

impl Listener {
    /// Where it actually listens (the real port when 0 was asked for).
    pub fn local(&self) -> String {
        match self {
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
                .unwrap_or_else(|| "unix:?".into()),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| "tcp:?".into()),
        }
    }

    /// Accept the next connection.
    pub async fn accept(&self) -> std::io::Result<BoxIo> {
        Ok(match self {
            Listener::Unix(l) => Box::new(l.accept().await?.0),
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
        })
    }
}

impl Endpoint {
    /// Bind. A unix socket is created 0600 in a directory the proxy creates 0700 if missing;
    /// a symlink at the path is refused, a stale socket file is replaced.
    pub async fn listen(&self) -> Result<Listener, EndpointError> {
        let err = |source| EndpointError::Listen {
            endpoint: self.to_string(),
            source,
        };
        match self {
            Endpoint::Unix(path) => {
                use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
                if let Some(dir) = path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty() && !d.exists())
                {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)
                        .map_err(err)?;
                }
                match std::fs::symlink_metadata(path) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(err(std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            "refusing to follow a symlink",
                        )));
                    }
                    Ok(m) if m.file_type().is_socket() => {
                        std::fs::remove_file(path).map_err(err)?
                    }
                    Ok(_) => {
                        return Err(err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            "a non-socket file is in the way",
                        )));
                    }
                    Err(_) => {}
                }
                let l = UnixListener::bind(path).map_err(err)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(err)?;
                Ok(Listener::Unix(l))
            }
            Endpoint::Tcp(addr) => Ok(Listener::Tcp(TcpListener::bind(addr).await.map_err(err)?)),
        }
    }

    /// Connect, within [`CONNECT_DEADLINE`].
    pub async fn connect(&self) -> Result<BoxIo, EndpointError> {
        let err = |source| EndpointError::Connect {
            endpoint: self.to_string(),
            source,
        };
        let fut = async {
            Ok::<BoxIo, std::io::Error>(match self {
                Endpoint::Unix(p) => Box::new(tokio::net::UnixStream::connect(p).await?),
                Endpoint::Tcp(a) => {
                    let s = tokio::net::TcpStream::connect(a).await?;
                    s.set_nodelay(true)?;
                    Box::new(s)
                }
            })
        };
        match tokio::time::timeout(CONNECT_DEADLINE, fut).await {
            Ok(r) => r.map_err(err),
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
        assert_eq!(
            "tcp:9000".parse::<Endpoint>().ok(),
            Some(Endpoint::Tcp("127.0.0.1:9000".into()))
        );
        assert_eq!(
            "tcp:[::1]:9000".parse::<Endpoint>().ok(),
            Some(Endpoint::Tcp("[::1]:9000".into()))
        );
        assert_eq!(
            "unix:/run/x.sock".parse::<Endpoint>().ok(),
            Some(Endpoint::Unix("/run/x.sock".into()))
        );
        for bad in ["tcp:", "tcp:host", "unix:", "ws://h/p", "nonsense"] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn unix_listener_refuses_a_symlink_and_sets_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("real");
        std::fs::write(&target, b"").expect("write");
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        assert!(
            Endpoint::Unix(link).listen().await.is_err(),
            "symlink refused"
        );
        let sock = dir.path().join("made/by/proxy/p.sock");
        let _l = Endpoint::Unix(sock.clone()).listen().await.expect("listen");
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&sock), 0o600);
        assert_eq!(mode(sock.parent().expect("dir")), 0o700);
    }
}
