//! The C# target: a net8.0 class library using System.Text.Json, written in
//! C# 7.3 syntax (sealed classes, no records, no nullable annotations) so any
//! compiler from Mono `mcs` to current Roslyn builds it.
//!
//! The templates in `codegen/templates/csharp/` lay out the files; the helpers here
//! spell C# types, literals, validation statements and the branch-picking code
//! of unions, all from the language-neutral type model (`crate::types`).
//!
//! Unions are rendered in one of three styles:
//! - *nullable*: `X | null` is just `X` that may be null;
//! - *hierarchy*: every branch is a named object type that belongs to no other
//!   union, so the union is an abstract base class the branches derive from;
//! - *wrapper*: anything else (`string | integer`, …) is a sealed class holding
//!   the branch index and its value.
//!
//! Hierarchy and wrapper unions get a custom `JsonConverter` that picks the branch
//! from a parsed `JsonElement`: by the tag property when the union has one (STJ 8's
//! `[JsonPolymorphic]` needs the discriminator first in the object and refuses a
//! branch that also declares the tag as a property, so it cannot be used), else by
//! JSON kind and, for objects, by which members are present (JSON-RPC).

use std::collections::HashMap;

use handlebars::{Handlebars, handlebars_helper};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ir::pascal;
use crate::sdk::Template;
use crate::types::TypeRef;

/// The built-in C# templates.
pub const TEMPLATES: &[Template] = &[
    (
        "{{assembly}}.csproj.hbs",
        include_str!("../templates/csharp/{{assembly}}.csproj.hbs"),
    ),
    (
        "{{module}}.cs.hbs",
        include_str!("../templates/csharp/{{module}}.cs.hbs"),
    ),
];

fn find<'a>(types: &'a Value, name: &str) -> Option<&'a Value> {
    types
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == name)
}

fn tref(v: &Value) -> TypeRef {
    TypeRef::deserialize(v).unwrap_or(TypeRef::Any)
}

/// The non-null branch of a `X | null` union.
fn nullable_union(def: &Value) -> Option<TypeRef> {
    if def["kind"] != "union" {
        return None;
    }
    let vs = def["variants"].as_array()?;
    if vs.len() != 2 {
        return None;
    }
    let tys: Vec<TypeRef> = vs.iter().map(|v| tref(&v["ty"])).collect();
    match (&tys[0], &tys[1]) {
        (TypeRef::Null, t) | (t, TypeRef::Null) => Some(t.clone()),
        _ => None,
    }
}

/// Follow aliases (and nullable unions, as `Nullable`) to the type that is spelled.
fn resolve(ty: &TypeRef, types: &Value) -> TypeRef {
    let mut cur = ty.clone();
    for _ in 0..16 {
        let TypeRef::Named { name } = &cur else {
            return cur;
        };
        let Some(def) = find(types, name) else {
            return cur;
        };
        match def["kind"].as_str() {
            Some("alias") => cur = tref(&def["target"]),
            Some("union") => match nullable_union(def) {
                Some(inner) => {
                    return TypeRef::Nullable {
                        inner: Box::new(resolve(&inner, types)),
                    };
                }
                None => return cur,
            },
            _ => return cur,
        }
    }
    cur
}

fn kind_of<'a>(types: &'a Value, name: &str) -> &'a str {
    find(types, name)
        .and_then(|d| d["kind"].as_str())
        .unwrap_or("")
}

/// Unions whose branches are all named object types (structs or such unions).
fn object_union(types: &Value, def: &Value) -> bool {
    def["kind"] == "union"
        && nullable_union(def).is_none()
        && def["variants"].as_array().is_some_and(|vs| {
            !vs.is_empty()
                && vs.iter().all(|v| match tref(&v["ty"]) {
                    TypeRef::Named { name } => match kind_of(types, &name) {
                        "struct" => true,
                        "union" => find(types, &name)
                            .is_some_and(|d| object_union(types, d) && d["name"] != def["name"]),
                        _ => false,
                    },
                    _ => false,
                })
        })
}

/// child type → the hierarchy union it derives from.
fn parents(types: &Value) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = HashMap::new();
    for def in types.as_array().into_iter().flatten() {
        if !object_union(types, def) {
            continue;
        }
        let name = def["name"].as_str().unwrap_or_default().to_string();
        let children: Vec<String> = def["variants"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| match tref(&v["ty"]) {
                TypeRef::Named { name } => Some(name),
                _ => None,
            })
            .collect();
        let mut distinct = children.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != children.len()
            || children.iter().any(|c| out.contains_key(c) || *c == name)
            || out.get(&name).is_some_and(|p| children.contains(p))
        {
            continue;
        }
        for c in children {
            out.insert(c, name.clone());
        }
    }
    out
}

