//! `contract-proxy run --mode enforce` breaking one contract rule at a time over
//! real sockets: each test drives both peers itself, breaks a rule on purpose,
//! and asserts what the peers see (the contract's reply, close or silence) and
//! what the live view says (verdict class, code, action). Every limit comes
//! from the contract, never a literal.
//!
//! rukh (unix sockets, length-prefixed JSON), toolchannel (ws:// listen → ws://
//! upstream, a tokio-tungstenite host and worker) and xsession (unix sockets,
//! NDJSON, a TOML config). The kernel's credit rules are tested elsewhere.
//!
//! The tests of long contract deadlines (20 s, 30 s) run the proxy with the
//! contract's durations scaled by [`SCALE`] (CONTRACT_TIME_SCALE), and scale what they
//! expect the same way: the contract stays as it is.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use contract::Contract;
use contract::model::{CodeKind, Framing, Part};
use contract::wire::json::{depth, items};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

mod harness;
use harness::{DEADLINE, Proxy, ep, frame, read_frame, read_json, send_json as send, wait_for};

fn class(e: &Value) -> &str {
    e["verdict"]["class"].as_str().unwrap_or("")
}

// ---------------------------------------------------------------------------
// Contract look-ups: limits in base units, codes by name, examples.

/// Limit `name` in base units (bytes, seconds, counts).
fn limit(c: &Contract, name: &str) -> f64 {
    c.evaluated_limits()
        .number(name)
        .unwrap_or_else(|e| panic!("{}: {e}", c.name))
}

fn limit_usize(c: &Contract, name: &str) -> usize {
    limit(c, name) as usize
}

/// The code of limit `name`'s machine action.
fn limit_code(c: &Contract, name: &str) -> Value {
    c.evaluated_limits()
        .action_code(name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} has an action code"))
}

/// The error catalog code named `name`.
fn error_code(c: &Contract, name: &str) -> Value {
    c.error_code(name)
        .cloned()
        .unwrap_or_else(|e| panic!("{}: {e}", c.name))
}

/// The close code named `name`.
fn close_code(c: &Contract, name: &str) -> u16 {
    c.codes
        .values()
        .filter(|t| t.kind == CodeKind::CloseCode)
        .flat_map(|t| t.values.iter())
        .find(|v| v.name.as_deref() == Some(name))
        .and_then(|v| v.value.as_u64())
        .and_then(|v| u16::try_from(v).ok())
        .unwrap_or_else(|| panic!("no close code {name}"))
}

/// The `n`th example of `method` with part `part`.
fn example(c: &Contract, method: &str, part: Part, n: usize) -> Value {
    c.methods[method]
        .examples
        .iter()
        .filter(|e| e.part == part)
        .nth(n)
        .unwrap_or_else(|| panic!("{method} has example {part:?} #{n}"))
        .message
        .clone()
}

// ---------------------------------------------------------------------------
// rukh: length-prefixed JSON between a core and its extension.

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("json")
}

/// Read to the end within the deadline; what arrived before it. The end must be a clean
/// EOF: a reset would mean the proxy let go with our bytes unread, and a reset can
/// destroy the last message the contract says we must see.
async fn rest(s: &mut UnixStream) -> Vec<u8> {
    let mut got = Vec::new();
    if let Err(e) = timeout(DEADLINE, s.read_to_end(&mut got))
        .await
        .expect("the connection ends in time")
    {
        panic!("the proxy must end the connection with EOF, not: {e}");
    }
    got
}

/// One proxy run relaying rukh in enforce mode, core → extension.
struct Rukh {
    c: Contract,
    p: Proxy,
    listen: PathBuf,
    ext: UnixListener,
    _dir: tempfile::TempDir,
}

