//! The contract's named types as Python: enums, msgspec structs, aliases, and how each
//! union is decoded (tagged, one branch, by presence, or a plain `Union`).

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;

use super::{Names, py_str};
use crate::ir::lower_snake;
use crate::python::{
    Among, RESERVED_ATTRS, dispatch_expr, member_names, py_doc, py_ident, py_literal, py_type_with,
    tagged_alias,
};
use crate::types::{Field, TypeDef, TypeRef, Variant};

mod kinds;
use kinds::ByKind;

#[derive(Serialize)]
pub(super) struct PyEnum {
    name: String,
    doc: String,
    bases: &'static str,
    members: Vec<PyMember>,
}

#[derive(Serialize)]
struct PyMember {
    name: String,
    value: String,
    doc: &'static str,
}

#[derive(Serialize)]
pub(super) struct PyStruct {
    name: String,
    doc: String,
    options: String,
    fields: Vec<PyField>,
    /// The `__post_init__` lines that pick presence-dispatched branches.
    picks: Vec<String>,
    open: bool,
    tag: Option<PyTag>,
}

#[derive(Serialize)]
struct PyTag {
    field: String,
    value: String,
}

#[derive(Serialize)]
struct PyField {
    attr: String,
    wire: String,
    ann: String,
    default: String,
    doc: String,
    pick: Option<String>,
}

#[derive(Serialize)]
pub(super) struct PyAlias {
    name: String,
    doc: String,
    ann: String,
}

/// A presence-dispatched union's decoder.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PyDispatch {
    name: String,
    wire: String,
    #[serde(rename = "fn")]
    func: String,
    /// The structs, picked by presence (for a union picked by kind: its struct branches).
    branches: Vec<PyBranch>,
    /// Picked by the JSON kind of the value first (`_rt.ByKind`).
    by_kind: bool,
    /// The converter of each branch but the structs, for a union picked by kind.
    kinds: Vec<PyKind>,
}

/// One branch of a union picked by kind: `(kind, lambda v: expr)`.
#[derive(Serialize)]
struct PyKind {
    kind: String,
    expr: String,
}

#[derive(Serialize)]
struct PyBranch {
    cls: String,
    keys: String,
}

#[derive(Serialize)]
pub(super) struct TypeName {
    wire: String,
    py: String,
    dispatch: bool,
}

/// Every type rendered, and the unions decoded by presence (`Any` to msgspec).
pub(super) struct Model {
    pub(super) enums: Vec<PyEnum>,
    pub(super) structs: Vec<PyStruct>,
    pub(super) aliases: Vec<PyAlias>,
    pub(super) dispatch: Vec<PyDispatch>,
    pub(super) type_names: Vec<TypeName>,
    pub(super) untyped: HashSet<String>,
    /// The tagged structs named outside their union (Python names, sorted).
    pub(super) tagged: Vec<String>,
}

/// How one union is decoded.
#[derive(Clone)]
enum UnionKind {
    /// A `Union[...]` of its branches' annotations.
    Plain,
    /// One struct (after flattening): an alias of it.
    Alias(Vec<String>),
    /// Structs told apart by one literal field: a msgspec tagged union.
    Tagged(Vec<String>),
    /// Structs told apart by which members are present: `decode_<name>`.
    Dispatch(Vec<String>),
    /// Branches msgspec cannot hold in one `Union`, told apart by JSON kind: `decode_<name>`.
    Kinds(ByKind),
}

/// The unions msgspec gets as `Any`, picked by the generated code instead.
fn untyped_of(kinds: &HashMap<String, UnionKind>) -> HashSet<String> {
    (kinds.iter())
        .filter(|(_, k)| matches!(k, UnionKind::Dispatch(_) | UnionKind::Kinds(_)))
        .map(|(n, _)| n.clone())
        .collect()
}

/// The named types, by name.
pub(super) struct Types<'a> {
    all: &'a [TypeDef],
    by_name: HashMap<&'a str, &'a TypeDef>,
}

