//! `redial.<end>`: how a dialing implementation comes back (`channels.<name>.redial`), for
//! any contract whose played channel declares it and whose dialer is the implementation.
//!
//! For each end the redial lists, on a fresh session taken through the handshake: the
//! suite ends the connection that way (a close with the code, or a transport break: the
//! connection dropped without a close), then waits for the implementation's next dial. It
//! must come within the redial's `within` limit (as the session's messages carried it), go
//! through the handshake again and, where the implementation claims an identity on the
//! channel (`claims`), claim the same one: the same claimant, and the attempt one above the
//! last connection's claim (one above the claim's `first` where that connection claimed
//! nothing).
//!
//! `claim.<name>.first`: where the implementation claims and the claim names the attempt
//! a process's first claim carries (`first`), a freshly launched implementation's first
//! claim carries it.

use std::time::{Duration, Instant};

use contract::Contract;
use contract::join_pointer as join;
use contract::machine::Seen;
use contract::model::{ActionKind, Claim, CodeKind, Redial, RedialAfter};
use serde_json::Value;

use super::{LATE, Session, Shape, carried, plan_of};
use crate::session::{Ctx, Got, Incoming, Peer};
use crate::{BodyFuture, Failure, other_party, pass, skip};

/// The family's checks: (the end's name, title, pointer, seed, index into `after`).
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(String, String, String, String, usize)> {
    let Some((channel, r)) = redial_of(c) else {
        return Vec::new();
    };
    let other = other_party(c, role).unwrap_or("implementation");
    if c.channels[&channel].connects.as_deref() != Some(other) {
        return Vec::new();
    }
    let claims = match claim_of(c, other) {
        Some((_, cl)) => claim_words(cl),
        None => String::new(),
    };
    (r.after.iter().enumerate())
        .map(|(i, after)| {
            let how = match after {
                RedialAfter::Close(code) => format!("the suite's close {code}"),
                RedialAfter::Break(_) => "a transport break (no close)".into(),
            };
            let title = format!(
                "after {how} the {other} dials again within {} and goes through the handshake{claims}",
                r.within
            );
            let pointer = join("/channels", [channel.as_str(), "redial", "after", &i.to_string()]);
            (end_name(c, after), title, pointer, r.seed.clone(), i)
        })
        .collect()
}

/// The first-claim checks: (claim, title, seed) for each claim of the implementation's
/// party that names its `first` attempt.
pub(super) fn first_applies(c: &Contract, role: &str) -> Vec<(String, String, String)> {
    let Some(other) = other_party(c, role) else {
        return Vec::new();
    };
    (c.claims.iter())
        .filter(|(_, cl)| c.claims_by(cl, other) && cl.attempt.is_some())
        .filter_map(|(name, cl)| {
            let first = cl.first?;
            let at = cl.attempt.as_deref().unwrap_or_default();
            let title =
                format!("a freshly launched {other}'s first claim carries attempt {first} ({at})");
            Some((name.clone(), title, cl.seed.clone()))
        })
        .collect()
}

/// A launched implementation's first claim carries the claim's `first` attempt.
pub(super) fn first_body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        if !cx.launches() {
            return skip("only a process the suite launches is known to dial for the first time");
        }
        let c = cx.wire.contract().clone();
        let cl = super::claims::subject(&c, cx)?;
        let plan = plan_of(cx);
        let mut s = Session::open(cx).await?;
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        let want = cl.first.unwrap_or(0);
        let claimed = (s.peer.log.iter()).find_map(|g| Some((fires(cx, &c, cl, g)?, g)));
        let Some((claim, g)) = claimed else {
            return skip(format!("the handshake made no claim {}", trigger_words(cl)));
        };
        if claim.attempt != Some(want) {
            let got = claim
                .attempt
                .map_or("no attempt".into(), |a| format!("attempt {a}"));
            return Err(Failure::new(format!(
                "the first claim carries {got}; a process's first is {want}"
            ))
            .with("the claim", &g.raw));
        }
        pass(format!("the first claim carries attempt {want}"))
    })
}

/// An end's name in the check's id: the close code's name in its table, or `break`.
fn end_name(c: &Contract, after: &RedialAfter) -> String {
    let RedialAfter::Close(code) = after else {
        return "break".into();
    };
    (c.code_of_kind(CodeKind::CloseCode, *code))
        .and_then(|v| v.name.clone())
        .unwrap_or_else(|| code.to_string())
}

fn claim_words(cl: &Claim) -> String {
    match (&cl.claimant, &cl.attempt) {
        (Some(who), Some(n)) => format!(", claiming the same {who} with {n} one above the last"),
        (Some(who), None) => format!(", claiming the same {who}"),
        (None, Some(n)) => format!(", claiming with {n} one above the last"),
        (None, None) => String::new(),
    }
}

