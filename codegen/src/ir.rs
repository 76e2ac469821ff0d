//! The intermediate model every target renders from.
//!
//! [`Ir::build`] runs once per contract. It resolves every name a target will
//! print (so Rust, C#, Python and the docs agree on `CommandHandle`,
//! `HANDSHAKE_SECONDS`, `ProtocolUnknownMethod`…), evaluates every limit, and
//! prepares the schema set handed to typify. Targets never read the contract's
//! raw JSON themselves.

use indexmap::IndexMap;
use serde_json::Value;

use contract::Contract;
use contract::check::{Dim, to_base};
use contract::model::{CodeKind, Kind, LimitKind, Part, Unit};

/// Errors turning a contract into generated output.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// The contract failed to load or check.
    #[error(transparent)]
    Load(#[from] contract::LoadError),
    /// A construct the generator cannot render.
    #[error("{contract}#{pointer}: {reason}")]
    Unsupported {
        /// Contract name.
        contract: String,
        /// JSON pointer to the construct.
        pointer: String,
        /// Why.
        reason: String,
    },
    /// typify rejected a schema.
    #[error("{contract}#{pointer}: typify: {reason}")]
    Typify {
        /// Contract name.
        contract: String,
        /// JSON pointer to the schema.
        pointer: String,
        /// typify's message.
        reason: String,
    },
    /// Writing output failed.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A package option (name, namespace, version) the target cannot use.
    #[error("{0}")]
    Package(String),
    /// The contract breaks peers built from its earlier version, unannounced.
    #[error(
        "{contract} breaks peers built from its earlier version (accept a finding with accept_breaking(\"RULE@POINTER\"), or bump the major version):\n{findings}"
    )]
    Breaking {
        /// Contract file.
        contract: String,
        /// One line per finding, each starting with the name that accepts it.
        findings: String,
    },
    /// A template failed to render.
    #[error("template {template}: {reason}")]
    Template {
        /// Template name.
        template: String,
        /// Why.
        reason: String,
    },
}

/// `command.handle` → `CommandHandle`; `PARSE_ERROR` → `ParseError`; `1m` → `V1m`.
pub fn pascal(s: &str) -> String {
    let mut out = String::new();
    for word in words(s) {
        let mut cs = word.chars();
        if let Some(f) = cs.next() {
            out.extend(f.to_uppercase());
            out.push_str(&cs.as_str().to_lowercase());
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'V');
    }
    out
}

/// `handshakeSeconds` → `HANDSHAKE_SECONDS`.
pub fn upper_snake(s: &str) -> String {
    let w: Vec<String> = words(s).iter().map(|w| w.to_uppercase()).collect();
    let mut out = w.join("_");
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'V');
    }
    out
}

/// `handshakeSeconds` → `handshake_seconds`.
pub fn lower_snake(s: &str) -> String {
    upper_snake(s).to_lowercase()
}

/// Split an identifier-ish string into words at separators and case changes.
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if c == '-' && i == 0 {
                cur.push_str("neg");
                out.push(std::mem::take(&mut cur));
                continue;
            }
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        let prev = if i > 0 { chars[i - 1] } else { ' ' };
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        let boundary = !cur.is_empty()
            && ((c.is_ascii_uppercase() && prev.is_ascii_lowercase())
                || (c.is_ascii_uppercase()
                    && prev.is_ascii_uppercase()
                    && next.is_ascii_lowercase()));
        if boundary {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `name`, or the first of `name2`, `name3`, … that `taken` does not hold.
pub(crate) fn unique(name: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut out = name.to_string();
    let mut n = 2;
    while taken(&out) {
        out = format!("{name}{n}");
        n += 1;
    }
    out
}

/// Make identifiers unique in order of appearance: the second `Ref` becomes `Ref2`.
pub(crate) fn dedupe(names: Vec<String>) -> Vec<String> {
    let mut seen: IndexMap<String, usize> = IndexMap::new();
    names
        .into_iter()
        .map(|n| {
            let count = seen.entry(n.clone()).or_insert(0);
            *count += 1;
            if *count == 1 {
                n
            } else {
                format!("{n}{count}")
            }
        })
        .collect()
}

/// A method, with the names every target uses.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodIr {
    /// Wire name.
    pub wire: String,
    /// Type-style identifier (`CommandHandle`).
    pub ident: String,
    /// Kind.
    pub kind: Kind,
    /// Parties that may send it.
    pub from: Vec<String>,
    /// Channel.
    pub channel: String,
    /// Capability it needs.
    pub capability: Option<String>,
    /// Capabilities a message needs by its values (`needs`).
    pub needs: Vec<NeedIr>,
    /// Named type of its params, if any.
    pub params: Option<String>,
    /// A message may leave its params out (their schema accepts `null` or `{}`: the wire
    /// layer's rule), so every binding types them as optional.
    pub params_optional: bool,
    /// Named type of its result, if any (`None` for non-requests and refused methods).
    pub result: Option<String>,
    /// Description.
    pub description: String,
    /// Wire codes of the errors it may return.
    pub errors: Vec<Value>,
    /// The other party's methods that answer this one-way message (`answeredBy`).
    pub answered_by: Vec<String>,
    /// When it is not sent (`notWhile`), as text: `` `tools/call` `` awaiting an answer,
    /// then the exception and the seed.
    pub not_while: Option<String>,
}

