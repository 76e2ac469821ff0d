//! Process endpoints: `exec:` (a child's stdin/stdout), `stdio` (the proxy's
//! own), `fd:N` (an inherited descriptor) and `exec-fd:N:` (a child given a
//! fresh socketpair end as its fd N), plus what a wrapper owes its launcher:
//! termination signals forwarded, and the child's exact exit status re-raised.
//!
//! PLACEHOLDER (issue 6): not implemented yet; every call fails loudly.

use std::io;

use crate::conn::BoxIo;

/// A child the proxy started, whose exit the proxy reports as its own.
pub struct ChildProc {
    _private: (),
}

fn unimplemented_process() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "process endpoints are not implemented yet (issue 6)",
    )
}

/// The proxy's own stdin and stdout as one connection.
pub fn stdio() -> BoxIo {
    Box::new(tokio::io::join(tokio::io::empty(), tokio::io::sink()))
}

/// Take over inherited descriptor `n`.
pub fn inherited_fd(_n: i32) -> io::Result<BoxIo> {
    Err(unimplemented_process())
}

/// Start `argv` with its stdin/stdout as the connection.
pub fn spawn_exec(_argv: &[String]) -> io::Result<(BoxIo, ChildProc)> {
    Err(unimplemented_process())
}

/// Start `argv` with one end of a fresh socketpair as its descriptor `fd`.
pub fn spawn_exec_fd(_fd: i32, _argv: &[String]) -> io::Result<(BoxIo, ChildProc)> {
    Err(unimplemented_process())
}