/// The played channel and its redial, if it declares one.
fn redial_of(c: &Contract) -> Option<(String, Redial)> {
    let name = Shape::of(c)?.channel;
    let r = c.channels.get(&name)?.redial.clone()?;
    Some((name, r))
}

/// The claim `party` makes, if any.
fn claim_of<'c>(c: &'c Contract, party: &str) -> Option<(&'c str, &'c Claim)> {
    (c.claims.iter())
        .map(|(n, cl)| (n.as_str(), cl))
        .find(|(_, cl)| c.claims_by(cl, party))
}

/// What a connection claimed: its claimant and attempt, where the claim carries them.
#[derive(Default)]
struct Claimed {
    claimant: Option<Value>,
    attempt: Option<i64>,
}

/// One check: the end [`Ctx::subject`] indexes.
pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let c = cx.wire.contract().clone();
        let Some((_, r)) = redial_of(&c) else {
            return skip("the channel declares no redial");
        };
        let i: usize = cx
            .subject
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let after = r
            .after
            .get(i)
            .cloned()
            .ok_or_else(|| Failure::new("suite bug: no end"))?;
        let plan = plan_of(cx);
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        if let Some((_, cl)) = claim_of(&c, &cx.other) {
            claimed(&mut s, cx, &c, cl).await;
        }
        let last = Last::of(cx, &s)?;
        let how = end(&mut s, &after).await?;
        let ended = Instant::now();
        let words = comes_back(cx, last, (&how, ended), false).await?;
        pass(format!("after {how} the implementation {words}"))
    })
}

/// The close code limit `l`'s action ends the channel with, where the implementation
/// (`other`), dialing the played channel, redials after it (toolchannel's 1001 on the
/// worker's own deadlines).
pub(super) fn after_timer(c: &Contract, other: &str, l: &contract::model::Limit) -> Option<u16> {
    let a = l
        .action
        .as_ref()
        .filter(|a| a.action == ActionKind::Close)?;
    let code = u16::try_from(a.code.as_ref()?.as_u64()?).ok()?;
    let (ch, r) = redial_of(c)?;
    let dials = c.channels[&ch].connects.as_deref() == Some(other);
    (dials && r.after.contains(&RedialAfter::Close(code))).then_some(code)
}

/// What a redial is judged against, read from the session before it ends: its claim and
/// the redial's time as the session's messages carried it.
pub(super) struct Last {
    before: Option<Claimed>,
    within: Duration,
    /// The limit `within` is, for the verdict.
    name: String,
}

impl Last {
    pub(super) fn of(cx: &Ctx, s: &Session) -> Result<Last, Failure> {
        let c = cx.wire.contract();
        let (_, r) = redial_of(c).ok_or_else(|| Failure::new("suite bug: no redial"))?;
        let before = claim_of(c, &cx.other).and_then(|(_, cl)| in_log(s, cx, c, cl));
        let limits = carried::in_force(cx, c, s).unwrap_or_else(|| cx.limits());
        let within = limits.duration(&r.within)?;
        Ok(Last {
            before,
            within,
            name: r.within,
        })
    }

    fn said(&self) -> String {
        format!("{}: {:.1} s", self.name, self.within.as_secs_f64())
    }
}

/// After the last session ended (`how`, at `ended`): the implementation's next dial within
/// the redial's limit, its handshake and its claim against the last one; in words for the
/// verdict. With `only_unclaimed` the claim is judged only where the last connection
/// claimed nothing: after a claim, the attempt rule is the `redial.*` checks' to report
/// (one broken rule, one failing check), as a broken handshake is the handshake check's.
pub(super) async fn comes_back(
    cx: &mut Ctx,
    last: Last,
    (how, ended): (&str, Instant),
    only_unclaimed: bool,
) -> Result<String, Failure> {
    let c = cx.wire.contract().clone();
    let plan = plan_of(cx);
    let peer = redialed(cx, &last, how, ended).await?;
    let took = ended.elapsed();
    let mut again = Session::on(cx, peer, &plan)?;
    if let Err(f) = again.handshake(cx, &plan).await {
        let f = Failure::new(format!("the redial's handshake failed: {}", f.why));
        return Err(f.reported_by(format!("{}.derived.handshake", c.name)));
    }
    let said = last.said();
    let claims = match claim_of(&c, &cx.other) {
        Some((_, cl)) if last.before.is_none() || !only_unclaimed => {
            judge(&mut again, cx, &c, cl, last.before).await?
        }
        _ => String::new(),
    };
    Ok(format!(
        "dialed again {:.1} s later ({said}) and went through the handshake{claims}",
        took.as_secs_f64(),
    ))
}

