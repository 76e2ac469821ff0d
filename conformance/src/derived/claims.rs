//! The claims family (`claim.<name>`): where the played party's handshake sends a
//! message claiming an identity (`claims`), the implementation keeps one live connection
//! per identity. On a connection taken through the handshake (the holder), a second one
//! claims the same identity as the contract lets it supersede (the same claimant, a greater
//! attempt): the holder must end as `superseded` says while the new one goes on serving.
//! Then each claim that may not supersede (the attempt not greater; another claimant) must
//! get `refused` on its own connection, and the holder must go on serving.
//!
//! Everything the connections say is the examples' as the walk writes them; only the
//! claimant and the attempt are written over ([`Session::writes`]).

use contract::Contract;
use contract::model::{Action, Claim, Kind, Part, Trigger};
use serde_json::Value;

use super::connections::{Watched, watch};
use super::plan::{Plan, Step, example_of};
use super::probes::{action_name, closed_as};
use super::{Session, dealias, plan_of};
use crate::session::{Ctx, with_meanwhile};
use crate::{BodyFuture, Failure, Verdict, pass, skip};
use std::time::{Duration, Instant};

/// The family's checks: (claim, title, seed) for each claim the played party makes on
/// its handshake.
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(String, String, String)> {
    let plan = Plan::new(c, role);
    c.claims
        .iter()
        .filter(|(_, cl)| claim_step(c, &plan, cl).is_some())
        .map(|(name, cl)| {
            let mut title = format!(
                "a second connection claiming {} {}supersedes the first (`{}`)",
                cl.key,
                match (&cl.claimant, &cl.attempt) {
                    (Some(who), Some(n)) => format!("as the same {who} with a greater {n} "),
                    (Some(who), None) => format!("as the same {who} "),
                    (None, Some(n)) => format!("with a greater {n} "),
                    (None, None) => String::new(),
                },
                said(&cl.superseded)
            );
            if refusals(cl) > 0 {
                title += &format!(
                    "; a claim that may not is refused (`{}`) and the first stays",
                    said(&cl.refused)
                );
            }
            (name.clone(), title, cl.seed.clone())
        })
        .collect()
}

/// `a` in words: its action and its code.
pub(super) fn said(a: &Action) -> String {
    let code = a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
    format!("{}{code}", action_name(a.action))
}

/// How many claims that may not supersede the contract lets the suite make.
fn refusals(cl: &Claim) -> usize {
    usize::from(cl.attempt.is_some()) + usize::from(cl.claimant.is_some())
}

/// The index of the walk's step that sends the claim: the played party's own message of
/// the claim's method (a request or notification it sends, or its answer), when the claim
/// is the played party's.
fn claim_step(c: &Contract, plan: &Plan, cl: &Claim) -> Option<(usize, Part)> {
    let Trigger::Message {
        method: Some(method),
        kind,
        ..
    } = &cl.message
    else {
        return None;
    };
    if !c.claims_by(cl, &plan.role) {
        return None;
    }
    let answer = matches!(kind, Some(Kind::Response));
    plan.steps.iter().enumerate().find_map(|(i, s)| match s {
        Step::Answer(m) if answer && m == method => Some((i, Part::Result)),
        Step::Send(m) if !answer && m == method => Some((i, Part::Call)),
        _ => None,
    })
}

/// The claim as the walk writes it: the method, and the claimant and attempt values.
struct Claimed {
    method: String,
    claimant: Option<(String, Value)>,
    attempt: Option<(String, i64)>,
}

fn claimed(cx: &Ctx, cl: &Claim, part: Part) -> Result<Claimed, Failure> {
    let c = cx.wire.contract();
    let Trigger::Message {
        method: Some(method),
        ..
    } = &cl.message
    else {
        return Err(Failure::new("suite bug: a claim without a method"));
    };
    let mut v = example_of(c, method, part, &cx.role)
        .ok_or_else(|| Failure::new(format!("the contract has no example of {method}")))?;
    dealias(&cx.aliases, &mut v);
    let at = |p: &String| v.pointer(p).cloned();
    let claimant = cl.claimant.as_ref().and_then(|p| Some((p.clone(), at(p)?)));
    let attempt = (cl.attempt.as_ref()).and_then(|p| Some((p.clone(), at(p)?.as_i64()?)));
    Ok(Claimed {
        method: method.clone(),
        claimant,
        attempt,
    })
}

impl Claimed {
    /// What a connection writes over the examples: `attempt` more than the example's, and
    /// another claimant where `other`.
    fn writes(&self, attempt: i64, other: bool) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        if let Some((p, n)) = &self.attempt {
            out.push((self.method.clone(), p.clone(), Value::from(n + attempt)));
        }
        if let (true, Some((p, v))) = (other, &self.claimant) {
            let other = match v {
                Value::String(s) => Value::String(format!("{s}-other")),
                v => Value::String(format!("{v}-other")),
            };
            out.push((self.method.clone(), p.clone(), other));
        }
        out
    }
}

/// What the `n`th of several connections held at once writes over the examples so each
/// claims an identity of its own (the connection-cap check): the key of every claim the
/// played party's walk makes, the example's with `-n` after it (a number: plus `n`).
pub(super) fn distinct(cx: &Ctx, plan: &Plan, n: usize) -> Vec<(String, String, Value)> {
    let c = cx.wire.contract();
    let mut out = Vec::new();
    for cl in c.claims.values() {
        let Some((_, part)) = claim_step(c, plan, cl) else {
            continue;
        };
        let Ok(claimed) = claimed(cx, cl, part) else {
            continue;
        };
        let Some(v) = example_of(c, &claimed.method, part, &cx.role) else {
            continue;
        };
        let key = match v.pointer(&cl.key) {
            Some(Value::String(s)) => Value::String(format!("{s}-{n}")),
            Some(Value::Number(k)) => match k.as_i64() {
                Some(k) => Value::from(k.saturating_add(n as i64)),
                None => continue,
            },
            _ => continue,
        };
        out.push((claimed.method, cl.key.clone(), key));
    }
    out
}

