//! The library without its `cli` feature: what a build script gets. The consumer example
//! depends on contractgen from its build.rs with default features off, and its build
//! graph holds no clap.

use std::path::Path;
use std::process::Command;

#[test]
fn a_build_script_compiles_no_clap() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            "contract-consumer-example",
        ])
        .args(["-e", "normal,build", "--prefix", "none"])
        .current_dir(&root)
        .output()
        .expect("cargo tree");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let has = |name: &str| text.lines().any(|l| l.starts_with(&format!("{name} v")));
    assert!(
        has("contractgen"),
        "the example builds with contractgen: {text}"
    );
    assert!(!has("clap"), "clap in a build script's graph: {text}");
}
