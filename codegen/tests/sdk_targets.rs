//! The Python and C# SDK modules as snapshots: a built-in contract (kernel, both channels,
//! every section) and one no built-in shaped (proxy/tests/fixtures/jobs.json). A change to
//! what the generators write shows up here, line by line, before any SDK test runs.

use std::path::PathBuf;

use contractgen::{Config, Lang};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The generated module of `contract` in `lang` (the file named after the contract).
fn module(lang: Lang, contract: &str, file: &str) -> String {
    let mut cfg = Config::new();
    cfg.contracts(&[root().join(contract)])
        .lang(lang)
        .inputs_relative_to(root());
    let files = cfg.generate().expect("generate");
    let found = files.iter().find(|f| f.name.ends_with(file));
    found.expect("the contract's module").contents.clone()
}

#[test]
fn python_modules() {
    for (contract, name) in [
        ("schema/contracts/kernel.json", "kernel"),
        ("proxy/tests/fixtures/jobs.json", "jobs"),
    ] {
        let text = module(Lang::Python, contract, &format!("/{name}.py"));
        insta::assert_snapshot!(format!("{name}_py"), text);
    }
}

#[test]
fn csharp_modules() {
    for (contract, name) in [
        ("schema/contracts/kernel.json", "kernel"),
        ("proxy/tests/fixtures/jobs.json", "jobs"),
    ] {
        let text = module(Lang::Csharp, contract, &format!("{name}.cs"));
        insta::assert_snapshot!(format!("{name}_cs"), text);
    }
}