async fn rukh() -> Rukh {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("p.sock");
    let upstream = dir.path().join("ext.sock");
    let ext = UnixListener::bind(&upstream).expect("bind");
    let p = harness::run(&[
        "--contract",
        "rukh",
        "--client",
        "core",
        "--mode",
        "enforce",
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    Rukh {
        c: contract::builtin("rukh").expect("rukh"),
        p,
        listen,
        ext,
        _dir: dir,
    }
}

impl Rukh {
    /// A fresh connection: (core, extension), nothing sent yet.
    async fn connect(&self) -> (UnixStream, UnixStream) {
        let core = UnixStream::connect(&self.listen).await.expect("connect");
        let (ext, _) = timeout(DEADLINE, self.ext.accept())
            .await
            .expect("the proxy dials the extension in time")
            .expect("accept");
        (core, ext)
    }

    /// A fresh connection past a valid handshake (the contract's own initialize, id c:1).
    async fn session(&mut self) -> (UnixStream, UnixStream) {
        let (mut core, mut ext) = self.connect().await;
        let init = example(&self.c, "rukh.initialize", Part::Call, 0);
        let result = example(&self.c, "rukh.initialize", Part::Result, 0);
        send(&mut core, &init).await;
        assert_eq!(read_json(&mut ext).await, init);
        send(&mut ext, &result).await;
        assert_eq!(read_json(&mut core).await, result);
        let ev = self
            .p
            .until("the initialize result", |e| {
                e["kind"] == "response" && e["method"] == "rukh.initialize"
            })
            .await;
        assert_eq!(ev["verdict"]["verdict"], "ok", "{ev}");
        (core, ext)
    }

    fn oversize_code(&self) -> Value {
        self.c
            .violations
            .oversize
            .as_ref()
            .and_then(|a| a.code.clone())
            .expect("rukh's oversize code")
    }
}

/// A frame past framePayloadMax (by its length prefix) ends the invocation
/// before the payload is read: nothing reaches the extension, no reply.
#[tokio::test]
async fn rukh_a_frame_over_the_frame_cap_drops_the_connection() {
    let mut r = rukh().await;
    let (mut core, mut ext) = r.session().await;
    let max = limit(&r.c, "framePayloadMax") as u32;
    let mut evil = (max + 1).to_be_bytes().to_vec();
    evil.extend_from_slice(b"{\"jsonrpc\":\"2.0\"");
    core.write_all(&evil).await.expect("send");
    assert!(
        rest(&mut core).await.is_empty(),
        "no reply, the core sees EOF"
    );
    assert!(rest(&mut ext).await.is_empty(), "nothing was forwarded");
    let ev =
        r.p.until("the oversize frame", |e| class(e) == "oversize")
            .await;
    assert_eq!(ev["verdict"]["code"], r.oversize_code(), "{ev}");
    assert_eq!(ev["action"], "dropped the connection", "{ev}");
    assert_eq!(ev["dir"], "up", "{ev}");
}

/// rukh.initialize is capped by lifecyclePayloadMax: at the cap it passes, one
/// byte more ends the invocation unforwarded.
#[tokio::test]
async fn rukh_an_initialize_over_the_lifecycle_cap_drops_the_connection() {
    let mut r = rukh().await;
    let cap = limit_usize(&r.c, "lifecyclePayloadMax");
    let sized = |n: usize| {
        let mut init = example(&r.c, "rukh.initialize", Part::Call, 0);
        init["params"]["command"] = json!("");
        let base = bytes(&init).len();
        init["params"]["command"] = json!("x".repeat(n - base));
        let b = bytes(&init);
        assert_eq!(b.len(), n);
        b
    };
    // At the cap: forwarded as it is.
    let (mut core, mut ext) = r.connect().await;
    let at_cap = sized(cap);
    core.write_all(&frame(&at_cap)).await.expect("send");
    assert_eq!(read_frame(&mut ext).await, at_cap);
    let ev =
        r.p.until("the initialize at the cap", |e| e["size"] == cap)
            .await;
    assert_eq!(ev["verdict"]["verdict"], "ok", "{ev}");
    drop((core, ext));

    let (mut core, mut ext) = r.connect().await;
    core.write_all(&frame(sized(cap + 1))).await.expect("send");
    assert!(
        rest(&mut core).await.is_empty(),
        "no reply, the core sees EOF"
    );
    assert!(rest(&mut ext).await.is_empty(), "nothing was forwarded");
    let ev =
        r.p.until("the oversize initialize", |e| class(e) == "oversize")
            .await;
    assert_eq!(ev["verdict"]["code"], r.oversize_code(), "{ev}");
    assert_eq!(ev["action"], "dropped the connection", "{ev}");
    let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("rukh.initialize") && reason.contains(&(cap + 1).to_string()),
        "{ev}"
    );
}

/// A rukh.log record over lifecyclePayloadMax is dropped and counted
/// (overMaxPayload: ignore); the session goes on and the next frame passes.
#[tokio::test]
async fn rukh_a_log_over_the_lifecycle_cap_is_dropped_and_the_session_goes_on() {
    let mut r = rukh().await;
    let (mut core, mut ext) = r.session().await;
    let cap = limit_usize(&r.c, "lifecyclePayloadMax");
    let log = |n: usize| {
        let mut l = example(&r.c, "rukh.log", Part::Call, 0);
        l["params"]["message"] = json!("");
        let base = bytes(&l).len();
        l["params"]["message"] = json!("y".repeat(n - base));
        assert_eq!(bytes(&l).len(), n);
        l
    };
    let (at_cap, over) = (log(cap), log(cap + 1));
    let mut call = example(&r.c, "rukh.call", Part::Call, 0);
    call["id"] = json!("e:1");
    send(&mut ext, &at_cap).await;
    send(&mut ext, &over).await;
    send(&mut ext, &call).await;
    assert_eq!(
        read_json(&mut core).await,
        at_cap,
        "a log at the cap passes"
    );
    assert_eq!(
        read_json(&mut core).await,
        call,
        "the oversize log was dropped, the next frame relayed"
    );
    let ev =
        r.p.events_until("the rukh.call", |e| e["method"] == "rukh.call")
            .await;
    let dropped: Vec<_> = ev.iter().filter(|e| class(e) == "oversize").collect();
    assert_eq!(dropped.len(), 1, "{ev:?}");
    assert_eq!(dropped[0]["action"], "discarded", "{}", dropped[0]);
    assert_eq!(dropped[0]["size"], cap + 1, "{}", dropped[0]);
    assert!(
        dropped[0]["verdict"]["reason"]
            .as_str()
            .is_some_and(|s| s.contains("rukh.log")),
        "{}",
        dropped[0]
    );
    assert_eq!(ev.last().expect("call")["verdict"]["verdict"], "ok");
    // The session is alive both ways.
    let answer = json!({"jsonrpc":"2.0","id":"e:1","result":{"output":{"text":"ok"}}});
    send(&mut core, &answer).await;
    assert_eq!(read_json(&mut ext).await, answer);
}

/// JSON nesting past jsonDepthMax and members/elements past jsonItemsMax are
/// parse errors (-32700 per the contract) that end the invocation; at the
/// limits the frame passes.
#[tokio::test]
async fn rukh_json_depth_and_items_over_their_limits_end_the_invocation() {
    let mut r = rukh().await;
    let depth_max = limit_usize(&r.c, "jsonDepthMax");
    let items_max = limit_usize(&r.c, "jsonItemsMax");
    let parse_code =
        r.c.violations
            .parse
            .as_ref()
            .and_then(|a| a.code.clone())
            .expect("parse code");
    let invoke = |inputs: Value| {
        let mut v = example(&r.c, "rukh.invoke", Part::Call, 0);
        v["params"]["inputs"] = inputs;
        v
    };
    let deep = |d: usize| {
        let mut k = 0;
        loop {
            let mut nest = json!(0);
            for _ in 0..k {
                nest = json!([nest]);
            }
            let v = invoke(json!({ "path": ".", "deep": nest }));
            if depth(&v) == d {
                return v;
            }
            assert!(depth(&v) < d, "cannot build depth {d}");
            k += 1;
        }
    };
    let many = |n: usize| {
        let base = items(&invoke(json!({ "list": [] })));
        let v = invoke(json!({ "list": vec![0; n - base] }));
        assert_eq!(items(&v), n);
        v
    };
    for (what, at, over) in [
        ("depth", deep(depth_max), deep(depth_max + 1)),
        ("items", many(items_max), many(items_max + 1)),
    ] {
        let (mut core, mut ext) = r.session().await;
        let mut at = at;
        at["id"] = json!("c:2");
        send(&mut core, &at).await;
        assert_eq!(read_json(&mut ext).await, at, "{what} at the limit passes");
        drop((core, ext));

        let (mut core, mut ext) = r.session().await;
        let mut over = over;
        over["id"] = json!("c:2");
        send(&mut core, &over).await;
        assert!(rest(&mut core).await.is_empty(), "{what}: no reply, EOF");
        assert!(rest(&mut ext).await.is_empty(), "{what}: nothing forwarded");
        let ev = r.p.until(what, |e| class(e) == "parse").await;
        assert_eq!(ev["verdict"]["code"], parse_code, "{ev}");
        assert_eq!(ev["action"], "dropped the connection", "{ev}");
    }
}

/// The extension may have pendingRequestsMax rukh.call requests outstanding;
/// the next one is answered limit_exceeded (with data.limit) without reaching
/// the core, and a freed slot admits a new one.
#[tokio::test]
async fn rukh_pending_requests_over_the_limit_are_refused_with_limit_exceeded() {
    let mut r = rukh().await;
    let (mut core, mut ext) = r.session().await;
    let max = limit_usize(&r.c, "pendingRequestsMax");
    let code = error_code(&r.c, "limit_exceeded");
    let call = |n: usize| {
        let mut v = example(&r.c, "rukh.call", Part::Call, 0);
        v["id"] = json!(format!("e:{n}"));
        v
    };
    let mut burst = Vec::new();
    for n in 1..=max + 1 {
        burst.extend(frame(bytes(&call(n))));
    }
    ext.write_all(&burst).await.expect("send");
    for n in 1..=max {
        assert_eq!(read_json(&mut core).await, call(n));
    }
    let refusal = read_json(&mut ext).await;
    assert_eq!(refusal["id"], json!(format!("e:{}", max + 1)), "{refusal}");
    assert_eq!(refusal["error"]["code"], code, "{refusal}");
    // rukh's ErrorData is closed: the entry is named in the detail.
    let detail = refusal["error"]["data"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(detail.contains("/limits/pendingRequestsMax"), "{refusal}");
    assert!(refusal["error"]["data"].get("entry").is_none(), "{refusal}");
    // One answer frees one slot.
    let answer = example(&r.c, "rukh.call", Part::Result, 0);
    send(&mut core, &answer).await;
    assert_eq!(read_json(&mut ext).await, answer);
    send(&mut ext, &call(max + 2)).await;
    assert_eq!(
        read_json(&mut core).await,
        call(max + 2),
        "the excess was not forwarded; the next request is"
    );
    let ev =
        r.p.until("the refusal", |e| class(e) == "limit.pending")
            .await;
    assert_eq!(ev["id"], json!(format!("e:{}", max + 1)), "{ev}");
    assert_eq!(ev["verdict"]["code"], code, "{ev}");
    assert_eq!(
        ev["action"],
        format!("limit.pending: refused, replied {code}"),
        "{ev}"
    );
}

/// Log intake over logIntakeRecordsRate: the excess records are dropped and
/// counted (each one an event), never an error; the relay goes on.
#[tokio::test]
async fn rukh_log_intake_over_the_record_rate_drops_the_excess() {
    let mut r = rukh().await;
    let (mut core, mut ext) = r.session().await;
    let lim =
        r.c.evaluated_limits()
            .rate("logIntakeRecordsRate")
            .expect("a rate");
    let burst = lim.burst as usize;
    let per_sec = lim.amount / lim.per.as_secs_f64();
    let sent = burst + 50;
    let mut call = example(&r.c, "rukh.call", Part::Call, 0);
    call["id"] = json!("e:1");
    let mut all = Vec::new();
    for n in 0..sent {
        let mut l = example(&r.c, "rukh.log", Part::Call, 0);
        l["params"]["fields"] = json!({ "n": n });
        all.extend(frame(bytes(&l)));
    }
    all.extend(frame(bytes(&call)));
    let t0 = Instant::now();
    ext.write_all(&all).await.expect("send");
    let mut delivered = Vec::new();
    loop {
        let m = read_json(&mut core).await;
        if m["method"] == "rukh.call" {
            assert_eq!(m, call);
            break;
        }
        delivered.push(m["params"]["fields"]["n"].as_u64().expect("n"));
    }
    let took = t0.elapsed().as_secs_f64();
    let allowed = burst + (per_sec * took).ceil() as usize + 1;
    assert!(
        delivered.len() >= burst && delivered.len() <= allowed && delivered.len() < sent,
        "{} of {sent} delivered in {took:.3} s (burst {burst}, {per_sec}/s)",
        delivered.len()
    );
    let first: Vec<u64> = (0..burst as u64).collect();
    assert_eq!(&delivered[..burst], &first[..], "the burst passes in order");
    let ev =
        r.p.events_until("the rukh.call", |e| e["method"] == "rukh.call")
            .await;
    let dropped: Vec<_> = ev.iter().filter(|e| class(e) == "limit.rate").collect();
    assert_eq!(
        dropped.len(),
        sent - delivered.len(),
        "every drop is counted"
    );
    for d in dropped {
        assert_eq!(d["action"], "limit.rate: discarded", "{d}");
        assert!(
            d["verdict"]["reason"]
                .as_str()
                .is_some_and(|s| s.contains("logIntakeRecordsRate")),
            "{d}"
        );
    }
}

/// A frame that stays incomplete incompleteFrameSeconds after its first byte
/// ends the invocation; trickling bytes does not reset the clock.
#[tokio::test]
async fn rukh_a_frame_left_incomplete_drops_the_connection() {
    let mut r = rukh().await;
    let (mut core, mut ext) = r.session().await;
    let after = Duration::from_secs_f64(limit(&r.c, "incompleteFrameSeconds"));
    let code = limit_code(&r.c, "incompleteFrameSeconds");
    let mut start = 100u32.to_be_bytes().to_vec();
    start.extend_from_slice(b"{\"jsonrpc\"");
    let t0 = Instant::now();
    let (mut rd, mut wr) = core.split();
    rd_write(&mut wr, &start).await;
    let trickle = async {
        // Progress, never a whole frame: a byte every 500 ms.
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if wr.write_all(b" ").await.is_err() {
                return;
            }
        }
    };
    let mut got = Vec::new();
    let ended = async {
        timeout(after + DEADLINE, rd.read_to_end(&mut got))
            .await
            .expect("the connection ends in time")
            .expect("read");
    };
    tokio::select! {
        () = ended => {}
        () = trickle => panic!("the trickle stopped before the connection ended"),
    }
    let took = t0.elapsed();
    assert!(got.is_empty(), "no reply");
    assert!(
        took >= after && took < after + Duration::from_secs(2),
        "dropped after {took:?}, the deadline is {after:?} from the first byte"
    );
    assert!(rest(&mut ext).await.is_empty(), "nothing was forwarded");
    let ev =
        r.p.until("the incomplete frame", |e| class(e) == "frame.incomplete")
            .await;
    assert_eq!(ev["verdict"]["code"], code, "{ev}");
    assert_eq!(ev["method"], "(incomplete frame)", "{ev}");
    assert_eq!(
        ev["action"], "frame.incomplete: refused, dropped the connection",
        "{ev}"
    );
}

async fn rd_write(wr: &mut tokio::net::unix::WriteHalf<'_>, b: &[u8]) {
    timeout(DEADLINE, wr.write_all(b))
        .await
        .expect("written in time")
        .expect("write");
}

/// Responses that come too late are discarded and counted: one to a core
/// request whose wait an accepted rukh.cancel ended, and a second answer to an
/// id no longer pending. Neither reaches the core; the session goes on.
#[tokio::test]
async fn rukh_late_responses_are_discarded_and_counted() {
    let mut r = rukh().await;
    let (mut core, mut ext) = r.session().await;
    let mut ui = example(&r.c, "rukh.ui.event", Part::Call, 0);
    ui["id"] = json!("c:2");
    let mut ui_ack = example(&r.c, "rukh.ui.event", Part::Result, 0);
    ui_ack["id"] = json!("c:2");
    let mut cancel = example(&r.c, "rukh.cancel", Part::Call, 0);
    cancel["id"] = json!("c:3");
    let mut cancel_ack = example(&r.c, "rukh.cancel", Part::Result, 0);
    cancel_ack["id"] = json!("c:3");
    let log = example(&r.c, "rukh.log", Part::Call, 0);

    send(&mut core, &ui).await;
    assert_eq!(read_json(&mut ext).await, ui);
    send(&mut core, &cancel).await;
    assert_eq!(read_json(&mut ext).await, cancel);
    // After the cancel: the UI acknowledgement is late, the cancel's is not.
    send(&mut ext, &ui_ack).await;
    send(&mut ext, &cancel_ack).await;
    assert_eq!(
        read_json(&mut core).await,
        cancel_ack,
        "the late acknowledgement was discarded"
    );
    // A second answer to c:3, which is no longer pending; then a log record.
    send(&mut ext, &cancel_ack).await;
    send(&mut ext, &log).await;
    assert_eq!(
        read_json(&mut core).await,
        log,
        "the repeated answer was discarded, the session goes on"
    );
    let ev =
        r.p.events_until("the log record", |e| e["method"] == "rukh.log")
            .await;
    let late: Vec<_> = ev
        .iter()
        .filter(|e| class(e) == "rukh.response.late")
        .collect();
    assert_eq!(late.len(), 2, "{ev:?}");
    assert_eq!(late[0]["id"], "c:2", "{}", late[0]);
    assert_eq!(late[1]["id"], "c:3", "{}", late[1]);
    for l in &late {
        assert_eq!(l["action"], "rukh.response.late: discarded", "{l}");
    }
    assert!(
        late[0]["verdict"]["reason"]
            .as_str()
            .is_some_and(|s| s.contains("cancel")),
        "{}",
        late[0]
    );
    assert!(
        late[1]["verdict"]["reason"]
            .as_str()
            .is_some_and(|s| s.contains("no longer pending")),
        "{}",
        late[1]
    );
}

// ---------------------------------------------------------------------------
// toolchannel: the worker dials the proxy (ws://), the proxy dials the host.

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
type HostWs = WebSocketStream<TcpStream>;

/// The worker's bearer token for these tests.
const TOKEN: &str = "Bearer t0k-enforce";

fn tool() -> Contract {
    contract::builtin("toolchannel").expect("toolchannel")
}

/// The subprotocol the contract's ws channel speaks.
fn subprotocol(c: &Contract) -> String {
    match &c.channels["ws"].framing {
        Framing::WebsocketText { subprotocols, .. } => {
            subprotocols.first().cloned().expect("a subprotocol")
        }
        other => panic!("ws framing: {other:?}"),
    }
}

/// A tiny worker-gateway: accepts upgrades that carry the worker's bearer
/// token and the contract's subprotocol (401 / 426 otherwise, as the contract
/// says) and hands each socket to the test.
struct Host {
    addr: String,
    conns: mpsc::UnboundedReceiver<HostWs>,
}

// tungstenite's handshake callback type fixes the (large) error type.
#[allow(clippy::result_large_err)]
async fn host(proto: String) -> Host {
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = tcp.local_addr().expect("addr").to_string();
    let (tx, conns) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = tcp.accept().await else {
                return;
            };
            let proto = proto.clone();
            let callback =
                move |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
                    let h = req.headers();
                    let refuse = |status: u16| {
                        let mut r = ErrorResponse::new(None);
                        *r.status_mut() = status.try_into().expect("status");
                        r
                    };
                    if h.get("Authorization").and_then(|v| v.to_str().ok()) != Some(TOKEN) {
                        return Err(refuse(401));
                    }
                    let offered = h
                        .get("Sec-WebSocket-Protocol")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    if !offered.split(',').any(|p| p.trim() == proto) {
                        return Err(refuse(426));
                    }
                    resp.headers_mut()
                        .insert("Sec-WebSocket-Protocol", proto.parse().expect("header"));
                    Ok(resp)
                };
            if let Ok(Ok(ws)) =
                timeout(DEADLINE, tokio_tungstenite::accept_hdr_async(s, callback)).await
                && tx.send(ws).is_err()
            {
                return;
            }
        }
    });
    Host { addr, conns }
}

