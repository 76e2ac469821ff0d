//! Type names, resolved once for every target.
//!
//! A `$defs` key is whatever the schema's author wrote: `JSONRPCRequest`, `foo_bar`,
//! `geo-json`, `Point 3D`. Each target needs an identifier, and all of them (and the
//! vectors that name types across languages) must agree on it, so the IR renames every
//! key to its PascalCase identifier before any target sees the schemas. Keys that are
//! already their own identifier keep it; the others take theirs in `$defs` order, with
//! a number appended when the name is taken (`fooBar` and `foo_bar` → `FooBar`, `FooBar2`).
//! References are rewritten with the keys, so the schemas stay self-consistent.

use std::collections::HashSet;

use indexmap::IndexMap;
use serde_json::Value;

use crate::ir::pascal;

/// The `$defs` key a local reference names whole (`#/$defs/Foo`), with JSON-pointer
/// (`~0`, `~1`) and percent escapes undone; `None` for a pointer into one ([`def_pointer`]).
pub fn def_key(r: &str) -> Option<String> {
    match def_pointer(r)? {
        (key, "") => Some(key),
        _ => None,
    }
}

/// A local reference into `$defs` as its key and the pointer below it
/// (`#/$defs/Foo/properties/x` → `Foo`, `/properties/x`).
pub fn def_pointer(r: &str) -> Option<(String, &str)> {
    let rest = r.strip_prefix("#/$defs/")?;
    let (token, tail) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    Some((unescape(&percent_decode(token)), tail))
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Each key's identifier, in key order (see the module docs for the rule).
pub fn idents<'a>(keys: impl IntoIterator<Item = &'a str> + Clone) -> IndexMap<String, String> {
    let mut taken: HashSet<String> = HashSet::new();
    let mut out: IndexMap<String, String> = IndexMap::new();
    for k in keys.clone() {
        if pascal(k) == k && taken.insert(k.to_string()) {
            out.insert(k.to_string(), k.to_string());
        }
    }
    for k in keys {
        if out.contains_key(k) {
            continue;
        }
        let base = pascal(k);
        let mut ident = base.clone();
        let mut n = 2;
        while !taken.insert(ident.clone()) {
            ident = format!("{base}{n}");
            n += 1;
        }
        out.insert(k.to_string(), ident);
    }
    out
}

/// The schemas keyed by their identifiers, every local reference following its key.
/// Returns them with the key → identifier map.
pub fn resolve(
    schemas: IndexMap<String, Value>,
) -> (IndexMap<String, Value>, IndexMap<String, String>) {
    let map = idents(schemas.keys().map(String::as_str));
    let renamed = schemas
        .into_iter()
        .map(|(k, mut v)| {
            rewrite(&mut v, &map);
            (map.get(&k).cloned().unwrap_or(k), v)
        })
        .collect();
    (renamed, map)
}

fn rewrite(v: &mut Value, map: &IndexMap<String, String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k == "$ref"
                    && let Value::String(r) = x
                    && let Some((key, tail)) = def_pointer(r)
                    && let Some(ident) = map.get(&key)
                {
                    *r = format!("#/$defs/{ident}{tail}");
                } else {
                    rewrite(x, map);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rewrite(x, map)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_become_identifiers_and_collisions_get_numbers() {
        let m = idents(["fooBar", "JSONRPCRequest", "FooBar", "foo_bar", "geo-json"]);
        assert_eq!(m["FooBar"], "FooBar");
        assert_eq!(m["fooBar"], "FooBar2");
        assert_eq!(m["foo_bar"], "FooBar3");
        assert_eq!(m["JSONRPCRequest"], "JsonrpcRequest");
        assert_eq!(m["geo-json"], "GeoJson");
    }

    #[test]
    fn references_follow_their_keys() {
        let schemas: IndexMap<String, Value> = [
            ("a b".to_string(), json!({"type": "string"})),
            (
                "user_id".to_string(),
                json!({"properties": {
                    "x": {"$ref": "#/$defs/a%20b"},
                    "y": {"$ref": "#/$defs/user_id/properties/x"},
                    "z": {"$ref": "https://example.invalid/s.json"}
                }}),
            ),
        ]
        .into_iter()
        .collect();
        let (s, _) = resolve(schemas);
        let keys: Vec<&String> = s.keys().collect();
        assert_eq!(keys, ["AB", "UserId"]);
        let p = &s["UserId"]["properties"];
        assert_eq!(p["x"]["$ref"], "#/$defs/AB");
        assert_eq!(p["y"]["$ref"], "#/$defs/UserId/properties/x");
        assert_eq!(p["z"]["$ref"], "https://example.invalid/s.json");
    }
}