fn union_style(types: &Value, def: &Value) -> &'static str {
    if nullable_union(def).is_some() {
        return "nullable";
    }
    let name = def["name"].as_str().unwrap_or_default();
    let ps = parents(types);
    let is_hierarchy = def["variants"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|v| matches!(tref(&v["ty"]), TypeRef::Named { name: n } if ps.get(&n).map(String::as_str) == Some(name)));
    if is_hierarchy && object_union(types, def) {
        "hierarchy"
    } else {
        "wrapper"
    }
}

/// Whether the C# spelling of `ty` is a value type.
fn is_value(ty: &TypeRef, types: &Value) -> bool {
    match resolve(ty, types) {
        TypeRef::Integer { .. }
        | TypeRef::Number
        | TypeRef::Boolean
        | TypeRef::Any
        | TypeRef::Null => true,
        TypeRef::Literal { value } => !value.is_string(),
        TypeRef::Named { name } => kind_of(types, &name) == "stringEnum",
        TypeRef::Nullable { inner } => is_value(&inner, types),
        _ => false,
    }
}

/// Whether `ty` admits JSON null: `X | null`, null itself, any value, or a union one of whose
/// branches is null (System.Text.Json reads a JSON null into such a union's reference as null,
/// so the member holds null and writes it back).
fn is_nullable(ty: &TypeRef, types: &Value) -> bool {
    match resolve(ty, types) {
        TypeRef::Nullable { .. } | TypeRef::Null | TypeRef::Any => true,
        TypeRef::Named { name } => find(types, &name).is_some_and(|d| {
            d["kind"] == "union"
                && d["variants"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|v| is_nullable(&tref(&v["ty"]), types))
        }),
        _ => false,
    }
}

/// A C# type for `ty`; value types get `?` when they may be null.
pub fn cs_type(ty: &TypeRef, types: &Value) -> String {
    match resolve(ty, types) {
        TypeRef::Named { name } => name,
        TypeRef::String => "string".into(),
        TypeRef::Integer { .. } => "long".into(),
        TypeRef::Number => "double".into(),
        TypeRef::Boolean => "bool".into(),
        TypeRef::Null | TypeRef::Any => "JsonElement".into(),
        TypeRef::Array { items } => format!("List<{}>", cs_type(&items, types)),
        TypeRef::Map { values } => format!("Dictionary<string, {}>", cs_type(&values, types)),
        TypeRef::Literal { value } => match value {
            Value::String(_) => "string".into(),
            Value::Number(n) if n.is_i64() || n.is_u64() => "long".into(),
            Value::Number(_) => "double".into(),
            Value::Bool(_) => "bool".into(),
            _ => "JsonElement".into(),
        },
        TypeRef::Nullable { inner } => {
            let t = cs_type(&inner, types);
            if is_value(&inner, types) && !matches!(resolve(&inner, types), TypeRef::Any) {
                format!("{t}?")
            } else {
                t
            }
        }
    }
}

/// A C# literal for a JSON scalar.
pub fn cs_literal(v: &Value) -> String {
    match v {
        Value::String(s) => cs_string(s),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("{n}L"),
        Value::Number(n) => {
            let s = n.to_string();
            if s.contains('.') || s.contains('e') || s.contains('E') {
                format!("{s}d")
            } else {
                format!("{s}.0d")
            }
        }
        Value::Bool(b) => b.to_string(),
        _ => "default(JsonElement)".into(),
    }
}

