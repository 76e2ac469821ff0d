//! The C# target: a net8.0 class library using System.Text.Json, written in
//! C# 7.3 syntax (no records, no nullable annotations) so any compiler from Mono
//! `mcs` to current Roslyn builds it. Object types are immutable: sealed classes
//! with get-only properties, built by a public constructor or by the decoder through
//! private setters (the template README says why this shape).
//!
//! The templates in `codegen/templates/csharp/` lay out the files. The view (`view`,
//! the template's `target`) spells C# types, members, validation statements, the
//! branch-picking code of unions and the rules of each channel, all from the typed
//! context and the language-neutral type model (`crate::types`); the helpers here only
//! spell literals, strings and doc comments.
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
//! JSON kind and, for objects, by which members are present (JSON-RPC). Where several
//! branches share a JSON kind (two arrays: a batch of requests or of responses), a wrapper
//! tries them in order and reports the first one's refusal.

use handlebars::{Handlebars, handlebars_helper};
use serde_json::Value;

use crate::sdk::Template;

mod types;
mod view;
pub use view::view;

/// The built-in C# templates.
/// The csharp target.
pub const TARGET: crate::sdk::Target = crate::sdk::Target {
    lang: "csharp",
    templates: TEMPLATES,
    register,
    view,
};

pub const TEMPLATES: &[Template] = &[
    (
        "{{assembly}}.csproj.hbs",
        include_str!("../templates/csharp/{{assembly}}.csproj.hbs"),
    ),
    (
        "{{module}}.cs.hbs",
        include_str!("../templates/csharp/{{module}}.cs.hbs"),
    ),
    (
        "partials/channels.hbs",
        include_str!("../templates/csharp/partials/channels.hbs"),
    ),
    (
        "partials/codes.hbs",
        include_str!("../templates/csharp/partials/codes.hbs"),
    ),
    (
        "partials/machines.hbs",
        include_str!("../templates/csharp/partials/machines.hbs"),
    ),
    (
        "partials/string-enum.hbs",
        include_str!("../templates/csharp/partials/string-enum.hbs"),
    ),
    (
        "partials/struct.hbs",
        include_str!("../templates/csharp/partials/struct.hbs"),
    ),
    (
        "partials/union.hbs",
        include_str!("../templates/csharp/partials/union.hbs"),
    ),
    (
        "partials/wire-names.hbs",
        include_str!("../templates/csharp/partials/wire-names.hbs"),
    ),
];

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

handlebars_helper!(cs_literal_helper: |v: Json| cs_literal(v));
handlebars_helper!(cs_string_helper: |v: Json| match v {
    Value::String(s) => cs_string(s),
    other => cs_string(&other.to_string()),
});
handlebars_helper!(cs_doc_helper: |text: Json, indent: str| doc(text.as_str().unwrap_or(""), indent));
handlebars_helper!(cs_enum_member_helper: |ident: str, enum_name: str| if ident == enum_name { format!("{ident}Value") } else { ident.to_string() });

/// Register the C# spelling helpers (the types, members, unions and rules the templates lay
/// out come with the view, as `target`).
pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("cs_literal", Box::new(cs_literal_helper));
    hb.register_helper("cs_string", Box::new(cs_string_helper));
    hb.register_helper("cs_doc", Box::new(cs_doc_helper));
    hb.register_helper("cs_enum_member", Box::new(cs_enum_member_helper));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn literals_and_strings() {
        assert_eq!(cs_string("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(cs_literal(&json!("2.0")), "\"2.0\"");
        assert_eq!(cs_literal(&json!(1)), "1L");
        assert_eq!(cs_literal(&json!(true)), "true");
    }
}
