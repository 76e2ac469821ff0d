//! Captures that decode in Wireshark: recordings written as pcapng by
//! `contract-proxy show --pcap`, read by real `tshark` (Debian's package, installed
//! by `scripts/setup.sh apt`) with the Lua dissector `contractgen generate --lang
//! wireshark` writes for the contract.
//!
//! What tshark shows of each frame (kind, method, id, stream id and seq) must be
//! what the proxy's own inspector said of it; display filters on the dissector's
//! fields select the frames they name; a malformed frame and one over its cap
//! raise expert info. The contracts: the five built in, and two that are not: the
//! jobs fixture and the LSP contract of examples/lsp (header-delimited framing).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract::wire::Wire;
use contract::wire::framing::BinaryFrame;
use contract_proxy::inspect::{Dir, Event, Inspector, Mode};
use contract_proxy::record::{self, Header, Record, RouteInfo};
use serde_json::Value;

mod common;
mod harness;

const LIMIT: Duration = Duration::from_secs(60);

/// `tshark`, or a failure that says how to get it.
fn tshark() -> Command {
    let probe = Command::new("tshark").arg("--version").output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "tshark is missing: `scripts/setup.sh apt` installs Debian's tshark"
    );
    Command::new("tshark")
}

fn contract_file(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if name == "jobs" {
        return root.join("proxy/tests/fixtures/jobs.json");
    }
    if name == "lsp" {
        return root.join("examples/lsp/lsp.json");
    }
    root.join(format!("schema/contracts/{name}.json"))
}

/// The dissector contractgen writes for `contract`, in `dir`.
fn dissector(dir: &Path, contract: &Path) -> PathBuf {
    let files = contractgen::Config::new()
        .contract(contract)
        .lang(contractgen::Lang::Wireshark)
        .generate()
        .expect("generate");
    let [file] = files.as_slice() else {
        panic!("one dissector per contract, got {}", files.len());
    };
    assert!(file.contents.starts_with("-- @generated"));
    let path = dir.join(&file.name);
    std::fs::write(&path, &file.contents).expect("write dissector");
    path
}

/// The filter name the dissector registered under (`mcp` is Wireshark's own).
fn proto_name(lua: &Path, wanted: &str) -> String {
    let out = tshark()
        .args(["-G", "protocols", "-X"])
        .arg(format!("lua_script:{}", lua.display()))
        .output()
        .expect("tshark -G");
    let list = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = list.lines().filter_map(|l| l.split('\t').nth(2)).collect();
    let contract = format!("{wanted}_contract");
    if names.contains(&contract.as_str()) {
        return contract;
    }
    assert!(names.contains(&wanted), "{wanted} is not registered");
    wanted.to_string()
}

