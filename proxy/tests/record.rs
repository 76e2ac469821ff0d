//! Recording, reading back, redaction, and replay against a real unix-socket upstream.
//!
//! Frames come from the contracts' own examples, and every recorded event is what
//! the real inspector says about them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract::wire::Wire;
use contract_proxy::inspect::{Dir, Event, Inspection, Inspector, Mode as InspectMode, Verdict};
use contract_proxy::log::{Format, Logger};
use contract_proxy::record::{
    self, Header, MAGIC, Reader, Record, RecordError, Recorder, RouteInfo, event_from_json,
};
use contract_proxy::replay::{ReplayOptions, Status, replay};
use contract_transport::endpoint::Endpoint;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

mod common;
mod harness;
use common::write_recording;

const LIMIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "9f2c4e6a8b0d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a";

fn wire(name: &str) -> Arc<Wire> {
    Arc::new(Wire::new(Arc::new(contract::builtin(name).expect("contract"))).expect("wire"))
}

fn route(name: &str, channel: &str, client: &str, server: &str) -> RouteInfo {
    RouteInfo {
        name: name.into(),
        listen: "unix:/tmp/listen.sock".into(),
        upstream: "unix:/tmp/up.sock".into(),
        channel: channel.into(),
        client: client.into(),
        server: server.into(),
        ..Default::default()
    }
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// What the inspector says about one frame payload.
fn inspect(ins: &mut Inspector, dir: Dir, body: &[u8]) -> Inspection {
    ins.frame(dir, body, std::time::Instant::now())
}

/// Every example message of `contract`, with the party that sends it.
fn examples(contract: &str) -> Vec<(String, Value)> {
    let c = contract::builtin(contract).expect("contract");
    let doc: Value = serde_json::from_str(
        contract::BUILTIN
            .iter()
            .find(|(n, _)| *n == contract)
            .expect("builtin")
            .1,
    )
    .expect("json");
    let mut out = Vec::new();
    for name in c.methods.keys() {
        for ex in doc["methods"][name]["examples"]
            .as_array()
            .expect("examples")
        {
            out.push((
                ex["from"].as_str().expect("from").to_string(),
                ex["message"].clone(),
            ));
        }
    }
    out
}

fn read_all(path: &Path) -> (Header, Vec<Record>) {
    let reader = Reader::open(path).expect("open");
    let h = reader.header().clone();
    let recs = reader.collect::<Result<Vec<_>, _>>().expect("records");
    (h, recs)
}

#[tokio::test]
async fn kernel_session_round_trips_and_binary_frames_stay_raw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kernel.cprec");
    let w = wire("kernel");
    // Kernel: core connects (client), the shell answers.
    let mut ins = Inspector::new(
        w.clone(),
        "main",
        1,
        "control",
        ("core", "shell"),
        InspectMode::Observe,
    )
    .expect("ins");
    let mut recs = vec![Record::note("main", 1, "open unix")];
    let mut sent = Vec::new();
    for (from, msg) in examples("kernel") {
        let body = serde_json::to_vec(&msg).expect("body");
        let dir = if from == "core" { Dir::Up } else { Dir::Down };
        let ins = inspect(&mut ins, dir, &body);
        recs.push(Record::inspected(&body, &ins));
        sent.push((dir, body, msg, ins.event));
    }
    assert!(sent.len() > 40, "the kernel contract has many examples");
    // One audio frame on the data channel: binary, no event.
    let audio: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    recs.push(Record::frame("main", 1, Dir::Up, "data", &audio, None));
    recs.push(Record::note("main", 1, "close"));
    let n = recs.len() as u64;
    let header = Header::new(
        &contract::builtin("kernel").expect("kernel"),
        vec![route("main", "control", "core", "shell")],
    );
    let stats = write_recording(&path, header.clone(), recs).await;
    assert_eq!(stats.records, n);
    assert_eq!(stats.redacted, 0, "kernel examples carry no secrets");
    let file = std::fs::read(&path).expect("read");
    assert_eq!(stats.bytes, file.len() as u64);
    assert!(file.starts_with(MAGIC));

    let (h, back) = read_all(&path);
    assert_eq!(h, header);
    assert_eq!(h.contract, "kernel");
    assert_eq!(back.len() as u64, n);
    assert_eq!(back[0].note, "open unix");
    assert_eq!(back[0].direction(), None);
    for (rec, (dir, body, msg, ev)) in back[1..].iter().zip(&sent) {
        assert_eq!(rec.direction(), Some(*dir));
        assert_eq!(rec.conn, 1);
        assert_eq!(rec.channel, "control");
        assert_eq!(&rec.raw, body, "raw bytes unchanged");
        let d = rec.decoded().expect("decoded json");
        assert_eq!(&d["message"], msg);
        assert_eq!(event_from_json(&d["event"]).as_ref(), Some(ev));
    }
    let a = &back[back.len() - 2];
    assert_eq!(a.raw, audio, "binary frame stored as is");
    assert!(a.decoded_json.is_empty(), "no event, no JSON message");
    // Raw bytes, not base64: the audio costs its own size plus a few bytes.
    let json_bytes: usize = sent.iter().map(|s| s.1.len()).sum();
    assert!(
        (file.len() as f64) < (audio.len() as f64) * 1.02 + (json_bytes as f64) * 6.0,
        "file {} bytes for {} audio bytes",
        file.len(),
        audio.len()
    );

    // `show` reads it all and counts like the live view.
    let logger = Logger::new(
        Format::Json,
        vec!["method=no-such-method".parse().expect("filter")],
    );
    let shown = record::show(&path, &logger).expect("show");
    assert_eq!(shown.records, n);
    assert_eq!(shown.frames, n - 2);
    assert_eq!(shown.notes, 2);
    let bad = sent
        .iter()
        .filter(|s| !matches!(s.3.verdict, Verdict::Ok))
        .count();
    assert_eq!(shown.violations as usize, bad);

    // An existing recording is never overwritten.
    assert!(matches!(
        Recorder::create(&path, h),
        Err(RecordError::Io { .. })
    ));
}

