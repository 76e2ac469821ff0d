//! The generic policy engine: a contract's typed behaviour, interpreted.
//!
//! Where the hand-written modules next door code one protocol's rules each, this
//! engine reads them from the contract: state machines with their scopes, message
//! triggers, `allows` and `outOfPlace` ([`machine`]); keyed rate limits ([`rate`]);
//! each party's request-id rules and pending cap ([`ids`]); capability gating from the
//! parties' declarations ([`caps`]); deadlines with start, stop and restart triggers
//! ([`timer`]); duplicate windows ([`duplicates`]); connection caps ([`conns`]) and
//! pending caps and what may not be sent while a request awaits its answer
//! ([`pending`]); credit
//! ([`credit`]); drop reports ([`report`]); one live connection per claimed identity
//! across redials ([`claims`]); values the handshake settles and later messages repeat
//! ([`agreements`]); versions a message states above the contract's
//! ([`versions`]); and, for every contract, error codes the contract does not know
//! ([`unknown_error_code`]). A contract the proxy has never seen gets all of it
//! with no Rust change; a contract that names extensions gets their hooks layered after it.
//!
//! Like every policy it is sans-IO: events in ([`Policy::on_message`] with the instant
//! passed in), [`Ruling`]s out. Each ruling names the contract entry it comes from
//! (e.g. `/stateMachines/lifecycle`) in its reason, and carries the entry's seed and
//! the code of the entry's action. State that outlives a connection (session, key and
//! party machines, rate buckets) lives in the run's [`SharedState`], keyed by route.

mod agreements;
mod caps;
mod claims;
mod conns;
pub mod credit;
mod duplicates;
mod ids;
mod machine;
mod pending;
mod rate;
mod report;
mod timer;
mod versions;

use std::sync::Arc;
use std::time::Instant;

use contract::Contract;
use contract::model::{Action, ActionKind, Kind, Trigger};
use contract::wire::{Message, Wire};
use serde_json::{Value, json};

use crate::{Act, Closing, Ctx, DataRuling, Policy, Ruling, SharedState, closing_with};

pub use credit::{CreditGate, GateDecision, Gates, Held, Overrun};
pub use machine::Instances;
pub use rate::Buckets;

/// State the engine keeps across the connections of a run.
#[derive(Default)]
pub struct Shared {
    /// Every machine instance of the run (a connection's own ones included, so one
    /// lookup serves every scope).
    pub(crate) machines: Instances,
    /// Token buckets of the contract's rate limits.
    pub(crate) buckets: Buckets,
    /// Each session's credit gates.
    pub(crate) credit: Gates,
    /// Open connections per route, where a contract caps them.
    pub(crate) conns: conns::Open,
    /// Identities claimed, and the connections holding them.
    pub(crate) claims: claims::Claims,
    /// What the duplicate windows remember.
    pub(crate) seen: duplicates::Seen,
}

impl Shared {
    /// The live machine instances.
    pub fn machines(&self) -> &Instances {
        &self.machines
    }

    /// How many connections `route` has open, where its contract caps them.
    pub fn open_connections(&self, route: &str) -> usize {
        self.conns.on(route)
    }

    /// Whether a redial's claim superseded connection `conn` of `route` (its own deadlines
    /// no longer matter: the new connection runs them).
    pub fn superseded(&self, route: &str, conn: u64) -> bool {
        self.claims.is_superseded(route, conn)
    }
}

/// One connection's engine.
pub struct Engine {
    wire: Arc<Wire>,
    shared: Arc<SharedState>,
    conn: u64,
    session: u64,
    ids: ids::IdState,
    caps: caps::Declared,
    timers: timer::Timers,
    /// The identities this connection claimed.
    claims: claims::Mine,
    /// What the handshake settled for each agreement.
    agreed: agreements::Stated,
    /// Requests awaiting an answer, where a limit caps them.
    waiting: pending::Waiting,
    /// The connection's channel (the contract's first until told).
    channel: String,
    /// The route, once the connection opened.
    route: String,
    /// The connection counts toward its route's connection cap.
    counted: bool,
}

