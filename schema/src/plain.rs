//! A plain JSON Schema document read as a types-only contract.
//!
//! Teams often start from a published schema (MCP's, CloudEvents', a vendor's) rather than
//! a contract. Such a document becomes a contract with no parties, channels or methods whose
//! `$defs` are the schema's definitions (`$defs` and draft-07 `definitions` alike) plus its
//! root, when the root describes a value. References are rewritten to `#/$defs/…`, so the
//! generators, the vectors and the checks see one kind of pointer. Nothing else of the
//! schema changes: its keywords are validated as the contract's `$defs` always are.

use serde_json::{Map, Value, json};

/// Keywords that make a document's root describe a value (rather than only hold definitions).
const VALUE_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "oneOf",
    "anyOf",
    "allOf",
    "$ref",
    "enum",
    "const",
    "items",
];

/// Whether `doc` is a plain JSON Schema rather than a contract: it has none of a contract's
/// parties, channels or methods, and it declares a JSON Schema dialect or holds definitions.
pub fn is_plain_schema(doc: &Value) -> bool {
    let Some(o) = doc.as_object() else {
        return false;
    };
    if ["parties", "channels", "methods"]
        .iter()
        .any(|k| o.contains_key(*k))
    {
        return false;
    }
    let dialect = o
        .get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("json-schema.org"));
    dialect || o.contains_key("$defs") || o.contains_key("definitions")
}

/// The contract a plain schema stands for. `stem` is its file's name without the
/// extension; it names the contract (lower-case, dashes) and, without a `title`, the root type.
pub fn contract_of(stem: &str, doc: &Value) -> Value {
    let name = contract_name(stem);
    let title = doc.get("title").and_then(Value::as_str);
    let mut root = root_name(title.unwrap_or(stem));
    let taken = |k: &str| {
        ["definitions", "$defs"]
            .iter()
            .any(|d| doc.get(*d).and_then(|x| x.get(k)).is_some())
    };
    while taken(&root) {
        root.push_str("Document");
    }
    let mut defs = Map::new();
    for key in ["definitions", "$defs"] {
        if let Some(Value::Object(d)) = doc.get(key) {
            for (k, v) in d {
                defs.insert(k.clone(), rewrite(v, &root));
            }
        }
    }
    let describes_value = doc
        .as_object()
        .is_some_and(|o| VALUE_KEYWORDS.iter().any(|k| o.contains_key(*k)));
    if describes_value {
        let mut r = doc.clone();
        if let Some(o) = r.as_object_mut() {
            for k in ["$schema", "$id", "definitions", "$defs"] {
                o.remove(k);
            }
        }
        defs.insert(root.clone(), rewrite(&r, &root));
    }
    json!({
        "$schema": "contract.schema.json",
        "name": name,
        "title": title.unwrap_or(stem),
        "version": "0.0.0",
        "source": format!("none: the plain JSON Schema {stem}, read as a types-only contract"),
        "description": doc.get("description").and_then(Value::as_str).unwrap_or(""),
        "parties": {},
        "channels": {},
        "methods": {},
        "notes": [],
        "$defs": defs,
    })
}

/// `My Schema_v2` → `my-schema-v2`: the contract-name pattern `^[a-z][a-z0-9-]*$`.
fn contract_name(stem: &str) -> String {
    let mut out = String::new();
    for c in stem.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    match out.chars().next() {
        Some(c) if c.is_ascii_lowercase() => out,
        _ => format!("schema-{out}").trim_end_matches('-').to_string(),
    }
}

/// The root type's `$defs` key: its title (or file stem) with only letters and digits kept,
/// each word starting upper-case so the words stay apart when a target case-converts it
/// ("JSON schema for X" → `JSONSchemaForX` → `JsonSchemaForX`, not `JsoNschemaforX`).
fn root_name(title: &str) -> String {
    let kept: String = title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(|w| {
            let mut cs = w.chars();
            cs.next()
                .map(|f| f.to_ascii_uppercase())
                .into_iter()
                .chain(cs)
        })
        .collect();
    if kept.is_empty() { "Root".into() } else { kept }
}

/// Every `$ref` into this document made a `#/$defs/…` pointer: `#/definitions/X` becomes
/// `#/$defs/X`, and `#` (the root) and pointers into it (`#/properties/x`) the root's own entry.
fn rewrite(v: &Value, root: &str) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let x = match (k.as_str(), x) {
                        ("$ref", Value::String(r)) => Value::String(pointer(r, root)),
                        _ => rewrite(x, root),
                    };
                    (k.clone(), x)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| rewrite(x, root)).collect()),
        other => other.clone(),
    }
}

fn pointer(r: &str, root: &str) -> String {
    let root = crate::escape_pointer(root);
    if r == "#" || r == "#/" {
        return format!("#/$defs/{root}");
    }
    if let Some(rest) = r.strip_prefix("#/definitions/") {
        return format!("#/$defs/{rest}");
    }
    match r.strip_prefix('#') {
        // Anywhere else in the document (`#/properties/x`): below the root's own entry.
        Some(rest) if rest.starts_with('/') && !rest.starts_with("/$defs/") => {
            format!("#/$defs/{root}{rest}")
        }
        _ => r.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_07_schema_becomes_a_types_only_contract() {
        let doc = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Geo JSON",
            "type": "object",
            "properties": {
                "child": {"$ref": "#"},
                "p": {"$ref": "#/definitions/Point"},
                "q": {"$ref": "#/properties/p"}
            },
            "definitions": {"Point": {"type": "array", "items": {"type": "number"}}}
        });
        assert!(is_plain_schema(&doc));
        let c = contract_of("geo_json", &doc);
        assert_eq!(c["name"], "geo-json");
        assert_eq!(c["$defs"]["Point"]["items"]["type"], "number");
        assert_eq!(
            c["$defs"]["GeoJSON"]["properties"]["child"]["$ref"],
            "#/$defs/GeoJSON"
        );
        assert_eq!(
            c["$defs"]["GeoJSON"]["properties"]["p"]["$ref"],
            "#/$defs/Point"
        );
        assert_eq!(
            c["$defs"]["GeoJSON"]["properties"]["q"]["$ref"],
            "#/$defs/GeoJSON/properties/p"
        );
        assert!(c["$defs"]["GeoJSON"].get("definitions").is_none());
    }

    #[test]
    fn a_contract_is_not_a_plain_schema() {
        assert!(!is_plain_schema(
            &json!({"$schema": "x", "parties": {}, "$defs": {}})
        ));
        assert!(!is_plain_schema(&json!({"name": "x"})));
        assert!(!is_plain_schema(&json!([1])));
    }

    #[test]
    fn names_fit_the_contract_pattern() {
        assert_eq!(contract_name("MCP 2025-06-18"), "mcp-2025-06-18");
        assert_eq!(contract_name("2025"), "schema-2025");
        assert_eq!(root_name("Geo JSON"), "GeoJSON");
        assert_eq!(
            root_name("JSON schema for Bukkit Plugin YAML"),
            "JSONSchemaForBukkitPluginYAML"
        );
        assert_eq!(root_name("--"), "Root");
    }
}
