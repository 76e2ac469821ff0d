//! Rows: what the web view knows of each inspected frame, kept within bounds.
//!
//! The store keeps the newest rows up to a row count and a byte bound, and counts what it
//! evicts, so a long run neither grows without end nor loses rows silently. It pairs each
//! response with its request as they pass, keeps a per-second rate for the last minutes,
//! and wakes the live streams on every change.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use contract::model::Kind;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;

use crate::inspect::{Event, Inspection, Verdict};
use crate::log::Filter;
use crate::relay::{Route, Sink};

/// Payload bytes kept per row for the detail view; the rest is counted, not kept.
pub const RAW_KEPT: usize = 16 * 1024;
/// Rows one page of the API returns at most.
pub const PAGE_MAX: usize = 1000;
/// Seconds of per-second rate kept.
const RATE_SECONDS: usize = 120;
/// Requests waiting for their answer, remembered for pairing; past it the oldest go.
const PENDING_MAX: usize = 10_000;

/// How much the store keeps.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Rows kept.
    pub rows: usize,
    /// Payload and decoded-message bytes kept, about.
    pub bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            rows: super::KEEP_DEFAULT,
            bytes: 256 << 20,
        }
    }
}

/// One inspected frame, as the web view shows it.
#[derive(Debug, Clone)]
pub struct Row {
    /// Position in the run, from 0; stays with the row when older rows are evicted.
    pub n: u64,
    /// When the proxy saw it, seconds since the Unix epoch.
    pub t: f64,
    /// What the inspector said (as `--log json` prints it).
    pub event: Event,
    /// The decoded message, when the frame parsed (not kept past [`RAW_KEPT`] bytes).
    pub message: Option<Value>,
    /// The frame's payload as it travelled, up to [`RAW_KEPT`] bytes.
    pub raw: Vec<u8>,
    /// The length of what the proxy holds of the frame.
    pub raw_len: usize,
    /// `raw` is the bytes as they travelled, framing included (what a broken framing
    /// left), not a payload.
    pub framed: bool,
    /// The id of the request this answers (its correlation, else its id), for pairing.
    pub answers: Option<Value>,
}

impl Row {
    /// A row for `event`, keeping at most [`RAW_KEPT`] bytes of `raw`.
    pub fn new(n: u64, t: f64, event: Event, message: Option<Value>, raw: &[u8]) -> Row {
        let big = raw.len() > RAW_KEPT;
        Row {
            n,
            t,
            event,
            message: if big { None } else { message },
            raw: raw[..raw.len().min(RAW_KEPT)].to_vec(),
            raw_len: raw.len(),
            framed: false,
            answers: None,
        }
    }

    /// The row as the API sends it: the `--log json` line plus `n`.
    pub fn summary(&self) -> Value {
        let mut v = serde_json::to_value(&self.event).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("n".into(), self.n.into());
            m.insert("time".into(), self.t.into());
        }
        v
    }

    fn weight(&self) -> usize {
        // The decoded message costs about its text again.
        self.raw.len() * if self.message.is_some() { 2 } else { 1 } + 256
    }

    fn is_violation(&self) -> bool {
        !self.event.verdict.is_ok()
    }
}

/// One page of rows that pass a query.
#[derive(Debug, Serialize)]
pub struct Page {
    /// The rows, as [`Row::summary`].
    pub rows: Vec<Value>,
    /// Every kept row that passes the query.
    pub total: usize,
    /// Rows evicted so far.
    pub evicted: u64,
}

/// Which rows a page holds.
#[derive(Debug, Default, Clone)]
pub struct Query {
    /// Conditions, as `--filter` takes them.
    pub filters: Vec<Filter>,
    /// Text the payload must contain, case-insensitive.
    pub text: Option<String>,
    /// Only this session.
    pub session: Option<u64>,
    /// Skip this many passing rows.
    pub offset: usize,
    /// Return at most this many (capped at [`PAGE_MAX`]).
    pub limit: usize,
}

impl Query {
    fn passes(&self, r: &Row) -> bool {
        self.session.is_none_or(|s| r.event.session == s)
            && self.filters.iter().all(|f| f.matches(&r.event))
            && self.text.as_deref().is_none_or(|q| contains(&r.raw, q))
    }
}

