//! `end.<machine>.<state>`: a transition of the lifecycle machine whose `ends` says how the
//! implementation ends the channel once it is taken (toolchannel's worker closing 4005
//! after its accepted release result; an LSP server exiting 0 on `exit` after `shutdown`,
//! 1 without it). On a fresh session the suite walks, by the played party's own steps, to
//! the transition's `from` (on the handshake's way, or on from its end), fires its trigger
//! (sends the message; awaits the answer to its request and holds it to the trigger's
//! `matches`; or answers the implementation's request with the `matches` written in: a
//! toolchannel heartbeat answered `continue: false`; or, where the trigger is the played
//! party's error answer, with its error example: rukh's initialize refused, beacon's tune
//! answered NO_BAND), and the channel must then end as `ends` says:
//! nothing but the end, its close code on a WebSocket, and the process's exit (`exit`, or
//! the exit the close code `maps`) where the suite launched it.

use std::time::{Duration, Instant};

use super::plan::{Plan, Step, step_of};
use super::probes::{after_close, closed_as};
use super::{Session, exits, plan_of};
use crate::session::{Ctx, Incoming};
use crate::{BodyFuture, Failure, Verdict, other_party, pass, skip};
use contract::Contract;
use contract::model::{Ending, Kind, Part, Transition, Trigger};
use serde_json::Value;

/// One transition that ends the channel, as a check: its index in the lifecycle machine,
/// the check's name and title, its pointer and the seed its `ends` cites.
pub(super) struct End {
    pub index: usize,
    pub name: String,
    pub title: String,
    pub pointer: String,
    pub seed: String,
}

/// The lifecycle machine's transitions ended by the implementation's party that the played
/// party can walk to and fire.
pub(super) fn applies(c: &Contract, role: &str, plan: &Plan) -> Vec<End> {
    let (Some((machine, sm)), Some(other)) = (&plan.machine, other_party(c, role)) else {
        return Vec::new();
    };
    let mut out: Vec<End> = Vec::new();
    for (i, t) in sm.transitions.iter().enumerate() {
        let Some(e) = t.ends.as_ref().filter(|e| e.by == other) else {
            continue;
        };
        if fired(c, t, role).is_none() || plan.reaching(c, std::slice::from_ref(&t.from)).is_none()
        {
            continue;
        }
        let mut name = format!("end.{machine}.{}", t.from);
        if out.iter().any(|e| e.name == name) {
            name = format!("{name}.{i}");
        }
        out.push(End {
            index: i,
            name,
            title: title(t, e),
            pointer: contract::join_pointer(
                "/stateMachines",
                [machine, "transitions", &i.to_string(), "ends"],
            ),
            seed: e.seed.clone(),
        });
    }
    out
}

fn title(t: &Transition, e: &Ending) -> String {
    let how = match &e.code {
        Some(code) => format!("closes {code}"),
        None => "ends the channel".into(),
    };
    let exit = e
        .exit
        .map(|x| format!(" and exits {x}"))
        .unwrap_or_default();
    let on = match &t.trigger {
        Some(Trigger::Message {
            method: Some(m),
            kind,
            matches,
            ..
        }) => {
            let base = match kind {
                Some(Kind::Response) => format!("the answer to {m}"),
                Some(Kind::Error) => format!("an error answer to {m}"),
                _ => m.clone(),
            };
            let held: Vec<String> = matches.iter().map(|(p, v)| format!("{p} = {v}")).collect();
            match held.is_empty() {
                true => base,
                false => format!("{base} with {}", held.join(", ")),
            }
        }
        _ => "its trigger".into(),
    };
    format!(
        "once {on} takes the machine from `{}` to `{}`, the {} {how}{exit}, sending nothing more",
        t.from, t.to, e.by
    )
}

/// The step that fires `t` for the played party, the part it answers with (`Error`: the
/// trigger is the played party's error answer), and the `matches` the suite holds its
/// answer to (an `Await`: the answer must take the machine this way).
fn fired(c: &Contract, t: &Transition, role: &str) -> Option<Fired> {
    let Some(Trigger::Message { matches, .. }) = &t.trigger else {
        return None;
    };
    let mut bare = t.trigger.clone()?;
    let mut part = Part::Result;
    if let Trigger::Message { matches, kind, .. } = &mut bare {
        matches.clear();
        if *kind == Some(Kind::Error) {
            (*kind, part) = (Some(Kind::Response), Part::Error);
        }
    }
    let step = step_of(c, Some(&bare), role)?;
    // The implementation's own error answer would need a way to make it err.
    if part == Part::Error && !matches!(step, Step::Answer(_)) {
        return None;
    }
    let holds: Vec<(String, Value)> = matches
        .iter()
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    // The implementation's own message as the trigger would need a way to make it act:
    // a cue's work; not yet. Its request the suite answers (`Answer`) comes by itself.
    (!matches!(step, Step::Expect(_))).then_some((step, part, holds))
}

