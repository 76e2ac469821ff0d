//! Process endpoints: `exec:` (a child's stdin/stdout), `stdio` (the proxy's
//! own), `fd:N` (an inherited descriptor) and `exec-fd:N:` (a child given a
//! fresh socketpair end as its fd N), plus what a wrapper owes its launcher:
//! termination signals forwarded, and the child's exact exit status re-raised.
//!
//! Launched in place of an extension (`--listen fd:3 --upstream exec-fd:3:…`),
//! the proxy must be invisible to the launcher: the child sees the same fd 3
//! shape and nothing else beyond stdio, and the launcher sees the same exit
//! status, including death by signal.
//!
//! Three operations have no safe form and live in one small function each:
//! taking ownership of an inherited descriptor number (`take_inherited`),
//! resetting a signal to its default action (`default_action`) and marking
//! every stray descriptor close-on-exec in a child before it execs
//! (`only_stdio_and`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, pthread_sigmask, raise};
use nix::sys::socket::{AddressFamily, SockType, SockaddrLike, SockaddrStorage, sockopt};
use nix::sys::stat::{SFlag, fstat};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::child_io::{ClosingStdin, command, spawn_error};
use crate::conn::BoxIo;

/// How long [`ChildProc::wait`] sleeps between checks when no SIGCHLD arrives
/// (a lost or coalesced SIGCHLD must not stall the wait).
const REAP_POLL: Duration = Duration::from_millis(100);

/// How long [`ChildProc::terminate`] waits after SIGKILL before giving up.
const KILL_DEADLINE: Duration = Duration::from_secs(5);

/// A child the proxy started, whose exit the proxy reports as its own.
///
/// The child is reaped only by [`ChildProc::wait`], under the same lock the
/// signal forwarder takes before `kill`, so a forwarded signal can never reach
/// a recycled pid.
pub struct ChildProc {
    child: Child,
    pid: Pid,
    name: String,
    /// `true` until the child is reaped (or given up on at drop).
    alive: Arc<Mutex<bool>>,
    /// Wakes forwarders when the child is gone; dropped with the `ChildProc`.
    gone: watch::Sender<()>,
}

impl std::fmt::Debug for ChildProc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildProc")
            .field("pid", &self.pid.as_raw())
            .field("name", &self.name)
            .finish()
    }
}

impl ChildProc {
    fn new(child: Child, name: &str) -> io::Result<Self> {
        let raw = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| io::Error::other(format!("{name:?} started without a pid")))?;
        Ok(ChildProc {
            child,
            pid: Pid::from_raw(raw),
            name: name.to_string(),
            alive: Arc::new(Mutex::new(true)),
            gone: watch::Sender::new(()),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    /// The command that was started (its `argv[0]`), for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Wait for the child to exit and reap it. No deadline of its own: use
    /// [`ChildProc::wait_timeout`] or [`ChildProc::terminate`] where one is needed.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        // Subscribed before the first check, so an exit between a check and
        // the sleep still wakes us.
        let mut sigchld = signal(SignalKind::child())?;
        loop {
            {
                let mut alive = self.alive.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(status) = self.child.try_wait()? {
                    *alive = false;
                    self.gone.send_replace(());
                    return Ok(status);
                }
            }
            tokio::select! {
                _ = sigchld.recv() => {}
                () = tokio::time::sleep(REAP_POLL) => {}
            }
        }
    }

    /// Wait at most `limit`; `None` if the child is still running.
    pub async fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        match tokio::time::timeout(limit, self.wait()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// End the child: SIGTERM, up to `grace` to exit, then SIGKILL. Returns how it ended.
    pub async fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        self.signal(Signal::SIGTERM)?;
        if let Some(status) = self.wait_timeout(grace).await? {
            return Ok(status);
        }
        self.signal(Signal::SIGKILL)?;
        self.wait_timeout(KILL_DEADLINE).await?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} (pid {}) survived SIGKILL", self.name, self.pid),
            )
        })
    }

    /// Send `sig` to the child if it has not been reaped yet.
    pub fn signal(&self, sig: Signal) -> io::Result<()> {
        send_if_alive(&self.alive, self.pid, sig)
    }

    /// Forward SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to the proxy to the
    /// child, for as long as the child lives: the signals a launcher or a
    /// terminal uses to end a command.
    ///
    /// The handlers are installed before this returns, so from then on these
    /// signals no longer end the proxy by themselves: it ends when the child
    /// does, through [`exit_like`]. The task ends when the child is reaped or
    /// this `ChildProc` is dropped, with the first failed `kill` if any (it
    /// keeps forwarding after one).
    pub fn forward_signals(&self) -> io::Result<JoinHandle<io::Result<()>>> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut quit = signal(SignalKind::quit())?;
        let alive = self.alive.clone();
        let pid = self.pid;
        let mut gone = self.gone.subscribe();
        Ok(tokio::spawn(async move {
            let mut first_err = None;
            loop {
                let got = tokio::select! {
                    r = term.recv() => r.map(|()| Signal::SIGTERM),
                    r = int.recv() => r.map(|()| Signal::SIGINT),
                    r = hup.recv() => r.map(|()| Signal::SIGHUP),
                    r = quit.recv() => r.map(|()| Signal::SIGQUIT),
                    _ = gone.changed() => None,
                };
                let Some(sig) = got else { break };
                if let Err(e) = send_if_alive(&alive, pid, sig) {
                    first_err.get_or_insert(e);
                }
                if !*alive.lock().unwrap_or_else(PoisonError::into_inner) {
                    break;
                }
            }
            first_err.map_or(Ok(()), Err)
        }))
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        // Tokio reaps a dropped child in the background, outside our lock:
        // from here on the pid may be recycled, so forwarders must stop.
        *self.alive.lock().unwrap_or_else(PoisonError::into_inner) = false;
    }
}

