//! The Markdown docs target: one page per contract, rendered from
//! `codegen/templates/docs/`. The helpers here spell types, byte diagrams and
//! Mermaid state diagrams; the templates lay out the page.

use handlebars::{Handlebars, handlebars_helper};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::sdk::Template;
use crate::types::TypeRef;

/// The built-in docs templates.
pub const TEMPLATES: &[Template] = &[
    (
        "{{module}}.md.hbs",
        include_str!("../templates/docs/{{module}}.md.hbs"),
    ),
    (
        "README.md.hbs",
        include_str!("../templates/docs/README.md.hbs"),
    ),
];

/// A type as Markdown, linking named types to their section.
pub fn md_type(t: &TypeRef) -> String {
    match t {
        TypeRef::Named { name } => format!("[`{name}`](#type-{})", name.to_lowercase()),
        TypeRef::String => "string".into(),
        TypeRef::Integer { min, max } => match (min, max) {
            (None, None) => "integer".into(),
            (Some(a), None) => format!("integer ≥ {a}"),
            (None, Some(b)) => format!("integer ≤ {b}"),
            (Some(a), Some(b)) => format!("integer {a}…{b}"),
        },
        TypeRef::Number => "number".into(),
        TypeRef::Boolean => "boolean".into(),
        TypeRef::Null => "null".into(),
        TypeRef::Any => "any".into(),
        TypeRef::Array { items } => format!("array of {}", md_type(items)),
        TypeRef::Map { values } => format!("object of {}", md_type(values)),
        TypeRef::Literal { value } => format!("`{value}`"),
        TypeRef::Nullable { inner } => format!("{} or null", md_type(inner)),
    }
}

handlebars_helper!(md_type_helper: |v: Json| {
    TypeRef::deserialize(v).map(|t| md_type(&t)).unwrap_or_else(|_| "?".into())
});

// The byte layout of a framing, as a fenced diagram.
handlebars_helper!(byte_diagram: |framing: Json, cap: Json| {
    let cap_text = cap.get("bytes").and_then(Value::as_u64).map(|b| format!("≤ {b} bytes")).unwrap_or_else(|| "no cap".into());
    let cells: Vec<String> = match framing.get("kind").and_then(Value::as_str) {
        Some("length-prefixed") => vec![
            format!("length: {} bytes, {}-endian, unsigned", framing["lengthBytes"], framing["byteOrder"].as_str().unwrap_or("")),
            format!("payload: UTF-8 JSON, {cap_text}"),
        ],
        Some("binary") => {
            let mut v: Vec<String> = framing["header"].as_array().into_iter().flatten().map(|h| {
                format!("{}: {} bytes{}", h["name"].as_str().unwrap_or(""), h["bytes"], if h.get("counts").is_some() { format!(" (counts {})", h["counts"].as_str().unwrap_or("")) } else { String::new() })
            }).collect();
            v.push(format!("payload: bytes ({cap_text} after the length)"));
            v
        }
        Some("ndjson") => vec![format!("JSON line: {} {}", cap_text.replace("bytes", ""), framing["lineMeasure"].as_str().unwrap_or("")), "\\n".into()],
        Some("websocket-text") => vec![format!("one WebSocket text message = one JSON message, {cap_text}")],
        Some("header-delimited") => {
            let mut v = vec![format!("{}: <decimal body length>\\r\\n", framing["lengthHeader"].as_str().unwrap_or(""))];
            v.extend(framing["headers"].as_array().into_iter().flatten().map(|h| {
                format!("{}: {}\\r\\n ({})", h["name"].as_str().unwrap_or(""), h["values"][0].as_str().unwrap_or("…"), if h["required"] == true { "required" } else { "optional" })
            }));
            v.push("\\r\\n".into());
            v.push(format!("body: UTF-8 JSON, {cap_text}"));
            v
        }
        _ => vec!["?".into()],
    };
    let widths: Vec<usize> = cells.iter().map(|c| c.chars().count() + 2).collect();
    let border = format!("+{}+", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("+"));
    let middle = format!("|{}|", cells.iter().map(|c| format!(" {c} ")).collect::<Vec<_>>().join("|"));
    format!("```text\n{border}\n{middle}\n{border}\n```")
});

