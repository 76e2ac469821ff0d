//! `contract-proxy conformance --contract rukh` against the real reference peers
//! of examples/rukh: playing the core against the Rust extension (`rukh-ext`) and
//! the Python one (`ext.py`, on its generated SDK), and playing the extension
//! against the Rust core (`rukh-core`, which launches the suite's handoff, also
//! run here alone). The suite is the checks derived from rukh's data, then the
//! hand-written ones. The honest peers pass every check that applies; each
//! `--break` fails exactly its check; the JUnit file is well-formed.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{Run, bin_dir, cargo_build, conformance, junit_ids, peers_python, root, show, tmp};
/// A whole suite run.
const RUN_DEADLINE: Duration = Duration::from_secs(600);
/// Checks of the suite playing the core: 47 derived (capabilities among them: the core
/// declares command-result/1, which the extension's completion may need), 12 hand-written
/// (every row of the hand-written table is listed for both roles).
const CHECKS_AS_CORE: usize = 59;
/// Checks of the suite playing the extension: 49 derived (no check of a request the core
/// may send before the handshake, nor of the core's refusals; but the extension's own
/// refused call and second completions, the core's end after a refused initialize, after
/// an error answer to its invoke and after an EOF before the completion, and its
/// commandResult it never offered), 12 hand-written.
const CHECKS_AS_EXT: usize = 61;
/// Checks that bind only the extension (skipped when the suite plays the extension); a
/// core's first messages are the derived handshake's.
const ONLY_EXT: [&str; 1] = ["rukh.call.denial"];
/// Checks that bind only the core (skipped when the suite plays the core).
const ONLY_CORE: [&str; 8] = [
    "rukh.invoke.kind",
    "rukh.log.intake",
    "rukh.log.cancel-under-flood",
    "rukh.cancel.precedence",
    "rukh.outcome.exit-mismatch",
    "rukh.exit.user-request",
    "rukh.exit.owner-shutdown",
    "rukh.exit.deadline",
];

/// Build the reference peers and the SDK generator once, into the same target directory.
fn peers() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        cargo_build(&["rukh-core", "rukh-ext", "contractgen"]);
        bin_dir()
    })
}

fn suite(args: &[&str]) -> Run {
    conformance(args, Some("rukh"), RUN_DEADLINE)
}

fn run_role(role: &str, target: &str, junit: &Path) -> Run {
    suite(&[
        "--contract",
        "rukh",
        "--play",
        role,
        "--target",
        target,
        "--deadline",
        "5",
        "--check-deadline",
        "60",
        "--junit",
        junit.to_str().expect("utf-8 path"),
    ])
}

fn rust_ext(extra: &str) -> String {
    format!("exec-fd:3:{} {extra}", peers().join("rukh-ext").display())
}

fn python_ext(extra: &str) -> String {
    format!(
        "exec-fd:3:{} {} {extra}",
        peers_python().display(),
        root().join("examples/rukh/ext.py").display()
    )
}

fn rust_core(extra: &str) -> String {
    format!(
        "exec:{} --deadline-ms {{deadline_ms}} {extra} -- {{extension}}",
        peers().join("rukh-core").display()
    )
}

