//! The web view's HTTP side, in process, over a contract of its own
//! (tests/fixtures/jobs.json): rows arrive live, filters and search narrow them, a
//! violation's detail names its contract entry and bytes, answers pair with their
//! requests, the diagram draws one arrow per message, `/metrics` counts, the live stream
//! ticks, the store keeps within its bound, and off loopback nothing is served without
//! the token. The browser tests (proxy/web/tests/browser.mjs) drive the page itself.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contract_proxy::config::RouteSpec;
use contract_proxy::inspect::Mode;
use contract_proxy::server::Proxy;
use contract_proxy::web::server::{Serving, serve};
use contract_proxy::web::{Plan, store};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

fn jobs() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jobs.json")
        .display()
        .to_string()
}

/// The message of `method`'s example for `part` (`call`, `result`) in jobs.json.
fn example(method: &str, part: &str) -> Value {
    let c: Value =
        serde_json::from_str(&std::fs::read_to_string(jobs()).expect("read")).expect("json");
    let ex = c["methods"][method]["examples"]
        .as_array()
        .expect("examples");
    let e = ex
        .iter()
        .find(|e| e["part"] == part)
        .expect("an example of that part");
    e["message"].clone()
}

/// An HTTP/1.1 GET: status, headers (lower-case names) and body.
async fn get(
    at: SocketAddr,
    path: &str,
    cookie: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let mut s = timeout(WAIT, TcpStream::connect(at))
        .await
        .expect("in time")
        .expect("connect");
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {at}\r\n{cookie}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    timeout(WAIT, s.read_to_end(&mut buf))
        .await
        .expect("answered in time")
        .expect("read");
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(at) = resp.parse(&buf).expect("HTTP") else {
        panic!("a whole response head")
    };
    let hs = (resp.headers.iter())
        .map(|h| {
            (
                h.name.to_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let body = String::from_utf8_lossy(&buf[at..]).into_owned();
    (resp.code.expect("status"), hs, body)
}

async fn get_json(at: SocketAddr, path: &str) -> Value {
    let (code, _, body) = get(at, path, None).await;
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

struct Run {
    web: Serving,
    client: UnixStream,
    runner: BufReader<UnixStream>,
    dir: tempfile::TempDir,
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<contract_proxy::server::Finished>,
}

/// A proxy for jobs.json between a test client and a test runner, with the web view on.
async fn start() -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let (listen, upstream): (PathBuf, PathBuf) =
        (dir.path().join("p.sock"), dir.path().join("u.sock"));
    let server = UnixListener::bind(&upstream).expect("bind upstream");
    let route = RouteSpec {
        contract: jobs(),
        listen: format!("unix:{}", listen.display()),
        upstream: format!("unix:{}", upstream.display()),
        ..RouteSpec::default()
    }
    .resolve(0, Mode::Observe)
    .expect("jobs.json resolves");
    let plan = Plan::with(store::Store::new(store::Bounds::default()));
    let mut proxy = Proxy::new(vec![route]);
    proxy.sink(plan.store.clone()).sink(plan.metrics.clone());
    proxy.record(dir.path().join("run.cprec"));
    let bound = proxy.bind().await.expect("bind");
    let app = plan.app(bound.web_routes());
    app.relay.get_or_init(|| bound.shared());
    let web = serve("127.0.0.1:0".parse().expect("addr"), app)
        .await
        .expect("serve");
    assert_eq!(web.url, format!("http://{}/", web.local));
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(bound.run(async {
        let _ = rx.await;
    }));
    let client = UnixStream::connect(&listen).await.expect("connect");
    let (up, _) = timeout(WAIT, server.accept())
        .await
        .expect("dialed")
        .expect("accept");
    Run {
        web,
        client,
        runner: BufReader::new(up),
        dir,
        stop,
        run,
    }
}

async fn send(w: &mut (impl AsyncWriteExt + Unpin), v: &Value) {
    let mut b = serde_json::to_vec(v).expect("json");
    b.push(b'\n');
    w.write_all(&b).await.expect("write");
}

async fn line(r: &mut (impl AsyncBufReadExt + Unpin)) -> Value {
    let mut s = String::new();
    timeout(WAIT, r.read_line(&mut s))
        .await
        .expect("a line in time")
        .expect("read");
    serde_json::from_str(&s).expect("JSON line")
}

/// Rows until `n` are kept.
async fn rows_until(at: SocketAddr, n: usize) -> Value {
    for _ in 0..100 {
        let page = get_json(at, "/api/rows?limit=1000").await;
        if page["total"].as_u64() >= Some(n as u64) {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{n} rows never arrived")
}

#[tokio::test]
async fn rows_arrive_live_and_a_violation_shows_its_contract_entry_and_bytes() {
    let mut r = start().await;
    let at = r.web.local;
    let hello = example("hello", "call");
    send(&mut r.client, &hello).await;
    assert_eq!(line(&mut r.runner).await, hello);
    let answer = example("hello", "result");
    send(r.runner.get_mut(), &answer).await;
    // The runner sends what only a client may: a violation (observe mode forwards it).
    let wrong = example("bye", "call");
    send(r.runner.get_mut(), &wrong).await;
    let page = rows_until(at, 3).await;
    let rows = page["rows"].as_array().expect("rows");
    let methods: Vec<&Value> = rows.iter().map(|r| &r["method"]).collect();
    assert_eq!(
        methods,
        [&json!("hello"), &json!("hello"), &json!("bye")],
        "{page:#}"
    );
    assert_eq!(rows[0]["n"], 0);
    assert_eq!(
        (&rows[0]["from"], &rows[0]["to"]),
        (&json!("client"), &json!("runner"))
    );
    assert_eq!(rows[2]["verdict"]["verdict"], "violation", "{:#}", rows[2]);

    // The answer and its request point at each other.
    let req = get_json(at, "/api/rows/0").await;
    assert_eq!(req["pair"], 1, "{req:#}");
    assert_eq!(get_json(at, "/api/rows/1").await["pair"], 0);
    let parts = req["parts"].as_array().expect("parts");
    assert!(
        parts.contains(&json!({"pointer": "/params", "schema": "/methods/hello/params"})),
        "{parts:?}"
    );

    // The violation's detail: its entry in the contract, the contract's text there, the bytes.
    let d = get_json(at, "/api/rows/2").await;
    let v = &d["violation"];
    let class = v["class"].as_str().expect("class");
    let entry = v["entry"]
        .as_str()
        .unwrap_or_else(|| panic!("an entry: {v:#}"));
    assert!(
        !v["contract"].is_null(),
        "{entry} resolves in the contract: {v:#}"
    );
    assert_eq!(v["seed"], rows[2]["verdict"]["seed"]);
    let bytes = serde_json::to_vec(&wrong).expect("json");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(d["raw"]["hex"], json!(hex), "{class}");
    assert_eq!(d["raw"]["len"], bytes.len());

    // Filters take the CLI's keys; a bad key is a 400 that says which; search looks in payloads.
    let only = get_json(at, "/api/rows?filter=verdict=violation").await;
    assert_eq!(only["total"], 1, "{only:#}");
    let from = get_json(at, "/api/rows?filter=from=client&filter=method=hello").await;
    assert_eq!(from["total"], 1, "{from:#}");
    let (code, _, body) = get(at, "/api/rows?filter=colour=red", None).await;
    assert_eq!(code, 400);
    assert!(body.contains("colour"), "{body}");
    assert_eq!(get_json(at, "/api/rows?q=RESULT").await["total"], 1);
    assert_eq!(
        get_json(at, "/api/rows?offset=2&limit=5").await["rows"][0]["n"],
        2
    );
    assert_eq!(get(at, "/api/rows/99", None).await.0, 404);

    // One arrow per message in the diagram; the violation drawn as one.
    let (code, hs, svg) = get(at, "/api/diagram?format=svg", None).await;
    assert_eq!(code, 200);
    assert!(
        hs.contains(&("content-type".into(), "image/svg+xml".into())),
        "{hs:?}"
    );
    assert_eq!(svg.matches("<g class=\"arrow").count(), 3, "{svg}");
    let (_, _, mermaid) = get(at, "/api/diagram?format=mermaid", None).await;
    assert!(mermaid.starts_with("sequenceDiagram"), "{mermaid}");

    // The counters, and the metrics in Prometheus' text format.
    let st = get_json(at, "/api/stats").await;
    assert_eq!(
        (&st["messages"], &st["violations"]),
        (&json!(3), &json!(1)),
        "{st:#}"
    );
    let (code, _, m) = get(at, "/metrics", None).await;
    assert_eq!(code, 200);
    assert!(
        m.contains("contract_proxy_messages_total{route=\"main\",channel=\"main\",method=\"hello\",verdict=\"ok\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("# TYPE contract_proxy_frame_size_bytes histogram"),
        "{m}"
    );
    for counter in [
        "refused_total 0",
        "held_bytes_total 0",
        "web_rows_evicted_total 0",
    ] {
        assert!(
            m.contains(&format!("\ncontract_proxy_{counter}\n")),
            "{counter}: {m}"
        );
    }
    let relayed = (m.lines())
        .find_map(|l| l.strip_prefix("contract_proxy_relay_latency_seconds_count{route=\"main\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    // One batch each way at least: the runner's two lines may travel as one batch.
    assert!(
        relayed.is_some_and(|n| n >= 2),
        "a relay time per batch: {m}"
    );
    // The recording draws the same diagram (jobs.json travels inside it).
    drop((r.client, r.runner));
    let _ = r.stop.send(());
    timeout(WAIT, r.run)
        .await
        .expect("the run ends")
        .expect("joined");
    r.web.stop().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
        .args(["show", "--diagram", "mermaid"])
        .arg(r.dir.path().join("run.cprec"))
        .output()
        .expect("contract-proxy show");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), mermaid);
}

/// Off loopback the view serves nothing without its token: the printed URL carries it,
/// the first request with it sets the cookie, and the cookie alone is then enough.
#[tokio::test]
async fn off_loopback_the_token_is_required() {
    let plan = Plan::with(store::Store::new(store::Bounds::default()));
    let app = plan.app(Vec::new());
    let web = serve("0.0.0.0:0".parse().expect("addr"), app)
        .await
        .expect("serve");
    let at: SocketAddr = ([127, 0, 0, 1], web.local.port()).into();
    let token = web
        .url
        .split_once("?token=")
        .map(|(_, t)| t.to_string())
        .expect("a token in the URL");
    assert_eq!(token.len(), 32, "{}", web.url);
    for path in [
        "/",
        "/api/info",
        "/api/rows",
        "/metrics",
        "/api/live",
        "/assets/app.js",
    ] {
        let (code, _, body) = get(at, path, None).await;
        assert_eq!(code, 401, "{path}: {body}");
        let (code, _, _) = get(at, &format!("{path}?token=not-{token}"), None).await;
        assert_eq!(code, 401, "{path} with a wrong token");
    }
    let (code, hs, _) = get(at, &format!("/api/info?token={token}"), None).await;
    assert_eq!(code, 200);
    let cookie = (hs
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone()))
    .expect("a cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().expect("name=value").to_string();
    let (code, _, body) = get(at, "/api/stats", Some(&pair)).await;
    assert_eq!(code, 200, "{body}");
    web.stop().await;
}

/// The live stream ticks at once, then again after a change, with the new counts; and
/// stopping the view ends it.
#[tokio::test]
async fn the_live_stream_ticks_on_change_and_ends_with_the_view() {
    let st = store::Store::new(store::Bounds::default());
    let plan = Plan::with(st.clone());
    let web = serve("127.0.0.1:0".parse().expect("addr"), plan.app(Vec::new()))
        .await
        .expect("serve");
    let mut s = TcpStream::connect(web.local).await.expect("connect");
    s.write_all(b"GET /api/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let mut read_until = async |s: &mut TcpStream, seen: &mut String, what: &str| {
        while !seen.contains(what) {
            let n = timeout(WAIT, s.read(&mut buf))
                .await
                .expect("in time")
                .expect("read");
            assert!(n > 0, "the stream ended before {what}: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    read_until(&mut s, &mut seen, "\"messages\":0").await;
    assert!(
        seen.contains("text/event-stream") && seen.contains("event: tick"),
        "{seen}"
    );
    let e = contract_proxy::inspect::Event::bare(
        "r",
        1,
        1,
        "c",
        contract_proxy::inspect::Dir::Up,
        ("a".into(), "b".into()),
        3,
    );
    st.push(1.0, e, None, b"abc");
    read_until(&mut s, &mut seen, "\"messages\":1").await;
    web.stop().await;
    let mut rest = Vec::new();
    timeout(WAIT, s.read_to_end(&mut rest))
        .await
        .expect("the stream ends")
        .expect("read");
}

/// The store keeps within its row bound, counting what it evicts; an evicted row is gone
/// from pages and details, and numbers stay with their rows.
#[test]
fn the_store_keeps_its_bound_and_counts_evictions() {
    let st = store::Store::new(store::Bounds {
        rows: 3,
        bytes: 1 << 20,
    });
    for i in 0..5u64 {
        let e = contract_proxy::inspect::Event::bare(
            "r",
            1,
            1,
            "c",
            contract_proxy::inspect::Dir::Up,
            ("a".into(), "b".into()),
            1,
        );
        st.push(i as f64, e, None, &[b'0' + i as u8]);
    }
    let q = store::Query {
        limit: 10,
        ..Default::default()
    };
    let page = st.page(&q);
    assert_eq!((page.total, page.evicted), (3, 2));
    let ns: Vec<&Value> = page.rows.iter().map(|r| &r["n"]).collect();
    assert_eq!(ns, [&json!(2), &json!(3), &json!(4)]);
    assert!(st.get(1).is_none());
    assert_eq!(st.get(4).map(|(r, _)| r.raw), Some(b"4".to_vec()));
    // A row past the byte bound pushes older ones out, but the newest always stays.
    let big = store::Store::new(store::Bounds {
        rows: 100,
        bytes: 1,
    });
    for _ in 0..3 {
        let e = contract_proxy::inspect::Event::bare(
            "r",
            1,
            1,
            "c",
            contract_proxy::inspect::Dir::Up,
            ("a".into(), "b".into()),
            1,
        );
        big.push(0.0, e, None, &[0; 64]);
    }
    assert_eq!(big.counts().rows, 1);
    assert_eq!(big.counts().evicted, 2);
    assert_eq!(big.page(&q).rows.len(), 1);
}

/// A message's trace link is the template with the trace id its spans were exported
/// under: a traceparent's own, else the one derived from the carried id; no trace id, no
/// link.
#[test]
fn the_trace_link_names_the_exported_trace() {
    let mut e = contract_proxy::inspect::Event::bare(
        "r",
        1,
        1,
        "c",
        contract_proxy::inspect::Dir::Up,
        ("a".into(), "b".into()),
        1,
    );
    let t = Some("http://localhost:16686/trace/{trace_id}");
    let link = |e: &contract_proxy::inspect::Event| {
        let row = store::Row::new(0, 0.0, e.clone(), None, b"x");
        contract_proxy::web::detail::detail(None, &row, None, t)["trace_url"].clone()
    };
    assert_eq!(link(&e), Value::Null);
    e.trace = Some("t-8f21".into());
    let derived = contract_proxy::trace::carried_trace_id("t-8f21").to_string();
    assert_eq!(
        link(&e),
        json!(format!("http://localhost:16686/trace/{derived}"))
    );
    e.trace = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    assert_eq!(
        link(&e),
        json!("http://localhost:16686/trace/0af7651916cd43dd8448eb211c80319c")
    );
}

/// An envelope contract answers with a correlation member (kernel's `correlation_id`),
/// not the request's own id: the store pairs by it.
#[test]
fn an_answer_pairs_by_its_correlation() {
    use contract::model::Kind;
    use contract_proxy::inspect::{Dir, Event};
    let c = contract::builtin("kernel").expect("kernel");
    let st = store::Store::new(store::Bounds::default());
    let mut ask = Event::bare(
        "control",
        1,
        1,
        "control",
        Dir::Up,
        ("shell".into(), "core".into()),
        1,
    );
    (ask.kind, ask.id) = (Some(Kind::Request), Some(json!("s-0001")));
    let mut answer = Event::bare(
        "control",
        1,
        1,
        "control",
        Dir::Down,
        ("core".into(), "shell".into()),
        1,
    );
    (answer.kind, answer.id) = (Some(Kind::Response), Some(json!("c-0001")));
    let msg =
        json!({"type": "response", "id": "c-0001", "correlation_id": "s-0001", "payload": {}});
    for (e, m) in [(ask, None), (answer, Some(msg))] {
        let mut row = store::Row::new(0, 0.0, e, m, b"{}");
        row.answers = store::answered(&c, &row);
        st.push_with(row);
    }
    assert_eq!(st.get(0).and_then(|(_, p)| p), Some(1));
    assert_eq!(st.get(1).and_then(|(_, p)| p), Some(0));
}
