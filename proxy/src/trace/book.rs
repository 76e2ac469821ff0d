//! Span bookkeeping, sans-IO: [`Item`]s in, in the order the relay recorded them; spans
//! out, each ended at the time of the frame or note that ended it, into the SDK's span
//! processor (which queues them for export). Runs on the tracer's own thread, behind
//! the relay, so nothing here stamps a time of its own: every start, event and end is a
//! fact's `at`.
//!
//! A request and its reply form one span; events, notifications, data frames and
//! heartbeats become span events on the span they belong to. Which trace a frame lands
//! in is described in [`super`].

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use contract::model::Kind;
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceId,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, Span};
use serde_json::Value;

use super::export::Counters;
use super::fact::{Fact, Item, RouteFacts, clip};
use super::{
    DATA_EVENTS_MAX, LATENCY_NS, PENDING_MAX, ROOTS_MAX, SESSIONS_MAX, STREAMS_MAX,
    carried_trace_id,
};
use crate::inspect::{Dir, Event, Verdict};

thread_local! {
    /// The trace id the next root span built on this thread must have.
    static FORCED_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Random ids, except a root span started by [`Book::forced_root`], which takes the id
/// derived from its carried trace id (the SDK asks the generator, synchronously, when the
/// span starts; its span builder's own trace id is not read).
#[derive(Debug, Default)]
pub(super) struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        FORCED_TRACE
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }
    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

/// Open spans of every session and connection the relay has told about.
pub(super) struct Book {
    make: Maker,
    closed: bool,
    sessions: BTreeMap<u64, Session>,
    conns: BTreeMap<u64, ConnState>,
}

/// Starts spans and counts what does not fit.
struct Maker {
    tracer: SdkTracer,
    counters: Arc<Counters>,
}

struct ConnState {
    session: u64,
    pending: HashMap<(Dir, String), Pending>,
}

struct Pending {
    span: Span,
    /// MCP `params._meta.progressToken`, to attach `notifications/progress` to this request.
    progress: Option<String>,
}

#[derive(Default)]
struct Session {
    root: Option<Root>,
    traces: HashMap<String, Root>,
    order: VecDeque<String>,
    streams: HashMap<u64, String>,
    conns: Vec<u64>,
    /// The application's own session id (MCP `sessionId`), once seen.
    app_session: Option<String>,
}

struct Root {
    span: Span,
    data_frames: u64,
    data_bytes: u64,
}

impl Root {
    fn new(span: Span) -> Self {
        Root {
            span,
            data_frames: 0,
            data_bytes: 0,
        }
    }

    /// The span, with its data counters written, ready to be ended.
    fn finish(mut self) -> Span {
        if self.data_frames > 0 {
            self.span.set_attributes([
                KeyValue::new("proxy.data.frames", self.data_frames as i64),
                KeyValue::new("proxy.data.bytes", self.data_bytes as i64),
            ]);
        }
        self.span
    }
}

impl Session {
    fn finish(self, out: &mut Vec<Span>) {
        for (_, r) in self.traces {
            out.push(r.finish());
        }
        if let Some(r) = self.root {
            out.push(r.finish());
        }
    }
}

/// Where a request span hangs.
enum Parent {
    Local(SpanContext),
    Remote(SpanContext),
}

/// End every span at `at`.
fn end_all(spans: Vec<Span>, at: SystemTime) {
    for mut s in spans {
        s.end_with_timestamp(at);
    }
}

/// End pending request spans that will get no reply.
fn end_pending(pending: HashMap<(Dir, String), Pending>, why: &str, out: &mut Vec<Span>) {
    for (_, mut p) in pending {
        p.span
            .set_attribute(KeyValue::new("error.type", "proxy.unanswered"));
        p.span.set_status(Status::error(why.to_string()));
        out.push(p.span);
    }
}

impl Book {
    pub fn new(tracer: SdkTracer, counters: Arc<Counters>) -> Self {
        Book {
            make: Maker { tracer, counters },
            closed: false,
            sessions: BTreeMap::new(),
            conns: BTreeMap::new(),
        }
    }