#[tokio::test]
async fn many_records_pass_the_bounded_queue_without_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("many.cprec");
    let header = Header::new(
        &contract::builtin("rukh").expect("rukh"),
        vec![route("r", "ipc", "core", "extension")],
    );
    let rec = Recorder::create(&path, header).expect("create");
    let n = (record::QUEUE * 5) as u64;
    // Several tasks share one writer through sinks.
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let sink = rec.sink();
        tasks.push(tokio::spawn(async move {
            for i in 0..n / 4 {
                let body = format!(r#"{{"jsonrpc":"2.0","method":"rukh.log","params":{{"level":"info","message":"{t}-{i}"}}}}"#);
                sink.record(Record::frame("r", t, Dir::Down, "ipc", body.as_bytes(), None))
                    .await
                    .expect("queued");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LIMIT, t)
            .await
            .expect("in time")
            .expect("task");
    }
    let sink = rec.sink();
    let stats = tokio::time::timeout(LIMIT, rec.finish())
        .await
        .expect("in time")
        .expect("finish");
    assert_eq!(stats.records, n);
    let err = sink
        .record(Record::note("r", 0, "after the end"))
        .await
        .expect_err("a finished recording refuses records");
    assert!(matches!(err, RecordError::Stopped(_)), "{err}");
    let (_, back) = read_all(&path);
    assert_eq!(back.len() as u64, n);
    for t in 0..4u64 {
        // Per task, order is kept.
        let msgs: Vec<String> = back
            .iter()
            .filter(|r| r.conn == t)
            .map(|r| {
                r.decoded().expect("json")["message"]["params"]["message"]
                    .as_str()
                    .expect("s")
                    .to_string()
            })
            .collect();
        let want: Vec<String> = (0..n / 4).map(|i| format!("{t}-{i}")).collect();
        assert_eq!(msgs, want);
    }
}

async fn small_recording(path: &Path) -> u64 {
    let header = Header::new(
        &contract::builtin("rukh").expect("rukh"),
        vec![route("r", "ipc", "core", "extension")],
    );
    let recs = (0..3)
        .map(|i| {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":"c:{i}","method":"rukh.close","params":{{}}}}"#);
            Record::frame("r", 1, Dir::Up, "ipc", body.as_bytes(), None)
        })
        .collect();
    write_recording(path, header, recs).await.bytes
}

#[tokio::test]
async fn corrupt_length_is_a_clear_error_with_the_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("corrupt.cprec");
    let good_len = small_recording(&path).await;
    // A length prefix of 2^40 bytes, then a little garbage.
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.extend([0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 1, 2, 3]);
    std::fs::write(&path, &bytes).expect("write");
    let mut reader = Reader::open(&path).expect("open");
    for _ in 0..3 {
        reader.next().expect("record").expect("intact");
    }
    let err = reader.next().expect("an error").expect_err("corrupt");
    match &err {
        RecordError::TooLong { offset, len, .. } => {
            assert_eq!(*offset, good_len);
            assert_eq!(*len, 1u64 << 40);
        }
        other => panic!("wrong error: {other}"),
    }
    assert!(
        err.to_string().contains(&format!("at byte {good_len}")),
        "{err}"
    );
    assert!(reader.next().is_none(), "nothing after an error");
    // Not a recording at all.
    let other = dir.path().join("other");
    std::fs::write(&other, b"{\"not\":\"a recording\"}").expect("write");
    assert!(matches!(
        Reader::open(&other).err(),
        Some(RecordError::BadMagic { .. })
    ));
    // A record whose bytes are not protobuf.
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.truncate(good_len as usize);
    bytes.extend([3, 0xff, 0xff, 0xff]);
    std::fs::write(&path, &bytes).expect("write");
    let err = Reader::open(&path)
        .expect("open")
        .find_map(Result::err)
        .expect("error");
    assert!(
        matches!(err, RecordError::Corrupt { offset, .. } if offset == good_len),
        "{err}"
    );
}

#[tokio::test]
async fn truncated_last_record_is_reported_after_the_intact_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cut.cprec");
    let len = small_recording(&path).await;
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..len as usize - 5]).expect("write");
    let results: Vec<_> = Reader::open(&path).expect("open").collect();
    assert_eq!(results.len(), 3);
    assert!(results[..2].iter().all(Result::is_ok));
    let err = results[2].as_ref().expect_err("truncated");
    assert!(
        matches!(err, RecordError::Truncated { records: 2, have, needed, .. } if *have + 5 == *needed),
        "{err}"
    );
    assert!(err.to_string().contains("truncated"), "{err}");
    // show prints the intact records, then reports the same error.
    let logger = Logger::new(Format::Json, Vec::new());
    let shown = record::show(&path, &logger).expect_err("truncated");
    assert!(matches!(shown, RecordError::Truncated { records: 2, .. }));
}