/// What fires a transition: the step, the part an answer is, what it must hold.
type Fired = (Step, Part, Vec<(String, Value)>);

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let c = cx.wire.contract().clone();
        let plan = plan_of(cx);
        let index: usize = cx
            .subject
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or_default();
        let Some((_, sm)) = &plan.machine else {
            return skip("no lifecycle machine");
        };
        let Some(t) = sm.transitions.get(index).cloned() else {
            return skip("suite bug: no such transition");
        };
        let (Some(e), Some((step, part, holds)), Some(walk)) = (
            t.ends.clone(),
            fired(&c, &t, &cx.role),
            plan.reaching(&c, std::slice::from_ref(&t.from)),
        ) else {
            return skip("suite bug: the transition no longer applies");
        };
        let mut s = Session::open(cx).await?;
        if let Err(f) = s.handshake(cx, &walk).await {
            return walk.unreached(f);
        }
        let what = fire(&mut s, cx, (&step, &t.from, &walk), (part, &holds)).await?;
        ended(s, cx, &e, &what).await
    })
}

/// Fire the transition's trigger: its message sent, its answer awaited and held to
/// `holds`, or the implementation's request answered (with a `part` example). What was
/// done, in words.
async fn fire(
    s: &mut Session,
    cx: &Ctx,
    (step, state, walk): (&Step, &str, &Plan),
    (part, holds): (Part, &[(String, Value)]),
) -> Result<String, Failure> {
    match step {
        Step::Send(m) => {
            s.send(cx, m).await?;
            Ok(format!("sent {m}"))
        }
        Step::Await(m) => {
            let id = match s.last.take().filter(|(_, sent)| sent == m) {
                Some((id, _)) => id,
                None => s.send(cx, m).await?.unwrap_or(Value::Null),
            };
            let answer = s.answer(cx, &id, m).await?;
            for (pointer, want) in holds {
                if answer.pointer(pointer) != Some(want) {
                    let bytes = answer.to_string();
                    return Err(Failure::new(format!(
                        "the answer to {m} does not take the machine on: {pointer} is not {want}"
                    ))
                    .with("the answer", bytes.as_bytes()));
                }
            }
            Ok(format!("{m} answered"))
        }
        Step::Answer(m) => {
            // The answer holds the trigger's `matches` (a heartbeat answered `continue:
            // false`), and so does any answer to the same method while the suite waits.
            let writes = holds.iter().map(|(p, v)| (m.clone(), p.clone(), v.clone()));
            s.writes.extend(writes);
            // The walk may have taken the request already (rukh's initialize, which
            // moved the machine to where it waits for the answer).
            let request = match s.owed.take().filter(|(_, r)| r == m) {
                Some((request, _)) => request,
                None => {
                    let until = Instant::now() + on_its_clock(cx, s, m);
                    let request = s.expect(cx, walk, state, m, until).await?;
                    request.ok_or_else(|| Failure::new(format!("{m} came without an id")))?
                }
            };
            let answer = s.answer_as(cx, m, &request, part)?;
            s.peer.send(&answer).await?;
            let held: Vec<String> = holds.iter().map(|(p, v)| format!("{p} = {v}")).collect();
            Ok(match (part, held.is_empty()) {
                (Part::Error, _) => format!(
                    "{m} answered with its error example ({})",
                    s.shape.error_code(&answer).unwrap_or(&Value::Null)
                ),
                (_, true) => format!("{m} answered"),
                (_, false) => format!("{m} answered with {}", held.join(", ")),
            })
        }
        Step::Expect(m) => Err(Failure::new(format!(
            "suite bug: {m} is the implementation's to send, and `fired` took it"
        ))),
    }
}

/// How long the implementation may take to send `m` of its own: the suite's deadline, or
/// longer where a clock of the contract's sends it (a heartbeat every interval, as the
/// session's messages carried it), with slack for a loaded machine.
pub(super) fn on_its_clock(cx: &Ctx, s: &Session, m: &str) -> Duration {
    let c = cx.wire.contract();
    let limits = super::carried::in_force(cx, c, s).unwrap_or_else(|| cx.limits());
    (c.limits.iter())
        .filter(|(_, l)| l.sends.as_deref() == Some(m))
        .filter_map(|(n, _)| limits.duration(n).ok())
        .map(|t| t + super::LATE)
        .fold(cx.opts.deadline, Duration::max)
}

/// The channel's end as `e` says, nothing before it, then the exit owed.
async fn ended(mut s: Session, cx: &mut Ctx, e: &Ending, what: &str) -> Result<Verdict, Failure> {
    let wait = cx.opts.deadline;
    let until = Instant::now() + wait;
    let who = e.by.clone();
    loop {
        match s.peer.next(until).await {
            Incoming::ControlEnd(_) => break,
            Incoming::Timeout => {
                return Err(Failure::new(format!(
                    "{what}; the {who} had not ended the channel {:.1} s later",
                    wait.as_secs_f64()
                )));
            }
            Incoming::Control(got) => {
                return Err(Failure::new(format!(
                    "{what}; the {who} sent more before ending the channel"
                ))
                .with("what came", &got.raw));
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
    closed_as(&s, cx, e.action, e.code.as_ref())?;
    let how = match &e.code {
        Some(code) => format!("closed {code}"),
        None => "ended the channel".into(),
    };
    let exit = match e.exit {
        Some(want) => {
            drop(s);
            Some(exits::exit_owed(cx, want as i32, what).await?)
        }
        None => after_close(s, cx).await?,
    };
    match exit {
        Some(exit) => pass(format!("{what}; the {who} {how}; {exit}")),
        None => pass(format!("{what}; the {who} {how}")),
    }
}
