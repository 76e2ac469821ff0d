//! State machines as Python: a state enum, its transition table and, for a machine with
//! typed triggers, its event enum and the moves the runtime steps through.

use std::collections::HashMap;

use serde::Serialize;

use super::{py_opt, py_str};
use crate::ir::{EventIr, MachineIr, lower_snake, upper_snake};
use crate::python::{member_names, py_doc, py_literal};

#[derive(Serialize)]
pub(super) struct PyMachine {
    name: String,
    key: String,
    doc: String,
    #[serde(rename = "const")]
    constant: String,
    #[serde(rename = "fn")]
    func: String,
    #[serde(rename = "fnBase")]
    fn_base: String,
    ignore: bool,
    states: Vec<PyState>,
    initial: String,
    terminal: Vec<String>,
    transitions: Vec<String>,
    typed: bool,
    events: Option<PyEvents>,
}

#[derive(Serialize)]
struct PyState {
    name: String,
    value: String,
    doc: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PyEvents {
    name: String,
    members: Vec<PyEvent>,
    moves: Vec<String>,
    allows: Vec<PyAllow>,
    scope: String,
    key_pointer: String,
}

#[derive(Serialize)]
struct PyEvent {
    name: String,
    label: String,
}

#[derive(Serialize)]
struct PyAllow {
    method: String,
    states: String,
}

/// Machine `m` as class `py`, its events (when typed) as class `ev`.
pub(super) fn machine(m: &MachineIr, py: &str, ev: &str) -> PyMachine {
    let members = member_names(m.states.iter().map(|s| s.0.as_str()));
    let member_of: HashMap<&str, String> = (m.states.iter().zip(&members))
        .map(|(s, mm)| (s.0.as_str(), format!("{py}.{mm}")))
        .collect();
    let m_of = |ident: &str| member_of.get(ident).cloned().unwrap_or_default();
    PyMachine {
        name: py.to_string(),
        key: m.key.clone(),
        doc: py_doc(&m.description),
        constant: upper_snake(py),
        func: format!("check_{}_transition", lower_snake(&m.key)),
        fn_base: lower_snake(&m.key),
        ignore: m.ignore_invalid,
        states: (m.states.iter().zip(&members))
            .map(|(s, mm)| PyState {
                name: mm.clone(),
                value: py_str(&s.1),
                doc: s.2.replace('\n', " "),
            })
            .collect(),
        initial: m_of(&m.initial),
        terminal: m.terminal.iter().map(|t| m_of(t)).collect(),
        transitions: (m.transitions.iter())
            .map(|(a, b)| format!("({}, {})", m_of(a), m_of(b)))
            .collect(),
        typed: m.typed,
        events: m.typed.then(|| events(m, ev, &m_of)),
    }
}

/// A typed machine's events, moves and `allows`.
fn events(m: &MachineIr, ev: &str, m_of: &dyn Fn(&str) -> String) -> PyEvents {
    let members = member_names(m.events.iter().map(|e| e.ident.as_str()));
    let by_ident: HashMap<&str, (&EventIr, String)> = (m.events.iter().zip(&members))
        .map(|(e, mm)| (e.ident.as_str(), (e, format!("{ev}.{mm}"))))
        .collect();
    let moves = (m.moves.iter())
        .map(|mv| {
            let (member, trig) = by_ident
                .get(mv.event.as_str())
                .map_or((String::new(), "None".into()), |(e, mm)| {
                    (mm.clone(), trigger(e))
                });
            format!("({}, {member}, {}, {trig})", m_of(&mv.from), m_of(&mv.to))
        })
        .collect();
    PyEvents {
        name: ev.to_string(),
        members: (m.events.iter().zip(members))
            .map(|(e, name)| PyEvent {
                name,
                label: py_str(&e.label),
            })
            .collect(),
        moves,
        allows: (m.allows.iter())
            .map(|(method, states)| PyAllow {
                method: py_str(method),
                states: states.iter().map(|s| m_of(s) + ", ").collect(),
            })
            .collect(),
        scope: py_str(m.scope),
        key_pointer: py_opt(m.key_pointer.as_deref()),
    }
}

/// A message event as `_rt.Trigger(method, kind, from, matches)`; `None` for the others.
fn trigger(e: &EventIr) -> String {
    if e.on != "message" {
        return "None".into();
    }
    let matches: String = (e.matches.iter())
        .map(|(pointer, text)| {
            let value = serde_json::from_str(text).map_or("None".into(), |v| py_literal(&v));
            format!("({}, {value}), ", py_str(pointer))
        })
        .collect();
    format!(
        "_rt.Trigger({}, {}, {}, ({matches}))",
        py_opt(e.method.as_deref()),
        py_opt(e.kind.as_deref()),
        py_opt(e.from.as_deref()),
    )
}