#[tokio::test]
async fn xsession_tokens_never_reach_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("xs.cprec");
    let w = wire("xsession");
    let mut ins = Inspector::new(
        w,
        "inbox",
        1,
        "inbox",
        ("sender", "recipient"),
        InspectMode::Observe,
    )
    .expect("ins");
    let auth = json!({"msgV": 1, "type": "auth", "token": TOKEN}).to_string();
    let user = json!({"msgV": 1, "msgId": "0c4f7d2a-9e61-4b38-8a15-6d2e9f3b7c40", "type": "user",
        "from": "/tmp/s/52001.sock", "replyToken": TOKEN, "toSessionId": "8e016be8",
        "message": {"role": "user", "content": "build finished"}})
    .to_string();
    let mut recs = Vec::new();
    for body in [&auth, &user] {
        let ins = inspect(&mut ins, Dir::Up, body.as_bytes());
        recs.push(Record::frame(
            "inbox",
            1,
            Dir::Up,
            "inbox",
            body.as_bytes(),
            Some(&ins.event),
        ));
    }
    // A broken auth line, and an event whose reason quotes the token.
    let cut = format!(r#"{{"msgV":1,"type":"auth","token":"{TOKEN}"#);
    let mut ev = recs[0].clone();
    ev.raw = cut.into_bytes();
    recs.push(ev);
    let quoting = Event {
        route: "inbox".into(),
        conn: 1,
        session: 1,
        channel: "inbox".into(),
        stream: None,
        error: None,
        action: None,
        dir: Dir::Up,
        from: "sender".into(),
        to: "recipient".into(),
        kind: None,
        method: Some("auth".into()),
        id: None,
        size: 80,
        latency: None,
        trace: None,
        verdict: Verdict::Violation {
            class: "invalid",
            code: None,
            seed: None,
            reason: format!("\"{TOKEN}\" is not one of the three token kinds"),
        },
    };
    recs.push(Record::frame(
        "inbox",
        1,
        Dir::Up,
        "inbox",
        auth.as_bytes(),
        Some(&quoting),
    ));
    recs.push(Record::note(
        "inbox",
        1,
        format!("close {{\"token\":\"{TOKEN}\"}}"),
    ));
    let header = Header::new(
        &contract::builtin("xsession").expect("xsession"),
        vec![route("inbox", "inbox", "sender", "recipient")],
    );
    let stats = write_recording(&path, header, recs).await;
    assert_eq!(
        stats.redacted, 5,
        "one token in each of five records: {stats:?}"
    );
    let file = std::fs::read(&path).expect("read");
    assert!(
        !file.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
        "the token is not anywhere in the file"
    );
    assert!(
        !file.windows(16).any(|w| w == &TOKEN.as_bytes()[..16]),
        "not even a prefix of it"
    );
    let (_, back) = read_all(&path);
    assert_eq!(
        back[0].raw,
        br#"{"msgV":1,"type":"auth","token":"[REDACTED]"}"#
    );
    let d = back[1].decoded().expect("json");
    assert_eq!(d["message"]["replyToken"], "[REDACTED]");
    assert_eq!(d["message"]["message"]["content"], "build finished");
    assert_eq!(d["event"]["verdict"]["verdict"], "ok", "the event is kept");
    let d = back[3].decoded().expect("json");
    assert_eq!(
        d["event"]["verdict"]["reason"],
        "\"[REDACTED]\" is not one of the three token kinds"
    );
}