/// One row per packet where the dissector showed a frame: the fields asked for.
fn dissect(lua: &Path, pcap: &Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = tshark();
    cmd.arg("-X")
        .arg(format!("lua_script:{}", lua.display()))
        .arg("-r")
        .arg(pcap)
        .args([
            "-Y",
            filter,
            "-T",
            "fields",
            "-E",
            "separator=\t",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=|",
        ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {err}");
    assert!(!err.contains("Lua Error"), "the dissector failed: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

fn show_pcap(recording: &Path, pcap: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
        .arg("show")
        .arg(recording)
        .arg("--pcap")
        .arg(pcap)
        .output()
        .expect("show --pcap");
    assert!(
        out.status.success(),
        "show --pcap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What a frame must show in tshark: the inspector's kind and method, and its id.
#[derive(Debug, Clone, PartialEq)]
struct Expect {
    kind: String,
    method: String,
    /// Data frames: stream id and seq.
    stream: Option<(u64, u64)>,
    /// The expert info it must raise, if any (a piece of the message).
    expert: Option<&'static str>,
    /// Whether the inspector flagged it (then the dissector may too).
    flagged: bool,
}

/// Pieces of the dissector's expert messages: a frame the inspector passed raises none.
const EXPERTS: &[&str] = &[
    "Not JSON",
    "over the",
    "is not on channel",
    "comes from",
    "not in the catalog",
    "No message kind",
];

fn expect_of(e: &Event) -> Expect {
    Expect {
        kind: e.kind.map(|k| k.name().to_string()).unwrap_or_default(),
        method: if e.stream.is_some() {
            String::new()
        } else {
            e.method.clone().unwrap_or_default()
        },
        stream: e.stream,
        expert: None,
        flagged: !matches!(e.verdict, contract_proxy::inspect::Verdict::Ok),
    }
}

fn expert(piece: &'static str) -> Expect {
    Expect {
        kind: String::new(),
        method: String::new(),
        stream: None,
        expert: Some(piece),
        flagged: true,
    }
}

/// Frames that break what one frame can show, each with the expert info it raises: a
/// request for a method the channel lacks, a message from a party the contract does not
/// let send it (where the channel says who connects), an error code off the catalog.
fn bent(c: &contract::Contract, key: &str, client: &str) -> Vec<(Dir, Value, &'static str)> {
    use contract::model::{Binding, Kind, Part};
    let ch = &c.channels[key];
    let calls = || {
        c.methods
            .values()
            .filter(move |m| m.channel == key)
            .flat_map(|m| m.examples.iter().map(move |e| (m, e)))
    };
    let mut out = Vec::new();
    let method_at = match &ch.binding {
        Some(Binding::Jsonrpc { .. }) => Some("/method".to_string()),
        Some(Binding::Envelope { method, .. }) => Some(method.clone()),
        _ => None,
    };
    let request = calls().find(|(m, e)| m.kind == Kind::Request && e.part == Part::Call);
    if let (Some(at), Some((_, e))) = (&method_at, request) {
        let mut v = e.message.clone();
        *v.pointer_mut(at).expect("method") = "no.such.method".into();
        out.push((Dir::Up, v, "is not on channel"));
    }
    if ch.connects.is_some() {
        let one_sided = calls().find(|(m, e)| {
            e.part == Part::Call && m.from.len() == 1 && c.parties.len() == 2 && method_at.is_some()
        });
        if let Some((m, e)) = one_sided {
            let dir = if m.from[0] == client {
                Dir::Down
            } else {
                Dir::Up
            };
            out.push((dir, e.message.clone(), "comes from"));
        }
    }
    let code_at = c.error_body_pointer(key).map(|p| format!("{p}/code"));
    let error = calls().find(|(_, e)| e.part == Part::Error);
    if let (Some(at), Some((_, e))) = (code_at, error) {
        let mut v = e.message.clone();
        let code = v.pointer_mut(&at).expect("code");
        *code = if code.is_string() {
            "no.such.code".into()
        } else {
            987_654_321.into()
        };
        out.push((Dir::Down, v, "not in the catalog"));
    }
    out
}

/// A recording of every example of `c`, channel by channel (one route and connection
/// each) through the proxy's inspector, with one malformed frame and one over its cap
/// per JSON channel and three data frames per binary one; and what each frame must show.
async fn examples_recording(c: &contract::Contract, path: &Path) -> Vec<Expect> {
    let wire = Arc::new(Wire::new(Arc::new(c.clone())).expect("wire"));
    let mut routes = Vec::new();
    let mut recs = Vec::new();
    let mut expect = Vec::new();
    for (conn, (key, ch)) in c.channels.iter().enumerate() {
        let conn = conn as u64 + 1;
        let parties: Vec<&String> = c.parties.keys().collect();
        let client = ch.connects.clone().unwrap_or_else(|| parties[0].clone());
        let server = parties
            .iter()
            .find(|p| ***p != client)
            .map_or(client.clone(), |p| (*p).clone());
        routes.push(RouteInfo {
            name: key.clone(),
            listen: "unix:/tmp/listen.sock".into(),
            upstream: "unix:/tmp/up.sock".into(),
            channel: key.clone(),
            client: client.clone(),
            server: server.clone(),
            contract_json: record::contract_document(c),
            ..Default::default()
        });
        let mut ins = Inspector::new(
            wire.clone(),
            key,
            conn,
            key,
            (&client, &server),
            Mode::Observe,
        )
        .expect("inspector");
        recs.push(Record::note(key, conn, "connected from test"));
        if ch.json.is_none() && ch.binding.is_none() {
            for seq in 0..3u64 {
                let frame = BinaryFrame {
                    fields: header_values(ch, 7, seq),
                    payload: vec![seq as u8; 100 + seq as usize].into(),
                };
                let i = ins.data_frame(Dir::Up, &frame, Default::default(), Instant::now());
                recs.push(Record::inspected(&frame.payload, &i));
                expect.push(expect_of(&i.event));
            }
        } else {
            for m in c.methods.values().filter(|m| &m.channel == key) {
                for ex in &m.examples {
                    let from = ex.from.clone().unwrap_or_else(|| m.from[0].clone());
                    let dir = if from == client { Dir::Up } else { Dir::Down };
                    let body = serde_json::to_vec(&ex.message).expect("body");
                    let i = ins.frame(dir, &body, Instant::now());
                    recs.push(Record::inspected(&body, &i));
                    expect.push(expect_of(&i.event));
                }
            }
            for (dir, v, piece) in bent(c, key, &client) {
                let body = serde_json::to_vec(&v).expect("body");
                let i = ins.frame(dir, &body, Instant::now());
                recs.push(Record::inspected(&body, &i));
                expect.push(Expect {
                    expert: Some(piece),
                    flagged: true,
                    ..expect_of(&i.event)
                });
            }
            recs.push(Record::frame(key, conn, Dir::Up, key, b"{\"half\":", None));
            expect.push(expert("Not JSON"));
            if let Some((_, limit)) = ch.framing.payload_cap() {
                let cap = contract::wire::framing::limit_bytes(c, limit).expect("cap");
                let mut big = b"{\"pad\":\"".to_vec();
                big.resize(cap as usize + 1 - 2, b'x');
                big.extend_from_slice(b"\"}");
                recs.push(Record::frame(key, conn, Dir::Up, key, &big, None));
                expect.push(expert("over the"));
            }
        }
        recs.push(Record::note(key, conn, "closed"));
    }
    common::write_recording(path, Header::new(c, routes), recs).await;
    expect
}

/// Header values after the length for a binary channel: its credit key (`stream`) and
/// sequence field where the contract names them, else a count.
fn header_values(ch: &contract::model::Channel, stream: u64, seq: u64) -> Vec<u64> {
    let contract::model::Framing::Binary {
        header, sequence, ..
    } = &ch.framing
    else {
        panic!("not binary");
    };
    header[1..]
        .iter()
        .enumerate()
        .map(
            |(i, h)| match (i, sequence.as_deref() == Some(h.name.as_str())) {
                (_, true) => seq,
                (0, false) => stream,
                (i, false) => i as u64,
            },
        )
        .collect()
}

/// Every frame of a contract's examples recording, in tshark: kind, method and stream
/// as the inspector saw them; the bad frames' expert info; a method filter.
async fn examples_dissect(name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = contract_file(name);
    let c = contract::load(&file).expect("contract");
    let recording = dir.path().join("examples.cprec");
    let expect = examples_recording(&c, &recording).await;
    let pcap = dir.path().join("examples.pcapng");
    show_pcap(&recording, &pcap);
    let lua = dissector(dir.path(), &file);
    let p = proto_name(&lua, &c.name.replace('-', "_"));
    // The sequence field of a binary channel, where the contract names one.
    let seq = c.channels.values().find_map(|ch| match &ch.framing {
        contract::model::Framing::Binary { sequence, .. } => sequence.clone(),
        _ => None,
    });
    let fields = [
        format!("{p}.kind"),
        format!("{p}.method"),
        "tcp.stream".into(),
        seq.as_ref()
            .map_or("frame.number".into(), |s| format!("{p}.{s}")),
        "_ws.expert.message".into(),
        format!("{p}.error.category"),
    ];
    let catalog = !c.errors.is_empty();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    let rows = dissect(&lua, &pcap, &p, &fields);
    assert_eq!(
        rows.len(),
        expect.len(),
        "{name}: one dissected packet per recorded frame"
    );
    for (i, (row, want)) in rows.iter().zip(&expect).enumerate() {
        let experts = row.get(4).map(String::as_str).unwrap_or("");
        match want.expert {
            Some(piece) => assert!(
                experts.contains(piece),
                "{name} frame {i}: expected expert info with {piece:?}, got {row:?}"
            ),
            None => {
                assert_eq!(row[0], want.kind, "{name} frame {i}: {row:?}");
                // An answer the inspector could not pair shows the method its own
                // envelope names, if any; every other frame the method the inspector saw.
                if !want.method.is_empty() {
                    assert_eq!(row[1], want.method, "{name} frame {i}: {row:?}");
                }
                // An error's code is looked up in the catalog: its category shows.
                if catalog && want.kind == "error" && !want.flagged {
                    assert!(!row[5].is_empty(), "{name} frame {i}: no category: {row:?}");
                }
                assert!(
                    want.flagged || EXPERTS.iter().all(|e| !experts.contains(e)),
                    "{name} frame {i}: a frame the proxy passed raised {experts}"
                );
            }
        }
        if let (Some((_, n)), Some(_)) = (want.stream, &seq) {
            assert_eq!(row[3], n.to_string(), "{name} frame {i}: seq");
        }
    }
    // A display filter on fields selects exactly the frames it names.
    let first = expect
        .iter()
        .find(|e| !e.method.is_empty())
        .expect("a method");
    let filter = format!(
        "{p}.method == \"{}\" && {p}.kind == \"{}\"",
        first.method, first.kind
    );
    let hits = dissect(&lua, &pcap, &filter, &[&format!("{p}.method")]);
    let want = expect
        .iter()
        .filter(|e| e.method == first.method && e.kind == first.kind)
        .count();
    assert_eq!(hits.len(), want, "{name}: {filter}");
}

#[tokio::test]
async fn kernel_examples_dissect_in_tshark() {
    examples_dissect("kernel").await;
}

#[tokio::test]
async fn rukh_examples_dissect_in_tshark() {
    examples_dissect("rukh").await;
}

#[tokio::test]
async fn toolchannel_examples_dissect_in_tshark_through_the_websocket_dissector() {
    examples_dissect("toolchannel").await;
}

#[tokio::test]
async fn xsession_examples_dissect_in_tshark() {
    examples_dissect("xsession").await;
}

#[tokio::test]
async fn mcp_examples_dissect_in_tshark_beside_wiresharks_own_mcp() {
    examples_dissect("mcp").await;
}

#[tokio::test]
async fn a_contract_that_is_not_built_in_dissects_in_tshark() {
    examples_dissect("jobs").await;
}

/// LSP's `header-delimited` framing (`Content-Length:` lines, then the body).
#[tokio::test]
async fn lsp_examples_dissect_in_tshark_through_their_header_lines() {
    examples_dissect("lsp").await;
}

/// The demo's kernel session (a real proxy between a shell and a core, both channels)
/// recorded, exported and dissected: every frame as the proxy saw it, data frames with
/// their stream and seq, each party where the SYN and the contract put it.
#[test]
fn the_demo_recording_dissects_in_tshark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recording = dir.path().join("demo.cprec");
    let out = Command::new(env!("CARGO_BIN_EXE_contract-proxy"))
        .args(["demo", "--record"])
        .arg(&recording)
        .output()
        .expect("demo");
    assert!(
        out.status.success(),
        "demo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut expect = Vec::new();
    let mut senders = Vec::new();
    for r in record::Reader::open(&recording).expect("open") {
        let r = r.expect("record");
        if r.direction().is_none() {
            continue;
        }
        let e = r
            .decoded()
            .and_then(|m| m.get("event").and_then(record::event_from_json))
            .expect("every frame has its event");
        senders.push(e.from.clone());
        expect.push(expect_of(&e));
    }
    let pcap = dir.path().join("demo.pcapng");
    show_pcap(&recording, &pcap);
    let lua = dissector(dir.path(), &contract_file("kernel"));
    let rows = dissect(
        &lua,
        &pcap,
        "kernel",
        &[
            "kernel.kind",
            "kernel.method",
            "kernel.stream_id",
            "kernel.seq",
            "kernel.from",
        ],
    );
    assert_eq!(rows.len(), expect.len(), "one dissected packet per frame");
    for (i, ((row, want), from)) in rows.iter().zip(&expect).zip(&senders).enumerate() {
        assert_eq!(&row[4], from, "frame {i}: sender");
        match want.stream {
            Some((stream, seq)) => assert_eq!(
                (row[2].as_str(), row[3].as_str()),
                (stream.to_string().as_str(), seq.to_string().as_str()),
                "frame {i}"
            ),
            None => assert_eq!(
                (row[0].as_str(), row[1].as_str()),
                (want.kind.as_str(), want.method.as_str()),
                "frame {i}"
            ),
        }
    }
    assert!(
        expect.iter().any(|e| e.stream.is_some()),
        "the demo sends audio"
    );
    let chunks = dissect(
        &lua,
        &pcap,
        "kernel.method == \"stream.chunk\"",
        &["frame.number"],
    );
    let want = expect.iter().filter(|e| e.method == "stream.chunk").count();
    assert!(want > 0);
    assert_eq!(chunks.len(), want, "the issue's own filter");
}

/// A kernel session over TCP between the reference peers (`kernel-peer shell` and
/// `core`), captured by real `tcpdump` on loopback rather than made up from a
/// recording: the same dissector reads it, every request of the shell's script with
/// its answer, each sent by the party the contract names, and nothing flagged.
#[test]
fn a_tcpdump_capture_of_a_kernel_session_dissects_in_tshark() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().expect("tempdir");
    let lua = dissector(dir.path(), &contract_file("kernel"));
    common::cargo_build(&["kernel-peer"]);
    let peer = common::bin_dir().join("kernel-peer");
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    };
    let (control, data) = (port(), port());
    let pcap = dir.path().join("kernel.pcap");
    let mut dump = Command::new("tcpdump")
        .args(["-i", "lo", "-U", "-w"])
        .arg(&pcap)
        .arg(format!("tcp port {control} or tcp port {data}"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump is missing: `scripts/setup.sh apt` installs Debian's tcpdump");
    // tcpdump says where it listens once the capture runs.
    let mut err = BufReader::new(dump.stderr.take().expect("stderr"));
    let mut line = String::new();
    while err.read_line(&mut line).expect("tcpdump stderr") > 0 && !line.contains("listening on") {
        line.clear();
    }
    assert!(
        line.contains("listening on"),
        "tcpdump did not start: {line}"
    );
    let ep = |p: u16| format!("tcp:127.0.0.1:{p}");
    let mut shell = Command::new(&peer)
        .args([
            "shell",
            "--sessions",
            "1",
            "--control",
            &ep(control),
            "--data",
            &ep(data),
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("shell");
    std::thread::sleep(Duration::from_millis(300));
    let mut core = Command::new(&peer)
        .args(["core", "--control", &ep(control), "--data", &ep(data)])
        .stderr(Stdio::null())
        .spawn()
        .expect("core");
    // The shell's script is four requests after hello; wait for their answers.
    let fields = [
        "kernel.kind",
        "kernel.method",
        "kernel.from",
        "_ws.expert.message",
    ];
    let deadline = Instant::now() + LIMIT;
    let rows = loop {
        std::thread::sleep(Duration::from_millis(500));
        let rows = dissect(&lua, &pcap, "kernel", &fields);
        let answers = rows.iter().filter(|r| r[0] == "response").count();
        if answers >= 5 || Instant::now() > deadline {
            break rows;
        }
    };
    let _ = core.kill();
    let _ = core.wait();
    let _ = shell.kill();
    let _ = shell.wait();
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(dump.id().to_string())
        .status();
    let _ = dump.wait();
    let requests: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| r[0] == "request")
        .map(|r| (r[1].as_str(), r[2].as_str()))
        .collect();
    assert_eq!(
        &requests[..5],
        [
            ("hello", "shell"),
            ("command.handle", "shell"),
            ("settings.describe", "shell"),
            ("command.handle", "shell"),
            ("command.handle", "shell"),
        ],
        "{rows:?}"
    );
    let answered: Vec<&str> = rows
        .iter()
        .filter(|r| r[0] == "response")
        .map(|r| r[1].as_str())
        .collect();
    assert!(answered.len() >= 5, "every request answered: {rows:?}");
    assert!(
        rows.iter()
            .filter(|r| r[0] == "response")
            .all(|r| r[2] == "core"),
        "the core answers: {rows:?}"
    );
    for r in &rows {
        assert!(
            !r[3].contains("Not JSON")
                && !r[3].contains("not in the")
                && !r[3].contains("comes from"),
            "a good session raised expert info: {r:?}"
        );
    }
}

/// `run --pcap` writes the capture as frames pass: a rukh exchange through the proxy
/// is in the file, dissected, while the proxy still runs; the stop closes each
/// conversation with its FINs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pcap_writes_the_capture_live() {
    use harness::{ep, frame, read_frame, wait_for};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let lua = dissector(dir.path(), &contract_file("rukh"));
    let (listen, upstream) = (dir.path().join("p.sock"), dir.path().join("ext.sock"));
    let pcap = dir.path().join("live.pcapng");
    let ext = tokio::net::UnixListener::bind(&upstream).expect("bind");
    // An extension that answers each request with an empty result.
    tokio::spawn(async move {
        let Ok((mut s, _)) = ext.accept().await else {
            return;
        };
        let mut len = [0u8; 4];
        while s.read_exact(&mut len).await.is_ok() {
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            if s.read_exact(&mut body).await.is_err() {
                return;
            }
            let req: Value = serde_json::from_slice(&body).expect("json");
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": req["id"], "result": {}});
            let bytes = serde_json::to_vec(&reply).expect("reply");
            if s.write_all(&frame(&bytes)).await.is_err() {
                return;
            }
        }
    });
    let mut p = harness::run(&[
        "--contract",
        "rukh",
        "--client",
        "extension",
        "--pcap",
        pcap.to_str().expect("utf-8"),
        "--listen",
        &ep(&listen),
        "--upstream",
        &ep(&upstream),
    ]);
    wait_for(&listen).await;
    let mut c = tokio::net::UnixStream::connect(&listen)
        .await
        .expect("connect");
    for id in 1..=2 {
        let call = serde_json::json!({"jsonrpc": "2.0", "id": format!("e:{id}"), "method": "rukh.call", "params": {"operation": "fs.read", "version": "1", "input": {}, "timeoutMs": 1000}});
        c.write_all(&frame(serde_json::to_vec(&call).expect("call")))
            .await
            .expect("send");
        read_frame(&mut c).await;
    }
    let _ = p.events(4).await;
    let fields = ["rukh.kind", "rukh.method", "rukh.id"];
    let deadline = Instant::now() + LIMIT;
    let live = loop {
        let rows = dissect(&lua, &pcap, "rukh", &fields);
        if rows.len() >= 4 || Instant::now() > deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let seen: Vec<(&str, &str, &str)> = live
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str(), r[2].as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("request", "rukh.call", "e:1"),
            ("response", "rukh.call", "e:1"),
            ("request", "rukh.call", "e:2"),
            ("response", "rukh.call", "e:2"),
        ],
        "in the file while the proxy runs"
    );
    drop(c);
    p.signal("TERM");
    p.exited().await;
    let fins = dissect(&lua, &pcap, "tcp.flags.fin == 1", &["frame.number"]);
    assert_eq!(fins.len(), 2, "the closed connection's FINs");
}
