//! `cue.<name>`: the implementation acts on a cue the contract declares (`cues`), as it
//! says. On a fresh session the suite walks the handshake, sends the cue (its method's call
//! example with the cue's `set` applied), and watches what follows with the policy engine
//! the proxy enforces with ([`crate::judge`]): each of `expects` must come before the first
//! of `until`, and after that nothing may break a machine (a second final event, a chunk
//! after the end); a `traced` cue's answer and those messages carry its trace id. Requests
//! the implementation makes on the cue's trace, or of a method the cue `expects`, are
//! answered from the contract's examples, as in every derived check.

use std::time::Instant;

use contract::Contract;
use contract::model::{Cue, Kind};
use serde_json::Value;

use super::behaviour::breaches;
use super::{LINGER, Session, plan_of};
use crate::session::{Ctx, Got, Incoming, with_meanwhile};
use crate::{BodyFuture, Failure, pass};

/// The cues the suite playing `role` can send.
pub(super) fn applies<'c>(c: &'c Contract, role: &str) -> Vec<(&'c String, &'c Cue)> {
    c.cues.iter().filter(|(_, cue)| cue.party == role).collect()
}

/// The check's title.
pub(super) fn title(cue: &Cue) -> String {
    let end = match &cue.until[..] {
        [one] => one.clone(),
        all => format!("one of {}", all.join(", ")),
    };
    let then = match cue.expects.is_empty() {
        true => end,
        false => format!("{}, then {end}", cue.expects.join(", ")),
    };
    let trace = match cue.traced {
        true => ", all on its trace",
        false => "",
    };
    let article = match cue.method.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => "an",
        false => "a",
    };
    format!(
        "{article} {} cue is acted on: {then}{trace}, with no machine broken",
        cue.method
    )
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let name = cx.subject.clone().unwrap_or_default();
        let cue = (c.cues.get(&name)).ok_or_else(|| Failure::new(format!("no cue {name:?}")))?;
        let mut s = Session::open(cx).await?;
        s.peer.judge();
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        let v = cue_message(&mut s, cx, cue)?;
        let trace = (c.trace.as_ref()).and_then(|t| v.pointer(&t.path)).cloned();
        let id = s.send_value(&v).await?.unwrap_or(Value::Null);
        let seen = watch(&mut s, cx, cue, &id).await?;
        verdict(&s, cue, &seen)?;
        traced(cue, trace.as_ref(), &seen)
    })
}

/// The cue as the suite sends it: its method's call example, with the cue's `set` applied.
pub(super) fn cue_message(s: &mut Session, cx: &Ctx, cue: &Cue) -> Result<Value, Failure> {
    let mut v = s.message(cx, &cue.method)?;
    for (pointer, value) in &cue.set {
        contract::set_pointer(&mut v, pointer, value.clone());
    }
    Ok(v)
}

/// One message the implementation sent after the cue.
struct Seen {
    /// Its method (an answer's: the request's).
    method: String,
    /// Whether it answers the cue.
    answer: bool,
    /// Its trace id, where the binding carries one.
    trace: Option<String>,
    /// Its bytes.
    raw: bytes::Bytes,
}

