//! Handlebars helpers every template target can use: JSON, naming and text shaping.

use handlebars::{Handlebars, handlebars_helper};
use serde_json::Value;

use crate::ir::{lower_snake, pascal, upper_snake};

handlebars_helper!(json: |v: Json| serde_json::to_string(v).unwrap_or_default());
handlebars_helper!(json_pretty: |v: Json| serde_json::to_string_pretty(v).unwrap_or_default());
handlebars_helper!(to_pascal: |s: str| pascal(s));
handlebars_helper!(to_snake: |s: str| lower_snake(s));
handlebars_helper!(to_upper_snake: |s: str| upper_snake(s));
// A table cell: pipes escaped, newlines folded, so Markdown tables stay intact.
handlebars_helper!(cell: |v: Json| {
    let s = match v { Value::String(s) => s.clone(), Value::Null => String::new(), other => other.to_string() };
    s.replace('|', "\\|").replace('\n', " ")
});
// Prefix every line of `text` with `prefix` (for doc comments).
handlebars_helper!(prefix_lines: |prefix: str, text: str| {
    text.lines().map(|l| format!("{prefix}{l}").trim_end().to_string()).collect::<Vec<_>>().join("\n")
});
handlebars_helper!(octal: |n: u64| format!("0o{n:o}"));
handlebars_helper!(lowercase: |s: str| s.to_lowercase());
handlebars_helper!(concat: |a: str, b: str| format!("{a}{b}"));

/// Register the shared helpers.
pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("json", Box::new(json));
    hb.register_helper("json_pretty", Box::new(json_pretty));
    hb.register_helper("pascal", Box::new(to_pascal));
    hb.register_helper("snake", Box::new(to_snake));
    hb.register_helper("upper_snake", Box::new(to_upper_snake));
    hb.register_helper("cell", Box::new(cell));
    hb.register_helper("prefix_lines", Box::new(prefix_lines));
    hb.register_helper("octal", Box::new(octal));
    hb.register_helper("concat", Box::new(concat));
    hb.register_helper("lowercase", Box::new(lowercase));
}
