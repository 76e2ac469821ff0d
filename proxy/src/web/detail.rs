//! A row's detail: the message, which contract schema validated each part of it, the
//! contract entry a violation breaks, and the exact bytes.

use contract::Contract;
use contract::model::{Binding, Kind};
use serde_json::{Value, json};

use crate::inspect::Verdict;
use crate::web::server::WebRoute;
use crate::web::store::Row;

/// The detail of `row` (see docs/web.md), paired with row `pair`, under the contract of
/// `route`.
pub fn detail(
    route: Option<&WebRoute>,
    row: &Row,
    pair: Option<u64>,
    trace: Option<&str>,
) -> Value {
    let e = &row.event;
    let c = route.map(|r| &*r.contract);
    let trace_url = trace
        .zip(e.trace.as_deref())
        .map(|(t, id)| t.replace("{trace_id}", &otel_trace_id(id)));
    json!({
        "row": row.summary(),
        "message": row.message,
        "raw": raw(row),
        "parts": c.map(|c| parts(c, row)).unwrap_or_default(),
        "violation": violation(route.map(WebRoute::document), e),
        "pair": pair,
        "trace_url": trace_url,
    })
}

/// The trace id the exported spans carry for a message's trace id: a W3C traceparent's
/// own, else the id the tracer derives from the carried one.
fn otel_trace_id(carried: &str) -> String {
    match crate::trace::parse_traceparent(carried) {
        Some(sc) => sc.trace_id().to_string(),
        None => crate::trace::carried_trace_id(carried).to_string(),
    }
}

fn raw(row: &Row) -> Value {
    json!({
        "len": row.raw_len,
        "framed": row.framed,
        "hex": row.raw.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "text": String::from_utf8_lossy(&row.raw),
        "truncated": row.raw.len() < row.raw_len,
    })
}

/// Which schema of `c` validated each part of the row's message: the channel's message
/// schema for the whole, the method's params or result (or the error catalog) for the
/// payload.
fn parts(c: &Contract, row: &Row) -> Vec<Value> {
    let (Some(msg), Some(ch)) = (&row.message, c.channels.get(&row.event.channel)) else {
        return Vec::new();
    };
    let mut out = vec![
        json!({"pointer": "", "schema": format!("/channels/{}/message", esc(&row.event.channel))}),
    ];
    let payload = match &ch.binding {
        Some(Binding::Envelope { payload, .. }) => Some(payload.clone()),
        Some(Binding::Jsonrpc { .. }) => Some(
            match row.event.kind {
                Some(Kind::Response) => "/result",
                Some(Kind::Error) => "/error",
                _ => "/params",
            }
            .to_string(),
        ),
        // A tagged frame is its method's params as a whole.
        Some(Binding::Tagged { .. }) => Some(String::new()),
        None => None,
    };
    let method = row
        .event
        .method
        .as_deref()
        .filter(|m| c.methods.contains_key(*m));
    if let (Some(p), Some(m)) = (payload, method)
        && msg.pointer(&p).is_some()
    {
        let schema = match row.event.kind {
            Some(Kind::Response) => format!("/methods/{}/result", esc(m)),
            Some(Kind::Error) => "/errors".to_string(),
            _ => format!("/methods/{}/params", esc(m)),
        };
        out.push(json!({"pointer": p, "schema": schema}));
    }
    out
}

fn esc(s: &str) -> String {
    contract::escape_pointer(s)
}

/// The contract entry a violation breaks: the pointer an engine rule names at the end of
/// its reason, else the rule a wire class checks (the method's `from` or `params`, the
/// channel's framing or message schema), with the `violations` row that says what the
/// receiver does when the contract has one.
fn violation(doc: Option<&Value>, e: &crate::inspect::Event) -> Value {
    let (class, code, seed, reason) = match &e.verdict {
        Verdict::Ok => return Value::Null,
        Verdict::Violation {
            class,
            code,
            seed,
            reason,
        } => (
            class.to_string(),
            code.clone(),
            seed.clone(),
            reason.clone(),
        ),
        Verdict::Framing { reason } => ("framing".into(), None, None, reason.clone()),
    };
    let found = |p: &String| doc.is_some_and(|d| d.pointer(p).is_some());
    let entry = candidates(&class, &reason, e).into_iter().find(found);
    let at = |p: &Option<String>| {
        let p = p.as_deref()?;
        doc?.pointer(p).cloned()
    };
    let action = Some(format!("/violations/{}", camel(&class))).filter(found);
    json!({
        "class": class, "code": code, "seed": seed, "reason": reason,
        "entry": entry, "contract": at(&entry),
        "action_entry": action, "action": at(&action),
    })
}

/// Where in the contract the broken rule may live, most specific first.
fn candidates(class: &str, reason: &str, e: &crate::inspect::Event) -> Vec<String> {
    if let Some(p) = reason
        .strip_suffix(')')
        .and_then(|r| r.rsplit_once(" (/"))
        .map(|(_, p)| format!("/{p}"))
    {
        return vec![p];
    }
    let ch = format!("/channels/{}", esc(&e.channel));
    let m = e.method.as_deref().map(|m| format!("/methods/{}", esc(m)));
    let mut out = match (class, &m) {
        ("wrong-direction", Some(m)) => vec![format!("{m}/from")],
        ("invalid-params", Some(m)) => vec![format!("{m}/params"), m.clone()],
        ("unknown-request" | "unknown-notification", _) => vec!["/methods".into()],
        ("oversize" | "framing" | "sequence", _) => vec![format!("{ch}/framing")],
        ("parse", _) => vec![format!("{ch}/json")],
        ("invalid", _) => vec![format!("{ch}/message"), format!("{ch}/binding")],
        _ => Vec::new(),
    };
    out.push(format!("/violations/{}", camel(class)));
    out
}

fn camel(s: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for ch in s.chars() {
        match ch {
            '-' => up = true,
            _ if up => {
                out.extend(ch.to_uppercase());
                up = false;
            }
            _ => out.push(ch),
        }
    }
    out
}
