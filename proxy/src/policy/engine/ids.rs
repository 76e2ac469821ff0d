//! Request-id rules as data: each party's `ids` (prefix, increasing, gapless, unique,
//! a cap on requests awaiting an answer), checked per connection.
//!
//! An id's number is the integer itself, or for a string the digits after the prefix.
//! Uniqueness is checked exactly against pending ids and, up to a bound, against every
//! id seen; with `increasing` any reuse is also out of order. A request that breaks a
//! rule does not use its id up; a good id is used even when the request is refused for
//! another reason (the sender counted it), but only a request that went on is pending.

use std::collections::{HashMap, HashSet};

use contract::model::{IdRules, Kind};
use contract::wire::Message;
use contract::{Contract, Limits};
use serde_json::Value;

use super::{Ruling, broken};

/// Ids remembered per party for the `unique` rule beyond the pending ones; past it only
/// pending ids are checked. A memory guard, not a protocol number.
const MAX_SEEN: usize = 65_536;

#[derive(Debug, Default)]
struct PartyIds {
    last: Option<i128>,
    pending: HashSet<String>,
    seen: HashSet<String>,
}

/// One connection's request ids, per party.
#[derive(Debug, Default)]
pub(crate) struct IdState {
    parties: HashMap<String, PartyIds>,
}

/// Whether any party of the contract declares id rules.
pub(crate) fn any(c: &Contract) -> bool {
    c.parties.values().any(|p| p.ids.is_some())
}

impl IdState {
    /// Judge `msg` from `from`: a request against its party's rules (`Err` when it
    /// breaks one, else what admitting it records), an answer against the other parties'
    /// pending ids (settled at once: answers are never refused).
    pub(crate) fn judge(
        &mut self,
        c: &Contract,
        limits: &Limits,
        from: &str,
        msg: &Message,
    ) -> Result<Option<Admit>, Box<Ruling>> {
        if matches!(msg.kind, Kind::Response | Kind::Error) {
            if let Some(id) = &msg.correlation {
                let key = id.to_string();
                self.parties
                    .iter_mut()
                    .filter(|(p, _)| *p != from)
                    .for_each(|(_, s)| {
                        s.pending.remove(&key);
                    });
            }
            return Ok(None);
        }
        let Some(rules) = c.parties.get(from).and_then(|p| p.ids.as_ref()) else {
            return Ok(None);
        };
        let Some(id) = msg.id.as_ref().filter(|_| msg.kind == Kind::Request) else {
            return Ok(None);
        };
        let max = rules
            .max_pending
            .as_deref()
            .and_then(|l| limits.count(l).ok());
        let state = self.parties.get(from);
        let n = match admit(state, rules, id) {
            Ok(n) => n,
            Err(reason) => return Err(Box::new(self.broken(c, rules, from, id, msg, reason))),
        };
        let a = Admit {
            party: from.to_string(),
            key: id.to_string(),
            n,
            unique: rules.unique,
        };
        let pending = state.map_or(0, |s| s.pending.len() as u64);
        if let Some(m) = max.filter(|m| pending >= *m) {
            // The id itself is good: the sender counts it as used.
            self.commit(a, false);
            let reason = format!(
                "would make {} requests awaiting an answer (at most {m})",
                m + 1
            );
            return Err(Box::new(self.broken(c, rules, from, id, msg, reason)));
        }
        Ok(Some(a))
    }

    fn broken(
        &self,
        c: &Contract,
        rules: &IdRules,
        from: &str,
        id: &Value,
        msg: &Message,
        reason: String,
    ) -> Ruling {
        let entry = format!("/parties/{}/ids", contract::escape_pointer(from));
        let method = msg.method.as_deref().unwrap_or("request");
        let reason = format!("{method} from {from}: id {id} {reason}");
        broken(c, "ids", &entry, rules.action.as_ref(), msg, reason)
    }

    /// Record a request whose id kept the rules: the id is used from now on, and the
    /// request awaits an answer when it went on (a refused one was answered by the proxy).
    pub(crate) fn commit(&mut self, a: Admit, went_on: bool) {
        let s = self.parties.entry(a.party).or_default();
        s.last = a.n.max(s.last);
        if a.unique && s.seen.len() < MAX_SEEN {
            s.seen.insert(a.key.clone());
        }
        if went_on {
            s.pending.insert(a.key);
        }
    }
}

/// What admitting a request records.
#[derive(Debug)]
pub(crate) struct Admit {
    party: String,
    key: String,
    n: Option<i128>,
    unique: bool,
}

/// Whether request id `id` keeps `rules` after what `state` has seen: its number, or
/// which rule it breaks.
fn admit(state: Option<&PartyIds>, rules: &IdRules, id: &Value) -> Result<Option<i128>, String> {
    let key = id.to_string();
    let n = number(id, rules.prefix.as_deref());
    if let Some(p) = &rules.prefix
        && !id.as_str().is_some_and(|s| s.starts_with(p.as_str()))
    {
        return Err(format!("lacks the prefix {p:?}"));
    }
    let Some(state) = state else { return Ok(n) };
    if rules.unique && (state.pending.contains(&key) || state.seen.contains(&key)) {
        return Err("was used before".into());
    }
    if let (Some(last), Some(n)) = (state.last, n) {
        if rules.increasing && n <= last {
            return Err(format!("is not above the previous {last}"));
        }
        if rules.gapless && n != last + 1 {
            return Err(format!("skips from {last} (gapless)"));
        }
    }
    Ok(n)
}

/// The number an id carries: the integer, or a string's digits after `prefix`.
fn number(id: &Value, prefix: Option<&str>) -> Option<i128> {
    match id {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s
            .strip_prefix(prefix.unwrap_or(""))
            .and_then(|d| d.parse().ok()),
        _ => None,
    }
}
