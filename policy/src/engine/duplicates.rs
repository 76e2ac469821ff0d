//! Duplicate windows as data: a limit with `duplicates` (an interval) remembers, per route,
//! each message it applies to that went on, by its values at the `same` pointers (their
//! SHA-256, never the text); within the window, a message agreeing at all of them under
//! another `distinct` id gets the limit's `action` (xsession's duplicateWindow, X-5). The
//! window runs from the earlier message's arrival; the same message sent again under its
//! own id is no duplicate of itself. The engine judges it after the rate buckets, so a
//! message they refused is never remembered.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use contract::wire::Message;
use contract::{Contract, Limits};
use serde_json::Value;

use super::{Ctx, Ruling, broken, limit_entry};

/// Messages remembered at once per run; past it, even after forgetting those out of their
/// windows, a new one is not remembered, and flagged so (a memory guard: the values are
/// the peer's).
const MAX_SEEN: usize = 100_000;

/// (route, limit, digest of the `same` values).
type Key = (String, String, [u8; 32]);

/// The messages each window remembers: when each arrived and its `distinct` id.
#[derive(Default)]
pub struct Seen {
    map: HashMap<Key, (Instant, Option<Value>, Duration)>,
    swept: Option<Instant>,
}

/// What a message that goes on is remembered as.
pub(crate) struct Mark(Key, Option<Value>, Duration);

/// Whether any limit of `c` is a duplicate window.
pub(crate) fn any(c: &Contract) -> bool {
    c.limits.values().any(|l| l.duplicates.is_some())
}

/// The ruling on `msg` when it duplicates a message a window remembers, and what to
/// remember it as if it goes on.
pub(crate) fn judge(
    c: &Contract,
    limits: &Limits,
    seen: &mut Seen,
    ctx: &Ctx,
    msg: &Message,
) -> (Option<Ruling>, Vec<Mark>) {
    let mut marks = Vec::new();
    seen.sweep(ctx.now);
    for (name, l) in &c.limits {
        let Some(d) = &l.duplicates else { continue };
        let Ok(window) = limits.duration(name) else {
            continue;
        };
        if !msg.is_call() || !l.applies_to(c, ctx.from, msg.method.as_deref()) {
            continue;
        }
        let key = (
            ctx.route.to_string(),
            name.clone(),
            digest(&msg.value, &d.same),
        );
        let id = d
            .distinct
            .as_ref()
            .and_then(|p| contract::get_pointer(&msg.value, p))
            .cloned();
        if let Some((at, earlier, _)) = seen.map.get(&key) {
            let within = ctx.now.saturating_duration_since(*at) < window;
            if within && (d.distinct.is_none() || *earlier != id) {
                let method = msg.method.as_deref().unwrap_or("a message");
                let reason = format!(
                    "{method} from {} repeats one {:.1} s earlier at {} within {name} ({window:?})",
                    ctx.from,
                    ctx.now.saturating_duration_since(*at).as_secs_f64(),
                    d.same.join(", ")
                );
                let entry = limit_entry(name);
                return (
                    Some(broken(
                        c,
                        "limit.duplicate",
                        &entry,
                        l.action.as_ref(),
                        msg,
                        reason,
                    )),
                    Vec::new(),
                );
            }
        }
        if seen.map.len() >= MAX_SEEN && !seen.map.contains_key(&key) {
            let reason = format!("{name}: over {MAX_SEEN} messages remembered; not tracked");
            return (
                Some(broken(
                    c,
                    "limit.untracked",
                    &limit_entry(name),
                    None,
                    msg,
                    reason,
                )),
                Vec::new(),
            );
        }
        marks.push(Mark(key, id, window));
    }
    (None, marks)
}

impl Seen {
    /// Remember what went on, at `now`.
    pub(crate) fn mark(&mut self, marks: Vec<Mark>, now: Instant) {
        for Mark(key, id, window) in marks {
            self.map.insert(key, (now, id, window));
        }
    }

    /// Forget what is past its window: at most once a second, or when full.
    fn sweep(&mut self, now: Instant) {
        let due = self
            .swept
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1));
        if due || self.map.len() >= MAX_SEEN {
            self.swept = Some(now);
            self.map
                .retain(|_, (at, _, w)| now.saturating_duration_since(*at) < *w);
        }
    }
}

/// The SHA-256 of `v`'s values at `pointers` (a missing one as null).
fn digest(v: &Value, pointers: &[String]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in pointers {
        let part = contract::get_pointer(v, p)
            .unwrap_or(&Value::Null)
            .to_string();
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}