/// A `notWhile` as the docs say it.
fn not_while_text(w: &contract::model::NotWhile) -> String {
    let pending: Vec<String> = w.pending.iter().map(|p| format!("`{p}`")).collect();
    let unless: Vec<String> = (w.unless.iter())
        .map(|(p, vals)| {
            let vals: Vec<String> = vals.iter().map(|v| format!("`{v}`")).collect();
            format!("`{p}` is {}", vals.join(" or "))
        })
        .collect();
    let unless = match unless.is_empty() {
        true => String::new(),
        false => format!(", unless {}", unless.join(", or ")),
    };
    format!(
        "its sender's {} awaits an answer{unless} ({})",
        pending.join(" or "),
        w.seed
    )
}

/// Capabilities a message needs when its members hold given values.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NeedIr {
    /// The capabilities.
    pub capabilities: Vec<String>,
    /// The condition, as text: `` `/payload/kind` is `"audio.input"` ``, `` `/result/x` is
    /// present ``, joined by "and".
    pub when: String,
    /// Seed section.
    pub seed: String,
}

impl NeedIr {
    fn of(n: &contract::model::Need) -> NeedIr {
        let matches = (n.matches.iter()).map(|(p, v)| format!("`{p}` is `{v}`"));
        let present = (n.present.iter()).map(|p| format!("`{p}` is present"));
        let when: Vec<String> = matches.chain(present).collect();
        NeedIr {
            capabilities: n.capabilities.clone(),
            when: when.join(" and "),
            seed: n.seed.clone(),
        }
    }
}

/// One value of a code table or the error catalog.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeIr {
    /// Identifier (`ProtocolUnknownMethod`, `Closed4001`…).
    pub ident: String,
    /// Wire value.
    pub value: Value,
    /// Symbolic name, if the contract gives one.
    pub name: Option<String>,
    /// Description.
    pub description: String,
    /// Category (errors only).
    pub category: Option<String>,
    /// Retryable (errors only).
    pub retryable: Option<bool>,
}

/// How a table's wire values are typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    /// All integers.
    Int,
    /// All strings.
    Str,
    /// Both.
    Mixed,
}

/// A code table (or the error catalog) ready to render as an enum.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableIr {
    /// Contract key (`closeCodes`).
    pub key: String,
    /// Enum name (`CloseCodes`, `ErrorCode`).
    pub ident: String,
    /// Kind of table; `None` for the error catalog.
    pub kind: Option<CodeKind>,
    /// Description.
    pub description: String,
    /// The party whose process exits with these values (an exit-code table).
    pub party: Option<String>,
    /// Value typing.
    pub value_type: ValueType,
    /// Values.
    pub values: Vec<CodeIr>,
}

/// A limit, evaluated.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitIr {
    /// Contract key.
    pub key: String,
    /// Constant name (`HANDSHAKE_SECONDS`).
    pub ident: String,
    /// Kind.
    pub kind: LimitKind,
    /// Value in the limit's own unit.
    pub value: f64,
    /// Unit.
    pub unit: Unit,
    /// Value in base units (bytes or seconds), for sizes and times.
    pub base: f64,
    /// Dimension of `base`.
    pub dim: Dim,
    /// The expression text when derived from other limits.
    pub expr: Option<String>,
    /// Rates: bucket size.
    pub burst: Option<u64>,
    /// Rates: period in seconds.
    pub per_seconds: Option<f64>,
    /// Description (quoted into doc comments).
    pub description: String,
    /// Party whose timer it is.
    pub timer: Option<String>,
    /// Counted from.
    pub from: Option<String>,
    /// On expiry.
    pub on_expiry: String,
    /// Seed section.
    pub seed: String,
    /// A rate limit run as data (one with `applies` or `key`): what an SDK limiter needs.
    pub keyed: Option<KeyedRateIr>,
}

