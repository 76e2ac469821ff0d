//! The contract's named types as C#: each type spelled, its members laid out as properties
//! with their checks, and each union's style and branch-picking code. Built once per
//! contract over the type model ([`crate::types`]), with every lookup by name.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::{cs_literal, cs_string};
use crate::ir::unique;
use crate::types::{Field, TypeDef, TypeRef, Variant};

/// The named types, by name, with the hierarchy unions each type derives from.
pub(super) struct CsTypes<'a> {
    all: &'a [TypeDef],
    by_name: HashMap<&'a str, &'a TypeDef>,
    /// child type → the hierarchy union it derives from.
    parents: HashMap<String, String>,
}

/// A struct member as a property.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CsField {
    track: bool,
    bit: String,
    keep_null: bool,
    given_bit: String,
    wire: String,
    wire_lit: String,
    prop: String,
    cs_type: String,
    required: bool,
    literal: Option<String>,
    /// The constructor's parameter for this member (empty for a literal, which is fixed).
    param: String,
    checks: String,
    null_check: bool,
    description: String,
}

/// Everything a template needs to lay out a union.
#[derive(Serialize)]
pub(super) struct CsUnion {
    style: &'static str,
    variants: Vec<CsVariant>,
    pick: String,
    /// (branch, the next branch of the same JSON kind to try when it refuses the value):
    /// MCP's `JSONRPCMessage` is a batch of requests or a batch of responses, both arrays.
    next: Vec<(usize, usize)>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsVariant {
    index: usize,
    ident: String,
    cs_type: String,
}

/// Required members and (member, literal JSON) pairs of an object type.
type ObjectSig = (Vec<String>, Vec<(String, String)>);

/// The non-null branch of a `X | null` union.
fn nullable_union(def: &TypeDef) -> Option<TypeRef> {
    let TypeDef::Union { variants, .. } = def else {
        return None;
    };
    match variants.as_slice() {
        [a, b] => match (&a.ty, &b.ty) {
            (TypeRef::Null, t) | (t, TypeRef::Null) => Some(t.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn named(t: &TypeRef) -> Option<&str> {
    match t {
        TypeRef::Named { name } => Some(name),
        _ => None,
    }
}

impl<'a> CsTypes<'a> {
    pub(super) fn new(all: &'a [TypeDef]) -> CsTypes<'a> {
        let mut t = CsTypes {
            all,
            by_name: all.iter().map(|t| (t.name(), t)).collect(),
            parents: HashMap::new(),
        };
        t.parents = t.find_parents();
        t
    }

    fn get(&self, name: &str) -> Option<&'a TypeDef> {
        self.by_name.get(name).copied()
    }

    /// Follow aliases (and nullable unions, as `Nullable`) to the type that is spelled.
    fn resolve(&self, ty: &TypeRef) -> TypeRef {
        let mut cur = ty.clone();
        for _ in 0..16 {
            let Some(def) = named(&cur).and_then(|n| self.get(n)) else {
                return cur;
            };
            match def {
                TypeDef::Alias { target, .. } => cur = target.clone(),
                TypeDef::Union { .. } => {
                    return match nullable_union(def) {
                        Some(inner) => TypeRef::Nullable {
                            inner: Box::new(self.resolve(&inner)),
                        },
                        None => cur,
                    };
                }
                _ => return cur,
            }
        }
        cur
    }

    fn is_enum(&self, name: &str) -> bool {
        matches!(self.get(name), Some(TypeDef::StringEnum { .. }))
    }

    /// Unions whose branches are all named object types (structs or such unions).
    fn object_union(&self, def: &TypeDef) -> bool {
        let TypeDef::Union {
            name: own,
            variants,
            ..
        } = def
        else {
            return false;
        };
        nullable_union(def).is_none()
            && !variants.is_empty()
            && variants
                .iter()
                .all(|v| match named(&v.ty).and_then(|n| self.get(n)) {
                    Some(TypeDef::Struct { .. }) => true,
                    Some(d @ TypeDef::Union { name, .. }) => self.object_union(d) && name != own,
                    _ => false,
                })
    }

    fn find_parents(&self) -> HashMap<String, String> {
        let mut out: HashMap<String, String> = HashMap::new();
        for def in self.all {
            if !self.object_union(def) {
                continue;
            }
            let TypeDef::Union { name, variants, .. } = def else {
                continue;
            };
            let children: Vec<String> = (variants.iter())
                .filter_map(|v| named(&v.ty).map(str::to_string))
                .collect();
            let mut distinct = children.clone();
            distinct.sort();
            distinct.dedup();
            if distinct.len() != children.len()
                || children.iter().any(|c| out.contains_key(c) || c == name)
                || out.get(name).is_some_and(|p| children.contains(p))
            {
                continue;
            }
            for c in children {
                out.insert(c, name.clone());
            }
        }
        out
    }

    pub(super) fn union_style(&self, def: &TypeDef) -> &'static str {
        if nullable_union(def).is_some() {
            return "nullable";
        }
        let TypeDef::Union { name, variants, .. } = def else {
            return "wrapper";
        };
        let is_hierarchy = variants
            .iter()
            .all(|v| named(&v.ty).is_some_and(|n| self.parents.get(n).is_some_and(|p| p == name)));
        if is_hierarchy && self.object_union(def) {
            "hierarchy"
        } else {
            "wrapper"
        }
    }

    /// The hierarchy union `name` derives from, if it is a branch of one.
    pub(super) fn base_of(&self, name: &str) -> Option<&str> {
        let parent = self.parents.get(name)?;
        let def = self.get(parent)?;
        (self.union_style(def) == "hierarchy").then_some(parent.as_str())
    }

    /// Whether the C# spelling of `ty` is a value type.
    fn is_value(&self, ty: &TypeRef) -> bool {
        match self.resolve(ty) {
            TypeRef::Integer { .. }
            | TypeRef::Number
            | TypeRef::Boolean
            | TypeRef::Any
            | TypeRef::Null => true,
            TypeRef::Literal { value } => !value.is_string(),
            TypeRef::Named { name } => self.is_enum(&name),
            TypeRef::Nullable { inner } => self.is_value(&inner),
            _ => false,
        }
    }

    /// Whether `ty` admits JSON null: `X | null`, null itself, any value, or a union one of
    /// whose branches is null (System.Text.Json reads a JSON null into such a union's
    /// reference as null, so the member holds null and writes it back).
    fn is_nullable(&self, ty: &TypeRef) -> bool {
        match self.resolve(ty) {
            TypeRef::Nullable { .. } | TypeRef::Null | TypeRef::Any => true,
            TypeRef::Named { name } => match self.get(&name) {
                Some(TypeDef::Union { variants, .. }) => {
                    variants.iter().any(|v| self.is_nullable(&v.ty))
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// A C# type for `ty`; value types get `?` when they may be null.
    pub(super) fn cs_type(&self, ty: &TypeRef) -> String {
        match self.resolve(ty) {
            TypeRef::Named { name } => name,
            TypeRef::String => "string".into(),
            TypeRef::Integer { .. } => "long".into(),
            TypeRef::Number => "double".into(),
            TypeRef::Boolean => "bool".into(),
            TypeRef::Null | TypeRef::Any => "JsonElement".into(),
            TypeRef::Array { items } => format!("List<{}>", self.cs_type(&items)),
            TypeRef::Map { values } => format!("Dictionary<string, {}>", self.cs_type(&values)),
            TypeRef::Literal { value } => match value {
                Value::String(_) => "string".into(),
                Value::Number(n) if n.is_i64() || n.is_u64() => "long".into(),
                Value::Number(_) => "double".into(),
                Value::Bool(_) => "bool".into(),
                _ => "JsonElement".into(),
            },
            TypeRef::Nullable { inner } => {
                let t = self.cs_type(&inner);
                if self.is_value(&inner) && !matches!(self.resolve(&inner), TypeRef::Any) {
                    format!("{t}?")
                } else {
                    t
                }
            }
        }
    }

    /// `typeof(X)` for the type a name spells (aliases resolve to what they spell).
    pub(super) fn type_of(&self, name: &str) -> String {
        let t = self.cs_type(&TypeRef::Named {
            name: name.to_string(),
        });
        format!("typeof({t})")
    }

    /// Validation statements for a value `expr` of type `ty` (bounds, literals, nested
    /// collections).
    fn checks(&self, ty: &TypeRef, expr: &str, wire: &str, depth: usize) -> String {
        let w = cs_string(wire);
        let each = |var: String, inner: String| match inner.is_empty() {
            true => String::new(),
            false => format!("if ({expr} != null) foreach (var {var} in {expr}) {{ {inner} }}"),
        };
        match self.resolve(ty) {
            TypeRef::Integer { min, max } if min.is_some() || max.is_some() => format!(
                "Check.Range({expr}, {}, {}, {w});",
                min.map_or("long.MinValue".into(), |m| format!("{m}L")),
                max.map_or("long.MaxValue".into(), |m| format!("{m}L"))
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
                let inner = self.checks(&items, &var, wire, depth + 1);
                each(var, inner)
            }
            TypeRef::Map { values } => {
                let var = format!("entry{depth}");
                let inner = self.checks(&values, &format!("{var}.Value"), wire, depth + 1);
                each(var, inner)
            }
            TypeRef::Nullable { inner } => {
                let value = self.is_value(&inner) && !matches!(self.resolve(&inner), TypeRef::Any);
                let inner_expr = match value {
                    true => format!("{expr}.Value"),
                    false => expr.to_string(),
                };
                let c = self.checks(&inner, &inner_expr, wire, depth);
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

    /// The members of struct `class`, ready to lay out as properties.
    pub(super) fn fields(&self, class: &str, fields: &[Field]) -> Vec<CsField> {
        let mut used: Vec<String> = vec![class.to_string(), "Extra".into()];
        // `extra` is the open struct's last parameter.
        let mut params: Vec<String> = vec!["extra".into()];
        let (mut bit, mut given) = (0u32, 0u32);
        let mut out = Vec::new();
        for f in fields {
            let prop = unique_prop(&f.pascal, &mut used);
            let value = self.is_value(&f.ty);
            let nullable = self.is_nullable(&f.ty);
            let spelled = self.cs_type(&f.ty);
            let mut cs = spelled.clone();
            if value && !f.required && !cs.ends_with('?') {
                cs.push('?');
            }
            let literal = match self.resolve(&f.ty) {
                TypeRef::Literal { value } if f.required => Some(cs_literal(&value)),
                _ => None,
            };
            let checks = self.member_checks(f, &prop, value, spelled.ends_with('?'));
            // Presence of required members is tracked so Validate() runs only on complete
            // objects: STJ 8 calls OnDeserialized before its own required-member check.
            let track = f.required && bit < 64;
            let mask = track.then(|| format!("0x{:X}UL", 1u64 << bit));
            bit += u32::from(track);
            // An optional member that may be null keeps a given null apart from an absent
            // member, so decode then encode writes back what it read (the runtime's KeepNull).
            let keep_null = !f.required && nullable && given < 64;
            let given_mask = keep_null.then(|| format!("0x{:X}UL", 1u64 << given));
            given += u32::from(keep_null);
            let param = match literal {
                Some(_) => String::new(),
                None => unique_param(&prop, &mut params),
            };
            out.push(CsField {
                track,
                bit: mask.unwrap_or_default(),
                keep_null,
                given_bit: given_mask.unwrap_or_default(),
                wire: f.wire.clone(),
                wire_lit: cs_string(&f.wire),
                prop,
                cs_type: cs,
                required: f.required,
                literal,
                param,
                checks,
                // STJ 8 lets `null` into a reference-typed property; a required non-nullable
                // one refuses it.
                null_check: f.required && !value && !nullable,
                description: f.description.clone(),
            });
        }
        out
    }

    /// A member's checks, guarded where an optional member may be absent.
    fn member_checks(&self, f: &Field, prop: &str, value: bool, spelled_nullable: bool) -> String {
        if value && !f.required && !spelled_nullable {
            // `long?` for an optional `long`: check through the nullable.
            let c = self.checks(&f.ty, &format!("{prop}.Value"), &f.wire, 0);
            match c.is_empty() {
                true => c,
                false => format!("if ({prop}.HasValue) {{ {c} }}"),
            }
        } else if !value && !f.required {
            let c = self.checks(&f.ty, prop, &f.wire, 0);
            match c.is_empty() || c.starts_with("if (") {
                true => c,
                false => format!("if ({prop} != null) {{ {c} }}"),
            }
        } else {
            self.checks(&f.ty, prop, &f.wire, 0)
        }
    }

    /// The mask of the tracked required members that hold a literal (set from the start).
    pub(super) fn literal_mask(&self, fields: &[Field]) -> String {
        let tracked = fields.iter().filter(|f| f.required).take(64);
        let mask = tracked
            .enumerate()
            .fold(0u64, |mask, (bit, f)| match self.resolve(&f.ty) {
                TypeRef::Literal { .. } => mask | (1u64 << bit),
                _ => mask,
            });
        format!("0x{mask:X}UL")
    }

    /// The [`ObjectSig`] of an object type, for picking untagged branches.
    fn object_sig(&self, ty: &TypeRef) -> Option<ObjectSig> {
        let def = named(&self.resolve(ty)).and_then(|n| self.get(n))?;
        match def {
            TypeDef::Struct { fields, .. } => {
                let req = (fields.iter())
                    .filter(|f| f.required)
                    .map(|f| f.wire.clone())
                    .collect();
                let lits = (fields.iter())
                    .filter_map(|f| match self.resolve(&f.ty) {
                        TypeRef::Literal { value } => Some((f.wire.clone(), value.to_string())),
                        _ => None,
                    })
                    .collect();
                Some((req, lits))
            }
            TypeDef::Union { variants, .. } if self.object_union(def) => {
                let sigs: Vec<ObjectSig> = (variants.iter())
                    .filter_map(|v| self.object_sig(&v.ty))
                    .collect();
                let (req, lits) = sigs.first()?.clone();
                let req = req
                    .into_iter()
                    .filter(|r| sigs.iter().all(|s| s.0.contains(r)));
                let lits = lits
                    .into_iter()
                    .filter(|l| sigs.iter().all(|s| s.1.contains(l)));
                Some((req.collect(), lits.collect()))
            }
            _ => None,
        }
    }

    /// A C# condition on `JsonElement e` that holds when `e` has the JSON kind of `ty`.
    fn kind_test(&self, ty: &TypeRef) -> Option<String> {
        Some(match self.resolve(ty) {
            TypeRef::String => "e.ValueKind == JsonValueKind.String".into(),
            TypeRef::Named { name } if self.is_enum(&name) => {
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
                let t = self.kind_test(&inner)?;
                format!("(e.ValueKind == JsonValueKind.Null || {t})")
            }
            // Objects: picked by members.
            _ => return None,
        })
    }

    /// Union `def`'s style, branches and the code that picks a branch.
    pub(super) fn union(&self, def: &TypeDef) -> Option<CsUnion> {
        let TypeDef::Union {
            name,
            tag,
            variants,
            ..
        } = def
        else {
            return None;
        };
        let pick = match tag {
            Some(tag) => tagged_pick(name, tag, variants),
            None => self.untagged_pick(name, variants),
        };
        let next = match tag {
            Some(_) => Vec::new(),
            None => self.same_kind_next(variants),
        };
        Some(CsUnion {
            next,
            style: self.union_style(def),
            variants: (variants.iter().enumerate())
                .map(|(index, v)| CsVariant {
                    index,
                    ident: v.ident.clone(),
                    cs_type: self.cs_type(&v.ty),
                })
                .collect(),
            pick,
        })
    }

    /// For each branch picked by its JSON kind alone, the next branch of the same kind.
    fn same_kind_next(&self, variants: &[Variant]) -> Vec<(usize, usize)> {
        let tests: Vec<Option<String>> = (variants.iter())
            .map(|v| match self.object_sig(&v.ty) {
                Some(_) => None,
                None => self.kind_test(&v.ty),
            })
            .collect();
        (tests.iter().enumerate())
            .filter_map(|(i, t)| {
                let t = t.as_ref()?;
                let j = (i + 1..tests.len()).find(|&j| tests[j].as_ref() == Some(t))?;
                Some((i, j))
            })
            .collect()
    }

    /// By JSON kind, then objects by which members are present and their literals.
    fn untagged_pick(&self, name: &str, variants: &[Variant]) -> String {
        let mut pick = String::new();
        let mut objects = Vec::new();
        let mut map_branch = None;
        for (i, v) in variants.iter().enumerate() {
            if let Some(sig) = self.object_sig(&v.ty) {
                objects.push((i, sig));
            } else if let Some(test) = self.kind_test(&v.ty) {
                pick.push_str(&format!("if ({test}) return {i};\n"));
            } else if map_branch.is_none() {
                map_branch = Some(i);
            }
        }
        if !objects.is_empty() {
            let strings = |items: Vec<String>| format!("new string[] {{ {} }}", items.join(", "));
            let idx: Vec<String> = objects.iter().map(|(i, _)| i.to_string()).collect();
            let reqs: Vec<String> = (objects.iter())
                .map(|(_, (r, _))| strings(r.iter().map(|s| cs_string(s)).collect()))
                .collect();
            let lits: Vec<String> = (objects.iter())
                .map(|(_, (_, l))| {
                    strings(
                        l.iter()
                            .flat_map(|(k, v)| [cs_string(k), cs_string(v)])
                            .collect(),
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
        pick
    }
}

/// By the tag property's literal.
fn tagged_pick(name: &str, tag: &str, variants: &[Variant]) -> String {
    let mut pick = format!(
        "if (e.ValueKind != JsonValueKind.Object) throw ContractException.WrongType({}, \"expected an object\");\n",
        cs_string(name)
    );
    pick.push_str(&format!(
        "JsonElement t;\nif (!e.TryGetProperty({}, out t)) throw ContractException.MissingField({});\n",
        cs_string(tag),
        cs_string(tag)
    ));
    for (i, v) in variants.iter().enumerate() {
        let value = v.tag_value.clone().unwrap_or(Value::Null);
        pick.push_str(&format!(
            "if (Json.LiteralEquals(t, {})) return {i};\n",
            cs_string(&value.to_string())
        ));
    }
    pick.push_str(&format!(
        "throw ContractException.BadLiteral({}, \"no branch of {name} has this value\");",
        cs_string(tag)
    ));
    pick
}

/// A property name not taken yet in its class (`Value`, then a number, appended).
fn unique_prop(pascal: &str, used: &mut Vec<String>) -> String {
    let base = match used.iter().any(|u| u == pascal) {
        true => format!("{pascal}Value"),
        false => pascal.to_string(),
    };
    let prop = unique(&base, |p| used.iter().any(|u| u == p));
    used.push(prop.clone());
    prop
}

/// C#'s reserved words, which a parameter name escapes with `@`.
const KEYWORDS: &[&str] = &[
    "abstract",
    "as",
    "base",
    "bool",
    "break",
    "byte",
    "case",
    "catch",
    "char",
    "checked",
    "class",
    "const",
    "continue",
    "decimal",
    "default",
    "delegate",
    "do",
    "double",
    "else",
    "enum",
    "event",
    "explicit",
    "extern",
    "false",
    "finally",
    "fixed",
    "float",
    "for",
    "foreach",
    "goto",
    "if",
    "implicit",
    "in",
    "int",
    "interface",
    "internal",
    "is",
    "lock",
    "long",
    "namespace",
    "new",
    "null",
    "object",
    "operator",
    "out",
    "override",
    "params",
    "private",
    "protected",
    "public",
    "readonly",
    "ref",
    "return",
    "sbyte",
    "sealed",
    "short",
    "sizeof",
    "stackalloc",
    "static",
    "string",
    "struct",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "uint",
    "ulong",
    "unchecked",
    "unsafe",
    "ushort",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
];

/// The constructor parameter for property `prop`: camel case, unique among the
/// parameters, a keyword escaped.
fn unique_param(prop: &str, used: &mut Vec<String>) -> String {
    let mut chars = prop.chars();
    let camel: String = match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => "value".into(),
    };
    let mut name = unique(&camel, |p| used.iter().any(|u| u == p));
    used.push(name.clone());
    if KEYWORDS.contains(&name.as_str()) {
        name.insert(0, '@');
    }
    name
}

impl CsField {
    /// An optional member that may be null, whose given null is written back.
    pub(super) fn keeps_null(&self) -> bool {
        self.keep_null
    }
}

/// The public constructor's parameter list: the required members, then the optional ones
/// (defaulting to absent), then `extra` for an open struct. Literals are fixed: no parameter.
pub(super) fn ctor_params(fields: &[CsField], open: bool) -> String {
    let decl = |f: &CsField| match f.required {
        true => format!("{} {}", f.cs_type, f.param),
        false => format!("{} {} = null", f.cs_type, f.param),
    };
    let takes = |required: bool| {
        let f = fields
            .iter()
            .filter(move |f| !f.param.is_empty() && f.required == required);
        f.map(decl)
    };
    let extra = open.then(|| "Dictionary<string, JsonElement> extra = null".to_string());
    (takes(true).chain(takes(false)).chain(extra))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The mask of the tracked required members of a struct.
pub(super) fn required_mask(fields: &[Field]) -> String {
    let n = fields.iter().filter(|f| f.required).count().min(64);
    let mask: u64 = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    format!("0x{mask:X}UL")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_union_resolves() {
        let named = |name: &str| TypeRef::Named { name: name.into() };
        let all = [
            TypeDef::Alias {
                name: "RequestId".into(),
                description: String::new(),
                target: TypeRef::String,
            },
            TypeDef::Union {
                name: "Id".into(),
                description: String::new(),
                tag: None,
                variants: vec![
                    Variant {
                        ident: "RequestId".into(),
                        ty: named("RequestId"),
                        tag_value: None,
                    },
                    Variant {
                        ident: "Variant1".into(),
                        ty: TypeRef::Null,
                        tag_value: None,
                    },
                ],
            },
        ];
        assert_eq!(CsTypes::new(&all).cs_type(&named("Id")), "string");
    }
}