impl Host {
    async fn next(&mut self) -> HostWs {
        timeout(DEADLINE, self.conns.recv())
            .await
            .expect("the proxy dials the host in time")
            .expect("host alive")
    }
}

/// A toolchannel proxy in enforce mode in front of `host`.
fn tool_proxy(host: &Host) -> (Proxy, String) {
    tool_proxy_scaled(host, 1.0)
}

/// What the long-deadline tests scale the contract's durations by.
const SCALE: f64 = 0.1;

fn tool_proxy_scaled(host: &Host, scale: f64) -> (Proxy, String) {
    harness::toolchannel(&format!("ws://{}/worker", host.addr), "enforce", scale)
}

/// A worker dialling `url` with the token and subprotocol, and the host's end of it.
async fn dial(url: &str, proto: &str, host: &mut Host) -> (Ws, HostWs) {
    let mut req = url.into_client_request().expect("request");
    req.headers_mut()
        .insert("Authorization", TOKEN.parse().expect("header"));
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", proto.parse().expect("header"));
    let (ws, resp) = timeout(DEADLINE, tokio_tungstenite::connect_async(req))
        .await
        .expect("101 in time")
        .expect("101");
    assert_eq!(
        resp.headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|v| v.to_str().ok()),
        Some(proto),
        "the host's subprotocol reaches the worker"
    );
    let h = host.next().await;
    (ws, h)
}