    /// Book one item; after [`Book::close`], items are ignored.
    pub fn take(&mut self, item: Item) {
        if self.closed {
            return;
        }
        match item {
            Item::Frame(f) => self.frame(&f),
            Item::Note { conn, text, at } => self.note(conn, &text, at),
        }
    }

    /// End every open span at `at` (a request still waiting is marked unanswered); later
    /// items are ignored.
    pub fn close(&mut self, at: SystemTime) {
        self.closed = true;
        let mut ending = Vec::new();
        for (_, c) in std::mem::take(&mut self.conns) {
            end_pending(c.pending, "the proxy stopped before the reply", &mut ending);
        }
        for (_, s) in std::mem::take(&mut self.sessions) {
            s.finish(&mut ending);
        }
        end_all(ending, at);
    }

    /// Register the connection and its session, making room if needed.
    fn touch(&mut self, conn: u64, session: u64, ending: &mut Vec<Span>) {
        if !self.sessions.contains_key(&session)
            && self.sessions.len() >= SESSIONS_MAX
            && let Some((_, old)) = self.sessions.pop_first()
        {
            self.make.counters.evicted.fetch_add(1, Ordering::Relaxed);
            for c in &old.conns {
                if let Some(cs) = self.conns.remove(c) {
                    end_pending(cs.pending, "evicted: too many sessions", ending);
                }
            }
            old.finish(ending);
        }
        let s = self.sessions.entry(session).or_default();
        if !s.conns.contains(&conn) {
            s.conns.push(conn);
        }
        self.conns.entry(conn).or_insert_with(|| ConnState {
            session,
            pending: HashMap::new(),
        });
    }

    fn frame(&mut self, f: &Fact) {
        let ev = &f.event;
        let mut ending = Vec::new();
        self.touch(ev.conn, ev.session, &mut ending);
        let Book {
            make,
            sessions,
            conns,
            ..
        } = self;
        if let (Some(session), Some(conn)) =
            (sessions.get_mut(&ev.session), conns.get_mut(&ev.conn))
        {
            make.frame_in(session, conn, f, &mut ending);
        }
        end_all(ending, f.at);
    }

    fn note(&mut self, conn: u64, text: &str, at: SystemTime) {
        let Some(session_id) = self.conns.get(&conn).map(|c| c.session) else {
            return;
        };
        if let Some(r) = self
            .sessions
            .get_mut(&session_id)
            .and_then(|s| s.root.as_mut())
        {
            r.span.add_event_with_timestamp(
                "proxy.note",
                at,
                vec![
                    KeyValue::new("proxy.note", clip(text)),
                    KeyValue::new("proxy.conn", conn as i64),
                ],
            );
        }
        // The relay's last word on a connection.
        if text != "closed" {
            return;
        }
        let mut ending = Vec::new();
        if let Some(c) = self.conns.remove(&conn) {
            end_pending(
                c.pending,
                "the connection closed before the reply",
                &mut ending,
            );
        }
        let empty = self.sessions.get_mut(&session_id).is_some_and(|s| {
            s.conns.retain(|x| *x != conn);
            s.conns.is_empty()
        });
        if empty && let Some(s) = self.sessions.remove(&session_id) {
            s.finish(&mut ending);
        }
        end_all(ending, at);
    }
}

impl Maker {
    fn start(
        &self,
        name: String,
        kind: SpanKind,
        parent: Option<SpanContext>,
        at: SystemTime,
        attrs: Vec<KeyValue>,
    ) -> Span {
        let cx = match parent {
            Some(sc) => Context::new().with_remote_span_context(sc),
            None => Context::new(),
        };
        let b = SpanBuilder::from_name(name)
            .with_kind(kind)
            .with_start_time(at)
            .with_attributes(attrs);
        self.tracer.build_with_context(b, &cx)
    }

