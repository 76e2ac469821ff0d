//! The agreements family: a value the handshake settles and later messages repeat
//! (`agreements`: toolchannel's sessionId and effective channel version).
//! - `agreement.<name>`, playing the party the judge is not: the suite states another
//!   value at the first place it can (a settling one under `same`, else a repeated one),
//!   and the implementation must react as `mismatch` says: the error reply to a request,
//!   then the close of `then`, naming the code where no reply could carry it, and both
//!   values where `namesBoth`;
//! - `agreement.<name>`, playing the judge: through the handshake and until each repeated
//!   place of the implementation's came once (on the clock that sends it), every value
//!   the implementation states is the agreed one. With a `version`, the suite states the
//!   floor of its lowest value (`1.0.0`), so a `lowest` rule is told from either side's
//!   own value;
//! - `agreement.<name>.own`, playing the judge of a `known` value: the suite states
//!   another value than the implementation knows. It must state its own, not echo the
//!   suite's; the suite then reacts as the judge and the implementation ends as that
//!   close obliges it (its exit).
//!
//! Every check's session states the agreed value where the played party repeats one
//! ([`write`]): its examples' value may not be what this session agreed.

use contract::Contract;
use contract::model::{Action, ActionKind, Agreement, AgreementRule, Part, Place};
use serde_json::Value;
use std::time::Instant;

use super::connections::watch;
use super::plan::{Plan, Step, example_of};
use super::probes::{closed_as, ends_the_channel};
use super::{Session, dealias, plan_of};
use crate::session::{Ctx, Got, Incoming, with_meanwhile};
use crate::{BodyFuture, Failure, Verdict, pass, skip};

/// One check of the family: its id (after `agreement.`), title, seed and subject.
pub(super) struct Applies {
    pub id: String,
    pub title: String,
    pub seed: String,
    pub subject: String,
}

/// The family's checks for the party `role`.
pub(super) fn applies(c: &Contract, role: &str) -> Vec<Applies> {
    let plan = Plan::new(c, role);
    let mut out = Vec::new();
    for (name, a) in &c.agreements {
        let seed = a.seed.clone();
        let mut add = |id: String, title: String, kind: &str| {
            let subject = format!("{kind}:{name}");
            out.push(Applies {
                id,
                title,
                seed: seed.clone(),
                subject,
            });
        };
        if role != a.judge {
            if let Some((p, _)) = provoked(c, a, &plan) {
                let title = format!(
                    "another {name} at {} {} gets `{}`",
                    p.method,
                    p.pointer,
                    said(&a.mismatch)
                );
                add(name.clone(), title, "provoke");
            }
            continue;
        }
        if all_places(a).any(|p| !c.states(p, role)) {
            let title = format!(
                "every {name} the implementation states, through the handshake and its repeats, is the agreed one ({})",
                rule(a)
            );
            add(name.clone(), title, "watch");
        }
        if a.known && echo_step(c, a, &plan).is_some() {
            let title = format!(
                "offered another {name} than its own, the implementation states its own, and ends as `{}` obliges it",
                said(&a.mismatch)
            );
            add(format!("{name}.own"), title, "own");
        }
    }
    out
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let subject = cx.subject.clone().unwrap_or_default();
        let (kind, name) = subject.split_once(':').unwrap_or_default();
        let c = cx.wire.contract().clone();
        let a = (c.agreements.get(name)).ok_or_else(|| Failure::new("suite bug: no agreement"))?;
        match kind {
            "provoke" => provoke(cx, name, a).await,
            "watch" => kept(cx, name, a).await,
            _ => own(cx, name, a).await,
        }
    })
}

fn all_places(a: &Agreement) -> impl Iterator<Item = &Place> {
    a.settled.iter().chain(&a.repeated)
}

fn rule(a: &Agreement) -> &'static str {
    match a.rule {
        AgreementRule::Same => "the same throughout",
        AgreementRule::Lowest => "the lowest of the settling statements",
    }
}

/// `a` in words: its action and code, then its `then`'s.
fn said(a: &Action) -> String {
    match &a.then {
        Some(t) => format!(
            "{}, then {}",
            super::claims::said(a),
            super::claims::said(t)
        ),
        None => super::claims::said(a),
    }
}

