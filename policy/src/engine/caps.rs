//! Capability gating as data: a party's `declares` says where in the handshake it lists
//! its capabilities; a method's `capability` (and its `needs`, by its members' values)
//! names what it needs and the capability's `declaredBy` who must have declared it. Once
//! that party's declaration has been seen on the connection, a message needing a
//! capability it did not declare is flagged: the receiver decides what to do about it, the
//! proxy only reports. Where the contract has decided for it (a method never served, whose
//! one error is its only answer: toolchannel's sampling/createMessage), the request is
//! refused with that error.

use std::collections::{HashMap, HashSet};

use contract::Contract;
use contract::model::{Action, ActionKind, DeclarationForm, Kind, Part};
use contract::wire::Message;
use serde_json::Value;

use super::{Act, Ruling, broken, ruling};

/// The capabilities each party declared on one connection.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    by: HashMap<String, HashSet<String>>,
}

/// Whether any party of the contract declares capabilities.
pub(crate) fn any(c: &Contract) -> bool {
    c.parties.values().any(|p| p.declares.is_some())
}

impl Declared {
    /// Record the declaration `msg` carries, if it is one (sent by `from`).
    pub(crate) fn observe(&mut self, c: &Contract, from: &str, msg: &Message) {
        let Some(d) = c.parties.get(from).and_then(|p| p.declares.as_ref()) else {
            return;
        };
        let kind = match d.part {
            Part::Call => c.methods.get(&d.method).map(|m| m.kind),
            Part::Result => Some(Kind::Response),
            Part::Error => Some(Kind::Error),
        };
        if msg.method.as_deref() != Some(d.method.as_str()) || Some(msg.kind) != kind {
            return;
        }
        let names: HashSet<String> = match (d.form, msg.value.pointer(&d.pointer)) {
            (DeclarationForm::List, Some(Value::Array(a))) => a
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            (DeclarationForm::ObjectKeys, Some(Value::Object(o))) => o.keys().cloned().collect(),
            _ => HashSet::new(),
        };
        self.by.insert(from.to_string(), names);
    }
}

/// A ruling when `msg` needs a capability its declaring party has declared without it:
/// its method's `capability`, or one a `needs` entry asks of its members' values.
pub(crate) fn check(c: &Contract, seen: &Declared, from: &str, msg: &Message) -> Option<Ruling> {
    if !msg.is_call() {
        return None;
    }
    let method = msg.method.as_deref()?;
    let (cap, entry, owner) = c
        .needed_capabilities(method, &msg.value)
        .into_iter()
        .find_map(|(cap, entry)| {
            let owner = &c.capabilities.get(cap)?.declared_by;
            let declared = seen.by.get(owner)?;
            (!declared.contains(cap)).then_some((cap, entry, owner))
        })?;
    let seed = &c.capabilities[cap].seed;
    let reason =
        format!("{method} from {from} needs capability {cap}, which {owner} did not declare");
    let Some(code) = c.only_error(method) else {
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