    /// A root span with the given trace id.
    fn forced_root(
        &self,
        name: String,
        trace: TraceId,
        at: SystemTime,
        attrs: Vec<KeyValue>,
    ) -> Span {
        FORCED_TRACE.with(|f| f.set(Some(trace)));
        let span = self.start(name, SpanKind::Internal, None, at, attrs);
        FORCED_TRACE.with(|f| f.set(None));
        span
    }

    fn session_root<'s>(
        &self,
        session: &'s mut Session,
        route: &RouteFacts,
        id: u64,
        at: SystemTime,
    ) -> &'s mut Root {
        let Session {
            root, app_session, ..
        } = session;
        root.get_or_insert_with(|| {
            let mut attrs = route.attrs(id);
            if let Some(s) = app_session {
                attrs.push(KeyValue::new(route.session_key(), s.clone()));
            }
            let name = format!("{} session", route.contract);
            Root::new(self.start(name, SpanKind::Internal, None, at, attrs))
        })
    }

    fn trace_root<'s>(
        &self,
        session: &'s mut Session,
        carried: &str,
        route: &RouteFacts,
        id: u64,
        at: SystemTime,
    ) -> &'s mut Root {
        if !session.traces.contains_key(carried)
            && session.traces.len() >= ROOTS_MAX
            && let Some(old) = session.order.pop_front()
            && let Some(r) = session.traces.remove(&old)
        {
            self.counters.evicted.fetch_add(1, Ordering::Relaxed);
            r.finish().end_with_timestamp(at);
        }
        let order = &mut session.order;
        session
            .traces
            .entry(carried.to_string())
            .or_insert_with(|| {
                order.push_back(carried.to_string());
                let mut attrs = route.attrs(id);
                attrs.push(KeyValue::new(
                    format!("{}.trace_id", route.contract),
                    clip(carried),
                ));
                let name = format!("{} trace", route.contract);
                Root::new(self.forced_root(name, carried_trace_id(carried), at, attrs))
            })
    }

    fn frame_in(
        &self,
        session: &mut Session,
        conn: &mut ConnState,
        f: &Fact,
        ending: &mut Vec<Span>,
    ) {
        let (ev, said) = (&f.event, &f.said);
        // What later data frames and spans need to know.
        if let (Some(t), Some(sid)) = (&said.carried, said.stream_id)
            && (session.streams.len() < STREAMS_MAX || session.streams.contains_key(&sid))
        {
            session.streams.insert(sid, t.clone());
        }
        if session.app_session.is_none()
            && let Some(s) = &said.app_session
        {
            session.app_session = Some(s.clone());
            if let Some(r) = &mut session.root {
                r.span
                    .set_attribute(KeyValue::new(f.route.session_key(), s.clone()));
            }
        }
        match (ev.kind, &said.request_id, &said.correlation) {
            (Some(Kind::Request), Some(id), _) if ev.method.is_some() => {
                self.request(session, conn, f, id, ending);
            }
            (Some(Kind::Response | Kind::Error), _, Some(c)) => {
                match conn.pending.remove(&(ev.dir.reverse(), c.to_string())) {
                    Some(mut p) => {
                        reply(&mut p.span, f);
                        ending.push(p.span);
                    }
                    None => self.other(session, conn, f, ending),
                }
            }
            _ => self.other(session, conn, f, ending),
        }
    }

    fn request(
        &self,
        session: &mut Session,
        conn: &mut ConnState,
        f: &Fact,
        id: &Value,
        ending: &mut Vec<Span>,
    ) {
        let (ev, said, route) = (&f.event, &f.said, &*f.route);
        let method = ev.method.as_deref().unwrap_or_default();
        if conn.pending.len() >= PENDING_MAX && !f.refused {
            self.counters.unspanned.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let parent = match (&said.carried, &said.traceparent) {
            (Some(t), _) if !is_heartbeat(Some(method)) => Parent::Local(
                self.trace_root(session, t, route, ev.session, f.at)
                    .span
                    .span_context()
                    .clone(),
            ),
            (_, Some(sc)) => Parent::Remote(sc.clone()),
            _ => Parent::Local(
                self.session_root(session, route, ev.session, f.at)
                    .span
                    .span_context()
                    .clone(),
            ),
        };
        let name = match &said.tool {
            Some(t) => format!("{} {t}", clip(method)),
            None => clip(method),
        };
        let mut attrs = route.attrs(ev.session);
        attrs.extend(frame_attrs(f));
        attrs.push(KeyValue::new("proxy.request.bytes", ev.size as i64));
        if route.jsonrpc {
            attrs.push(KeyValue::new("jsonrpc.request.id", text(id)));
            attrs.push(KeyValue::new("jsonrpc.protocol.version", "2.0"));
        } else {
            attrs.push(KeyValue::new("contract.request.id", text(id)));
        }
        if let Some(t) = &said.tool {
            attrs.push(KeyValue::new("gen_ai.tool.name", t.clone()));
            attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        if let Some(s) = &session.app_session {
            attrs.push(KeyValue::new(route.session_key(), s.clone()));
        }
        let (Parent::Local(sc) | Parent::Remote(sc)) = parent;
        let mut span = self.start(name, SpanKind::Client, Some(sc), f.at, attrs);
        verdict_events(&mut span, f);
        if f.refused {
            refused(&mut span, ev);
            ending.push(span);
            return;
        }
        let progress = said.progress_token.clone();
        if let Some(mut old) = conn
            .pending
            .insert((ev.dir, id.to_string()), Pending { span, progress })
        {
            old.span
                .set_attribute(KeyValue::new("error.type", "proxy.superseded"));
            old.span.set_status(Status::error(
                "another request reused this id before the reply".to_string(),
            ));
            ending.push(old.span);
        }
    }

    /// Events, notifications, data frames, heartbeats and unmatched replies: span events.
    fn other(&self, session: &mut Session, conn: &mut ConnState, f: &Fact, ending: &mut Vec<Span>) {
        let (ev, said, route) = (&f.event, &f.said, &*f.route);
        let name = ev
            .method
            .as_deref()
            .map(clip)
            .unwrap_or_else(|| kind_name(ev.kind).to_string());
        let mut attrs = frame_attrs(f);
        if let Some(e) = &ev.error {
            attrs.push(KeyValue::new("rpc.response.status_code", text(e)));
        }
        // Data frames: on their stream's trace, counted; the first few (and any gap) as events.
        if let Some((stream, _)) = ev.stream {
            let root = match session.streams.get(&stream).cloned() {
                Some(t) => self.trace_root(session, &t, route, ev.session, f.at),
                None => self.session_root(session, route, ev.session, f.at),
            };
            root.data_frames += 1;
            root.data_bytes += ev.size as u64;
            if root.data_frames <= DATA_EVENTS_MAX || !ev.verdict.is_ok() {
                root.span.add_event_with_timestamp("data", f.at, attrs);
            }
            verdict_events(&mut root.span, f);
            return;
        }
        let method = ev.method.as_deref();
        // MCP progress belongs to the request that asked for it.
        if let Some(token) = &said.progress_of
            && let Some(p) = conn
                .pending
                .values_mut()
                .find(|p| p.progress.as_deref() == Some(token.as_str()))
        {
            p.span.add_event_with_timestamp(name, f.at, attrs);
            verdict_events(&mut p.span, f);
            return;
        }
        if !is_heartbeat(method) {
            if let Some(t) = &said.carried {
                let root = self.trace_root(session, t, route, ev.session, f.at);
                root.span.add_event_with_timestamp(name, f.at, attrs);
                verdict_events(&mut root.span, f);
                return;
            }
            if let Some(sc) = &said.traceparent {
                // A one-way message in the sender's trace: a span of its own, ended at once.
                let mut a = route.attrs(ev.session);
                a.extend(attrs);
                let mut s = self.start(name, SpanKind::Producer, Some(sc.clone()), f.at, a);
                verdict_events(&mut s, f);
                ending.push(s);
                return;
            }
        }
        let root = self.session_root(session, route, ev.session, f.at);
        root.span.add_event_with_timestamp(name, f.at, attrs);
        verdict_events(&mut root.span, f);
    }
}

/// The reply's part of an exchange's span, with the exchange's latency as the inspector
/// measured it, from which the export queue dates the span's start (`at_latency`: the
/// request's fact was stamped when the tracer was handed it, a little after the read).
fn reply(span: &mut Span, f: &Fact) {
    let (ev, said, route) = (&f.event, &f.said, &*f.route);
    span.set_attributes([
        KeyValue::new("proxy.response.bytes", ev.size as i64),
        KeyValue::new("proxy.reply.kind", kind_name(ev.kind)),
    ]);
    if let Some(l) = ev.latency {
        span.set_attribute(KeyValue::new(
            LATENCY_NS,
            i64::try_from(l.as_nanos()).unwrap_or(i64::MAX),
        ));
    }
    if !route.jsonrpc
        && let Some(id) = &ev.id
    {
        span.set_attribute(KeyValue::new("contract.response.id", text(id)));
    }
    verdict_events(span, f);
    if ev.kind == Some(Kind::Error) {
        let code = ev
            .error
            .as_ref()
            .map(text)
            .unwrap_or_else(|| "error".into());
        span.set_attributes([
            KeyValue::new("rpc.response.status_code", code.clone()),
            KeyValue::new("error.type", code.clone()),
        ]);
        span.set_status(Status::error(said.error_message.clone().unwrap_or(code)));
    } else if f.refused {
        span.set_attribute(KeyValue::new("error.type", "contract.refused"));
        span.set_status(Status::error(
            ev.action
                .clone()
                .unwrap_or_else(|| "reply refused by the proxy".into()),
        ));
    }
}

/// A request the proxy answered in the upstream's place: the exchange ends here.
fn refused(span: &mut Span, ev: &Event) {
    let code = match &ev.verdict {
        Verdict::Violation { code: Some(c), .. } => text(c),
        Verdict::Violation { class, .. } => format!("contract.{class}"),
        _ => "contract.refused".into(),
    };
    span.set_attributes([
        KeyValue::new("rpc.response.status_code", code.clone()),
        KeyValue::new("error.type", code),
    ]);
    span.set_status(Status::error(
        ev.action
            .clone()
            .unwrap_or_else(|| "refused by the proxy".into()),
    ));
}

/// An id or code as attribute text: strings bare, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => clip(s),
        other => clip(&other.to_string()),
    }
}

