//! `contract-proxy conformance --contract toolchannel` against the real reference
//! peers: the Python worker (`examples/toolchannel/worker.py`, on the generated
//! Python SDK) launched per check with `--play host`, and the Rust host
//! (`toolchannel-host`) launched per check with `--play worker`; each honest, and
//! each with its `--break` flag, which must fail exactly its check. The JUnit
//! file is read back with quick-junit.
//!
//! Needs the peers' venv (`scripts/peers-venv.sh`; `PEERS_PYTHON` overrides the
//! interpreter) and builds `contractgen` and `toolchannel-host` into the test's
//! own target directory when they are missing.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{
    Run, bin_dir, cargo_build, conformance, conformance_env, junit_ids, peers_python, show,
};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// A whole suite run.
const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// The hand-written check ids: none, every check is derived from the contract
/// (`toolchannel.derived.*`, see [`ids`]).
const HAND_WRITTEN: [&str; 0] = [];

/// The Rust host, built once if missing.
fn host() -> &'static PathBuf {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| {
        let host = bin_dir().join("toolchannel-host");
        if !host.exists() {
            cargo_build(&["toolchannel-host"]);
        }
        host
    })
}

fn suite(args: &[&str]) -> Run {
    let mut all = vec!["--contract", "toolchannel"];
    all.extend_from_slice(args);
    // Every party's clocks at a fifth (CONTRACT_TIME_SCALE): the suite writes its budgets
    // in initialize scaled, and the worker scales the handshake wait it keeps before any.
    conformance_env(
        &all,
        Some("toolchannel"),
        &[(contract::TIME_SCALE_ENV, "0.2")],
        RUN_DEADLINE,
    )
}

fn worker_target(ws: &Path, extra: &str) -> String {
    format!(
        "exec:{} {ROOT}/examples/toolchannel/worker.py --url {{url}} --token {{token}} --session-id {{session}} --workspace {} {extra}",
        peers_python().display(),
        ws.display()
    )
}

fn host_target(extra: &str) -> String {
    format!(
        "exec:{} --listen {{listen}} --token {{token}} --session-id {{session}} --heartbeat-interval-seconds 1 --heartbeats 12 --handshake-seconds 2 --ready-seconds 6 --release-grace-seconds 5 --dial-seconds 60 {extra}",
        host().display()
    )
}

/// `--play role --target target --junit xml`.
fn play(role: &str, target: &str, xml: &Path) -> Run {
    suite(&[
        "--play",
        role,
        "--target",
        target,
        "--junit",
        xml.to_str().expect("utf-8"),
    ])
}

/// Every check ran in order and passed, none skipped; JUnit agrees.
fn assert_all_pass(r: &Run, xml: &Path, role: &str) {
    assert_eq!(r.code, 0, "{}", show(r));
    let got: Vec<String> = r.lines().into_iter().map(|(_, id)| id).collect();
    let all = ids(role);
    assert_eq!(got, all, "{}", show(r));
    assert_eq!(r.with("FAIL"), Vec::<String>::new(), "{}", show(r));
    assert_eq!(r.with("SKIP"), Vec::<String>::new(), "{}", show(r));
    let (report, jids) = junit_ids(xml);
    assert_eq!(jids, all);
    assert_eq!(
        (report.tests, report.failures, report.errors),
        (all.len(), 0, 0)
    );
    assert_eq!(
        report.test_suites[0].name.as_str(),
        format!("toolchannel.{role}")
    );
}

/// Every check id the suite lists for `role`: the derived ones ([`HAND_WRITTEN`] is empty).
fn ids(role: &str) -> Vec<String> {
    common::listed_ids(
        "toolchannel",
        role,
        "ws://127.0.0.1:9/worker",
        &HAND_WRITTEN,
    )
}

#[test]
fn lists_the_checks_for_both_roles() {
    for role in ["host", "worker"] {
        ids(role);
    }
}

#[test]
fn as_host_the_python_worker_passes_and_junit_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = dir.path().join("host.xml");
    let target = worker_target(&dir.path().join("ws"), "");
    let r = play("host", &target, &xml);
    assert_all_pass(&r, &xml, "host");
}

