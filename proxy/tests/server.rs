//! The `server::Proxy` builder in process, with a contract of its own
//! (tests/fixtures/pipes.json): bind learns the real address before any traffic, the run
//! relays and records with backpressure until its shutdown future resolves, and the
//! `Finished` report carries the counters, the recording's numbers and any failure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use contract_proxy::config::RouteSpec;
use contract_proxy::inspect::Mode;
use contract_proxy::record::Reader;
use contract_proxy::server::{Proxy, ProxyError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

fn pipes() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pipes.json")
        .display()
        .to_string()
}

fn route(listen: &Path, upstream: &Path) -> contract_proxy::config::Resolved {
    RouteSpec {
        contract: pipes(),
        channel: Some("ctl".into()),
        listen: format!("unix:{}", listen.display()),
        upstream: format!("unix:{}", upstream.display()),
        ..RouteSpec::default()
    }
    .resolve(0, Mode::Observe)
    .expect("pipes.json resolves")
}

async fn line(r: &mut BufReader<UnixStream>) -> Value {
    let mut s = String::new();
    timeout(WAIT, r.read_line(&mut s))
        .await
        .expect("a line in time")
        .expect("read");
    serde_json::from_str(&s).expect("JSON line")
}

#[tokio::test]
async fn a_proxy_relays_records_and_reports_what_it_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (listen, upstream) = (dir.path().join("p.sock"), dir.path().join("u.sock"));
    let record: PathBuf = dir.path().join("run.cprec");
    let server = UnixListener::bind(&upstream).expect("bind upstream");
    let mut proxy = Proxy::new(vec![route(&listen, &upstream)]);
    proxy.record(&record);
    let bound = proxy.bind().await.expect("bind");
    let routes = bound.routes();
    assert_eq!(routes[0].local, format!("unix:{}", listen.display()));
    assert!(
        routes[0].summary.contains("pipes / ctl"),
        "{}",
        routes[0].summary
    );
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(bound.run(async {
        let _ = rx.await;
    }));

    let mut client = UnixStream::connect(&listen).await.expect("connect");
    let (up, _) = timeout(WAIT, server.accept())
        .await
        .expect("dialed")
        .expect("accept");
    let mut up = BufReader::new(up);
    let open = json!({"k": "note", "op": "pipe.open", "n": "s-1", "ver": 1, "at": 1.0, "body": {"pipe": 3}});
    let mut bytes = serde_json::to_vec(&open).expect("json");
    bytes.push(b'\n');
    client.write_all(&bytes).await.expect("write");
    assert_eq!(line(&mut up).await, open);
    drop(client);
    drop(up);

    let _ = stop.send(());
    let done = timeout(Duration::from_secs(20), run)
        .await
        .expect("the run stops in time")
        .expect("run task");
    assert!(done.failures.is_empty(), "{:?}", done.failures);
    let st = done.stats();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        (st.connections.load(Relaxed), st.frames.load(Relaxed)),
        (1, 1)
    );
    assert_eq!(st.violations.load(Relaxed), 0);
    let rec = done.recording.as_ref().expect("a recording was asked for");
    let written = rec.result.as_ref().expect("recording finished");
    // The frame and the connection's notes; nothing lost to a full queue.
    assert!(written.records >= 2, "{written:?}");
    assert_eq!(rec.unrecorded, 0);
    assert!(done.traces.is_none());

    // The header names the bound address and carries the contract that is not built in,
    // so a replay elsewhere finds it.
    let reader = Reader::open(&record).expect("read back");
    let h = reader.header();
    assert_eq!(h.contract, "pipes");
    assert_eq!(h.routes[0].listen, routes[0].local);
    assert!(h.routes[0].contract_json.contains("\"pipe.open\""));
}

#[tokio::test]
async fn an_address_in_use_fails_the_bind_before_the_recording_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = dir.path().join("taken.sock");
    let _holder = UnixListener::bind(&taken).expect("bind");
    let record = dir.path().join("never.cprec");
    let mut proxy = Proxy::new(vec![route(&taken, &dir.path().join("u.sock"))]);
    proxy.record(&record);
    match proxy.bind().await {
        Err(e @ ProxyError::Listen { .. }) => {
            assert!(e.to_string().contains("taken.sock"), "{e}");
        }
        Err(e) => panic!("expected a listen error, got {e}"),
        Ok(_) => panic!("bound an address in use"),
    }
    assert!(!record.exists(), "no recording for a proxy that never ran");
}

#[tokio::test]
async fn no_routes_is_an_error_not_an_idle_proxy() {
    assert!(matches!(
        Proxy::new(Vec::new()).bind().await,
        Err(ProxyError::NoRoutes)
    ));
}
