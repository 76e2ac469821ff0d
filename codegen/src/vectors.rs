//! `contractgen vectors`: the test vectors every language's SDK must agree on.
//!
//! Valid vectors are the contract's examples, each with the type of its whole
//! message and of its payload. Invalid vectors are derived from them by one
//! targeted mutation each, labelled with the rejection it must cause (see
//! `docs/vectors.md`). Machine vectors say what each typed state machine does
//! with each of its events and trigger messages ([`machines`]). Everything is
//! derived from the contract, so a contract edit changes the vectors with it.
//! Rule vectors ([`rules`]) say what request ids and keyed rate limits admit.

mod machines;
mod rules;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::config::GeneratedFile;
use crate::ir::Ir;
use crate::types::{TypeDef, TypeModel, TypeRef};
use contract::model::{Binding, Part};

/// The labels of invalid vectors.
pub const LABELS: &[&str] = &[
    "parse",
    "missing-field",
    "wrong-type",
    "unknown-field",
    "bad-literal",
    "bad-enum",
    "out-of-range",
];

fn part_name(p: Part) -> &'static str {
    match p {
        Part::Call => "call",
        Part::Result => "result",
        Part::Error => "error",
    }
}

/// Valid vectors of one contract.
pub fn valid(ir: &Ir) -> Vec<Value> {
    let mut out = Vec::new();
    for m in &ir.methods {
        let ch = ir.channels.iter().find(|c| c.key == m.channel);
        let binding = ir
            .contract
            .channels
            .get(&m.channel)
            .and_then(|c| c.binding.clone());
        for (i, ex) in ir.contract.methods[m.wire.as_str()]
            .examples
            .iter()
            .enumerate()
        {
            let (payload, payload_type) = match (&binding, ex.part) {
                (Some(Binding::Jsonrpc { .. }), Part::Call) => {
                    (ex.message.get("params").cloned(), m.params.clone())
                }
                (Some(Binding::Jsonrpc { .. }), Part::Result) => {
                    (ex.message.get("result").cloned(), m.result.clone())
                }
                (Some(Binding::Envelope { payload, .. }), Part::Call) => {
                    (ex.message.pointer(payload).cloned(), m.params.clone())
                }
                (Some(Binding::Envelope { payload, .. }), Part::Result) => {
                    (ex.message.pointer(payload).cloned(), m.result.clone())
                }
                (Some(Binding::Tagged { .. }), Part::Call) => {
                    (Some(ex.message.clone()), m.params.clone())
                }
                _ => (None, None),
            };
            let (payload, payload_type) = match (payload, payload_type) {
                (Some(p), Some(t)) => (p, Value::String(t)),
                _ => (Value::Null, Value::Null),
            };
            out.push(json!({
                "id": format!("{}/{}/{i}", m.wire, part_name(ex.part)),
                "method": m.wire,
                "part": part_name(ex.part),
                "from": ex.from,
                "channel": m.channel,
                "messageType": ch.and_then(|c| c.message.clone()),
                "message": ex.message,
                "payloadType": payload_type,
                "payload": payload,
            }));
        }
    }
    out.extend(type_examples(ir));
    out
}

/// Valid vectors from the JSON Schema `examples` of each named type (a plain schema's
/// definitions carry them; so may a contract's `$defs`): the payload alone, no message.
/// JSON Schema does not require `examples` to validate, and published schemas hold some
/// that do not: only those the type's own schema accepts are vectors.
fn type_examples(ir: &Ir) -> Vec<Value> {
    let mut out = Vec::new();
    for (name, schema) in &ir.schemas {
        let Some(examples) = schema.get("examples").and_then(Value::as_array) else {
            continue;
        };
        let Some(at) = ir.origins.get(name) else {
            continue;
        };
        let rooted = contract::check::rooted(&ir.contract, &json!({ "$ref": format!("#{at}") }));
        let Ok(validator) = jsonschema::draft202012::new(&rooted) else {
            continue;
        };
        for (i, ex) in examples.iter().enumerate() {
            if !validator.is_valid(ex) {
                continue;
            }
            out.push(json!({
                "id": format!("{name}/example/{i}"),
                "method": null,
                "part": null,
                "from": null,
                "channel": null,
                "messageType": null,
                "message": null,
                "payloadType": name,
                "payload": ex,
            }));
        }
    }
    out
}

fn struct_of<'a>(model: &'a TypeModel, name: &str) -> Option<(&'a [crate::types::Field], bool)> {
    match model.get(name)? {
        TypeDef::Struct { fields, closed, .. } => Some((fields, *closed)),
        TypeDef::Alias {
            target: TypeRef::Named { name },
            ..
        } => struct_of(model, name),
        _ => None,
    }
}

fn is_string_enum(model: &TypeModel, t: &TypeRef) -> bool {
    match t {
        TypeRef::Named { name } => match model.get(name) {
            Some(TypeDef::StringEnum { .. }) => true,
            Some(TypeDef::Alias { target, .. }) => is_string_enum(model, target),
            _ => false,
        },
        _ => false,
    }
}

/// The JSON kind a TypeRef resolves to, for `wrong-type` mutations.
fn scalar_kind(model: &TypeModel, t: &TypeRef) -> Option<&'static str> {
    match t {
        TypeRef::String => Some("string"),
        TypeRef::Integer { .. } | TypeRef::Number => Some("number"),
        TypeRef::Boolean => Some("boolean"),
        TypeRef::Array { .. } => Some("array"),
        TypeRef::Named { name } => match model.get(name)? {
            TypeDef::Struct { .. } => Some("object"),
            TypeDef::StringEnum { .. } => Some("string"),
            TypeDef::Alias { target, .. } => scalar_kind(model, target),
            TypeDef::Union { .. } => None,
        },
        _ => None,
    }
}

