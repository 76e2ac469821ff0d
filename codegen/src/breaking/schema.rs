//! Does one JSON Schema accept everything another accepts?
//!
//! `gap(a, b)` answers "is every instance valid under `b` also valid under `a`?"
//! for the constructs contracts use (types, `const`/`enum`, objects with
//! `required`/`properties`/`additionalProperties`, arrays, numeric and string
//! bounds, `pattern`, `format`, `anyOf`/`oneOf`/`allOf`, local `$ref`). Where it
//! cannot tell (two different patterns), it says no: a breaking-change checker
//! may over-report, never under-report. Annotations (`description`, `title`,
//! `examples`, `default`, `$comment`) never matter.
//!
//! One deliberate leniency: a property that only one side names, where the other
//! side allows additional properties of any shape, is not a gap. Peers built from
//! the side that lacks it never send it, so "an old sender might have sent `x` of
//! another type" is a false alarm for every real contract edit.

use serde_json::{Map, Value};

/// A place in one contract document: the document and a JSON pointer into it.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    /// The whole contract document (for `$ref`).
    pub root: &'a Value,
    /// Where the schema sits.
    pub at: &'a str,
}

/// Why `b` accepts something `a` does not: where in each document, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// Pointer into `a`'s document.
    pub a: String,
    /// Pointer into `b`'s document.
    pub b: String,
    /// What differs.
    pub reason: String,
}

/// `$ref` chains longer than this are treated as unknown (a gap).
const MAX_DEPTH: usize = 64;

/// The first reason an instance valid under `b` may be invalid under `a`, if any.
pub fn gap(a: Node<'_>, b: Node<'_>) -> Option<Gap> {
    let mut seen = Vec::new();
    Walk { seen: &mut seen }.gap(a.root, a.at.to_string(), b.root, b.at.to_string(), 0)
}

struct Walk<'s> {
    /// Pairs of `$ref` targets under comparison: met again, they are assumed to
    /// hold (recursive schemas compare coinductively).
    seen: &'s mut Vec<(String, String)>,
}

fn get<'v>(root: &'v Value, at: &str) -> Option<&'v Value> {
    root.pointer(at)
}

