//! rukh (ADR-0003 process IPC): what the session machine's data does not say.
//!
//! Rules, with the contract text they come from:
//! - after a refused rukh.initialize, nothing more (violations.beforeHandshake, fail);
//! - an accepted cancel ends the core's waits: later responses to them are
//!   discarded and counted (request machine `LateDiscarded`), and an invoke
//!   result after it cannot decide the outcome (R-28: flagged);
//!
//! Not here: a repeated context field that differs from the pinned one (R-15,
//! `context_mismatch`) is the contract's `agreements` sessionId and invocationId.
//! Not here: the session order (nothing before the handshake, one invoke, no work after
//! the completion or a cancel, one completion) is the `session` machine's `allows`,
//! `outOfPlace` and `refusals` (note R-43), run by the engine.
//! Not here: request ids (each party's prefix, a gapless count from 1, no reuse) and
//! replies in the wrong direction or to ids never issued are the parties' `ids`
//! in the contract, run by the generic engine ahead of this module, as is rukh.log intake
//! (logIntakeRecordsRate and logIntakeBytesRate, R-26: the excess is discarded and counted),
//! pendingRequestsMax (R-21: a `pending-requests` count on operation and UI requests, per
//! direction, answered -32006 and not run), and
//! the framing's `frameDeadline` (2 s from a frame's first byte), which the relay arms.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use contract::model::Kind;
use contract::wire::{Message, Wire};
use serde_json::Value;

use super::{Act, Ctx, Limits, Policy, Ruling};
use crate::inspect::Closing;

const INITIALIZE: &str = "rukh.initialize";
const INVOKE: &str = "rukh.invoke";
const CANCEL: &str = "rukh.cancel";
/// The cap on pending operation and UI requests (the engine's); its methods are the waits
/// a cancel ends.
const PENDING_MAX: &str = "pendingRequestsMax";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Only rukh.initialize and its response.
    Initializing,
    /// The initialize request was answered with an error: the session is over.
    Refused,
    /// Handshake confirmed.
    Running,
}

struct Pending {
    party: String,
    counted: bool,
}

/// rukh's policy for one invocation's channel.
pub struct RukhPolicy {
    wire: Arc<Wire>,
    phase: Phase,
    pending: HashMap<String, Pending>,
    /// Core requests whose wait ended without a response (cancel).
    ended: HashSet<String>,
    init_id: Option<String>,
    invoke_id: Option<String>,
    cancelled: bool,
}

impl RukhPolicy {
    /// A fresh policy.
    pub fn new(wire: Arc<Wire>) -> Self {
        RukhPolicy {
            wire,
            phase: Phase::Initializing,
            pending: HashMap::new(),
            ended: HashSet::new(),
            init_id: None,
            invoke_id: None,
            cancelled: false,
        }
    }

    /// The contract's limits, evaluated once for the route's wire.
    fn limits(&self) -> &Limits {
        self.wire.limits()
    }

    fn c(&self) -> &contract::Contract {
        self.wire.contract()
    }

    fn on_request(&mut self, ctx: &Ctx, msg: &Message) -> Vec<Ruling> {
        let method = msg.method.clone().unwrap_or_default();
        let Some(idv) = msg.id.as_ref() else {
            return vec![];
        };
        let key = idv.to_string();
        // Request ids (prefix, a gapless count from 1, no reuse) are the contract's party
        // `ids`, kept by the engine before this runs: a broken id never gets here.
        // Session order.
        if self.phase != Phase::Running {
            if self.phase == Phase::Initializing && method == INITIALIZE && self.init_id.is_none() {
                self.init_id = Some(key.clone());
                self.track(key, ctx.from, false);
                return vec![];
            }
            return vec![self.not_initialized(&method, Some(idv))];
        }
        // A second rukh.initialize is out of place in the session machine, and a context
        // field other than the pinned one the engine's `agreements`: never here.
        // A second invoke and work after the completion or a cancel are the session
        // machine's refusals (already_invoked, session_closing), run by the engine.
        if method == INVOKE {
            self.invoke_id = Some(key.clone());
        }
        // The cap on pending operation and UI requests is /limits/pendingRequestsMax
        // (`counts: pending-requests`), run by the engine; here they are the waits a
        // cancel ends.
        let counted = self.counted_methods().any(|m| *m == method);
        if method == CANCEL && !self.cancelled {
            self.cancelled = true;
            // The core stops waiting for its own outstanding requests (request machine WaitEnded).
            let core_ended: Vec<String> = self
                .pending
                .iter()
                .filter(|(_, p)| p.counted && p.party == ctx.from)
                .map(|(k, _)| k.clone())
                .collect();
            for k in core_ended {
                self.pending.remove(&k);
                self.ended.insert(k);
            }
        }
        self.track(key, ctx.from, counted);
        vec![]
    }

