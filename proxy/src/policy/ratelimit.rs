//! Generic token-bucket rate limits per route and per method, from the proxy's
//! config (Envoy local-rate-limit style), independent of the contract's own rules.
//!
//! Each `[[route.ratelimit]]` entry is one bucket: without `method` it counts
//! every request and notification the route's clients send (the side that dials
//! the listener), with it only that method's. Answers never take a token, and
//! the upstream's traffic is never counted: a limit on calls must not strand the
//! answers to the calls it let through. Every
//! matching bucket takes a token; a message that finds one empty is over the
//! limit. The contract decides the answer: a contract with an error of
//! category `limit` (rukh's -32006 limit_exceeded) refuses with it, a request
//! getting the JSON-RPC error reply; any other contract is only flagged, since
//! it has no word for "too fast" and the proxy must not invent one.
//!
//! One limiter per route, shared by its connections: wrap it in a `Mutex`.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract::Contract;
use contract::model::{Binding, Kind};
use contract::wire::Message;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Act, Bucket, Ruling};

/// One bucket as written in the config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSpec {
    /// Only this method's messages (default: all messages of the route).
    #[serde(default)]
    pub method: Option<String>,
    /// Sustained rate: tokens added per second.
    pub per_second: f64,
    /// Bucket size: messages allowed at once.
    pub burst: u32,
}

/// A spec that cannot be a bucket.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RateLimitError {
    /// per_second is not a positive finite number.
    #[error("ratelimit #{index}: per_second must be a positive number, not {value}")]
    PerSecond {
        /// Position in the list, from 1.
        index: usize,
        /// What was given.
        value: f64,
    },
    /// burst is 0.
    #[error("ratelimit #{index}: burst must be at least 1")]
    Burst {
        /// Position in the list, from 1.
        index: usize,
    },
}

struct Rule {
    method: Option<String>,
    period: Duration,
    burst: NonZeroU32,
    bucket: Option<Bucket>,
}

/// The rate limits of one route.
pub struct RateLimiter {
    contract: Arc<Contract>,
    rules: Vec<Rule>,
    /// The contract's error for "over a limit", if it has one.
    code: Option<Value>,
}

impl RateLimiter {
    /// Build the buckets of `specs` for a route speaking `contract`.
    pub fn new(specs: &[RateLimitSpec], contract: &Arc<Contract>) -> Result<Self, RateLimitError> {
        let mut rules = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            let index = i + 1;
            let period = (s.per_second.is_finite() && s.per_second > 0.0)
                .then(|| Duration::try_from_secs_f64(1.0 / s.per_second).ok())
                .flatten()
                .filter(|p| !p.is_zero())
                .ok_or(RateLimitError::PerSecond {
                    index,
                    value: s.per_second,
                })?;
            let burst = NonZeroU32::new(s.burst).ok_or(RateLimitError::Burst { index })?;
            rules.push(Rule {
                method: s.method.clone(),
                period,
                burst,
                bucket: None,
            });
        }
        let code = contract
            .errors
            .iter()
            .find(|e| e.category == "limit")
            .map(|e| e.code.clone());
        Ok(RateLimiter {
            contract: contract.clone(),
            rules,
            code,
        })
    }

    /// Count one message of `method` at `now`; a ruling when a bucket was empty.
    /// The ruling refuses without a reply (see [`RateLimiter::check_message`]).
    pub fn check(&mut self, method: Option<&str>, now: Instant) -> Option<Ruling> {
        let mut over: Option<(Option<String>, f64, u32)> = None;
        for r in &mut self.rules {
            if r.method.as_deref().is_some_and(|m| Some(m) != method) {
                continue;
            }
            if r.bucket.is_none() {
                r.bucket = Bucket::new(r.period, r.burst, now);
            }
            let ok = r.bucket.as_mut().is_none_or(|b| b.take(1, now));
            if !ok && over.is_none() {
                over = Some((
                    r.method.clone(),
                    1.0 / r.period.as_secs_f64(),
                    r.burst.get(),
                ));
            }
        }
        let (scope, rate, burst) = over?;
        let what = scope
            .as_deref()
            .map_or("route".to_string(), |m| format!("method {m}"));
        Some(Ruling {
            rule: if scope.is_some() {
                "ratelimit.method"
            } else {
                "ratelimit.route"
            },
            seed: "proxy configuration ([[route.ratelimit]])".into(),
            code: self.code.clone(),
            reason: format!(
                "{} over the {what} rate limit ({rate}/s, burst {burst})",
                method.unwrap_or("message")
            ),
            act: match self.code {
                Some(_) => Act::Refuse {
                    reply: None,
                    close: None,
                },
                None => Act::Flag,
            },
        })
    }

    /// Like [`RateLimiter::check`] for a decoded message from the route's client:
    /// a JSON-RPC request refused for its rate gets the contract's error reply;
    /// answers pass untouched. (The caller shows only the client's messages.)
    pub fn check_message(&mut self, msg: &Message, now: Instant) -> Option<Ruling> {
        if matches!(msg.kind, Kind::Response | Kind::Error) {
            return None;
        }
        let mut r = self.check(msg.method.as_deref(), now)?;
        let jsonrpc = self
            .contract
            .channels
            .values()
            .any(|c| matches!(c.binding, Some(Binding::Jsonrpc { .. })));
        if let (Act::Refuse { reply, .. }, Some(code), Kind::Request, true) =
            (&mut r.act, &self.code, msg.kind, jsonrpc)
        {
            *reply = Some(self.contract.jsonrpc_error(
                msg.id.as_ref(),
                code,
                &r.reason,
                Some(json!({"limit": r.rule, "detail": r.reason})),
            ));
        }
        Some(r)
    }
}
