//! What the tests of the proxy binary share: start `contract-proxy run --log
//! json` as a child, read its live view and its stderr with deadlines, and the
//! small socket and frame helpers every relay test needs.
//!
//! Included with `mod harness;`; each test file uses a part of it.
#![allow(dead_code)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// Deadline for any single wait of a test.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A running proxy; killed when dropped.
pub struct Proxy {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    errs: std::sync::mpsc::Receiver<String>,
    /// Connection notes passed over while waiting for events, for `note` to find: a note
    /// written by a spawned task (an inbox notice) may show before the event behind it.
    notes: Vec<String>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `contract-proxy run --log json ARGS`, stdout (the live view) and stderr
/// drained on threads, so the proxy never blocks on a full pipe.
pub fn run(args: &[&str]) -> Proxy {
    run_scaled(args, 1.0)
}

/// `run`, with the contract's durations scaled by `scale` (CONTRACT_TIME_SCALE), so a
/// test of a 30 s deadline waits 3 s at 0.1.
pub fn run_scaled(args: &[&str], scale: f64) -> Proxy {
    let mut child = proxy_command(args, scale)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("proxy starts");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::unbounded_channel();
    on_lines(stdout, move |line| tx.send(line).is_ok());
    let (etx, errs) = std::sync::mpsc::channel();
    on_lines(stderr, move |line| {
        let _ = etx.send(line);
        true
    });
    Proxy {
        child,
        lines,
        errs,
        notes: Vec::new(),
    }
}

/// Read `from` line by line on a thread of its own (so the proxy never blocks on a
/// full pipe), handing each line to `each` until it returns false or `from` ends.
fn on_lines<R>(from: R, mut each: impl FnMut(String) -> bool + Send + 'static)
where
    R: std::io::Read + Send + 'static,
{
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
            if !each(line) {
                break;
            }
        }
    });
}

fn proxy_command(args: &[&str], scale: f64) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_contract-proxy"));
    cmd.args(["run", "--log", "json"])
        .args(args)
        .env(contract::TIME_SCALE_ENV, scale.to_string());
    cmd
}

/// `run` with `--listen stdio`: the proxy's stdin and stdout are pipes, returned as
/// the client's one byte stream, as for a program that launched the proxy in place
/// of its server. The live view then shares stderr with the proxy's own lines.
pub fn run_stdio(args: &[&str]) -> (Proxy, contract_transport::conn::BoxIo) {
    use std::os::fd::OwnedFd;
    let (in_rd, in_wr) = std::io::pipe().expect("pipe");
    let (out_rd, out_wr) = std::io::pipe().expect("pipe");
    let mut all = vec!["--listen", "stdio"];
    all.extend_from_slice(args);
    let mut child = proxy_command(&all, 1.0)
        .stdin(Stdio::from(OwnedFd::from(in_rd)))
        .stdout(Stdio::from(OwnedFd::from(out_wr)))
        .stderr(Stdio::piped())
        .spawn()
        .expect("proxy starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::unbounded_channel();
    let (etx, errs) = std::sync::mpsc::channel();
    on_lines(stderr, move |line| {
        if line.starts_with('{') {
            let _ = tx.send(line);
        } else {
            let _ = etx.send(line);
        }
        true
    });
    // Our ends of the pipes; the child's ends close here with the Command.
    let rd = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(out_rd))
        .expect("stdout pipe");
    let wr =
        tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(in_wr)).expect("stdin pipe");
    let proxy = Proxy {
        child,
        lines,
        errs,
        notes: Vec::new(),
    };
    (proxy, Box::new(tokio::io::join(rd, Closing(Some(wr)))))
}

/// A pipe's write end whose shutdown closes it (tokio's is a no-op there), as a
/// launcher closes the proxy's stdin.
struct Closing(Option<tokio::net::unix::pipe::Sender>);

