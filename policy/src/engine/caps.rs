//! Capability gating as data: a party's `declares` says where in the handshake it lists
//! its capabilities; a method's `capability` (and its `needs`, by its members' values)
//! names what it needs and the capability's `declaredBy` who must have declared it. Once
//! that party's declaration has been seen on the connection, a message needing a
//! capability it did not declare gets the declaration's `undeclared` reaction (rukh's
//! core ending an invocation whose completion carries a commandResult it never offered);
//! without one it is flagged: the receiver decides what to do about it, the proxy only
//! reports. Where the contract has decided for it (a method never served, whose one error
//! is its only answer: toolchannel's sampling/createMessage), the request is refused with
//! that error. A declaration naming a capability the contract does not list gets the
//! declaration's `unknown` reaction (rukh's -32003 to an unsupported mandatory capability).

use contract::Contract;
use contract::model::{Action, ActionKind};
use contract::wire::Message;

use super::{Act, Ruling, broken, ruling};

/// The capabilities each party declared on one connection: a few names of one or two
/// parties, held by every connection for its life, so lists rather than hash tables.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    by: Vec<(String, Vec<String>)>,
}

/// Whether any party of the contract declares capabilities.
pub(crate) fn any(c: &Contract) -> bool {
    c.parties.values().any(|p| p.declares.is_some())
}

impl Declared {
    /// Record the declaration `msg` carries, if it is one (sent by `from`).
    pub(crate) fn observe(&mut self, c: &Contract, from: &str, msg: &Message) {
        if let Some(mut names) = c.declared_capabilities(from, msg) {
            names.shrink_to_fit();
            self.by.retain(|(party, _)| party != from);
            self.by.push((from.to_string(), names));
        }
    }
}

/// The declaration's `unknown` reaction when `msg`, `from`'s declaration, names a
/// capability the contract does not list.
pub(crate) fn unknown(c: &Contract, from: &str, msg: &Message) -> Option<Ruling> {
    let action = c.parties.get(from)?.declares.as_ref()?.unknown.as_ref()?;
    let mut names: Vec<String> = (c.declared_capabilities(from, msg)?.into_iter())
        .filter(|n| !c.capabilities.contains_key(n))
        .collect();
    names.sort();
    let first = names.first()?;
    let entry = contract::join_pointer("/parties", [from, "declares", "unknown"]);
    let reason = format!("{from} declares capability {first}, which the contract does not list");
    Some(broken(
        c,
        "capability.unknown",
        &entry,
        Some(action),
        msg,
        reason,
    ))
}

/// A ruling when `msg` needs a capability its declaring party has declared without it:
/// its method's `capability` (a call), or one a `needs` entry asks of its members' values
/// (a call or an answer: rukh's completion carrying a commandResult).
pub(crate) fn check(c: &Contract, seen: &Declared, from: &str, msg: &Message) -> Option<Ruling> {
    let method = msg.method.as_deref()?;
    let (cap, entry, owner) = c
        .capabilities_needed(msg)
        .into_iter()
        .find_map(|(cap, entry)| {
            let owner = &c.capabilities.get(cap)?.declared_by;
            let (_, declared) = seen.by.iter().find(|(party, _)| party == owner)?;
            (!declared.iter().any(|d| d == cap)).then_some((cap, entry, owner))
        })?;
    let seed = &c.capabilities[cap].seed;
    let reason =
        format!("{method} from {from} needs capability {cap}, which {owner} did not declare");
    let undeclared = c
        .parties
        .get(owner.as_str())
        .and_then(|p| p.declares.as_ref());
    if let Some(a) = undeclared.and_then(|d| d.undeclared.as_ref()) {
        let at = contract::join_pointer("/parties", [owner, "declares", "undeclared"]);
        let reason = format!("{reason}, as {entry} asks");
        return Some(broken(
            c,
            "capability.undeclared",
            &at,
            Some(a),
            msg,
            reason,
        ));
    }
    let Some(code) = c.only_error(method).filter(|_| msg.is_call()) else {
        return Some(ruling(
            "capability.undeclared",
            &entry,
            seed,
            None,
            reason,
            Act::Flag,
        ));
    };
    let refusal = Action {
        action: ActionKind::ReplyError,
        code: Some(code.clone()),
        count_toward: None,
        report: None,
        reason: None,
        names: None,
        then: None,
        description: format!("{method} is never served: its one error is its only answer"),
        seed: seed.clone(),
    };
    Some(broken(
        c,
        "capability.undeclared",
        &entry,
        Some(&refusal),
        msg,
        reason,
    ))
}
