//! The Python view of one contract (the template's `target`): typed structs built from
//! the [`Context`], each value already spelled as Python source. The decisions are those
//! of the module docs of [`crate::python`]; this file only carries them out.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;

use contract::check::Dim;
use contract::model::Unit;

use super::{RESERVED_TYPES, format_float, member_names, py_doc, py_ident, py_literal};
use crate::context::Context;
use crate::ir::{GenError, IdRulesIr, LimitIr, TableIr, ValueType, lower_snake, wire_name};
use crate::types::TypeDef;

mod channels;
mod machines;
mod types;

/// Everything the module template lays out.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PyView {
    enums: Vec<types::PyEnum>,
    structs: Vec<types::PyStruct>,
    aliases: Vec<types::PyAlias>,
    dispatch: Vec<types::PyDispatch>,
    tagged: Vec<String>,
    type_names: Vec<types::TypeName>,
    tables: Vec<PyTable>,
    errors: Option<PyTable>,
    machines: Vec<machines::PyMachine>,
    limits: Vec<PyLimit>,
    id_rules: Vec<PyIdRules>,
    channels: Vec<channels::PyChannel>,
    methods: Vec<PyMethod>,
    doc: String,
}

/// The Python view of `cx`, for the template's `target`.
pub fn view(cx: &Context) -> Result<Value, GenError> {
    let ir = cx.ir;
    let mut names = Names::of_types(&cx.types);
    let machine_names: Vec<String> = (ir.machines.iter())
        .map(|m| names.claim(&m.ident, "Machine"))
        .collect();
    // A typed machine's event enum: `LifecycleEvent` beside `LifecycleState`.
    let event_names: Vec<String> = (ir.machines.iter())
        .map(|m| names.claim(&m.event_ident, "Events"))
        .collect();
    let table_names: Vec<String> = (ir.tables.iter())
        .map(|t| names.claim(&t.ident, "Table"))
        .collect();
    let error_name = ir.errors.as_ref().map(|e| names.claim(&e.ident, "Catalog"));
    let model = types::Types::new(&cx.types).render(&names);
    let channels = (cx.channels.iter())
        .map(|c| channels::channel(c, &names, &model.untyped))
        .collect();
    let view = PyView {
        tables: (ir.tables.iter().zip(&table_names))
            .map(|(t, n)| table(t, n))
            .collect(),
        errors: (ir.errors.as_ref().zip(error_name)).map(|(t, n)| table(t, &n)),
        machines: (ir
            .machines
            .iter()
            .zip(machine_names.iter().zip(&event_names)))
        .map(|(m, (n, ev))| machines::machine(m, n, ev))
        .collect(),
        limits: ir.limits.iter().map(limit).collect(),
        id_rules: ir.id_rules.iter().map(id_rules).collect(),
        channels,
        methods: (ir.methods.iter())
            .map(|m| PyMethod {
                wire: py_str(&m.wire),
                kind: py_str(&wire_name(&m.kind)),
                channel: py_str(&m.channel),
                senders: tuple(m.from.iter().map(|s| py_str(s))),
            })
            .collect(),
        doc: py_doc(cx.description),
        enums: model.enums,
        structs: model.structs,
        aliases: model.aliases,
        dispatch: model.dispatch,
        tagged: model.tagged,
        type_names: model.type_names,
    };
    crate::sdk::view_json("python", view)
}

/// Python class names: types first (each its own identifier, made unique), then the
/// names [`Names::claim`] hands out to machines, tables and the catalog.
pub(super) struct Names {
    taken: HashSet<String>,
    /// Contract type name → Python class name.
    pub(super) types: HashMap<String, String>,
}

impl Names {
    fn of_types(types: &[TypeDef]) -> Names {
        let mut n = Names {
            taken: HashSet::new(),
            types: HashMap::new(),
        };
        for t in types {
            let p = n.unique(py_ident(t.name(), RESERVED_TYPES));
            n.types.insert(t.name().to_string(), p);
        }
        n
    }

    fn unique(&mut self, mut p: String) -> String {
        while self.taken.contains(&p) {
            p.push('_');
        }
        self.taken.insert(p.clone());
        p
    }

    /// `base`, or `base` + `suffix` when a type has it, then `_` until unique.
    fn claim(&mut self, base: &str, suffix: &str) -> String {
        let mut p = py_ident(base, RESERVED_TYPES);
        if self.taken.contains(&p) {
            p = format!("{p}{suffix}");
        }
        self.unique(p)
    }

    /// The Python name of a contract type.
    pub(super) fn py(&self, n: &str) -> String {
        self.types.get(n).cloned().unwrap_or_else(|| n.to_string())
    }
}

/// A Python string literal.
pub(super) fn py_str(s: &str) -> String {
    py_literal(&Value::String(s.to_string()))
}

