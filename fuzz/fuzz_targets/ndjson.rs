//! xsession `inbox` channel: arbitrary bytes, split at fuzzer-chosen points,
//! through the NDJSON codec (line cap in UTF-16 code units); every line must be
//! newline-free and within the cap, then go through `Wire::decode` (lenient
//! JSON, tagged binding, schemas) without panicking.
#![no_main]

use contract::wire::ChannelCodec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(wire) = contract_fuzz::static_wire!("xsession") else { return };
    let Ok(ChannelCodec::Ndjson(mut codec)) = wire.codec("inbox") else { return };
    let Some(cap) = contract_fuzz::framing_cap(wire, "inbox") else { return };
    let measure = codec.clone();
    contract_fuzz::feed(&mut codec, data, |line| {
        assert!(!line.contains(&b'\n'), "a line holds a newline");
        let units = measure.line_units(&line);
        assert!(units <= cap, "line of {units} units over the {cap}-unit cap");
        let _ = wire.decode("inbox", "sender", &line, None);
    });
});
