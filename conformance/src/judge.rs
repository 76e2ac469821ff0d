//! The implementation's traffic judged by the proxy's own engine (`contract-policy`): every
//! message both parties send in a session goes through the engine, as it would through the
//! enforcing proxy, and what the engine rules about a message the *implementation* sent is
//! a breach of the contract's behaviour data: a message out of place in a machine
//! (a chunk after its stream's end, a task event after the task's final event), an id that
//! breaks its party's rule, an answer to nothing, a rate exceeded, credit overrun.
//!
//! The suite's own messages go through too, so the engine's state follows the session;
//! what it rules about them is not the implementation's doing and is dropped. Nothing here
//! decides by protocol: a contract of one's own is judged by its own data.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use contract::wire::{BinaryFrame, Message, Wire};
use contract_policy::engine::credit::DataFields;
use contract_policy::{Act, Ctx, Dir, Engine, Policy, Ruling, SharedState};

/// The route name the engine's tables are keyed by.
const ROUTE: &str = "conformance";
/// The judge keeps this many findings; a run past it is broken enough to show.
const FOUND_MAX: usize = 16;

/// What the engine ruled about one of the implementation's messages.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The ruling: rule name, reason ending with the contract entry, the contract's code.
    pub ruling: Ruling,
    /// The frame that drew it, as it crossed the wire.
    pub raw: Bytes,
}

/// One session's judge: the engine on the control channel, and on the data channel
/// when the contract has one.
pub struct Judge {
    parties: Parties,
    control: Box<dyn Policy>,
    data: Option<DataSide>,
    /// Findings on the implementation's messages, in arrival order (at most [`FOUND_MAX`]).
    pub found: Vec<Finding>,
}

impl Judge {
    /// A judge for a session of `wire`'s contract between the suite's party `me` and the
    /// implementation's `other`, opened now.
    pub fn new(wire: &Arc<Wire>, me: &str, other: &str, control: &str, data: Option<&str>) -> Self {
        let shared = Arc::new(SharedState::new());
        let now = Instant::now();
        let open = |conn, channel: &str| {
            let engine = Engine::new(wire.clone(), shared.clone(), conn, 1).on_channel(channel);
            let mut p = contract_policy::layered(engine, Vec::new());
            // A connection cap or a claim on open is the suite's own connection: not judged.
            let _ = p.on_open(ROUTE, now);
            p
        };
        let c = wire.contract();
        let data = data.map(|ch| DataSide {
            policy: open(2, ch),
            fields: DataFields::new(c, ch),
        });
        Judge {
            parties: Parties {
                me: me.to_string(),
                other: other.to_string(),
            },
            control: open(1, control),
            data,
            found: Vec::new(),
        }
    }

    /// A message the suite sent: the engine follows it, its rulings are the suite's.
    pub fn sent(&mut self, msg: &Message, size: usize) {
        let ctx = self.parties.ctx(1, true);
        let _ = self.control.on_message(&ctx, msg, size);
    }

    /// A message the implementation sent, decoded and valid on its own.
    pub fn received(&mut self, msg: &Message, raw: &Bytes) {
        let ctx = self.parties.ctx(1, false);
        let rulings = self.control.on_message(&ctx, msg, raw.len());
        self.keep(rulings, raw);
    }

    /// A data frame, sent by the suite (`from_me`) or by the implementation.
    pub fn data(&mut self, frame: &BinaryFrame, raw: &Bytes, from_me: bool) {
        let ctx = self.parties.ctx(2, from_me);
        let Some(DataSide { policy, fields }) = self.data.as_mut() else {
            return;
        };
        let held = fields.held(frame, raw.clone());
        // Observe mode: frames are accounted, never held, so nothing waits on the judge.
        let ruling = policy.on_data(&ctx, held, false).ruling;
        if !from_me {
            self.keep(ruling.into_iter().collect(), raw);
        }
    }

    fn keep(&mut self, rulings: Vec<Ruling>, raw: &Bytes) {
        let breaches = rulings
            .into_iter()
            .filter(|r| !matches!(r.act, Act::Release { .. }));
        for ruling in breaches {
            if self.found.len() < FOUND_MAX {
                let raw = raw.clone();
                self.found.push(Finding { ruling, raw });
            }
        }
    }
}

/// The engine on the data channel, and where its frames keep the credit key and the
/// sequence number.
struct DataSide {
    policy: Box<dyn Policy>,
    fields: DataFields,
}

/// The suite's party and the implementation's.
struct Parties {
    me: String,
    other: String,
}

impl Parties {
    /// What the engine is told of a frame on connection `conn`, sent now.
    fn ctx(&self, conn: u64, from_me: bool) -> Ctx<'_> {
        let (from, to) = match from_me {
            true => (self.me.as_str(), self.other.as_str()),
            false => (self.other.as_str(), self.me.as_str()),
        };
        Ctx {
            route: ROUTE,
            conn,
            session: 1,
            dir: if from_me { Dir::Up } else { Dir::Down },
            from,
            to,
            now: Instant::now(),
        }
    }
}
