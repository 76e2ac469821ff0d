//! `contract-proxy run` as a user runs it: enforce mode, the kernel's paired
//! channels, several routes from a TOML file, a broken framing in observe
//! mode, clean stop, and the clear errors for a port in use or a missing socket.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

mod harness;
use harness::{DEADLINE, ep, frame, read_frame, rukh_initialize, wait_for};

/// A rukh extension that answers initialize with the contract's example and
/// every later request with an empty result; returns every frame it got.
fn extension(l: UnixListener) -> tokio::task::JoinHandle<Vec<Vec<u8>>> {
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.expect("accept");
        let mut got = Vec::new();
        loop {
            let mut len = [0u8; 4];
            if tokio::time::timeout(DEADLINE, s.read_exact(&mut len))
                .await
                .map(|r| r.is_err())
                .unwrap_or(true)
            {
                return got;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            s.read_exact(&mut body).await.expect("body");
            let req: Value = serde_json::from_slice(&body).expect("json");
            let reply = if req["method"] == "rukh.initialize" {
                rukh_initialize().1
            } else if req["method"] == "rukh.invoke" {
                serde_json::to_vec(&invoke_result(&req["id"])).expect("ser")
            } else {
                serde_json::to_vec(&json!({"jsonrpc":"2.0","id":req["id"],"result":{}}))
                    .expect("ser")
            };
            got.push(body);
            s.write_all(&frame(&reply)).await.expect("reply");
        }
    })
}

/// rukh's example invoke result, answering `id`.
fn invoke_result(id: &Value) -> Value {
    let c = contract::builtin("rukh").expect("rukh");
    let mut v = c.methods["rukh.invoke"]
        .examples
        .iter()
        .find(|e| e.part == contract::model::Part::Result)
        .expect("a result example")
        .message
        .clone();
    v["id"] = id.clone();
    v
}

/// Enforce mode acts as rukh says: an unknown method is answered -32601 and
/// the session goes on; a malformed frame ends the invocation. Neither frame
/// reaches the extension.
#[tokio::test]
async fn enforce_acts_as_the_contract_says_and_forwards_nothing_it_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("p.sock");
    let upstream = dir.path().join("ext.sock");
    let server = extension(UnixListener::bind(&upstream).expect("bind"));
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--mode",
        "enforce",
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    let mut core = UnixStream::connect(&listen).await.expect("connect");
    let (init, init_result) = rukh_initialize();
    core.write_all(&frame(&init)).await.expect("initialize");
    assert_eq!(read_frame(&mut core).await, init_result);
    core.write_all(&frame(
        br#"{"jsonrpc":"2.0","id":"c:2","method":"rukh.nosuch","params":{}}"#,
    ))
    .await
    .expect("send unknown");
    let reply: Value = serde_json::from_slice(&read_frame(&mut core).await).expect("json");
    assert_eq!(reply["error"]["code"], json!(-32601), "{reply}");
    assert_eq!(reply["id"], json!("c:2"), "{reply}");
    // The session's one invoke (allowed once the handshake is confirmed).
    let mut invoke = contract::builtin("rukh").expect("rukh").methods["rukh.invoke"].examples[0]
        .message
        .clone();
    invoke["id"] = json!("c:3");
    let good = serde_json::to_vec(&invoke).expect("json");
    core.write_all(&frame(&good)).await.expect("send good");
    let done: Value = serde_json::from_slice(&read_frame(&mut core).await).expect("json");
    assert_eq!(done, invoke_result(&json!("c:3")));
    core.write_all(&frame(
        br#"{"jsonrpc":"2.0","id":"c:4","id":"c:4","method":"rukh.close"}"#,
    ))
    .await
    .expect("send malformed");
    let mut rest = Vec::new();
    tokio::time::timeout(DEADLINE, core.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .expect("read");
    assert!(
        rest.is_empty(),
        "no reply to a fatal frame, the connection ends"
    );
    let got = server.await.expect("server");
    assert_eq!(
        got,
        vec![init, good],
        "only valid requests reached the extension"
    );
    let ev = p.events(6).await;
    assert_eq!(ev[2]["verdict"]["class"], "unknown-request", "{}", ev[2]);
    assert_eq!(ev[2]["action"], "replied -32601", "{}", ev[2]);
    assert_eq!(ev[3]["verdict"]["verdict"], "ok");
    assert_eq!(ev[4]["kind"], "response");
    assert_eq!(ev[5]["verdict"]["class"], "parse");
    assert_eq!(ev[5]["action"], "dropped the connection", "{}", ev[5]);
}