impl AsyncWrite for Closing {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.0.as_mut() {
            Some(w) => std::pin::Pin::new(w).poll_write(cx, buf),
            None => std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.0.as_mut() {
            Some(w) => std::pin::Pin::new(w).poll_flush(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.0 = None;
        std::task::Poll::Ready(Ok(()))
    }
}

impl Proxy {
    /// The next live-view line (event or note) within `limit`.
    pub async fn line(&mut self, limit: Duration, what: &str) -> Value {
        let line = timeout(limit, self.lines.recv())
            .await
            .unwrap_or_else(|_| panic!("the live view shows {what} in time"))
            .unwrap_or_else(|| panic!("the proxy exited before showing {what}"));
        serde_json::from_str(&line).expect("json line")
    }

    /// The next `n` inspection events (connection notes skipped), all within one deadline.
    pub async fn events(&mut self, n: usize) -> Vec<Value> {
        let mut left = n;
        self.events_until(&format!("{n} events"), |_| {
            left -= 1;
            left == 0
        })
        .await
    }

    /// Inspection events (notes skipped) up to and including the first that
    /// satisfies `want`, all within one deadline.
    pub async fn events_until(
        &mut self,
        what: &str,
        mut want: impl FnMut(&Value) -> bool,
    ) -> Vec<Value> {
        let end = Instant::now() + DEADLINE;
        let mut out = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let v = self.line(left, what).await;
            if v.get("verdict").is_none() {
                if let Some(n) = v.get("note").and_then(Value::as_str) {
                    self.notes.push(n.to_string());
                }
                continue;
            }
            let done = want(&v);
            out.push(v);
            if done {
                return out;
            }
        }
    }

    /// Every inspection event still to come, up to the end of the live view (the proxy
    /// exited), within the deadline.
    pub async fn rest_of_log(&mut self) -> Vec<Value> {
        let end = Instant::now() + DEADLINE;
        let mut out = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let line = timeout(left, self.lines.recv())
                .await
                .expect("the live view ends in time");
            let Some(line) = line else { return out };
            let v: Value = serde_json::from_str(&line).expect("json line");
            if v.get("verdict").is_some() {
                out.push(v);
            }
        }
    }

    /// How many of the inspection events still to come (up to the proxy's exit) went
    /// up, from the client, with `method`.
    pub async fn logged_up(&mut self, method: &str) -> usize {
        self.rest_of_log()
            .await
            .iter()
            .filter(|e| e["dir"] == "up" && e["method"] == method)
            .count()
    }

    /// The first inspection event that satisfies `want`.
    pub async fn until(&mut self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        self.events_until(what, want)
            .await
            .pop()
            .expect("at least the match")
    }

    /// The first connection note containing `text`, among those passed over by the
    /// event waits, then the ones still to come.
    pub async fn note(&mut self, text: &str) -> String {
        if let Some(i) = self.notes.iter().position(|n| n.contains(text)) {
            return self.notes.remove(i);
        }
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let v = self.line(left, text).await;
            if let Some(n) = v.get("note").and_then(Value::as_str)
                && n.contains(text)
            {
                return n.to_string();
            }
        }
    }

    /// The proxy's process id (for /proc: its memory and open files).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send the proxy a signal, as `kill -SIG` would (e.g. "TERM").
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// How the proxy exited, within the deadline.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(Instant::now() < end, "the proxy is still running");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop the proxy (SIGTERM), wait for its exit, and return what it wrote on
    /// stderr that was not yet read: the end-of-run counters among it.
    pub async fn stop_and_summary(&mut self) -> Vec<String> {
        self.signal("TERM");
        assert!(self.exited().await.success(), "the proxy exits 0");
        let mut out = Vec::new();
        while let Ok(line) = self.errs.recv_timeout(DEADLINE) {
            out.push(line);
        }
        out
    }

    /// The address the proxy reports listening on ("listening on ADDR → …").
    pub fn url(&self) -> String {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let line = self
                .errs
                .recv_timeout(left)
                .expect("the proxy reports its address in time");
            if let Some(rest) = line.split("listening on ").nth(1) {
                return rest.split_whitespace().next().expect("url").to_string();
            }
        }
    }
}