/// The claim the check's subject names.
pub(super) fn subject<'c>(c: &'c Contract, cx: &Ctx) -> Result<&'c Claim, Failure> {
    let name = cx.subject.as_deref().unwrap_or_default();
    (c.claims.get(name)).ok_or_else(|| Failure::new("suite bug: no claim"))
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let c = cx.wire.contract().clone();
        let cl = subject(&c, cx)?;
        let plan = plan_of(cx);
        let (step, part) = claim_step(&c, &plan, cl)
            .ok_or_else(|| Failure::new("suite bug: the claim is not on the walk"))?;
        let claimed = claimed(cx, cl, part)?;
        let mut holder = Session::open(cx).await?;
        if let Err(f) = holder.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        let Some(mut next) = again(cx, &plan, claimed.writes(1, false)).await? else {
            return skip(
                "the target is reached once per session: the suite cannot hold two connections to one implementation",
            );
        };
        let verdict = held(cx, (&plan, cl, step), &claimed, (&mut holder, &mut next)).await;
        // Both connections end, and the implementation has seen them end, before the next
        // check opens one of its own: one kept open by an implementation that does not
        // supersede would still count against its connection cap.
        let until = Instant::now() + CLOSE_BACK;
        for s in [&mut holder, &mut next] {
            s.close_back(until).await;
        }
        verdict
    })
}

/// How long the suite waits for the implementation to close its side of the check's
/// connections.
const CLOSE_BACK: Duration = Duration::from_secs(1);

/// The claims made while `holder` and `next` are open: `next` supersedes `holder`, and
/// each claim that may not is refused while `next` serves.
async fn held(
    cx: &mut Ctx,
    (plan, cl, step): (&Plan, &Claim, usize),
    claimed: &Claimed,
    (holder, next): (&mut Session, &mut Session),
) -> Result<Verdict, Failure> {
    {
        next.handshake(cx, plan)
            .await
            .map_err(|f| about(f, "the superseding connection's handshake"))?;
        let ended = watch(holder, cx.soon()).await;
        judge_end(
            holder,
            cx,
            &cl.superseded,
            ended,
            "the superseded first connection",
        )?;
        serves(next, cx, plan, "the superseding connection").await?;
        let mut seen = vec![format!(
            "the first connection got `{}`",
            said(&cl.superseded)
        )];
        // The holder is now the superseding connection, with attempt 1.
        let tries = [
            (cl.attempt.is_some(), "an attempt not greater", 1, false),
            (cl.claimant.is_some(), "another claimant", 2, true),
        ];
        for (_, what, attempt, other) in tries.into_iter().filter(|t| t.0) {
            let Some(mut s) = again(cx, plan, claimed.writes(attempt, other)).await? else {
                return skip("the target is reached once per session");
            };
            s.walk_to(cx, plan, step + 1)
                .await
                .map_err(|f| about(f, &format!("the claim with {what}")))?;
            let ended = watch(&mut s, cx.soon()).await;
            judge_end(
                &s,
                cx,
                &cl.refused,
                ended,
                &format!("the claim with {what}"),
            )?;
            serves(
                next,
                cx,
                plan,
                &format!("the holder, after a claim with {what}"),
            )
            .await?;
            seen.push(format!("a claim with {what} got `{}`", said(&cl.refused)));
        }
        pass(seen.join("; ") + "; the holder kept serving")
    }
}

/// One more connection to the implementation, writing `writes` over its examples; `None`
/// where the target is reached once per session.
async fn again(
    cx: &mut Ctx,
    plan: &Plan,
    writes: Vec<(String, String, Value)>,
) -> Result<Option<Session>, Failure> {
    let Some(peer) = cx.open_again().await? else {
        return Ok(None);
    };
    let mut s = Session::on(cx, peer, plan)?;
    s.writes = writes;
    Ok(Some(s))
}

/// The connection ended as `action` says (a close code where a WebSocket carries one).
fn judge_end(
    s: &Session,
    cx: &Ctx,
    action: &Action,
    watched: Watched,
    what: &str,
) -> Result<(), Failure> {
    match watched.ended {
        Some(_) => {
            closed_as(s, cx, action.action, action.code.as_ref()).map_err(|f| about(f, what))
        }
        None => Err(with_meanwhile(
            Failure::new(format!(
                "{what} stayed open; the contract prescribes `{}`",
                said(action)
            )),
            watched.seen,
        )),
    }
}

/// `s` is still open and serves: its first request that keeps the machine in place is
/// answered (where there is one), and it does not end meanwhile.
async fn serves(s: &mut Session, cx: &Ctx, plan: &Plan, what: &str) -> Result<(), Failure> {
    let staying = plan.staying(cx.wire.contract());
    let first: Vec<String> = staying.into_iter().take(1).collect();
    let in_vain = s.call_each(cx, &first).await?;
    if !s.peer.control_open() {
        return Err(Failure::new(format!(
            "{what} ended, where it should go on serving"
        )));
    }
    if !in_vain.is_empty() {
        return Err(Failure::new(format!(
            "{what} did not answer {}, where it should go on serving",
            first.join(", ")
        )));
    }
    Ok(())
}

/// `f` said of `what`.
fn about(mut f: Failure, what: &str) -> Failure {
    f.why = format!("{what}: {}", f.why);
    f
}
