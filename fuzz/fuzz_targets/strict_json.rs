//! The strict JSON profile (`wire::json::parse`) on arbitrary bytes: it must
//! never panic, and whatever it accepts must survive a round trip: serialising
//! the value with serde_json and parsing that again under the same limits gives
//! back an equal value.
#![no_main]

use contract::wire::json::{JsonLimits, parse};
use libfuzzer_sys::fuzz_target;

const LIMITS: JsonLimits = JsonLimits { strict: true, object_only: false, max_depth: 32, max_items: 4096 };

fuzz_target!(|data: &[u8]| {
    let Ok(v) = parse(data, &LIMITS) else { return };
    let Ok(text) = serde_json::to_vec(&v) else { return };
    match parse(&text, &LIMITS) {
        Ok(again) => assert_eq!(again, v, "round trip changed the value; re-serialised as {}", String::from_utf8_lossy(&text)),
        Err(e) => panic!("re-serialised value {} is rejected: {e}", String::from_utf8_lossy(&text)),
    }
});
