//! The Python target (msgspec): one module per contract in a package named by
//! [`crate::Package`] (`contract_sdk` by default) that imports the shared
//! `contract_runtime` package, rendered from `codegen/templates/python/`.
//!
//! The templates only lay files out. [`py_module`] (the `py_module` helper)
//! turns a contract's [`context`](crate::sdk::context) into a Python-ready view:
//! class names that do not clash with Python or with each other, field
//! annotations, msgspec struct options, how each union is decoded, enum
//! members, constants and transition tables. Decisions it takes:
//!
//! - A union whose branches are all structs (after flattening nested unions)
//!   and that share one field fixed to a distinct literal in every branch is a
//!   msgspec tagged union (`tag_field`/`tag`); the tag field is then not a struct
//!   field (msgspec writes it). A one-branch union is an alias of its branch. A null
//!   branch stays beside the tagged ones (`Union[None, A, B]`, which msgspec takes).
//! - A union of structs without such a field (JSON-RPC's request/notification/
//!   response/error) is decoded by a generated `decode_<name>` function that
//!   picks the branch by which members are present (then, among equals, the first
//!   that accepts the value); a struct member typed by it (directly, in a list or
//!   a map) is `Any` to msgspec, which cannot express an untagged union, and the
//!   union to a type checker (`_<Union>Field`), and the struct's `__post_init__`
//!   picks the branch the same way, so the member is validated and typed.
//! - Open structs (`additionalProperties` not false) get `dict=True` and the
//!   runtime keeps their unknown members on decode and writes them back on
//!   encode, so decode → encode is lossless.
//! - Limits: bytes and counts are `Final[int]`; times are `Final[float]` in
//!   seconds.

use std::collections::{HashMap, HashSet};

use handlebars::{Handlebars, handlebars_helper};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ir::{lower_snake, upper_snake};
use crate::sdk::Template;
use crate::types::TypeRef;

/// The built-in Python templates.
pub const TEMPLATES: &[Template] = &[
    (
        "pyproject.toml.hbs",
        include_str!("../templates/python/pyproject.toml.hbs"),
    ),
    (
        "{{package}}/__init__.py.hbs",
        include_str!("../templates/python/{{package}}/__init__.py.hbs"),
    ),
    (
        "{{package}}/py.typed.hbs",
        include_str!("../templates/python/{{package}}/py.typed.hbs"),
    ),
    (
        "{{package}}/{{module}}.py.hbs",
        include_str!("../templates/python/{{package}}/{{module}}.py.hbs"),
    ),
];

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Names the generated module imports or defines itself; types must not take them.
const RESERVED_TYPES: &[&str] = &[
    "Any",
    "Annotated",
    "Final",
    "Literal",
    "Union",
    "TypeAlias",
    "TYPE_CHECKING",
    "Callable",
    "NamedTuple",
    "Optional",
    "TypeVar",
    "ContractError",
    "DecodeFailure",
    "FrameError",
    "FrameIncomplete",
    "FrameTooLarge",
    "FrameTruncated",
    "InvalidTransition",
    "LineReader",
    "MethodFrameTooLarge",
];

/// Attribute names a struct field must not take (they shadow names its annotations use).
const RESERVED_ATTRS: &[&str] = &[
    "msgspec",
    "enum",
    "int",
    "str",
    "float",
    "bool",
    "dict",
    "list",
    "tuple",
    "frozenset",
];

fn py_ident(s: &str, reserved: &[&str]) -> String {
    let mut s = s.to_string();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    if KEYWORDS.contains(&s.as_str()) || reserved.contains(&s.as_str()) {
        s.push('_');
    }
    s
}

