//! What starting a child for `exec:` takes on every platform: the command from its
//! argv, a start error that names the program, and the write side that closes the
//! child's stdin on shutdown.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::AsyncWrite;
use tokio::process::{ChildStdin, Command};

/// The command `argv` names, and its program (for errors and logs).
pub(crate) fn command(argv: &[String]) -> io::Result<(Command, &str)> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args);
    Ok((cmd, prog))
}

/// A start failure, naming the program.
pub(crate) fn spawn_error(prog: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot start {prog:?}: {e}"))
}

/// The write side of an `exec:` connection. Shutting it down closes the
/// child's stdin, so a half-close reaches the child as EOF (tokio's
/// `ChildStdin` only closes when dropped).
pub(crate) struct ClosingStdin(pub(crate) Option<ChildStdin>);

impl AsyncWrite for ClosingStdin {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.as_mut() {
            Some(w) => Pin::new(w).poll_write(cx, buf),
            None => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the child's stdin is already closed",
            ))),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(w) => Pin::new(w).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(w) = self.0.as_mut() {
            ready!(Pin::new(w).poll_flush(cx))?;
        }
        self.0 = None;
        Poll::Ready(Ok(()))
    }
}
