//! Kernel byte credit enforced inline, through the real binary: data beyond the
//! receiver's grant waits in the proxy and goes out, in order, when credit
//! comes; a sender that ignores credit past one maximal frame gets the
//! contract's overrun answer (protocol.credit_exceeded and stream.close) while
//! other streams keep flowing.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

mod harness;
use harness::{DEADLINE, Proxy, ep, frame, read_frame, wait_for};

/// How long "nothing arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);

fn control(v: &Value) -> Vec<u8> {
    frame(serde_json::to_vec(v).expect("json"))
}

async fn read_control(s: &mut UnixStream) -> Value {
    serde_json::from_slice(&read_frame(s).await).expect("json")
}

/// A data frame: length (rest of frame), stream_id, seq, payload (§2).
fn data(stream: u32, seq: u64, payload: usize) -> Vec<u8> {
    let mut out = ((12 + payload) as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.resize(16 + payload, seq as u8);
    out
}

/// The next data frame's (stream, seq, payload length).
async fn read_data(s: &mut UnixStream) -> (u32, u64, usize) {
    let mut head = [0u8; 16];
    tokio::time::timeout(DEADLINE, s.read_exact(&mut head))
        .await
        .expect("a data frame in time")
        .expect("read");
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize - 12;
    let stream = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&head[8..16]);
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.expect("payload");
    (stream, u64::from_be_bytes(seq), len)
}

/// Nothing arrives on `s` for a while.
async fn quiet(s: &mut UnixStream, what: &str) {
    let mut b = [0u8; 1];
    if let Ok(r) = tokio::time::timeout(QUIET, s.read(&mut b)).await {
        panic!("{what}: expected nothing, got {r:?}");
    }
}

/// A kernel message from the contract's examples, with its id and stream changed.
fn example(method: &str, i: usize, id: &str, stream: u64) -> Value {
    let c = contract::builtin("kernel").expect("kernel");
    let mut m = c.methods[method].examples[i].message.clone();
    m["id"] = json!(id);
    if m.pointer("/payload/stream_id").is_some() {
        m["payload"]["stream_id"] = json!(stream);
    } else {
        m["stream_id"] = json!(stream);
    }
    m
}

fn limit(name: &str) -> u64 {
    let c = contract::builtin("kernel").expect("kernel");
    c.evaluated_limits().cap(name).expect("a size")
}

struct Session {
    _dir: tempfile::TempDir,
    proxy: Proxy,
    core_control: UnixStream,
    core_data: UnixStream,
    shell_control: UnixStream,
    shell_data: UnixStream,
}

/// A kernel session through an enforcing proxy: the core dials control, then data (K-1).
async fn session() -> Session {
    let mut s = paired("kernel").await;
    hello(&mut s).await;
    s
}

/// Two paired routes of `contract` through an enforcing proxy, on unix sockets: the client
/// dials the first channel, then the other (the kernel's core: control, then data).
async fn paired(contract: &str) -> Session {
    let dir = tempfile::tempdir().expect("tempdir");
    let (lc, ld) = (dir.path().join("control.p"), dir.path().join("data.p"));
    let (uc, ud) = (dir.path().join("control.s"), dir.path().join("data.s"));
    let shell_control = UnixListener::bind(&uc).expect("bind");
    let shell_data = UnixListener::bind(&ud).expect("bind");
    let proxy = harness::run(&[
        "--contract",
        contract,
        "--mode",
        "enforce",
        "--listen",
        &ep(&lc),
        "--upstream",
        &ep(&uc),
        "--pair-listen",
        &ep(&ld),
        "--pair-upstream",
        &ep(&ud),
    ]);
    wait_for(&lc).await;
    wait_for(&ld).await;
    let core_control = UnixStream::connect(&lc).await.expect("control");
    let (sc, _) = shell_control.accept().await.expect("accept control");
    let core_data = UnixStream::connect(&ld).await.expect("data");
    let (sd, _) = shell_data.accept().await.expect("accept data");
    Session {
        _dir: dir,
        proxy,
        core_control,
        core_data,
        shell_control: sc,
        shell_data: sd,
    }
}

/// The hello exchange that opens every session (the session machine refuses all else first).
async fn hello(s: &mut Session) {
    let c = contract::builtin("kernel").expect("kernel");
    let part = |i: usize| c.methods["hello"].examples[i].message.clone();
    let (hello, answer) = (part(0), part(1));
    s.shell_control
        .write_all(&control(&hello))
        .await
        .expect("hello");
    assert_eq!(read_control(&mut s.core_control).await, hello);
    s.core_control
        .write_all(&control(&answer))
        .await
        .expect("answer");
    assert_eq!(read_control(&mut s.shell_control).await, answer);
}

