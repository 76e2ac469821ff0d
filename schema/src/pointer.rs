//! RFC 6901 JSON pointer helpers: naming where a problem is, writing a value at a pointer.

use serde_json::{Map, Value};

/// Whether every pointer of `matches` holds its literal in `root` (a trigger's `matches`, a
/// `needs` entry's): an absent member holds nothing.
pub fn matches_all<'a>(
    matches: impl IntoIterator<Item = (&'a String, &'a Value)>,
    root: &Value,
) -> bool {
    matches.into_iter().all(|(p, v)| get(root, p) == Some(v))
}

/// `map.get(key)`, by a linear scan when the object is small: messages are mostly objects of a
/// handful of members, where comparing keys is cheaper than SipHashing the one looked up.
pub(crate) fn member<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    const SCAN_MAX: usize = 8;
    if map.len() <= SCAN_MAX {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// `value.pointer(ptr)` without serde_json's per-token allocations (it unescapes every token
/// into a new `String`); pointers with `~` escapes, rare in contracts, still go through it.
/// This sits on the hot path: classification and the policy engine resolve several
/// pointers per message.
pub fn get<'v>(value: &'v Value, ptr: &str) -> Option<&'v Value> {
    if ptr.contains('~') {
        return value.pointer(ptr);
    }
    if ptr.is_empty() {
        return Some(value);
    }
    ptr.strip_prefix('/')?
        .split('/')
        .try_fold(value, |v, token| match v {
            Value::Object(map) => member(map, token),
            // Array indices as serde_json reads them: no sign, no leading zero.
            Value::Array(items)
                if !token.starts_with('+') && (token == "0" || !token.starts_with('0')) =>
            {
                token.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            _ => None,
        })
}

/// Whether an object's member `key` holds JSON data rather than schemas or contract entries
/// (`examples`, `enum`, `const`, `default`): a `$ref` key inside it is data, not a reference.
/// `names` says the object's keys are names (of properties, definitions, methods), where
/// `examples` is a property like any other.
pub(crate) fn holds_data(key: &str, names: bool) -> bool {
    !names && matches!(key, "examples" | "example" | "enum" | "const" | "default")
}

/// Whether the members of an object's member `key` are names (a property, a definition or a
/// contract entry each) rather than keywords. `names`: the object's own keys are names.
pub(crate) fn names_below(key: &str, names: bool) -> bool {
    !names
        && matches!(
            key,
            "properties"
                | "patternProperties"
                | "$defs"
                | "definitions"
                | "dependentSchemas"
                | "methods"
                | "parties"
                | "channels"
                | "codes"
                | "limits"
                | "stateMachines"
                | "claims"
                | "extensions"
                | "cues"
                | "credit"
        )
}

/// Undo [`escape`] on one reference token.
pub(crate) fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Every reference in `v` (a `$ref` key holding a string, data and names aside: see
/// [`holds_data`], [`names_below`]), with the pointer to it.
pub(crate) fn references(v: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, ptr: String, names: bool, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let p = format!("{ptr}/{}", escape(k));
                    match child {
                        Value::String(s) if k == "$ref" && !names => out.push((p, s.clone())),
                        _ if holds_data(k, names) => {}
                        _ => walk(child, p, names_below(k, names), out),
                    }
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    walk(child, format!("{ptr}/{i}"), false, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, String::new(), false, &mut out);
    out
}

/// Escape one reference token (`~` → `~0`, `/` → `~1`).
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Append tokens to a pointer.
pub fn join<I, S>(base: &str, tokens: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut out = base.to_string();
    for t in tokens {
        out.push('/');
        out.push_str(&escape(t.as_ref()));
    }
    out
}

/// Write `v` at JSON pointer `ptr` in `root`, creating objects on the way.
pub fn set(root: &mut Value, ptr: &str, v: Value) {
    let mut cur = root;
    let mut parts = ptr.split('/').skip(1).peekable();
    while let Some(raw) = parts.next() {
        let key = unescape(raw);
        if !cur.is_object() {
            *cur = Value::Object(Default::default());
        }
        let Value::Object(m) = cur else { return };
        if parts.peek().is_none() {
            m.insert(key, v);
            return;
        }
        cur = m
            .entry(key)
            .or_insert_with(|| Value::Object(Default::default()));
    }
}

/// Remove the member at JSON pointer `ptr` from `root` (an object member, not an array
/// element); what was there, if anything.
pub fn remove(root: &mut Value, ptr: &str) -> Option<Value> {
    let (parent, last) = ptr.rsplit_once('/')?;
    let key = unescape(last);
    root.pointer_mut(parent)?
        .as_object_mut()?
        .shift_remove(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_a_member_at_a_pointer() {
        let mut v = serde_json::json!({"a": {"b/c": 1, "d": 2}});
        assert_eq!(remove(&mut v, "/a/b~1c"), Some(serde_json::json!(1)));
        assert_eq!(remove(&mut v, "/a/x"), None);
        assert_eq!(remove(&mut v, ""), None);
        assert_eq!(v, serde_json::json!({"a": {"d": 2}}));
    }

    #[test]
    fn escapes_slash_and_tilde() {
        assert_eq!(
            join("", ["methods", "tools/call", "a~b"]),
            "/methods/tools~1call/a~0b"
        );
    }
}