/// The first place the played party states where another value is a mismatch, with the
/// walk's step that states it (`None`: a request the suite sends after the handshake).
fn provoked<'a>(c: &Contract, a: &'a Agreement, plan: &Plan) -> Option<(&'a Place, Option<usize>)> {
    let settling = match a.rule {
        AgreementRule::Same => &a.settled[1.min(a.settled.len())..],
        AgreementRule::Lowest => &[],
    };
    let staying = plan.staying(c);
    let reacts = |p: &Place| {
        a.mismatch.action != ActionKind::ReplyError || a.mismatch.then.is_some() || is_request(c, p)
    };
    for p in settling.iter().chain(&a.repeated) {
        if !c.states(p, &plan.role) || !reacts(p) {
            continue;
        }
        let step = plan.steps.iter().position(|s| match s {
            Step::Send(m) => m == &p.method && p.kind.is_none(),
            Step::Answer(m) => m == &p.method && p.kind.is_some(),
            _ => false,
        });
        if step.is_some() {
            return Some((p, step));
        }
        if p.kind.is_none() && staying.contains(&p.method) {
            return Some((p, None));
        }
    }
    None
}

fn is_request(c: &Contract, p: &Place) -> bool {
    p.kind.is_none()
        && c.methods
            .get(&p.method)
            .is_some_and(|m| m.kind == contract::model::Kind::Request)
}

/// The walk's step at which the implementation states a settling value after the suite
/// stated the first: what an echo would show.
fn echo_step(c: &Contract, a: &Agreement, plan: &Plan) -> Option<usize> {
    // The suite states the first value, the implementation a later one.
    a.settled.first().filter(|p| c.states(p, &plan.role))?;
    let later = a
        .settled
        .iter()
        .skip(1)
        .find(|p| !c.states(p, &plan.role))?;
    plan.steps.iter().position(|s| match s {
        Step::Await(m) => m == &later.method && later.kind.is_some(),
        Step::Expect(m) => m == &later.method && later.kind.is_none(),
        _ => false,
    })
}

/// The value the played party's example states at `p`, as this session writes it.
fn example_value(cx: &Ctx, p: &Place, role: &str) -> Option<Value> {
    let mut v = example_of(cx.wire.contract(), &p.method, p.part()?, role)?;
    dealias(&cx.aliases, &mut v);
    v.pointer(&p.pointer).cloned()
}

/// Another example of the played party's at `p` whose value there is not `agreed`: that
/// value, with the object holding it (its pointer and the example's object there). Where
/// the examples show a place's alternatives, one of them is a wrong value the schema
/// allows, with what goes with it (rukh's `describe` invoke beside the `execute` one).
fn another_example(cx: &Ctx, p: &Place, agreed: &Value) -> Option<(Value, (String, Value))> {
    let m = cx.wire.contract().methods.get(&p.method)?;
    let part = p.part()?;
    let role = cx.role.as_str();
    let ours = |e: &&contract::model::Example| {
        e.part == part && e.from.as_deref().is_none_or(|f| f == role)
    };
    let (holder, _) = p.pointer.rsplit_once('/')?;
    let examples: Vec<Value> = (m.examples.iter().filter(ours))
        .map(|e| {
            let mut v = e.message.clone();
            dealias(&cx.aliases, &mut v);
            v
        })
        .collect();
    // Only where they differ among themselves: a value that differs from the session's
    // only because the session is not the example's is no alternative.
    let mut values = examples.iter().filter_map(|v| v.pointer(&p.pointer));
    let first = values.next()?;
    if values.all(|v| v == first) {
        return None;
    }
    examples.iter().find_map(|v| {
        let wrong = v.pointer(&p.pointer).filter(|w| *w != agreed)?.clone();
        Some((wrong, (holder.to_string(), v.pointer(holder)?.clone())))
    })
}

/// A value other than `v`, of its type: a string ending in a number with that number one
/// higher (`1.1.0` → `1.1.1`, `command-result/1` → `command-result/2`), another string
/// with a suffix, a number one higher; an object or array with its first member so.
pub(super) fn other_than(v: &Value) -> Value {
    match v {
        Value::String(s) => {
            let head = s.trim_end_matches(|c: char| c.is_ascii_digit());
            match s[head.len()..].parse::<u64>() {
                Ok(n) => {
                    let width = s.len() - head.len();
                    Value::String(format!("{head}{:0width$}", n + 1))
                }
                Err(_) => Value::String(format!("{s}-other")),
            }
        }
        Value::Number(n) => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
        Value::Object(o) => {
            let mut o = o.clone();
            if let Some(first) = o.values_mut().next() {
                *first = other_than(first);
            }
            Value::Object(o)
        }
        Value::Array(a) if !a.is_empty() => {
            let mut a = a.clone();
            a[0] = other_than(&a[0]);
            Value::Array(a)
        }
        _ => Value::String("other".into()),
    }
}