async fn ws_send<S>(ws: &mut WebSocketStream<S>, v: &Value)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    timeout(DEADLINE, ws.send(Message::text(v.to_string())))
        .await
        .expect("sent in time")
        .expect("send");
}

async fn ws_send_raw<S>(ws: &mut WebSocketStream<S>, text: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    timeout(DEADLINE, ws.send(Message::text(text)))
        .await
        .expect("sent in time")
        .expect("send");
}

/// What a socket receives next: a JSON text message, or how it ended.
#[derive(Debug, PartialEq)]
enum Got {
    Json(Value),
    Closed(Option<u16>),
}

async fn ws_next<S>(ws: &mut WebSocketStream<S>) -> Got
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    timeout(DEADLINE, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    return Got::Json(serde_json::from_str(t.as_str()).expect("json text"));
                }
                Some(Ok(Message::Close(f))) => return Got::Closed(f.map(|f| u16::from(f.code))),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Got::Closed(None),
            }
        }
    })
    .await
    .expect("a message or close in time")
}

async fn ws_json<S>(ws: &mut WebSocketStream<S>) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match ws_next(ws).await {
        Got::Json(v) => v,
        other => panic!("expected a message, got {other:?}"),
    }
}

/// Ten bad frames (badFramesMax) from the worker: each answered with its
/// JSON-RPC error (id null), the tenth also closes the connection with the
/// limit's code on both sides; the host never sees any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolchannel_ten_bad_frames_close_the_connection_with_4006() {
    let c = tool();
    let proto = subprotocol(&c);
    let mut h = host(proto.clone()).await;
    let (mut p, url) = tool_proxy(&h);
    let (mut worker, mut host_ws) = dial(&url, &proto, &mut h).await;
    let max = limit_usize(&c, "badFramesMax");
    let close = limit_code(&c, "badFramesMax");
    let code_of = |class: Option<&contract::model::Action>| class.and_then(|a| a.code.clone());
    let parse = code_of(c.violations.parse.as_ref()).expect("parse code");
    let invalid = code_of(c.violations.invalid.as_ref()).expect("invalid code");
    for n in 1..=max {
        // Alternate two kinds that count: text that is not JSON, and a binary message.
        let code = if n % 2 == 1 {
            ws_send_raw(&mut worker, "{nope").await;
            &parse
        } else {
            timeout(DEADLINE, worker.send(Message::binary(b"\x00bin".to_vec())))
                .await
                .expect("sent in time")
                .expect("send");
            &invalid
        };
        let reply = ws_json(&mut worker).await;
        assert_eq!(reply["id"], Value::Null, "{reply}");
        assert_eq!(&reply["error"]["code"], code, "frame {n}: {reply}");
    }
    assert_eq!(
        ws_next(&mut worker).await,
        Got::Closed(close.as_u64().map(|c| c as u16)),
        "the worker's socket closes with badFramesMax's code"
    );
    assert_eq!(
        ws_next(&mut host_ws).await,
        Got::Closed(close.as_u64().map(|c| c as u16)),
        "no bad frame reached the host; its socket closes the same way"
    );
    let ev = p
        .events_until("the tenth bad frame", |e| {
            e["action"]
                .as_str()
                .is_some_and(|a| a.contains(&format!("badFramesMax {max}/{max}")))
        })
        .await;
    let bad: Vec<_> = ev.iter().filter(|e| e["dir"] == "up").collect();
    assert_eq!(bad.len(), max, "{ev:?}");
    let last = bad[max - 1];
    assert_eq!(class(last), "invalid", "{last}");
    assert_eq!(
        last["action"],
        format!("replied {invalid}, badFramesMax {max}/{max}, closed {close}"),
        "{last}"
    );
    assert_eq!(
        bad[0]["action"],
        format!("replied {parse}, badFramesMax 1/{max}"),
        "{}",
        bad[0]
    );
}