fn dir_name(d: Dir) -> &'static str {
    match d {
        Dir::Up => "up",
        Dir::Down => "down",
    }
}

fn kind_name(k: Option<Kind>) -> &'static str {
    match k {
        Some(Kind::Request) => "request",
        Some(Kind::Response) => "response",
        Some(Kind::Notification) => "notification",
        Some(Kind::Event) => "event",
        Some(Kind::Error) => "error",
        None => "frame",
    }
}

/// Liveness traffic goes to the session, whatever trace id it carries: one trace per ping helps nobody.
fn is_heartbeat(method: Option<&str>) -> bool {
    method.is_some_and(|m| m == "ping" || m == "pong" || m.ends_with("heartbeat"))
}

/// Attributes of one frame, for its span or its span event.
fn frame_attrs(f: &Fact) -> Vec<KeyValue> {
    let (ev, route) = (&f.event, &*f.route);
    let mut a = vec![
        KeyValue::new("proxy.direction", dir_name(ev.dir)),
        KeyValue::new("contract.from", ev.from.clone()),
        KeyValue::new("contract.to", ev.to.clone()),
        KeyValue::new("contract.kind", kind_name(ev.kind)),
        KeyValue::new("proxy.conn", ev.conn as i64),
        KeyValue::new("proxy.bytes", ev.size as i64),
    ];
    if let Some(m) = &ev.method {
        a.push(KeyValue::new("rpc.method", clip(m)));
        if route.mcp {
            a.push(KeyValue::new("mcp.method.name", clip(m)));
        }
    }
    if let Some(id) = &ev.id {
        a.push(KeyValue::new("contract.message.id", text(id)));
    }
    if let Some(t) = &f.said.carried {
        a.push(KeyValue::new(
            format!("{}.trace_id", route.contract),
            clip(t),
        ));
    }
    if let Some((stream, seq)) = ev.stream {
        a.push(KeyValue::new("proxy.data.stream", stream as i64));
        a.push(KeyValue::new("proxy.data.seq", seq as i64));
    }
    a
}

