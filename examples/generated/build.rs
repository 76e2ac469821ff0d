//! Generates the Rust bindings of the built-in contracts, the jobs fixture and the schema
//! corpus (codegen/tests/corpus) into OUT_DIR.

use std::error::Error;
use std::path::{Path, PathBuf};

use serde_json::Value;

const CORPUS: &str = "../../codegen/tests/corpus";

fn main() -> Result<(), Box<dyn Error>> {
    contractgen::Config::new()
        .contracts([
            "../../schema/contracts/kernel.json",
            "../../schema/contracts/xsession.json",
            "../../schema/contracts/rukh.json",
            "../../schema/contracts/toolchannel.json",
            "../../schema/contracts/mcp.json",
            // A contract the project did not write for itself: the jobs fixture.
            "../../proxy/tests/fixtures/jobs.json",
        ])
        .compile()?;
    corpus()
}

/// Every corpus entry without a Rust gap: its schema with its examples attached (the rule
/// of codegen/tests/corpus/assemble.py), generated into OUT_DIR/corpus/, and corpus.rs
/// naming each module and dispatching `roundtrip_named` by contract file name.
fn corpus() -> Result<(), Box<dyn Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("corpus");
    std::fs::create_dir_all(&out)?;
    println!("cargo:rerun-if-changed={CORPUS}");
    let mut entries: Vec<PathBuf> = std::fs::read_dir(CORPUS)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("SOURCE.toml").is_file())
        .collect();
    entries.sort();
    let mut files = Vec::new();
    let mut resources: Vec<(String, String, PathBuf)> = Vec::new();
    for entry in &entries {
        println!("cargo:rerun-if-changed={}", entry.display());
        if let Some((doc, used)) = assemble(entry)? {
            // Underscores: the file stem names the contract, whose module is then this name.
            let name = entry
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .replace('-', "_");
            let file = out.join(format!("{name}.json"));
            contractgen::write_file_if_changed(&file, &serde_json::to_vec_pretty(&doc)?)?;
            resources.extend(used.into_iter().map(|(uri, f)| (name.clone(), uri, f)));
            files.push((name.to_string(), file));
        }
    }
    // Not `compile()`: it would tell cargo to watch these assembled files, which this script
    // writes itself, so every cargo run would find the script stale and run it again.
    let mut cfg = contractgen::Config::new();
    cfg.contracts(files.iter().map(|(_, f)| f));
    for (_, uri, file) in &resources {
        cfg.resource(Some(uri), file);
    }
    for f in cfg.generate()? {
        contractgen::write_file_if_changed(&out.join(&f.name), f.contents.as_bytes())?;
    }
    let mods = mods(&files) + &resource_table(&resources)?;
    contractgen::write_file_if_changed(&out.join("mods.rs"), mods.as_bytes())?;
    Ok(())
}

/// An entry's schema with its examples attached, and the documents its `$ref`s name outside
/// it (the `[resources]` table: URI → file below the entry).
type Assembled = (Value, Vec<(String, PathBuf)>);

fn assemble(entry: &Path) -> Result<Option<Assembled>, Box<dyn Error>> {
    let source: toml::Table = std::fs::read_to_string(entry.join("SOURCE.toml"))?.parse()?;
    if let Some(gap) = source
        .get("gaps")
        .and_then(|g| g.get("rust"))
        .and_then(|g| g.as_str())
    {
        println!(
            "cargo:warning=corpus {}: left out for Rust: {gap}",
            entry.display()
        );
        return Ok(None);
    }
    let mut doc: Value = serde_json::from_slice(&std::fs::read(entry.join("schema.json"))?)?;
    let root = source.get("root").and_then(|r| r.as_str()).unwrap_or("");
    let mut examples: Vec<(&String, &toml::Value)> = source
        .get("examples")
        .and_then(|e| e.as_table())
        .map(|t| t.iter().collect())
        .unwrap_or_default();
    examples.sort_by(|a, b| a.0.cmp(b.0));
    for (file, value) in examples {
        let example: Value =
            serde_json::from_slice(&std::fs::read(entry.join("examples").join(file))?)?;
        for ty in example_types(value) {
            let ty = if ty.is_empty() { root } else { ty };
            attach(&mut doc, ty, &example)
                .ok_or_else(|| format!("{}: no definition {ty}", entry.display()))?;
        }
    }
    let used = source
        .get("resources")
        .and_then(|r| r.as_table())
        .into_iter()
        .flatten()
        .filter_map(|(uri, f)| Some((uri.clone(), entry.join(f.as_str()?).canonicalize().ok()?)))
        .collect();
    Ok(Some((doc, used)))
}

/// `RESOURCES`: each entry's `--resource URI=FILE` arguments, for the vectors its test makes.
fn resource_table(resources: &[(String, String, PathBuf)]) -> Result<String, Box<dyn Error>> {
    let mut s = String::from(
        "/// Each entry's `--resource URI=FILE` arguments (its `[resources]` table).\npub const RESOURCES: &[(&str, &str)] = &[",
    );
    for (entry, uri, file) in resources {
        let file = file.to_str().ok_or("a resource path that is not UTF-8")?;
        s.push_str(&format!("({entry:?}, {:?}), ", format!("{uri}={file}")));
    }
    s.push_str("];\n");
    Ok(s)
}

/// An example's definitions: a string, or a table's `definition` and its `also` list.
fn example_types(value: &toml::Value) -> Vec<&str> {
    if let Some(s) = value.as_str() {
        return vec![s];
    }
    let first = value.get("definition").and_then(|d| d.as_str());
    let also = value.get("also").and_then(|a| a.as_array());
    first
        .into_iter()
        .chain(also.into_iter().flatten().filter_map(|a| a.as_str()))
        .collect()
}

/// Append `example` to the `examples` of definition `ty` (the root for ""); `None` when the
/// schema has no such definition.
fn attach(doc: &mut Value, ty: &str, example: &Value) -> Option<()> {
    let def = if ty.is_empty() {
        doc
    } else {
        let key = ["$defs", "definitions"]
            .into_iter()
            .find(|k| doc.get(k).and_then(|d| d.get(ty)).is_some())?;
        doc.get_mut(key)?.get_mut(ty)?
    };
    let list = def
        .as_object_mut()?
        .entry("examples")
        .or_insert_with(|| Value::Array(Vec::new()));
    list.as_array_mut()?.push(example.clone());
    Some(())
}

/// `pub mod <module>` per entry, and one `roundtrip` over them by entry name.
fn mods(files: &[(String, PathBuf)]) -> String {
    let mut s = String::new();
    for (m, _) in files {
        s.push_str(&format!(
            "/// Corpus entry `{m}`.\npub mod {m} {{ include!(concat!(env!(\"OUT_DIR\"), \"/corpus/{m}.rs\")); }}\n"
        ));
    }
    s.push_str("/// The corpus entries generated for Rust.\npub const ENTRIES: &[&str] = &[");
    for (m, _) in files {
        s.push_str(&format!("{m:?}, "));
    }
    s.push_str("];\n/// `roundtrip_named` of entry `entry`'s module; `None` for an unknown entry or type.\npub fn roundtrip(entry: &str, type_name: &str, value: ::serde_json::Value) -> Option<Result<::serde_json::Value, ::serde_json::Error>> {\nmatch entry {\n");
    for (m, _) in files {
        s.push_str(&format!(
            "{m:?} => {m}::roundtrip_named(type_name, value),\n"
        ));
    }
    s.push_str("_ => None,\n}\n}\n");
    s
}
