//! The docs view of one contract (the template's `target`): each channel's byte diagram,
//! each method's direction and its params' and result's rows, each machine's Mermaid
//! diagram and each type's rows, beside the context items they describe.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::md_type;
use crate::context::{ChannelView, Context};
use crate::ir::{GenError, MachineIr, MethodIr, wire_name};
use crate::types::TypeDef;
use contract::model::Framing;

#[derive(Serialize)]
struct DocsView<'a> {
    channels: Vec<DocChannel<'a>>,
    methods: Vec<DocMethod<'a>>,
    machines: Vec<DocMachine<'a>>,
    types: Vec<DocType<'a>>,
}

#[derive(Serialize)]
struct DocChannel<'a> {
    #[serde(flatten)]
    channel: &'a ChannelView<'a>,
    /// The framing's byte layout, as a fenced diagram.
    diagram: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DocMethod<'a> {
    #[serde(flatten)]
    method: &'a MethodIr,
    /// Direction text: `shell → core`.
    arrow: String,
    param_rows: Vec<Row>,
    result_rows: Vec<Row>,
}

#[derive(Serialize)]
struct DocMachine<'a> {
    #[serde(flatten)]
    machine: &'a MachineIr,
    /// A Mermaid stateDiagram.
    mermaid: String,
}

#[derive(Serialize)]
struct DocType<'a> {
    #[serde(flatten)]
    def: &'a TypeDef,
    rows: Vec<Row>,
}

/// One row of a type's table: a field of a struct, a branch of a union, or the value.
#[derive(Serialize, Clone)]
struct Row {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    required: bool,
    description: String,
}

/// The docs view of `cx`, for the template's `target`.
pub fn view(cx: &Context) -> Result<Value, GenError> {
    let by_name: HashMap<&str, &TypeDef> = cx.types.iter().map(|t| (t.name(), t)).collect();
    let rows_of = |name: Option<&String>| {
        name.and_then(|n| by_name.get(n.as_str()))
            .map_or_else(Vec::new, |t| rows(t))
    };
    let parties: Vec<&str> = cx.parties.iter().map(|p| p.name).collect();
    let view = DocsView {
        channels: (cx.channels.iter())
            .map(|channel| DocChannel {
                channel,
                diagram: diagram(channel),
            })
            .collect(),
        methods: (cx.ir.methods.iter())
            .map(|method| DocMethod {
                method,
                arrow: arrow(&method.from, &parties),
                param_rows: rows_of(method.params.as_ref()),
                result_rows: rows_of(method.result.as_ref()),
            })
            .collect(),
        machines: (cx.ir.machines.iter())
            .map(|machine| DocMachine {
                machine,
                mermaid: mermaid(machine),
            })
            .collect(),
        types: (cx.types.iter())
            .map(|def| DocType {
                def,
                rows: rows(def),
            })
            .collect(),
    };
    crate::sdk::view_json("docs", view)
}

fn arrow(from: &[String], parties: &[&str]) -> String {
    let to: Vec<&str> = (parties.iter().copied())
        .filter(|p| !from.iter().any(|f| f == p))
        .collect();
    let to = if to.is_empty() {
        "any".into()
    } else {
        to.join(", ")
    };
    format!("{} → {to}", from.join(", "))
}

/// The byte layout of a channel's framing, as a fenced diagram.
fn diagram(c: &ChannelView) -> String {
    let cap_text = (c.cap.as_ref().and_then(|l| l.bytes))
        .map_or_else(|| "no cap".into(), |b| format!("≤ {b} bytes"));
    let cells: Vec<String> = match c.framing {
        Framing::LengthPrefixed {
            length_bytes,
            byte_order,
            ..
        } => vec![
            format!(
                "length: {length_bytes} bytes, {}-endian, unsigned",
                wire_name(byte_order)
            ),
            format!("payload: UTF-8 JSON, {cap_text}"),
        ],
        Framing::Binary { header, .. } => {
            let mut v: Vec<String> = (header.iter())
                .map(|h| {
                    let counts = (h.counts.as_ref())
                        .map(|c| format!(" (counts {})", wire_name(c)))
                        .unwrap_or_default();
                    format!("{}: {} bytes{counts}", h.name, h.bytes)
                })
                .collect();
            v.push(format!("payload: bytes ({cap_text} after the length)"));
            v
        }
        Framing::Ndjson { line_measure, .. } => vec![
            format!(
                "JSON line: {} {}",
                cap_text.replace("bytes", ""),
                wire_name(line_measure)
            ),
            "\\n".into(),
        ],
        Framing::WebsocketText { .. } => vec![format!(
            "one WebSocket text message = one JSON message, {cap_text}"
        )],
        Framing::HeaderDelimited {
            length_header,
            headers,
            ..
        } => {
            let mut v = vec![format!("{length_header}: <decimal body length>\\r\\n")];
            v.extend(headers.iter().map(|h| {
                let value = h.values.first().map_or("…", String::as_str);
                let need = if h.required { "required" } else { "optional" };
                format!("{}: {value}\\r\\n ({need})", h.name)
            }));
            v.push("\\r\\n".into());
            v.push(format!("body: UTF-8 JSON, {cap_text}"));
            v
        }
    };
    let widths: Vec<usize> = cells.iter().map(|c| c.chars().count() + 2).collect();
    let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    let border = format!("+{}+", dashes.join("+"));
    let padded: Vec<String> = cells.iter().map(|c| format!(" {c} ")).collect();
    let middle = format!("|{}|", padded.join("|"));
    format!("```text\n{border}\n{middle}\n{border}\n```")
}

/// A state machine as a Mermaid stateDiagram.
fn mermaid(m: &MachineIr) -> String {
    let mut out = format!("```mermaid\nstateDiagram-v2\n    [*] --> {}\n", m.initial);
    for (i, (from, to)) in m.transitions.iter().enumerate() {
        // Mermaid ends a label at a line break and reads `:` after the first as text.
        let label = (m.triggers.get(i).and_then(Option::as_ref))
            .map(|l| format!(" : {}", l.replace(['\n', '"'], " ")))
            .unwrap_or_default();
        out.push_str(&format!("    {from} --> {to}{label}\n"));
    }
    for t in &m.terminal {
        out.push_str(&format!("    {t} --> [*]\n"));
    }
    out.push_str("```");
    out
}

/// Rows describing a named type: one per field for structs, one per branch for unions.
fn rows(t: &TypeDef) -> Vec<Row> {
    let row = |name: String, ty: String, required: bool, description: &str| Row {
        name,
        ty,
        required,
        description: description.to_string(),
    };
    match t {
        TypeDef::Struct { fields, .. } => (fields.iter())
            .map(|f| row(f.wire.clone(), md_type(&f.ty), f.required, &f.description))
            .collect(),
        TypeDef::Union { tag, variants, .. } => (variants.iter())
            .map(|v| {
                let name = match &v.tag_value {
                    Some(Value::String(s)) => format!("{}={s}", tag.as_deref().unwrap_or("")),
                    _ => "one of".into(),
                };
                row(name, md_type(&v.ty), true, "")
            })
            .collect(),
        TypeDef::StringEnum {
            description,
            values,
            ..
        } => {
            let values: Vec<String> = values.iter().map(|v| format!("`{}`", v.1)).collect();
            vec![row("(value)".into(), values.join(", "), true, description)]
        }
        TypeDef::Alias {
            description,
            target,
            ..
        } => vec![row("(value)".into(), md_type(target), true, description)],
    }
}