/// rukh's request-id rules, inline: a request before initialize and an id that
/// skips one are refused with the contract's codes; observe mode flags the same
/// and forwards.
#[tokio::test]
async fn rukh_request_id_rules_are_enforced_inline() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Enforce: the gap ends the invocation; the extension never sees the bad request.
    let (listen, upstream) = (dir.path().join("e.sock"), dir.path().join("e-ext.sock"));
    let server = extension(UnixListener::bind(&upstream).expect("bind"));
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--mode",
        "enforce",
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    let mut core = UnixStream::connect(&listen).await.expect("connect");
    let (init, init_result) = rukh_initialize();
    core.write_all(&frame(&init)).await.expect("initialize");
    assert_eq!(read_frame(&mut core).await, init_result);
    core.write_all(&frame(
        br#"{"jsonrpc":"2.0","id":"c:3","method":"rukh.close","params":{}}"#,
    ))
    .await
    .expect("send gap");
    let mut rest = Vec::new();
    tokio::time::timeout(DEADLINE, core.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .expect("read");
    assert_eq!(
        server.await.expect("server"),
        vec![init.clone()],
        "the gap was not forwarded"
    );
    let ev = p.events(3).await;
    assert_eq!(ev[2]["verdict"]["class"], "ids.gap", "{}", ev[2]);
    assert_eq!(ev[2]["verdict"]["code"], json!(-32000), "{}", ev[2]);

    // Observe: a request before initialize is flagged with -32001 and still forwarded.
    let (listen, upstream) = (dir.path().join("o.sock"), dir.path().join("o-ext.sock"));
    let server = extension(UnixListener::bind(&upstream).expect("bind"));
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    let mut core = UnixStream::connect(&listen).await.expect("connect");
    let early = br#"{"jsonrpc":"2.0","id":"c:1","method":"rukh.close","params":{}}"#;
    core.write_all(&frame(early)).await.expect("send early");
    assert_eq!(
        read_frame(&mut core).await,
        br#"{"jsonrpc":"2.0","id":"c:1","result":{}}"#
    );
    drop(core);
    assert_eq!(server.await.expect("server"), vec![early.to_vec()]);
    let ev = p.events(1).await;
    assert_eq!(ev[0]["verdict"]["code"], json!(-32001), "{}", ev[0]);
    assert!(
        ev[0]["action"]
            .as_str()
            .is_some_and(|a| a.starts_with("would have")),
        "{}",
        ev[0]
    );
}