/// Valid JSON that is not an object (a batch array, a scalar) is an invalid
/// message: -32600 per the contract's `invalid` violation, not a parse error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolchannel_json_that_is_not_an_object_is_an_invalid_request() {
    let c = tool();
    let batch = json!([example(&c, "tools/list", Part::Call, 0)]).to_string();
    invalid_frames_get_32600(&c, &[batch.as_str(), "[]", "42"]).await;
}

/// A JSON object that is not a JSON-RPC 2.0 message is answered -32600 with
/// id null when unreadable, the id when it has one (contract: "gets -32600
/// (id null if unreadable) and counts as a bad frame").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolchannel_an_object_that_is_not_jsonrpc_is_answered_32600() {
    let c = tool();
    invalid_frames_get_32600(
        &c,
        &[
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"1.0","id":7,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","result":{}}"#,
        ],
    )
    .await;
}

/// Send each text from the worker: each is answered -32600 (id null, or the
/// frame's own id) and flagged `invalid`; the host sees none of them.
async fn invalid_frames_get_32600(c: &Contract, texts: &[&str]) {
    let proto = subprotocol(c);
    let mut h = host(proto.clone()).await;
    let (mut p, url) = tool_proxy(&h);
    let (mut worker, mut host_ws) = dial(&url, &proto, &mut h).await;
    let invalid = c
        .violations
        .invalid
        .as_ref()
        .and_then(|a| a.code.clone())
        .expect("invalid code");
    for text in texts {
        ws_send_raw(&mut worker, text).await;
        let ev = p.until(text, |e| e["dir"] == "up").await;
        assert_eq!(class(&ev), "invalid", "{text}: {ev}");
        let reply = ws_json(&mut worker).await;
        let id = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .unwrap_or(Value::Null);
        assert_eq!(reply["id"], id, "{text}: {reply}");
        assert_eq!(reply["error"]["code"], invalid, "{text}: {reply}");
    }
    let result = example(c, "initialize", Part::Result, 0);
    ws_send(&mut worker, &result).await;
    assert_eq!(ws_json(&mut host_ws).await, result, "none reached the host");
}

/// The worker may not ask the host for sampling, elicitation or roots: the
/// proxy answers with the contract's own examples' codes and messages (-32003
/// SAMPLING_DISABLED, -32004 CAPABILITY_NOT_NEGOTIATED) and the host never
/// sees the requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolchannel_sampling_elicitation_and_roots_are_refused_before_dispatch() {
    let c = tool();
    let proto = subprotocol(&c);
    let mut h = host(proto.clone()).await;
    let (mut p, url) = tool_proxy(&h);
    let (mut worker, mut host_ws) = dial(&url, &proto, &mut h).await;
    let init = example(&c, "initialize", Part::Call, 0);
    ws_send(&mut host_ws, &init).await;
    assert_eq!(ws_json(&mut worker).await, init);
    // The host declared no capability (`parties.host.declares`), and each method's only
    // answer is its one error: the engine refuses before the toolchannel hook is asked.
    for (method, rule) in [
        ("sampling/createMessage", "capability.undeclared"),
        ("elicitation/create", "capability.undeclared"),
        ("roots/list", "capability.undeclared"),
    ] {
        let ask = example(&c, method, Part::Call, 0);
        let want = example(&c, method, Part::Error, 0);
        ws_send(&mut worker, &ask).await;
        let got = ws_json(&mut worker).await;
        assert_eq!(got["id"], want["id"], "{method}: {got}");
        assert_eq!(
            got["error"]["code"], want["error"]["code"],
            "{method}: {got}"
        );
        assert_eq!(got["error"]["message"], want["error"]["message"], "{got}");
        let ev = p.until(method, |e| e["method"] == method).await;
        assert_eq!(class(&ev), rule, "{ev}");
        assert_eq!(ev["verdict"]["code"], want["error"]["code"], "{ev}");
        assert_eq!(
            ev["action"],
            format!("{rule}: refused, replied {}", want["error"]["code"]),
            "{ev}"
        );
    }
    let result = example(&c, "initialize", Part::Result, 0);
    ws_send(&mut worker, &result).await;
    assert_eq!(
        ws_json(&mut host_ws).await,
        result,
        "the first thing the host sees is the initialize result"
    );
}