// ---- replay against a real rukh extension over a unix socket ----

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    AsRecorded,
    ChangeInvoke,
    SkipClose,
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":"c:1","method":"rukh.initialize","params":{"sessionId":"s-7f3a9c","invocationId":"inv-20260921-0001","kind":"execute","command":"repo status","release":{"name":"acme-repo","version":"1.4.2"},"contract":{"id":"acme-repo/status","version":"1.0.0"},"protocol":{"wire":"rukh-ipc/1","frame":"u32be-json/1","interaction":"rukh-interaction/1"},"capabilities":["command-result/1"],"limits":{"maxFramePayloadBytes":1048576,"maxLifecyclePayloadBytes":16384,"maxDepth":32,"maxItems":4096,"maxPendingRequests":64,"sendQueueFrames":128,"sendQueueBytes":4194304,"logRecordsPerSecond":100,"logBytesPerSecond":1048576,"frameTimeoutMs":2000}}}"#;
const INVOKE: &str = r#"{"jsonrpc":"2.0","id":"c:2","method":"rukh.invoke","params":{"kind":"execute","sessionId":"s-7f3a9c","inputs":{"path":".","short":true},"explicit":["short"],"timeoutMs":29500}}"#;
const CLOSE: &str = r#"{"jsonrpc":"2.0","id":"c:5","method":"rukh.close","params":{}}"#;
const LOG: &str = r#"{"jsonrpc":"2.0","method":"rukh.log","params":{"level":"info","message":"scanning working tree","fields":{"files":214}}}"#;
const CLOSE_RES: &str = r#"{"jsonrpc":"2.0","id":"c:5","result":{}}"#;