impl Engine {
    /// The engine for connection `conn` of `session`, speaking `wire`'s contract.
    pub fn new(wire: Arc<Wire>, shared: Arc<SharedState>, conn: u64, session: u64) -> Engine {
        let waiting = pending::Waiting::new(wire.contract());
        Engine {
            wire,
            shared,
            conn,
            session,
            ids: ids::IdState::default(),
            caps: caps::Declared::default(),
            timers: timer::Timers::default(),
            claims: claims::Mine::default(),
            agreed: agreements::Stated::default(),
            waiting,
            channel: String::new(),
            route: String::new(),
            counted: false,
        }
    }

    /// The engine of a connection on `channel` (empty: the contract's first channel).
    pub fn on_channel(mut self, channel: &str) -> Engine {
        self.channel = match channel {
            "" => self.first_channel(),
            ch => ch.to_string(),
        };
        self
    }

    fn first_channel(&self) -> String {
        let channels = &self.wire.contract().channels;
        channels.keys().next().cloned().unwrap_or_default()
    }

    /// The contract this engine runs.
    pub fn contract(&self) -> &Contract {
        self.wire.contract()
    }

    /// Whether `c` carries any behaviour this engine runs (else the route gets no policy work).
    pub fn has_behaviour(c: &Contract) -> bool {
        machine::any(c)
            || rate::any(c)
            || ids::any(c)
            || caps::any(c)
            || timer::any(c)
            || versions::any(c)
            || duplicates::any(c)
            || !c.credit.is_empty()
            || !c.claims.is_empty()
            || agreements::any(c)
            || c.limits.values().any(|l| l.counts.is_some())
            || c.channels
                .values()
                .any(|ch| has_frame_deadline(&ch.framing))
    }
}

