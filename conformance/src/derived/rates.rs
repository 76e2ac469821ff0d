//! The rate-limit family of the derived suite: every token bucket on messages the played
//! party sends, whatever it is kept per (a connection, a party, the value of a member,
//! everything), whose refusal the wire shows: an error answer with the limit's code, or a
//! report that writes it (xsession's `delivery_status` `dropped`). A fresh session sends
//! more than the bucket back to back, all into one bucket of the limit; the first `burst`
//! must be served, and of the rest at least those the bucket cannot have refilled for by
//! the last answer must be refused with the limit's own code.
//!
//! Another limit on the same messages would refuse some for its own reasons. Where that
//! limit is kept per member the suite may vary, the messages are spread over enough of its
//! values that it refuses none: values the suite makes up from the example's, or, for a
//! member a report is addressed to, the values the session hears answers through too
//! ([`Ctx::alternates`]: xsession's `from`). Otherwise the check sends no more than that
//! limit's bucket, and skips, naming it, when that is too few to judge.
//!
//! A message an `ignore` refused leaves no trace: sent again, as it was, once the bucket
//! has a token, it must not be refused (xsession's X-6).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use contract::Contract;
use contract::model::{ActionKind, Limit, LimitKey};
use serde_json::Value;

use super::shape::{Shape, reports_code};
use super::{Session, plan_of};
use crate::session::{Ctx, Got, Incoming, with_meanwhile};
use crate::{BodyFuture, Failure, pass, skip};

/// Slack on the wait for the bucket's next token before a refused message is sent again.
const REFILL_SLACK: Duration = Duration::from_millis(300);

/// One rate limit the suite can probe.
pub(super) struct RateProbe {
    /// The limit's name.
    pub limit: String,
    /// The message sent in the burst.
    pub method: String,
    /// The bucket size.
    pub burst: u64,
    /// How many messages the check sends back to back.
    pub sent: u64,
    /// The time one token takes to refill.
    pub period: Duration,
    /// The code a refused message shows.
    pub code: Value,
    /// Whether a refused message leaves no trace (`ignore`).
    pub forgotten: bool,
    /// The members the messages are spread over: the pointer, how many values, and the
    /// limit kept per it that must refuse none.
    pub spread: Vec<(String, u64, String)>,
    /// Why no number of messages isolates the limit.
    pub unfit: Option<String>,
    pub seed: String,
}

impl RateProbe {
    /// The check's title.
    pub fn title(&self) -> String {
        let spread: Vec<String> = (self.spread.iter())
            .map(|(p, k, other)| {
                format!(", spread over {k} values of {p} so that {other} refuses none")
            })
            .collect();
        format!(
            "{} back-to-back {}: none of the first {} refused, then {} for what outruns the bucket{}",
            self.sent,
            self.method,
            self.burst,
            self.code,
            spread.concat()
        )
    }
}

/// The rates on `role`'s messages whose refusal shows a code, each with a message among
/// `staying` to send.
pub(super) fn rate_probes(c: &Contract, role: &str, staying: &[String]) -> Vec<RateProbe> {
    let limits = c.evaluated_limits();
    (c.limits.iter().filter(|(_, l)| counted(l)))
        .filter_map(|(name, l)| {
            let method = staying
                .iter()
                .find(|m| l.applies_to(c, role, Some(m)))?
                .clone();
            let rate = limits.rate(name).ok()?;
            let (period, _) = rate.token_period()?;
            let mut p = RateProbe {
                limit: name.clone(),
                method,
                burst: rate.burst,
                sent: 2 * rate.burst + 1,
                period,
                code: refusal_code(l)?,
                forgotten: l.action.as_ref()?.action == ActionKind::Ignore,
                spread: Vec::new(),
                unfit: None,
                seed: format!("{}: {}", contract::join_pointer("/limits", [name]), l.seed),
            };
            isolate(c, role, l, &limits, &mut p);
            Some(p)
        })
        .collect()
}

/// Whether `l` is a rate the engine runs (`Limit::is_keyed_rate`) counted in messages.
fn counted(l: &Limit) -> bool {
    l.is_keyed_rate() && !l.counts_bytes()
}

/// The code a refused message shows: its error answer's, or the one a report writes.
fn refusal_code(l: &Limit) -> Option<Value> {
    let a = l.action.as_ref()?;
    let shown = a.action == ActionKind::ReplyError || reports_code(a);
    shown.then(|| a.code.clone()).flatten()
}

fn key_pointer(l: &Limit) -> Option<&str> {
    match &l.key {
        Some(LimitKey::Pointer { pointer }) => Some(pointer),
        _ => None,
    }
}

