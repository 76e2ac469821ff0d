//! xsession (seed 001 §2, §3): the auth line first.
//!
//! beforeHandshake: on an inbox whose registry record has an ipcToken, the first line must
//! be the auth line. Whether the record has one is the route's to say, which no contract
//! data can: the record is a file beside the wire.
//!
//! Not here, run by the generic engine from the contract's data: admission's two token
//! buckets (perSenderRate keyed by `/from`, then globalRate; a route fronts one inbox, so
//! one recipient session) and the duplicate window after them (duplicateWindow's
//! `duplicates`, X-5), each with its report; parseableLineDeadline by its `start`
//! and `restart` triggers, and maxConnections by its `counts: open-connections`.
//!
//! Not distinguishable anywhere in the proxy: own-process and controller connections are
//! exempt from the duplicate check, but their tokens are opaque to it, so every connection
//! is judged as an ordinary peer.

use std::sync::Arc;

use contract::wire::{Message, Wire};

use super::{Act, Ctx, Policy, Ruling};
use crate::inspect::Closing;

const AUTH: &str = "auth";

/// xsession's policy for one inbox connection.
pub struct XsPolicy {
    wire: Arc<Wire>,
    /// The inbox demands an auth line first (its record has an ipcToken).
    auth_required: bool,
    /// A first line was seen (read or not).
    first_seen: bool,
}

impl XsPolicy {
    /// A policy for one connection.
    pub fn new(wire: Arc<Wire>) -> Self {
        XsPolicy {
            wire,
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
}

impl Policy for XsPolicy {
    fn on_message(&mut self, _ctx: &Ctx, msg: &Message, _size: usize) -> Vec<Ruling> {
        let first = self.first_line(Some(msg.method.as_deref().unwrap_or("unknown")));
        first.into_iter().collect()
    }

    fn on_unreadable(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        self.first_line(None).into_iter().collect()
    }
}
