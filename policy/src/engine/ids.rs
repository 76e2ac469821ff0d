//! Request-id rules as data: each party's `ids` (prefix, start, increasing, gapless,
//! unique, a cap on requests awaiting an answer), checked per connection, for requests and
//! for the answers to them.
//!
//! An id's number is the integer itself, or for a string the digits after the prefix.
//! Uniqueness is checked exactly against pending ids and, up to a bound, against every id
//! seen; with `increasing` any reuse is also out of order. A request breaking a rule does
//! not use its id up, except across a gap: the count resyncs there, so one gap is reported
//! once. A good id is used even when the request is refused for another reason (the sender
//! counted it), but only a request that went on is pending.
//!
//! An answer must answer an id its requester issued: one carrying the answerer's own
//! prefix (where the parties' prefixes differ) is in the wrong direction, and one the
//! requester never issued (above its last id, or never seen) answers nothing. Both get the
//! requester's id-rule action.

use std::collections::{HashMap, HashSet};

use contract::ids::{IdBreak, number};
use contract::model::{IdRules, Kind};
use contract::wire::Message;
use contract::{Contract, Limits};
use serde_json::Value;

use super::{Ruling, broken};

/// Ids remembered per party for the `unique` rule beyond the pending ones; past it only
/// pending ids are checked (the bound an SDK's `IdCounter` keeps too).
const MAX_SEEN: usize = contract::ids::MAX_REMEMBERED;

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

/// What admitting a request records.
#[derive(Debug)]
pub(crate) struct Admit {
    party: String,
    key: String,
    n: Option<i128>,
    unique: bool,
}

fn broke(rule: &'static str, why: String) -> IdBreak {
    IdBreak {
        rule,
        why,
        resync: None,
    }
}

impl IdState {
    /// Judge `msg` sent by `from` to `to`: a request against `from`'s rules (`Err` when it
    /// breaks one, else what admitting it records), an answer against `to`'s issued ids
    /// (settled at once).
    pub(crate) fn judge(
        &mut self,
        c: &Contract,
        limits: &Limits,
        (from, to): (&str, &str),
        msg: &Message,
    ) -> Result<Option<Admit>, Box<Ruling>> {
        if matches!(msg.kind, Kind::Response | Kind::Error) {
            return self.answer(c, (from, to), msg).map(|()| None);
        }
        let Some(rules) = c.parties.get(from).and_then(|p| p.ids.as_ref()) else {
            return Ok(None);
        };
        let Some(id) = msg.id.as_ref().filter(|_| msg.kind == Kind::Request) else {
            return Ok(None);
        };
        let state = self.parties.get(from);
        let n = match admit(state, rules, id) {
            Ok(n) => n,
            Err(b) => {
                if let Some(n) = b.resync {
                    self.parties.entry(from.to_string()).or_default().last = Some(n);
                }
                return Err(ruled(c, from, b, id, msg));
            }
        };
        let a = Admit {
            party: from.to_string(),
            key: id.to_string(),
            n,
            unique: rules.unique,
        };
        let max = rules
            .max_pending
            .as_deref()
            .and_then(|l| limits.count(l).ok());
        let pending = state.map_or(0, |s| s.pending.len() as u64);
        if let Some(m) = max.filter(|m| pending >= *m) {
            // The id itself is good: the sender counts it as used.
            self.commit(a, false);
            let why = format!(
                "would make {} requests awaiting an answer (at most {m})",
                m + 1
            );
            return Err(ruled(c, from, broke("ids.pending", why), id, msg));
        }
        Ok(Some(a))
    }

    /// An answer from `from` to `to`'s request: settled, or the rule it breaks.
    fn answer(
        &mut self,
        c: &Contract,
        (from, to): (&str, &str),
        msg: &Message,
    ) -> Result<(), Box<Ruling>> {
        let Some(id) = &msg.correlation else {
            return Ok(());
        };
        let mut state = self.parties.get_mut(to);
        let issued = state
            .as_mut()
            .is_some_and(|s| s.pending.remove(&id.to_string()));
        let Some(rules) = c.parties.get(to).and_then(|p| p.ids.as_ref()) else {
            return Ok(());
        };
        if issued {
            return Ok(());
        }
        let own = c
            .parties
            .get(from)
            .and_then(|p| p.ids.as_ref()?.prefix.as_deref());
        match unissued(state.as_deref(), rules, own, id) {
            None => Ok(()),
            Some(b) => Err(ruled(c, to, b, id, msg)),
        }
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

/// The ruling for `b`, under the id rules of `party` (the requester).
fn ruled(c: &Contract, party: &str, b: IdBreak, id: &Value, msg: &Message) -> Box<Ruling> {
    let rules = c.parties.get(party).and_then(|p| p.ids.as_ref());
    let entry = format!("/parties/{}/ids", contract::escape_pointer(party));
    let what = match msg.kind {
        Kind::Response | Kind::Error => "an answer".to_string(),
        _ => msg.method.clone().unwrap_or_else(|| "a request".into()),
    };
    let reason = format!("{what}: id {id} {}", b.why);
    let action = rules.and_then(|r| r.action.as_ref());
    Box::new(broken(c, b.rule, &entry, action, msg, reason))
}

/// Whether request id `id` keeps `rules` after what `state` has seen: its number, or
/// which rule it breaks.
fn admit(state: Option<&PartyIds>, rules: &IdRules, id: &Value) -> Result<Option<i128>, IdBreak> {
    let used = |k: &str| state.is_some_and(|s| s.pending.contains(k) || s.seen.contains(k));
    rules.admit(state.and_then(|s| s.last), used, id)
}

/// Why an answer to `id` answers nothing its requester issued, if it does not: it carries
/// the answerer's `own` prefix, or lies beyond (or outside) what the requester issued.
fn unissued(
    state: Option<&PartyIds>,
    rules: &IdRules,
    own: Option<&str>,
    id: &Value,
) -> Option<IdBreak> {
    let theirs = rules.prefix.as_deref();
    if let (Some(own), Some(s)) = (own, id.as_str())
        && theirs != Some(own)
        && s.starts_with(own)
    {
        return Some(broke(
            "ids.wrong-direction",
            format!("carries the answerer's own prefix {own}"),
        ));
    }
    let last = state.and_then(|s| s.last);
    let never = match number(id, theirs) {
        Some(n) if rules.increasing => last.is_none_or(|l| n > l),
        None if theirs.is_some() => true,
        _ => {
            rules.unique
                && state
                    .is_none_or(|s| s.seen.len() < MAX_SEEN && !s.seen.contains(&id.to_string()))
        }
    };
    never.then(|| {
        broke(
            "ids.unknown-answer",
            "answers no request its requester issued".into(),
        )
    })
}
