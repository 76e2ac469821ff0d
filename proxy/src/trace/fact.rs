//! What the tracer needs of a frame, taken where the frame is recorded: the event, the
//! time, and the few things its message says about ids and traces. Spans are made from
//! these later, on the tracer's own thread ([`super::book`]), so the relay's threads never
//! build a span, and a span's times are the frames' own however late it is built.

use std::sync::Arc;
use std::time::SystemTime;

use contract::model::{Binding, Kind};
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanContext;
use serde_json::Value;

use super::{ATTR_MAX, network_attributes, parse_traceparent};
use crate::inspect::{Decision, Event, Inspection};
use crate::relay::Route;

/// What a route's spans say about it, made once per route.
#[derive(Debug)]
pub(super) struct RouteFacts {
    pub name: String,
    pub channel: String,
    pub contract: String,
    /// The channel speaks JSON-RPC.
    pub jsonrpc: bool,
    /// MCP's conventions apply (`traceparent` in `params._meta`, tools, progress).
    pub mcp: bool,
    /// `observe` or `enforce`.
    pub mode: String,
    /// Where the upstream is (`network.*`, `server.*`).
    pub network: Vec<KeyValue>,
}

impl RouteFacts {
    pub fn of(route: &Route) -> Self {
        let shape = Shape::of(route);
        RouteFacts {
            name: route.name.clone(),
            channel: route.channel.clone(),
            contract: shape.contract.to_string(),
            jsonrpc: shape.jsonrpc(),
            mcp: shape.mcp(),
            mode: format!("{:?}", route.mode).to_ascii_lowercase(),
            network: network_attributes(&route.upstream),
        }
    }

    /// Whether these facts are still those of `route` (a route name reused for another).
    pub fn describes(&self, route: &Route) -> bool {
        self.channel == route.channel && self.contract == route.wire.contract().name
    }

    /// Attributes every span of the route carries.
    pub fn attrs(&self, session: u64) -> Vec<KeyValue> {
        let system = if self.jsonrpc {
            "jsonrpc"
        } else {
            self.contract.as_str()
        };
        let mut a = vec![
            KeyValue::new("rpc.system.name", system.to_string()),
            KeyValue::new("contract.name", self.contract.clone()),
            KeyValue::new("contract.channel", self.channel.clone()),
            KeyValue::new("proxy.route", self.name.clone()),
            KeyValue::new("proxy.session", session as i64),
        ];
        a.extend(self.network.iter().cloned());
        a
    }

    /// MCP names the application session `mcp.session.id`; other contracts get the generic key.
    pub fn session_key(&self) -> &'static str {
        if self.mcp {
            "mcp.session.id"
        } else {
            "session.id"
        }
    }
}

/// One thing for the tracer's thread to book, in the order the relay recorded it.
pub(super) enum Item {
    Frame(Box<Fact>),
    /// A connection-level note (`closed` ends the connection's pending requests).
    Note {
        conn: u64,
        text: String,
        at: SystemTime,
    },
}

/// One inspected frame, as the tracer needs it.
pub(super) struct Fact {
    pub route: Arc<RouteFacts>,
    pub event: Event,
    /// The proxy refused the frame (and answered in the receiver's place, if anyone).
    pub refused: bool,
    /// When the tracer was handed the frame.
    pub at: SystemTime,
    pub said: Said,
}

impl Fact {
    pub fn of(route: &Route, facts: Arc<RouteFacts>, ins: &Inspection, at: SystemTime) -> Self {
        let said = match &ins.message {
            Some(m) => Said::of(&Shape::of(route), &ins.event, m),
            None => Said::default(),
        };
        Fact {
            route: facts,
            event: ins.event.clone(),
            refused: matches!(ins.decision, Decision::Refuse { .. }),
            at,
            said,
        }
    }
}

/// What a message says about ids and traces, each clipped to [`ATTR_MAX`].
#[derive(Debug, Default)]
pub(super) struct Said {
    /// A request's id.
    pub request_id: Option<Value>,
    /// The id a reply answers.
    pub correlation: Option<Value>,
    /// A trace id the envelope carries (kernel `trace_id`).
    pub carried: Option<String>,
    /// A W3C parent in the message (MCP: `params._meta.traceparent`).
    pub traceparent: Option<SpanContext>,
    /// A data stream a control message names.
    pub stream_id: Option<u64>,
    /// The application's own session id (MCP `sessionId`).
    pub app_session: Option<String>,
    /// A request's progress token, as JSON text.
    pub progress_token: Option<String>,
    /// The request a progress notification reports on: its token, as JSON text.
    pub progress_of: Option<String>,
    /// MCP `tools/call`: the tool.
    pub tool: Option<String>,
    /// An error reply's message.
    pub error_message: Option<String>,
}

