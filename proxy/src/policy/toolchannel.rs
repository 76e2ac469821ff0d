//! toolchannel: refused reverse requests.
//!
//! The rule, with the contract text it comes from: a request whose method starts with
//! `sampling/` is answered -32003 SAMPLING_DISABLED, `elicitation/` and `roots/` -32004
//! CAPABILITY_NOT_NEGOTIATED, before dispatch (T-34; the ruling is the session-audit
//! record the contract asks for). The wire layer answers unknown `sampling/…` names with
//! the generic -32004, so the relay must show this policy an unknown request's partial
//! message too.
//!
//! Run by the engine from the contract's data, not here:
//! - the deadlines of both parties (`/limits`: their `start`, `stop` and `restart`
//!   triggers, timed by the budgets `initialize` carries, note T-67): hostHandshakeSeconds,
//!   readySeconds, hostHeartbeatSeconds (stopped by agentfy/release, started afresh when
//!   it is declined), releaseGraceSeconds, and the worker's own;
//! - one live connection per session (`/claims/workerSession`): the initialize result's
//!   `_meta.agentfy` claims the session; the same instanceId with a greater attempt
//!   supersedes the old socket (closed 4009), any other redial is refused (4002);
//! - handshake order (T-31) is the hostSession machine's data (`allows`, `outOfPlace`, a
//!   refusal that only reports an early agentfy/ready; note T-65).
//!
//! Ten bad frames → 4006 is the inspector's (badFramesMax); not repeated here.

use std::sync::Arc;

use contract::model::Kind;
use contract::wire::{Message, Wire};

use super::{Act, Ctx, Policy, Ruling};

/// Method prefixes the host refuses before dispatch, and the catalog name of the answer (T-34).
const REFUSED: [(&str, &str); 3] = [
    ("sampling/", "SAMPLING_DISABLED"),
    ("elicitation/", "CAPABILITY_NOT_NEGOTIATED"),
    ("roots/", "CAPABILITY_NOT_NEGOTIATED"),
];

/// toolchannel's policy for one WebSocket connection.
pub struct ToolPolicy {
    wire: Arc<Wire>,
}

impl ToolPolicy {
    /// The policy of one connection.
    pub fn new(wire: Arc<Wire>) -> Self {
        ToolPolicy { wire }
    }

    fn c(&self) -> &contract::Contract {
        self.wire.contract()
    }

    fn refused_prefix(&self, ctx: &Ctx, msg: &Message) -> Option<Ruling> {
        let method = msg.method.as_deref()?;
        let (_, name) = REFUSED.iter().find(|(p, _)| method.starts_with(p))?;
        let code = self.c().error_code(name).ok()?.clone();
        let reason = format!(
            "{method} from {} refused before dispatch (written to the session audit)",
            ctx.from
        );
        let reply = self
            .c()
            .jsonrpc_error(msg.id.as_ref(), &code, &reason, None);
        Some(Ruling {
            rule: if *name == "SAMPLING_DISABLED" {
                "toolchannel.sampling.refused"
            } else {
                "toolchannel.capability.refused"
            },
            seed: self.c().note_seed("T-34"),
            code: Some(code),
            reason,
            act: Act::Refuse {
                reply: Some(reply),
                close: None,
            },
        })
    }
}

impl Policy for ToolPolicy {
    fn on_message(&mut self, ctx: &Ctx, msg: &Message, _size: usize) -> Vec<Ruling> {
        match msg.kind {
            Kind::Request => self.refused_prefix(ctx, msg).into_iter().collect(),
            _ => Vec::new(),
        }
    }
}
