//! Typed access to what a contract holds, for every tool that acts on it.
//!
//! A contract writes each number once, in its own unit, sometimes as an expression over
//! other limits; codes live in the error catalog and in named code tables. Policies,
//! conformance suites, the inspector and the demo all need the same values as Rust types
//! (a `Duration`, a byte count, a token bucket, the wire value of a named close code).
//! This module is the one place that evaluates and converts them, so no caller parses a
//! limit or scans a code table again, and every caller agrees on units.
//!
//! Lookups that fail name what was missing: a contract that lacks a value a tool needs
//! gets a specific error, never a default.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::{Value, json};

use crate::check::{Dim, Evaluator, to_base};
use crate::model::{
    Action, Binding, Claim, CodeKind, CodeTable, CodeValue, Contract, DeclarationForm, ErrorEntry,
    Kind, Limit, Note, Part, StateMachine, Trigger,
};
use crate::pointer::set;

/// A value a tool asked the contract for and did not get.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AccessError {
    /// No limit by this name.
    #[error("the contract has no limit {0:?}")]
    NoLimit(String),
    /// The limit exists but does not evaluate (a cycle, mixed dimensions).
    #[error("limit {name:?} does not evaluate: {reason}")]
    Unevaluable {
        /// The limit.
        name: String,
        /// Why.
        reason: String,
    },
    /// The limit is of another dimension or shape than the caller needs.
    #[error("limit {name:?} is {found}, not {wanted}")]
    WrongKind {
        /// The limit.
        name: String,
        /// What the caller asked for.
        wanted: &'static str,
        /// What the limit is.
        found: String,
    },
    /// No error catalog entry has this name or code.
    #[error("the contract's error catalog has no {0}")]
    NoError(String),
    /// No code table by this name.
    #[error("the contract has no code table {0:?}")]
    NoTable(String),
    /// The table has no value by this name.
    #[error("code table {table:?} has no value {name}")]
    NoCode {
        /// The table.
        table: String,
        /// The name or value looked for.
        name: String,
    },
    /// No note by this id.
    #[error("the contract has no note {0:?}")]
    NoNote(String),
    /// No state machine by this name.
    #[error("the contract has no state machine {0:?}")]
    NoMachine(String),
    /// No channel by this name, or it has no message binding.
    #[error("the contract has no channel {0:?} with a message binding")]
    NoBinding(String),
}

/// A token bucket: `amount` units (messages or bytes) per `per`, at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Units refilled every `per`, in base units (a count, or bytes).
    pub amount: f64,
    /// The refill period.
    pub per: Duration,
    /// The bucket size, in base units.
    pub burst: u64,
}

impl Rate {
    /// The time one unit takes to refill, and the bucket size as a non-zero count: the
    /// shape a GCRA limiter (governor's `Quota::with_period(..).allow_burst(..)`) takes.
    pub fn token_period(&self) -> Option<(Duration, NonZeroU32)> {
        if !(self.amount.is_finite() && self.amount > 0.0) {
            return None;
        }
        let period = Duration::try_from_secs_f64(self.per.as_secs_f64() / self.amount).ok()?;
        let burst = NonZeroU32::new(u32::try_from(self.burst).ok()?)?;
        Some((period, burst))
    }
}

/// The environment variable by which a test run scales every contract duration: the
/// conformance suite and the reference peers read it, so a
/// 20-second heartbeat check can run in 4 s (`CONTRACT_TIME_SCALE=0.2`). Unset means 1.
pub const TIME_SCALE_ENV: &str = "CONTRACT_TIME_SCALE";

/// The scale [`TIME_SCALE_ENV`] asks for: 1 when unset, an error naming the variable
/// when it is not a positive number.
pub fn env_time_scale() -> Result<f64, String> {
    match std::env::var(TIME_SCALE_ENV) {
        Err(_) => Ok(1.0),
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| format!("{TIME_SCALE_ENV}={v:?}: expected a positive number")),
    }
}

/// One limit, evaluated.
#[derive(Debug, Clone)]
struct Evaluated {
    /// Value in its dimension's base unit (bytes, seconds, or a plain number).
    base: f64,
    dim: Dim,
}

