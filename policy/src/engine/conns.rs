//! Connection caps as data: a `count` limit with `counts: open-connections` caps the
//! connections one route has open at once. A connection beyond it gets the limit's action
//! when it opens (xsession's `maxConnections`: dropped unread); a refused connection is
//! not counted, and a counted one stops counting when it closes.

use std::collections::HashMap;

use contract::model::LimitCounts;
use contract::{Contract, Limits};

use super::{Ruling, limit_entry, on_connection, ruling};

/// Open connections by route.
#[derive(Default)]
pub struct Open {
    by_route: HashMap<String, usize>,
}

impl Open {
    /// How many connections `route` has open (counted by a cap).
    pub fn on(&self, route: &str) -> usize {
        self.by_route.get(route).copied().unwrap_or(0)
    }

    /// A connection opens on `route`: counted, or the ruling of the first cap it breaks.
    pub(crate) fn open(
        &mut self,
        c: &Contract,
        limits: &Limits,
        route: &str,
    ) -> Result<bool, Box<Ruling>> {
        let caps: Vec<_> = (c.limits.iter())
            .filter(|(_, l)| l.counts == Some(LimitCounts::OpenConnections))
            .collect();
        if caps.is_empty() {
            return Ok(false);
        }
        let n = self.on(route);
        for (name, l) in caps {
            let Ok(max) = limits.count(name) else {
                continue;
            };
            if (n as u64) < max {
                continue;
            }
            let reason = format!("{n} connections already open on the route (cap {max})");
            let entry = limit_entry(name);
            let a = l.action.as_ref();
            let act = on_connection(a, &reason);
            let seed = a.map(|a| a.seed.as_str()).unwrap_or(&l.seed);
            let code = a.and_then(|a| a.code.as_ref());
            return Err(Box::new(ruling(
                "limit.connections",
                &entry,
                seed,
                code,
                reason,
                act,
            )));
        }
        *self.by_route.entry(route.to_string()).or_insert(0) += 1;
        Ok(true)
    }

    /// A counted connection on `route` closed.
    pub(crate) fn close(&mut self, route: &str) {
        if let Some(n) = self.by_route.get_mut(route) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_route.remove(route);
            }
        }
    }
}