#[test]
fn as_host_an_early_ready_worker_fails_exactly_the_handshake_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = dir.path().join("host-break.xml");
    let target = worker_target(&dir.path().join("ws"), "--break early-ready");
    let r = play("host", &target, &xml);
    assert_eq!(r.code, 1, "{}", show(&r));
    assert_eq!(
        r.with("FAIL"),
        ["toolchannel.derived.handshake"],
        "{}",
        show(&r)
    );
    let fail = r
        .stdout
        .split("FAIL toolchannel.derived.handshake")
        .nth(1)
        .expect("failure block");
    assert!(
        fail.contains("sent agentfy/ready in `handshaking`"),
        "{fail}"
    );
    assert!(fail.contains("\"method\":\"agentfy/ready\""), "{fail}");
    let (report, jids) = junit_ids(&xml);
    assert_eq!(jids, ids("host"));
    assert_eq!(report.failures, 1);
}

/// The host's capabilities are data (`parties.host.declares`): a worker that asks for roots
/// it was never offered fails the derived capabilities check, and only it.
#[test]
fn as_host_a_worker_asking_for_roots_fails_exactly_the_capabilities_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = dir.path().join("host-roots.xml");
    let target = worker_target(dir.path(), "--break ask-roots");
    let r = play("host", &target, &xml);
    assert_eq!(r.code, 1, "{}", show(&r));
    let check = "toolchannel.derived.capabilities";
    assert_eq!(r.with("FAIL"), [check], "{}", show(&r));
    assert!(r.stdout.contains("roots/list"), "{}", show(&r));
}

/// The honest host, speaking channel version 1.0.0: below the examples' (the worker's
/// 1.1.0), so the effective version the session agreed is the host's, and the suite's
/// heartbeats must carry that one, not their example's (the `channelVersion` agreement,
/// which the suite's session writes). The break tests run the host's own 1.3.0.
#[test]
fn as_worker_the_rust_host_passes_and_junit_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = dir.path().join("worker.xml");
    let target = host_target("--channel-version 1.0.0");
    let r = play("worker", &target, &xml);
    assert_all_pass(&r, &xml, "worker");
}

#[test]
fn as_worker_a_host_that_answers_sampling_fails_exactly_the_sampling_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = dir.path().join("worker-break.xml");
    let target = host_target("--break sampling-accept");
    let r = play("worker", &target, &xml);
    assert_eq!(r.code, 1, "{}", show(&r));
    let check = "toolchannel.derived.call.sampling/createMessage";
    assert_eq!(r.with("FAIL"), [check], "{}", show(&r));
    let fail = r
        .stdout
        .split(&format!("FAIL {check}"))
        .nth(1)
        .expect("failure block");
    assert!(
        fail.contains("the answer to sampling/createMessage breaks the contract"),
        "{fail}"
    );
    assert!(fail.contains("sampled anyway"), "{fail}");
    let (report, jids) = junit_ids(&xml);
    assert_eq!(jids, ids("worker"));
    assert_eq!(report.failures, 1);
}

/// The whole suite for `role` against a peer run with `--break <flag>` fails exactly
/// `check`, whose failure block contains each of `says`.
fn breaks_exactly(role: &str, target: &str, check: &str, says: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = dir.path().join("break.xml");
    let r = play(role, target, &xml);
    assert_eq!(r.code, 1, "{}", show(&r));
    assert_eq!(r.with("FAIL"), [check], "{}", show(&r));
    let fail = r.stdout.split(&format!("FAIL {check}")).nth(1);
    let fail = fail.expect("failure block");
    for s in says {
        assert!(fail.contains(s), "{s:?} in {fail}");
    }
    let (report, jids) = junit_ids(&xml);
    assert_eq!(jids, ids(role));
    assert_eq!(report.failures, 1);
}

/// A worker that claims whatever MCP version it is offered (`--break echo-version`) fails
/// the derived check of a negotiation without a `none` reaction, and nothing else.
#[test]
fn as_host_a_worker_claiming_a_version_nobody_speaks_fails_exactly_the_foreign_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "--break echo-version");
    let check = "toolchannel.derived.version.mcpProtocolVersion.foreign";
    breaks_exactly(
        "host",
        &target,
        check,
        &["which nobody speaks", "the answer"],
    );
}

