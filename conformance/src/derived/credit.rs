//! The credit family: where a `credit` entry has the played party grant (it sends the
//! entry's `grant` method, so it receives the data) and the implementation opens what the
//! credit is kept per (the entry's `opens` method), of its own or after one of the played
//! party's cues ending in that method, the suite sends the cue (if any) on a fresh session,
//! waits for the opening, grants nothing for a while, then
//! grants [`STEP`] bytes at a time, reading the data after each grant. The policy engine the
//! proxy enforces with ([`crate::judge`]) sees every grant and every data frame: a frame
//! beyond `initial` before the first grant, or beyond what was granted, fails the check
//! (the kernel's speech cue: the core's audio.output stream, §8; pipes.json's sender, which
//! opens its pipes itself).

use std::collections::HashMap;
use std::time::Instant;

use contract::Contract;
use contract::model::{Credit, Cue, Framing};
use serde_json::Value;

use super::behaviour::breaches;
use super::cues::cue_message;
use super::{LINGER, Session, plan_of};
use crate::session::{Ctx, Got, Incoming};
use crate::{BodyFuture, Failure, pass, skip};

/// Bytes one grant gives: small enough that a sender with more to send must wait for the
/// next, which is where an overrun shows.
const STEP: u64 = 4096;

/// Grants, each read to what it allowed.
const ROUNDS: u64 = 8;

/// The family's checks: (credit entry, title, seed) for each entry the played party grants
/// whose `opens` the implementation sends, of its own or after a cue.
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(String, String, String)> {
    (c.credit.iter())
        .filter(|(_, cr)| grants(c, cr, role))
        .filter_map(|(name, cr)| {
            let opens = cr.opens.as_ref()?;
            let after = match opener(c, cr, role)? {
                Some((cue, _)) => format!("after the {cue} cue's {}", opens.method),
                None => format!("after its own {}", opens.method),
            };
            let title = format!(
                "{after}, the implementation sends no data on it before a grant and never more than granted ({STEP} bytes a grant)"
            );
            Some((name.clone(), title, cr.seed.clone()))
        })
        .collect()
}

/// Whether `role` sends `cr`'s grants.
fn grants(c: &Contract, cr: &Credit, role: &str) -> bool {
    (c.methods.get(&cr.grant.method)).is_some_and(|m| m.from.iter().any(|p| p == role))
}

/// How the implementation comes to open a key of `cr`: after the played party's cue that
/// ends in the `opens` method (`Some(Some(cue))`), or of its own (`Some(None)`: only the
/// implementation's party sends that method); `None` when neither.
fn opener<'c>(c: &'c Contract, cr: &Credit, role: &str) -> Option<Option<(&'c String, &'c Cue)>> {
    let opens = cr.opens.as_ref()?;
    let cue =
        (c.cues.iter()).find(|(_, cue)| cue.party == role && cue.until.contains(&opens.method));
    let own = (c.methods.get(&opens.method))
        .is_some_and(|m| !m.from.is_empty() && m.from.iter().all(|p| p != role));
    match (cue, own) {
        (Some(cue), _) => Some(Some(cue)),
        (None, true) => Some(None),
        (None, false) => None,
    }
}

/// Data bytes per credit key, read off the frames' header field named by the entry's `key`.
struct Tally {
    /// The key's index among the header fields after the length.
    field: usize,
    bytes: HashMap<u64, u64>,
    frames: HashMap<u64, u64>,
}

impl Tally {
    fn new(c: &Contract, cr: &Credit) -> Option<Tally> {
        let Framing::Binary { header, .. } = &c.channels.get(&cr.channel)?.framing else {
            return None;
        };
        let field = header.iter().skip(1).position(|h| h.name == cr.key)?;
        Some(Tally {
            field,
            bytes: HashMap::new(),
            frames: HashMap::new(),
        })
    }

    fn count(&mut self, frame: &contract::wire::BinaryFrame) {
        let key = frame.fields.get(self.field).copied().unwrap_or_default();
        *self.bytes.entry(key).or_default() += frame.payload.len() as u64;
        *self.frames.entry(key).or_default() += 1;
    }
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let name = cx.subject.clone().unwrap_or_default();
        let cr =
            (c.credit.get(&name)).ok_or_else(|| Failure::new(format!("no credit {name:?}")))?;
        let cue = opener(&c, cr, &cx.role)
            .ok_or_else(|| Failure::new("suite bug: nothing opens the credit's key"))?;
        let mut tally =
            Tally::new(&c, cr).ok_or_else(|| Failure::new("suite bug: no binary credit key"))?;
        let mut s = Session::open(cx).await?;
        s.peer.judge();
        if let Err(f) = s.handshake(cx, &plan).await {
            return plan.unreached(f);
        }
        if !s.peer.has_data() {
            return Err(Failure::new(format!(
                "the implementation never connected the {} channel",
                cr.channel
            )));
        }
        let id = match cue {
            Some((_, cue)) => {
                let v = cue_message(&mut s, cx, cue)?;
                s.send_value(&v).await?.unwrap_or(Value::Null)
            }
            None => Value::Null,
        };
        let Some(key) = opened(&mut s, cx, cr, &id, &mut tally).await? else {
            let after = cue
                .map(|(n, _)| format!(" after the {n} cue"))
                .unwrap_or_default();
            return skip(format!("the implementation opened nothing{after}"));
        };
        let granted = rounds(&mut s, cx, cr, &key, &mut tally).await?;
        breaches(&s.peer, "the implementation")?;
        let k = key.as_u64().unwrap_or_default();
        let got = tally.bytes.get(&k).copied().unwrap_or_default();
        if got == 0 {
            return skip(format!(
                "the implementation sent no data on {} {key} even with {granted} bytes of credit",
                cr.key
            ));
        }
        let frames = tally.frames.get(&k).copied().unwrap_or_default();
        pass(format!(
            "{} {key}: nothing before the first grant; {got} bytes in {frames} frames, never beyond the {granted} granted",
            cr.key
        ))
    })
}

