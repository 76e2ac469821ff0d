//! The framing family beyond the caps, for a channel framed on a byte stream: a request
//! written in pieces (one cut inside a multi-byte UTF-8 character) and two requests in
//! one write are each served like any other; and, where the framing names a frame
//! deadline, a frame begun and stalled ends the session within it, while an idle session
//! outlives it (idleness is not a stalled frame).

use std::time::{Duration, Instant};

use contract::Contract;
use contract::model::Framing;
use contract::wire::Wire;
use serde_json::{Value, json};

use super::probes::{self, Built, Probe, Reaction, places};
use super::shape::Shape;
use super::{LATE, Session, plan_of};
use crate::session::{Ctx, Incoming};
use crate::{BodyFuture, Failure, Verdict};

/// A string of multi-byte UTF-8 characters (two and three bytes) a cut can fall inside.
pub(super) const WIDE: &str = "démo ёж ✓";
/// How early a frame deadline may fire: a timer's own jitter, not an early close.
const EARLY: Duration = Duration::from_millis(400);

/// One check of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    Split,
    Merged,
    Stalled,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Split => "frame.split",
            Family::Merged => "frame.merged",
            Family::Stalled => "frame.stalled",
        }
    }

    fn of(name: &str) -> Option<Family> {
        [Family::Split, Family::Merged, Family::Stalled]
            .into_iter()
            .find(|f| f.name() == name)
    }

    pub fn title(self, deadline: Option<&str>) -> String {
        match self {
            Family::Split => {
                "a request written in pieces, one cut inside a multi-byte character, is served like any other".into()
            }
            Family::Merged => "two requests in one write are each served like any other".into(),
            Family::Stalled => format!(
                "an idle session outlives {}, a frame begun and stalled ends it then",
                deadline.unwrap_or("the frame deadline")
            ),
        }
    }
}

/// The family's checks for `c`'s bound channel: (check, the framing entry it cites).
pub(super) fn applies(c: &Contract, wire: &Wire, staying: &[String]) -> Vec<(Family, String)> {
    let Some(shape) = Shape::of(c) else {
        return Vec::new();
    };
    let ch = &shape.channel;
    let stream = c
        .channels
        .get(ch)
        .is_some_and(|x| !matches!(x.framing, Framing::WebsocketText { .. }));
    if !stream || staying.is_empty() {
        return Vec::new();
    }
    let framing = contract::join_pointer("/channels", [ch.as_str(), "framing"]);
    let mut out = vec![
        (Family::Split, framing.clone()),
        (Family::Merged, framing.clone()),
    ];
    let ends = wire
        .frame_deadline(ch)
        .and_then(|(name, _)| wire.limits().action(name))
        .is_some_and(|a| probes::ends_the_channel(a.action));
    if ends {
        out.push((Family::Stalled, format!("{framing}/frameDeadline")));
    }
    out
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let family = cx.subject.as_deref().and_then(Family::of);
        let family = family.ok_or_else(|| Failure::new("suite bug: no framing check"))?;
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let staying = plan.staying(&c);
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        if s.peer.carries_messages() {
            return crate::skip(
                "frames travel whole on a message transport (WebSocket): nothing to split, merge or stall",
            );
        }
        s.judge_answers = false;
        let carrier = s
            .carriers(cx, &staying)
            .into_iter()
            .next()
            .ok_or_else(|| Failure::new("no request to send after the handshake"))?;
        match family {
            Family::Split => split(s, cx, carrier).await,
            Family::Merged => merged(s, cx, carrier).await,
            Family::Stalled => stalled(s, cx, carrier).await,
        }
    })
}

/// `carrier` with [`WIDE`] where the suite's own wire accepts it (else as it is), and
/// whether it went into a member of its own (one the schema leaves open).
fn widened(cx: &Ctx, shape: &Shape, carrier: &Value) -> (Value, bool) {
    places(carrier)
        .iter()
        .filter_map(|p| Some((p.put(carrier, json!(WIDE))?, p.is_new())))
        .find(|(m, _)| {
            cx.wire
                .decode(&shape.channel, &cx.role, m.to_string().as_bytes(), None)
                .is_ok()
        })
        .unwrap_or_else(|| (carrier.clone(), false))
}

/// A split message refused where its [`WIDE`] member is one of the suite's own: sent again
/// whole, on a fresh id. Refused again, the refusal is the member's, and the derived
/// `unknown-member` check reports it; served, the split was at fault after all.
async fn whole_again(s: &mut Session, cx: &mut Ctx, carrier: &Value, f: Failure) -> Failure {
    let fresh = s.numbered(carrier.clone());
    let (m, _) = widened(cx, &s.shape, &fresh);
    s.remember(cx, m.to_string().as_bytes());
    if let Err(e) = s.peer.send_raw(m.to_string().as_bytes()).await {
        return f.with_note(format!(
            "sent again whole, it could not be written: {}",
            e.why
        ));
    }
    let what = s.shape.say("the same request, whole");
    let b = answered(&s.shape, &m, carrier);
    let checked = probes::build(
        Probe::UnknownMember,
        &cx.wire,
        &cx.role,
        std::slice::from_ref(carrier),
    );
    match probes::react(s, cx, &b, &what, &[]).await {
        Ok(_) => f.with_note("the same request sent whole was served".into()),
        Err(_) if checked.is_some() => {
            let check = format!("{}.derived.unknown-member", cx.wire.contract().name);
            f.reported_by(check)
        }
        Err(_) => f.with_note("the same request sent whole was refused too".into()),
    }
}

