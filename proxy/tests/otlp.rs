//! OpenTelemetry export end to end: real sessions relayed through the proxy's
//! relay between test peers on unix sockets, with the [`Tracer`] sink exporting
//! to in-process OTLP receivers (the official gRPC `TraceService` on tonic, and
//! a small HTTP/protobuf server decoding `ExportTraceServiceRequest` with prost).
//! The assertions read what a collector received: one trace per kernel trace id
//! (the documented derivation), request spans under their roots, attributes,
//! error status and code, span events for events, violations and heartbeats; W3C
//! parents for JSON-RPC; and that a dead collector costs counted drops, never
//! the relay's progress.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use contract_proxy::config::RouteSpec;
use contract_proxy::inspect::Mode;
use contract_proxy::relay::Sink;
use contract_proxy::server::{Finished, Proxy};
use contract_proxy::trace::{OtlpConfig, Protocol, TraceStats, Tracer, carried_trace_id};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::time::timeout;

mod harness;
use harness::{read_json, send_json};

const WAIT: Duration = Duration::from_secs(10);
const STATUS_ERROR: i32 = 2;

// ------------------------------------------------------------------------------------------
// Receivers.

/// A received span with its resource's `service.name`.
type Got = (Option<String>, Span);

#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Got>>>,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Received {
    fn take(&self, req: ExportTraceServiceRequest) {
        let mut out = self.spans.lock().expect("lock");
        for rs in req.resource_spans {
            let service = rs.resource.as_ref().and_then(|r| {
                r.attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| kv.value.as_ref())
                    .and_then(value_text)
            });
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push((service.clone(), s));
                }
            }
        }
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().expect("lock").clone()
    }
}

struct Collector(Received);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.take(req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The official TraceService on 127.0.0.1:0; returns its URL.
async fn grpc_collector() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let rec = Received::default();
    let svc = TraceServiceServer::new(Collector(rec.clone()));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (format!("http://{addr}"), rec)
}

/// OTLP/HTTP: POST /v1/traces with a protobuf body, answered 200 with an empty response.
async fn http_collector() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let rec = Received::default();
    let r = rec.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(http_conn(sock, r.clone()));
        }
    });
    (format!("http://{addr}"), rec)
}

async fn http_conn(mut sock: tokio::net::TcpStream, rec: Received) {
    let mut buf = Vec::new();
    loop {
        // Headers, then a Content-Length body; keep-alive, several requests per connection.
        let (path, body_start, len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let len = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                    .unwrap_or(0usize);
                assert!(len < 64 << 20, "bounded body");
                break (req.path.unwrap_or("").to_string(), n, len);
            }
            assert!(buf.len() < 64 << 10, "bounded headers");
            let mut chunk = [0u8; 8192];
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        while buf.len() < body_start + len {
            let mut chunk = [0u8; 8192];
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buf.drain(..body_start + len).skip(body_start).collect();
        rec.paths.lock().expect("lock").push(path);
        let req = ExportTraceServiceRequest::decode(body.as_slice()).expect("protobuf body");
        rec.take(req);
        let resp = ExportTraceServiceResponse::default().encode_to_vec();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            resp.len()
        );
        if sock.write_all(head.as_bytes()).await.is_err() || sock.write_all(&resp).await.is_err() {
            return;
        }
    }
}

// ------------------------------------------------------------------------------------------
// Span helpers.

fn value_text(v: &opentelemetry_proto::tonic::common::v1::AnyValue) -> Option<String> {
    match v.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(value_text)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn find<'a>(spans: &'a [Span], what: &str, f: impl Fn(&Span) -> bool) -> &'a Span {
    let hits: Vec<&Span> = spans.iter().filter(|s| f(s)).collect();
    assert_eq!(
        hits.len(),
        1,
        "exactly one span {what}; spans: {:#?}",
        spans
            .iter()
            .map(|s| (&s.name, hex(&s.trace_id), hex(&s.span_id)))
            .collect::<Vec<_>>()
    );
    hits[0]
}

fn event_names(s: &Span) -> Vec<&str> {
    s.events.iter().map(|e| e.name.as_str()).collect()
}