/// The key the implementation's `opens` message names, reading (and counting) what comes
/// until then; `None` when none comes within the deadline.
async fn opened(
    s: &mut Session,
    cx: &Ctx,
    cr: &Credit,
    cue_id: &Value,
    tally: &mut Tally,
) -> Result<Option<Value>, Failure> {
    let Some(opens) = cr.opens.as_ref() else {
        return Ok(None);
    };
    let until = cx.soon();
    loop {
        match s.peer.next(until).await {
            Incoming::Control(g) => {
                if method(&g) == Some(opens.method.as_str())
                    && let Some(key) = g.at_ptr(&opens.key)
                {
                    return Ok(Some(key.clone()));
                }
                answer(s, cx, cue_id, &g).await?;
            }
            Incoming::Data { frame, .. } => tally.count(&frame),
            Incoming::ControlEnd(why) => {
                return Err(Failure::new(format!(
                    "the channel ended after the cue: {why}"
                )));
            }
            Incoming::Timeout => return Ok(None),
            Incoming::DataEnd(_) => {}
        }
    }
}

/// The method of a message the contract accepts, as its binding names it.
fn method(g: &Got) -> Option<&str> {
    g.ok().and_then(|m| m.method.as_deref())
}

/// A request the implementation makes to serve the cue gets its answer.
async fn answer(s: &mut Session, cx: &Ctx, cue_id: &Value, g: &Got) -> Result<(), Failure> {
    if s.serves(std::slice::from_ref(cue_id), g) {
        s.respond(cx, g).await?;
    }
    Ok(())
}

/// [`LINGER`] with no grant, then [`ROUNDS`] grants of [`STEP`], each read until the data
/// reaches what was granted (or the deadline), then [`LINGER`] more; the bytes granted.
async fn rounds(
    s: &mut Session,
    cx: &Ctx,
    cr: &Credit,
    key: &Value,
    tally: &mut Tally,
) -> Result<u64, Failure> {
    let k = key.as_u64().unwrap_or_default();
    let closes: Vec<&str> = cr.closes.iter().map(|c| c.method.as_str()).collect();
    let mut granted = 0;
    let mut closed = read(s, cx, tally, Instant::now() + LINGER, None, &closes).await?;
    for _ in 0..ROUNDS {
        if closed {
            break;
        }
        let mut v = s.message(cx, &cr.grant.method)?;
        contract::set_pointer(&mut v, &cr.grant.key, key.clone());
        contract::set_pointer(&mut v, &cr.grant.amount, Value::from(STEP));
        s.send_value(&v).await?;
        granted += STEP;
        closed = read(s, cx, tally, cx.soon(), Some((k, granted)), &closes).await?;
        closed |= read(s, cx, tally, Instant::now() + LINGER, None, &closes).await?;
    }
    Ok(granted)
}

/// Read data frames (and answer what serves) until `until`, or until key `k` has `want`
/// bytes; whether one of `closes` came.
async fn read(
    s: &mut Session,
    cx: &Ctx,
    tally: &mut Tally,
    until: Instant,
    want: Option<(u64, u64)>,
    closes: &[&str],
) -> Result<bool, Failure> {
    loop {
        if let Some((k, n)) = want
            && tally.bytes.get(&k).copied().unwrap_or_default() >= n
        {
            return Ok(false);
        }
        match s.peer.next(until).await {
            Incoming::Data { frame, .. } => tally.count(&frame),
            Incoming::Control(g) => {
                if method(&g).is_some_and(|m| closes.contains(&m)) {
                    return Ok(true);
                }
                if s.respond(cx, &g).await? {
                    continue;
                }
            }
            Incoming::ControlEnd(why) => {
                return Err(Failure::new(format!("the control channel ended: {why}")));
            }
            Incoming::Timeout => return Ok(false),
            Incoming::DataEnd(_) => {}
        }
    }
}
