//! Agreements as data: a value both parties of a connection hold once the handshake
//! settles it, which later messages repeat.
//!
//! A contract's `agreements` entry names where the handshake states the value
//! (`settled`: toolchannel's sessionId in initialize and its result) and where later
//! messages repeat it (`repeated`: the heartbeat's sessionId). The engine keeps, per
//! connection, what each settling place stated, and so the agreed value (the first, or
//! the lowest of them all: toolchannel's effective channel version). A statement of the
//! other party's that differs gets the entry's `mismatch` (toolchannel: -32002, then
//! close 4002, whose reason names the code and both values); one of the judge's own is
//! flagged, as nobody prescribes what its peer does about it.

use contract::Contract;
use contract::model::{Agreement, AgreementRule};
use contract::wire::Message;
use serde_json::Value;

use super::claims::text;
use super::{Act, Ruling, act_at, ruling};

/// What each settling place stated on one connection, by agreement (in the contract's
/// order; empty until the first statement). A vector, not a map by name: this is held by
/// every connection for its life.
#[derive(Debug, Default)]
pub(crate) struct Stated {
    by: Vec<Vec<Option<Value>>>,
}

/// A settling statement to remember once its message is known to go on.
#[derive(Debug)]
pub(crate) struct Settle {
    /// The agreement's position in the contract.
    agreement: usize,
    /// The settling place's position in the agreement.
    index: usize,
    value: Value,
}

/// Whether `c` declares any agreement.
pub(crate) fn any(c: &Contract) -> bool {
    !c.agreements.is_empty()
}

impl Stated {
    /// The rulings on `msg` from `from`, and the settling statements it makes.
    pub(crate) fn judge(
        &self,
        c: &Contract,
        from: &str,
        msg: &Message,
    ) -> (Vec<Ruling>, Vec<Settle>) {
        let (mut out, mut settles) = (Vec::new(), Vec::new());
        for (agreement, (name, a)) in c.agreements.iter().enumerate() {
            // Borrowed, not copied: this runs for every message of the connection.
            let stated = self
                .by
                .get(agreement)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (index, p) in a.settled.iter().enumerate() {
                let Some(v) = p.value_in(c, msg) else {
                    continue;
                };
                let agreed = match a.rule {
                    AgreementRule::Same => a.agreed(stated),
                    AgreementRule::Lowest => None,
                };
                match agreed {
                    Some(agreed) if agreed != v => {
                        out.push(mismatch(c, (name, a), from, msg, (agreed, v)))
                    }
                    _ => settles.push(Settle {
                        agreement,
                        index,
                        value: v.clone(),
                    }),
                }
            }
            // The agreed value only where the message repeats one: most messages do not.
            for v in a.repeated.iter().filter_map(|p| p.value_in(c, msg)) {
                match a.agreed(stated) {
                    Some(agreed) if agreed != v => {
                        out.push(mismatch(c, (name, a), from, msg, (agreed, v)))
                    }
                    _ => {}
                }
            }
        }
        (out, settles)
    }

    /// Remember the settling statements of a message that went on.
    pub(crate) fn settle(&mut self, c: &Contract, settles: Vec<Settle>) {
        for s in settles {
            let Some((_, a)) = c.agreements.get_index(s.agreement) else {
                continue;
            };
            if self.by.len() <= s.agreement {
                self.by.resize_with(s.agreement + 1, Vec::new);
            }
            let stated = &mut self.by[s.agreement];
            if stated.is_empty() {
                *stated = vec![None; a.settled.len()];
            }
            if let Some(slot) = stated.get_mut(s.index).filter(|v| v.is_none()) {
                *slot = Some(s.value);
            }
        }
    }
}

/// The ruling on `msg` stating `got` where `agreed` holds: the entry's `mismatch` when the
/// other party states it, a flag when the judge does.
fn mismatch(
    c: &Contract,
    (name, a): (&str, &Agreement),
    from: &str,
    msg: &Message,
    (agreed, got): (&Value, &Value),
) -> Ruling {
    let entry = format!("/agreements/{}", contract::escape_pointer(name));
    let reason = format!("{name} expected={} got={}", text(agreed), text(got));
    if from == a.judge {
        let why = format!("the {from} states another {name} than agreed: {reason}");
        return ruling("agreement.mismatch", &entry, &a.seed, None, why, Act::Flag);
    }
    let act = act_at(c, Some(&a.mismatch), msg, &reason, Some(&entry));
    let code = a.mismatch.code.as_ref();
    ruling(
        "agreement.mismatch",
        &entry,
        &a.mismatch.seed,
        code,
        reason,
        act,
    )
}
