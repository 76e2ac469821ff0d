//! toolchannel: refused reverse requests and the host's deadlines.
//!
//! Rules, with the contract text they come from:
//! - a request whose method starts with `sampling/` is answered -32003
//!   SAMPLING_DISABLED, `elicitation/` and `roots/` -32004
//!   CAPABILITY_NOT_NEGOTIATED, before dispatch (T-34; the ruling is the
//!   session-audit record the contract asks for). The wire layer answers
//!   unknown `sampling/…` names with the generic -32004, so the relay must show
//!   this policy an unknown request's partial message too;
//! - the host's deadlines (hostSession machine), flagged with the close code
//!   the host should have used — the proxy reports, the host closes:
//!   hostHandshakeSeconds from socket open to notifications/initialized
//!   (4003), readySeconds from there to running = agentfy/ready seen and
//!   tools/list answered (4003), hostHeartbeatSeconds (= grace + interval)
//!   from running or the previous agentfy/heartbeat (4004, T-8),
//!   releaseGraceSeconds from agentfy/release to its result (no code). A socket
//!   a redial superseded runs none of them: the new socket does.
//!
//! Run by the engine from the contract's data, not here:
//! - one live connection per session (`/claims/workerSession`): the initialize result's
//!   `_meta.agentfy` claims the session; the same instanceId with a greater attempt
//!   supersedes the old socket (closed 4009), any other redial is refused (4002);
//! - handshake order (T-31) is the hostSession machine's data (`allows`, `outOfPlace`, a
//!   refusal that only reports an early agentfy/ready; note T-65).
//!
//! Ten bad frames → 4006 is the inspector's (badFramesMax); not repeated here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use contract::model::Kind;
use contract::wire::{Message, Wire};
use serde_json::json;

use super::{Act, Ctx, Limits, Policy, Ruling, SharedState};

/// Method prefixes the host refuses before dispatch, and the catalog name of the answer (T-34).
const REFUSED: [(&str, &str); 3] = [
    ("sampling/", "SAMPLING_DISABLED"),
    ("elicitation/", "CAPABILITY_NOT_NEGOTIATED"),
    ("roots/", "CAPABILITY_NOT_NEGOTIATED"),
];

#[derive(Default)]
struct Deadlines {
    handshake: Option<Instant>,
    ready: Option<Instant>,
    heartbeat: Option<Instant>,
    release: Option<Instant>,
}

/// toolchannel's policy for one WebSocket connection.
pub struct ToolPolicy {
    wire: Arc<Wire>,
    shared: Arc<SharedState>,
    conn: u64,
    /// The route, once the connection opened.
    route: String,
    /// Host requests whose answer matters here, by id.
    asked: HashMap<String, String>,
    ready_seen: bool,
    listed: bool,
    due: Deadlines,
}

impl ToolPolicy {
    /// A policy for connection `conn`.
    pub fn new(wire: Arc<Wire>, shared: Arc<SharedState>, conn: u64) -> Self {
        ToolPolicy {
            wire,
            shared,
            conn,
            route: String::new(),
            asked: HashMap::new(),
            ready_seen: false,
            listed: false,
            due: Deadlines::default(),
        }
    }

    /// The contract's limits, evaluated once for the route's wire.
    fn limits(&self) -> &Limits {
        self.wire.limits()
    }

    fn c(&self) -> &contract::Contract {
        self.wire.contract()
    }

    fn arm(&self, now: Instant, limit: &str) -> Option<Instant> {
        self.limits()
            .duration(limit)
            .ok()
            .and_then(|d| now.checked_add(d))
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

    fn maybe_running(&mut self, now: Instant) {
        if self.ready_seen && self.listed && self.due.ready.is_some() {
            self.due.ready = None;
            self.due.heartbeat = self.arm(now, "hostHeartbeatSeconds");
        }
    }

    /// Whether this connection still carries its session: a redial's claim
    /// (`/claims`, run by the engine) has not superseded it.
    fn is_live(&self) -> bool {
        let (route, conn) = (self.route.as_str(), self.conn);
        !self.shared.with_engine(|s| s.superseded(route, conn))
    }

    fn missed(&self, rule: &'static str, limit: &str, what: &str) -> Ruling {
        let secs = self.limits().number(limit).unwrap_or_default();
        Ruling {
            rule,
            seed: self.limits().seed(limit).to_string(),
            code: self.limits().action_code(limit).cloned(),
            reason: format!("{what} within {limit} ({secs} s)"),
            act: Act::Flag,
        }
    }
}

impl Policy for ToolPolicy {
    fn on_open(&mut self, route: &str, now: Instant) -> Vec<Ruling> {
        self.route = route.to_string();
        self.due.handshake = self.arm(now, "hostHandshakeSeconds");
        vec![]
    }