#[tokio::test]
async fn data_beyond_credit_waits_in_the_proxy_and_goes_out_in_order_when_granted() {
    let mut s = session().await;
    assert_eq!(
        limit("initialCreditBytes"),
        0,
        "the test assumes the seed's 0"
    );
    // Stream 12 (audio.output): the core sends, the shell receives and grants.
    let open = example("stream.open", 1, "c-1", 12);
    s.core_control
        .write_all(&control(&open))
        .await
        .expect("open");
    assert_eq!(read_control(&mut s.shell_control).await, open);
    // No credit yet: both frames stay in the proxy.
    let mut frames = data(12, 0, 100);
    frames.extend(data(12, 1, 100));
    s.core_data.write_all(&frames).await.expect("data");
    quiet(&mut s.shell_data, "before any credit").await;

    // 150 bytes of credit cover the first frame only (payload bytes count, not the header).
    let mut credit = example("stream.credit", 1, "s-1", 12);
    credit["payload"]["bytes"] = json!(150);
    s.shell_control
        .write_all(&control(&credit))
        .await
        .expect("credit");
    assert_eq!(read_control(&mut s.core_control).await, credit);
    assert_eq!(read_data(&mut s.shell_data).await, (12, 0, 100));
    quiet(&mut s.shell_data, "50 bytes short of the second frame").await;

    // A frame that arrives while one is held queues behind it.
    s.core_data.write_all(&data(12, 2, 10)).await.expect("data");
    let mut more = example("stream.credit", 1, "s-2", 12);
    more["payload"]["bytes"] = json!(60);
    s.shell_control
        .write_all(&control(&more))
        .await
        .expect("credit");
    assert_eq!(read_control(&mut s.core_control).await, more);
    assert_eq!(read_data(&mut s.shell_data).await, (12, 1, 100));
    assert_eq!(read_data(&mut s.shell_data).await, (12, 2, 10));

    let ev = s
        .proxy
        .events_until("the credit grant s-2", |e| {
            e["method"] == "stream.credit" && e["id"] == "s-2"
        })
        .await;
    let held: Vec<_> = ev
        .iter()
        .filter(|e| {
            e["action"]
                .as_str()
                .is_some_and(|a| a.starts_with("held: stream 12"))
        })
        .collect();
    assert_eq!(held.len(), 3, "three frames were held: {ev:#?}");
    let released: Vec<_> = ev
        .iter()
        .filter(|e| {
            e["action"]
                .as_str()
                .is_some_and(|a| a.contains("credit.release"))
        })
        .collect();
    assert_eq!(released.len(), 2, "{ev:#?}");
    for e in ev.iter().filter(|e| e["channel"] == "data") {
        assert_eq!(
            e["verdict"]["verdict"], "ok",
            "holding is not a violation: {e}"
        );
    }
}

#[tokio::test]
async fn a_sender_ignoring_credit_gets_the_overrun_answer_and_other_streams_keep_flowing() {
    let mut s = session().await;
    let max_payload = limit("dataPayloadMax") as usize;
    for (i, stream) in [(0, 12u64), (1, 14)] {
        let open = example("stream.open", 1, &format!("c-{i}"), stream);
        s.core_control
            .write_all(&control(&open))
            .await
            .expect("open");
        assert_eq!(read_control(&mut s.shell_control).await, open);
    }
    // Stream 14 has credit; stream 12 has none.
    let mut credit = example("stream.credit", 1, "s-1", 14);
    credit["payload"]["bytes"] = json!(1000);
    s.shell_control
        .write_all(&control(&credit))
        .await
        .expect("credit");
    assert_eq!(read_control(&mut s.core_control).await, credit);

    // One maximal frame fits what the proxy holds for a stream (K-36); the next overruns.
    let mut flood = data(12, 0, max_payload);
    flood.extend(data(12, 1, 1));
    flood.extend(data(14, 0, 500));
    s.core_data.write_all(&flood).await.expect("flood");

    // The core (the data's sender) hears what the shell would have said (K-10)…
    let error = read_control(&mut s.core_control).await;
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["payload"]["code"], "protocol.credit_exceeded");
    assert_eq!(error["stream_id"], 12);
    let close = read_control(&mut s.core_control).await;
    assert_eq!(
        (close["method"].as_str(), close["stream_id"].as_u64()),
        (Some("stream.close"), Some(12))
    );
    // …the shell hears the stream close, and stream 14 was never blocked.
    let close = read_control(&mut s.shell_control).await;
    assert_eq!(
        (close["method"].as_str(), close["stream_id"].as_u64()),
        (Some("stream.close"), Some(12))
    );
    assert_eq!(read_data(&mut s.shell_data).await, (14, 0, 500));
    quiet(&mut s.shell_data, "nothing of stream 12 was forwarded").await;

    // Both messages the proxy sent are valid kernel messages.
    let c = contract::builtin("kernel").expect("kernel");
    let wire = contract::wire::Wire::new(std::sync::Arc::new(c)).expect("wire");
    for (m, from) in [(&error, "shell"), (&close, "core")] {
        wire.decode("control", from, &serde_json::to_vec(m).expect("json"), None)
            .unwrap_or_else(|v| panic!("{m} is not valid: {v:?}"));
    }
    let ev = s
        .proxy
        .events_until("data on stream 14", |e| e["stream"] == json!([14, 0]))
        .await;
    let overrun = ev
        .iter()
        .find(|e| e["verdict"]["class"] == "credit.overrun")
        .unwrap_or_else(|| panic!("the overrun is reported: {ev:#?}"));
    assert_eq!(overrun["verdict"]["code"], "protocol.credit_exceeded");
    let action = overrun["action"].as_str().expect("action");
    assert!(action.contains("discarded"), "{action}");
    assert!(action.contains("1 held frame(s) dropped"), "{action}");

    // Data still in flight for the closed stream passes and is flagged (K-38): the
    // receiver discards it (K-3).
    s.core_data.write_all(&data(12, 2, 8)).await.expect("late");
    assert_eq!(read_data(&mut s.shell_data).await, (12, 2, 8));
    let ev = s
        .proxy
        .events_until("late data on stream 12", |e| e["stream"] == json!([12, 2]))
        .await;
    let late = ev.last().expect("event");
    assert_eq!(late["verdict"]["class"], "credit.unknown-key", "{late}");
}

