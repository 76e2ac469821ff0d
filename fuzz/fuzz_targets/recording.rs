//! The recording reader (`show`, `replay`): arbitrary bytes as a recording.
//! Reading it record by record must not panic, and must end: with the last
//! record, or with an error that names an offset inside the input.
#![no_main]

use std::path::Path;

use contract_proxy::record::{Reader, RecordError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let within = |e: &RecordError| match e {
        RecordError::Corrupt { offset, .. }
        | RecordError::Truncated { offset, .. }
        | RecordError::TooLong { offset, .. } => {
            assert!(*offset <= len, "offset {offset} past the input's {len} bytes: {e}");
        }
        _ => {}
    };
    let mut r = match Reader::new(data, Path::new("fuzz.rec")) {
        Ok(r) => r,
        Err(e) => return within(&e),
    };
    // Every record takes at least one byte: more records than bytes is a loop.
    for _ in 0..=data.len() {
        match r.next() {
            Some(Ok(_)) => {}
            Some(Err(e)) => return within(&e),
            None => return,
        }
    }
    panic!("more records than bytes");
});
