//! rukh `ipc` channel: arbitrary bytes, split at fuzzer-chosen points, through
//! the length-prefixed codec; every frame must respect the payload cap and then
//! go through `Wire::decode` (strict JSON, JSON-RPC classification, schemas)
//! without panicking.
#![no_main]

use contract::wire::ChannelCodec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(wire) = contract_fuzz::static_wire!("rukh") else { return };
    let Ok(ChannelCodec::LengthPrefixed(mut codec)) = wire.codec("ipc") else { return };
    let cap = codec.max();
    contract_fuzz::feed(&mut codec, data, |frame| {
        assert!(frame.len() as u64 <= cap, "frame of {} bytes over the {cap}-byte cap", frame.len());
        let _ = wire.decode("ipc", "core", &frame, None);
    });
});
