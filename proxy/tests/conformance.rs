//! `contract-proxy conformance` against real processes: the Rust reference
//! peers (`kernel-peer core|shell`, examples/kernel/peers) launched per check,
//! dialed or dialing in, correct and with one rule broken on purpose; the exit
//! codes, the per-check lines and the JUnit file.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
mod harness;
use common::{BIN, Run, conformance, finish, junit_ids, show, tmp};
/// A whole suite run (the derived heartbeat checks alone take ~20 s).
const RUN_DEADLINE: Duration = Duration::from_secs(240);
/// The kernel's hand-written check ids, in the suite's order: they follow the checks
/// derived from the contract (`kernel.derived.*`, see [`ids`]).
const HAND_WRITTEN: [&str; 7] = [
    "kernel.15.5",
    "kernel.15.6",
    "kernel.15.7",
    "kernel.15.8",
    "kernel.15.9",
    "kernel.15.10",
    "kernel.15.11",
];

/// Every check id the suite lists for `play`: derived ones first, then [`HAND_WRITTEN`].
fn ids(play: &str) -> Vec<String> {
    common::listed_ids("kernel", play, "exec:true", &HAND_WRITTEN)
}

fn suite(args: &[&str]) -> Run {
    conformance(args, None, RUN_DEADLINE)
}

/// A suite run whose contract durations (the 20 s heartbeat check) are scaled to a fifth:
/// the suite and the Rust peers it launches read `CONTRACT_TIME_SCALE`. The two full
/// passing runs above keep the contract's own timers.
/// The block of the report under check `id`, which must be the run's only failure.
fn only_failure<'r>(r: &'r Run, id: &str) -> &'r str {
    assert_eq!(r.code, 1, "{}", show(r));
    assert_eq!(r.with("FAIL"), [id], "{}", show(r));
    let block = r.stdout.split(&format!("FAIL {id}")).nth(1);
    block.expect("failure block")
}

fn fast_suite(args: &[&str]) -> Run {
    common::conformance_env(
        args,
        None,
        &[(contract::TIME_SCALE_ENV, "0.2")],
        RUN_DEADLINE,
    )
}

/// The reference peers' binary, built once into contract-proxy's target directory.
fn peer() -> &'static str {
    static BUILT: OnceLock<String> = OnceLock::new();
    BUILT.get_or_init(|| {
        common::cargo_build(&["kernel-peer"]);
        common::bin_dir().join("kernel-peer").display().to_string()
    })
}

fn core_target(extra: &str) -> String {
    let peer = peer();
    format!("exec:{peer} core --control {{control}} --data {{data}} --ttl 2 {extra}")
}

fn shell_target(extra: &str) -> String {
    let peer = peer();
    format!("exec:{peer} shell --control {{control}} --data {{data}} {extra}")
}

