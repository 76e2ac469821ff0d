//! The typed context a template target renders from, built once per contract from the IR.
//!
//! Templates see it as JSON (handlebars serialises it); Rust views (each target's own,
//! under `target`) read the same structs, so a name or a cap is looked up once here and
//! never dug out of a `serde_json::Value` again.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value;

use contract::model::{
    Agreement, Binding, Capability, Channel, Claim, Credit, Cue, Example, Extension, FileSpec,
    Framing, JsonRules, Note, Trace, VersionInfo, Violations,
};

use crate::ir::{IdRulesIr, Ir, LimitIr, MachineIr, MethodIr, TableIr};
use crate::types::{TypeDef, TypeModel};

/// What one contract's templates see: the IR's names and values, the contract's own
/// sections, and the run's input path, package and target view.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Context<'a> {
    /// The IR it was built from, for target views.
    #[serde(skip)]
    pub ir: &'a Ir,
    pub name: &'a str,
    pub module: &'a str,
    pub title: &'a str,
    pub version: &'a str,
    pub source: &'a str,
    pub description: &'a str,
    pub versions: &'a [VersionInfo],
    pub parties: Vec<PartyView<'a>>,
    pub channels: Vec<ChannelView<'a>>,
    pub capabilities: &'a IndexMap<String, Capability>,
    pub methods: &'a [MethodIr],
    /// Each method's examples, by wire name.
    pub method_examples: IndexMap<&'a str, &'a [Example]>,
    pub violations: &'a Violations,
    pub errors: Option<&'a TableIr>,
    pub tables: &'a [TableIr],
    pub limits: &'a [LimitIr],
    /// Each limit as Rust constant text (`16 MiB`), in `limits` order.
    pub limit_texts: Vec<String>,
    pub engine_limits: Vec<crate::docs::EngineLimit>,
    pub id_rule_texts: Vec<crate::docs::IdRuleText>,
    pub declarations: Vec<crate::docs::DeclarationText>,
    pub relations: Vec<RelationView<'a>>,
    pub machines: &'a [MachineIr],
    pub id_rules: &'a [IdRulesIr],
    pub credit: &'a IndexMap<String, Credit>,
    pub claims: &'a IndexMap<String, Claim>,
    pub agreements: &'a IndexMap<String, Agreement>,
    pub cues: &'a IndexMap<String, Cue>,
    pub extensions: &'a IndexMap<String, Extension>,
    pub trace: Option<&'a Trace>,
    pub files: &'a IndexMap<String, FileSpec>,
    pub notes: &'a [Note],
    /// The named types, as the non-Rust targets render them.
    pub types: Vec<TypeDef>,
    /// The contract itself, as JSON text (SDKs embed it).
    pub contract_json: String,
    /// The contract's path as the user gave it (headers name it).
    pub input: &'a str,
    /// The package options' names.
    pub package: &'a crate::package::PackageContext<'a>,
    /// The target's own view, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Value>,
}

/// A party.
#[derive(Serialize)]
pub struct PartyView<'a> {
    pub ident: &'a str,
    pub name: &'a str,
    pub description: &'a str,
}

/// A relation between limits, with its expressions as text.
#[derive(Serialize)]
pub struct RelationView<'a> {
    pub left: String,
    pub op: &'a contract::model::RelOp,
    pub right: String,
    pub description: &'a str,
    pub seed: &'a str,
}

/// A limit a channel names, with its value in base units (`bytes` or `seconds`).
#[derive(Serialize)]
pub struct LimitRef<'a> {
    pub limit: &'a str,
    pub ident: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// A channel, with the rules an SDK enforces on its messages beyond their types.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelView<'a> {
    pub key: &'a str,
    pub ident: &'a str,
    /// Named type of every message on it, if it carries JSON.
    pub message: Option<&'a str>,
    pub description: &'a str,
    pub transports: &'a [String],
    pub connects: Option<&'a str>,
    pub framing: &'a Framing,
    /// The limit capping one frame (its payload, line, message, or a binary frame).
    pub cap: Option<LimitRef<'a>>,
    /// The framing's deadline for one frame, from its first byte.
    pub frame_deadline: Option<LimitRef<'a>>,
    pub json: Option<&'a JsonRules>,
    pub binding: Option<&'a Binding>,
    /// What the listener refuses at the WebSocket upgrade.
    pub upgrade: Option<&'a contract::model::Upgrade>,
    /// How the dialer comes back when the channel ends.
    pub redial: Option<&'a contract::model::Redial>,
    /// The ends it comes back after, in words: close codes with their names, or a break.
    pub redial_after: String,
    pub seed: &'a str,
    /// `None` when a plain decode is all the channel needs.
    pub wire_rules: Option<WireRules<'a>>,
    /// The channel's methods with a frame cap of their own, in contract order.
    pub method_caps: Vec<MethodCap<'a>>,
    /// Where a frame names its method, as unescaped member names (JSON-RPC: `method`).
    pub method_at: Option<Vec<String>>,
    /// Where a reply names the request it answers (JSON-RPC: `id`).
    pub reply_at: Option<Vec<String>>,
}

