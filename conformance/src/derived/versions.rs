//! The version family, from each `versions` entry with a `negotiation`: the offer is a
//! request whose result names the version chosen.
//!
//! Playing the offering party, on a fresh session:
//! - `version.<name>`: the offer holds every version the contract names and one it does
//!   not (a list), or the first it names, its preferred (a single version); the result chooses one
//!   offered, the highest both speak where the result lists the chooser's own;
//! - `version.<name>.none` (where the contract says what a chooser does then): an offer
//!   of a version nobody speaks gets that reaction; an error reply keeps the channel open;
//! - `version.<name>.foreign` (where it does not): the same offer gets a version of the
//!   chooser's own, never the one offered.
//!
//! Playing the chooser:
//! - `version.<name>.none` (where the chooser's reaction is an error reply): the suite
//!   answers the implementation's offer with that error; the offerer then sends nothing
//!   but a new offer, or ends the channel;
//! - `version.<name>.refused` (where the contract says what an offerer does with a choice
//!   it does not speak, and that ends the channel): the suite answers the offer choosing a
//!   version the contract does not name; the channel ends as prescribed (a close frame
//!   with the prescribed code on a WebSocket, whose reason names both versions where the
//!   contract says `namesBoth`), and nothing else comes first.

use std::time::{Duration, Instant};

use contract::Contract;
use contract::model::{ActionKind, Negotiation, Part, VersionForm, VersionInfo};
use serde_json::{Value, json};

use super::plan::example_of;
use super::probes::{action_name, closed_as, ends_the_channel};
use super::{Session, expect_code};
use crate::session::{Ctx, Got, Incoming, STARTUP, with_meanwhile};
use crate::{BodyFuture, Failure, Verdict, pass};

/// How long the suite watches the channel after a reaction that keeps it.
const WATCH: Duration = Duration::from_millis(700);

/// One check of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The suite offers a version both speak.
    Common,
    /// The suite offers only a version nobody speaks.
    None,
    /// The suite offers a version nobody speaks where the chooser answers with its own.
    Foreign,
    /// The suite, choosing, speaks none of the implementation's offer.
    Refuse,
    /// The suite chooses a version the implementation cannot speak.
    Unspoken,
}

/// The family's checks for `role`: (check id, title, the version entry's index, kind).
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(String, String, usize, Kind)> {
    let mut out = Vec::new();
    for (i, v) in c.versions.iter().enumerate() {
        let Some(n) = &v.negotiation else { continue };
        let Some(m) = c.methods.get(&n.offer) else {
            continue;
        };
        let name = &v.name;
        let offers = m.from.iter().any(|p| p == role);
        let reacts = n.none.as_ref().map(|a| a.action);
        if offers {
            let what = match n.form {
                VersionForm::List => {
                    format!("every {name} the contract names (and one it does not)")
                }
                VersionForm::Single => format!("the preferred {name}"),
            };
            let highest = n.own.as_ref().map_or("", |_| ", the highest both speak");
            let title = format!(
                "{} offering {what} gets one offered chosen{highest}",
                n.offer
            );
            out.push((format!("version.{name}"), title, i, Kind::Common));
            if let Some(a) = reacts.filter(|a| *a == ActionKind::ReplyError || ends_the_channel(*a))
            {
                let title = format!(
                    "{} offering only a {name} nobody speaks gets `{}`",
                    n.offer,
                    action_name(a)
                );
                out.push((format!("version.{name}.none"), title, i, Kind::None));
            }
            if n.none.is_none() {
                let title = format!(
                    "{} offering only a {name} the contract does not name gets one of the chooser's own, not the one offered",
                    n.offer
                );
                out.push((format!("version.{name}.foreign"), title, i, Kind::Foreign));
            }
        } else {
            if reacts == Some(ActionKind::ReplyError) && refusal(c, n, role).is_some() {
                let title = format!(
                    "after {} is refused for want of a common {name}, the implementation offers again or ends the channel, and sends nothing else",
                    n.offer
                );
                out.push((format!("version.{name}.none"), title, i, Kind::Refuse));
            }
            if let Some(a) = n.refused.as_ref().filter(|a| ends_the_channel(a.action)) {
                let code = a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
                let title = format!(
                    "answered {} with a {name} the contract does not name, the implementation ends the channel (`{}`{code})",
                    n.offer,
                    action_name(a.action)
                );
                out.push((format!("version.{name}.refused"), title, i, Kind::Unspoken));
            }
        }
    }
    out
}

