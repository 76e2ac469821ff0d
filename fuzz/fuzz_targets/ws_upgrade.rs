//! The proxy's WebSocket upgrade parsing: arbitrary bytes as a request head
//! through `parse_upgrade`. It must not panic; an accepted head has a path
//! under the listener's, a key of the RFC's length, and no control characters
//! but a tab (which HTTP allows in a field value) in what is passed on.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((hello, key)) = contract_transport::endpoint::ws::parse_upgrade(data, "/worker") else {
        return;
    };
    assert!(hello.path.starts_with("/worker"), "path {:?}", hello.path);
    assert_eq!(key.len(), 24, "key {key:?}");
    // HTTP lets a field value hold a tab; anything else below 0x20, CR and LF above
    // all, would let a header passed on to the upstream carry another header.
    for text in hello.subprotocols.iter().chain(hello.authorization.iter()) {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\t'),
            "control character in {text:?}"
        );
    }
});
