//! Deadlines as data: a `deadline` limit with a `start` trigger is armed on this
//! connection when the trigger fires (a connection opening on a channel, or a message),
//! disarmed when any of its `stop` triggers fires, and re-armed when its start or any of
//! its `restart` triggers fires (a heartbeat, xsession's every parseable line). At expiry it gets the limit's `action` (`close`, `drop-connection` and
//! `fail` end the connection, others are flagged; a limit without one rules nothing), and
//! every machine instance of the connection with a `timer` transition on it moves.

use std::collections::HashMap;
use std::time::Instant;

use contract::model::{Limit, LimitKind, Trigger};
use contract::wire::Message;
use contract::{Contract, Limits};

use super::{Ruling, fires, ruling};

/// Whether the contract has a deadline this engine runs.
pub(crate) fn any(c: &Contract) -> bool {
    c.limits.values().any(typed)
}

fn typed(l: &Limit) -> bool {
    matches!(l.kind, LimitKind::Deadline | LimitKind::Interval) && l.start.is_some()
}

/// One connection's armed deadlines, by limit name.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    due: HashMap<String, Instant>,
}

impl Timers {
    /// The connection opened on `channel`.
    pub(crate) fn open(&mut self, c: &Contract, limits: &Limits, channel: &str, now: Instant) {
        for (name, l) in c.limits.iter().filter(|(_, l)| typed(l)) {
            if matches!(&l.start, Some(Trigger::Open { channel: ch }) if ch == channel) {
                self.arm(limits, name, now);
            }
        }
    }

    /// `msg` from `from` went on: stop what it stops, (re)start what it starts.
    pub(crate) fn message(
        &mut self,
        c: &Contract,
        limits: &Limits,
        from: &str,
        msg: &Message,
        now: Instant,
    ) {
        for (name, l) in c.limits.iter().filter(|(_, l)| typed(l)) {
            if l.stop.iter().any(|t| fires(c, t, from, msg)) {
                self.due.remove(name);
            }
            let restarts = l.restart.iter().any(|t| fires(c, t, from, msg));
            if restarts || l.start.as_ref().is_some_and(|t| fires(c, t, from, msg)) {
                self.arm(limits, name, now);
            }
        }
    }

    fn arm(&mut self, limits: &Limits, name: &str, now: Instant) {
        if let Some(at) = limits.duration(name).ok().and_then(|d| now.checked_add(d)) {
            self.due.insert(name.to_string(), at);
        }
    }

    /// The earliest armed deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// The deadlines run out by `now`, disarmed, in name order.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<String> {
        let mut out: Vec<String> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(n, _)| n.clone())
            .collect();
        out.sort();
        for n in &out {
            self.due.remove(n);
        }
        out
    }
}

/// The ruling for deadline `name` running out: its action's close, else a flag.
pub(crate) fn expired(c: &Contract, name: &str) -> Ruling {
    let l = &c.limits[name];
    let entry = super::limit_entry(name);
    let reason = format!("{name} ran out: {}", l.on_expiry);
    let a = l.action.as_ref();
    let act = super::on_connection(a, &reason);
    ruling(
        "limit.deadline",
        &entry,
        &l.seed,
        a.and_then(|a| a.code.as_ref()),
        reason,
        act,
    )
}
