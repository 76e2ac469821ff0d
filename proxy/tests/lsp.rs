//! A contract with `header-delimited` framing (examples/lsp/lsp.json, written from the
//! public LSP specification, not one of the built-in four) against a real language
//! server built with pygls: every frame the server writes decodes through the
//! contract's codec (its Content-Type header checked against the contract's list) and
//! classifies as a contract message, requests are answered, and `exit` after `shutdown`
//! ends the server with the contract's clean exit code.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use contract::io::Connection;
use contract::model::{Kind, Part};
use contract::wire::{Message, Wire};
use serde_json::Value;

/// How long one answer from the server may take (a cold Python start included).
const ANSWER: Duration = Duration::from_secs(20);

fn contract_path() -> PathBuf {
    common::root().join("examples/lsp/lsp.json")
}

/// The client's first call example of `method`, as the contract writes it.
fn call(c: &contract::Contract, method: &str) -> Value {
    c.methods[method]
        .examples
        .iter()
        .find(|e| e.part == Part::Call)
        .map(|e| e.message.clone())
        .unwrap_or_else(|| panic!("{method} has a call example"))
}

async fn next<T>(conn: &mut Connection<T>) -> Message
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::time::timeout(ANSWER, conn.recv())
        .await
        .expect("the server answers in time")
        .expect("a frame the contract accepts")
        .expect("the server is still there")
}

/// What the editor sends before `exit`, in order.
const SESSION: [&str; 5] = [
    "initialize",
    "initialized",
    "textDocument/didOpen",
    "textDocument/hover",
    "shutdown",
];

/// The editor's side of a short session: initialize, open a document, hover, shut
/// down, exit. Every frame the other side writes must pass the contract.
async fn editor_session<T>(c: &contract::Contract, io: T)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let wire = Arc::new(Wire::new(Arc::new(c.clone())).expect("compiles"));
    let mut conn =
        Connection::new(io, wire, "stdio", "client", "server").expect("a stream channel");
    let mut seen: Vec<String> = Vec::new();
    for method in SESSION {
        let sent = conn.send(&call(c, method)).await.expect("a valid call");
        if sent.kind != Kind::Request {
            continue;
        }
        loop {
            let m = next(&mut conn).await;
            let name = m.method.clone().unwrap_or_default();
            if m.kind == Kind::Response && m.correlation == sent.id {
                assert_eq!(name, method, "the answer is correlated to its request");
                break;
            }
            assert!(m.kind != Kind::Error, "{method} failed: {}", m.value);
            seen.push(name);
        }
    }
    assert!(
        seen.iter().any(|m| m == "textDocument/publishDiagnostics"),
        "didOpen published diagnostics the contract accepts: {seen:?}"
    );
    conn.send(&call(c, "exit")).await.expect("a valid exit");
}

fn server_command() -> String {
    format!(
        "{} {}",
        common::peers_python().display(),
        common::root().join("examples/lsp/server.py").display()
    )
}

/// Wait for `child` and check it ended with the contract's clean exit code.
async fn exits_clean(c: &contract::Contract, child: &mut tokio::process::Child) {
    let status = tokio::time::timeout(ANSWER, child.wait())
        .await
        .expect("the process exits")
        .expect("wait");
    let clean = c.code("exitCodes", "clean").expect("a clean exit code");
    assert_eq!(status.code().map(Value::from), Some(clean.value.clone()));
}

#[tokio::test]
async fn a_pygls_server_speaks_the_lsp_contract() {
    let c = contract::load(&contract_path()).expect("the LSP contract loads");
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &format!("exec {}", server_command())])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the pygls server");
    let io = tokio::io::join(
        child.stdout.take().expect("stdout"),
        child.stdin.take().expect("stdin"),
    );
    editor_session(&c, io).await;
    exits_clean(&c, &mut child).await;
}

/// The proxy launched in the server's place, as an editor would be configured to: it
/// relays the session over stdio, passes the server's exit code on, and its log judges
/// every frame of both directions `ok`.
#[tokio::test]
async fn the_proxy_stands_in_for_the_server_with_no_violation() {
    let c = contract::load(&contract_path()).expect("the LSP contract loads");
    let contract = contract_path();
    let upstream = format!("exec:{}", server_command());
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("capture.pcapng");
    let mut child = tokio::process::Command::new(common::BIN)
        .arg("run")
        .arg("--contract")
        .arg(&contract)
        .args([
            "--listen",
            "stdio",
            "--upstream",
            &upstream,
            "--log",
            "json",
        ])
        .arg("--pcap")
        .arg(&pcap)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start contract-proxy");
    let mut log = child.stderr.take().expect("stderr");
    let io = tokio::io::join(
        child.stdout.take().expect("stdout"),
        child.stdin.take().expect("stdin"),
    );
    editor_session(&c, io).await;
    exits_clean(&c, &mut child).await;
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut log, &mut text)
        .await
        .expect("the log");
    let verdicts: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("verdict").is_some())
        .collect();
    let logged: Vec<(&str, &str)> = verdicts
        .iter()
        .filter_map(|v| Some((v["dir"].as_str()?, v["method"].as_str()?)))
        .collect();
    for up in SESSION.iter().chain(["exit"].iter()) {
        assert!(logged.contains(&("up", *up)), "{up} logged: {logged:?}");
    }
    assert!(
        logged.contains(&("down", "textDocument/publishDiagnostics")),
        "{logged:?}"
    );
    let bad: Vec<&Value> = verdicts
        .iter()
        .filter(|v| v["verdict"]["verdict"] != "ok")
        .collect();
    assert!(bad.is_empty(), "violations: {bad:?}");
    // The session's capture reads in tshark as the proxy logged it (header-delimited).
    let log = dir.path().join("proxy.jsonl");
    std::fs::write(&log, &text).expect("write the log");
    common::pcap_check(&contract, &pcap, &log);
}

#[test]
fn the_lsp_contract_checks_clean() {
    common::cargo_build(&["contractgen"]);
    let out = std::process::Command::new(common::bin_dir().join("contractgen"))
        .arg("check")
        .arg(contract_path())
        .output()
        .expect("run contractgen");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
