//! The language-neutral type model for the non-Rust targets.
//!
//! typify's public read-only view (`TypeSpace`/`Type`/`TypeDetails`) was the
//! first choice, but it does not expose what another language needs: the JSON
//! wire name of a field (only typify's Rust name), how a union is tagged, or the
//! raw values of enum variants. So this walker reads the contract's schemas
//! once into [`TypeDef`]s; C#, Python and the docs all render from it, and the
//! names it chooses are the `$defs` keys, exactly as typify names the Rust types.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Value, json};

use crate::breaking::schema::type_of;
use crate::ir::{dedupe, lower_snake, pascal};

/// A reference to a type.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TypeRef {
    /// A named type from [`TypeModel::types`].
    Named {
        /// Its name.
        name: String,
    },
    /// A string.
    String,
    /// An integer (bounds, when the schema gives them).
    Integer {
        /// Inclusive minimum.
        min: Option<i64>,
        /// Inclusive maximum.
        max: Option<i64>,
    },
    /// A number.
    Number,
    /// A boolean.
    Boolean,
    /// JSON null.
    Null,
    /// Any JSON value.
    Any,
    /// An array.
    Array {
        /// Element type.
        items: Box<TypeRef>,
    },
    /// An object with arbitrary keys.
    Map {
        /// Value type.
        values: Box<TypeRef>,
    },
    /// Exactly one literal value (`const`, or a one-value `enum`).
    Literal {
        /// The value.
        value: Value,
    },
    /// The value may also be null.
    Nullable {
        /// The non-null type.
        inner: Box<TypeRef>,
    },
}

/// A field of a struct.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Field {
    /// Name on the wire.
    pub wire: String,
    /// `snake_case` identifier.
    pub snake: String,
    /// `PascalCase` identifier.
    pub pascal: String,
    /// Type.
    pub ty: TypeRef,
    /// Must be present.
    pub required: bool,
    /// Description.
    pub description: String,
}

/// One branch of a union.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Variant {
    /// Identifier.
    pub ident: String,
    /// Its type.
    pub ty: TypeRef,
    /// The value of the union's tag property in this branch, when tagged.
    pub tag_value: Option<Value>,
}

/// A named type.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TypeDef {
    /// An object with known fields.
    Struct {
        /// Name.
        name: String,
        /// Description.
        description: String,
        /// Fields in schema order.
        fields: Vec<Field>,
        /// Unknown members are rejected (`additionalProperties: false`).
        closed: bool,
    },
    /// A closed set of strings.
    StringEnum {
        /// Name.
        name: String,
        /// Description.
        description: String,
        /// (identifier, wire value) pairs.
        values: Vec<(String, String)>,
    },
    /// One of several shapes.
    Union {
        /// Name.
        name: String,
        /// Description.
        description: String,
        /// Property whose literal value tells the branches apart, if any.
        tag: Option<String>,
        /// Branches in schema order.
        variants: Vec<Variant>,
    },
    /// Another name for a type (with the schema's constraints left to validation).
    Alias {
        /// Name.
        name: String,
        /// Description.
        description: String,
        /// What it names.
        target: TypeRef,
    },
}

impl TypeDef {
    /// The type's name.
    pub fn name(&self) -> &str {
        match self {
            TypeDef::Struct { name, .. }
            | TypeDef::StringEnum { name, .. }
            | TypeDef::Union { name, .. }
            | TypeDef::Alias { name, .. } => name,
        }
    }
}

/// Every named type of a contract, in a stable order (dependencies need not come first).
/// How deep `allOf` parts that are themselves `allOf`s are merged.
const MERGE_DEPTH: usize = 8;

#[derive(Debug, Clone, Default, Serialize)]
pub struct TypeModel {
    /// The types.
    pub types: Vec<TypeDef>,
}

struct Walker<'a> {
    defs: &'a IndexMap<String, Value>,
    out: IndexMap<String, TypeDef>,
}

