//! The C# view of one contract (the template's `target`): each item of the context the
//! module template iterates, with its C# spellings beside it. Every lookup of a type by
//! name happens once here, in [`CsTypes`].

use serde::Serialize;
use serde_json::Value;

use super::cs_string;
use super::types::{CsField, CsTypes, CsUnion, ctor_params, required_mask};
use crate::context::{ChannelView, Context, SpelledRules, Spelling};
use crate::ir::{
    EventIr, GenError, IdRulesIr, LimitIr, MachineIr, MethodIr, MoveIr, TableIr, ValueType, pascal,
};
use crate::types::TypeDef;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsView<'a> {
    types: Vec<CsType<'a>>,
    errors: Option<CsTable<'a>>,
    tables: Vec<CsTable<'a>>,
    limits: Vec<CsLimit<'a>>,
    id_rules: Vec<CsIdRules<'a>>,
    channels: Vec<CsChannel<'a>>,
    methods: Vec<CsMethod<'a>>,
    machines: Vec<CsMachine<'a>>,
}

/// The C# view of `cx`, for the template's `target`.
pub fn view(cx: &Context) -> Result<Value, GenError> {
    let ir = cx.ir;
    let types = CsTypes::new(&cx.types);
    let view = CsView {
        types: cx.types.iter().map(|t| cs_type(&types, t)).collect(),
        errors: ir.errors.as_ref().map(table),
        tables: ir.tables.iter().map(table).collect(),
        limits: ir.limits.iter().map(limit).collect(),
        id_rules: ir.id_rules.iter().map(id_rules).collect(),
        channels: (cx.channels.iter()).map(|c| channel(&types, c)).collect(),
        methods: (ir.methods.iter())
            .map(|m| CsMethod {
                method: m,
                params_type: m.params.as_deref().map(|p| types.type_of(p)),
                result_type: m.result.as_deref().map(|r| types.type_of(r)),
            })
            .collect(),
        machines: ir.machines.iter().map(machine).collect(),
    };
    crate::sdk::view_json("csharp", view)
}

/// A named type and how C# lays it out.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsType<'a> {
    #[serde(flatten)]
    def: &'a TypeDef,
    type_of: String,
    /// `Parent, ` for a struct that is a branch of a hierarchy union.
    base: String,
    /// ` : Parent` for a union that is itself a branch of one.
    abstract_base: String,
    cs_fields: Vec<CsField>,
    /// The public constructor's parameter list: required members, then optional ones
    /// (defaulting to absent), then `extra` for an open struct.
    ctor_params: String,
    keeps_null: bool,
    literal_mask: String,
    required_mask: String,
    union: Option<CsUnion>,
}

fn cs_type<'a>(types: &CsTypes, def: &'a TypeDef) -> CsType<'a> {
    let name = def.name();
    let parent = types.base_of(name);
    let (cs_fields, literal_mask, required) = match def {
        TypeDef::Struct { fields, .. } => (
            types.fields(name, fields),
            types.literal_mask(fields),
            required_mask(fields),
        ),
        _ => (Vec::new(), String::new(), String::new()),
    };
    let open = matches!(def, TypeDef::Struct { closed: false, .. });
    CsType {
        def,
        ctor_params: ctor_params(&cs_fields, open),
        type_of: types.type_of(name),
        base: parent.map(|p| format!("{p}, ")).unwrap_or_default(),
        abstract_base: parent.map(|p| format!(" : {p}")).unwrap_or_default(),
        keeps_null: cs_fields.iter().any(CsField::keeps_null),
        cs_fields,
        literal_mask,
        required_mask: required,
        union: types.union(def),
    }
}

/// A code table, or the error catalog, with C# spellings of its wire values.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsTable<'a> {
    #[serde(flatten)]
    table: &'a TableIr,
    cs_values: Vec<CsCode<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsCode<'a> {
    ident: String,
    wire: String,
    raw: &'a Value,
    name: Option<&'a str>,
    description: &'a str,
    category: Option<&'a str>,
    retryable: Option<bool>,
    json_lit: String,
}

fn table(t: &TableIr) -> CsTable<'_> {
    let values = (t.values.iter())
        .map(|v| {
            let mut ident = v.ident.clone();
            if ident == t.ident {
                ident.push_str("Value");
            }
            let wire = match (t.value_type, &v.value) {
                (ValueType::Int, n) => n.to_string(),
                (_, Value::String(s)) => cs_string(s),
                (ValueType::Str, _) => cs_string(""),
                (ValueType::Mixed, other) => format!("(object){other}L"),
            };
            CsCode {
                ident,
                wire,
                raw: &v.value,
                name: v.name.as_deref(),
                description: &v.description,
                category: v.category.as_deref(),
                retryable: v.retryable,
                json_lit: cs_string(&v.value.to_string()),
            }
        })
        .collect();
    CsTable {
        table: t,
        cs_values: values,
    }
}

/// A limit with its C# members, and its limiter when it is a keyed rate.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsLimit<'a> {
    #[serde(flatten)]
    limit: &'a LimitIr,
    cs_members: String,
    cs_keyed: Option<String>,
}

