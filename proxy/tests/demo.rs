//! `contract-proxy demo` end to end: the scripted kernel session through the
//! real proxy must complete every step with zero violations, the proxy must
//! have relayed (and the recording must hold) every kind of message the script
//! sends, and a deliberately broken message must turn the verdict into a
//! failure carrying the contract's own code. With `--otlp`, a gRPC collector
//! must receive a trace under every user action's trace id (heartbeats are span
//! events by the tracer's design, not traces).
//!
//! When the binary has the `demo` subcommand (checked with `demo --help`), the
//! tests run it with `--log json` and read the live view and the summary from
//! its output; until then they call `contract_proxy::demo::run` in-process and
//! assert on the summary it returns.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use contract_proxy::demo::{BreakRule, DemoArgs, run};
use contract_proxy::log::Format;
use contract_proxy::record::Reader;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde_json::{Value, json};
use tokio::time::timeout;

/// The whole demo, including its own step deadlines and the proxy's shutdown.
const LIMIT: Duration = Duration::from_secs(180);

const STEPS: [&str; 7] = [
    "hello",
    "streamed-answer",
    "audio-stream",
    "permission",
    "cancelled-task",
    "heartbeat",
    "close",
];

/// `method kind` → how many frames of it the script sends.
const METHODS: [(&str, u64); 18] = [
    ("hello request", 1),
    ("hello response", 1),
    ("command.handle request", 2),
    ("command.handle response", 2),
    ("stream.chunk event", 3),
    ("stream.end event", 1),
    ("stream.open event", 1),
    ("stream.credit event", 2),
    ("data", 6),
    ("stream.close event", 1),
    ("permission.request request", 1),
    ("permission.request response", 1),
    ("task.progress event", 2),
    ("task.cancel request", 1),
    ("task.cancel response", 1),
    ("task.cancelled event", 1),
    ("ping event", 2),
    ("pong event", 2),
];

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_contract-proxy")
}

/// Whether the binary has the `demo` subcommand yet.
async fn wired() -> bool {
    let out = timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(bin())
            .args(["demo", "--help"])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("demo --help answers in time")
    .expect("run the binary");
    out.status.success()
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cp-demo")
        .tempdir()
        .expect("tempdir")
}

fn args(dir: &Path, rule: Option<BreakRule>, otlp: Option<String>) -> DemoArgs {
    DemoArgs {
        log: Format::Json,
        record: Some(dir.join("demo.cprec")),
        otlp,
        dir: Some(dir.join("sock")),
        break_rule: rule,
        web: Default::default(),
    }
}

/// What one run produced: the exit code, the summary as JSON, and the live view's events
/// (empty when run in-process: the live view went to the test's stdout).
struct Outcome {
    code: i32,
    summary: Value,
    events: Vec<Value>,
}

