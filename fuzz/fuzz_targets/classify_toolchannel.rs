//! toolchannel `ws` channel: one WebSocket text message through `Wire::decode`
//! (lenient JSON under the channel's depth/item caps, JSON-RPC classification,
//! direction and params/result schemas). The first input byte picks the sender
//! (bit 0: worker or host) and, in its other bits, which method a response
//! answers (none, or one of the channel's methods); the rest is the message.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(wire) = contract_fuzz::static_wire!("toolchannel") else { return };
    let Some((&first, msg)) = data.split_first() else { return };
    let from = if first & 1 == 0 { "worker" } else { "host" };
    let methods = &wire.contract().methods;
    let answers = usize::from(first >> 1).checked_sub(1).and_then(|i| methods.get_index(i % methods.len().max(1)));
    let _ = wire.decode("ws", from, msg, answers.map(|(name, _)| name.as_str()));
});