fn limit(l: &LimitIr) -> CsLimit<'_> {
    CsLimit {
        limit: l,
        cs_members: limit_members(l),
        cs_keyed: keyed(l),
    }
}

/// A limit as C# members (a constant, a `TimeSpan`, or a rate).
fn limit_members(l: &LimitIr) -> String {
    use contract::check::Dim;
    let name = pascal(&l.key);
    let ms = |s: f64| (s * 1000.0).round() as i64;
    let mut out = Vec::new();
    match l.dim {
        Dim::Seconds => out.push(format!(
            "public static readonly TimeSpan {name} = TimeSpan.FromMilliseconds({});",
            ms(l.base)
        )),
        dim => {
            let v = if dim == Dim::Bytes { l.base } else { l.value };
            let (t, v) = match v.fract() == 0.0 && v.abs() < 9.0e18 {
                true => ("long", format!("{}L", v as i64)),
                false => ("double", format!("{v:?}d")),
            };
            out.push(format!("public const {t} {name} = {v};"));
        }
    }
    if let Some(b) = l.burst {
        out.push(format!("public const long {name}Burst = {b}L;"));
    }
    if let Some(p) = l.per_seconds {
        out.push(format!(
            "public static readonly TimeSpan {name}Per = TimeSpan.FromMilliseconds({});",
            ms(p)
        ));
    }
    out.join("\n        ")
}

fn cs_opt(v: Option<&str>) -> String {
    v.map_or("null".to_string(), cs_string)
}

fn cs_bool(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

fn strings<'s>(items: impl Iterator<Item = &'s str>) -> String {
    let items: Vec<String> = items.map(cs_string).collect();
    format!("new string[] {{ {} }}", items.join(", "))
}

/// A keyed rate limit's `new KeyedRate(...)`.
fn keyed(l: &LimitIr) -> Option<String> {
    let k = l.keyed.as_ref()?;
    Some(format!(
        "new KeyedRate({}, {:?}, {:?}, {}L, {}, {}, {}, {}, {}, {})",
        cs_string(&l.key),
        k.amount,
        k.per_seconds,
        k.burst,
        cs_bool(k.bytes),
        strings(k.methods.iter().map(String::as_str)),
        (k.channel_methods.as_ref())
            .map_or("null".into(), |m| strings(m.iter().map(String::as_str))),
        cs_opt(k.from.as_deref()),
        cs_string(k.key),
        cs_opt(k.pointer.as_deref()),
    ))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsIdRules<'a> {
    #[serde(flatten)]
    rules: &'a IdRulesIr,
    cs_rules: String,
}

/// A party's `new IdRules(...)`.
fn id_rules(r: &IdRulesIr) -> CsIdRules<'_> {
    // The error code: a string, a boxed long, or null.
    let code = match &r.code {
        Some(Value::String(s)) => cs_string(s),
        Some(Value::Number(n)) => n.as_i64().map_or("null".to_string(), |n| format!("{n}L")),
        _ => "null".to_string(),
    };
    let cs_rules = format!(
        "new IdRules({}, {}, {}, {}, {}, {code})",
        cs_opt(r.prefix.as_deref()),
        r.start
            .map_or("null".to_string(), |n| format!("(long?){n}L")),
        cs_bool(r.increasing),
        cs_bool(r.gapless),
        cs_bool(r.unique),
    );
    CsIdRules { rules: r, cs_rules }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsMethod<'a> {
    #[serde(flatten)]
    method: &'a MethodIr,
    params_type: Option<String>,
    result_type: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsMachine<'a> {
    #[serde(flatten)]
    machine: &'a MachineIr,
    cs_moves: Vec<CsMove<'a>>,
}

#[derive(Serialize)]
struct CsMove<'a> {
    #[serde(flatten)]
    step: &'a MoveIr,
    /// The event's message trigger as a `MessageTrigger`, or null.
    trigger: String,
}

fn machine(m: &MachineIr) -> CsMachine<'_> {
    let trigger = |ident: &str| match m.events.iter().find(|e| e.ident == ident) {
        Some(e) if e.on == "message" => message_trigger(e),
        _ => "null".to_string(),
    };
    CsMachine {
        machine: m,
        cs_moves: (m.moves.iter())
            .map(|step| CsMove {
                step,
                trigger: trigger(&step.event),
            })
            .collect(),
    }
}

fn message_trigger(e: &EventIr) -> String {
    let matches: Vec<String> = (e.matches.iter())
        .map(|(p, v)| format!("new string[] {{ {}, {} }}", cs_string(p), cs_string(v)))
        .collect();
    format!(
        "new MessageTrigger({}, {}, {}, new string[][] {{ {} }})",
        cs_opt(e.method.as_deref()),
        cs_opt(e.kind.as_deref()),
        cs_opt(e.from.as_deref()),
        matches.join(", ")
    )
}

