//! The Rust side of the cross-language vectors (`contractgen vectors`): every
//! valid vector decodes into its generated type and re-encodes to an equal
//! JSON value; every invalid one is rejected, and the contract's schema
//! rejects it for exactly the labelled reason. Python and C# load the same files.

mod common;
use common::same_json;

use contract::check::rooted;
use jsonschema::error::ValidationErrorKind;
use serde_json::{Value, json};

/// The valid and invalid vectors of a built-in contract.
fn vectors(name: &str) -> (Vec<Value>, Vec<Value>) {
    let path = format!("schema/contracts/{name}.json");
    let mut files = common::vectors(&path, &["valid.json", "invalid.json"]).into_iter();
    let mut list = || match files.next() {
        Some(Value::Array(a)) => a,
        other => panic!("{name}: not a list of vectors: {other:?}"),
    };
    (list(), list())
}

fn label_of(kind: &ValidationErrorKind, out: &mut Vec<&'static str>) {
    match kind {
        ValidationErrorKind::Required { .. } => out.push("missing-field"),
        ValidationErrorKind::Type { .. } => out.push("wrong-type"),
        ValidationErrorKind::AdditionalProperties { .. }
        | ValidationErrorKind::UnevaluatedProperties { .. } => out.push("unknown-field"),
        ValidationErrorKind::Constant { .. } => out.push("bad-literal"),
        ValidationErrorKind::Enum { options } => {
            out.push(if options.as_array().is_some_and(|a| a.len() == 1) {
                "bad-literal"
            } else {
                "bad-enum"
            })
        }
        ValidationErrorKind::Minimum { .. }
        | ValidationErrorKind::Maximum { .. }
        | ValidationErrorKind::ExclusiveMinimum { .. }
        | ValidationErrorKind::ExclusiveMaximum { .. } => out.push("out-of-range"),
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            for branch in context {
                for e in branch {
                    label_of(e.kind(), out);
                }
            }
        }
        _ => {}
    }
}

macro_rules! vector_suite {
    ($test:ident, $m:ident, $name:literal) => {
        #[test]
        fn $test() {
            use contract_generated::$m;
            let (valid, invalid) = vectors($name);
            assert!(!valid.is_empty() && !invalid.is_empty());
            for v in &valid {
                let id = v["id"].as_str().unwrap_or("?");
                for (ty, val) in [(&v["messageType"], &v["message"]), (&v["payloadType"], &v["payload"])] {
                    let Some(ty) = ty.as_str() else { continue };
                    let back = $m::roundtrip_named(ty, val.clone()).unwrap_or_else(|| panic!("{id}: no type {ty}"));
                    let back = back.unwrap_or_else(|e| panic!("{id}: {ty} rejects a valid vector: {e}"));
                    assert!(same_json(&back, val), "{id}: {ty} re-encodes differently:\n{back}\n{val}");
                }
            }
            let contract = $m::CONTRACT.wire().expect("contract").contract().clone();
            let mut labels_seen = std::collections::BTreeSet::new();
            for v in &invalid {
                let id = v["id"].as_str().unwrap_or("?");
                let ty = v["type"].as_str().expect("type");
                let label = v["error"].as_str().expect("error");
                let text = v["text"].as_str().expect("text");
                labels_seen.insert(label.to_string());
                let parsed: Result<Value, _> = serde_json::from_str(text);
                if label == "parse" {
                    assert!(parsed.is_err(), "{id}: parse vector parsed");
                    continue;
                }
                let value = parsed.unwrap_or_else(|e| panic!("{id}: {e}"));
                // Where the type sits in the contract (its `$defs` key may differ from its name).
                let at = v["schema"].as_str().expect("schema pointer");
                let schema = rooted(&contract, &json!({"$ref": format!("#{at}")}));
                let validator = jsonschema::draft202012::new(&schema).expect("schema compiles");
                let mut labels = Vec::new();
                for e in validator.iter_errors(&value) {
                    label_of(e.kind(), &mut labels);
                }
                assert!(labels.contains(&label), "{id}: schema gives {labels:?}, vector says {label}");
                // The typed decode (typify + the generator's const handling) must refuse it too,
                // except for the bounds typify does not check, which `decode` enforces via the schema.
                if label != "out-of-range" {
                    let typed = $m::roundtrip_named(ty, value.clone()).expect("type exists");
                    assert!(typed.is_err(), "{id}: generated type {ty} accepted a {label} vector");
                }
            }
            eprintln!("{}: {} valid, {} invalid vectors, labels {labels_seen:?}", $name, valid.len(), invalid.len());
        }
    };
}

vector_suite!(kernel_vectors, kernel, "kernel");
vector_suite!(xsession_vectors, xsession, "xsession");
vector_suite!(rukh_vectors, rukh, "rukh");
vector_suite!(toolchannel_vectors, toolchannel, "toolchannel");