/// The rukh.initialize result example, straight from the contract.
fn init_result() -> String {
    examples("rukh")
        .into_iter()
        .find(|(from, m)| from == "extension" && m["id"] == "c:1" && m.get("result").is_some())
        .expect("initialize result example")
        .1
        .to_string()
}

fn invoke_result(changed: u64) -> String {
    json!({"jsonrpc":"2.0","id":"c:2","result":{"status":"succeeded","commandResult":{"clean":true,"changed":changed}}}).to_string()
}

/// Record core ⇄ extension: initialize, a log line, invoke, close.
async fn record_rukh(path: &Path) {
    let header = Header::new(
        &contract::builtin("rukh").expect("rukh"),
        vec![route("ext", "ipc", "core", "extension")],
    );
    record_rukh_with(path, header).await;
}

/// [`record_rukh`] under `header`.
async fn record_rukh_with(path: &Path, header: Header) {
    let w = wire("rukh");
    let mut ins = Inspector::new(
        w,
        "ext",
        7,
        "ipc",
        ("core", "extension"),
        InspectMode::Observe,
    )
    .expect("ins");
    let init_res = init_result();
    let inv_res = invoke_result(0);
    let frames: [(Dir, &str); 7] = [
        (Dir::Up, INIT),
        (Dir::Down, &init_res),
        (Dir::Down, LOG),
        (Dir::Up, INVOKE),
        (Dir::Down, &inv_res),
        (Dir::Up, CLOSE),
        (Dir::Down, CLOSE_RES),
    ];
    let mut recs = vec![Record::note("ext", 7, "open unix")];
    for (dir, body) in frames {
        let ins = inspect(&mut ins, dir, body.as_bytes());
        assert_eq!(ins.event.verdict, Verdict::Ok, "{body}");
        recs.push(Record::inspected(body.as_bytes(), &ins));
    }
    recs.push(Record::note("ext", 7, "close"));
    write_recording(path, header, recs).await;
}

/// A rukh extension: answers each request per `mode`, returns the request bodies it got.
async fn extension(listener: UnixListener, mode: Mode) -> Vec<String> {
    let (s, _) = listener.accept().await.expect("accept");
    serve_extension(s, mode).await
}

async fn serve_extension(
    mut s: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    mode: Mode,
) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).await.is_err() {
            return got;
        }
        let n = u32::from_be_bytes(len) as usize;
        assert!(n < 1 << 20, "sane frame");
        let mut body = vec![0u8; n];
        s.read_exact(&mut body).await.expect("body");
        let text = String::from_utf8(body).expect("utf8");
        let v: Value = serde_json::from_str(&text).expect("json");
        got.push(text);
        let replies: Vec<String> = match v["method"].as_str().expect("method") {
            "rukh.initialize" => vec![init_result(), LOG.to_string()],
            "rukh.invoke" => vec![invoke_result(if mode == Mode::ChangeInvoke {
                7
            } else {
                0
            })],
            "rukh.close" if mode == Mode::SkipClose => vec![],
            "rukh.close" => vec![CLOSE_RES.to_string()],
            other => panic!("unexpected {other}"),
        };
        for r in replies {
            s.write_all(&framed(r.as_bytes())).await.expect("reply");
        }
    }
}

async fn replay_against(
    path: &Path,
    dir: &Path,
    mode: Mode,
    opts: &ReplayOptions,
) -> (contract_proxy::replay::ReplayReport, Vec<String>, Duration) {
    let sock: PathBuf = dir.join(format!("ext-{}.sock", mode as u8));
    let listener = UnixListener::bind(&sock).expect("bind");
    let server = tokio::spawn(extension(listener, mode));
    let t0 = Instant::now();
    let report = tokio::time::timeout(LIMIT, replay(path, &Endpoint::Unix(sock), Dir::Up, opts))
        .await
        .expect("replay in time")
        .expect("replay runs");
    let took = t0.elapsed();
    let got = tokio::time::timeout(LIMIT, server)
        .await
        .expect("server ends")
        .expect("server ok");
    (report, got, took)
}

