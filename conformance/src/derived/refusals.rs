//! The refusal family: a request of the played party's that the lifecycle machine's
//! `refusals` name in the state the walk ends in (rukh's second `rukh.invoke` in
//! `Running`) gets the refusal's action there: its error, or the channel's end, never
//! service. Refusals in states the walk does not reach, and the other party's (judged by
//! `behaviour`, which runs the same machine), are not probed here.

use contract::Contract;
use contract::join_pointer as join;
use contract::model::{Action, ActionKind, Kind, Trigger};
use serde_json::Value;

use super::plan::{Plan, example, seen_first};
use super::{Session, cite, expect_code, plan_of, probes};
use crate::session::Ctx;
use crate::{BodyFuture, Failure};

/// One refusal the suite can provoke.
pub(super) struct RefusalProbe {
    /// Its index in the machine's `refusals` (the check's subject).
    pub index: usize,
    pub machine: String,
    pub method: String,
    /// The state the walk ends in, where the refusal holds.
    pub state: String,
    pub action: Action,
}

impl RefusalProbe {
    pub fn title(&self) -> String {
        let code = self.action.code.as_ref();
        let code = code.map(|c| format!(" {c}")).unwrap_or_default();
        format!(
            "{} in `{}` gets the {} machine's refusal `{}`{code}",
            self.method,
            self.state,
            self.machine,
            probes::action_name(self.action.action)
        )
    }

    pub fn seed(&self) -> String {
        let at = join(
            "/stateMachines",
            [&self.machine, "refusals", &self.index.to_string()],
        );
        cite(at, &self.action.seed)
    }
}

/// The refusals of `role`'s requests the walk's end state holds.
pub(super) fn applies(c: &Contract, plan: &Plan, role: &str) -> Vec<RefusalProbe> {
    let Some((machine, sm)) = &plan.machine else {
        return Vec::new();
    };
    let sent_by = |from: &Option<String>| from.as_deref().is_none_or(|f| f == role);
    let request = |m: &str| {
        c.methods
            .get(m)
            .is_some_and(|x| x.kind == Kind::Request && x.from.iter().any(|f| f == role))
    };
    sm.refusals
        .iter()
        .enumerate()
        .filter_map(|(index, r)| {
            let Trigger::Message {
                method: Some(m),
                kind,
                from,
                ..
            } = &r.message
            else {
                return None;
            };
            let asks = kind.is_none_or(|k| k == Kind::Request) && sent_by(from) && request(m);
            let here = r.states.contains(&plan.target);
            let action = seen_first(r.action.as_ref())?;
            (asks && here && example(c, m, role).is_some()).then(|| RefusalProbe {
                index,
                machine: machine.clone(),
                method: m.clone(),
                state: plan.target.clone(),
                action: action.clone(),
            })
        })
        .collect()
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let subject = cx.subject.clone().unwrap_or_default();
        let p = applies(&c, &plan, &cx.role)
            .into_iter()
            .find(|p| p.index.to_string() == subject)
            .ok_or_else(|| Failure::new(format!("suite bug: no refusal {subject}")))?;
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let v = s.message(cx, &p.method)?;
        let id = s.send_value(&v).await?.unwrap_or(Value::Null);
        let what = format!("{} in `{}`", p.method, p.state);
        if p.action.action == ActionKind::ReplyError {
            let got = s.answer(cx, &id, &p.method).await?;
            let want = p.action.code.clone().unwrap_or_default();
            let verdict = expect_code(&s.shape, &got, &want, &what)?;
            // Refused, the request changed nothing: the session goes on for the next check.
            s.keep(cx);
            return Ok(verdict);
        }
        let b = probes::Built::expecting(
            v.to_string().into_bytes(),
            vec![id, Value::Null],
            probes::Reaction::Rule {
                action: p.action.action,
                code: p.action.code.clone(),
            },
        );
        let verdict = probes::react(&mut s, cx, &b, &what, &[])
            .await
            .map_err(|f| f.sent(&b.bytes))?;
        probes::settle(s, cx, &b, verdict).await
    })
}
