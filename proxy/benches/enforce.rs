//! Enforcement benchmarks (issue 7), each beside its baseline in the same run.
//!
//! 1. Kernel control round trip (ping → pong) through an enforcing proxy while a
//!    4 KiB-frame data stream saturates the paired data channel, against the same
//!    round trip with the data channel idle; then with the stream paced
//!    (ENFORCE_BENCH_PACE_MIBS, 64 MiB/s: 2000× a 16 kHz PCM stream). The direct
//!    connection (socket pairs, no proxy) runs the same, as the machine's own
//!    baseline. Seed 000 4.0-D07: PCM must not degrade control latency. Target
//!    p99 ratio ≤ 1.5.
//! 2. Peak RSS (VmHWM) of an enforcing proxy while a core that ignores credit
//!    pushes 1 GiB of data frames, beside socat's peak relaying the same bytes.
//!    Target ≤ 64 MiB.
//! 3. Request → response round trip (settings.describe: one span per request,
//!    one trace per trace_id) with tracing on (OTLP gRPC to an in-process
//!    receiver, the official TraceService) against tracing off. Target ≤ 1.2.
//!    A second traced proxy exports to a receiver in the idle class: the ratio
//!    beside the verdict leaves out the receiver's decoding on these shared cores.
//!
//! Loaded and idle rounds (and traced and untraced ones) alternate so machine
//! drift hits both alike. Peers use blocking sockets on their own threads, so the
//! peer side never queues behind itself.
//!
//! `cargo bench -p contract-proxy --bench enforce` (ENFORCE_BENCH_ROUNDS,
//! ENFORCE_BENCH_TRACE_ROUNDS (benchmark 3's, 20), ENFORCE_BENCH_ITERS,
//! ENFORCE_BENCH_FLOOD_MIB to change the sample sizes; ENFORCE_BENCH_ONLY=1,3 to run
//! some of them).

mod common;

use common::{Kill, env_num, us};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
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

/// The `p` quantile of unsorted samples.
fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    common::pct(v, p)
}

/// VmHWM (peak resident set) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    common::status_kib(pid, "VmHWM:")
}

/// A kernel session through a proxy started with `extra` args: the core's two
/// sockets (client side) and the shell's two accepted sockets.
struct Session {
    /// None for the direct baseline (the peers' sockets paired with each other).
    proxy: Option<Kill>,
    core_control: UnixStream,
    core_data: UnixStream,
    shell_control: UnixStream,
    shell_data: UnixStream,
}

fn session(dir: &Path, tag: &str, extra: &[&str]) -> Session {
    session_with(dir, tag, extra, Stdio::null())
}

fn session_with(dir: &Path, tag: &str, extra: &[&str], stderr: Stdio) -> Session {
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
            .stderr(stderr)
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
    let mut s = Session {
        proxy: Some(proxy),
        core_control,
        core_data,
        shell_control,
        shell_data,
    };
    hello(&mut s);
    s
}

/// The shell's hello and the core's answer, as every kernel session starts: an enforcing
/// proxy refuses other work before it (the session machine's `outOfPlace`).
fn hello(s: &mut Session) {
    let c = contract::builtin("kernel").expect("kernel");
    let examples = &c.methods["hello"].examples;
    let mut call = examples[0].message.clone();
    call["id"] = json!("s-hello");
    let mut answer = (examples.iter())
        .find(|e| e.part == contract::model::Part::Result)
        .expect("a hello result example")
        .message
        .clone();
    answer["correlation_id"] = call["id"].clone();
    s.shell_control.write_all(&control(&call)).expect("hello");
    read_control(&mut s.core_control).expect("hello relayed");
    s.core_control.write_all(&control(&answer)).expect("answer");
    read_control(&mut s.shell_control).expect("hello answer relayed");
}