/// Keep the other limits on `p`'s messages from refusing any (see the module doc).
fn isolate(c: &Contract, role: &str, l: &Limit, limits: &contract::Limits, p: &mut RateProbe) {
    let own = key_pointer(l);
    let others: Vec<(&String, &Limit, u64)> = (c.limits.iter())
        .filter(|(n, m)| counted(m) && **n != p.limit)
        .filter(|(_, m)| m.applies_to(c, role, Some(&p.method)))
        .filter_map(|(n, m)| Some((n, m, limits.rate(n).ok()?.burst.max(1))))
        .collect();
    let mut capped_by = None;
    for (name, m, burst) in &others {
        let fixed = key_pointer(m).is_none() || key_pointer(m) == own;
        if fixed && *burst < p.sent {
            p.sent = *burst;
            capped_by = Some(*name);
        }
    }
    for (name, m, burst) in &others {
        if let Some(ptr) = key_pointer(m).filter(|k| Some(*k) != own) {
            let values = p.sent.div_ceil(*burst);
            if values > 1 {
                p.spread.push((ptr.to_string(), values, name.to_string()));
            }
        }
    }
    if let Some(other) = capped_by.filter(|_| p.sent < p.burst + 2) {
        p.unfit = Some(format!(
            "{other} counts the same {} with a bucket of {}, kept per nothing the suite can vary: more than {} back to back cannot be told from its refusals",
            p.method, p.sent, p.burst
        ));
    }
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let name = cx.subject.clone().unwrap_or_default();
        let plan = plan_of(cx);
        let c = cx.wire.contract().clone();
        let p = rate_probes(&c, &cx.role, &plan.staying(&c))
            .into_iter()
            .find(|p| p.limit == name)
            .ok_or_else(|| Failure::new(format!("suite bug: no rate probe {name}")))?;
        if let Some(why) = &p.unfit {
            return skip(why.clone());
        }
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        // After the start: the opener tells which addresses the session hears.
        let values = match spread_values(cx, &c, &p) {
            Ok(v) => v,
            Err(why) => return skip(why),
        };
        let started = Instant::now();
        let mut sent = Vec::new();
        for i in 0..p.sent as usize {
            let mut v = s.message(cx, &p.method)?;
            for (ptr, vals) in &values {
                contract::set_pointer(&mut v, ptr, vals[i % vals.len()].clone());
            }
            // Only a spread message is the suite's own making; an example is the contract's.
            let refused = || {
                let bytes = v.to_string();
                let m = cx
                    .wire
                    .decode(&s.shape.channel, &cx.role, bytes.as_bytes(), None);
                m.err().map(|e| e.reason)
            };
            if let Some(why) = (!values.is_empty()).then(refused).flatten() {
                return skip(format!(
                    "spread over {values:?}, a {} is not one the contract accepts: {why}",
                    p.method
                ));
            }
            sent.push((s.send_value(&v).await?.unwrap_or(Value::Null), v));
        }
        let ids: Vec<Value> = sent.iter().map(|(id, _)| id.clone()).collect();
        let (answers, others) = collect(&mut s, cx, &ids).await;
        let last = answers.values().map(|g| g.at).max().unwrap_or(started);
        let took = last.saturating_duration_since(started);
        let (text, refused) = judge(&s.shape, &p, &ids, &answers, others, took)?;
        match refused.first() {
            None => skip(text),
            Some(&i) if p.forgotten => again(&mut s, cx, &p, &sent[i].1, i, text).await,
            Some(_) => pass(text),
        }
    })
}

/// The values of each member `p` spreads its messages over (see the module doc), or why
/// the suite has too few.
fn spread_values(
    cx: &Ctx,
    c: &Contract,
    p: &RateProbe,
) -> Result<Vec<(String, Vec<Value>)>, String> {
    let example = super::example(c, &p.method, &cx.role).unwrap_or_default();
    let mut out = Vec::new();
    for (ptr, k, other) in &p.spread {
        let vals = match cx.alternates.iter().find(|(q, _)| q == ptr) {
            Some((_, vals)) => vals.clone(),
            None if is_address(c, ptr) => Vec::new(),
            None => (0..*k)
                .map_while(|i| varied(example.pointer(ptr)?, i))
                .collect(),
        };
        let k = usize::try_from(*k).unwrap_or(usize::MAX);
        if vals.len() < k {
            return Err(format!(
                "{other} is kept per {ptr}: {} back-to-back {} need {k} values of it to keep {other} from refusing any, and the suite has {}",
                p.sent,
                p.method,
                vals.len()
            ));
        }
        out.push((ptr.clone(), vals[..k].to_vec()));
    }
    Ok(out)
}

/// Whether a report is addressed to the member at `ptr`: another value of it is another
/// address, one the suite may not hear.
fn is_address(c: &Contract, ptr: &str) -> bool {
    (c.limits.values().filter_map(|l| l.action.as_ref()))
        .filter_map(|a| a.report.as_ref())
        .any(|r| r.to == ptr)
}

/// The `i`th value made up from `base`: itself first, then a suffixed text or a larger number.
fn varied(base: &Value, i: u64) -> Option<Value> {
    match base {
        _ if i == 0 => Some(base.clone()),
        Value::String(s) => Some(Value::from(format!("{s}-{i}"))),
        Value::Number(n) => Some(Value::from(n.as_u64()?.checked_add(i)?)),
        _ => None,
    }
}