#[tokio::test]
async fn replay_reports_same_differs_and_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rukh.cprec");
    record_rukh(&path).await;
    let opts = ReplayOptions {
        deadline: Duration::from_millis(700),
        settle: Duration::from_millis(100),
        ..Default::default()
    };

    // 1. The extension answers as recorded.
    let (report, got, _) = replay_against(&path, dir.path(), Mode::AsRecorded, &opts).await;
    assert_eq!(
        got,
        [INIT, INVOKE, CLOSE],
        "the extension got the recorded bytes"
    );
    assert_eq!(report.conn, 7);
    assert_eq!(report.sent, 3);
    assert_eq!(report.requests.len(), 3);
    assert!(report.is_clean(), "{report}");
    assert!(
        report
            .requests
            .iter()
            .all(|r| r.status == Status::Same && r.violation.is_none())
    );
    assert_eq!(report.requests[1].method.as_deref(), Some("rukh.invoke"));
    assert!(report.to_string().starts_with("replay of"), "{report}");
    assert_eq!(report.to_json()["requests"][0]["status"], "same");

    // 2. One result differs: that request, with the path.
    let (report, got, _) = replay_against(&path, dir.path(), Mode::ChangeInvoke, &opts).await;
    assert_eq!(got.len(), 3);
    assert!(!report.is_clean());
    assert_eq!(report.requests[0].status, Status::Same);
    assert_eq!(report.requests[2].status, Status::Same);
    match &report.requests[1].status {
        Status::Differs { diffs, more } => {
            assert_eq!(*more, 0);
            assert_eq!(diffs.len(), 1, "{diffs:?}");
            assert_eq!(diffs[0].path, "/result/commandResult/changed");
            assert_eq!(diffs[0].expected, Some(json!(0)));
            assert_eq!(diffs[0].actual, Some(json!(7)));
        }
        other => panic!("expected differs, got {other:?}"),
    }
    let text = report.to_string();
    assert!(
        text.contains("/result/commandResult/changed: expected 0, got 7"),
        "{text}"
    );
    let j = report.to_json();
    assert_eq!(j["requests"][1]["status"], "differs");
    assert_eq!(
        j["requests"][1]["diffs"][0]["path"],
        "/result/commandResult/changed"
    );

    // 3. No answer to rukh.close: missing, within the deadline.
    let (report, got, took) = replay_against(&path, dir.path(), Mode::SkipClose, &opts).await;
    assert_eq!(got.len(), 3);
    assert!(!report.is_clean());
    assert_eq!(report.requests[0].status, Status::Same);
    assert_eq!(report.requests[1].status, Status::Same);
    match &report.requests[2].status {
        Status::Missing { waited_ms, .. } => {
            assert!(*waited_ms >= 650.0 && *waited_ms < 3000.0, "{waited_ms}");
        }
        other => panic!("expected missing, got {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "gave up on time: {took:?}");
    assert!(report.to_string().contains("MISSING"), "{report}");
}

/// A recording made with a contract file that is not built in carries the document, so
/// replay needs neither the file nor `--contract`: here rukh's contract under another
/// name, which no proxy knows by name.
#[tokio::test]
async fn replay_of_a_contract_file_recording_needs_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fork.cprec");
    let mut fork = contract::builtin("rukh").expect("rukh");
    fork.name = "rukh-fork".into();
    assert!(contract::builtin(&fork.name).is_err());
    let mut r = route("ext", "ipc", "core", "extension");
    r.contract = fork.name.clone();
    r.contract_json = contract_proxy::record::contract_document(&fork);
    assert!(!r.contract_json.is_empty());
    record_rukh_with(&path, Header::new(&fork, vec![r])).await;
    let opts = ReplayOptions {
        deadline: Duration::from_millis(700),
        settle: Duration::from_millis(100),
        ..Default::default()
    };
    let (report, got, _) = replay_against(&path, dir.path(), Mode::AsRecorded, &opts).await;
    assert_eq!(got, [INIT, INVOKE, CLOSE]);
    assert!(report.is_clean(), "{report}");
    // A built-in contract is named, not carried.
    let rukh = contract::builtin("rukh").expect("rukh");
    assert_eq!(contract_proxy::record::contract_document(&rukh), "");
}

