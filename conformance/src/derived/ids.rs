//! The request-id family. A request of the played party breaking its own id rule
//! (`ids.reuse`, `ids.gap`, `ids.prefix`) gets the reaction that rule declares; an answer
//! to an id the implementation never issued (`ids.unissued`) gets the reaction of the
//! implementation's rule, as the policy engine rules it (`ids.unknown-answer`).
//!
//! An unissued answer is judged only where its reaction ends the channel or ignores the
//! answer: a `reply-error` would answer an answer, which no binding gives an id to answer
//! with, so what follows is left to the implementation (recorded in docs/conformance.md).
//! The implementation's own ids are not probed here: `behaviour` runs the same rules on
//! every request it sends.

use contract::Contract;
use contract::join_pointer as join;
use contract::model::{ActionKind, IdRules, Kind, Part};
use serde_json::Value;

use super::plan::{example_of, id_prefix, id_value};
use super::{Session, cite, plan_of, probes};
use crate::session::Ctx;
use crate::{BodyFuture, Failure};

/// The number an unissued answer's id carries: far past what any check issues.
const UNISSUED: u64 = 999_999;

/// A request id that breaks a party's id rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdProbe {
    /// The id of the request just answered (`unique`).
    Reuse,
    /// The next id but one (`gapless`).
    Gap,
    /// The other party's prefix (`prefix`).
    Prefix,
    /// An answer to an id the implementation never issued.
    Unissued,
}

impl IdProbe {
    const ALL: [IdProbe; 4] = [
        IdProbe::Reuse,
        IdProbe::Gap,
        IdProbe::Prefix,
        IdProbe::Unissued,
    ];

    fn name(self) -> &'static str {
        match self {
            IdProbe::Reuse => "ids.reuse",
            IdProbe::Gap => "ids.gap",
            IdProbe::Prefix => "ids.prefix",
            IdProbe::Unissued => "ids.unissued",
        }
    }

    fn what(self, role: &str, other: &str) -> String {
        match self {
            IdProbe::Reuse => format!("a request from the {role} reusing an id"),
            IdProbe::Gap => format!("a request from the {role} skipping an id"),
            IdProbe::Prefix => format!("a request from the {role} with another id prefix"),
            IdProbe::Unissued => format!("an answer to an id the {other} never issued"),
        }
    }

    /// The party whose rule the probe breaks.
    fn owner<'a>(self, role: &'a str, other: &'a str) -> &'a str {
        match self {
            IdProbe::Unissued => other,
            _ => role,
        }
    }

    fn applies(self, c: &Contract, ids: &IdRules, (role, other): (&str, &str)) -> bool {
        match self {
            IdProbe::Reuse => ids.unique,
            IdProbe::Gap => ids.gapless,
            IdProbe::Prefix => ids.prefix.is_some(),
            IdProbe::Unissued => asked(c, role, other).is_some(),
        }
    }
}

/// A request of `other`'s the suite, playing `role`, can answer: one with a call example
/// of `other`'s and a result example of `role`'s.
fn asked(c: &Contract, role: &str, other: &str) -> Option<String> {
    c.methods
        .iter()
        .filter(|(_, m)| m.kind == Kind::Request && m.from.iter().any(|f| f == other))
        .map(|(n, _)| n)
        .find(|n| {
            example_of(c, n, Part::Call, other).is_some()
                && example_of(c, n, Part::Result, role).is_some()
        })
        .cloned()
}

/// The reaction the owning party's id rule prescribes for `probe`, when the suite can see it.
fn id_rule(
    c: &Contract,
    parties: (&str, &str),
    probe: IdProbe,
) -> Option<(ActionKind, Option<Value>)> {
    let owner = probe.owner(parties.0, parties.1);
    let ids = c.parties.get(owner)?.ids.as_ref()?;
    let a = ids
        .action
        .as_ref()
        .filter(|_| probe.applies(c, ids, parties))?;
    match (probe, a.action, &a.code) {
        (_, ActionKind::ReplyError, None) | (IdProbe::Unissued, ActionKind::ReplyError, _) => None,
        (_, kind, code) => Some((kind, code.clone())),
    }
}