/// Python source for an optional value: its literal, or `None`.
pub(super) fn py_opt<T: Serialize>(v: Option<T>) -> String {
    v.and_then(|v| serde_json::to_value(v).ok())
        .map_or("None".to_string(), |v| py_literal(&v))
}

pub(super) fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// A tuple of already-spelled items (`(a,)` for one).
pub(super) fn tuple(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    let comma = if items.len() == 1 { "," } else { "" };
    format!("({}{comma})", items.join(", "))
}

/// A code table, or the error catalog, as an enum.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PyTable {
    name: String,
    key: String,
    doc: String,
    bases: &'static str,
    value_type: &'static str,
    members: Vec<PyCode>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PyCode {
    name: String,
    value: String,
    doc: String,
    wire_name: String,
    category: String,
    retryable: &'static str,
    description: String,
}

fn table(t: &TableIr, py: &str) -> PyTable {
    let members = member_names(t.values.iter().map(|v| v.ident.as_str()));
    let (bases, value_type) = match t.value_type {
        ValueType::Int => ("enum.IntEnum", "int"),
        ValueType::Str => ("str, enum.Enum", "str"),
        ValueType::Mixed => ("enum.Enum", "Union[int, str]"),
    };
    PyTable {
        name: py.to_string(),
        key: t.key.clone(),
        doc: py_doc(&t.description),
        bases,
        value_type,
        members: (t.values.iter().zip(members))
            .map(|(v, name)| PyCode {
                name,
                value: py_literal(&v.value),
                doc: v.description.replace('\n', " "),
                wire_name: py_opt(v.name.as_deref()),
                category: v.category.as_deref().map_or("\"\"".into(), py_str),
                retryable: py_bool(v.retryable == Some(true)),
                description: py_str(&v.description),
            })
            .collect(),
    }
}

/// A limit as a `Final` constant, with its limiter when it is a keyed rate.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PyLimit {
    ident: String,
    #[serde(rename = "type")]
    ty: &'static str,
    value: String,
    unit: String,
    doc: String,
    burst: Option<u64>,
    per_seconds: Option<String>,
    keyed: Option<PyKeyed>,
}

#[derive(Serialize)]
struct PyKeyed {
    #[serde(rename = "fn")]
    func: String,
    key: String,
    args: String,
}

fn limit(l: &LimitIr) -> PyLimit {
    let seconds = l.dim == Dim::Seconds;
    let (ty, value) = if !seconds && l.base.fract() == 0.0 && l.base.abs() < 9.007e15 {
        let i = l.base as i64;
        match l.unit {
            Unit::Mode => ("int", format!("0o{i:o}")),
            _ => ("int", i.to_string()),
        }
    } else {
        ("float", format_float(l.base))
    };
    let unit = match l.dim {
        Dim::Seconds => "s".to_string(),
        Dim::Bytes => "bytes".into(),
        Dim::Scalar => wire_name(&l.unit),
    };
    PyLimit {
        ident: l.ident.clone(),
        ty,
        value,
        unit,
        doc: l.description.replace('\n', " "),
        burst: l.burst,
        per_seconds: l.per_seconds.map(format_float),
        keyed: keyed(l),
    }
}

/// A keyed rate limit's limiter arguments.
fn keyed(l: &LimitIr) -> Option<PyKeyed> {
    let k = l.keyed.as_ref()?;
    let list = |v: &[String]| {
        format!(
            "({})",
            v.iter().map(|x| py_str(x) + ", ").collect::<String>()
        )
    };
    let args = [
        py_str(&l.key),
        format_float(k.amount),
        format_float(k.per_seconds),
        k.burst.to_string(),
        py_bool(k.bytes).into(),
        list(&k.methods),
        k.channel_methods.as_deref().map_or("None".into(), list),
        py_opt(k.from.as_deref()),
        py_str(k.key),
        py_opt(k.pointer.as_deref()),
    ];
    Some(PyKeyed {
        func: format!("{}_limiter", lower_snake(&l.key)),
        key: py_str(&l.key),
        args: args.join(", "),
    })
}

#[derive(Serialize)]
struct PyIdRules {
    party: String,
    rules: String,
}

fn id_rules(r: &IdRulesIr) -> PyIdRules {
    PyIdRules {
        party: py_str(&r.party),
        rules: format!(
            "_rt.IdRules({}, {}, {}, {}, {}, {})",
            py_opt(r.prefix.as_deref()),
            py_opt(r.start),
            py_bool(r.increasing),
            py_bool(r.gapless),
            py_bool(r.unique),
            py_opt(r.code.as_ref()),
        ),
    }
}

/// A method: who sends it, on which channel.
#[derive(Serialize)]
struct PyMethod {
    wire: String,
    kind: String,
    channel: String,
    senders: String,
}
