//! xsession (seed 001 §2, §6): admission and the connection cap.
//!
//! Rules, with the contract text they come from:
//! - admission (§6 step 1): a user frame takes a token from its sender's
//!   bucket (perSenderRate, keyed by the exact `from`, X-4) and then from the
//!   all-senders bucket (globalRate); tokens are not returned. Then the
//!   duplicate check: the same `message.content` from the same `from` to the
//!   same session within duplicateWindow of an earlier ADMITTED message with
//!   another msgId. Buckets and bodies belong to the recipient session
//!   (`toSessionId`) behind the route's inbox. A dropped message is reported to
//!   the sender's own inbox with a delivery_status `dropped` frame carrying the
//!   limit's dropReason, as the recipient would ([`Act::Notify`]); without
//!   `from` no status can be sent and the frame is just discarded.
//!   Bodies are remembered by their SHA-256, never in clear.
//!
//! Not here, run by the generic engine from the limits' data: parseableLineDeadline (X-7,
//! from accept, restarted by every decoded line; garbage is never decoded, so it cannot
//! extend the deadline) by its `start` and `restart` triggers, and maxConnections (X-8: a
//! connection beyond the cap is dropped unread) by its `counts: open-connections`.
//!
//! Not distinguishable here: own-process and controller connections are exempt
//! from the duplicate check, but their tokens are opaque to the proxy, so every
//! connection is judged as an ordinary peer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use contract::wire::{Message, Wire};
use serde_json::{Value, json};

use super::{Act, Bucket, Ctx, Limits, Policy, Ruling, SharedState};
use crate::inspect::Closing;

const USER: &str = "user";
const AUTH: &str = "auth";
const STATUS: &str = "delivery_status";

/// Admission state of every route's recipient sessions.
#[derive(Default)]
pub(crate) struct Shared {
    sessions: HashMap<(String, String), Admission>,
    last_sweep: Option<Instant>,
}

/// One recipient session's buckets and recent bodies.
struct Admission {
    senders: HashMap<String, Bucket>,
    global: Option<Bucket>,
    /// (from, SHA-256 of the body) → (arrival of the admitted message, its msgId).
    bodies: HashMap<(String, [u8; 32]), (Instant, String)>,
}

/// xsession's policy for one inbox connection.
pub struct XsPolicy {
    wire: Arc<Wire>,
    shared: Arc<SharedState>,
    conn: u64,
    next_id: u64,
    /// The inbox demands an auth line first (its record has an ipcToken).
    auth_required: bool,
    /// A first line was seen (read or not).
    first_seen: bool,
}

impl XsPolicy {
    /// The contract's limits, evaluated once for the route's wire.
    fn limits(&self) -> &Limits {
        self.wire.limits()
    }