fn fields(t: &TypeDef) -> &[Field] {
    match t {
        TypeDef::Struct { fields, .. } => fields,
        _ => &[],
    }
}

fn has_null(variants: &[Variant]) -> bool {
    variants.iter().any(|v| v.ty == TypeRef::Null)
}

impl<'a> Types<'a> {
    pub(super) fn new(all: &'a [TypeDef]) -> Types<'a> {
        Types {
            all,
            by_name: all.iter().map(|t| (t.name(), t)).collect(),
        }
    }

    /// Follow aliases (`Alias` to a named type) to the underlying definition.
    fn resolve(&self, name: &str) -> Option<&'a TypeDef> {
        let mut cur = *self.by_name.get(name)?;
        for _ in 0..16 {
            match cur {
                TypeDef::Alias {
                    target: TypeRef::Named { name },
                    ..
                } => match self.by_name.get(name.as_str()) {
                    Some(n) => cur = n,
                    None => break,
                },
                _ => break,
            }
        }
        Some(cur)
    }

    /// The literal a type pins its value to, through aliases.
    fn literal(&self, t: &TypeRef) -> Option<Value> {
        match t {
            TypeRef::Literal { value } => Some(value.clone()),
            TypeRef::Named { name } => match self.resolve(name)? {
                TypeDef::Alias {
                    target: TypeRef::Literal { value },
                    ..
                } => Some(value.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The structs a union of structs picks from (nested unions flattened), its null branch
    /// aside; `None` when another branch is not a struct.
    fn leaves(&self, variants: &[Variant], depth: usize) -> Option<Vec<String>> {
        let mut out = Vec::new();
        for v in variants {
            if v.ty == TypeRef::Null && depth == 0 {
                continue;
            }
            let TypeRef::Named { name } = &v.ty else {
                return None;
            };
            if depth > 8 {
                return None;
            }
            match self.resolve(name)? {
                TypeDef::Struct { name, .. } => out.push(name.clone()),
                TypeDef::Union { variants, .. } => out.extend(self.leaves(variants, depth + 1)?),
                _ => return None,
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Each union's decoding, and the tag (field, literal) of each struct of a tagged one.
    fn unions(&self) -> (HashMap<String, UnionKind>, HashMap<String, (String, Value)>) {
        let mut tags: HashMap<String, (String, Value)> = HashMap::new();
        let mut kinds = HashMap::new();
        let mut unions: Vec<(&str, Option<&str>, &[Variant])> = (self.all.iter())
            .filter_map(|t| match t {
                TypeDef::Union {
                    name,
                    tag,
                    variants,
                    ..
                } => Some((name.as_str(), tag.as_deref(), variants.as_slice())),
                _ => None,
            })
            .collect();
        // Wider unions first: they constrain the tag choice most.
        unions.sort_by_key(|u| std::cmp::Reverse(self.leaves(u.2, 0).map_or(0, |l| l.len())));
        for (name, tag, variants) in &unions {
            let kind = self.union_kind(*tag, variants, &mut tags);
            kinds.insert(name.to_string(), kind);
        }
        // A plain union msgspec cannot hold is picked by kind; that makes it untyped, which
        // may do the same to a union holding it: until nothing changes.
        for _ in 0..unions.len() {
            let untyped = untyped_of(&kinds);
            let split: Vec<(String, ByKind)> = (unions.iter())
                .filter(|u| matches!(kinds.get(u.0), Some(UnionKind::Plain)))
                .filter_map(|u| Some((u.0.to_string(), self.split_by_kind(u.2, &kinds, &untyped)?)))
                .filter(|(_, k)| k.needed())
                .collect();
            if split.is_empty() {
                break;
            }
            kinds.extend(split.into_iter().map(|(n, k)| (n, UnionKind::Kinds(k))));
        }
        (kinds, tags)
    }

    fn union_kind(
        &self,
        tag: Option<&str>,
        variants: &[Variant],
        tags: &mut HashMap<String, (String, Value)>,
    ) -> UnionKind {
        let Some(leaves) = self.leaves(variants, 0) else {
            return UnionKind::Plain;
        };
        let uniq: Vec<String> = leaves.iter().fold(Vec::new(), |mut acc, l| {
            if !acc.contains(l) {
                acc.push(l.clone());
            }
            acc
        });
        if uniq.len() == 1 {
            return UnionKind::Alias(uniq);
        }
        // Candidate tag fields: the declared tag first, then every field of the first leaf.
        let first = self
            .by_name
            .get(uniq[0].as_str())
            .map_or(&[][..], |t| fields(t));
        let cands = tag
            .map(str::to_string)
            .into_iter()
            .chain(first.iter().map(|f| f.wire.clone()));
        let chosen = cands
            .into_iter()
            .find_map(|c| self.tag_values(&c, &uniq, tags).map(|v| (c, v)));
        match chosen {
            Some((field, vals)) => {
                for (l, v) in uniq.iter().zip(vals) {
                    tags.insert(l.clone(), (field.clone(), v));
                }
                UnionKind::Tagged(uniq)
            }
            // A presence-dispatched union has no null branch to pick: a plain Union then.
            None if has_null(variants) => UnionKind::Plain,
            None => UnionKind::Dispatch(uniq),
        }
    }

    /// The distinct literal each struct fixes field `c` to, all strings or all integers, when
    /// `c` tags them (and no struct is already tagged by another field).
    fn tag_values(
        &self,
        c: &str,
        uniq: &[String],
        tags: &HashMap<String, (String, Value)>,
    ) -> Option<Vec<Value>> {
        let mut vals = Vec::new();
        for l in uniq {
            let f = fields(self.by_name.get(l.as_str())?)
                .iter()
                .find(|f| f.wire == c)?;
            if !f.required {
                return None;
            }
            let v = self.literal(&f.ty)?;
            if !(v.is_string() || v.is_i64()) || vals.contains(&v) {
                return None;
            }
            if tags.get(l).is_some_and(|(tf, _)| tf != c) {
                return None;
            }
            vals.push(v);
        }
        let same_kind = vals.iter().all(Value::is_string) || vals.iter().all(Value::is_i64);
        same_kind.then_some(vals)
    }

    /// `t` with each named alias replaced by what it names (down to `depth`), so a member
    /// typed by an alias of a list of presence-dispatched unions is dispatched as the list.
    fn through_aliases(&self, t: &TypeRef, untyped: &HashSet<String>, depth: usize) -> TypeRef {
        let deeper = |inner: &TypeRef| {
            Box::new(self.through_aliases(inner, untyped, depth.saturating_sub(1)))
        };
        match t {
            TypeRef::Named { name } if depth > 0 && !untyped.contains(name) => {
                match self.by_name.get(name.as_str()) {
                    Some(TypeDef::Alias { target, .. }) => {
                        self.through_aliases(target, untyped, depth - 1)
                    }
                    _ => t.clone(),
                }
            }
            TypeRef::Array { items } => TypeRef::Array {
                items: deeper(items),
            },
            TypeRef::Map { values } => TypeRef::Map {
                values: deeper(values),
            },
            TypeRef::Nullable { inner } => TypeRef::Nullable {
                inner: deeper(inner),
            },
            _ => t.clone(),
        }
    }

    /// The required members' wire names of struct `l`.
    fn required(&self, l: &str) -> Vec<String> {
        self.by_name.get(l).map_or_else(Vec::new, |s| {
            (fields(s).iter())
                .filter(|f| f.required)
                .map(|f| f.wire.clone())
                .collect()
        })
    }

    /// Render every type with its Python names.
    pub(super) fn render(&self, names: &Names) -> Model {
        let (kinds, tags) = self.unions();
        let untyped = untyped_of(&kinds);
        let tagged: HashSet<String> = tags.keys().cloned().collect();
        let cx = Render {
            types: self,
            names,
            among: Among {
                untyped: &untyped,
                tagged: &tagged,
            },
            tags: &tags,
            kinds: &kinds,
        };
        let mut m = Model {
            enums: Vec::new(),
            structs: Vec::new(),
            aliases: Vec::new(),
            dispatch: Vec::new(),
            type_names: Vec::new(),
            untyped: HashSet::new(),
            tagged: Vec::new(),
        };
        let mut aliases: Vec<(String, PyAlias, Vec<String>)> = Vec::new();
        for t in self.all {
            match t {
                TypeDef::StringEnum {
                    name,
                    description,
                    values,
                } => m.enums.push(cx.string_enum(name, description, values)),
                TypeDef::Struct { .. } => m.structs.push(cx.structure(t)),
                TypeDef::Union { name, .. } => {
                    let kind = kinds.get(name).cloned().unwrap_or(UnionKind::Plain);
                    let (alias, deps, dispatch) = cx.union(t, kind);
                    aliases.push((names.py(name), alias, deps));
                    m.dispatch.extend(dispatch);
                }
                TypeDef::Alias {
                    name,
                    description,
                    target,
                } => {
                    let alias = PyAlias {
                        name: names.py(name),
                        doc: py_doc(description),
                        ann: cx.ann(target),
                    };
                    aliases.push((names.py(name), alias, refs(target)));
                }
            }
        }
        m.aliases = cx.ordered(aliases);
        // A union picked by kind names other unions' branches in its converters: after them.
        m.dispatch.sort_by_key(|d| d.by_kind);
        m.type_names = (self.all.iter())
            .map(|t| TypeName {
                wire: t.name().to_string(),
                py: names.py(t.name()),
                dispatch: untyped.contains(t.name()),
            })
            .collect();
        m.tagged = cx.tagged_outside();
        m.untyped = untyped;
        m
    }
}

/// How many aliases deep a member's type is followed for dispatch (aliases may name each
/// other, and a recursive one must not loop).
const ALIAS_DEPTH: usize = 8;

/// What rendering one type needs.
struct Render<'a> {
    types: &'a Types<'a>,
    names: &'a Names,
    among: Among<'a>,
    tags: &'a HashMap<String, (String, Value)>,
    kinds: &'a HashMap<String, UnionKind>,
}

impl Render<'_> {
    fn ann(&self, t: &TypeRef) -> String {
        py_type_with(t, &self.names.types, self.among)
    }

    /// The tagged structs an annotation names outside their union (members, aliases, plain
    /// unions, a one-struct union): each needs its [`tagged_alias`].
    fn tagged_outside(&self) -> Vec<String> {
        let mut named: Vec<String> = Vec::new();
        for t in self.types.all {
            match t {
                TypeDef::Struct { fields, .. } => {
                    named.extend(fields.iter().flat_map(|f| refs(&f.ty)))
                }
                TypeDef::Alias { target, .. } => named.extend(refs(target)),
                TypeDef::Union { name, variants, .. } => match self.kinds.get(name) {
                    Some(UnionKind::Plain | UnionKind::Kinds(_)) | None => {
                        named.extend(variants.iter().flat_map(|v| refs(&v.ty)))
                    }
                    Some(UnionKind::Alias(leaves)) => named.extend(leaves.iter().cloned()),
                    Some(UnionKind::Tagged(_) | UnionKind::Dispatch(_)) => {}
                },
                TypeDef::StringEnum { .. } => {}
            }
        }
        let mut out: Vec<String> = (named.iter())
            .filter(|n| self.tags.contains_key(n.as_str()))
            .map(|n| self.names.py(n))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn string_enum(&self, name: &str, description: &str, values: &[(String, String)]) -> PyEnum {
        let members = member_names(values.iter().map(|v| v.0.as_str()));
        PyEnum {
            name: self.names.py(name),
            doc: py_doc(description),
            bases: "str, enum.Enum",
            members: (values.iter().zip(members))
                .map(|(v, name)| PyMember {
                    name,
                    value: py_str(&v.1),
                    doc: "",
                })
                .collect(),
        }
    }

    fn structure(&self, t: &TypeDef) -> PyStruct {
        let TypeDef::Struct {
            name,
            description,
            fields,
            closed,
        } = t
        else {
            unreachable!("a struct")
        };
        let tag = self.tags.get(name);
        let mut opts = vec!["kw_only=True".to_string()];
        if let Some((f, v)) = tag {
            opts.push(format!("tag_field={}", py_str(f)));
            opts.push(format!("tag={}", py_literal(v)));
        }
        opts.push(match closed {
            true => "forbid_unknown_fields=True".into(),
            false => "dict=True".into(),
        });
        let mut used: HashSet<String> = HashSet::new();
        let fields: Vec<PyField> = (fields.iter())
            .filter(|f| tag.is_none_or(|(tf, _)| f.wire != *tf))
            .map(|f| self.field(f, &mut used))
            .collect();
        PyStruct {
            name: self.names.py(name),
            doc: py_doc(description),
            options: opts.join(", "),
            picks: fields.iter().filter_map(|f| f.pick.clone()).collect(),
            fields,
            open: !closed,
            tag: tag.map(|(f, v)| PyTag {
                field: f.clone(),
                value: py_literal(v),
            }),
        }
    }

    fn field(&self, f: &Field, used: &mut HashSet<String>) -> PyField {
        let mut attr = py_ident(&lower_snake(&f.wire), RESERVED_ATTRS);
        while used.contains(&attr) {
            attr.push('_');
        }
        used.insert(attr.clone());
        let mut ann = self.ann(&f.ty);
        let rename = (attr != f.wire).then(|| py_str(&f.wire));
        let default = match (f.required, &rename) {
            (true, None) => String::new(),
            (true, Some(r)) => format!(" = msgspec.field(name={r})"),
            (false, None) => " = msgspec.UNSET".into(),
            (false, Some(r)) => format!(" = msgspec.field(default=msgspec.UNSET, name={r})"),
        };
        if !f.required {
            ann = format!("Union[{ann}, msgspec.UnsetType]");
        }
        let this = format!("self.{attr}");
        let ty = self
            .types
            .through_aliases(&f.ty, self.among.untyped, ALIAS_DEPTH);
        let pick =
            dispatch_expr(&ty, &this, self.among.untyped, &self.names.types).map(|e| {
                match f.required {
                    true => format!("{this} = {e}"),
                    false => format!("if {this} is not msgspec.UNSET:\n            {this} = {e}"),
                }
            });
        PyField {
            attr,
            wire: f.wire.clone(),
            ann,
            default,
            doc: f.description.replace('\n', " "),
            pick,
        }
    }

    /// A union's alias, the names it depends on, and its decoder when dispatched by presence.
    fn union(&self, t: &TypeDef, kind: UnionKind) -> (PyAlias, Vec<String>, Option<PyDispatch>) {
        let TypeDef::Union {
            name,
            description,
            variants,
            ..
        } = t
        else {
            unreachable!("a union")
        };
        let py = self.names.py(name);
        let alias = |ann: String| PyAlias {
            name: py.clone(),
            doc: py_doc(description),
            ann,
        };
        let union_of = |items: Vec<String>| format!("Union[{}]", items.join(", "));
        match kind {
            UnionKind::Alias(leaves) | UnionKind::Tagged(leaves) => {
                // msgspec takes None beside tagged structs. A one-struct union names its
                // struct as a member would; a tagged union's own branches need no alias.
                let one = leaves.len() == 1;
                let null = has_null(variants).then(|| "None".to_string());
                let branches: Vec<String> = (null.into_iter())
                    .chain(
                        leaves
                            .iter()
                            .map(|l| match one && self.tags.contains_key(l) {
                                true => tagged_alias(&self.names.py(l)),
                                false => self.names.py(l),
                            }),
                    )
                    .collect();
                let ann = match branches.as_slice() {
                    [one] => one.clone(),
                    _ => union_of(branches),
                };
                (alias(ann), leaves, None)
            }
            UnionKind::Dispatch(leaves) => {
                let ann = union_of(leaves.iter().map(|l| self.names.py(l)).collect());
                let dispatch = self.dispatch(name, &leaves);
                (alias(ann), leaves, Some(dispatch))
            }
            UnionKind::Kinds(split) => {
                let ann = union_of(variants.iter().map(|v| self.ann(&v.ty)).collect());
                let deps = variants.iter().flat_map(|v| refs(&v.ty)).collect();
                (alias(ann), deps, Some(self.by_kind(name, &split)))
            }
            UnionKind::Plain => {
                let ann = union_of(variants.iter().map(|v| self.ann(&v.ty)).collect());
                let deps = variants.iter().flat_map(|v| refs(&v.ty)).collect();
                (alias(ann), deps, None)
            }
        }
    }

    /// `decode_<name>`: each branch by the required members no other branch shares.
    fn dispatch(&self, name: &str, leaves: &[String]) -> PyDispatch {
        let common: Vec<String> = (leaves.iter())
            .map(|l| self.types.required(l))
            .reduce(|a, b| a.into_iter().filter(|x| b.contains(x)).collect())
            .unwrap_or_default();
        let branches = (leaves.iter())
            .map(|l| {
                let keys: Vec<String> = (self.types.required(l).into_iter())
                    .filter(|k| !common.contains(k))
                    .map(|k| py_str(&k) + ",")
                    .collect();
                PyBranch {
                    cls: self.names.py(l),
                    keys: format!("({})", keys.join(" ")),
                }
            })
            .collect();
        PyDispatch {
            name: self.names.py(name),
            wire: name.to_string(),
            func: format!("decode_{}", lower_snake(name)),
            branches,
            by_kind: false,
            kinds: Vec::new(),
        }
    }

    /// `decode_<name>` of a union picked by kind: its structs by presence (`_<name>_OBJECTS`),
    /// each other branch converted as its annotation says, then picked as a member is.
    fn by_kind(&self, name: &str, split: &ByKind) -> PyDispatch {
        let mut d = self.dispatch(name, &split.objects);
        let objects = (!split.objects.is_empty()).then(|| PyKind {
            kind: py_str("object"),
            expr: format!("_rt.by_presence(v, _{}_OBJECTS)", d.name),
        });
        let others = split.others.iter().map(|b| {
            let conv = format!("_rt.convert({}, v)", self.ann(&b.ty));
            PyKind {
                kind: py_str(b.kind),
                expr: dispatch_expr(&b.ty, &conv, self.among.untyped, &self.names.types)
                    .unwrap_or(conv),
            }
        });
        d.kinds = objects.into_iter().chain(others).collect();
        d.by_kind = true;
        d
    }

    /// Aliases are evaluated at import: order them after the aliases they name.
    fn ordered(&self, aliases: Vec<(String, PyAlias, Vec<String>)>) -> Vec<PyAlias> {
        let alias_set: HashSet<&str> = (self.types.all.iter())
            .filter(|t| matches!(t, TypeDef::Alias { .. } | TypeDef::Union { .. }))
            .map(TypeDef::name)
            .collect();
        let pending = |deps: &[String], done: &HashSet<String>| {
            deps.iter().any(|d| {
                alias_set.contains(d.as_str())
                    && !self.among.untyped.contains(d)
                    && !done.contains(&self.names.py(d))
            })
        };
        let mut ordered = Vec::new();
        let mut done: HashSet<String> = HashSet::new();
        let mut rest = aliases;
        while !rest.is_empty() {
            let before = rest.len();
            let mut next = Vec::new();
            for a in rest {
                if pending(&a.2, &done) {
                    next.push(a);
                } else {
                    done.insert(a.0);
                    ordered.push(a.1);
                }
            }
            if next.len() == before {
                // A cycle (a recursive alias): emit the rest in schema order.
                ordered.extend(next.into_iter().map(|a| a.1));
                break;
            }
            rest = next;
        }
        ordered
    }
}

/// Named types a type reference mentions.
fn refs(t: &TypeRef) -> Vec<String> {
    match t {
        TypeRef::Named { name } => vec![name.clone()],
        TypeRef::Array { items } => refs(items),
        TypeRef::Map { values } => refs(values),
        TypeRef::Nullable { inner } => refs(inner),
        _ => vec![],
    }
}