// A state machine as a Mermaid stateDiagram.
handlebars_helper!(mermaid: |m: Json| {
    let mut out = String::from("```mermaid\nstateDiagram-v2\n");
    let id = |s: &str| s.to_string();
    out.push_str(&format!("    [*] --> {}\n", id(m["initial"].as_str().unwrap_or(""))));
    for (i, t) in m["transitions"].as_array().into_iter().flatten().enumerate() {
        // Mermaid ends a label at a line break and reads `:` after the first as text.
        let label = m["triggers"][i].as_str().map(|l| format!(" : {}", l.replace(['\n', '"'], " "))).unwrap_or_default();
        out.push_str(&format!("    {} --> {}{label}\n", id(t[0].as_str().unwrap_or("")), id(t[1].as_str().unwrap_or(""))));
    }
    for t in m["terminal"].as_array().into_iter().flatten() {
        out.push_str(&format!("    {} --> [*]\n", id(t.as_str().unwrap_or(""))));
    }
    out.push_str("```");
    out
});

// Rows describing a named type: one per field for structs, one per branch for unions.
handlebars_helper!(type_rows: |types: Json, name: Json| {
    let name = name.as_str().unwrap_or("");
    let t = types.as_array().into_iter().flatten().find(|t| t["name"] == name);
    let rows: Vec<Value> = match t {
        None => vec![],
        Some(t) => match t["kind"].as_str() {
            Some("struct") => t["fields"].as_array().into_iter().flatten().map(|f| json!({
                "name": f["wire"], "type": TypeRef::deserialize(&f["ty"]).map(|x| md_type(&x)).unwrap_or_default(),
                "required": f["required"], "description": f["description"],
            })).collect(),
            Some("union") => t["variants"].as_array().into_iter().flatten().map(|v| json!({
                "name": v["tagValue"].as_str().map(|s| format!("{}={s}", t["tag"].as_str().unwrap_or(""))).unwrap_or_else(|| "one of".into()),
                "type": TypeRef::deserialize(&v["ty"]).map(|x| md_type(&x)).unwrap_or_default(),
                "required": true, "description": "",
            })).collect(),
            Some("stringEnum") => vec![json!({"name": "(value)", "type": t["values"].as_array().into_iter().flatten().map(|v| format!("`{}`", v[1].as_str().unwrap_or(""))).collect::<Vec<_>>().join(", "), "required": true, "description": t["description"]})],
            _ => vec![json!({"name": "(value)", "type": TypeRef::deserialize(&t["target"]).map(|x| md_type(&x)).unwrap_or_default(), "required": true, "description": t["description"]})],
        },
    };
    Value::Array(rows)
});

// Direction text: `shell → core`.
handlebars_helper!(arrow: |from: Json, parties: Json| {
    let from: Vec<String> = from.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect();
    let to: Vec<String> = parties.as_array().into_iter().flatten().filter_map(|p| p["name"].as_str().map(str::to_string)).filter(|p| !from.contains(p)).collect();
    format!("{} → {}", from.join(", "), if to.is_empty() { "any".into() } else { to.join(", ") })
});

/// Register the docs helpers.
pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("md_type", Box::new(md_type_helper));
    hb.register_helper("byte_diagram", Box::new(byte_diagram));
    hb.register_helper("mermaid", Box::new(mermaid));
    hb.register_helper("type_rows", Box::new(type_rows));
    hb.register_helper("arrow", Box::new(arrow));
}

/// An action as docs text: `close 4001`, `reply-error "protocol.frame_too_large"`.
fn action_text(a: &contract::model::Action) -> String {
    let kind = serde_json::to_value(a.action)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let text = match &a.code {
        Some(code) => format!("{kind} `{code}`"),
        None => kind,
    };
    match &a.reason {
        Some(r) => format!("{text} naming `{r}`"),
        None => text,
    }
}

