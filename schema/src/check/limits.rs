//! Lints of the limits' typed behaviour: what a limit applies to exists, a rate's key
//! and a duplicate window's pointers are carried by the messages it keys, what a count counts fits it, a deadline's start and stop triggers are valid,
//! and a timer some machine waits on is started somewhere; a limit's value carried on the
//! wire is a number some example of its message holds.

use super::{CodeIndex, Cx, Lint, carried};
use crate::machine::{PEER, RUNNER};
use serde_json::Value;

use crate::model::{
    Applies, Contract, Duplicates, Kind, Limit, LimitCarrier, LimitCounts, LimitKey, LimitKind,
    Part, Trigger,
};
use crate::pointer::join;

impl Cx<'_> {
    /// `applies`, `key`, `start` and `stop` of every limit, and timers never started.
    pub(super) fn limit_behaviour(&mut self, c: &Contract, idx: &CodeIndex) {
        for (name, l) in &c.limits {
            let base = join("/limits", [name]);
            if let Some(a) = &l.applies {
                for (i, m) in a.methods.iter().enumerate() {
                    if !c.methods.contains_key(m) {
                        let at = join(&base, ["applies", "methods", &i.to_string()]);
                        self.push(Lint::NameRef, at, format!("unknown method {m:?}"));
                    }
                }
                if let Some(ch) = a
                    .channel
                    .as_ref()
                    .filter(|ch| !c.channels.contains_key(*ch))
                {
                    let at = join(&base, ["applies", "channel"]);
                    self.push(Lint::NameRef, at, format!("unknown channel {ch:?}"));
                }
                if let Some(p) = &a.from {
                    self.party_known(c, join(&base, ["applies", "from"]), p);
                }
            }
            if l.counts.is_some() && l.kind != LimitKind::Count {
                let why = "`counts` is for a count limit".to_string();
                self.push(Lint::NameRef, join(&base, ["counts"]), why);
            }
            if l.counts == Some(LimitCounts::PendingRequests) {
                self.pending_methods(c, &base, l.applies.as_ref());
            }
            if let Some(LimitKey::Pointer { pointer }) = &l.key {
                self.key_carried(c, &join(&base, ["key", "pointer"]), name, pointer);
            }
            if let Some(d) = &l.duplicates {
                self.duplicates(c, &base, name, d);
            }
            if let Some(t) = &l.start {
                self.limit_trigger(c, idx, l, &join(&base, ["start"]), t);
            }
            for (i, t) in l.stop.iter().enumerate() {
                let at = join(&base, ["stop", &i.to_string()]);
                self.limit_trigger(c, idx, l, &at, t);
            }
            for (i, t) in l.restart.iter().enumerate() {
                let at = join(&base, ["restart", &i.to_string()]);
                self.limit_trigger(c, idx, l, &at, t);
            }
            if let Some(m) = &l.sends {
                self.sends(c, l, &join(&base, ["sends"]), m);
            }
            for (i, carrier) in l.carried.iter().enumerate() {
                self.carrier(c, &join(&base, ["carried", &i.to_string()]), carrier);
            }
        }
        self.timers_started(c);
    }

    /// A message that carries a limit's value: a known method, and an example of that
    /// message holding a number at the pointer.
    fn carrier(&mut self, c: &Contract, at: &str, carrier: &LimitCarrier) {
        let Some(m) = c.methods.get(&carrier.method) else {
            let why = format!("unknown method {:?}", carrier.method);
            return self.push(Lint::NameRef, join(at, ["method"]), why);
        };
        if carrier.repeats && carrier.lower_only {
            let why = "a value that only repeats the one in force lowers nothing";
            self.push(Lint::NameRef, join(at, ["lowerOnly"]), why);
        }
        let part = carrier.part();
        let answer = part.is_some_and(|p| p != Part::Call);
        if part.is_none() || (answer && m.kind != Kind::Request) {
            let why = format!("{} has no such message", carrier.method);
            return self.push(Lint::NameRef, join(at, ["kind"]), why);
        }
        let numeric = m.examples.iter().any(|e| {
            Some(e.part) == part
                && e.message
                    .pointer(&carrier.pointer)
                    .is_some_and(Value::is_number)
        });
        if !numeric {
            let why = format!(
                "no example of {}'s {} carries a number at {}",
                carrier.method,
                part.map(|p| format!("{p:?}").to_lowercase())
                    .unwrap_or_default(),
                carrier.pointer
            );
            self.push(Lint::NameRef, join(at, ["pointer"]), why);
        }
    }

    /// A limit's trigger, where `from` may also be `self` or `peer` when the limit names
    /// the party (or `both`) whose timer it is.
    fn limit_trigger(&mut self, c: &Contract, idx: &CodeIndex, l: &Limit, at: &str, t: &Trigger) {
        let Trigger::Message { from: Some(f), .. } = t else {
            return self.trigger(c, idx, at, t);
        };
        if f != RUNNER && f != PEER {
            return self.trigger(c, idx, at, t);
        }
        if l.runners(c).contains(&None) {
            let why = format!("`from: {f}` needs the limit's `timer`: a party, or `both`");
            self.push(Lint::NameRef, join(at, ["from"]), why);
        }
        let mut plain = t.clone();
        if let Trigger::Message { from, .. } = &mut plain {
            *from = None;
        }
        self.trigger(c, idx, at, &plain);
    }

    /// What a timer `sends` when it runs out: a method every party running it may send.
    fn sends(&mut self, c: &Contract, l: &Limit, at: &str, method: &str) {
        let Some(m) = c.methods.get(method) else {
            return self.push(
                Lint::NameRef,
                at.into(),
                format!("unknown method {method:?}"),
            );
        };
        if !matches!(l.kind, LimitKind::Deadline | LimitKind::Interval) {
            let why = "`sends` is for a deadline or an interval".to_string();
            return self.push(Lint::NameRef, at.into(), why);
        }
        for r in l.runners(c) {
            let Some(r) = r else {
                let why = "`sends` needs the limit's `timer`: a party, or `both`";
                return self.push(Lint::NameRef, at.into(), why);
            };
            if !m.from.iter().any(|f| f == r) {
                self.push(
                    Lint::NameRef,
                    at.into(),
                    format!("{r} does not send {method}"),
                );
            }
        }
    }

    /// A pending-requests count applies to requests only: answers are what end a wait.
    fn pending_methods(&mut self, c: &Contract, base: &str, applies: Option<&Applies>) {
        let methods = applies.map(|a| a.methods.as_slice()).unwrap_or_default();
        for (i, m) in methods.iter().enumerate() {
            if c.methods.get(m).is_some_and(|m| m.kind != Kind::Request) {
                let at = join(base, ["applies", "methods", &i.to_string()]);
                let why = format!("{m} is not a request: nothing of it is pending");
                self.push(Lint::NameRef, at, why);
            }
        }
    }

    /// Some example of a method the limit applies to carries the key.
    fn key_carried(&mut self, c: &Contract, at: &str, name: &str, pointer: &str) {
        let methods = c.limits[name]
            .applies
            .as_ref()
            .map(|a| a.methods.clone())
            .unwrap_or_default();
        let applies = c
            .methods
            .iter()
            .filter(|(m, _)| methods.is_empty() || methods.contains(m))
            .map(|(_, m)| m);
        if !carried(applies, None, pointer) {
            self.push(
                Lint::NameRef,
                at.to_string(),
                format!("no example of a message {name} applies to carries {pointer}"),
            );
        }
    }

    /// A duplicate window: an interval, whose pointers the messages it applies to carry.
    fn duplicates(&mut self, c: &Contract, base: &str, name: &str, d: &Duplicates) {
        let l = &c.limits[name];
        if l.kind != LimitKind::Interval || l.action.is_none() {
            let why = "`duplicates` is for an interval limit with an `action`".to_string();
            self.push(Lint::NameRef, join(base, ["duplicates"]), why);
        }
        for (i, p) in d.same.iter().enumerate() {
            let at = join(base, ["duplicates", "same", &i.to_string()]);
            self.key_carried(c, &at, name, p);
        }
        if let Some(p) = &d.distinct {
            self.key_carried(c, &join(base, ["duplicates", "distinct"]), name, p);
        }
    }

    /// A deadline a transition waits on (`timer` trigger) needs a `start`: otherwise no
    /// engine can tell when its clock runs. Intervals run from the machine's state.
    fn timers_started(&mut self, c: &Contract) {
        for (sname, sm) in &c.state_machines {
            for (i, t) in sm.transitions.iter().enumerate() {
                let Some(Trigger::Timer { limit }) = &t.trigger else {
                    continue;
                };
                let Some(l) = c.limits.get(limit) else {
                    continue;
                };
                if l.kind == LimitKind::Deadline && l.start.is_none() {
                    let at = join(
                        "/stateMachines",
                        [sname, "transitions", &i.to_string(), "trigger", "limit"],
                    );
                    self.push(
                        Lint::NameRef,
                        at,
                        format!("deadline {limit:?} is never started: give it a `start` trigger"),
                    );
                }
            }
        }
    }
}