fn sorted(v: impl IntoIterator<Item = impl ToString>) -> Vec<String> {
    let mut v: Vec<String> = v.into_iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// A run playing `role` against `target` (a peer with a `--break`) in which exactly
/// `check` fails, saying `says`; the rest as [`assert_run`] says.
fn fails_only(role: &str, target: &str, check: &str, says: &str) {
    let (_d, junit) = tmp("broken.xml");
    let r = run_role(role, target, &junit);
    assert_run(&r, &junit, role, Some(check));
    assert!(r.stdout.contains(says), "{}", show(&r));
}

/// Only `broken` (the check a `--break` must fail) fails; the other role's checks
/// skip as not applicable, and so do the derived checks after a failed derived
/// handshake (which reports the broken rule); everything else passes; JUnit agrees.
fn assert_run(r: &Run, junit: &Path, role: &str, broken: Option<&str>) {
    let want_fail = sorted(broken);
    assert_eq!(
        r.code,
        if want_fail.is_empty() { 0 } else { 1 },
        "{}",
        show(r)
    );
    let checks = if role == "core" {
        CHECKS_AS_CORE
    } else {
        CHECKS_AS_EXT
    };
    assert_eq!(r.lines().len(), checks, "{}", show(r));
    assert_eq!(sorted(r.with("FAIL")), want_fail, "{}", show(r));
    let na: &[&str] = if role == "core" {
        &ONLY_CORE
    } else {
        &ONLY_EXT
    };
    let mut skip: Vec<String> = na.iter().map(|s| s.to_string()).collect();
    if broken == Some("rukh.derived.handshake") {
        // The out-of-place check is sent first, before any handshake.
        let before = [
            "rukh.derived.handshake",
            "rukh.derived.out-of-place.session",
        ];
        let derived = r.lines().into_iter().map(|(_, id)| id);
        skip.extend(
            derived.filter(|id| id.starts_with("rukh.derived.") && !before.contains(&id.as_str())),
        );
    }
    assert_eq!(
        sorted(r.with("SKIP")),
        sorted(skip),
        "only the other role's checks skip: {}",
        show(r)
    );
    let report = junit_ids(junit).0;
    assert_eq!(report.tests, checks, "{}", show(r));
    assert_eq!(report.failures, want_fail.len(), "{}", show(r));
    assert_eq!(report.test_suites[0].name.as_str(), format!("rukh.{role}"));
    if let Some(check) = broken {
        let case = report.test_suites[0]
            .test_cases
            .iter()
            .find(|c| c.name.as_str().starts_with(&format!("{check}:")))
            .expect("the failing case");
        match &case.status {
            quick_junit::TestCaseStatus::NonSuccess { description, .. } => assert!(
                description
                    .as_ref()
                    .is_some_and(|d| d.as_str().contains("hex:")),
                "the failure shows the bytes: {description:?}"
            ),
            other => panic!("{check} is not a failure in JUnit: {other:?}"),
        }
    }
}

#[test]
fn playing_the_core_the_rust_extension_passes_every_check() {
    let (_d, junit) = tmp("core-rust.xml");
    let r = run_role("core", &rust_ext(""), &junit);
    assert_run(&r, &junit, "core", None);
}

#[test]
fn playing_the_core_the_rust_extension_with_an_id_gap_fails_only_the_id_check() {
    let (_d, junit) = tmp("core-rust-break.xml");
    let r = run_role("core", &rust_ext("--break id-gap"), &junit);
    assert_run(&r, &junit, "core", Some("rukh.derived.behaviour"));
    assert!(
        r.stdout.contains("ids.gap: rukh.call: id \"e:3\" skips 2"),
        "{}",
        show(&r)
    );
}

/// An extension confirming another session than the one pinned fails the
/// derived check of the sessionId agreement alone: the engine's refusal ends the session
/// there, so what it rules about the rest is no second failure.
#[test]
fn playing_the_core_an_extension_confirming_another_session_fails_only_the_agreement() {
    fails_only(
        "core",
        &rust_ext("--break other-session"),
        "rukh.derived.agreement.sessionId",
        "the implementation stated sessionId s-7f3a9c-other; the agreed value is s-7f3a9c",
    );
}

/// An extension serving an invoke of another kind than the pinned one fails the
/// derived check of the kind agreement alone.
#[test]
fn playing_the_core_an_extension_serving_any_kind_fails_only_the_agreement() {
    fails_only(
        "core",
        &rust_ext("--break any-kind"),
        "rukh.derived.agreement.kind",
        "rukh.invoke stating kind describe (agreed: execute) was answered",
    );
}

/// An extension confirming a session that offers a capability the contract does not list
/// fails the derived check of the core's declaration alone.
#[test]
fn playing_the_core_an_extension_confirming_any_capability_fails_only_that_check() {
    fails_only(
        "core",
        &rust_ext("--break any-capability"),
        "rukh.derived.capability.unknown",
        "declaring command-result/2, which the contract does not list: expected error -32003",
    );
}

/// An extension completing an execute with a commandResult though the core did not offer
/// command-result/1 fails the capabilities check alone: it sends the invoke
/// last, declaring nothing, and reads the completion's `needs`.
#[test]
fn playing_the_core_an_extension_sending_an_unoffered_result_fails_only_the_capabilities_check() {
    fails_only(
        "core",
        &rust_ext("--break unoffered-result"),
        "rukh.derived.capabilities",
        "answered rukh.invoke with a message, which needs `command-result/1`",
    );
}

#[test]
fn playing_the_core_the_python_extension_passes_every_check() {
    let (_d, junit) = tmp("core-python.xml");
    let r = run_role("core", &python_ext(""), &junit);
    assert_run(&r, &junit, "core", None);
}

#[test]
fn playing_the_core_the_python_extension_with_an_id_gap_fails_only_the_id_check() {
    let (_d, junit) = tmp("core-python-break.xml");
    let r = run_role("core", &python_ext("--break id-gap"), &junit);
    assert_run(&r, &junit, "core", Some("rukh.derived.behaviour"));
}

#[test]
fn playing_the_extension_the_rust_core_passes_every_check() {
    let (_d, junit) = tmp("ext-core.xml");
    let r = run_role("extension", &rust_core(""), &junit);
    assert_run(&r, &junit, "extension", None);
    // The deadline check ran (the command has {deadline_ms}) and saw 124.
    assert!(r.stdout.contains("exit 124"), "{}", show(&r));
}

#[test]
fn playing_the_extension_a_core_that_sends_before_initialize_fails_only_that_check() {
    fails_only(
        "extension",
        &rust_core("--break before-initialize"),
        "rukh.derived.handshake",
        "sent rukh.invoke in `Launching`, where the session machine does not allow it",
    );
}

/// A core serving a rukh.call that repeats another invocation id fails the
/// derived check of the invocationId agreement alone.
#[test]
fn playing_the_extension_a_core_taking_any_context_fails_only_the_agreement() {
    fails_only(
        "extension",
        &rust_core("--break any-context"),
        "rukh.derived.agreement.invocationId",
        "the contract prescribes error -32000",
    );
}

/// A core taking a commandResult it never offered command-result/1 for goes
/// on to close the session: it fails the derived check of its declaration alone.
#[test]
fn playing_the_extension_a_core_taking_any_result_fails_only_that_check() {
    fails_only(
        "extension",
        &rust_core("--break any-result"),
        "rukh.derived.capability.undeclared.command-result/1",
        "the implementation went on after rukh.invoke needing command-result/1",
    );
}

/// A core taking an error answer to its invoke for a succeeded completion
/// closes the session by its steps and exits 0: it fails the derived end check of that
/// transition alone. One taking an EOF before the completion for a success fails the end
/// check of the channel's close in `Running` alone.
#[test]
fn playing_the_extension_a_core_taking_an_error_or_an_eof_for_success_fails_only_its_end() {
    fails_only(
        "extension",
        &rust_core("--break error-ok"),
        "rukh.derived.end.session.Running",
        "the core exited 0 after rukh.invoke answered with its error example",
    );
    fails_only(
        "extension",
        &rust_core("--break eof-ok"),
        "rukh.derived.end.session.Running.Closed",
        "the core exited 0 after the suite ended the channel in `Running`",
    );
}

/// The derived suite playing the extension: the Rust core launches `socat FD:3 {control}`
/// as its extension, and socat bridges the socketpair end the core hands it to the socket
/// the suite listens on. No rukh-specific launcher: the walk expects rukh.initialize,
/// answers it with the contract's example (echoing the session the core pinned) and
/// expects rukh.invoke. The honest core passes all 49 checks; `--break before-initialize`
/// fails the handshake alone, naming the message and state, and the rest skip but the
/// out-of-place check, which needs no handshake.
#[test]
fn playing_the_extension_the_rust_core_passes_every_derived_check() {
    let derived = |extra: &str| {
        let target = format!(
            "exec:{} --deadline-ms 30000 {extra} -- socat FD:3 {{control}}",
            peers().join("rukh-core").display()
        );
        suite(&[
            "--contract",
            "rukh",
            "--play",
            "extension",
            "--derived",
            "--deadline",
            "5",
            "--target",
            &target,
        ])
    };
    let r = derived("");
    assert_eq!(r.code, 0, "{}", show(&r));
    assert_eq!(r.with("PASS").len(), 49, "{}", show(&r));
    let r = derived("--break before-initialize");
    assert_eq!(
        sorted(r.with("FAIL")),
        ["rukh.derived.handshake"],
        "{}",
        show(&r)
    );
    assert_eq!(r.with("SKIP").len(), 47, "{}", show(&r));
    assert!(
        r.stdout.contains(
            "sent rukh.invoke in `Launching`, where the session machine does not allow it"
        ),
        "{}",
        show(&r)
    );
}

#[test]
fn list_usage_and_placeholders() {
    let r = suite(&[
        "--contract",
        "rukh",
        "--play",
        "extension",
        "--target",
        "exec:x {extension}",
        "--list",
    ]);
    assert_eq!(r.code, 0, "{}", show(&r));
    assert_eq!(r.stdout.lines().count(), CHECKS_AS_EXT, "{}", show(&r));
    assert!(r.stdout.contains("not applicable"), "{}", show(&r));
    let r = suite(&[
        "--contract",
        "rukh",
        "--play",
        "shell",
        "--target",
        "exec:x",
        "--list",
    ]);
    assert_eq!(r.code, 2, "{}", show(&r));
    assert!(r.stderr.contains("core or extension"), "{}", show(&r));
    // Playing the extension without {extension}: every check fails and says how to name the core.
    let (_d, junit) = tmp("bad-target.xml");
    let r = suite(&[
        "--contract",
        "rukh",
        "--play",
        "extension",
        "--target",
        "exec:/bin/true",
        "--only",
        "rukh.outcome.succeeded",
        "--junit",
        junit.to_str().expect("utf-8"),
    ]);
    assert_eq!(r.code, 1, "{}", show(&r));
    assert!(r.stdout.contains("{extension}"), "{}", show(&r));
}

/// Run `contract-proxy handoff` as a core runs its extension (fd 3 an inherited socketpair
/// end) and play the suite's side of it: the end arrives, the process exits with the
/// code written back, or with `ORPHAN_EXIT` when the suite goes away without a word.
fn handoff(instruction: Option<&[u8]>) -> Run {
    use command_fds::{CommandFdExt, FdMapping};
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("h.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let (mut ours, theirs) = UnixStream::pair().expect("socketpair");
    let mut cmd = Command::new(common::BIN);
    cmd.args(["handoff", "--socket", path.to_str().expect("utf-8")])
        .args(["--wait", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.fd_mappings(vec![FdMapping {
        parent_fd: theirs.into(),
        child_fd: 3,
    }])
    .expect("fd 3");
    let child = cmd.spawn().expect("spawn the handoff");
    drop(cmd);
    let link = accept_within(&listener, Duration::from_secs(20));
    link.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let end = contract_conformance::handoff::receive(&link).expect("the passed end");
    UnixStream::from(end).write_all(b"ping").expect("write");
    let mut got = [0u8; 4];
    ours.read_exact(&mut got)
        .expect("read through the passed end");
    assert_eq!(&got, b"ping");
    if let Some(line) = instruction {
        (&link).write_all(line).expect("instruction");
    }
    drop(link);
    common::finish(child, Duration::from_secs(20))
}

fn accept_within(
    l: &std::os::unix::net::UnixListener,
    limit: Duration,
) -> std::os::unix::net::UnixStream {
    l.set_nonblocking(true).expect("nonblocking");
    let start = std::time::Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).expect("blocking");
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(start.elapsed() < limit, "the handoff never connected");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn the_handoff_passes_its_end_and_exits_as_the_suite_says() {
    let r = handoff(Some(b"7\n"));
    assert_eq!(r.code, 7, "{}", show(&r));
    let r = handoff(None);
    assert_eq!(
        r.code,
        contract_conformance::handoff::ORPHAN_EXIT,
        "{}",
        show(&r)
    );
    assert!(r.stderr.contains("the suite went away"), "{}", show(&r));
    let child = std::process::Command::new(common::BIN)
        .args(["handoff", "--socket", "/nonexistent", "--fd", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let r = common::finish(child, Duration::from_secs(20));
    assert_eq!(r.code, 2, "{}", show(&r));
    assert!(r.stderr.contains("standard stream"), "{}", show(&r));
}
