//! QUIC against TCP+TLS, both through the proxy, in the same run.
//!
//! Two proxies with the same certificate relay rukh to one unix echo peer: one
//! listens on `quic://`, the other on `tls://`. The client is the transport crate's
//! own (quinn, tokio-rustls), pinned to the certificate, offering the contract's ALPN.
//! Measured per path: a fresh connection's time to its first answer (handshake and
//! one round trip, what a short session pays), then round trips of 64 B and 4 KiB
//! calls on one connection, alternating paths round by round. The ratio printed is
//! QUIC / TLS (below 1: QUIC is faster).
//!
//! Then the same under loss: in a network namespace of its own (`unshare -n`), the
//! loopback gets `tc netem loss 1% delay 5ms` and this bench runs again inside it.
//! Where the kernel or iproute2 cannot do that, the bench says why and skips it.
//!
//! `cargo bench -p contract-proxy --bench secure` (SECURE_BENCH_ROUNDS, SECURE_BENCH_ITERS,
//! SECURE_BENCH_CONNECTS to change the sample size).

mod common;

use common::{call, echo_server, env_num, frame, free_port, pad_to, pct, proxy, read_frame, us};

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use contract_transport::conn::{BoxIo, Conn};
use contract_transport::endpoint::tls::TlsOpts;
use contract_transport::endpoint::{Endpoint, Options};
use tokio::io::AsyncWriteExt;

/// The loss and delay of the loss run, as `tc netem` arguments.
const NETEM: &[&str] = &["loss", "1%", "delay", "5ms"];
/// Set in the child run inside the namespace.
const INSIDE: &str = "SECURE_BENCH_NETEM_INSIDE";

struct Sizes {
    rounds: usize,
    iters: usize,
    connects: usize,
}

/// The two paths: name and the endpoint its proxy listens on.
fn paths() -> [(&'static str, Endpoint); 2] {
    [
        ("quic", Endpoint::Quic(format!("127.0.0.1:{}", free_port()))),
        ("tls", Endpoint::Tls(format!("127.0.0.1:{}", free_port()))),
    ]
}

/// A self-signed certificate for 127.0.0.1 in `dir`, and its pin.
fn certificate(dir: &Path) -> (String, String, String) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).expect("write cert");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write key");
    let pin = contract_transport::endpoint::tls::fingerprint(made.cert.der());
    (cert.display().to_string(), key.display().to_string(), pin)
}