/// A channel's JSON rules, each cap a limit. Set when the channel's `json` section is
/// strict, caps depth or items or says noNull, or when a method of it has a cap of its own.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WireRules<'a> {
    pub strict: bool,
    pub object_only: bool,
    pub max_depth: Option<LimitRef<'a>>,
    pub max_items: Option<LimitRef<'a>>,
    pub no_null: bool,
}

/// A channel's JSON rules as a target spells them: booleans in its words, caps as its
/// expressions, and one line of doc text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpelledRules {
    pub no_null: &'static str,
    pub strict: &'static str,
    pub object_only: &'static str,
    pub max_depth: String,
    pub max_items: String,
    pub doc: String,
}

/// How a target spells [`SpelledRules`].
pub struct Spelling {
    /// Its true and false.
    pub yes_no: (&'static str, &'static str),
    /// Its word for a cap the channel does not set.
    pub none: &'static str,
    /// A cap as an expression of the generated code.
    pub cap: fn(&LimitRef) -> String,
    /// A cap's expression as doc text shows it.
    pub quote: fn(&str) -> String,
}

impl WireRules<'_> {
    /// The rules in `s`'s words.
    pub fn spelled(&self, s: &Spelling) -> SpelledRules {
        let word = |b: bool| if b { s.yes_no.0 } else { s.yes_no.1 };
        let depth = self.max_depth.as_ref().map(s.cap);
        let items = self.max_items.as_ref().map(s.cap);
        let mut doc = Vec::new();
        if self.strict {
            doc.push("the strict profile".to_string());
        }
        if self.object_only {
            doc.push("an object at the top".into());
        }
        if let Some(d) = &depth {
            doc.push(format!("depth at most {}", (s.quote)(d)));
        }
        if let Some(i) = &items {
            doc.push(format!("at most {} members plus elements", (s.quote)(i)));
        }
        if self.no_null {
            doc.push("no null".into());
        }
        SpelledRules {
            no_null: word(self.no_null),
            strict: word(self.strict),
            object_only: word(self.object_only),
            max_depth: depth.unwrap_or_else(|| s.none.into()),
            max_items: items.unwrap_or_else(|| s.none.into()),
            doc: match doc.is_empty() {
                true => "no JSON rules of its own".into(),
                false => doc.join(", "),
            },
        }
    }
}

/// A method's own frame cap. `ignore`: an over-cap request or notification is dropped and
/// counted (`overMaxPayload: ignore`).
#[derive(Serialize)]
pub struct MethodCap<'a> {
    pub method: &'a str,
    pub limit: &'a str,
    pub ident: &'a str,
    pub ignore: bool,
}

impl<'a> Context<'a> {
    /// The context of one contract, as given at `input`, packaged as `package` says.
    pub fn build(
        ir: &'a Ir,
        input: &'a str,
        package: &'a crate::package::PackageContext<'a>,
    ) -> Context<'a> {
        let c = &ir.contract;
        Context {
            ir,
            name: &c.name,
            module: &ir.module,
            title: &c.title,
            version: &c.version,
            source: &c.source,
            description: &c.description,
            versions: &c.versions,
            parties: (ir.parties.iter())
                .map(|(ident, name)| PartyView {
                    ident,
                    name,
                    description: &c.parties[name.as_str()].description,
                })
                .collect(),
            channels: (ir.channels.iter())
                .map(|ch| ChannelView::build(ir, ch))
                .collect(),
            capabilities: &c.capabilities,
            methods: &ir.methods,
            method_examples: (c.methods.iter())
                .map(|(k, m)| (k.as_str(), m.examples.as_slice()))
                .collect(),
            violations: &c.violations,
            errors: ir.errors.as_ref(),
            tables: &ir.tables,
            limits: &ir.limits,
            limit_texts: ir.limits.iter().map(crate::rust::limit_text).collect(),
            engine_limits: crate::docs::engine_limits(c),
            id_rule_texts: crate::docs::id_rules(c),
            declarations: crate::docs::declarations(c),
            relations: c.relations.iter().map(RelationView::of).collect(),
            machines: &ir.machines,
            id_rules: &ir.id_rules,
            credit: &c.credit,
            claims: &c.claims,
            agreements: &c.agreements,
            cues: &c.cues,
            extensions: &c.extensions,
            trace: c.trace.as_ref(),
            files: &c.files,
            notes: &c.notes,
            types: TypeModel::build(&ir.schemas).types,
            contract_json: serde_json::to_string(c).unwrap_or_default(),
            input,
            package,
            target: None,
        }
    }
}

impl<'a> RelationView<'a> {
    fn of(r: &'a contract::model::Relation) -> RelationView<'a> {
        RelationView {
            left: contract::check::show(&r.left),
            op: &r.op,
            right: contract::check::show(&r.right),
            description: &r.description,
            seed: &r.seed,
        }
    }
}

/// The evaluated limit `name`, if the IR has it.
fn limit<'a>(ir: &'a Ir, name: &str) -> Option<&'a LimitIr> {
    ir.limits.iter().find(|l| l.key == name)
}

