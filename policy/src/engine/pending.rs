//! Pending caps as data: a `count` limit with `counts: pending-requests` caps the requests
//! it `applies` to that one sender has awaiting an answer on a connection (rukh's
//! pendingRequestsMax: operation and UI requests, per direction). A request beyond the cap
//! gets the limit's action (rukh: answered -32006, not run) and is not counted; an answer
//! ends its request's wait. Kept per connection: it is about one peer's backlog.
//!
//! The same waits judge a method's `notWhile`: a message its sender may not send while it
//! awaits the answer to a request of another method (toolchannel's release during a
//! tools/call) is flagged; its receiver cannot take back what was sent.

use std::collections::{HashMap, HashSet};

use contract::model::LimitCounts;
use contract::wire::Message;
use contract::{Contract, Limits};

use super::{Ruling, broken, limit_entry, ruling};
use crate::Act;

/// Requests awaiting an answer, by (limit, sender), and, for the methods some `notWhile`
/// names, by (method, sender): their ids.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    ids: HashMap<(String, String), HashSet<String>>,
    calls: HashMap<(String, String), HashSet<String>>,
    /// The methods some `notWhile` names as pending, read from the contract once.
    watched: HashSet<String>,
}

/// A request to count once it is known to go on.
#[derive(Debug)]
pub(crate) struct Count(Vec<(String, String)>, String);

impl Waiting {
    /// The waits of a connection under `c`.
    pub(crate) fn new(c: &Contract) -> Waiting {
        let named = c.methods.values().filter_map(|m| m.not_while.as_ref());
        Waiting {
            watched: named.flat_map(|w| w.pending.iter().cloned()).collect(),
            ..Waiting::default()
        }
    }

    /// A request `msg` from `from`: the ruling of the first cap it is over, or what to count.
    pub(crate) fn request(
        &self,
        c: &Contract,
        limits: &Limits,
        from: &str,
        msg: &Message,
    ) -> Result<Option<Count>, Box<Ruling>> {
        let Some(id) = msg.id.as_ref().map(|v| v.to_string()) else {
            return Ok(None);
        };
        let mut keys = Vec::new();
        for (name, l) in &c.limits {
            let counted = l.counts == Some(LimitCounts::PendingRequests)
                && l.applies_to(c, from, msg.method.as_deref());
            let Some(max) = counted.then(|| limits.count(name).ok()).flatten() else {
                continue;
            };
            let key = (name.clone(), from.to_string());
            let n = self.ids.get(&key).map_or(0, HashSet::len);
            if n as u64 >= max {
                let method = msg.method.as_deref().unwrap_or("a request");
                let reason =
                    format!("{method} from {from}: {n} requests already pending (cap {max})");
                let entry = limit_entry(name);
                let r = broken(c, "limit.pending", &entry, l.action.as_ref(), msg, reason);
                return Err(Box::new(r));
            }
            keys.push(key);
        }
        Ok((!keys.is_empty()).then_some(Count(keys, id)))
    }

    /// Count a request that went on.
    pub(crate) fn count(&mut self, count: Count) {
        let Count(keys, id) = count;
        for key in keys {
            self.ids.entry(key).or_default().insert(id.clone());
        }
    }

    /// A request `msg` from `from` that went on: remembered while unanswered when some
    /// method may not be sent meanwhile.
    pub(crate) fn call(&mut self, from: &str, msg: &Message) {
        let (Some(m), Some(id)) = (msg.method.as_deref(), msg.id.as_ref()) else {
            return;
        };
        if self.watched.contains(m) {
            let key = (m.to_string(), from.to_string());
            self.calls.entry(key).or_default().insert(id.to_string());
        }
    }

    /// The ruling for `msg` from `from` when its method's `notWhile` forbids it now.
    pub(crate) fn not_while(&self, c: &Contract, from: &str, msg: &Message) -> Option<Ruling> {
        let m = msg.method.as_deref()?;
        let w = c.methods.get(m)?.not_while.as_ref()?;
        if w.lifted(&msg.value) {
            return None;
        }
        let (p, ids) = w.pending.iter().find_map(|p| {
            let ids = self.calls.get(&(p.clone(), from.to_string()))?;
            (!ids.is_empty()).then_some((p, ids))
        })?;
        let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        ids.sort_unstable();
        let reason = format!(
            "{m} from {from} while its {p} {} awaits an answer",
            ids.join(", ")
        );
        let entry = format!("/methods/{}/notWhile", contract::escape_pointer(m));
        Some(ruling(
            "method.not-while",
            &entry,
            &w.seed,
            None,
            reason,
            Act::Flag,
        ))
    }

    /// An answer to `msg.correlation` sent to `to` (the requester): its wait ended.
    pub(crate) fn answered(&mut self, to: &str, msg: &Message) {
        let Some(id) = msg.correlation.as_ref().map(|v| v.to_string()) else {
            return;
        };
        for ((_, sender), ids) in self.ids.iter_mut().chain(self.calls.iter_mut()) {
            if sender == to {
                ids.remove(&id);
            }
        }
    }
}