/// A channel, its message type, and its wire rules as C# expressions naming the generated
/// `Limits` members, so every number stays in one place.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CsChannel<'a> {
    #[serde(flatten)]
    channel: &'a ChannelView<'a>,
    type_of: Option<String>,
    cs: CsRules,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CsRules {
    message_type: Option<String>,
    rules: Option<SpelledRules>,
    caps: Vec<CsCap>,
    method_at: String,
    reply_at: String,
    deadline: Option<CsDeadline>,
}

#[derive(Serialize)]
struct CsCap {
    method: String,
    limit: String,
    cap: String,
    ignore: &'static str,
}

#[derive(Serialize)]
struct CsDeadline {
    limit: String,
    after: String,
}

fn limits_member(key: &str) -> String {
    format!("Limits.{}", pascal(key))
}

/// The channel's JSON rules in C#'s words, caps by the generated `Limits` members.
const SPELLING: Spelling = Spelling {
    yes_no: ("true", "false"),
    none: "null",
    cap: |l| limits_member(l.limit),
    quote: |t| t.to_string(),
};

fn channel<'a>(types: &CsTypes, c: &'a ChannelView<'a>) -> CsChannel<'a> {
    CsChannel {
        channel: c,
        type_of: c.message.map(|m| types.type_of(m)),
        cs: rules(types, c),
    }
}

pub(super) fn rules(types: &CsTypes, c: &ChannelView) -> CsRules {
    let names = |v: &Option<Vec<String>>| {
        v.as_ref()
            .map_or("null".into(), |a| strings(a.iter().map(String::as_str)))
    };
    let json_rules = c.wire_rules.as_ref().map(|r| r.spelled(&SPELLING));
    // The deadline applies where the reader is this runtime's (length-prefixed framing).
    let deadline = match (c.framing, &c.frame_deadline) {
        (contract::model::Framing::LengthPrefixed { .. }, Some(d)) => Some(CsDeadline {
            limit: cs_string(d.limit),
            after: limits_member(d.limit),
        }),
        _ => None,
    };
    CsRules {
        message_type: (c.message).map(|m| {
            types.cs_type(&crate::types::TypeRef::Named {
                name: m.to_string(),
            })
        }),
        rules: json_rules,
        caps: (c.method_caps.iter())
            .map(|m| CsCap {
                method: cs_string(m.method),
                limit: cs_string(m.limit),
                cap: limits_member(m.limit),
                ignore: cs_bool(m.ignore),
            })
            .collect(),
        method_at: names(&c.method_at),
        reply_at: names(&c.reply_at),
        deadline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The channel view names the generated `Limits` members for every cap, deadline and rule.
    #[test]
    fn channel_view_spells_the_contracts_wire_rules() {
        let channel = |contract: &str, key: &str| -> Value {
            let path = format!(
                "{}/../schema/contracts/{contract}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let ir = crate::ir::Ir::build(
                contract::load(std::path::Path::new(&path)).expect("contract"),
            )
            .expect("ir");
            let package = crate::package::Package::default();
            let names = package.context();
            let cx = Context::build(&ir, "", &names);
            let types = CsTypes::new(&cx.types);
            let c = cx.channels.iter().find(|c| c.key == key).expect("channel");
            serde_json::to_value(rules(&types, c)).expect("rules")
        };
        let ipc = channel("rukh", "ipc");
        assert_eq!(
            ipc["rules"],
            json!({
                "strict": "true", "objectOnly": "true", "noNull": "false",
                "maxDepth": "Limits.JsonDepthMax", "maxItems": "Limits.JsonItemsMax",
                "doc": "the strict profile, an object at the top, depth at most Limits.JsonDepthMax, at most Limits.JsonItemsMax members plus elements",
            })
        );
        let caps = ipc["caps"].as_array().expect("caps");
        assert_eq!(caps.len(), 4);
        assert!(
            caps.iter().all(|c| c["cap"] == "Limits.LifecyclePayloadMax"
                && c["limit"] == "\"lifecyclePayloadMax\"")
        );
        let log = caps
            .iter()
            .find(|c| c["method"] == "\"rukh.log\"")
            .expect("rukh.log");
        assert_eq!(log["ignore"], "true");
        assert_eq!(
            ipc["deadline"],
            json!({"limit": "\"incompleteFrameSeconds\"", "after": "Limits.IncompleteFrameSeconds"})
        );
        assert_eq!(ipc["methodAt"], "new string[] { \"method\" }");
        assert_eq!(ipc["replyAt"], "new string[] { \"id\" }");
        assert_eq!(ipc["messageType"], "Message");

        let control = channel("kernel", "control");
        assert_eq!(control["rules"]["strict"], "false");
        assert_eq!(control["rules"]["maxDepth"], "Limits.JsonMaxDepth");
        assert_eq!(control["caps"], json!([]));
        assert_eq!(control["deadline"], Value::Null);
        assert_eq!(control["methodAt"], "new string[] { \"method\" }");
        assert_eq!(control["replyAt"], "new string[] { \"correlation_id\" }");
        // No JSON rules of its own and no method caps: the plain decode.
        assert_eq!(channel("xsession", "inbox")["rules"], Value::Null);
    }
}