/// The kernel's control and data channels through one proxy: the data
/// connection joins the control connection's session, and binary data frames
/// arrive intact with their stream and sequence shown.
#[tokio::test]
async fn kernel_control_and_data_are_relayed_as_one_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (lc, ld) = (dir.path().join("control.p"), dir.path().join("data.p"));
    let (uc, ud) = (dir.path().join("control.s"), dir.path().join("data.s"));
    let shell_control = UnixListener::bind(&uc).expect("bind");
    let shell_data = UnixListener::bind(&ud).expect("bind");
    let mut p = harness::run(&[
        "--contract",
        "kernel",
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
    let c = contract::builtin("kernel").expect("kernel");
    let open = serde_json::to_vec(&c.methods["stream.open"].examples[0].message).expect("ser");
    // The core dials control, then data (K-1).
    let mut core_control = UnixStream::connect(&lc).await.expect("control");
    let (mut sc, _) = shell_control.accept().await.expect("accept control");
    let mut core_data = UnixStream::connect(&ld).await.expect("data");
    let (mut sd, _) = shell_data.accept().await.expect("accept data");
    core_control.write_all(&frame(&open)).await.expect("open");
    assert_eq!(read_frame(&mut sc).await, open);
    let mut data = Vec::new();
    for seq in 0u64..3 {
        let payload = vec![seq as u8; 4096];
        data.extend_from_slice(&((4 + 8 + payload.len()) as u32).to_be_bytes());
        data.extend_from_slice(&11u32.to_be_bytes());
        data.extend_from_slice(&seq.to_be_bytes());
        data.extend_from_slice(&payload);
    }
    core_data.write_all(&data).await.expect("data");
    let mut got = vec![0u8; data.len()];
    tokio::time::timeout(DEADLINE, sd.read_exact(&mut got))
        .await
        .expect("in time")
        .expect("data");
    assert_eq!(got, data, "data frames arrive byte for byte");
    let ev = p.events(4).await;
    // Each connection's lines come from its own recorder task: within a connection they
    // keep their order, across the control and data connections they may interleave.
    let (control, data_ev): (Vec<&Value>, Vec<&Value>) =
        ev.iter().partition(|e| e["channel"] != "data");
    assert_eq!(control.len(), 1, "{ev:?}");
    let session = control[0]["session"].clone();
    assert_eq!(control[0]["method"], "stream.open");
    assert_eq!(data_ev.len(), 3, "{ev:?}");
    for (i, e) in data_ev.into_iter().enumerate() {
        assert_eq!(e["stream"], json!([11, i]), "{e}");
        assert_eq!(e["session"], session, "data joins the control session: {e}");
        assert_eq!(e["size"], 4096);
    }
}

/// xsession's two connections of one delivery, through two routes of one TOML
/// config: the sender's message to the recipient's inbox, and the recipient's
/// delivery_status back to the sender's inbox on a separate connection.
#[tokio::test]
async fn xsession_message_and_delivery_status_through_two_routes_of_a_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (recipient_real, recipient_proxy) = (dir.path().join("r.sock"), dir.path().join("r.proxy"));
    let (sender_real, sender_proxy) = (dir.path().join("s.sock"), dir.path().join("s.proxy"));
    let recipient_inbox = UnixListener::bind(&recipient_real).expect("bind");
    let sender_inbox = UnixListener::bind(&sender_real).expect("bind");
    let config = dir.path().join("routes.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[route]]
name = "to-recipient"
contract = "xsession"
listen = "{}"
upstream = "{}"
client = "sender"

[[route]]
name = "to-sender"
contract = "xsession"
listen = "{}"
upstream = "{}"
client = "recipient"
"#,
            ep(&recipient_proxy),
            ep(&recipient_real),
            ep(&sender_proxy),
            ep(&sender_real)
        ),
    )
    .expect("config");
    let mut p = harness::run(&["--config", config.to_str().expect("utf-8")]);
    wait_for(&recipient_proxy).await;
    wait_for(&sender_proxy).await;
    let c = contract::builtin("xsession").expect("xsession");
    let line = |m: &str, i: usize| {
        serde_json::to_string(&c.methods[m].examples[i].message).expect("ser") + "\n"
    };
    let (user, status) = (line("user", 0), line("delivery_status", 0));

    let mut s = UnixStream::connect(&recipient_proxy)
        .await
        .expect("dial recipient");
    s.write_all(user.as_bytes()).await.expect("send");
    s.shutdown().await.expect("half-close");
    let (mut r, _) = recipient_inbox.accept().await.expect("accept");
    let mut got = String::new();
    tokio::time::timeout(DEADLINE, r.read_to_string(&mut got))
        .await
        .expect("eof in time")
        .expect("read");
    assert_eq!(got, user);

    // The recipient answers on a connection of its own, to the sender's inbox.
    let mut back = UnixStream::connect(&sender_proxy)
        .await
        .expect("dial sender");
    back.write_all(status.as_bytes())
        .await
        .expect("send status");
    back.shutdown().await.expect("half-close");
    let (mut si, _) = sender_inbox.accept().await.expect("accept");
    let mut got = String::new();
    tokio::time::timeout(DEADLINE, si.read_to_string(&mut got))
        .await
        .expect("eof in time")
        .expect("read");
    assert_eq!(got, status);

    let ev = p.events(2).await;
    assert_eq!(
        (ev[0]["route"].as_str(), ev[0]["method"].as_str()),
        (Some("to-recipient"), Some("user"))
    );
    assert_eq!(
        (ev[1]["route"].as_str(), ev[1]["method"].as_str()),
        (Some("to-sender"), Some("delivery_status"))
    );
    for e in &ev {
        assert_eq!(e["verdict"]["verdict"], "ok", "{e}");
    }
}

