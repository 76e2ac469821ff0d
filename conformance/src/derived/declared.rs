//! The declaration family, from a party's `declares` and the reactions it names:
//! - `capability.unknown`: where the played party declares and the declaration says what
//!   the other party does with a capability the contract does not list (`unknown`: rukh's
//!   extension refuses it with -32003), the suite walks its handshake up to the declaring
//!   call, sends it naming one such capability beside its example's, and expects that
//!   reaction;
//! - `capability.undeclared.<cap>`: where the implementation declares, and its declaration
//!   says what it does with a message needing a capability it left out (`undeclared`: rukh's
//!   core failing a completion that carries a commandResult it never offered), the suite
//!   walks the handshake and, when the implementation's declaration left `cap` out, sends a
//!   message of its own that needs it (a call, or its answer to the request the walk owes),
//!   and expects that reaction. An implementation that declared `cap` is not judged.

use contract::Contract;
use contract::join_pointer as join;
use contract::model::{Action, Declaration, DeclarationForm, Part};
use serde_json::Value;

use super::plan::{Plan, Step};
use super::probes::{self, Built, Reaction};
use super::{Session, cite, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, Failure, skip};

/// The played party's declaration, when it is a call the walk sends and names an
/// `unknown` reaction: the check's title and citation.
pub(super) fn unknown_applies(c: &Contract, role: &str, plan: &Plan) -> Option<(String, String)> {
    let d = c.parties.get(role)?.declares.as_ref()?;
    let a = d.unknown.as_ref()?;
    sends_at(plan, d)?;
    let title = format!(
        "a {} declaring a capability the contract does not list gets `{}`{}",
        d.method,
        probes::action_name(a.action),
        code_of(a)
    );
    let at = join("/parties", [role, "declares", "unknown"]);
    Some((title, cite(at, &a.seed)))
}

/// The step of `plan` that sends `d`'s declaring call.
fn sends_at(plan: &Plan, d: &Declaration) -> Option<usize> {
    let send = Step::Send(d.method.clone());
    (d.part == Part::Call)
        .then(|| plan.steps.iter().position(|s| *s == send))
        .flatten()
}

fn code_of(a: &Action) -> String {
    a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default()
}

pub(super) fn unknown_body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let d = (c.parties.get(&cx.role)).and_then(|p| p.declares.as_ref());
        let found = d.and_then(|d| Some((d, d.unknown.as_ref()?, sends_at(&plan, d)?)));
        let Some((d, action, step)) = found else {
            return Err(Failure::new("suite bug: no declaring call to send"));
        };
        let mut s = Session::open(cx).await?;
        if let Err(f) = s.walk_to(cx, &plan, step).await {
            return plan.unreached(f);
        }
        let mut v = s.message(cx, &d.method)?;
        let name = with_unknown(&c, d, &mut v);
        let id = s.send_value(&v).await?.unwrap_or(Value::Null);
        let what = format!(
            "a {} declaring {name}, which the contract does not list",
            d.method
        );
        judge(s, cx, action, v, vec![id, Value::Null], &what).await
    })
}

/// Write into `v`, `d`'s declaring message, its declared capabilities and one more the
/// contract does not list; that one's name. The name is one of theirs, changed
/// (`command-result/1` → `command-result/2`), so a schema holding names to a pattern
/// still takes it.
fn with_unknown(c: &Contract, d: &Declaration, v: &mut Value) -> String {
    let listed = v.pointer(&d.pointer).cloned();
    let base = match &listed {
        Some(Value::Array(a)) => a.iter().find_map(|x| x.as_str().map(String::from)),
        Some(Value::Object(o)) => o.keys().next().cloned(),
        _ => None,
    };
    let base = base.or_else(|| c.capabilities.keys().next().cloned());
    let mut name = base.unwrap_or_else(|| "conformance-unknown".into());
    // Each turn changes the name, and the contract lists finitely many.
    while c.capabilities.contains_key(&name) {
        name = super::agreements::other_than(&Value::String(name))
            .as_str()
            .map_or_else(|| "conformance-unknown".into(), String::from);
    }
    let written = match (d.form, listed) {
        (DeclarationForm::List, Some(Value::Array(mut a))) => {
            a.push(Value::String(name.clone()));
            Value::Array(a)
        }
        (DeclarationForm::List, _) => Value::Array(vec![Value::String(name.clone())]),
        (DeclarationForm::ObjectKeys, listed) => {
            let mut o = listed
                .and_then(|l| l.as_object().cloned())
                .unwrap_or_default();
            o.insert(name.clone(), Value::Object(Default::default()));
            Value::Object(o)
        }
    };
    contract::set_pointer(v, &d.pointer, written);
    name
}

/// A capability the implementation's party declares, with an `undeclared` reaction, and
/// a message the played party sends that may need it.
pub(super) struct Undeclared {
    pub cap: String,
    method: String,
    /// The played party's call, or its answer to the request the walk owes.
    part: Part,
    /// The `needs` entry asking for it; `None`: the method's own `capability`.
    need: Option<usize>,
    action: Action,
    pub title: String,
    pub seed: String,
}