/// One live socket per session. A redial of the same process (same
/// instanceId, greater attempt) supersedes the old socket, which is closed
/// 4009 on both sides while the new one serves; a redial with the same or a
/// lower attempt, or another instanceId, is refused 4002 and its initialize
/// result never reaches the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolchannel_redials_supersede_or_are_refused() {
    let c = tool();
    let proto = subprotocol(&c);
    let superseded = close_code(&c, "SUPERSEDED");
    let rejected = close_code(&c, "SESSION_REJECTED");
    let mut h = host(proto.clone()).await;
    let (mut p, url) = tool_proxy(&h);
    let init = example(&c, "initialize", Part::Call, 0);
    let first = example(&c, "initialize", Part::Result, 0);
    let redial = example(&c, "initialize", Part::Result, 1);
    let attempt = |v: &Value| {
        v["result"]["_meta"]["agentfy"]["attempt"]
            .as_u64()
            .expect("attempt")
    };
    assert!(
        attempt(&redial) > attempt(&first)
            && redial["result"]["_meta"]["agentfy"]["instanceId"]
                == first["result"]["_meta"]["agentfy"]["instanceId"],
        "the contract's examples are a redial of one process"
    );
    // The worker's handshake on a fresh socket: initialize in, `result` out.
    async fn handshake(worker: &mut Ws, host_ws: &mut HostWs, init: &Value, result: &Value) {
        ws_send(host_ws, init).await;
        assert_eq!(ws_json(worker).await, *init);
        ws_send(worker, result).await;
    }

    let (mut w1, mut h1) = dial(&url, &proto, &mut h).await;
    handshake(&mut w1, &mut h1, &init, &first).await;
    assert_eq!(ws_json(&mut h1).await, first);
    let ev = p
        .until("the first initialize result", |e| {
            e["kind"] == "response" && e["method"] == "initialize"
        })
        .await;
    assert_eq!(ev["verdict"]["verdict"], "ok", "{ev}");
    let old_conn = ev["conn"].clone();

    let (mut w2, mut h2) = dial(&url, &proto, &mut h).await;
    handshake(&mut w2, &mut h2, &init, &redial).await;
    assert_eq!(
        ws_json(&mut h2).await,
        redial,
        "the redial's result is forwarded"
    );
    assert_eq!(ws_next(&mut w1).await, Got::Closed(Some(superseded)));
    assert_eq!(ws_next(&mut h1).await, Got::Closed(Some(superseded)));
    let ev = p
        .until("the supersede", |e| class(e) == "claim.superseded")
        .await;
    assert_eq!(ev["verdict"]["code"], superseded, "{ev}");
    assert_eq!(
        ev["action"],
        format!("claim.superseded: closed connection #{old_conn} {superseded}"),
        "{ev}"
    );

    let mut other = redial.clone();
    other["result"]["_meta"]["agentfy"]["instanceId"] = json!("inst_another_process");
    other["result"]["_meta"]["agentfy"]["attempt"] = json!(attempt(&redial) + 1);
    let mut lower = first.clone();
    lower["result"]["_meta"]["agentfy"]["attempt"] = json!(0);
    for (what, result) in [
        ("the same attempt", redial.clone()),
        ("a lower attempt", lower),
        ("another instanceId", other),
    ] {
        let (mut w, mut hw) = dial(&url, &proto, &mut h).await;
        handshake(&mut w, &mut hw, &init, &result).await;
        assert_eq!(ws_next(&mut w).await, Got::Closed(Some(rejected)), "{what}");
        assert_eq!(
            ws_next(&mut hw).await,
            Got::Closed(Some(rejected)),
            "{what}: the result never reaches the host"
        );
        let ev = p.until(what, |e| class(e) == "claim.refused").await;
        assert_eq!(ev["verdict"]["code"], rejected, "{what}: {ev}");
        assert_eq!(
            ev["action"],
            format!("claim.refused: refused, closed {rejected}"),
            "{what}: {ev}"
        );
    }

    // The superseding socket still serves: the worker's handshake goes on there.
    let initialized = example(&c, "notifications/initialized", Part::Call, 0);
    ws_send(&mut w2, &initialized).await;
    assert_eq!(ws_json(&mut h2).await, initialized);
    let ready = example(&c, "agentfy/ready", Part::Call, 0);
    ws_send(&mut w2, &ready).await;
    assert_eq!(ws_json(&mut h2).await, ready);
    let list = example(&c, "tools/list", Part::Call, 0);
    ws_send(&mut h2, &list).await;
    assert_eq!(ws_json(&mut w2).await, list);
    let listed = example(&c, "tools/list", Part::Result, 0);
    ws_send(&mut w2, &listed).await;
    assert_eq!(ws_json(&mut h2).await, listed);
}

/// hostHandshakeSeconds runs from socket open to notifications/initialized, twice the
/// handshakeSeconds the host's initialize carried (T-67): run by the engine from the
/// contract's data, it ends a socket still without notifications/initialized when that
/// passes, with the limit's close code, toward both sides (the host's own reaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolchannel_a_missed_handshake_deadline_closes_the_socket() {
    let c = tool();
    let proto = subprotocol(&c);
    let code = limit_code(&c, "hostHandshakeSeconds");
    let mut h = host(proto.clone()).await;
    let (mut p, url) = tool_proxy_scaled(&h, SCALE);
    let t0 = Instant::now();
    let (mut worker, mut host_ws) = dial(&url, &proto, &mut h).await;
    // The budgets the initialize carries are real seconds, whatever the proxy's scale.
    let mut init = example(&c, "initialize", Part::Call, 0);
    init["params"]["_meta"]["agentfy"]["budgets"]["handshakeSeconds"] = json!(1);
    let after = Duration::from_secs(2);
    ws_send(&mut host_ws, &init).await;
    assert_eq!(ws_json(&mut worker).await, init);
    ws_send(&mut worker, &example(&c, "initialize", Part::Result, 0)).await;
    assert_eq!(
        ws_json(&mut host_ws).await,
        example(&c, "initialize", Part::Result, 0)
    );
    let want = Got::Closed(code.as_u64().and_then(|n| u16::try_from(n).ok()));
    assert_eq!(ws_next(&mut worker).await, want);
    assert_eq!(ws_next(&mut host_ws).await, want);
    let took = t0.elapsed();
    assert!(
        took >= after && took < after + Duration::from_secs(3),
        "closed after {took:?}; the deadline is {after:?}"
    );
    let ev = p
        .until("the handshake deadline", |e| class(e) == "limit.deadline")
        .await;
    assert_eq!(ev["verdict"]["code"], code, "{ev}");
    assert!(ev.to_string().contains("hostHandshakeSeconds"), "{ev}");
}