fn triggers_text(ts: &[contract::model::Trigger]) -> String {
    ts.iter()
        .map(|t| format!("`{}`", crate::ir::trigger_label(t)))
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The limits an engine runs from their machine form, one row each for the docs page:
/// the clock (what starts, restarts and stops it), the messages it applies to, what it is
/// kept per, and the reaction (what is sent, what is done). Limits with prose only are
/// left out: the table above says all there is.
pub fn engine_limits(c: &contract::Contract) -> Vec<Value> {
    use contract::model::{LimitCounts, LimitKey};
    let dash = |s: String| if s.is_empty() { "—".to_string() } else { s };
    c.limits
        .iter()
        .filter_map(|(key, l)| {
            let mut clock = Vec::new();
            for k in &l.carried {
                clock.push(carrier_text(k));
            }
            if let Some(t) = &l.start {
                clock.push(format!(
                    "starts at {}",
                    triggers_text(std::slice::from_ref(t))
                ));
            }
            if !l.restart.is_empty() {
                clock.push(format!("starts afresh at {}", triggers_text(&l.restart)));
            }
            if !l.stop.is_empty() {
                clock.push(format!("stops at {}", triggers_text(&l.stop)));
            }
            let applies = l.applies.as_ref().map(|a| {
                let mut s = match a.methods.as_slice() {
                    [] => "any message".to_string(),
                    m => m
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                if let Some(ch) = &a.channel {
                    s.push_str(&format!(" on `{ch}`"));
                }
                if let Some(p) = &a.from {
                    s.push_str(&format!(" from {p}"));
                }
                s
            });
            let per = match (&l.key, l.counts) {
                (Some(LimitKey::Pointer { pointer }), _) => format!("the value at `{pointer}`"),
                (Some(LimitKey::Connection), _) => "connection".into(),
                (Some(LimitKey::Party), _) => "sending party".into(),
                (Some(LimitKey::Global), _) => "one for all".into(),
                (None, Some(LimitCounts::OpenConnections)) => {
                    "counts open connections per listener".into()
                }
                (None, Some(LimitCounts::PendingRequests)) => {
                    "counts requests awaiting an answer, per sender and connection".into()
                }
                (None, None) => match &l.duplicates {
                    Some(d) => duplicates_text(d),
                    None => String::new(),
                },
            };
            let mut reaction = Vec::new();
            if let Some(m) = &l.sends {
                reaction.push(format!("sends `{m}`"));
            }
            if let Some(a) = &l.action {
                reaction.push(action_text(a));
            }
            if let Some(caps) = l.caps {
                let caps = serde_json::to_value(caps).unwrap_or_default();
                reaction.push(format!("holds for {}", caps.as_str().unwrap_or("")));
            }
            let machine =
                !clock.is_empty() || applies.is_some() || !per.is_empty() || !reaction.is_empty();
            machine.then(|| {
                json!({
                    "key": key,
                    "clock": dash(clock.join("; ")),
                    "applies": dash(applies.unwrap_or_default()),
                    "per": dash(per),
                    "reaction": dash(reaction.join("; ")),
                })
            })
        })
        .collect()
}

/// Each party's request-id rules as one line of docs text, for the parties that have them.
pub fn id_rules(c: &contract::Contract) -> Vec<Value> {
    c.parties
        .iter()
        .filter_map(|(party, p)| {
            let r = p.ids.as_ref()?;
            let mut rules = Vec::new();
            if let Some(pre) = &r.prefix {
                rules.push(format!("strings starting `{pre}`, then the number"));
            }
            if let Some(n) = r.start {
                rules.push(format!("from {n}"));
            }
            for (on, what) in [
                (r.increasing, "increasing"),
                (r.gapless, "gapless"),
                (r.unique, "never reused in a session"),
            ] {
                if on {
                    rules.push(what.to_string());
                }
            }
            if let Some(l) = &r.max_pending {
                rules.push(format!("at most `{l}` awaiting an answer"));
            }
            let breach = r
                .action
                .as_ref()
                .map(|a| format!("{}: {}", action_text(a), a.description))
                .unwrap_or_else(|| "reported, not acted on".into());
            Some(json!({"party": party, "rules": rules.join(", "), "breach": breach}))
        })
        .collect()
}

/// Where the wire carries a limit's value for a connection.
fn carrier_text(k: &contract::model::LimitCarrier) -> String {
    let which = match k.kind {
        Some(kind) => format!("`{}` {}", k.method, kind.name()),
        None => format!("`{}`", k.method),
    };
    let lower = if k.lower_only {
        ", which may only lower it"
    } else {
        ""
    };
    format!("value set by {which} at `{}`{lower}", k.pointer)
}

/// A duplicate window's key: the values that make two messages the same, and the id under
/// which one sent again is no duplicate of itself.
fn duplicates_text(d: &contract::model::Duplicates) -> String {
    let same: Vec<String> = d.same.iter().map(|p| format!("`{p}`")).collect();
    let mut s = format!("a duplicate: the same values at {}", same.join(", "));
    if let Some(p) = &d.distinct {
        s.push_str(&format!(" under another `{p}`"));
    }
    s
}
