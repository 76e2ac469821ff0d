//! `pipe:NAME`: Windows named pipes (`\\.\pipe\NAME`), the kernel shell's
//! production transport. Built only for Windows; the test command type-checks
//! it with the `x86_64-pc-windows-gnu` target.
//!
//! A named-pipe server is one instance per client: the listener keeps the next
//! unconnected instance ready, and hands over the connected one on accept, so a
//! client arriving between two accepts finds an instance (and otherwise gets
//! ERROR_PIPE_BUSY, which `connect` retries until the connect deadline).
//! Remote clients are refused: these are local-IPC contracts.

use std::io;
use std::time::Duration;

use tokio::net::windows::named_pipe::{ClientOptions, NamedPipeServer, ServerOptions};
use tokio::sync::Mutex;

use crate::conn::BoxIo;

/// Win32 ERROR_PIPE_BUSY: every instance is taken; wait and retry.
const ERROR_PIPE_BUSY: i32 = 231;

/// How long a client waits between tries while the pipe is busy.
const BUSY_RETRY: Duration = Duration::from_millis(50);

fn path(name: &str) -> String {
    format!(r"\\.\pipe\{name}")
}

/// A named-pipe server.
pub struct PipeListener {
    name: String,
    next: Mutex<NamedPipeServer>,
}

impl PipeListener {
    /// Create the first instance of `\\.\pipe\NAME`; fails if another server owns the name.
    pub fn bind(name: &str) -> io::Result<Self> {
        let server = ServerOptions::new()
            .first_pipe_instance(true)
            .reject_remote_clients(true)
            .create(path(name))?;
        Ok(PipeListener {
            name: name.to_string(),
            next: Mutex::new(server),
        })
    }

    /// Where it listens.
    pub fn local(&self) -> String {
        format!("pipe:{}", self.name)
    }

    /// Wait for the next client.
    pub async fn accept(&self) -> io::Result<BoxIo> {
        let mut next = self.next.lock().await;
        next.connect().await?;
        let fresh = ServerOptions::new()
            .reject_remote_clients(true)
            .create(path(&self.name))?;
        let connected = std::mem::replace(&mut *next, fresh);
        Ok(Box::new(connected))
    }
}

/// Connect to `\\.\pipe\NAME`, retrying while every instance is busy (the caller's
/// connect deadline bounds the wait).
pub async fn connect(name: &str) -> io::Result<BoxIo> {
    loop {
        match ClientOptions::new().open(path(name)) {
            Ok(c) => return Ok(Box::new(c)),
            Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY) => {
                tokio::time::sleep(BUSY_RETRY).await;
            }
            Err(e) => return Err(e),
        }
    }
}