/// The played party's error example of the offer carrying the `none` code.
fn refusal(c: &Contract, n: &Negotiation, role: &str) -> Option<Value> {
    let code = n.none.as_ref()?.code.as_ref()?;
    let shape = super::shape::Shape::of(c)?;
    let e = example_of(c, &n.offer, Part::Error, role)?;
    (shape.error_code(&e) == Some(code)).then_some(e)
}

pub(super) fn body(kind: Kind) -> fn(&mut Ctx) -> BodyFuture<'_> {
    match kind {
        Kind::Common => |cx| Box::pin(common(cx)),
        Kind::None => |cx| Box::pin(none(cx)),
        Kind::Foreign => |cx| Box::pin(foreign(cx)),
        Kind::Refuse => |cx| Box::pin(refuse(cx)),
        Kind::Unspoken => |cx| Box::pin(unspoken(cx)),
    }
}

/// The version entry a check is about (its subject is the entry's index).
fn entry(cx: &Ctx) -> Result<(VersionInfo, Negotiation), Failure> {
    let i: usize = cx
        .subject
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX);
    let v = cx.wire.contract().versions.get(i).cloned();
    let v = v.ok_or_else(|| Failure::new("suite bug: no version entry"))?;
    let n = v
        .negotiation
        .clone()
        .ok_or_else(|| Failure::new("suite bug: no negotiation"))?;
    Ok((v, n))
}

/// A version the contract does not name, ranking above every one it does.
fn unknown(values: &[Value]) -> Value {
    if let Some(top) = values.iter().map(Value::as_u64).collect::<Option<Vec<_>>>() {
        return json!(top.into_iter().max().unwrap_or(0) + 1);
    }
    let top = values.iter().filter_map(Value::as_str).max().unwrap_or("0");
    json!(format!("{top}-unknown"))
}

/// Send the offer with `offered` at its pointer; its id and bytes.
async fn send_offer(
    cx: &Ctx,
    s: &mut Session,
    n: &Negotiation,
    offered: Value,
) -> Result<(Value, Vec<u8>), Failure> {
    let mut m = s.message(cx, &n.offer)?;
    contract::set_pointer(&mut m, &n.offered, offered);
    let id = s.send_value(&m).await?.unwrap_or(Value::Null);
    Ok((id, m.to_string().into_bytes()))
}

/// [`send_offer`], then the answer.
async fn offer(
    cx: &Ctx,
    s: &mut Session,
    n: &Negotiation,
    offered: Value,
) -> Result<(Value, Vec<u8>), Failure> {
    let (id, sent) = send_offer(cx, s, n, offered).await?;
    let (v, _) = s
        .wait_answer(cx, &[id], &n.offer, Instant::now() + STARTUP)
        .await?;
    Ok((v, sent))
}

async fn common(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (v, n) = entry(cx)?;
    let offered: Vec<Value> = match n.form {
        VersionForm::List => v
            .values
            .iter()
            .cloned()
            .chain([unknown(&v.values)])
            .collect(),
        VersionForm::Single => v.values.first().cloned().into_iter().collect(),
    };
    let wire = match n.form {
        VersionForm::List => Value::Array(offered.clone()),
        VersionForm::Single => offered.first().cloned().unwrap_or(Value::Null),
    };
    let (s, o) = Offered::on_fresh(cx, &n, wire.clone()).await?;
    let (answer, bad) = (&o.answer, |why| o.bad(why));
    if let Some(code) = s.shape.error_code(answer) {
        return Err(bad(format!("an offer of {wire} was refused with {code}")));
    }
    let chosen = answer.pointer(&n.chosen).cloned().unwrap_or(Value::Null);
    if !offered.contains(&chosen) {
        return Err(bad(format!(
            "{} chose {chosen} at {}, which was not offered ({wire})",
            v.name, n.chosen
        )));
    }
    let Some(own) = n
        .own
        .as_ref()
        .and_then(|p| answer.pointer(p))
        .and_then(Value::as_array)
    else {
        return pass(format!("offered {wire}, chose {chosen}"));
    };
    let both = offered.iter().filter(|o| own.contains(o));
    let highest = both
        .max_by(|a, b| contract::model::version_order(a, b))
        .cloned()
        .unwrap_or(Value::Null);
    let own = Value::Array(own.clone());
    if chosen != highest {
        return Err(bad(format!(
            "offered {wire}, speaking {own}, the implementation chose {chosen}, not the highest both speak ({highest})"
        )));
    }
    pass(format!(
        "offered {wire}, speaking {own}: chose {chosen}, the highest both speak"
    ))
}