    fn not_initialized(&self, method: &str, id: Option<&Value>) -> Ruling {
        let v = self.c().violations.before_handshake.clone();
        let code = v
            .as_ref()
            .and_then(|a| a.code.clone())
            .unwrap_or(Value::Null);
        let reason = format!("{method} before the handshake was confirmed");
        let reply = id.map(|id| self.c().jsonrpc_error(Some(id), &code, &reason, None));
        Ruling {
            rule: "rukh.session.not-initialized",
            seed: v.map(|a| a.seed).unwrap_or_default(),
            code: Some(code),
            reason,
            act: Act::Refuse {
                reply,
                close: Some(Closing::Drop),
            },
        }
    }

    /// The methods `pendingRequestsMax` applies to: operation and UI requests.
    fn counted_methods(&self) -> impl Iterator<Item = &String> {
        let l = self.c().limits.get(PENDING_MAX);
        l.and_then(|l| l.applies.as_ref())
            .into_iter()
            .flat_map(|a| &a.methods)
    }

    fn track(&mut self, key: String, party: &str, counted: bool) {
        // Counted requests are capped per direction by the engine, which refuses the excess
        // before this hook sees it; uncounted (lifecycle) ones are few by the session order,
        // and this bound, on them alone, keeps a misbehaving peer from growing the table.
        let cap = self.limits().cap(PENDING_MAX).unwrap_or(0) as usize;
        let lifecycle = self.pending.values().filter(|p| !p.counted).count();
        if !counted && lifecycle >= cap.max(1) {
            return;
        }
        self.pending.insert(
            key,
            Pending {
                party: party.to_string(),
                counted,
            },
        );
    }

    fn on_reply(&mut self, msg: &Message) -> Vec<Ruling> {
        let Some(idv) = msg.correlation.as_ref() else {
            return vec![];
        };
        let key = idv.to_string();
        if self.phase != Phase::Running && self.init_id.as_deref() != Some(key.as_str()) {
            let what = format!("a reply to {key}");
            return vec![self.not_initialized(&what, None)];
        }
        // A reply in the wrong direction or to an id never issued is the engine's (the
        // parties' `ids`), and a second completion the session machine's refusal: neither
        // gets here.
        if self.pending.remove(&key).is_some() {
            let mut out = Vec::new();
            if self.init_id.as_deref() == Some(key.as_str()) {
                self.phase = if msg.kind == Kind::Response {
                    Phase::Running
                } else {
                    Phase::Refused
                };
            }
            if self.invoke_id.as_deref() == Some(key.as_str()) && self.cancelled {
                out.push(Ruling {
                    rule: "rukh.cancel.precedence",
                    seed: self.c().note_seed("R-28"),
                    code: None,
                    reason:
                        "rukh.invoke result after an accepted cancel: the outcome stays cancelled"
                            .into(),
                    act: Act::Flag,
                });
            }
            return out;
        }
        if self.ended.remove(&key) {
            return vec![self.late(format!(
                "response to {key} after the wait ended (accepted cancel)"
            ))];
        }
        vec![self.late(format!("response to {key}, which is no longer pending"))]
    }

    fn late(&self, reason: String) -> Ruling {
        Ruling {
            rule: "rukh.response.late",
            seed: self.c().note_seed("R-10"),
            code: None,
            reason,
            act: Act::Discard,
        }
    }

    fn on_notification(&mut self, msg: &Message) -> Vec<Ruling> {
        let method = msg.method.clone().unwrap_or_default();
        if self.phase != Phase::Running {
            return vec![self.not_initialized(&method, None)];
        }
        // rukh.log intake is the contract's two rate limits, run by the engine.
        vec![]
    }
}

impl Policy for RukhPolicy {
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, _size: usize) -> Vec<Ruling> {
        match msg.kind {
            Kind::Request => self.on_request(ctx, msg),
            Kind::Response | Kind::Error => self.on_reply(msg),
            Kind::Notification | Kind::Event => self.on_notification(msg),
        }
    }

    fn on_close(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        self.pending.clear();
        self.ended.clear();
        vec![]
    }
}
