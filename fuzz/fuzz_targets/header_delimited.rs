//! The LSP example contract's `stdio` channel (examples/lsp/lsp.json, not built in):
//! arbitrary bytes, split at fuzzer-chosen points, through the `header-delimited`
//! codec (Content-Length, a Content-Type value list, unknown fields rejected, header
//! and body caps); every body must be within `bodyMax`, then go through
//! `Wire::decode` (JSON, JSON-RPC classification, schemas) without panicking.
#![no_main]

use contract::wire::ChannelCodec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(wire) = contract_fuzz::static_wire_file!("../../examples/lsp/lsp.json") else {
        return;
    };
    let Ok(ChannelCodec::HeaderDelimited(mut codec)) = wire.codec("stdio") else { return };
    let Some(cap) = contract_fuzz::framing_cap(wire, "stdio") else { return };
    contract_fuzz::feed(&mut codec, data, |body| {
        assert!(body.len() as u64 <= cap, "body of {} bytes over the {cap}-byte cap", body.len());
        let _ = wire.decode("stdio", "client", &body, None);
    });
});