/// A value as a close reason names it.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every statement of `a` on the session so far, in the order they went, each with who
/// made it and the message it came in (`None`: one the suite sent).
fn statements<'s>(cx: &Ctx, s: &'s Session, a: &Agreement) -> Vec<Stated<'s>> {
    let c = cx.wire.contract();
    let (me, other) = (s.peer.me.as_str(), s.peer.other.as_str());
    let sent = s.peer.sent.iter().map(|(at, m)| (*at, me, m, None));
    let heard =
        (s.peer.log.iter()).filter_map(|g| Some((g.at, other, g.msg.as_ref().ok()?, Some(g))));
    let mut all: Vec<_> = sent.chain(heard).collect();
    all.sort_by_key(|(at, ..)| *at);
    let mut out = Vec::new();
    for (_, from, m, got) in all {
        for (i, p) in a.settled.iter().enumerate() {
            if let Some(v) = p.value_in(c, m) {
                out.push(Stated {
                    settles: Some(i),
                    value: v.clone(),
                    by_suite: from == me,
                    got,
                });
            }
        }
        for p in &a.repeated {
            if let Some(v) = p.value_in(c, m) {
                out.push(Stated {
                    settles: None,
                    value: v.clone(),
                    by_suite: from == me,
                    got,
                });
            }
        }
    }
    out
}

/// One statement of an agreement's value.
struct Stated<'s> {
    /// The settling place it is at, if it is one.
    settles: Option<usize>,
    value: Value,
    by_suite: bool,
    got: Option<&'s Got>,
}

/// The agreed value after `stated`.
fn agreed(a: &Agreement, stated: &[Stated]) -> Option<Value> {
    let mut settled = vec![None; a.settled.len()];
    for s in stated {
        if let Some(slot) = s
            .settles
            .and_then(|i| settled.get_mut(i))
            .filter(|v| v.is_none())
        {
            *slot = Some(s.value.clone());
        }
    }
    a.agreed(&settled).cloned()
}

/// `v`, the played party's `part` of `method`, with the value the session agreed written
/// at each place it repeats one (a heartbeat's effective version, whatever the examples
/// say), once the handshake settled it.
pub(super) fn write(cx: &Ctx, s: &Session, (method, part): (&str, Part), v: &mut Value) {
    let c = cx.wire.contract();
    for a in c.agreements.values() {
        let here = a
            .repeated
            .iter()
            .filter(|p| p.method == method && p.part() == Some(part));
        let places: Vec<&Place> = here.filter(|p| c.states(p, &cx.role)).collect();
        if places.is_empty() {
            continue;
        }
        let Some(agreed) = agreed(a, &statements(cx, s, a)) else {
            continue;
        };
        for p in places {
            if v.pointer(&p.pointer).is_some() {
                contract::set_pointer(v, &p.pointer, agreed.clone());
            }
        }
    }
}

