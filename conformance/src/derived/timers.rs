//! The timer family: a deadline or interval the implementation's party runs (`timer`),
//! whose clock a trigger starts (`start`), runs out the way the contract says: the
//! party sends the method the limit `sends` (the kernel's ping after a silence), or the
//! channel ends as its `action` prescribes (the kernel's dead peer). The suite plays its
//! party through the handshake, or only up to the start where the handshake would stop
//! the clock (toolchannel's handshake deadline), then falls silent and stays so: it sends
//! and answers nothing, so only the implementation's own messages move the clock (a
//! restart on its own ping). A clock runs as long as the session's messages carried
//! (`carried`, toolchannel's budgets), whoever sent them.
//!
//! Where the clock restarts on messages and the contract ignores bytes that are not JSON
//! (`violations.parse`), the suite is not quite silent while it waits for the end: it
//! writes such a line every sixth of the clock, which must not restart it (xsession's
//! parseableLineDeadline: garbage does not extend it).
//!
//! The checks of the family share one silent session where their clocks run on it: the
//! clock of each is computed from the session's whole traffic, both directions, by the
//! limit's own triggers, so a check taking over the session the one before kept judges it
//! as if it had watched from the start. The checks that end the channel come last.

use std::time::{Duration, Instant};

use contract::Contract;
use contract::machine::{ClockMove, Seen};
use contract::model::{Kind, Limit, LimitKind, Part, Trigger};
use contract::wire::Message;
use serde_json::Value;

use super::carried;
use super::plan::{Plan, Step};
use super::probes::{action_name, closed_as, ends_the_channel};
use super::shape::Shape;
use super::{LATE, Session, example_of, plan_of, redial};
use crate::session::{Ctx, Got, Incoming, Kept};
use crate::{BodyFuture, Failure, Verdict, pass};

/// How early a clock may run out: an implementation's timer granularity (a 100 ms tick
/// is common), not an early expiry; at most a quarter of the clock's time. It does not
/// shrink with `CONTRACT_TIME_SCALE`: a tick does not.
const EARLY: Duration = Duration::from_millis(250);
/// How many of a limit's sends are watched when its own send restarts it (the second
/// shows the spacing of sends that go unanswered).
const SENDS_WATCHED: usize = 2;

/// What the suite writes as noise while a clock runs (see the module doc).
const NOISE: &[u8] = b"conformance noise, not JSON";
/// Noise lines per run of the clock.
const NOISE_PER_CLOCK: u32 = 6;

/// A session the suite has fallen silent on, for the next check of the family.
struct Silent(Session);

/// The limits the family checks for the suite playing `role`, in the order they run:
/// those the implementation's party runs, started by a trigger, that run out on the wire.
pub(super) fn applies<'c>(c: &'c Contract, role: &str) -> Vec<(&'c str, &'c Limit)> {
    let Some(shape) = Shape::of(c) else {
        return Vec::new();
    };
    let mut out: Vec<(&str, &Limit)> = c
        .limits
        .iter()
        .filter(|(_, l)| matches!(l.kind, LimitKind::Deadline | LimitKind::Interval))
        .filter(|(_, l)| runner(c, l, role).is_some() && seen_to_run_out(l))
        .filter(|(_, l)| match &l.start {
            Some(Trigger::Open { channel }) => *channel == shape.channel,
            Some(Trigger::Message { .. }) => true,
            _ => false,
        })
        .map(|(n, l)| (n.as_str(), l))
        .collect();
    // Sends first, then what ends the channel; shorter clocks first within each.
    let limits = contract::Limits::new(c);
    let time = |n: &str| limits.duration(n).unwrap_or(Duration::MAX);
    out.sort_by_key(|(n, l)| (l.sends.is_none(), time(n)));
    out
}

/// The party under test whose clock `l` is, when the suite plays `role`.
fn runner<'c>(c: &'c Contract, l: &'c Limit, role: &str) -> Option<&'c str> {
    l.runners(c).into_iter().flatten().find(|p| *p != role)
}

