//! The conformance suite derived from a contract's data, for contracts with no
//! hand-written suite: MCP over stdio (schema/contracts/mcp.json) against the MCP SDK's
//! FastMCP server, alone and behind the proxy in enforce mode, and LSP
//! (examples/lsp/lsp.json) against a pygls server. The third-party servers fail exactly
//! the checks where they answer otherwise than the contract says; the proxy, enforcing the
//! same contract, supplies the answers the lifecycle, id and violation rules call for. A
//! custom envelope (the kernel's control channel) gets the same suite: its reference peers
//! pass it playing either party.

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
    conformance_as("client", contract, target)
}

fn conformance_as(role: &str, contract: &str, target: &str) -> Outcomes {
    run(&["--contract", contract, "--play", role, "--target", target])
}

/// Only the `only` checks, playing the client against `target`, with `env` set.
fn client_only(contract: &str, target: &str, only: &str, env: &[(&str, &str)]) -> Outcomes {
    let args = [
        "--contract",
        contract,
        "--play",
        "client",
        "--target",
        target,
    ];
    run_env(&[&args[..], &["--only", only]].concat(), env)
}

fn run(args: &[&str]) -> Outcomes {
    run_env(args, &[])
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> Outcomes {
    let out = Command::new(common::BIN)
        .envs(env.iter().copied())
        .args(["conformance", "--deadline", "2"])
        .args(args)
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

/// `r` failed exactly `checks`, and its output says `says`.
fn fails_exactly(r: &Outcomes, checks: &[&str], says: &str) {
    assert_eq!(r.with("FAIL"), ids(checks), "{}", r.stdout);
    assert!(r.stdout.contains(says), "{says:?}: {}", r.stdout);
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

/// Every check FastMCP (MCP SDK 1.30.0) fails, each a deviation from the contract shown
/// with its bytes: code 0 for a missing resource or prompt; -32602 for an unknown method, a
/// wrong-way request and a request before initialize; no answer to a frame that is not JSON,
/// breaks the strict profile, is a batch, is no message or lacks `jsonrpc`; a duplicate
/// key, an invalid UTF-8
/// byte, 2^53, 1e400, a line over the cap and a reused id all served; no tools/call refused
/// beyond the contract's per-connection bucket.
const FASTMCP_FAILS: [&str; 19] = [
    "mcp.derived.call.resources/read",
    "mcp.derived.call.prompts/get",
    "mcp.derived.out-of-place.lifecycle",
    "mcp.derived.parse",
    "mcp.derived.json.duplicate-key",
    "mcp.derived.json.bom",
    "mcp.derived.json.lone-surrogate",
    "mcp.derived.json.invalid-utf8",
    "mcp.derived.json.unsafe-integer",
    "mcp.derived.json.non-finite",
    "mcp.derived.json.trailing",
    "mcp.derived.json.not-an-object",
    "mcp.derived.frame.over-cap",
    "mcp.derived.invalid",
    "mcp.derived.invalid.missing",
    "mcp.derived.unknown-method",
    "mcp.derived.wrong-direction",
    "mcp.derived.rate.toolsCallRate",
    "mcp.derived.ids.reuse",
];

/// FastMCP fails exactly where it answers otherwise than the contract, and passes the rest:
/// the handshake, the calls, the largest safe integers, a line at the cap, an ignored
/// unknown notification, invalid params, the version it was offered.
#[test]
fn fastmcp_fails_exactly_where_it_answers_otherwise_than_the_contract() {
    let r = conformance("mcp", &format!("exec:{}", python("examples/mcp/server.py")));
    assert_eq!(r.with("FAIL"), ids(&FASTMCP_FAILS), "{}", r.stdout);
    for passed in [
        "mcp.derived.handshake",
        "mcp.derived.call.tools/call",
        "mcp.derived.json.safe-integer",
        "mcp.derived.frame.at-cap",
        "mcp.derived.unknown-notification",
        "mcp.derived.invalid-params",
        "mcp.derived.version.mcpProtocolVersion",
        "mcp.derived.version.mcpProtocolVersion.foreign",
    ] {
        assert!(r.with("PASS").contains(passed), "{passed}: {}", r.stdout);
    }
    assert!(
        r.with("PASS").contains("mcp.derived.behaviour"),
        "{}",
        r.stdout
    );
    assert_eq!(r.with("PASS").len(), 23, "{}", r.stdout);
    // A probe's failure shows what the suite sent, then what came back.
    let reuse = r.stdout.split("FAIL mcp.derived.json.duplicate-key").nth(1);
    let reuse = reuse
        .and_then(|s| s.split("\nFAIL").next())
        .unwrap_or_default();
    assert!(reuse.contains("the suite sent"), "{reuse}");
    assert!(
        reuse.contains("{\"jsonrpc\":\"2.0\",\"jsonrpc\""),
        "{reuse}"
    );
}

/// The same server behind `contract-proxy run --mode enforce`: the engine answers the
/// out-of-place request, the reused id and the calls beyond the rate's bucket, the wire
/// layer every bad frame (not JSON, the strict profile, a batch, no message, an unknown or
/// wrong-way method) and drops the connection on a line over the cap, all from the contract. Only the server's own code-0
/// answers still fail (the proxy flags an answer; it does not rewrite it).
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
    assert_eq!(r.with("PASS").len(), 40, "{}", r.stdout);
    assert!(
        r.stdout.contains("refused with -32029 (bucket 5)"),
        "{}",
        r.stdout
    );
}

/// The MCP SDK's client (a host script) launched with socat as its server command: socat
/// bridges its stdio to the suite, which plays the server. The suite expects initialize,
/// answers it with the contract's example, expects notifications/initialized, then sends
/// each server request (ping, roots/list, sampling, elicitation) and probes the bad-input
/// rules. The client passes the handshake and the calls, disconnects when answered with a
/// protocol version it cannot speak, serves the largest safe integers and a line at the
/// cap, ignores
/// an unknown notification and answers invalid params with -32602. Like the SDK's server,
/// it answers nothing that is not JSON, a BOM, a surrogate, trailing bytes, a batch or a
/// request without `jsonrpc`,
/// serves a duplicate key, 2^53, 1e400, a reused id and a line over the cap, answers
/// sampling before initialize and before its initialize is answered, and dies on an
/// invalid UTF-8 byte.
#[test]
fn the_mcp_sdk_client_is_checked_with_the_suite_playing_the_server() {
    let target = format!(
        "exec:{} socat STDIO {{control}}",
        python("proxy/tests/peers/mcp_host.py")
    );
    let r = conformance_as("server", "mcp", &target);
    let passed = ids(&[
        "mcp.derived.handshake",
        "mcp.derived.call.ping",
        "mcp.derived.call.roots/list",
        "mcp.derived.call.sampling/createMessage",
        "mcp.derived.call.elicitation/create",
        "mcp.derived.json.safe-integer",
        "mcp.derived.frame.at-cap",
        "mcp.derived.frame.split",
        "mcp.derived.frame.merged",
        "mcp.derived.unknown-notification",
        "mcp.derived.invalid-params",
        "mcp.derived.unknown-member",
        "mcp.derived.capabilities",
        "mcp.derived.messages",
        "mcp.derived.behaviour",
        "mcp.derived.version.mcpProtocolVersion.refused",
    ]);
    assert_eq!(r.with("PASS"), passed, "{}", r.stdout);
    assert_eq!(r.with("FAIL").len(), 17, "{}", r.stdout);
    assert!(
        r.stdout.contains("[Expect(\"initialize\"), Answer(\"initialize\"), Expect(\"notifications/initialized\")]"),
        "{}",
        r.stdout
    );
}

/// The same client with `contract-proxy run --mode enforce` as its server command, the
/// proxy dialing the suite: every check passes, the proxy answering for the client what
/// the contract prescribes.
#[test]
fn the_mcp_sdk_client_behind_the_enforcing_proxy_passes_every_check() {
    let target = format!(
        "exec:{} {} run --contract mcp --listen stdio --mode enforce --upstream {{control}}",
        python("proxy/tests/peers/mcp_host.py"),
        common::BIN
    );
    let r = conformance_as("server", "mcp", &target);
    assert!(r.with("FAIL").is_empty(), "{}", r.stdout);
    assert_eq!(r.with("PASS").len(), 33, "{}", r.stdout);
}

/// LSP's lifecycle moves on the answer to initialize: the suite asks, awaits, sends
/// `initialized`, then calls. Opening a document with a TODO (the contract's `diagnostics`
/// cue) gets pygls's publishDiagnostics. pygls serves a body nested exactly to the contract's depth
/// cap (128, one more than serde_json's own guard allowed the suite's wire) and a body at
/// the size cap, and ignores an unknown notification. It answers a request before initialize with -32603, not
/// ServerNotInitialized, and serves one between the initialize result and `initialized`; answers none of a bad frame, a batch, an unknown method, an object
/// that is no message, a request without `jsonrpc` or invalid params (it shows a message
/// instead); serves a body nested
/// deeper than the contract's cap; and reads a body over the cap. On `exit` after `shutdown`
/// it ends the connection and exits 0, as the lifecycle's `ends` says; on `exit` without
/// `shutdown` it exits 0 too, where LSP says 1: pygls computes 1, but its `sys.exit` inside
/// the event loop is caught by `start_io`'s `except SystemExit: pass`. That shows in each
/// state an `exit` without `shutdown` may come in: before initialize, before `initialized`
/// and running, each its own transition of the lifecycle.
#[test]
fn pygls_passes_the_lifecycle_and_calls_of_the_lsp_contract() {
    let contract = common::root().join("examples/lsp/lsp.json");
    let target = format!("exec:{}", python("examples/lsp/server.py"));
    let r = conformance(&contract.display().to_string(), &target);
    let passed = ids(&[
        "lsp.derived.handshake",
        "lsp.derived.call.shutdown",
        "lsp.derived.call.textDocument/hover",
        "lsp.derived.json.depth.at-cap",
        "lsp.derived.frame.at-cap",
        "lsp.derived.frame.split",
        "lsp.derived.frame.merged",
        "lsp.derived.unknown-notification",
        "lsp.derived.unknown-member",
        "lsp.derived.messages",
        "lsp.derived.cue.diagnostics",
        "lsp.derived.behaviour",
        "lsp.derived.end.lifecycle.shuttingDown",
    ]);
    let failed = ids(&[
        "lsp.derived.end.lifecycle.running",
        "lsp.derived.end.lifecycle.initializing",
        "lsp.derived.end.lifecycle.starting",
        "lsp.derived.out-of-place.lifecycle",
        "lsp.derived.out-of-place.lifecycle.initializing",
        "lsp.derived.parse",
        "lsp.derived.json.depth",
        "lsp.derived.json.not-an-object",
        "lsp.derived.frame.over-cap",
        "lsp.derived.invalid",
        "lsp.derived.invalid.missing",
        "lsp.derived.unknown-method",
        "lsp.derived.invalid-params",
    ]);
    assert_eq!(r.with("PASS"), passed, "{}", r.stdout);
    assert_eq!(r.with("FAIL"), failed, "{}", r.stdout);
}

/// The kernel's control channel is an envelope (`type`, `id`, `correlation_id`,
/// `payload`), not JSON-RPC: the derived suite reads and writes messages where its binding
/// says, takes its string ids from the examples (`s-0001` → `s-1`) and its error codes from
/// the payload. Playing the shell it awaits hello's answer; playing the core it expects
/// hello and answers it, the walk's only step being the answer (the machine moves on it).
/// The reference peers pass every check: the outOfPlace probe (the shell mirrors the
/// session machine and answers protocol.not_ready too), every bad-input family, and an
/// oversize control frame, which they skip unread and report with protocol.frame_too_large.
#[test]
fn the_kernel_reference_peers_pass_every_derived_check_of_both_roles() {
    let peer = kernel_peer();
    for (play, target, checks) in [
        (
            "shell",
            format!("exec:{peer} core --control {{control}} --data {{data}}"),
            38,
        ),
        (
            "core",
            format!("exec:{peer} shell --control {{control}} --data {{data}}"),
            29,
        ),
    ] {
        let r = kernel_derived(play, &target);
        assert_eq!(r.with("PASS").len(), checks, "{play}: {}", r.stdout);
        assert!(
            r.with("FAIL").is_empty() && r.with("SKIP").is_empty(),
            "{}",
            r.stdout
        );
        for family in [
            "handshake",
            "out-of-place.session",
            "frame.over-cap",
            "json.null",
            "ids.reuse",
        ] {
            let id = format!("kernel.derived.{family}");
            assert!(r.with("PASS").contains(&id), "{play}: {id}: {}", r.stdout);
        }
        // The suite grants the core's speech stream its credit; the shell sends no data
        // the suite could grant (the core's side of 15.5 stays hand-written).
        let credit = "kernel.derived.credit.streams".to_string();
        assert_eq!(
            r.with("PASS").contains(&credit),
            play == "shell",
            "{}",
            r.stdout
        );
    }
}

/// A core that answers settings.describe with a control frame over the cap
/// (`--break oversize`): the suite skips the frame unread, as the contract tells a
/// receiver to, and keeps the session; exactly the check waiting for that answer fails,
/// saying what came instead.
#[test]
fn an_oversize_frame_from_the_implementation_fails_only_the_check_it_answers() {
    let r = kernel_core_breaking("oversize", "kernel.derived.call.settings.describe");
    let kernel = contract::builtin("kernel").expect("kernel");
    let cap = kernel
        .evaluated_limits()
        .cap("controlPayloadMax")
        .expect("the cap");
    assert!(
        r.stdout.contains("came meanwhile, rejected: frame of ")
            && r.stdout
                .contains(&format!("bytes exceeds the {cap}-byte cap, skipped unread")),
        "{}",
        r.stdout
    );
}

/// A core whose invalid-params error carries another category than the catalog's
/// (`--break category`): the suite's wire holds every error answer to the catalog, so the
/// one check that draws that answer fails, saying which member disagrees.
#[test]
fn an_error_off_the_catalog_fails_the_check_that_drew_it() {
    let r = kernel_core_breaking("category", "kernel.derived.invalid-params");
    assert!(
        r.stdout.contains("breaks the contract: error"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("category is"), "{}", r.stdout);
}

/// A core that sends an event the contract rejects (a task.progress without its members)
/// after answering a command: the messages check, which judges every message of the
/// implementation's own, fails alone, with the event's bytes.
#[test]
fn an_invalid_message_of_its_own_fails_only_the_messages_check() {
    let r = kernel_core_breaking("event", "kernel.derived.messages");
    assert!(
        r.stdout.contains("\"method\":\"task.progress\""),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("task_id"), "{}", r.stdout);
}

/// A core that asks the shell's permission though the shell declared no `permissions`
/// (the capabilities check's session declares none): that check fails alone.
#[test]
fn a_capability_the_suite_did_not_declare_fails_only_the_capabilities_check() {
    let r = kernel_core_breaking("capability", "kernel.derived.capabilities");
    assert!(r.stdout.contains("needs `permissions`"), "{}", r.stdout);
}

/// A core that opens an audio.output stream though the shell declared no `audio.output`:
/// the method stream.open needs no capability of its own, its kind does (kernel.json's
/// `needs`, K-46), and the capabilities check, which sends every cue, fails alone, naming
/// the entry.
#[test]
fn a_capability_a_message_needs_by_its_values_fails_only_the_capabilities_check() {
    let r = kernel_core_breaking("speech-undeclared", "kernel.derived.capabilities");
    let c = contract::builtin("kernel").expect("kernel");
    let open = serde_json::json!({"method": "stream.open", "payload": {"kind": "audio.output"}});
    let needed = c.needed_capabilities("stream.open", &open);
    let (cap, entry) = needed.first().expect("audio.output needs a capability");
    assert!(
        r.stdout.contains(&format!("needs `{cap}` ({entry})")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(r#""kind":"audio.output""#),
        "{}",
        r.stdout
    );
}

/// A core that streams a chunk after its stream's end (one of the misses of the independent
/// run): the policy engine the proxy enforces with, judging the session, rules the chunk out
/// of place in the text-stream machine, and only the behaviour check fails, with the bytes.
#[test]
fn a_chunk_after_its_stream_ended_fails_only_the_behaviour_check() {
    let r = kernel_core_breaking("after-end", "kernel.derived.behaviour");
    let fail = r
        .stdout
        .split("FAIL kernel.derived.behaviour")
        .nth(1)
        .unwrap_or_default();
    assert!(
        fail.contains("machine.out-of-place: stream.chunk from core in state `done`")
            && fail.contains("(/stateMachines/text-stream)")
            && fail.contains(r#""method":"stream.chunk""#),
        "{}",
        r.stdout
    );
}

/// The contract's cues (kernel.json `cues`, K-43) make the core act where the suite can
/// judge it: a task that ends twice breaks the task machine, and a stream whose chunks leave
/// the command's trace breaks the cue's `traced`; each fails only its cue's check.
#[test]
fn a_cue_acted_on_wrongly_fails_only_its_check() {
    let r = kernel_core_breaking("done-twice", "kernel.derived.cue.task");
    assert!(
        r.stdout
            .contains("machine.out-of-place: task.done from core in state `done` of task"),
        "{}",
        r.stdout
    );
    let r = kernel_core_breaking("stream-trace", "kernel.derived.cue.stream");
    assert!(
        r.stdout.contains("stream.chunk carries trace Some(\"t-c-"),
        "{}",
        r.stdout
    );
}

/// The §13 heartbeat as data (kernel.json's silence limits, K-44): a core pinging before
/// its silence ran out fails only the silence check, with the ping's bytes; one that never
/// declares the silent shell dead fails only the dead-peer check.
#[test]
fn a_heartbeat_off_its_timers_fails_only_the_timer_it_breaks() {
    let r = kernel_core_breaking("early-ping", "kernel.derived.timer.heartbeatSilenceSeconds");
    let fail = r.stdout.split("FAIL kernel.derived.timer.").nth(1);
    let fail = fail.unwrap_or_default();
    assert!(
        fail.contains("ping came 0.")
            && fail.contains("before its 1.00 s ran out")
            && fail.contains(r#""method":"ping""#),
        "{}",
        r.stdout
    );
    let r = kernel_core_breaking("immortal", "kernel.derived.timer.deadAfterSilenceSeconds");
    assert!(
        r.stdout.contains("prescribes `drop-connection`"),
        "{}",
        r.stdout
    );
}

/// A contract the project never saw (tests/fixtures/beacon.json) with its clocks and its
/// bad-line count as data: a Python station written from the contract passes every derived
/// check, the timer, count and unissued-answer ones included; beating early fails only the
/// beat's check, never hanging up only the idle one, ignoring the bad-line count only the
/// count's, refusing an answer its id rule says to drop only the id check, answering a
/// retired method otherwise than its one error only that method's call check, serving a
/// second tune only the `link` machine's refusal check, serving a tune over its own cap
/// only that cap's check, chiming at a client that does not hear chimes (a capability the
/// beat needs by its kind, B-5) only the capabilities check, and so does saying `chime` in
/// the echo's answer to such a client (a capability the answer needs, B-17), refusing an
/// echo with a member
/// its open schema allows (B-6) only the unknown-member check. Its two buckets on ring
/// (B-7), one kept per bell and one for the station, refuse with the same code: each is
/// judged apart from the other (ringRate's rings spread over bells), so a station without
/// either fails exactly that one's check. A tune carries the station's idleSeconds (B-8):
/// the idle clock runs as long as the tune said, and a station ignoring it fails that. A
/// line without `jsonrpc` is refused naming it where the `invalid` entry's `names` points
/// (B-10): a station naming nothing fails only that probe's check, not the bad-line count.
/// A tune names a band every ring repeats (B-12, an agreement): a station ringing on
/// another fails only the agreement's check. A station asking the client's time holds its
/// beats until the answer (B-13, beat's `notWhile`): one beating on fails only that check. A
/// tune hearing a sound the contract does not list gets UNHEARD (B-16, the client's
/// declaration's `unknown`): a station tuning in anyway fails only that check.
#[test]
fn a_contract_of_its_own_gets_its_timers_checked() {
    let contract = common::root().join("proxy/tests/fixtures/beacon.json");
    let contract = contract.display().to_string();
    let station = python("proxy/tests/peers/beacon_station.py");
    let r = conformance(&contract, &format!("exec:{station}"));
    // Its close codes and its upgrade are a WebSocket's only (B-9, B-11): see the test
    // after this one.
    let exits = ids(&[
        "beacon.derived.upgrade.bearer",
        "beacon.derived.exits.closeCodes",
    ]);
    assert!(r.with("FAIL").is_empty(), "{}", r.stdout);
    assert_eq!(r.with("SKIP"), exits, "{}", r.stdout);
    let timers = ids(&[
        "beacon.derived.timer.beatSeconds",
        "beacon.derived.timer.idleSeconds",
        "beacon.derived.count.badLinesMax",
        "beacon.derived.ids.unissued",
        "beacon.derived.refusal.link.tune",
        "beacon.derived.frame.method-cap.tune",
        "beacon.derived.capabilities",
        "beacon.derived.cue.chime",
        "beacon.derived.unknown-member",
        "beacon.derived.rate.bellRate",
        "beacon.derived.rate.ringRate",
        "beacon.derived.agreement.band",
        "beacon.derived.cue.clock",
        "beacon.derived.not-while.beat",
        "beacon.derived.capability.unknown",
    ]);
    assert!(timers.is_subset(&r.with("PASS")), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("spread over 5 values of /params/bell so that bellRate refuses none"),
        "{}",
        r.stdout
    );
    // The buckets' checks alone: the rest of the suite sends no ring twice.
    let rates = "beacon.derived.rate.bellRate,beacon.derived.rate.ringRate";
    for broken in ["bell-rate", "ring-rate"] {
        let target = format!("exec:{station} --break {broken}");
        let r = client_only(&contract, &target, rates, &[]);
        let want = ids(&[&format!(
            "beacon.derived.rate.{}Rate",
            broken.trim_end_matches("-rate")
        )]);
        assert_eq!(r.with("FAIL"), want, "{broken}: {}", r.stdout);
        assert_eq!(r.with("PASS").len(), 1, "{broken}: {}", r.stdout);
    }
    // A station keeping the contract's idleSeconds when its tune carried another (B-8)
    // hangs up before the clock the session agreed on: the idle timer fails, the beat's
    // passes (the timers alone: the rest of the suite pauses less than either).
    let target = format!("exec:{station} --break own-idle");
    let timers = "beacon.derived.timer.beatSeconds,beacon.derived.timer.idleSeconds";
    // At half time the two clocks are 0.5 s apart, the early tolerance 0.25 s: a station
    // late by less than the rest still shows (at a fifth, 0.4 s apart, a loaded machine's
    // 0.16 s made the broken station pass).
    let r = client_only(
        &contract,
        &target,
        timers,
        &[(contract::TIME_SCALE_ENV, "0.5")],
    );
    fails_exactly(
        &r,
        &["beacon.derived.timer.idleSeconds"],
        "before its 2.00 s ran out",
    );
    for (broken, fails) in [
        ("early", "timer.beatSeconds"),
        ("never", "timer.idleSeconds"),
        ("uncounted", "count.badLinesMax"),
        ("answers", "ids.unissued"),
        ("retired", "call.rewind"),
        ("retune", "refusal.link.tune"),
        ("uncapped", "frame.method-cap.tune"),
        ("deaf", "capabilities"),
        ("loud", "capabilities"),
        ("closed-params", "unknown-member"),
        ("unnamed", "invalid.missing"),
        ("any-band", "agreement.band"),
        ("restless", "not-while.beat"),
        ("unheard", "capability.unknown"),
    ] {
        let r = conformance(&contract, &format!("exec:{station} --break {broken}"));
        let want = ids(&[&format!("beacon.derived.{fails}")]);
        assert_eq!(r.with("FAIL"), want, "{broken}: {}", r.stdout);
    }
}

/// The same contract, its station launched serving a WebSocket (`--sockets ws`, B-9): every
/// derived check passes but the byte-stream framing ones, which skip (a message travels
/// whole); each close code the client may end with gets the station's exit the code maps
/// to (`closeCodes` → `stationExit`, the station's table), and a station exiting 0 whatever
/// the code fails that check alone. The station is given a fresh `{token}` per session,
/// which every session's upgrade carries (B-11): one without it, or with another, gets the
/// channel's `upgrade.bearer` refusal, and a station taking any token fails that alone.
#[test]
fn a_contract_of_its_own_gets_its_exits_checked_over_a_websocket() {
    let contract = common::root().join("proxy/tests/fixtures/beacon.json");
    let contract = contract.display().to_string();
    let station = python("proxy/tests/peers/beacon_station.py");
    let over_ws = |extra: &str| {
        let target = format!("exec:{station} --ws {{control}} --token {{token}}{extra}");
        let args = [
            "--contract",
            &contract,
            "--play",
            "client",
            "--target",
            &target,
        ];
        run(&[&args[..], &["--sockets", "ws"]].concat())
    };
    let r = over_ws("");
    assert!(r.with("FAIL").is_empty(), "{}", r.stdout);
    let framing = ids(&["beacon.derived.frame.split", "beacon.derived.frame.merged"]);
    assert_eq!(r.with("SKIP"), framing, "{}", r.stdout);
    assert!(
        r.with("PASS").contains("beacon.derived.exits.closeCodes")
            && r.stdout
                .contains("exited 0 after close 4000; exited 70 after close 4001"),
        "{}",
        r.stdout
    );
    assert!(
        r.with("PASS").contains("beacon.derived.upgrade.bearer"),
        "{}",
        r.stdout
    );
    let r = over_ws(" --break any-token");
    let bearer = ids(&["beacon.derived.upgrade.bearer"]);
    assert_eq!(r.with("FAIL"), bearer, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("the station accepted an upgrade without Authorization (101)"),
        "{}",
        r.stdout
    );
    let r = over_ws(" --break exit");
    let exits = ids(&["beacon.derived.exits.closeCodes"]);
    assert_eq!(r.with("FAIL"), exits, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("the station exited 0 after close 4001; the contract says 70"),
        "{}",
        r.stdout
    );
}

/// The same contract played from the station's side: a tune answered NO_BAND ends the
/// client's session (B-15, the `link` machine's tuned → gone with its `ends`). The derived
/// end check answers the client's tune with the station's error example: a client written
/// from the contract sends nothing more, ends the channel and exits 69 (`clientExit`); one
/// that stays on fails that check. A chime beat to a client whose tune left chime out
/// (B-16, the client's declaration's `undeclared`) makes it hang up: one that takes it
/// fails only that check, and one that hears chimes is not judged by it.
#[test]
fn a_contract_of_its_own_gets_an_error_answer_that_ends_its_client_checked() {
    let contract = common::root().join("proxy/tests/fixtures/beacon.json");
    let contract = contract.display().to_string();
    let client = python("proxy/tests/peers/beacon_client.py");
    let end = "beacon.derived.end.link.tuned";
    let chime = "beacon.derived.capability.undeclared.chime";
    let run_client = |extra: &str| {
        let target = format!("exec:{client}{extra}");
        let args = ["--contract", &contract, "--play", "station"];
        let only = format!("{end},{chime}");
        run(&[&args[..], &["--target", &target, "--only", &only]].concat())
    };
    let r = run_client("");
    assert_eq!(r.with("PASS"), ids(&[end, chime]), "{}", r.stdout);
    assert!(
        r.stdout.contains("tune answered with its error example") && r.stdout.contains("exited 69"),
        "{}",
        r.stdout
    );
    let r = run_client(" --break stays");
    fails_exactly(&r, &[end], "had not ended the channel");
    let r = run_client(" --break any-chime");
    fails_exactly(&r, &[chime], "the contract prescribes `drop-connection`");
    let r = run_client(" --hears chime");
    assert_eq!(r.with("SKIP"), ids(&[chime]), "{}", r.stdout);
}

/// A target that never starts breaks one rule, once: the handshake check fails with the
/// reason, and every other check skips, naming the check that reports it (those that open
/// their own session as well as those that walk the handshake first). A launched target
/// that exits with an error before it connects fails the same way, naming its exit.
#[test]
fn a_target_that_does_not_start_fails_only_the_handshake_check() {
    let contract = common::root().join("proxy/tests/fixtures/beacon.json");
    let r = conformance(&contract.display().to_string(), "exec:/nonexistent/station");
    assert_eq!(
        r.with("FAIL"),
        ids(&["beacon.derived.handshake"]),
        "{}",
        r.stdout
    );
    assert!(r.with("PASS").is_empty(), "{}", r.stdout);
    assert!(r.with("SKIP").len() > 20, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("beacon.derived.handshake reports this: cannot start"),
        "{}",
        r.stdout
    );
    // A launched one that fails before it connects (here: its own usage error) is said to
    // have, with its exit code, instead of a wait for a connection that cannot come.
    let station = python("proxy/tests/peers/beacon_station.py");
    let target = format!("exec:{station} --ws {{control}} --no-such-flag");
    let args = [
        "--contract",
        &contract.display().to_string(),
        "--play",
        "client",
    ];
    let r = run(&[&args[..], &["--target", &target, "--sockets", "ws"]].concat());
    fails_exactly(
        &r,
        &["beacon.derived.handshake"],
        "the target exited with 2 before it connected",
    );
}

/// A contract given as a file, and a server that announces a tools change before it answers
/// initialize: the lifecycle allows that only in `operating`, so the behaviour check fails
/// and names the machine, while the handshake and the messages checks pass (the message is
/// valid; only its place is wrong).
#[test]
fn a_notification_before_the_lifecycle_allows_it_fails_the_behaviour_check() {
    let contract = common::root().join("schema/contracts/mcp.json");
    let path = contract.to_str().expect("utf-8");
    let eager = python("proxy/tests/peers/mcp_eager.py");
    let target = format!("exec:{eager} {path}");
    let checks = "mcp.derived.handshake,mcp.derived.messages,mcp.derived.behaviour";
    let r = run(&[
        "--contract",
        path,
        "--play",
        "client",
        "--only",
        checks,
        "--target",
        &target,
    ]);
    assert_eq!(
        r.with("FAIL"),
        ids(&["mcp.derived.behaviour"]),
        "{}",
        r.stdout
    );
    assert_eq!(r.with("PASS").len(), 2, "{}", r.stdout);
    assert!(
        r.stdout.contains(
            "machine.out-of-place: notifications/tools/list_changed from server in state `initializing` of lifecycle (/stateMachines/lifecycle)"
        ),
        "{}",
        r.stdout
    );
}

/// The Python reference core (examples/kernel/core.py, on the SDK contractgen generates):
/// it asks the shell for its program index before it launches a program, and the suite,
/// waiting for command.handle's answer, answers that request with the shell's result
/// example. It passes every derived check, json.null by its SDK runtime's noNull rule.
#[test]
fn the_python_kernel_core_passes_every_derived_check() {
    let sdk = common::python_sdk("kernel");
    let target = format!(
        "exec:{} --sdk {} --control {{control}} --data {{data}} --ttl 2",
        python("examples/kernel/core.py"),
        sdk.display()
    );
    let r = kernel_derived("shell", &target);
    assert!(r.with("FAIL").is_empty(), "{}", r.stdout);
    assert!(
        r.with("PASS")
            .contains("kernel.derived.call.command.handle")
            && r.with("PASS").contains("kernel.derived.json.null")
            && r.with("PASS").contains("kernel.derived.ids.reuse"),
        "{}",
        r.stdout
    );
    assert!(r.with("SKIP").is_empty(), "{}", r.stdout);
}

/// The derived suite playing the shell against the reference core breaking `rule`: only
/// `check` fails, the other 32 checks pass.
fn kernel_core_breaking(rule: &str, check: &str) -> Outcomes {
    let peer = kernel_peer();
    let target = format!("exec:{peer} core --control {{control}} --data {{data}} --break {rule}");
    let r = kernel_derived("shell", &target);
    assert_eq!(r.with("FAIL"), ids(&[check]), "{rule}: {}", r.stdout);
    assert!(r.lines.len() > 30, "{rule}: {}", r.stdout);
    assert_eq!(
        r.with("PASS").len(),
        r.lines.len() - 1,
        "{rule}: {}",
        r.stdout
    );
    r
}

/// The kernel's derived checks, playing `play` against `target`, with the contract's
/// durations scaled to a fifth (the suite and the peers it launches read the scale), so
/// the heartbeat's timer checks take 4 s rather than 20.
fn kernel_derived(play: &str, target: &str) -> Outcomes {
    let args = [
        "--contract",
        "kernel",
        "--derived",
        "--play",
        play,
        "--target",
        target,
    ];
    run_env(&args, &[(contract::TIME_SCALE_ENV, "0.2")])
}

fn kernel_peer() -> String {
    common::cargo_build(&["kernel-peer"]);
    common::bin_dir().join("kernel-peer").display().to_string()
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
/// it sends, and a probe for each rule about bad input, whatever its action.
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
    // The handshake walks to Running through the one invoke (R-43); the core's other
    // requests each get a call check there.
    assert!(
        text.contains("reaches `Running`"),
        "the walk ends where the session runs: {text}"
    );
    assert!(ids.contains("rukh.derived.call.rukh.ui.event"), "{text}");
    assert!(!ids.contains("rukh.derived.call.rukh.invoke"), "{text}");
    // rukh's id and parse rules end the session: the channel's end is what is checked.
    assert!(
        text.contains(
            "rukh.derived.ids.reuse  a request from the core reusing an id gets `fail` -32000"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "rukh.derived.parse  a frame that is not JSON gets `fail` -32700  [/violations/parse:"
        ),
        "{text}"
    );
}

/// Every derived check of a contract the project did not write cites the contract entry it
/// comes from: a JSON pointer that resolves in the contract's document, then a seed section.
#[test]
fn every_derived_check_cites_an_entry_of_the_contract() {
    let path = common::root().join("examples/lsp/lsp.json");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("lsp.json")).expect("json");
    for role in ["client", "server"] {
        let out = Command::new(common::BIN)
            .args(["conformance", "--contract"])
            .arg(&path)
            .args(["--play", role, "--list"])
            .output()
            .expect("list");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.lines().count() > 0, "{role}: no checks");
        for line in text.lines() {
            let cited = line.rsplit_once('[').map(|(_, c)| c).unwrap_or_default();
            let pointer = cited.split_once(": ").map(|(p, _)| p).unwrap_or_default();
            assert!(
                pointer.starts_with('/') && doc.pointer(pointer).is_some(),
                "{pointer:?} does not name an entry of lsp.json: {line}"
            );
        }
    }
}

/// A contract the project never saw (tests/fixtures/depot.json) whose binding is tagged
/// and whose messages are all one-way: a parcel is answered by receipts that name it
/// (`answeredBy`, the binding's `correlation`), one receipt may cover several parcels (its
/// `batch`). A Python depot written from the contract passes every derived check; a receipt
/// that forgets the batch fails only the check that sent two parcels in one write, and a
/// receipt off its schema fails only the parcel's call check, not every probe it answered,
/// and so does one that does not carry its parcel's trace (`trace.answersInherit`, D-2).
/// Its lines are counted in UTF-16 code units (D-3): a depot counting bytes fails only the
/// at-cap check. Each parcel states its form (`v`, a carried version, D-4): a depot taking
/// one of a newer form fails only that version's check. A parcel number stays taken for
/// its window (D-5): a depot taking a parcel handed in again fails only the duplicate check. The titles and findings speak of messages, not requests.
#[test]
fn a_tagged_contract_of_one_way_messages_gets_its_answers_checked() {
    let contract = common::root().join("proxy/tests/fixtures/depot.json");
    let contract = contract.display().to_string();
    let depot = python("proxy/tests/peers/depot.py");
    let r = conformance_as("courier", &contract, &format!("exec:{depot}"));
    assert!(r.with("FAIL").is_empty(), "{}", r.stdout);
    // A depot launched per session cannot be held on several connections (D-6's and
    // D-7's checks: the next test, on a depot the suite dials).
    let once = ids(&[
        "depot.derived.connections.couriersMax",
        "depot.derived.claim.courier",
    ]);
    assert_eq!(r.with("SKIP"), once, "{}", r.stdout);
    let families = ids(&[
        "depot.derived.handshake",
        "depot.derived.call.parcel",
        "depot.derived.unknown-notification",
        "depot.derived.frame.merged",
        "depot.derived.frame.at-cap",
        "depot.derived.frame.over-cap",
        "depot.derived.version.v.newer",
        "depot.derived.duplicate.dedupeSeconds",
        "depot.derived.messages",
    ]);
    assert!(families.is_subset(&r.with("PASS")), "{}", r.stdout);
    // Its messages are all one-way: no title or finding speaks of requests.
    assert!(!r.stdout.contains("request"), "{}", r.stdout);
    for (broken, fails) in [
        ("lost-batch", "frame.merged"),
        ("bad-state", "call.parcel"),
        ("new-trace", "call.parcel"),
        ("line-bytes", "frame.at-cap"),
        ("newer-v", "version.v.newer"),
        ("resend", "duplicate.dedupeSeconds"),
    ] {
        let target = format!("exec:{depot} --break {broken}");
        let r = conformance_as("courier", &contract, &target);
        let want = ids(&[&format!("depot.derived.{fails}")]);
        assert_eq!(r.with("FAIL"), want, "{broken}: {}", r.stdout);
    }
}

/// The depot serving couriers on a unix socket: its connection cap (couriersMax, D-6) and
/// its one connection per courier (`claims`, D-7) are data. The suite, dialing the socket
/// for every session, holds the cap's worth of connections and one more, each hello for a
/// courier of its own; and it says hello for a held courier from the same van (the old
/// connection must be dropped) and from another (the new one must be). A depot serving
/// them all fails exactly the cap's check; one taking every hello, exactly the claim's.
#[test]
fn a_connection_cap_is_checked_on_a_listener_the_suite_dials() {
    let contract = common::root().join("proxy/tests/fixtures/depot.json");
    let contract = contract.display().to_string();
    for (broken, fails) in [
        (None, None),
        (Some("uncapped-couriers"), Some("connections.couriersMax")),
        (Some("unclaimed"), Some("claim.courier")),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("desk.sock");
        let mut depot = Command::new(common::peers_python());
        depot
            .arg(common::root().join("proxy/tests/peers/depot.py"))
            .arg("--listen")
            .arg(&sock);
        if let Some(b) = broken {
            depot.args(["--break", b]);
        }
        let mut depot = Depot(depot.spawn().expect("start the depot"));
        let started = std::time::Instant::now();
        while !sock.exists() {
            assert!(started.elapsed().as_secs() < 10, "the depot did not listen");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let target = format!("unix:{}", sock.display());
        let r = conformance_as("courier", &contract, &target);
        let want = fails
            .map(|f| ids(&[&format!("depot.derived.{f}")]))
            .unwrap_or_default();
        assert_eq!(r.with("FAIL"), want, "{broken:?}: {}", r.stdout);
        assert!(r.with("SKIP").is_empty(), "{broken:?}: {}", r.stdout);
        if broken.is_none() {
            let cap = "depot.derived.connections.couriersMax".to_string();
            assert!(r.with("PASS").contains(&cap), "{}", r.stdout);
            let claim = "depot.derived.claim.courier".to_string();
            assert!(r.with("PASS").contains(&claim), "{}", r.stdout);
            assert!(
                r.stdout.contains("2 connections held open; connection"),
                "{}",
                r.stdout
            );
        }
        let _ = depot.0.kill();
    }
}

/// Ends the depot when the test does, whatever happened.
struct Depot(std::process::Child);

impl Drop for Depot {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Credit is data (tests/fixtures/pipes.json, a made-up protocol): the sender opens its
/// pipes itself, the sink grants. Playing the sink against a Python sender written from the
/// contract, the suite grants 4 KiB at a time and the engine counts the bulk frames: the
/// sender passes; one sending everything at once fails exactly the credit check (the
/// behaviour check leaves credit to it). The channel's `redial` is data too: after the
/// suite breaks both connections the sender dials them again and attaches with the same
/// boot and the next try; one coming back with a fresh boot fails exactly that check.
#[test]
fn a_contract_of_its_own_gets_its_credit_checked() {
    let contract = common::root().join("proxy/tests/fixtures/pipes.json");
    let contract = contract.display().to_string();
    let sender = python("proxy/tests/peers/pipes_sender.py");
    let target = format!("exec:{sender} --ctl {{control}} --bulk {{data}}");
    let r = conformance_as("sink", &contract, &target);
    let all = ids(&[
        "pipes.derived.messages",
        "pipes.derived.redial.break",
        "pipes.derived.credit.flow",
        "pipes.derived.behaviour",
    ]);
    assert_eq!(r.with("PASS"), all, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("pipe 3: nothing before the first grant; 20000 bytes"),
        "{}",
        r.stdout
    );
    let r = conformance_as("sink", &contract, &format!("{target} --break overrun"));
    fails_exactly(
        &r,
        &["pipes.derived.credit.flow"],
        "the implementation broke credit.",
    );
    let r = conformance_as("sink", &contract, &format!("{target} --break new-boot"));
    fails_exactly(
        &r,
        &["pipes.derived.redial.break"],
        "the redial claims /body/boot",
    );
}
