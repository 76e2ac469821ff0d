//! The handoff: what the suite launches in place of a party that the
//! implementation under test launches itself. rukh's core starts its extension
//! with an inherited socketpair end; playing the extension, the suite gives the
//! core `contract-proxy handoff --socket PATH` as the extension command. The
//! handoff passes its inherited end to the suite over that private unix socket
//! (`SCM_RIGHTS`), closes its copy, and exits with the code the suite writes
//! back, so the core sees a real process whose exit status the suite controls.
//!
//! It is a product command, not a test peer: `--play extension` needs it
//! wherever the suite is installed. The suite launches the binary it runs in
//! ([`command`]), so a binary embedding [`crate::run`] exposes [`HandoffArgs`]
//! as its `handoff` subcommand and calls [`run`] for it.

use std::path::PathBuf;

/// Exit code of the handoff when the suite is gone without a word.
pub const ORPHAN_EXIT: i32 = 1;

/// `handoff` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct HandoffArgs {
    /// The suite's private unix socket.
    #[arg(long)]
    pub socket: PathBuf,
    /// The inherited channel end (default: $RUKH_IPC_FD, else 3).
    #[arg(long)]
    pub fd: Option<i32>,
    /// Longest wait for the suite's exit instruction, in seconds.
    #[arg(long, default_value_t = 120.0)]
    pub wait: f64,
}

/// Why the handoff could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// The socket, the fd passing or the instruction failed.
    #[error("{0}")]
    Failed(String),
}

/// The words that launch the handoff: this binary and its `handoff` subcommand.
pub fn command() -> Result<Vec<String>, HandoffError> {
    let exe = std::env::current_exe().map_err(|e| {
        HandoffError::Failed(format!(
            "cannot find this binary to launch its handoff: {e}"
        ))
    })?;
    Ok(vec![exe.to_string_lossy().into_owned(), "handoff".into()])
}

/// Hand the inherited end to the suite, close our copy, and return the exit code the
/// suite writes back (a decimal line); [`ORPHAN_EXIT`] if the suite goes away.
#[cfg(unix)]
pub fn run(a: HandoffArgs) -> Result<i32, HandoffError> {
    use std::io::BufRead;
    let fd =
        a.fd.or_else(|| {
            std::env::var("RUKH_IPC_FD")
                .ok()
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(3);
    if fd <= 2 {
        return Err(HandoffError::Usage(format!(
            "--fd {fd} is a standard stream"
        )));
    }
    let wait = std::time::Duration::try_from_secs_f64(a.wait)
        .map_err(|e| HandoffError::Usage(format!("--wait: {e}")))?;
    let sock = std::os::unix::net::UnixStream::connect(&a.socket)
        .map_err(|e| HandoffError::Failed(format!("connecting {}: {e}", a.socket.display())))?;
    hand_over(&sock, fd)?;
    sock.set_read_timeout(Some(wait))
        .map_err(|e| HandoffError::Failed(e.to_string()))?;
    let mut line = String::new();
    match std::io::BufReader::new(&sock).read_line(&mut line) {
        Ok(n) if n > 0 => line
            .trim()
            .parse()
            .map_err(|e| HandoffError::Failed(format!("bad exit instruction {line:?}: {e}"))),
        _ => {
            eprintln!("contract-proxy handoff: the suite went away; exiting {ORPHAN_EXIT}");
            Ok(ORPHAN_EXIT)
        }
    }
}

/// Pass `fd` over `sock` and close it here: the suite holds the end now, and ours
/// must not keep the channel open.
#[cfg(unix)]
fn hand_over(sock: &std::os::unix::net::UnixStream, fd: i32) -> Result<(), HandoffError> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::os::fd::AsRawFd;
    let fds = [fd];
    sendmsg::<()>(
        sock.as_raw_fd(),
        &[std::io::IoSlice::new(b"F")],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| HandoffError::Failed(format!("passing fd {fd}: {e}")))?;
    nix::unistd::close(fd).map_err(|e| HandoffError::Failed(format!("closing fd {fd}: {e}")))
}

/// The suite's half: receive the descriptor a handoff passed over `sock` with
/// `SCM_RIGHTS`, close-on-exec so no process the suite launches later inherits it.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn receive(sock: &std::os::unix::net::UnixStream) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(space.as_mut_slice()),
        MsgFlags::empty(),
    )
    .map_err(std::io::Error::from)?;
    let mut raw = Vec::new();
    for c in msg.cmsgs().map_err(std::io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            raw.extend(fds);
        }
    }
    // SAFETY: SCM_RIGHTS installed each of these descriptors in this process just
    // now; nothing else knows their numbers, so each OwnedFd is the only owner.
    let mut owned: Vec<OwnedFd> = raw
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    if owned.is_empty() {
        return Err(std::io::Error::other(
            "the handoff sent no descriptor (is fd 3 open in the extension the core launched?)",
        ));
    }
    let fd = owned.swap_remove(0);
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(std::io::Error::from)?;
    Ok(fd)
}

/// Inherited socket ends and fd passing are unix facilities.
#[cfg(not(unix))]
pub fn run(_a: HandoffArgs) -> Result<i32, HandoffError> {
    Err(HandoffError::Usage(
        "the handoff passes an inherited socket end; it needs a unix platform".into(),
    ))
}
