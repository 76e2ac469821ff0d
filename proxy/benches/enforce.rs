//! Enforcement benchmarks (issue 7), each beside its baseline in the same run.
//!
//! 1. Kernel control round trip (ping → pong) through an enforcing proxy while a
//!    4 KiB-frame data stream saturates the paired data channel, against the same
//!    round trip with the data channel idle. Seed 000 4.0-D07: PCM must not
//!    degrade control latency. Target p99 ratio ≤ 1.5.
//! 2. Peak RSS (VmHWM) of an enforcing proxy while a core that ignores credit
//!    pushes 1 GiB of data frames, beside socat's peak relaying the same bytes.
//!    Target ≤ 64 MiB.
//! 3. Control round trip with tracing on (OTLP gRPC to an in-process receiver,
//!    the official TraceService) against tracing off. Target p50 ratio ≤ 1.2.
//!
//! Loaded and idle rounds (and traced and untraced ones) alternate so machine
//! drift hits both alike. Peers use blocking sockets on their own threads, so the
//! peer side never queues behind itself.
//!
//! `cargo bench -p contract-proxy --bench enforce` (ENFORCE_BENCH_ROUNDS,
//! ENFORCE_BENCH_ITERS, ENFORCE_BENCH_FLOOD_MIB to change the sample sizes).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(20);
const DATA_PAYLOAD: usize = 4096;

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn example(method: &str) -> Value {
    let c = contract::builtin("kernel").expect("kernel");
    c.methods[method].examples[0].message.clone()
}

fn control(v: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(v).expect("json");
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

fn read_control(s: &mut UnixStream) -> std::io::Result<Value> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// `n` data frames of stream `stream` in one buffer, sequence numbers from `seq`.
fn data_frames(stream: u32, seq: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * (16 + DATA_PAYLOAD));
    for i in 0..n as u64 {
        out.extend_from_slice(&((12 + DATA_PAYLOAD) as u32).to_be_bytes());
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(&(seq + i).to_be_bytes());
        out.resize(out.len() + DATA_PAYLOAD, 0x5a);
    }
    out
}