    /// A policy for connection `conn`.
    pub fn new(wire: Arc<Wire>, shared: Arc<SharedState>, conn: u64, _session: u64) -> Self {
        XsPolicy {
            wire,
            shared,
            conn,
            next_id: 0,
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

    /// The field values a method's frames carry to be recognised (`/type`, `/action`).
    fn tagged(&self, method: &str) -> Value {
        let mut out = json!({});
        if let Some(m) = self.wire.contract().methods.get(method) {
            for (ptr, v) in &m.matches {
                if let Some(k) = ptr.strip_prefix('/') {
                    out[k] = v.clone();
                }
            }
        }
        out
    }

    fn admit(&mut self, ctx: &Ctx, msg: &Message) -> Option<Ruling> {
        let v = &msg.value;
        let from = v
            .get("from")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let session = v.get("toSessionId").and_then(Value::as_str).unwrap_or("");
        let msg_id = msg.id.as_ref().and_then(Value::as_str).unwrap_or("");
        let body = match v.pointer("/message/content") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let digest = ring::digest::digest(&ring::digest::SHA256, body.as_bytes());
        let mut hash = [0u8; 32];
        hash.copy_from_slice(digest.as_ref());
        let now = ctx.now;
        let window = self.limits().duration("duplicateWindow").ok();
        let per_sender = self
            .limits()
            .rate("perSenderRate")
            .ok()
            .and_then(|r| r.token_period());
        let global = self
            .limits()
            .rate("globalRate")
            .ok()
            .and_then(|r| r.token_period());

        let mut inner = self.shared.lock();
        let xs = &mut inner.xsession;
        sweep(xs, now, window);
        let adm = xs
            .sessions
            .entry((ctx.route.to_string(), session.to_string()))
            .or_insert_with(|| Admission {
                senders: HashMap::new(),
                global: global.and_then(|(p, b)| Bucket::new(p, b, now)),
                bodies: HashMap::new(),
            });
        let sender = from.unwrap_or("").to_string();
        let mut dropped = None;
        if let Some((period, burst)) = per_sender
            && !adm.senders.contains_key(&sender)
            && let Some(fresh) = Bucket::new(period, burst, now)
        {
            adm.senders.insert(sender.clone(), fresh);
        }
        if adm
            .senders
            .get_mut(&sender)
            .is_some_and(|b| !b.take(1, now))
        {
            dropped = Some("perSenderRate");
        }
        if dropped.is_none() && adm.global.as_mut().is_some_and(|b| !b.take(1, now)) {
            dropped = Some("globalRate");
        }
        if dropped.is_none()
            && let Some(window) = window
        {
            let key = (sender, hash);
            match adm.bodies.get(&key) {
                Some((t, id)) if now.saturating_duration_since(*t) < window => {
                    if id != msg_id {
                        dropped = Some("duplicateWindow");
                    }
                }
                _ => {
                    adm.bodies.insert(key, (now, msg_id.to_string()));
                }
            }
        }
        drop(inner);
        let limit = dropped?;
        Some(self.dropped(limit, from, msg))
    }

    /// The ruling for a message dropped by `limit`.
    fn dropped(&mut self, limit: &str, from: Option<&str>, msg: &Message) -> Ruling {
        let code = self.limits().action_code(limit).cloned();
        let reason = format!("user message dropped at admission: {limit}");
        let act = match from {
            None => Act::Discard,
            Some(inbox) => {
                self.next_id += 1;
                let v = &msg.value;
                let version = v.get("msgV").cloned().unwrap_or(Value::Null);
                let mut status = self.tagged(STATUS);
                status["msgV"] = version.clone();
                status["msgId"] = json!(format!("proxy-{}-{}", self.conn, self.next_id));
                status["status"] = json!("dropped");
                status["origMsgId"] = msg.id.clone().unwrap_or(Value::Null);
                status["reason"] = json!(reason);
                if let Some(c) = &code {
                    status["dropReason"] = c.clone();
                }
                let auth = v.get("replyToken").and_then(Value::as_str).map(|token| {
                    let mut a = self.tagged(AUTH);
                    a["msgV"] = version;
                    a["token"] = json!(token);
                    a
                });
                Act::Notify {
                    to_inbox: inbox.to_string(),
                    auth,
                    message: status,
                }
            }
        };
        Ruling {
            rule: match limit {
                "duplicateWindow" => "xsession.admission.duplicate",
                _ => "xsession.admission.rate",
            },
            seed: self.limits().seed(limit).to_string(),
            code,
            reason,
            act,
        }
    }
}

/// Forget buckets that refilled and bodies past the window (a fresh entry is
/// the same thing), at most once per window.
fn sweep(xs: &mut Shared, now: Instant, window: Option<std::time::Duration>) {
    let Some(window) = window else { return };
    if xs
        .last_sweep
        .is_some_and(|t| now.saturating_duration_since(t) < window)
    {
        return;
    }
    xs.last_sweep = Some(now);
    xs.sessions.retain(|_, a| {
        a.senders.retain(|_, b| !b.is_full_at(now));
        a.bodies
            .retain(|_, (t, _)| now.saturating_duration_since(*t) < window);
        !(a.senders.is_empty()
            && a.bodies.is_empty()
            && a.global.as_ref().is_none_or(|g| g.is_full_at(now)))
    });
}

impl Policy for XsPolicy {
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, _size: usize) -> Vec<Ruling> {
        if let Some(r) = self.first_line(Some(msg.method.as_deref().unwrap_or("unknown"))) {
            return vec![r];
        }
        if msg.method.as_deref() != Some(USER) {
            return vec![];
        }
        self.admit(ctx, msg).into_iter().collect()
    }

    fn on_unreadable(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        self.first_line(None).into_iter().collect()
    }
}