/// An offer sent on a fresh session, and its answer: what a failure shows.
struct Offered {
    answer: Value,
    sent: Vec<u8>,
}

impl Offered {
    async fn on_fresh(
        cx: &mut Ctx,
        n: &Negotiation,
        wire: Value,
    ) -> Result<(Session, Offered), Failure> {
        let mut s = Session::open(cx).await?;
        let (answer, sent) = offer(cx, &mut s, n, wire).await?;
        Ok((s, Offered { answer, sent }))
    }

    fn bad(&self, why: String) -> Failure {
        Failure::new(why)
            .with("the offer", &self.sent)
            .with("the answer", self.answer.to_string().as_bytes())
    }
}

async fn none(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (v, n) = entry(cx)?;
    let a = n
        .none
        .clone()
        .ok_or_else(|| Failure::new("suite bug: no reaction"))?;
    let stranger = unknown(&v.values);
    let wire = match n.form {
        VersionForm::List => json!([stranger]),
        VersionForm::Single => stranger,
    };
    let mut s = Session::open(cx).await?;
    if ends_the_channel(a.action) {
        send_offer(cx, &mut s, &n, wire.clone()).await?;
        return match watch(&mut s, Instant::now() + cx.opts.deadline).await {
            Ok(Some(why)) => pass(format!("offered {wire}: the channel ended ({why})")),
            _ => Err(Failure::new(format!(
                "offered {wire}: the channel stayed open; the contract prescribes `{}`",
                action_name(a.action)
            ))),
        };
    }
    let (answer, sent) = offer(cx, &mut s, &n, wire.clone()).await?;
    let code = a.code.clone().unwrap_or(Value::Null);
    let what = format!("an offer of {wire}");
    let seen =
        expect_code(&s.shape, &answer, &code, &what).map_err(|f| f.with("the offer", &sent))?;
    if let Ok(Some(why)) = watch(&mut s, Instant::now() + WATCH).await {
        return Err(Failure::new(format!(
            "the channel ended ({why}) after {code}, which keeps it open"
        ))
        .with("the answer", answer.to_string().as_bytes()));
    }
    Ok(seen)
}

/// Without a `none` reaction the chooser answers an offer it cannot speak with a version
/// of its own: never the one offered, which nobody speaks.
async fn foreign(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (v, n) = entry(cx)?;
    let stranger = unknown(&v.values);
    let wire = match n.form {
        VersionForm::List => json!([stranger]),
        VersionForm::Single => stranger.clone(),
    };
    let (s, o) = Offered::on_fresh(cx, &n, wire.clone()).await?;
    let (answer, bad) = (&o.answer, |why| o.bad(why));
    if let Some(code) = s.shape.error_code(answer) {
        return Err(bad(format!(
            "an offer of {wire} was refused with {code}; the contract has no `none` reaction, so the chooser answers with a {} of its own",
            v.name
        )));
    }
    match answer.pointer(&n.chosen) {
        None => Err(bad(format!("the answer has no {} at {}", v.name, n.chosen))),
        Some(c) if *c == stranger => Err(bad(format!(
            "the implementation claims {} {c}, which nobody speaks (it answers with one of its own)",
            v.name
        ))),
        Some(c) => pass(format!("offered {wire}, chose its own {c}")),
    }
}

/// Whether the channel ends by `until`: the reason, or `None` while it stays open.
async fn watch(s: &mut Session, until: Instant) -> Result<Option<String>, Failure> {
    loop {
        match s.peer.next(until).await {
            Incoming::ControlEnd(why) => return Ok(Some(why)),
            Incoming::Timeout => return Ok(None),
            _ => {}
        }
    }
}