/// A C# regular string literal.
pub fn cs_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Validation statements for a value `expr` of type `ty` (bounds, literals, nested collections).
fn checks(ty: &TypeRef, expr: &str, wire: &str, types: &Value, depth: usize) -> String {
    let w = cs_string(wire);
    match resolve(ty, types) {
        TypeRef::Integer { min, max } if min.is_some() || max.is_some() => format!(
            "Check.Range({expr}, {}, {}, {w});",
            min.map(|m| format!("{m}L"))
                .unwrap_or_else(|| "long.MinValue".into()),
            max.map(|m| format!("{m}L"))
                .unwrap_or_else(|| "long.MaxValue".into())
        ),
        TypeRef::Literal { value }
            if !value.is_null() && !value.is_object() && !value.is_array() =>
        {
            format!(
                "Check.Literal({expr} == {}, {w}, {});",
                cs_literal(&value),
                cs_string(&value.to_string())
            )
        }
        TypeRef::Array { items } => {
            let var = format!("item{depth}");
            let inner = checks(&items, &var, wire, types, depth + 1);
            if inner.is_empty() {
                String::new()
            } else {
                format!("if ({expr} != null) foreach (var {var} in {expr}) {{ {inner} }}")
            }
        }
        TypeRef::Map { values } => {
            let var = format!("entry{depth}");
            let inner = checks(&values, &format!("{var}.Value"), wire, types, depth + 1);
            if inner.is_empty() {
                String::new()
            } else {
                format!("if ({expr} != null) foreach (var {var} in {expr}) {{ {inner} }}")
            }
        }
        TypeRef::Nullable { inner } => {
            let value = is_value(&inner, types) && !matches!(resolve(&inner, types), TypeRef::Any);
            let inner_expr = if value {
                format!("{expr}.Value")
            } else {
                expr.to_string()
            };
            let c = checks(&inner, &inner_expr, wire, types, depth);
            if c.is_empty() {
                c
            } else if value {
                format!("if ({expr}.HasValue) {{ {c} }}")
            } else {
                format!("if ({expr} != null) {{ {c} }}")
            }
        }
        _ => String::new(),
    }
}

/// The fields of a struct, ready to lay out as properties.
fn fields(def: &Value, types: &Value) -> Value {
    let class = def["name"].as_str().unwrap_or_default();
    let mut used: Vec<String> = vec![class.to_string(), "Extra".into()];
    let mut out = Vec::new();
    let mut bit = 0u32;
    let mut given = 0u32;
    for f in def["fields"].as_array().into_iter().flatten() {
        let ty = tref(&f["ty"]);
        let required = f["required"].as_bool().unwrap_or(false);
        let mut prop = f["pascal"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| pascal(f["wire"].as_str().unwrap_or("")));
        if used.contains(&prop) {
            prop.push_str("Value");
        }
        let mut n = 2;
        let base = prop.clone();
        while used.contains(&prop) {
            prop = format!("{base}{n}");
            n += 1;
        }
        used.push(prop.clone());
        let value = is_value(&ty, types);
        let nullable = is_nullable(&ty, types);
        let mut cs = cs_type(&ty, types);
        if value && !required && !cs.ends_with('?') {
            cs.push('?');
        }
        let resolved = resolve(&ty, types);
        let literal = match &resolved {
            TypeRef::Literal { value } if required => Some(cs_literal(value)),
            _ => None,
        };
        let wire = f["wire"].as_str().unwrap_or_default();
        let expr = if value && !required && !cs_type(&ty, types).ends_with('?') {
            // `long?` for an optional `long`: check through the nullable.
            let c = checks(&ty, &format!("{prop}.Value"), wire, types, 0);
            if c.is_empty() {
                c
            } else {
                format!("if ({prop}.HasValue) {{ {c} }}")
            }
        } else if !value && !required {
            let c = checks(&ty, &prop, wire, types, 0);
            if c.is_empty() || c.starts_with("if (") {
                c
            } else {
                format!("if ({prop} != null) {{ {c} }}")
            }
        } else {
            checks(&ty, &prop, wire, types, 0)
        };
        // STJ 8 lets `null` into a reference-typed property; a required non-nullable one refuses it.
        let null_check = required && !value && !nullable;
        // Presence of required members is tracked so Validate() runs only on complete
        // objects: STJ 8 calls OnDeserialized before its own required-member check.
        let track = required && bit < 64;
        let mask = if track {
            format!("0x{:X}UL", 1u64 << bit)
        } else {
            String::new()
        };
        if track {
            bit += 1;
        }
        // An optional member that may be null keeps a given null apart from an absent member,
        // so decode then encode writes back what it read (the runtime's KeepNull).
        let keep_null = !required && nullable && given < 64;
        let given_mask = if keep_null {
            given += 1;
            format!("0x{:X}UL", 1u64 << (given - 1))
        } else {
            String::new()
        };
        out.push(json!({
            "track": track,
            "bit": mask,
            "keepNull": keep_null,
            "givenBit": given_mask,
            "wire": wire,
            "wireLit": cs_string(wire),
            "prop": prop,
            "csType": cs,
            "required": required,
            "literal": literal,
            "checks": expr,
            "nullCheck": null_check,
            "description": f["description"],
        }));
    }
    Value::Array(out)
}

