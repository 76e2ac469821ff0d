//! The Python target (msgspec): one module per contract in a package named by
//! [`crate::Package`] (`contract_sdk` by default) that imports the shared
//! `contract_runtime` package, rendered from `codegen/templates/python/`.
//!
//! The templates only lay files out. [`view`] (the template's `target`) turns a
//! contract's [`Context`](crate::context::Context) into a Python-ready view:
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
use serde_json::Value;

use crate::ir::upper_snake;
use crate::sdk::Template;
use crate::types::TypeRef;

mod view;
pub use view::view;

/// The built-in Python templates.
/// The python target.
pub const TARGET: crate::sdk::Target = crate::sdk::Target {
    lang: "python",
    templates: TEMPLATES,
    register,
    view,
};

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
    (
        "partials/codes.hbs",
        include_str!("../templates/python/partials/codes.hbs"),
    ),
    (
        "partials/decoder.hbs",
        include_str!("../templates/python/partials/decoder.hbs"),
    ),
    (
        "partials/framing.hbs",
        include_str!("../templates/python/partials/framing.hbs"),
    ),
    (
        "partials/machines.hbs",
        include_str!("../templates/python/partials/machines.hbs"),
    ),
    (
        "partials/types.hbs",
        include_str!("../templates/python/partials/types.hbs"),
    ),
    (
        "partials/unions.hbs",
        include_str!("../templates/python/partials/unions.hbs"),
    ),
];

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Names the generated module imports or defines itself; types must not take them.
pub(crate) const RESERVED_TYPES: &[&str] = &[
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
pub(crate) const RESERVED_ATTRS: &[&str] = &[
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

pub(crate) fn py_ident(s: &str, reserved: &[&str]) -> String {
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
pub(crate) fn py_doc(s: &str) -> String {
    let mut out = s
        .trim()
        .replace('\\', "\\\\")
        .replace("\"\"\"", "\\\"\\\"\\\"");
    if out.ends_with('"') {
        out.push(' ');
    }
    out
}

/// The name a member or alias refers to a presence-dispatched union by: `Any` at run time
/// (msgspec cannot decode an untagged union of structs; the struct's `__post_init__` picks
/// the branch), the union itself to a type checker.
fn field_alias(union: &str) -> String {
    format!("_{union}Field")
}

/// How a struct's `__post_init__` turns the value of a member typed `ty` (read as `v`) into
/// its presence-dispatched union's branch, or `None` when it holds no such union at the top
/// or in lists and maps at any depth (the caller follows aliases first; inside another union
/// it stays as msgspec decoded it).
pub(crate) fn dispatch_expr(
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

/// What the spelling of a named type depends on.
#[derive(Clone, Copy)]
pub(crate) struct Among<'a> {
    /// The presence-dispatched unions, spelled by their [`field_alias`].
    pub untyped: &'a HashSet<String>,
    /// The structs a tagged union tags, spelled by their [`tagged_alias`] outside that
    /// union so their tag stays required.
    pub tagged: &'a HashSet<String>,
}

/// The name a member or alias refers to a tagged struct by outside its union: the struct to a
/// type checker, at run time a union with a branch no value matches, so msgspec requires the
/// tag, which it does not for a tagged struct on its own.
pub(crate) fn tagged_alias(name: &str) -> String {
    format!("_{name}Tagged")
}

/// A type as a Python annotation; `names` maps contract type names to Python names, and
/// `among` says how presence-dispatched unions and tagged structs are spelled.
pub(crate) fn py_type_with(t: &TypeRef, names: &HashMap<String, String>, among: Among) -> String {
    match t {
        TypeRef::Named { name } => {
            let py = names
                .get(name)
                .cloned()
                .unwrap_or_else(|| py_ident(name, RESERVED_TYPES));
            if among.untyped.contains(name) {
                field_alias(&py)
            } else if among.tagged.contains(name) {
                tagged_alias(&py)
            } else {
                py
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
            format!("list[{}]", py_type_with(items, names, among))
        }
        TypeRef::Map { values } => format!("dict[str, {}]", py_type_with(values, names, among)),
        TypeRef::Literal { value } => match value {
            Value::String(_) => format!("Literal[{}]", py_literal(value)),
            Value::Number(n) if n.is_i64() => format!("Literal[{}]", py_literal(value)),
            Value::Null => "None".into(),
            Value::Bool(_) => "bool".into(),
            _ => "Any".into(),
        },
        TypeRef::Nullable { inner } => {
            format!("Union[{}, None]", py_type_with(inner, names, among))
        }
    }
}

/// A type as a Python annotation, without renaming.
pub fn py_type(t: &TypeRef) -> String {
    let none = HashSet::new();
    let among = Among {
        untyped: &none,
        tagged: &none,
    };
    py_type_with(t, &HashMap::new(), among)
}

handlebars_helper!(py_type_helper: |v: Json| {
    TypeRef::deserialize(v).map(|t| py_type(&t)).unwrap_or_else(|_| "Any".into())
});
handlebars_helper!(py_literal_helper: |v: Json| py_literal(v));
handlebars_helper!(py_doc_helper: |v: Json| py_doc(v.as_str().unwrap_or_default()));
// Templates written before the view became `target` call `py_module this`.
handlebars_helper!(py_module_helper: |ctx: Json| ctx.get("target").cloned().unwrap_or(Value::Null));

pub(crate) fn format_float(f: f64) -> String {
    let s = format!("{f:?}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

/// Enum member names (`UPPER_SNAKE`) from Pascal identifiers, unique and not keywords.
pub(crate) fn member_names<'a>(idents: impl Iterator<Item = &'a str>) -> Vec<String> {
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
    use serde_json::json;

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