/// Whether the wire shows the limit running out: a message it sends, or the channel's end.
fn seen_to_run_out(l: &Limit) -> bool {
    l.sends.is_some()
        || l.action
            .as_ref()
            .is_some_and(|a| ends_the_channel(a.action))
}

/// The check's title.
pub(super) fn title(c: &Contract, role: &str, name: &str, l: &Limit) -> String {
    let after = match (&l.sends, &l.action) {
        (Some(m), _) => format!("sends {m}"),
        (None, Some(a)) => format!("ends the channel (`{}`)", action_name(a.action)),
        (None, None) => "runs out".into(),
    };
    let other = crate::other_party(c, role).unwrap_or_default();
    let then = match redial::after_timer(c, other, l) {
        Some(_) => ", then dials again as the channel's redial says",
        None => "",
    };
    format!(
        "with the suite silent from the clock's start, the implementation {after} when {name} runs out, not before{then}"
    )
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let name = cx.subject.clone().unwrap_or_default();
        let c = cx.wire.contract().clone();
        let l = c
            .limits
            .get(&name)
            .ok_or_else(|| Failure::new(format!("suite bug: no limit {name}")))?;
        let runner = runner(&c, l, &cx.role)
            .ok_or_else(|| Failure::new(format!("suite bug: {name} has no runner")))?
            .to_string();
        let mut clock = Clock {
            c: &c,
            l,
            name: &name,
            runner: &runner,
            time: cx.limits().duration(&name)?,
        };
        let kept = cx.kept.take().and_then(Kept::take::<Silent>);
        // A kept session serves when this clock runs on it too; else it ends here.
        let kept = kept.filter(|Silent(s)| clock.base(s, s.peer.opened, None).is_some());
        let mut s = match kept {
            Some(Silent(s)) => s,
            None => {
                let plan = plan_of(cx);
                let mut s = Session::open(cx).await?;
                let steps = walk_length(&clock, &plan, &cx.role, &cx.other);
                if let Err(f) = s.walk_to(cx, &plan, steps).await {
                    return plan.unreached(f);
                }
                s
            }
        };
        let opened = s.peer.opened;
        if !await_start(&mut s, cx, &mut clock, opened).await? {
            // What should have started it is judged by its own check (a heartbeat's
            // interval): one broken rule, one failing check.
            return crate::skip(format!(
                "nothing started the clock within {:.1} s (its start: {})",
                opened.elapsed().as_secs_f64(),
                serde_json::to_string(&clock.l.start).unwrap_or_default()
            ));
        }
        match &l.sends {
            Some(m) => {
                let v = watch_sends(&mut s, cx, &mut clock, m, opened).await?;
                cx.kept = Some(Kept::new(Silent(s)));
                Ok(v)
            }
            None => {
                let v = watch_end(&mut s, cx, &mut clock, opened).await?;
                match redials(cx, &s, &clock)? {
                    Some((code, last)) => redialed(cx, code, last, v).await,
                    None => Ok(v),
                }
            }
        }
    })
}

/// How many steps of `plan`'s handshake a fresh session walks before it falls silent:
/// the whole handshake when the clock runs at its end (every value the suite carries is
/// then sent), else up to the first step after which it runs (toolchannel's handshake
/// deadline runs from open until initialize, which the handshake sends); the whole
/// handshake when no step starts it (its start comes later: a heartbeat's grace).
/// Judged from the examples the steps send, before any is sent.
fn walk_length(clock: &Clock<'_>, plan: &Plan, me: &str, other: &str) -> usize {
    // Each step's messages, as the walk sends and takes them (an `Await` not after its
    // `Send` asks first; an `Answer` not after its `Expect` takes the request first).
    let mut steps: Vec<Vec<(&str, Part, &str)>> = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| &plan.steps[p]);
        steps.push(match step {
            Step::Send(m) => vec![(me, Part::Call, m)],
            Step::Await(m) if prev == Some(&Step::Send(m.clone())) => {
                vec![(other, Part::Result, m)]
            }
            Step::Await(m) => vec![(me, Part::Call, m), (other, Part::Result, m)],
            Step::Expect(m) => vec![(other, Part::Call, m)],
            Step::Answer(m) if prev == Some(&Step::Expect(m.clone())) => {
                vec![(me, Part::Result, m)]
            }
            Step::Answer(m) => vec![(other, Part::Call, m), (me, Part::Result, m)],
        });
    }
    let examples: Vec<Vec<(&str, Kind, &str, Value)>> = (steps.iter())
        .map(|msgs| {
            (msgs.iter())
                .map(|(from, part, m)| {
                    let kind = match part {
                        Part::Call => clock
                            .c
                            .methods
                            .get(*m)
                            .map_or(Kind::Notification, |x| x.kind),
                        _ => Kind::Response,
                    };
                    let v = example_of(clock.c, m, *part, from).unwrap_or(Value::Null);
                    (*from, kind, *m, v)
                })
                .collect()
        })
        .collect();
    let running = |n: usize| {
        let seen: Vec<Seen> = (examples[..n].iter().flatten())
            .map(|(from, kind, m, value)| Seen {
                from,
                kind: *kind,
                method: Some(m),
                value,
            })
            .collect();
        clock.runs_after(&seen)
    };
    let all = plan.steps.len();
    match running(all) {
        true => all,
        false => (0..all).find(|n| running(*n)).unwrap_or(all),
    }
}