/// What `role` can send that needs a capability the other party declares with an
/// `undeclared` reaction: one message per capability.
pub(super) fn undeclared_applies(c: &Contract, role: &str, plan: &Plan) -> Vec<Undeclared> {
    let mut out: Vec<Undeclared> = Vec::new();
    for (method, m) in &c.methods {
        let own = m.capability.iter().map(|cap| (cap, None));
        let needs = (m.needs.iter().enumerate())
            .flat_map(|(i, n)| n.capabilities.iter().map(move |cap| (cap, Some(i))));
        for (cap, need) in own.chain(needs) {
            let Some(owner) = c.capabilities.get(cap).map(|x| x.declared_by.as_str()) else {
                continue;
            };
            let d = c.parties.get(owner).and_then(|p| p.declares.as_ref());
            let Some(action) = d.and_then(|d| d.undeclared.clone()) else {
                continue;
            };
            let calls = m.from.iter().any(|f| f == role);
            // The walk ends owing the request: the suite's answer is its next message.
            let owes = plan.steps.last() == Some(&Step::Expect(method.clone()));
            let part = if owner == role {
                continue;
            } else if calls {
                Part::Call
            } else if need.is_some() && owes {
                Part::Result
            } else {
                continue;
            };
            if out.iter().any(|u| u.cap == *cap) || !exemplified(c, method, part, need, role) {
                continue;
            }
            let what = match part {
                Part::Call => format!("a {method}"),
                _ => format!("an answer to {method}"),
            };
            let title = format!(
                "{what} needing {cap}, which the {owner}'s declaration left out, gets `{}`{}",
                probes::action_name(action.action),
                code_of(&action)
            );
            let seed = cite(
                join("/parties", [owner, "declares", "undeclared"]),
                &action.seed,
            );
            out.push(Undeclared {
                cap: cap.clone(),
                method: method.clone(),
                part,
                need,
                action,
                title,
                seed,
            });
        }
    }
    out
}

/// Whether the contract has the played party's `part` of `method`, and a message holding
/// need `need` to take what it asks from.
fn exemplified(c: &Contract, method: &str, part: Part, need: Option<usize>, role: &str) -> bool {
    super::plan::example_of(c, method, part, role).is_some()
        && need.is_none_or(|i| holding(c, method, i).is_some())
}

/// The first example of `method` that `needs` entry `i` holds on.
fn holding<'c>(c: &'c Contract, method: &str, i: usize) -> Option<&'c Value> {
    let m = c.methods.get(method)?;
    let n = m.needs.get(i)?;
    (m.examples.iter()).map(|e| &e.message).find(|v| n.holds(v))
}

pub(super) fn undeclared_body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let subject = cx.subject.clone().unwrap_or_default();
        let u = undeclared_applies(&c, &cx.role, &plan)
            .into_iter()
            .find(|u| u.cap == subject)
            .ok_or_else(|| Failure::new(format!("suite bug: no capability {subject}")))?;
        let mut s = Session::open(cx).await?;
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        let owner = (c.capabilities.get(&u.cap)).map_or("", |x| x.declared_by.as_str());
        match declared_on(&c, &s, owner) {
            None => return skip(format!("the {owner}'s declaration never came")),
            Some(names) if names.contains(&u.cap) => {
                return skip(format!(
                    "the {owner} declared {}: run it without to check the rule",
                    u.cap
                ));
            }
            Some(_) => {}
        }
        let (mut v, ids) = match u.part {
            Part::Call => (s.message(cx, &u.method)?, None),
            part => {
                let (request, _) = (s.owed.take())
                    .filter(|(_, m)| *m == u.method)
                    .ok_or_else(|| Failure::new(format!("no {} request to answer", u.method)))?;
                (
                    s.answer_as(cx, &u.method, &request, part)?,
                    Some(Vec::new()),
                )
            }
        };
        if let Some(i) = u.need {
            needing(&c, &u.method, i, &mut v);
        }
        let ids = match ids {
            Some(none) => {
                s.peer.send(&v).await?;
                none
            }
            None => vec![s.send_value(&v).await?.unwrap_or(Value::Null), Value::Null],
        };
        let what = format!("{} needing {}, which the {owner} left out", u.method, u.cap);
        judge(s, cx, &u.action, v, ids, &what).await
    })
}

/// The capabilities `party`'s declaration on the session names, once it came.
fn declared_on(c: &Contract, s: &Session, party: &str) -> Option<Vec<String>> {
    (s.peer.log.iter().filter_map(|g| g.ok())).find_map(|m| c.declared_capabilities(party, m))
}

/// Write into `v` what `needs` entry `i` of `method` asks: each `matches` literal, and each
/// `present` member as the first example holding the entry has it.
fn needing(c: &Contract, method: &str, i: usize, v: &mut Value) {
    let Some(n) = c.methods.get(method).and_then(|m| m.needs.get(i)) else {
        return;
    };
    for (p, lit) in &n.matches {
        contract::set_pointer(v, p, lit.clone());
    }
    let from = holding(c, method, i);
    for p in &n.present {
        if let Some(x) = from.and_then(|e| e.pointer(p)) {
            contract::set_pointer(v, p, x.clone());
        }
    }
}

/// Judge the reaction to `v`, sent, as `action` says: where it ends the channel, a new
/// request of the implementation's meanwhile fails.
async fn judge(
    s: Session,
    cx: &mut Ctx,
    action: &Action,
    v: Value,
    ids: Vec<Value>,
    what: &str,
) -> Result<crate::Verdict, Failure> {
    let reaction = Reaction::Rule {
        action: action.action,
        code: action.code.clone(),
    };
    let mut b = Built::expecting(v.to_string().into_bytes(), ids, reaction);
    b.quiet = true;
    probes::judged(s, cx, &b, what, &[]).await
}
