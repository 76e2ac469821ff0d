//! Every message the implementation sends validates against the contract: on a fresh
//! session the suite walks the handshake, sends each request the party may send there
//! once, and lingers a moment for what those set off (a stream's chunks, a task's
//! events). Each message the implementation sent meanwhile that is not an answer to one
//! of the suite's requests (those are judged where they are awaited: the handshake and
//! the call checks) must be one the contract accepts from it.

use std::ops::Range;

use super::{Session, plan_of};
use crate::session::{Ctx, Got};
use crate::{BodyFuture, Failure, pass};

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let mut s = Session::open(cx).await?;
        s.serves_all = true;
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        // Frames that came while the suite waited in vain for an answer: what stood in for
        // it (an oversize answer skipped unread) is its call check's to report.
        let waits_in_vain = s.call_each(cx, &plan.staying(&c)).await?;
        judge(&s, &waits_in_vain)
    })
}

/// The first message of the implementation's own the contract rejects fails the check.
fn judge(s: &Session, waits_in_vain: &[Range<usize>]) -> Result<crate::Verdict, Failure> {
    let own = |(i, g): &(usize, &Got)| {
        let to = g.value().and_then(|v| s.shape.answered(v));
        to.is_none_or(|id| id.is_null()) && !waits_in_vain.iter().any(|r| r.contains(i))
    };
    let judged: Vec<&Got> = s
        .peer
        .log
        .iter()
        .enumerate()
        .filter(own)
        .map(|(_, g)| g)
        .collect();
    if let Some(g) = judged.iter().find(|g| g.msg.is_err()) {
        let why = match &g.msg {
            Err(v) => format!("{}: {}", v.class.name(), v.reason),
            Ok(_) => String::new(),
        };
        return Err(Failure::new(format!(
            "the implementation sent a message the contract rejects ({why})"
        ))
        .with("the message", &g.raw));
    }
    let answers = s.peer.log.len() - judged.len();
    pass(format!(
        "{} messages of its own, all valid (and {answers} answers, judged by their checks)",
        judged.len()
    ))
}
