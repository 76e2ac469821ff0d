//! Helpers shared by the generated-code test suites.

use serde_json::Value;

/// JSON equality: numbers compare by value (`40` and `40.0` are one JSON number).
#[allow(dead_code)]
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_json(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| same_json(p, q)))
        }
        _ => a == b,
    }
}

/// Write the vectors of the contract file at `path` (relative to the repository root)
/// exactly as `contractgen vectors` does, and read back each of `files` (`valid.json`,
/// `machines.json`, ...) of that contract.
#[allow(dead_code)]
pub fn vectors(path: &str, files: &[&str]) -> Vec<Value> {
    vectors_with(path, files, &[])
}

/// [`vectors`], with `--resource` arguments (`URI=FILE`) for a plain schema's outside refs.
pub fn vectors_with(path: &str, files: &[&str], resources: &[&str]) -> Vec<Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().expect("tempdir");
    let contract = root.join(path);
    let mut args = vec![
        "contractgen".to_string(),
        "vectors".into(),
        "--out".into(),
        dir.path().display().to_string(),
    ];
    for r in resources {
        args.extend(["--resource".to_string(), r.to_string()]);
    }
    args.push(contract.display().to_string());
    let cli = <contractgen::Cli as clap::Parser>::try_parse_from(args).expect("args");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = contractgen::run(&cli, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    // One contract, one directory: named after its module, which need not be the file's stem.
    let module = std::fs::read_dir(dir.path())
        .expect("vectors dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("the contract's vectors directory");
    let read = |f: &&str| -> Value {
        let text = std::fs::read_to_string(module.join(f)).expect("file");
        serde_json::from_str(&text).expect("json")
    };
    files.iter().map(read).collect()
}