/// A keyed rate limit, evaluated: the token bucket's shape, what it applies to, and its key.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyedRateIr {
    /// Base units (a count, or bytes) refilled every `per_seconds`.
    pub amount: f64,
    /// The refill period, in seconds.
    pub per_seconds: f64,
    /// The bucket size, in base units.
    pub burst: u64,
    /// A message takes its size in tokens (a byte unit), else one.
    pub bytes: bool,
    /// The methods it applies to (all when empty).
    pub methods: Vec<String>,
    /// When it applies to one channel: the methods on that channel.
    pub channel_methods: Option<Vec<String>>,
    /// The only sending party it applies to.
    pub from: Option<String>,
    /// What buckets are kept per: `global`, `connection`, `party` or `pointer`.
    pub key: &'static str,
    /// For a `pointer` key, the JSON pointer into the message.
    pub pointer: Option<String>,
}

/// A party's request-id rules.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdRulesIr {
    /// The party.
    pub party: String,
    /// String ids carry this prefix, then the number.
    pub prefix: Option<String>,
    /// The first request's number.
    pub start: Option<i64>,
    /// Each request's number is above the last.
    pub increasing: bool,
    /// Each request's number is the last plus one.
    pub gapless: bool,
    /// No id is used twice.
    pub unique: bool,
    /// The error code a broken rule is answered with (a `reply-error` action's).
    pub code: Option<Value>,
}

/// A state machine with identifiers.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineIr {
    /// Contract key.
    pub key: String,
    /// Enum name (`TaskState`).
    pub ident: String,
    /// Description.
    pub description: String,
    /// (ident, wire name, meaning) per state.
    pub states: Vec<(String, String, String)>,
    /// Initial state ident.
    pub initial: String,
    /// Terminal state idents.
    pub terminal: Vec<String>,
    /// Allowed (from ident, to ident) pairs.
    pub transitions: Vec<(String, String)>,
    /// Per transition, its typed trigger in a few words (`initialize response from server`,
    /// `timer idleSeconds`), for diagrams; `None` where the contract gives prose only.
    pub triggers: Vec<Option<String>>,
    /// Disallowed transitions are ignorable repeats rather than errors.
    pub ignore_invalid: bool,
    /// Whether any transition has a typed trigger: only such a machine steps on events.
    pub typed: bool,
    /// Its event enum's name (`TaskEvent` beside `TaskState`).
    pub event_ident: String,
    /// The machine's typed events: one per distinct trigger, in first-use order.
    pub events: Vec<EventIr>,
    /// The typed transitions, in contract order (the first one that fires wins).
    pub moves: Vec<MoveIr>,
    /// Methods `allows` lets be sent without moving the machine: (wire name, state idents).
    pub allows: Vec<(String, Vec<String>)>,
    /// What one instance follows: `connection`, `session`, `key` or `party`.
    pub scope: &'static str,
    /// For a per-key machine, the JSON pointer to its key in the triggering messages.
    pub key_pointer: Option<String>,
    /// Why the machine has no typed trigger (`untyped`), when the contract says.
    pub untyped: Option<String>,
    /// Refusals, for the docs: (message label, state wire names, action, code).
    pub refusals: Vec<RefusalIr>,
    /// The transitions that end the channel (`ends`), for the docs.
    pub endings: Vec<EndingIr>,
}

/// A transition that ends the channel, as the docs show it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndingIr {
    /// `from → to` (wire names).
    pub transition: String,
    /// Its trigger in a few words, when typed.
    pub trigger: Option<String>,
    /// The party that ends the channel.
    pub by: String,
    /// The action's kebab-case name (`close`, `drop-connection`).
    pub action: String,
    /// The close code, as JSON text, when it has one.
    pub code: Option<String>,
    /// The exit its party's process makes, when the contract says (as text: `0` is one).
    pub exit: Option<String>,
    /// Why, in the seed's terms.
    pub description: String,
}

