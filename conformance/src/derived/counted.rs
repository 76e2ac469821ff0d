//! The counted-violations family: where `violations` entries count toward a count limit
//! that has an action of its own (toolchannel's bad frames toward `badFramesMax`, then
//! close 4006), one check per limit sends that many such inputs on a fresh session, each
//! answered by its own entry's reaction, and expects the limit's action after the last.
//!
//! The inputs are the bad-input probes ([`super::probes`]) whose verdict counts toward
//! the limit and whose reaction keeps the channel (an error reply), taken in turn.

use contract::Contract;
use contract::model::ActionKind;
use contract::wire::Wire;
use serde_json::Value;

use super::probes::{self, Built, Probe, Reaction, action_name};
use super::{Session, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, Failure, Verdict};

/// The counted probes of `limit`, in the suite's order.
fn counted(wire: &Wire, role: &str, carriers: &[Value], limit: &str) -> Vec<Probe> {
    Probe::ALL
        .into_iter()
        .filter(|p| {
            probes::build(*p, wire, role, carriers).is_some_and(|b| {
                b.counts.as_deref() == Some(limit)
                    && matches!(
                        b.reaction,
                        Reaction::Rule {
                            action: ActionKind::ReplyError,
                            ..
                        }
                    )
            })
        })
        .collect()
}

/// The family's checks: (limit, title, the limit's seed) for each count limit with an
/// action that some probe of `role` counts toward.
pub(super) fn applies(
    c: &Contract,
    wire: &Wire,
    role: &str,
    carriers: &[Value],
) -> Vec<(String, String, String)> {
    let limits = wire.limits();
    c.limits
        .iter()
        .filter_map(|(name, l)| {
            let max = limits.count(name).ok().filter(|m| *m > 0)?;
            let a = l.action.as_ref().filter(|a| a.action != ActionKind::Ignore)?;
            let kinds = counted(wire, role, carriers, name);
            if kinds.is_empty() {
                return None;
            }
            let what: Vec<&str> = kinds.iter().map(|p| p.what()).collect();
            let code = a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
            let title = format!(
                "{max} inputs counting toward {name} ({}, in turn) each get their own answer, and the last one `{}`{code}",
                what.join("; "),
                action_name(a.action)
            );
            Some((name.clone(), title, l.seed.clone()))
        })
        .collect()
}

/// The limit's worth of counted inputs, then the limit's action.
pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let limit = cx.subject.clone().unwrap_or_default();
        let plan = plan_of(cx);
        let callable = plan.staying(cx.wire.contract());
        let max = cx
            .wire
            .limits()
            .count(&limit)
            .map_err(|e| Failure::new(e.to_string()))?;
        let action = cx.wire.limits().action(&limit).cloned();
        let action = action.ok_or_else(|| Failure::new("suite bug: no action"))?;
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let carriers = s.carriers(cx, &callable);
        let kinds = counted(&cx.wire, &cx.role, &carriers, &limit);
        if kinds.is_empty() {
            return Err(Failure::new(format!(
                "suite bug: no input counts toward {limit}"
            )));
        }
        let mut answered = Vec::new();
        for i in 0..max as usize {
            let p = kinds[i % kinds.len()];
            // What a refusal lists is the probe's own check's to judge; here, the count.
            let b = Built {
                names: None,
                ..probes::built(p, cx, &s, &callable)?
            };
            if b.ids.first().is_some_and(|id| !id.is_null()) {
                s.take_id();
            }
            s.remember(cx, &b.bytes);
            let what = format!("input {} of {max} toward {limit} ({})", i + 1, p.what());
            let what = s.shape.say(&what);
            b.send(&mut s.peer).await.map_err(|f| {
                Failure::new(format!("the channel ended before {what}: {}", f.why))
                    .with("answered so far", answered.join("; ").as_bytes())
            })?;
            probes::react(&mut s, cx, &b, &what, &callable)
                .await
                .map_err(|f| f.sent(&b.bytes))?;
            answered.push(p.name());
        }
        let end = Built::expecting(
            Vec::new(),
            Vec::new(),
            Reaction::Rule {
                action: action.action,
                code: action.code.clone(),
            },
        );
        let what = format!("the {max}th input counting toward {limit}");
        let verdict = probes::ended(&mut s, cx, &end, action.action, &what).await?;
        let Verdict::Pass(seen) = verdict else {
            return Ok(verdict);
        };
        probes::settle(
            s,
            cx,
            &end,
            Verdict::Pass(format!("{max} inputs answered; {seen}")),
        )
        .await
    })
}