/// A JSON value as a Python literal (`null` → `None`, strings JSON-escaped, which Python reads alike).
pub fn py_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(py_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    py_literal(&Value::String(k.clone())),
                    py_literal(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A triple-quoted docstring body-safe text.
fn py_doc(s: &str) -> String {
    let mut out = s
        .trim()
        .replace('\\', "\\\\")
        .replace("\"\"\"", "\\\"\\\"\\\"");
    if out.ends_with('"') {
        out.push(' ');
    }
    out
}

/// The name a field refers to a presence-dispatched union by: `Any` at run time (msgspec
/// cannot decode an untagged union of structs; the struct's `__post_init__` picks the
/// branch), the union itself to a type checker.
fn field_alias(union: &str) -> String {
    format!("_{union}Field")
}

/// How a struct's `__post_init__` turns the value of a member typed `ty` (read as `v`) into
/// its presence-dispatched union's branch, or `None` when it holds no such union at the top,
/// in a list or in a map (deeper ones stay as msgspec decoded them).
fn dispatch_expr(
    ty: &TypeRef,
    v: &str,
    untyped: &HashSet<String>,
    names: &HashMap<String, String>,
) -> Option<String> {
    let branches =
        |name: &str| format!("_{}_BRANCHES", names.get(name).map_or(name, String::as_str));
    match ty {
        TypeRef::Named { name } if untyped.contains(name) => {
            Some(format!("_rt.by_presence({v}, {})", branches(name)))
        }
        TypeRef::Array { items } => {
            dispatch_expr(items, "x", untyped, names).map(|e| format!("[{e} for x in {v}]"))
        }
        TypeRef::Map { values } => dispatch_expr(values, "x", untyped, names)
            .map(|e| format!("{{k: {e} for k, x in {v}.items()}}")),
        TypeRef::Nullable { inner } => {
            dispatch_expr(inner, v, untyped, names).map(|e| format!("None if {v} is None else {e}"))
        }
        _ => None,
    }
}

/// A type as a Python annotation; `names` maps contract type names to Python names,
/// `untyped` lists the presence-dispatched unions, spelled `Any` in an alias and by their
/// [`field_alias`] in a member's annotation (`field`).
pub fn py_type_with(
    t: &TypeRef,
    names: &HashMap<String, String>,
    (untyped, field): (&HashSet<String>, bool),
) -> String {
    match t {
        TypeRef::Named { name } => {
            if untyped.contains(name) {
                // A member's annotation: `Any` to msgspec, the union to a type checker (see
                // `field_alias`); an alias, evaluated at import, says `Any`.
                match field {
                    true => field_alias(names.get(name).map_or(name.as_str(), String::as_str)),
                    false => "Any".into(),
                }
            } else {
                names
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| py_ident(name, RESERVED_TYPES))
            }
        }
        TypeRef::String => "str".into(),
        TypeRef::Integer { min, max } => {
            let mut meta = Vec::new();
            if let Some(a) = min {
                meta.push(format!("ge={a}"));
            }
            if let Some(b) = max {
                meta.push(format!("le={b}"));
            }
            if meta.is_empty() {
                "int".into()
            } else {
                format!("Annotated[int, msgspec.Meta({})]", meta.join(", "))
            }
        }
        TypeRef::Number => "float".into(),
        TypeRef::Boolean => "bool".into(),
        TypeRef::Null => "None".into(),
        TypeRef::Any => "Any".into(),
        TypeRef::Array { items } => {
            format!("list[{}]", py_type_with(items, names, (untyped, field)))
        }
        TypeRef::Map { values } => format!(
            "dict[str, {}]",
            py_type_with(values, names, (untyped, field))
        ),
        TypeRef::Literal { value } => match value {
            Value::String(_) => format!("Literal[{}]", py_literal(value)),
            Value::Number(n) if n.is_i64() => format!("Literal[{}]", py_literal(value)),
            Value::Null => "None".into(),
            Value::Bool(_) => "bool".into(),
            _ => "Any".into(),
        },
        TypeRef::Nullable { inner } => {
            format!(
                "Union[{}, None]",
                py_type_with(inner, names, (untyped, field))
            )
        }
    }
}

/// A type as a Python annotation, without renaming.
pub fn py_type(t: &TypeRef) -> String {
    py_type_with(t, &HashMap::new(), (&HashSet::new(), false))
}

handlebars_helper!(py_type_helper: |v: Json| {
    TypeRef::deserialize(v).map(|t| py_type(&t)).unwrap_or_else(|_| "Any".into())
});
handlebars_helper!(py_literal_helper: |v: Json| py_literal(v));
handlebars_helper!(py_doc_helper: |v: Json| py_doc(v.as_str().unwrap_or_default()));
handlebars_helper!(py_module_helper: |ctx: Json| py_module(ctx));

fn tref(v: &Value) -> TypeRef {
    TypeRef::deserialize(v).unwrap_or(TypeRef::Any)
}

struct Types<'a> {
    by_name: HashMap<&'a str, &'a Value>,
}

