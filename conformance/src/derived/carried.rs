//! Limit values the wire carries (a limit's `carried`: toolchannel's budgets in
//! `initialize`): the suite writes its run's value in the messages it sends, and reads the
//! value in force on a session from the messages both sides sent, so a clock it judges
//! runs as long as the session agreed, whoever set it.

use contract::model::Part;
use contract::{Contract, Limits};
use serde_json::Value;

use super::Session;
use crate::session::Ctx;

/// `v`, the played party's `part` of `method`, with each limit value it carries written as
/// this run keeps it: the contract's value, time-scaled; a whole number (rounded up) where
/// the example holds one, as a schema of whole seconds wants.
pub(super) fn write(cx: &Ctx, method: &str, part: Part, v: &mut Value) {
    let c = cx.wire.contract();
    let mut limits = None;
    for (name, l) in &c.limits {
        for k in l
            .carried
            .iter()
            .filter(|k| k.method == method && k.part() == Some(part))
        {
            let Some(old) = v.pointer(&k.pointer) else {
                continue;
            };
            let limits = limits.get_or_insert_with(|| cx.limits());
            let Ok(mine) = limits.as_carried(name) else {
                continue;
            };
            let new = match old.is_u64() || old.is_i64() {
                true => Value::from(mine.ceil().max(1.0) as u64),
                false => serde_json::Number::from_f64(mine).map_or(Value::Null, Value::Number),
            };
            contract::set_pointer(v, &k.pointer, new);
        }
    }
}

/// The run's limits with what the session's messages up to now carried, in the order
/// they went; `None` when the contract carries no limit on the wire (the run's own hold).
pub(crate) fn in_force(cx: &Ctx, c: &Contract, s: &Session) -> Option<Limits> {
    if c.limits.values().all(|l| l.carried.is_empty()) {
        return None;
    }
    let mut limits = cx.limits();
    let sent = s.peer.sent.iter().map(|(at, m)| (*at, m));
    let heard = (s.peer.log.iter()).filter_map(|g| Some((g.at, g.msg.as_ref().ok()?)));
    let mut all: Vec<_> = sent.chain(heard).collect();
    all.sort_by_key(|(at, _)| *at);
    for (_, m) in all {
        limits.carry(c, m);
    }
    Some(limits)
}