/// Replay to a `quic://` target offers the ALPN the recording's contract fixes
/// (`rukh/<major>`), as `run` does: a QUIC server that accepts only that ALPN
/// gets the session and answers as recorded.
#[tokio::test]
async fn replay_to_a_quic_target_offers_the_contracts_alpn() {
    use contract_transport::endpoint::Options;
    use contract_transport::endpoint::quic::QuicListener;
    use contract_transport::endpoint::tls::TlsOpts;

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rukh.cprec");
    record_rukh(&path).await;
    let pki = harness::make_pki("replay test CA");
    let c = contract::builtin("rukh").expect("rukh");
    let served = Options::for_contract(
        &c,
        "ipc",
        TlsOpts {
            cert: Some(pki.cert.clone()),
            key: Some(pki.key.clone()),
            ..TlsOpts::default()
        },
    );
    assert!(served.alpn.starts_with(b"rukh/"), "{:?}", served.alpn);
    let listener = QuicListener::bind("127.0.0.1:0", &served).expect("bind");
    let addr = listener.local_addr().to_string();
    let server = tokio::spawn(async move {
        let (io, _) = listener.accept().await.expect("accept");
        serve_extension(io, Mode::AsRecorded).await
    });
    let mut opts = ReplayOptions {
        deadline: Duration::from_millis(700),
        settle: Duration::from_millis(100),
        ..Default::default()
    };
    opts.endpoint.tls.ca = Some(pki.ca.clone());
    let report = tokio::time::timeout(LIMIT, replay(&path, &Endpoint::Quic(addr), Dir::Up, &opts))
        .await
        .expect("replay in time")
        .expect("the QUIC handshake agrees on the ALPN");
    assert!(report.is_clean(), "{report}");
    let got = tokio::time::timeout(LIMIT, server)
        .await
        .expect("server ends")
        .expect("server ok");
    assert_eq!(got, [INIT, INVOKE, CLOSE]);
}

/// A kernel core: answers each request with its recorded response under a fresh id and clock.
async fn kernel_core(listener: UnixListener, answers: Vec<Value>) -> Vec<Value> {
    let (mut s, _) = listener.accept().await.expect("accept");
    let mut got = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).await.is_err() {
            return got;
        }
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).await.expect("body");
        let v: Value = serde_json::from_slice(&body).expect("json");
        if v["type"] == "request" {
            let mut reply = answers
                .iter()
                .find(|a| a["correlation_id"] == v["id"])
                .expect("a recorded answer")
                .clone();
            reply["id"] = json!(format!("c-live-{}", got.len()));
            reply["timestamp"] = json!(1.5);
            s.write_all(&framed(&serde_json::to_vec(&reply).expect("ser")))
                .await
                .expect("reply");
        }
        got.push(v);
    }
}

