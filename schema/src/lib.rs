//! `contract`: the machine-readable protocol contracts and their Rust model.
//!
//! The five contracts in `schema/contracts/` are embedded at compile time
//! ([`builtin`]), so every tool can name them without a path. [`load`] parses
//! and models a contract; [`check`] validates it against the meta-schema and
//! lints its cross-references; [`access`] hands out its values as Rust types
//! (durations, byte counts, rates, codes by name). Nothing here does I/O beyond reading the file a
//! caller names.
#![forbid(unsafe_code)]

pub mod access;
pub mod check;
pub mod extensions;
pub mod ids;
pub mod io;
pub mod machine;
pub mod model;
pub mod plain;
mod pointer;
pub mod rate;
pub mod wire;

pub use access::{AccessError, Limits, Rate, TIME_SCALE_ENV, env_time_scale};
pub use check::{Problem, check_document};
pub use io::{Connection, Embedded};
pub use model::Contract;
pub use pointer::{
    escape as escape_pointer, get as get_pointer, join as join_pointer, remove as remove_pointer,
    set as set_pointer,
};

use std::path::Path;

/// The contracts shipped with the project, by name, as committed JSON text.
pub const BUILTIN: &[(&str, &str)] = &[
    ("kernel", include_str!("../contracts/kernel.json")),
    ("xsession", include_str!("../contracts/xsession.json")),
    ("rukh", include_str!("../contracts/rukh.json")),
    ("toolchannel", include_str!("../contracts/toolchannel.json")),
    ("mcp", include_str!("../contracts/mcp.json")),
];

/// The names of the built-in contracts, in [`BUILTIN`] order.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// The committed meta-schema text.
pub const META_SCHEMA: &str = include_str!("../contract.schema.json");

/// Errors from loading a contract.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// File that failed.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The text is not JSON.
    #[error("{path}: not JSON: {source}")]
    Json {
        /// File that failed.
        path: String,
        /// Underlying error.
        source: serde_json::Error,
    },
    /// The contract has problems; see `contractgen check`.
    #[error("{path}: {} problem(s); first: {}", problems.len(), problems.first().map(|p| p.to_string()).unwrap_or_default())]
    Invalid {
        /// File that failed.
        path: String,
        /// Every problem found.
        problems: Vec<Problem>,
    },
    /// A resource given without a URI has no `$id` to be known by.
    #[error("{path}: no $id to name this resource by: give it as URI=FILE")]
    ResourceWithoutId {
        /// File that failed.
        path: String,
    },
    /// No built-in contract has this name.
    #[error("no built-in contract named {0:?} (built in: {known})", known = builtin_names().join(", "))]
    UnknownBuiltin(String),
}

/// Parse, check and model a contract from its JSON text. `origin` names it in errors.
/// A plain JSON Schema is read as a types-only contract named after `origin`'s file
/// stem ([`plain`]).
pub fn from_str(origin: &str, text: &str) -> Result<Contract, LoadError> {
    from_str_with(origin, text, &plain::Resources::default())
}

/// [`from_str`], a plain JSON Schema's references outside itself taken from `resources`
/// ([`plain::contract_with`]).
pub fn from_str_with(
    origin: &str,
    text: &str,
    resources: &plain::Resources,
) -> Result<Contract, LoadError> {
    let doc = plain::as_contract(origin, parse(origin, text)?, resources);
    let (contract, problems) = check_document(origin, &doc);
    match contract {
        Some(c) if problems.is_empty() => Ok(c),
        _ => Err(LoadError::Invalid {
            path: origin.to_string(),
            problems,
        }),
    }
}

/// `text` as JSON; `origin` names it in the error.
pub(crate) fn parse(origin: &str, text: &str) -> Result<serde_json::Value, LoadError> {
    serde_json::from_str(text).map_err(|source| LoadError::Json {
        path: origin.to_string(),
        source,
    })
}

/// The text of the file at `path`, with the path as errors name it.
pub(crate) fn read_text(path: &Path) -> Result<(String, String), LoadError> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((origin, text)),
        Err(source) => Err(LoadError::Io {
            path: origin,
            source,
        }),
    }
}

/// Load and check a contract file.
pub fn load(path: &Path) -> Result<Contract, LoadError> {
    load_with(path, &plain::Resources::default())
}

/// [`load`], a plain JSON Schema's references outside itself taken from `resources`.
pub fn load_with(path: &Path, resources: &plain::Resources) -> Result<Contract, LoadError> {
    let (origin, text) = read_text(path)?;
    from_str_with(&origin, &text, resources)
}

/// Load one of the built-in contracts by name.
pub fn builtin(name: &str) -> Result<Contract, LoadError> {
    let (_, text) = BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| LoadError::UnknownBuiltin(name.to_string()))?;
    from_str(&format!("builtin:{name}"), text)
}

/// Load a contract given either a built-in name or a path. A bare word that is neither
/// a built-in name nor an existing file is reported as an unknown name, with the list.
pub fn resolve(name_or_path: &str) -> Result<Contract, LoadError> {
    let path = Path::new(name_or_path);
    let bare = path.extension().is_none() && path.components().count() == 1;
    if BUILTIN.iter().any(|(n, _)| *n == name_or_path) || (bare && !path.exists()) {
        builtin(name_or_path)
    } else {
        load(path)
    }
}
