//! State machines as data: each machine's instances, keyed by its scope, moved by the
//! typed triggers of its transitions; a governed message that neither moves the machine
//! nor is allowed in its state gets the machine's `outOfPlace` reaction.
//!
//! A machine is run only when at least one transition has a typed trigger: one written
//! in prose alone is documentation. A method is governed by a machine when a message
//! trigger or `allows` names it; answers (responses, errors) only when a trigger names
//! them by kind.
//!
//! An instance exists from its first transition (until then it is in `initial`), so a
//! message that moves nothing stores nothing. An instance in a terminal state stays, so a
//! message for a key that ended (a chunk after its stream's end) is out of place there.
//! Instances of a connection, and per-key instances a connection created, are forgotten
//! when it closes. With `onInvalid: ignore` the receiver ignores such a message: the engine
//! only flags it.

use std::collections::HashMap;

use contract::Contract;
use contract::machine::{Seen, Step};
use contract::model::{Scope, StateMachine, Trigger};
use contract::wire::Message;

use super::{Ruling, broken};

/// At most this many machine instances are tracked per run; past it new instances are
/// not started, and the message that would have started one is flagged. A guard against
/// a peer opening keys without end, not a protocol number.
const MAX_INSTANCES: usize = 100_000;

/// Where a message was seen: what a scope keys on.
pub(crate) struct Where<'a> {
    pub route: &'a str,
    pub conn: u64,
    pub session: u64,
}

#[derive(Debug)]
struct Instance {
    state: String,
    /// The connection that started it (forgotten with it, for connection and key scopes).
    conn: u64,
    per_connection: bool,
}

/// Every live machine instance of a run, by (route, machine, scope key).
#[derive(Debug, Default)]
pub struct Instances {
    map: HashMap<(String, String, String), Instance>,
}

impl Instances {
    /// Forget the instances connection `conn` of `route` owned.
    pub(crate) fn forget_connection(&mut self, route: &str, conn: u64) {
        self.map
            .retain(|(r, _, _), i| !(r == route && i.per_connection && i.conn == conn));
    }

    /// The states of `machine`'s live instances on `route` (those that left `initial`).
    pub fn states(&self, route: &str, machine: &str) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .map
            .iter()
            .filter(|((r, m, _), _)| r == route && m == machine)
            .map(|(_, i)| i.state.as_str())
            .collect();
        out.sort_unstable();
        out
    }
}

/// Whether the contract has a machine with typed triggers.
pub(crate) fn any(c: &Contract) -> bool {
    c.state_machines.values().any(StateMachine::is_typed)
}

/// A transition a message makes, applied once the message is known to go on.
#[derive(Debug)]
pub(crate) struct Move {
    id: (String, String, String),
    to: String,
    conn: u64,
    per_connection: bool,
}

impl Instances {
    /// `event` (a deadline of connection `conn` running out, the connection opening)
    /// happened: move the connection's instances (including those still in `initial`)
    /// whose machine leaves their state on it.
    pub(crate) fn on_event(&mut self, c: &Contract, conn: u64, route: &str, event: &Trigger) {
        let key = format!("conn:{conn}");
        // Only a connection's own instances: a session's, a key's or a party's outlive it.
        let own = |sm: &StateMachine| {
            sm.is_typed() && matches!(sm.scope, None | Some(Scope::Connection { .. }))
        };
        for (name, sm) in c.state_machines.iter().filter(|(_, sm)| own(sm)) {
            let id = (route.to_string(), name.clone(), key.clone());
            let state = self
                .map
                .get(&id)
                .map_or(sm.initial.clone(), |i| i.state.clone());
            if let Some((_, t)) = sm.on_event(&state, event) {
                self.map.insert(
                    id,
                    Instance {
                        state: t.to.clone(),
                        conn,
                        per_connection: true,
                    },
                );
            }
        }
    }