/// One refusal of a machine, as the docs show it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusalIr {
    /// The message in a few words (`rukh.invoke from core`).
    pub message: String,
    /// The states it is refused in (wire names).
    pub states: Vec<String>,
    /// The action's kebab-case name (`reply-error`).
    pub action: String,
    /// The action's code, as JSON text, when it has one.
    pub code: Option<String>,
    /// Why, in the seed's terms.
    pub description: String,
}

/// One typed event of a machine: a distinct trigger of its transitions.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventIr {
    /// Enum variant name (`InitializeResponseFromServer`).
    pub ident: String,
    /// The trigger in a few words, unique within the machine; vectors name events by it.
    pub label: String,
    /// `message`, `timer`, `open`, `close` or `transport`.
    pub on: &'static str,
    /// A message trigger's method (wire name); any method when absent.
    pub method: Option<String>,
    /// A message trigger's kind (`request`, `response`, ...), resolved to the method's own
    /// kind when the contract leaves it out; any kind when absent.
    pub kind: Option<String>,
    /// A message trigger's sending party; any when absent.
    pub from: Option<String>,
    /// A message trigger's (JSON pointer, JSON text) pairs the message must hold.
    pub matches: Vec<(String, String)>,
    /// The trigger itself.
    #[serde(skip)]
    pub trigger: contract::model::Trigger,
}

/// A typed transition.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveIr {
    /// Index in the contract's `transitions`.
    pub index: usize,
    /// From state ident.
    pub from: String,
    /// To state ident.
    pub to: String,
    /// Event ident.
    pub event: String,
}

/// A channel with the type of its messages.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelIr {
    /// Contract key.
    pub key: String,
    /// Enum variant name.
    pub ident: String,
    /// Named type of every message on it, if it carries JSON.
    pub message: Option<String>,
}

/// Everything a target needs, computed once.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ir {
    /// The contract itself.
    #[serde(skip)]
    pub contract: Contract,
    /// Module / file stem (`kernel`).
    pub module: String,
    /// Parties as (ident, name).
    pub parties: Vec<(String, String)>,
    /// Channels.
    pub channels: Vec<ChannelIr>,
    /// Methods.
    pub methods: Vec<MethodIr>,
    /// The error catalog as a table (`ErrorCode`), if it has entries.
    pub errors: Option<TableIr>,
    /// Other code tables.
    pub tables: Vec<TableIr>,
    /// Limits.
    pub limits: Vec<LimitIr>,
    /// State machines.
    pub machines: Vec<MachineIr>,
    /// Request-id rules, per party that declares them.
    pub id_rules: Vec<IdRulesIr>,
    /// Schemas to generate types from: type name → schema (JSON Schema, `$defs` refs).
    /// The names are identifiers, resolved once for every target ([`crate::names`]).
    pub schemas: IndexMap<String, Value>,
    /// Where each of [`Ir::schemas`] sits in the contract: a JSON pointer
    /// (`/$defs/JSONRPCRequest`, `/methods/tools~1list/params`).
    pub origins: IndexMap<String, String>,
}

fn ref_name(s: &Value) -> Option<String> {
    s.get("$ref")
        .and_then(Value::as_str)
        .and_then(crate::names::def_key)
}

fn value_type(values: &[Value]) -> ValueType {
    let ints = values.iter().all(Value::is_i64);
    let strs = values.iter().all(Value::is_string);
    match (ints, strs) {
        (true, _) => ValueType::Int,
        (_, true) => ValueType::Str,
        _ => ValueType::Mixed,
    }
}

fn code_ident(value: &Value, name: Option<&str>, table_kind: Option<CodeKind>) -> String {
    if let Some(n) = name {
        return pascal(n);
    }
    match value {
        Value::String(s) => pascal(s),
        Value::Number(n) => {
            let prefix = match table_kind {
                Some(CodeKind::CloseCode) => "Close",
                Some(CodeKind::ExitCode) | Some(CodeKind::CliExitCode) => "Exit",
                Some(CodeKind::HttpStatus) => "Http",
                _ => "Code",
            };
            format!("{prefix}{}", n.to_string().replace('-', "Neg"))
        }
        other => pascal(&other.to_string()),
    }
}

