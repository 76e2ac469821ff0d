//! kernel `data` channel: arbitrary bytes, split at fuzzer-chosen points,
//! through the binary frame codec (length + stream_id + seq + payload); every
//! frame must respect the `maxFrame` cap (header after the length plus payload)
//! and carry one value per declared header field; its payload then goes through
//! `Wire::decode`, which must refuse it without panicking (no JSON on `data`).
#![no_main]

use contract::model::Framing;
use contract::wire::ChannelCodec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(wire) = contract_fuzz::static_wire!("kernel") else { return };
    let Ok(ChannelCodec::Binary(mut codec)) = wire.codec("data") else { return };
    let Some(cap) = contract_fuzz::framing_cap(wire, "data") else { return };
    let Some(Framing::Binary { header, .. }) = wire.contract().channels.get("data").map(|c| &c.framing) else { return };
    let header_rest: u64 = header.iter().skip(1).map(|f| u64::from(f.bytes)).sum();
    contract_fuzz::feed(&mut codec, data, |frame| {
        assert_eq!(frame.fields.len(), header.len().saturating_sub(1), "one value per header field");
        assert!(header_rest + frame.payload.len() as u64 <= cap, "frame over the {cap}-byte cap");
        let _ = wire.decode("data", "core", &frame.payload, None);
    });
});
