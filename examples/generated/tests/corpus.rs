//! The Rust side of the schema corpus (codegen/tests/corpus): every public schema, read as
//! a types-only contract, generated into Rust by build.rs (so it compiles with `-D
//! warnings`); here each valid vector (the entry's examples) decodes into its type and
//! re-encodes to an equal value, and each invalid one derived from them is refused.
//! Python and C# run the same vectors (sdk-tests/*/run.sh), so the three agree on each.

mod common;
use common::same_json;

use contract_generated::corpus;
use serde_json::Value;

fn check(entry: &str) -> (usize, usize) {
    let path = format!("{}/{entry}.json", corpus::DIR);
    let resources: Vec<&str> = (corpus::RESOURCES.iter())
        .filter(|(e, _)| *e == entry)
        .map(|(_, r)| *r)
        .collect();
    let files = common::vectors_with(&path, &["valid.json", "invalid.json"], &resources);
    let mut files = files.into_iter();
    let mut list = || match files.next() {
        Some(Value::Array(a)) => a,
        other => panic!("{entry}: not a list of vectors: {other:?}"),
    };
    let (valid, invalid) = (list(), list());
    assert!(!valid.is_empty(), "{entry}: no examples");
    for v in &valid {
        let id = v["id"].as_str().unwrap_or("?");
        let (Some(ty), val) = (v["payloadType"].as_str(), &v["payload"]) else {
            continue;
        };
        let back = corpus::roundtrip(entry, ty, val.clone())
            .unwrap_or_else(|| panic!("{entry} {id}: no type {ty}"))
            .unwrap_or_else(|e| panic!("{entry} {id}: {ty} rejects a valid example: {e}"));
        assert!(
            same_json(&back, val),
            "{entry} {id}: {ty} re-encodes differently:\n{back}\n{val}"
        );
    }
    for v in &invalid {
        let id = v["id"].as_str().unwrap_or("?");
        let (ty, label) = (
            v["type"].as_str().expect("type"),
            v["error"].as_str().expect("error"),
        );
        let text = v["text"].as_str().expect("text");
        // typify checks no integer bounds: the generated `decode` enforces them via the schema.
        if label == "parse" || label == "out-of-range" {
            continue;
        }
        let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{id}: {e}"));
        let typed = corpus::roundtrip(entry, ty, value).expect("type exists");
        assert!(
            typed.is_err(),
            "{entry} {id}: {ty} accepted a {label} vector"
        );
    }
    (valid.len(), invalid.len())
}

#[test]
fn every_corpus_entry_round_trips_its_examples_and_refuses_their_mutations() {
    assert!(!corpus::ENTRIES.is_empty(), "the corpus is empty");
    // Every entry runs, so one failure does not hide another's.
    let failed: Vec<String> = corpus::ENTRIES
        .iter()
        .filter_map(|entry| match std::panic::catch_unwind(|| check(entry)) {
            Ok((valid, invalid)) => {
                eprintln!("{entry}: {valid} valid, {invalid} invalid vectors");
                None
            }
            Err(_) => Some(entry.to_string()),
        })
        .collect();
    assert!(
        failed.is_empty(),
        "corpus entries failing in Rust: {failed:?}"
    );
}
