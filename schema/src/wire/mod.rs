//! The runtime half of a contract: bytes in, validated messages (or violations) out.
//!
//! - [`framing`]: sans-IO codecs for every framing a contract can declare,
//!   implementing tokio-util's `Decoder`/`Encoder`;
//! - [`headers`]: the `header-delimited` codec (LSP, DAP);
//! - [`json`]: bounded JSON parsing and the strict profile;
//! - [`classify`]: kind, method, ids, trace id, direction and schema checks.
//!
//! Everything is configured from the contract; no protocol is special-cased.

pub mod classify;
pub mod framing;
pub mod headers;
pub mod json;

pub use classify::{
    Correlator, Message, Violation, ViolationClass, Wire, WireError, params_may_be_absent,
};
pub use framing::{BinaryFrame, ChannelCodec, FrameError};
pub use json::{JsonError, JsonLimits};

/// A close code and reason, as a message transport carries them (WebSocket's close frame,
/// QUIC's application close) and as a contract's `closeCodes` prescribe them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// The close code (e.g. 4009).
    pub code: u16,
    /// The reason text.
    pub reason: String,
}
