//! Sans-IO enforcement of a contract's behaviour: one engine that runs any contract's
//! behaviour data (machines, id rules, keyed rates, deadlines, credit, claims, caps), and
//! the [`Policy`] trait through which a named extension adds what data cannot say.
//!
//! The wire layer (`contract::wire`) judges one frame at a time; the rules here need memory
//! across frames (request-ID counters, handshakes, deadlines) or across connections (rate
//! buckets, credit gates, claims). Like mitmproxy's sans-IO layers, a policy takes events
//! in and gives [`Ruling`]s out: it never reads a clock (every `Instant` is passed in),
//! never touches a socket, and never sleeps, so tests assert exact sequences.
//!
//! Every number comes from the contract ([`contract::Limits`]); a rule whose limit the
//! contract lacks is simply not applied. A ruling is what *enforce* mode does; an observer
//! (the proxy in observe mode, a conformance suite judging an implementation) reports it.
//!
//! How a driver runs a policy:
//! - one [`Policy`] per connection ([`layered`] puts the [`engine`] ahead of the
//!   extensions); [`Policy::on_open`] when the connection is accepted,
//!   [`Policy::on_message`] for every frame the wire layer decoded, [`Policy::on_close`]
//!   when it ends;
//! - a timer at [`Policy::next_deadline`], then [`Policy::on_tick`];
//! - one [`SharedState`] per run (keys carry the route), shared by all connections: the
//!   engine's machines, buckets and credit gates, and a slot per extension type
//!   ([`SharedState::with_extension`]), so the run names no protocol.

#![forbid(unsafe_code)]

pub mod engine;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use contract::Contract;
use contract::wire::{CloseFrame, Message};
use serde::Serialize;
use serde_json::Value;

pub use contract::Limits;
pub use contract::rate::Bucket;
pub use engine::{CreditGate, Engine, GateDecision, Held, Overrun};

/// Which way a frame travels on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// From the connecting side to the upstream.
    Up,
    /// From the upstream back to the connecting side.
    Down,
}

impl Dir {
    /// The other direction.
    pub fn reverse(self) -> Dir {
        match self {
            Dir::Up => Dir::Down,
            Dir::Down => Dir::Up,
        }
    }
}

/// A direction named other than `up` or `down`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is no direction: up (the connecting side's frames) or down")]
pub struct NoDir(String);

impl std::str::FromStr for Dir {
    type Err = NoDir;
    fn from_str(s: &str) -> Result<Dir, NoDir> {
        match s {
            "up" => Ok(Dir::Up),
            "down" => Ok(Dir::Down),
            _ => Err(NoDir(s.into())),
        }
    }
}

/// How a connection is closed on the contract's word.
#[derive(Debug, Clone, PartialEq)]
pub enum Closing {
    /// With a close code (message transports carry it; byte streams just end).
    Code(CloseFrame),
    /// Without a word.
    Drop,
}

/// The close a contract code calls for: a close code when it is one (fits in u16),
/// else dropping the connection; with the text an event's action shows.
pub fn closing_with(code: Option<&Value>, reason: String) -> (Closing, String) {
    match code
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
    {
        Some(code) => (
            Closing::Code(CloseFrame { code, reason }),
            format!("closed {code}"),
        ),
        None => (Closing::Drop, "closed ".into()),
    }
}

/// What a policy knows about the frame it is shown.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// Route name.
    pub route: &'a str,
    /// Connection number within the proxy run.
    pub conn: u64,
    /// Session (see `inspect::Event::session`).
    pub session: u64,
    /// Direction of the frame.
    pub dir: Dir,
    /// Sending party (a contract party name).
    pub from: &'a str,
    /// Receiving party.
    pub to: &'a str,
    /// When the frame arrived.
    pub now: Instant,
}

/// One decision of a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Ruling {
    /// Stable rule id, e.g. `ids.gap` (the engine) or `rukh.pending.limit` (a module).
    pub rule: &'static str,
    /// The seed section the rule comes from (as the contract cites it).
    pub seed: String,
    /// The contract's code for it: an error code, a close code or a drop reason.
    pub code: Option<Value>,
    /// One-line reason; never quotes message content.
    pub reason: String,
    /// What enforce mode does.
    pub act: Act,
}