/// The implementation's next dial after `how`, within the redial's time (and slack).
async fn redialed(cx: &mut Ctx, last: &Last, how: &str, ended: Instant) -> Result<Peer, Failure> {
    let peer = match cx.next_dial().await {
        Ok(Some(p)) => p,
        Ok(None) => {
            let why = "the suite cannot take another dial from this target (it reaches it once)";
            return Err(Failure::new(why));
        }
        Err(f) => {
            return Err(Failure::new(format!(
                "no new dial after {how} ({:.1} s on; {}): {}",
                ended.elapsed().as_secs_f64(),
                last.said(),
                f.why
            )));
        }
    };
    let took = ended.elapsed();
    if took > last.within + LATE {
        return Err(Failure::new(format!(
            "the new dial came {:.1} s after {how}; {}",
            took.as_secs_f64(),
            last.said()
        )));
    }
    Ok(peer)
}

/// End the session as `after` says; how, in words.
async fn end(s: &mut Session, after: &RedialAfter) -> Result<String, Failure> {
    match after {
        RedialAfter::Close(code) => {
            s.peer.close_with(*code, "conformance: redial").await?;
            Ok(format!("close {code}"))
        }
        RedialAfter::Break(_) => {
            s.peer.drop_channels();
            Ok("a transport break".into())
        }
    }
}

/// The new connection's claim against the last one's: the same claimant, the attempt one
/// above (1 where the last claimed nothing); in words for the verdict.
async fn judge(
    s: &mut Session,
    cx: &Ctx,
    c: &Contract,
    cl: &Claim,
    before: Option<Claimed>,
) -> Result<String, Failure> {
    let Some(now) = claimed(s, cx, c, cl).await else {
        return Err(Failure::new(format!(
            "the redial claimed nothing: no {} within {:.1} s of its handshake",
            trigger_words(cl),
            cx.opts.deadline.as_secs_f64()
        )));
    };
    let before = before.unwrap_or_default();
    if let (Some(p), Some(b)) = (&cl.claimant, &before.claimant)
        && now.claimant.as_ref() != Some(b)
    {
        return Err(Failure::new(format!(
            "the redial claims {p} {}, not the last connection's {b}",
            now.claimant
                .as_ref()
                .map_or("nothing".into(), Value::to_string)
        )));
    }
    let want = before.attempt.unwrap_or(cl.first.unwrap_or(0)) + 1;
    if let Some(p) = &cl.attempt
        && now.attempt != Some(want)
    {
        let last = before
            .attempt
            .map_or("no claim".into(), |a| format!("{p} {a}"));
        return Err(Failure::new(format!(
            "the redial claims {p} {}, not {want} (the last connection: {last})",
            now.attempt.map_or("nothing".into(), |a| a.to_string()),
        )));
    }
    let mut words = Vec::new();
    if let (Some(p), Some(v)) = (&cl.claimant, &now.claimant) {
        words.push(format!("the same {p} {v}"));
    }
    if let (Some(p), Some(a)) = (&cl.attempt, now.attempt) {
        words.push(format!("{p} {a}"));
    }
    Ok(match words.is_empty() {
        true => String::new(),
        false => format!(", claiming {}", words.join(" and ")),
    })
}

fn trigger_words(cl: &Claim) -> String {
    serde_json::to_string(&cl.message).unwrap_or_default()
}

/// The claim `g` makes, if it is the implementation's claim `cl`.
fn fires(cx: &Ctx, c: &Contract, cl: &Claim, g: &Got) -> Option<Claimed> {
    let m = g.msg.as_ref().ok()?;
    cl.message.fires(c, &Seen::of(&cx.other, m)).then(|| {
        let v = &m.value;
        Claimed {
            claimant: (cl.claimant.as_ref()).and_then(|p| v.pointer(p).cloned()),
            attempt: (cl.attempt.as_ref()).and_then(|p| v.pointer(p)?.as_i64()),
        }
    })
}

/// The implementation's claim among what `s` has read.
fn in_log(s: &Session, cx: &Ctx, c: &Contract, cl: &Claim) -> Option<Claimed> {
    s.peer.log.iter().find_map(|g| fires(cx, c, cl, g))
}

/// The implementation's claim on `s`: one already in its log, or the next to come within
/// the suite's deadline; `None` when none comes.
async fn claimed(s: &mut Session, cx: &Ctx, c: &Contract, cl: &Claim) -> Option<Claimed> {
    if let Some(found) = in_log(s, cx, c, cl) {
        return Some(found);
    }
    let until = Instant::now() + cx.opts.deadline;
    loop {
        match s.peer.next(until).await {
            Incoming::Control(g) => {
                if let Some(found) = fires(cx, c, cl, &g) {
                    return Some(found);
                }
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            Incoming::ControlEnd(_) | Incoming::Timeout => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_is_named_by_its_close_code_or_as_a_break() {
        let c = contract::builtin("toolchannel").expect("toolchannel");
        assert_eq!(end_name(&c, &RedialAfter::Close(4008)), "DRAINING");
        assert_eq!(end_name(&c, &RedialAfter::Close(4999)), "4999");
        let brk = RedialAfter::Break(contract::model::RedialBreak::Break);
        assert_eq!(end_name(&c, &brk), "break");
    }
}