impl Policy for Engine {
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, size: usize) -> Vec<Ruling> {
        let wire = self.wire.clone();
        let c = wire.contract();
        let at = machine::Where {
            route: ctx.route,
            conn: self.conn,
            session: self.session,
        };
        let mut out = Vec::new();
        let admit = self
            .ids
            .judge(c, wire.limits(), (ctx.from, ctx.to), msg)
            .map_err(|r| out.push(*r))
            .ok()
            .flatten();
        out.extend(caps::check(c, &self.caps, ctx.from, msg));
        out.extend(caps::unknown(c, ctx.from, msg));
        out.extend(versions::check(c, ctx.from, msg));
        out.extend(self.timers.raised(c, wire.limits(), ctx.from, msg));
        out.extend(self.waiting.not_while(c, ctx.from, msg));
        let (disagree, settles) = self.agreed.judge(c, ctx.from, msg);
        out.extend(disagree);
        let count = match msg.kind {
            Kind::Request => (self.waiting)
                .request(c, wire.limits(), ctx.from, msg)
                .map_err(|r| out.push(*r))
                .ok()
                .flatten(),
            _ => None,
        };
        // One lock for judging and applying, so connections sharing an instance see
        // each other's messages in order. State follows what enforce mode lets
        // through: a refused message moves nothing.
        let went_on = self.shared.with_engine(|s| {
            let (rulings, moves) = machine::judge(c, &s.machines, &at, ctx.from, msg);
            out.extend(rulings);
            let (claimed, takes) = s.claims.judge(c, (ctx.route, at.conn), ctx.from, msg);
            out.extend(claimed);
            out.extend(rate::take(
                c,
                wire.limits(),
                &mut s.buckets,
                ctx,
                (self.conn, size),
                msg,
            ));
            // After the buckets: a message they refused is never remembered.
            let (duplicate, marks) = match crate::refuses(&out) {
                false => duplicates::judge(c, wire.limits(), &mut s.seen, ctx, msg),
                true => (None, Vec::new()),
            };
            out.extend(duplicate);
            // A message refused, discarded or reported never reached its receiver.
            let went_on = !crate::refuses(&out);
            if went_on {
                s.seen.mark(marks, ctx.now);
                s.machines.apply(moves);
                s.claims.take(takes, &mut self.claims);
                if let Some(m) = msg.method.as_deref() {
                    let at = (self.session, ctx.from);
                    out.extend(s.credit.control(&wire, at, m, &msg.value));
                }
            }
            went_on
        });
        if let Some(a) = admit {
            self.ids.commit(a, went_on);
        }
        if went_on {
            match count {
                Some(n) => self.waiting.count(n),
                None if !msg.is_call() => self.waiting.answered(ctx.to, msg),
                None => {}
            }
            if msg.kind == Kind::Request {
                self.waiting.call(ctx.from, msg);
            }
            self.caps.observe(c, ctx.from, msg);
            self.claims.observe(c, ctx.from, msg);
            self.agreed.settle(c, settles);
            self.timers
                .message(c, wire.limits(), ctx.from, msg, ctx.now);
        }
        out
    }

    fn on_open(&mut self, route: &str, now: Instant) -> Vec<Ruling> {
        self.route = route.to_string();
        if self.channel.is_empty() {
            self.channel = self.first_channel();
        }
        let wire = self.wire.clone();
        let c = wire.contract();
        match self
            .shared
            .with_engine(|s| s.conns.open(c, wire.limits(), route))
        {
            Ok(counted) => self.counted = counted,
            Err(refused) => return vec![*refused],
        }
        self.timers.open(c, wire.limits(), &self.channel, now);
        // A machine whose first states come before the wire (rukh's `Prepared`) leaves
        // them by an `open` trigger: the observer joins it here.
        let opened = Trigger::Open {
            channel: self.channel.clone(),
        };
        let conn = self.conn;
        self.shared
            .with_engine(|s| s.machines.on_event(c, conn, route, &opened));
        Vec::new()
    }

    /// A framing's `frameDeadline`: the relay, which sees partial frames, arms it; its
    /// limit's action is what happens to a frame still incomplete then.
    fn incomplete_frame(&self) -> Option<(std::time::Duration, Ruling)> {
        let (limit, after) = self.wire.frame_deadline(&self.channel)?;
        let l = self.wire.limits();
        let reason = format!(
            "a frame stayed incomplete {:.1} s after its first byte",
            after.as_secs_f64()
        );
        let entry = limit_entry(limit);
        let act = on_connection(l.action(limit), &reason);
        let (seed, code) = (l.seed(limit), l.action_code(limit));
        Some((
            after,
            ruling("frame.incomplete", &entry, seed, code, reason, act),
        ))
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.timers.next()
    }

    fn on_tick(&mut self, now: Instant) -> Vec<(u64, Ruling)> {
        let wire = self.wire.clone();
        let c = wire.contract();
        let mut out = Vec::new();
        let expired = self.timers.expire(now);
        // A connection a redial superseded runs no clock: the new one does.
        let (route, conn) = (self.route.as_str(), self.conn);
        let superseded = || {
            self.shared
                .with_engine(|s| s.claims.is_superseded(route, conn))
        };
        if !expired.is_empty() && superseded() {
            return out;
        }
        for name in expired {
            let conn = self.conn;
            let route = self.route.as_str();
            let expiry = Trigger::Timer {
                limit: name.clone(),
            };
            self.shared
                .with_engine(|s| s.machines.on_event(c, conn, route, &expiry));
            if c.limits[&name].action.is_some() {
                out.push((conn, timer::expired(c, &name)));
            }
        }
        out
    }

    fn on_close(&mut self, ctx: &Ctx) -> Vec<Ruling> {
        let (conn, session) = (self.conn, self.session);
        // The session's primary connection carries the session's number: its end ends
        // the session's credit, and what was held is dropped, as its receiver would.
        let dropped = self.shared.with_engine(|s| {
            s.machines.forget_connection(ctx.route, conn);
            s.buckets.forget_connection(ctx.route, conn);
            s.claims.close(ctx.route, conn, &mut self.claims);
            if std::mem::take(&mut self.counted) {
                s.conns.close(ctx.route);
            }
            (conn == session).then(|| s.credit.drop_session(session))
        });
        let c = self.wire.contract();
        let (Some((held, never)), Some(name)) = (dropped, c.credit.keys().next()) else {
            return Vec::new();
        };
        let (seed, at) = (&c.credit[name].seed, credit::entry(name));
        let flag = |rule, reason| ruling(rule, &at, seed, None, reason, Act::Flag);
        let mut out = Vec::new();
        if held > 0 {
            let reason = format!("session ended with {held} held data frame(s): dropped");
            out.push(flag("credit.closed-held", reason));
        }
        if never > 0 {
            let reason = format!("session ended with data sent for {never} key(s) never opened");
            out.push(flag("credit.unknown-key", reason));
        }
        out
    }

    fn on_data(&mut self, ctx: &Ctx, frame: Held, enforce: bool) -> DataRuling {
        let wire = self.wire.clone();
        let c = wire.contract();
        let Some((name, _)) = credit::on_channel(c, &self.channel) else {
            return DataRuling::forward(frame);
        };
        let session = self.session;
        let (ready, decision, ruling) = (self.shared).with_engine(|s| {
            s.credit
                .data(&wire, (session, name), ctx.to, frame, enforce)
        });
        DataRuling {
            ready,
            decision,
            ruling,
        }
    }
}

