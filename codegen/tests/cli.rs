//! The `contractgen` binary as a user runs it: exit codes, output format, and
//! the committed meta-schema being fresh.

use assert_cmd::Command;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn contractgen() -> Command {
    let mut c = Command::cargo_bin("contractgen").expect("binary built");
    c.current_dir(root());
    c
}

#[test]
fn committed_meta_schema_is_fresh() {
    let committed = std::fs::read_to_string(root().join("schema/contract.schema.json"))
        .expect("committed meta-schema");
    assert!(
        committed == contractgen::meta_schema_text(),
        "schema/contract.schema.json is stale: run `cargo run -p contractgen -- meta-schema --out schema/contract.schema.json`"
    );
}

#[test]
fn check_passes_on_all_four_contracts() {
    let out = contractgen()
        .args([
            "check",
            "schema/contracts/kernel.json",
            "schema/contracts/xsession.json",
            "schema/contracts/rukh.json",
            "schema/contracts/toolchannel.json",
        ])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_accepts_builtin_names() {
    contractgen()
        .args(["check", "kernel", "rukh"])
        .assert()
        .code(0);
}

fn broken(edit: impl FnOnce(&mut serde_json::Value)) -> (tempfile::TempDir, PathBuf) {
    let text = std::fs::read_to_string(root().join("schema/contracts/toolchannel.json"))
        .expect("contract");
    let mut doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    edit(&mut doc);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("ser")).expect("write");
    (dir, path)
}

fn stdout_of_failed_check(path: &PathBuf) -> String {
    let out = contractgen().arg("check").arg(path).output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "check must exit 1 on a broken contract"
    );
    String::from_utf8(out.stdout).expect("utf8")
}

#[test]
fn dangling_error_reference_exits_1_with_pointer() {
    let (_d, p) = broken(|d| {
        let name = d["methods"]
            .as_object()
            .expect("methods")
            .iter()
            .find(|(_, m)| m.get("errors").is_some())
            .map(|(n, _)| n.clone())
            .expect("a method with errors");
        d["methods"][&name]["errors"][0] = serde_json::json!(-31999);
    });
    let out = stdout_of_failed_check(&p);
    assert!(
        out.contains("/errors/0: error code -31999 is not in the error catalog [error-ref]"),
        "{out}"
    );
    assert!(out.contains("broken.json#/methods/"), "{out}");
}

#[test]
fn duplicate_code_exits_1_with_pointer() {
    let (_d, p) = broken(|d| {
        let first = d["errors"][0].clone();
        d["errors"].as_array_mut().expect("errors").push(first);
    });
    let out = stdout_of_failed_check(&p);
    assert!(
        out.contains("#/errors/") && out.contains("[duplicate-code]"),
        "{out}"
    );
}

#[test]
fn bad_example_exits_1_with_pointer() {
    let (_d, p) = broken(|d| {
        d["methods"]["initialize"]["examples"][0]["message"]["jsonrpc"] = serde_json::json!("1.0");
    });
    let out = stdout_of_failed_check(&p);
    assert!(
        out.contains(
            "#/methods/initialize/examples/0/message: `jsonrpc` must be \"2.0\" [bad-example]"
        ),
        "{out}"
    );
}

#[test]
fn missing_file_is_a_usage_error() {
    contractgen()
        .args(["check", "no/such/contract.json"])
        .assert()
        .code(2);
}

#[test]
fn no_arguments_is_a_usage_error() {
    contractgen().arg("check").assert().code(2);
}

#[test]
fn not_json_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("x.json");
    std::fs::write(&p, "{ nope").expect("write");
    contractgen().arg("check").arg(&p).assert().code(1);
}

/// A contract we did not build in (examples/lsp/lsp.json) draws its lifecycle with the
/// typed triggers on the edges, from whatever path it is given.
#[test]
fn docs_draw_typed_triggers_on_machine_edges() {
    let out = tempfile::tempdir().expect("tempdir");
    contractgen()
        .args(["generate", "--lang", "docs", "--out"])
        .arg(out.path())
        .arg(root().join("examples/lsp/lsp.json"))
        .assert()
        .success();
    let page = std::fs::read_to_string(out.path().join("lsp.md")).expect("lsp.md");
    let c = contract::load(&root().join("examples/lsp/lsp.json")).expect("loads");
    let sm = &c.state_machines["lifecycle"];
    let labelled = page
        .lines()
        .filter(|l| l.contains(" --> ") && l.contains(" : "))
        .count();
    let typed = sm
        .transitions
        .iter()
        .filter(|t| t.trigger.is_some())
        .count();
    assert!(
        typed > 0 && labelled == typed,
        "{labelled} labelled edges for {typed} typed triggers:\n{page}"
    );
    assert!(
        page.contains("Starting --> Initializing : initialize response from server"),
        "{page}"
    );
}