impl Ir {
    /// Build the IR of a checked contract.
    pub fn build(contract: Contract) -> Result<Ir, GenError> {
        let c = &contract;
        let unsupported = |pointer: String, reason: String| GenError::Unsupported {
            contract: c.name.clone(),
            pointer,
            reason,
        };
        let mut schemas: IndexMap<String, Value> = c.defs.clone();
        // Where each type's schema sits in the contract, by its (pre-rename) name.
        let mut origins: IndexMap<String, String> = c
            .defs
            .keys()
            .map(|k| (k.clone(), contract::join_pointer("/$defs", [k.as_str()])))
            .collect();
        // Inline method schemas become named types so every target can name them.
        let mut type_of = |schemas: &mut IndexMap<String, Value>,
                           s: &Option<Value>,
                           name: String,
                           at: String|
         -> Option<String> {
            match s {
                None | Some(Value::Bool(false)) => None,
                Some(v) => ref_name(v).or_else(|| {
                    // A `$defs` key may already hold the name: the inline schema takes the next.
                    let unique = unique(&name, |n| schemas.contains_key(n));
                    schemas.insert(unique.clone(), v.clone());
                    origins.insert(unique.clone(), at);
                    Some(unique)
                }),
            }
        };
        let method_idents = dedupe(c.methods.keys().map(|k| pascal(k)).collect());
        let mut methods = Vec::new();
        for ((wire, m), ident) in c.methods.iter().zip(method_idents) {
            let at = contract::join_pointer("/methods", [wire.as_str()]);
            let params = type_of(
                &mut schemas,
                &m.params,
                format!("{ident}Params"),
                format!("{at}/params"),
            );
            let result = type_of(
                &mut schemas,
                &m.result,
                format!("{ident}Result"),
                format!("{at}/result"),
            );
            methods.push(MethodIr {
                params_optional: params.is_some() && contract::wire::params_may_be_absent(c, wire),
                wire: wire.clone(),
                ident,
                kind: m.kind,
                from: m.from.clone(),
                channel: m.channel.clone(),
                capability: m.capability.clone(),
                needs: m.needs.iter().map(NeedIr::of).collect(),
                params,
                result,
                description: m.description.clone(),
                errors: m.errors.clone(),
                answered_by: m.answered_by.clone(),
                not_while: m.not_while.as_ref().map(not_while_text),
            });
        }
        let channel_idents = dedupe(c.channels.keys().map(|k| pascal(k)).collect());
        let mut channels = Vec::new();
        for ((key, ch), ident) in c.channels.iter().zip(channel_idents) {
            let message = type_of(
                &mut schemas,
                &ch.message,
                format!("{ident}Message"),
                contract::join_pointer("/channels", [key.as_str(), "message"]),
            );
            channels.push(ChannelIr {
                key: key.clone(),
                ident,
                message,
            });
        }
        let errors = (!c.errors.is_empty()).then(|| {
            let idents = dedupe(
                c.errors
                    .iter()
                    .map(|e| code_ident(&e.code, e.name.as_deref(), None))
                    .collect(),
            );
            let values: Vec<CodeIr> = c
                .errors
                .iter()
                .zip(idents)
                .map(|(e, ident)| CodeIr {
                    ident,
                    value: e.code.clone(),
                    name: e.name.clone(),
                    description: e.description.clone(),
                    category: Some(e.category.clone()),
                    retryable: Some(e.retryable),
                })
                .collect();
            TableIr {
                key: "errors".into(),
                ident: "ErrorCode".into(),
                kind: None,
                description: format!("The {} error catalog.", c.name),
                party: None,
                value_type: value_type(
                    &c.errors.iter().map(|e| e.code.clone()).collect::<Vec<_>>(),
                ),
                values,
            }
        });
        let table_idents = dedupe(c.codes.keys().map(|k| pascal(k)).collect());
        let mut tables = Vec::new();
        for ((key, t), ident) in c.codes.iter().zip(table_idents) {
            let idents = dedupe(
                t.values
                    .iter()
                    .map(|v| code_ident(&v.value, v.name.as_deref(), Some(t.kind)))
                    .collect(),
            );
            tables.push(TableIr {
                key: key.clone(),
                ident,
                kind: Some(t.kind),
                description: t.description.clone(),
                party: t.party.clone(),
                value_type: value_type(
                    &t.values.iter().map(|v| v.value.clone()).collect::<Vec<_>>(),
                ),
                values: t
                    .values
                    .iter()
                    .zip(idents)
                    .map(|(v, ident)| CodeIr {
                        ident,
                        value: v.value.clone(),
                        name: v.name.clone(),
                        description: v.description.clone(),
                        category: None,
                        retryable: None,
                    })
                    .collect(),
            });
        }
        let evaluated = contract::Limits::new(c);
        let mut ev = contract::check::Evaluator::new(c);
        let limit_idents = dedupe(c.limits.keys().map(|k| upper_snake(k)).collect());
        let mut limits = Vec::new();
        for ((key, l), ident) in c.limits.iter().zip(limit_idents) {
            let value = ev
                .limit_value(key)
                .map_err(|e| unsupported(contract::join_pointer("/limits", [key.as_str()]), e))?;
            let (base, dim) = to_base(l.unit, value);
            let expr = match &l.value {
                contract::model::Expr::Number(_) => None,
                e => Some(contract::check::show(e)),
            };
            let keyed = keyed_rate(c, &evaluated, key, l);
            limits.push(LimitIr {
                keyed,
                key: key.clone(),
                ident,
                kind: l.kind,
                value,
                unit: l.unit,
                base,
                dim,
                expr,
                burst: l.burst,
                per_seconds: l.per_seconds,
                description: l.description.clone(),
                timer: l.timer.clone(),
                from: l.from.clone(),
                on_expiry: l.on_expiry.clone(),
                seed: l.seed.clone(),
            });
        }
        let mut machines = Vec::new();
        let machine_idents = dedupe(
            c.state_machines
                .keys()
                .map(|k| format!("{}State", pascal(k)))
                .collect(),
        );
        for ((key, sm), ident) in c.state_machines.iter().zip(machine_idents) {
            let state_idents = dedupe(sm.states.keys().map(|s| pascal(s)).collect());
            let idx: IndexMap<&str, &str> = sm
                .states
                .keys()
                .map(String::as_str)
                .zip(state_idents.iter().map(String::as_str))
                .collect();
            let id = |s: &str| {
                idx.get(s)
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| pascal(s))
            };
            machines.push(MachineIr {
                key: key.clone(),
                ident,
                description: sm.description.clone(),
                states: sm
                    .states
                    .iter()
                    .zip(&state_idents)
                    .map(|((w, d), i)| (i.clone(), w.clone(), d.clone()))
                    .collect(),
                initial: id(&sm.initial),
                terminal: sm.terminal.iter().map(|t| id(t)).collect(),
                transitions: sm
                    .transitions
                    .iter()
                    .map(|t| (id(&t.from), id(&t.to)))
                    .collect(),
                triggers: sm
                    .transitions
                    .iter()
                    .map(|t| t.trigger.as_ref().map(trigger_label))
                    .collect(),
                ignore_invalid: sm.on_invalid == contract::model::InvalidTransition::Ignore,
                typed: sm.is_typed(),
                event_ident: format!("{}Event", pascal(key)),
                events: Vec::new(),
                moves: Vec::new(),
                allows: sm
                    .allows
                    .iter()
                    .map(|(m, states)| (m.clone(), states.iter().map(|x| id(x)).collect()))
                    .collect(),
                scope: scope_name(sm.scope.as_ref()),
                key_pointer: match &sm.scope {
                    Some(contract::model::Scope::Key { pointer }) => Some(pointer.clone()),
                    _ => None,
                },
                untyped: sm.untyped.clone(),
                refusals: sm.refusals.iter().map(refusal_ir).collect(),
                endings: sm.transitions.iter().filter_map(ending_ir).collect(),
            });
            let m = machines.last_mut().expect("just pushed");
            (m.events, m.moves) = typed_events(c, sm, &id);
        }
        let party_idents = dedupe(c.parties.keys().map(|k| pascal(k)).collect());
        let parties = party_idents
            .into_iter()
            .zip(c.parties.keys().cloned())
            .collect();
        let id_rules = c
            .parties
            .iter()
            .filter_map(|(party, p)| {
                let r = p.ids.as_ref()?;
                Some(IdRulesIr {
                    party: party.clone(),
                    prefix: r.prefix.clone(),
                    start: r.start,
                    increasing: r.increasing,
                    gapless: r.gapless,
                    unique: r.unique,
                    code: (r.action.as_ref())
                        .filter(|a| a.action == contract::model::ActionKind::ReplyError)
                        .and_then(|a| a.code.clone()),
                })
            })
            .collect();
        let (schemas, idents) = crate::names::resolve(crate::shapes::normalise(schemas));
        let origins = origins
            .into_iter()
            .map(|(k, at)| (idents.get(&k).cloned().unwrap_or(k), at))
            .collect();
        let ident_of = |n: &mut Option<String>| {
            if let Some(i) = n.as_ref().and_then(|k| idents.get(k)) {
                *n = Some(i.clone());
            }
        };
        for m in &mut methods {
            ident_of(&mut m.params);
            ident_of(&mut m.result);
        }
        for ch in &mut channels {
            ident_of(&mut ch.message);
        }
        Ok(Ir {
            id_rules,
            module: lower_snake(&c.name),
            parties,
            channels,
            methods,
            errors,
            tables,
            limits,
            machines,
            schemas,
            origins,
            contract,
        })
    }

    /// Examples of the contract as (method, part, sender, message) for tests and vectors.
    pub fn examples(&self) -> impl Iterator<Item = (&MethodIr, Part, Option<&str>, &Value)> {
        self.methods.iter().flat_map(move |m| {
            self.contract.methods[m.wire.as_str()]
                .examples
                .iter()
                .map(move |e| (m, e.part, e.from.as_deref(), &e.message))
        })
    }
}