    fn on_message(&mut self, ctx: &Ctx, msg: &Message, _size: usize) -> Vec<Ruling> {
        let now = ctx.now;
        let method = msg.method.as_deref().unwrap_or("");
        match msg.kind {
            Kind::Request => {
                if let Some(r) = self.refused_prefix(ctx, msg) {
                    return vec![r];
                }
                match method {
                    "tools/list" | "agentfy/release" => {
                        if let Some(id) = &msg.id
                            && self.asked.len() < contract::io::DEFAULT_PENDING
                        {
                            self.asked.insert(id.to_string(), method.to_string());
                        }
                        if method == "agentfy/release" {
                            self.due.release = self.arm(now, "releaseGraceSeconds");
                            self.due.heartbeat = None;
                        }
                    }
                    "agentfy/heartbeat" if self.due.heartbeat.is_some() => {
                        self.due.heartbeat = self.arm(now, "hostHeartbeatSeconds");
                    }
                    _ => {}
                }
                vec![]
            }
            Kind::Notification | Kind::Event => {
                match method {
                    "notifications/initialized" if self.due.handshake.take().is_some() => {
                        self.due.ready = self.arm(now, "readySeconds");
                    }
                    "agentfy/ready" => {
                        self.ready_seen = true;
                        self.maybe_running(now);
                    }
                    _ => {}
                }
                vec![]
            }
            Kind::Response | Kind::Error => {
                let Some(asked) = msg
                    .correlation
                    .as_ref()
                    .and_then(|id| self.asked.remove(&id.to_string()))
                else {
                    return vec![];
                };
                let ok = msg.kind == Kind::Response;
                match asked.as_str() {
                    "tools/list" if ok => {
                        self.listed = true;
                        self.maybe_running(now);
                        vec![]
                    }
                    "agentfy/release" => {
                        self.due.release = None;
                        let accepted = msg.value.pointer("/result/accepted") != Some(&json!(false));
                        if !(ok && accepted) {
                            // T-12: declined, back to running.
                            self.due.heartbeat = self.arm(now, "hostHeartbeatSeconds");
                        }
                        vec![]
                    }
                    _ => vec![],
                }
            }
        }
    }

    fn on_close(&mut self, _ctx: &Ctx) -> Vec<Ruling> {
        self.due = Deadlines::default();
        vec![]
    }

    fn next_deadline(&self) -> Option<Instant> {
        [
            self.due.handshake,
            self.due.ready,
            self.due.heartbeat,
            self.due.release,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn on_tick(&mut self, now: Instant) -> Vec<(u64, Ruling)> {
        if !self.is_live() {
            // Superseded: the new socket re-arms its own timers.
            self.due = Deadlines::default();
            return vec![];
        }
        let mut out = Vec::new();
        let fired = |d: &mut Option<Instant>| d.take_if(|t| *t <= now).is_some();
        if fired(&mut self.due.handshake) {
            out.push(self.missed(
                "toolchannel.deadline.handshake",
                "hostHandshakeSeconds",
                "no notifications/initialized (handshake_timeout)",
            ));
        }
        if fired(&mut self.due.ready) {
            out.push(self.missed(
                "toolchannel.deadline.ready",
                "readySeconds",
                "session not running: agentfy/ready or the tools/list answer missing (ready_timeout)",
            ));
        }
        if fired(&mut self.due.heartbeat) {
            out.push(self.missed(
                "toolchannel.deadline.heartbeat",
                "hostHeartbeatSeconds",
                "no agentfy/heartbeat (heartbeat_timeout)",
            ));
        }
        if fired(&mut self.due.release) {
            out.push(self.missed(
                "toolchannel.deadline.release",
                "releaseGraceSeconds",
                "no agentfy/release result (sandbox deleted anyway, outputsFlushed false)",
            ));
        }
        out.into_iter().map(|r| (self.conn, r)).collect()
    }
}
