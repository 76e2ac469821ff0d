//! Scale benchmark (issue 24): how the proxy's cost grows with the number of sessions.
//!
//! For 1, 10, 100 and 1,000 concurrent sessions, each doing request/response at a
//! fixed rate, three ways: direct, through the byte copier that is the baseline
//! (socat for unix sockets, forking a process per connection; websocat for
//! WebSocket), and through contract-proxy with full inspection and its JSON log
//! written to a file. Two protocols:
//! - kernel with both channels: each session connects control and data (data stays
//!   idle), the shell sends `hello`, then `settings.describe` requests that the core
//!   answers;
//! - toolchannel over WebSocket: each session sends `agentfy/heartbeat` requests that
//!   an echo host answers.
//!
//! Printed per size: RTT and overhead (RTT via − RTT direct) at p50 and p99, the
//! relay's resident memory with the sessions open and idle, and that memory per
//! idle connection: what each session adds to the memory read after one warm-up
//! session (kept open), so the relay's own lazy start-up is not spread over the
//! sessions, as it was before 2026-12-06 (about 17 MiB for the proxy). Targets: p99
//! at 1,000 sessions within 2× of p99 at one, and
//! at most 32 KiB of proxy memory per idle connection. The rows are also written
//! as JSON lines to target/scale-bench.jsonl, for a plot.
//!
//! The peers that answer (the kernel core, the WebSocket echo) run on a thread of
//! their own, apart from the sessions that ask and time: on one thread, at 1,000
//! sessions the answers queued behind the questions. The load still shares the
//! machine: the direct path's own round trip grows too, which is why each row is read
//! against the direct row of the same size, and the growth from 1 session to the most
//! is printed for the direct path and the baseline beside the proxy's.
//!
//! `cargo bench -p contract-proxy --bench scale` (SCALE_BENCH_SIZES=1,10,100,1000,
//! SCALE_BENCH_SECS per size and path, SCALE_BENCH_RATE requests per second per session).

#![allow(clippy::result_large_err)] // tungstenite's handshake callback type, not ours

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    Kernel, Kill, children, control, env_num, first_violation, free_port, heartbeat_as,
    kernel_route, pct, proxy, read_control, status_kib, us, violations, wait_for, websocat,
    websocat_path, ws_connect, ws_connect_as, ws_echo,
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

/// One measured size of one path.
struct Row {
    protocol: &'static str,
    sessions: usize,
    path: &'static str,
    /// Connections the relay (proxy or baseline) holds per session.
    conns_per_session: usize,
    rtts: Vec<Duration>,
    /// The relay's resident memory before the sessions and with them open, idle (KiB).
    rss_before: u64,
    rss_idle: u64,
}

impl Row {
    fn p(&self, q: f64) -> Duration {
        pct(&self.rtts, q)
    }

    fn per_idle_conn_kib(&self) -> f64 {
        let conns = (self.sessions * self.conns_per_session).max(1) as f64;
        self.rss_idle.saturating_sub(self.rss_before) as f64 / conns
    }
}

/// The relay in the middle of one path: its processes, for their memory.
enum Relay {
    None,
    Proxy(Kill),
    Socat(Vec<Kill>),
    Websocat(Kill),
}

impl Relay {
    fn rss_kib(&self) -> u64 {
        let one = |k: &Kill| status_kib(k.0.id(), "VmRSS:");
        match self {
            Relay::None => 0,
            Relay::Proxy(k) | Relay::Websocat(k) => one(k),
            // socat forks a process per connection: the listeners and every child.
            Relay::Socat(ks) => ks
                .iter()
                .map(|k| {
                    one(k)
                        + children(k.0.id())
                            .into_iter()
                            .map(|c| status_kib(c, "VmRSS:"))
                            .sum::<u64>()
                })
                .sum(),
        }
    }
}