/// A worker stating the host's sessionId in its initialize result instead of its own
/// SESSION_ID (`--break echo-session`) fails the derived check of a known agreed value
/// alone: offered another, it echoed it.
#[test]
fn as_host_a_worker_echoing_the_hosts_session_fails_exactly_the_own_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "--break echo-session");
    let check = "toolchannel.derived.agreement.sessionId.own";
    breaks_exactly(
        "host",
        &target,
        check,
        &["echoed the offered sessionId", "the message"],
    );
}

/// A worker whose heartbeats carry its own channel version instead of min(host, worker)
/// (`--break own-version`) fails the derived check of the `lowest` agreement alone: the
/// suite offers the floor, `1.0.0`, below the worker's own.
#[test]
fn as_host_a_worker_beating_with_its_own_version_fails_exactly_the_agreement_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "--break own-version");
    let check = "toolchannel.derived.agreement.channelVersion";
    breaks_exactly("host", &target, check, &["the agreed value is 1.0.0"]);
}

/// A host releasing while its tools/call is in flight (`--break busy-release`, after three
/// heartbeats: sooner than the suite answers the call) fails the derived check of the
/// release's `notWhile` alone; so does one whose release states another graceSeconds than
/// the releaseGraceSeconds its initialize carried (`--break own-grace`: the engine's
/// `limit.repeated`, on the same message).
#[test]
fn as_worker_a_host_releasing_during_a_call_or_with_its_own_grace_fails_exactly_the_not_while_check()
 {
    let check = "toolchannel.derived.not-while.agentfy/release";
    let busy = host_target("--break busy-release").replace("--heartbeats 12", "--heartbeats 3");
    let says = ["method.not-while", "while its tools/call"];
    breaks_exactly("worker", &busy, check, &says);
    let grace = host_target("--break own-grace");
    let says = [
        "limit.repeated",
        "releaseGraceSeconds 6 where it repeats the 5 in force",
    ];
    breaks_exactly("worker", &grace, check, &says);
}

/// A host taking an initialize result whatever sessionId it states (`--break
/// any-session`) fails the derived check of that agreement's mismatch alone: it goes on
/// waiting for the handshake, and ends it on its own deadline, not with close 4002.
#[test]
fn as_worker_a_host_taking_another_session_fails_exactly_the_agreement_check() {
    let target = host_target("--break any-session");
    let check = "toolchannel.derived.agreement.sessionId";
    breaks_exactly(
        "worker",
        &target,
        check,
        &["the contract prescribes close 4002"],
    );
}

/// A worker beating every three intervals of the budget the suite sent in initialize
/// (`--break slow-heartbeat`) fails the derived timer of the carried heartbeat interval,
/// and nothing else (the grace, whose clock its first heartbeat starts, skips when that
/// comes later than an interval and the slack).
#[test]
fn as_host_a_worker_beating_slower_than_its_budget_fails_exactly_the_interval_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "--break slow-heartbeat");
    let check = "toolchannel.derived.timer.heartbeatIntervalSeconds";
    breaks_exactly("host", &target, check, &["no agentfy/heartbeat within"]);
}

/// A worker that closes 1000 after its release result instead of 4005 RELEASED
/// (`--break release-close`) fails the derived check of the transition's `ends` alone.
#[test]
fn as_host_a_worker_closing_1000_after_its_release_fails_exactly_the_end_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "--break release-close");
    let check = "toolchannel.derived.end.hostSession.releasing";
    breaks_exactly(
        "host",
        &target,
        check,
        &["closed with 1000", "prescribes close 4005"],
    );
}

/// A worker that serves on after a heartbeat answered `continue: false` (`--break
/// ignore-stop`) fails the derived check of that transition's `ends` alone.
#[test]
fn as_host_a_worker_serving_on_after_continue_false_fails_exactly_the_end_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "--break ignore-stop");
    let check = "toolchannel.derived.end.hostSession.running";
    breaks_exactly("host", &target, check, &["/result/continue = false"]);
}

