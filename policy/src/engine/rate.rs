//! Keyed rate limits as data: a `rate` limit that names what it `applies` to or what
//! its buckets are kept per (`key`) is run as one token bucket per key; a message that
//! finds its bucket empty gets the limit's `action`.
//!
//! Only a method's own messages (requests, notifications, events) take tokens: the
//! answers to admitted requests always pass, so a limit never strands a call it let
//! through. A rate in a byte unit takes the message's size in tokens, any other one token.
//! Limits are taken in contract order and the first empty bucket ends it: a message refused
//! by one limit spends nothing on the ones after it. A rate limit with neither `applies`
//! nor `key` is prose and is not run.

use std::collections::HashMap;
use std::time::Instant;

use contract::model::Limit;
use contract::wire::Message;
use contract::{Contract, Limits};

use super::{Ctx, Ruling, broken};
use crate::Bucket;

/// Buckets kept at once per run before full ones are pruned; past it even after
/// pruning, a new key is not tracked and its message is flagged. A memory guard
/// against keys without end (a pointer key takes whatever the peer writes).
const MAX_BUCKETS: usize = 100_000;

/// Every token bucket of a run, by (route, limit, key).
#[derive(Default)]
pub struct Buckets {
    map: HashMap<(String, String, String), Bucket>,
}

impl Buckets {
    /// Forget the per-connection buckets of connection `conn` on `route`.
    pub(crate) fn forget_connection(&mut self, route: &str, conn: u64) {
        let key = format!("conn:{conn}");
        self.map.retain(|(r, _, k), _| !(r == route && *k == key));
    }

    fn room(&mut self, now: Instant) -> bool {
        if self.map.len() >= MAX_BUCKETS {
            self.map.retain(|_, b| !b.is_full_at(now));
        }
        self.map.len() < MAX_BUCKETS
    }
}

/// Whether the contract has a rate limit this engine runs.
pub(crate) fn any(c: &Contract) -> bool {
    c.limits.values().any(Limit::is_keyed_rate)
}

/// Take tokens from each rate limit `msg` (of `size` bytes) falls under, up to the first
/// empty bucket, which gets a ruling.
pub(crate) fn take(
    c: &Contract,
    limits: &Limits,
    buckets: &mut Buckets,
    ctx: &Ctx,
    (conn, size): (u64, usize),
    msg: &Message,
) -> Vec<Ruling> {
    if !msg.is_call() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (name, l) in c.limits.iter().filter(|(_, l)| l.is_keyed_rate()) {
        if !l.applies_to(c, ctx.from, msg.method.as_deref()) {
            continue;
        }
        let Some(key) = l.bucket_key(ctx.from, conn, &msg.value) else {
            continue;
        };
        let Ok(rate) = limits.rate(name) else {
            continue;
        };
        let Some((period, burst)) = rate.token_period() else {
            continue;
        };
        let entry = super::limit_entry(name);
        let id = (ctx.route.to_string(), name.clone(), key);
        if !buckets.map.contains_key(&id) && !buckets.room(ctx.now) {
            let reason = format!("{name}: over {MAX_BUCKETS} rate buckets; not tracked");
            out.push(broken(c, "limit.untracked", &entry, None, msg, reason));
            continue;
        }
        let Some(bucket) = bucket(buckets, id, period, burst, ctx.now) else {
            continue;
        };
        if !bucket.take(l.tokens(size), ctx.now) {
            let method = msg.method.as_deref().unwrap_or("message");
            let reason = format!(
                "{method} from {} over rate limit {name} ({} per {:?}, burst {burst})",
                ctx.from, rate.amount, rate.per
            );
            out.push(broken(
                c,
                "limit.rate",
                &entry,
                l.action.as_ref(),
                msg,
                reason,
            ));
            break;
        }
    }
    out
}

fn bucket(
    buckets: &mut Buckets,
    id: (String, String, String),
    period: std::time::Duration,
    burst: std::num::NonZeroU32,
    now: Instant,
) -> Option<&mut Bucket> {
    use std::collections::hash_map::Entry;
    match buckets.map.entry(id) {
        Entry::Occupied(e) => Some(e.into_mut()),
        Entry::Vacant(v) => Some(v.insert(Bucket::new(period, burst, now)?)),
    }
}
