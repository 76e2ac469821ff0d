//! The proxy's policies: the generic engine of `contract-policy`, which runs any
//! contract's behaviour data, then the named extensions a contract declares where data
//! cannot speak (the hooks below, one module each), and the route's own rate limits.
//!
//! The relay makes one [`Policy`] per connection with [`for_route`] and shares one
//! [`SharedState`] across the run; what a policy is and how it is driven is
//! `contract_policy`'s documentation. The per-route rate limits of the proxy's config
//! live in [`ratelimit`]: they are the operator's, not a contract rule.

pub mod ratelimit;
pub mod rukh;
pub mod toolchannel;
pub mod xsession;

use std::sync::Arc;

use contract::wire::Wire;

pub use contract_policy::{
    Act, Bucket, Closing, CreditGate, Ctx, DataRuling, Dir, GateDecision, Held, Limits, Overrun,
    Policy, Ruling, SharedState, closing_with, engine, error_seed, refuses,
};

/// What a route tells its policies beyond the contract.
#[derive(Debug, Clone, Default)]
pub struct RouteRules {
    /// The upstream demands the contract's auth line first (an xsession inbox whose
    /// registry record has an ipcToken): anything else first breaks beforeHandshake.
    pub auth_required: bool,
    /// The route's channel (the contract's first when empty): what an `open` trigger names.
    pub channel: String,
}

/// The policy for one connection of a route speaking `wire`'s contract: the generic
/// [`engine`], which runs the behaviour the contract carries as data, then the named
/// extensions the contract lists (`extensions`), each a hook of this module.
pub fn for_contract(
    wire: &Arc<Wire>,
    shared: &Arc<SharedState>,
    conn: u64,
    session: u64,
) -> Box<dyn Policy> {
    for_route(wire, shared, conn, session, RouteRules::default())
}

/// [`for_contract`], with what the route says about its upstream.
pub fn for_route(
    wire: &Arc<Wire>,
    shared: &Arc<SharedState>,
    conn: u64,
    session: u64,
    rules: RouteRules,
) -> Box<dyn Policy> {
    // The engine knows the route's channel: an `open` trigger names one.
    let engine =
        engine::Engine::new(wire.clone(), shared.clone(), conn, session).on_channel(&rules.channel);
    let at = Site {
        wire,
        rules: &rules,
    };
    let hands: Vec<Box<dyn Policy>> = (wire.contract().extensions.keys())
        .filter_map(|name| hook(name, &at))
        .collect();
    contract_policy::layered(engine, hands)
}

/// Where a hook is set up: the route's contract and its rules.
struct Site<'a> {
    wire: &'a Arc<Wire>,
    rules: &'a RouteRules,
}

/// The named extension `name` (`contract::extensions::KNOWN`) for one connection: a
/// hand-written module for rules its contract's data cannot say. `None` for a name this
/// proxy does not implement (a route whose contract names one is refused at set-up).
fn hook(name: &str, at: &Site) -> Option<Box<dyn Policy>> {
    let w = at.wire.clone();
    Some(match name {
        "rukh.session" => Box::new(rukh::RukhPolicy::new(w)),
        "toolchannel.host" => Box::new(toolchannel::ToolPolicy::new(w)),
        "xsession.admission" => {
            Box::new(xsession::XsPolicy::new(w).auth_required(at.rules.auth_required))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod hooks {
    use super::*;

    /// Every hook `contractgen check` accepts is one this proxy runs.
    #[test]
    fn every_known_extension_has_a_hook() {
        let wire =
            Arc::new(Wire::new(Arc::new(contract::builtin("mcp").expect("mcp"))).expect("wire"));
        let rules = RouteRules::default();
        let at = Site {
            wire: &wire,
            rules: &rules,
        };
        for h in contract::extensions::KNOWN {
            assert!(hook(h.name, &at).is_some(), "no hook for {}", h.name);
        }
        assert!(hook("acme.magic", &at).is_none());
    }
}