async fn refuse(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (v, n) = entry(cx)?;
    let c = cx.wire.contract().clone();
    let mut reply =
        refusal(&c, &n, &cx.role).ok_or_else(|| Failure::new("suite bug: no refusal example"))?;
    let mut s = Session::open(cx).await?;
    let first = awaited_offer(&mut s, &n.offer).await?;
    let request = first.value().cloned().unwrap_or(Value::Null);
    let own = s.shape.answers_have_ids().then(|| s.take_id());
    s.shape.answer_to(&mut reply, &request, own);
    s.peer.send(&reply).await?;
    let offered = request.pointer(&n.offered).cloned().unwrap_or(Value::Null);
    let until = Instant::now() + WATCH * 3;
    let mut again = 0;
    loop {
        match s.peer.next(until).await {
            Incoming::Control(g) if g.method() == Some(n.offer.as_str()) => again += 1,
            Incoming::Control(g) => {
                return Err(Failure::new(format!("after its {} ({offered}) was refused for want of a common {}, the implementation went on as if it had one", n.offer, v.name)).with("what it sent", &g.raw));
            }
            Incoming::ControlEnd(why) => {
                return pass(format!(
                    "offered {offered}, refused: the channel ended ({why}) after {again} new offers"
                ));
            }
            Incoming::Timeout => {
                return pass(format!(
                    "offered {offered}, refused: {again} new offers and nothing else"
                ));
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
}

async fn unspoken(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (v, n) = entry(cx)?;
    let a = n
        .refused
        .clone()
        .ok_or_else(|| Failure::new("suite bug: no reaction"))?;
    let mut s = Session::open(cx).await?;
    let first = awaited_offer(&mut s, &n.offer).await?;
    let request = first.value().cloned().unwrap_or(Value::Null);
    let mut reply = s.answer_for(cx, &n.offer, &request)?;
    let stranger = unknown(&v.values);
    contract::set_pointer(&mut reply, &n.chosen, stranger.clone());
    // Raw: the suite's own wire may not take a version the contract does not name.
    let bytes = reply.to_string().into_bytes();
    s.peer.send_raw(&bytes).await?;
    let until = Instant::now() + cx.opts.deadline;
    loop {
        match s.peer.next(until).await {
            Incoming::ControlEnd(why) => {
                closed_as(&s, cx, a.action, a.code.as_ref())
                    .map_err(|f| f.with("the answer", &bytes))?;
                let offered = request.pointer(&n.offered).cloned().unwrap_or(Value::Null);
                if n.names_both {
                    names_both(&s, &offered, &stranger)
                        .map_err(|f| f.with("the answer", &bytes))?;
                }
                return pass(format!("answered {stranger}: the channel ended ({why})"));
            }
            Incoming::Control(g) => {
                return Err(Failure::new(format!("answered {} with {} {stranger}, which it cannot speak, the implementation went on", n.offer, v.name)).with("the answer", &bytes).with("what it sent", &g.raw));
            }
            Incoming::Timeout => {
                return Err(Failure::new(format!("answered {} with {} {stranger}, the channel was still open {:.1} s later; the contract prescribes `{}`", n.offer, v.name, cx.opts.deadline.as_secs_f64(), action_name(a.action))).with("the answer", &bytes));
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
}

/// The implementation's close reason names every version it offered and the one chosen
/// (`namesBoth`).
fn names_both(s: &Session, offered: &Value, chosen: &Value) -> Result<(), Failure> {
    let reason = match &s.peer.closed_with {
        Some(Some(f)) => f.reason.clone(),
        _ => String::new(),
    };
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let offered = match offered {
        Value::Array(all) => all.clone(),
        one => vec![one.clone()],
    };
    let missing: Vec<String> = offered
        .iter()
        .chain([chosen])
        .map(text)
        .filter(|v| !reason.contains(v.as_str()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Failure::new(format!(
        "the close reason {reason:?} does not name {} (the contract's namesBoth: both versions, no silent downgrade)",
        missing.join(", ")
    )))
}

/// The implementation's first `offer` request; anything before it is a failure.
async fn awaited_offer(s: &mut Session, offer: &str) -> Result<Got, Failure> {
    let until = Instant::now() + STARTUP;
    let mut seen = Vec::new();
    loop {
        match s.peer.next(until).await {
            Incoming::Control(g) if g.method() == Some(offer) => return Ok(*g),
            Incoming::Control(g) => seen.push(*g),
            Incoming::Timeout | Incoming::ControlEnd(_) => {
                return Err(with_meanwhile(
                    Failure::new(format!("the implementation sent no {offer}")),
                    seen,
                ));
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
}
