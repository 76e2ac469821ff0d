//! The Wireshark target: one Lua dissector per contract (Wireshark 4.x API),
//! rendered from `codegen/templates/wireshark/`.
//!
//! The template holds one generic dissector engine written in Lua; what it
//! knows of a protocol is the data [`view`] digests from the IR (framings,
//! caps in bytes, binding pointers, methods with their senders and `match`
//! literals, the error catalog), written into the file as Lua tables by the
//! `lua` helper. So a contract of one's own gets a dissector with no Rust or
//! Lua change, and the Lua stays the same for every contract.
//!
//! Decisions taken here:
//! - The protocol's filter name is the module name (`kernel.method`). Where
//!   Wireshark already has a protocol of that name (it has `mcp`), the
//!   dissector registers as `<name>_contract` instead; the name is chosen when
//!   Wireshark loads the file, since only Wireshark knows its own names.
//! - Literals a frame is compared with (error codes, `match` values) are kept as
//!   canonical JSON text, so a string `"1"` never equals a number `1`.
//! - A header field of a binary framing is a field of its own, named as the
//!   contract names it (`kernel.stream_id`); one that would take a name of the
//!   engine's (`kernel.method`) becomes `kernel.header.<name>`.

use handlebars::{Handlebars, handlebars_helper};
use serde::Serialize;
use serde_json::Value;

use crate::ir::{GenError, Ir};
use crate::sdk::Template;
use contract::model::{Binding, Framing};

/// The built-in Wireshark templates.
/// The wireshark target.
pub const TARGET: crate::sdk::Target = crate::sdk::Target {
    lang: "wireshark",
    templates: TEMPLATES,
    register,
    view,
};

pub const TEMPLATES: &[Template] = &[(
    "{{module}}.lua.hbs",
    include_str!("../templates/wireshark/{{module}}.lua.hbs"),
)];

/// Field names the engine itself registers (`<proto>.<name>`); a binary header field
/// with one of these names is moved under `header.`, except the length, which is one.
const ENGINE_FIELDS: &[&str] = &[
    "channel",
    "from",
    "to",
    "kind",
    "method",
    "id",
    "correlation",
    "trace_id",
    "version",
    "length",
    "payload",
    "error",
];

/// What the dissector knows of one contract.
#[derive(Debug, Serialize)]
struct Dissector {
    /// Filter name wanted (`kernel`).
    proto: String,
    /// The full protocol name shown in the tree.
    title: String,
    channels: Vec<ChannelView>,
    /// The error catalog.
    errors: Vec<ErrorView>,
}

/// One channel, as the dissector cuts and reads it.
#[derive(Debug, Serialize)]
struct ChannelView {
    key: String,
    /// The framing's `kind`.
    framing: &'static str,
    /// Length-prefixed: prefix width; binary: the length field's width.
    width: Option<u8>,
    /// `big` or `little`.
    order: Option<&'static str>,
    /// The frame cap in bytes (the payload; for binary frames, all after the length).
    cap: Option<u64>,
    /// The limit that sets the cap.
    cap_limit: Option<String>,
    /// Binary: the header fields after the length, in wire order.
    header: Vec<HeaderView>,
    /// Binary: whether the length counts the rest of the frame (else the payload).
    counts_rest: bool,
    /// Header-delimited: the header naming the body length, and every header it lists.
    length_header: Option<String>,
    header_names: Vec<String>,
    /// WebSocket subprotocols offered at the upgrade.
    subprotocols: Vec<String>,
    binding: Option<BindingView>,
    /// The party that connects, and the one that accepts, when the contract says.
    client: Option<String>,
    server: Option<String>,
    methods: Vec<MethodView>,
}

/// One binary header field.
#[derive(Debug, Serialize)]
struct HeaderView {
    /// The contract's name.
    name: String,
    /// The field's filter name after `<proto>.`.
    field: String,
    bytes: u8,
    signed: bool,
}

