//! Process endpoints on Windows: `exec:` (a child's stdin/stdout) and `stdio` (the
//! proxy's own), with the child's exit code passed through, the same API as the
//! Unix module where Windows has the same idea.
//!
//! What differs: there are no signals to forward (Ctrl-C reaches every process of
//! the console, the child included, so `forward_signals` has nothing to do), an exit
//! is a code and never a signal, and `fd:N`/`exec-fd:` (inherited socketpairs) have no
//! counterpart here.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::Child;
use tokio::task::JoinHandle;

use super::child_io::{ClosingStdin, command, spawn_error};
use crate::conn::BoxIo;

/// How long [`ChildProc::terminate`] waits after killing the child before giving up.
const KILL_DEADLINE: Duration = Duration::from_secs(5);

/// A child the proxy started, whose exit code the proxy reports as its own.
#[derive(Debug)]
pub struct ChildProc {
    child: Child,
    pid: u32,
    name: String,
}

impl ChildProc {
    fn new(child: Child, name: &str) -> io::Result<Self> {
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other(format!("{name:?} started without a pid")))?;
        Ok(ChildProc {
            child,
            pid,
            name: name.to_string(),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The command that was started (its `argv[0]`), for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Wait for the child to exit.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Wait at most `limit`; `None` if the child is still running.
    pub async fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        match tokio::time::timeout(limit, self.wait()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// End the child: up to `grace` to exit on its own (there is no SIGTERM to ask
    /// with), then `TerminateProcess`. Returns how it ended.
    pub async fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        if let Some(status) = self.wait_timeout(grace).await? {
            return Ok(status);
        }
        self.child.start_kill()?;
        self.wait_timeout(KILL_DEADLINE).await?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} (pid {}) survived TerminateProcess", self.name, self.pid),
            )
        })
    }

    /// Nothing to forward on Windows: the console's Ctrl-C reaches the child itself.
    pub fn forward_signals(&self) -> io::Result<JoinHandle<io::Result<()>>> {
        Ok(tokio::spawn(async { Ok(()) }))
    }
}

/// The exit code `status` reports (Windows exits have no signal).
pub fn status_code(status: ExitStatus) -> i32 {
    status.code().unwrap_or(1)
}

/// End this process with the child's exit code.
pub fn exit_like(status: ExitStatus) -> ! {
    use std::io::Write;
    // process::exit runs no destructors: flush what is buffered ourselves.
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    std::process::exit(status_code(status))
}

/// The proxy's own stdin and stdout as one connection. As on Unix, tokio reads stdin
/// on a blocking thread, so a proxy listening on stdio ends through [`exit_like`] or
/// `std::process::exit`, not by returning from `main`.
pub fn stdio() -> BoxIo {
    Box::new(tokio::io::join(tokio::io::stdin(), tokio::io::stdout()))
}

/// Start `argv` with its stdin/stdout as the connection; its stderr is the proxy's.
/// Shutting the connection's write side down closes the child's stdin.
pub fn spawn_exec(argv: &[String]) -> io::Result<(BoxIo, ChildProc)> {
    let (mut cmd, prog) = command(argv)?;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().map_err(|e| spawn_error(prog, e))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(io::Error::other(format!("{prog:?} started without pipes")));
    };
    let io: BoxIo = Box::new(tokio::io::join(stdout, ClosingStdin(Some(stdin))));
    Ok((io, ChildProc::new(child, prog)?))
}