/// Connect, retrying while the listener's backlog is full.
async fn connect(p: &Path) -> UnixStream {
    for _ in 0..2000 {
        match UnixStream::connect(p).await {
            Ok(s) => return s,
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    panic!("cannot connect to {}", p.display());
}

// ---------------------------------------------------------------------------------------
// Kernel: length-prefixed JSON control, an idle data channel.

/// The answering side's runtime, on a thread of its own for the whole run.
fn answering() -> tokio::runtime::Handle {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let handle = rt.handle().clone();
    std::thread::spawn(move || rt.block_on(std::future::pending::<()>()));
    handle
}

/// The core: dials `control` on the answering runtime (so its socket is that runtime's)
/// and answers every request on it until it closes.
fn core(answer: &tokio::runtime::Handle, control_path: &Path, k: &Kernel) {
    let (hello, described) = (k.hello_result.clone(), k.described.clone());
    let path = control_path.to_path_buf();
    answer.spawn(async move {
        let mut s = connect(&path).await;
        while let Ok(m) = read_control(&mut s).await {
            let mut answer = match m["method"].as_str() {
                Some("hello") => hello.clone(),
                _ => described.clone(),
            };
            answer["correlation_id"] = m["id"].clone();
            answer["trace_id"] = m["trace_id"].clone();
            if s.write_all(&control(&answer)).await.is_err() {
                return;
            }
        }
    });
}

/// One request from the shell and its answer; the round trip.
async fn ask(s: &mut UnixStream, mut req: Value, id: String) -> Duration {
    req["id"] = json!(id);
    req["trace_id"] = json!(format!("t-{id}"));
    let t = Instant::now();
    s.write_all(&control(&req)).await.expect("request");
    let a = read_control(s).await.expect("answer");
    assert_eq!(a["correlation_id"], req["id"], "the answer to this request");
    t.elapsed()
}

/// `n` kernel sessions through `(control, data)`, accepted by the shell's listeners;
/// each says hello, then asks at `rate` for `secs`. The shells' connections and the
/// relay's memory with them idle come back with the round trips.
async fn kernel_sessions(
    n: usize,
    answer: &tokio::runtime::Handle,
    via: (&Path, &Path),
    shell: (&UnixListener, &UnixListener),
    relay: &Relay,
    load: (f64, f64),
) -> (Vec<Duration>, u64, u64) {
    let k = Kernel::new();
    let mut before = 0;
    let mut shells = Vec::with_capacity(n + 1);
    let mut keep = Vec::with_capacity(2 * n + 2);
    // Session 0 warms the relay up (its lazy start-up, a first session's one-time costs) and
    // stays open: the memory counted is what each of the other n adds.
    for i in 0..=n {
        core(answer, via.0, &k);
        let (mut sc, _) = shell.0.accept().await.expect("accept control");
        let d = connect(via.1).await;
        let (sd, _) = shell.1.accept().await.expect("accept data");
        ask(&mut sc, k.hello.clone(), format!("h-{i}")).await;
        keep.push(d);
        keep.push(sd);
        shells.push(sc);
        if i == 0 {
            tokio::time::sleep(SETTLE).await;
            before = relay.rss_kib();
        }
    }
    tokio::time::sleep(SETTLE).await;
    let idle = relay.rss_kib();
    let warm = shells.remove(0);
    let tasks: Vec<_> = shells
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            let describe = k.describe.clone();
            tokio::spawn(async move {
                let (mut pace, mut out) = (Pacer::new(i, n, load), Vec::new());
                while let Some(j) = pace.next().await {
                    out.push(ask(&mut s, describe.clone(), format!("s{i}-{j}")).await);
                }
                out
            })
        })
        .collect();
    let mut rtts = Vec::new();
    for t in tasks {
        rtts.extend(t.await.expect("session"));
    }
    drop((keep, warm));
    (rtts, before, idle)
}

/// Round trips a size should give at least, within four times the time asked for.
const SAMPLES: f64 = 2000.0;
/// How long the relay is left after connections open before its memory is read.
const SETTLE: Duration = Duration::from_millis(300);

/// A session's requests at `rate` per second for `secs` (longer when `n` sessions would
/// give fewer than [`SAMPLES`] in it, up to four times as long), starting at the
/// session's place in the period so that the sessions' requests spread over it.
struct Pacer {
    tick: tokio::time::Interval,
    end: tokio::time::Instant,
    sent: u64,
}