/// The first answer to each of `ids` (one may cover several), until all came, the channel ended or the deadline
/// passed; and the rest that came meanwhile.
async fn collect(s: &mut Session, cx: &Ctx, ids: &[Value]) -> (HashMap<String, Got>, Vec<Got>) {
    let until = cx.soon();
    let mut answers = HashMap::new();
    let mut others = Vec::new();
    while answers.len() < ids.len() {
        match s.peer.next(until).await {
            Incoming::Control(g) => {
                let to = g
                    .value()
                    .map(|v| s.shape.answered_all(v))
                    .unwrap_or_default();
                let ours: Vec<&Value> = to.iter().filter(|id| ids.contains(id)).collect();
                for id in &ours {
                    answers
                        .entry(id.to_string())
                        .or_insert_with(|| (*g).clone());
                }
                if ours.is_empty() && others.len() < super::UNCLAIMED {
                    others.push(*g);
                }
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            Incoming::ControlEnd(_) | Incoming::Timeout => break,
        }
    }
    (answers, others)
}

/// Whether `g` shows `p`'s refusal.
fn refuses(shape: &Shape, p: &RateProbe, g: Option<&Got>) -> bool {
    g.and_then(|g| g.value()).and_then(|v| shape.error_code(v)) == Some(&p.code)
}

/// The finding on the burst, and the indices of the refused messages (none: nothing to
/// judge, the bucket may have refilled for all of them).
fn judge(
    shape: &Shape,
    p: &RateProbe,
    ids: &[Value],
    answers: &HashMap<String, Got>,
    others: Vec<Got>,
    took: Duration,
) -> Result<(String, Vec<usize>), Failure> {
    let n = ids.len();
    let answer = |i: usize| answers.get(&ids[i].to_string());
    let missing = (0..n).filter(|i| answer(*i).is_none()).count();
    if missing > 0 {
        let f = Failure::new(format!(
            "{missing} of {n} back-to-back {} got no answer",
            p.method
        ));
        return Err(with_meanwhile(f, others));
    }
    let burst = usize::try_from(p.burst).unwrap_or(usize::MAX);
    if let Some(i) = (0..n.min(burst)).find(|i| refuses(shape, p, answer(*i))) {
        let f = Failure::new(format!(
            "{} #{} of {n} was refused within the bucket of {burst}",
            p.method,
            i + 1
        ));
        return Err(f.with(
            "the answer",
            &answer(i).map(|g| g.raw.clone()).unwrap_or_default(),
        ));
    }
    let refused: Vec<usize> = (0..n).filter(|i| refuses(shape, p, answer(*i))).collect();
    let refills = (took.as_secs_f64() / p.period.as_secs_f64()).floor() as usize;
    let need = n.saturating_sub(burst.saturating_add(refills));
    let timing = format!(
        "{n} back-to-back {} answered within {:.2} s, when the bucket of {burst} refills one every {:.2} s",
        p.method,
        took.as_secs_f64(),
        p.period.as_secs_f64()
    );
    if refused.len() < need {
        let f = Failure::new(format!(
            "{timing}: at least {need} must be refused with {}, {} were",
            p.code,
            refused.len()
        ));
        return Err(f.with(
            "the last answer",
            &answer(n - 1).map(|g| g.raw.clone()).unwrap_or_default(),
        ));
    }
    if refused.is_empty() {
        return Ok((
            format!(
                "{timing}: it may have refilled for every one beyond it, so none need be refused"
            ),
            refused,
        ));
    }
    let text = format!(
        "{} not refused, {} refused with {} (bucket {burst}); {timing}",
        n - refused.len(),
        refused.len(),
        p.code
    );
    Ok((text, refused))
}

/// Send the `i`th message again once the bucket has a token: refused by an `ignore`, it
/// left no trace, so it must not be refused again.
async fn again(
    s: &mut Session,
    cx: &Ctx,
    p: &RateProbe,
    v: &Value,
    i: usize,
    text: String,
) -> Result<crate::Verdict, Failure> {
    tokio::time::sleep(p.period + REFILL_SLACK).await;
    let id = s.send_value(v).await?.unwrap_or(Value::Null);
    let (answers, others) = collect(s, cx, std::slice::from_ref(&id)).await;
    let what = format!(
        "{} #{}, refused, sent again as it was {:.2} s later",
        p.method,
        i + 1,
        (p.period + REFILL_SLACK).as_secs_f64()
    );
    match answers.get(&id.to_string()) {
        None => Err(with_meanwhile(Failure::new(format!("{what}, got no answer")), others)),
        Some(g) if refuses(&s.shape, p, Some(g)) => Err(Failure::new(format!(
            "{what}, was refused again: a message `ignore` refused leaves no trace, and the bucket had a token"
        ))
        .with("the answer", &g.raw)),
        Some(_) => pass(format!("{text}; {what}, was not refused")),
    }
}