/// Every limit of a contract, evaluated once, converted on request.
///
/// `time_scale` multiplies every duration handed out (deadlines, intervals, rate
/// periods): a test harness that wants a contract's 5 s heartbeat to pass in 0.5 s
/// scales time by 0.1 instead of editing the contract.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Every limit as declared, shared by every copy: a connection's own copy (values the
    /// wire carried) differs in its values only, so it costs a few hundred bytes, not the
    /// contract's limit table.
    defs: Arc<IndexMap<String, Limit>>,
    /// Each limit's value (or why it has none), in `defs`' order.
    values: Arc<[Result<Evaluated, String>]>,
    time_scale: f64,
    /// Values the wire carried ([`Limits::carry`]), in each limit's own unit, divided by
    /// the time scale for durations: a carried duration is real time, never scaled again.
    given: HashMap<String, f64>,
}

impl Limits {
    /// Evaluate every limit of `c`. A limit that does not evaluate is kept as its error,
    /// reported when (and only when) a caller asks for it.
    pub fn new(c: &Contract) -> Limits {
        let given = HashMap::new();
        Limits {
            defs: Arc::new(c.limits.clone()),
            values: Self::evaluate(c, &given),
            time_scale: 1.0,
            given,
        }
    }

    fn evaluate(c: &Contract, given: &HashMap<String, f64>) -> Arc<[Result<Evaluated, String>]> {
        let mut ev = Evaluator::with_given(c, given);
        c.limits
            .iter()
            .map(|(name, l)| {
                ev.limit_value(name).map(|v| {
                    let (base, dim) = to_base(l.unit, v);
                    Evaluated { base, dim }
                })
            })
            .collect()
    }

    /// Take the values `m` (whoever sent it) carries for limits of `c` (each limit's
    /// `carried`): they hold from now on, and every limit computed from them follows. A
    /// `lowerOnly` value above the one in force is ignored. The names of the limits whose
    /// value changed.
    pub fn carry(&mut self, c: &Contract, m: &crate::wire::Message) -> Vec<String> {
        let mut changed = Vec::new();
        for (name, l) in &c.limits {
            for carrier in l.carried.iter().filter(|k| !k.repeats) {
                let Some((v, now)) = self.stated(c, (name, l), carrier, m) else {
                    continue;
                };
                let lowers = now.is_none_or(|n| v < n);
                if (lowers || !carrier.lower_only) && now != Some(v) {
                    self.given.insert(name.clone(), v);
                    changed.push(name.clone());
                }
            }
        }
        if !changed.is_empty() {
            // Values are kept in the order of the contract's limits: a caller handing
            // another contract than the one these limits came from gets its table too.
            if !self.defs.keys().eq(c.limits.keys()) {
                self.defs = Arc::new(c.limits.clone());
            }
            self.values = Self::evaluate(c, &self.given);
        }
        changed
    }

    /// The `lowerOnly` values `m` carries above the ones in force, as
    /// (limit, stated, in force), in the limits' units: a budget raised over the wire,
    /// which its receiver ignores (toolchannel's heartbeat answers may only lower them).
    pub fn raised(&self, c: &Contract, m: &crate::wire::Message) -> Vec<(String, f64, f64)> {
        self.breaking(c, m, |k| k.lower_only, |v, now| v > now)
    }

    /// The values `m` carries where it may only repeat the one in force
    /// but states another, as (limit, stated, in force), in the limits' units
    /// (toolchannel's release `graceSeconds`).
    pub fn misrepeated(&self, c: &Contract, m: &crate::wire::Message) -> Vec<(String, f64, f64)> {
        let differs = |v: f64, now: f64| (v - now).abs() > now.abs() * 1e-9;
        self.breaking(c, m, |k| k.repeats, differs)
    }

    /// The values `m` states at the carriers `which` picks that `breaks` the one in force,
    /// as (limit, stated, in force).
    fn breaking(
        &self,
        c: &Contract,
        m: &crate::wire::Message,
        which: impl Fn(&crate::model::LimitCarrier) -> bool,
        breaks: impl Fn(f64, f64) -> bool,
    ) -> Vec<(String, f64, f64)> {
        let mut out = Vec::new();
        for (name, l) in &c.limits {
            for carrier in l.carried.iter().filter(|k| which(k)) {
                if let Some((v, Some(now))) = self.stated(c, (name, l), carrier, m)
                    && breaks(v, now)
                {
                    out.push((name.clone(), v, now));
                }
            }
        }
        out
    }

    /// The value `carrier` of limit `name` finds in `m` (unscaled, in the limit's unit),
    /// with the one in force.
    fn stated(
        &self,
        c: &Contract,
        (name, l): (&str, &Limit),
        carrier: &crate::model::LimitCarrier,
        m: &crate::wire::Message,
    ) -> Option<(f64, Option<f64>)> {
        let v = carrier.value_in(c, m)?;
        let (one, dim) = to_base(l.unit, 1.0);
        let v = match dim {
            Dim::Seconds => v / self.time_scale,
            _ => v,
        };
        Some((v, self.eval(name).map(|e| e.base / one).ok()))
    }

