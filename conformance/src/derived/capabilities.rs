//! Capability gating: the played party declares no capability where it declares them
//! (its `declares` entry: the call it sends, or the result it answers with, written
//! empty), then walks the handshake and calls each request once. The implementation must
//! not send a message whose method needs a capability the played party declares: it
//! was never declared.

use super::{Session, cite, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, Failure, pass};
use contract::Contract;

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

/// The capabilities `role` declares that some method another party sends needs.
fn gated(c: &Contract, role: &str) -> Vec<String> {
    let mut caps: Vec<String> = c
        .methods
        .values()
        .filter(|m| m.from.iter().any(|p| p != role))
        .filter_map(|m| m.capability.clone())
        .filter(|cap| {
            c.capabilities
                .get(cap)
                .is_some_and(|x| x.declared_by == role)
        })
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
        let caps = gated(&c, &cx.role);
        let uses = |m: &str| c.methods.get(m).and_then(|x| x.capability.clone());
        for g in &s.peer.log {
            let Some(method) = g
                .ok()
                .filter(|m| m.is_call())
                .and_then(|m| m.method.clone())
            else {
                continue;
            };
            if let Some(cap) = uses(&method).filter(|cap| caps.contains(cap)) {
                return Err(Failure::new(format!(
                    "the implementation sent {method}, which needs `{cap}`, though the {} declared no capability",
                    cx.role
                ))
                .with("the message", &g.raw));
            }
        }
        pass(format!(
            "{} messages from the implementation, none needing what the {} did not declare",
            s.peer.log.len(),
            cx.role
        ))
    })
}