/// The id family's checks for `role`: name, title and citation.
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(&'static str, String, String)> {
    let other = crate::other_party(c, role).unwrap_or("other party");
    let mut out = Vec::new();
    for probe in IdProbe::ALL {
        let Some((action, code)) = id_rule(c, (role, other), probe) else {
            continue;
        };
        let code = code.map(|c| format!(" {c}")).unwrap_or_default();
        let title = format!(
            "{} gets `{}`{code}",
            probe.what(role, other),
            probes::action_name(action)
        );
        let owner = probe.owner(role, other);
        let seed = c.parties[owner]
            .ids
            .as_ref()
            .and_then(|i| i.action.as_ref())
            .map(|a| cite(join("/parties", [owner, "ids"]), &a.seed))
            .unwrap_or_default();
        out.push((probe.name(), title, seed));
    }
    out
}

/// The id `probe` sends after the session answered `last`: the same, one skipped, the
/// next number with another party's prefix (none when no other party has one), or for an
/// answer a number the implementation never reached.
fn probe_id(c: &Contract, s: &mut Session, cx: &Ctx, probe: IdProbe, last: &Value) -> Value {
    let other_prefix = || {
        c.parties
            .get(&cx.other)
            .and_then(|p| p.ids.as_ref()?.prefix.clone())
    };
    match probe {
        IdProbe::Reuse => last.clone(),
        IdProbe::Gap => {
            s.take_id();
            s.take_id()
        }
        IdProbe::Prefix => id_value(other_prefix().as_deref(), s.next + 1),
        IdProbe::Unissued => id_value(id_prefix(c, &cx.other).as_deref(), UNISSUED),
    }
}

/// The bad message `probe` sends with `id`, and what it is called in reports.
fn bad_message(
    c: &Contract,
    s: &mut Session,
    cx: &Ctx,
    probe: IdProbe,
    (method, id): (&str, &Value),
) -> Result<(Value, String), Failure> {
    if probe != IdProbe::Unissued {
        let mut bad = s.message(cx, method)?;
        s.shape.set_id(&mut bad, id.clone());
        return Ok((bad, format!("{method} with id {id}")));
    }
    let asked = asked(c, &cx.role, &cx.other)
        .ok_or_else(|| Failure::new("suite bug: no request of the implementation's to answer"))?;
    let mut request = example_of(c, &asked, Part::Call, &cx.other)
        .ok_or_else(|| Failure::new(format!("the contract has no call example of {asked}")))?;
    s.shape.set_id(&mut request, id.clone());
    let answer = s.answer_for(cx, &asked, &request)?;
    Ok((answer, format!("an answer to {asked} {id}")))
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let name = cx.subject.clone().unwrap_or_default();
        let probe = IdProbe::ALL.into_iter().find(|p| p.name() == name);
        let parties = (cx.role.as_str(), cx.other.as_str());
        let rule = probe.and_then(|p| Some((p, id_rule(&c, parties, p)?)));
        let (probe, (action, code)) =
            rule.ok_or_else(|| Failure::new(format!("suite bug: no id rule for {name}")))?;
        let callable = plan.staying(&c);
        let method = callable
            .first()
            .ok_or_else(|| Failure::new("no request to send after the handshake"))?;
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        // Answered right before the probe: an end it would have reached anyway is no evidence.
        let last = s.send(cx, method).await?.unwrap_or(Value::Null);
        s.answer(cx, &last, method).await?;
        let id = probe_id(&c, &mut s, cx, probe, &last);
        let (bad, what) = bad_message(&c, &mut s, cx, probe, (method, &id))?;
        s.peer.send_raw(bad.to_string().as_bytes()).await?;
        let b = probes::Built::expecting(
            bad.to_string().into_bytes(),
            vec![id.clone(), Value::Null],
            probes::Reaction::Rule { action, code },
        );
        let what = format!("{what} after {last}");
        probes::judged(s, cx, &b, &what, &callable).await
    })
}