/// The mask of the tracked required members that hold a literal (set from the start).
fn literal_mask(def: &Value, types: &Value) -> String {
    let mut mask = 0u64;
    let mut bit = 0u32;
    for f in def["fields"].as_array().into_iter().flatten() {
        if f["required"] != true || bit >= 64 {
            continue;
        }
        if matches!(resolve(&tref(&f["ty"]), types), TypeRef::Literal { .. }) {
            mask |= 1u64 << bit;
        }
        bit += 1;
    }
    format!("0x{mask:X}UL")
}

/// The mask of the tracked required members of a struct.
fn required_mask(def: &Value) -> String {
    let n = def["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["required"] == true)
        .count()
        .min(64);
    let mask: u64 = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    format!("0x{mask:X}UL")
}

/// Required members and (member, literal JSON) pairs of an object type.
type ObjectSig = (Vec<String>, Vec<(String, String)>);

/// The [`ObjectSig`] of an object type, for picking untagged branches.
fn object_sig(ty: &TypeRef, types: &Value) -> Option<ObjectSig> {
    let TypeRef::Named { name } = resolve(ty, types) else {
        return None;
    };
    let def = find(types, &name)?;
    match def["kind"].as_str()? {
        "struct" => {
            let mut req = Vec::new();
            let mut lits = Vec::new();
            for f in def["fields"].as_array().into_iter().flatten() {
                let wire = f["wire"].as_str().unwrap_or_default().to_string();
                if f["required"] == true {
                    req.push(wire.clone());
                }
                if let TypeRef::Literal { value } = resolve(&tref(&f["ty"]), types) {
                    lits.push((wire, value.to_string()));
                }
            }
            Some((req, lits))
        }
        "union" if object_union(types, def) => {
            let sigs: Vec<_> = def["variants"]
                .as_array()?
                .iter()
                .filter_map(|v| object_sig(&tref(&v["ty"]), types))
                .collect();
            let first = sigs.first()?.clone();
            let req = first
                .0
                .into_iter()
                .filter(|r| sigs.iter().all(|s| s.0.contains(r)))
                .collect();
            let lits = first
                .1
                .into_iter()
                .filter(|l| sigs.iter().all(|s| s.1.contains(l)))
                .collect();
            Some((req, lits))
        }
        _ => None,
    }
}

/// A C# condition on `JsonElement e` that holds when `e` has the JSON kind of `ty`.
fn kind_test(ty: &TypeRef, types: &Value) -> Option<String> {
    Some(match resolve(ty, types) {
        TypeRef::String => "e.ValueKind == JsonValueKind.String".into(),
        TypeRef::Named { name } if kind_of(types, &name) == "stringEnum" => {
            "e.ValueKind == JsonValueKind.String".into()
        }
        TypeRef::Integer { .. } => "Json.IsInteger(e)".into(),
        TypeRef::Number => "e.ValueKind == JsonValueKind.Number".into(),
        TypeRef::Boolean => {
            "(e.ValueKind == JsonValueKind.True || e.ValueKind == JsonValueKind.False)".into()
        }
        TypeRef::Null => "e.ValueKind == JsonValueKind.Null".into(),
        TypeRef::Array { .. } => "e.ValueKind == JsonValueKind.Array".into(),
        TypeRef::Literal { value } => {
            format!("Json.LiteralEquals(e, {})", cs_string(&value.to_string()))
        }
        TypeRef::Any => "true".into(),
        TypeRef::Nullable { inner } => {
            let t = kind_test(&inner, types)?;
            format!("(e.ValueKind == JsonValueKind.Null || {t})")
        }
        // Objects: picked by members below.
        _ => return None,
    })
}

/// Everything a template needs to lay out a union.
fn union_info(def: &Value, types: &Value) -> Value {
    let style = union_style(types, def);
    let name = def["name"].as_str().unwrap_or_default();
    let variants: Vec<Value> = def["variants"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, v)| {
            let ty = tref(&v["ty"]);
            json!({"index": i, "ident": v["ident"], "csType": cs_type(&ty, types)})
        })
        .collect();
    let mut pick = String::new();
    let tag = def["tag"].as_str();
    if let Some(tag) = tag {
        pick.push_str(&format!(
            "if (e.ValueKind != JsonValueKind.Object) throw ContractException.WrongType({}, \"expected an object\");\n",
            cs_string(name)
        ));
        pick.push_str(&format!(
            "JsonElement t;\nif (!e.TryGetProperty({}, out t)) throw ContractException.MissingField({});\n",
            cs_string(tag),
            cs_string(tag)
        ));
        for (i, v) in def["variants"].as_array().into_iter().flatten().enumerate() {
            pick.push_str(&format!(
                "if (Json.LiteralEquals(t, {})) return {i};\n",
                cs_string(&v["tagValue"].to_string())
            ));
        }
        pick.push_str(&format!(
            "throw ContractException.BadLiteral({}, \"no branch of {name} has this value\");",
            cs_string(tag)
        ));
    } else {
        let mut objects = Vec::new();
        let mut map_branch = None;
        for (i, v) in def["variants"].as_array().into_iter().flatten().enumerate() {
            let ty = tref(&v["ty"]);
            if let Some(sig) = object_sig(&ty, types) {
                objects.push((i, sig));
            } else if let Some(test) = kind_test(&ty, types) {
                pick.push_str(&format!("if ({test}) return {i};\n"));
            } else if map_branch.is_none() {
                map_branch = Some(i);
            }
        }
        if !objects.is_empty() {
            let idx: Vec<String> = objects.iter().map(|(i, _)| i.to_string()).collect();
            let reqs: Vec<String> = objects
                .iter()
                .map(|(_, (r, _))| {
                    format!(
                        "new string[] {{ {} }}",
                        r.iter()
                            .map(|s| cs_string(s))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect();
            let lits: Vec<String> = objects
                .iter()
                .map(|(_, (_, l))| {
                    format!(
                        "new string[] {{ {} }}",
                        l.iter()
                            .flat_map(|(k, v)| [cs_string(k), cs_string(v)])
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect();
            pick.push_str(&format!(
                "if (e.ValueKind == JsonValueKind.Object) return Json.PickObject(e, new int[] {{ {} }},\n    new string[][] {{ {} }},\n    new string[][] {{ {} }});\n",
                idx.join(", "),
                reqs.join(", "),
                lits.join(", ")
            ));
        }
        if let Some(i) = map_branch {
            pick.push_str(&format!(
                "if (e.ValueKind == JsonValueKind.Object) return {i};\n"
            ));
        }
        pick.push_str(&format!(
            "throw ContractException.WrongType({}, \"no branch of {name} accepts a JSON \" + e.ValueKind);",
            cs_string(name)
        ));
    }
    json!({
        "style": style,
        "variants": variants,
        "pick": pick,
    })
}

/// ` : Parent` for a type that is a branch of a hierarchy union.
fn base_of(name: &str, types: &Value) -> Option<String> {
    let parent = parents(types).get(name).cloned()?;
    let def = find(types, &parent)?;
    (union_style(types, def) == "hierarchy").then_some(parent)
}

/// A limit as C# members (a constant, a `TimeSpan`, or a rate).
fn limit_members(l: &Value) -> String {
    let name = pascal(l["key"].as_str().unwrap_or_default());
    let base = l["base"].as_f64().unwrap_or_default();
    let value = l["value"].as_f64().unwrap_or_default();
    let num = |v: f64| {
        if v.fract() == 0.0 && v.abs() < 9.0e18 {
            ("long", format!("{}L", v as i64))
        } else {
            ("double", format!("{v:?}d"))
        }
    };
    let mut out = Vec::new();
    match l["dim"].as_str() {
        Some("seconds") => {
            out.push(format!(
                "public static readonly TimeSpan {name} = TimeSpan.FromMilliseconds({});",
                (base * 1000.0).round() as i64
            ));
        }
        _ => {
            let (t, v) = num(if l["dim"] == "bytes" { base } else { value });
            out.push(format!("public const {t} {name} = {v};"));
        }
    }
    if let Some(b) = l["burst"].as_u64() {
        out.push(format!("public const long {name}Burst = {b}L;"));
    }
    if let Some(p) = l["perSeconds"].as_f64() {
        out.push(format!(
            "public static readonly TimeSpan {name}Per = TimeSpan.FromMilliseconds({});",
            (p * 1000.0).round() as i64
        ));
    }
    out.join("\n        ")
}

/// The C# view of a channel's wire rules (sdk.rs's `wireRules`, `methodCaps`, `methodAt`,
/// `replyAt` and `frameDeadline`): C# expressions naming the generated `Limits` members, so
/// every number stays in one place.
fn channel_view(c: &Value, types: &Value) -> Value {
    let limit = |key: &str| format!("Limits.{}", pascal(key));
    let cap_expr = |v: &Value| {
        v["limit"]
            .as_str()
            .map(limit)
            .unwrap_or_else(|| "null".into())
    };
    let names = |v: &Value| match v.as_array() {
        Some(a) => format!(
            "new string[] {{ {} }}",
            a.iter()
                .map(|s| cs_string(s.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "null".into(),
    };
    let cs_bool = |b: bool| if b { "true" } else { "false" };
    let wr = &c["wireRules"];
    let rules = if wr.is_object() {
        let mut doc = Vec::new();
        if wr["strict"] == true {
            doc.push("the strict profile".to_string());
        }
        if wr["objectOnly"] == true {
            doc.push("an object at the top".into());
        }
        if let Some(d) = wr["maxDepth"]["limit"].as_str() {
            doc.push(format!("depth at most {}", limit(d)));
        }
        if let Some(i) = wr["maxItems"]["limit"].as_str() {
            doc.push(format!("at most {} members plus elements", limit(i)));
        }
        if wr["noNull"] == true {
            doc.push("no null".into());
        }
        json!({
            "noNull": cs_bool(wr["noNull"] == true),
            "strict": cs_bool(wr["strict"] == true),
            "objectOnly": cs_bool(wr["objectOnly"] == true),
            "maxDepth": cap_expr(&wr["maxDepth"]),
            "maxItems": cap_expr(&wr["maxItems"]),
            "doc": if doc.is_empty() { "no JSON rules of its own".to_string() } else { doc.join(", ") },
        })
    } else {
        Value::Null
    };
    let caps: Vec<Value> = c["methodCaps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            json!({
                "method": cs_string(m["method"].as_str().unwrap_or_default()),
                "limit": cs_string(m["limit"].as_str().unwrap_or_default()),
                "cap": cap_expr(m),
                "ignore": cs_bool(m["ignore"] == true),
            })
        })
        .collect();
    // The deadline applies where the reader is this runtime's (length-prefixed framing).
    let deadline = match c["frameDeadline"]["limit"].as_str() {
        Some(key) if c["framing"]["kind"] == "length-prefixed" => {
            json!({"limit": cs_string(key), "after": limit(key)})
        }
        _ => Value::Null,
    };
    json!({
        "messageType": c["message"].as_str().map(|m| cs_type(&TypeRef::Named { name: m.to_string() }, types)),
        "rules": rules,
        "caps": caps,
        "methodAt": names(&c["methodAt"]),
        "replyAt": names(&c["replyAt"]),
        "deadline": deadline,
    })
}

/// XML doc comment lines (`/// <summary>…</summary>`), indented.
fn doc(text: &str, indent: &str) -> String {
    let t = text.trim();
    if t.is_empty() {
        return String::new();
    }
    let esc = t
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let mut out = format!("{indent}/// <summary>\n");
    for line in esc.lines() {
        out.push_str(format!("{indent}/// {line}").trim_end());
        out.push('\n');
    }
    out.push_str(&format!("{indent}/// </summary>\n"));
    out
}

/// Values of a code table with C# spellings of their wire values.
fn table_values(t: &Value) -> Value {
    let vt = t["valueType"].as_str().unwrap_or("str");
    let enum_name = t["ident"].as_str().unwrap_or_default();
    Value::Array(
        t["values"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| {
                let mut ident = v["ident"].as_str().unwrap_or_default().to_string();
                if ident == enum_name {
                    ident.push_str("Value");
                }
                let wire = match vt {
                    "int" => v["value"].to_string(),
                    "str" => cs_string(v["value"].as_str().unwrap_or_default()),
                    _ => match &v["value"] {
                        Value::String(s) => cs_string(s),
                        other => format!("(object){}L", other),
                    },
                };
                json!({
                    "ident": ident, "wire": wire, "raw": v["value"], "name": v["name"],
                    "description": v["description"], "category": v["category"], "retryable": v["retryable"],
                    "jsonLit": cs_string(&v["value"].to_string()),
                })
            })
            .collect(),
    )
}

handlebars_helper!(cs_type_helper: |ty: Json, types: Json| cs_type(&tref(ty), types));
handlebars_helper!(cs_literal_helper: |v: Json| cs_literal(v));
handlebars_helper!(cs_string_helper: |v: Json| match v {
    Value::String(s) => cs_string(s),
    other => cs_string(&other.to_string()),
});
// The message trigger of a machine's event, as a `MessageTrigger` (null for other events).
handlebars_helper!(cs_trigger_helper: |events: Json, ident: str| {
    let e = events.as_array().into_iter().flatten().find(|e| e["ident"] == ident);
    match e {
        Some(e) if e["on"] == "message" => {
            let opt = |v: &Value| v.as_str().map_or("null".to_string(), cs_string);
            let matches: Vec<String> = e["matches"].as_array().into_iter().flatten()
                .map(|m| format!("new string[] {{ {}, {} }}", opt(&m[0]), opt(&m[1])))
                .collect();
            format!("new MessageTrigger({}, {}, {}, new string[][] {{ {} }})", opt(&e["method"]), opt(&e["kind"]), opt(&e["from"]), matches.join(", "))
        }
        _ => "null".to_string(),
    }
});
// A keyed rate limit's `new KeyedRate(...)`, from its IR.
handlebars_helper!(cs_keyed_helper: |l: Json| {
    let k = &l["keyed"];
    let opt = |v: &Value| v.as_str().map_or("null".to_string(), cs_string);
    let list = |v: &Value| match v.as_array() {
        Some(a) => format!("new string[] {{ {} }}", a.iter().map(&opt).collect::<Vec<_>>().join(", ")),
        None => "null".into(),
    };
    let num = |v: &Value| v.as_f64().map_or("0.0".into(), |f| format!("{f:?}"));
    format!(
        "new KeyedRate({}, {}, {}, {}L, {}, {}, {}, {}, {}, {})",
        opt(&l["key"]), num(&k["amount"]), num(&k["perSeconds"]), k["burst"],
        if k["bytes"] == true { "true" } else { "false" },
        list(&k["methods"]), list(&k["channelMethods"]), opt(&k["from"]), opt(&k["key"]), opt(&k["pointer"]),
    )
});
// A party's `new IdRules(...)`, from its IR.
handlebars_helper!(cs_id_rules_helper: |r: Json| {
    let flag = |k: &str| if r[k] == true { "true" } else { "false" };
    format!(
        "new IdRules({}, {}, {}, {}, {}, {})",
        r["prefix"].as_str().map_or("null".to_string(), cs_string),
        r["start"].as_i64().map_or("null".to_string(), |n| format!("(long?){n}L")),
        flag("increasing"), flag("gapless"), flag("unique"),
        id_rules_code(&r["code"]),
    )
});
// An id rule's error code as a C# literal: a string, a boxed long, or null.
fn id_rules_code(code: &Value) -> String {
    match code {
        Value::String(s) => cs_string(s),
        Value::Number(n) => n.as_i64().map_or("null".to_string(), |n| format!("{n}L")),
        _ => "null".to_string(),
    }
}
handlebars_helper!(cs_fields_helper: |def: Json, types: Json| fields(def, types));
handlebars_helper!(cs_keeps_null_helper: |def: Json, types: Json| fields(def, types)
    .as_array()
    .is_some_and(|fs| fs.iter().any(|f| f["keepNull"] == true)));
handlebars_helper!(cs_required_mask_helper: |def: Json| required_mask(def));
handlebars_helper!(cs_literal_mask_helper: |def: Json, types: Json| literal_mask(def, types));
handlebars_helper!(cs_union_helper: |def: Json, types: Json| union_info(def, types));
handlebars_helper!(cs_base_helper: |name: str, types: Json| base_of(name, types).map(|p| format!("{p}, ")).unwrap_or_default());
handlebars_helper!(cs_abstract_base_helper: |name: str, types: Json| base_of(name, types).map(|p| format!(" : {p}")).unwrap_or_default());
handlebars_helper!(cs_limit_helper: |l: Json| limit_members(l));
handlebars_helper!(cs_doc_helper: |text: Json, indent: str| doc(text.as_str().unwrap_or(""), indent));
handlebars_helper!(cs_table_values_helper: |t: Json| table_values(t));
handlebars_helper!(cs_enum_member_helper: |ident: str, enum_name: str| if ident == enum_name { format!("{ident}Value") } else { ident.to_string() });
// `typeof(X)` for the type a vector names (aliases resolve to what they spell).
handlebars_helper!(cs_typeof_helper: |name: str, types: Json| {
    let t = cs_type(&TypeRef::Named { name: name.to_string() }, types);
    format!("typeof({t})")
});
handlebars_helper!(cs_channel_helper: |c: Json, types: Json| channel_view(c, types));
handlebars_helper!(cs_union_style_helper: |def: Json, types: Json| union_style(types, def));

/// Register the C# helpers.
pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("cs_type", Box::new(cs_type_helper));
    hb.register_helper("cs_literal", Box::new(cs_literal_helper));
    hb.register_helper("cs_string", Box::new(cs_string_helper));
    hb.register_helper("cs_trigger", Box::new(cs_trigger_helper));
    hb.register_helper("cs_keyed", Box::new(cs_keyed_helper));
    hb.register_helper("cs_id_rules", Box::new(cs_id_rules_helper));
    hb.register_helper("cs_fields", Box::new(cs_fields_helper));
    hb.register_helper("cs_keeps_null", Box::new(cs_keeps_null_helper));
    hb.register_helper("cs_union", Box::new(cs_union_helper));
    hb.register_helper("cs_literal_mask", Box::new(cs_literal_mask_helper));
    hb.register_helper("cs_required_mask", Box::new(cs_required_mask_helper));
    hb.register_helper("cs_union_style", Box::new(cs_union_style_helper));
    hb.register_helper("cs_base", Box::new(cs_base_helper));
    hb.register_helper("cs_abstract_base", Box::new(cs_abstract_base_helper));
    hb.register_helper("cs_limit", Box::new(cs_limit_helper));
    hb.register_helper("cs_doc", Box::new(cs_doc_helper));
    hb.register_helper("cs_table_values", Box::new(cs_table_values_helper));
    hb.register_helper("cs_enum_member", Box::new(cs_enum_member_helper));
    hb.register_helper("cs_typeof", Box::new(cs_typeof_helper));
    hb.register_helper("cs_channel", Box::new(cs_channel_helper));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_strings() {
        assert_eq!(cs_string("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(cs_literal(&json!("2.0")), "\"2.0\"");
        assert_eq!(cs_literal(&json!(1)), "1L");
        assert_eq!(cs_literal(&json!(true)), "true");
    }

    /// The channel view names the generated `Limits` members for every cap, deadline and rule.
    #[test]
    fn channel_view_spells_the_contracts_wire_rules() {
        let channel = |contract: &str, key: &str| -> Value {
            let path = format!(
                "{}/../schema/contracts/{contract}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let ir = crate::ir::Ir::build(
                contract::load(std::path::Path::new(&path)).expect("contract"),
            )
            .expect("ir");
            let package = Value::Null;
            let cx = crate::context::Context::build(&ir, "", &package);
            let ctx = serde_json::to_value(&cx).expect("context");
            let c = ctx["channels"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["key"] == key))
                .cloned()
                .expect("channel");
            channel_view(&c, &ctx["types"])
        };
        let ipc = channel("rukh", "ipc");
        assert_eq!(
            ipc["rules"],
            json!({
                "strict": "true", "objectOnly": "true", "noNull": "false",
                "maxDepth": "Limits.JsonDepthMax", "maxItems": "Limits.JsonItemsMax",
                "doc": "the strict profile, an object at the top, depth at most Limits.JsonDepthMax, at most Limits.JsonItemsMax members plus elements",
            })
        );
        let caps = ipc["caps"].as_array().expect("caps");
        assert_eq!(caps.len(), 4);
        assert!(
            caps.iter().all(|c| c["cap"] == "Limits.LifecyclePayloadMax"
                && c["limit"] == "\"lifecyclePayloadMax\"")
        );
        let log = caps
            .iter()
            .find(|c| c["method"] == "\"rukh.log\"")
            .expect("rukh.log");
        assert_eq!(log["ignore"], "true");
        assert_eq!(
            ipc["deadline"],
            json!({"limit": "\"incompleteFrameSeconds\"", "after": "Limits.IncompleteFrameSeconds"})
        );
        assert_eq!(ipc["methodAt"], "new string[] { \"method\" }");
        assert_eq!(ipc["replyAt"], "new string[] { \"id\" }");
        assert_eq!(ipc["messageType"], "Message");

        let control = channel("kernel", "control");
        assert_eq!(control["rules"]["strict"], "false");
        assert_eq!(control["rules"]["maxDepth"], "Limits.JsonMaxDepth");
        assert_eq!(control["caps"], json!([]));
        assert_eq!(control["deadline"], Value::Null);
        assert_eq!(control["methodAt"], "new string[] { \"method\" }");
        assert_eq!(control["replyAt"], "new string[] { \"correlation_id\" }");
        // No JSON rules of its own and no method caps: the plain decode.
        assert_eq!(channel("xsession", "inbox")["rules"], Value::Null);
    }

    #[test]
    fn nullable_union_resolves() {
        let types = json!([
            {"kind": "alias", "name": "RequestId", "description": "", "target": {"kind": "string"}},
            {"kind": "union", "name": "Id", "description": "", "tag": null, "variants": [
                {"ident": "RequestId", "ty": {"kind": "named", "name": "RequestId"}, "tagValue": null},
                {"ident": "Variant1", "ty": {"kind": "null"}, "tagValue": null}
            ]}
        ]);
        assert_eq!(
            cs_type(&TypeRef::Named { name: "Id".into() }, &types),
            "string"
        );
    }
}
