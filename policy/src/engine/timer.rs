//! Deadlines as data: a `deadline` limit with a `start` trigger is armed on this
//! connection when the trigger fires (a connection opening on a channel, or a message),
//! disarmed when any of its `stop` triggers fires, and re-armed when any of its `restart`
//! triggers fires (a heartbeat, xsession's every parseable line); its start arms only a
//! clock not running (toolchannel's heartbeat grace runs from the first unanswered
//! heartbeat, not the last). A value the wire carries for a limit (its `carried`, the
//! budgets of toolchannel's `initialize`) holds for this connection's clocks. A limit a
//! party runs is one clock of that party's (a `both` timer: one per party), on which a
//! trigger's `from` may be `self` or `peer` (the kernel's silence: messages from the peer
//! restart it). At expiry it gets the limit's `action` (`close`, `drop-connection` and
//! `fail` end the connection, others are flagged; a limit without one rules nothing), and
//! every machine instance of the connection with a `timer` transition on it moves.

use std::collections::HashMap;
use std::time::Instant;

use contract::model::{Limit, LimitKind, Trigger};
use contract::wire::Message;
use contract::{Contract, Limits};

use contract::machine::{ClockMove, Seen};

use super::{Ruling, ruling};

/// Whether the contract has a deadline this engine runs.
pub(crate) fn any(c: &Contract) -> bool {
    c.limits.values().any(typed)
}

fn typed(l: &Limit) -> bool {
    matches!(l.kind, LimitKind::Deadline | LimitKind::Interval) && l.start.is_some()
}

/// A clock: the limit's name and the party whose clock it is.
type Key = (String, Option<String>);

/// One connection's armed deadlines, by limit name and the party whose clock it is.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// Each armed clock: when it was (re)started, and when it runs out.
    due: HashMap<Key, (Instant, Instant)>,
    /// The contract's limits with the values this connection's wire carried, once it
    /// carried any.
    carried: Option<Limits>,
}

impl Timers {
    /// The connection opened on `channel`.
    pub(crate) fn open(&mut self, c: &Contract, limits: &Limits, channel: &str, now: Instant) {
        for (name, l) in c.limits.iter().filter(|(_, l)| typed(l)) {
            if matches!(&l.start, Some(Trigger::Open { channel: ch }) if ch == channel) {
                for r in l.runners(c) {
                    arm(&mut self.due, limits, name, r, now);
                }
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
        let carries = c.limits.values().flat_map(|l| &l.carried);
        if carries.into_iter().any(|k| k.value_in(c, msg).is_some()) {
            let mine = self.carried.get_or_insert_with(|| limits.clone());
            if !mine.carry(c, msg).is_empty() {
                // A running clock runs out by the value now in force, from its own start.
                for ((name, _), (base, at)) in self.due.iter_mut() {
                    if let Some(t) = mine.duration(name).ok().and_then(|d| base.checked_add(d)) {
                        *at = t;
                    }
                }
            }
        }
        let limits = self.carried.as_ref().unwrap_or(limits);
        let seen = Seen::of(from, msg);
        let heeded = c.limits.iter().filter(|(_, l)| typed(l) && l.heeds(&seen));
        for (name, l) in heeded {
            for r in l.runners(c) {
                // A scan of the few armed clocks: an owned key per limit and runner, built
                // and hashed for every message, was a tenth of the proxy's CPU at 1,000
                // toolchannel sessions (docs/benchmarks.md, Scale).
                let armed = self
                    .due
                    .keys()
                    .any(|(n, rr)| n == name && rr.as_deref() == r);
                match l.clock_move(c, &seen, r, armed) {
                    ClockMove::Armed => arm(&mut self.due, limits, name, r, now),
                    ClockMove::Stopped if armed => {
                        self.due.remove(&(name.clone(), r.map(str::to_string)));
                    }
                    ClockMove::Stopped | ClockMove::Unchanged => {}
                }
            }
        }
    }

    /// Flags for the `lowerOnly` values `msg` from `from` carries above the ones in force
    /// on this connection (the receiver ignores them, the sender broke the rule), and for
    /// the values it only repeats but states otherwise.
    pub(crate) fn raised(
        &self,
        c: &Contract,
        limits: &Limits,
        from: &str,
        msg: &Message,
    ) -> Vec<Ruling> {
        let in_force = self.carried.as_ref().unwrap_or(limits);
        let raised = in_force.raised(c, msg).into_iter().map(|(name, v, now)| {
            let why = format!("{from} raises {name} to {v} over the wire, above {now} in force; it may only lower it");
            ("limit.raised", name, why)
        });
        let repeated = in_force
            .misrepeated(c, msg)
            .into_iter()
            .map(|(name, v, now)| {
                let why = format!("{from} states {name} {v} where it repeats the {now} in force");
                ("limit.repeated", name, why)
            });
        (raised.chain(repeated))
            .map(|(rule, name, reason)| {
                let entry = format!("{}/carried", super::limit_entry(&name));
                ruling(
                    rule,
                    &entry,
                    &c.limits[&name].seed,
                    None,
                    reason,
                    crate::Act::Flag,
                )
            })
            .collect()
    }

    /// The earliest armed deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.due.values().map(|(_, at)| *at).min()
    }

    /// The deadlines run out by `now`, disarmed, in name order (a limit once, however
    /// many parties' clocks of it ran out).
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<String> {
        let gone: Vec<_> = self
            .due
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.due.remove(k);
        }
        let mut out: Vec<String> = gone.into_iter().map(|(n, _)| n).collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Arm `name`'s clock of `runner` to run out `limits`' duration after `now`.
fn arm(
    due: &mut HashMap<Key, (Instant, Instant)>,
    limits: &Limits,
    name: &str,
    runner: Option<&str>,
    now: Instant,
) {
    if let Some(at) = limits.duration(name).ok().and_then(|d| now.checked_add(d)) {
        due.insert((name.to_string(), runner.map(str::to_string)), (now, at));
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