/// A host that sends tools/list as soon as notifications/initialized arrives, without
/// waiting for the worker's agentfy/ready (`--break early-list`): the derived handshake,
/// which watches before each of the suite's own steps, fails alone, naming the state the
/// hostSession machine was in.
#[test]
fn as_worker_a_host_listing_before_ready_fails_exactly_the_handshake_check() {
    let target = host_target("--break early-list");
    let check = "toolchannel.derived.handshake";
    let says = [
        "sent tools/list in `awaiting-ready`",
        "before the suite's agentfy/ready",
    ];
    breaks_exactly("worker", &target, check, &says);
}

/// A host that lets any redial of the live instance supersede it, whatever its attempt
/// (`--break any-attempt`), fails the derived claims check alone: the claim with an attempt
/// not greater must be refused 4002 (that host takes it, and later closes it for want of
/// heartbeats).
#[test]
fn as_worker_a_host_superseding_on_any_attempt_fails_exactly_the_claim_check() {
    let target = host_target("--break any-attempt");
    let check = "toolchannel.derived.claim.workerSession";
    let says = [
        "the claim with an attempt not greater",
        "the contract prescribes close 4002",
    ];
    breaks_exactly("worker", &target, check, &says);
}

/// A host taking an upgrade whatever its Bearer token (`--break any-token`) fails the
/// derived check of the channel's `upgrade.bearer` alone.
#[test]
fn as_worker_a_host_taking_any_token_fails_exactly_the_bearer_check() {
    let target = host_target("--break any-token");
    let check = "toolchannel.derived.upgrade.bearer";
    let says = [
        "accepted an upgrade without Authorization (101)",
        "HTTP 401",
    ];
    breaks_exactly("worker", &target, check, &says);
}

/// A worker dialing without its token (`--break no-token`) fails the derived check of
/// the channel's `upgrade.bearer` alone: the suite's other sessions admit it as they are.
#[test]
fn as_host_a_worker_dialing_without_its_token_fails_exactly_the_bearer_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "--break no-token");
    let check = "toolchannel.derived.upgrade.bearer";
    let says = ["does not carry Authorization: Bearer and the token it was given"];
    breaks_exactly("host", &target, check, &says);
}

/// The worker's redials are the channel's `redial`: after the suite's 4008, 1001 or a
/// break, and after its own 1001 on a silence deadline, the honest worker dials again
/// with the same instanceId and the next attempt. A worker redialling with its last
/// attempt (`--break same-attempt`) fails each redial check after a claim, and the
/// handshake deadline's timer (whose socket claimed nothing, so the redial owes attempt
/// 1); the timers whose socket claimed leave the attempt to those (one broken rule, one
/// failing check). One that takes 4008 as the end (`--break drain-exits`) fails
/// `redial.DRAINING` alone, at once, naming its exit.
#[test]
fn as_host_the_workers_redials_are_the_channels() {
    let c = contract::builtin("toolchannel").expect("builtin");
    let r = c.channels["ws"].redial.clone().expect("a redial");
    assert_eq!(r.after.len(), 3, "4008, 1001 and a break: {r:?}");
    let redials = [
        "toolchannel.derived.redial.DRAINING",
        "toolchannel.derived.redial.GOING_AWAY",
        "toolchannel.derived.redial.break",
    ];
    let timers = [
        "toolchannel.derived.timer.handshakeSeconds",
        "toolchannel.derived.timer.readyAckSeconds",
        "toolchannel.derived.timer.heartbeatGraceSeconds",
    ];
    let all = [redials.as_slice(), timers.as_slice()].concat().join(",");
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |brk: &str, only: &str| {
        let target = worker_target(&dir.path().join("ws"), brk);
        suite(&["--play", "host", "--target", &target, "--only", only])
    };
    let honest = run("", &all);
    assert_eq!(honest.code, 0, "{}", show(&honest));
    for (i, id) in redials.iter().chain(&timers).enumerate() {
        let block = honest.stdout.split(&format!("PASS {id}")).nth(1);
        let block = block.unwrap_or_else(|| panic!("{id} passes: {}", show(&honest)));
        let block = block.split("\nPASS ").next().unwrap_or_default();
        assert!(block.contains("dialed again"), "{id}: {block}");
        let judged = i <= redials.len();
        let claimed = block.contains("/result/_meta/agentfy/attempt 1");
        assert_eq!(claimed, judged, "{id}: {block}");
    }
    let same = run("--break same-attempt", &all);
    let mut want = redials.to_vec();
    want.push(timers[0]);
    assert_eq!(same.with("FAIL"), want, "{}", show(&same));
    assert!(same.stdout.contains("attempt 0, not 1"), "{}", show(&same));
    let drain = run("--break drain-exits", &redials.join(","));
    assert_eq!(drain.with("FAIL"), [redials[0]], "{}", show(&drain));
    assert!(
        drain
            .stdout
            .contains("the target exited with 75 before it connected"),
        "{}",
        show(&drain)
    );
}