impl Pacer {
    fn new(i: usize, n: usize, (rate, secs): (f64, f64)) -> Self {
        let secs = (SAMPLES / (n as f64 * rate)).clamp(secs, 4.0 * secs);
        let period = Duration::from_secs_f64(1.0 / rate);
        let start = tokio::time::Instant::now() + period.mul_f64(i as f64 / n as f64);
        let mut tick = tokio::time::interval_at(start, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Pacer {
            tick,
            end: start + Duration::from_secs_f64(secs),
            sent: 0,
        }
    }

    /// Wait for the next request's time: its number, or None when the time is up.
    async fn next(&mut self) -> Option<u64> {
        (self.tick.tick().await < self.end).then(|| {
            self.sent += 1;
            self.sent
        })
    }
}

async fn kernel(
    dir: &Path,
    answer: &tokio::runtime::Handle,
    sizes: &[usize],
    load: (f64, f64),
) -> Vec<Row> {
    let mut rows = Vec::new();
    for &n in sizes {
        for path in ["direct", "socat", "proxy"] {
            let name = |s: &str| dir.join(format!("k{n}-{path}-{s}"));
            let route = kernel_route(name, path, &dir.join(format!("k{n}-{path}-log")), &[]);
            let (shell, via) = (route.shell, route.via);
            let mut relays = route.relays;
            let relay = match path {
                "direct" => Relay::None,
                "socat" => Relay::Socat(relays),
                _ => Relay::Proxy(relays.pop().expect("the proxy")),
            };
            if !matches!(relay, Relay::None) {
                wait_for(&via.0).await;
                wait_for(&via.1).await;
            }
            let via = (via.0.as_path(), via.1.as_path());
            let (mut rtts, rss_before, rss_idle) =
                kernel_sessions(n, answer, via, (&shell.0, &shell.1), &relay, load).await;
            rtts.sort();
            rows.push(Row {
                protocol: "kernel",
                sessions: n,
                path,
                conns_per_session: 2,
                rtts,
                rss_before,
                rss_idle,
            });
            drop(relay);
        }
    }
    rows
}

// ---------------------------------------------------------------------------------------
// Toolchannel over WebSocket.

async fn websocket(
    dir: &Path,
    answer: &tokio::runtime::Handle,
    sizes: &[usize],
    load: (f64, f64),
) -> Vec<Row> {
    let Some(ws) = websocat_path() else {
        return Vec::new();
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let echo = l.local_addr().expect("addr").port();
    l.set_nonblocking(true).expect("nonblocking");
    // Registered with the answering runtime, so the echo's sockets are its own.
    answer.spawn(
        async move { ws_echo(tokio::net::TcpListener::from_std(l).expect("listener")).await },
    );
    let mut rows = Vec::new();
    for &n in sizes {
        for path in ["direct", "websocat", "proxy"] {
            let port = free_port();
            let relay = match path {
                "direct" => Relay::None,
                "websocat" => Relay::Websocat(websocat(&ws, port, echo)),
                _ => Relay::Proxy(proxy(
                    &dir.join(format!("w{n}.log")),
                    &[
                        "--contract".into(),
                        "toolchannel".into(),
                        "--listen".into(),
                        format!("ws://127.0.0.1:{port}/"),
                        "--upstream".into(),
                        format!("ws://127.0.0.1:{echo}/"),
                    ],
                )),
            };
            let port = if matches!(relay, Relay::None) {
                echo
            } else {
                port
            };
            // One connection first, kept open: the memory counted is what each of the n adds,
            // not the relay's lazy start-up (about 17 MiB of the proxy's, once).
            let warm = ws_connect(port).await;
            tokio::time::sleep(SETTLE).await;
            let before = relay.rss_kib();
            // One session each: toolchannel keeps one live socket per session.
            let mut conns = Vec::with_capacity(n);
            for i in 0..n {
                let session = format!("bench-{i}");
                conns.push((ws_connect_as(port, &session).await, session));
            }
            tokio::time::sleep(SETTLE).await;
            let idle = relay.rss_kib();
            drop(warm);
            let tasks: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(i, (mut c, session))| {
                    tokio::spawn(async move {
                        let (mut pace, mut out) = (Pacer::new(i, n, load), Vec::new());
                        while let Some(j) = pace.next().await {
                            out.push(heartbeat_as(&mut c, &session, j).await);
                        }
                        out
                    })
                })
                .collect();
            let mut rtts = Vec::new();
            for t in tasks {
                rtts.extend(t.await.expect("session"));
            }
            rtts.sort();
            rows.push(Row {
                protocol: "toolchannel-ws",
                sessions: n,
                path,
                conns_per_session: 1,
                rtts,
                rss_before: before,
                rss_idle: idle,
            });
            drop(relay);
        }
    }
    rows
}

// ---------------------------------------------------------------------------------------
// Report.

fn print(rows: &[Row]) {
    println!(
        "{:<15} {:>8} {:<9} {:>8} {:>19} {:>21} {:>9} {:>13}",
        "protocol",
        "sessions",
        "path",
        "samples",
        "RTT p50/p99 µs",
        "overhead p50/p99 µs",
        "RSS MiB",
        "KiB/idle conn"
    );
    for r in rows {
        let direct = rows
            .iter()
            .find(|d| d.protocol == r.protocol && d.sessions == r.sessions && d.path == "direct");
        let over = |q: f64| direct.map_or(0.0, |d| us(r.p(q)) - us(d.p(q)));
        let mem = |v: String| {
            if matches!(r.path, "direct") {
                "-".into()
            } else {
                v
            }
        };
        println!(
            "{:<15} {:>8} {:<9} {:>8} {:>19} {:>21} {:>9} {:>13}",
            r.protocol,
            r.sessions,
            r.path,
            r.rtts.len(),
            format!("{:.1}/{:.1}", us(r.p(0.5)), us(r.p(0.99))),
            if r.path == "direct" {
                "-".into()
            } else {
                format!("{:.1}/{:.1}", over(0.5), over(0.99))
            },
            mem(format!("{:.1}", r.rss_idle as f64 / 1024.0)),
            mem(format!("{:.1}", r.per_idle_conn_kib())),
        );
    }
    for protocol in ["kernel", "toolchannel-ws"] {
        // p99 at the most sessions over p99 at the fewest, for one path.
        let growth = |path: &str| {
            let mine: Vec<&Row> = (rows.iter())
                .filter(|r| r.protocol == protocol && r.path == path)
                .collect();
            let (first, last) = (mine.first()?, mine.last()?);
            Some((
                first.sessions,
                *last,
                us(last.p(0.99)) / us(first.p(0.99)).max(0.1),
            ))
        };
        let Some((first, last, proxy)) = growth("proxy") else {
            continue;
        };
        let beside: Vec<String> = ["direct", "socat", "websocat"]
            .iter()
            .filter_map(|p| growth(p).map(|(_, _, g)| format!("{p} {g:.2}")))
            .collect();
        println!(
            "→ {protocol}: proxy p99 at {} sessions / at {first}: {proxy:.2} (target ≤ 2.0; the same for {}); memory per idle connection at {} sessions {:.1} KiB (target ≤ 32)",
            last.sessions,
            beside.join(", "),
            last.sessions,
            last.per_idle_conn_kib()
        );
    }
}

fn jsonl(rows: &[Row]) -> String {
    rows.iter()
        .map(|r| {
            json!({
                "protocol": r.protocol,
                "sessions": r.sessions,
                "path": r.path,
                "samples": r.rtts.len(),
                "rtt_p50_us": us(r.p(0.5)),
                "rtt_p99_us": us(r.p(0.99)),
                "rss_idle_kib": r.rss_idle,
                "kib_per_idle_conn": r.per_idle_conn_kib(),
            })
            .to_string()
                + "\n"
        })
        .collect()
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this once, small.
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: Vec<usize> = std::env::var("SCALE_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| {
            if quick {
                vec![1, 10]
            } else {
                vec![1, 10, 100, 1000]
            }
        });
    let secs = env_num("SCALE_BENCH_SECS", if quick { 1 } else { 5 }) as f64;
    let rate = env_num("SCALE_BENCH_RATE", 10) as f64;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "scale benchmark: {rate} requests/s per session, {secs} s per size and path, longer for few sessions (up to {} s, for {SAMPLES} samples) (release build of contract-proxy)",
        4.0 * secs
    );
    let answer = answering();
    let mut rows = rt.block_on(kernel(dir.path(), &answer, &sizes, (rate, secs)));
    rows.extend(rt.block_on(websocket(dir.path(), &answer, &sizes, (rate, secs))));
    print(&rows);
    flagged(dir.path(), &sizes);
    let out = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target"));
    let _ = std::fs::write(out.join("scale-bench.jsonl"), jsonl(&rows));
    match plot(&rows, &out.join("scale-bench.svg")) {
        Ok(()) => println!("plotted to target/scale-bench.svg"),
        Err(e) => println!("no plot: {e}"),
    }
}

