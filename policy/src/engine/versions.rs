//! Versions a message states for itself (`versions[].carried`, xsession's `msgV`): a
//! message stating a higher one than the contract describes is a later party's, and gets
//! the entry's `newer` reaction (xsession: dropped, no status), as its receiver would.

use contract::Contract;
use contract::wire::Message;

use super::{Ruling, broken};

/// Whether any version of `c` is carried by its messages.
pub(crate) fn any(c: &Contract) -> bool {
    c.versions.iter().any(|v| v.carried.is_some())
}

/// The ruling on `msg` from `from` when it states a version above the contract's.
pub(crate) fn check(c: &Contract, from: &str, msg: &Message) -> Option<Ruling> {
    let (index, v, stated) =
        (c.versions.iter().enumerate()).find_map(|(i, v)| Some((i, v, v.newer_in(&msg.value)?)))?;
    let newer = &v.carried.as_ref()?.newer;
    let entry = contract::join_pointer(
        "/versions",
        [index.to_string().as_str(), "carried", "newer"],
    );
    let what = msg.method.as_deref().unwrap_or("a message");
    let reason = format!(
        "{what} from {from} states {} {stated}, above the contract's {}",
        v.name,
        v.highest_number().unwrap_or_default()
    );
    Some(broken(c, "version.newer", &entry, Some(newer), msg, reason))
}
