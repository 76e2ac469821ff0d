//! Pending caps as data: a `count` limit with `counts: pending-requests` caps the requests
//! it `applies` to that one sender has awaiting an answer on a connection (rukh's
//! pendingRequestsMax: operation and UI requests, per direction). A request beyond the cap
//! gets the limit's action (rukh: answered -32006, not run) and is not counted; an answer
//! ends its request's wait. Kept per connection: it is about one peer's backlog.

use std::collections::{HashMap, HashSet};

use contract::model::LimitCounts;
use contract::wire::Message;
use contract::{Contract, Limits};

use super::{Ruling, broken, limit_entry};

/// Requests awaiting an answer, by (limit, sender): their ids.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    ids: HashMap<(String, String), HashSet<String>>,
}

/// A request to count once it is known to go on.
#[derive(Debug)]
pub(crate) struct Count(Vec<(String, String)>, String);

impl Waiting {
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

    /// An answer to `msg.correlation` sent to `to` (the requester): its wait ended.
    pub(crate) fn answered(&mut self, to: &str, msg: &Message) {
        let Some(id) = msg.correlation.as_ref().map(|v| v.to_string()) else {
            return;
        };
        for ((_, sender), ids) in &mut self.ids {
            if sender == to {
                ids.remove(&id);
            }
        }
    }
}