fn int_bounds(model: &TypeModel, t: &TypeRef) -> Option<(Option<i64>, Option<i64>)> {
    match t {
        TypeRef::Integer { min, max } if min.is_some() || max.is_some() => Some((*min, *max)),
        TypeRef::Named { name } => match model.get(name)? {
            TypeDef::Alias { target, .. } => int_bounds(model, target),
            _ => None,
        },
        _ => None,
    }
}

/// Collects invalid vectors, one per (type, label, field).
struct Sink<'a> {
    origins: &'a indexmap::IndexMap<String, String>,
    out: Vec<Value>,
    seen: BTreeSet<(String, &'static str, String)>,
}

impl Sink<'_> {
    fn add(&mut self, ty: &str, label: &'static str, field: &str, text: String) {
        if self.seen.insert((ty.to_string(), label, field.to_string())) {
            self.out.push(json!({
                "id": format!("{ty}/{label}/{}", if field.is_empty() { "-" } else { field }),
                "type": ty,
                "schema": self.origins.get(ty),
                "text": text,
                "error": label,
            }));
        }
    }

    fn add_payload(
        &mut self,
        ty: &str,
        label: &'static str,
        field: &str,
        p: serde_json::Map<String, Value>,
    ) {
        self.add(
            ty,
            label,
            field,
            serde_json::to_string(&Value::Object(p)).unwrap_or_default(),
        );
    }
}

/// Invalid vectors of one contract, derived from its valid ones.
pub fn invalid(ir: &Ir, valid: &[Value]) -> Vec<Value> {
    let model = TypeModel::build(&ir.schemas);
    let mut sink = Sink {
        origins: &ir.origins,
        out: Vec::new(),
        seen: BTreeSet::new(),
    };
    for v in valid {
        if let Some(mt) = v["messageType"].as_str() {
            let text = serde_json::to_string(&v["message"]).unwrap_or_default();
            let cut = text.len() / 2;
            let cut = (0..=cut)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            sink.add(mt, "parse", "", text[..cut].to_string());
            if v["message"].get("jsonrpc").is_some() {
                let mut m = v["message"].clone();
                m["jsonrpc"] = json!("1.0");
                let field = format!("jsonrpc:{}", v["part"].as_str().unwrap_or(""));
                sink.add(
                    mt,
                    "bad-literal",
                    &field,
                    serde_json::to_string(&m).unwrap_or_default(),
                );
            }
        }
        let (Some(pt), Some(payload)) = (v["payloadType"].as_str(), v["payload"].as_object())
        else {
            continue;
        };
        let Some((fields, closed)) = struct_of(&model, pt) else {
            continue;
        };
        for f in fields {
            let present = payload.contains_key(&f.wire);
            if f.required && present {
                let mut p = payload.clone();
                p.remove(&f.wire);
                sink.add_payload(pt, "missing-field", &f.wire, p);
            }
            if !present {
                continue;
            }
            let mut with = |label: &'static str, value: Value| {
                let mut p = payload.clone();
                p.insert(f.wire.clone(), value);
                sink.add_payload(pt, label, &f.wire, p);
            };
            if let Some(kind) = scalar_kind(&model, &f.ty) {
                let wrong = match kind {
                    "string" => json!(12345),
                    "number" => json!("not a number"),
                    "boolean" => json!("yes"),
                    "array" => json!({"not": "an array"}),
                    _ => json!(7),
                };
                with("wrong-type", wrong);
            }
            if let TypeRef::Literal { value } = &f.ty {
                let other = match value {
                    Value::String(s) => json!(format!("{s}-not")),
                    Value::Number(n) => json!(n.as_i64().map(|i| i + 1).unwrap_or(-1)),
                    Value::Bool(b) => json!(!b),
                    _ => json!("other"),
                };
                with("bad-literal", other);
            }
            if is_string_enum(&model, &f.ty) {
                with("bad-enum", json!("__not_a_value__"));
            }
            if let Some((min, max)) = int_bounds(&model, &f.ty) {
                let bad = match (max, min) {
                    (Some(hi), _) if hi < i64::MAX => Some(hi + 1),
                    (_, Some(lo)) if lo > i64::MIN => Some(lo - 1),
                    _ => None,
                };
                if let Some(bad) = bad {
                    with("out-of-range", json!(bad));
                }
            }
        }
        if closed {
            let mut p = payload.clone();
            p.insert("__unknown__".into(), json!(1));
            sink.add_payload(pt, "unknown-field", "__unknown__", p);
        }
    }
    sink.out
}

/// The vector files for `irs`: `<module>/valid.json` and `<module>/invalid.json`.
pub fn generate(irs: &[Ir]) -> Vec<GeneratedFile> {
    let mut files = Vec::new();
    for ir in irs {
        let v = valid(ir);
        let inv = invalid(ir, &v);
        let pretty = |x: &Vec<Value>| {
            let mut s = serde_json::to_string_pretty(x).unwrap_or_default();
            s.push('\n');
            s
        };
        files.push(GeneratedFile {
            name: format!("{}/valid.json", ir.module),
            contents: pretty(&v),
        });
        files.push(GeneratedFile {
            name: format!("{}/invalid.json", ir.module),
            contents: pretty(&inv),
        });
        let mut m = serde_json::to_string_pretty(&machines::machines(ir)).unwrap_or_default();
        m.push('\n');
        files.push(GeneratedFile {
            name: format!("{}/machines.json", ir.module),
            contents: m,
        });
        let mut r = serde_json::to_string_pretty(&rules::rules(ir)).unwrap_or_default();
        r.push('\n');
        files.push(GeneratedFile {
            name: format!("{}/rules.json", ir.module),
            contents: r,
        });
    }
    files
}
