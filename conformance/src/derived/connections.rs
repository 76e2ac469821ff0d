//! The connection-cap family: where a count limit caps the connections one listener keeps
//! open at once (`counts: open-connections`) and the implementation is the listener, the
//! suite opens one connection more than the cap, each taken through the handshake, holds
//! them all, and expects exactly one to end as the limit's action says (xsession's
//! maxConnections: closed unread) while the others stay open.
//!
//! It counts the ends rather than expecting the last connection's: an implementation that
//! has not yet seen the close of the check before's connection refuses an earlier one of
//! these instead, and that is no breach.

use std::time::Instant;

use futures_util::future::{join_all, select_all};

use contract::Contract;
use contract::model::{ActionKind, LimitCounts};

use super::probes::{action_name, closed_as};
use super::{LINGER, Session, Shape, plan_of};
use crate::session::{Ctx, Got, Incoming};
use crate::{BodyFuture, Failure, Verdict};

/// The family's checks: (limit, title, the limit's seed) for each connection cap the
/// implementation's party keeps where the suite dials.
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(String, String, String)> {
    let Some(shape) = Shape::of(c) else {
        return Vec::new();
    };
    // The suite dials: the channel's connecting party is the played one, or unnamed.
    if (c.channels[&shape.channel].connects.as_deref()).is_some_and(|p| p != role) {
        return Vec::new();
    }
    (c.limits.iter())
        .filter(|(_, l)| l.counts == Some(LimitCounts::OpenConnections))
        // The listener's limit: the played party's own is not the implementation's to keep.
        .filter(|(_, l)| l.timer.as_deref() != Some(role))
        .filter_map(|(name, l)| {
            let a = l
                .action
                .as_ref()
                .filter(|a| a.action != ActionKind::Ignore)?;
            let code = a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
            let title = format!(
                "with {name} connections open, one more gets `{}`{code} and the others stay open",
                action_name(a.action)
            );
            Some((name.clone(), title, l.seed.clone()))
        })
        .collect()
}

/// What one held connection did while the suite watched it.
pub(super) struct Watched {
    /// Why it ended, if it did.
    pub ended: Option<String>,
    /// What it sent meanwhile.
    pub seen: Vec<Got>,
}

/// Read `s` until its control channel ends or `until`.
pub(super) async fn watch(s: &mut Session, until: Instant) -> Watched {
    let mut seen = Vec::new();
    loop {
        match s.peer.next(until).await {
            Incoming::Control(g) => seen.push(*g),
            Incoming::ControlEnd(why) => {
                return Watched {
                    ended: Some(why),
                    seen,
                };
            }
            Incoming::Timeout => return Watched { ended: None, seen },
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
}

/// The cap's worth of connections and one more, each through the handshake, then all
/// watched together until the deadline. Where more than one ended, a connection of the
/// check before may still have counted: the suite closes its own in order, waits for each
/// to be closed back (the implementation has then let it go), and tries once more. The
/// check closes its own back before it ends, too.
pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let limit = cx.subject.clone().unwrap_or_default();
        let limits = cx.wire.limits();
        let max = limits
            .count(&limit)
            .map_err(|e| Failure::new(e.to_string()))?;
        let action = limits.action(&limit).cloned();
        let action = action.ok_or_else(|| Failure::new("suite bug: no action"))?;
        let mut tried = None;
        for _ in 0..2 {
            let mut held = match hold(cx, max).await? {
                Ok(held) => held,
                Err(early) => return Ok(early),
            };
            let watched = watch_all(&mut held, cx.soon()).await;
            let ended: Vec<usize> = (0..held.len())
                .filter(|i| watched[*i].ended.is_some())
                .collect();
            if ended.len() < 2 {
                let verdict = judge(cx, &limit, (max, &action), &held, &watched, &ended);
                // The implementation sees the held connections end before the next check
                // opens one, which it would otherwise take for one over the cap.
                let open = (held.iter_mut().zip(&watched)).filter(|(_, w)| w.ended.is_none());
                let until = cx.soon();
                join_all(open.map(|(s, _)| s.close_back(until))).await;
                return verdict;
            }
            let until = cx.soon();
            join_all(held.iter_mut().map(|s| s.close_back(until))).await;
            tried = Some(ended);
        }
        let which: Vec<String> = (tried.unwrap_or_default().iter())
            .map(|i| (i + 1).to_string())
            .collect();
        Err(Failure::new(format!(
            "connections {} of {} ended, where {limit} keeps {max} open (twice: the second time with every earlier connection of the suite's closed back)",
            which.join(", "),
            max + 1
        )))
    })
}