/// The same four sockets without a proxy: control and data each a socket pair.
fn direct() -> Session {
    let (core_control, shell_control) = UnixStream::pair().expect("pair");
    let (core_data, shell_data) = UnixStream::pair().expect("pair");
    for s in [&core_control, &core_data, &shell_control, &shell_data] {
        s.set_read_timeout(Some(DEADLINE)).expect("timeout");
        s.set_write_timeout(Some(DEADLINE)).expect("timeout");
    }
    let mut s = Session {
        proxy: None,
        core_control,
        core_data,
        shell_control,
        shell_data,
    };
    hello(&mut s);
    s
}

/// The core answers every ping with a pong and every settings.describe with its
/// result, until the socket closes.
fn pong_server(mut s: UnixStream) {
    let pong = example("pong");
    let c = contract::builtin("kernel").expect("kernel");
    let described = c.methods["settings.describe"]
        .examples
        .iter()
        .find(|e| e.part == contract::model::Part::Result)
        .expect("a settings.describe result example")
        .message
        .clone();
    std::thread::spawn(move || {
        while let Ok(m) = read_control(&mut s) {
            let mut answer = match m["method"].as_str() {
                Some("ping") => pong.clone(),
                Some("settings.describe") => described.clone(),
                _ => continue,
            };
            answer["correlation_id"] = m["id"].clone();
            answer["trace_id"] = m["trace_id"].clone();
            if s.write_all(&control(&answer)).is_err() {
                return;
            }
        }
    });
}

/// `iters` round trips of `method` (ping → pong, or a request → its response)
/// from the shell's side, each with its own id and trace id; the RTTs.
fn round_trips_of(method: &str, s: &mut UnixStream, iters: usize, from: &mut u64) -> Vec<Duration> {
    let c = contract::builtin("kernel").expect("kernel");
    let call = c.methods[method].examples[0].message.clone();
    let mut out = Vec::with_capacity(iters);
    for _ in 0..iters {
        *from += 1;
        let mut p = call.clone();
        p["id"] = json!(format!("s-{from}"));
        p["trace_id"] = json!(format!("t-{from}"));
        let bytes = control(&p);
        let t = Instant::now();
        s.write_all(&bytes).expect("send");
        let got = read_control(s).expect("answer in time");
        out.push(t.elapsed());
        assert_eq!(got["correlation_id"], p["id"], "the answer correlates");
    }
    out
}

/// Ping → pong round trips (§13 heartbeats).
fn round_trips(s: &mut UnixStream, iters: usize, from: &mut u64) -> Vec<Duration> {
    round_trips_of("ping", s, iters, from)
}

/// Control RTTs with the data channel idle and loaded, and the MiB moved meanwhile.
struct Load {
    idle: (Duration, Duration),
    busy: (Duration, Duration),
    moved_mib: u64,
}

