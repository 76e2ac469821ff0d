//! Every error, close, exit, status and reason code a seed states is found in
//! its contract. Codes are pulled out of the seed text by pattern, so a code
//! added to a seed and forgotten in the contract fails here.

use std::collections::BTreeSet;
use std::path::PathBuf;

use regex::Regex;

fn seed(file: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Codes and method names of a contract, as text.
fn known(name: &str) -> BTreeSet<String> {
    let c = contract::builtin(name).expect("contract loads");
    let mut out = contract::check::all_code_values(&c);
    out.extend(c.methods.keys().cloned());
    out
}

fn assert_found(contract_name: &str, seed_file: &str, patterns: &[&str], min: usize) {
    let text = seed(seed_file);
    let known = known(contract_name);
    let mut found = BTreeSet::new();
    for p in patterns {
        let re = Regex::new(p).expect("pattern");
        for cap in re.captures_iter(&text) {
            let m = cap
                .get(1)
                .or_else(|| cap.get(0))
                .expect("match")
                .as_str()
                .to_string();
            found.insert(m);
        }
    }
    assert!(
        found.len() >= min,
        "{seed_file}: only {} codes matched: {found:?}",
        found.len()
    );
    let missing: Vec<_> = found.iter().filter(|c| !known.contains(*c)).collect();
    assert!(
        missing.is_empty(),
        "{contract_name} lacks codes its seed states: {missing:?}"
    );
}

#[test]
fn seeds_in_repo_match_shared_originals() {
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/seeds");
    if !shared.is_dir() {
        eprintln!(
            "no {} beside the repository: nothing to compare",
            shared.display()
        );
        return;
    }
    for (_, file) in [
        ("kernel", "000_8cf2471ea150c97e.txt"),
        ("xsession", "001_8e677a3411e5397b.txt"),
        ("rukh", "003_255b513360fa4c8c.txt"),
        ("toolchannel", "004_3a609d0467c4874c.txt"),
    ] {
        let original = std::fs::read_to_string(shared.join(file)).expect("original");
        assert!(
            original == seed(file),
            "schema/seeds/{file} differs from the shared original"
        );
    }
}

#[test]
fn kernel_error_codes() {
    assert_found(
        "kernel",
        "000_8cf2471ea150c97e.txt",
        &[r"\b((?:protocol|app|tool|confirmation|calc|permission)\.[a-z_]+)\b"],
        11,
    );
}

#[test]
fn xsession_statuses_and_drop_reasons() {
    assert_found(
        "xsession",
        "001_8e677a3411e5397b.txt",
        &[
            // The sender-side state machine lines: "state → a | b | c".
            r"(?m)^([a-z]+)\s+→",
            r"(?m)(?:→|\|)\s*([a-z]+)",
            r#""status"\s*:\s*"([a-z-]+)""#,
            r"dropReason — это ([a-z-]+)",
            r"dropReason — это [a-z-]+, ([a-z-]+)",
            r"или ([a-z-]+)\. droppedMsgIds",
        ],
        10,
    );
}

#[test]
fn rukh_outcomes_reasons_and_exit_codes() {
    assert_found(
        "rukh",
        "003_255b513360fa4c8c.txt",
        &[
            r"`(rejected|execution_failed|succeeded|command_failed|cancelled|[a-z]+_[a-z_]+)`",
            r"(?m)^`[a-z_]+`(?:, `[a-z_]+`)?\t`(\d+)`",
        ],
        10,
    );
}

#[test]
fn toolchannel_jsonrpc_close_exit_and_http_codes() {
    assert_found(
        "toolchannel",
        "004_3a609d0467c4874c.txt",
        &[
            r"`(-320\d\d)`",
            r"`(40\d\d)`",
            r"(?m)^`(\d+)`\t`EX_",
            r"(?:exit|выход(?:ит)?(?: с)?) `?(\d+)\b",
            r"\b(101|401|426) [A-Z]",
            r"HTTP (\d{3})",
            r"\b([a-z]+_timeout|channel_version)\b",
        ],
        16,
    );
}
