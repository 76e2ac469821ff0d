//! Schema shapes every target must read alike, rewritten once in the IR so that typify
//! (Rust) and the type model (Python, C#, docs, vectors) never read them apart.
//!
//! Today one shape: a `$ref` beside a `type` array (bukkit's permission children,
//! `{"$ref": "#/definitions/permission", "type": ["boolean", "object"]}`). Draft 7 ignores
//! a reference's siblings, draft 2019-09 applies them; either way a user who wrote it means
//! "a boolean or a permission", and typify would read only the reference. It becomes an
//! `oneOf`: the reference for the types its target admits, each other listed type alone, and
//! `null` where listed.

use indexmap::IndexMap;
use serde_json::{Value, json};

use crate::names::def_key;

/// Every schema with its `$ref`-beside-a-`type`-array shapes made a `oneOf`.
pub fn normalise(schemas: IndexMap<String, Value>) -> IndexMap<String, Value> {
    let defs = schemas.clone();
    schemas
        .into_iter()
        .map(|(k, mut v)| {
            walk(&mut v, &defs);
            (k, v)
        })
        .collect()
}

fn walk(v: &mut Value, defs: &IndexMap<String, Value>) {
    match v {
        Value::Object(o) => {
            o.values_mut().for_each(|x| walk(x, defs));
            if let Some(any_of) = ref_beside_types(o, defs) {
                *v = any_of;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| walk(x, defs)),
        _ => {}
    }
}

/// The `oneOf` (its branches never overlap) a `$ref` beside a `type` array stands for; `None` where the array adds nothing
/// (every type it lists is one the target admits, null aside).
fn ref_beside_types(
    o: &serde_json::Map<String, Value>,
    defs: &IndexMap<String, Value>,
) -> Option<Value> {
    let reference = o.get("$ref")?.as_str()?;
    let types: Vec<&str> = o
        .get("type")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let target = defs.get(&def_key(reference)?)?;
    let admits = admitted(target);
    let admitted_by_target = |t: &str| admits.as_ref().is_none_or(|a| a.contains(&t));
    let others: Vec<&str> = types
        .iter()
        .copied()
        .filter(|t| *t != "null" && !admitted_by_target(t))
        .collect();
    let nullable = types.contains(&"null") && !admitted_by_target("null");
    if others.is_empty() && !nullable {
        return None;
    }
    let mut branches = Vec::new();
    if types.iter().any(|t| *t != "null" && admitted_by_target(t)) {
        branches.push(json!({ "$ref": reference }));
    }
    for t in others {
        // The other keywords constrain values of their own type only (`items` an array).
        let mut b: serde_json::Map<String, Value> = o
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "$ref" | "type" | "description" | "title"))
            .map(|(k, x)| (k.clone(), x.clone()))
            .collect();
        b.insert("type".into(), t.into());
        branches.push(Value::Object(b));
    }
    if nullable {
        branches.push(json!({ "type": "null" }));
    }
    let mut out = serde_json::Map::new();
    if let Some(d) = o.get("description") {
        out.insert("description".into(), d.clone());
    }
    out.insert("oneOf".into(), Value::Array(branches));
    Some(Value::Object(out))
}

/// The JSON types a schema admits, where it says: its `type`, or `object` for one that only
/// lists members (an object keyword without a `type`). `None`: any.
fn admitted(s: &Value) -> Option<Vec<&str>> {
    match s.get("type") {
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ if s.get("properties").is_some() || s.get("additionalProperties").is_some() => {
            Some(vec!["object"])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs() -> IndexMap<String, Value> {
        IndexMap::from([
            (
                "P".to_string(),
                json!({ "properties": { "d": { "type": "string" } } }),
            ),
            ("S".to_string(), json!({ "type": "string" })),
        ])
    }

    #[test]
    fn a_reference_beside_other_types_becomes_a_one_of() {
        let mut v = json!({ "$ref": "#/$defs/P", "type": ["boolean", "object"], "items": { "type": "boolean" } });
        walk(&mut v, &defs());
        assert_eq!(
            v,
            json!({ "oneOf": [
                { "$ref": "#/$defs/P" },
                { "type": "boolean", "items": { "type": "boolean" } }
            ] })
        );
    }

    #[test]
    fn null_beside_a_reference_makes_it_nullable() {
        let mut v = json!({ "$ref": "#/$defs/S", "type": ["string", "null"], "description": "d" });
        walk(&mut v, &defs());
        assert_eq!(
            v,
            json!({ "description": "d", "oneOf": [{ "$ref": "#/$defs/S" }, { "type": "null" }] })
        );
    }

    #[test]
    fn types_the_target_admits_leave_the_reference_as_it_is() {
        let plain = json!({ "$ref": "#/$defs/P", "type": ["object"] });
        let mut v = plain.clone();
        walk(&mut v, &defs());
        assert_eq!(v, plain);
    }
}
