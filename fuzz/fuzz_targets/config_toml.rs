//! The proxy's TOML config: arbitrary text as a config file. Parsing it, and
//! resolving every route that names a built-in contract (a path would be read
//! from disk), must not panic.
#![no_main]

use contract_proxy::config::FileConfig;
use contract_proxy::inspect::Mode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = toml::from_str::<FileConfig>(text) else { return };
    let builtin = contract::builtin_names();
    for (i, route) in config.routes.iter().enumerate() {
        if builtin.contains(&route.contract.as_str()) {
            let _ = route.resolve(i, Mode::Observe);
        }
    }
});