/// A typed trigger in a few words, for a diagram's edge.
/// A rate limit run as data, evaluated for an SDK's limiter; `None` for any other limit.
fn keyed_rate(
    c: &Contract,
    limits: &contract::Limits,
    name: &str,
    l: &contract::model::Limit,
) -> Option<KeyedRateIr> {
    use contract::model::LimitKey;
    if !l.is_keyed_rate() {
        return None;
    }
    let rate = limits.rate(name).ok()?;
    let applies = l.applies.as_ref();
    let (key, pointer) = match &l.key {
        None | Some(LimitKey::Global) => ("global", None),
        Some(LimitKey::Connection) => ("connection", None),
        Some(LimitKey::Party) => ("party", None),
        Some(LimitKey::Pointer { pointer }) => ("pointer", Some(pointer.clone())),
    };
    Some(KeyedRateIr {
        amount: rate.amount,
        per_seconds: rate.per.as_secs_f64(),
        burst: rate.burst,
        bytes: l.counts_bytes(),
        methods: applies.map(|a| a.methods.clone()).unwrap_or_default(),
        channel_methods: applies.and_then(|a| a.channel.as_ref()).map(|ch| {
            c.methods
                .iter()
                .filter(|(_, m)| &m.channel == ch)
                .map(|(n, _)| n.clone())
                .collect()
        }),
        from: applies.and_then(|a| a.from.clone()),
        key,
        pointer,
    })
}