// ---------------------------------------------------------------------------
// xsession: one user frame per connection into a recipient's inbox.

fn xs() -> Contract {
    contract::builtin("xsession").expect("xsession")
}

/// One proxy run in front of a recipient's inbox (route "to-recipient",
/// enforce mode, from a TOML config) and the sender's own inbox.
struct Xs {
    c: Contract,
    p: Proxy,
    listen: PathBuf,
    /// What the recipient read on each connection the proxy made, in accept order.
    recipient: mpsc::UnboundedReceiver<String>,
    /// First line of each connection, as soon as it arrives (connections held open).
    first_lines: mpsc::UnboundedReceiver<String>,
    sender_inbox: UnixListener,
    sender_path: PathBuf,
    dir: tempfile::TempDir,
}

async fn xsession() -> Xs {
    xsession_scaled(1.0).await
}

async fn xsession_scaled(scale: f64) -> Xs {
    let dir = tempfile::tempdir().expect("tempdir");
    let (real, listen) = (dir.path().join("r.sock"), dir.path().join("r.proxy"));
    let sender_path = dir.path().join("s.sock");
    let sender_inbox = UnixListener::bind(&sender_path).expect("bind");
    let inbox = UnixListener::bind(&real).expect("bind");
    let (tx, recipient) = mpsc::unbounded_channel();
    let (ftx, first_lines) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = inbox.accept().await else {
                return;
            };
            let (tx, ftx) = (tx.clone(), ftx.clone());
            tokio::spawn(async move {
                let mut lines = BufReader::new(s);
                let mut got = String::new();
                let mut line = String::new();
                // Connections here are short, except the ones a test holds open on purpose.
                while let Ok(Ok(n)) =
                    timeout(Duration::from_secs(120), lines.read_line(&mut line)).await
                {
                    if n == 0 {
                        break;
                    }
                    if got.is_empty() {
                        let _ = ftx.send(line.clone());
                    }
                    got.push_str(&line);
                    line.clear();
                }
                let _ = tx.send(got);
            });
        }
    });
    let config = dir.path().join("routes.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"enforce\"\n\n[[route]]\nname = \"to-recipient\"\ncontract = \"xsession\"\nlisten = \"{}\"\nupstream = \"{}\"\nclient = \"sender\"\n",
            ep(&listen),
            ep(&real)
        ),
    )
    .expect("config");
    let p = harness::run_scaled(&["--config", config.to_str().expect("utf-8")], scale);
    wait_for(&listen).await;
    Xs {
        c: xs(),
        p,
        listen,
        recipient,
        first_lines,
        sender_inbox,
        sender_path,
        dir,
    }
}

impl Xs {
    /// The contract's second user example, from `from`, with its own id and body.
    fn user(&self, from: &Path, id: &str, body: &str) -> Value {
        let mut u = example(&self.c, "user", Part::Call, 1);
        u["from"] = json!(from.to_str().expect("utf-8"));
        u["msgId"] = json!(id);
        u["message"]["content"] = json!(body);
        u
    }

    /// Send one frame as a sender does: dial, one line, half-close, wait for the close.
    async fn deliver(&self, v: &Value) {
        let mut s = UnixStream::connect(&self.listen).await.expect("dial");
        s.write_all(format!("{v}\n").as_bytes())
            .await
            .expect("send");
        s.shutdown().await.expect("half-close");
        assert!(rest(&mut s).await.is_empty(), "the listener never writes");
    }

    /// What the recipient read on the next connection.
    async fn received(&mut self) -> String {
        timeout(DEADLINE, self.recipient.recv())
            .await
            .expect("the recipient's connection ends in time")
            .expect("recipient alive")
    }

    /// The sender's inbox gets one connection: (auth line, delivery_status), both
    /// valid xsession frames from the recipient.
    async fn status(&self) -> (Value, Value) {
        let (mut s, _) = timeout(DEADLINE, self.sender_inbox.accept())
            .await
            .expect("a notice at the sender's inbox in time")
            .expect("accept");
        let text = String::from_utf8(rest(&mut s).await).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "auth line and status, one write: {text:?}");
        let wire = contract::wire::Wire::new(std::sync::Arc::new(self.c.clone())).expect("wire");
        for l in &lines {
            wire.decode("inbox", "recipient", l.as_bytes(), None)
                .unwrap_or_else(|v| panic!("not a valid recipient frame: {l}: {v:?}"));
        }
        (
            serde_json::from_str(lines[0]).expect("json"),
            serde_json::from_str(lines[1]).expect("json"),
        )
    }
}

/// Over the per-sender burst (perSenderRate) the next user frame is not
/// delivered: the sender's inbox gets a delivery_status `dropped` with the
/// limit's dropReason, after an auth line carrying the frame's replyToken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xsession_over_the_sender_burst_the_message_is_dropped_and_reported() {
    let mut x = xsession().await;
    let limits = x.c.evaluated_limits();
    let per = limits.rate("perSenderRate").expect("a rate");
    let burst = per.burst as usize;
    let refill = per.token_period().expect("a positive rate").0;
    assert!(
        limits.rate("globalRate").expect("a rate").burst as usize > burst,
        "the all-senders bucket must not be the one that runs out here"
    );
    let reason = limit_code(&x.c, "perSenderRate");
    let from = x.sender_path.clone();
    let t0 = Instant::now();
    for n in 0..=burst {
        let u = x.user(&from, &format!("msg-{n}"), &format!("build #{n} finished"));
        x.deliver(&u).await;
    }
    assert!(
        t0.elapsed() < refill,
        "the burst took {:?}, longer than one refill ({refill:?})",
        t0.elapsed()
    );
    for n in 0..burst {
        let got: Value = serde_json::from_str(x.received().await.trim()).expect("json");
        assert_eq!(got["msgId"], format!("msg-{n}"));
    }
    assert_eq!(x.received().await, "", "the excess frame was not delivered");
    let dropped = x.user(&from, &format!("msg-{burst}"), "");
    let (auth, status) = x.status().await;
    assert_eq!(auth["type"], "auth", "{auth}");
    assert_eq!(auth["token"], dropped["replyToken"], "{auth}");
    assert_eq!(status["action"], "delivery_status", "{status}");
    assert_eq!(status["status"], "dropped", "{status}");
    assert_eq!(status["dropReason"], reason, "{status}");
    assert_eq!(status["origMsgId"], dropped["msgId"], "{status}");
    let ev = x.p.until("the drop", |e| class(e) == "limit.rate").await;
    assert_eq!(ev["id"], dropped["msgId"], "{ev}");
    assert_eq!(ev["verdict"]["code"], reason, "{ev}");
    assert_eq!(
        ev["action"], "limit.rate: dropped, reported to the sender",
        "{ev}"
    );
    let note = x.p.note("report sent to").await;
    assert!(note.contains(from.to_str().expect("utf-8")), "{note}");
}

