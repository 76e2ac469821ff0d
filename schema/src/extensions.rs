//! The named extensions the tools implement: small hooks for rules a contract cannot say as
//! data. A contract names the ones it needs (`extensions`, by hook name); `contractgen check`
//! refuses a name not listed here, and the proxy runs exactly the hooks its contract names,
//! after the generic engine has run the contract's data. docs/contract-format.md lists each
//! hook with the reason data could not express it.

/// One hook: its name as contracts write it, and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// The name a contract's `extensions` uses.
    pub name: &'static str,
    /// What the hook does, in a line.
    pub summary: &'static str,
}

/// Every hook the tools implement.
pub const KNOWN: &[Hook] = &[
    Hook {
        name: "rukh.session",
        summary: "rukh's session order: one invoke, pinned context fields, completion and cancel \
                  ending work, pending caps on operation and UI requests",
    },
    Hook {
        name: "toolchannel.host",
        summary: "refused reverse-request prefixes",
    },
    Hook {
        name: "xsession.admission",
        summary: "the auth line first on an inbox whose registry record has an ipcToken",
    },
];

/// The hook named `name`, if the tools implement it.
pub fn hook(name: &str) -> Option<&'static Hook> {
    KNOWN.iter().find(|h| h.name == name)
}

/// The extensions `c` names that the tools do not implement.
pub fn unknown(c: &crate::Contract) -> Vec<&str> {
    (c.extensions.keys())
        .filter(|name| hook(name).is_none())
        .map(String::as_str)
        .collect()
}

/// The hooks the tools implement, as a comma-separated list for error messages.
pub fn known_names() -> String {
    KNOWN.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
}
