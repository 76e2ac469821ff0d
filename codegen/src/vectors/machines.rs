//! Machine vectors: what each typed state machine does, in every state, with a message of
//! each of its message triggers and of each method its `allows` names, and with each of its
//! events. The expected outcomes come from `contract::machine`, the reading the proxy's
//! policy engine runs, so an SDK that passes them steps its machines as the proxy enforces.

use serde_json::{Value, json};

use crate::ir::{EventIr, Ir, MachineIr, kind_wire};
use contract::Contract;
use contract::machine::{Seen, Step};
use contract::model::{Kind, Part, StateMachine};

/// A message to probe a machine with: who sends it, its kind and method, and the value.
struct Probe {
    from: String,
    kind: Kind,
    method: String,
    message: Value,
}

/// The machine vectors of one contract: `{"messages": [...], "events": [...]}`.
pub fn machines(ir: &Ir) -> Value {
    let c = &ir.contract;
    let mut messages = Vec::new();
    let mut events = Vec::new();
    for m in ir.machines.iter().filter(|m| m.typed) {
        let sm = &c.state_machines[m.key.as_str()];
        let probes = probes(c, m);
        for state in sm.states.keys() {
            for (i, p) in probes.iter().enumerate() {
                messages.push(message_vector(c, sm, m, state, i, p));
            }
            for e in &m.events {
                let to = sm.on_event(state, &e.trigger).map(|(_, t)| t.to.clone());
                events.push(json!({
                    "id": format!("{}/{state}/{}", m.key, e.label),
                    "machine": m.key, "state": state, "event": e.label, "to": to,
                    "ignorable": m.ignore_invalid,
                }));
            }
        }
    }
    json!({ "messages": messages, "events": events })
}

fn message_vector(
    c: &Contract,
    sm: &StateMachine,
    m: &MachineIr,
    state: &str,
    i: usize,
    p: &Probe,
) -> Value {
    let seen = Seen {
        from: &p.from,
        kind: p.kind,
        method: Some(&p.method),
        value: &p.message,
    };
    let mut v = json!({
        "id": format!("{}/{state}/{i}", m.key),
        "machine": m.key, "state": state, "from": p.from, "kind": kind_wire(p.kind),
        "method": p.method, "message": p.message,
    });
    match sm.on_message(c, state, &seen) {
        Step::Moved { transition, index } => {
            let event = m
                .moves
                .iter()
                .find(|mv| mv.index == index)
                .and_then(|mv| m.events.iter().find(|e| e.ident == mv.event));
            v["expect"] = json!("moved");
            v["to"] = json!(transition.to);
            v["event"] = json!(event.map(|e| e.label.as_str()));
        }
        Step::Stayed => v["expect"] = json!("stayed"),
        Step::OutOfPlace { ignorable } => {
            v["expect"] = json!("out-of-place");
            v["ignorable"] = json!(ignorable);
        }
    }
    v
}

/// One probe per message event, and per method `allows` names.
fn probes(c: &Contract, m: &MachineIr) -> Vec<Probe> {
    let mut out: Vec<Probe> = m.events.iter().filter_map(|e| event_probe(c, e)).collect();
    // A method `allows` names, and for a request also its answers: an answer is never
    // allowed or governed by `allows`, so it must leave the machine as it is.
    for (method, _) in &m.allows {
        let kind = c.methods.get(method).map_or(Kind::Request, |x| x.kind);
        let answers: &[Kind] = match kind {
            Kind::Request => &[Kind::Response, Kind::Error],
            _ => &[],
        };
        for k in std::iter::once(&kind).chain(answers) {
            out.extend(probe_of(c, method, *k, None, &[]));
        }
    }
    out
}

fn event_probe(c: &Contract, e: &EventIr) -> Option<Probe> {
    if e.on != "message" {
        return None;
    }
    let kind: Option<Kind> = e
        .kind
        .as_ref()
        .and_then(|k| serde_json::from_value(json!(k)).ok());
    let method = match &e.method {
        Some(m) => m.clone(),
        // Any message: the first method that has a message of the kind.
        None => c
            .methods
            .iter()
            .find(|(_, x)| kind.is_none_or(|k| k == x.kind || is_answer(k)))
            .map(|(n, _)| n.clone())?,
    };
    let kind = kind.or_else(|| c.methods.get(&method).map(|x| x.kind))?;
    probe_of(c, &method, kind, e.from.as_deref(), &e.matches)
}

fn is_answer(k: Kind) -> bool {
    matches!(k, Kind::Response | Kind::Error)
}

/// A message of `method` and `kind` sent by `from` (or whoever may send it), built from the
/// method's example of that part when it has one, with `matches` written in.
fn probe_of(
    c: &Contract,
    method: &str,
    kind: Kind,
    from: Option<&str>,
    matches: &[(String, String)],
) -> Option<Probe> {
    let x = c.methods.get(method)?;
    let part = match kind {
        Kind::Response => Part::Result,
        Kind::Error => Part::Error,
        _ => Part::Call,
    };
    let example = x
        .examples
        .iter()
        .filter(|ex| ex.part == part)
        .find(|ex| from.is_none() || ex.from.is_none() || ex.from.as_deref() == from);
    let sender = from
        .map(str::to_string)
        .or_else(|| example.and_then(|ex| ex.from.clone()))
        .or_else(|| match part {
            Part::Call => x.from.first().cloned(),
            _ => c.parties.keys().find(|p| !x.from.contains(p)).cloned(),
        })?;
    let mut message = example.map_or_else(|| json!({}), |ex| ex.message.clone());
    for (ptr, text) in matches {
        let v: Value = serde_json::from_str(text).ok()?;
        contract::set_pointer(&mut message, ptr, v);
    }
    Some(Probe {
        from: sender,
        kind,
        method: method.to_string(),
        message,
    })
}