    /// The same limits with every duration multiplied by `factor` (finite, > 0).
    pub fn time_scaled(mut self, factor: f64) -> Limits {
        if factor.is_finite() && factor > 0.0 {
            self.time_scale = factor;
        }
        self
    }

    /// The factor durations are multiplied by (1 unless [`Limits::time_scaled`]).
    pub fn time_scale(&self) -> f64 {
        self.time_scale
    }

    /// The limit as declared.
    pub fn get(&self, name: &str) -> Result<&Limit, AccessError> {
        self.defs
            .get(name)
            .ok_or_else(|| AccessError::NoLimit(name.to_string()))
    }

    fn eval(&self, name: &str) -> Result<&Evaluated, AccessError> {
        match self
            .defs
            .get_index_of(name)
            .and_then(|i| self.values.get(i))
        {
            None => Err(AccessError::NoLimit(name.to_string())),
            Some(Err(reason)) => Err(AccessError::Unevaluable {
                name: name.to_string(),
                reason: reason.clone(),
            }),
            Some(Ok(e)) => Ok(e),
        }
    }

    fn wrong(&self, name: &str, wanted: &'static str, found: impl Into<String>) -> AccessError {
        AccessError::WrongKind {
            name: name.to_string(),
            wanted,
            found: found.into(),
        }
    }

    /// The value in its dimension's base unit: bytes, seconds (unscaled) or a plain number.
    pub fn number(&self, name: &str) -> Result<f64, AccessError> {
        Ok(self.eval(name)?.base)
    }

    /// A non-negative whole number of base units: `wanted` names the caller's need.
    fn whole(&self, name: &str, dim: Dim, wanted: &'static str) -> Result<u64, AccessError> {
        let e = self.eval(name)?;
        if e.dim != dim {
            return Err(self.wrong(name, wanted, dim_name(e.dim)));
        }
        if !(e.base.is_finite() && e.base >= 0.0 && e.base.fract() == 0.0) {
            return Err(self.wrong(name, wanted, format!("{}", e.base)));
        }
        // Whole and non-negative: the cast saturates only beyond u64, which no size reaches.
        Ok(e.base as u64)
    }

    /// A size in bytes.
    pub fn bytes(&self, name: &str) -> Result<u64, AccessError> {
        self.whole(name, Dim::Bytes, "a size in bytes")
    }

    /// A plain count (messages, levels, connections, UTF-16 units, a mode).
    pub fn count(&self, name: &str) -> Result<u64, AccessError> {
        self.whole(name, Dim::Scalar, "a count")
    }

    /// A cap in whatever the limit counts (bytes or units): framing caps may be either.
    pub fn cap(&self, name: &str) -> Result<u64, AccessError> {
        match self.eval(name)?.dim {
            Dim::Seconds => Err(self.wrong(name, "a size or count", "a duration")),
            Dim::Bytes => self.bytes(name),
            Dim::Scalar => self.count(name),
        }
    }

    /// A deadline or interval, times the time scale.
    pub fn duration(&self, name: &str) -> Result<Duration, AccessError> {
        let e = self.eval(name)?;
        if e.dim != Dim::Seconds {
            return Err(self.wrong(name, "a duration", dim_name(e.dim)));
        }
        Duration::try_from_secs_f64(e.base * self.time_scale)
            .map_err(|_| self.wrong(name, "a duration", format!("{} s", e.base)))
    }

    /// The value as the wire carries it (a limit's `carried`): in the limit's own unit,
    /// a duration times the time scale.
    pub fn as_carried(&self, name: &str) -> Result<f64, AccessError> {
        let e = self.eval(name)?;
        let (one, _) = to_base(self.get(name)?.unit, 1.0);
        let scale = match e.dim {
            Dim::Seconds => self.time_scale,
            _ => 1.0,
        };
        Ok(e.base * scale / one)
    }

    /// A Unix file mode (declared in decimal).
    pub fn mode(&self, name: &str) -> Result<u32, AccessError> {
        let n = self.count(name)?;
        u32::try_from(n).map_err(|_| self.wrong(name, "a file mode", n.to_string()))
    }