/// An oversize length prefix breaks rukh's framing. In observe mode the proxy
/// flags it with the contract's code and still passes every byte on.
#[tokio::test]
async fn broken_framing_is_flagged_and_passed_on_in_observe_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("p.sock");
    let upstream = dir.path().join("ext.sock");
    let ext = UnixListener::bind(&upstream).expect("bind");
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    let mut core = UnixStream::connect(&listen).await.expect("connect");
    let garbage = [&[0xFFu8, 0xFF, 0xFF, 0xFF][..], b"not a frame at all"].concat();
    core.write_all(&garbage).await.expect("send");
    core.shutdown().await.expect("eof");
    let (mut s, _) = ext.accept().await.expect("accept");
    let mut got = Vec::new();
    tokio::time::timeout(DEADLINE, s.read_to_end(&mut got))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(got, garbage, "nothing lost in observe mode");
    let ev = p.events(1).await;
    assert_eq!(ev[0]["verdict"]["class"], "oversize", "{}", ev[0]);
}

/// SIGTERM stops the proxy within one shutdown deadline, closing live
/// connections: the client sees EOF, and the exit code is 0.
#[tokio::test]
async fn sigterm_stops_cleanly_within_the_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("p.sock");
    let upstream = dir.path().join("ext.sock");
    let ext = UnixListener::bind(&upstream).expect("bind");
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    let mut core = UnixStream::connect(&listen).await.expect("connect");
    let (_s, _) = ext.accept().await.expect("accept");
    p.signal("TERM");
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(DEADLINE, core.read(&mut buf))
        .await
        .expect("closed in time")
        .expect("read");
    assert_eq!(n, 0, "the client sees the connection end");
    assert_eq!(p.exited().await.code(), Some(0));
}

fn run_fails(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
        .arg("run")
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_port_in_use_is_exit_2_with_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let (code, err) = run_fails(&[
        "--contract",
        "rukh",
        "--listen",
        &format!("tcp:{port}"),
        "--upstream",
        "tcp:127.0.0.1:1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot listen on tcp:127.0.0.1:") && err.contains("in use"),
        "{err}"
    );
}

#[test]
fn usage_errors_are_exit_2() {
    let (code, err) = run_fails(&[
        "--contract",
        "nosuch",
        "--listen",
        "tcp:0",
        "--upstream",
        "tcp:127.0.0.1:1",
    ]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = run_fails(&[
        "--contract",
        "rukh",
        "--listen",
        "bogus:1",
        "--upstream",
        "tcp:127.0.0.1:1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad endpoint \"bogus:1\""), "{err}");
    let (code, err) = run_fails(&[
        "--contract",
        "rukh",
        "--channel",
        "nope",
        "--listen",
        "tcp:0",
        "--upstream",
        "tcp:127.0.0.1:1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no channel \"nope\""), "{err}");
}

/// A contract naming an extension this proxy does not implement is refused at set-up, with
/// the extensions it has: a rule the contract says needs a hook is never silently skipped.
#[test]
fn a_contract_naming_an_extension_the_proxy_lacks_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("tests/fixtures/jobs.json")).expect("fixture");
    let mut doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    doc["extensions"] = serde_json::json!({
        "acme.magic": {"description": "d", "reason": "r", "seed": "s"}
    });
    let path = dir.path().join("jobs-ext.json");
    std::fs::write(&path, doc.to_string()).expect("write");
    let file = path.display().to_string();
    let (code, err) = run_fails(&[
        "--contract",
        &file,
        "--listen",
        "tcp:0",
        "--upstream",
        "tcp:127.0.0.1:1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("acme.magic"), "{err}");
    assert!(err.contains(contract::extensions::KNOWN[0].name), "{err}");
}

/// A missing upstream socket is reported on the live view; the client's
/// connection is closed and the proxy keeps serving.
#[tokio::test]
async fn a_missing_upstream_socket_is_reported_and_the_proxy_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("p.sock");
    let missing = dir.path().join("nobody-here.sock");
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&missing),
    ]);
    wait_for(&listen).await;
    for _ in 0..2 {
        let mut c = UnixStream::connect(&listen).await.expect("connect");
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(DEADLINE, c.read(&mut buf))
            .await
            .expect("closed in time")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
    let note = p.note("cannot connect").await;
    assert!(note.contains("nobody-here.sock"), "{note}");
}

