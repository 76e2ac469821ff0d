//! One instance of a contract state machine, stepped by what it sees. This is the one
//! reading of `stateMachines` that the proxy's policy engine runs and that the generated
//! SDKs' machine vectors are computed from, so an SDK user drives the machine the proxy
//! enforces.
//!
//! A machine is *typed* when at least one transition has a `trigger`; one written in prose
//! alone is documentation and steps nothing. A method is *governed* by a machine when a
//! message trigger names it (with its kind), or, for the method's own message, when
//! `allows` lists it. A governed message that neither fires a transition from the current
//! state nor is allowed there is out of place.

use serde_json::Value;

use crate::Contract;
use crate::model::{Action, InvalidTransition, Kind, StateMachine, Transition, Trigger};
use crate::wire::Message;

/// A message as a machine sees it: who sent it, its kind, its method and the whole value.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The sending party.
    pub from: &'a str,
    /// The message's kind.
    pub kind: Kind,
    /// Its method (for an answer, the method of the request it answers), if known.
    pub method: Option<&'a str>,
    /// The whole decoded message.
    pub value: &'a Value,
}

impl<'a> Seen<'a> {
    /// A classified wire message sent by `from`.
    pub fn of(from: &'a str, msg: &'a Message) -> Self {
        Seen {
            from,
            kind: msg.kind,
            method: msg.method.as_deref(),
            value: &msg.value,
        }
    }

    /// Whether this is a method's own message (a request, notification or event), not an
    /// answer to one.
    pub fn is_call(&self) -> bool {
        !matches!(self.kind, Kind::Response | Kind::Error)
    }
}

/// What one message does to one machine instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step<'m> {
    /// It fires a transition (the first one from the current state whose trigger fires).
    Moved {
        /// The transition.
        transition: &'m Transition,
        /// Its index in the machine's `transitions`.
        index: usize,
    },
    /// The machine has no say about it, or it is allowed in the current state.
    Stayed,
    /// A governed message in a state that neither allows it nor leaves by it.
    OutOfPlace {
        /// `onInvalid: ignore`: the receiver drops it and goes on; otherwise it is a protocol
        /// error and the machine's `outOfPlace` action applies.
        ignorable: bool,
    },
}

/// Whether a message of kind `got` is the one a trigger on `method` with `kind` names:
/// the method's own kind when `kind` is absent.
pub fn kind_is(c: &Contract, method: &str, kind: Option<Kind>, got: Kind) -> bool {
    match kind {
        Some(k) => k == got,
        None => c.methods.get(method).is_some_and(|m| m.kind == got),
    }
}

/// Whether a message of `got` (its method, if known, and kind) is the one `method` and
/// `kind` name: that method's, of `kind`, or of the method's own kind when it is absent.
pub(crate) fn names(
    c: &Contract,
    (method, kind): (&str, Option<Kind>),
    got: (Option<&str>, Kind),
) -> bool {
    got.0 == Some(method) && kind_is(c, method, kind, got.1)
}

/// A limit's trigger `from` naming the party that runs the timer.
pub const RUNNER: &str = "self";
/// A limit's trigger `from` naming any party but the one that runs the timer.
pub const PEER: &str = "peer";

impl Trigger {
    /// Whether this trigger fires on `seen`; only message triggers fire on messages.
    pub fn fires(&self, c: &Contract, seen: &Seen) -> bool {
        self.fires_for(c, seen, None)
    }

    /// [`Trigger::fires`] for a limit's trigger on the clock `runner` keeps, where `from`
    /// may be [`RUNNER`] or [`PEER`] (neither fires without a runner).
    pub fn fires_for(&self, c: &Contract, seen: &Seen, runner: Option<&str>) -> bool {
        let Trigger::Message {
            method,
            kind,
            from,
            matches,
        } = self
        else {
            return false;
        };
        let which = match method {
            Some(m) => names(c, (m, *kind), (seen.method, seen.kind)),
            None => kind.is_none_or(|k| k == seen.kind),
        };
        which
            && from
                .as_deref()
                .is_none_or(|p| sent_by(p, seen.from, runner))
            && crate::pointer::matches_all(matches, seen.value)
    }
}

