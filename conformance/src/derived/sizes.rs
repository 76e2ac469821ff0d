//! The method-cap family: a handshake message of the played party's whose method has its
//! own cap (`maxPayload`, tighter than the channel's) is sent padded exactly to the cap,
//! and served, then one byte over, and gets the reaction the suite's own `Wire` rules for
//! it (rukh's rukh.initialize and its result at `lifecyclePayloadMax`: over it, `fail`).
//! Each size runs on a fresh session, the handshake walked up to that message.

use contract::Contract;
use contract::join_pointer as join;
use contract::model::{ActionKind, Caps, Part};
use contract::wire::{ViolationClass, Wire};
use serde_json::Value;

use super::plan::{Plan, Step, example, example_of};
use super::probes::{self, Built, Reaction};
use super::{Session, cite, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, Failure, Verdict};

/// One capped message of the walk.
pub(super) struct MethodCap {
    pub method: String,
    /// Its step in the walk: a request the suite sends, or its answer to the other's.
    pub step: usize,
    pub part: Part,
    pub cap: u64,
    pub limit: String,
    pub action: ActionKind,
    pub code: Option<Value>,
    pub seed: String,
}

impl MethodCap {
    pub fn title(&self) -> String {
        let code = self
            .code
            .as_ref()
            .map(|c| format!(" {c}"))
            .unwrap_or_default();
        format!(
            "{} padded to {} ({} bytes) is served; one byte more gets `{}`{code}",
            self.what(),
            self.limit,
            self.cap,
            probes::action_name(self.action)
        )
    }

    fn what(&self) -> String {
        match self.part {
            Part::Call => self.method.clone(),
            _ => format!("the answer to {}", self.method),
        }
    }

    pub fn seed(&self) -> String {
        cite(join("/methods", [&self.method, "maxPayload"]), &self.seed)
    }
}

/// The walk's messages of `role`'s whose method caps them, with what one over the cap gets.
pub(super) fn applies(wire: &Wire, plan: &Plan, role: &str) -> Vec<MethodCap> {
    let c = wire.contract();
    (plan.steps.iter().enumerate())
        .filter_map(|(step, s)| {
            // An answer whose request the walk expected just before (so it is owed).
            let owed = |m: &String| step > 0 && plan.steps[step - 1] == Step::Expect(m.clone());
            let (m, part) = match s {
                Step::Send(m) => (m, Part::Call),
                Step::Answer(m) if owed(m) => (m, Part::Result),
                _ => return None,
            };
            capped(c, wire, role, m, part, step)
        })
        .collect()
}

fn capped(
    c: &Contract,
    wire: &Wire,
    role: &str,
    method: &str,
    part: Part,
    step: usize,
) -> Option<MethodCap> {
    let limit = c.methods.get(method)?.max_payload.clone()?;
    let l = c.limits.get(&limit)?;
    let caps = l.caps.unwrap_or(Caps::Both);
    let holds = match part {
        Part::Call => caps != Caps::Replies,
        _ => caps != Caps::Requests,
    };
    let cap = wire.limits().cap(&limit).ok()?;
    let shape = super::shape::Shape::of(c)?;
    let (v, answers) = match part {
        Part::Call => (example(c, method, role)?, None),
        _ => (example_of(c, method, part, role)?, Some(method)),
    };
    let over = probes::padded(&v.to_string(), cap.checked_add(1)?)?;
    let violation = wire.decode(&shape.channel, role, &over, answers).err()?;
    let (action, code) = probes::checkable(&violation)?;
    (holds && violation.class == ViolationClass::Oversize).then(|| MethodCap {
        method: method.to_string(),
        step,
        part,
        cap,
        limit,
        action,
        code,
        seed: l.seed.clone(),
    })
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let subject = cx.subject.clone().unwrap_or_default();
        let p = applies(&cx.wire, &plan, &cx.role)
            .into_iter()
            .find(|p| p.method == subject)
            .ok_or_else(|| Failure::new(format!("suite bug: no method cap {subject}")))?;
        let at = match at_cap(cx, &plan, &p).await? {
            Ok(seen) => seen,
            Err(f) => return plan.unreached(f),
        };
        let Ok((mut s, id)) = reach(cx, &plan, &p).await else {
            return crate::skip("the handshake did not reach the capped message a second time");
        };
        let bytes = padded(&mut s, cx, &p, p.cap + 1)?;
        s.peer.send_raw(&bytes).await?;
        let reaction = Reaction::Rule {
            action: p.action,
            code: p.code.clone(),
        };
        let ids = id.into_iter().chain([Value::Null]).collect();
        let b = Built::expecting(bytes, ids, reaction);
        let what = format!("{} one byte over {}", p.what(), p.limit);
        match probes::judged(s, cx, &b, &what, &[]).await? {
            Verdict::Pass(over) => Ok(Verdict::Pass(format!("{at}; {over}"))),
            other => Ok(other),
        }
    })
}

/// The message at exactly the cap, served: a request answered with a result, an answer
/// followed by the rest of the walk. The inner error is the handshake's before it.
async fn at_cap(
    cx: &mut Ctx,
    plan: &Plan,
    p: &MethodCap,
) -> Result<Result<String, Failure>, Failure> {
    let (mut s, id) = match reach(cx, plan, p).await {
        Ok(x) => x,
        Err(f) => return Ok(Err(f)),
    };
    let bytes = padded(&mut s, cx, p, p.cap)?;
    s.peer.send_raw(&bytes).await?;
    let what = format!("{} padded to {} bytes", p.what(), p.cap);
    let shown = &bytes[..bytes.len().min(256)];
    match id {
        Some(id) => {
            let got = s
                .answer(cx, &id, &p.method)
                .await
                .map_err(|f| f.sent(shown))?;
            if !s.shape.is_result(&got) {
                return Err(Failure::new(format!(
                    "{what} was refused, though the contract accepts it"
                ))
                .with("the answer", got.to_string().as_bytes()));
            }
        }
        None => {
            let rest = p.step + 1..plan.steps.len();
            s.walk_steps(cx, plan, rest).await.map_err(|mut f| {
                f.why = format!("after {what}: {}", f.why);
                f.sent(shown)
            })?;
        }
    }
    Ok(Ok(format!("{what} served")))
}

/// A fresh session walked up to `p`'s step, with the id of the request it sends (`None`
/// for an answer); the handshake's error when it does not get there.
async fn reach(
    cx: &mut Ctx,
    plan: &Plan,
    p: &MethodCap,
) -> Result<(Session, Option<Value>), Failure> {
    let mut s = Session::open(cx).await?;
    s.walk_to(cx, plan, p.step).await?;
    let id = match p.part {
        Part::Call => Some(s.peek_id()),
        _ => None,
    };
    Ok((s, id))
}

/// `p`'s message padded with JSON whitespace to `len` bytes: the played party's example
/// request on the session's next id, or its answer to the request the walk owes (no
/// longer owed: the rest of the walk must not answer it again).
fn padded(s: &mut Session, cx: &Ctx, p: &MethodCap, len: u64) -> Result<Vec<u8>, Failure> {
    let v = match p.part {
        Part::Call => s.message(cx, &p.method)?,
        part => {
            let (request, _) = s
                .owed
                .take()
                .filter(|(_, m)| *m == p.method)
                .ok_or_else(|| Failure::new(format!("no {} request to answer", p.method)))?;
            s.answer_as(cx, &p.method, &request, part)?
        }
    };
    probes::padded(&v.to_string(), len)
        .ok_or_else(|| Failure::new(format!("{} does not pad to {len} bytes", p.method)))
}