    /// A token-bucket rate; its period is time-scaled.
    pub fn rate(&self, name: &str) -> Result<Rate, AccessError> {
        let l = self.get(name)?;
        let e = self.eval(name)?;
        let (Some(burst), Some(per)) = (l.burst, l.per_seconds) else {
            return Err(self.wrong(name, "a rate", "missing burst or perSeconds"));
        };
        let per = Duration::try_from_secs_f64(per * self.time_scale)
            .map_err(|_| self.wrong(name, "a rate", format!("perSeconds {per}")))?;
        Ok(Rate {
            amount: e.base,
            per,
            burst: to_base(l.unit, burst as f64).0 as u64,
        })
    }

    /// The limit's machine-readable reaction, when it has one.
    pub fn action(&self, name: &str) -> Option<&Action> {
        self.get(name).ok()?.action.as_ref()
    }

    /// The code of the limit's reaction (an error or close code).
    pub fn action_code(&self, name: &str) -> Option<&Value> {
        self.action(name)?.code.as_ref()
    }

    /// The limit's seed section ("" for an unknown limit: it only labels a report).
    pub fn seed(&self, name: &str) -> &str {
        self.get(name).map(|l| l.seed.as_str()).unwrap_or("")
    }
}

/// The wire codes of a contract by name, its notes and its machines.
impl Contract {
    /// Every limit, evaluated ([`Limits`]).
    pub fn evaluated_limits(&self) -> Limits {
        Limits::new(self)
    }

    /// An error catalog entry by symbolic name, or by a string code (`protocol.bad_frame`).
    pub fn error(&self, name: &str) -> Result<&ErrorEntry, AccessError> {
        self.errors
            .iter()
            .find(|e| e.name.as_deref() == Some(name) || e.code.as_str() == Some(name))
            .ok_or_else(|| AccessError::NoError(format!("error {name:?}")))
    }

    /// The wire code of a named error.
    pub fn error_code(&self, name: &str) -> Result<&Value, AccessError> {
        Ok(&self.error(name)?.code)
    }

    /// The catalog entry for a wire code.
    pub fn error_for(&self, code: &Value) -> Option<&ErrorEntry> {
        self.errors.iter().find(|e| &e.code == code)
    }

    /// Whether an error with wire code `code` may answer `method`: the method lists it, or
    /// the catalog holds it.
    pub fn knows_error(&self, method: Option<&str>, code: &Value) -> bool {
        let listed = method
            .and_then(|m| self.methods.get(m))
            .is_some_and(|m| m.errors.contains(code));
        listed || self.error_for(code).is_some()
    }

    /// The one answer `method` can get, where the contract leaves no other: its result
    /// schema is `false` (it is never served) and it lists exactly one error code
    /// (toolchannel's sampling/createMessage: SAMPLING_DISABLED).
    pub fn only_error(&self, method: &str) -> Option<&Value> {
        let m = self.methods.get(method)?;
        match (&m.result, m.errors.as_slice()) {
            (Some(Value::Bool(false)), [code]) => Some(code),
            _ => None,
        }
    }

    /// The capabilities a message of `method` needs: the method's own `capability`, then
    /// those of each `needs` entry that holds on `message` ([`crate::model::Need::holds`]), each with the
    /// pointer of the entry that asks for it.
    pub fn needed_capabilities(&self, method: &str, message: &Value) -> Vec<(&str, String)> {
        self.needs_of(method, message, true)
    }

    /// The capabilities `msg` needs, as [`Contract::needed_capabilities`] finds them for a
    /// call; an answer needs only what its `needs` entries ask of its values (rukh's
    /// completion carrying a commandResult), since the method's own `capability` gates the
    /// call.
    pub fn capabilities_needed(&self, msg: &crate::wire::Message) -> Vec<(&str, String)> {
        let Some(method) = msg.method.as_deref() else {
            return Vec::new();
        };
        self.needs_of(method, &msg.value, msg.is_call())
    }

    /// What `message` of `method` needs: the method's own `capability` when `own`, then
    /// each `needs` entry's that holds on it, each with the entry's pointer.
    fn needs_of(&self, method: &str, message: &Value, own: bool) -> Vec<(&str, String)> {
        let Some(m) = self.methods.get(method) else {
            return Vec::new();
        };
        // Most methods need nothing: no pointer is built for them (asked of every message).
        if (m.capability.is_none() || !own) && m.needs.is_empty() {
            return Vec::new();
        }
        let base = crate::pointer::join("/methods", [method]);
        let own = (m.capability.as_deref())
            .filter(|_| own)
            .map(|cap| (cap, format!("{base}/capability")));
        let by_value = (m.needs.iter().enumerate())
            .filter(|(_, n)| n.holds(message))
            .flat_map(|(i, n)| {
                let at = format!("{base}/needs/{i}");
                (n.capabilities.iter()).map(move |cap| (cap.as_str(), at.clone()))
            });
        own.into_iter().chain(by_value).collect()
    }