fn scope_name(s: Option<&contract::model::Scope>) -> &'static str {
    use contract::model::Scope;
    match s {
        None | Some(Scope::Connection { .. }) => "connection",
        Some(Scope::Session) => "session",
        Some(Scope::Key { .. }) => "key",
        Some(Scope::Party { .. }) => "party",
    }
}

/// A machine's distinct typed triggers as events, and its typed transitions naming them.
fn typed_events(
    c: &Contract,
    sm: &contract::model::StateMachine,
    state_id: &dyn Fn(&str) -> String,
) -> (Vec<EventIr>, Vec<MoveIr>) {
    let mut triggers: Vec<&contract::model::Trigger> = Vec::new();
    for t in sm.transitions.iter().filter_map(|t| t.trigger.as_ref()) {
        if !triggers.contains(&t) {
            triggers.push(t);
        }
    }
    let labels = dedupe(triggers.iter().map(|t| trigger_label(t)).collect());
    let idents = dedupe(labels.iter().map(|l| pascal(l)).collect());
    let events: Vec<EventIr> = triggers
        .iter()
        .zip(labels)
        .zip(idents)
        .map(|((t, label), ident)| event_ir(c, t, label, ident))
        .collect();
    let moves = sm
        .transitions
        .iter()
        .enumerate()
        .filter_map(|(index, t)| {
            let at = triggers
                .iter()
                .position(|x| Some(*x) == t.trigger.as_ref())?;
            Some(MoveIr {
                index,
                from: state_id(&t.from),
                to: state_id(&t.to),
                event: events[at].ident.clone(),
            })
        })
        .collect();
    (events, moves)
}