/// Benchmark 1: control RTT with the data channel loaded vs idle, as fast as the
/// receiver takes it (`pace` None: saturated) or at `pace` MiB/s.
fn control_under_load(mut s: Session, rounds: usize, iters: usize, pace: Option<u64>) -> Load {
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
            let mut since: Option<(Instant, u64)> = None;
            while !done.load(Ordering::Relaxed) {
                if !loaded.load(Ordering::Relaxed) {
                    since = None;
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let batch = data_frames(12, seq, 16);
                seq += 16;
                if tx.write_all(&batch).is_err() {
                    return;
                }
                if let Some(mibs) = pace {
                    // Keep to the pace: sleep until the bytes sent so far are due.
                    let (t0, sent) = since.get_or_insert((Instant::now(), 0));
                    *sent += batch.len() as u64;
                    let due = Duration::from_secs_f64(*sent as f64 / (mibs << 20) as f64);
                    if let Some(wait) = due.checked_sub(t0.elapsed()) {
                        std::thread::sleep(wait);
                    }
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
    let load = Load {
        idle: (pct(&mut idle, 0.5), pct(&mut idle, 0.99)),
        busy: (pct(&mut busy, 0.5), pct(&mut busy, 0.99)),
        moved_mib: moved >> 20,
    };
    drop(s.proxy);
    load
}

/// Benchmark 1, both ways: direct (the machine's own degradation) and through an enforcing
/// proxy; saturated, then paced.
fn control_latency(dir: &Path, rounds: usize, iters: usize, pace: u64) {
    let mut ratios = Vec::new();
    for (load, pace) in [("saturated", None), ("paced", Some(pace))] {
        let what = match pace {
            Some(p) => format!("data paced at {p} MiB/s"),
            None => "data saturated".to_string(),
        };
        let direct = control_under_load(direct(), rounds, iters, pace);
        let tag = format!("load-{load}");
        let proxied = control_under_load(
            session(dir, &tag, &["--mode", "enforce"]),
            rounds,
            iters,
            pace,
        );
        for (name, l) in [("direct", &direct), ("proxy ", &proxied)] {
            println!(
                "{name} control RTT p50/p99 µs: data idle {:.1}/{:.1}, {what} {:.1}/{:.1} ({} MiB moved) → ratio p50 {:.2} p99 {:.2}",
                us(l.idle.0),
                us(l.idle.1),
                us(l.busy.0),
                us(l.busy.1),
                l.moved_mib,
                us(l.busy.0) / us(l.idle.0),
                us(l.busy.1) / us(l.idle.1)
            );
        }
        ratios.push((
            what,
            us(proxied.busy.1) / us(proxied.idle.1),
            us(direct.busy.1) / us(direct.idle.1),
        ));
    }
    for (what, proxy, direct) in ratios {
        println!(
            "→ {what}: proxy loaded/idle p99 ratio {proxy:.2} (target ≤ 1.5); direct baseline {direct:.2}"
        );
    }
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
    let pid = s.proxy.as_ref().map(|p| p.0.id()).unwrap_or_default();
    let idle_rss = peak_rss_kib(pid);
    let mut open = example("stream.open");
    open["payload"]["stream_id"] = json!(12);
    open["payload"]["kind"] = json!("audio.output");
    let mut cc = s.core_control.try_clone().expect("clone");
    cc.write_all(&control(&open)).expect("open");
    // The data must not overtake the open (data for a stream not open is only flagged).
    let mut sc = s.shell_control.try_clone().expect("clone");
    read_control(&mut sc).expect("open relayed");
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

/// Spans received, and the bytes of the export requests that carried them.
#[derive(Clone, Default)]
struct Collector(Arc<AtomicU64>, Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let req = req.into_inner();
        self.1
            .fetch_add(prost::Message::encoded_len(&req) as u64, Ordering::Relaxed);
        let n: usize = req
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

/// An OTLP receiver on a runtime thread of its own; `idle` puts that thread in Linux's
/// idle class, so its decoding of each export takes only time no one else wants.
struct Receiver {
    /// Serves the receiver for as long as it lives.
    _rt: tokio::runtime::Runtime,
    spans: Collector,
    url: String,
}

fn receiver(idle: bool) -> Receiver {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(move || {
            if idle {
                contract_proxy::background::idle_thread();
            }
        })
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
    Receiver {
        _rt: rt,
        spans,
        url,
    }
}

/// A traced proxy's stop (SIGTERM) flushes its exporter; then its own summary line.
fn stop_traced(s: &mut Session, err_path: &Path) -> String {
    let pid =
        nix::unistd::Pid::from_raw(s.proxy.as_ref().map(|p| p.0.id()).unwrap_or_default() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let until = Instant::now() + DEADLINE;
    while s
        .proxy
        .as_mut()
        .is_some_and(|p| p.0.try_wait().ok().flatten().is_none())
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    s.proxy = None;
    std::fs::read_to_string(err_path)
        .unwrap_or_default()
        .lines()
        .find(|l| l.contains("traces:"))
        .unwrap_or("(no trace summary from the proxy)")
        .to_string()
}

/// Benchmark 3, request RTT with tracing on vs off. Two traced proxies run beside the untraced
/// one, rounds interleaved: one exports to a receiver at normal priority (a collector
/// sharing the machine, as the verdict reads it), the other to one in the idle class, so
/// what is left of the cost is the proxy's own rather than the receiver's decoding.
fn tracing_cost(dir: &Path, rounds: usize, iters: usize) {
    let collectors = [receiver(false), receiver(true)];
    let mut off = session(dir, "off", &[]);
    pong_server(off.core_control.try_clone().expect("clone"));
    let mut on: Vec<(Session, std::path::PathBuf)> = collectors
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let err_path = dir.join(format!("traced{i}.err"));
            let err = std::fs::File::create(&err_path).expect("stderr file");
            let s = session_with(
                dir,
                &format!("on{i}"),
                &["--otlp", &c.url],
                Stdio::from(err),
            );
            pong_server(s.core_control.try_clone().expect("clone"));
            (s, err_path)
        })
        .collect();
    let mut untraced = Vec::new();
    let mut traced = vec![Vec::new(); on.len()];
    let mut id = 0;
    // A request and its response make one span each, in a trace of its own.
    let describe =
        |s: &mut UnixStream, id: &mut u64| round_trips_of("settings.describe", s, iters, id);
    for _ in 0..rounds {
        untraced.extend(describe(&mut off.shell_control, &mut id));
        for ((s, _), t) in on.iter_mut().zip(&mut traced) {
            t.extend(describe(&mut s.shell_control, &mut id));
        }
    }
    let said: Vec<String> = on.iter_mut().map(|(s, e)| stop_traced(s, e)).collect();
    drop(off.proxy);
    let (a50, a99) = (pct(&mut untraced, 0.5), pct(&mut untraced, 0.99));
    println!(
        "request RTT ({rounds} rounds × {iters} per proxy), tracing off p50 {:.1} µs  p99 {:.1} µs",
        us(a50),
        us(a99)
    );
    let names = ["receiver at normal priority", "receiver in the idle class"];
    let mut ratios = Vec::new();
    for (((t, c), name), said) in traced.iter_mut().zip(&collectors).zip(names).zip(&said) {
        let (b50, b99) = (pct(t, 0.5), pct(t, 0.99));
        println!(
            "request RTT, tracing on  p50 {:.1} µs  p99 {:.1} µs, {name} ({} spans reached it, {} bytes a span; {said})",
            us(b50),
            us(b99),
            c.spans.0.load(Ordering::Relaxed),
            c.spans.1.load(Ordering::Relaxed) / c.spans.0.load(Ordering::Relaxed).max(1)
        );
        ratios.push((us(b50) / us(a50), us(b99) / us(a99)));
    }
    let [(n50, n99), (i50, i99)] = ratios[..] else {
        return;
    };
    println!(
        "→ on/off ratio p50 {n50:.2}  p99 {n99:.2} (target ≤ 1.2); with the receiver's decoding off the round trip's cores: p50 {i50:.2}  p99 {i99:.2}"
    );
    drop(collectors);
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
    let pace = env_num("ENFORCE_BENCH_PACE_MIBS", 64) as u64;
    // ENFORCE_BENCH_ONLY=1,3 runs only those benchmarks.
    let only = std::env::var("ENFORCE_BENCH_ONLY").unwrap_or_default();
    let run = |n: &str| only.is_empty() || only.split(',').any(|o| o.trim() == n);
    if run("1") {
        control_latency(dir.path(), rounds, iters, pace);
    }
    if run("2") {
        rss_under_flood(dir.path(), mib);
    }
    if run("3") {
        // The export's bursts land where they land: at 5 rounds one run's p99 moved between
        // about 1.2 and 2.0, so this case, a quick one, takes more samples.
        let rounds = env_num("ENFORCE_BENCH_TRACE_ROUNDS", if quick { 1 } else { 20 });
        tracing_cost(dir.path(), rounds, iters);
    }
}