    /// Every capability some message of `method` may need: its `capability` and those its
    /// `needs` name.
    pub fn gated_capabilities(&self, method: &str) -> Vec<&str> {
        let Some(m) = self.methods.get(method) else {
            return Vec::new();
        };
        let needs = m.needs.iter().flat_map(|n| n.capabilities.iter());
        (m.capability.iter())
            .chain(needs)
            .map(String::as_str)
            .collect()
    }

    /// The capabilities `msg`, sent by `party`, declares, when it is that party's declaration
    /// (its `declares` names the message's method and part): the list's strings, or the
    /// object's member names, as its `form` says; none where the pointer holds neither.
    pub fn declared_capabilities(
        &self,
        party: &str,
        msg: &crate::wire::Message,
    ) -> Option<Vec<String>> {
        let d = self.parties.get(party)?.declares.as_ref()?;
        let kind = match d.part {
            Part::Call => self.methods.get(&d.method)?.kind,
            Part::Result => Kind::Response,
            Part::Error => Kind::Error,
        };
        if msg.method.as_deref() != Some(d.method.as_str()) || msg.kind != kind {
            return None;
        }
        Some(
            match (d.form, crate::pointer::get(&msg.value, &d.pointer)) {
                (DeclarationForm::List, Some(Value::Array(a))) => {
                    (a.iter().filter_map(Value::as_str).map(String::from)).collect()
                }
                (DeclarationForm::ObjectKeys, Some(Value::Object(o))) => {
                    o.keys().cloned().collect()
                }
                _ => Vec::new(),
            },
        )
    }

    /// A code table by name.
    pub fn code_table(&self, table: &str) -> Result<&CodeTable, AccessError> {
        self.codes
            .get(table)
            .ok_or_else(|| AccessError::NoTable(table.to_string()))
    }

    /// A value of a code table by its symbolic name, or by its string value.
    pub fn code(&self, table: &str, name: &str) -> Result<&CodeValue, AccessError> {
        self.code_table(table)?
            .values
            .iter()
            .find(|v| v.name.as_deref() == Some(name) || v.value.as_str() == Some(name))
            .ok_or_else(|| AccessError::NoCode {
                table: table.to_string(),
                name: format!("{name:?}"),
            })
    }

    /// The value of a code table with this wire value.
    pub fn code_for(&self, table: &str, value: &Value) -> Result<&CodeValue, AccessError> {
        self.code_table(table)?
            .values
            .iter()
            .find(|v| &v.value == value)
            .ok_or_else(|| AccessError::NoCode {
                table: table.to_string(),
                name: value.to_string(),
            })
    }

    /// Whether `party` makes claim `cl`: the claim's message names it as the sender, or,
    /// naming none, its method is one `party` sends.
    pub fn claims_by(&self, cl: &Claim, party: &str) -> bool {
        let Trigger::Message { method, from, .. } = &cl.message else {
            return false;
        };
        match from {
            Some(f) => f == party,
            None => (method.as_ref())
                .and_then(|m| self.methods.get(m))
                .is_some_and(|m| m.from.iter().any(|f| f == party)),
        }
    }

    /// Whether `party` sends the message `p` is in: the call of a method it sends, or the
    /// answer to one another party sends.
    pub fn states(&self, p: &crate::model::Place, party: &str) -> bool {
        let Some(m) = self.methods.get(&p.method) else {
            return false;
        };
        let calls = m.from.iter().any(|f| f == party);
        match p.part() {
            Some(Part::Call) => calls,
            Some(_) => !calls && self.parties.contains_key(party),
            None => false,
        }
    }

    /// The value `value` of any code table of `kind` (a close code by its number, an HTTP
    /// status), with its name and what it `maps`.
    pub fn code_of_kind(&self, kind: CodeKind, value: u16) -> Option<&CodeValue> {
        (self.codes.values())
            .filter(|t| t.kind == kind)
            .flat_map(|t| &t.values)
            .find(|v| v.value == value)
    }

