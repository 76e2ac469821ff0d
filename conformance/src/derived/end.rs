//! `end.<machine>.<state>`: a transition of the lifecycle machine whose `ends` says how the
//! implementation ends the channel once it is taken (toolchannel's worker closing 4005
//! after its accepted release result; an LSP server exiting 0 on `exit` after `shutdown`,
//! 1 without it). On a fresh session the suite walks, by the played party's own steps, to
//! the transition's `from` (on the handshake's way, or on from its end), fires its trigger
//! (sends the message; awaits the answer to its request and holds it to the trigger's
//! `matches`; or answers the implementation's request with the `matches` written in: a
//! toolchannel heartbeat answered `continue: false`; or, where the trigger is the played
//! party's error answer, with its error example: rukh's initialize refused, beacon's tune
//! answered NO_BAND; or, where the trigger is the channel's close, ends its side: rukh's
//! early EOF), and the channel must then end as `ends` says: nothing but the end, its
//! close code on a WebSocket, and the process's exit (`exit`, or the exit the close code
//! `maps`) where the suite launched it. Where the end comes by the machine's own `steps`
//! (rukh's core closing after an error answer to its invoke), what the machine allows on
//! the way may come first: the suite answers its requests with the played party's result
//! examples and ends its own side once its answer takes the machine to a terminal state.

use std::time::{Duration, Instant};

use super::plan::{Plan, Step, step_of};
use super::probes::{after_close, closed_as};
use super::{Session, exits, plan_of};
use crate::session::{Ctx, Incoming};
use crate::{BodyFuture, Failure, Verdict, other_party, pass, skip};
use contract::Contract;
use contract::machine::{Seen, Step as Moved};
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
        // Named by the state it leaves; by its target too where another leaves it, and
        // by its index where that still repeats.
        let base = format!("end.{machine}.{}", t.from);
        let taken = |n: &str| out.iter().any(|e| e.name == n);
        let mut name = base.clone();
        if taken(&name) {
            name = format!("{base}.{}", t.to);
        }
        if taken(&name) {
            name = format!("{base}.{}.{i}", t.to);
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
    let rest: String = match (&t.trigger, e.steps) {
        (Some(Trigger::Close { .. }), _) => {
            let exit = e.exit.map(|x| format!(" exits {x}")).unwrap_or_default();
            return format!(
                "once the suite ends the channel in `{}` (to `{}`), the {}{exit}",
                t.from, t.to, e.by
            );
        }
        (_, true) => " by the machine's steps".into(),
        (_, false) => ", sending nothing more".into(),
    };
    format!(
        "once {on} takes the machine from `{}` to `{}`, the {} {how}{exit}{rest}",
        t.from, t.to, e.by
    )
}

/// The step that fires `t` for the played party, the part it answers with (`Error`: the
/// trigger is the played party's error answer), and the `matches` the suite holds its
/// answer to (an `Await`: the answer must take the machine this way); or the suite's
/// hanging up, where the trigger is the close of the channel it plays.
fn fired(c: &Contract, t: &Transition, role: &str) -> Option<Fire> {
    if let Some(Trigger::Close { channel }) = &t.trigger {
        return (*channel == super::plan::channel(c)).then_some(Fire::Hangup);
    }
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
    (!matches!(step, Step::Expect(_))).then_some(Fire::Step(step, part, holds))
}

/// What fires a transition: a step, the part an answer is and what it must hold; or the
/// suite's end of the channel.
enum Fire {
    Step(Step, Part, Vec<(String, Value)>),
    Hangup,
}

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
        let (Some(e), Some(fire_it), Some(walk)) = (
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
        let (step, part, holds) = match fire_it {
            Fire::Step(step, part, holds) => (step, part, holds),
            Fire::Hangup => {
                s.peer.drop_channels();
                let what = format!("the suite ended the channel in `{}`", t.from);
                return exited(s, cx, &e, &what, "").await;
            }
        };
        let what = fire(&mut s, cx, (&step, &t.from, &walk), (part, &holds)).await?;
        match e.steps {
            true => by_steps(s, cx, (&plan, &e, &t.to), &what).await,
            false => ended(s, cx, &e, &what).await,
        }
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
        Some(code) => format!("the {who} closed {code}"),
        None => format!("the {who} ended the channel"),
    };
    exited(s, cx, e, what, &how).await
}

