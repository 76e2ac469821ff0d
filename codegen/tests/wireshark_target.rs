//! The Wireshark target: snapshots of the kernel's (length-prefixed and binary
//! channels) and toolchannel's (WebSocket) dissectors, and byte-for-byte
//! determinism with the `@generated` header for every built-in contract and one
//! that is not. proxy/tests/wireshark.rs runs the dissectors in real tshark.

use std::path::PathBuf;

use contractgen::{Config, Lang};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn dissectors(paths: &[PathBuf]) -> Vec<contractgen::GeneratedFile> {
    let mut cfg = Config::new();
    cfg.contracts(paths)
        .lang(Lang::Wireshark)
        .inputs_relative_to(root());
    cfg.generate().expect("generate")
}

fn all() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = contract::builtin_names()
        .into_iter()
        .map(|n| root().join("schema/contracts").join(format!("{n}.json")))
        .collect();
    paths.push(root().join("proxy/tests/fixtures/jobs.json"));
    paths
}

#[test]
fn snapshots_of_generated_dissectors() {
    for name in ["kernel", "toolchannel"] {
        let files = dissectors(&[root().join(format!("schema/contracts/{name}.json"))]);
        let [file] = files.as_slice() else {
            panic!("{name}: one file");
        };
        assert_eq!(file.name, format!("{name}.lua"));
        insta::assert_snapshot!(format!("{name}_lua"), file.contents);
    }
}

#[test]
fn every_dissector_is_deterministic_and_marked_generated() {
    let a = dissectors(&all());
    let b = dissectors(&all());
    assert_eq!(a, b);
    assert_eq!(a.len(), all().len(), "one dissector per contract");
    for f in &a {
        assert!(
            f.contents.starts_with("-- @generated"),
            "{}: header",
            f.name
        );
    }
}