/// Where a message keeps its routing facts.
#[derive(Debug, Serialize)]
struct BindingView {
    model: &'static str,
    /// JSON-RPC: the required `jsonrpc` value.
    version: Option<String>,
    /// Envelope: pointer to the kind, and each wire value's kind.
    kind: Option<String>,
    kinds: Vec<(String, &'static str)>,
    method: Option<String>,
    id: Option<String>,
    correlation: Option<String>,
    trace: Option<String>,
    /// Pointer to an error's code.
    error_code: Option<String>,
}

/// One method of a channel.
#[derive(Debug, Serialize)]
struct MethodView {
    wire: String,
    kind: &'static str,
    from: Vec<String>,
    /// Tagged bindings: pointer and canonical JSON literal of each `match` entry.
    matches: Vec<(String, String)>,
}

/// One catalog entry.
#[derive(Debug, Serialize)]
struct ErrorView {
    /// The code as canonical JSON text.
    code: String,
    name: Option<String>,
    category: Option<String>,
}

/// The filter-name form of `s`: lowercase letters, digits and `_`.
fn filter_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The dissector's view of a contract, for the template's `target`.
pub fn view(cx: &crate::context::Context) -> Result<Value, GenError> {
    let ir = cx.ir;
    let c = &ir.contract;
    let errors = ir
        .errors
        .iter()
        .flat_map(|t| &t.values)
        .map(|e| ErrorView {
            code: e.value.to_string(),
            name: e.name.clone(),
            category: e.category.clone(),
        })
        .collect();
    let channels = ir
        .channels
        .iter()
        .map(|ch| channel(ir, &ch.key))
        .collect::<Result<_, _>>()?;
    let d = Dissector {
        proto: filter_name(&ir.module),
        title: format!("{} (contract {} {})", c.title, c.name, c.version),
        channels,
        errors,
    };
    crate::sdk::view_json("wireshark", d)
}

fn channel(ir: &Ir, key: &str) -> Result<ChannelView, GenError> {
    let c = &ir.contract;
    let model = &c.channels[key];
    // The IR evaluated the limits once; a cap is its base value, as every target reads it.
    let cap_of = |name: Option<&str>| -> Result<(Option<u64>, Option<String>), GenError> {
        let Some(n) = name else {
            return Ok((None, None));
        };
        let l = ir
            .limits
            .iter()
            .find(|l| l.key == n)
            .ok_or_else(|| GenError::Template {
                template: "wireshark".into(),
                reason: format!("channel {key}: no limit {n:?}"),
            })?;
        Ok((Some(l.base as u64), Some(n.to_string())))
    };
    let mut v = ChannelView {
        key: key.to_string(),
        framing: "",
        width: None,
        order: None,
        cap: None,
        cap_limit: None,
        header: Vec::new(),
        counts_rest: false,
        length_header: None,
        header_names: Vec::new(),
        subprotocols: Vec::new(),
        binding: model.binding.as_ref().map(|b| binding(c, key, b)),
        client: model.connects.clone(),
        server: model.connects.as_ref().and_then(|p| {
            let others: Vec<&String> = c.parties.keys().filter(|q| *q != p).collect();
            (others.len() == 1).then(|| others[0].clone())
        }),
        methods: methods(ir, key),
    };
    let order = |o: &contract::model::ByteOrder| match o {
        contract::model::ByteOrder::Big => "big",
        contract::model::ByteOrder::Little => "little",
    };
    (v.cap, v.cap_limit) = cap_of(model.framing.payload_cap().map(|(_, l)| l))?;
    match &model.framing {
        Framing::LengthPrefixed {
            length_bytes,
            byte_order,
            ..
        } => {
            v.framing = "length-prefixed";
            v.width = Some(*length_bytes);
            v.order = Some(order(byte_order));
        }
        Framing::Binary {
            byte_order,
            header,
            max_frame,
            ..
        } => {
            v.framing = "binary";
            v.order = Some(order(byte_order));
            (v.cap, v.cap_limit) = cap_of(max_frame.as_deref())?;
            if let Some((first, rest)) = header.split_first() {
                v.width = Some(first.bytes);
                v.counts_rest = matches!(
                    first.counts,
                    Some(contract::model::LengthCounts::RestOfFrame)
                );
                v.header = rest
                    .iter()
                    .map(|h| {
                        let name = filter_name(&h.name);
                        HeaderView {
                            name: h.name.clone(),
                            field: if ENGINE_FIELDS.contains(&name.as_str()) {
                                format!("header.{name}")
                            } else {
                                name
                            },
                            bytes: h.bytes,
                            signed: h.signed,
                        }
                    })
                    .collect();
            }
        }
        Framing::Ndjson { .. } => v.framing = "ndjson",
        Framing::HeaderDelimited {
            length_header,
            headers,
            ..
        } => {
            v.framing = "header-delimited";
            v.length_header = Some(length_header.clone());
            v.header_names = headers.iter().map(|h| h.name.clone()).collect();
        }
        Framing::WebsocketText { subprotocols, .. } => {
            v.framing = "websocket-text";
            v.subprotocols = subprotocols.clone();
        }
    }
    Ok(v)
}

fn binding(c: &contract::Contract, key: &str, b: &Binding) -> BindingView {
    let error_code = c.error_body_pointer(key).map(|p| format!("{p}/code"));
    match b {
        Binding::Jsonrpc { version, trace } => BindingView {
            model: "jsonrpc",
            version: Some(version.clone()),
            kind: None,
            kinds: Vec::new(),
            method: Some("/method".into()),
            id: Some("/id".into()),
            correlation: None,
            trace: trace.clone(),
            error_code,
        },
        Binding::Envelope {
            kind,
            kinds,
            method,
            id,
            correlation,
            trace,
            ..
        } => BindingView {
            model: "envelope",
            version: None,
            kind: Some(kind.clone()),
            kinds: kinds.iter().map(|(w, k)| (w.clone(), k.name())).collect(),
            method: Some(method.clone()),
            id: id.clone(),
            correlation: correlation.clone(),
            trace: trace.clone(),
            error_code,
        },
        Binding::Tagged {
            id,
            correlation,
            trace,
            ..
        } => BindingView {
            model: "tagged",
            version: None,
            kind: None,
            kinds: Vec::new(),
            method: None,
            id: id.clone(),
            correlation: correlation.clone(),
            trace: trace.clone(),
            error_code,
        },
    }
}

fn methods(ir: &Ir, key: &str) -> Vec<MethodView> {
    ir.methods
        .iter()
        .filter(|m| m.channel == key)
        .map(|m| MethodView {
            wire: m.wire.clone(),
            kind: m.kind.name(),
            from: m.from.clone(),
            matches: ir.contract.methods[m.wire.as_str()]
                .matches
                .iter()
                .map(|(p, v)| (p.clone(), v.to_string()))
                .collect(),
        })
        .collect()
}

/// A JSON value as a Lua table constructor: objects by `["key"] = value`, arrays
/// positional, pairs (two-element arrays of strings) positional too; `null` members
/// are left out, as Lua tables cannot hold nil.
pub fn lua(v: &Value, indent: usize) -> String {
    let pad = "  ".repeat(indent + 1);
    let close = "  ".repeat(indent);
    match v {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => lua_string(s),
        Value::Array(items) if items.is_empty() => "{}".into(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(|i| lua(i, indent + 1)).collect();
            if inner.iter().all(|s| !s.contains('\n')) && inner.join(", ").len() < 80 {
                return format!("{{ {} }}", inner.join(", "));
            }
            format!("{{\n{pad}{},\n{close}}}", inner.join(&format!(",\n{pad}")))
        }
        Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("[{}] = {}", lua_string(k), lua(v, indent + 1)))
                .collect();
            if inner.is_empty() {
                return "{}".into();
            }
            format!("{{\n{pad}{},\n{close}}}", inner.join(&format!(",\n{pad}")))
        }
    }
}

/// A Lua string literal: quotes, backslashes and control bytes escaped, the rest as is.
fn lua_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\{:03}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

handlebars_helper!(lua_helper: |v: Json| lua(v, 0));

/// Register the Wireshark helpers.
pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("lua", Box::new(lua_helper));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lua_literals_escape_what_lua_reads_specially() {
        assert_eq!(lua_string("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\001""#);
        assert_eq!(
            lua(&json!({"a": [1, "x"], "b": null}), 0),
            "{\n  [\"a\"] = { 1, \"x\" },\n}"
        );
    }

    #[test]
    fn filter_names_are_lowercase_identifiers() {
        assert_eq!(filter_name("Tool-Channel.v2"), "tool_channel_v2");
    }
}
