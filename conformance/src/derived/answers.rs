//! The spoiled-answer family: the suite answers a request of the implementation's with an
//! answer that is both a result and an error, which no JSON-RPC message may be, and the
//! implementation reacts as the suite's own compiled `Wire` rules those bytes (rukh: the
//! invocation ends, `fail`). The request is the one the walk ends on unanswered (rukh's
//! invoke, playing the extension), or the implementation's next one (rukh's `rukh.call`,
//! playing the core). Made only where that reaction ends the channel or ignores the
//! answer: a `reply-error` would answer an answer, with no id to answer it by.

use contract::model::{ActionKind, Kind, Part};
use contract::wire::Wire;
use serde_json::Value;

use super::plan::{Plan, example_of};
use super::probes::{self, Built, Reaction};
use super::{Session, plan_of};
use crate::session::{Ctx, Incoming};
use crate::{BodyFuture, Failure};

/// What the family's one check expects, when the contract gives it one.
pub(super) struct Spoiled {
    pub action: ActionKind,
    pub code: Option<Value>,
    /// The `violations` entry the reaction comes from.
    pub pointer: String,
    pub seed: String,
}

impl Spoiled {
    pub fn title(&self) -> String {
        let code = self.code.as_ref().map(|c| format!(" {c}"));
        format!(
            "an answer with both a result and an error, to the implementation's request, gets `{}`{}",
            probes::action_name(self.action),
            code.unwrap_or_default()
        )
    }
}

/// The check, for the suite playing `role`: some request of the other party's that `role`
/// answers, a binding that can spoil its answer, and a reaction the suite can see.
pub(super) fn applies(wire: &Wire, role: &str) -> Option<Spoiled> {
    let c = wire.contract();
    let shape = super::shape::Shape::of(c)?;
    let (method, request) = c.methods.iter().find_map(|(name, m)| {
        let theirs = m.kind == Kind::Request && m.from.iter().any(|f| f != role);
        let call = m.examples.iter().find(|e| e.part == Part::Call);
        let request = call?.message.clone();
        (theirs && example_of(c, name, Part::Result, role).is_some())
            .then(|| (name.clone(), request))
    })?;
    let mut v = example_of(c, &method, Part::Result, role)?;
    shape.answer_to(&mut v, &request, None);
    shape.spoil(&mut v, first_code(c)?)?;
    let mut violation = wire
        .decode(
            &shape.channel,
            role,
            v.to_string().as_bytes(),
            Some(&method),
        )
        .err()?;
    let action = violation.action?;
    let seen = matches!(
        action,
        ActionKind::Fail | ActionKind::Close | ActionKind::DropConnection | ActionKind::Ignore
    );
    seen.then(|| Spoiled {
        action,
        code: violation.code.clone(),
        pointer: format!("/violations/{}", probes::entry(c, violation.class)),
        seed: violation.seed.take().unwrap_or_default(),
    })
}

/// An error code the catalog holds, for the spoiled answer's error member.
fn first_code(c: &contract::Contract) -> Option<Value> {
    c.errors.first().map(|e| e.code.clone())
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let spoiled = applies(&cx.wire, &cx.role)
            .ok_or_else(|| Failure::new("suite bug: no spoiled-answer check"))?;
        let plan = plan_of(cx);
        let mut s = match Session::open(cx).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        let Some((method, request)) = request(&mut s, cx, &plan).await? else {
            return crate::skip("the implementation sent no request to answer");
        };
        let c = cx.wire.contract().clone();
        let mut v = s.answer_for(cx, &method, &request)?;
        let code = first_code(&c).unwrap_or(Value::Null);
        s.shape.spoil(&mut v, code);
        let reaction = Reaction::Rule {
            action: spoiled.action,
            code: spoiled.code.clone(),
        };
        let b = Built::expecting(v.to_string().into_bytes(), Vec::new(), reaction);
        b.send(&mut s.peer).await?;
        let what = format!("an answer to {method} with both a result and an error");
        let callable = plan.callable(&c);
        probes::judged(s, cx, &b, &what, &callable).await
    })
}

/// The implementation's request to answer: the one the walk ends on, or its next one
/// (its other messages meanwhile are answered as any other).
async fn request(
    s: &mut Session,
    cx: &Ctx,
    plan: &Plan,
) -> Result<Option<(String, Value)>, Failure> {
    let answerable = |m: &str| example_of(cx.wire.contract(), m, Part::Result, &cx.role).is_some();
    if let Some((request, m)) = s.owed.take().filter(|(_, m)| answerable(m)) {
        return Ok(Some((m, request)));
    }
    let until = cx.soon();
    loop {
        match s.peer.next(until).await {
            Incoming::Control(got) => {
                let call = got
                    .ok()
                    .filter(|m| m.kind == Kind::Request && m.id.is_some());
                if let Some(m) = call.filter(|m| m.method.as_deref().is_some_and(answerable)) {
                    let method = m.method.clone().unwrap_or_default();
                    return Ok(Some((method, m.value.clone())));
                }
                if let Some(f) = plan.out_of_place(cx.wire.contract(), call, &plan.target) {
                    return Err(f.with("the message", &got.raw));
                }
            }
            Incoming::Timeout | Incoming::ControlEnd(_) => return Ok(None),
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
}