/// A host answering an unspoken major without listing its own (`--break unlisted`) fails
/// `upgrade.subprotocol`; an honest worker refused at the upgrade exits as each status
/// maps into its exit table.
#[test]
fn the_upgrade_refusals_are_the_contracts() {
    let c = contract::builtin("toolchannel").expect("builtin");
    let u = c.channels["ws"].upgrade.clone().expect("an upgrade");
    let (bearer, sub) = (
        u.bearer.expect("bearer"),
        u.subprotocol.expect("subprotocol"),
    );
    let (b_id, s_id) = (
        "toolchannel.derived.upgrade.bearer",
        "toolchannel.derived.upgrade.subprotocol",
    );
    let target = host_target("--break unlisted");
    let r = suite(&["--play", "worker", "--target", &target, "--only", s_id]);
    assert_eq!(r.with("FAIL"), [s_id], "{}", show(&r));
    assert!(
        r.stdout.contains("does not list [agentfy.worker.v1]"),
        "{}",
        show(&r)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let target = worker_target(&dir.path().join("ws"), "");
    let both = format!("{b_id},{s_id}");
    let r = suite(&["--play", "host", "--target", &target, "--only", &both]);
    assert_eq!(r.code, 0, "{}", show(&r));
    for status in [bearer.refused, sub.refused] {
        let exit = c
            .exit_after_status("worker", status)
            .expect("a mapped exit");
        let line = format!("exited {exit} after HTTP {status}");
        assert!(r.stdout.contains(&line), "{line}: {}", show(&r));
    }
}

/// A host whose close 4001 names neither version (`--break terse-close`) fails the
/// contract's `namesBoth`, judged by the derived `refused` check alone.
#[test]
fn as_worker_a_host_closing_without_both_versions_fails_exactly_the_refused_check() {
    let target = host_target("--break terse-close");
    let check = "toolchannel.derived.version.mcpProtocolVersion.refused";
    let says = ["mcp version unsupported\" does not name", "namesBoth"];
    breaks_exactly("worker", &target, check, &says);
}

/// A host closing a missed handshake 4003 without naming handshake_timeout (`--break
/// nameless-timeout`) fails the derived timer of hostHandshakeSeconds alone: the close
/// reason names what the limit's action says (T-6).
#[test]
fn as_worker_a_host_closing_a_missed_handshake_without_its_name_fails_exactly_that_timer() {
    let target = host_target("--break nameless-timeout");
    let check = "toolchannel.derived.timer.hostHandshakeSeconds";
    breaks_exactly(
        "worker",
        &target,
        check,
        &["does not name handshake_timeout"],
    );
}

/// A host the suite does not launch (`--target ws://…` with `--param token=… --param
/// session=…`): the derived checks dial it with the token too, through the suite's opener.
#[test]
fn as_worker_a_host_started_elsewhere_is_dialed_with_the_token_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port_file = dir.path().join("port");
    let mut h = std::process::Command::new(host())
        .args(["--listen", "127.0.0.1:0", "--port-file"])
        .arg(&port_file)
        .args(["--token", "tok-elsewhere", "--session-id", "sess-elsewhere"])
        .args(["--heartbeat-interval-seconds", "1", "--heartbeats", "100"])
        .args(["--handshake-seconds", "5", "--ready-seconds", "10"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the host");
    let started = std::time::Instant::now();
    let port = loop {
        match std::fs::read_to_string(&port_file) {
            Ok(p) if p.ends_with('\n') => break p.trim().to_string(),
            _ if started.elapsed() > Duration::from_secs(20) => panic!("the host never listened"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let target = format!("ws://127.0.0.1:{port}/worker");
    let only = "toolchannel.derived.handshake,toolchannel.derived.call.sampling/createMessage";
    let r = suite(&[
        "--play",
        "worker",
        "--target",
        &target,
        "--param",
        "token=tok-elsewhere",
        "--param",
        "session=sess-elsewhere",
        "--only",
        only,
    ]);
    let _ = h.kill();
    let _ = h.wait();
    assert_eq!(r.code, 0, "{}", show(&r));
    assert_eq!(r.with("PASS").len(), 2, "{}", show(&r));
}

/// The host's close on a worker's MCP version it cannot speak is the contract's
/// (`/versions/1/negotiation/refused`, 4001), and the derived check reads the close frame's
/// code: the same host against a copy of the contract prescribing 4002 fails that check,
/// naming both codes.
#[test]
fn the_close_code_a_contract_prescribes_is_read_from_the_close_frame() {
    let id = "toolchannel.derived.version.mcpProtocolVersion.refused";
    let target = host_target("");
    let r = suite(&["--play", "worker", "--target", &target, "--only", id]);
    assert_eq!(r.with("PASS"), [id], "{}", show(&r));
    assert!(r.stdout.contains("closed 4001"), "{}", show(&r));
    let path = Path::new(ROOT).join("schema/contracts/toolchannel.json");
    let mut c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("contract")).expect("json");
    c["versions"][1]["negotiation"]["refused"]["code"] = 4002.into();
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("toolchannel.json");
    std::fs::write(&other, c.to_string()).expect("write");
    let args = [
        "--contract",
        other.to_str().expect("utf-8"),
        "--play",
        "worker",
    ];
    let rest = ["--target", &target, "--only", id];
    let all: Vec<&str> = args.iter().chain(rest.iter()).copied().collect();
    let r = conformance(&all, Some("toolchannel"), RUN_DEADLINE);
    assert_eq!(r.with("FAIL"), [id], "{}", show(&r));
    assert!(
        r.stdout.contains("closed with 4001") && r.stdout.contains("prescribes close 4002"),
        "{}",
        show(&r)
    );
}

/// The count check reads the limit from the contract: the Rust host closes 4006 at its
/// own `badFramesMax` (its bindings are generated from the real contract), so against a
/// copy that allows two more bad frames the check fails at the frame where the host closed.
#[test]
fn the_bad_frame_count_is_the_contracts() {
    let id = "toolchannel.derived.count.badFramesMax";
    let target = host_target("");
    let r = suite(&["--play", "worker", "--target", &target, "--only", id]);
    assert_eq!(r.with("PASS"), [id], "{}", show(&r));
    let path = Path::new(ROOT).join("schema/contracts/toolchannel.json");
    let mut c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("contract")).expect("json");
    let max = c["limits"]["badFramesMax"]["value"]
        .as_u64()
        .expect("a count");
    c["limits"]["badFramesMax"]["value"] = (max + 2).into();
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("toolchannel.json");
    std::fs::write(&other, c.to_string()).expect("write");
    let other = other.to_str().expect("utf-8");
    let args = ["--contract", other, "--play", "worker", "--target", &target];
    let all: Vec<&str> = args.iter().chain(["--only", id].iter()).copied().collect();
    let r = conformance(&all, Some("toolchannel"), RUN_DEADLINE);
    assert_eq!(r.with("FAIL"), [id], "{}", show(&r));
    let ended = format!("input {} of {}", max + 1, max + 2);
    assert!(r.stdout.contains(&ended), "{ended}: {}", show(&r));
}