/// Whether `raw` holds `needle`, ASCII letters in any case; allocation-free, since a
/// search runs over every kept row.
fn contains(raw: &[u8], needle: &str) -> bool {
    let n = needle.as_bytes();
    n.is_empty() || raw.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

/// What one session holds.
#[derive(Debug, Serialize)]
pub struct SessionInfo {
    /// The session number.
    pub session: u64,
    /// Routes its rows came through, in first-seen order.
    pub routes: Vec<String>,
    /// Rows kept.
    pub rows: usize,
    /// Of which violations.
    pub violations: usize,
    /// First and last row number.
    pub first: u64,
    /// Last row number.
    pub last: u64,
}

/// Counters the page shows; the relay's own come from the run (absent for a recording).
#[derive(Debug, Default, Clone, Serialize)]
pub struct Counts {
    /// Frames seen.
    pub messages: u64,
    /// Of which broke the contract.
    pub violations: u64,
    /// Rows kept now.
    pub rows: usize,
    /// Rows evicted.
    pub evicted: u64,
    /// Per-second message counts: (unix second, messages).
    pub rate: Vec<(u64, u64)>,
}

#[derive(Default)]
struct Inner {
    rows: VecDeque<Row>,
    /// Row numbers paired both ways (request ↔ answer).
    pairs: HashMap<u64, u64>,
    /// Requests waiting: (session, asker, id) → row.
    pending: HashMap<(u64, String, String), u64>,
    next: u64,
    bytes: usize,
    counts: Counts,
}

/// The rows of a run or a recording (see the module doc).
pub struct Store {
    bounds: Bounds,
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
}

impl Store {
    /// An empty store keeping within `bounds`.
    pub fn new(bounds: Bounds) -> Arc<Store> {
        Arc::new(Store {
            bounds,
            inner: Mutex::new(Inner::default()),
            changed: watch::channel(0).0,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What it keeps at most.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// Live streams open now (each holds a receiver).
    pub fn watchers(&self) -> usize {
        self.changed.receiver_count()
    }

    /// A receiver that sees a new value on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Add one frame, seen at `t` (unix seconds).
    pub fn push(&self, t: f64, event: Event, message: Option<Value>, raw: &[u8]) {
        self.push_with(Row::new(0, t, event, message, raw));
    }

    /// Add `row` (its number is given here).
    pub fn push_with(&self, mut row: Row) {
        let version = {
            let mut g = self.lock();
            row.n = g.next;
            g.next += 1;
            g.pair(&row);
            g.count(&row);
            g.bytes += row.weight();
            g.rows.push_back(row);
            g.evict(self.bounds);
            g.next
        };
        self.changed.send_replace(version);
    }

    /// A page of the rows that pass `q`.
    pub fn page(&self, q: &Query) -> Page {
        let g = self.lock();
        let limit = q.limit.min(PAGE_MAX);
        let mut rows = Vec::new();
        let mut total = 0;
        for r in g.rows.iter().filter(|r| q.passes(r)) {
            if total >= q.offset && rows.len() < limit {
                rows.push(r.summary());
            }
            total += 1;
        }
        Page {
            rows,
            total,
            evicted: g.counts.evicted,
        }
    }

    /// Row `n` and the row paired with it, while kept.
    pub fn get(&self, n: u64) -> Option<(Row, Option<u64>)> {
        let g = self.lock();
        let first = g.rows.front()?.n;
        let row = g.rows.get(usize::try_from(n.checked_sub(first)?).ok()?)?;
        Some((row.clone(), g.pairs.get(&n).copied()))
    }

    /// The kept rows of `session` (`None`: the session of the oldest kept row), in order.
    pub fn session_rows(&self, session: Option<u64>) -> Vec<Row> {
        let g = self.lock();
        let Some(s) = session.or_else(|| g.rows.front().map(|r| r.event.session)) else {
            return Vec::new();
        };
        g.rows
            .iter()
            .filter(|r| r.event.session == s)
            .cloned()
            .collect()
    }

    /// Call `f` on every kept row, in order, without copying them.
    pub fn each(&self, mut f: impl FnMut(&Row)) {
        self.lock().rows.iter().for_each(&mut f);
    }

    /// Every session with rows kept, in order.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let g = self.lock();
        let mut out: std::collections::BTreeMap<u64, SessionInfo> = Default::default();
        for r in &g.rows {
            let info = out.entry(r.event.session).or_insert_with(|| SessionInfo {
                session: r.event.session,
                routes: Vec::new(),
                rows: 0,
                violations: 0,
                first: r.n,
                last: r.n,
            });
            info.rows += 1;
            info.violations += usize::from(r.is_violation());
            info.last = r.n;
            if !info.routes.contains(&r.event.route) {
                info.routes.push(r.event.route.clone());
            }
        }
        out.into_values().collect()
    }

    /// The counters and the rate.
    pub fn counts(&self) -> Counts {
        let g = self.lock();
        let mut c = g.counts.clone();
        c.rows = g.rows.len();
        c
    }
}

impl Inner {
    fn count(&mut self, row: &Row) {
        let c = &mut self.counts;
        c.messages += 1;
        c.violations += u64::from(row.is_violation());
        // Unix seconds fit easily; a clock before 1970 counts as second 0.
        let sec = row.t.max(0.0) as u64;
        match c.rate.last_mut() {
            Some((s, n)) if *s == sec => *n += 1,
            _ => c.rate.push((sec, 1)),
        }
        if c.rate.len() > RATE_SECONDS {
            c.rate.remove(0);
        }
    }

    fn pair(&mut self, row: &Row) {
        let e = &row.event;
        let id = match e.kind {
            Some(Kind::Response | Kind::Error) => row.answers.as_ref().or(e.id.as_ref()),
            _ => e.id.as_ref(),
        };
        let Some(id) = id.map(Value::to_string) else {
            return;
        };
        match e.kind {
            Some(Kind::Request) => {
                if self.pending.len() >= PENDING_MAX {
                    self.pending.clear();
                }
                self.pending.insert((e.session, e.from.clone(), id), row.n);
            }
            Some(Kind::Response | Kind::Error) => {
                if let Some(q) = self.pending.remove(&(e.session, e.to.clone(), id)) {
                    self.pairs.insert(q, row.n);
                    self.pairs.insert(row.n, q);
                }
            }
            _ => {}
        }
    }

    fn evict(&mut self, b: Bounds) {
        while self.rows.len() > b.rows || (self.bytes > b.bytes && self.rows.len() > 1) {
            let Some(old) = self.rows.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(old.weight());
            self.counts.evicted += 1;
            if let Some(p) = self.pairs.remove(&old.n) {
                self.pairs.remove(&p);
            }
        }
    }
}

impl Sink for Store {
    fn frame(&self, route: &Route, ins: &Inspection, raw: &[u8]) {
        let t = crate::record::unix_nanos_now() as f64 / 1e9;
        let mut row = Row::new(0, t, ins.event.clone(), ins.message.clone(), raw);
        row.framed = ins.form == crate::inspect::RawForm::AsTravelled;
        row.answers = answered(route.wire.contract(), &row);
        self.push_with(row);
    }

    fn note(&self, _route: &str, _conn: u64, _text: &str) {}
}

/// The id of the request `row` answers: the correlation member of its channel's binding
/// when it has one (an envelope's `correlation_id`), else none (JSON-RPC answers carry the
/// request's own id).
pub fn answered(c: &contract::Contract, row: &Row) -> Option<Value> {
    use contract::model::Binding;
    let ch = c.channels.get(&row.event.channel)?;
    let at = match ch.binding.as_ref()? {
        Binding::Envelope { correlation, .. } | Binding::Tagged { correlation, .. } => {
            correlation.as_deref()?
        }
        Binding::Jsonrpc { .. } => return None,
    };
    row.message
        .as_ref()?
        .pointer(at)
        .filter(|v| !v.is_null())
        .cloned()
}

/// A recording loaded: its header, the store of its rows, and each route's contract.
pub type Recording = (
    crate::record::Header,
    Arc<Store>,
    Vec<(String, Arc<contract::Contract>)>,
);

/// Fill a store from recording `path`, each route's contract as `contract_of` resolves it
/// from the header: the header and the store.
pub fn from_recording<E>(
    path: &std::path::Path,
    bounds: Bounds,
    contract_of: impl Fn(
        &crate::record::Header,
        &crate::record::RouteInfo,
    ) -> Result<Arc<contract::Contract>, E>,
) -> Result<Recording, Loaded<E>> {
    let reader = crate::record::Reader::open(path).map_err(Loaded::Record)?;
    let header = reader.header().clone();
    let mut contracts = Vec::new();
    for r in &header.routes {
        contracts.push((
            r.name.clone(),
            contract_of(&header, r).map_err(Loaded::Contract)?,
        ));
    }
    let store = Store::new(bounds);
    for rec in reader {
        let rec = rec.map_err(Loaded::Record)?;
        let Some(dir) = rec.direction() else {
            continue;
        };
        let decoded = rec.decoded();
        let event = (decoded.as_ref())
            .and_then(|m| m.get("event").and_then(crate::record::event_from_json))
            .unwrap_or_else(|| crate::record::bare_event(&header, &rec, dir));
        let message = decoded.and_then(|mut m| m.remove("message"));
        let t = rec.unix_nanos as f64 / 1e9;
        let mut row = Row::new(0, t, event, message, &rec.raw);
        row.framed = rec.form == crate::record::Form::AsTravelled as i32;
        let c = contracts.iter().find(|(n, _)| *n == row.event.route);
        row.answers = c.and_then(|(_, c)| answered(c, &row));
        store.push_with(row);
    }
    Ok((header, store, contracts))
}

/// Why a recording could not be loaded into a store.
#[derive(Debug, thiserror::Error)]
pub enum Loaded<E> {
    /// The file.
    #[error(transparent)]
    Record(crate::record::RecordError),
    /// A route's contract.
    #[error("{0}")]
    Contract(E),
}

/// Whether a verdict is a violation of the contract (not a framing break).
pub fn violation_class(v: &Verdict) -> Option<&str> {
    match v {
        Verdict::Violation { class, .. } => Some(class),
        Verdict::Framing { .. } => Some("framing"),
        Verdict::Ok => None,
    }
}
