//! The refusal family: a message of the played party's that the lifecycle machine's
//! `refusals` name gets the refusal's action: its error, or the channel's end, never
//! service. The message is a request (rukh's second `rukh.invoke` in `Running`), or a
//! second answer to the other party's request (rukh's second completion). Where the
//! refusal holds past the walk's target, the walk goes on there by the played party's
//! own steps (rukh's extension completing the invocation, into `Completing`). Refusals
//! the played party cannot reach, and the other party's (judged by `behaviour`, which
//! runs the same machine), are not probed here.

use contract::Contract;
use contract::join_pointer as join;
use contract::model::{Action, ActionKind, Kind, Part, Refusal, Trigger};
use serde_json::Value;

use super::plan::{Plan, Step, example, example_of, seen_first};
use super::{Session, cite, expect_code, plan_of, probes};
use crate::session::Ctx;
use crate::{BodyFuture, Failure};

/// One refusal the suite can provoke.
pub(super) struct RefusalProbe {
    /// Its index in the machine's `refusals` (the check's subject).
    pub index: usize,
    pub machine: String,
    pub method: String,
    /// What the played party sends: its request (`Call`), or a second answer.
    pub part: Part,
    /// The walk, taken on to the state the refusal holds in (its target).
    pub plan: Plan,
    pub action: Action,
}

impl RefusalProbe {
    /// The check's id below `derived.`.
    pub fn id(&self) -> String {
        let base = format!("refusal.{}.{}", self.machine, self.method);
        match self.part {
            Part::Call => base,
            Part::Result => format!("{base}.result"),
            Part::Error => format!("{base}.error"),
        }
    }

    pub fn title(&self) -> String {
        let code = self.action.code.as_ref();
        let code = code.map(|c| format!(" {c}")).unwrap_or_default();
        format!(
            "{} gets the {} machine's refusal `{}`{code}",
            self.what(),
            self.machine,
            probes::action_name(self.action.action)
        )
    }

    fn what(&self) -> String {
        let (m, state) = (&self.method, &self.plan.target);
        match self.part {
            Part::Call => format!("{m} in `{state}`"),
            Part::Result => format!("a second result of {m} in `{state}`"),
            Part::Error => format!("an error answer to {m} after its result, in `{state}`"),
        }
    }

    pub fn seed(&self) -> String {
        let at = join(
            "/stateMachines",
            [&self.machine, "refusals", &self.index.to_string()],
        );
        cite(at, &self.action.seed)
    }
}

/// The refusals of `role`'s messages the suite can reach from the walk.
pub(super) fn applies(c: &Contract, plan: &Plan, role: &str) -> Vec<RefusalProbe> {
    let Some((machine, sm)) = &plan.machine else {
        return Vec::new();
    };
    sm.refusals
        .iter()
        .enumerate()
        .filter_map(|(index, r)| {
            let (method, part) = sent(c, r, role)?;
            let action = seen_first(r.action.as_ref())?.clone();
            let plan = plan.onward(c, &r.states)?;
            let written = match part {
                Part::Call => example(c, &method, role).is_some(),
                // A second answer needs the walk to have answered the request once.
                _ => {
                    example_of(c, &method, part, role).is_some()
                        && plan.steps.contains(&Step::Answer(method.clone()))
                }
            };
            written.then(|| RefusalProbe {
                index,
                machine: machine.clone(),
                method,
                part,
                plan,
                action,
            })
        })
        .collect()
}

/// The method and part of the message `r` refuses, when `role` sends it: its request, or
/// its answer to the other party's.
fn sent(c: &Contract, r: &Refusal, role: &str) -> Option<(String, Part)> {
    let Trigger::Message {
        method: Some(m),
        kind,
        from,
        ..
    } = &r.message
    else {
        return None;
    };
    let x = c.methods.get(m)?;
    let by_role = from.as_deref().is_none_or(|f| f == role) && x.kind == Kind::Request;
    let asks = x.from.iter().any(|f| f == role);
    let answers = x.from.iter().any(|f| f != role);
    let part = match kind {
        None | Some(Kind::Request) if asks => Part::Call,
        Some(Kind::Response) if answers => Part::Result,
        Some(Kind::Error) if answers => Part::Error,
        _ => return None,
    };
    by_role.then(|| (m.clone(), part))
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
        let mut s = match reach(cx, &plan, &p).await? {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let (v, ids) = match p.part {
            Part::Call => {
                let v = s.message(cx, &p.method)?;
                let id = s.send_value(&v).await?.unwrap_or(Value::Null);
                (v, vec![id, Value::Null])
            }
            part => {
                let request = s.answered.clone().unwrap_or(Value::Null);
                let v = s.answer_as(cx, &p.method, &request, part)?;
                s.peer.send(&v).await?;
                (v, Vec::new())
            }
        };
        let what = p.what();
        let bytes = v.to_string().into_bytes();
        if p.action.action == ActionKind::ReplyError {
            let got = s.answer(cx, &ids[0], &p.method).await?;
            let want = p.action.code.clone().unwrap_or_default();
            let verdict = expect_code(&s.shape, &got, &want, &what).map_err(|f| f.sent(&bytes))?;
            // Refused where the walk ends, the request changed nothing: the session goes
            // on for the next check.
            if p.plan.target == plan.target {
                s.keep(cx);
            }
            return Ok(verdict);
        }
        let reaction = probes::Reaction::Rule {
            action: p.action.action,
            code: p.action.code.clone(),
        };
        let b = probes::Built::expecting(bytes, ids, reaction);
        probes::judged(s, cx, &b, &what, &[]).await
    })
}

/// A session in the state `p` holds in: the walk's (a kept one when there is one), taken
/// on by a fresh session when the refusal holds further. The outer error is the onward
/// steps' (this check's to report); the inner one the handshake's (its own check's).
async fn reach(
    cx: &mut Ctx,
    plan: &Plan,
    p: &RefusalProbe,
) -> Result<Result<Session, Failure>, Failure> {
    if p.plan.target == plan.target {
        return Ok(Session::start(cx, plan).await);
    }
    let mut s = match Session::open(cx).await {
        Ok(s) => s,
        Err(f) => return Ok(Err(f)),
    };
    // No other check shares it: the implementation's own work runs its course (a rukh
    // command's calls before its completion).
    s.serves_all = true;
    if let Err(f) = s.handshake(cx, plan).await {
        return Ok(Err(f));
    }
    let onward = plan.steps.len()..p.plan.steps.len();
    if let Err(mut f) = s.walk_steps(cx, &p.plan, onward).await {
        f.why = format!("on the way to `{}`: {}", p.plan.target, f.why);
        return Err(f);
    }
    Ok(Ok(s))
}
