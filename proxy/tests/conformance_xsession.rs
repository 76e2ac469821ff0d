//! `contract-proxy conformance --contract xsession` against the real Python
//! reference session (examples/xsession/session.py, on the SDK that contractgen
//! generates): playing the sender against an honest recipient, playing the
//! recipient against an honest sender, and against a sender run with
//! `--break no-auth`, which must fail exactly `xsession.derived.handshake` (the
//! inboxConnection machine's auth line first); plus the JUnit file, the check list and the
//! usage errors. The derived checks run on the sessions xsession's own opener makes (the
//! registry, the tokens, the suite's inbox for the answers).
//!
//! Needs the peers' Python (see `common::peers_python`, scripts/peers-venv.sh);
//! the SDK comes from `common::python_path`.

use std::path::Path;
use std::time::Duration;

mod common;
use common::{Run, conformance, peers_python, python_path, show};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// A whole suite run: the parse-deadline check alone waits 30 s.
const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// Check ids of the suite, in order, and whether each applies playing the sender / the recipient.
const IDS: [(&str, bool, bool); 17] = [
    ("xsession.1.record", true, false),
    ("xsession.1.symlink", true, false),
    ("xsession.1.removed", true, false),
    ("xsession.1.freshness", false, true),
    ("xsession.1.cleanup", false, true),
    ("xsession.1.misaddressed", true, false),
    ("xsession.2.socket", true, false),
    ("xsession.2.one-way", true, true),
    ("xsession.3.auth", true, true),
    ("xsession.4.user-frame", false, true),
    ("xsession.5.transitions", true, true),
    ("xsession.6.per-sender-rate", false, true),
    ("xsession.6.policy", false, false),
    ("xsession.6.hold-capacity", false, false),
    ("xsession.6.input-queue", false, false),
    ("xsession.6.exemptions", false, false),
    ("xsession.6.presentation", false, false),
];

/// The derived checks playing the sender (the parse deadline's among them, 30 s).
const DERIVED_SENDER: [&str; 19] = [
    "handshake",
    "call.user",
    "parse",
    "json.not-an-object",
    "frame.at-cap",
    "frame.over-cap",
    "invalid",
    "unknown-notification",
    "unknown-member",
    "connections.maxConnections",
    "duplicate.duplicateWindow",
    "version.msgV.newer",
    "frame.split",
    "frame.merged",
    "rate.perSenderRate",
    "rate.globalRate",
    "messages",
    "timer.parseableLineDeadline",
    "behaviour",
];

/// The derived checks playing the recipient.
const DERIVED_RECIPIENT: [&str; 3] = ["handshake", "messages", "behaviour"];

/// The launch command of the reference session; `role_args` says what it does.
fn target(role_args: &str) -> String {
    format!(
        "exec:env PYTHONPATH={} {} {ROOT}/examples/xsession/session.py --registry {{registry}} --name {{name}} --socket {{socket}} {role_args}",
        python_path("xsession"),
        peers_python().display()
    )
}

const RECIPIENT: &str = "--serve --timeout 120";
const SENDER: &str =
    "--send-to {peer} --text conformance --count {count} --timeout 20 --summary {summary}";

fn suite(args: &[&str]) -> Run {
    let mut all = vec!["--contract", "xsession"];
    all.extend_from_slice(args);
    conformance(&all, None, RUN_DEADLINE)
}

/// Every applicable check passes; the rest skip as not applicable.
fn assert_all_pass(r: &Run, sender: bool) {
    assert_eq!(r.code, 0, "{}", show(r));
    assert!(r.with("FAIL").is_empty(), "{}", show(r));
    let passed = r.with("PASS");
    let skipped = r.with("SKIP");
    let derived = if sender {
        &DERIVED_SENDER[..]
    } else {
        &DERIVED_RECIPIENT[..]
    };
    for id in derived.iter().map(|d| format!("xsession.derived.{d}")) {
        assert!(passed.contains(&id), "{id} did not pass\n{}", show(r));
    }
    for (id, s, rc) in IDS {
        let applies = if sender { s } else { rc };
        if applies {
            assert!(
                passed.iter().any(|p| p == id),
                "{id} did not pass\n{}",
                show(r)
            );
        } else {
            assert!(
                skipped.iter().any(|p| p == id),
                "{id} did not skip\n{}",
                show(r)
            );
        }
    }
}

