//! `tcp:HOST:PORT`: plain TCP, loopback unless a host is named. Nagle is off on
//! every socket, since contract messages are small and latency-bound.

use std::io;

use tokio::net::{TcpListener, TcpStream};

/// Bind `addr`.
pub async fn listen(addr: &str) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Accept one connection.
pub async fn accept(l: &TcpListener) -> io::Result<(TcpStream, String)> {
    let (s, peer) = l.accept().await?;
    s.set_nodelay(true)?;
    Ok((s, peer.to_string()))
}

/// Connect to `addr`.
pub async fn connect(addr: &str) -> io::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}
