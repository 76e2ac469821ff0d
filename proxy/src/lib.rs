//! `contract-proxy`: a contract-aware man-in-the-middle proxy.
//!
//! Bytes come in through an endpoint (`endpoint::*`, one module per
//! transport, boxed as `conn::Conn`), are cut into frames and judged by the
//! sans-IO `inspect::Inspector`, and leave through the relay (`relay`) toward
//! the other side, re-framed for its transport. `cli` and `config` turn the
//! command line or a TOML file into routes, and `server::Proxy` assembles and
//! runs them (for `run`, the demo and the in-process tests alike).
//!
//! Every frame also reaches the sinks (`log` live view, `trace` OTLP spans) and
//! the recording (`record`, read back by `show` and `replay`); `policy` holds the
//! generic engine that runs each contract's stateful rules, and the named
//! extensions a contract declares.
#![deny(unsafe_code)]

pub mod background;
pub mod cli;
pub mod config;
pub mod demo;
pub mod inspect;
pub mod lines;
pub mod log;
pub mod pcap;
pub mod policy;
pub mod record;
pub mod redact;
pub mod relay;
pub mod replay;
pub mod server;
pub mod trace;
pub mod web;

/// Resolve the contract a route names: a built-in name or a path.
pub fn contract_for(name_or_path: &str) -> Result<contract::Contract, contract::LoadError> {
    contract::resolve(name_or_path)
}