fn send_if_alive(alive: &Mutex<bool>, pid: Pid, sig: Signal) -> io::Result<()> {
    let alive = alive.lock().unwrap_or_else(PoisonError::into_inner);
    if *alive {
        kill(pid, sig).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot send {sig} to pid {pid}: {e}"),
            )
        })?;
    }
    Ok(())
}

/// The exit code a shell would report for `status`: the code, or 128 + the
/// signal that ended it. For logs; to exit the same way use [`exit_like`].
pub fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        // wait() never reports stopped or continued children.
        (None, None) => 1,
    }
}

/// End this process the way `status` says the child ended: the same exit
/// code, or death by the same signal (re-raised with its default action, so
/// the launcher's `WIFSIGNALED` sees it; 128 + signal if it somehow survives).
pub fn exit_like(status: ExitStatus) -> ! {
    use std::io::Write;
    // process::exit runs no destructors: flush what is buffered ourselves.
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    let Some(signo) = status.signal() else {
        std::process::exit(1);
    };
    if let Ok(sig) = Signal::try_from(signo) {
        // Tokio's handlers (SIGTERM, SIGINT, …) and Rust's ignored SIGPIPE
        // would otherwise swallow the re-raised signal.
        let _ = default_action(sig);
        let mut set = SigSet::empty();
        set.add(sig);
        let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
        let _ = raise(sig);
    }
    std::process::exit(128 + signo)
}

/// Reset `sig` to its default action.
#[allow(unsafe_code)]
fn default_action(sig: Signal) -> nix::Result<()> {
    // SAFETY: installing SIG_DFL runs no code of ours in signal context; the
    // only caller is about to raise `sig` and end the process.
    unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) }.map(drop)
}

/// The proxy's own stdin and stdout as one connection.
///
/// Tokio reads stdin on a blocking thread (stdin may be a terminal or a file,
/// which cannot be made non-blocking without affecting other processes sharing
/// it). That is acceptable for one connection per process, with one caveat: a
/// runtime shut down normally waits for that read, so a proxy listening on
/// stdio ends through [`exit_like`] or `std::process::exit`, not by returning
/// from `main`. Shutting the write side down ends stdout for real (see
/// [`Stdout`]), so a half-close from the upstream reaches the launcher at once.
pub fn stdio() -> BoxIo {
    Box::new(tokio::io::join(
        tokio::io::stdin(),
        Stdout {
            out: tokio::io::stdout(),
            ended: false,
        },
    ))
}

/// The proxy's stdout as a connection's write side. The standard library owns
/// fd 1 and never closes it, so the reader would see EOF only when the proxy
/// exits: an upstream that ended its side first would leave the launcher waiting
/// while the proxy still reads stdin. Shutdown flushes, then puts /dev/null in
/// fd 1's place, which closes the pipe's (or socket's) write end.
struct Stdout {
    out: tokio::io::Stdout,
    ended: bool,
}

impl tokio::io::AsyncWrite for Stdout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.ended {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Pin::new(&mut self.out).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.out).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(Pin::new(&mut self.out).poll_flush(cx))?;
        if !self.ended {
            self.ended = true;
            let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
            nix::unistd::dup2_stdout(&null).map_err(io::Error::from)?;
        }
        Poll::Ready(Ok(()))
    }
}