fn event_ir(c: &Contract, t: &contract::model::Trigger, label: String, ident: String) -> EventIr {
    use contract::model::Trigger;
    let mut e = EventIr {
        ident,
        label,
        on: "message",
        method: None,
        kind: None,
        from: None,
        matches: Vec::new(),
        trigger: t.clone(),
    };
    match t {
        Trigger::Message {
            method,
            kind,
            from,
            matches,
        } => {
            let own = method
                .as_ref()
                .and_then(|m| c.methods.get(m))
                .map(|m| m.kind);
            e.method = method.clone();
            e.kind = kind.or(own).map(kind_wire);
            e.from = from.clone();
            e.matches = matches
                .iter()
                .map(|(p, v)| (p.clone(), v.to_string()))
                .collect();
        }
        Trigger::Timer { .. } => e.on = "timer",
        Trigger::Open { .. } => e.on = "open",
        Trigger::Close { .. } => e.on = "close",
        Trigger::Transport { .. } => e.on = "transport",
    }
    e
}

/// A kind's wire name (`request`, `response`, ...).
pub fn kind_wire(k: Kind) -> String {
    wire_name(&k)
}

/// A unit enum's name on the wire (its serde name: `request`, `KiB`), or "" for another value.
pub fn wire_name(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn refusal_ir(r: &contract::model::Refusal) -> RefusalIr {
    let a = r.action.as_ref();
    let action = a
        .and_then(|a| serde_json::to_value(a.action).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "flag".into());
    RefusalIr {
        message: trigger_label(&r.message),
        states: r.states.clone(),
        action,
        code: a.and_then(|a| a.code.as_ref()).map(Value::to_string),
        description: a
            .map(|a| a.description.clone())
            .or_else(|| r.description.clone())
            .unwrap_or_default(),
    }
}

fn ending_ir(t: &contract::model::Transition) -> Option<EndingIr> {
    let e = t.ends.as_ref()?;
    Some(EndingIr {
        transition: format!("{} → {}", t.from, t.to),
        trigger: t.trigger.as_ref().map(trigger_label),
        by: e.by.clone(),
        action: serde_json::to_value(e.action)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .map(|a| match e.steps {
                true => format!("{a}, by the machine's steps"),
                false => a,
            })
            .unwrap_or_default(),
        code: e.code.as_ref().map(Value::to_string),
        exit: e.exit.map(|x| x.to_string()),
        description: e.description.clone(),
    })
}

pub(crate) fn trigger_label(t: &contract::model::Trigger) -> String {
    use contract::model::{Kind, TransportEvent, Trigger};
    match t {
        Trigger::Message {
            method,
            kind,
            from,
            matches,
        } => {
            let mut s = method.clone().unwrap_or_else(|| "any message".into());
            match kind {
                Some(Kind::Response) => s.push_str(" response"),
                Some(Kind::Error) => s.push_str(" error"),
                _ => {}
            }
            if let Some(p) = from {
                s.push_str(&format!(" from {p}"));
            }
            for (ptr, v) in matches {
                s.push_str(&format!(" [{ptr} = {v}]"));
            }
            s
        }
        Trigger::Timer { limit } => format!("timer {limit}"),
        Trigger::Open { channel } => format!("{channel} opens"),
        Trigger::Close { channel } => format!("{channel} closes"),
        Trigger::Transport {
            channel,
            what,
            code,
        } => {
            let what = match what {
                TransportEvent::WebsocketClose => "WebSocket close",
                TransportEvent::HttpStatus => "HTTP status",
            };
            match code {
                Some(c) => format!("{channel} {what} {c}"),
                None => format!("{channel} {what}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(pascal("command.handle"), "CommandHandle");
        assert_eq!(
            pascal("notifications/tools/list_changed"),
            "NotificationsToolsListChanged"
        );
        assert_eq!(pascal("PARSE_ERROR"), "ParseError");
        assert_eq!(pascal("1m"), "V1m");
        assert_eq!(pascal("awaiting-hello"), "AwaitingHello");
        assert_eq!(pascal("JsonRpcMessage"), "JsonRpcMessage");
        assert_eq!(upper_snake("handshakeSeconds"), "HANDSHAKE_SECONDS");
        assert_eq!(upper_snake("dataFrameMax"), "DATA_FRAME_MAX");
        assert_eq!(upper_snake("heldExpiry5m"), "HELD_EXPIRY5M");
        assert_eq!(
            dedupe(vec!["Ref".into(), "A".into(), "Ref".into()]),
            vec!["Ref", "A", "Ref2"]
        );
    }
}
