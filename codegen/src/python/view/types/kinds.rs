//! Unions msgspec cannot type as a `Union[...]`, told apart by the JSON kind of the value:
//! structs beside lists, scalars or unions decoded by presence (MCP 2025-03-26's
//! `JSONRPCMessage`: one message, or a batch of them). Such a union is decoded as a
//! presence-dispatched one is (`Any` to msgspec; the struct's `__post_init__` or
//! `decode_<name>` picks), through a `_rt.ByKind` that holds one converter per branch, the
//! structs among them picked together by which members are present.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{ALIAS_DEPTH, Types, UnionKind};
use crate::python::dispatch_expr;
use crate::types::{TypeDef, TypeRef, Variant};

/// How deep nested unions and aliases are followed.
const DEPTH: usize = 8;

/// A branch other than a struct: its JSON kind and its type.
#[derive(Clone, Debug)]
pub(super) struct KindBranch {
    pub(super) kind: &'static str,
    pub(super) ty: TypeRef,
}

/// A union split by the JSON kind of its branches (nested unions flattened).
#[derive(Clone, Debug, Default)]
pub(super) struct ByKind {
    /// The structs, picked by presence among themselves.
    pub(super) objects: Vec<String>,
    /// Every other branch, in schema order.
    pub(super) others: Vec<KindBranch>,
    /// A branch holds a union decoded by presence (itself, or in a list or map).
    untyped_inside: bool,
    /// Object-valued branches as msgspec counts them (a struct, a tagged union, a map).
    msgspec_objects: usize,
    arrays: usize,
}

impl ByKind {
    /// Whether msgspec cannot take the union as it stands.
    pub(super) fn needed(&self) -> bool {
        self.untyped_inside || self.msgspec_objects > 1 || self.arrays > 1
    }
}

/// The JSON kind of a literal.
fn literal_kind(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Types<'_> {
    /// `variants` split by JSON kind; `None` where a branch takes any value.
    pub(super) fn split_by_kind(
        &self,
        variants: &[Variant],
        kinds: &HashMap<String, UnionKind>,
        untyped: &HashSet<String>,
    ) -> Option<ByKind> {
        let mut out = ByKind::default();
        for v in variants {
            self.add_branch(&v.ty, (kinds, untyped), &mut out, 0)?;
        }
        let mut seen = HashSet::new();
        out.objects.retain(|o| seen.insert(o.clone()));
        Some(out)
    }

    fn add_branch(
        &self,
        t: &TypeRef,
        cx: (&HashMap<String, UnionKind>, &HashSet<String>),
        out: &mut ByKind,
        depth: usize,
    ) -> Option<()> {
        if depth > DEPTH {
            return None;
        }
        let kind = match t {
            TypeRef::Any => return None,
            TypeRef::String => "string",
            TypeRef::Integer { .. } => "integer",
            TypeRef::Number => "number",
            TypeRef::Boolean => "boolean",
            TypeRef::Null => "null",
            TypeRef::Literal { value } => literal_kind(value),
            TypeRef::Array { .. } => {
                out.arrays += 1;
                out.untyped_inside |= self.reaches(t, cx.1);
                "array"
            }
            TypeRef::Map { .. } => {
                out.msgspec_objects += 1;
                out.untyped_inside |= self.reaches(t, cx.1);
                "object"
            }
            TypeRef::Nullable { inner } => {
                self.add_branch(&TypeRef::Null, cx, out, depth + 1)?;
                return self.add_branch(inner, cx, out, depth + 1);
            }
            TypeRef::Named { name } => return self.add_named(t, name, cx, out, depth),
        };
        out.others.push(KindBranch {
            kind,
            ty: t.clone(),
        });
        Some(())
    }

    fn add_named(
        &self,
        t: &TypeRef,
        name: &str,
        cx: (&HashMap<String, UnionKind>, &HashSet<String>),
        out: &mut ByKind,
        depth: usize,
    ) -> Option<()> {
        let other = |out: &mut ByKind, kind| {
            out.others.push(KindBranch {
                kind,
                ty: t.clone(),
            })
        };
        match self.by_name.get(name)? {
            TypeDef::Struct { .. } => {
                out.objects.push(name.to_string());
                out.msgspec_objects += 1;
            }
            TypeDef::StringEnum { .. } => other(out, "string"),
            TypeDef::Alias { target, .. } => return self.add_branch(target, cx, out, depth + 1),
            TypeDef::Union { variants, .. } => match cx.0.get(name) {
                Some(UnionKind::Dispatch(leaves)) => {
                    out.objects.extend(leaves.iter().cloned());
                    out.untyped_inside = true;
                }
                Some(UnionKind::Alias(leaves)) => {
                    out.objects.extend(leaves.iter().cloned());
                    out.msgspec_objects += 1;
                }
                Some(UnionKind::Tagged(_)) => {
                    out.msgspec_objects += 1;
                    other(out, "object");
                }
                Some(UnionKind::Plain | UnionKind::Kinds(_)) | None => {
                    for v in variants {
                        self.add_branch(&v.ty, cx, out, depth + 1)?;
                    }
                }
            },
        }
        Some(())
    }

    /// Whether a value of `t` holds a union in `untyped` that the generated code must pick
    /// (through aliases, lists, maps and nulls), as a struct's `__post_init__` would.
    fn reaches(&self, t: &TypeRef, untyped: &HashSet<String>) -> bool {
        let ty = self.through_aliases(t, untyped, ALIAS_DEPTH);
        dispatch_expr(&ty, "v", untyped, &HashMap::new()).is_some()
    }
}