fn wait_for(p: &Path) {
    let until = Instant::now() + DEADLINE;
    while !p.exists() {
        assert!(Instant::now() < until, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ep(p: &Path) -> String {
    format!("unix:{}", p.display())
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// VmHWM (peak resident set) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A kernel session through a proxy started with `extra` args: the core's two
/// sockets (client side) and the shell's two accepted sockets.
struct Session {
    proxy: Kill,
    core_control: UnixStream,
    core_data: UnixStream,
    shell_control: UnixStream,
    shell_data: UnixStream,
}

fn session(dir: &Path, tag: &str, extra: &[&str]) -> Session {
    let p = |n: &str| dir.join(format!("{tag}-{n}"));
    let (lc, ld, uc, ud) = (p("c.p"), p("d.p"), p("c.s"), p("d.s"));
    let shell_control = UnixListener::bind(&uc).expect("bind");
    let shell_data = UnixListener::bind(&ud).expect("bind");
    let mut args = vec![
        "run".to_string(),
        "--log".into(),
        "json".into(),
        "--contract".into(),
        "kernel".into(),
        "--listen".into(),
        ep(&lc),
        "--upstream".into(),
        ep(&uc),
        "--pair-listen".into(),
        ep(&ld),
        "--pair-upstream".into(),
        ep(&ud),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let proxy = Kill(
        Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("proxy starts"),
    );
    wait_for(&lc);
    wait_for(&ld);
    let core_control = UnixStream::connect(&lc).expect("control");
    let (shell_control, _) = shell_control.accept().expect("accept control");
    let core_data = UnixStream::connect(&ld).expect("data");
    let (shell_data, _) = shell_data.accept().expect("accept data");
    for s in [&core_control, &core_data, &shell_control, &shell_data] {
        s.set_read_timeout(Some(DEADLINE)).expect("timeout");
        s.set_write_timeout(Some(DEADLINE)).expect("timeout");
    }
    Session {
        proxy,
        core_control,
        core_data,
        shell_control,
        shell_data,
    }
}

/// The core answers every ping with a pong, until the socket closes.
fn pong_server(mut s: UnixStream) {
    let pong = example("pong");
    std::thread::spawn(move || {
        while let Ok(ping) = read_control(&mut s) {
            if ping["method"] != "ping" {
                continue;
            }
            let mut p = pong.clone();
            p["correlation_id"] = ping["id"].clone();
            p["trace_id"] = ping["trace_id"].clone();
            if s.write_all(&control(&p)).is_err() {
                return;
            }
        }
    });
}

/// `iters` ping → pong round trips from the shell's side; the RTTs.
fn round_trips(s: &mut UnixStream, iters: usize, from: &mut u64) -> Vec<Duration> {
    let ping = example("ping");
    let mut out = Vec::with_capacity(iters);
    for _ in 0..iters {
        *from += 1;
        let mut p = ping.clone();
        p["id"] = json!(format!("s-{from}"));
        p["trace_id"] = json!(format!("t-{from}"));
        let bytes = control(&p);
        let t = Instant::now();
        s.write_all(&bytes).expect("ping");
        let got = read_control(s).expect("pong in time");
        out.push(t.elapsed());
        assert_eq!(got["correlation_id"], p["id"], "pong answers the ping");
    }
    out
}

/// 1. Control RTT with the data channel saturated vs idle.
fn control_under_load(dir: &Path, rounds: usize, iters: usize) {
    let mut s = session(dir, "load", &["--mode", "enforce"]);
    // Stream 12 (audio.output): the core sends, the shell grants.
    let mut open = example("stream.open");
    open["payload"]["stream_id"] = json!(12);
    open["payload"]["kind"] = json!("audio.output");
    s.core_control.write_all(&control(&open)).expect("open");
    read_control(&mut s.shell_control).expect("open relayed");
    pong_server(s.core_control.try_clone().expect("clone"));

    // The shell's data sink keeps granting what it consumed, as a receiver does.
    let consumed = Arc::new(AtomicU64::new(0));
    let mut credit_writer = s.shell_control.try_clone().expect("clone");
    let grant = move |bytes: u64, n: u64| {
        let mut c = example("stream.credit");
        c["id"] = json!(format!("s-credit-{n}"));
        c["stream_id"] = json!(12);
        c["payload"]["bytes"] = json!(bytes);
        control(&c)
    };
    // The first grant comes before any data; later grants ride the ping socket's writer lock.
    let window: u64 = 8 << 20;
    credit_writer.write_all(&grant(window, 0)).expect("credit");
    let writer = Arc::new(std::sync::Mutex::new(credit_writer));
    {
        let (consumed, writer) = (consumed.clone(), writer.clone());
        let mut sink = s.shell_data.try_clone().expect("clone");
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            let mut since_grant = 0u64;
            let mut n = 0;
            while let Ok(k) = sink.read(&mut buf) {
                if k == 0 {
                    return;
                }
                consumed.fetch_add(k as u64, Ordering::Relaxed);
                since_grant += k as u64;
                if since_grant >= window / 2 {
                    n += 1;
                    // Frames carry 16 header bytes per 4096 payload: grant payload bytes only.
                    let payload = since_grant * DATA_PAYLOAD as u64 / (DATA_PAYLOAD as u64 + 16);
                    since_grant = 0;
                    let Ok(mut w) = writer.lock() else { return };
                    if w.write_all(&grant(payload, n)).is_err() {
                        return;
                    }
                }
            }
        });
    }
    // The core's sender pushes whenever `loaded` is set.
    let loaded = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    {
        let (loaded, done) = (loaded.clone(), done.clone());
        let mut tx = s.core_data.try_clone().expect("clone");
        std::thread::spawn(move || {
            let mut seq = 0u64;
            while !done.load(Ordering::Relaxed) {
                if !loaded.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let batch = data_frames(12, seq, 16);
                seq += 16;
                if tx.write_all(&batch).is_err() {
                    return;
                }
            }
        });
    }
    // The pings share the credit writer's socket: take the lock per ping.
    let mut ping_socket = s.shell_control.try_clone().expect("clone");
    let mut idle = Vec::new();
    let mut busy = Vec::new();
    let mut id = 0;
    let mut moved = 0;
    for _ in 0..rounds {
        loaded.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        {
            let _w = writer.lock().expect("lock");
            idle.extend(round_trips(&mut ping_socket, iters, &mut id));
        }
        let before = consumed.load(Ordering::Relaxed);
        loaded.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        for _ in 0..iters {
            let _w = writer.lock().expect("lock");
            busy.extend(round_trips(&mut ping_socket, 1, &mut id));
        }
        moved += consumed.load(Ordering::Relaxed) - before;
    }
    loaded.store(false, Ordering::Relaxed);
    done.store(true, Ordering::Relaxed);
    let (i50, i99) = (pct(&mut idle, 0.5), pct(&mut idle, 0.99));
    let (b50, b99) = (pct(&mut busy, 0.5), pct(&mut busy, 0.99));
    println!(
        "control RTT, data idle      p50 {:.1} µs  p99 {:.1} µs",
        us(i50),
        us(i99)
    );
    println!(
        "control RTT, data saturated p50 {:.1} µs  p99 {:.1} µs  ({} MiB of 4 KiB frames moved meanwhile)",
        us(b50),
        us(b99),
        moved >> 20
    );
    println!(
        "→ saturated/idle ratio p50 {:.2}  p99 {:.2} (target p99 ≤ 1.5)",
        us(b50) / us(i50),
        us(b99) / us(i99)
    );
    drop(s.proxy);
}

/// 2. Peak RSS of the proxy, and of socat, relaying a credit-ignoring 1 GiB.
fn rss_under_flood(dir: &Path, mib: usize) {
    let total_frames = (mib << 20) / DATA_PAYLOAD;
    let batch = 64;
    // Drain whatever arrives on `s` to EOF on a thread; the byte count.
    let drain = |mut s: UnixStream| {
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            let mut n = 0u64;
            while let Ok(k) = s.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
            n
        })
    };
    let push = |mut s: UnixStream| {
        let mut seq = 0;
        while seq < total_frames as u64 {
            s.write_all(&data_frames(12, seq, batch)).expect("flood");
            seq += batch as u64;
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
    };

    // The proxy, enforcing: stream 12 opened, no credit ever granted.
    let s = session(dir, "flood", &["--mode", "enforce"]);
    let pid = s.proxy.0.id();
    let idle_rss = peak_rss_kib(pid);
    let mut open = example("stream.open");
    open["payload"]["stream_id"] = json!(12);
    open["payload"]["kind"] = json!("audio.output");
    let mut cc = s.core_control.try_clone().expect("clone");
    cc.write_all(&control(&open)).expect("open");
    // Both control sides read what the proxy says about the overrun.
    let core_heard = drain(s.core_control.try_clone().expect("clone"));
    let shell_heard = drain(s.shell_control.try_clone().expect("clone"));
    let sink = drain(s.shell_data.try_clone().expect("clone"));
    let t = Instant::now();
    push(s.core_data.try_clone().expect("clone"));
    let received = {
        // The proxy half-closes toward the shell once the core is done.
        let until = Instant::now() + DEADLINE;
        while !sink.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        sink.join().unwrap_or(0)
    };
    let secs = t.elapsed().as_secs_f64();
    let proxy_peak = peak_rss_kib(pid);
    for sock in [&s.core_control, &s.shell_control] {
        let _ = sock.shutdown(std::net::Shutdown::Both);
    }
    let _ = (core_heard.join(), shell_heard.join());
    drop(s.proxy);

    // socat relaying the same bytes (no inspection, no enforcement).
    let (l, u) = (dir.join("socat.p"), dir.join("socat.s"));
    let upstream = UnixListener::bind(&u).expect("bind");
    let socat = Kill(
        Command::new("socat")
            .arg(format!("UNIX-LISTEN:{}", l.display()))
            .arg(format!("UNIX-CONNECT:{}", u.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat is installed (apt-get install socat)"),
    );
    wait_for(&l);
    let client = UnixStream::connect(&l).expect("connect");
    let (server, _) = upstream.accept().expect("accept");
    let sink = drain(server);
    // socat exits with its one connection: read its peak while it still runs.
    let socat_pid = socat.0.id();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(peak_rss_kib(socat_pid));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    push(client);
    let _ = sink.join();
    stop.store(true, Ordering::Relaxed);
    let socat_peak = sampler.join().unwrap_or(0);
    drop(socat);
    println!(
        "flood: {mib} MiB of 4 KiB frames on a stream with no credit, {:.0} MiB/s; {} MiB reached the shell",
        (mib as f64) / secs,
        received >> 20
    );
    println!(
        "→ proxy peak RSS {:.1} MiB (at start {:.1} MiB; target ≤ 64 MiB); socat peak RSS {:.1} MiB",
        proxy_peak as f64 / 1024.0,
        idle_rss as f64 / 1024.0,
        socat_peak as f64 / 1024.0
    );
}

#[derive(Clone, Default)]
struct Collector(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let n: usize = req
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(n as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// 3. Control RTT with tracing on vs off.
fn tracing_cost(dir: &Path, rounds: usize, iters: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let spans = Collector::default();
    let url = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(spans.clone()))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        format!("http://{addr}")
    });
    let mut off = session(dir, "off", &[]);
    let mut on = session(dir, "on", &["--otlp", &url]);
    pong_server(off.core_control.try_clone().expect("clone"));
    pong_server(on.core_control.try_clone().expect("clone"));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut id = 0;
    for _ in 0..rounds {
        a.extend(round_trips(&mut off.shell_control, iters, &mut id));
        b.extend(round_trips(&mut on.shell_control, iters, &mut id));
    }
    // A stop (SIGTERM) flushes the exporter; then count what the receiver got.
    let pid = nix::unistd::Pid::from_raw(on.proxy.0.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let until = Instant::now() + DEADLINE;
    while on.proxy.0.try_wait().ok().flatten().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(on.proxy);
    drop(off.proxy);
    let (a50, a99) = (pct(&mut a, 0.5), pct(&mut a, 0.99));
    let (b50, b99) = (pct(&mut b, 0.5), pct(&mut b, 0.99));
    println!(
        "control RTT, tracing off p50 {:.1} µs  p99 {:.1} µs",
        us(a50),
        us(a99)
    );
    println!(
        "control RTT, tracing on  p50 {:.1} µs  p99 {:.1} µs  ({} spans exported to the receiver)",
        us(b50),
        us(b99),
        spans.0.load(Ordering::Relaxed)
    );
    println!(
        "→ on/off ratio p50 {:.2}  p99 {:.2} (target ≤ 1.2)",
        us(b50) / us(a50),
        us(b99) / us(a99)
    );
    drop(rt);
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this once, small.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = env_num("ENFORCE_BENCH_ROUNDS", if quick { 1 } else { 5 });
    let iters = env_num("ENFORCE_BENCH_ITERS", if quick { 50 } else { 1000 });
    let mib = env_num("ENFORCE_BENCH_FLOOD_MIB", if quick { 16 } else { 1024 });
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "enforcement benchmark: {rounds} rounds × {iters} round trips per case (release build of contract-proxy)"
    );
    control_under_load(dir.path(), rounds, iters);
    rss_under_flood(dir.path(), mib);
    tracing_cost(dir.path(), rounds, iters);
}
