//! `pipe:NAME`: Windows named pipes (`\\.\pipe\NAME`), the kernel shell's
//! production transport. Built only for Windows.
//!
//! PLACEHOLDER (issue 6): not implemented yet; every call fails loudly.

use std::io;

use crate::conn::BoxIo;

/// A named-pipe server.
pub struct PipeListener {
    name: String,
}

impl PipeListener {
    /// Create the first instance of `\\.\pipe\NAME`.
    pub fn bind(name: &str) -> io::Result<Self> {
        let _ = name;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "named pipes are not implemented yet (issue 6)",
        ))
    }

    /// Where it listens.
    pub fn local(&self) -> String {
        format!("pipe:{}", self.name)
    }

    /// Wait for the next client.
    pub async fn accept(&self) -> io::Result<BoxIo> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "named pipes are not implemented yet",
        ))
    }
}

/// Connect to `\\.\pipe\NAME`.
pub async fn connect(name: &str) -> io::Result<BoxIo> {
    let _ = name;
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "named pipes are not implemented yet (issue 6)",
    ))
}