#[tokio::test]
async fn kernel_replay_of_the_shell_side_ignores_reply_ids_and_clocks() {
    let ex = examples("kernel");
    let pick = |from: &str, pred: &dyn Fn(&Value) -> bool| {
        ex.iter()
            .find(|(f, m)| f == from && pred(m))
            .expect("example")
            .1
            .clone()
    };
    let hello = pick("shell", &|m| {
        m["method"] == "hello" && m["type"] == "request"
    });
    let hello_res = pick("core", &|m| {
        m["correlation_id"] == hello["id"] && m["type"] == "response"
    });
    let ping = pick("shell", &|m| m["method"] == "ping");
    let cancel = pick("shell", &|m| m["method"] == "task.cancel");
    let cancel_res = pick("core", &|m| m["correlation_id"] == cancel["id"]);
    assert_ne!(
        hello_res["id"], hello["id"],
        "kernel replies have their own id"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("k.cprec");
    let w = wire("kernel");
    let mut ins = Inspector::new(
        w,
        "k",
        3,
        "control",
        ("core", "shell"),
        InspectMode::Observe,
    )
    .expect("ins");
    let mut recs = Vec::new();
    // The shell is the server party here: its frames travel down.
    for (d, m) in [
        (Dir::Down, &hello),
        (Dir::Up, &hello_res),
        (Dir::Down, &ping),
        (Dir::Down, &cancel),
        (Dir::Up, &cancel_res),
    ] {
        let body = serde_json::to_vec(m).expect("ser");
        recs.push(Record::inspected(&body, &inspect(&mut ins, d, &body)));
    }
    let header = Header::new(
        &contract::builtin("kernel").expect("kernel"),
        vec![route("k", "control", "core", "shell")],
    );
    write_recording(&path, header, recs).await;

    let sock = dir.path().join("core.sock");
    let listener = UnixListener::bind(&sock).expect("bind");
    let core = tokio::spawn(kernel_core(
        listener,
        vec![hello_res.clone(), cancel_res.clone()],
    ));
    let opts = ReplayOptions {
        deadline: Duration::from_secs(2),
        settle: Duration::from_millis(100),
        ..Default::default()
    };
    let report = tokio::time::timeout(
        LIMIT,
        replay(&path, &Endpoint::Unix(sock), Dir::Down, &opts),
    )
    .await
    .expect("in time")
    .expect("replay");
    let got = tokio::time::timeout(LIMIT, core)
        .await
        .expect("core ends")
        .expect("core ok");
    assert_eq!(got, [hello, ping, cancel], "the shell's frames, in order");
    assert_eq!(report.conn, 3);
    assert_eq!(report.sent, 3);
    assert_eq!(
        report.requests.len(),
        2,
        "ping is an event: sent, not awaited"
    );
    assert!(report.is_clean(), "{report}");

    // Without the built-in ignore list the fresh id and clock would differ: prove they were
    // really compared by asking to compare something that does differ.
    let listener = UnixListener::bind(dir.path().join("core2.sock")).expect("bind");
    let mut changed = hello_res.clone();
    changed["payload"]["session_id"] = json!("ffff0000");
    let core = tokio::spawn(kernel_core(listener, vec![changed, cancel_res.clone()]));
    let report = tokio::time::timeout(
        LIMIT,
        replay(
            &path,
            &Endpoint::Unix(dir.path().join("core2.sock")),
            Dir::Down,
            &opts,
        ),
    )
    .await
    .expect("in time")
    .expect("replay");
    tokio::time::timeout(LIMIT, core)
        .await
        .expect("core ends")
        .expect("core ok");
    match &report.requests[0].status {
        Status::Differs { diffs, .. } => {
            let paths: Vec<&str> = diffs.iter().map(|d| d.path.as_str()).collect();
            assert_eq!(
                paths,
                ["/payload/session_id"],
                "id and timestamp are ignored"
            );
        }
        other => panic!("expected differs, got {other:?}"),
    }
    // And `--ignore /payload/session_id` makes it clean again.
    let listener = UnixListener::bind(dir.path().join("core3.sock")).expect("bind");
    let mut changed = hello_res.clone();
    changed["payload"]["session_id"] = json!("ffff0000");
    let core = tokio::spawn(kernel_core(listener, vec![changed, cancel_res]));
    let opts = ReplayOptions {
        ignore: vec!["/payload/session_id".into()],
        ..opts
    };
    let report = tokio::time::timeout(
        LIMIT,
        replay(
            &path,
            &Endpoint::Unix(dir.path().join("core3.sock")),
            Dir::Down,
            &opts,
        ),
    )
    .await
    .expect("in time")
    .expect("replay");
    tokio::time::timeout(LIMIT, core)
        .await
        .expect("core ends")
        .expect("core ok");
    assert!(report.is_clean(), "{report}");
}
