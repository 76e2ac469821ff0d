//! RFC 6901 JSON pointer helpers used to name where a problem is.

/// Escape one reference token (`~` → `~0`, `/` → `~1`).
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Append tokens to a pointer.
pub fn join<I, S>(base: &str, tokens: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut out = base.to_string();
    for t in tokens {
        out.push('/');
        out.push_str(&escape(t.as_ref()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_slash_and_tilde() {
        assert_eq!(
            join("", ["methods", "tools/call", "a~b"]),
            "/methods/tools~1call/a~0b"
        );
    }
}
