//! The implementation breaks none of the contract's stateful rules: on a fresh session the
//! suite walks the handshake and sends each request the party may send there once, as the
//! `messages` check does, with every message and data frame of both parties going through
//! the policy engine the proxy enforces with ([`crate::judge`]). What the engine rules about
//! one of the implementation's messages fails the check, citing the entry the ruling names:
//! a message out of place in any typed machine (a chunk after its stream ended), an id that
//! breaks its party's rule, an answer to an id never asked, a rate exceeded, a deadline
//! passed, credit overrun.
//!
//! A budget raised over the wire (a `lowerOnly` carrier above the value in force:
//! toolchannel's heartbeat answers) is a finding too.
//!
//! Capability rulings are left to the `capabilities` check, which makes the implementation
//! meet a party that declares nothing, credit rulings to the `credit` checks, agreement
//! rulings to the `agreement.*` checks (but for the judge's own statements, flagged, which
//! no such check judges) and `method.not-while` to the `not-while.*` checks where the
//! played party has them: one broken rule, one failing check.

use contract::Contract;
use contract_policy::Engine;

use super::{Session, plan_of};
use crate::judge::Finding;
use crate::session::{Ctx, Peer};
use crate::{BodyFuture, Failure, pass};

/// Where the check cites the contract: the first behaviour section it has (each finding
/// names its own entry), or `None` when the engine has nothing to judge by.
pub(super) fn applies(c: &Contract) -> Option<String> {
    if !Engine::has_behaviour(c) {
        return None;
    }
    let sections = [
        ("/stateMachines", !c.state_machines.is_empty()),
        ("/credit", !c.credit.is_empty()),
        ("/claims", !c.claims.is_empty()),
    ];
    let found = sections.iter().find(|(_, has)| *has).map(|(p, _)| *p);
    Some(found.unwrap_or("/limits").to_string())
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let mut s = Session::open(cx).await?;
        s.serves_all = true;
        s.peer.judge();
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        s.call_each(cx, &plan.staying(&c)).await?;
        // Credit, agreement and not-while rulings are their own checks' where the suite
        // has them.
        let mut left = Vec::new();
        if !super::credit::applies(&c, &cx.role).is_empty() {
            left.push("credit.");
        }
        if !super::agreements::applies(&c, &cx.role).is_empty() {
            left.push("agreement.");
        }
        if !super::notwhile::applies(&c, &cx.role).is_empty() {
            left.push("method.not-while");
        }
        verdict(&s.peer, &left)
    })
}

/// The first finding fails the check; the others are listed with it.
fn verdict(peer: &Peer, left: &[&str]) -> Result<crate::Verdict, Failure> {
    breaches_but(peer, "the implementation", left)?;
    pass(format!(
        "{} messages of the implementation, none breaking a stateful rule",
        peer.log.len()
    ))
}

/// What the session's judge ruled against the implementation's messages, as one failure
/// (`who` leads its reason): the first finding, the others after it, up to four frames
/// that drew them. Capability rulings are left to the `capabilities` check.
pub(super) fn breaches(peer: &Peer, who: &str) -> Result<(), Failure> {
    breaches_but(peer, who, &[])
}

/// [`breaches`], leaving the rules named by the prefixes in `left` to their own checks too.
/// Nothing after a ruling that ends the session counts: the contract has the session end
/// there, so what the engine rules about the rest only follows from it (one broken rule,
/// one failing check).
fn breaches_but(peer: &Peer, who: &str, left: &[&str]) -> Result<(), Failure> {
    let mut ended = false;
    let found: Vec<&Finding> = (peer.judge.iter())
        .flat_map(|j| &j.found)
        .take_while(|f| !std::mem::replace(&mut ended, ends(f)))
        .filter(|f| !f.ruling.rule.starts_with("capability."))
        .filter(|f| !left.iter().any(|p| f.ruling.rule.starts_with(p)) || judges_own(f))
        .collect();
    let Some(first) = found.first() else {
        return Ok(());
    };
    let mut why = format!("{who} broke {}: {}", first.ruling.rule, first.ruling.reason);
    for f in &found[1..] {
        why.push_str(&format!("; then {}: {}", f.ruling.rule, f.ruling.reason));
    }
    let mut failure = Failure::new(why);
    for f in found.iter().take(4) {
        failure = failure.with(format!("what drew {}", f.ruling.rule), &f.raw);
    }
    Err(failure)
}

/// Whether `f` is the judge's own statement of an agreed value, flagged: no `agreement.*`
/// check judges those (they play the judge, or provoke it), so `behaviour` does (rukh's
/// core repeating another invocation id in its invoke).
fn judges_own(f: &Finding) -> bool {
    f.ruling.rule.starts_with("agreement.") && f.ruling.act == contract_policy::Act::Flag
}

/// Whether `f`'s ruling ends the session.
fn ends(f: &Finding) -> bool {
    matches!(
        f.ruling.act,
        contract_policy::Act::Refuse { close: Some(_), .. }
    )
}
