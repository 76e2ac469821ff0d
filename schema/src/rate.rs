//! Keyed rate limits, read one way: which messages a `rate` limit applies to, the key of
//! the bucket a message draws from, how many tokens it takes, and the token bucket itself
//! (governor's GCRA, driven by instants the caller passes in, so nothing sleeps). The proxy's
//! policy engine keeps its buckets per route; an SDK keeps one [`KeyedRate`] per limit, and
//! the generated SDKs' rule vectors are computed from it.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use serde_json::Value;

use crate::Contract;
use crate::access::{AccessError, Limits};
use crate::model::{Limit, LimitKey, LimitKind, Unit};

/// Buckets one [`KeyedRate`] keeps before full ones are pruned; past it even after pruning, a
/// new key is refused. A memory guard against keys without end, not a protocol number.
pub const MAX_KEYS: usize = 100_000;

impl Limit {
    /// Whether this is a rate limit run as data: one that names what it `applies` to or what
    /// its buckets are kept per (`key`). Any other rate limit is prose.
    pub fn is_keyed_rate(&self) -> bool {
        self.kind == LimitKind::Rate && (self.applies.is_some() || self.key.is_some())
    }

    /// Whether a message of `method` from party `from` falls under the limit's `applies`
    /// (every condition given must hold; everything, when absent).
    pub fn applies_to(&self, c: &Contract, from: &str, method: Option<&str>) -> bool {
        let Some(a) = &self.applies else { return true };
        let method = method.unwrap_or_default();
        let channel = c.methods.get(method).map(|m| m.channel.as_str());
        (a.methods.is_empty() || a.methods.iter().any(|m| m == method))
            && a.channel.as_deref().is_none_or(|ch| Some(ch) == channel)
            && a.from.as_deref().is_none_or(|p| p == from)
    }

    /// The key of the bucket a message (`value`, from `from`, on connection `conn`) draws
    /// from; `None` when a pointer key is absent from the message.
    pub fn bucket_key(&self, from: &str, conn: u64, value: &Value) -> Option<String> {
        Some(match &self.key {
            None | Some(LimitKey::Global) => String::new(),
            Some(LimitKey::Connection) => format!("conn:{conn}"),
            Some(LimitKey::Party) => format!("party:{from}"),
            Some(LimitKey::Pointer { pointer }) => {
                format!("at:{}", crate::pointer::get(value, pointer)?)
            }
        })
    }

    /// Whether the limit counts bytes (a rate in a byte unit takes a message's size in
    /// tokens), not messages.
    pub fn counts_bytes(&self) -> bool {
        matches!(self.unit, Unit::Bytes | Unit::KiB | Unit::MiB)
    }

    /// The tokens a message of `size` bytes takes: its size for a rate in a byte unit,
    /// else one.
    pub fn tokens(&self, size: usize) -> u64 {
        if self.counts_bytes() { size as u64 } else { 1 }
    }
}

/// What a keyed rate limit says about one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The limit does not apply to it (another method, channel or party; an answer; no key).
    NotApplicable,
    /// It took its tokens.
    Admitted,
    /// Its bucket was empty: it gets the limit's action.
    Refused,
}

/// One keyed rate limit with its buckets, as an SDK keeps it.
pub struct KeyedRate {
    limit: Limit,
    contract: Arc<Contract>,
    period: Duration,
    burst: NonZeroU32,
    buckets: HashMap<String, Bucket>,
}

impl KeyedRate {
    /// The limit `name` of `c`, evaluated by `limits`: an error when it is not a rate, or its
    /// rate has no positive refill.
    pub fn new(c: Arc<Contract>, limits: &Limits, name: &str) -> Result<Self, AccessError> {
        let rate = limits.rate(name)?;
        let limit =
            (c.limits.get(name).cloned()).ok_or_else(|| AccessError::NoLimit(name.into()))?;
        let (period, burst) = rate.token_period().ok_or_else(|| AccessError::WrongKind {
            name: name.to_string(),
            wanted: "a rate with a positive refill and burst",
            found: format!("{} per {:?}, burst {}", rate.amount, rate.per, rate.burst),
        })?;
        Ok(KeyedRate {
            limit,
            contract: c,
            period,
            burst,
            buckets: HashMap::new(),
        })
    }

    /// Take tokens for a call of `method` from `from` on connection `conn` (its whole
    /// `value`, `size` bytes) at `now`. Pass only a method's own messages: answers never take
    /// a token.
    pub fn take(
        &mut self,
        (from, conn): (&str, u64),
        method: Option<&str>,
        (value, size): (&Value, usize),
        now: Instant,
    ) -> Taken {
        if !self.limit.applies_to(&self.contract, from, method) {
            return Taken::NotApplicable;
        }
        let Some(key) = self.limit.bucket_key(from, conn, value) else {
            return Taken::NotApplicable;
        };
        if !self.buckets.contains_key(&key) {
            if self.buckets.len() >= MAX_KEYS {
                self.buckets.retain(|_, b| !b.is_full_at(now));
            }
            let fresh = Bucket::new(self.period, self.burst, now);
            match fresh.filter(|_| self.buckets.len() < MAX_KEYS) {
                Some(b) => self.buckets.insert(key.clone(), b),
                None => return Taken::Refused,
            };
        }
        let Some(bucket) = self.buckets.get_mut(&key) else {
            return Taken::Refused;
        };
        if bucket.take(self.limit.tokens(size), now) {
            Taken::Admitted
        } else {
            Taken::Refused
        }
    }
}

/// A governor clock that reads the instant the caller passed in, so buckets
/// follow the relay's (or a test's) timeline and nothing sleeps.
#[derive(Debug, Clone, Default)]
struct Passed(Arc<AtomicU64>);

impl Clock for Passed {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        Nanos::from(self.0.load(Ordering::Relaxed))
    }
}

type Gcra = governor::RateLimiter<NotKeyed, InMemoryState, Passed, NoOpMiddleware<Nanos>>;

/// A token bucket (governor's GCRA), full at creation, driven by passed-in instants.
pub struct Bucket {
    gcra: Gcra,
    clock: Passed,
    base: Instant,
    last: Instant,
    refill: Duration,
}

impl Bucket {
    /// One token every `period`, at most `burst`, full at `now`.
    pub fn new(period: Duration, burst: NonZeroU32, now: Instant) -> Option<Bucket> {
        let quota = governor::Quota::with_period(period)?.allow_burst(burst);
        let clock = Passed::default();
        let gcra = governor::RateLimiter::direct_with_clock(quota, clock.clone());
        Some(Bucket {
            gcra,
            clock,
            base: now,
            last: now,
            refill: period.saturating_mul(burst.get()),
        })
    }

    /// Take `n` tokens at `now`, all or none. An `n` above the burst never fits.
    pub fn take(&mut self, n: u64, now: Instant) -> bool {
        let since = now.saturating_duration_since(self.base);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        self.clock.0.fetch_max(nanos, Ordering::Relaxed);
        if now > self.last {
            self.last = now;
        }
        let Some(n) = u32::try_from(n).ok().and_then(NonZeroU32::new) else {
            return n == 0;
        };
        matches!(self.gcra.check_n(n), Ok(Ok(())))
    }

    /// Whether the bucket has refilled completely by `now` (so it can be forgotten:
    /// a fresh bucket is the same thing).
    pub fn is_full_at(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) >= self.refill
    }
}