/// Whether `sender` is the party a trigger's `from` names, relative to `runner`.
fn sent_by(from: &str, sender: &str, runner: Option<&str>) -> bool {
    match (from, runner) {
        (RUNNER, Some(r)) => sender == r,
        (PEER, Some(r)) => sender != r,
        (RUNNER | PEER, None) => false,
        _ => from == sender,
    }
}

impl crate::model::Limit {
    /// The parties whose clocks this limit is: each party for a `both` timer, the one it
    /// names, or a single clock of nobody's (`None`) when `timer` names no party.
    pub fn runners<'c>(&'c self, c: &'c Contract) -> Vec<Option<&'c str>> {
        match self.timer.as_deref() {
            Some("both") => c.parties.keys().map(|p| Some(p.as_str())).collect(),
            Some(p) if c.parties.contains_key(p) => vec![Some(p)],
            _ => vec![None],
        }
    }

    /// Whether a message like `seen` may move this limit's clock: one of its message
    /// triggers names that method, or none. A filter before [`Self::clock_move`], which
    /// the relay would otherwise ask of every limit and runner for every message.
    pub fn heeds(&self, seen: &Seen) -> bool {
        let names = |t: &Trigger| match t {
            Trigger::Message { method, .. } => method.is_none() || method.as_deref() == seen.method,
            _ => false,
        };
        self.start
            .iter()
            .chain(&self.stop)
            .chain(&self.restart)
            .any(names)
    }

    /// What `seen` does to this limit's clock of `runner`, running or not: any `stop`
    /// stops it; then a `start` arms it when it is not running, and a `restart` arms it
    /// afresh either way. The one rule the proxy's engine and the derived suite keep.
    pub fn clock_move(
        &self,
        c: &Contract,
        seen: &Seen,
        runner: Option<&str>,
        running: bool,
    ) -> ClockMove {
        let fires = |t: &Trigger| t.fires_for(c, seen, runner);
        let stopped = self.stop.iter().any(fires);
        let running = running && !stopped;
        let starts = !running && self.start.as_ref().is_some_and(fires);
        match (starts || self.restart.iter().any(fires), stopped) {
            (true, _) => ClockMove::Armed,
            (false, true) => ClockMove::Stopped,
            (false, false) => ClockMove::Unchanged,
        }
    }
}

/// What a message does to a limit's clock ([`crate::model::Limit::clock_move`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockMove {
    /// Nothing: it runs on, or stays stopped.
    Unchanged,
    /// It stops.
    Stopped,
    /// It (re)starts now.
    Armed,
}

impl StateMachine {
    /// Whether any transition has a typed trigger (only such machines are run).
    pub fn is_typed(&self) -> bool {
        self.transitions.iter().any(|t| t.trigger.is_some())
    }

    /// Whether a transition fires on any message (of a kind or party): such a message may
    /// move the machine without being governed by it.
    pub fn on_any_message(&self) -> bool {
        self.transitions
            .iter()
            .any(|t| matches!(&t.trigger, Some(Trigger::Message { method: None, .. })))
    }

    /// Whether the machine has a say about `seen`.
    pub fn governs(&self, c: &Contract, seen: &Seen) -> bool {
        let Some(method) = seen.method else {
            return false;
        };
        let named = self.transitions.iter().any(|t| match &t.trigger {
            Some(Trigger::Message {
                method: Some(m),
                kind,
                ..
            }) => names(c, (m, *kind), (Some(method), seen.kind)),
            _ => false,
        });
        named || (seen.is_call() && self.allows.contains_key(method))
    }

    /// Whether `allows` lets `seen` be sent in `state` without moving the machine.
    pub fn allowed_in(&self, seen: &Seen, state: &str) -> bool {
        seen.is_call()
            && seen
                .method
                .and_then(|m| self.allows.get(m))
                .is_some_and(|states| states.iter().any(|s| s == state))
    }

