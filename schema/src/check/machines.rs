//! Lints of the state machines' typed behaviour: every trigger names a method, party,
//! channel, timer or code the contract declares; a machine's scope, allowed methods and
//! out-of-place reaction refer to what exists; no state is unreachable or a dead end.

use std::collections::HashSet;

use super::{CodeIndex, Cx, Lint, carried, code_key};
use crate::machine::Seen;
use crate::model::{Contract, Kind, LimitKind, Refusal, Scope, StateMachine, Trigger};
use crate::pointer::join;

impl Cx<'_> {
    /// The typed parts of every machine: scope, `allows`, `outOfPlace`, triggers.
    pub(super) fn machine_triggers(&mut self, c: &Contract, idx: &CodeIndex) {
        for (sname, sm) in &c.state_machines {
            let base = join("/stateMachines", [sname]);
            self.scope(c, &join(&base, ["scope"]), sm);
            for (method, states) in &sm.allows {
                let at = join(&base, ["allows", method]);
                if !c.methods.contains_key(method) {
                    self.push(
                        Lint::NameRef,
                        at.clone(),
                        format!("unknown method {method:?}"),
                    );
                }
                self.declared(sm, &at, states);
            }
            if let Some(a) = &sm.out_of_place {
                self.action_names(c, idx, &join(&base, ["outOfPlace"]), a);
            }
            for (i, r) in sm.refusals.iter().enumerate() {
                self.refusal(c, idx, &join(&base, ["refusals", &i.to_string()]), sm, r);
            }
            if sm.untyped.is_some() && sm.is_typed() {
                self.push(
                    Lint::StateMachine,
                    join(&base, ["untyped"]),
                    "the machine says why it is untyped, yet a transition has a trigger"
                        .to_string(),
                );
            }
            for (i, t) in sm.transitions.iter().enumerate() {
                if let Some(trigger) = &t.trigger {
                    let at = join(&base, ["transitions", &i.to_string(), "trigger"]);
                    self.trigger(c, idx, &at, trigger);
                }
            }
        }
    }

    /// Each of `states` (listed at `at`) is one of the machine's.
    fn declared(&mut self, sm: &StateMachine, at: &str, states: &[String]) {
        for (i, s) in states.iter().enumerate() {
            if !sm.states.contains_key(s) {
                self.push(
                    Lint::StateMachine,
                    join(at, [&i.to_string()]),
                    format!("state {s:?} is not declared"),
                );
            }
        }
    }

    /// A refusal names a governed message, declared states and a known action.
    fn refusal(&mut self, c: &Contract, idx: &CodeIndex, at: &str, sm: &StateMachine, r: &Refusal) {
        let message = join(at, ["message"]);
        self.trigger(c, idx, &message, &r.message);
        self.declared(sm, &join(at, ["states"]), &r.states);
        if let Some(a) = &r.action {
            self.action_names(c, idx, &join(at, ["action"]), a);
        }
        let Trigger::Message {
            method: Some(method),
            kind,
            ..
        } = &r.message
        else {
            let why = "a refusal names one method's message".to_string();
            return self.push(Lint::StateMachine, message, why);
        };
        let Some(m) = c.methods.get(method) else {
            return; // the trigger lint said so
        };
        let seen = Seen {
            from: "",
            kind: kind.unwrap_or(m.kind),
            method: Some(method),
            value: &serde_json::Value::Null,
        };
        if !sm.governs(c, &seen) {
            let why = format!(
                "{method} is not governed by the machine (no trigger or `allows` names it), so this refusal never applies"
            );
            self.push(Lint::StateMachine, message, why);
        }
    }

    fn scope(&mut self, c: &Contract, at: &str, sm: &StateMachine) {
        match &sm.scope {
            Some(Scope::Connection { channel: Some(ch) }) if !c.channels.contains_key(ch) => {
                self.push(
                    Lint::NameRef,
                    join(at, ["channel"]),
                    format!("unknown channel {ch:?}"),
                );
            }
            Some(Scope::Party { party }) => {
                self.party_known(c, join(at, ["party"]), party);
            }
            Some(Scope::Key { pointer }) => {
                // The key must be found in some message that moves the machine.
                let moving = sm.transitions.iter().filter_map(|t| match &t.trigger {
                    Some(Trigger::Message {
                        method: Some(method),
                        ..
                    }) => c.methods.get(method),
                    _ => None,
                });
                if !carried(moving, None, pointer) {
                    self.push(
                        Lint::NameRef,
                        join(at, ["pointer"]),
                        format!("no example of a message that moves the machine carries {pointer}"),
                    );
                }
            }
            _ => {}
        }
    }

    pub(super) fn trigger(&mut self, c: &Contract, idx: &CodeIndex, at: &str, t: &Trigger) {
        match t {
            Trigger::Message {
                method, kind, from, ..
            } => self.message_trigger(c, at, method.as_deref(), *kind, from.as_deref()),
            Trigger::Timer { limit } => match c.limits.get(limit) {
                None => self.push(
                    Lint::NameRef,
                    join(at, ["limit"]),
                    format!("unknown limit {limit:?}"),
                ),
                Some(l) if !matches!(l.kind, LimitKind::Deadline | LimitKind::Interval) => self
                    .push(
                        Lint::NameRef,
                        join(at, ["limit"]),
                        format!("limit {limit:?} is not a deadline or interval"),
                    ),
                Some(_) => {}
            },
            Trigger::Open { channel } | Trigger::Close { channel } => {
                if !c.channels.contains_key(channel) {
                    self.push(
                        Lint::NameRef,
                        join(at, ["channel"]),
                        format!("unknown channel {channel:?}"),
                    );
                }
            }
            Trigger::Transport { channel, code, .. } => {
                if !c.channels.contains_key(channel) {
                    self.push(
                        Lint::NameRef,
                        join(at, ["channel"]),
                        format!("unknown channel {channel:?}"),
                    );
                }
                if let Some(code) = code
                    && !idx.in_any_table(code)
                {
                    self.push(
                        Lint::ErrorRef,
                        join(at, ["code"]),
                        format!("code {} is in no code table", code_key(code)),
                    );
                }
            }
        }
    }

    fn message_trigger(
        &mut self,
        c: &Contract,
        at: &str,
        method: Option<&str>,
        kind: Option<Kind>,
        from: Option<&str>,
    ) {
        let Some(method) = method else {
            if let Some(p) = from {
                self.party_known(c, join(at, ["from"]), p);
            }
            return;
        };
        let Some(m) = c.methods.get(method) else {
            self.push(
                Lint::NameRef,
                join(at, ["method"]),
                format!("unknown method {method:?}"),
            );
            return;
        };
        let answer = matches!(kind, Some(Kind::Response | Kind::Error));
        if answer && m.kind != Kind::Request {
            self.push(
                Lint::NameRef,
                join(at, ["kind"]),
                format!(
                    "{method} is a {}, so it has no {} to trigger on",
                    m.kind.name(),
                    kind.unwrap_or(m.kind).name()
                ),
            );
        } else if let Some(k) = kind.filter(|_| !answer)
            && k != m.kind
        {
            self.push(
                Lint::NameRef,
                join(at, ["kind"]),
                format!("{method} is a {}, not a {}", m.kind.name(), k.name()),
            );
        }
        let Some(p) = from else { return };
        if !self.party_known(c, join(at, ["from"]), p) {
            return;
        }
        if !answer && !m.from.iter().any(|f| f == p) {
            self.push(
                Lint::NameRef,
                join(at, ["from"]),
                format!("{p} does not send {method}"),
            );
        } else if answer && m.from.iter().any(|f| f == p) && c.parties.len() == 2 {
            self.push(
                Lint::NameRef,
                join(at, ["from"]),
                format!("{p} sends {method}, so it does not answer it"),
            );
        }
    }

    /// Every state reachable from the initial one, and every non-terminal state with a
    /// way out: a machine that can strand an instance describes no protocol.
    pub(super) fn machine_graph(&mut self, base: &str, sm: &StateMachine) {
        let mut reached: HashSet<&str> = HashSet::from([sm.initial.as_str()]);
        let mut todo = vec![sm.initial.as_str()];
        while let Some(s) = todo.pop() {
            for t in sm.transitions.iter().filter(|t| t.from == s) {
                if reached.insert(t.to.as_str()) {
                    todo.push(t.to.as_str());
                }
            }
        }
        for state in sm.states.keys() {
            let at = join(base, ["states", state]);
            if !reached.contains(state.as_str()) {
                self.push(
                    Lint::StateMachine,
                    at.clone(),
                    format!("state {state:?} cannot be reached from {:?}", sm.initial),
                );
            }
            if !sm.terminal.contains(state) && !sm.transitions.iter().any(|t| &t.from == state) {
                self.push(
                    Lint::StateMachine,
                    at,
                    format!("state {state:?} is not terminal and has no transition out"),
                );
            }
        }
    }
}
