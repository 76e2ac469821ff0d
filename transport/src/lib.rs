//! `contract-transport`: the transports every tool of the toolchain reaches a peer by.
//!
//! One module per transport under [`endpoint`] (unix, tcp, WebSocket, QUIC, TLS, a
//! launched process's stdio or inherited fd, Windows named pipes), all behind one small
//! surface: an [`endpoint::Endpoint`] parsed from text, `listen` and `connect` handing out
//! a boxed [`conn::Conn`], either a byte stream or a message stream. The proxy relays
//! between two of them; the conformance suite reaches the implementation under test by
//! them; neither names a transport type.
#![deny(unsafe_code)]

pub mod conn;
pub mod endpoint;