    /// The close codes after which `party`'s process owes an exit, with that exit: each
    /// value of a close-code table that `maps` into an exit-code table of `party`, in the
    /// tables' order, as `(close table, close code, exit table, exit code)`.
    pub fn exits_after_close(&self, party: &str) -> Vec<(&str, u16, &str, i32)> {
        self.exits_after(CodeKind::CloseCode, party)
    }

    /// The exit `party`'s process owes after its WebSocket upgrade was answered `status`:
    /// the value an `http-status` table's entry `maps` into an exit-code table of `party`.
    pub fn exit_after_status(&self, party: &str, status: u16) -> Option<i32> {
        self.exits_after(CodeKind::HttpStatus, party)
            .into_iter()
            .find(|e| e.1 == status)
            .map(|e| e.3)
    }

    /// Each value of a `kind` table that `maps` into an exit-code table of `party`.
    fn exits_after(&self, kind: CodeKind, party: &str) -> Vec<(&str, u16, &str, i32)> {
        let exit_tables: Vec<&str> = self
            .codes
            .iter()
            .filter(|(_, t)| t.party.as_deref() == Some(party))
            .map(|(n, _)| n.as_str())
            .collect();
        let mut out = Vec::new();
        for (name, t) in self.codes.iter().filter(|(_, t)| t.kind == kind) {
            for v in &t.values {
                let code = v.value.as_u64().and_then(|n| u16::try_from(n).ok());
                for exits in &exit_tables {
                    let exit = v.mapped(exits).and_then(Value::as_i64);
                    if let (Some(code), Some(exit)) =
                        (code, exit.and_then(|e| i32::try_from(e).ok()))
                    {
                        out.push((name.as_str(), code, *exits, exit));
                    }
                }
            }
        }
        out
    }