/// Playing the party the judge is not: another value, and the judge's reaction.
async fn provoke(cx: &mut Ctx, name: &str, a: &Agreement) -> Result<Verdict, Failure> {
    let c = cx.wire.contract().clone();
    let plan = plan_of(cx);
    let (p, step) =
        provoked(&c, a, &plan).ok_or_else(|| Failure::new("suite bug: no place to provoke"))?;
    let mut s = Session::open(cx).await?;
    let upto = step.unwrap_or(plan.steps.len());
    if let Err(f) = s.walk_to(cx, &plan, upto).await {
        return plan.unreached(f);
    }
    // What the session agreed so far: the wrong value is the other settling statement
    // where it differs (a side using its own version), else one of no side's.
    let mut so_far = statements(cx, &s, a);
    let mine = example_value(cx, p, &cx.role)
        .ok_or_else(|| Failure::new(format!("no example of {} carries {}", p.method, p.pointer)))?;
    if let Some(i) = a.settled.iter().position(|x| x == p) {
        so_far.push(Stated {
            settles: Some(i),
            value: mine.clone(),
            by_suite: true,
            got: None,
        });
    }
    let agreed = agreed(a, &so_far).unwrap_or_else(|| mine.clone());
    let highest = so_far
        .iter()
        .filter(|x| x.settles.is_some())
        .map(|x| &x.value)
        .max_by(|x, y| contract::model::version_order(x, y));
    let (wrong, write) = match (a.rule, highest) {
        (AgreementRule::Lowest, Some(h)) if h != &agreed => (h.clone(), None),
        _ => match another_example(cx, p, &agreed) {
            Some((wrong, holder)) => (wrong, Some(holder)),
            // Nothing is "another" of an empty list but one with members: the example's.
            None if agreed.as_array().is_some_and(Vec::is_empty) && mine != agreed => (mine, None),
            None => (other_than(&agreed), None),
        },
    };
    s.writes = vec![match write {
        Some((pointer, holder)) => (p.method.clone(), pointer, holder),
        None => (p.method.clone(), p.pointer.clone(), wrong.clone()),
    }];
    let sent = match step {
        // A request the walk sends is the one the judge answers.
        Some(i) => s
            .walk_steps(cx, &plan, i..i + 1)
            .await
            .map(|()| match plan.steps[i] {
                Step::Send(_) => s.last.take().map(|(id, _)| id),
                _ => None,
            }),
        None => s.send(cx, &p.method).await,
    };
    let what = format!(
        "{} stating {name} {} (agreed: {})",
        p.method,
        plain(&wrong),
        plain(&agreed)
    );
    // A judge that ends the channel while the suite still walks has reacted already.
    let id = match sent {
        Ok(id) => id,
        Err(_) if !s.peer.control_open() => None,
        Err(f) => return Err(f),
    };
    let seen = reaction(&mut s, cx, a, id, (&agreed, &wrong), &what).await?;
    let seen = format!("{what}: {seen}");
    match super::probes::after_close(s, cx).await? {
        Some(also) => pass(format!("{seen}; {also}")),
        None => pass(seen),
    }
}

/// The judge's reaction to the suite's wrong statement: the error reply to request `id`
/// where the mismatch is one, then its close.
async fn reaction(
    s: &mut Session,
    cx: &Ctx,
    a: &Agreement,
    id: Option<Value>,
    (agreed, wrong): (&Value, &Value),
    what: &str,
) -> Result<String, Failure> {
    let m = &a.mismatch;
    let mut seen = Vec::new();
    let replied = match (m.action, id.filter(|id| !id.is_null())) {
        (ActionKind::ReplyError, Some(id)) if s.peer.control_open() => {
            let v = s.answer(cx, &id, what).await?;
            let code = s.shape.error_code(&v);
            if code != m.code.as_ref() {
                return Err(Failure::new(format!(
                    "{what} was answered {}; the contract prescribes error {}",
                    code.map_or("with no error".into(), |c| format!("with error {c}")),
                    m.code.as_ref().map(Value::to_string).unwrap_or_default()
                ))
                .with("the answer", v.to_string().as_bytes()));
            }
            let data = cx.wire.contract().error_data_pointer(&s.shape.channel);
            let at = data.map(|d| format!("{d}/reason"));
            let stated = at.and_then(|at| v.pointer(&at)?.as_str());
            if let Some(r) = m.reason.as_deref().filter(|r| stated != Some(*r)) {
                return Err(Failure::new(format!(
                    "{what} was answered with error {}, but its data's reason is not {r}, as the contract gives"
                    , m.code.as_ref().map(Value::to_string).unwrap_or_default()
                ))
                .with("the answer", v.to_string().as_bytes()));
            }
            seen.push(format!(
                "error {}{}",
                m.code.as_ref().map(Value::to_string).unwrap_or_default(),
                m.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ));
            true
        }
        _ => false,
    };
    let close = match m.action {
        ActionKind::ReplyError => m.then.as_deref(),
        _ => Some(m),
    };
    let Some(close) = close.filter(|c| ends_the_channel(c.action)) else {
        return Ok(seen.join(", "));
    };
    let watched = watch(s, cx.soon()).await;
    if watched.ended.is_none() {
        let f = Failure::new(format!(
            "{what}: the channel stayed open; the contract prescribes `{}`",
            said(m)
        ));
        return Err(with_meanwhile(f, watched.seen));
    }
    closed_as(s, cx, close.action, close.code.as_ref())?;
    let reason = match &s.peer.closed_with {
        Some(Some(f)) => f.reason.clone(),
        _ => {
            seen.push("the channel ended".into());
            return Ok(seen.join(", then "));
        }
    };
    let code = m
        .code
        .as_ref()
        .filter(|_| m.action == ActionKind::ReplyError && !replied);
    let mut owed: Vec<String> = code.map(Value::to_string).into_iter().collect();
    if a.names_both {
        owed.extend([plain(agreed), plain(wrong)]);
    }
    if let Some(missing) = owed.iter().find(|o| !reason.contains(o.as_str())) {
        return Err(Failure::new(format!(
            "{what}: the close reason {reason:?} does not name {missing} (it names {})",
            owed.join(", ")
        )));
    }
    seen.push(format!(
        "close {} {reason:?}",
        close
            .code
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_default()
    ));
    Ok(seen.join(", then "))
}

