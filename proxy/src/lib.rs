//! `contract-proxy`: a contract-aware man-in-the-middle proxy.
//!
//! SKELETON: transports, inspection and enforcement arrive with issues 6 and 7.
//! Today the library only resolves a contract by name or path, which is the
//! first step every `run` will take.
#![forbid(unsafe_code)]

/// Resolve the contract a route names: a built-in name or a path.
pub fn contract_for(name_or_path: &str) -> Result<contract::Contract, contract::LoadError> {
    contract::resolve(name_or_path)
}
