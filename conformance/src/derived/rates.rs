//! The rate-limit family of the derived suite: for each token bucket kept per connection on
//! requests the played party sends, a fresh session sends twice the bucket and one more
//! back to back. The first `burst` must be served, and at least one beyond them refused
//! with the limit's own code (the bucket refills while a slow implementation works, so
//! which of the rest are refused is not fixed).

use std::collections::HashMap;

use contract::Contract;
use contract::model::{ActionKind, LimitKey, LimitKind};
use serde_json::Value;

use super::shape::Shape;
use super::{Session, plan_of};
use crate::session::{Ctx, Got, Incoming, with_meanwhile};
use crate::{BodyFuture, Failure, pass};

/// One rate limit the suite can probe.
pub(super) struct RateProbe {
    /// The limit's name.
    pub limit: String,
    /// The request sent in the burst.
    pub method: String,
    /// The bucket size.
    pub burst: u64,
    /// The code a refused request gets.
    pub code: Value,
    pub seed: String,
}

/// The connection-keyed rates on `role`'s requests that refuse with a code, each with a
/// request among `staying` to send.
pub(super) fn rate_probes(c: &Contract, role: &str, staying: &[String]) -> Vec<RateProbe> {
    let limits = c.evaluated_limits();
    c.limits
        .iter()
        .filter(|(_, l)| l.kind == LimitKind::Rate && l.key == Some(LimitKey::Connection))
        .filter_map(|(name, l)| {
            let applies = l.applies.as_ref();
            if applies
                .and_then(|a| a.from.as_deref())
                .is_some_and(|f| f != role)
            {
                return None;
            }
            let methods = applies.map(|a| a.methods.as_slice()).unwrap_or_default();
            let method = staying
                .iter()
                .find(|m| methods.is_empty() || methods.contains(m))?;
            let a = l
                .action
                .as_ref()
                .filter(|a| a.action == ActionKind::ReplyError)?;
            Some(RateProbe {
                limit: name.clone(),
                method: method.clone(),
                burst: limits.rate(name).ok()?.burst,
                code: a.code.clone()?,
                seed: format!("{}: {}", contract::join_pointer("/limits", [name]), l.seed),
            })
        })
        .collect()
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
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let mut ids = Vec::new();
        for _ in 0..2 * p.burst + 1 {
            ids.push(s.send(cx, &p.method).await?.unwrap_or(Value::Null));
        }
        let (answers, others) = collect(&mut s, cx, &ids).await;
        judge(&s.shape, &p, &ids, &answers, others)
    })
}

/// The answers to `ids`, by id, until all came, the channel ended or the deadline passed;
/// and the rest that came meanwhile.
async fn collect(s: &mut Session, cx: &Ctx, ids: &[Value]) -> (HashMap<String, Got>, Vec<Got>) {
    let until = cx.soon();
    let mut answers = HashMap::new();
    let mut others = Vec::new();
    while answers.len() < ids.len() {
        match s.peer.next(until).await {
            Incoming::Control(g) => {
                let to = g.ok().and_then(|m| m.correlation.clone());
                match to.filter(|id| ids.contains(id)) {
                    Some(id) => {
                        answers.insert(id.to_string(), *g);
                    }
                    None if others.len() < super::UNCLAIMED => others.push(*g),
                    None => {}
                }
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            Incoming::ControlEnd(_) | Incoming::Timeout => break,
        }
    }
    (answers, others)
}

fn judge(
    shape: &Shape,
    p: &RateProbe,
    ids: &[Value],
    answers: &HashMap<String, Got>,
    others: Vec<Got>,
) -> Result<crate::Verdict, Failure> {
    let refused = |id: &Value| {
        answers
            .get(&id.to_string())
            .and_then(|g| g.value())
            .and_then(|v| shape.error_code(v))
            == Some(&p.code)
    };
    let n = ids.len();
    let missing = ids
        .iter()
        .filter(|id| !answers.contains_key(&id.to_string()))
        .count();
    if missing > 0 {
        let f = Failure::new(format!(
            "{missing} of {n} back-to-back {} got no answer",
            p.method
        ));
        return Err(with_meanwhile(f, others));
    }
    let burst = usize::try_from(p.burst).unwrap_or(usize::MAX);
    if let Some((i, id)) = ids
        .iter()
        .enumerate()
        .take(burst)
        .find(|(_, id)| refused(id))
    {
        let g = &answers[&id.to_string()];
        return Err(Failure::new(format!(
            "{} #{} of {n} was refused within the bucket of {burst}",
            p.method,
            i + 1
        ))
        .with("the answer", &g.raw));
    }
    let over = ids.iter().filter(|id| refused(id)).count();
    if over == 0 {
        let last = &answers[&ids[n - 1].to_string()];
        return Err(Failure::new(format!(
            "all {n} back-to-back {} were served; {} allows {burst} before {}",
            p.method, p.limit, p.code
        ))
        .with("the last answer", &last.raw));
    }
    pass(format!(
        "{} served, {over} refused with {} (bucket {burst})",
        n - over,
        p.code
    ))
}
