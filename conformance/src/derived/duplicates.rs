//! The duplicate-window family, from each limit whose `duplicates` holds messages the
//! played party sends (xsession's duplicateWindow, the depot's dedupeSeconds): on a fresh
//! session, after the handshake, the suite sends one such message and waits for its
//! answer, then sends it again under another id (its `distinct` member; the very same
//! message when it has none). The second gets the limit's action: its code, where the wire
//! shows one (an error answer, or a report writing it: xsession's `dropped`/`duplicate`),
//! else nothing answers it and the next message is served.

use contract::Contract;
use contract::model::{ActionKind, Limit};
use serde_json::Value;

use super::probes::{self, Built, Reaction};
use super::shape::reports_code;
use super::{Session, cite, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, Failure, skip};

/// One check: the limit, the message it sends twice, its title and seed citation.
pub(super) struct Duplicate {
    pub limit: String,
    pub method: String,
    pub title: String,
    pub seed: String,
}

/// The duplicate windows on what `role` sends, each with a message among `staying`.
pub(super) fn applies(c: &Contract, role: &str, staying: &[String]) -> Vec<Duplicate> {
    (c.limits.iter())
        .filter_map(|(name, l)| {
            let d = l.duplicates.as_ref()?;
            let method = staying.iter().find(|m| l.applies_to(c, role, Some(m)))?;
            let (shown, _) = reaction(l)?;
            let a = l.action.as_ref()?;
            let again = match &d.distinct {
                Some(p) => format!("under another {p}"),
                None => "as it was".into(),
            };
            let code = a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
            let reported = match shown != a.action {
                true => ", reported",
                false => "",
            };
            let title = format!(
                "a {method} sent again {again} within {name} gets `{}`{code}{reported}",
                probes::action_name(a.action)
            );
            let seed = cite(contract::join_pointer("/limits", [name]), &l.seed);
            Some(Duplicate {
                limit: name.clone(),
                method: method.clone(),
                title,
                seed,
            })
        })
        .collect()
}

/// What the wire shows of the limit's action: a report placing its code is, on the wire,
/// an error answer with that code.
fn reaction(l: &Limit) -> Option<(ActionKind, Option<Value>)> {
    let a = l.action.as_ref()?;
    match (a.action, &a.code) {
        (ActionKind::Ignore, Some(code)) if reports_code(a) => {
            Some((ActionKind::ReplyError, Some(code.clone())))
        }
        (kind, code) => Some((kind, code.clone())),
    }
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let name = cx.subject.clone().unwrap_or_default();
        let c = cx.wire.contract().clone();
        let plan = plan_of(cx);
        let callable = plan.staying(&c);
        let p = applies(&c, &cx.role, &callable)
            .into_iter()
            .find(|p| p.limit == name);
        let l = c.limits.get(&name);
        let window = l.and_then(|l| Some((l.duplicates.as_ref()?, reaction(l)?)));
        let (Some(p), Some((d, (action, code)))) = (p, window) else {
            return Err(Failure::new(format!(
                "suite bug: no duplicate window {name}"
            )));
        };
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let first = s.message(cx, &p.method)?;
        let id = s.send_value(&first).await?.unwrap_or(Value::Null);
        let what = s.shape.say(&format!("the first {}", p.method));
        let answer = match s.answer(cx, &id, &what).await {
            Ok(v) => v,
            Err(f) => {
                return skip(format!(
                    "{}: without its answer the second cannot be told apart (the call check judges the answer)",
                    f.why
                ));
            }
        };
        if code.is_some() && s.shape.error_code(&answer) == code.as_ref() {
            let f = Failure::new(format!(
                "{what} was refused as a duplicate of nothing sent before"
            ));
            return Err(f.with("the answer", answer.to_string().as_bytes()));
        }
        let mut again = first.clone();
        if d.distinct.is_some() {
            again = s.numbered(again);
        }
        let bytes = again.to_string().into_bytes();
        let ids = vec![
            s.shape.id(&again).cloned().unwrap_or(Value::Null),
            Value::Null,
        ];
        let b = Built::expecting(bytes, ids, Reaction::Rule { action, code });
        // Only what the second gets is this check's; the answers' content is the call checks'.
        s.judge_answers = false;
        s.remember(cx, &b.bytes);
        b.send(&mut s.peer).await?;
        let what = s.shape.say(&format!("the same {} again", p.method));
        probes::judged(s, cx, &b, &what, &callable).await
    })
}
