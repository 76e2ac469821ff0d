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
//! A kernel built without netem (`sch_netem`) can still lose packets: nftables drops 1%
//! of what leaves the loopback (`numgen random`), with no delay added, and the run says
//! so. Where neither works, the bench says why and skips it.
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
/// The same loss as an nftables ruleset, for a kernel without netem: 10 in 1,000 of the
/// packets leaving the loopback (each packet leaves it once), and no delay.
const NFT_LOSS: &str = "table inet loss {
    chain out {
        type filter hook output priority 0; policy accept;
        oifname \"lo\" numgen random mod 1000 < 10 drop
    }
}";
/// Set in the child run inside the namespace, to the impairment's name.
const INSIDE: &str = "SECURE_BENCH_LOSS_INSIDE";

/// How the loss run's namespace loses packets.
#[derive(Clone, Copy)]
enum Impairment {
    Netem,
    Nft,
}

impl Impairment {
    fn name(self) -> &'static str {
        match self {
            Impairment::Netem => "netem",
            Impairment::Nft => "nft",
        }
    }

    fn label(self) -> String {
        match self {
            Impairment::Netem => format!("netem {}", NETEM.join(" ")),
            Impairment::Nft => "nft 1%".to_string(),
        }
    }

    /// The shell commands that put it on a fresh namespace's loopback.
    fn script(self) -> String {
        let up = "ip link set lo up";
        match self {
            Impairment::Netem => {
                format!("{up} && tc qdisc add dev lo root netem {}", NETEM.join(" "))
            }
            Impairment::Nft => format!("{up} && echo '{NFT_LOSS}' | nft -f -"),
        }
    }
}

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
    // Under loss the tail is where the lost packets land, and a p99 flips with whether
    // they reach 1% of the samples; the mean prices them all.
    let mean = |v: &[Duration]| us(v.iter().sum::<Duration>()) / v.len().max(1) as f64;
    let (qm, tm) = (mean(q), mean(t));
    println!(
        "{label:<10} {what:<24} p50/p99/mean µs: quic {:.1}/{:.1}/{qm:.1}  tls {:.1}/{:.1}/{tm:.1}  → quic/tls p50 {:.2} p99 {:.2} mean {:.2}",
        us(q50),
        us(q99),
        us(t50),
        us(t99),
        us(q50) / us(t50).max(0.1),
        us(q99) / us(t99).max(0.1),
        qm / tm.max(0.1)
    );
}

async fn measure(label: &str, n: &Sizes) {
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = dir.path().join("echo.sock");
    let size = Arc::new(AtomicUsize::new(64));
    // Without rukh's opening: this bench prices the transports' own handshakes, and its
    // calls are flagged out of place in observe mode as the proxy inspects them.
    tokio::spawn(echo_server(
        tokio::net::UnixListener::bind(&echo).expect("bind"),
        size.clone(),
        None,
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

/// Run `script` with `sh`, its error being what it said.
fn sh(script: &str, namespace: bool) -> Result<(), String> {
    let (program, before): (&str, &[&str]) = match namespace {
        true => ("unshare", &["-n", "sh"]),
        false => ("sh", &[]),
    };
    let out = (Command::new(program)
        .args(before)
        .args(["-c", script])
        .output())
    .map_err(|e| format!("{script}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The first impairment a throwaway namespace of our own takes, or why none does.
fn impairment_possible() -> Result<Impairment, String> {
    let mut why = Vec::new();
    for i in [Impairment::Netem, Impairment::Nft] {
        match sh(&i.script(), true) {
            Ok(()) => return Ok(i),
            Err(e) => why.push(format!("{}: {e}", i.name())),
        }
    }
    Err(why.join("; "))
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
    if let Ok(inside) = std::env::var(INSIDE) {
        let i = [Impairment::Netem, Impairment::Nft]
            .into_iter()
            .find(|i| i.name() == inside)
            .expect("a known impairment");
        sh(&i.script(), false).unwrap_or_else(|e| panic!("{} in the namespace: {e}", i.name()));
        if let Impairment::Nft = i {
            println!(
                "loss run: this kernel has no netem, so nftables drops 1% of the loopback's packets (`nft 1%`) and no delay is added"
            );
        }
        // netem's delay makes every round trip 10 ms or more: fewer of them. Without it,
        // only the lost ones are slow, and the tail needs the full count to be seen.
        let lossy = match i {
            Impairment::Netem => Sizes {
                rounds: n.rounds,
                iters: (n.iters / 10).max(10),
                connects: (n.connects / 10).max(5),
            },
            Impairment::Nft => n,
        };
        rt.block_on(measure(&i.label(), &lossy));
        return;
    }
    println!(
        "secure benchmark: quic:// against tls:// through the proxy, {} rounds × {} round trips, {} fresh connections per path",
        n.rounds, n.iters, n.connects
    );
    rt.block_on(measure("loopback", &n));
    match impairment_possible() {
        Ok(i) => {
            let exe = std::env::current_exe().expect("this bench's path");
            let status = Command::new("unshare")
                .arg("-n")
                .arg(exe)
                .args(std::env::args().skip(1))
                .env(INSIDE, i.name())
                .status()
                .expect("unshare runs");
            assert!(status.success(), "the loss run failed: {status}");
        }
        Err(why) => println!(
            "loss run skipped: this machine cannot make a namespace's loopback lose packets ({why})"
        ),
    }
}