/// Serializes takeovers, so two callers never both find one fd untaken.
static TAKEOVER: Mutex<()> = Mutex::new(());

fn fd_error(n: RawFd, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("fd {n} {what}"))
}

/// Take sole ownership of inherited descriptor `n`, if `vet` accepts it.
///
/// An fd this process opened itself always has close-on-exec set (the standard
/// library and tokio open everything that way), and every takeover sets it;
/// so an open fd without it was inherited and is not yet owned. A refused fd
/// is left exactly as found.
#[allow(unsafe_code)]
fn take_inherited(
    n: RawFd,
    vet: impl FnOnce(BorrowedFd<'_>) -> io::Result<()>,
) -> io::Result<OwnedFd> {
    let _guard = TAKEOVER.lock().unwrap_or_else(PoisonError::into_inner);
    // SAFETY: F_GETFD only reads the flags of descriptor number `n` and touches
    // no memory; a number that is not open yields EBADF.
    let flags = unsafe { nix::libc::fcntl(n, nix::libc::F_GETFD) };
    if flags < 0 {
        return Err(fd_error(n, "is not open"));
    }
    if flags & nix::libc::FD_CLOEXEC != 0 {
        return Err(fd_error(
            n,
            "was not inherited: it is close-on-exec, so this process opened it itself (or already took it over)",
        ));
    }
    // SAFETY: `n` is open (F_GETFD succeeded) and not close-on-exec, so (see
    // above) nothing in this process owns it; TAKEOVER is held until it is
    // either marked close-on-exec or released again with `into_raw_fd`, so
    // this is its only owner.
    let fd = unsafe { OwnedFd::from_raw_fd(n) };
    if let Err(e) = vet(fd.as_fd()) {
        let _ = fd.into_raw_fd();
        return Err(e);
    }
    if let Err(e) = fcntl(&fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)) {
        let _ = fd.into_raw_fd();
        return Err(io::Error::from(e));
    }
    Ok(fd)
}

/// The kind of a descriptor that is not a socket, for error messages.
fn file_kind(mode: u32) -> &'static str {
    let fmt = SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits());
    match fmt {
        SFlag::S_IFIFO => "a pipe",
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFLNK => "a symlink",
        _ => "not a socket",
    }
}

/// Whether an accepted inherited socket is a unix or an internet stream.
#[derive(Clone, Copy)]
enum StreamFamily {
    Unix,
    Inet,
}

fn vet_socket(n: RawFd, fd: BorrowedFd<'_>) -> io::Result<StreamFamily> {
    let st = fstat(fd).map_err(|e| fd_error(n, &format!("cannot be examined: {e}")))?;
    let fmt = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    if fmt != SFlag::S_IFSOCK {
        return Err(fd_error(
            n,
            &format!(
                "is not a socket (it is {}); fd:N needs a connected stream socket",
                file_kind(st.st_mode)
            ),
        ));
    }
    let ty = nix::sys::socket::getsockopt(&fd, sockopt::SockType).map_err(io::Error::from)?;
    if ty != SockType::Stream {
        return Err(fd_error(
            n,
            &format!("is a {ty:?} socket; fd:N needs a connected stream socket"),
        ));
    }
    if nix::sys::socket::getsockopt(&fd, sockopt::AcceptConn).map_err(io::Error::from)? {
        return Err(fd_error(
            n,
            "is a listening socket; fd:N needs a connected stream socket",
        ));
    }
    let addr: SockaddrStorage =
        nix::sys::socket::getsockname(fd.as_raw_fd()).map_err(io::Error::from)?;
    match addr.family() {
        Some(AddressFamily::Unix) => Ok(StreamFamily::Unix),
        Some(AddressFamily::Inet | AddressFamily::Inet6) => Ok(StreamFamily::Inet),
        other => Err(fd_error(
            n,
            &format!("is a socket of family {other:?}; fd:N takes unix or tcp streams"),
        )),
    }
}