fn desc(s: &Value) -> String {
    s.get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn def_ref(s: &Value) -> Option<String> {
    s.get("$ref")
        .and_then(Value::as_str)
        .and_then(crate::names::def_key)
}

impl Walker<'_> {
    fn named(&mut self, name: &str, s: &Value) {
        if self.out.contains_key(name) {
            return;
        }
        let d = desc(s);
        // Reserve the name first so recursive schemas terminate.
        self.out.insert(
            name.to_string(),
            TypeDef::Alias {
                name: name.into(),
                description: d.clone(),
                target: TypeRef::Any,
            },
        );
        let def = self.define(name, s, d);
        self.out.insert(name.to_string(), def);
    }

    fn define(&mut self, name: &str, s: &Value, description: String) -> TypeDef {
        if s.get("allOf").is_some()
            && let Some(merged) = self.merge_all_of(s, 0)
        {
            return self.define(name, &merged, desc(&merged));
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let fields = props
                .iter()
                .map(|(wire, ps)| Field {
                    wire: wire.clone(),
                    snake: lower_snake(wire),
                    pascal: pascal(wire),
                    ty: self.reference(&format!("{name}{}", pascal(wire)), ps),
                    required: required.contains(&wire.as_str()),
                    description: desc(ps),
                })
                .collect();
            let closed = s.get("additionalProperties") == Some(&Value::Bool(false));
            return TypeDef::Struct {
                name: name.into(),
                description,
                fields,
                closed,
            };
        }
        if let Some(values) = s.get("enum").and_then(Value::as_array)
            && values.len() > 1
            && values.iter().all(Value::is_string)
        {
            let wires: Vec<String> = values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            let idents = dedupe(wires.iter().map(|w| pascal(w)).collect());
            return TypeDef::StringEnum {
                name: name.into(),
                description,
                values: idents.into_iter().zip(wires).collect(),
            };
        }
        if let Some((branches, false)) = split_types(s)
            && branches.len() > 1
        {
            return self.define(name, &json!({ "oneOf": branches }), description);
        }
        if let Some(branches) = s
            .get("oneOf")
            .or_else(|| s.get("anyOf"))
            .and_then(Value::as_array)
        {
            let tag = self.common_tag(branches);
            let mut variants = Vec::new();
            let idents = dedupe(
                branches
                    .iter()
                    .enumerate()
                    .map(|(i, b)| def_ref(b).unwrap_or_else(|| format!("Variant{i}")))
                    .collect(),
            );
            for (i, (b, ident)) in branches.iter().zip(idents).enumerate() {
                let tag_value = tag.as_ref().and_then(|t| self.literal_of(b, t));
                variants.push(Variant {
                    ty: self.reference(
                        &format!(
                            "{name}{}",
                            if def_ref(b).is_some() {
                                ident.clone()
                            } else {
                                format!("Variant{i}")
                            }
                        ),
                        b,
                    ),
                    ident,
                    tag_value,
                });
            }
            return TypeDef::Union {
                name: name.into(),
                description,
                tag,
                variants,
            };
        }
        TypeDef::Alias {
            name: name.into(),
            description,
            target: self.reference(&format!("{name}Value"), &strip_meta(s)),
        }
    }

    /// An `allOf` of object schemas as one object: every part's members, a later part's
    /// schema for a member winning (DAP's `InitializeRequest` narrows `Request.command` to
    /// `"initialize"`), their required members together, closed where a part is. `None`
    /// where a part is a union or not an object: the type stays what it was.
    fn merge_all_of(&self, s: &Value, depth: usize) -> Option<Value> {
        let parts = s.get("allOf")?.as_array()?;
        if depth > MERGE_DEPTH {
            return None;
        }
        let mut own = s.as_object()?.clone();
        own.remove("allOf");
        let own = Value::Object(own);
        let mut props = serde_json::Map::new();
        let mut required: Vec<Value> = Vec::new();
        let mut closed = false;
        // Without a description of its own, a part written in place (not a reference) says
        // what this is (DAP's requests describe themselves in their second part).
        let mut description = desc(s);
        for part in parts.iter().chain(std::iter::once(&own)) {
            if desc(s).is_empty() && def_ref(part).is_none() && !desc(part).is_empty() {
                description = desc(part);
            }
            let resolved = self.resolve(part);
            let nested;
            let p = match resolved.get("allOf") {
                Some(_) => {
                    nested = self.merge_all_of(resolved, depth + 1)?;
                    &nested
                }
                None => resolved,
            };
            let union = p.get("oneOf").is_some() || p.get("anyOf").is_some();
            if union || p.get("type").is_some_and(|t| t != "object") {
                return None;
            }
            for (k, v) in p
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                props.insert(k.clone(), v.clone());
            }
            for r in p
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !required.contains(r) {
                    required.push(r.clone());
                }
            }
            closed |= p.get("additionalProperties") == Some(&Value::Bool(false));
        }
        let mut out = json!({
            "type": "object",
            "description": description,
            "properties": props,
            "required": required,
        });
        if closed {
            out["additionalProperties"] = Value::Bool(false);
        }
        Some(out)
    }

    /// The literal value `branch` requires at property `tag`.
    fn literal_of(&self, branch: &Value, tag: &str) -> Option<Value> {
        let b = self.resolve(branch);
        let p = b.get("properties")?.get(tag)?;
        let p = self.resolve(p);
        p.get("const").cloned().or_else(|| {
            p.get("enum")
                .and_then(Value::as_array)
                .filter(|a| a.len() == 1)
                .map(|a| a[0].clone())
        })
    }

    fn resolve<'v>(&'v self, s: &'v Value) -> &'v Value {
        let mut cur = s;
        for _ in 0..8 {
            match def_ref(cur).and_then(|n| self.defs.get(&n)) {
                Some(t) => cur = t,
                None => break,
            }
        }
        cur
    }

    /// A property every branch pins to a distinct literal, if there is one.
    fn common_tag(&self, branches: &[Value]) -> Option<String> {
        let first = self.resolve(branches.first()?);
        let props = first.get("properties")?.as_object()?;
        props
            .keys()
            .find(|k| {
                let vals: Vec<Option<Value>> =
                    branches.iter().map(|b| self.literal_of(b, k)).collect();
                vals.iter().all(Option::is_some) && {
                    let mut seen = Vec::new();
                    vals.into_iter().flatten().all(|v| {
                        let fresh = !seen.contains(&v);
                        seen.push(v);
                        fresh
                    })
                }
            })
            .cloned()
    }

    fn reference(&mut self, hint: &str, s: &Value) -> TypeRef {
        if let Some(name) = def_ref(s) {
            if let Some(target) = self.defs.get(&name) {
                let target = target.clone();
                self.named(&name, &target);
            }
            return TypeRef::Named { name };
        }
        // A pointer into a definition (`#/$defs/Foo/properties/x`): the schema it points at.
        if let Some((key, tail)) = s
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(crate::names::def_pointer)
            && let Some(target) = self.defs.get(&key).and_then(|d| d.pointer(tail))
        {
            let target = target.clone();
            return self.reference(hint, &target);
        }
        if let Some(c) = s.get("const") {
            return TypeRef::Literal { value: c.clone() };
        }
        if let Some(values) = s.get("enum").and_then(Value::as_array) {
            if values.len() == 1 {
                return TypeRef::Literal {
                    value: values[0].clone(),
                };
            }
            if values.iter().all(Value::is_string) {
                self.named(hint, s);
                return TypeRef::Named {
                    name: hint.to_string(),
                };
            }
            if values.iter().all(Value::is_boolean) {
                return TypeRef::Boolean;
            }
            // Values of several JSON types (`[true, false, "op"]`, `["http", null]`): one
            // branch per type, each keeping its own values (split_types).
            if s.get("type").is_none() {
                let mut types: Vec<&str> = Vec::new();
                for t in values.iter().map(type_of) {
                    if !types.contains(&t) {
                        types.push(t);
                    }
                }
                let mut typed = s.clone();
                if let Some(o) = typed.as_object_mut() {
                    o.insert("type".into(), Value::from(types));
                }
                return self.reference(hint, &typed);
            }
        }
        let split = split_types(s);
        // A nullable object (`"type": ["object", "null"]` with properties): the struct, nullable.
        if let Some((branches, true)) = &split
            && let [one] = branches.as_slice()
        {
            return TypeRef::Nullable {
                inner: Box::new(self.reference(hint, one)),
            };
        }
        if s.get("properties").is_some()
            || s.get("oneOf").is_some()
            || s.get("anyOf").is_some()
            || (s.get("allOf").is_some() && self.merge_all_of(s, 0).is_some())
        {
            self.named(hint, s);
            return TypeRef::Named {
                name: hint.to_string(),
            };
        }
        if let Some((branches, nullable)) = split {
            if branches.is_empty() {
                return if nullable {
                    TypeRef::Null
                } else {
                    TypeRef::Any
                };
            }
            let inner = match <[Value; 1]>::try_from(branches) {
                Ok([one]) => self.reference(hint, &one),
                Err(branches) => {
                    self.named(hint, &json!({ "oneOf": branches }));
                    TypeRef::Named {
                        name: hint.to_string(),
                    }
                }
            };
            return if nullable {
                TypeRef::Nullable {
                    inner: Box::new(inner),
                }
            } else {
                inner
            };
        }
        match s.get("type") {
            Some(Value::String(t)) => match t.as_str() {
                "string" => TypeRef::String,
                "integer" => TypeRef::Integer {
                    min: s.get("minimum").and_then(Value::as_i64),
                    max: s.get("maximum").and_then(Value::as_i64),
                },
                "number" => TypeRef::Number,
                "boolean" => TypeRef::Boolean,
                "null" => TypeRef::Null,
                "array" => TypeRef::Array {
                    items: Box::new(match s.get("items") {
                        Some(i) => self.reference(&format!("{hint}Item"), i),
                        None => TypeRef::Any,
                    }),
                },
                "object" => TypeRef::Map {
                    values: Box::new(match s.get("additionalProperties") {
                        Some(a @ Value::Object(_)) => self.reference(&format!("{hint}Value"), a),
                        _ => TypeRef::Any,
                    }),
                },
                _ => TypeRef::Any,
            },
            _ => TypeRef::Any,
        }
    }
}

