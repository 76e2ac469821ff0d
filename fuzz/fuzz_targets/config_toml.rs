//! The proxy's TOML config: arbitrary text as a config file. Parsing and
//! resolving every route against its contract must not panic; a route that
//! resolves names a built-in contract (a path would be read from disk, so the
//! text is cut at the first `/`).
#![no_main]

use contract_proxy::config::FileConfig;
use contract_proxy::inspect::Mode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let text = text.split('/').next().unwrap_or_default();
    let Ok(config) = toml::from_str::<FileConfig>(text) else { return };
    for (i, route) in config.routes.iter().enumerate() {
        let _ = route.resolve(i, Mode::Observe);
    }
});