/// The implementation's messages, in order, from the cue until the first of `until` and
/// [`LINGER`] after it (answers to other requests left out); a failure when `until` does
/// not come within the deadline, or a request cue was never answered (what came to other
/// ids is shown: a misdirected answer).
async fn watch(s: &mut Session, cx: &Ctx, cue: &Cue, id: &Value) -> Result<Vec<Seen>, Failure> {
    let mut seen = Vec::new();
    let mut unclaimed = Vec::new();
    let mut until = Instant::now() + cx.opts.deadline;
    let mut ended = false;
    loop {
        match s.peer.next(until).await {
            Incoming::Control(got) => {
                let Some(m) = got.ok() else {
                    keep(&mut unclaimed, &got);
                    continue;
                };
                let answer = matches!(m.kind, Kind::Response | Kind::Error);
                let to_cue = answer && m.correlation.as_ref() == Some(id);
                // A request the cue expects is part of what it set off: it is answered.
                let expected = m.kind == Kind::Request
                    && m.method.as_ref().is_some_and(|x| cue.expects.contains(x));
                if answer && !to_cue {
                    keep(&mut unclaimed, &got);
                }
                if let (Some(method), true) = (m.method.clone(), to_cue || !answer) {
                    if !ended && !answer && cue.until.contains(&method) {
                        ended = true;
                        until = Instant::now() + LINGER;
                    }
                    let (trace, raw) = (m.trace.clone(), got.raw.clone());
                    seen.push(Seen {
                        method,
                        answer,
                        trace,
                        raw,
                    });
                }
                if expected || s.serves(std::slice::from_ref(id), &got) {
                    s.respond(cx, &got).await?;
                }
            }
            Incoming::Timeout if ended => return answered(cue, id, seen, unclaimed),
            Incoming::Timeout => {
                let secs = cx.opts.deadline.as_secs_f64();
                let f = Failure::new(format!(
                    "none of {} within {secs:.1} s of the {} cue; the implementation sent {:?}",
                    cue.until.join(", "),
                    cue.method,
                    names(&seen)
                ));
                return Err(with_meanwhile(f, unclaimed));
            }
            Incoming::ControlEnd(why) => {
                return Err(Failure::new(format!(
                    "the channel ended after the cue, having sent {:?}: {why}",
                    names(&seen)
                )));
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
}

/// Keep `got` to show, up to a few.
fn keep(unclaimed: &mut Vec<Got>, got: &Got) {
    if unclaimed.len() < super::UNCLAIMED {
        unclaimed.push(got.clone());
    }
}

/// `seen`, when a request cue (one with an id) got its answer.
fn answered(
    cue: &Cue,
    id: &Value,
    seen: Vec<Seen>,
    unclaimed: Vec<Got>,
) -> Result<Vec<Seen>, Failure> {
    if id.is_null() || seen.iter().any(|s| s.answer) {
        return Ok(seen);
    }
    let f = Failure::new(format!(
        "no answer to the {} cue (id {id}); the implementation sent {:?}",
        cue.method,
        names(&seen)
    ));
    Err(with_meanwhile(f, unclaimed))
}

/// Every expected method came before the end, and the engine ruled nothing against the
/// implementation's messages.
fn verdict(s: &Session, cue: &Cue, seen: &[Seen]) -> Result<(), Failure> {
    let seen = names(seen);
    let end = (seen.iter())
        .position(|m| cue.until.contains(m))
        .unwrap_or(seen.len());
    let missing: Vec<&String> = (cue.expects.iter())
        .filter(|m| !seen[..end].contains(m))
        .collect();
    if !missing.is_empty() {
        return Err(Failure::new(format!(
            "no {missing:?} before {}: the implementation sent {seen:?}",
            seen.get(end).map_or("the end", String::as_str)
        )));
    }
    breaches(&s.peer, "after the cue the implementation")
}

/// A `traced` cue: its answer and every message of `expects` and `until` carry `trace`.
fn traced(cue: &Cue, trace: Option<&Value>, seen: &[Seen]) -> Result<crate::Verdict, Failure> {
    let ours =
        |s: &&Seen| s.answer || cue.expects.contains(&s.method) || cue.until.contains(&s.method);
    if let (true, Some(want)) = (cue.traced, trace.and_then(Value::as_str)) {
        let off = seen
            .iter()
            .filter(ours)
            .find(|s| s.trace.as_deref() != Some(want));
        if let Some(bad) = off {
            let why = format!(
                "{} carries trace {:?}, not the cue's {want:?}",
                bad.method, bad.trace
            );
            return Err(Failure::new(why).with("the message", &bad.raw));
        }
    }
    let n = seen.iter().filter(ours).count();
    let on_trace = match cue.traced {
        true => ", all on the cue's trace",
        false => "",
    };
    pass(format!(
        "sent {:?}: {n} of them the cue's{on_trace}",
        names(seen)
    ))
}

fn names(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(|s| s.method.clone()).collect()
}