/// Wait, silent, for the clock's start where nothing has started it yet (a heartbeat's
/// grace starts at the implementation's own heartbeat, one of its intervals away);
/// whether it started.
async fn await_start(
    s: &mut Session,
    cx: &Ctx,
    clock: &mut Clock<'_>,
    opened: Instant,
) -> Result<bool, Failure> {
    let limits = carried::in_force(cx, clock.c, s).unwrap_or_else(|| cx.limits());
    let longest = (clock.c.limits.iter())
        .filter(|(_, l)| l.sends.is_some() && runner(clock.c, l, &cx.role) == Some(clock.runner))
        .filter_map(|(n, _)| limits.duration(n).ok())
        .max();
    let until = Instant::now() + longest.unwrap_or(cx.opts.deadline) + LATE;
    while clock.base(s, opened, None).is_none() {
        match s.peer.next(until).await {
            Incoming::Control(_) | Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            Incoming::ControlEnd(why) => {
                let f = format!("the channel ended ({why}) before anything started the clock");
                return Err(Failure::new(f));
            }
            Incoming::Timeout => break,
        }
    }
    clock.refresh(cx, s);
    Ok(clock.base(s, opened, None).is_some())
}

/// One limit's clock, as the implementation's party keeps it.
struct Clock<'a> {
    c: &'a Contract,
    l: &'a Limit,
    name: &'a str,
    runner: &'a str,
    /// How long it runs, as the session's messages set it (see [`carried`]).
    time: Duration,
}

impl Clock<'_> {
    /// Take the time the session's messages set, where the contract carries values.
    fn refresh(&mut self, cx: &Ctx, s: &Session) {
        let limits = carried::in_force(cx, self.c, s);
        if let Some(t) = limits.and_then(|l| l.duration(self.name).ok()) {
            self.time = t;
        }
    }

    /// Whether the clock runs after `seen`, in order, from a connection's opening.
    fn runs_after(&self, seen: &[Seen<'_>]) -> bool {
        let mut running = matches!(self.l.start, Some(Trigger::Open { .. }));
        for m in seen {
            match self.l.clock_move(self.c, m, Some(self.runner), running) {
                ClockMove::Armed => running = true,
                ClockMove::Stopped => running = false,
                ClockMove::Unchanged => {}
            }
        }
        running
    }

    /// When the clock last (re)started, from the session's traffic up to `until`
    /// (exclusive), or `None` while it is not running.
    fn base(&self, s: &Session, opened: Instant, until: Option<Instant>) -> Option<Instant> {
        let me = s.peer.me.as_str();
        let other = s.peer.other.as_str();
        let mut events: Vec<(Instant, &str, &Message)> = s
            .peer
            .sent
            .iter()
            .map(|(at, m)| (*at, me, m))
            .chain(
                s.peer
                    .log
                    .iter()
                    .filter_map(|g| Some((g.at, other, g.msg.as_ref().ok()?))),
            )
            .filter(|(at, ..)| until.is_none_or(|u| *at < u))
            .collect();
        events.sort_by_key(|(at, ..)| *at);
        let mut base = matches!(self.l.start, Some(Trigger::Open { .. })).then_some(opened);
        for (at, from, m) in events {
            let seen = Seen::of(from, m);
            match self
                .l
                .clock_move(self.c, &seen, Some(self.runner), base.is_some())
            {
                ClockMove::Armed => base = Some(at),
                ClockMove::Stopped => base = None,
                ClockMove::Unchanged => {}
            }
        }
        base
    }

    /// A failure when something at `at` came before the clock started at `base` ran out.
    fn early(&self, base: Instant, at: Instant, what: &str) -> Result<(), Failure> {
        let after = at.saturating_duration_since(base);
        if after + EARLY.min(self.time / 4) >= self.time {
            return Ok(());
        }
        Err(Failure::new(format!(
            "{what} {:.2} s after the clock (re)started, before its {:.2} s ran out",
            after.as_secs_f64(),
            self.time.as_secs_f64()
        )))
    }
}

