//! Reports as data: an `ignore` action with a `report` tells the dropped message's sender,
//! as its receiver would (xsession's delivery_status `dropped` to the sender's own inbox).
//! The engine builds the messages from the contract: each report message's method supplies
//! its binding's kind and method fields or its `match` fields, then `copy` takes fields from the dropped message, `set` fixed
//! values, and `code`, `reason` and `id` place the action's code, a one-line reason and a
//! fresh id. The relay dials the address and writes them (an [`Act::Notify`]).

use contract::Contract;
use contract::model::{Action, ReportMessage};
use contract::wire::Message;
use serde_json::{Value, json};

use super::{Act, fresh_id};

/// The report `a` calls for about `msg`; `None` without a report, or when `msg` names no
/// address (then nothing can be sent: the drop is only counted).
pub(crate) fn notify(c: &Contract, a: &Action, msg: &Message, reason: &str) -> Option<Act> {
    let r = a.report.as_ref()?;
    let to = msg
        .value
        .pointer(&r.to)?
        .as_str()
        .filter(|s| !s.is_empty())?;
    let messages = (r.messages.iter())
        .filter(|m| {
            m.when
                .as_ref()
                .is_none_or(|w| contract::get_pointer(&msg.value, w).is_some())
        })
        .map(|m| build(c, m, a.code.as_ref(), &msg.value, reason))
        .collect();
    Some(Act::Notify {
        to: to.to_string(),
        messages,
    })
}

fn build(
    c: &Contract,
    m: &ReportMessage,
    code: Option<&Value>,
    dropped: &Value,
    reason: &str,
) -> Value {
    // The method's own shape: its binding's kind and method fields, or its `match` fields.
    let def = c.methods.get(&m.method);
    let framed = def.and_then(|d| c.message(&d.channel, d.kind, &m.method, json!({})).ok());
    let mut out = framed.unwrap_or_else(|| json!({}));
    let mut put = |at: &str, v: Value| contract::set_pointer(&mut out, at, v);
    for (at, v) in def.into_iter().flat_map(|d| &d.matches) {
        put(at, v.clone());
    }
    for (at, from) in &m.copy {
        put(at, dropped.pointer(from).cloned().unwrap_or(Value::Null));
    }
    for (at, v) in &m.set {
        put(at, v.clone());
    }
    if let (Some(at), Some(code)) = (&m.code, code) {
        put(at, code.clone());
    }
    if let Some(at) = &m.reason {
        put(at, json!(reason));
    }
    if let Some(at) = &m.id {
        put(at, fresh_id());
    }
    out
}
