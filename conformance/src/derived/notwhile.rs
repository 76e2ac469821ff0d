//! `not-while.<method>`: the implementation does not send a message of a method whose
//! `notWhile` forbids it while a request it names awaits the suite's answer (toolchannel's
//! host never releases idle or explicitly during its tools/call, note T-12).
//!
//! Playing the receiver, on a fresh session taken through the handshake, the suite sends
//! each of its cues that makes the implementation send one of the pending requests, and
//! holds each such request unanswered (for [`hold`]: the implementation's own clocks run
//! out in that time, and the suite's keep-alive beats come several times, yet the
//! implementation's patience with a quiet peer does not run out), keeping the
//! session alive by the played party's own clocks (each `sends` method at a quarter of its
//! interval in force). Other requests are answered from the examples. A message of the
//! method that comes is judged by the policy engine (`method.not-while`), which knows
//! what awaits an answer and the `unless` values: a breach fails the check, naming what
//! was held, as does any other ruling about that message (no other check sees it). Without one of the method's messages, or with none of the pending requests
//! held before it, the rule was not exercised and the check skips.

use std::time::{Duration, Instant};

use contract::model::{Kind, NotWhile, Trigger};
use contract::{Contract, Limits};
use serde_json::Value;

use super::{Session, in_force};
use crate::session::{Ctx, Incoming};
use crate::{BodyFuture, Failure, other_party, pass, skip};

/// The shortest the suite holds a request: long enough for a few keep-alive beats.
const HOLD_MIN: Duration = Duration::from_secs(1);

/// The methods the implementation (the party other than `role`) sends under a
/// `notWhile` whose pending requests it sends too, each with its check's title and seed.
pub(super) fn applies<'c>(c: &'c Contract, role: &str) -> Vec<(&'c str, String, &'c str)> {
    let Some(other) = other_party(c, role) else {
        return Vec::new();
    };
    let sent_by = |m: &str| {
        c.methods
            .get(m)
            .is_some_and(|x| x.from.iter().any(|f| f == other))
    };
    let mut out = Vec::new();
    for (m, w) in (c.methods.iter()).filter_map(|(m, x)| Some((m, x.not_while.as_ref()?))) {
        if sent_by(m) && w.pending.iter().any(|p| sent_by(p)) {
            let title = format!(
                "the {other} sends no {m} while its {} awaits an answer{}",
                w.pending.join(" or "),
                unless(w)
            );
            out.push((m.as_str(), title, w.seed.as_str()));
        }
    }
    out
}

/// The exception a title names.
fn unless(w: &NotWhile) -> String {
    let each = w.unless.iter().map(|(p, vals)| {
        let vals: Vec<String> = vals.iter().map(Value::to_string).collect();
        format!("{p} is {}", vals.join(" or "))
    });
    let all: Vec<String> = each.collect();
    match all.is_empty() {
        true => String::new(),
        false => format!(" (unless {})", all.join(", or ")),
    }
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let c = cx.wire.contract().clone();
        let method = cx.subject.clone().unwrap_or_default();
        let w = (c.methods.get(&method).and_then(|m| m.not_while.clone()))
            .ok_or_else(|| Failure::new(format!("no notWhile on {method:?}")))?;
        let mut s = match super::handshaken(cx).await? {
            Ok(s) => s,
            Err(unreached) => return Ok(unreached),
        };
        cue(&mut s, cx, &c, &w).await?;
        watch(&mut s, cx, &method, &w).await
    })
}

/// Send each of the played party's cues that sets off one of the pending requests.
async fn cue(s: &mut Session, cx: &Ctx, c: &Contract, w: &NotWhile) -> Result<(), Failure> {
    let sets_off = |m: &String| w.pending.contains(m);
    for (_, cue) in super::cues::applies(c, &cx.role) {
        if cue.expects.iter().chain(&cue.until).any(sets_off) {
            let v = super::cues::cue_message(s, cx, cue)?;
            s.send_value(&v).await?;
        }
    }
    Ok(())
}

/// A request of the implementation's the suite holds, and when it answers it.
struct Held {
    method: String,
    request: Value,
    due: Instant,
}