// ------------------------------------------------------------------------------------------
// The relay, in process, with the tracer as its sink.

struct Relay {
    listen: PathBuf,
    upstream: PathBuf,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Finished>,
}

async fn start_relay(contract: &str, dir: &Path, tracer: &Tracer) -> (Relay, UnixListener) {
    let listen = dir.join("proxy.sock");
    let upstream = dir.join("upstream.sock");
    let server = UnixListener::bind(&upstream).expect("bind upstream");
    let spec = RouteSpec {
        contract: contract.into(),
        listen: format!("unix:{}", listen.display()),
        upstream: format!("unix:{}", upstream.display()),
        ..RouteSpec::default()
    };
    let r = spec.resolve(0, Mode::Observe).expect("route resolves");
    let sink: Arc<dyn Sink> = Arc::new(tracer.clone());
    let mut proxy = Proxy::new(vec![r]);
    proxy.sink(sink);
    let bound = proxy.bind().await.expect("listen");
    let (stop, rx) = oneshot::channel();
    let task = tokio::spawn(bound.run(async {
        let _ = rx.await;
    }));
    (
        Relay {
            listen,
            upstream,
            stop,
            task,
        },
        server,
    )
}

impl Relay {
    async fn stop(self) {
        let _ = self.stop.send(());
        let done = timeout(Duration::from_secs(15), self.task)
            .await
            .expect("relay stops in time")
            .expect("relay task");
        assert!(
            done.failures.is_empty(),
            "relay ends cleanly: {:?}",
            done.failures
        );
    }
}

/// `from` sends `v`; `to` must receive exactly it.
async fn pass(from: &mut UnixStream, to: &mut UnixStream, v: Value) {
    send_json(from, &v).await;
    assert_eq!(read_json(to).await, v, "relayed intact");
}

async fn connect(relay: &Relay, server: &UnixListener) -> (UnixStream, UnixStream) {
    let client = timeout(WAIT, UnixStream::connect(&relay.listen))
        .await
        .expect("connect in time")
        .expect("connect to the relay");
    let (upstream, _) = timeout(WAIT, server.accept())
        .await
        .expect("relay connects upstream in time")
        .expect("accept");
    (client, upstream)
}

async fn shutdown(tracer: Tracer) -> Result<TraceStats, contract_proxy::trace::TraceError> {
    timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || tracer.shutdown()),
    )
    .await
    .expect("shutdown within its deadline")
    .expect("shutdown task")
}

fn config(endpoint: String, protocol: Protocol) -> OtlpConfig {
    OtlpConfig {
        endpoint: Some(endpoint),
        protocol: Some(protocol),
        service_name: "otlp-test".into(),
        ..OtlpConfig::default()
    }
}

// ------------------------------------------------------------------------------------------
// Kernel (envelope with trace_id), from kernel.json's examples.

const HELLO_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HELLO_DELAY: Duration = Duration::from_millis(60);