/// What the proxy flagged, per protocol: a flagged frame takes a longer path than a
/// valid one, so the count says which path was measured.
fn flagged(dir: &Path, sizes: &[usize]) {
    let count = |log: String| violations(&dir.join(log));
    let kernel: usize = sizes.iter().map(|n| count(format!("k{n}-proxy-log"))).sum();
    let ws: usize = sizes.iter().map(|n| count(format!("w{n}.log"))).sum();
    println!("proxy violations flagged: kernel {kernel}, toolchannel-ws {ws}");
    for log in sizes
        .iter()
        .flat_map(|n| [format!("k{n}-proxy-log"), format!("w{n}.log")])
    {
        if let Some(first) = first_violation(&dir.join(&log)) {
            println!("  the first in {log}: {first}");
        }
    }
}

/// One value of a row for the plot: its overhead at the `q` quantile against the direct
/// row of its size, or its memory per idle connection.
#[derive(Clone, Copy)]
enum Measure {
    Overhead(f64),
    Memory,
}

impl Measure {
    fn of(self, r: &Row, rows: &[Row]) -> Option<f64> {
        match self {
            Measure::Memory => (r.path != "direct").then(|| r.per_idle_conn_kib()),
            Measure::Overhead(q) => {
                let d = rows.iter().find(|d| {
                    d.protocol == r.protocol && d.sessions == r.sessions && d.path == "direct"
                })?;
                (r.path != "direct").then(|| (us(r.p(q)) - us(d.p(q))).max(1.0))
            }
        }
    }
}