/// A probe of `m`, answered like any other.
fn answered(shape: &Shape, m: &Value, plain: &Value) -> Built {
    let ids = shape.id(m).into_iter().cloned().collect();
    let plain = plain.clone();
    Built::expecting(Vec::new(), ids, Reaction::Answer { plain })
}

async fn split(mut s: Session, cx: &mut Ctx, carrier: Value) -> Result<Verdict, Failure> {
    let m = s.numbered(carrier.clone());
    let (m, own_member) = widened(cx, &s.shape, &m);
    // Its trace (the implementation's requests on it are served: see Session::serves).
    s.remember(cx, m.to_string().as_bytes());
    let framed = s.peer.framed(m.to_string().as_bytes());
    // Every 16 bytes, and once inside the first multi-byte character: few enough writes
    // that the frame completes well within any frame deadline on a loaded machine.
    let inside = framed.iter().position(|b| *b >= 0xC0).map(|i| i + 1);
    let mut cuts: Vec<usize> = (16..framed.len()).step_by(16).chain(inside).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut start = 0;
    for end in cuts.iter().copied().chain([framed.len()]) {
        s.peer
            .write_bytes(&framed[start..end], cx.opts.deadline)
            .await?;
        tokio::time::sleep(Duration::from_millis(1)).await;
        start = end;
    }
    let wide = match inside {
        Some(_) => ", one cut inside a multi-byte character",
        None => " (the suite's wire took no multi-byte text in it)",
    };
    let what = s
        .shape
        .say(&format!("a request in {} pieces{wide}", cuts.len() + 1));
    let b = answered(&s.shape, &m, &carrier);
    let verdict = match probes::react(&mut s, cx, &b, &what, &[]).await {
        Err(f) if own_member => Err(whole_again(&mut s, cx, &carrier, f.sent(&framed)).await),
        got => got.map_err(|f| f.sent(&framed)),
    }?;
    probes::settle(s, cx, &b, verdict).await
}

async fn merged(mut s: Session, cx: &mut Ctx, carrier: Value) -> Result<Verdict, Failure> {
    let first = s.numbered(carrier.clone());
    let second = s.numbered(carrier.clone());
    for m in [&first, &second] {
        s.remember(cx, m.to_string().as_bytes());
    }
    let mut bytes = s.peer.framed(first.to_string().as_bytes()).to_vec();
    bytes.extend_from_slice(&s.peer.framed(second.to_string().as_bytes()));
    s.peer.write_bytes(&bytes, cx.opts.deadline).await?;
    let mut seen = Vec::new();
    for (m, which) in [(&first, "the first"), (&second, "the second")] {
        let what = s
            .shape
            .say(&format!("{which} of two requests in one write"));
        let b = answered(&s.shape, m, &carrier);
        match probes::react(&mut s, cx, &b, &what, &[]).await {
            Ok(Verdict::Pass(d)) => seen.push(d),
            Ok(other) => return Ok(other),
            Err(f) => return Err(f.sent(&bytes)),
        }
    }
    let b = answered(&s.shape, &second, &carrier);
    probes::settle(s, cx, &b, Verdict::Pass(seen.join("; "))).await
}

async fn stalled(mut s: Session, cx: &mut Ctx, carrier: Value) -> Result<Verdict, Failure> {
    let ch = s.shape.channel.clone();
    let (name, limit) = cx
        .wire
        .frame_deadline(&ch)
        .map(|(n, d)| (n.to_string(), d))
        .ok_or_else(|| Failure::new("suite bug: no frame deadline"))?;
    // Idle past the deadline, then a request: served, as no frame had begun.
    tokio::time::sleep(limit + EARLY).await;
    let m = s.numbered(carrier.clone());
    let id = s.send_value(&m).await?.unwrap_or(Value::Null);
    s.answer(cx, &id, &format!("a request after {limit:?} idle"))
        .await?;
    // Then half a frame, and nothing more.
    let half = s.numbered(carrier.clone());
    let framed = s.peer.framed(half.to_string().as_bytes());
    let part = framed[..framed.len() / 2].to_vec();
    let start = Instant::now();
    s.peer.write_bytes(&part, cx.opts.deadline).await?;
    let until = start + limit + LATE;
    let ended = loop {
        match s.peer.next(until).await {
            Incoming::ControlEnd(_) => break start.elapsed(),
            Incoming::Timeout => {
                return Err(Failure::new(format!(
                    "a frame begun and stalled did not end the session within {:?} ({name}: {limit:?} from its first byte)",
                    limit + LATE
                ))
                .with("the partial frame", &part));
            }
            Incoming::Control(_) | Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    };
    if ended + EARLY < limit {
        return Err(Failure::new(format!(
            "the session ended {} ms after a frame began, before {name} ({limit:?})",
            ended.as_millis()
        ))
        .with("the partial frame", &part));
    }
    let action = cx
        .wire
        .limits()
        .action(&name)
        .map(|a| (a.action, a.code.clone()));
    let (action, code) = action.ok_or_else(|| Failure::new("suite bug: no frame action"))?;
    let b = Built::expecting(part, Vec::new(), Reaction::Rule { action, code });
    let seen = format!(
        "idle {:?}, then a request served; the stalled frame ended the session after {} ms",
        limit + EARLY,
        ended.as_millis()
    );
    probes::settle(s, cx, &b, Verdict::Pass(seen)).await
}