fn esc(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Follow `$ref` (local `#/…` only) to the schema it names.
fn resolve(root: &Value, mut at: String) -> Result<String, String> {
    for _ in 0..MAX_DEPTH {
        match get(root, &at)
            .and_then(|s| s.get("$ref"))
            .and_then(Value::as_str)
        {
            Some(r) => match r.strip_prefix('#') {
                Some(p) => at = p.to_string(),
                None => return Err(format!("`$ref` {r} is not local")),
            },
            None => return Ok(at),
        }
    }
    Err("`$ref` chain too long".into())
}

/// The JSON types a schema admits (`None`: any).
fn types(s: &Map<String, Value>) -> Option<Vec<String>> {
    match s.get("type")? {
        Value::String(t) => Some(vec![t.clone()]),
        Value::Array(ts) => Some(
            ts.iter()
                .filter_map(|t| t.as_str().map(String::from))
                .collect(),
        ),
        _ => None,
    }
}

/// The JSON type of a value as a schema names it (integers apart from other numbers).
pub(crate) fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn admits_type(ts: &[String], t: &str) -> bool {
    ts.iter()
        .any(|x| x == t || (x == "number" && t == "integer"))
}

/// The values a schema is limited to by `const` or `enum`.
fn values(s: &Map<String, Value>) -> Option<Vec<Value>> {
    if let Some(c) = s.get("const") {
        return Some(vec![c.clone()]);
    }
    s.get("enum").and_then(Value::as_array).cloned()
}

fn num(s: &Map<String, Value>, k: &str) -> Option<f64> {
    s.get(k).and_then(Value::as_f64)
}

const UNION: [&str; 2] = ["anyOf", "oneOf"];

impl Walk<'_> {
    fn gap(&mut self, ra: &Value, a: String, rb: &Value, b: String, depth: usize) -> Option<Gap> {
        let (pa, pb) = (a.clone(), b.clone());
        let fail = |reason: String| {
            Some(Gap {
                a: pa.clone(),
                b: pb.clone(),
                reason,
            })
        };
        if depth > MAX_DEPTH {
            return fail("schemas nest too deeply to compare".into());
        }
        let (a, b) = match (resolve(ra, a), resolve(rb, b)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return fail(e),
        };
        let key = (a.clone(), b.clone());
        if self.seen.contains(&key) {
            return None;
        }
        self.seen.push(key);
        let out = self.node(ra, &a, rb, &b, depth);
        self.seen.pop();
        out
    }

    fn node(&mut self, ra: &Value, a: &str, rb: &Value, b: &str, depth: usize) -> Option<Gap> {
        let fail = |reason: String| {
            Some(Gap {
                a: a.to_string(),
                b: b.to_string(),
                reason,
            })
        };
        let (sa, sb) = (get(ra, a), get(rb, b));
        match (sa, sb) {
            (_, Some(Value::Bool(false))) | (Some(Value::Bool(true)), _) => return None,
            (Some(Value::Bool(false)), _) => return fail("accepts nothing".into()),
            _ => {}
        }
        let empty = Map::new();
        let sa = sa.and_then(Value::as_object).unwrap_or(&empty);
        let sb = sb.and_then(Value::as_object).unwrap_or(&empty);
        // b's union: each branch must fit. a's union: some branch must take b.
        for kw in UNION {
            if let Some(branches) = sb.get(kw).and_then(Value::as_array) {
                for i in 0..branches.len() {
                    if let Some(g) = self.gap(ra, a.into(), rb, format!("{b}/{kw}/{i}"), depth + 1)
                    {
                        return Some(g);
                    }
                }
                return None;
            }
        }
        for kw in UNION {
            if let Some(branches) = sa.get(kw).and_then(Value::as_array) {
                let fits = (0..branches.len()).any(|i| {
                    self.gap(ra, format!("{a}/{kw}/{i}"), rb, b.into(), depth + 1)
                        .is_none()
                });
                return if fits {
                    None
                } else {
                    fail(format!(
                        "no branch of its {kw} accepts what the other side allows"
                    ))
                };
            }
        }
        if let Some(parts) = sa.get("allOf").and_then(Value::as_array) {
            for i in 0..parts.len() {
                if let Some(g) = self.gap(ra, format!("{a}/allOf/{i}"), rb, b.into(), depth + 1) {
                    return Some(g);
                }
            }
        }
        if let Some(parts) = sb.get("allOf").and_then(Value::as_array) {
            // b is narrower than each of its parts: one part that fits is enough.
            let fits = (0..parts.len()).any(|i| {
                self.gap(ra, a.into(), rb, format!("{b}/allOf/{i}"), depth + 1)
                    .is_none()
            });
            if fits {
                return None;
            }
        }
        if let Some(r) = scalar_gap(sa, sb) {
            return fail(r);
        }
        if let Some(g) = self.object_gap((ra, a, sa), (rb, b, sb), depth) {
            return Some(g);
        }
        match (sa.get("items"), sb.get("items")) {
            (Some(_), Some(_)) => self.gap(
                ra,
                format!("{a}/items"),
                rb,
                format!("{b}/items"),
                depth + 1,
            ),
            (Some(_), None) if admits(sb, "array") => {
                fail("items are constrained here; the other side takes any items".into())
            }
            _ => None,
        }
    }

    /// Properties, requirements and extra properties of two object schemas.
    fn object_gap(
        &mut self,
        (ra, a, sa): (&Value, &str, &Map<String, Value>),
        (rb, b, sb): (&Value, &str, &Map<String, Value>),
        depth: usize,
    ) -> Option<Gap> {
        if !admits(sb, "object") || !admits(sa, "object") {
            return None;
        }
        let fail = |reason: String| {
            Some(Gap {
                a: a.to_string(),
                b: b.to_string(),
                reason,
            })
        };
        let names = |s: &Map<String, Value>, k: &str| -> Vec<String> {
            s.get(k)
                .and_then(Value::as_array)
                .map(|v| {
                    v.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (req_a, req_b) = (names(sa, "required"), names(sb, "required"));
        if let Some(r) = req_a.iter().find(|r| !req_b.contains(r)) {
            return fail(format!(
                "`{r}` is required here and optional on the other side"
            ));
        }
        let empty = Map::new();
        let props =
            |s: &Map<String, Value>| s.get("properties").and_then(Value::as_object).cloned();
        let (pa, pb) = (
            props(sa).unwrap_or_else(|| empty.clone()),
            props(sb).unwrap_or(empty),
        );
        let closed =
            |s: &Map<String, Value>| s.get("additionalProperties") == Some(&Value::Bool(false));
        for name in pb.keys() {
            let at_b = format!("{b}/properties/{}", esc(name));
            if pa.contains_key(name) {
                let at_a = format!("{a}/properties/{}", esc(name));
                if let Some(g) = self.gap(ra, at_a, rb, at_b, depth + 1) {
                    return Some(g);
                }
            } else if closed(sa) {
                return Some(Gap {
                    a: a.to_string(),
                    b: at_b,
                    reason: format!(
                        "property `{name}` is not allowed here (additionalProperties: false)"
                    ),
                });
            } else if let Some(Value::Object(_)) = sa.get("additionalProperties") {
                let at_a = format!("{a}/additionalProperties");
                if let Some(g) = self.gap(ra, at_a, rb, at_b, depth + 1) {
                    return Some(g);
                }
            }
        }
        if closed(sa) && !closed(sb) {
            return fail("no other properties are allowed here; the other side allows them".into());
        }
        if sa.get("patternProperties") != sb.get("patternProperties")
            && sa.contains_key("patternProperties")
        {
            return fail("patternProperties differ".into());
        }
        None
    }
}

/// Whether a schema admits JSON type `t` (no `type`: yes).
fn admits(s: &Map<String, Value>, t: &str) -> bool {
    types(s).is_none_or(|ts| admits_type(&ts, t))
}

/// Types, fixed values and the bounds of numbers, strings and arrays.
fn scalar_gap(sa: &Map<String, Value>, sb: &Map<String, Value>) -> Option<String> {
    let vb = values(sb);
    if let Some(va) = values(sa) {
        return match &vb {
            Some(vb) => vb
                .iter()
                .find(|v| !va.contains(v))
                .map(|v| format!("value {v} is not among those allowed here")),
            None => Some("limited to fixed values here; the other side allows more".into()),
        };
    }
    if let Some(ta) = types(sa) {
        match (&vb, types(sb)) {
            (Some(vb), _) => {
                if let Some(v) = vb.iter().find(|v| !admits_type(&ta, type_of(v))) {
                    return Some(format!("value {v} is not of type {}", ta.join(" or ")));
                }
                return None;
            }
            (None, Some(tb)) => {
                if let Some(t) = tb.iter().find(|t| !admits_type(&ta, t)) {
                    return Some(format!("type {t} is not among {}", ta.join(", ")));
                }
            }
            (None, None) => {
                return Some(format!(
                    "only {} here; any type on the other side",
                    ta.join(", ")
                ));
            }
        }
    }
    bound_gap(sa, sb)
}

/// Lower bounds may only stay or drop, upper bounds only stay or rise, from a to b
/// reversed: `a` accepts all of `b` when a's range contains b's.
fn bound_gap(sa: &Map<String, Value>, sb: &Map<String, Value>) -> Option<String> {
    const LOWER: [&str; 5] = [
        "minimum",
        "exclusiveMinimum",
        "minLength",
        "minItems",
        "minProperties",
    ];
    const UPPER: [&str; 5] = [
        "maximum",
        "exclusiveMaximum",
        "maxLength",
        "maxItems",
        "maxProperties",
    ];
    for k in LOWER {
        if let Some(x) = num(sa, k) {
            match num(sb, k) {
                Some(y) if y >= x => {}
                Some(y) => return Some(format!("{k} {x} here, {y} on the other side")),
                None => return Some(format!("{k} {x} here, none on the other side")),
            }
        }
    }
    for k in UPPER {
        if let Some(x) = num(sa, k) {
            match num(sb, k) {
                Some(y) if y <= x => {}
                Some(y) => return Some(format!("{k} {x} here, {y} on the other side")),
                None => return Some(format!("{k} {x} here, none on the other side")),
            }
        }
    }
    for k in ["pattern", "format", "multipleOf", "uniqueItems"] {
        if let Some(x) = sa.get(k)
            && sb.get(k) != Some(x)
        {
            return Some(format!(
                "{k} {x} here, {} on the other side",
                sb.get(k).unwrap_or(&Value::Null)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Does `a` accept everything `b` does? (Both under `/s` of their own document.)
    fn accepts(a: Value, b: Value) -> bool {
        let (ra, rb) = (json!({ "s": a }), json!({ "s": b }));
        gap(
            Node {
                root: &ra,
                at: "/s",
            },
            Node {
                root: &rb,
                at: "/s",
            },
        )
        .is_none()
    }

    #[test]
    fn types_and_values() {
        assert!(accepts(
            json!({"type": "number"}),
            json!({"type": "integer"})
        ));
        assert!(!accepts(
            json!({"type": "integer"}),
            json!({"type": "number"})
        ));
        assert!(accepts(
            json!({"type": ["string", "integer"]}),
            json!({"type": "string"})
        ));
        assert!(!accepts(
            json!({"type": "string"}),
            json!({"type": ["string", "integer"]})
        ));
        assert!(accepts(json!({"enum": ["a", "b"]}), json!({"const": "a"})));
        assert!(!accepts(
            json!({"enum": ["a"]}),
            json!({"enum": ["a", "b"]})
        ));
        assert!(accepts(
            json!({"type": "string"}),
            json!({"enum": ["a", "b"]})
        ));
        assert!(!accepts(json!({"type": "string"}), json!({})));
        assert!(accepts(json!({}), json!({"type": "string"})));
    }

    #[test]
    fn bounds() {
        assert!(accepts(json!({"maxLength": 10}), json!({"maxLength": 5})));
        assert!(!accepts(json!({"maxLength": 5}), json!({"maxLength": 10})));
        assert!(!accepts(json!({"minimum": 0}), json!({"type": "integer"})));
        assert!(!accepts(json!({"pattern": "^a"}), json!({"pattern": "^b"})));
    }

    #[test]
    fn objects() {
        let closed = json!({"type": "object", "additionalProperties": false, "required": ["a"],
            "properties": {"a": {"type": "string"}}});
        let more = json!({"type": "object", "additionalProperties": false, "required": ["a"],
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}});
        assert!(
            accepts(more.clone(), closed.clone()),
            "an optional property added: old messages still pass"
        );
        assert!(
            !accepts(closed.clone(), more),
            "but old receivers refuse it"
        );
        let optional = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert!(!accepts(closed, optional), "`a` required on one side only");
    }

    #[test]
    fn unions_and_refs() {
        let a = json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
        assert!(accepts(a.clone(), json!({"type": "string"})));
        assert!(!accepts(json!({"type": "string"}), a.clone()));
        assert!(accepts(a.clone(), a));
        // A recursive list of lists compares with itself without looping.
        let tree = json!({"$defs": {"T": {"type": "array", "items": {"$ref": "#/$defs/T"}}}, "s": {"$ref": "#/$defs/T"}});
        let n = Node {
            root: &tree,
            at: "/s",
        };
        assert_eq!(gap(n, n), None);
    }
}
