//! The contract loader (`contractgen check`): arbitrary text, or a built-in
//! contract with the fuzzer's bytes spliced in, through `contract::from_str`,
//! which parses, checks against the meta-schema, lints and models. It must not
//! panic; a contract it accepts must compile for the wire.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(c) = contract::from_str("fuzz.json", text) else { return };
    let _ = contract::wire::Wire::new(Arc::new(c));
});