/// Take over inherited descriptor `n`: a connected stream socket (a unix
/// socketpair end, as a launcher passes, or a TCP connection, as inetd-style
/// launchers do). It is marked close-on-exec, so no child the proxy starts
/// inherits it, and made non-blocking for tokio.
///
/// Fds 0–2 are refused (use `stdio`), as is anything not open, not a socket,
/// a listening or datagram socket, or opened by this process itself.
pub fn inherited_fd(n: i32) -> io::Result<BoxIo> {
    if (0..=2).contains(&n) {
        return Err(fd_error(
            n,
            "is a standard stream: listen on stdio to use stdin and stdout",
        ));
    }
    if n < 0 {
        return Err(fd_error(n, "is not a descriptor number"));
    }
    // Checked first: converting to a tokio socket outside a runtime would panic.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other(
            "inherited_fd needs a tokio runtime with IO enabled",
        ));
    }
    let mut family = StreamFamily::Unix;
    let fd = take_inherited(n, |fd| {
        family = vet_socket(n, fd)?;
        Ok(())
    })?;
    match family {
        StreamFamily::Unix => {
            let s = std::os::unix::net::UnixStream::from(fd);
            s.set_nonblocking(true)?;
            Ok(Box::new(tokio::net::UnixStream::from_std(s)?))
        }
        StreamFamily::Inet => {
            let s = std::net::TcpStream::from(fd);
            s.set_nonblocking(true)?;
            Ok(Box::new(tokio::net::TcpStream::from_std(s)?))
        }
    }
}

/// Make every descriptor from 3 up, except `keep`, close-on-exec in the child
/// just before it execs, so it gets only its stdio (and `keep`) whatever the
/// proxy itself inherited from its launcher. Registered after any fd mapping,
/// whose hook must have put `keep` in place first.
#[allow(unsafe_code)]
fn only_stdio_and(cmd: &mut Command, keep: Option<RawFd>) {
    use nix::libc;
    // SAFETY: sysconf is a plain query with no pointers, made here in the parent.
    let open_max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
    // Only for the fallback loop: bounded so a huge limit cannot stall a spawn.
    let top = u32::try_from(open_max)
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or(1024)
        .min(1 << 20);
    let ranges = match keep.and_then(|k| u32::try_from(k).ok()).filter(|k| *k >= 3) {
        Some(k) => [(3, k - 1), (k + 1, u32::MAX)],
        None => [(3, u32::MAX), (1, 0)],
    };
    let hook = move || {
        for (first, last) in ranges {
            if first > last {
                continue;
            }
            #[cfg(target_os = "linux")]
            {
                // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on
                // descriptor numbers and touches no memory.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_close_range,
                        first,
                        last,
                        libc::CLOSE_RANGE_CLOEXEC,
                    )
                };
                if r == 0 {
                    continue;
                }
            }
            // Kernels without close_range (or its CLOEXEC flag), and other systems.
            for fd in first..=last.min(top) {
                let Ok(fd) = libc::c_int::try_from(fd) else {
                    break;
                };
                // SAFETY: F_SETFD only sets the flags of a descriptor number; an
                // unused number yields EBADF, which is fine.
                unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe work is allowed: it makes raw fcntl/close_range system
    // calls on integers, with no allocation, locking or unwinding.
    unsafe { cmd.pre_exec(hook) };
}

/// Start `argv` with its stdin/stdout as the connection; its stderr is the
/// proxy's, and it inherits no other descriptor. Shutting the connection's
/// write side down closes the child's stdin.
pub fn spawn_exec(argv: &[String]) -> io::Result<(BoxIo, ChildProc)> {
    let (mut cmd, prog) = command(argv)?;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    only_stdio_and(&mut cmd, None);
    let mut child = cmd.spawn().map_err(|e| spawn_error(prog, e))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(io::Error::other(format!("{prog:?} started without pipes")));
    };
    let io: BoxIo = Box::new(tokio::io::join(stdout, ClosingStdin(Some(stdin))));
    Ok((io, ChildProc::new(child, prog)?))
}

/// Start `argv` with one end of a fresh unix socketpair as its descriptor
/// `fd`; the other end is the connection. The child inherits the proxy's
/// stdin, stdout and stderr and nothing else: not an `fd:N` the proxy took
/// over, nor anything else the proxy's launcher left open.
pub fn spawn_exec_fd(fd: i32, argv: &[String]) -> io::Result<(BoxIo, ChildProc)> {
    if fd <= 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("exec-fd: fd {fd} would replace a standard stream"),
        ));
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other(
            "spawn_exec_fd needs a tokio runtime with IO enabled",
        ));
    }
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let (mut cmd, prog) = command(argv)?;
    cmd.stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    cmd.fd_mappings(vec![FdMapping {
        parent_fd: OwnedFd::from(theirs),
        child_fd: fd,
    }])
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    only_stdio_and(&mut cmd, Some(fd));
    let spawned = cmd.spawn();
    // The command holds our copy of the child's end: close it now, so the
    // child's exit is seen as EOF on our end.
    drop(cmd);
    let child = spawned.map_err(|e| spawn_error(prog, e))?;
    ours.set_nonblocking(true)?;
    let io: BoxIo = Box::new(tokio::net::UnixStream::from_std(ours)?);
    Ok((io, ChildProc::new(child, prog)?))
}
