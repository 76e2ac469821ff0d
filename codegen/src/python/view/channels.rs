//! Channels as Python: the framing's reader and writer arguments, the message type and
//! its decoder, and the JSON rules and method caps the SDK checks on decode.

use std::collections::HashSet;

use serde::Serialize;

use super::{Names, py_bool, py_opt, py_str, tuple};
use crate::context::{ChannelView, SpelledRules, Spelling};
use crate::ir::{lower_snake, upper_snake};
use crate::python::{RESERVED_ATTRS, py_ident};
use contract::model::{ByteOrder, Framing, LengthCounts, LineMeasure};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PyChannel {
    key: String,
    sname: String,
    kind: &'static str,
    cap: String,
    message: String,
    message_dispatch: bool,
    message_fn: String,
    order: String,
    upper: String,
    /// The branches constant of a presence-dispatched message union.
    branches: String,
    rules: Option<SpelledRules>,
    caps: Vec<PyCap>,
    method_at: String,
    reply_at: String,
    /// The framing's deadline for one whole frame (length-prefixed framing only).
    deadline: Option<PyDeadline>,
    length_bytes: Option<u8>,
    counts_rest: Option<bool>,
    rest_format: Option<String>,
    frame_class: Option<String>,
    fields: Option<Vec<PyHeader>>,
    utf16: Option<bool>,
}

#[derive(Serialize)]
struct PyCap {
    method: String,
    limit: String,
    ident: String,
    ignore: &'static str,
}

#[derive(Serialize)]
struct PyDeadline {
    limit: String,
    ident: String,
}

#[derive(Serialize)]
struct PyHeader {
    attr: String,
    doc: String,
}

fn kind(f: &Framing) -> &'static str {
    match f {
        Framing::LengthPrefixed { .. } => "length-prefixed",
        Framing::Binary { .. } => "binary",
        Framing::Ndjson { .. } => "ndjson",
        Framing::HeaderDelimited { .. } => "header-delimited",
        Framing::WebsocketText { .. } => "websocket-text",
    }
}

fn order(f: &Framing) -> Option<ByteOrder> {
    match f {
        Framing::LengthPrefixed { byte_order, .. } | Framing::Binary { byte_order, .. } => {
            Some(*byte_order)
        }
        _ => None,
    }
}

pub(super) fn channel(c: &ChannelView, names: &Names, untyped: &HashSet<String>) -> PyChannel {
    let sname = lower_snake(c.key);
    let message = c.message.map(|m| names.py(m)).unwrap_or_default();
    let names_at = |keys: &Option<Vec<String>>| {
        keys.as_ref()
            .map_or("None".into(), |k| tuple(k.iter().map(|x| py_str(x))))
    };
    let mut v = PyChannel {
        key: c.key.to_string(),
        upper: upper_snake(&sname),
        sname,
        kind: kind(c.framing),
        cap: c.cap.as_ref().map_or("None", |l| l.ident).to_string(),
        message_dispatch: c.message.is_some_and(|m| untyped.contains(m)),
        message_fn: c
            .message
            .map(|m| format!("decode_{}", lower_snake(m)))
            .unwrap_or_default(),
        branches: format!("_{message}_BRANCHES"),
        message,
        order: py_opt(order(c.framing)),
        rules: c.wire_rules.as_ref().map(|r| r.spelled(&SPELLING)),
        caps: (c.method_caps.iter())
            .map(|m| PyCap {
                method: py_str(m.method),
                limit: py_str(m.limit),
                ident: m.ident.to_string(),
                ignore: py_bool(m.ignore),
            })
            .collect(),
        method_at: names_at(&c.method_at),
        reply_at: names_at(&c.reply_at),
        deadline: None,
        length_bytes: None,
        counts_rest: None,
        rest_format: None,
        frame_class: None,
        fields: None,
        utf16: None,
    };
    framing(c, &mut v);
    v
}

/// What the framing's reader needs beyond its kind.
fn framing(c: &ChannelView, v: &mut PyChannel) {
    match c.framing {
        Framing::LengthPrefixed { length_bytes, .. } => {
            v.length_bytes = Some(*length_bytes);
            v.deadline = c.frame_deadline.as_ref().map(|d| PyDeadline {
                limit: py_str(d.limit),
                ident: d.ident.to_string(),
            });
        }
        Framing::Binary {
            byte_order, header, ..
        } => {
            let code = |b: u8| match b {
                1 => "B",
                2 => "H",
                4 => "I",
                _ => "Q",
            };
            let first = header.first();
            v.length_bytes = Some(first.map_or(4, |h| h.bytes));
            v.counts_rest = Some(first.is_none_or(|h| h.counts != Some(LengthCounts::Payload)));
            let rest = &header[1.min(header.len())..];
            let endian = if *byte_order == ByteOrder::Little {
                "<"
            } else {
                ">"
            };
            let codes: String = rest.iter().map(|h| code(h.bytes)).collect();
            v.rest_format = Some(format!("{endian}{codes}"));
            v.frame_class = Some(format!("{}Frame", c.ident));
            v.fields = Some(
                (rest.iter())
                    .map(|h| PyHeader {
                        attr: py_ident(&lower_snake(&h.name), RESERVED_ATTRS),
                        doc: h.description.replace('\n', " "),
                    })
                    .collect(),
            );
        }
        Framing::Ndjson { line_measure, .. } => {
            v.utf16 = Some(*line_measure == LineMeasure::Utf16Units);
        }
        _ => {}
    }
}

/// The channel's JSON rules in Python's words, caps by their constants' names.
const SPELLING: Spelling = Spelling {
    yes_no: ("True", "False"),
    none: "None",
    cap: |l| l.ident.to_string(),
    quote: |t| format!("``{t}``"),
};
