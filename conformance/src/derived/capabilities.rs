//! Capability gating: the played party declares no capability where it declares them
//! (its `declares` entry: the call it sends, or the result it answers with, written
//! empty), then walks the handshake, calls each request once and sends each of its cues
//! (what a cue sets off may need a capability: kernel's speech opens an audio.output
//! stream). Last come the requests whose answers a `needs` entry may gate, though they move
//! the machine on (rukh's invoke, whose completion may carry a commandResult). The
//! implementation must not send a message that needs a capability the played party
//! declares, by its method's `capability` (a call) or by a `needs` entry its values match
//! (a call or an answer): it was never declared.

use super::cues::cue_message;
use super::{Session, cite, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, Failure, pass};
use contract::Contract;
use serde_json::Value;

/// The capabilities `role` declares that a method of the other party needs, and the
/// citation of `role`'s declaration; `None` when there are none or `role` declares
/// nowhere.
pub(super) fn applies(c: &Contract, role: &str) -> Option<(Vec<String>, String)> {
    let declares = c.parties.get(role)?.declares.as_ref()?;
    let caps = gated(c, role);
    let seed = c
        .methods
        .get(&declares.method)
        .map(|m| m.seed.clone())
        .unwrap_or_default();
    let pointer = contract::join_pointer("/parties", [role, "declares"]);
    (!caps.is_empty()).then(|| (caps, cite(pointer, &seed)))
}

/// The capabilities `role` declares that some message another party sends may need: a
/// call of its own, or an answer to one of `role`'s calls (by a `needs` entry only).
fn gated(c: &Contract, role: &str) -> Vec<String> {
    let calls = (c.methods.iter())
        .filter(|(_, m)| m.from.iter().any(|p| p != role))
        .flat_map(|(name, _)| c.gated_capabilities(name));
    let answers = (c.methods.iter())
        .filter(|(_, m)| m.from.iter().any(|p| p == role))
        .flat_map(|(name, _)| by_needs(c, name));
    let mut caps: Vec<String> = calls
        .chain(answers)
        .filter(|cap| {
            c.capabilities
                .get(*cap)
                .is_some_and(|x| x.declared_by == role)
        })
        .map(String::from)
        .collect();
    caps.sort();
    caps.dedup();
    caps
}

/// The capabilities `method`'s `needs` entries name: what its answer may need.
fn by_needs<'c>(c: &'c Contract, method: &str) -> impl Iterator<Item = &'c str> {
    (c.methods.get(method).into_iter())
        .flat_map(|m| m.needs.iter().flat_map(|n| n.capabilities.iter()))
        .map(String::as_str)
}

/// Whether a `needs` entry of `method` names one of `caps` (its answer may need it).
fn answer_gated(c: &Contract, method: &str, caps: &[String]) -> bool {
    by_needs(c, method).any(|k| caps.iter().any(|x| x == k))
}

/// The requests `plan` can send that move the machine on and whose answer may need one
/// of `caps`: sent last, since the session goes on elsewhere.
fn answers_gated(c: &Contract, plan: &super::plan::Plan, caps: &[String]) -> Vec<String> {
    (plan.callable(c).into_iter())
        .filter(|m| !plan.stays(c, m) && answer_gated(c, m, caps))
        .collect()
}

/// The answer the walk ended owing to, where it may need one of `caps` (rukh's completion
/// of the handshake's invoke, which comes once the implementation's own work ran its
/// course): awaited, unless it is in the log already.
async fn await_owed(s: &mut Session, cx: &Ctx, c: &Contract, caps: &[String]) {
    let Some((id, method)) = (s.last.clone()).filter(|(_, m)| answer_gated(c, m, caps)) else {
        return;
    };
    let answers = |g: &crate::session::Got| {
        g.ok()
            .is_some_and(|m| !m.is_call() && m.correlation.as_ref() == Some(&id))
    };
    if !s.peer.log.iter().any(answers) {
        let _ = s
            .wait_answer(cx, std::slice::from_ref(&id), &method, cx.soon())
            .await;
    }
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let mut s = Session::open(cx).await?;
        s.declares_none = c.parties.get(&cx.role).and_then(|p| p.declares.clone());
        // The implementation's own work runs its course (rukh's command, whose completion
        // answers the handshake's invoke): its requests are answered.
        s.serves_all = true;
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        s.call_each(cx, &plan.staying(&c)).await?;
        let cues = send_cues(&mut s, cx, &c).await?;
        let caps = gated(&c, &cx.role);
        await_owed(&mut s, cx, &c, &caps).await;
        s.call_each(cx, &answers_gated(&c, &plan, &caps)).await?;
        for g in &s.peer.log {
            let Some(m) = g.ok() else {
                continue;
            };
            let needed = c.capabilities_needed(m);
            let Some((cap, entry)) = needed.iter().find(|(k, _)| caps.iter().any(|x| x == k))
            else {
                continue;
            };
            let method = m.method.as_deref().unwrap_or_default();
            let what = match m.is_call() {
                true => format!("sent {method}"),
                false => format!("answered {method} with a message"),
            };
            return Err(Failure::new(format!(
                "the implementation {what}, which needs `{cap}` ({entry}), though the {} declared no capability",
                cx.role
            ))
            .with("the message", &g.raw));
        }
        pass(format!(
            "{} messages from the implementation{cues}, none needing what the {} did not declare",
            s.peer.log.len(),
            cx.role
        ))
    })
}

/// Send each cue the played party sends, each awaiting its answer (its own check judges
/// it), then linger ([`Session::linger`]); what to add to the verdict.
async fn send_cues(s: &mut Session, cx: &Ctx, c: &Contract) -> Result<String, Failure> {
    let cues = super::cues::applies(c, &cx.role);
    for (name, cue) in &cues {
        let v = cue_message(s, cx, cue)?;
        let id = s.send_value(&v).await?.unwrap_or(Value::Null);
        let what = format!("the {name} cue");
        let _ = s.wait_answer(cx, &[id], &what, cx.soon()).await;
    }
    s.linger(cx).await;
    let names: Vec<&str> = cues.iter().map(|(n, _)| n.as_str()).collect();
    Ok(match names.is_empty() {
        true => String::new(),
        false => format!(" (cues {} sent)", names.join(", ")),
    })
}