/// The channel ending by the machine's steps from `state`: each message the implementation
/// sends must be one the machine allows, each request is answered with the played party's
/// result example, and once an answer takes the machine to a terminal state the suite ends
/// its side; then the exit owed.
async fn by_steps(
    mut s: Session,
    cx: &mut Ctx,
    (plan, e, state): (&Plan, &Ending, &str),
    what: &str,
) -> Result<Verdict, Failure> {
    let c = cx.wire.contract().clone();
    let Some((name, sm)) = &plan.machine else {
        return skip("no lifecycle machine");
    };
    let (mut state, who) = (state.to_string(), e.by.clone());
    let until = Instant::now() + cx.opts.deadline;
    let mut path = vec![state.clone()];
    loop {
        let got = match s.peer.next(until).await {
            Incoming::ControlEnd(_) => break,
            Incoming::Timeout => {
                let at = path.join(" → ");
                return Err(Failure::new(format!(
                    "{what}; the {who} had not ended the channel by the {name} machine's steps ({at})"
                )));
            }
            Incoming::Control(got) => got,
            Incoming::Data { .. } | Incoming::DataEnd(_) => continue,
        };
        let Some(m) = got.ok().cloned() else {
            let why = format!("{what}; the {who} sent what the contract refuses");
            return Err(Failure::new(why).with("what came", &got.raw));
        };
        match sm.on_message(&c, &state, &Seen::of(&who, &m)) {
            Moved::Moved { transition, .. } => state = transition.to.clone(),
            Moved::Stayed => {}
            Moved::OutOfPlace { .. } => {
                let sent = m.method.as_deref().unwrap_or("a message");
                return Err(Failure::new(format!(
                    "{what}; on its way to the end the {who} sent {sent}, which the {name} machine does not allow in `{state}`"
                ))
                .with("what came", &got.raw));
            }
        }
        path.push(state.clone());
        let (Some(method), Kind::Request) = (m.method.clone(), m.kind) else {
            continue;
        };
        let answer = s.answer_as(cx, &method, &m.value, Part::Result)?;
        s.peer.send(&answer).await?;
        let seen = Seen {
            from: &cx.role,
            kind: Kind::Response,
            method: Some(&method),
            value: &answer,
        };
        if let Moved::Moved { transition, .. } = sm.on_message(&c, &state, &seen) {
            state = transition.to.clone();
            path.push(state.clone());
        }
        if sm.terminal.contains(&state) {
            s.peer.drop_channels();
            break;
        }
    }
    let how = format!(
        "the {who} ended it by the {name} machine's steps ({})",
        path.join(" → ")
    );
    exited(s, cx, e, what, &how).await
}

/// The exit `e` owes, or the one a close code maps, after `what` and `how` it ended (both
/// in words, for the verdict).
async fn exited(
    s: Session,
    cx: &mut Ctx,
    e: &Ending,
    what: &str,
    how: &str,
) -> Result<Verdict, Failure> {
    let exit = match e.exit {
        Some(want) => {
            // The evidence of an exit that differs: what the implementation last said.
            let last = s.peer.log.last().map(|g| g.raw.clone());
            drop(s);
            let owed = exits::exit_owed(cx, want as i32, what).await;
            Some(owed.map_err(|f| match last {
                Some(raw) => f.with("the implementation's last message", &raw),
                None => f,
            })?)
        }
        None => after_close(s, cx).await?,
    };
    let said = [what, how, exit.as_deref().unwrap_or_default()];
    let said: Vec<&str> = said.into_iter().filter(|x| !x.is_empty()).collect();
    pass(said.join("; "))
}