/// The implementation sends `method` when the clock runs out, not before; watched for
/// [`SENDS_WATCHED`] sends when its own send restarts the clock.
async fn watch_sends(
    s: &mut Session,
    cx: &Ctx,
    clock: &mut Clock<'_>,
    method: &str,
    opened: Instant,
) -> Result<Verdict, Failure> {
    let mut seen = Vec::new();
    let want = match restarted_by_own(clock, method) {
        true => SENDS_WATCHED,
        false => 1,
    };
    while seen.len() < want {
        clock.refresh(cx, s);
        let base = started(clock, s, opened, None)?;
        match s.peer.next(base + clock.time + LATE).await {
            Incoming::Control(g) if g.method() == Some(method) && is_call(&g) => {
                let base = started(clock, s, opened, Some(g.at))?;
                let what = format!("{method} came");
                clock
                    .early(base, g.at, &what)
                    .map_err(|f| f.with(format!("the {method}"), &g.raw))?;
                seen.push(g.at.saturating_duration_since(base).as_secs_f64());
            }
            Incoming::Control(_) | Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            Incoming::ControlEnd(why) => {
                return Err(Failure::new(format!(
                    "the channel ended ({why}) before {method} number {} came",
                    seen.len() + 1
                )));
            }
            Incoming::Timeout => {
                return Err(Failure::new(format!(
                    "no {method} within {:.2} s of the clock's (re)start ({:.2} s, and {:.1} s of slack)",
                    (clock.time + LATE).as_secs_f64(),
                    clock.time.as_secs_f64(),
                    LATE.as_secs_f64()
                )));
            }
        }
    }
    let each: Vec<String> = seen.iter().map(|t| format!("{t:.2} s")).collect();
    pass(format!(
        "{method} {} after each (re)start of the clock ({:.2} s)",
        each.join(", "),
        clock.time.as_secs_f64()
    ))
}

/// The channel ends when the clock runs out, not before.
async fn watch_end(
    s: &mut Session,
    cx: &Ctx,
    clock: &mut Clock<'_>,
    opened: Instant,
) -> Result<Verdict, Failure> {
    let name = clock.name;
    let action = clock.l.action.as_ref().map(|a| action_name(a.action));
    let action = action.unwrap_or("end");
    let mut sent = 0usize;
    let every = noise(clock).then(|| clock.time / NOISE_PER_CLOCK);
    let mut noise_at = every.map(|e| Instant::now() + e);
    let mut noisy = 0u32;
    loop {
        clock.refresh(cx, s);
        let base = started(clock, s, opened, None)?;
        let end = base + clock.time + LATE;
        match s.peer.next(noise_at.map_or(end, |n| n.min(end))).await {
            Incoming::Timeout if noise_at.is_some_and(|n| n < end) => {
                // A write the closing channel refuses shows as its end on the next read.
                let _ = s.peer.send_raw(NOISE).await;
                noisy += 1;
                noise_at = noise_at.zip(every).map(|(n, e)| n + e);
            }
            Incoming::Control(_) => sent += 1,
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            Incoming::ControlEnd(why) => {
                let at = Instant::now();
                clock.early(base, at, &format!("the channel ended ({why})"))?;
                if let Some(a) = &clock.l.action {
                    closed_as(s, cx, a.action, a.code.as_ref())?;
                    names(s, a)?;
                }
                return pass(format!(
                    "the channel ended ({why}) {:.2} s after the clock's last (re)start ({name}: {:.2} s; {noisy} lines that are not JSON did not restart it); {sent} more messages from the implementation before it",
                    at.saturating_duration_since(base).as_secs_f64(),
                    clock.time.as_secs_f64()
                ));
            }
            Incoming::Timeout => {
                return Err(Failure::new(format!(
                    "the channel was still open {:.2} s after the clock's last (re)start; when {name} ({:.2} s) runs out the contract prescribes `{action}`",
                    (clock.time + LATE).as_secs_f64(),
                    clock.time.as_secs_f64()
                )));
            }
        }
    }
}

