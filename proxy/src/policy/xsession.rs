//! xsession (seed 001 §2, §6): the duplicate check and the auth line first.
//!
//! Rules, with the contract text they come from:
//! - duplicates (§6 step 1, X-5): the same `message.content` from the same `from` to the
//!   same session within duplicateWindow of an earlier ADMITTED message with another msgId
//!   is dropped. The limit's action says what happens then, as data: it is ignored, and its
//!   `report` tells the sender's own inbox with a delivery_status `dropped` (the engine's
//!   [`act_for`]); without `from` no status can be sent. Bodies are remembered by
//!   their SHA-256, never in clear.
//! - beforeHandshake: on an inbox whose registry record has an ipcToken, the first line
//!   must be the auth line. Whether the record has one is the route's to say.
//!
//! Not here, run by the generic engine from the contract's data: admission's two token
//! buckets (perSenderRate keyed by `/from`, then globalRate; a route fronts one inbox, so
//! one recipient session) with their reports, parseableLineDeadline by its `start`
//! and `restart` triggers, and maxConnections by its `counts: open-connections`. The
//! engine runs first: a message its buckets dropped never reaches the duplicate check.
//!
//! Not distinguishable here: own-process and controller connections are exempt from the
//! duplicate check, but their tokens are opaque to the proxy, so every connection is
//! judged as an ordinary peer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract::wire::{Message, Wire};
use serde_json::Value;

use super::{Act, Ctx, Policy, Ruling, SharedState};
use crate::inspect::Closing;
use contract_policy::engine::{act_for, limit_entry, ruling};

const USER: &str = "user";
const AUTH: &str = "auth";
const WINDOW: &str = "duplicateWindow";

/// An admitted body: route, recipient session, sender, SHA-256 of the body.
type Body = (String, String, String, [u8; 32]);

/// The bodies of admitted messages: when each arrived and its msgId.
#[derive(Default)]
struct Shared {
    bodies: HashMap<Body, (Instant, String)>,
    last_sweep: Option<Instant>,
}

/// xsession's policy for one inbox connection.
pub struct XsPolicy {
    wire: Arc<Wire>,
    shared: Arc<SharedState>,
    /// The inbox demands an auth line first (its record has an ipcToken).
    auth_required: bool,
    /// A first line was seen (read or not).
    first_seen: bool,
}

impl XsPolicy {
    /// A policy for one connection.
    pub fn new(wire: Arc<Wire>, shared: Arc<SharedState>) -> Self {
        XsPolicy {
            wire,
            shared,
            auth_required: false,
            first_seen: false,
        }
    }

    /// Whether the inbox behind this connection demands an auth line first.
    pub fn auth_required(mut self, yes: bool) -> Self {
        self.auth_required = yes;
        self
    }

    /// beforeHandshake: the first line of a connection to an inbox with an ipcToken
    /// must be an auth line (`what` says what it was instead).
    fn first_line(&mut self, what: Option<&str>) -> Option<Ruling> {
        let first = !std::mem::replace(&mut self.first_seen, true);
        if !first || !self.auth_required || what == Some(AUTH) {
            return None;
        }
        let before = self.wire.contract().violations.before_handshake.as_ref();
        let close = match before.map(|a| a.action) {
            Some(contract::model::ActionKind::Ignore) | None => None,
            Some(_) => Some(Closing::Drop),
        };
        Some(Ruling {
            rule: "xsession.auth.missing",
            seed: before.map(|a| a.seed.clone()).unwrap_or_default(),
            code: before.and_then(|a| a.code.clone()),
            reason: format!(
                "the first line is {} where the inbox demands an auth line (beforeHandshake)",
                what.map(|m| format!("a {m} frame"))
                    .unwrap_or_else(|| "unreadable".into())
            ),
            act: Act::Refuse { reply: None, close },
        })
    }

    /// The duplicate check of an admitted user frame.
    fn duplicate(&mut self, ctx: &Ctx, msg: &Message) -> Option<Ruling> {
        let window = self.wire.limits().duration(WINDOW).ok()?;
        let v = &msg.value;
        let text = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let body = match v.pointer("/message/content") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let digest = ring::digest::digest(&ring::digest::SHA256, body.as_bytes());
        let mut hash = [0u8; 32];
        hash.copy_from_slice(digest.as_ref());
        let msg_id = msg.id.as_ref().and_then(Value::as_str).unwrap_or_default();
        let key = (ctx.route.to_string(), text("/toSessionId").to_string());
        let key = (key.0, key.1, text("/from").to_string(), hash);
        let now = ctx.now;
        let duplicate = self.shared.with_extension(|xs: &mut Shared| {
            sweep(xs, now, window);
            match xs.bodies.get(&key) {
                Some((t, id)) if now.saturating_duration_since(*t) < window => id != msg_id,
                _ => {
                    xs.bodies.insert(key, (now, msg_id.to_string()));
                    false
                }
            }
        });
        duplicate.then(|| self.dropped(msg))
    }

    /// The ruling for a duplicate: the limit's action, run as data.
    fn dropped(&self, msg: &Message) -> Ruling {
        let c = self.wire.contract();
        let a = self.wire.limits().action(WINDOW);
        let reason = format!("user message dropped at admission: {WINDOW}");
        let (seed, code) = (
            self.wire.limits().seed(WINDOW),
            a.and_then(|a| a.code.as_ref()),
        );
        let act = act_for(c, a, msg, &reason);
        let at = limit_entry(WINDOW);
        ruling("xsession.admission.duplicate", &at, seed, code, reason, act)
    }
}

/// Forget bodies past the window, at most once per window.
fn sweep(xs: &mut Shared, now: Instant, window: Duration) {
    if xs
        .last_sweep
        .is_some_and(|t| now.saturating_duration_since(t) < window)
    {
        return;
    }
    xs.last_sweep = Some(now);
    xs.bodies
        .retain(|_, (t, _)| now.saturating_duration_since(*t) < window);
}

impl Policy for XsPolicy {
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, _size: usize) -> Vec<Ruling> {
        if let Some(r) = self.first_line(Some(msg.method.as_deref().unwrap_or("unknown"))) {
            return vec![r];
        }
        if msg.method.as_deref() != Some(USER) {
            return vec![];
        }
        self.duplicate(ctx, msg).into_iter().collect()
    }

    fn on_unreadable(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        self.first_line(None).into_iter().collect()
    }
}