/// What enforce mode does about a ruling. Observe mode reports it and forwards.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    /// The contract prescribes no action (or the proxy must not take the
    /// endpoint's place): only report.
    Flag,
    /// Do not forward the frame; send `reply` back to its sender, then close if asked.
    Refuse {
        /// The message sent back to the sender instead of forwarding.
        reply: Option<Value>,
        /// Close this connection afterwards.
        close: Option<Closing>,
    },
    /// Drop the frame and count it (only where the contract says so: rukh log
    /// intake excess, late rukh responses, kernel credit overrun per K-10).
    Discard,
    /// Forward the frame, and also send this message back to its sender.
    Also {
        /// Message for the sender.
        to_sender: Value,
    },
    /// Drop the frame and report it where the frame says, as its receiver would (an action's
    /// `report`: xsession's delivery_status to the sender's own inbox): dial `to` on the
    /// route's transport, write `messages` in the channel's framing, half-close. The
    /// messages may carry the sender's secrets (xsession's replyToken): never log them.
    Notify {
        /// The address taken from the frame.
        to: String,
        /// The report's messages, in order.
        messages: Vec<Value>,
    },
    /// Forward the frame; close ANOTHER connection of the route (toolchannel:
    /// a superseding redial closes the old socket with 4009).
    CloseConn {
        /// Connection to close.
        conn: u64,
        /// How.
        close: Closing,
    },
    /// Held data frames now covered by credit (a contract's `credit` entry: the kernel's
    /// streams); forward them, in order, toward the key's receiver (the party that granted
    /// the credit). Not a violation; applied in both modes (the gate holds only in enforce
    /// mode).
    Release {
        /// The frames, in arrival order.
        frames: Vec<Held>,
    },
}

/// One connection's stateful rules.
pub trait Policy: Send {
    /// The connection was accepted on `route` (the engine: connection caps, deadlines
    /// armed from here).
    fn on_open(&mut self, _route: &str, _now: Instant) -> Vec<Ruling> {
        vec![]
    }
    /// A decoded frame of `size` bytes (payload, without the framing).
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, size: usize) -> Vec<Ruling>;
    /// A frame the wire layer rejected before any rule saw it (garbage, not an
    /// object, an unknown frame type).
    fn on_unreadable(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        vec![]
    }
    /// The connection ended.
    fn on_close(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        vec![]
    }
    /// A data-channel frame travelling `ctx.dir` (kernel byte credit). With
    /// `enforce` a frame beyond credit is held (or, past the held bound, an
    /// overrun); otherwise it is only accounted. `ready` are frames released
    /// earlier toward the same receiver, to be written before this one.
    fn on_data(&mut self, _ctx: &Ctx, frame: Held, _enforce: bool) -> DataRuling {
        DataRuling::forward(frame)
    }
    /// How long one frame may stay incomplete once its first byte arrived (a framing's
    /// `frameDeadline`, rukh's `incompleteFrameSeconds`), and the ruling when it does.
    fn incomplete_frame(&self) -> Option<(Duration, Ruling)> {
        None
    }
    /// The earliest instant at which [`Policy::on_tick`] has something to say.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Time passed: rulings for missed deadlines, each with the connection it concerns.
    fn on_tick(&mut self, _now: Instant) -> Vec<(u64, Ruling)> {
        vec![]
    }
}

/// What a policy says about one data-channel frame (see [`Policy::on_data`]).
#[derive(Debug)]
pub struct DataRuling {
    /// Frames released by credit since the last data frame, in order: written first.
    pub ready: Vec<Held>,
    /// What to do with this frame.
    pub decision: GateDecision,
    /// A ruling to report (observe: the overrun it would have refused).
    pub ruling: Option<Ruling>,
}

impl DataRuling {
    /// Forward `frame`, with nothing released and nothing to report.
    pub fn forward(frame: Held) -> DataRuling {
        DataRuling {
            ready: Vec::new(),
            decision: GateDecision::Forward(frame),
            ruling: None,
        }
    }
}

/// A policy for contracts without stateful rules.
pub struct Noop;

impl Policy for Noop {
    fn on_message(&mut self, _: &Ctx, _: &Message, _: usize) -> Vec<Ruling> {
        vec![]
    }
}

/// One connection's policy: the engine alone, the engine ahead of a contract's named
/// extensions (`hooks`), or nothing where the contract carries no behaviour and names none.
pub fn layered(engine: Engine, hooks: Vec<Box<dyn Policy>>) -> Box<dyn Policy> {
    match (hooks.is_empty(), Engine::has_behaviour(engine.contract())) {
        (false, _) => Box::new(Layered {
            engine,
            hands: hooks,
        }),
        (true, true) => Box::new(engine),
        (true, false) => Box::new(Noop),
    }
}

/// A contract's rules: the engine runs what it carries as data, the named extensions
/// (hooks) what it does not. A hook sees a message only when the engine let it through (a
/// request with a broken id is never acted on, a message over a rate is never judged again),
/// and only when no hook before it refused or dropped it.
struct Layered {
    engine: engine::Engine,
    hands: Vec<Box<dyn Policy>>,
}