/// A proxy relaying toolchannel from `ws://127.0.0.1:0/worker` to `upstream` (a
/// `ws://…` URL), the worker connecting, in `mode`, with the contract's durations
/// scaled by `scale`; and the URL it listens on.
pub fn toolchannel(upstream: &str, mode: &str, scale: f64) -> (Proxy, String) {
    let p = run_scaled(
        &[
            "--contract",
            "toolchannel",
            "--client",
            "worker",
            "--mode",
            mode,
            "--listen",
            "ws://127.0.0.1:0/worker",
            "--upstream",
            upstream,
        ],
        scale,
    );
    let url = p.url();
    (p, url)
}

/// Wait (bounded) for a socket file to appear.
///
/// For a unix socket, "appeared" means listening. The file exists from `bind()` on,
/// but a connect before the owner's `listen()` is refused, and a busy machine can hold
/// a process between the two. The listening state is read from /proc/net/unix, so the
/// wait makes no connection that the owner would see.
pub async fn wait_for(path: &Path) {
    let end = Instant::now() + DEADLINE;
    while !ready(path) {
        assert!(Instant::now() < end, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Whether `path` exists and, when it is a unix socket, something listens on it.
pub fn ready(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_socket() => unix_listening(path),
        Ok(_) => true,
        Err(_) => false,
    }
}

/// Whether some socket listens on `path` (`__SO_ACCEPTCON` in /proc/net/unix's flags).
fn unix_listening(path: &Path) -> bool {
    const ACCEPTCON: u32 = 0x10000;
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return true;
    };
    let want = path.to_string_lossy();
    table.lines().skip(1).any(|row| {
        let cols: Vec<&str> = row.split_whitespace().collect();
        let flags = cols.get(3).and_then(|f| u32::from_str_radix(f, 16).ok());
        cols.get(7) == Some(&want.as_ref()) && flags.is_some_and(|f| f & ACCEPTCON != 0)
    })
}

/// A process's resident memory, KiB (from /proc).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A process's open files (from /proc).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("proc fd")
        .count()
}

/// A process's open files and RSS once its connections have wound down (the count
/// reached `want`, or stopped moving), within the deadline.
pub async fn settled(pid: u32, want: Option<usize>) -> (usize, u64) {
    let end = Instant::now() + DEADLINE;
    let mut last = fd_count(pid);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = fd_count(pid);
        let done = match want {
            Some(w) => now <= w,
            None => now == last,
        };
        if done || Instant::now() > end {
            return (now, rss_kib(pid));
        }
        last = now;
    }
}

/// Many short connections judged by what they leave behind: open files must come back
/// exactly, and memory is judged by its trend, not one reading. Each phase of
/// connections must end where it began, within an allowance; a phase that grows is
/// given up to two more. A leak grows in every phase, while the allocator's own swings
/// (up to 900 KiB once in a while, with no trend over 20,000 connections) do not repeat.
pub struct Churn {
    pid: u32,
    fds0: usize,
    rss0: u64,
    growth: Vec<u64>,
}

impl Churn {
    /// Phases this many at most.
    pub const PHASES: usize = 3;

    /// Start measuring `pid` (after its warm-up).
    pub async fn start(pid: u32) -> Churn {
        let (fds0, rss0) = settled(pid, None).await;
        Churn {
            pid,
            fds0,
            rss0,
            growth: Vec::new(),
        }
    }

    /// A phase of `n` connections is over: whether it ended level (RSS within
    /// `allowance_kib` of its start). Open files must be back either way.
    pub async fn phase_ends_level(&mut self, n: usize, allowance_kib: u64) -> bool {
        let (fds, rss) = settled(self.pid, Some(self.fds0)).await;
        eprintln!(
            "after {n} more connections: {fds} open files (from {}), RSS {rss} KiB (from {} KiB)",
            self.fds0, self.rss0
        );
        assert_eq!(fds, self.fds0, "open files after {n} connections");
        self.growth.push(rss.saturating_sub(self.rss0));
        let level = rss <= self.rss0 + allowance_kib;
        self.rss0 = rss;
        level
    }

    /// The verdict once no phase ended level.
    pub fn leaked(&self, n: usize) -> ! {
        panic!(
            "RSS grew in every phase of {n} connections: {:?} KiB",
            self.growth
        )
    }
}