    /// A note by id.
    pub fn note(&self, id: &str) -> Result<&Note, AccessError> {
        self.notes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| AccessError::NoNote(id.to_string()))
    }

    /// A note's seed section with its id, e.g. `Requests and responses (R-10)`, to label a
    /// ruling; the bare id when the note is missing (a label, never a rule).
    pub fn note_seed(&self, id: &str) -> String {
        self.note(id)
            .map(|n| format!("{} ({id})", n.seed))
            .unwrap_or_else(|_| id.to_string())
    }

    /// A state machine by name.
    pub fn machine(&self, name: &str) -> Result<&StateMachine, AccessError> {
        self.state_machines
            .get(name)
            .ok_or_else(|| AccessError::NoMachine(name.to_string()))
    }

    /// The values of a declared protocol version, as listed (first = preferred).
    pub fn version_values(&self, name: &str) -> &[Value] {
        self.versions
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.values.as_slice())
            .unwrap_or(&[])
    }

    /// An error reply answering `request` (a whole wire message, if there is one) with the
    /// catalog's `code`, shaped by `channel`'s binding (its `data` keeping only the members
    /// the channel's message schema lets an error's data hold, where it closes them):
    /// - JSON-RPC: `{"jsonrpc", "id", "error": {"code", "message", "data"?}}`, the message
    ///   being the entry's symbolic name (else `detail`), the id the request's (else null);
    /// - envelope: the binding's error kind, the request's method, its id as the
    ///   correlation, its trace id and version, and a payload `{"code", "category",
    ///   "retryable", "message", "details"?}` from the catalog. The reply's own id is the
    ///   caller's to give (`reply_id`); envelope fields no binding names (a kernel
    ///   `timestamp`) are the caller's to add.
    pub fn error_reply(
        &self,
        channel: &str,
        request: Option<&Value>,
        reply_id: Option<Value>,
        code: &Value,
        detail: &str,
        data: Option<Value>,
    ) -> Result<Value, AccessError> {
        let binding = self
            .channels
            .get(channel)
            .and_then(|c| c.binding.as_ref())
            .ok_or_else(|| AccessError::NoBinding(channel.to_string()))?;
        let data = match (data, self.error_data_members(channel)) {
            (Some(Value::Object(mut d)), Some(allowed)) => {
                d.retain(|k, _| allowed.contains(k));
                (!d.is_empty()).then_some(Value::Object(d))
            }
            (data, _) => data,
        };
        match binding {
            Binding::Jsonrpc { .. } => {
                let id = request.and_then(|r| r.get("id"));
                Ok(self.jsonrpc_error(id, code, detail, data))
            }
            Binding::Envelope { .. } => {
                let mut out = self.envelope_error(binding, request, code, detail, data);
                if let (Binding::Envelope { id: Some(p), .. }, Some(v)) = (binding, reply_id) {
                    set(&mut out, p, v);
                }
                Ok(out)
            }
            Binding::Tagged { .. } => Err(AccessError::NoBinding(channel.to_string())),
        }
    }

    /// `s` with its `$ref`s into `$defs` followed (at most 16 deep).
    pub(crate) fn resolve<'a>(&'a self, mut s: &'a Value) -> &'a Value {
        for _ in 0..16 {
            let name = s.get("$ref").and_then(Value::as_str);
            match name.and_then(|r| r.strip_prefix("#/$defs/")) {
                Some(name) => match self.defs.get(name) {
                    Some(t) => s = t,
                    None => break,
                },
                None => break,
            }
        }
        s
    }

    /// Where an error message on `channel` keeps its structured data, as
    /// [`Contract::error_reply`] writes it: JSON-RPC's `/error/data`, an envelope's
    /// payload `details`.
    pub fn error_data_pointer(&self, channel: &str) -> Option<String> {
        let body = self.error_body_pointer(channel)?;
        let member = match self.channels.get(channel)?.binding.as_ref()? {
            Binding::Jsonrpc { .. } => "data",
            _ => "details",
        };
        Some(format!("{body}/{member}"))
    }

    /// The members an error's data on `channel` may hold, where its message schema closes
    /// them (rukh's `ErrorData`); `None` where they are open or no schema says.
    pub fn error_data_members(&self, channel: &str) -> Option<BTreeSet<String>> {
        let at = self.error_data_pointer(channel)?;
        let path: Vec<&str> = at.split('/').filter(|s| !s.is_empty()).collect();
        let message = self.channels.get(channel)?.message.as_ref()?;
        self.closed_members(message, &path, 0)
    }

    /// The property names of the closed object schema at `path` below `s` (through `$ref`s
    /// and the branches of `oneOf`, `anyOf` and `allOf`: the first that answers).
    fn closed_members(&self, s: &Value, path: &[&str], depth: u8) -> Option<BTreeSet<String>> {
        let s = self.resolve(s);
        if depth > 16 {
            return None;
        }
        let branches = ["oneOf", "anyOf", "allOf"]
            .into_iter()
            .filter_map(|k| s.get(k)?.as_array())
            .flatten();
        if let Some(found) = branches
            .filter_map(|b| self.closed_members(b, path, depth + 1))
            .next()
        {
            return Some(found);
        }
        let props = s.get("properties").and_then(Value::as_object);
        match path.split_first() {
            Some((name, rest)) => self.closed_members(props?.get(*name)?, rest, depth + 1),
            None => (s.get("additionalProperties") == Some(&Value::Bool(false))).then(|| {
                props
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default()
            }),
        }
    }

    /// Where an error message on `channel` keeps its body (`code`, `message`, …), as
    /// [`Contract::error_reply`] writes it: JSON-RPC's `/error`, an envelope's payload;
    /// `None` for a channel with neither binding.
    pub fn error_body_pointer(&self, channel: &str) -> Option<&str> {
        match self.channels.get(channel)?.binding.as_ref()? {
            Binding::Jsonrpc { .. } => Some("/error"),
            Binding::Envelope { payload, .. } => Some(payload),
            Binding::Tagged { .. } => None,
        }
    }

    /// A JSON-RPC error response answering `id` (null when absent) with catalog `code`:
    /// the message is the entry's symbolic name, else `detail`.
    pub fn jsonrpc_error(
        &self,
        id: Option<&Value>,
        code: &Value,
        detail: &str,
        data: Option<Value>,
    ) -> Value {
        let version = self
            .channels
            .values()
            .find_map(|c| match &c.binding {
                Some(Binding::Jsonrpc { version, .. }) => Some(version.as_str()),
                _ => None,
            })
            .unwrap_or("2.0");
        let message = self
            .error_for(code)
            .and_then(|e| e.name.clone())
            .unwrap_or_else(|| detail.to_string());
        let mut error = json!({"code": code, "message": message});
        if let Some(d) = data {
            error["data"] = d;
        }
        json!({"jsonrpc": version, "id": id.cloned().unwrap_or(Value::Null), "error": error})
    }

    fn envelope_error(
        &self,
        binding: &Binding,
        request: Option<&Value>,
        code: &Value,
        detail: &str,
        data: Option<Value>,
    ) -> Value {
        let mut body = json!({"code": code, "message": detail});
        if let Some(e) = self.error_for(code) {
            body["category"] = json!(e.category);
            body["retryable"] = json!(e.retryable);
        }
        if let Some(d) = data {
            body["details"] = d;
        }
        let mut out = envelope(binding, Kind::Error, None, body);
        if let (
            Binding::Envelope {
                method,
                id,
                correlation,
                trace,
                version,
                ..
            },
            Some(r),
        ) = (binding, request)
        {
            for (at, to) in [
                (Some(method), Some(method)),
                (id.as_ref(), correlation.as_ref()),
                (trace.as_ref(), trace.as_ref()),
                (version.as_ref(), version.as_ref()),
            ] {
                copy(&mut out, r, at, to);
            }
        }
        out
    }

    /// A made-up message of `kind` and `method` on `channel` carrying `payload`: an
    /// envelope, or a JSON-RPC request or notification (its id is the caller's to give).
    /// Its id, send time, trace and version come from [`Contract::stamp`].
    pub fn message(
        &self,
        channel: &str,
        kind: Kind,
        method: &str,
        payload: Value,
    ) -> Result<Value, AccessError> {
        match self.channels.get(channel).and_then(|c| c.binding.as_ref()) {
            Some(b @ Binding::Envelope { .. }) => Ok(envelope(b, kind, Some(method), payload)),
            Some(Binding::Jsonrpc { version, .. }) => {
                Ok(json!({"jsonrpc": version, "method": method, "params": payload}))
            }
            _ => Err(AccessError::NoBinding(channel.to_string())),
        }
    }

    /// Give `msg`, made up for envelope `channel`, the id and send time (seconds since the
    /// Unix epoch) its binding has fields for, and the trace and version of `like` (the
    /// message it is about). Other bindings are left as they are.
    pub fn stamp(
        &self,
        channel: &str,
        msg: &mut Value,
        like: Option<&Value>,
        id: Value,
        unix_secs: f64,
    ) {
        let binding = self.channels.get(channel).and_then(|c| c.binding.as_ref());
        let Some(Binding::Envelope {
            id: p,
            timestamp,
            trace,
            version,
            ..
        }) = binding
        else {
            return;
        };
        if let Some(p) = p {
            set(msg, p, id);
        }
        if let Some(t) = timestamp {
            set(msg, t, json!(unix_secs));
        }
        if let Some(like) = like {
            copy(msg, like, trace.as_ref(), trace.as_ref());
            copy(msg, like, version.as_ref(), version.as_ref());
        }
    }
}

