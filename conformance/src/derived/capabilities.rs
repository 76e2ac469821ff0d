//! Capability gating: the played party declares no capability where it declares them
//! (its `declares` entry: the call it sends, or the result it answers with, written
//! empty), then walks the handshake, calls each request once and sends each of its cues
//! (what a cue sets off may need a capability: kernel's speech opens an audio.output
//! stream). The implementation must not send a message that needs a capability the played
//! party declares, by its method's `capability` or by a `needs` entry its values match:
//! it was never declared.

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

/// The capabilities `role` declares that some message another party sends may need.
fn gated(c: &Contract, role: &str) -> Vec<String> {
    let mut caps: Vec<String> = (c.methods.iter())
        .filter(|(_, m)| m.from.iter().any(|p| p != role))
        .flat_map(|(name, _)| c.gated_capabilities(name))
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

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let mut s = Session::open(cx).await?;
        s.declares_none = c.parties.get(&cx.role).and_then(|p| p.declares.clone());
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        s.call_each(cx, &plan.staying(&c)).await?;
        let cues = send_cues(&mut s, cx, &c).await?;
        let caps = gated(&c, &cx.role);
        for g in &s.peer.log {
            let Some(m) = g.ok().filter(|m| m.is_call()) else {
                continue;
            };
            let Some(method) = m.method.as_deref() else {
                continue;
            };
            let needed = c.needed_capabilities(method, &m.value);
            if let Some((cap, entry)) = needed.iter().find(|(k, _)| caps.iter().any(|x| x == k)) {
                return Err(Failure::new(format!(
                    "the implementation sent {method}, which needs `{cap}` ({entry}), though the {} declared no capability",
                    cx.role
                ))
                .with("the message", &g.raw));
            }
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
    s.linger().await;
    let names: Vec<&str> = cues.iter().map(|(n, _)| n.as_str()).collect();
    Ok(match names.is_empty() {
        true => String::new(),
        false => format!(" (cues {} sent)", names.join(", ")),
    })
}
