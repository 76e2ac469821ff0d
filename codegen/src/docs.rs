//! The Markdown docs target: one page per contract, rendered from
//! `codegen/templates/docs/`. The view (`view`, the template's `target`) draws byte
//! diagrams and Mermaid state diagrams and spells each type's rows; this file spells
//! types, and the engine's limits and id rules as the page's text; the templates lay
//! out the page.

use handlebars::{Handlebars, handlebars_helper};
use serde::Deserialize;
use serde::Serialize;

use crate::sdk::Template;
use crate::types::TypeRef;

mod view;
pub use view::view;

/// The built-in docs templates.
/// The docs target.
pub const TARGET: crate::sdk::Target = crate::sdk::Target {
    lang: "docs",
    templates: TEMPLATES,
    register,
    view,
};

pub const TEMPLATES: &[Template] = &[
    (
        "{{module}}.md.hbs",
        include_str!("../templates/docs/{{module}}.md.hbs"),
    ),
    (
        "README.md.hbs",
        include_str!("../templates/docs/README.md.hbs"),
    ),
    (
        "partials/behaviour.hbs",
        include_str!("../templates/docs/partials/behaviour.hbs"),
    ),
    (
        "partials/channels.hbs",
        include_str!("../templates/docs/partials/channels.hbs"),
    ),
    (
        "partials/machines.hbs",
        include_str!("../templates/docs/partials/machines.hbs"),
    ),
    (
        "partials/methods.hbs",
        include_str!("../templates/docs/partials/methods.hbs"),
    ),
    (
        "partials/rules.hbs",
        include_str!("../templates/docs/partials/rules.hbs"),
    ),
];

/// A type as Markdown, linking named types to their section.
pub fn md_type(t: &TypeRef) -> String {
    match t {
        TypeRef::Named { name } => format!("[`{name}`](#type-{})", name.to_lowercase()),
        TypeRef::String => "string".into(),
        TypeRef::Integer { min, max } => match (min, max) {
            (None, None) => "integer".into(),
            (Some(a), None) => format!("integer ≥ {a}"),
            (None, Some(b)) => format!("integer ≤ {b}"),
            (Some(a), Some(b)) => format!("integer {a}…{b}"),
        },
        TypeRef::Number => "number".into(),
        TypeRef::Boolean => "boolean".into(),
        TypeRef::Null => "null".into(),
        TypeRef::Any => "any".into(),
        TypeRef::Array { items } => format!("array of {}", md_type(items)),
        TypeRef::Map { values } => format!("object of {}", md_type(values)),
        TypeRef::Literal { value } => format!("`{value}`"),
        TypeRef::Nullable { inner } => format!("{} or null", md_type(inner)),
    }
}

handlebars_helper!(md_type_helper: |v: Json| {
    TypeRef::deserialize(v).map(|t| md_type(&t)).unwrap_or_else(|_| "?".into())
});

/// Register the docs helpers.
pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("md_type", Box::new(md_type_helper));
}

/// An action as docs text: `close 4001`, `reply-error "protocol.frame_too_large"`.
fn action_text(a: &contract::model::Action) -> String {
    let kind = serde_json::to_value(a.action)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let text = match &a.code {
        Some(code) => format!("{kind} `{code}`"),
        None => kind,
    };
    match &a.reason {
        Some(r) => format!("{text} naming `{r}`"),
        None => text,
    }
}

fn triggers_text(ts: &[contract::model::Trigger]) -> String {
    ts.iter()
        .map(|t| format!("`{}`", crate::ir::trigger_label(t)))
        .collect::<Vec<_>>()
        .join(" or ")
}

/// One row of the engine's limits table (`—` where a column says nothing).
#[derive(Serialize)]
pub struct EngineLimit {
    pub key: String,
    pub clock: String,
    pub applies: String,
    pub per: String,
    pub reaction: String,
}

/// A party's request-id rules, and what a breach gets.
#[derive(Serialize)]
pub struct IdRuleText {
    pub party: String,
    pub rules: String,
    pub breach: String,
}