/// Violation and enforcement events for the span the frame concerns.
fn verdict_events(span: &mut Span, f: &Fact) {
    let ev = &f.event;
    match &ev.verdict {
        Verdict::Ok => {}
        Verdict::Violation {
            class,
            code,
            seed,
            reason,
        } => {
            let mut a = vec![
                KeyValue::new("contract.violation.class", *class),
                KeyValue::new("contract.violation.reason", clip(reason)),
                KeyValue::new("proxy.direction", dir_name(ev.dir)),
                KeyValue::new("contract.kind", kind_name(ev.kind)),
            ];
            if let Some(c) = code {
                a.push(KeyValue::new("contract.violation.code", text(c)));
            }
            if let Some(s) = seed {
                a.push(KeyValue::new("contract.violation.seed", clip(s)));
            }
            if let Some(m) = &ev.method {
                a.push(KeyValue::new("rpc.method", clip(m)));
            }
            span.add_event_with_timestamp("contract.violation", f.at, a);
        }
        Verdict::Framing { reason } => {
            span.add_event_with_timestamp(
                "contract.framing_error",
                f.at,
                vec![
                    KeyValue::new("contract.violation.reason", clip(reason)),
                    KeyValue::new("proxy.direction", dir_name(ev.dir)),
                ],
            );
        }
    }
    if let Some(action) = &ev.action {
        span.add_event_with_timestamp(
            "contract.enforcement",
            f.at,
            vec![
                KeyValue::new("contract.action", clip(action)),
                KeyValue::new("contract.mode", f.route.mode.clone()),
                KeyValue::new("contract.refused", f.refused),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    //! Playbooks: facts in, the exact spans out, with the facts' own times.

    use super::*;
    use crate::trace::fact::Said;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor};
    use std::sync::Mutex;
    use std::time::Duration;

    /// Ended spans, in the order they ended.
    #[derive(Debug, Clone, Default)]
    struct Ended(Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Ended {
        fn on_start(&self, _: &mut Span, _: &Context) {}
        fn on_end(&self, span: SpanData) {
            if let Ok(mut v) = self.0.lock() {
                v.push(span);
            }
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    impl Ended {
        fn names(&self) -> Vec<String> {
            self.take().iter().map(|s| s.name.to_string()).collect()
        }
        fn take(&self) -> Vec<SpanData> {
            self.0.lock().map(|v| v.clone()).unwrap_or_default()
        }
    }

    fn book() -> (Book, Ended) {
        let ended = Ended::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(ended.clone())
            .with_id_generator(Ids::default())
            .build();
        (Book::new(provider.tracer("test"), Arc::default()), ended)
    }

    /// A route of a contract that is none of the built-in four: an envelope with a
    /// carried trace id, and its own names for everything.
    fn route() -> Arc<RouteFacts> {
        Arc::new(RouteFacts {
            name: "jobs".into(),
            channel: "work".into(),
            contract: "jobs".into(),
            jsonrpc: false,
            mcp: false,
            mode: "enforce".into(),
            network: vec![KeyValue::new("network.transport", "unix")],
        })
    }

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_millis(ms)
    }

    fn frame(kind: Kind, method: &str, dir: Dir, at: u64, said: Said) -> Item {
        let (from, to) = match dir {
            Dir::Down => ("client", "worker"),
            Dir::Up => ("worker", "client"),
        };
        let mut event = Event::bare("jobs", 1, 1, "work", dir, (from.into(), to.into()), 40);
        event.kind = Some(kind);
        event.method = Some(method.into());
        Item::Frame(Box::new(Fact {
            route: route(),
            event,
            refused: false,
            at: t(at),
            said,
        }))
    }

    fn carried(trace: &str) -> Said {
        Said {
            carried: Some(trace.into()),
            ..Said::default()
        }
    }

    #[test]
    fn an_exchange_lasts_from_request_to_reply_whenever_it_is_booked() {
        let (mut book, ended) = book();
        book.take(frame(
            Kind::Request,
            "job.run",
            Dir::Down,
            100,
            Said {
                request_id: Some(Value::from("r-1")),
                ..carried("t-1")
            },
        ));
        let mut reply = frame(
            Kind::Response,
            "job.run",
            Dir::Up,
            130,
            Said {
                correlation: Some(Value::from("r-1")),
                ..carried("t-1")
            },
        );
        if let Item::Frame(f) = &mut reply {
            // The inspector read the request 28 ms before the reply.
            f.event.latency = Some(Duration::from_millis(28));
        }
        book.take(reply);
        assert_eq!(
            ended.names(),
            ["job.run"],
            "the exchange ends with its reply"
        );
        book.take(Item::Note {
            conn: 1,
            text: "closed".into(),
            at: t(150),
        });
        let spans = ended.take();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            ["job.run", "jobs trace"],
            "the session's last connection closed"
        );
        let (call, root) = (&spans[0], &spans[1]);
        // The export queue moves the start back to the inspector's latency (`at_latency`).
        assert_eq!((call.start_time, call.end_time), (t(100), t(130)));
        assert_eq!(
            call.attributes
                .iter()
                .find(|kv| kv.key.as_str() == LATENCY_NS)
                .map(|kv| kv.value.clone()),
            Some(opentelemetry::Value::I64(28_000_000))
        );
        assert_eq!((root.start_time, root.end_time), (t(100), t(150)));
        assert_eq!(call.parent_span_id, root.span_context.span_id());
        assert_eq!(
            root.span_context.trace_id(),
            carried_trace_id("t-1"),
            "the carried trace id names the trace"
        );
    }

    #[test]
    fn events_keep_their_frames_times_and_a_close_ends_what_waits() {
        let (mut book, ended) = book();
        book.take(frame(
            Kind::Notification,
            "heartbeat",
            Dir::Down,
            10,
            Said::default(),
        ));
        book.take(frame(
            Kind::Request,
            "job.run",
            Dir::Down,
            20,
            Said {
                request_id: Some(Value::from(7)),
                ..Said::default()
            },
        ));
        book.take(frame(
            Kind::Event,
            "job.progress",
            Dir::Up,
            25,
            Said::default(),
        ));
        assert!(ended.take().is_empty(), "nothing has ended yet");
        book.close(t(40));
        let spans = ended.take();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["job.run", "jobs session"]);
        let (call, session) = (&spans[0], &spans[1]);
        assert_eq!((call.start_time, call.end_time), (t(20), t(40)));
        assert_eq!(
            call.status,
            Status::error("the proxy stopped before the reply")
        );
        let events: Vec<(&str, SystemTime)> = session
            .events
            .iter()
            .map(|e| (e.name.as_ref(), e.timestamp))
            .collect();
        assert_eq!(events, [("heartbeat", t(10)), ("job.progress", t(25))]);
        assert_eq!((session.start_time, session.end_time), (t(10), t(40)));
        book.take(frame(
            Kind::Event,
            "job.progress",
            Dir::Up,
            50,
            Said::default(),
        ));
        book.close(t(60));
        assert_eq!(ended.take().len(), 2, "a closed book takes nothing more");
    }
}