/// A rukh extension stand-in on a unix socket: answers every request with a
/// result; `text` is what it puts in each result.
fn answering_extension(l: UnixListener, text: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                loop {
                    let mut len = [0u8; 4];
                    if s.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                    if s.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let req: Value = serde_json::from_slice(&body).expect("json");
                    let reply =
                        json!({"jsonrpc":"2.0","id":req["id"],"result":{"output":{"text":text}}});
                    let bytes = serde_json::to_vec(&reply).expect("ser");
                    if s.write_all(&frame(&bytes)).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// `run --record`, then `show` prints the recording like the live view, and
/// `replay` re-sends the client's side: the same extension gives a clean report
/// (exit 0), a changed one is reported with the path that differs (exit 1).
/// Multi-threaded: the extensions answer while the test blocks on the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_shows_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = dir.path().join("p.sock");
    let upstream = dir.path().join("ext.sock");
    let recording = dir.path().join("session.cprec");
    let _ext = answering_extension(UnixListener::bind(&upstream).expect("bind"), "same");
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--client",
        "extension",
        "--record",
        recording.to_str().expect("utf-8"),
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    let mut c = UnixStream::connect(&listen).await.expect("connect");
    for id in 1..=2 {
        let call = json!({"jsonrpc":"2.0","id":format!("e:{id}"),"method":"rukh.call","params":{"operation":"fs.read","version":"1","input":{"path":"README.md"},"timeoutMs":1000}});
        c.write_all(&frame(serde_json::to_vec(&call).expect("ser")))
            .await
            .expect("send");
        let r: Value = serde_json::from_slice(&read_frame(&mut c).await).expect("json");
        assert_eq!(r["result"]["output"]["text"], "same");
    }
    drop(c);
    let _ = p.events(4).await;
    // SIGTERM makes the proxy finish the recording before it exits.
    p.signal("TERM");
    p.exited().await;

    let bin = env!("CARGO_BIN_EXE_contract-proxy");
    let out = Command::new(bin)
        .args(["show", "--log", "json"])
        .arg(&recording)
        .output()
        .expect("show");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("verdict").is_some())
        .collect();
    let methods: Vec<(&str, &str)> = shown
        .iter()
        .map(|v| {
            (
                v["kind"].as_str().unwrap_or("?"),
                v["method"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        methods,
        [
            ("request", "rukh.call"),
            ("response", "rukh.call"),
            ("request", "rukh.call"),
            ("response", "rukh.call")
        ]
    );

    let replay = |to: &Path| {
        Command::new(bin)
            .args(["replay", "--json", "--deadline", "5", "--to", &ep(to)])
            .arg(&recording)
            .output()
            .expect("replay")
    };
    let out = replay(&upstream);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let changed = dir.path().join("changed.sock");
    let _other = answering_extension(UnixListener::bind(&changed).expect("bind"), "different");
    let out = replay(&changed);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a changed answer is a difference"
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("/result/output/text"),
        "the report names the path: {report}"
    );
}

/// A `[[route.ratelimit]]` token bucket from the TOML config: the third ping
/// within the burst window is over the method's limit and is flagged (the
/// kernel has no rate-limit error code, so the proxy only reports it) while
/// the first two pass clean.
#[tokio::test]
async fn a_configured_rate_limit_flags_the_message_over_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (listen, upstream) = (dir.path().join("c.proxy"), dir.path().join("c.shell"));
    let shell = UnixListener::bind(&upstream).expect("bind");
    let config = dir.path().join("routes.toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"enforce\"\n\n[[route]]\ncontract = \"kernel\"\nlisten = \"{}\"\nupstream = \"{}\"\n\n[[route.ratelimit]]\nmethod = \"ping\"\nper_second = 0.01\nburst = 2\n",
            ep(&listen),
            ep(&upstream)
        ),
    )
    .expect("config");
    let mut p = harness::run(&["--config", config.to_str().expect("utf-8")]);
    wait_for(&listen).await;
    let c = contract::builtin("kernel").expect("kernel");
    let mut core = UnixStream::connect(&listen).await.expect("connect");
    let (mut s, _) = shell.accept().await.expect("accept");
    for n in 0..3 {
        let mut ping = c.methods["ping"].examples[0].message.clone();
        ping["id"] = json!(format!("c-{n}"));
        let bytes = serde_json::to_vec(&ping).expect("ser");
        core.write_all(&frame(&bytes)).await.expect("ping");
        assert_eq!(
            read_frame(&mut s).await,
            bytes,
            "flagged, not refused: the kernel has no rate code"
        );
    }
    let ev = p.events(3).await;
    assert_eq!(ev[0]["verdict"]["verdict"], "ok");
    assert_eq!(ev[1]["verdict"]["verdict"], "ok");
    assert_eq!(ev[2]["verdict"]["class"], "ratelimit.method", "{}", ev[2]);
}