/// A unix endpoint as the proxy's flags spell it.
pub fn ep(p: &Path) -> String {
    format!("unix:{}", p.display())
}

/// One length-prefixed frame (u32 big-endian length, then the body).
pub fn frame(body: impl AsRef<[u8]>) -> Vec<u8> {
    let body = body.as_ref();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Read one length-prefixed frame within the deadline.
pub async fn read_frame(s: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    timeout(DEADLINE, async {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.expect("a frame, not EOF");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).await.expect("frame body");
        body
    })
    .await
    .expect("a frame in time")
}

/// Write `v` as one length-prefixed JSON frame within the deadline.
pub async fn send_json(s: &mut (impl AsyncWrite + Unpin), v: &Value) {
    timeout(DEADLINE, s.write_all(&frame(v.to_string())))
        .await
        .expect("written in time")
        .expect("write");
}

/// Read one length-prefixed JSON frame within the deadline.
pub async fn read_json(s: &mut (impl AsyncRead + Unpin)) -> Value {
    serde_json::from_slice(&read_frame(s).await).expect("json frame")
}

/// rukh's first exchange (request, result), from the contract's own examples:
/// nothing may come before it.
pub fn rukh_initialize() -> (Vec<u8>, Vec<u8>) {
    use contract::model::Part;
    let c = contract::builtin("rukh").expect("rukh");
    let ex = &c.methods["rukh.initialize"].examples;
    let part = |p: Part| {
        serde_json::to_vec(&ex.iter().find(|e| e.part == p).expect("example").message)
            .expect("json")
    };
    (part(Part::Call), part(Part::Result))
}

/// A CA and a leaf for 127.0.0.1/localhost it signed, written as PEM files.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub leaf_der: Vec<u8>,
}

pub fn make_pki(ca_name: &str) -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
    let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("leaf params")
        .signed_by(&leaf_key, &ca)
        .expect("leaf");
    let write = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write pem");
        p
    };
    Pki {
        ca: write("ca.pem", ca.pem()),
        cert: write("cert.pem", leaf.pem()),
        key: write("key.pem", leaf_key.serialize_pem()),
        leaf_der: leaf.der().to_vec(),
        _dir: dir,
    }
}

/// Deadline for a wait that includes a TLS or QUIC handshake, or a mebibyte through one.
pub const SECURE_WAIT: Duration = Duration::from_secs(20);

/// `fut` within [`SECURE_WAIT`], or a panic naming `what`.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    timeout(SECURE_WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: deadline passed"))
}

/// Endpoint options with `tls` and the ALPN id `alpn`.
pub fn secure_opts(
    alpn: &[u8],
    tls: contract_transport::endpoint::tls::TlsOpts,
) -> contract_transport::endpoint::Options {
    contract_transport::endpoint::Options {
        tls,
        alpn: alpn.to_vec(),
        ..contract_transport::endpoint::Options::default()
    }
}

/// [`secure_opts`] for a client that pins `pin`.
pub fn pinned_opts(alpn: &[u8], pin: &str) -> contract_transport::endpoint::Options {
    secure_opts(
        alpn,
        contract_transport::endpoint::tls::TlsOpts {
            pin: Some(pin.to_string()),
            ..Default::default()
        },
    )
}

/// Reads to EOF, refusing more than `limit` bytes.
pub async fn read_all(r: &mut (impl AsyncRead + Unpin), limit: u64) -> Vec<u8> {
    let mut out = Vec::new();
    r.take(limit + 1)
        .read_to_end(&mut out)
        .await
        .expect("read to EOF");
    assert!(out.len() as u64 <= limit, "more than {limit} bytes");
    out
}

/// The ALPN id the proxy offers for contract `name` over QUIC and TLS (`<name>/<major>`).
pub fn contract_alpn(name: &str) -> String {
    let c = contract_proxy::contract_for(name).expect("a built-in contract");
    let o = contract_transport::endpoint::Options::for_contract(&c, "", Default::default());
    String::from_utf8(o.alpn).expect("UTF-8")
}