/// `max + 1` sessions, each taken through the handshake (a connection the implementation
/// ends fails its handshake: the watch says why); else the check's verdict already (the
/// target not reached, or not reachable more than once).
async fn hold(cx: &mut Ctx, max: u64) -> Result<Result<Vec<Session>, Verdict>, Failure> {
    let plan = plan_of(cx);
    let first = match Session::open(cx).await {
        Ok(s) => s,
        Err(f) => return plan.unreached(f).map(Err),
    };
    let mut held = vec![first];
    for n in 1..=max {
        let Some(peer) = cx.open_again().await? else {
            return Ok(Err(Verdict::Skip(
                "the target is reached once per session (launched, or dialing in): the suite cannot hold several connections to one implementation".into(),
            )));
        };
        let mut s = Session::on(cx, peer, &plan)?;
        // Each claims an identity of its own: the claims check judges two claiming one.
        s.writes = super::claims::distinct(cx, &plan, n as usize);
        held.push(s);
    }
    for s in &mut held {
        let _ = s.handshake(cx, &plan).await;
    }
    Ok(Ok(held))
}

/// Every held connection watched until `until`, or, once one has ended, [`LINGER`] more
/// (the others are then taken to stay open: an implementation ends the one over its cap
/// when it accepts it, not the others later).
async fn watch_all(held: &mut [Session], until: Instant) -> Vec<Watched> {
    let n = held.len();
    let mut out: Vec<Option<Watched>> = (0..n).map(|_| None).collect();
    let watches = held
        .iter_mut()
        .enumerate()
        .map(|(i, s)| Box::pin(async move { (i, watch(s, until).await) }));
    let ((i, first), _, rest) = select_all(watches).await;
    let ended = first.ended.is_some();
    out[i] = Some(first);
    let wait = if ended {
        LINGER
    } else {
        until.saturating_duration_since(Instant::now())
    };
    let rest = rest.into_iter().map(|w| tokio::time::timeout(wait, w));
    for (i, w) in join_all(rest).await.into_iter().flatten() {
        out[i] = Some(w);
    }
    // A watch cut short by the linger saw no end: that connection stayed open.
    out.into_iter()
        .map(|w| {
            w.unwrap_or(Watched {
                ended: None,
                seen: Vec::new(),
            })
        })
        .collect()
}

/// Exactly one connection ended, unanswered, as the limit's action says.
fn judge(
    cx: &Ctx,
    limit: &str,
    (max, action): (u64, &contract::model::Action),
    held: &[Session],
    watched: &[Watched],
    ended: &[usize],
) -> Result<Verdict, Failure> {
    let n = held.len();
    let act = action_name(action.action);
    let Some(&one) = ended.first() else {
        return Err(Failure::new(format!(
            "all {n} connections stayed open; {limit} is {max}, and the contract prescribes `{act}` for the one over it"
        )));
    };
    closed_as(&held[one], cx, action.action, action.code.as_ref())?;
    let w = &watched[one];
    if let Some(g) = w.seen.first() {
        return Err(Failure::new(format!(
            "connection {} of {n} was answered before it ended; the contract prescribes `{act}`",
            one + 1
        ))
        .with("the answer", &g.raw));
    }
    let why = w.ended.clone().unwrap_or_default();
    crate::pass(format!(
        "{max} connections held open; connection {} of {n} ended ({why}) unanswered",
        one + 1
    ))
}