fn has_frame_deadline(f: &contract::model::Framing) -> bool {
    use contract::model::Framing::{HeaderDelimited, LengthPrefixed};
    matches!(
        f,
        LengthPrefixed {
            frame_deadline: Some(_),
            ..
        } | HeaderDelimited {
            frame_deadline: Some(_),
            ..
        }
    )
}

/// A flag for an error answer whose `code` is neither in the contract's catalog nor among
/// the errors its method lists: the contract does not know what it means (FastMCP answers
/// a failed resources/read with code 0). Every contract gets this check.
pub fn unknown_error_code(c: &Contract, msg: &Message, code: &Value) -> Option<Ruling> {
    if c.knows_error(msg.method.as_deref(), code) {
        return None;
    }
    let method = msg.method.as_deref().unwrap_or("a request");
    let reason = format!("error code {code} answering {method} is not in the contract's catalog");
    Some(ruling(
        "errors.unknown-code",
        "/errors",
        "",
        None,
        reason,
        Act::Flag,
    ))
}

/// Whether `t` is a message trigger that `msg`, sent by `from`, fires.
pub(crate) fn fires(c: &Contract, t: &Trigger, from: &str, msg: &Message) -> bool {
    t.fires(c, &contract::machine::Seen::of(from, msg))
}

/// What enforce mode does for a ruling under `action` about `msg`, as the inspector does for
/// a violation: `reply-error` answers a request with the action's error and drops anything
/// else (a notification has no one waiting); `close` closes with the action's code;
/// `drop-connection` and `fail` drop the connection; `ignore` drops the message; no action
/// only flags.
pub fn act_for(c: &Contract, action: Option<&Action>, msg: &Message, reason: &str) -> Act {
    act_at(c, action, msg, reason, None)
}

/// [`act_for`] from contract entry `entry`, which an error reply's data names too, so
/// the refused peer learns which rule refused it.
fn act_at(
    c: &Contract,
    a: Option<&Action>,
    msg: &Message,
    reason: &str,
    entry: Option<&str>,
) -> Act {
    let Some(a) = a else {
        return Act::Flag;
    };
    match a.action {
        ActionKind::ReplyError => Act::Refuse {
            reply: (msg.kind == Kind::Request)
                .then(|| error_reply(c, a, msg, reason, entry))
                .flatten(),
            close: a.then.as_ref().and_then(|t| {
                // The close after the reply names the error, which may have had no other
                // way to the peer (an offending response, note T-4).
                let code = a.code.as_ref().map(|v| format!("{v} ")).unwrap_or_default();
                let name = a
                    .code
                    .as_ref()
                    .and_then(|v| c.error_for(v)?.name.as_deref());
                let name = name.map(|n| format!("{n} ")).unwrap_or_default();
                closing_for(t, &format!("{code}{name}{reason}"))
            }),
        },
        // The receiver would ignore it: the proxy drops it (counted and shown), and tells
        // the sender where the action's report says so.
        ActionKind::Ignore => report::notify(c, a, msg, reason).unwrap_or(Act::Discard),
        _ => Act::Refuse {
            reply: None,
            close: closing_for(a, reason),
        },
    }
}