/// A type array (`"type": ["string", "integer", "null"]`) as one schema per non-null type,
/// each keeping the other keywords (they only constrain values of their own type), and
/// whether null is allowed. `None` unless `type` is an array.
fn split_types(s: &Value) -> Option<(Vec<Value>, bool)> {
    let ts = s.get("type")?.as_array()?;
    let nullable = ts.iter().any(|t| t.as_str() == Some("null"));
    let branches = ts
        .iter()
        .filter(|t| t.as_str() != Some("null"))
        .map(|t| {
            let mut b = strip_meta(s);
            if let Some(o) = b.as_object_mut() {
                o.insert("type".into(), t.clone());
                if let Some(Value::Array(values)) = o.get_mut("enum") {
                    let t = t.as_str().unwrap_or_default();
                    values.retain(|v| {
                        let k = type_of(v);
                        k == t || (t == "number" && k == "integer")
                    });
                }
            }
            b
        })
        .collect();
    Some((branches, nullable))
}

fn strip_meta(s: &Value) -> Value {
    match s {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "description" && *k != "title")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

impl TypeModel {
    /// Walk every schema once.
    pub fn build(schemas: &IndexMap<String, Value>) -> TypeModel {
        let mut w = Walker {
            defs: schemas,
            out: IndexMap::new(),
        };
        for (name, s) in schemas {
            w.named(name, s);
        }
        TypeModel {
            types: w.out.into_values().collect(),
        }
    }

    /// A type by name.
    pub fn get(&self, name: &str) -> Option<&TypeDef> {
        self.types.iter().find(|t| t.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(defs: Value) -> TypeModel {
        let schemas: IndexMap<String, Value> = defs
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        TypeModel::build(&schemas)
    }

    fn fields(m: &TypeModel, name: &str) -> Vec<(String, TypeRef, bool)> {
        match m.get(name) {
            Some(TypeDef::Struct { fields, .. }) => (fields.iter())
                .map(|f| (f.wire.clone(), f.ty.clone(), f.required))
                .collect(),
            other => panic!("{name} is not a struct: {other:?}"),
        }
    }

    #[test]
    fn an_all_of_of_objects_is_one_struct_its_later_parts_narrowing() {
        // The shape of DAP's requests: a base message, a request on it, a request on that.
        let m = model(json!({
            "Message": {"type": "object", "properties": {
                "seq": {"type": "integer"}, "type": {"type": "string", "enum": ["request", "event"]}},
                "required": ["seq", "type"]},
            "Request": {"allOf": [{"$ref": "#/$defs/Message"}, {"type": "object",
                "properties": {"type": {"enum": ["request"]}, "command": {"type": "string"}},
                "required": ["command"]}]},
            "Launch": {"allOf": [{"$ref": "#/$defs/Request"}, {"type": "object",
                "description": "Starts the debuggee.",
                "properties": {"command": {"enum": ["launch"]}, "noDebug": {"type": "boolean"}},
                "required": ["command"], "additionalProperties": false}]}
        }));
        let launch = fields(&m, "Launch");
        let wires: Vec<&str> = launch.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(wires, ["seq", "type", "command", "noDebug"]);
        let literal = |v: &str| TypeRef::Literal { value: json!(v) };
        assert_eq!(launch[1].1, literal("request"));
        assert_eq!(launch[2].1, literal("launch"));
        assert_eq!(
            launch.iter().map(|f| f.2).collect::<Vec<_>>(),
            [true, true, true, false]
        );
        assert!(
            matches!(m.get("Launch"), Some(TypeDef::Struct { closed: true, description, .. }) if description == "Starts the debuggee.")
        );
    }

    #[test]
    fn an_all_of_with_a_union_part_stays_as_it_was() {
        let m = model(json!({
            "A": {"type": "object", "properties": {"a": {"type": "string"}}},
            "B": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "Both": {"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]}
        }));
        assert!(matches!(
            m.get("Both"),
            Some(TypeDef::Alias {
                target: TypeRef::Any,
                ..
            })
        ));
    }
}