/// Credit is data: tests/fixtures/pipes.json, a made-up protocol (NDJSON control notes, a
/// little-endian bulk channel), gets the same gate through the real binary with no Rust
/// of its own: bytes wait for the sink's grant, and an overrun past the contract's hold
/// bound is answered with the contract's own error and shut notes.
#[tokio::test]
async fn a_contract_file_of_its_own_gets_the_credit_gate() {
    let fixture = harness_root().join("proxy/tests/fixtures/pipes.json");
    let c = contract::load(&fixture).expect("pipes");
    let hold = c.evaluated_limits().cap("holdMax").expect("holdMax") as usize;
    let Session {
        _dir,
        mut proxy,
        core_control: mut ctl,
        core_data: mut bulk,
        shell_control: mut sctl,
        shell_data: mut sbulk,
    } = paired(fixture.to_str().expect("utf-8")).await;
    let note = |op: &str, n: &str, body: Value| json!({"k": "note", "op": op, "n": n, "ver": 1, "at": 1.0, "body": body});
    let open = note("pipe.open", "s-1", json!({"pipe": 3}));
    send_line(&mut ctl, &open).await;
    assert_eq!(read_line(&mut sctl).await, open);
    // Two frames with no credit yet: held. The grant covers the first alone.
    let payload = hold / 2 - 6;
    let bulk_frame = |seq: u32, len: usize| {
        let mut b = ((6 + len) as u32).to_le_bytes().to_vec();
        b.extend_from_slice(&3u16.to_le_bytes());
        b.extend_from_slice(&seq.to_le_bytes());
        b.resize(10 + len, seq as u8);
        b
    };
    bulk.write_all(&[bulk_frame(0, payload), bulk_frame(1, payload)].concat())
        .await
        .expect("bulk");
    quiet(&mut sbulk, "nothing before a grant").await;
    let grant = note("pipe.grant", "k-1", json!({"pipe": 3, "bytes": payload}));
    send_line(&mut sctl, &grant).await;
    assert_eq!(read_line(&mut ctl).await, grant);
    let mut first = vec![0u8; 10 + payload];
    tokio::time::timeout(DEADLINE, sbulk.read_exact(&mut first))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(first, bulk_frame(0, payload));
    quiet(&mut sbulk, "the second frame waits for more credit").await;
    // One byte past holdMax: the sender hears pipe.overrun and the shut, the sink the shut.
    bulk.write_all(&bulk_frame(2, payload + 1))
        .await
        .expect("bulk");
    let error = read_line(&mut ctl).await;
    assert_eq!(
        (&error["k"], &error["body"]["code"], &error["body"]["pipe"]),
        (&json!("err"), &json!("pipe.overrun"), &json!(3))
    );
    for side in [&mut ctl, &mut sctl] {
        let shut = read_line(side).await;
        assert_eq!(
            (&shut["op"], &shut["body"]),
            (&json!("pipe.shut"), &json!({"pipe": 3})),
            "{shut}"
        );
    }
    quiet(&mut sbulk, "nothing of the overrun pipe was forwarded").await;
    let ev = proxy
        .events_until("the overrun", |e| e["verdict"]["class"] == "credit.overrun")
        .await;
    let overrun = ev.last().expect("event");
    assert_eq!(overrun["verdict"]["code"], "pipe.overrun");
    assert!(
        overrun["action"]
            .as_str()
            .is_some_and(|a| a.contains("1 held frame(s) dropped")),
        "{overrun}"
    );
}

fn harness_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn send_line(s: &mut UnixStream, v: &Value) {
    s.write_all(format!("{v}\n").as_bytes())
        .await
        .expect("write");
}

/// One NDJSON line, read a byte at a time so nothing after it is taken.
async fn read_line(s: &mut UnixStream) -> Value {
    let mut line = Vec::new();
    loop {
        let b = tokio::time::timeout(DEADLINE, s.read_u8())
            .await
            .expect("a line in time");
        match b.expect("read") {
            b'\n' => return serde_json::from_slice(&line).expect("json line"),
            b => line.push(b),
        }
    }
}
