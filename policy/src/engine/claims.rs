//! Claims as data: one live connection per identity, across redials.
//!
//! A contract's `claims` entry names the message that claims an identity for its
//! connection (toolchannel: the worker's initialize result, keyed by its sessionId). The
//! first claim takes the identity. A later claim from another connection supersedes the
//! holder when the entry's `claimant` is the same and its `attempt` greater (each where the
//! entry names it): the message goes on and the holder gets the `superseded` action, on the
//! other connection. Any other claim gets `refused` on its own. A holder that closes keeps
//! the identity for a redial to take back, unless its `releases` message went by first.

use std::collections::{HashMap, HashSet};

use contract::Contract;
use contract::model::Claim;
use contract::wire::Message;
use serde_json::Value;

use super::{Act, Ruling, closing_for, fires, ruling};

/// At most this many identities are held per run; past it a new claim is flagged and not
/// tracked. A guard against a peer inventing identities without end, not a protocol number.
const MAX_HELD: usize = 100_000;

/// Who holds an identity.
#[derive(Debug)]
struct Holder {
    claimant: Option<Value>,
    attempt: Option<f64>,
    /// The holding connection; `None` once it closed (a redial may take it back).
    conn: Option<u64>,
}

/// Every claimed identity of a run, by (route, claim, identity).
#[derive(Debug, Default)]
pub(crate) struct Claims {
    held: HashMap<(String, String, String), Holder>,
    /// Connections a redial superseded, until they close.
    superseded: HashSet<(String, u64)>,
}

/// A claim a message makes, to be taken once the message is known to go on.
#[derive(Debug)]
pub(crate) struct Take {
    id: (String, String, String),
    holder: Holder,
}

/// A claim this connection holds.
#[derive(Debug, Default)]
pub(crate) struct Mine {
    held: Vec<(String, String)>,
    /// Claims whose `releases` message went by on this connection.
    released: HashSet<String>,
}

/// Which of a claim's two actions a ruling runs.
#[derive(Clone, Copy)]
enum Part {
    Superseded,
    Refused,
}

/// A ruling for the claim entry `name`'s action `part`.
fn claim_ruling(name: &str, part: Part, cl: &Claim, reason: String, act: Act) -> Ruling {
    let (a, field, rule) = match part {
        Part::Superseded => (&cl.superseded, "superseded", "claim.superseded"),
        Part::Refused => (&cl.refused, "refused", "claim.refused"),
    };
    let entry = format!("/claims/{}/{field}", contract::escape_pointer(name));
    ruling(rule, &entry, &a.seed, a.code.as_ref(), reason, act)
}

impl Claims {
    /// What `msg` from `from` on connection `conn` of `route` claims: rulings now, and the
    /// claims to take if it goes on.
    pub(crate) fn judge(
        &self,
        c: &Contract,
        (route, conn): (&str, u64),
        from: &str,
        msg: &Message,
    ) -> (Vec<Ruling>, Vec<Take>) {
        let (mut out, mut takes) = (Vec::new(), Vec::new());
        for (name, cl) in &c.claims {
            if !fires(c, &cl.message, from, msg) {
                continue;
            }
            let Some(key) = contract::get_pointer(&msg.value, &cl.key).map(text) else {
                continue;
            };
            let holder = Holder {
                claimant: cl
                    .claimant
                    .as_ref()
                    .and_then(|p| contract::get_pointer(&msg.value, p))
                    .cloned(),
                attempt: cl
                    .attempt
                    .as_ref()
                    .and_then(|p| contract::get_pointer(&msg.value, p)?.as_f64()),
                conn: Some(conn),
            };
            let id = (route.to_string(), name.clone(), key.clone());
            match self.held.get(&id) {
                Some(h) if h.conn == Some(conn) => {}
                Some(h) => match supersedes(h, &holder) {
                    Ok(()) => out.extend(superseding(name, cl, h.conn, conn, &holder)),
                    Err(why) => {
                        let reason = format!("a claim of {key} refused: {why}");
                        let act = super::on_connection(Some(&cl.refused), &reason);
                        out.push(claim_ruling(name, Part::Refused, cl, reason, act));
                        continue;
                    }
                },
                None if self.held.len() >= MAX_HELD => {
                    let reason = format!("{MAX_HELD} identities held: {key} is not tracked");
                    out.push(claim_ruling(name, Part::Refused, cl, reason, Act::Flag));
                    continue;
                }
                None => {}
            }
            takes.push(Take { id, holder });
        }
        (out, takes)
    }

    /// Take the claims of a message that went on; `mine` is the claiming connection's.
    pub(crate) fn take(&mut self, takes: Vec<Take>, mine: &mut Mine) {
        for t in takes {
            if let Some(old) = self.held.get(&t.id).and_then(|h| h.conn)
                && Some(old) != t.holder.conn
            {
                self.superseded.insert((t.id.0.clone(), old));
            }
            let own = (t.id.1.clone(), t.id.2.clone());
            if !mine.held.contains(&own) {
                mine.held.push(own);
            }
            self.held.insert(t.id, t.holder);
        }
    }

    /// Whether a redial superseded connection `conn` of `route`.
    pub(crate) fn is_superseded(&self, route: &str, conn: u64) -> bool {
        self.superseded.contains(&(route.to_string(), conn))
    }

    /// Connection `conn` closed: its identities wait for a redial, or end if released.
    pub(crate) fn close(&mut self, route: &str, conn: u64, mine: &mut Mine) {
        self.superseded.remove(&(route.to_string(), conn));
        for (name, key) in mine.held.drain(..) {
            let id = (route.to_string(), name, key);
            if self.held.get(&id).is_none_or(|h| h.conn != Some(conn)) {
                continue;
            }
            if mine.released.contains(&id.1) {
                self.held.remove(&id);
            } else if let Some(h) = self.held.get_mut(&id) {
                h.conn = None;
            }
        }
    }
}

impl Mine {
    /// Note the `releases` messages among `msg` from `from`, which went on.
    pub(crate) fn observe(&mut self, c: &Contract, from: &str, msg: &Message) {
        for (name, cl) in &c.claims {
            if cl.releases.as_ref().is_some_and(|r| fires(c, r, from, msg)) {
                self.released.insert(name.clone());
            }
        }
    }
}

/// Whether `new` may supersede `held`: the same claimant and a greater attempt, each
/// where the entry names it; otherwise why not.
fn supersedes(held: &Holder, new: &Holder) -> Result<(), String> {
    if held.claimant != new.claimant {
        return Err("another claimant holds it".into());
    }
    match (held.attempt, new.attempt) {
        (Some(a), Some(b)) if b <= a => Err(format!("attempt {b} is not greater than {a}")),
        (Some(_), None) => Err("the claim carries no attempt".into()),
        _ => Ok(()),
    }
}

/// The ruling for a claim that supersedes: the holder, if still open, gets `superseded`.
fn superseding(name: &str, cl: &Claim, old: Option<u64>, conn: u64, new: &Holder) -> Vec<Ruling> {
    let Some(old) = old else {
        return Vec::new(); // the holder already closed: the redial simply takes it back
    };
    let attempt = new
        .attempt
        .map(|a| format!(" (attempt {a})"))
        .unwrap_or_default();
    let reason = format!("connection {conn}{attempt} supersedes connection {old}");
    let act = match closing_for(&cl.superseded, &reason) {
        Some(close) => Act::CloseConn { conn: old, close },
        None => Act::Flag,
    };
    vec![claim_ruling(name, Part::Superseded, cl, reason, act)]
}

/// An identity's text (or an agreed value's, as a close reason names it): a string as it
/// is, anything else as JSON.
pub(super) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