/// The limits an engine runs from their machine form, one row each for the docs page:
/// the clock (what starts, restarts and stops it), the messages it applies to, what it is
/// kept per, and the reaction (what is sent, what is done). Limits with prose only are
/// left out: the table above says all there is.
pub fn engine_limits(c: &contract::Contract) -> Vec<EngineLimit> {
    use contract::model::{LimitCounts, LimitKey};
    let dash = |s: String| if s.is_empty() { "—".to_string() } else { s };
    c.limits
        .iter()
        .filter_map(|(key, l)| {
            let mut clock = Vec::new();
            for k in &l.carried {
                clock.push(carrier_text(k));
            }
            if let Some(t) = &l.start {
                clock.push(format!(
                    "starts at {}",
                    triggers_text(std::slice::from_ref(t))
                ));
            }
            if !l.restart.is_empty() {
                clock.push(format!("starts afresh at {}", triggers_text(&l.restart)));
            }
            if !l.stop.is_empty() {
                clock.push(format!("stops at {}", triggers_text(&l.stop)));
            }
            let applies = l.applies.as_ref().map(|a| {
                let mut s = match a.methods.as_slice() {
                    [] => "any message".to_string(),
                    m => m
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                if let Some(ch) = &a.channel {
                    s.push_str(&format!(" on `{ch}`"));
                }
                if let Some(p) = &a.from {
                    s.push_str(&format!(" from {p}"));
                }
                s
            });
            let per = match (&l.key, l.counts) {
                (Some(LimitKey::Pointer { pointer }), _) => format!("the value at `{pointer}`"),
                (Some(LimitKey::Connection), _) => "connection".into(),
                (Some(LimitKey::Party), _) => "sending party".into(),
                (Some(LimitKey::Global), _) => "one for all".into(),
                (None, Some(LimitCounts::OpenConnections)) => {
                    "counts open connections per listener".into()
                }
                (None, Some(LimitCounts::PendingRequests)) => {
                    "counts requests awaiting an answer, per sender and connection".into()
                }
                (None, None) => match &l.duplicates {
                    Some(d) => duplicates_text(d),
                    None => String::new(),
                },
            };
            let mut reaction = Vec::new();
            if let Some(m) = &l.sends {
                reaction.push(format!("sends `{m}`"));
            }
            if let Some(a) = &l.action {
                reaction.push(action_text(a));
            }
            if let Some(caps) = l.caps {
                reaction.push(format!("holds for {}", crate::ir::wire_name(&caps)));
            }
            let machine =
                !clock.is_empty() || applies.is_some() || !per.is_empty() || !reaction.is_empty();
            machine.then(|| EngineLimit {
                key: key.clone(),
                clock: dash(clock.join("; ")),
                applies: dash(applies.unwrap_or_default()),
                per: dash(per),
                reaction: dash(reaction.join("; ")),
            })
        })
        .collect()
}

/// Each party's request-id rules as one line of docs text, for the parties that have them.
pub fn id_rules(c: &contract::Contract) -> Vec<IdRuleText> {
    c.parties
        .iter()
        .filter_map(|(party, p)| {
            let r = p.ids.as_ref()?;
            let mut rules = Vec::new();
            if let Some(pre) = &r.prefix {
                rules.push(format!("strings starting `{pre}`, then the number"));
            }
            if let Some(n) = r.start {
                rules.push(format!("from {n}"));
            }
            for (on, what) in [
                (r.increasing, "increasing"),
                (r.gapless, "gapless"),
                (r.unique, "never reused in a session"),
            ] {
                if on {
                    rules.push(what.to_string());
                }
            }
            if let Some(l) = &r.max_pending {
                rules.push(format!("at most `{l}` awaiting an answer"));
            }
            let breach = r
                .action
                .as_ref()
                .map(|a| format!("{}: {}", action_text(a), a.description))
                .unwrap_or_else(|| "reported, not acted on".into());
            Some(IdRuleText {
                party: party.clone(),
                rules: rules.join(", "),
                breach,
            })
        })
        .collect()
}

/// A party's capability declaration, and what a declaration naming an unknown capability
/// and a message needing one it left out get.
#[derive(Serialize)]
pub struct DeclarationText {
    pub party: String,
    pub place: String,
    pub unknown: String,
    pub undeclared: String,
}

/// Each party's capability declaration as docs text, for the parties that declare.
pub fn declarations(c: &contract::Contract) -> Vec<DeclarationText> {
    let said = |a: Option<&contract::model::Action>, none: &str| {
        a.map(|a| format!("{}: {}", action_text(a), a.description))
            .unwrap_or_else(|| none.into())
    };
    c.parties
        .iter()
        .filter_map(|(party, p)| {
            let d = p.declares.as_ref()?;
            let part = serde_json::to_value(d.part).ok();
            let part = part.as_ref().and_then(|v| v.as_str()).unwrap_or_default();
            Some(DeclarationText {
                party: party.clone(),
                place: format!("`{}` {part}, at `{}`", d.method, d.pointer),
                unknown: said(d.unknown.as_ref(), "—"),
                undeclared: said(d.undeclared.as_ref(), "reported, not acted on"),
            })
        })
        .collect()
}

/// Where the wire carries a limit's value for a connection.
fn carrier_text(k: &contract::model::LimitCarrier) -> String {
    let which = match k.kind {
        Some(kind) => format!("`{}` {}", k.method, kind.name()),
        None => format!("`{}`", k.method),
    };
    if k.repeats {
        return format!("value repeated by {which} at `{}`", k.pointer);
    }
    let lower = if k.lower_only {
        ", which may only lower it"
    } else {
        ""
    };
    format!("value set by {which} at `{}`{lower}", k.pointer)
}

/// A duplicate window's key: the values that make two messages the same, and the id under
/// which one sent again is no duplicate of itself.
fn duplicates_text(d: &contract::model::Duplicates) -> String {
    let same: Vec<String> = d.same.iter().map(|p| format!("`{p}`")).collect();
    let mut s = format!("a duplicate: the same values at {}", same.join(", "));
    if let Some(p) = &d.distinct {
        s.push_str(&format!(" under another `{p}`"));
    }
    s
}