/// Whether a ruling keeps the frame from its receiver (refused, discarded or reported).
pub fn refuses(out: &[Ruling]) -> bool {
    out.iter().any(|r| {
        matches!(
            r.act,
            Act::Refuse { .. } | Act::Discard | Act::Notify { .. }
        )
    })
}

impl Policy for Layered {
    fn on_open(&mut self, route: &str, now: Instant) -> Vec<Ruling> {
        let mut out = self.engine.on_open(route, now);
        for h in &mut self.hands {
            out.extend(h.on_open(route, now));
        }
        out
    }
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, size: usize) -> Vec<Ruling> {
        let mut out = self.engine.on_message(ctx, msg, size);
        for h in &mut self.hands {
            if refuses(&out) {
                break;
            }
            out.extend(h.on_message(ctx, msg, size));
        }
        out
    }
    fn on_unreadable(&mut self, ctx: &Ctx) -> Vec<Ruling> {
        self.hands
            .iter_mut()
            .flat_map(|h| h.on_unreadable(ctx))
            .collect()
    }
    fn on_close(&mut self, ctx: &Ctx) -> Vec<Ruling> {
        let mut out = self.engine.on_close(ctx);
        for h in &mut self.hands {
            out.extend(h.on_close(ctx));
        }
        out
    }
    /// The engine, then each hook in turn, gates the frame; one that does not forward it
    /// ends the chain.
    fn on_data(&mut self, ctx: &Ctx, frame: Held, enforce: bool) -> DataRuling {
        let mut acc = self.engine.on_data(ctx, frame, enforce);
        for h in &mut self.hands {
            let GateDecision::Forward(frame) = acc.decision else {
                break;
            };
            let d = h.on_data(ctx, frame, enforce);
            acc.ready.extend(d.ready);
            acc.decision = d.decision;
            acc.ruling = acc.ruling.or(d.ruling);
        }
        acc
    }
    fn incomplete_frame(&self) -> Option<(Duration, Ruling)> {
        let hands = self.hands.iter().find_map(|h| h.incomplete_frame());
        self.engine.incomplete_frame().or(hands)
    }
    fn next_deadline(&self) -> Option<Instant> {
        let hands = self.hands.iter().filter_map(|h| h.next_deadline());
        self.engine.next_deadline().into_iter().chain(hands).min()
    }
    fn on_tick(&mut self, now: Instant) -> Vec<(u64, Ruling)> {
        let mut out = self.engine.on_tick(now);
        for h in &mut self.hands {
            out.extend(h.on_tick(now));
        }
        out
    }
}

/// State shared by every connection of a proxy run. Keys include the route,
/// so one instance serves all routes.
#[derive(Default)]
pub struct SharedState {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The generic engine's machine instances, rate buckets and credit gates.
    engine: engine::Shared,
    /// Each extension's own cross-connection state, keyed by its type: the run knows no
    /// protocol, an extension brings what it keeps (mitmproxy's addons keep their own).
    extensions: HashMap<TypeId, Box<dyn Any + Send>>,
}

impl SharedState {
    /// Fresh state.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not take the proxy down with it; the state is
        // only counters and tables, each valid after any single update.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The frames credit released, waiting to be written toward `to` on `session`.
    pub fn take_released(&self, session: u64, to: &str) -> Vec<Held> {
        self.lock().engine.credit.take_released(session, to)
    }

    /// Run `f` on an extension's state of type `T`, made with `T::default()` on first use.
    pub fn with_extension<T: Default + Send + 'static, R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut inner = self.lock();
        let slot = inner
            .extensions
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::<T>::default());
        match slot.downcast_mut::<T>() {
            Some(t) => f(t),
            // Unreachable: the slot is keyed by T's own TypeId. Rather than panic, start over.
            None => {
                let mut fresh = T::default();
                let r = f(&mut fresh);
                *slot = Box::new(fresh);
                r
            }
        }
    }

    /// Run `f` on the generic engine's state.
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut engine::Shared) -> R) -> R {
        f(&mut self.lock().engine)
    }

    /// Open connections on `route`, where its contract caps them.
    pub fn open_connections(&self, route: &str) -> usize {
        self.lock().engine.open_connections(route)
    }
}

/// The seed of an error catalog entry (`code`), for a ruling.
pub fn error_seed(c: &Contract, code: &Value) -> String {
    c.error_for(code)
        .map(|e| e.seed.clone())
        .unwrap_or_default()
}