/// An envelope of `kind` (and `method`) carrying `payload`.
fn envelope(binding: &Binding, kind: Kind, method: Option<&str>, payload: Value) -> Value {
    let Binding::Envelope {
        kind: kind_at,
        kinds,
        method: method_at,
        payload: payload_at,
        ..
    } = binding
    else {
        return Value::Null;
    };
    let mut out = Value::Object(Default::default());
    let wire_kind = kinds.iter().find(|(_, k)| **k == kind).map(|(w, _)| w);
    set(&mut out, kind_at, json!(wire_kind));
    if let Some(m) = method {
        set(&mut out, method_at, json!(m));
    }
    set(&mut out, payload_at, payload);
    out
}

/// Copy `from`'s value at pointer `at` into `out` at `to`, when all three are there.
fn copy(out: &mut Value, from: &Value, at: Option<&String>, to: Option<&String>) {
    if let (Some(f), Some(t)) = (at, to)
        && let Some(v) = from.pointer(f)
    {
        set(out, t, v.clone());
    }
}

fn dim_name(d: Dim) -> &'static str {
    match d {
        Dim::Bytes => "a size in bytes",
        Dim::Seconds => "a duration",
        Dim::Scalar => "a count",
    }
}

impl StateMachine {
    /// Whether the machine allows `from` → `to`.
    pub fn allows(&self, from: &str, to: &str) -> bool {
        self.transitions
            .iter()
            .any(|t| t.from == from && t.to == to)
    }

    /// The states reachable from `from` in one transition.
    pub fn next(&self, from: &str) -> impl Iterator<Item = &str> {
        self.transitions
            .iter()
            .filter(move |t| t.from == from)
            .map(|t| t.to.as_str())
    }

    /// Whether `s` is one of the machine's states.
    pub fn has_state(&self, s: &str) -> bool {
        self.states.contains_key(s)
    }
}

impl CodeValue {
    /// The value this one implies in another table (`maps`), e.g. close 4009 → exit 0.
    pub fn mapped(&self, table: &str) -> Option<&Value> {
        self.maps.get(table)
    }
}