/// Hold the pending requests, keep the session alive and answer the rest until a message
/// of `method` comes; its verdict.
async fn watch(
    s: &mut Session,
    cx: &Ctx,
    method: &str,
    w: &NotWhile,
) -> Result<crate::Verdict, Failure> {
    let c = cx.wire.contract().clone();
    let wait = cx.opts.check_deadline.mul_f64(0.8);
    let until = Instant::now() + wait;
    let limits = in_force(cx, &c, s).unwrap_or_else(|| cx.limits());
    let keep = keeping(cx, &limits);
    let hold = hold(cx, &limits, !keep.0.is_empty());
    let mut next_keep = Instant::now();
    let mut held: Vec<Held> = Vec::new();
    let mut answered = 0;
    loop {
        let now = Instant::now();
        if now >= until {
            return skip(format!(
                "the implementation sent no {method} within {wait:?} ({answered} of its {} answered after {hold:?}): the rule was not exercised",
                w.pending.join(" or ")
            ));
        }
        if now >= next_keep {
            for m in &keep.0 {
                s.send(cx, m).await?;
            }
            next_keep = now + keep.1;
        }
        while let Some(h) = held.first().filter(|h| Instant::now() >= h.due) {
            let (m, request) = (h.method.clone(), h.request.clone());
            held.remove(0);
            s.reply(cx, &m, &request).await?;
            answered += 1;
        }
        let due = held.first().map_or(until, |h| h.due);
        let g = match s.peer.next(next_keep.min(due).min(until)).await {
            Incoming::Control(g) => g,
            Incoming::ControlEnd(why) => {
                return Err(Failure::new(format!(
                    "the channel ended before any {method}: {why}"
                )));
            }
            _ => continue,
        };
        let Some(m) = g.ok().cloned() else {
            continue;
        };
        match m.method.as_deref() {
            Some(x) if x == method && m.is_call() => {
                return judged(s, method, &g.raw, (answered, held.len()));
            }
            Some(x) if m.kind == Kind::Request && w.pending.iter().any(|p| p == x) => {
                let due = Instant::now() + hold;
                held.push(Held {
                    method: x.to_string(),
                    request: m.value.clone(),
                    due,
                });
            }
            _ if m.kind == Kind::Request
                && m.method
                    .as_deref()
                    .is_some_and(|x| c.methods.contains_key(x)) =>
            {
                s.respond(cx, &g).await?;
            }
            _ => {}
        }
    }
}

/// The verdict on the message of `method` that came (`raw`): the engine's
/// `method.not-while` finding fails it, and so does any other finding about that message,
/// which no other check sees (toolchannel's release `graceSeconds`, `limit.repeated`).
fn judged(
    s: &Session,
    method: &str,
    raw: &[u8],
    (answered, held): (usize, usize),
) -> Result<crate::Verdict, Failure> {
    let found = s.peer.judge.iter().flat_map(|j| &j.found);
    let mut found = found.filter(|f| f.ruling.rule == "method.not-while" || f.raw == raw);
    if let Some(f) = found.next() {
        let why = format!(
            "the implementation broke {}: {}",
            f.ruling.rule, f.ruling.reason
        );
        return Err(Failure::new(why).with("what drew it", &f.raw));
    }
    if answered + held == 0 {
        return skip(format!(
            "{method} came before any request it waits for: the rule was not exercised"
        ));
    }
    let allowed = match held {
        0 => String::new(),
        n => format!("; {n} still held when it came, which its values allow"),
    };
    pass(format!(
        "{answered} request(s) held and answered with no {method} meanwhile{allowed}; it breaks no stateful rule"
    ))
}

/// How long the suite holds a pending request: twice the longest clock of the
/// implementation's that sends something, and at least [`HOLD_MIN`]; where the suite
/// keeps nothing alive ([`keeping`] sends nothing), at most half the shortest silence the
/// implementation waits out (a deadline any message of the played party restarts: the
/// beacon station's idleSeconds), so the hold never ends the session.
fn hold(cx: &Ctx, limits: &Limits, keeps: bool) -> Duration {
    let c = cx.wire.contract();
    let theirs = (c.limits.iter()).filter(|(_, l)| runs(c, l, &cx.other));
    let sending = (theirs.clone().filter(|(_, l)| l.sends.is_some()))
        .filter_map(|(n, _)| limits.duration(n).ok())
        .map(|t| t * 2)
        .fold(HOLD_MIN, Duration::max);
    let silences = (theirs.filter(|(_, l)| !keeps && silence(l, &cx.role)))
        .filter_map(|(n, _)| limits.duration(n).ok())
        .map(|t| t / 2);
    silences.fold(sending, Duration::min)
}

/// Whether any message of `role`'s restarts `l`, a deadline its peer runs.
fn silence(l: &contract::model::Limit, role: &str) -> bool {
    l.kind == contract::model::LimitKind::Deadline
        && l.restart.iter().any(|t| {
            matches!(t, Trigger::Message { method: None, from, .. }
                if from.as_deref().is_none_or(|f| f == role || f == contract::machine::PEER))
        })
}

/// What the played party's own clocks send, and how often the suite sends it: a quarter of
/// the shortest such interval in force (a heartbeat well inside its interval).
fn keeping(cx: &Ctx, limits: &Limits) -> (Vec<String>, Duration) {
    let c = cx.wire.contract();
    let mine = (c.limits.iter())
        .filter(|(_, l)| runs(c, l, &cx.role))
        .filter_map(|(n, l)| Some((l.sends.clone()?, limits.duration(n).ok()?)));
    let (mut sends, mut every) = (Vec::new(), Duration::from_secs(3600));
    for (m, t) in mine {
        every = every.min(t / 4);
        sends.push(m);
    }
    (sends, every)
}

/// Whether `party` runs a clock of `l`.
fn runs(c: &Contract, l: &contract::model::Limit, party: &str) -> bool {
    l.runners(c).contains(&Some(party))
}