/// A connection that has been answered once, within 10 s of retries (the proxy starting).
async fn first_answer(ep: &Endpoint, o: &Options) -> BoxIo {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match round_trip_on_new(ep, o).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > end => panic!("{ep}: no answer: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn round_trip_on_new(ep: &Endpoint, o: &Options) -> Result<BoxIo, String> {
    let connected = ep.connect(o, None).await.map_err(|e| e.to_string())?;
    let Conn::Stream(mut io) = connected.conn else {
        return Err(format!("{ep} is not a byte stream"));
    };
    round_trip(&mut io, 1, 64)
        .await
        .map_err(|e| e.to_string())?;
    Ok(io)
}

async fn round_trip(io: &mut BoxIo, id: u64, size: usize) -> std::io::Result<()> {
    io.write_all(&frame(&pad_to(|f| call(id, f), size))).await?;
    let mut buf = Vec::new();
    read_frame(io, &mut buf).await
}

fn line(label: &str, what: &str, q: &mut [Duration], t: &mut [Duration]) {
    q.sort();
    t.sort();
    let (q50, q99, t50, t99) = (pct(q, 0.5), pct(q, 0.99), pct(t, 0.5), pct(t, 0.99));
    println!(
        "{label:<10} {what:<24} p50/p99 µs: quic {:.1}/{:.1}  tls {:.1}/{:.1}  → quic/tls p50 {:.2} p99 {:.2}",
        us(q50),
        us(q99),
        us(t50),
        us(t99),
        us(q50) / us(t50).max(0.1),
        us(q99) / us(t99).max(0.1)
    );
}

async fn measure(label: &str, n: &Sizes) {
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = dir.path().join("echo.sock");
    let size = Arc::new(AtomicUsize::new(64));
    tokio::spawn(echo_server(
        tokio::net::UnixListener::bind(&echo).expect("bind"),
        size.clone(),
    ));
    let (cert, key, pin) = certificate(dir.path());
    let rukh = contract::builtin("rukh").expect("rukh");
    let o = Options::for_contract(
        &rukh,
        "ipc",
        TlsOpts {
            pin: Some(pin),
            ..TlsOpts::default()
        },
    );
    let paths = paths();
    let upstream = format!("unix:{}", echo.display());
    let _proxies: Vec<_> = paths
        .iter()
        .map(|(name, ep)| {
            let listen = ep.to_string();
            let args = [
                "--contract",
                "rukh",
                "--client",
                "extension",
                "--cert",
                &cert,
                "--key",
                &key,
                "--listen",
                &listen,
                "--upstream",
                &upstream,
            ];
            proxy(&dir.path().join(format!("{name}.log")), &args)
        })
        .collect();
    let mut conns = Vec::new();
    for (_, ep) in &paths {
        conns.push(first_answer(ep, &o).await);
    }
    // Fresh connections: the handshake and the first answer, as a short session pays.
    let mut fresh: [Vec<Duration>; 2] = Default::default();
    for _ in 0..n.connects {
        for (k, (_, ep)) in paths.iter().enumerate() {
            let t = Instant::now();
            let c = round_trip_on_new(ep, &o).await.expect("fresh connection");
            fresh[k].push(t.elapsed());
            drop(c);
        }
    }
    let [q, t] = &mut fresh;
    line(label, "connect + first answer", q, t);
    for bytes in [64usize, 4096] {
        size.store(bytes, Ordering::Relaxed);
        let mut rtt: [Vec<Duration>; 2] = Default::default();
        let mut id = 1u64;
        for _ in 0..n.rounds {
            for (k, c) in conns.iter_mut().enumerate() {
                for i in 0..n.iters + 20 {
                    id += 1;
                    let t = Instant::now();
                    round_trip(c, id, bytes).await.expect("round trip");
                    if i >= 20 {
                        rtt[k].push(t.elapsed());
                    }
                }
            }
        }
        let [q, t] = &mut rtt;
        line(label, &format!("round trip {bytes} B"), q, t);
    }
}

/// Loopback with netem, in this (new) namespace.
fn netem_here() -> Result<(), String> {
    let run = |args: &[&str]| -> Result<(), String> {
        let out = Command::new(args[0])
            .args(&args[1..])
            .output()
            .map_err(|e| format!("{}: {e}", args[0]))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`{}`: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    run(&["ip", "link", "set", "lo", "up"])?;
    run(&[&["tc", "qdisc", "add", "dev", "lo", "root", "netem"], NETEM].concat())
}

/// Whether a namespace of our own can have netem on its loopback: tried in a throwaway one.
fn netem_possible() -> Result<(), String> {
    let script = format!(
        "ip link set lo up && tc qdisc add dev lo root netem {}",
        NETEM.join(" ")
    );
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", &script])
        .output()
        .map_err(|e| format!("unshare: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this once quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = Sizes {
        rounds: env_num("SECURE_BENCH_ROUNDS", if quick { 1 } else { 5 }),
        iters: env_num("SECURE_BENCH_ITERS", if quick { 20 } else { 1000 }),
        connects: env_num("SECURE_BENCH_CONNECTS", if quick { 5 } else { 200 }),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    if std::env::var_os(INSIDE).is_some() {
        netem_here().unwrap_or_else(|e| panic!("netem in the namespace: {e}"));
        let label = format!("netem {}", NETEM.join(" "));
        // Each round trip now takes 10 ms or more: fewer of them.
        let lossy = Sizes {
            rounds: n.rounds,
            iters: (n.iters / 10).max(10),
            connects: (n.connects / 10).max(5),
        };
        rt.block_on(measure(&label, &lossy));
        return;
    }
    println!(
        "secure benchmark: quic:// against tls:// through the proxy, {} rounds × {} round trips, {} fresh connections per path",
        n.rounds, n.iters, n.connects
    );
    rt.block_on(measure("loopback", &n));
    match netem_possible() {
        Ok(()) => {
            let exe = std::env::current_exe().expect("this bench's path");
            let status = Command::new("unshare")
                .arg("-n")
                .arg(exe)
                .args(std::env::args().skip(1))
                .env(INSIDE, "1")
                .status()
                .expect("unshare runs");
            assert!(status.success(), "the loss run failed: {status}");
        }
        Err(why) => println!(
            "loss run (netem {}) skipped: this machine cannot put netem on a namespace's loopback: {why}",
            NETEM.join(" ")
        ),
    }
}