    /// Apply the transitions of a message that went on.
    pub(crate) fn apply(&mut self, moves: Vec<Move>) {
        for m in moves {
            self.map.insert(
                m.id,
                Instance {
                    state: m.to,
                    conn: m.conn,
                    per_connection: m.per_connection,
                },
            );
        }
    }
}

/// Judge `msg` (sent by `from`) under every typed machine of `c`: the rulings, and the
/// transitions it makes.
pub(crate) fn judge(
    c: &Contract,
    inst: &Instances,
    at: &Where,
    from: &str,
    msg: &Message,
) -> (Vec<Ruling>, Vec<Move>) {
    let mut rulings = Vec::new();
    let mut moves = Vec::new();
    for (name, sm) in c.state_machines.iter() {
        let governs = sm.governs(c, &Seen::of(from, msg));
        if !(sm.is_typed() && (sm.on_any_message() || governs)) {
            continue;
        }
        match judge_one(c, inst, at, name, sm, from, msg) {
            Some(Ok(m)) => moves.push(m),
            Some(Err(r)) => rulings.push(r),
            None => {}
        }
    }
    (rulings, moves)
}

fn judge_one(
    c: &Contract,
    inst: &Instances,
    at: &Where,
    name: &str,
    sm: &StateMachine,
    from: &str,
    msg: &Message,
) -> Option<Result<Move, Ruling>> {
    // The machine's pointer only for a ruling: built for every message, it was most of
    // what judging one that moves nothing cost.
    let entry = || format!("/stateMachines/{}", contract::escape_pointer(name));
    let (key, per_connection) = scope_key(c, sm, at, msg)?;
    let id = (at.route.to_string(), name.to_string(), key);
    let here = inst.map.get(&id);
    let state = here.map_or(sm.initial.as_str(), |i| i.state.as_str());
    let ignorable = match sm.on_message(c, state, &Seen::of(from, msg)) {
        Step::Stayed => return None,
        Step::OutOfPlace { ignorable } => ignorable,
        Step::Moved { transition: t, .. } => {
            if here.is_none() && inst.map.len() >= MAX_INSTANCES {
                let reason =
                    format!("{name}: over {MAX_INSTANCES} live machine instances; not tracked");
                let rule = "machine.untracked";
                return Some(Err(broken(c, rule, &entry(), None, msg, reason)));
            }
            return Some(Ok(Move {
                id,
                to: t.to.clone(),
                conn: here.map_or(at.conn, |i| i.conn),
                per_connection,
            }));
        }
    };
    let method = msg.method.as_deref().unwrap_or("message");
    let reason = format!("{method} from {from} in state `{state}` of {name}");
    // `ignore`: the receiver drops it and goes on; the engine reports it and does not act.
    let action = if ignorable {
        None
    } else {
        sm.reaction(c, state, &Seen::of(from, msg))
    };
    let rule = "machine.out-of-place";
    Some(Err(broken(c, rule, &entry(), action, msg, reason)))
}

/// The instance key of `msg` under `sm`'s scope, and whether the instance belongs to the
/// connection; `None` when the message is outside the scope (another channel, no key).
fn scope_key(c: &Contract, sm: &StateMachine, at: &Where, msg: &Message) -> Option<(String, bool)> {
    match &sm.scope {
        None => Some((format!("conn:{}", at.conn), true)),
        Some(Scope::Connection { channel }) => {
            let on = msg
                .method
                .as_deref()
                .and_then(|m| c.methods.get(m))
                .map(|m| m.channel.as_str());
            (channel.is_none() || channel.as_deref() == on)
                .then(|| (format!("conn:{}", at.conn), true))
        }
        Some(Scope::Session) => Some((format!("session:{}", at.session), false)),
        Some(Scope::Key { pointer }) => {
            let v = contract::get_pointer(&msg.value, pointer)?;
            Some((format!("key:{}:{v}", at.session), true))
        }
        Some(Scope::Party { party }) => Some((format!("party:{party}"), false)),
    }
}
