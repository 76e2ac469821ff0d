//! `pipe:NAME`: Windows named pipes (`\\.\pipe\NAME`), the kernel shell's
//! production transport. Built only for Windows; the test command type-checks
//! it with the `x86_64-pc-windows-gnu` target.
//!
//! A named-pipe server is one instance per client: the listener keeps the next
//! unconnected instance ready, and hands over the connected one on accept, so a
//! client arriving between two accepts finds an instance (and otherwise gets
//! ERROR_PIPE_BUSY, which `connect` retries until the connect deadline).
//! Remote clients are refused: these are local-IPC contracts. Each instance carries a
//! security descriptor that lets only the listening user (and LocalSystem) open it
//! (`pipe_acl`).

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
    /// The instances' security descriptor (SDDL), made once per listener.
    sddl: String,
    next: Mutex<NamedPipeServer>,
}

/// An instance of `\\.\pipe\NAME` with `opts`, open to the user of `sddl` alone.
fn create(opts: &ServerOptions, name: &str, sddl: &str) -> io::Result<NamedPipeServer> {
    super::pipe_acl::with_attributes(sddl, |attrs| {
        // SAFETY: `attrs` points to SECURITY_ATTRIBUTES valid for this call (see
        // with_attributes), which is all the call reads of it.
        #[allow(unsafe_code)]
        unsafe {
            opts.create_with_security_attributes_raw(path(name), attrs)
        }
    })
}

impl PipeListener {
    /// Create the first instance of `\\.\pipe\NAME`; fails if another server owns the name.
    pub fn bind(name: &str) -> io::Result<Self> {
        let sddl = super::pipe_acl::current_user_sddl()?;
        let mut opts = ServerOptions::new();
        opts.first_pipe_instance(true).reject_remote_clients(true);
        let server = create(&opts, name, &sddl)?;
        Ok(PipeListener {
            name: name.to_string(),
            sddl,
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
        let mut opts = ServerOptions::new();
        opts.reject_remote_clients(true);
        let fresh = create(&opts, &self.name, &self.sddl)?;
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
