//! Process endpoints with real processes: `exec:` and `exec-fd:` children
//! speaking rukh frames, an inherited fd, the proxy's own stdio, and a wrapper
//! that forwards signals and leaves with its child's exact status.
//!
//! Things that must happen in a process of their own (taking over fd 3,
//! calling `exit_like`, receiving a signal) run in this test binary re-executed
//! in a helper mode chosen by `PROCESS_TEST_MODE` (see [`helper`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use command_fds::{CommandFdExt, FdMapping};
use contract_transport::conn::BoxIo;
use contract_transport::endpoint::process::{
    ChildProc, exit_like, inherited_fd, spawn_exec, spawn_exec_fd, status_code, stdio,
};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/process_frames.py");
const VENV: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv-peers");
const MODE: &str = "PROCESS_TEST_MODE";
const DEADLINE: Duration = Duration::from_secs(10);

fn python() -> String {
    let p = format!("{VENV}/bin/python");
    assert!(
        Path::new(&p).exists(),
        "{p} is missing: run scripts/peers-venv.sh to create the peers venv"
    );
    p
}

fn peer(args: &[&str]) -> Vec<String> {
    let mut v = vec![python(), PEER.to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(body.len())
        .expect("small frame")
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

async fn read_frame(io: &mut BoxIo) -> Vec<u8> {
    let mut head = [0u8; 4];
    timeout(DEADLINE, io.read_exact(&mut head))
        .await
        .expect("a frame header in time")
        .expect("frame header");
    let n = u32::from_be_bytes(head) as usize;
    assert!(n <= 1 << 20, "frame of {n} bytes");
    let mut body = vec![0u8; n];
    timeout(DEADLINE, io.read_exact(&mut body))
        .await
        .expect("a frame body in time")
        .expect("frame body");
    body
}

async fn expect_eof(io: &mut BoxIo) {
    let mut rest = Vec::new();
    timeout(DEADLINE, io.read_to_end(&mut rest))
        .await
        .expect("EOF in time")
        .expect("read to EOF");
    assert!(rest.is_empty(), "nothing after the last frame: {rest:?}");
}

async fn wait_proc(child: &mut ChildProc) -> ExitStatus {
    child
        .wait_timeout(DEADLINE)
        .await
        .expect("wait")
        .unwrap_or_else(|| {
            panic!(
                "{} (pid {}) did not exit in time",
                child.name(),
                child.pid()
            )
        })
}

/// Wait for a std child with a deadline; `None` (and the child killed) if it passes.
fn try_wait_std(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_std(child: &mut Child, limit: Duration) -> ExitStatus {
    try_wait_std(child, limit)
        .unwrap_or_else(|| panic!("pid {} did not exit within {limit:?}", child.id()))
}

/// Lines of a child's stdout, read on a thread so each can be awaited with a deadline.
fn lines_of(stdout: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// What follows `marker` in the next line holding it. Helpers share stdout with
/// libtest, which prints its own lines and leaves "test helper ... " unended.
fn line_with(rx: &mpsc::Receiver<String>, marker: &str) -> String {
    let start = Instant::now();
    while let Some(left) = DEADLINE.checked_sub(start.elapsed()) {
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no {marker:?} line: {e}"));
        if let Some((_, rest)) = line.split_once(marker) {
            return rest.to_string();
        }
    }
    panic!("no {marker:?} line within {DEADLINE:?}");
}

/// This test binary again, running [`helper`] in `mode`.
fn helper_command(mode: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
    cmd.args([
        "helper",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(MODE, mode)
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    cmd
}

fn with_fd3(cmd: &mut Command, fd: OwnedFd) {
    cmd.fd_mappings(vec![FdMapping {
        parent_fd: fd,
        child_fd: 3,
    }])
    .expect("one mapping");
}

fn pid_gone(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH)
}

/// Whether `pid` has ended: gone, or a zombie its parent has not reaped yet.
fn pid_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => pid_gone(pid),
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

// ---------------------------------------------------------------- helper modes

/// Entry point of the re-executed helper processes; returns at once unless
/// `PROCESS_TEST_MODE` is set. Every mode ends the process itself.
#[test]
#[ignore = "re-exec entry point of the other tests; does nothing when run directly"]
fn helper() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run_helper(&mode));
    eprintln!("helper mode {mode:?} returned");
    std::process::exit(97);
}

async fn run_helper(mode: &str) {
    if let Some(script) = mode.strip_prefix("exit:") {
        // A wrapper with no signal handling: the child's status, passed on.
        let (io, mut child) =
            spawn_exec(&["sh".into(), "-c".into(), script.into()]).expect("spawn sh");
        drop(io);
        let status = wait_proc(&mut child).await;
        exit_like(status);
    }
    if mode == "forward" {
        // The wrapper the proxy is: child on a socketpair fd 3, signals forwarded.
        let (_io, mut child) = spawn_exec_fd(3, &peer(&["wait-signal"])).expect("spawn");
        let _fwd = child.forward_signals().expect("signal handlers");
        println!("WRAPPER READY {}", child.pid());
        let status = child
            .wait_timeout(Duration::from_secs(40))
            .await
            .expect("wait");
        match status {
            Some(status) => exit_like(status),
            None => std::process::exit(98),
        }
    }
    if mode == "fd-echo" {
        let mut io = inherited_fd(3).expect("take over fd 3");
        let body = read_frame(&mut io).await;
        io.write_all(&frame(&body)).await.expect("write");
        io.shutdown().await.expect("shutdown");
        std::process::exit(0);
    }
    if mode == "wrap-fd-report" {
        // The proxy's situation: fd 3 taken over, a child given its own fd 3.
        let mut core = inherited_fd(3).expect("take over fd 3");
        let (mut ext, mut child) = spawn_exec_fd(3, &peer(&["fd-echo", "3"])).expect("spawn");
        let report = read_frame(&mut ext).await;
        core.write_all(&frame(&report)).await.expect("write");
        core.shutdown().await.expect("shutdown");
        ext.shutdown().await.expect("shutdown");
        let status = wait_proc(&mut child).await;
        exit_like(status);
    }
    if let Some(n) = mode.strip_prefix("fd-error:") {
        match inherited_fd(n.parse().expect("fd number")) {
            Ok(_) => {
                println!("TAKEN");
                std::process::exit(1);
            }
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(0);
            }
        }
    }
    if mode == "stdio-echo" {
        let io = stdio();
        let (r, mut w) = tokio::io::split(io);
        w.write_all(b"READY\n").await.expect("write");
        w.flush().await.expect("flush");
        let mut line = String::new();
        let mut r = tokio::io::BufReader::new(r).take(1024);
        timeout(DEADLINE, r.read_line(&mut line))
            .await
            .expect("a line in time")
            .expect("read line");
        w.write_all(format!("ECHO {line}").as_bytes())
            .await
            .expect("write");
        w.flush().await.expect("flush");
        // stdin is read on a blocking thread: leave without waiting for it.
        std::process::exit(0);
    }
    panic!("unknown helper mode {mode:?}");
}

// ---------------------------------------------------------------- exec:

#[tokio::test]
async fn exec_child_echoes_frames_then_exits_on_eof() {
    let (mut io, mut child) = spawn_exec(&peer(&["stdio-echo"])).expect("spawn");
    assert!(child.pid() > 0);
    let bodies: Vec<Vec<u8>> = (1..=3)
        .map(|i| {
            serde_json::to_vec(
                &json!({"jsonrpc": "2.0", "id": format!("c:{i}"), "method": "rukh.log", "params": {"n": i}}),
            )
            .expect("json")
        })
        .collect();
    for b in &bodies {
        io.write_all(&frame(b)).await.expect("write frame");
    }
    for b in &bodies {
        assert_eq!(&read_frame(&mut io).await, b, "frame comes back intact");
    }
    // Half-close: the child must see EOF on stdin and exit by itself.
    io.shutdown().await.expect("close the child's stdin");
    expect_eof(&mut io).await;
    let status = wait_proc(&mut child).await;
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test]
async fn exec_of_a_missing_command_names_it() {
    let err = spawn_exec(&["/nonexistent/rukh-extension".into(), "x".into()])
        .map(|_| ())
        .expect_err("no such command");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(
        err.to_string().contains("/nonexistent/rukh-extension"),
        "{err}"
    );
    let err = spawn_exec_fd(3, &["no-such-extension-anywhere".into()])
        .map(|_| ())
        .expect_err("no such command");
    assert!(
        err.to_string().contains("no-such-extension-anywhere"),
        "{err}"
    );
    assert!(spawn_exec(&[]).is_err(), "empty argv refused");
    assert!(
        spawn_exec_fd(2, &peer(&["fd-echo", "2"])).is_err(),
        "fd 2 refused"
    );
}

#[tokio::test]
async fn child_exit_codes_come_back_exactly() {
    for code in [0, 7, 124, 125, 130] {
        let (_io, mut child) =
            spawn_exec(&["sh".into(), "-c".into(), format!("exit {code}")]).expect("spawn");
        let status = wait_proc(&mut child).await;
        assert_eq!(status.code(), Some(code), "{status:?}");
        assert_eq!(status_code(status), code);
    }
    let (_io, mut child) =
        spawn_exec(&["sh".into(), "-c".into(), "kill -TERM $$".into()]).expect("spawn");
    let status = wait_proc(&mut child).await;
    assert_eq!(status.signal(), Some(15), "{status:?}");
    assert_eq!(status_code(status), 143);
}

// ---------------------------------------------------------------- exec-fd:

#[tokio::test]
async fn exec_fd_child_gets_fd3_and_nothing_else() {
    let (mut io, mut child) = spawn_exec_fd(3, &peer(&["fd-echo", "3", "7"])).expect("spawn");
    let report: Value = serde_json::from_slice(&read_frame(&mut io).await).expect("json");
    assert_eq!(
        report["fds"],
        json!([0, 1, 2, 3]),
        "the child has stdio and fd 3 only"
    );
    let bodies: Vec<Vec<u8>> = (1..=3)
        .map(|i| {
            format!(r#"{{"jsonrpc":"2.0","method":"rukh.ui.event","params":{{"n":{i}}}}}"#)
                .into_bytes()
        })
        .collect();
    for b in &bodies {
        io.write_all(&frame(b)).await.expect("write frame");
    }
    for b in &bodies {
        assert_eq!(&read_frame(&mut io).await, b);
    }
    io.shutdown().await.expect("half-close");
    expect_eof(&mut io).await;
    let status = wait_proc(&mut child).await;
    assert_eq!(status.code(), Some(7), "{status:?}");
}

#[tokio::test]
async fn exec_fd_maps_other_numbers_too() {
    let (mut io, mut child) = spawn_exec_fd(5, &peer(&["fd-echo", "5"])).expect("spawn");
    let report: Value = serde_json::from_slice(&read_frame(&mut io).await).expect("json");
    assert_eq!(report["fds"], json!([0, 1, 2, 5]));
    io.shutdown().await.expect("half-close");
    expect_eof(&mut io).await;
    assert_eq!(wait_proc(&mut child).await.code(), Some(0));
}

#[tokio::test]
async fn exec_fd_eof_when_the_child_dies() {
    // A child that exits without reading: our end must see EOF (our copy of
    // its end was closed after spawning), not hang.
    let argv = vec!["sh".into(), "-c".into(), "exit 125".into()];
    let (mut io, mut child) = spawn_exec_fd(3, &argv).expect("spawn");
    expect_eof(&mut io).await;
    assert_eq!(wait_proc(&mut child).await.code(), Some(125));
}

// ---------------------------------------------------------------- exit_like

#[test]
fn exit_like_passes_codes_and_signal_deaths_on() {
    for (script, code) in [
        ("exit 124", 124),
        ("exit 125", 125),
        ("exit 7", 7),
        ("exit 0", 0),
    ] {
        let mut child = helper_command(&format!("exit:{script}"))
            .spawn()
            .expect("helper");
        let status = wait_std(&mut child, DEADLINE);
        assert_eq!(status.code(), Some(code), "{script}: {status:?}");
    }
    // SIGPIPE is ignored in Rust programs: the re-raise must reset it first.
    for (sig, no) in [("TERM", 15), ("PIPE", 13), ("INT", 2)] {
        let mut child = helper_command(&format!("exit:kill -{sig} $$"))
            .spawn()
            .expect("helper");
        let status = wait_std(&mut child, DEADLINE);
        assert_eq!(status.signal(), Some(no), "SIG{sig}: {status:?}");
    }
}

// ---------------------------------------------------------------- forwarding

/// Start the wrapper, wait until both it and its child are ready, send `sig`
/// to the wrapper; the wrapper's status once it and the child are gone.
fn forward_through_wrapper(sig: Signal) -> ExitStatus {
    let _ = python();
    let mut wrapper = helper_command("forward")
        .stdout(Stdio::piped())
        .spawn()
        .expect("wrapper");
    let rx = lines_of(wrapper.stdout.take().expect("stdout"));
    // The child inherits the wrapper's stdout, so both lines arrive here, in either order.
    let (mut wpid, mut cpid) = (None, None);
    let start = Instant::now();
    while wpid.is_none() || cpid.is_none() {
        let left = DEADLINE
            .checked_sub(start.elapsed())
            .expect("wrapper and child ready in time");
        let line = rx.recv_timeout(left).expect("a ready line");
        if let Some((_, p)) = line.split_once("WRAPPER READY ") {
            wpid = Some(p.trim().parse::<i32>().expect("pid"));
        } else if let Some((_, p)) = line.split_once("CHILD READY ") {
            cpid = Some(p.trim().parse::<i32>().expect("pid"));
        }
    }
    let (wpid, cpid) = (wpid.expect("pid"), cpid.expect("pid"));
    assert_eq!(wpid, cpid, "the wrapper reports the child it started");
    kill(
        Pid::from_raw(i32::try_from(wrapper.id()).expect("pid")),
        sig,
    )
    .expect("signal the wrapper");
    let status = try_wait_std(&mut wrapper, DEADLINE);
    // The child sleeps 30 s unless the signal reached it; a wrapper that
    // reaped it leaves no zombie behind.
    let gone = pid_gone(cpid);
    if !gone {
        let _ = kill(Pid::from_raw(cpid), Signal::SIGKILL);
    }
    let status = status.unwrap_or_else(|| panic!("the wrapper ignored {sig} for {DEADLINE:?}"));
    assert!(
        gone,
        "{sig} was not forwarded: the child {cpid} outlived its wrapper"
    );
    status
}

#[test]
fn sigterm_reaches_the_child_and_the_wrapper_dies_the_same_way() {
    let status = forward_through_wrapper(Signal::SIGTERM);
    assert_eq!(status.signal(), Some(15), "{status:?}");
}

#[test]
fn sigint_reaches_the_child_and_its_130_comes_back() {
    // 130 can only come from the child's own handler.
    let status = forward_through_wrapper(Signal::SIGINT);
    assert_eq!(status.code(), Some(130), "{status:?}");
}

#[test]
fn sighup_and_sigquit_are_forwarded_too() {
    let status = forward_through_wrapper(Signal::SIGHUP);
    assert_eq!(status.signal(), Some(1), "{status:?}");
    let status = forward_through_wrapper(Signal::SIGQUIT);
    assert_eq!(status.signal(), Some(3), "{status:?}");
}

// ---------------------------------------------------------------- fd:N

#[test]
fn inherited_socket_fd_carries_a_frame() {
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let mut cmd = helper_command("fd-echo");
    with_fd3(&mut cmd, OwnedFd::from(theirs));
    let mut child = cmd.spawn().expect("helper");
    drop(cmd);
    ours.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let body = br#"{"jsonrpc":"2.0","id":"c:1","method":"rukh.initialize","params":{}}"#;
    ours.write_all(&frame(body)).expect("write");
    let mut back = Vec::new();
    ours.read_to_end(&mut back)
        .expect("read until the helper closes");
    assert_eq!(back, frame(body));
    assert_eq!(wait_std(&mut child, DEADLINE).code(), Some(0));
}

#[test]
fn a_wrapped_child_inherits_neither_the_wrappers_fd3_nor_strays() {
    let _ = python();
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    // A descriptor the launcher leaked to the wrapper (not close-on-exec there).
    let (stray, _w) = std::io::pipe().expect("pipe");
    let mut cmd = helper_command("wrap-fd-report");
    cmd.fd_mappings(vec![
        FdMapping {
            parent_fd: OwnedFd::from(theirs),
            child_fd: 3,
        },
        FdMapping {
            parent_fd: OwnedFd::from(stray),
            child_fd: 7,
        },
    ])
    .expect("two mappings");
    let mut child = cmd.spawn().expect("helper");
    drop(cmd);
    ours.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let report: Value = serde_json::from_slice(&read_std_frame(&mut ours)).expect("json");
    assert_eq!(
        report["fds"],
        json!([0, 1, 2, 3]),
        "the wrapped child has stdio and its own fd 3 only"
    );
    assert_eq!(wait_std(&mut child, DEADLINE).code(), Some(0));
}

/// Run `fd-error:N` with `fd` (if any) as the helper's fd 3; the error text.
fn fd_error(fd: Option<OwnedFd>, n: i32) -> String {
    let mut cmd = helper_command(&format!("fd-error:{n}"));
    cmd.stdout(Stdio::piped());
    if let Some(fd) = fd {
        with_fd3(&mut cmd, fd);
    }
    let mut child = cmd.spawn().expect("helper");
    drop(cmd);
    let rx = lines_of(child.stdout.take().expect("stdout"));
    let err = line_with(&rx, "ERR ");
    assert_eq!(wait_std(&mut child, DEADLINE).code(), Some(0));
    err
}

#[test]
fn inherited_fd_refuses_what_is_not_a_connected_stream_socket() {
    let (r, _w) = std::io::pipe().expect("pipe");
    assert_eq!(
        fd_error(Some(OwnedFd::from(r)), 3),
        "fd 3 is not a socket (it is a pipe); fd:N needs a connected stream socket"
    );
    let file = tempfile::tempfile().expect("tempfile");
    assert_eq!(
        fd_error(Some(OwnedFd::from(file)), 3),
        "fd 3 is not a socket (it is a regular file); fd:N needs a connected stream socket"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = std::os::unix::net::UnixListener::bind(dir.path().join("l.sock")).expect("bind");
    assert_eq!(
        fd_error(Some(OwnedFd::from(listener)), 3),
        "fd 3 is a listening socket; fd:N needs a connected stream socket"
    );
    assert_eq!(fd_error(None, 9), "fd 9 is not open");
}

#[tokio::test]
async fn inherited_fd_refuses_own_and_standard_fds() {
    let err = inherited_fd(1000).map(|_| ()).expect_err("not open");
    assert_eq!(err.to_string(), "fd 1000 is not open");
    // Everything this process opens is close-on-exec, so it cannot be an inherited fd.
    let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let n = std::os::fd::AsRawFd::as_raw_fd(&a);
    let err = inherited_fd(n).map(|_| ()).expect_err("own fd");
    assert!(err.to_string().contains("was not inherited"), "{err}");
    let err = inherited_fd(1).map(|_| ()).expect_err("stdout");
    assert!(err.to_string().contains("stdio"), "{err}");
}

// ---------------------------------------------------------------- stdio

#[test]
fn stdio_is_one_connection() {
    let mut child = helper_command("stdio-echo")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("helper");
    let rx = lines_of(child.stdout.take().expect("stdout"));
    // libtest prints its own header first; the helper's lines follow.
    line_with(&rx, "READY");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"hello through stdio\n").expect("write");
    assert_eq!(line_with(&rx, "ECHO "), "hello through stdio");
    assert_eq!(wait_std(&mut child, DEADLINE).code(), Some(0));
}

// ---------------------------------------------------------------- the binary

fn proxy_with_fd3(upstream: &[String]) -> (Child, std::os::unix::net::UnixStream) {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let up = shlex::try_join(upstream.iter().map(String::as_str)).expect("quote");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_contract-proxy"));
    cmd.args([
        "run",
        "--contract",
        "rukh",
        "--log",
        "json",
        "--listen",
        "fd:3",
    ])
    .arg("--upstream")
    .arg(format!("exec-fd:3:{up}"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    with_fd3(&mut cmd, OwnedFd::from(theirs));
    let child = cmd.spawn().expect("proxy");
    drop(cmd);
    ours.set_read_timeout(Some(DEADLINE)).expect("timeout");
    (child, ours)
}

fn read_std_frame(s: &mut std::os::unix::net::UnixStream) -> Vec<u8> {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).expect("frame header");
    let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
    s.read_exact(&mut body).expect("frame body");
    body
}

#[test]
fn proxy_in_place_of_an_extension_passes_frames_and_exit_codes() {
    for code in [7, 124] {
        let (mut proxy, mut core) = proxy_with_fd3(&peer(&["rukh-ext", "3", &code.to_string()]));
        let _events = lines_of(proxy.stdout.take().expect("stdout"));
        let req = json!({"jsonrpc": "2.0", "id": "c:1", "method": "rukh.initialize", "params": {"n": code}});
        core.write_all(&frame(&serde_json::to_vec(&req).expect("json")))
            .expect("write");
        let reply: Value = serde_json::from_slice(&read_std_frame(&mut core)).expect("json");
        assert_eq!(reply["id"], "c:1");
        assert_eq!(reply["result"]["params"], json!({"n": code}));
        assert_eq!(
            reply["result"]["fds"],
            json!([0, 1, 2, 3]),
            "the extension sees fd 3 only: the proxy's own fd 3 did not leak"
        );
        core.shutdown(std::net::Shutdown::Write)
            .expect("half-close");
        let status = wait_std(&mut proxy, DEADLINE);
        assert_eq!(status.code(), Some(code), "{status:?}");
    }
}

#[test]
fn proxy_exits_with_its_extension_while_the_core_still_holds_fd3() {
    // A launcher detects the end by EOF and by waiting for the process; it
    // need not close its end first, so the proxy must not wait for that.
    let (mut proxy, mut core) = proxy_with_fd3(&peer(&["rukh-ext", "3", "125", "once"]));
    let _events = lines_of(proxy.stdout.take().expect("stdout"));
    let req = json!({"jsonrpc": "2.0", "id": "c:1", "method": "rukh.initialize", "params": {}});
    core.write_all(&frame(&serde_json::to_vec(&req).expect("json")))
        .expect("write");
    let reply: Value = serde_json::from_slice(&read_std_frame(&mut core)).expect("json");
    assert_eq!(reply["id"], "c:1");
    let status = wait_std(&mut proxy, DEADLINE);
    assert_eq!(status.code(), Some(125), "{status:?}");
    let mut rest = Vec::new();
    core.read_to_end(&mut rest)
        .expect("EOF after the proxy exits");
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn proxy_forwards_sigterm_and_dies_like_its_extension() {
    let (mut proxy, _core) = proxy_with_fd3(&peer(&["wait-signal"]));
    let rx = lines_of(proxy.stdout.take().expect("stdout"));
    let cpid: i32 = line_with(&rx, "CHILD READY ").trim().parse().expect("pid");
    // The proxy installs its handlers right after starting the child; python's
    // start-up up to this line takes far longer.
    kill(
        Pid::from_raw(i32::try_from(proxy.id()).expect("pid")),
        Signal::SIGTERM,
    )
    .expect("signal the proxy");
    let status = try_wait_std(&mut proxy, DEADLINE);
    let gone = pid_gone(cpid);
    if !gone {
        let _ = kill(Pid::from_raw(cpid), Signal::SIGKILL);
    }
    let status = status.unwrap_or_else(|| panic!("the proxy ignored SIGTERM for {DEADLINE:?}"));
    assert!(
        gone,
        "SIGTERM was not forwarded: extension {cpid} outlived the proxy"
    );
    assert_eq!(status.signal(), Some(15), "{status:?}");
}

#[test]
fn proxy_forwards_sigterm_and_dies_like_its_extension_once_the_core_closes() {
    // Today's relay ends a stand-in's route at the launcher's EOF; until it
    // also ends at the child's exit, the launcher closes first here.
    let (mut proxy, core) = proxy_with_fd3(&peer(&["wait-signal"]));
    let rx = lines_of(proxy.stdout.take().expect("stdout"));
    let cpid: i32 = line_with(&rx, "CHILD READY ").trim().parse().expect("pid");
    kill(
        Pid::from_raw(i32::try_from(proxy.id()).expect("pid")),
        Signal::SIGTERM,
    )
    .expect("signal the proxy");
    let start = Instant::now();
    while !pid_ended(cpid) {
        if start.elapsed() > DEADLINE {
            let _ = kill(Pid::from_raw(cpid), Signal::SIGKILL);
            let _ = proxy.kill();
            let _ = proxy.wait();
            panic!("SIGTERM was not forwarded: extension {cpid} still runs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(core);
    let status = wait_std(&mut proxy, DEADLINE);
    assert!(pid_gone(cpid), "the proxy reaped its extension");
    assert_eq!(status.signal(), Some(15), "{status:?}");
}