    /// What `seen` does to an instance in `state`.
    pub fn on_message(&self, c: &Contract, state: &str, seen: &Seen) -> Step<'_> {
        if !self.is_typed() {
            return Step::Stayed;
        }
        let fired = self.transitions.iter().enumerate().find(|(_, t)| {
            t.from == state && t.trigger.as_ref().is_some_and(|tr| tr.fires(c, seen))
        });
        if let Some((index, transition)) = fired {
            return Step::Moved { transition, index };
        }
        if self.allowed_in(seen, state) || !self.governs(c, seen) {
            return Step::Stayed;
        }
        Step::OutOfPlace {
            ignorable: self.on_invalid == InvalidTransition::Ignore,
        }
    }

    /// What a governed message out of place in `state` gets: the first refusal naming the
    /// message and the state, else `outOfPlace` (`None`: only flagged).
    pub fn reaction(&self, c: &Contract, state: &str, seen: &Seen) -> Option<&Action> {
        let refusal = self
            .refusals
            .iter()
            .find(|r| r.states.iter().any(|s| s == state) && r.message.fires(c, seen));
        match refusal {
            Some(r) => r.action.as_ref(),
            None => self.out_of_place.as_ref(),
        }
    }

    /// The state an instance is in once a connection on `channel` opened: `initial`, or
    /// where an `open` trigger takes it from there. States before it (rukh's `Prepared`)
    /// come before the wire, and a wire observer joins here.
    pub fn opened(&self, channel: &str) -> &str {
        let opened = Trigger::Open {
            channel: channel.to_string(),
        };
        self.on_event(&self.initial, &opened)
            .map_or(self.initial.as_str(), |(_, t)| t.to.as_str())
    }

    /// The transition a non-message trigger (a timer's expiry, a connection opening or
    /// closing, a transport event) makes from `state`, if any.
    pub fn on_event(&self, state: &str, event: &Trigger) -> Option<(usize, &Transition)> {
        self.transitions
            .iter()
            .enumerate()
            .find(|(_, t)| t.from == state && t.trigger.as_ref() == Some(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mcp() -> Contract {
        crate::builtin("mcp").expect("mcp")
    }

    fn seen<'a>(from: &'a str, kind: Kind, method: &'a str, value: &'a Value) -> Seen<'a> {
        Seen {
            from,
            kind,
            method: Some(method),
            value,
        }
    }

    #[test]
    fn a_refusal_gives_its_own_action_only_in_its_states() {
        let c = crate::builtin("rukh").expect("rukh");
        let sm = &c.state_machines["session"];
        let v = json!({"jsonrpc": "2.0", "id": "c:3", "method": "rukh.invoke", "params": {}});
        let invoke = seen("core", Kind::Request, "rukh.invoke", &v);
        let code = |a: Option<&Action>| a.and_then(|a| a.code.clone());
        assert_eq!(
            code(sm.reaction(&c, "Running", &invoke)),
            c.error_code("already_invoked").ok().cloned()
        );
        // Before the handshake the same message gets outOfPlace's code.
        assert_eq!(
            code(sm.reaction(&c, "Initializing", &invoke)),
            sm.out_of_place.as_ref().and_then(|a| a.code.clone())
        );
    }

    #[test]
    fn every_builtin_machine_is_typed_or_says_why_not() {
        for name in crate::builtin_names() {
            let c = crate::builtin(name).expect("builtin");
            for (m, sm) in &c.state_machines {
                assert!(
                    sm.is_typed() != sm.untyped.is_some(),
                    "{name}: machine {m} is neither typed nor says why it is untyped"
                );
            }
        }
    }

    #[test]
    fn a_lifecycle_moves_stays_and_refuses_as_the_contract_says() {
        let c = mcp();
        let sm = &c.state_machines["lifecycle"];
        let v = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
        let init = seen("client", Kind::Request, "initialize", &v);
        let Step::Moved { transition, .. } = sm.on_message(&c, &sm.initial, &init) else {
            panic!("initialize does not move the lifecycle");
        };
        assert_ne!(transition.to, sm.initial);
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}});
        let early = seen("client", Kind::Request, "tools/call", &call);
        assert_eq!(
            sm.on_message(&c, &sm.initial, &early),
            Step::OutOfPlace { ignorable: false }
        );
        let other = json!({"x": 1});
        let ungoverned = Seen {
            from: "client",
            kind: Kind::Notification,
            method: Some("no/such"),
            value: &other,
        };
        assert_eq!(sm.on_message(&c, &sm.initial, &ungoverned), Step::Stayed);
    }
}
