//! The conformance suite derived from a contract's data, for contracts with no
//! hand-written suite: MCP over stdio (schema/contracts/mcp.json) against the MCP SDK's
//! FastMCP server, alone and behind the proxy in enforce mode, and LSP
//! (examples/lsp/lsp.json) against a pygls server. The third-party servers fail exactly
//! the checks where they answer otherwise than the contract says; the proxy, enforcing the
//! same contract, supplies the answers the lifecycle, id and violation rules call for.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

/// Each check's id, by outcome ("PASS", "FAIL", "SKIP").
struct Outcomes {
    lines: Vec<(String, String)>,
    stdout: String,
}

impl Outcomes {
    fn with(&self, outcome: &str) -> BTreeSet<String> {
        self.lines
            .iter()
            .filter(|(o, _)| o == outcome)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

fn conformance(contract: &str, target: &str) -> Outcomes {
    let out = Command::new(common::BIN)
        .args(["conformance", "--contract", contract, "--play", "client"])
        .args(["--deadline", "2", "--target", target])
        .output()
        .expect("run conformance");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines = stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let outcome = w.next()?;
            ["PASS", "FAIL", "SKIP"].contains(&outcome).then(|| {
                (
                    outcome.to_string(),
                    w.next().unwrap_or_default().to_string(),
                )
            })
        })
        .collect();
    Outcomes { lines, stdout }
}

fn ids(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn python(script: &str) -> String {
    let py = common::peers_python();
    let path = common::root().join(script);
    format!("{} {}", py.display(), path.display())
}

/// A reply to an id the suite never sent fails the check that waited, and the failure
/// shows that reply, with its bytes, not only the wait.
#[test]
fn a_misdirected_answer_is_shown_where_the_wait_fails() {
    let contract = common::root().join("schema/contracts/mcp.json");
    let server = python("proxy/tests/peers/mcp_misdirect.py");
    let target = format!("exec:{server} {}", contract.display());
    let out = Command::new(common::BIN)
        .args(["conformance", "--contract", "mcp", "--play", "client"])
        .args(["--deadline", "1", "--only", "mcp.derived.call.ping"])
        .args(["--target", &target])
        .output()
        .expect("run conformance");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let fail = stdout
        .split("FAIL mcp.derived.call.ping")
        .nth(1)
        .expect("the ping check fails");
    assert!(fail.contains("came meanwhile: a response to"), "{fail}");
    assert!(fail.contains("never-"), "the bytes: {fail}");
}

/// FastMCP answers a missing resource or prompt with code 0, an unknown method and a
/// request before initialize with -32602, ignores a frame that is not JSON and serves a
/// reused id: each is a failed check, with the rest passing.
#[test]
fn fastmcp_fails_exactly_where_it_answers_otherwise_than_the_contract() {
    let r = conformance("mcp", &format!("exec:{}", python("examples/mcp/server.py")));
    let failed = ids(&[
        "mcp.derived.call.resources/read",
        "mcp.derived.call.prompts/get",
        "mcp.derived.out-of-place.lifecycle",
        "mcp.derived.unknown-method",
        "mcp.derived.parse",
        "mcp.derived.ids.reuse",
    ]);
    assert_eq!(r.with("FAIL"), failed, "{}", r.stdout);
    assert!(
        r.with("PASS").contains("mcp.derived.handshake"),
        "{}",
        r.stdout
    );
    assert!(
        r.with("PASS").contains("mcp.derived.call.tools/call"),
        "{}",
        r.stdout
    );
    assert_eq!(r.with("PASS").len(), 11, "{}", r.stdout);
}

/// The same server behind `contract-proxy run --mode enforce`: the engine answers the
/// out-of-place request and the reused id, the wire layer the unknown method and the bad
/// frame, all from the contract. Only the server's own code-0 answers still fail (the proxy
/// flags an answer; it does not rewrite it).
#[test]
fn fastmcp_behind_the_enforcing_proxy_passes_the_rule_checks() {
    let upstream = python("examples/mcp/server.py").replace(' ', "\\ ");
    let target = format!(
        "exec:{} run --contract mcp --listen stdio --mode enforce --upstream exec:{upstream}",
        common::BIN
    );
    let r = conformance("mcp", &target);
    let failed = ids(&[
        "mcp.derived.call.resources/read",
        "mcp.derived.call.prompts/get",
    ]);
    assert_eq!(r.with("FAIL"), failed, "{}", r.stdout);
    assert_eq!(r.with("PASS").len(), 15, "{}", r.stdout);
}

/// LSP's lifecycle moves on the answer to initialize: the suite asks, awaits, sends
/// `initialized`, then calls. pygls answers a request before initialize with -32603, not
/// ServerNotInitialized, and answers neither an unknown method nor a frame that is not JSON.
#[test]
fn pygls_passes_the_lifecycle_and_calls_of_the_lsp_contract() {
    let contract = common::root().join("examples/lsp/lsp.json");
    let target = format!("exec:{}", python("examples/lsp/server.py"));
    let r = conformance(&contract.display().to_string(), &target);
    let passed = ids(&[
        "lsp.derived.handshake",
        "lsp.derived.call.shutdown",
        "lsp.derived.call.textDocument/hover",
    ]);
    let failed = ids(&[
        "lsp.derived.out-of-place.lifecycle",
        "lsp.derived.unknown-method",
        "lsp.derived.parse",
    ]);
    assert_eq!(r.with("PASS"), passed, "{}", r.stdout);
    assert_eq!(r.with("FAIL"), failed, "{}", r.stdout);
}

/// The derived suite is listed like any other, and a party the contract lacks is a usage error.
#[test]
fn the_derived_suite_lists_and_refuses_an_unknown_party() {
    let list = |role: &str| {
        Command::new(common::BIN)
            .args(["conformance", "--contract", "mcp", "--play", role, "--list"])
            .output()
            .expect("list")
    };
    let out = list("client");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mcp.derived.call.tools/call"), "{text}");
    let out = list("nobody");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("client"));
}

/// `--derived` runs the derived suite for a contract with a hand-written one too: rukh's
/// core walks the session machine to Running and gets a call check for each other request
/// it sends, and the probes its contract answers with a reply (rukh's id and parse rules
/// end the session instead: not probed).
#[test]
fn derived_lists_the_data_suite_of_a_built_in_contract() {
    let out = Command::new(common::BIN)
        .args([
            "conformance",
            "--contract",
            "rukh",
            "--play",
            "core",
            "--derived",
            "--list",
        ])
        .output()
        .expect("list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let ids: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The handshake walks to Running through the one invoke; the core's other
    // requests each get a call check there.
    assert!(
        text.contains("reaches `Running`"),
        "the walk ends where the session runs: {text}"
    );
    assert!(ids.contains("rukh.derived.call.rukh.ui.event"), "{text}");
    assert!(!ids.contains("rukh.derived.call.rukh.invoke"), "{text}");
    assert!(!ids.contains("rukh.derived.ids.reuse"), "{text}");
    assert!(!ids.contains("rukh.derived.parse"), "{text}");
}