fn k(kind: &str, id: &str, trace: &str, extra: Value) -> Value {
    let mut v =
        json!({"v": 1, "type": kind, "id": id, "timestamp": 1756750000.123, "trace_id": trace});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

/// One kernel session: core connects to the proxy, shell is the upstream.
async fn kernel_session(relay: &Relay, server: &UnixListener) {
    let (mut core, mut shell) = connect(relay, server).await;
    // hello: shell → core, answered after a pause the span's duration must show.
    let hello = k(
        "request",
        "s-0001",
        HELLO_TRACE,
        json!({"method": "hello", "payload": {
        "protocol_versions": [1], "shell_version": "4.0.0",
        "capabilities": ["audio.input", "audio.output", "permissions", "window.actions"], "locale": "ru"}}),
    );
    pass(&mut shell, &mut core, hello).await;
    tokio::time::sleep(HELLO_DELAY).await;
    let hello_ok = k(
        "response",
        "c-0001",
        HELLO_TRACE,
        json!({"correlation_id": "s-0001", "payload": {
        "protocol_versions": [1], "protocol_version": 1, "core_version": "4.0.0",
        "capabilities": ["stt", "tts", "reminders", "llm", "plugins"], "session_id": "3f0c9a1e"}}),
    );
    pass(&mut core, &mut shell, hello_ok).await;
    // A long task in trace t-8f23: request, response, progress, done.
    let cmd = k(
        "request",
        "s-0044",
        "t-8f23",
        json!({"method": "command.handle", "payload": {
        "text": "запусти тесты", "source": "typed", "require_wake": false}}),
    );
    pass(&mut shell, &mut core, cmd).await;
    let started = k(
        "response",
        "c-0109",
        "t-8f23",
        json!({"correlation_id": "s-0044", "payload": {"task_id": "task-19"}}),
    );
    pass(&mut core, &mut shell, started).await;
    let progress = k(
        "event",
        "c-0514",
        "t-8f23",
        json!({"method": "task.progress", "payload": {
        "task_id": "task-19", "fraction": 0.25, "message": "Пишу тесты"}}),
    );
    pass(&mut core, &mut shell, progress).await;
    let done = k(
        "event",
        "c-0516",
        "t-8f23",
        json!({"method": "task.done", "payload": {
        "task_id": "task-19", "result": "Готово: 3 файла изменены."}}),
    );
    pass(&mut core, &mut shell, done).await;
    // An error reply in trace t-8f21.
    let cmd2 = k(
        "request",
        "s-0042",
        "t-8f21",
        json!({"method": "command.handle", "payload": {
        "text": "запусти фотошоп", "source": "typed", "require_wake": false}}),
    );
    pass(&mut shell, &mut core, cmd2).await;
    let not_found = k(
        "error",
        "c-0110",
        "t-8f21",
        json!({"correlation_id": "s-0042", "payload": {
        "code": "app.not_found", "category": "user", "retryable": false,
        "message": "Не нашла программу «фотошоп».", "details": {"query": "фотошоп"}}}),
    );
    pass(&mut core, &mut shell, not_found).await;
    // A request the contract does not know: flagged (observe mode forwards it), then answered.
    let unknown = k(
        "request",
        "s-0099",
        "t-8f21",
        json!({"method": "no.such", "payload": {}}),
    );
    pass(&mut shell, &mut core, unknown).await;
    let refused = k(
        "error",
        "c-0111",
        "t-8f21",
        json!({"correlation_id": "s-0099", "payload": {
        "code": "protocol.unknown_method", "category": "protocol", "retryable": false,
        "message": "unknown method no.such"}}),
    );
    pass(&mut core, &mut shell, refused).await;
    // Heartbeat: ping and pong, each with its own trace id.
    let ping = k(
        "event",
        "s-0700",
        "t-p0700",
        json!({"method": "ping", "payload": {}}),
    );
    pass(&mut shell, &mut core, ping).await;
    let pong = k(
        "event",
        "c-0701",
        "t-p0700",
        json!({"method": "pong", "correlation_id": "s-0700", "payload": {}}),
    );
    pass(&mut core, &mut shell, pong).await;
    drop(core);
    drop(shell);
}

fn assert_kernel_spans(rec: &Received, upstream: &Path) {
    let all = rec.spans();
    assert!(
        all.iter()
            .all(|(svc, _)| svc.as_deref() == Some("otlp-test")),
        "service.name is the configured one"
    );
    let spans: Vec<Span> = all.into_iter().map(|(_, s)| s).collect();

    // Every span naming a kernel trace id sits in the trace derived from it.
    let mut seen = 0;
    for s in &spans {
        if let Some(t) = attr(s, "kernel.trace_id") {
            seen += 1;
            assert_eq!(
                hex(&s.trace_id),
                carried_trace_id(&t).to_string(),
                "span {} of kernel trace {t}",
                s.name
            );
        }
    }
    assert!(seen >= 7, "kernel spans carry kernel.trace_id ({seen})");
    // The 32-hex trace id is used as is; others are hashed (SHA-256, first 16 bytes).
    assert_eq!(carried_trace_id(HELLO_TRACE).to_string(), HELLO_TRACE);
    let digest = ring::digest::digest(&ring::digest::SHA256, b"t-8f23");
    assert_eq!(
        carried_trace_id("t-8f23").to_string(),
        hex(&digest.as_ref()[..16])
    );

    // t-8f23: one root, the request span under it, progress and done as root events.
    let root = find(&spans, "kernel trace t-8f23", |s| {
        s.name == "kernel trace" && attr(s, "kernel.trace_id").as_deref() == Some("t-8f23")
    });
    assert!(root.parent_span_id.is_empty(), "the trace root is a root");
    let names = event_names(root);
    assert!(
        names.contains(&"task.progress") && names.contains(&"task.done"),
        "task events are span events on the trace root: {names:?}"
    );
    let cmd = find(&spans, "command.handle s-0044", |s| {
        attr(s, "contract.request.id").as_deref() == Some("s-0044")
    });
    assert_eq!(cmd.name, "command.handle");
    assert_eq!(cmd.trace_id, root.trace_id);
    assert_eq!(
        cmd.parent_span_id, root.span_id,
        "request span under its trace root"
    );
    for (key, want) in [
        ("rpc.system.name", "kernel"),
        ("rpc.method", "command.handle"),
        ("contract.name", "kernel"),
        ("contract.channel", "control"),
        ("proxy.route", "main"),
        ("proxy.direction", "down"),
        ("contract.from", "shell"),
        ("contract.to", "core"),
        ("network.transport", "unix"),
        ("kernel.trace_id", "t-8f23"),
        ("contract.response.id", "c-0109"),
        ("proxy.reply.kind", "response"),
    ] {
        assert_eq!(
            attr(cmd, key).as_deref(),
            Some(want),
            "{key} on command.handle"
        );
    }
    assert_eq!(
        attr(cmd, "server.address").as_deref(),
        Some(upstream.display().to_string().as_str())
    );
    assert_ne!(cmd.status.as_ref().map(|s| s.code), Some(STATUS_ERROR));

    // The hello exchange: one span whose duration is the reply's latency.
    let hello = find(&spans, "hello", |s| s.name == "hello");
    assert_eq!(hex(&hello.trace_id), HELLO_TRACE);
    let took = hello
        .end_time_unix_nano
        .saturating_sub(hello.start_time_unix_nano);
    assert!(
        took >= HELLO_DELAY.as_nanos() as u64,
        "span lasts from request to reply: {took} ns"
    );
    assert!(took < 5_000_000_000, "and no longer: {took} ns");

    // The error reply: status Error with the contract's code and message.
    let failed = find(&spans, "command.handle s-0042", |s| {
        attr(s, "contract.request.id").as_deref() == Some("s-0042")
    });
    let st = failed.status.as_ref().expect("status");
    assert_eq!(st.code, STATUS_ERROR);
    assert_eq!(st.message, "Не нашла программу «фотошоп».");
    assert_eq!(
        attr(failed, "rpc.response.status_code").as_deref(),
        Some("app.not_found")
    );
    assert_eq!(attr(failed, "error.type").as_deref(), Some("app.not_found"));
    let root21 = find(&spans, "kernel trace t-8f21", |s| {
        s.name == "kernel trace" && attr(s, "kernel.trace_id").as_deref() == Some("t-8f21")
    });
    assert_eq!(failed.parent_span_id, root21.span_id);

    // The violation is a span event on the request span it concerns.
    let bad = find(&spans, "no.such", |s| s.name == "no.such");
    let names = event_names(bad);
    assert!(
        names.contains(&"contract.violation") && names.contains(&"contract.enforcement"),
        "{names:?}"
    );
    let action = bad
        .events
        .iter()
        .find(|e| e.name == "contract.enforcement")
        .and_then(|e| e.attributes.iter().find(|kv| kv.key == "contract.action"))
        .and_then(|kv| kv.value.as_ref())
        .and_then(value_text)
        .expect("action text");
    assert!(action.starts_with("would have"), "observe mode: {action}");
    assert_eq!(
        attr(bad, "error.type").as_deref(),
        Some("protocol.unknown_method")
    );

    // Heartbeats: events on the session's span, not a trace each.
    let session = find(&spans, "kernel session", |s| s.name == "kernel session");
    let names = event_names(session);
    assert!(
        names.contains(&"ping") && names.contains(&"pong"),
        "{names:?}"
    );
    assert!(
        !spans
            .iter()
            .any(|s| attr(s, "kernel.trace_id").as_deref() == Some("t-p0700")),
        "no span of its own for a heartbeat"
    );
    assert_eq!(attr(session, "proxy.session"), attr(cmd, "proxy.session"));
}

async fn kernel_run(protocol: Protocol) {
    let (url, rec) = match protocol {
        Protocol::Grpc => grpc_collector().await,
        Protocol::HttpProtobuf => http_collector().await,
    };
    let tracer = Tracer::new(&config(url, protocol)).expect("tracer");
    let dir = tempfile::tempdir().expect("tempdir");
    let (relay, server) = start_relay("kernel", dir.path(), &tracer).await;
    kernel_session(&relay, &server).await;
    let upstream = relay.upstream.clone();
    relay.stop().await;
    let stats = shutdown(tracer).await.expect("clean shutdown");
    let got = rec.spans().len() as u64;
    assert_eq!(stats.dropped, 0, "{stats:?}");
    assert_eq!(
        stats.exported, got,
        "every exported span arrived: {stats:?}"
    );
    assert_kernel_spans(&rec, &upstream);
    if protocol == Protocol::HttpProtobuf {
        let paths = rec.paths.lock().expect("lock").clone();
        assert!(
            !paths.is_empty() && paths.iter().all(|p| p == "/v1/traces"),
            "{paths:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_session_exports_over_grpc() {
    kernel_run(Protocol::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_session_exports_over_http_protobuf() {
    kernel_run(Protocol::HttpProtobuf).await;
}

// ------------------------------------------------------------------------------------------
// JSON-RPC (rukh): W3C parent from params._meta, else one trace per session.

const PARENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_SPAN: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonrpc_session_follows_traceparent_or_its_session() {
    let (url, rec) = grpc_collector().await;
    let tracer = Tracer::new(&config(url, Protocol::Grpc)).expect("tracer");
    let dir = tempfile::tempdir().expect("tempdir");
    let (relay, server) = start_relay("rukh", dir.path(), &tracer).await;
    let (mut core, mut ext) = connect(&relay, &server).await;

    let init = json!({"jsonrpc": "2.0", "id": "c:1", "method": "rukh.initialize", "params": {
        "_meta": {"traceparent": format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01")},
        "sessionId": "s-7f3a9c", "invocationId": "inv-20260921-0001", "kind": "execute",
        "command": "repo status"}});
    pass(&mut core, &mut ext, init).await;
    let init_ok = json!({"jsonrpc": "2.0", "id": "c:1", "result": {"sessionId": "s-7f3a9c"}});
    pass(&mut ext, &mut core, init_ok).await;
    let invoke = json!({"jsonrpc": "2.0", "id": "c:2", "method": "rukh.invoke", "params": {
        "kind": "execute", "sessionId": "s-7f3a9c", "inputs": {"path": "."}, "timeoutMs": 29500}});
    pass(&mut core, &mut ext, invoke).await;
    let log = json!({"jsonrpc": "2.0", "method": "rukh.log", "params": {
        "level": "info", "message": "scanning working tree", "fields": {"files": 214}}});
    pass(&mut ext, &mut core, log).await;
    let call = json!({"jsonrpc": "2.0", "id": "e:1", "method": "rukh.call", "params": {
        "operation": "fs.read", "version": "1", "input": {"path": "/etc/shadow"}, "timeoutMs": 1000}});
    pass(&mut ext, &mut core, call).await;
    let denied = json!({"jsonrpc": "2.0", "id": "e:1", "error": {"code": -32004, "message": "operation denied"}});
    pass(&mut core, &mut ext, denied).await;
    let invoked = json!({"jsonrpc": "2.0", "id": "c:2", "result": {"status": "succeeded"}});
    pass(&mut ext, &mut core, invoked).await;
    drop(core);
    drop(ext);
    relay.stop().await;
    let stats = shutdown(tracer).await.expect("clean shutdown");
    assert_eq!(stats.dropped, 0, "{stats:?}");
    let spans: Vec<Span> = rec.spans().into_iter().map(|(_, s)| s).collect();

    let init = find(&spans, "rukh.initialize", |s| s.name == "rukh.initialize");
    assert_eq!(hex(&init.trace_id), PARENT_TRACE, "the caller's trace");
    assert_eq!(
        hex(&init.parent_span_id),
        PARENT_SPAN,
        "under the caller's span"
    );
    for (key, want) in [
        ("rpc.system.name", "jsonrpc"),
        ("rpc.method", "rukh.initialize"),
        ("jsonrpc.request.id", "c:1"),
        ("jsonrpc.protocol.version", "2.0"),
        ("contract.name", "rukh"),
        ("proxy.direction", "up"),
        ("network.transport", "unix"),
    ] {
        assert_eq!(attr(init, key).as_deref(), Some(want), "{key}");
    }

    let session = find(&spans, "rukh session", |s| s.name == "rukh session");
    assert!(session.parent_span_id.is_empty());
    assert_ne!(hex(&session.trace_id), PARENT_TRACE);
    assert!(
        event_names(session).contains(&"rukh.log"),
        "notification as a session event"
    );
    assert_eq!(attr(session, "session.id").as_deref(), Some("s-7f3a9c"));
    let invoke = find(&spans, "rukh.invoke", |s| s.name == "rukh.invoke");
    assert_eq!(invoke.trace_id, session.trace_id, "one trace per session");
    assert_eq!(invoke.parent_span_id, session.span_id);
    assert_eq!(attr(invoke, "session.id").as_deref(), Some("s-7f3a9c"));
    let call = find(&spans, "rukh.call", |s| s.name == "rukh.call");
    assert_eq!(call.trace_id, session.trace_id);
    assert_eq!(attr(call, "proxy.direction").as_deref(), Some("down"));
    assert_eq!(call.status.as_ref().map(|s| s.code), Some(STATUS_ERROR));
    assert_eq!(
        call.status.as_ref().map(|s| s.message.as_str()),
        Some("operation denied")
    );
    assert_eq!(
        attr(call, "rpc.response.status_code").as_deref(),
        Some("-32004")
    );
    assert_eq!(attr(call, "error.type").as_deref(), Some("-32004"));
    // The invoke was answered after the call nested inside it: it lasts longer.
    let dur = |s: &Span| s.end_time_unix_nano - s.start_time_unix_nano;
    assert!(dur(invoke) > dur(call));
}

// ------------------------------------------------------------------------------------------
// A dead collector.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_collector_drops_and_counts_without_holding_the_relay() {
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let cfg = OtlpConfig {
        queue_size: 8,
        batch_size: 4,
        schedule_delay: Duration::from_millis(50),
        ..config(format!("http://127.0.0.1:{port}"), Protocol::Grpc)
    };
    let tracer = Tracer::new(&cfg).expect("tracer");
    let dir = tempfile::tempdir().expect("tempdir");
    let (relay, server) = start_relay("rukh", dir.path(), &tracer).await;
    let (mut core, mut ext) = connect(&relay, &server).await;
    const N: usize = 300;
    timeout(Duration::from_secs(60), async {
        for i in 0..N {
            let id = format!("c:{i}");
            let req = json!({"jsonrpc": "2.0", "id": id, "method": "rukh.close", "params": {}});
            pass(&mut core, &mut ext, req).await;
            let ok = json!({"jsonrpc": "2.0", "id": id, "result": {}});
            pass(&mut ext, &mut core, ok).await;
        }
    })
    .await
    .expect("every exchange is relayed while the collector is down");
    timeout(Duration::from_secs(30), async {
        while tracer.dropped() == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("drops are counted");
    drop(core);
    drop(ext);
    relay.stop().await;
    let stats = match shutdown(tracer).await {
        Ok(s) => s,
        Err(contract_proxy::trace::TraceError::Timeout { dropped, .. }) => TraceStats {
            dropped,
            ..TraceStats::default()
        },
        Err(e) => panic!("shutdown: {e}"),
    };
    assert_eq!(stats.exported, 0, "{stats:?}");
    // N request spans and the session root: every one is accounted for as dropped.
    assert_eq!(stats.dropped, N as u64 + 1, "{stats:?}");
}
