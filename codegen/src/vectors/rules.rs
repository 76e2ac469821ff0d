//! Rule vectors: request ids and keyed rate limits. For each party with id rules, the ids it
//! issues first and what a run of ids (good, reused, skipping, malformed) gets; for each keyed
//! rate limit, what a timed run of calls gets. The expected outcomes come from
//! `contract::ids` and `contract::rate`, which the proxy's policy engine runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::ir::Ir;
use contract::Contract;
use contract::ids::IdCounter;
use contract::model::{IdRules, LimitKey, Part};
use contract::rate::{KeyedRate, Taken};

/// The rule vectors of one contract: `{"ids": [...], "rates": [...]}`.
pub fn rules(ir: &Ir) -> Value {
    let c = &ir.contract;
    let ids: Vec<Value> = c
        .parties
        .iter()
        .filter_map(|(party, p)| Some(id_vector(party, p.ids.as_ref()?)))
        .collect();
    let limits = contract::Limits::new(c);
    let shared = Arc::new(c.clone());
    let rates: Vec<Value> = c
        .limits
        .iter()
        .filter(|(_, l)| l.is_keyed_rate())
        .filter_map(|(name, _)| rate_vector(&shared, &limits, name))
        .collect();
    json!({ "ids": ids, "rates": rates })
}

fn id_vector(party: &str, rules: &IdRules) -> Value {
    let mut issuer = IdCounter::new();
    let next: Vec<Value> = (0..3).map(|_| issuer.next_id(rules)).collect();
    let n = rules.first();
    let mut run: Vec<Value> = [n, n + 1, n + 1, n + 3, n + 4, n + 2]
        .iter()
        .map(|k| rules.id_for(*k))
        .collect();
    let odd = match &rules.prefix {
        Some(p) => vec![
            json!(format!("zz{}", n + 5)),
            json!(format!("{p}0{}", n + 5)),
        ],
        None => vec![json!("x"), json!(true)],
    };
    run.extend(odd);
    let mut checker = IdCounter::new();
    let admit: Vec<Value> = run
        .into_iter()
        .map(|id| {
            let expect = match checker.admit(rules, &id) {
                Ok(()) => "ok",
                Err(b) => b.rule,
            };
            json!({ "id": id, "expect": expect })
        })
        .collect();
    json!({ "party": party, "next": next, "admit": admit })
}

/// A call the limit applies to: (sender, method, message), from a call example.
fn call_for(c: &Contract, name: &str) -> Option<(String, String, Value)> {
    let l = &c.limits[name];
    c.methods.iter().find_map(|(m, x)| {
        let ex = x.examples.iter().find(|e| e.part == Part::Call)?;
        let from = ex.from.clone().or_else(|| x.from.first().cloned())?;
        let fits = l.applies_to(c, &from, Some(m)) && l.bucket_key(&from, 0, &ex.message).is_some();
        fits.then(|| (from, m.clone(), ex.message.clone()))
    })
}

fn rate_vector(c: &Arc<Contract>, limits: &contract::Limits, name: &str) -> Option<Value> {
    let (from, method, message) = call_for(c, name)?;
    let (period, burst) = limits.rate(name).ok()?.token_period()?;
    let mut limiter = KeyedRate::new(c.clone(), limits, name).ok()?;
    let l = &c.limits[name];
    // A rate in bytes counts each message's size: call with a quarter of the burst each, so
    // four calls fill it; any other rate takes one token a call.
    let bytes = l.counts_bytes();
    let (size, fill) = if bytes {
        (burst.get().div_ceil(4) as usize, 4)
    } else {
        (message.to_string().len(), burst.get().min(1_000))
    };
    // The burst and two past it, a pause of one and a half tokens, two more: every instant
    // well away from a refill edge, so float clocks agree.
    let step = period.as_secs_f64() * f64::from(if bytes { size as u32 } else { 1 });
    let mut times: Vec<f64> = (0..fill + 2).map(|i| f64::from(i) * step * 1e-3).collect();
    let last = times.last().copied().unwrap_or_default();
    times.extend([last + 1.5 * step, last + 1.5 * step + step * 1e-3]);
    let mut other = message.clone();
    if let Some(LimitKey::Pointer { pointer }) = &l.key {
        contract::set_pointer(&mut other, pointer, json!("another key"));
    }
    let base = Instant::now();
    let calls: Vec<Value> = times
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // The second call past the burst is keyed elsewhere when the key is a pointer.
            let msg = if i == fill as usize + 1 {
                &other
            } else {
                &message
            };
            call(
                &mut limiter,
                base + Duration::from_secs_f64(*t),
                *t,
                (&from, &method),
                (msg, size),
            )
        })
        .collect();
    Some(json!({ "limit": name, "calls": calls }))
}

fn call(
    k: &mut KeyedRate,
    now: Instant,
    t: f64,
    (from, method): (&str, &str),
    (msg, size): (&Value, usize),
) -> Value {
    let expect = match k.take((from, 0), Some(method), (msg, size), now) {
        Taken::NotApplicable => "not-applicable",
        Taken::Admitted => "admitted",
        Taken::Refused => "refused",
    };
    json!({ "t": t, "from": from, "method": method, "message": msg, "size": size, "expect": expect })
}
