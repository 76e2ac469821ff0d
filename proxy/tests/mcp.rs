//! MCP over stdio (schema/contracts/mcp.json, written from the public MCP specification)
//! enforced by the generic policy engine between the real MCP Python SDK's client and a
//! FastMCP server (examples/mcp): no MCP-specific Rust runs. The client launches the
//! proxy as its server, as an MCP host would be configured to; each scenario prints a
//! JSON summary, and the proxy's JSON log shows every ruling. Every code asserted is
//! read from the contract.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use contract::Contract;
use contract::model::Kind;
use serde_json::Value;

fn contract_path() -> PathBuf {
    common::root().join("schema/contracts/mcp.json")
}

fn mcp() -> Contract {
    contract::load(&contract_path()).expect("the MCP contract loads")
}

/// Run scenario `name` of examples/mcp/client.py in enforce mode: its summary and the
/// proxy's log events.
fn scenario(name: &str, server_args: &[&str]) -> (Value, Vec<Value>) {
    let dir = tempfile::tempdir().expect("tempdir");
    scenario_in(dir.path(), name, server_args)
}

/// [`scenario`], its files in `dir`: the proxy's log `proxy.jsonl`, and its capture
/// `capture.pcapng` (`run --pcap`).
fn scenario_in(dir: &Path, name: &str, server_args: &[&str]) -> (Value, Vec<Value>) {
    let log = dir.join("proxy.jsonl");
    let out = Command::new(common::peers_python())
        .env("PCAP", dir.join("capture.pcapng"))
        .arg(common::root().join("examples/mcp/client.py"))
        .args([name, common::BIN])
        .arg(contract_path())
        .arg("enforce")
        .arg(&log)
        .args(server_args)
        .output()
        .expect("run the MCP SDK client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{name}: no summary in {stdout}"));
    let events = std::fs::read_to_string(&log)
        .expect("proxy log")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (summary, events)
}

/// The frame events (not the connection notes) whose verdict is not `ok`.
fn violations(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e.get("verdict").is_some() && e["verdict"]["verdict"] != "ok")
        .collect()
}

#[test]
fn a_whole_sdk_session_passes_enforcement_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (summary, events) = scenario_in(dir.path(), "session", &[]);
    // Its capture reads in tshark, with the contract's generated dissector, frame by
    // frame as the proxy logged it (the check the reference peers' scripts run).
    common::pcap_check(
        &contract_path(),
        &dir.path().join("capture.pcapng"),
        &dir.path().join("proxy.jsonl"),
    );
    assert_eq!(summary["server"], "contract-mcp-example", "{summary}");
    assert_eq!(
        summary["completion"],
        serde_json::json!(["python", "pytorch"])
    );
    assert!(events.len() > 40, "{} events", events.len());
    assert_eq!(violations(&events), Vec::<&Value>::new());
}

#[test]
fn the_rate_limit_refuses_calls_past_the_burst_and_passes_the_rest_with_their_answers() {
    let c = mcp();
    let limits = c.evaluated_limits();
    let burst = limits.rate("toolsCallRate").expect("a rate").burst as usize;
    let code = limits.action_code("toolsCallRate").expect("a code").clone();
    let (summary, events) = scenario("burst", &[]);
    let echoed = summary["echoed"].as_array().expect("echoed").len();
    let errors = summary["errors"].as_array().expect("errors");
    assert_eq!(echoed, burst, "{summary}");
    assert_eq!(echoed + errors.len(), 8, "{summary}");
    assert!(errors.iter().all(|e| *e == code), "{summary}");
    // The admitted calls' answers reached the client (`echoed`, above), and the log shows
    // each of them passing. (The FastMCP child shares the proxy's stderr: a log line written
    // in two calls once took the child's output in its middle and stopped parsing.)
    let answers = events
        .iter()
        .filter(|e| e["method"] == "tools/call" && e["kind"] == "response")
        .filter(|e| e["verdict"]["verdict"] == "ok")
        .count();
    assert_eq!(answers, burst, "the admitted calls' answers all pass");
    let refused: Vec<_> = violations(&events)
        .into_iter()
        .map(|e| e["verdict"]["class"].clone())
        .collect();
    assert_eq!(refused, vec![Value::from("limit.rate"); 8 - burst]);
}

#[test]
fn the_lifecycle_refuses_calls_before_initialize_and_a_second_initialize() {
    let c = mcp();
    let lifecycle = c.machine("lifecycle").expect("the lifecycle machine");
    let code = lifecycle
        .out_of_place
        .as_ref()
        .and_then(|a| a.code.clone())
        .expect("an out-of-place code");
    let (summary, events) = scenario("early", &[]);
    assert_eq!(summary["before"], code, "{summary}");
    assert_eq!(summary["first"], true, "{summary}");
    assert_eq!(summary["second"], code, "{summary}");
    let out_of_place: Vec<_> = violations(&events)
        .into_iter()
        .map(|e| (e["method"].clone(), e["verdict"]["class"].clone()))
        .collect();
    assert_eq!(
        out_of_place,
        [
            (
                Value::from("tools/call"),
                Value::from("machine.out-of-place")
            ),
            (
                Value::from("initialize"),
                Value::from("machine.out-of-place")
            ),
        ]
    );
}

#[test]
fn a_method_needing_a_capability_the_server_did_not_declare_is_flagged() {
    let c = mcp();
    let method = "completion/complete";
    let cap = c.methods[method].capability.clone().expect("a capability");
    assert_eq!(c.methods[method].kind, Kind::Request);
    let (summary, events) = scenario("complete", &["--no-completions"]);
    let declared = summary["declared"].as_array().expect("declared");
    assert!(!declared.contains(&Value::from(cap.as_str())), "{summary}");
    let flagged: Vec<_> = violations(&events);
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0]["method"], method);
    assert_eq!(flagged[0]["verdict"]["class"], "capability.undeclared");
    assert_eq!(flagged[0]["action"], "capability.undeclared: flagged");
    // Flagged, not refused: the server itself answers (it does not know the method).
    assert!(summary["completion"].is_i64(), "{summary}");
}

#[test]
fn an_error_code_the_contract_does_not_know_is_flagged() {
    let c = mcp();
    let (summary, events) = scenario("missing", &[]);
    let code = summary["error"].clone();
    assert!(
        c.error_for(&code).is_none(),
        "{summary}: the SDK's code is not MCP's"
    );
    let flagged = violations(&events);
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0]["method"], "resources/read");
    assert_eq!(flagged[0]["kind"], "error");
    assert_eq!(flagged[0]["verdict"]["class"], "errors.unknown-code");
}