async fn demo(dir: &Path, rule: Option<BreakRule>, otlp: Option<String>) -> Outcome {
    let a = args(dir, rule, otlp);
    if wired().await {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.arg("demo").args(["--log", "json"]);
        cmd.arg("--record").arg(a.record.as_ref().expect("record"));
        cmd.arg("--dir").arg(a.dir.as_ref().expect("dir"));
        if let Some(url) = &a.otlp {
            cmd.args(["--otlp", url]);
        }
        if rule.is_some() {
            cmd.args(["--break-rule", "unknown-method"]);
        }
        for k in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            cmd.env_remove(k);
        }
        let out = timeout(LIMIT, cmd.kill_on_drop(true).output())
            .await
            .expect("the demo finishes in time")
            .expect("run the demo");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut events = Vec::new();
        let mut summary = None;
        for line in stdout.lines() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("--log json prints JSON lines only: {e}: {line}"));
            if v.get("summary").is_some() {
                summary = Some(v["summary"].clone());
            } else if v.get("verdict").is_some() {
                events.push(v);
            }
        }
        Outcome {
            code: out.status.code().expect("exit code"),
            summary: summary.unwrap_or_else(|| {
                panic!(
                    "no summary line; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            }),
            events,
        }
    } else {
        eprintln!(
            "contract-proxy has no `demo` subcommand yet: running contract_proxy::demo::run in-process"
        );
        let s = timeout(LIMIT, run(a))
            .await
            .expect("the demo finishes in time")
            .expect("the demo starts");
        println!("{s}");
        Outcome {
            code: s.exit_code(),
            summary: serde_json::to_value(&s).expect("summary serializes"),
            events: Vec::new(),
        }
    }
}

fn step_names(summary: &Value) -> Vec<String> {
    summary["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_string())
        .collect()
}

/// The recording holds every frame the proxy counted, data included.
fn check_recording(summary: &Value, path: &Path) {
    assert_eq!(summary["recording"]["status"], "written", "{summary:#}");
    assert_eq!(
        summary["recording"]["path"],
        json!(path),
        "the recording is where --record said"
    );
    assert_eq!(summary["recording"]["lost"], 0);
    let reader = Reader::open(path).expect("the recording opens (magic, header)");
    assert_eq!(reader.header().contract, "kernel");
    let names: BTreeSet<String> = reader
        .header()
        .routes
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["kernel".into(), "kernel.data".into()])
    );
    let mut frames = BTreeMap::<String, u64>::new();
    let mut records = 0;
    for r in reader {
        let r = r.expect("record decodes");
        records += 1;
        if r.direction().is_some() {
            *frames.entry(r.channel.clone()).or_default() += 1;
        }
    }
    assert_eq!(json!(records), summary["recording"]["records"]);
    assert_eq!(
        json!(frames.values().sum::<u64>()),
        summary["frames"],
        "every inspected frame is recorded"
    );
    assert_eq!(frames.get("data"), Some(&6), "{frames:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_session_is_valid_and_shows_every_exchange() {
    let dir = tmp();
    let o = demo(dir.path(), None, None).await;
    let s = &o.summary;
    assert_eq!(step_names(s), STEPS, "{s:#}");
    for step in s["steps"].as_array().expect("steps") {
        assert_eq!(step["outcome"], "done", "{step:#}");
    }
    assert_eq!(s["violations"], 0, "{s:#}");
    assert_eq!(s["violation_list"], json!([]));
    assert_eq!(s["refused"], 0);
    assert_eq!(o.code, 0, "exit code 0 for a clean run");

    // Per method, exactly what the script sends.
    let methods = s["methods"].as_object().expect("methods");
    for (m, n) in METHODS {
        assert_eq!(methods.get(m), Some(&json!(n)), "{m} in {methods:?}");
    }
    let distinct: BTreeSet<&str> = METHODS.iter().map(|(m, _)| *m).collect();
    assert_eq!(
        methods.len(),
        distinct.len(),
        "nothing unexpected: {methods:?}"
    );

    // Per channel and direction; data flows core → shell only.
    let relayed: BTreeMap<(String, String, String), u64> = s["relayed"]
        .as_array()
        .expect("relayed")
        .iter()
        .map(|r| {
            (
                (
                    r["channel"].as_str().expect("channel").into(),
                    r["from"].as_str().expect("from").into(),
                    r["to"].as_str().expect("to").into(),
                ),
                r["frames"].as_u64().expect("frames"),
            )
        })
        .collect();
    let key = |c: &str, f: &str, t: &str| (c.to_string(), f.to_string(), t.to_string());
    assert_eq!(relayed.get(&key("data", "core", "shell")), Some(&6));
    assert_eq!(relayed.get(&key("data", "shell", "core")), None);
    // shell → core: hello, 2 command.handle, 2 credits, permission answer, task.cancel, ping, pong.
    assert_eq!(relayed.get(&key("control", "shell", "core")), Some(&9));
    assert_eq!(
        json!(relayed.values().sum::<u64>()),
        s["frames"],
        "{relayed:?}"
    );
    assert_eq!(s["connections"], 2);

    // The audio stream: 6 frames of 1024 bytes, on the same session as the control channel.
    let streams = s["data_streams"].as_object().expect("streams");
    assert_eq!(streams.len(), 1, "{streams:?}");
    let (stream_id, seen) = streams.iter().next().expect("one stream");
    assert_eq!(seen, &json!({"frames": 6, "bytes": 6144}));
    assert_eq!(
        s["sessions"]["control"], s["sessions"]["data"],
        "data joins the control connection's session"
    );
    assert_eq!(s["sessions"]["control"].as_array().map(Vec::len), Some(1));

    // One trace per action; the ping and the pong of each heartbeat share theirs.
    let traces: Vec<String> = s["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .flat_map(|st| st["traces"].as_array().cloned().unwrap_or_default())
        .map(|t| t.as_str().expect("trace").to_string())
        .collect();
    assert_eq!(traces.len(), 7, "{traces:?}");
    assert_eq!(traces.iter().collect::<BTreeSet<_>>().len(), 7);

    check_recording(s, &dir.path().join("demo.cprec"));
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        && std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
    {
        assert_eq!(s["traces"]["status"], "not-configured");
    }
    for name in ["control.shell", "data.shell", "control.proxy", "data.proxy"] {
        assert!(
            !dir.path().join("sock").join(name).exists(),
            "socket {name} removed"
        );
    }

    // The live view (when the binary printed it): every exchange, each with its trace id.
    if !o.events.is_empty() {
        let seen: BTreeSet<String> = o
            .events
            .iter()
            .filter_map(|e| e["method"].as_str().map(str::to_string))
            .collect();
        for m in [
            "hello",
            "command.handle",
            "stream.chunk",
            "stream.end",
            "stream.open",
            "stream.credit",
            "stream.close",
            "permission.request",
            "task.progress",
            "task.cancel",
            "task.cancelled",
            "ping",
            "pong",
            "data",
        ] {
            assert!(seen.contains(m), "live view shows {m}: {seen:?}");
        }
        let data: Vec<&Value> = o.events.iter().filter(|e| e["method"] == "data").collect();
        assert_eq!(data.len(), 6);
        for (seq, e) in data.iter().enumerate() {
            assert_eq!(
                e["stream"],
                json!([stream_id.parse::<u64>().expect("id"), seq])
            );
            assert_eq!(e["channel"], "data");
        }
        for e in &o.events {
            assert_eq!(e["verdict"]["verdict"], "ok", "{e}");
            if e["channel"] == "control" {
                let t = e["trace"].as_str().expect("control frames carry trace_id");
                assert!(
                    traces.iter().any(|x| x == t),
                    "{t} is one of the steps' traces"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_message_fails_the_demo_with_the_contract_code() {
    let dir = tmp();
    let o = demo(dir.path(), Some(BreakRule::UnknownMethod), None).await;
    let s = &o.summary;
    let mut expected: Vec<&str> = STEPS.to_vec();
    expected.insert(1, "broken-rule");
    assert_eq!(step_names(s), expected, "{s:#}");
    // The peers carry on (the core answers as the contract says); the proxy's count decides.
    for step in s["steps"].as_array().expect("steps") {
        assert_eq!(step["outcome"], "done", "{step:#}");
    }
    assert_eq!(s["violations"], 1, "{s:#}");
    let v = &s["violation_list"][0];
    assert_eq!(v["class"], "unknown-request");
    assert_eq!(v["code"], "protocol.unknown_method");
    assert_eq!(v["method"], "command.teleport");
    assert_eq!(v["from"], "shell");
    assert!(
        v["action"]
            .as_str()
            .is_some_and(|a| a.contains("would have replied")),
        "{v}"
    );
    assert_ne!(o.code, 0, "a violation makes the demo exit non-zero");
    if !o.events.is_empty() {
        let flagged: Vec<&Value> = o
            .events
            .iter()
            .filter(|e| e["verdict"]["verdict"] != "ok")
            .collect();
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert_eq!(flagged[0]["verdict"]["code"], "protocol.unknown_method");
    }
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<(String, String)>>>);

#[tonic::async_trait]
impl TraceService for Spans {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut out = self.0.lock().expect("lock");
        for rs in req.into_inner().resource_spans {
            for ss in rs.scope_spans {
                for s in ss.spans {
                    let hex: String = s.trace_id.iter().map(|b| format!("{b:02x}")).collect();
                    out.push((hex, s.name));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_otlp_every_action_is_an_exported_trace() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let spans = Spans::default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(spans.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let dir = tmp();
    let o = demo(dir.path(), None, Some(format!("http://{addr}"))).await;
    let s = &o.summary;
    assert_eq!(o.code, 0, "{s:#}");
    assert_eq!(s["traces"]["status"], "exported", "{s:#}");
    assert_eq!(s["traces"]["dropped"], 0, "{s:#}");
    let got = spans.0.lock().expect("lock").clone();
    assert_eq!(
        s["traces"]["spans"],
        json!(got.len()),
        "the summary counts what the collector received"
    );
    let ids: BTreeSet<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
    // The tracer makes heartbeats span events, never traces of their own (trace/book.rs).
    let want: BTreeSet<String> = s["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|st| st["name"] != "heartbeat")
        .flat_map(|st| st["traces"].as_array().cloned().unwrap_or_default())
        .map(|t| t.as_str().expect("trace").to_string())
        .collect();
    assert_eq!(want.len(), 5);
    for t in &want {
        assert!(ids.contains(t.as_str()), "trace {t} exported: {ids:?}");
    }
}

/// `demo --web`: the URL is printed, the script waits for the page (here, a live stream
/// opened as the page opens it), every frame of the session reaches the view, the view
/// stays up after the summary, and Ctrl-C ends it with the demo's own exit code.
#[cfg(unix)]
#[tokio::test]
async fn the_demo_with_web_plays_to_an_open_page_and_stays_up_until_ctrl_c() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let dir = tmp();
    let mut child = tokio::process::Command::new(bin())
        .args(["demo", "--log", "json", "--web", "127.0.0.1:0"])
        .arg("--record")
        .arg(dir.path().join("demo.cprec"))
        .arg("--dir")
        .arg(dir.path().join("sock"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the demo");
    let mut err = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut url = None;
    while url.is_none() {
        let line = timeout(LIMIT, err.next_line())
            .await
            .expect("in time")
            .expect("read");
        let line = line.expect("the URL before stderr ends");
        url = line
            .strip_prefix("contract-proxy: web: http://")
            .map(|u| u.trim_end_matches('/').to_string());
    }
    let at = url.expect("url");
    // Until the page is open, no frame passes (the demo waits up to a minute).
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let quiet = async {
        while let Ok(Some(line)) = stdout.next_line().await {
            assert!(
                !line.contains("\"verdict\""),
                "a frame before the page opened: {line}"
            );
        }
    };
    let _ = timeout(Duration::from_secs(1), quiet).await;
    // The page's live stream: the script waits for it.
    let mut live = tokio::net::TcpStream::connect(&at).await.expect("connect");
    live.write_all(b"GET /api/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let frames = loop {
        let line = timeout(LIMIT, stdout.next_line())
            .await
            .expect("the summary in time")
            .expect("read");
        let line = line.expect("a summary line before stdout ends");
        if line.contains("\"summary\"") {
            let v: Value = serde_json::from_str(&line).expect("json");
            break v["summary"]["frames"].as_u64().expect("frames");
        }
    };
    // The view still answers after the summary, with every frame of the run.
    let mut s = tokio::net::TcpStream::connect(&at).await.expect("still up");
    s.write_all(b"GET /api/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut body = String::new();
    timeout(LIMIT, s.read_to_string(&mut body))
        .await
        .expect("in time")
        .expect("read");
    let stats: Value =
        serde_json::from_str(body.split("\r\n\r\n").nth(1).expect("a body")).expect("json");
    assert!(frames > 0);
    assert_eq!(stats["messages"], json!(frames), "{body}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().expect("pid") as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = timeout(LIMIT, child.wait())
        .await
        .expect("Ctrl-C ends it")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    drop(live);
}