#[test]
fn suite_as_shell_passes_against_the_rust_core_and_writes_junit() {
    let (_dir, junit) = tmp("kernel-shell.xml");
    let target = core_target("");
    let r = suite(&[
        "--contract",
        "kernel",
        "--play",
        "shell",
        "--target",
        &target,
        "--task-seconds",
        "3",
        "--deadline",
        "5",
        "--junit",
        junit.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(r.code, 0, "{}", show(&r));
    let got: Vec<String> = r.lines().into_iter().map(|(_, id)| id).collect();
    let all = ids("shell");
    assert_eq!(got, all, "{}", show(&r));
    assert_eq!(r.with("FAIL"), Vec::<String>::new(), "{}", show(&r));
    // The Rust core supports every trigger; 15.5's and 15.7's core sides moved to the
    // derived credit entry and task cue.
    assert_eq!(
        r.with("SKIP"),
        ["kernel.15.5", "kernel.15.7"],
        "{}",
        show(&r)
    );
    assert!(r.stdout.contains("kernel.derived.cue.task"), "{}", show(&r));
    assert!(
        r.stdout.contains("kernel.derived.credit.streams"),
        "{}",
        show(&r)
    );
    assert!(
        r.stdout.contains(&format!(
            "{} checks: {} passed, 0 failed, 2 skipped",
            all.len(),
            all.len() - 2
        )),
        "{}",
        show(&r)
    );
    let (report, jids) = junit_ids(&junit);
    assert_eq!(jids, all);
    assert_eq!(
        (report.tests, report.failures, report.errors),
        (all.len(), 0, 0)
    );
    assert_eq!(report.test_suites[0].name.as_str(), "kernel.shell");
}

/// A reply with a wrong correlation_id fails the check that waited for it, and the
/// failure shows the reply that came instead, with its bytes, not only the wait.
#[test]
fn a_misdirected_reply_is_shown_where_the_wait_fails() {
    let target = core_target("--break correlation");
    let r = fast_suite(&[
        "--contract",
        "kernel",
        "--play",
        "shell",
        "--target",
        &target,
        "--only",
        "kernel.derived.cue.stream",
        "--deadline",
        "2",
    ]);
    let fail = only_failure(&r, "kernel.derived.cue.stream");
    assert!(
        fail.contains("no answer to the command.handle cue"),
        "{fail}"
    );
    assert!(
        fail.contains("came meanwhile: a response to \"s-never-sent\""),
        "{fail}"
    );
}

#[test]
fn a_core_that_exceeds_credit_fails_exactly_the_credit_check() {
    let (_dir, junit) = tmp("broken.xml");
    let target = core_target("--break credit");
    let r = fast_suite(&[
        "--contract",
        "kernel",
        "--play",
        "shell",
        "--target",
        &target,
        "--task-seconds",
        "3",
        "--deadline",
        "5",
        "--junit",
        junit.to_str().expect("utf-8 path"),
    ]);
    let all = ids("shell");
    assert_eq!(r.lines().len(), all.len(), "{}", show(&r));
    // The contract's credit entry judges it (the engine's credit rules), and the evidence is
    // the first frame past the first grant of 4096 bytes: stream 7's fifth, seq 4.
    let fail = only_failure(&r, "kernel.derived.credit.streams");
    assert!(fail.contains("the implementation broke credit."), "{fail}");
    assert!(
        fail.contains("hex:  0000040c 00000007 00000000 00000004"),
        "{fail}"
    );
    let (report, jids) = junit_ids(&junit);
    assert_eq!(jids, all);
    assert_eq!(report.failures, 1);
    let case = report.test_suites[0]
        .test_cases
        .iter()
        .find(|c| {
            c.name
                .as_str()
                .starts_with("kernel.derived.credit.streams:")
        })
        .expect("credit case");
    match &case.status {
        quick_junit::TestCaseStatus::NonSuccess {
            message,
            description,
            ..
        } => {
            assert!(
                message
                    .as_ref()
                    .is_some_and(|m| m.as_str().contains("credit"))
            );
            assert!(
                description
                    .as_ref()
                    .is_some_and(|d| d.as_str().contains("hex:"))
            );
        }
        other => panic!("credit.streams is not a failure in JUnit: {other:?}"),
    }
}

#[test]
fn suite_as_core_passes_against_the_rust_shell() {
    let (_dir, junit) = tmp("kernel-core.xml");
    let target = shell_target("");
    let r = suite(&[
        "--contract",
        "kernel",
        "--play",
        "core",
        "--target",
        &target,
        "--task-seconds",
        "3",
        "--deadline",
        "5",
        "--junit",
        junit.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(r.code, 0, "{}", show(&r));
    let all = ids("core");
    assert_eq!(r.lines().len(), all.len(), "{}", show(&r));
    assert_eq!(r.with("FAIL"), Vec::<String>::new(), "{}", show(&r));
    // Cancel ordering and expiry bind the core only: skipped with the reason.
    assert_eq!(
        r.with("SKIP"),
        ["kernel.15.8", "kernel.15.10"],
        "{}",
        show(&r)
    );
    assert!(
        r.stdout.contains("not applicable to the core"),
        "{}",
        show(&r)
    );
    let (report, jids) = junit_ids(&junit);
    assert_eq!(jids, all);
    assert_eq!((report.tests, report.failures), (all.len(), 0));
    assert_eq!(report.test_suites[0].name.as_str(), "kernel.core");
}

#[test]
fn a_shell_that_drops_trace_id_fails_the_messages_check() {
    let r = against_broken_shell("trace-id");
    // A message without trace_id breaks the envelope's schema: the derived messages check
    // reports it; the derived call checks judge which trace an answer carries.
    let fail = only_failure(&r, "kernel.derived.messages");
    assert!(fail.contains("missing trace_id"), "{fail}");
    assert!(
        fail.contains("\"method\":\"command.handle\""),
        "the evidence is the request itself: {fail}"
    );
}

/// A shell that answers programs.index on a fresh trace, not the request's: the
/// contract's answers inherit their request's trace (`trace.answersInherit`, K-31), and
/// only the derived call check of that request fails, with the answer's bytes.
#[test]
fn a_shell_answering_on_another_trace_fails_only_that_call_check() {
    let r = against_broken_shell("answer-trace");
    let fail = only_failure(&r, "kernel.derived.call.programs.index");
    assert!(fail.contains("of what it answers"), "{fail}");
    assert!(fail.contains("/trace/answersInherit"), "{fail}");
}

/// The whole suite, playing the core, against the Rust shell run with `--break <rule>`.
fn against_broken_shell(rule: &str) -> Run {
    let target = shell_target(&format!("--break {rule}"));
    fast_suite(&[
        "--contract",
        "kernel",
        "--play",
        "core",
        "--target",
        &target,
        "--task-seconds",
        "3",
        "--deadline",
        "5",
    ])
}

/// The Rust shell listening on unix sockets in `dir` for a session after another: the
/// child and its control and data endpoints.
fn running_shell(dir: &std::path::Path) -> (std::process::Child, String, String) {
    let c = format!("unix:{}", dir.join("c.sock").display());
    let d = format!("unix:{}", dir.join("d.sock").display());
    let shell = Command::new(peer())
        .args([
            "shell",
            "--control",
            &c,
            "--data",
            &d,
            "--accept-timeout",
            "60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the shell");
    (shell, c, d)
}

#[test]
fn dials_a_running_shell_and_reconnects_to_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut shell, c, d) = running_shell(dir.path());
    let r = suite(&[
        "--contract",
        "kernel",
        "--play",
        "core",
        "--target",
        &c,
        "--target-data",
        &d,
        "--only",
        "kernel.derived.version.protocol.none,kernel.derived.unknown-method,kernel.15.11",
        "--deadline",
        "5",
    ]);
    let _ = shell.kill();
    let _ = shell.wait();
    assert_eq!(r.code, 0, "{}", show(&r));
    assert_eq!(
        r.with("PASS"),
        [
            "kernel.derived.version.protocol.none",
            "kernel.derived.unknown-method",
            "kernel.15.11"
        ],
        "{}",
        show(&r)
    );
}

/// A shell reached through a proxy listening on tls:// for both channels: the suite dials
/// TLS and trusts the proxy's certificate by its pin; with a wrong pin it reaches
/// nothing and says so.
#[test]
fn dials_a_shell_behind_tls_by_its_pinned_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut shell, c, d) = running_shell(dir.path());
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).expect("write cert");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write key");
    let pin = contract_transport::endpoint::tls::fingerprint(made.cert.der());
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    };
    let (tc, td) = (
        format!("tls://127.0.0.1:{}", port()),
        format!("tls://127.0.0.1:{}", port()),
    );
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let mut proxy = Command::new(BIN)
        .args([
            "run",
            "--contract",
            "kernel",
            "--cert",
            &cert,
            "--key",
            &key,
        ])
        .args([
            "--listen",
            &tc,
            "--upstream",
            &c,
            "--pair-listen",
            &td,
            "--pair-upstream",
            &d,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the proxy");
    let wrong = "00".repeat(32);
    let only = "kernel.derived.unknown-method";
    let dial = |pin: &str, deadline: &str| {
        suite(&[
            "--contract",
            "kernel",
            "--play",
            "core",
            "--target",
            &tc,
            "--target-data",
            &td,
            "--pin",
            pin,
            "--only",
            only,
            "--deadline",
            deadline,
        ])
    };
    let refused = dial(&wrong, "3");
    let r = dial(&pin, "5");
    for child in [&mut proxy, &mut shell] {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert_eq!(r.code, 0, "{}", show(&r));
    assert_eq!(r.with("PASS"), [only], "{}", show(&r));
    // Without its handshake check in the run, the check skips, saying why.
    assert_eq!(
        refused.with("PASS"),
        Vec::<&str>::new(),
        "{}",
        show(&refused)
    );
    assert!(
        show(&refused).contains("does not match --pin"),
        "the wrong pin is named: {}",
        show(&refused)
    );
}

#[test]
fn listens_for_a_core_started_elsewhere() {
    // Built before the suite starts listening: a build must not eat the suite's wait.
    let peer = peer();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cp, dp) = (dir.path().join("c.sock"), dir.path().join("d.sock"));
    let c = format!("unix:{}", cp.display());
    let d = format!("unix:{}", dp.display());
    let child = Command::new(BIN)
        .args([
            "conformance",
            "--contract",
            "kernel",
            "--play",
            "shell",
            "--target",
            &c,
            "--target-data",
            &d,
            "--only",
            "kernel.derived.unknown-method",
            "--deadline",
            "10",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the suite");
    let start = Instant::now();
    // The core dials both channels at once, so both must be listening first.
    while !(harness::ready(&cp) && harness::ready(&dp)) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the suite never listened on {c}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut core = Command::new(peer)
        .args(["core", "--control", &c, "--data", &d])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the core");
    let r = finish(child, Duration::from_secs(60));
    let _ = core.kill();
    let _ = core.wait();
    assert_eq!(r.code, 0, "{}", show(&r));
    assert_eq!(
        r.with("PASS"),
        ["kernel.derived.unknown-method"],
        "{}",
        show(&r)
    );
}

#[test]
fn usage_errors_exit_2() {
    let target = core_target("");
    for (args, says) in [
        (
            vec![
                "--contract",
                "kernel",
                "--play",
                "proxy",
                "--target",
                target.as_str(),
            ],
            "plays shell or core",
        ),
        (
            vec![
                "--contract",
                "kernel",
                "--play",
                "shell",
                "--target",
                target.as_str(),
                "--only",
                "kernel.99",
            ],
            "no such check",
        ),
        (
            vec![
                "--contract",
                "kernel",
                "--play",
                "shell",
                "--target",
                "nonsense",
            ],
            "bad endpoint",
        ),
        (
            vec![
                "--contract",
                "nope",
                "--play",
                "shell",
                "--target",
                target.as_str(),
            ],
            "--contract",
        ),
        (
            vec![
                "--contract",
                "xsession",
                "--play",
                "nobody",
                "--target",
                target.as_str(),
            ],
            "plays sender or recipient",
        ),
    ] {
        let r = suite(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", show(&r));
        assert!(r.stderr.contains(says), "{args:?}: {}", show(&r));
    }
    let r = suite(&[
        "--contract",
        "kernel",
        "--play",
        "core",
        "--target",
        "unix:/nonexistent/x",
        "--list",
    ]);
    assert_eq!(r.code, 0, "{}", show(&r));
    assert_eq!(r.stdout.lines().count(), ids("core").len(), "{}", show(&r));
}

#[test]
fn a_time_scale_that_is_not_a_positive_number_is_a_usage_error() {
    let target = core_target("");
    for bad in ["0", "-1", "fast"] {
        let r = common::conformance_env(
            &[
                "--contract",
                "kernel",
                "--play",
                "shell",
                "--target",
                &target,
            ],
            None,
            &[(contract::TIME_SCALE_ENV, bad)],
            Duration::from_secs(30),
        );
        assert_eq!(r.code, 2, "{bad}: {}", show(&r));
        assert!(
            r.stderr.contains(contract::TIME_SCALE_ENV),
            "{bad}: {}",
            show(&r)
        );
    }
}