/// A channel's redial ends as the docs name them: "close `4008` DRAINING or a transport
/// break".
fn redial_after(c: &contract::Contract, ch: &contract::model::Channel) -> String {
    use contract::model::{CodeKind, RedialAfter};
    let name = |code: u16| c.code_of_kind(CodeKind::CloseCode, code)?.name.clone();
    let ends = ch.redial.iter().flat_map(|r| &r.after);
    let mut words: Vec<String> = ends
        .map(|a| match a {
            RedialAfter::Close(code) => match name(*code) {
                Some(n) => format!("close `{code}` {n}"),
                None => format!("close `{code}`"),
            },
            RedialAfter::Break(_) => "a transport break".into(),
        })
        .collect();
    match words.pop() {
        Some(last) if !words.is_empty() => format!("{} or {last}", words.join(", ")),
        Some(last) => last,
        None => String::new(),
    }
}

fn plain_ref(l: &LimitIr) -> LimitRef<'_> {
    LimitRef {
        limit: &l.key,
        ident: &l.ident,
        bytes: None,
        seconds: None,
    }
}

impl<'a> ChannelView<'a> {
    fn build(ir: &'a Ir, ch: &'a crate::ir::ChannelIr) -> ChannelView<'a> {
        let model = &ir.contract.channels[ch.key.as_str()];
        let cap_name = match &model.framing {
            Framing::Binary { max_frame, .. } => max_frame.as_deref(),
            f => f.payload_cap().map(|(_, l)| l),
        };
        let cap = cap_name.and_then(|n| limit(ir, n)).map(|l| LimitRef {
            bytes: Some(l.base as u64),
            ..plain_ref(l)
        });
        let deadline = match &model.framing {
            Framing::LengthPrefixed { frame_deadline, .. }
            | Framing::HeaderDelimited { frame_deadline, .. } => frame_deadline.as_deref(),
            _ => None,
        };
        let frame_deadline = deadline.and_then(|n| limit(ir, n)).map(|l| LimitRef {
            seconds: Some(l.base),
            ..plain_ref(l)
        });
        let method_caps = method_caps(ir, &ch.key);
        let (method_at, reply_at) = addresses(model);
        ChannelView {
            key: &ch.key,
            ident: &ch.ident,
            message: ch.message.as_deref(),
            description: &model.description,
            transports: &model.transports,
            connects: model.connects.as_deref(),
            framing: &model.framing,
            cap,
            frame_deadline,
            json: model.json.as_ref(),
            binding: model.binding.as_ref(),
            upgrade: model.upgrade.as_ref(),
            redial: model.redial.as_ref(),
            redial_after: redial_after(&ir.contract, model),
            seed: &model.seed,
            wire_rules: wire_rules(ir, model, !method_caps.is_empty()),
            method_caps,
            method_at,
            reply_at,
        }
    }
}

/// The channel's methods with a cap of their own; a cap naming no limit is left out.
fn method_caps<'a>(ir: &'a Ir, key: &str) -> Vec<MethodCap<'a>> {
    use contract::model::ActionKind;
    (ir.contract.methods.iter())
        .filter(|(_, m)| m.channel == key)
        .filter_map(|(name, m)| {
            let l = limit(ir, m.max_payload.as_deref()?)?;
            Some(MethodCap {
                method: name,
                limit: &l.key,
                ident: &l.ident,
                ignore: m.over_max_payload == Some(ActionKind::Ignore),
            })
        })
        .collect()
}

/// Where a frame names its method and, for a reply, the request it answers.
fn addresses(model: &Channel) -> (Option<Vec<String>>, Option<Vec<String>>) {
    let segments = |p: &str| -> Vec<String> {
        p.split('/')
            .skip(1)
            .map(|k| k.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    match &model.binding {
        Some(Binding::Jsonrpc { .. }) => (Some(vec!["method".into()]), Some(vec!["id".into()])),
        Some(Binding::Envelope {
            method,
            correlation,
            ..
        }) => (Some(segments(method)), correlation.as_deref().map(segments)),
        _ => (None, None),
    }
}

fn wire_rules<'a>(ir: &'a Ir, model: &'a Channel, method_caps: bool) -> Option<WireRules<'a>> {
    let cap = |name: &Option<String>| name.as_deref().and_then(|n| limit(ir, n)).map(plain_ref);
    let rules = match &model.json {
        Some(j) => WireRules {
            strict: j.strict,
            object_only: j.object_only,
            max_depth: cap(&j.max_depth),
            max_items: cap(&j.max_items),
            no_null: j.no_null,
        },
        None => WireRules {
            strict: false,
            object_only: false,
            max_depth: None,
            max_items: None,
            no_null: false,
        },
    };
    let any = rules.strict
        || rules.no_null
        || rules.max_depth.is_some()
        || rules.max_items.is_some()
        || method_caps;
    any.then_some(rules)
}