#[test]
fn playing_the_sender_an_honest_recipient_passes_every_check() {
    let junit = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("xsession-sender-{}.xml", std::process::id()));
    let r = suite(&[
        "--play",
        "sender",
        "--target",
        &target(RECIPIENT),
        "--junit",
        junit.to_str().expect("utf-8 path"),
    ]);
    assert_all_pass(&r, true);
    let xml = std::fs::read_to_string(&junit).expect("junit written");
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(xml.contains("<testsuite name=\"xsession.sender\""), "{xml}");
    let cases = IDS.len() + DERIVED_SENDER.len();
    assert_eq!(xml.matches("<testcase ").count(), cases, "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
    assert!(xml.trim_end().ends_with("</testsuites>"), "{xml}");
}

#[test]
fn playing_the_recipient_an_honest_sender_passes_every_check() {
    let r = suite(&["--play", "recipient", "--target", &target(SENDER)]);
    assert_all_pass(&r, false);
}

#[test]
fn a_sender_without_the_auth_line_fails_exactly_the_handshake() {
    let junit = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("xsession-noauth-{}.xml", std::process::id()));
    let r = suite(&[
        "--play",
        "recipient",
        "--target",
        &target(&format!("{SENDER} --break no-auth")),
        "--junit",
        junit.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(r.code, 1, "{}", show(&r));
    assert_eq!(
        r.with("FAIL"),
        vec!["xsession.derived.handshake".to_string()],
        "{}",
        show(&r)
    );
    let xml = std::fs::read_to_string(&junit).expect("junit written");
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
    assert!(xml.contains("xsession.derived.handshake"), "{xml}");
    // The evidence is the frame that came first, as it crossed the wire.
    assert!(r.stdout.contains("\"type\":\"user\""), "{}", show(&r));
}

/// Every sender check but the 30 s timer's, against a recipient run with `--break FLAG`.
fn sender_checks_against_broken(flag: &str) -> Run {
    let derived = DERIVED_SENDER.iter().filter(|d| !d.starts_with("timer."));
    let ids: Vec<String> = (derived.map(|d| format!("xsession.derived.{d}")))
        .chain(IDS.iter().map(|(id, _, _)| id.to_string()))
        .collect();
    let target = target(&format!("{RECIPIENT} --break {flag}"));
    let mut args = vec!["--play", "sender", "--target", &target];
    ids.iter().for_each(|id| args.extend(["--only", id]));
    suite(&args)
}

/// The line cap counted in bytes where the contract counts UTF-16 code units (a line at
/// the cap made of 2-byte characters is dropped) fails only the derived at-cap check; a
/// frame of a newer msgV taken like any other fails only the derived newer-version check;
/// a recipient without its per-sender or its global admission bucket fails only that
/// limit's rate check (the global one's messages spread over the suite's inbox sockets, so
/// the per-sender bucket refuses none of them); one taking the same body again within
/// duplicateWindow fails only the derived duplicate check; one serving a connection over
/// maxConnections fails only the derived connection-cap check.
#[test]
fn a_recipient_breaking_a_rule_of_the_data_fails_exactly_its_derived_check() {
    for (flag, fails) in [
        ("line-bytes", "frame.at-cap"),
        ("newer-frames", "version.msgV.newer"),
        ("no-sender-rate", "rate.perSenderRate"),
        ("no-global-rate", "rate.globalRate"),
        ("no-duplicates", "duplicate.duplicateWindow"),
        ("no-max-connections", "connections.maxConnections"),
    ] {
        let r = sender_checks_against_broken(flag);
        assert_eq!(r.code, 1, "{flag}: {}", show(&r));
        let want = vec![format!("xsession.derived.{fails}")];
        assert_eq!(r.with("FAIL"), want, "{flag}: {}", show(&r));
        // Both sizes are on the cap's failure: which one the receiver counted is the point.
        let sizes = r.stdout.contains("UTF-16 code units (the cap: ");
        assert_eq!(sizes, flag == "line-bytes", "{flag}: {}", show(&r));
    }
}

#[test]
fn the_list_names_every_check_and_bad_usage_exits_2() {
    let r = suite(&[
        "--play",
        "sender",
        "--target",
        "exec:true {registry}",
        "--list",
    ]);
    assert_eq!(r.code, 0, "{}", show(&r));
    for (id, _, _) in IDS {
        assert!(r.stdout.contains(id), "{id} not listed\n{}", show(&r));
    }
    let r = suite(&["--play", "core", "--target", "exec:true {registry}"]);
    assert_eq!(r.code, 2, "{}", show(&r));
    // A target the suite cannot launch with its placeholders fails every check that runs.
    let r = suite(&[
        "--play",
        "sender",
        "--target",
        "unix:/nonexistent/inbox.sock",
        "--only",
        "xsession.3.auth",
    ]);
    assert_eq!(r.code, 1, "{}", show(&r));
    assert!(r.stdout.contains("{registry}"), "{}", show(&r));
}