/// What enforce mode does for a ruling about a connection rather than a message (a cap
/// reached, a deadline run out): the close `a` calls for, else only a flag.
pub(crate) fn on_connection(a: Option<&Action>, reason: &str) -> Act {
    match a.and_then(|a| closing_for(a, reason)) {
        Some(close) => Act::Refuse {
            reply: None,
            close: Some(close),
        },
        None => Act::Flag,
    }
}

/// The close `a` calls for when it ends the connection: `close` with its code;
/// `drop-connection`, and `fail` (the session ends), without a word.
pub(crate) fn closing_for(a: &Action, reason: &str) -> Option<Closing> {
    match a.action {
        ActionKind::Close => {
            // The name the contract gives this close, where it gives one (T-6).
            let text = a.reason.clone().unwrap_or_else(|| reason.to_string());
            Some(closing_with(a.code.as_ref(), text).0)
        }
        ActionKind::DropConnection | ActionKind::Fail => Some(Closing::Drop),
        ActionKind::ReplyError | ActionKind::Ignore => None,
    }
}

/// The contract's error reply to request `msg` with `a`'s code, shaped by the method's
/// channel; its data names the entry, and the action's `reason` where it has one. Where
/// the channel's schema closes an error's data (rukh's `ErrorData`), only its own members
/// go there, and the entry is named in the detail's text.
fn error_reply(
    c: &Contract,
    a: &Action,
    msg: &Message,
    reason: &str,
    entry: Option<&str>,
) -> Option<Value> {
    let code = a.code.as_ref()?;
    let channel = &c.methods.get(msg.method.as_deref()?)?.channel;
    let allowed = c.error_data_members(channel);
    let open = |m: &str| allowed.as_ref().is_none_or(|a| a.contains(m));
    let mut detail = json!({"detail": reason});
    match entry {
        Some(e) if open("entry") => detail["entry"] = json!(e),
        Some(e) => detail["detail"] = json!(format!("{reason} ({e})")),
        None => {}
    }
    if let Some(name) = &a.reason {
        detail["reason"] = json!(name);
    }
    let detail = Some(detail);
    let mut reply = c.error_reply(channel, Some(&msg.value), None, code, reason, detail);
    if let Ok(r) = reply.as_mut() {
        stamp(c, channel, r, Some(&msg.value));
    }
    reply.ok()
}

/// Give a message the engine made up for `channel` its own id and send time, where the
/// channel's binding has fields for them, and `like`'s trace and version.
pub(crate) fn stamp(c: &Contract, channel: &str, msg: &mut Value, like: Option<&Value>) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let secs = now.map(|d| d.as_secs_f64()).unwrap_or(0.0);
    c.stamp(channel, msg, like, fresh_id(), secs);
}

/// A message id no peer uses: the proxy's own, unique in the run.
pub(crate) fn fresh_id() -> Value {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    json!(format!("proxy-{n}"))
}

/// The pointer of limit `name`, as a ruling names its entry.
pub fn limit_entry(name: &str) -> String {
    format!("/limits/{}", contract::escape_pointer(name))
}

/// A ruling from contract entry `entry` (a JSON pointer into the contract).
pub fn ruling(
    rule: &'static str,
    entry: &str,
    seed: &str,
    code: Option<&Value>,
    reason: String,
    act: Act,
) -> Ruling {
    Ruling {
        rule,
        seed: seed.to_string(),
        code: code.cloned(),
        reason: format!("{reason} ({entry})"),
        act,
    }
}

/// The ruling for `msg` breaking contract entry `entry` whose reaction is `action`.
pub(crate) fn broken(
    c: &Contract,
    rule: &'static str,
    entry: &str,
    action: Option<&Action>,
    msg: &Message,
    reason: String,
) -> Ruling {
    let act = act_at(c, action, msg, &reason, Some(entry));
    let seed = action.map(|a| a.seed.as_str()).unwrap_or_default();
    ruling(
        rule,
        entry,
        seed,
        action.and_then(|a| a.code.as_ref()),
        reason,
        act,
    )
}