/// The curves: per protocol, overhead at p50 and p99 and memory per idle connection
/// against the number of sessions, the proxy beside its baseline; log scales.
fn plot(rows: &[Row], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1200, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 3));
    let measures = [
        (Measure::Overhead(0.5), "overhead p50, µs"),
        (Measure::Overhead(0.99), "overhead p99, µs"),
        (Measure::Memory, "KiB per idle connection"),
    ];
    for (k, protocol) in ["kernel", "toolchannel-ws"].into_iter().enumerate() {
        for (m, (measure, label)) in measures.into_iter().enumerate() {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.protocol == protocol).collect();
            let points = |path: &str| -> Vec<(f64, f64)> {
                (mine.iter())
                    .filter(|r| r.path == path)
                    .filter_map(|r| Some((r.sessions as f64, measure.of(r, rows)?)))
                    .collect()
            };
            let all: Vec<f64> = ["proxy", "socat", "websocat"]
                .iter()
                .flat_map(|p| points(p).into_iter().map(|(_, y)| y))
                .collect();
            let (lo, hi) = all
                .iter()
                .fold((f64::MAX, 1.0f64), |(lo, hi), y| (lo.min(*y), hi.max(*y)));
            let most = mine.iter().map(|r| r.sessions).max().unwrap_or(1).max(2) as f64;
            let mut chart = ChartBuilder::on(&panels[k * 3 + m])
                .caption(format!("{protocol}: {label}"), ("sans-serif", 16))
                .margin(8)
                .x_label_area_size(32)
                .y_label_area_size(48)
                .build_cartesian_2d(
                    (1f64..most).log_scale(),
                    ((lo.min(hi) * 0.8).max(0.5)..hi * 1.25).log_scale(),
                )?;
            chart
                .configure_mesh()
                .x_desc("sessions")
                .label_style(("sans-serif", 11))
                .draw()?;
            for (path, color) in [("proxy", RED), ("socat", BLUE), ("websocat", BLUE)] {
                let pts = points(path);
                if pts.is_empty() {
                    continue;
                }
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                    .label(path)
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
                chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
            }
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .label_font(("sans-serif", 11))
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}