impl Said {
    fn of(shape: &Shape<'_>, ev: &Event, m: &Value) -> Self {
        let at = |p: &str| m.pointer(p);
        let text_at = |p: &str| at(p).and_then(Value::as_str).map(clip);
        let mcp = shape.mcp();
        let method = ev.method.as_deref();
        Said {
            request_id: match ev.kind {
                Some(Kind::Request) => shape.id_ptr().and_then(at).cloned(),
                _ => None,
            },
            correlation: match ev.kind {
                Some(Kind::Response | Kind::Error) => shape.correlation_ptr().and_then(at).cloned(),
                _ => None,
            },
            carried: shape.carried_trace(m),
            traceparent: shape.traceparent(m),
            stream_id: shape.stream_id(m),
            app_session: text_at("/params/sessionId").or_else(|| text_at("/result/sessionId")),
            progress_token: at("/params/_meta/progressToken").map(Value::to_string),
            progress_of: (mcp && method == Some("notifications/progress"))
                .then(|| at("/params/progressToken").map(Value::to_string))
                .flatten(),
            tool: (mcp && method == Some("tools/call"))
                .then(|| text_at("/params/name"))
                .flatten(),
            error_message: (ev.kind == Some(Kind::Error))
                .then(|| shape.error_message(m))
                .flatten(),
        }
    }
}

/// What the route's contract says about locating ids and traces in a message.
struct Shape<'a> {
    contract: &'a str,
    binding: Option<&'a Binding>,
}

impl<'a> Shape<'a> {
    fn of(route: &'a Route) -> Self {
        let c = route.wire.contract();
        Shape {
            contract: c.name.as_str(),
            binding: c
                .channels
                .get(&route.channel)
                .and_then(|ch| ch.binding.as_ref()),
        }
    }

    fn jsonrpc(&self) -> bool {
        matches!(self.binding, Some(Binding::Jsonrpc { .. }))
    }

    fn mcp(&self) -> bool {
        self.contract == "toolchannel"
            || matches!(self.binding, Some(Binding::Jsonrpc { trace: Some(t), .. }) if t == "/params/_meta/traceparent")
    }

    fn id_ptr(&self) -> Option<&str> {
        match self.binding? {
            Binding::Jsonrpc { .. } => Some("/id"),
            Binding::Envelope { id, .. } | Binding::Tagged { id, .. } => id.as_deref(),
        }
    }

    fn correlation_ptr(&self) -> Option<&str> {
        match self.binding? {
            Binding::Jsonrpc { .. } => Some("/id"),
            Binding::Envelope { correlation, .. } | Binding::Tagged { correlation, .. } => {
                correlation.as_deref()
            }
        }
    }

    fn carried_trace(&self, m: &Value) -> Option<String> {
        let Some(Binding::Envelope { trace: Some(p), .. }) = self.binding else {
            return None;
        };
        m.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            // Whole: anyone holding the carried id must derive the same trace id.
            .map(str::to_string)
    }

    fn traceparent(&self, m: &Value) -> Option<SpanContext> {
        let Some(Binding::Jsonrpc { trace, .. }) = self.binding else {
            return None;
        };
        let ptr = trace.as_deref().unwrap_or("/params/_meta/traceparent");
        m.pointer(ptr)
            .and_then(Value::as_str)
            .and_then(parse_traceparent)
    }

    fn error_message(&self, m: &Value) -> Option<String> {
        let ptr = match self.binding? {
            Binding::Jsonrpc { .. } => "/error/message".to_string(),
            Binding::Envelope { payload, .. } => format!("{payload}/message"),
            Binding::Tagged { .. } => return None,
        };
        m.pointer(&ptr).and_then(Value::as_str).map(clip)
    }

    /// `stream_id` in the envelope or its payload.
    fn stream_id(&self, m: &Value) -> Option<u64> {
        let Some(Binding::Envelope { payload, .. }) = self.binding else {
            return None;
        };
        m.pointer("/stream_id")
            .or_else(|| m.pointer(&format!("{payload}/stream_id")))
            .and_then(Value::as_u64)
    }
}

/// At most [`ATTR_MAX`] bytes of `s`, cut at a character boundary.
pub(super) fn clip(s: &str) -> String {
    if s.len() <= ATTR_MAX {
        return s.to_string();
    }
    let mut end = ATTR_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
