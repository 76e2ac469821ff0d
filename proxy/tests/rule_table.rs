//! docs/contract-format.md's table "Every stateful rule the proxy applies" is held to the
//! code: every rule name the engine (`policy/src/engine`, and the id rules it reads from
//! `contract::ids`) or a named extension (`proxy/src/policy/*.rs`) can report has a row,
//! and every row names a rule something reports. The engine names no protocol, so its
//! rule names are the literals of its families; an extension's are the literals of its
//! protocol's name with two dots (its methods have one). docs/proxy.md's table of stateful
//! rules is held to the contract format and the built-in contracts.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use regex::Regex;
use serde_json::Value;

/// Rule families the engine reports.
const FAMILIES: &str =
    "machine|ids|limit|credit|claim|agreement|capability|frame|errors|version|method";
/// Protocols whose named extensions the proxy implements.
const HOOKS: [&str; 3] = ["rukh", "toolchannel", "xsession"];

fn literals(files: &[&Path], pattern: &str) -> BTreeSet<String> {
    let re = Regex::new(&format!(r#""(({pattern})\.[a-z-]+(\.[a-z-]+)*)""#)).expect("regex");
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        // Tests assert rule names too; only what the code reports counts.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        out.extend(re.captures_iter(code).map(|c| c[1].to_string()));
    }
    out
}

/// Every rule the code can report.
fn reported() -> BTreeSet<String> {
    let root = common::root();
    let engine: Vec<_> = std::fs::read_dir(root.join("policy/src/engine"))
        .expect("the engine's sources")
        .map(|e| e.expect("entry").path())
        .chain([root.join("schema/src/ids.rs")])
        .collect();
    let engine: Vec<&Path> = engine.iter().map(|p| p.as_path()).collect();
    let mut out = literals(&engine, FAMILIES);
    for hook in HOOKS {
        let file = root.join(format!("proxy/src/policy/{hook}.rs"));
        let named = literals(&[&file], hook);
        out.extend(named.into_iter().filter(|r| r.matches('.').count() >= 2));
    }
    out
}

/// Every rule the table names; a name starting with `.` shares the one before it up to
/// its last dot (`.pending` after `ids.reuse` would be `ids.pending`).
fn tabled() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(common::root().join("docs/contract-format.md"))
        .expect("contract-format.md");
    let section = doc
        .split("### Every stateful rule the proxy applies")
        .nth(1)
        .expect("the section");
    let section = section.split("\n#").next().unwrap_or_default();
    let name = Regex::new(r"`([a-z.-]+)`").expect("regex");
    let mut out = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split(" | ").next().unwrap_or_default();
        let mut last = String::new();
        for c in name.captures_iter(first) {
            let n = &c[1];
            let full = match n.strip_prefix('.') {
                Some(tail) => format!("{}.{tail}", last.rsplit_once('.').map_or("", |p| p.0)),
                None => n.to_string(),
            };
            last = full.clone();
            out.insert(full);
        }
    }
    out
}

#[test]
fn every_rule_the_proxy_reports_has_a_row_and_every_row_a_rule() {
    let (code, doc) = (reported(), tabled());
    assert!(code.len() > 20, "the scan found too few rules: {code:?}");
    let missing: Vec<_> = code.difference(&doc).collect();
    let stale: Vec<_> = doc.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "rules without a row in docs/contract-format.md: {missing:?}; rows no code reports: {stale:?}"
    );
}

/// Every name of the contract format anywhere in the meta-schema: property names, and the
/// string values of enums and consts.
fn format_names() -> BTreeSet<String> {
    fn walk(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(props)) = m.get("properties") {
                    out.extend(props.keys().cloned());
                }
                if let Some(Value::Array(values)) = m.get("enum") {
                    out.extend(values.iter().filter_map(Value::as_str).map(String::from));
                }
                // A tagged variant's tag (a limit's `kind: rate`).
                if let Some(Value::String(tag)) = m.get("const") {
                    out.insert(tag.clone());
                }
                m.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(common::root().join("schema/contract.schema.json"))
        .expect("the meta-schema");
    let mut out = BTreeSet::new();
    walk(&serde_json::from_str(&text).expect("json"), &mut out);
    out
}

/// Whether some built-in contract has the member `path` (a `*` segment: any member).
fn some_contract_has(path: &[&str]) -> bool {
    fn has(v: &Value, path: &[&str]) -> bool {
        match (path.split_first(), v) {
            (None, _) => true,
            (Some((&"*", rest)), Value::Object(m)) => m.values().any(|x| has(x, rest)),
            (Some((seg, rest)), Value::Object(m)) => m.get(*seg).is_some_and(|x| has(x, rest)),
            _ => false,
        }
    }
    contract::BUILTIN.iter().any(|(_, text)| {
        let doc: Value = serde_json::from_str(text).expect("a built-in contract");
        has(&doc, path)
    })
}

/// docs/proxy.md's table of stateful rules is checked against the contract format: every
/// name in its "where the contract says it" column is a field or value of the format
/// (`counts: open-connections`), or a member the built-in contracts define there
/// (`codes.closeCodes`), and every named extension is one the tools know.
#[test]
fn proxy_md_names_only_what_the_contracts_hold() {
    let doc = std::fs::read_to_string(common::root().join("docs/proxy.md")).expect("proxy.md");
    let section = doc.split("### Stateful rules").nth(1).expect("the section");
    let section = section.split("\n#").next().unwrap_or_default();
    let (names, tick) = (format_names(), Regex::new(r"`([^`]+)`").expect("regex"));
    let mut checked = 0;
    for row in section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| what"))
    {
        let Some(column) = row.split(" | ").nth(1) else {
            continue;
        };
        for token in tick.captures_iter(column).map(|c| c[1].to_string()) {
            let (path, value) = token.split_once(": ").unwrap_or((&token, ""));
            let segs: Vec<&str> = path.split('.').collect();
            let known = |i: usize| {
                segs[i] == "*" || names.contains(segs[i]) || some_contract_has(&segs[..=i])
            };
            assert!(
                (0..segs.len()).all(known) && (value.is_empty() || names.contains(value)),
                "docs/proxy.md names `{token}`, which neither the format nor a built-in contract holds: {row}"
            );
            checked += 1;
        }
    }
    for hook in contract::extensions::KNOWN {
        assert!(
            section.contains(&format!("`{}`", hook.name)),
            "{} has no row",
            hook.name
        );
    }
    assert!(checked > 20, "only {checked} names checked");
}