impl<'a> Types<'a> {
    /// Follow aliases (`Alias` to a named type) to the underlying definition.
    fn resolve(&self, name: &str) -> Option<&'a Value> {
        let mut cur = self.by_name.get(name).copied()?;
        for _ in 0..16 {
            if cur["kind"] == "alias" && cur["target"]["kind"] == "named" {
                match self
                    .by_name
                    .get(cur["target"]["name"].as_str().unwrap_or_default())
                {
                    Some(n) => cur = n,
                    None => break,
                }
            } else {
                break;
            }
        }
        Some(cur)
    }

    /// The literal a type pins its value to, through aliases.
    fn literal(&self, t: &Value) -> Option<Value> {
        match t["kind"].as_str()? {
            "literal" => Some(t["value"].clone()),
            "named" => {
                let d = self.resolve(t["name"].as_str()?)?;
                (d["kind"] == "alias" && d["target"]["kind"] == "literal")
                    .then(|| d["target"]["value"].clone())
            }
            _ => None,
        }
    }

    /// The structs a union of structs picks from (nested unions flattened), its null branch
    /// aside (see [`Types::has_null`]); `None` when another branch is not a struct.
    fn leaves(&self, union: &Value, depth: usize) -> Option<Vec<String>> {
        let mut out = Vec::new();
        for v in union["variants"].as_array()? {
            if v["ty"]["kind"] == "null" && depth == 0 {
                continue;
            }
            if v["ty"]["kind"] != "named" || depth > 8 {
                return None;
            }
            let name = v["ty"]["name"].as_str()?;
            let d = self.resolve(name)?;
            match d["kind"].as_str()? {
                "struct" => out.push(d["name"].as_str()?.to_string()),
                "union" => out.extend(self.leaves(d, depth + 1)?),
                _ => return None,
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Whether a union has a null branch of its own (GeoJSON's `geometry`: null or a geometry).
    fn has_null(union: &Value) -> bool {
        union["variants"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["ty"]["kind"] == "null"))
    }
}

/// The Python view of one contract context (see the module docs).
pub fn py_module(ctx: &Value) -> Value {
    let empty = vec![];
    let types_v = ctx["types"].as_array().unwrap_or(&empty);
    let types = Types {
        by_name: types_v
            .iter()
            .map(|t| (t["name"].as_str().unwrap_or_default(), t))
            .collect(),
    };
    // Class names: types first, then state machines, tables, the error catalog.
    let mut taken: HashSet<String> = HashSet::new();
    let mut names: HashMap<String, String> = HashMap::new();
    for t in types_v {
        let n = t["name"].as_str().unwrap_or_default();
        let mut p = py_ident(n, RESERVED_TYPES);
        while taken.contains(&p) {
            p.push('_');
        }
        taken.insert(p.clone());
        names.insert(n.to_string(), p);
    }
    let mut claim = |base: &str, suffix: &str| -> String {
        let mut p = py_ident(base, RESERVED_TYPES);
        if taken.contains(&p) {
            p = format!("{p}{suffix}");
        }
        while taken.contains(&p) {
            p.push('_');
        }
        taken.insert(p.clone());
        p
    };
    let machine_names: Vec<String> = ctx["machines"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|m| claim(m["ident"].as_str().unwrap_or_default(), "Machine"))
        .collect();
    // A typed machine's event enum: `LifecycleEvent` beside `LifecycleState`.
    let event_names: Vec<String> = ctx["machines"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|m| claim(m["eventIdent"].as_str().unwrap_or_default(), "Events"))
        .collect();
    let table_names: Vec<String> = ctx["tables"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|t| claim(t["ident"].as_str().unwrap_or_default(), "Table"))
        .collect();
    let error_name = ctx["errors"]["ident"].as_str().map(|i| claim(i, "Catalog"));

    // Unions: tagged, alias of one branch, presence-dispatched, or a plain Union.
    let mut struct_tag: HashMap<String, (String, Value)> = HashMap::new();
    let mut union_kind: HashMap<String, (String, Vec<String>)> = HashMap::new();
    let mut unions: Vec<&Value> = types_v.iter().filter(|t| t["kind"] == "union").collect();
    // Wider unions first: they constrain the tag choice most.
    unions.sort_by_key(|u| std::cmp::Reverse(types.leaves(u, 0).map(|l| l.len()).unwrap_or(0)));
    for u in &unions {
        let uname = u["name"].as_str().unwrap_or_default().to_string();
        let Some(leaves) = types.leaves(u, 0) else {
            union_kind.insert(uname, ("plain".into(), vec![]));
            continue;
        };
        let uniq: Vec<String> = leaves.iter().fold(Vec::new(), |mut acc, l| {
            if !acc.contains(l) {
                acc.push(l.clone());
            }
            acc
        });
        if uniq.len() == 1 {
            union_kind.insert(uname, ("alias".into(), uniq));
            continue;
        }
        let nullable = Types::has_null(u);
        // Candidate tag fields: the declared tag first, then every field of the first leaf.
        let mut cands: Vec<String> = u["tag"]
            .as_str()
            .map(|s| vec![s.to_string()])
            .unwrap_or_default();
        if let Some(first) = types.by_name.get(uniq[0].as_str()) {
            for f in first["fields"].as_array().unwrap_or(&empty) {
                cands.push(f["wire"].as_str().unwrap_or_default().to_string());
            }
        }
        let chosen = cands.into_iter().find_map(|c| {
            let mut vals = Vec::new();
            for l in &uniq {
                let s = types.by_name.get(l.as_str())?;
                let f = s["fields"]
                    .as_array()?
                    .iter()
                    .find(|f| f["wire"] == c.as_str())?;
                if f["required"] != true {
                    return None;
                }
                let v = types.literal(&f["ty"])?;
                if !(v.is_string() || v.is_i64()) || vals.contains(&v) {
                    return None;
                }
                if let Some((tf, _)) = struct_tag.get(l)
                    && *tf != c
                {
                    return None;
                }
                vals.push(v);
            }
            let same_kind = vals.iter().all(Value::is_string) || vals.iter().all(Value::is_i64);
            same_kind.then_some((c, vals))
        });
        match chosen {
            Some((field, vals)) => {
                for (l, v) in uniq.iter().zip(vals) {
                    struct_tag.insert(l.clone(), (field.clone(), v));
                }
                union_kind.insert(uname, ("tagged".into(), uniq));
            }
            // A presence-dispatched union has no null branch to pick: a plain Union then.
            None if nullable => {
                union_kind.insert(uname, ("plain".into(), vec![]));
            }
            None => {
                union_kind.insert(uname, ("dispatch".into(), uniq));
            }
        }
    }
    let untyped: HashSet<String> = union_kind
        .iter()
        .filter(|(_, (k, _))| k == "dispatch")
        .map(|(n, _)| n.clone())
        .collect();
    let ann = |t: &Value| py_type_with(&tref(t), &names, (&untyped, false));
    let member_ann = |t: &Value| py_type_with(&tref(t), &names, (&untyped, true));
    let pyname = |n: &str| names.get(n).cloned().unwrap_or_else(|| n.to_string());

    let mut enums = Vec::new();
    let mut structs = Vec::new();
    let mut aliases: Vec<(String, Value, Vec<String>)> = Vec::new();
    let mut dispatch = Vec::new();
    for t in types_v {
        let name = t["name"].as_str().unwrap_or_default();
        let py = pyname(name);
        let doc = py_doc(t["description"].as_str().unwrap_or_default());
        match t["kind"].as_str().unwrap_or_default() {
            "stringEnum" => {
                let members = member_names(
                    t["values"]
                        .as_array()
                        .unwrap_or(&empty)
                        .iter()
                        .map(|v| v[0].as_str().unwrap_or_default()),
                );
                enums.push(json!({
                    "name": py, "doc": doc, "bases": "str, enum.Enum",
                    "members": t["values"].as_array().unwrap_or(&empty).iter().zip(members).map(|(v, m)| json!({
                        "name": m, "value": py_literal(&v[1]), "doc": "",
                    })).collect::<Vec<_>>(),
                }));
            }
            "struct" => {
                let tag = struct_tag.get(name);
                let closed = t["closed"] == true;
                let mut opts = vec!["kw_only=True".to_string()];
                if let Some((f, v)) = tag {
                    opts.push(format!(
                        "tag_field={}",
                        py_literal(&Value::String(f.clone()))
                    ));
                    opts.push(format!("tag={}", py_literal(v)));
                }
                if closed {
                    opts.push("forbid_unknown_fields=True".into());
                } else {
                    opts.push("dict=True".into());
                }
                let mut used: HashSet<String> = HashSet::new();
                let fields: Vec<Value> = t["fields"]
                    .as_array()
                    .unwrap_or(&empty)
                    .iter()
                    .filter(|f| tag.is_none_or(|(tf, _)| f["wire"] != tf.as_str()))
                    .map(|f| {
                        let wire = f["wire"].as_str().unwrap_or_default();
                        let mut attr = py_ident(&lower_snake(wire), RESERVED_ATTRS);
                        while used.contains(&attr) {
                            attr.push('_');
                        }
                        used.insert(attr.clone());
                        let required = f["required"] == true;
                        let mut a = member_ann(&f["ty"]);
                        let rename =
                            (attr != wire).then(|| py_literal(&Value::String(wire.into())));
                        let default = match (required, &rename) {
                            (true, None) => String::new(),
                            (true, Some(r)) => format!(" = msgspec.field(name={r})"),
                            (false, None) => " = msgspec.UNSET".into(),
                            (false, Some(r)) => {
                                format!(" = msgspec.field(default=msgspec.UNSET, name={r})")
                            }
                        };
                        if !required {
                            a = format!("Union[{a}, msgspec.UnsetType]");
                        }
                        let this = format!("self.{attr}");
                        let pick =
                            dispatch_expr(&tref(&f["ty"]), &this, &untyped, &names).map(|e| {
                                match required {
                                    true => format!("{this} = {e}"),
                                    false => format!(
                                        "if {this} is not msgspec.UNSET:\n            {this} = {e}"
                                    ),
                                }
                            });
                        json!({
                            "attr": attr, "wire": wire, "ann": a, "default": default,
                            "doc": f["description"].as_str().unwrap_or_default().replace('\n', " "),
                            "pick": pick,
                        })
                    })
                    .collect();
                let picks: Vec<Value> = fields
                    .iter()
                    .filter_map(|f| f["pick"].as_str().map(Value::from))
                    .collect();
                structs.push(json!({
                    "name": py, "doc": doc, "options": opts.join(", "), "fields": fields, "picks": picks,
                    "open": !closed,
                    "tag": tag.map(|(f, v)| json!({"field": f, "value": py_literal(v)})).unwrap_or(Value::Null),
                }));
            }
            "union" => {
                let (kind, leaves) = union_kind.get(name).cloned().unwrap_or_default();
                match kind.as_str() {
                    "alias" | "tagged" => {
                        // msgspec takes None beside tagged structs.
                        let null = Types::has_null(t).then(|| "None".to_string());
                        let branches: Vec<String> = null
                            .into_iter()
                            .chain(leaves.iter().map(|l| pyname(l)))
                            .collect();
                        let rhs = match branches.as_slice() {
                            [one] => one.clone(),
                            _ => format!("Union[{}]", branches.join(", ")),
                        };
                        aliases.push((
                            py,
                            json!({"doc": doc, "ann": rhs, "name": pyname(name)}),
                            leaves.clone(),
                        ));
                    }
                    "dispatch" => {
                        let req = |l: &str| -> Vec<String> {
                            types
                                .by_name
                                .get(l)
                                .map(|s| {
                                    s["fields"]
                                        .as_array()
                                        .unwrap_or(&empty)
                                        .iter()
                                        .filter(|f| f["required"] == true)
                                        .filter_map(|f| f["wire"].as_str().map(str::to_string))
                                        .collect()
                                })
                                .unwrap_or_default()
                        };
                        let common: Vec<String> = leaves
                            .iter()
                            .map(|l| req(l))
                            .reduce(|a, b| a.into_iter().filter(|x| b.contains(x)).collect())
                            .unwrap_or_default();
                        let branches: Vec<Value> = leaves.iter().map(|l| {
                            let keys: Vec<String> = req(l).into_iter().filter(|k| !common.contains(k)).collect();
                            json!({"cls": pyname(l), "keys": format!("({})", keys.iter().map(|k| py_literal(&Value::String(k.clone())) + ",").collect::<Vec<_>>().join(" "))})
                        }).collect();
                        aliases.push((py.clone(), json!({
                            "doc": doc, "name": py,
                            "ann": format!("Union[{}]", leaves.iter().map(|l| pyname(l)).collect::<Vec<_>>().join(", ")),
                        }), leaves.clone()));
                        dispatch.push(json!({
                            "name": pyname(name), "wire": name, "fn": format!("decode_{}", lower_snake(name)),
                            "branches": branches,
                        }));
                    }
                    _ => {
                        let vs: Vec<String> = t["variants"]
                            .as_array()
                            .unwrap_or(&empty)
                            .iter()
                            .map(|v| ann(&v["ty"]))
                            .collect();
                        let deps = t["variants"]
                            .as_array()
                            .unwrap_or(&empty)
                            .iter()
                            .flat_map(|v| refs(&v["ty"]))
                            .collect();
                        aliases.push((py, json!({"doc": doc, "ann": format!("Union[{}]", vs.join(", ")), "name": pyname(name)}), deps));
                    }
                }
            }
            _ => {
                aliases.push((
                    py,
                    json!({"doc": doc, "ann": ann(&t["target"]), "name": pyname(name)}),
                    refs(&t["target"]),
                ));
            }
        }
    }
    // Aliases are evaluated at import: order them after the aliases they name.
    let alias_set: HashSet<String> = types_v
        .iter()
        .filter(|t| matches!(t["kind"].as_str(), Some("alias") | Some("union")))
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    let pending_deps = |deps: &[String], done: &HashSet<String>| {
        deps.iter().any(|d| {
            alias_set.contains(d)
                && !untyped.contains(d)
                && !done.contains(&names.get(d).cloned().unwrap_or_else(|| d.clone()))
        })
    };
    let mut ordered = Vec::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut rest: Vec<&(String, Value, Vec<String>)> = aliases.iter().collect();
    while !rest.is_empty() {
        let before = rest.len();
        let mut next = Vec::new();
        for a in rest {
            if pending_deps(&a.2, &done) {
                next.push(a);
            } else {
                done.insert(a.0.clone());
                ordered.push(a.1.clone());
            }
        }
        if next.len() == before {
            // A cycle (a recursive alias): emit the rest in schema order.
            ordered.extend(next.iter().map(|a| a.1.clone()));
            break;
        }
        rest = next;
    }

    let type_names: Vec<Value> = types_v
        .iter()
        .map(|t| {
            let n = t["name"].as_str().unwrap_or_default();
            json!({"wire": n, "py": pyname(n), "dispatch": untyped.contains(n)})
        })
        .collect();

    // Code tables and the error catalog.
    let table_enum = |t: &Value, py: &str| -> Value {
        let vals = t["values"].as_array().unwrap_or(&empty);
        let members = member_names(vals.iter().map(|v| v["ident"].as_str().unwrap_or_default()));
        let bases = match t["valueType"].as_str() {
            Some("int") => "enum.IntEnum",
            Some("str") => "str, enum.Enum",
            _ => "enum.Enum",
        };
        let vtype = match t["valueType"].as_str() {
            Some("int") => "int",
            Some("str") => "str",
            _ => "Union[int, str]",
        };
        json!({
            "name": py, "key": t["key"], "doc": py_doc(t["description"].as_str().unwrap_or_default()),
            "bases": bases, "valueType": vtype,
            "members": vals.iter().zip(members).map(|(v, m)| json!({
                "name": m, "value": py_literal(&v["value"]),
                "doc": v["description"].as_str().unwrap_or_default().replace('\n', " "),
                "wireName": v["name"].as_str().map(|s| py_literal(&Value::String(s.into()))).unwrap_or_else(|| "None".into()),
                "category": v["category"].as_str().map(|s| py_literal(&Value::String(s.into()))).unwrap_or_else(|| "\"\"".into()),
                "retryable": if v["retryable"] == true { "True" } else { "False" },
                "description": py_literal(&v["description"]),
            })).collect::<Vec<_>>(),
        })
    };
    let tables: Vec<Value> = ctx["tables"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .zip(&table_names)
        .map(|(t, n)| table_enum(t, n))
        .collect();
    let errors = match (&error_name, ctx["errors"].is_object()) {
        (Some(n), true) => table_enum(&ctx["errors"], n),
        _ => Value::Null,
    };

    // State machines.
    let machines: Vec<Value> = ctx["machines"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .zip(machine_names.iter().zip(&event_names))
        .map(|(m, (py, ev))| {
            let states = m["states"].as_array().unwrap_or(&empty);
            let members = member_names(states.iter().map(|s| s[0].as_str().unwrap_or_default()));
            let member_of: HashMap<String, String> = states
                .iter()
                .zip(&members)
                .map(|(s, mm)| (s[0].as_str().unwrap_or_default().to_string(), format!("{py}.{mm}")))
                .collect();
            let m_of = |v: &Value| member_of.get(v.as_str().unwrap_or_default()).cloned().unwrap_or_default();
            let key = m["key"].as_str().unwrap_or_default();
            json!({
                "name": py, "key": key, "doc": py_doc(m["description"].as_str().unwrap_or_default()),
                "const": upper_snake(py),
                "fn": format!("check_{}_transition", lower_snake(key)),
                "fnBase": lower_snake(key),
                "ignore": m["ignoreInvalid"] == true,
                "states": states.iter().zip(&members).map(|(s, mm)| json!({
                    "name": mm, "value": py_literal(&s[1]), "doc": s[2].as_str().unwrap_or_default().replace('\n', " "),
                })).collect::<Vec<_>>(),
                "initial": m_of(&m["initial"]),
                "terminal": m["terminal"].as_array().unwrap_or(&empty).iter().map(m_of).collect::<Vec<_>>(),
                "transitions": m["transitions"].as_array().unwrap_or(&empty).iter().map(|t| format!("({}, {})", m_of(&t[0]), m_of(&t[1]))).collect::<Vec<_>>(),
                "typed": m["typed"] == true,
                "events": typed_machine(m, ev, &m_of),
            })
        })
        .collect();

    // Limits.
    let limits: Vec<Value> = ctx["limits"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|l| {
            let base = l["base"].as_f64().unwrap_or_default();
            let seconds = l["dim"] == "seconds";
            let (ty, val) = if seconds {
                ("float", format_float(base))
            } else if base.fract() == 0.0 && base.abs() < 9.007e15 {
                let i = base as i64;
                (
                    "int",
                    if l["unit"] == "mode" {
                        format!("0o{i:o}")
                    } else {
                        i.to_string()
                    },
                )
            } else {
                ("float", format_float(base))
            };
            let unit = if seconds {
                "s".to_string()
            } else {
                match l["dim"].as_str() {
                    Some("bytes") => "bytes".into(),
                    _ => l["unit"].as_str().unwrap_or("").to_string(),
                }
            };
            json!({
                "ident": l["ident"], "type": ty, "value": val, "unit": unit,
                "doc": l["description"].as_str().unwrap_or_default().replace('\n', " "),
                "burst": l["burst"], "perSeconds": l["perSeconds"].as_f64().map(format_float),
                "keyed": keyed_rate(l),
            })
        })
        .collect();
    let id_rules: Vec<Value> = ctx["idRules"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|r| {
            let opt = |v: &Value| if v.is_null() { "None".to_string() } else { py_literal(v) };
            let flag = |k: &str| if r[k] == true { "True" } else { "False" };
            json!({
                "party": py_literal(&r["party"]),
                "rules": format!("_rt.IdRules({}, {}, {}, {}, {}, {})", opt(&r["prefix"]), opt(&r["start"]), flag("increasing"), flag("gapless"), flag("unique"), opt(&r["code"])),
            })
        })
        .collect();

    // Methods: who sends them.
    let methods: Vec<Value> = ctx["methods"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|m| {
            let senders: Vec<String> = m["from"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(py_literal)
                .collect();
            json!({
                "wire": py_literal(&m["wire"]), "kind": py_literal(&m["kind"]),
                "channel": py_literal(&m["channel"]),
                "senders": format!("({}{})", senders.join(", "), if senders.len() == 1 { "," } else { "" }),
            })
        })
        .collect();
    // A list of member names (sdk.rs's `methodAt`/`replyAt`) as a Python tuple, or None.
    let name_tuple = |keys: &Value| -> String {
        match keys.as_array() {
            Some(keys) => {
                let keys: Vec<String> = keys.iter().map(py_literal).collect();
                format!(
                    "({}{})",
                    keys.join(", "),
                    if keys.len() == 1 { "," } else { "" }
                )
            }
            None => "None".into(),
        }
    };
    let py_bool = |b: bool| if b { "True" } else { "False" };

    // Channels and their framing.
    let channels: Vec<Value> = ctx["channels"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|c| {
            let f = &c["framing"];
            let snake = lower_snake(c["key"].as_str().unwrap_or_default());
            let cap = c["cap"]["ident"].as_str().unwrap_or("None").to_string();
            let kind = f["kind"].as_str().unwrap_or_default();
            let order = py_literal(&f["byteOrder"]);
            let mut v = json!({
                "key": c["key"], "sname": snake, "kind": kind, "cap": cap,
                "message": c["message"].as_str().map(&pyname).unwrap_or_default(),
                "messageDispatch": c["message"].as_str().map(|m| untyped.contains(m)).unwrap_or(false),
                "messageFn": c["message"].as_str().map(|m| format!("decode_{}", lower_snake(m))).unwrap_or_default(),
                "order": order,
                "upper": upper_snake(&snake),
            });
            // The branches constant of a presence-dispatched message union.
            v["branches"] = json!(format!("_{}_BRANCHES", v["message"].as_str().unwrap_or_default()));
            // JSON rules and method caps (sdk.rs): a channel with none keeps the plain decode.
            let caps: Vec<Value> = c["methodCaps"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(|m| json!({
                    "method": py_literal(&m["method"]),
                    "limit": py_literal(&m["limit"]),
                    "ident": m["ident"],
                    "ignore": py_bool(m["ignore"] == true),
                }))
                .collect();
            let (method_at, reply_at) = (name_tuple(&c["methodAt"]), name_tuple(&c["replyAt"]));
            let wr = &c["wireRules"];
            if wr.is_object() {
                let strict = wr["strict"] == true;
                let object_only = wr["objectOnly"] == true;
                let depth = wr["maxDepth"]["ident"].as_str();
                let items = wr["maxItems"]["ident"].as_str();
                let no_null = wr["noNull"] == true;
                let mut doc = Vec::new();
                if strict {
                    doc.push("the strict profile".to_string());
                }
                if object_only {
                    doc.push("an object at the top".into());
                }
                if let Some(d) = depth {
                    doc.push(format!("depth at most ``{d}``"));
                }
                if let Some(i) = items {
                    doc.push(format!("at most ``{i}`` members plus elements"));
                }
                if no_null {
                    doc.push("no null".into());
                }
                v["rules"] = json!({
                    "noNull": py_bool(no_null),
                    "strict": py_bool(strict),
                    "objectOnly": py_bool(object_only),
                    "maxDepth": depth.unwrap_or("None"),
                    "maxItems": items.unwrap_or("None"),
                    "doc": if doc.is_empty() { "no JSON rules of its own".to_string() } else { doc.join(", ") },
                });
            } else {
                v["rules"] = Value::Null;
            }
            v["caps"] = json!(caps);
            v["methodAt"] = json!(method_at);
            v["replyAt"] = json!(reply_at);
            // The framing's deadline for one whole frame (length-prefixed framing only).
            v["deadline"] = match c["frameDeadline"]["ident"].as_str() {
                Some(ident) if kind == "length-prefixed" => json!({
                    "limit": py_literal(&c["frameDeadline"]["limit"]), "ident": ident,
                }),
                _ => Value::Null,
            };
            match kind {
                "length-prefixed" => {
                    v["lengthBytes"] = f["lengthBytes"].clone();
                }
                "binary" => {
                    let header = f["header"].as_array().unwrap_or(&empty);
                    let code = |b: u64| match b { 1 => "B", 2 => "H", 4 => "I", _ => "Q" };
                    let first = header.first();
                    v["lengthBytes"] = first.map(|h| h["bytes"].clone()).unwrap_or(json!(4));
                    v["countsRest"] = json!(first.map(|h| h["counts"] != "payload").unwrap_or(true));
                    let rest = &header[1.min(header.len())..];
                    v["restFormat"] = json!(format!(
                        "{}{}",
                        if f["byteOrder"] == "little" { "<" } else { ">" },
                        rest.iter().map(|h| code(h["bytes"].as_u64().unwrap_or(8))).collect::<String>()
                    ));
                    v["frameClass"] = json!(format!("{}Frame", c["ident"].as_str().unwrap_or_default()));
                    v["fields"] = json!(rest.iter().map(|h| json!({
                        "attr": py_ident(&lower_snake(h["name"].as_str().unwrap_or_default()), RESERVED_ATTRS),
                        "doc": h["description"].as_str().unwrap_or_default().replace('\n', " "),
                    })).collect::<Vec<_>>());
                }
                "ndjson" => {
                    v["utf16"] = json!(f["lineMeasure"] == "utf16-units");
                }
                _ => {}
            }
            v
        })
        .collect();

    json!({
        "enums": enums,
        "structs": structs,
        "aliases": ordered,
        "dispatch": dispatch,
        "typeNames": type_names,
        "tables": tables,
        "errors": errors,
        "machines": machines,
        "limits": limits,
        "idRules": id_rules,
        "channels": channels,
        "methods": methods,
        "doc": py_doc(ctx["description"].as_str().unwrap_or_default()),
    })
}

fn format_float(f: f64) -> String {
    let s = format!("{f:?}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

/// Named types a type reference mentions.
fn refs(t: &Value) -> Vec<String> {
    match t["kind"].as_str() {
        Some("named") => vec![t["name"].as_str().unwrap_or_default().to_string()],
        Some("array") => refs(&t["items"]),
        Some("map") => refs(&t["values"]),
        Some("nullable") => refs(&t["inner"]),
        _ => vec![],
    }
}

/// Enum member names (`UPPER_SNAKE`) from Pascal identifiers, unique and not keywords.
/// A keyed rate limit's limiter arguments for the template: `None` for any other limit.
fn keyed_rate(l: &Value) -> Value {
    let k = &l["keyed"];
    if k.is_null() {
        return Value::Null;
    }
    let opt = |v: &Value| {
        if v.is_null() {
            "None".to_string()
        } else {
            py_literal(v)
        }
    };
    let list = |v: &Value| match v.as_array() {
        Some(a) => format!(
            "({})",
            a.iter()
                .map(|x| format!("{}, ", py_literal(x)))
                .collect::<String>()
        ),
        None => "None".into(),
    };
    json!({
        "fn": format!("{}_limiter", lower_snake(l["key"].as_str().unwrap_or_default())),
        "key": py_literal(&l["key"]),
        "args": format!(
            "{}, {}, {}, {}, {}, {}, {}, {}, {}, {}",
            py_literal(&l["key"]),
            k["amount"].as_f64().map_or("0.0".into(), format_float),
            k["perSeconds"].as_f64().map_or("0.0".into(), format_float),
            k["burst"],
            if k["bytes"] == true { "True" } else { "False" },
            list(&k["methods"]),
            list(&k["channelMethods"]),
            opt(&k["from"]),
            py_literal(&k["key"]),
            opt(&k["pointer"]),
        ),
    })
}

/// A typed machine's events, moves and `allows` for the template: `None` for an untyped one.
fn typed_machine(m: &Value, ev: &str, m_of: &dyn Fn(&Value) -> String) -> Value {
    if m["typed"] != true {
        return Value::Null;
    }
    let none = Vec::new();
    let events = m["events"].as_array().unwrap_or(&none);
    let members = member_names(
        events
            .iter()
            .map(|e| e["ident"].as_str().unwrap_or_default()),
    );
    let member: HashMap<&str, String> = events
        .iter()
        .zip(&members)
        .map(|(e, mm)| {
            (
                e["ident"].as_str().unwrap_or_default(),
                format!("{ev}.{mm}"),
            )
        })
        .collect();
    let opt = |v: &Value| {
        v.as_str()
            .map_or("None".to_string(), |s| py_literal(&json!(s)))
    };
    let trigger = |e: &Value| -> String {
        if e["on"] != "message" {
            return "None".into();
        }
        let matches: Vec<String> = e["matches"]
            .as_array()
            .unwrap_or(&none)
            .iter()
            .map(|p| {
                format!(
                    "({}, {}), ",
                    py_literal(&p[0]),
                    p[1].as_str()
                        .and_then(|t| serde_json::from_str(t).ok())
                        .map_or("None".into(), |v| py_literal(&v))
                )
            })
            .collect();
        format!(
            "_rt.Trigger({}, {}, {}, ({}))",
            opt(&e["method"]),
            opt(&e["kind"]),
            opt(&e["from"]),
            matches.concat()
        )
    };
    let by_ident: HashMap<&str, &Value> = events
        .iter()
        .map(|e| (e["ident"].as_str().unwrap_or_default(), e))
        .collect();
    json!({
        "name": ev,
        "members": events.iter().zip(&members).map(|(e, mm)| json!({"name": mm, "label": py_literal(&e["label"])})).collect::<Vec<_>>(),
        "moves": m["moves"].as_array().unwrap_or(&none).iter().map(|mv| {
            let e = mv["event"].as_str().unwrap_or_default();
            format!("({}, {}, {}, {})", m_of(&mv["from"]), member.get(e).cloned().unwrap_or_default(), m_of(&mv["to"]), by_ident.get(e).map_or("None".into(), |x| trigger(x)))
        }).collect::<Vec<_>>(),
        "allows": m["allows"].as_array().unwrap_or(&none).iter().map(|a| json!({
            "method": py_literal(&a[0]),
            "states": a[1].as_array().unwrap_or(&none).iter().map(|st| format!("{}, ", m_of(st))).collect::<String>(),
        })).collect::<Vec<_>>(),
        "scope": py_literal(&m["scope"]),
        "keyPointer": opt(&m["keyPointer"]),
    })
}

fn member_names<'a>(idents: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut seen: HashSet<String> = HashSet::new();
    idents
        .map(|i| {
            let mut m = py_ident(&upper_snake(i), &[]);
            while seen.contains(&m) {
                m.push('_');
            }
            seen.insert(m.clone());
            m
        })
        .collect()
}

/// Register the Python helpers.
pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("py_type", Box::new(py_type_helper));
    hb.register_helper("py_literal", Box::new(py_literal_helper));
    hb.register_helper("py_doc", Box::new(py_doc_helper));
    hb.register_helper("py_module", Box::new(py_module_helper));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations() {
        assert_eq!(
            py_type(&TypeRef::Integer {
                min: Some(1),
                max: None
            }),
            "Annotated[int, msgspec.Meta(ge=1)]"
        );
        assert_eq!(
            py_type(&TypeRef::Literal {
                value: json!("2.0")
            }),
            "Literal[\"2.0\"]"
        );
        assert_eq!(
            py_type(&TypeRef::Nullable {
                inner: Box::new(TypeRef::Array {
                    items: Box::new(TypeRef::String)
                })
            }),
            "Union[list[str], None]"
        );
        assert_eq!(py_literal(&json!(null)), "None");
        assert_eq!(py_ident("from", RESERVED_ATTRS), "from_");
    }
}