/// The action's close code, where it is one the channel's dialer redials after
/// (toolchannel's 1001 on the worker's own deadlines), with what the redial is judged
/// against.
fn redials(
    cx: &Ctx,
    s: &Session,
    clock: &Clock<'_>,
) -> Result<Option<(u16, redial::Last)>, Failure> {
    match redial::after_timer(clock.c, &cx.other, clock.l) {
        Some(code) => Ok(Some((code, redial::Last::of(cx, s)?))),
        None => Ok(None),
    }
}

/// The implementation's redial after its own close `code`, judged as the redial family
/// judges it, added to the verdict `v`.
async fn redialed(
    cx: &mut Ctx,
    code: u16,
    last: redial::Last,
    v: Verdict,
) -> Result<Verdict, Failure> {
    let Verdict::Pass(said) = &v else {
        return Ok(v);
    };
    let how = format!("close {code}");
    let words = redial::comes_back(cx, last, (&how, Instant::now()), true).await?;
    pass(format!("{said}; then the implementation {words}"))
}

/// The close reason names what the action says it names (toolchannel's failureReason,
/// T-6), where the channel carries a close frame.
fn names(s: &Session, a: &contract::model::Action) -> Result<(), Failure> {
    let (Some(name), Some(Some(f))) = (&a.reason, &s.peer.closed_with) else {
        return Ok(());
    };
    match f.reason.contains(name.as_str()) {
        true => Ok(()),
        false => Err(Failure::new(format!(
            "the close {} reason {:?} does not name {name}, as the contract's action says",
            f.code, f.reason
        ))),
    }
}

/// Whether the suite writes noise while `clock` runs: only messages restart it, and the
/// contract ignores a line that is not JSON.
fn noise(clock: &Clock<'_>) -> bool {
    let ignored = (clock.c.violations.parse.as_ref())
        .is_some_and(|a| a.action == contract::model::ActionKind::Ignore);
    let restart = &clock.l.restart;
    ignored && !restart.is_empty() && restart.iter().all(|t| matches!(t, Trigger::Message { .. }))
}

/// When the clock last (re)started, or a skip-worthy failure when nothing started it.
fn started(
    clock: &Clock<'_>,
    s: &Session,
    opened: Instant,
    until: Option<Instant>,
) -> Result<Instant, Failure> {
    clock.base(s, opened, until).ok_or_else(|| {
        Failure::new(format!(
            "nothing in the session started the clock (its start: {})",
            serde_json::to_string(&clock.l.start).unwrap_or_default()
        ))
    })
}

/// Whether the runner's own `method` restarts the clock (each unanswered ping gets a
/// whole period).
fn restarted_by_own(clock: &Clock<'_>, method: &str) -> bool {
    clock.l.restart.iter().any(|t| {
        matches!(t, Trigger::Message { method: Some(m), from: Some(f), .. }
            if m == method && f == contract::machine::RUNNER)
    })
}

/// Whether `g` is a method's own message (not an answer).
fn is_call(g: &Got) -> bool {
    g.msg.as_ref().is_ok_and(|m| {
        !matches!(
            m.kind,
            contract::model::Kind::Response | contract::model::Kind::Error
        )
    })
}