/// Playing the judge: every value the implementation states is the agreed one.
async fn kept(cx: &mut Ctx, name: &str, a: &Agreement) -> Result<Verdict, Failure> {
    let c = cx.wire.contract().clone();
    let plan = plan_of(cx);
    let mut s = Session::open(cx).await?;
    s.serves_all = true;
    if let Some(low) = lowest_offer(&c, a) {
        let own = a.settled.iter().filter(|p| c.states(p, &cx.role));
        s.writes = own
            .map(|p| (p.method.clone(), p.pointer.clone(), low.clone()))
            .collect();
    }
    if let Err(f) = s.handshake(cx, &plan).await {
        return plan.unreached(f);
    }
    let awaited: Vec<&Place> = a
        .repeated
        .iter()
        .filter(|p| !c.states(p, &cx.role))
        .collect();
    for p in &awaited {
        let until = Instant::now() + super::end::on_its_clock(cx, &s, &p.method);
        await_place(&mut s, cx, p, until).await;
    }
    let (judged, agreed) = judge_all(a, name, statements(cx, &s, a))?;
    if judged == 0 {
        return skip(format!(
            "the implementation stated no {name} after it was agreed"
        ));
    }
    let agreed = agreed.map(|v| plain(&v)).unwrap_or_default();
    pass(format!("{judged} statement(s) of {name}, each {agreed}"))
}

/// The implementation's statements judged against the value agreed before each (a
/// settling one only under `same`): how many were, and the value agreed in the end; the
/// first that differs fails, with its bytes.
fn judge_all(
    a: &Agreement,
    name: &str,
    stated: Vec<Stated>,
) -> Result<(usize, Option<Value>), Failure> {
    let (mut so_far, mut judged) = (Vec::new(), 0);
    for st in stated {
        let judges = !st.by_suite && (st.settles.is_none() || a.rule == AgreementRule::Same);
        if let Some(want) = agreed(a, &so_far).filter(|_| judges) {
            judged += 1;
            if st.value != want {
                let f = Failure::new(format!(
                    "the implementation stated {name} {}; the agreed value is {} ({})",
                    plain(&st.value),
                    plain(&want),
                    rule(a)
                ));
                return Err(match st.got {
                    Some(g) => f.with("the message", &g.raw),
                    None => f,
                });
            }
        }
        so_far.push(st);
    }
    Ok((judged, agreed(a, &so_far)))
}

/// What the suite states under `lowest`, below any value the implementation may hold: the
/// floor of the agreement's version's lowest value (`1.0.0` for `1.1.0`: the first part
/// kept, the others zero; a number as it is).
fn lowest_offer(c: &Contract, a: &Agreement) -> Option<Value> {
    let v = a
        .version
        .as_ref()
        .filter(|_| a.rule == AgreementRule::Lowest)?;
    let values = &c.versions.iter().find(|x| &x.name == v)?.values;
    let low = values
        .iter()
        .min_by(|x, y| contract::model::version_order(x, y))?;
    let floor = |s: &str| {
        let (head, rest) = s.split_once('.')?;
        let zeros = rest.split('.').map(|p| p.parse::<u64>().ok().map(|_| "0"));
        let zeros: Option<Vec<&str>> = zeros.collect();
        Some(Value::String(format!("{head}.{}", zeros?.join("."))))
    };
    Some(low.as_str().and_then(floor).unwrap_or_else(|| low.clone()))
}