/// The same body from the same sender to the same session within
/// duplicateWindow, under another msgId, is dropped as a duplicate and
/// reported to the sender; the same body from another sender is not a
/// duplicate (the contract keys the check by `from`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xsession_a_duplicate_body_within_the_window_is_dropped_and_reported() {
    let mut x = xsession().await;
    let reason = limit_code(&x.c, "duplicateWindow");
    let from = x.sender_path.clone();
    let body = "nightly build failed: 3 tests";
    x.deliver(&x.user(&from, "first", body)).await;
    let got: Value = serde_json::from_str(x.received().await.trim()).expect("json");
    assert_eq!(got["msgId"], "first");

    let again = x.user(&from, "second", body);
    x.deliver(&again).await;
    assert_eq!(x.received().await, "", "the duplicate was not delivered");
    let (auth, status) = x.status().await;
    assert_eq!(auth["token"], again["replyToken"], "{auth}");
    assert_eq!(status["status"], "dropped", "{status}");
    assert_eq!(status["dropReason"], reason, "{status}");
    assert_eq!(status["origMsgId"], "second", "{status}");
    let ev =
        x.p.until("the duplicate", |e| class(e) == "limit.duplicate")
            .await;
    assert_eq!(ev["id"], "second", "{ev}");
    assert_eq!(ev["verdict"]["code"], reason, "{ev}");
    assert_eq!(
        ev["action"], "limit.duplicate: dropped, reported to the sender",
        "{ev}"
    );

    let other_sender = x.dir.path().join("other.sock");
    x.deliver(&x.user(&other_sender, "third", body)).await;
    let got: Value = serde_json::from_str(x.received().await.trim()).expect("json");
    assert_eq!(
        got["msgId"], "third",
        "another sender's same body is delivered"
    );
}

/// maxConnections open at once: one more is closed unread (the sender sees
/// EOF, no status), and nothing of it reaches the recipient.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xsession_a_connection_over_the_cap_is_closed_unread() {
    let mut x = xsession().await;
    let max = limit_usize(&x.c, "maxConnections");
    let auth = example(&x.c, "auth", Part::Call, 0);
    let mut held = Vec::new();
    for _ in 0..max {
        let mut s = UnixStream::connect(&x.listen).await.expect("dial");
        s.write_all(format!("{auth}\n").as_bytes())
            .await
            .expect("auth line");
        held.push(s);
    }
    // Every held connection is relayed (so counted) before the next one dials.
    for _ in 0..max {
        timeout(DEADLINE, x.first_lines.recv())
            .await
            .expect("relayed in time")
            .expect("recipient alive");
    }
    let mut extra = UnixStream::connect(&x.listen).await.expect("dial");
    let u = x.user(&x.sender_path.clone(), "over-cap", "hello");
    // The proxy may already have closed it: a failed write is part of the expected outcome.
    let _ = extra.write_all(format!("{u}\n").as_bytes()).await;
    let _ = extra.shutdown().await;
    assert!(rest(&mut extra).await.is_empty(), "closed unread, no reply");
    assert_eq!(
        x.received().await,
        "",
        "the recipient's connection for it carried nothing"
    );
    let ev =
        x.p.until("the refused connection", |e| {
            class(e) == "limit.connections"
        })
        .await;
    assert_eq!(ev["method"], "(open)", "{ev}");
    assert_eq!(
        ev["action"], "limit.connections: refused, dropped the connection",
        "{ev}"
    );
    drop(held);
}

/// The cap counts connections OPEN at once (contract: "Connection beyond the
/// cap"); connections that have closed must free their slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xsession_closed_connections_free_their_slots() {
    let mut x = xsession().await;
    let max = limit_usize(&x.c, "maxConnections");
    // One at a time, each closed before the next. Each carries an auth line only, so the
    // admission buckets (per route: one inbox) stay out of it.
    for n in 0..=max {
        let mut auth = example(&x.c, "auth", Part::Call, 0);
        auth["token"] = json!(format!("{n:064x}"));
        x.deliver(&auth).await;
        let got = x.received().await;
        assert!(
            got.contains(&format!("{n:064x}")),
            "connection {} of a run where at most one is open was refused: {got:?}",
            n + 1
        );
    }
}

/// Lines that do not parse never restart parseableLineDeadline: a connection
/// sending only garbage is dropped when it passes, while one sending a valid
/// line now and then stays open past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xsession_garbage_lines_do_not_extend_the_line_deadline() {
    let mut x = xsession_scaled(SCALE).await;
    let after = Duration::from_secs_f64(limit(&x.c, "parseableLineDeadline") * SCALE);
    let step = after / 6;
    let auth = example(&x.c, "auth", Part::Call, 0);
    let t0 = Instant::now();
    let garbage = UnixStream::connect(&x.listen).await.expect("dial");
    let mut valid = UnixStream::connect(&x.listen).await.expect("dial");
    let (mut grd, mut gwr) = garbage.into_split();
    let feed = async {
        for n in 0.. {
            tokio::time::sleep(step).await;
            if gwr
                .write_all(format!("garbage {n} {{not json\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    };
    let keep = async {
        for _ in 0.. {
            valid
                .write_all(format!("{auth}\n").as_bytes())
                .await
                .expect("the valid connection stays open");
            tokio::time::sleep(step * 2).await;
        }
    };
    let mut got = Vec::new();
    let ended = async {
        timeout(after + DEADLINE, grd.read_to_end(&mut got))
            .await
            .expect("the garbage connection ends in time")
            .expect("read");
    };
    tokio::select! {
        () = ended => {}
        () = feed => panic!("the garbage feed stopped first"),
        () = keep => unreachable!(),
    }
    let took = t0.elapsed();
    assert!(got.is_empty(), "nothing is written back");
    assert!(
        took >= after && took < after + Duration::from_secs(3),
        "dropped after {took:?}; the deadline is {after:?} from accept"
    );
    // The other connection, fed valid lines, outlives the deadline.
    valid
        .write_all(format!("{auth}\n").as_bytes())
        .await
        .expect("still open");
    valid.shutdown().await.expect("half-close");
    assert!(rest(&mut valid).await.is_empty());
    let mut contents = [x.received().await, x.received().await];
    contents.sort();
    assert_eq!(contents[0], "", "no garbage reached the recipient");
    assert!(
        contents[1].lines().count() >= 4 && contents[1].lines().all(|l| l.contains("auth")),
        "{:?}",
        contents[1]
    );
    let ev =
        x.p.until("the line deadline", |e| class(e) == "limit.deadline")
            .await;
    assert_eq!(
        ev["action"], "limit.deadline: refused, dropped the connection",
        "{ev}"
    );
}
