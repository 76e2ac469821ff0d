//! `contract-proxy`: a contract-aware man-in-the-middle proxy.
//!
//! PARTIAL (issue 6): unix and tcp endpoints, byte relay with end-to-end
//! backpressure, and sans-IO inspection of every message against its contract
//! with a pretty or JSON live view. Not yet: WebSocket, QUIC, exec/stdio/fd,
//! enforce mode, recording/replay, multi-route config.
#![forbid(unsafe_code)]

pub mod conn;
pub mod endpoint;
pub mod inspect;
pub mod log;
pub mod relay;

/// Resolve the contract a route names: a built-in name or a path.
pub fn contract_for(name_or_path: &str) -> Result<contract::Contract, contract::LoadError> {
    contract::resolve(name_or_path)
}