/// Read the session (answering what the implementation asks) until a message at `p` came
/// or `until`.
async fn await_place(s: &mut Session, cx: &Ctx, p: &Place, until: Instant) {
    let c = cx.wire.contract();
    let came = |s: &Session| {
        s.peer
            .log
            .iter()
            .any(|g| g.ok().is_some_and(|m| p.value_in(c, m).is_some()))
    };
    while !came(s) {
        match s.peer.next(until).await {
            Incoming::Control(g) => {
                let _ = s.respond(cx, &g).await;
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            Incoming::Timeout | Incoming::ControlEnd(_) => return,
        }
    }
}

/// Playing the judge of a known value: offered another, the implementation states its
/// own; the suite then reacts, and the implementation ends as that close obliges it.
async fn own(cx: &mut Ctx, name: &str, a: &Agreement) -> Result<Verdict, Failure> {
    let c = cx.wire.contract().clone();
    let plan = plan_of(cx);
    let step = echo_step(&c, a, &plan).ok_or_else(|| Failure::new("suite bug: no echo step"))?;
    let (first, later) = match (
        a.settled.first(),
        a.settled.iter().skip(1).find(|p| !c.states(p, &cx.role)),
    ) {
        (Some(f), Some(l)) => (f, l),
        _ => return Err(Failure::new("suite bug: no settling places")),
    };
    let other = cx.other.clone();
    // After the opening: the session's own values stand in for the examples' from then on.
    let mut s = Session::open(cx).await?;
    let known = example_value(cx, later, &other).ok_or_else(|| {
        Failure::new(format!(
            "no example of {} carries {}",
            later.method, later.pointer
        ))
    })?;
    let offered = other_than(&known);
    s.writes = vec![(first.method.clone(), first.pointer.clone(), offered.clone())];
    if let Err(f) = s.walk_to(cx, &plan, step + 1).await {
        return plan.unreached(f);
    }
    let got = s
        .peer
        .log
        .iter()
        .rev()
        .find(|g| g.ok().is_some_and(|m| later.value_in(&c, m).is_some()));
    let Some(g) = got else {
        return Err(Failure::new(format!(
            "the implementation stated no {name} at {} {}",
            later.method, later.pointer
        )));
    };
    let stated = g
        .ok()
        .and_then(|m| later.value_in(&c, m))
        .cloned()
        .unwrap_or(Value::Null);
    if stated != known {
        let why = match stated == offered {
            true => format!(
                "the implementation echoed the offered {name} {} instead of stating its own {}",
                plain(&offered),
                plain(&known)
            ),
            false => format!(
                "the implementation stated {name} {}, neither its own {} nor the offered {}",
                plain(&stated),
                plain(&known),
                plain(&offered)
            ),
        };
        return Err(Failure::new(why).with("the message", &g.raw));
    }
    let close = match a.mismatch.action {
        ActionKind::ReplyError => a.mismatch.then.as_deref(),
        _ => Some(&a.mismatch),
    };
    let code = close
        .and_then(|c| c.code.as_ref()?.as_u64())
        .and_then(|c| u16::try_from(c).ok());
    let (Some(code), true) = (code, s.peer.carries_messages()) else {
        return pass(format!("stated its own {name} {}", plain(&known)));
    };
    let error = a
        .mismatch
        .code
        .as_ref()
        .filter(|_| a.mismatch.action == ActionKind::ReplyError);
    let reason = match error {
        Some(e) => format!(
            "{e} {} expected={} got={}",
            c.error_for(e).and_then(|x| x.name.as_deref()).unwrap_or(""),
            plain(&offered),
            plain(&known)
        ),
        None => format!("expected={} got={}", plain(&offered), plain(&known)),
    };
    s.peer.close_with(code, &reason).await?;
    drop(s);
    let exit = c
        .exits_after_close(&other)
        .into_iter()
        .find(|e| e.1 == code);
    let tail = match exit {
        Some((_, _, _, want)) => super::exit_owed(cx, want, &format!("close {code}")).await?,
        None => format!("close {code} maps no exit"),
    };
    pass(format!(
        "stated its own {name} {}, not the offered {}; {tail}",
        plain(&known),
        plain(&offered)
    ))
}
