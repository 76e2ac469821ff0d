//! Secret redaction: tokens and credentials never reach the live view, a recording or a report.
//!
//! A member is secret when its key, lower-cased with `_` and `-` removed, is in
//! [`SECRET_KEYS`]. The list comes from the four contracts: xsession's auth line
//! (`token`), user frame (`replyToken`) and registry record (`ipcToken`);
//! toolchannel's `Authorization: Bearer WORKER_TOKEN` upgrade header and its
//! `WORKER_TOKEN` environment entry; plus the usual generic names. Correlation
//! values that merely say "token" (`progressToken`, `maxTokens`, `tokenKind`) are
//! not secrets and are kept, since replay and diffs need them.
//!
//! Under a secret key every string and number leaf is replaced by
//! [`REDACTED`], however deep (an array of tokens is as secret as one). A frame
//! that is JSON is re-serialized when something was redacted, so its bytes (and
//! size) change; a frame that is not JSON but is UTF-8 text (a garbage line, a
//! truncated object) is scrubbed textually for `"key": value` pairs, so a
//! malformed auth line does not leak its token either. Binary frames are left as
//! they are: the contracts put no credentials in binary data.

use std::borrow::Cow;

use serde_json::Value;

/// What a secret value is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Secret member names, normalized (lower case, without `_` and `-`).
pub const SECRET_KEYS: &[&str] = &[
    "ipctoken",
    "token",
    "replytoken",
    "authtoken",
    "accesstoken",
    "refreshtoken",
    "workertoken",
    "auth",
    "authorization",
    "proxyauthorization",
    "password",
    "passwd",
    "secret",
    "clientsecret",
    "apikey",
    "xapikey",
    "bearer",
    "cookie",
    "setcookie",
];

/// Secrets shorter than this are not searched for inside other text (they would
/// match everywhere); they are still redacted where their key names them.
const MIN_SCRUB_LEN: usize = 4;

/// Whether a member or header name names a secret.
pub fn is_secret_key(key: &str) -> bool {
    if key.len() > 64 {
        return false;
    }
    let norm: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    SECRET_KEYS.contains(&norm.as_str())
}

/// Redact every secret member of `v` in place; returns how many values were replaced.
pub fn redact_value(v: &mut Value) -> usize {
    let mut found = Vec::new();
    redact_value_collect(v, &mut found)
}

/// Like [`redact_value`], also collecting the secret texts it removed (for scrubbing
/// other text that may quote them, such as a violation reason).
pub fn redact_value_collect(v: &mut Value, found: &mut Vec<String>) -> usize {
    match v {
        Value::Object(map) => {
            let mut n = 0;
            for (k, member) in map.iter_mut() {
                n += if is_secret_key(k) {
                    blank(member, found)
                } else {
                    redact_value_collect(member, found)
                };
            }
            n
        }
        Value::Array(items) => items
            .iter_mut()
            .map(|i| redact_value_collect(i, found))
            .sum(),
        _ => 0,
    }
}

/// Replace every string and number leaf under a secret key.
fn blank(v: &mut Value, found: &mut Vec<String>) -> usize {
    match v {
        Value::String(s) if s == REDACTED => 0,
        Value::String(s) => {
            found.push(std::mem::take(s));
            *v = Value::String(REDACTED.into());
            1
        }
        Value::Number(n) => {
            found.push(n.to_string());
            *v = Value::String(REDACTED.into());
            1
        }
        Value::Object(map) => map.values_mut().map(|m| blank(m, found)).sum(),
        Value::Array(items) => items.iter_mut().map(|i| blank(i, found)).sum(),
        Value::Null | Value::Bool(_) => 0,
    }
}

/// Replace, in every string of `v`, each occurrence of one of `secrets`; returns how many
/// strings changed. Secrets shorter than 4 characters are skipped.
pub fn scrub_strings(v: &mut Value, secrets: &[String]) -> usize {
    if secrets.iter().all(|s| s.len() < MIN_SCRUB_LEN) {
        return 0;
    }
    match v {
        Value::String(s) => {
            let mut changed = false;
            for secret in secrets.iter().filter(|s| s.len() >= MIN_SCRUB_LEN) {
                if s.contains(secret.as_str()) {
                    *s = s.replace(secret.as_str(), REDACTED);
                    changed = true;
                }
            }
            usize::from(changed)
        }
        Value::Object(map) => map.values_mut().map(|m| scrub_strings(m, secrets)).sum(),
        Value::Array(items) => items.iter_mut().map(|i| scrub_strings(i, secrets)).sum(),
        _ => 0,
    }
}

/// Redact one frame's payload. JSON with secrets comes back re-serialized (compact, member
/// order kept); UTF-8 text that is not JSON is scrubbed textually; anything else is borrowed.
pub fn redact_frame(raw: &[u8]) -> Cow<'_, [u8]> {
    redact_frame_collect(raw, &mut Vec::new())
}

/// Like [`redact_frame`], also collecting the secret texts it removed.
pub fn redact_frame_collect<'a>(raw: &'a [u8], found: &mut Vec<String>) -> Cow<'a, [u8]> {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Cow::Borrowed(raw);
    };
    if let Ok(mut v) = serde_json::from_str::<Value>(text)
        && redact_value_collect(&mut v, found) > 0
    {
        // Re-serializing also drops any duplicate member the parser folded away.
        return match serde_json::to_vec(&v) {
            Ok(bytes) => Cow::Owned(bytes),
            // Serializing a Value cannot fail; if it ever did, emit nothing rather than the secret.
            Err(_) => Cow::Owned(REDACTED.as_bytes().to_vec()),
        };
    }
    // Not JSON, or JSON whose parsed form hid a secret (a duplicate key): scrub the text.
    match scrub_text(text, found) {
        Some(s) => Cow::Owned(s.into_bytes()),
        None => Cow::Borrowed(raw),
    }
}

/// Find `"key" : value` pairs with a secret key in JSON-like text and blank the value.
/// Returns `None` when nothing was found.
fn scrub_text(text: &str, found: &mut Vec<String>) -> Option<String> {
    let b = text.as_bytes();
    let mut out = String::new();
    // Start of the text not yet copied to `out`.
    let mut copied = 0;
    let mut i = 0;
    let mut changed = false;
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        let Some(key_end) = string_end(b, i + 1) else {
            break;
        };
        let key = &text[i + 1..key_end];
        let mut j = skip_ws(b, key_end + 1);
        if !is_secret_key(key) || b.get(j) != Some(&b':') {
            i = key_end + 1;
            continue;
        }
        j = skip_ws(b, j + 1);
        let (start, end, quoted) = match b.get(j) {
            Some(b'"') => (j + 1, string_end(b, j + 1).unwrap_or(b.len()), true),
            Some(_) => {
                let end = b[j..]
                    .iter()
                    .position(|c| matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace())
                    .map_or(b.len(), |p| j + p);
                (j, end, false)
            }
            None => break,
        };
        // Objects and arrays under a secret key are left to the token scan of their own members.
        let literal = matches!(&text[start..end], "null" | "true" | "false");
        if !quoted && (literal || matches!(b.get(start), Some(b'{' | b'['))) || start == end {
            i = j + 1;
            continue;
        }
        found.push(text[start..end].to_string());
        out.push_str(&text[copied..start]);
        out.push_str(REDACTED);
        copied = end;
        changed = true;
        i = if quoted { end + 1 } else { end.max(i + 1) };
    }
    if !changed {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// Index of the closing quote of a JSON string whose content starts at `from`.
fn string_end(b: &[u8], from: usize) -> Option<usize> {
    let mut k = from;
    while k < b.len() {
        match b[k] {
            b'\\' => k += 2,
            b'"' => return Some(k),
            _ => k += 1,
        }
    }
    None
}

fn skip_ws(b: &[u8], mut k: usize) -> usize {
    while b.get(k).is_some_and(|c| c.is_ascii_whitespace()) {
        k += 1;
    }
    k
}

/// An HTTP header's value as it may be shown: secret headers are redacted, and
/// `Authorization`-style values keep their scheme (`Bearer [REDACTED]`).
pub fn redact_header(name: &str, value: &str) -> String {
    if !is_secret_key(name) {
        return value.to_string();
    }
    let norm = name.to_ascii_lowercase();
    if norm == "authorization" || norm == "proxy-authorization" {
        let v = value.trim_start();
        if let Some((scheme, rest)) = v.split_once(' ')
            && !rest.trim().is_empty()
            && scheme
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-')
        {
            return format!("{scheme} {REDACTED}");
        }
    }
    REDACTED.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOKEN: &str = "9f2c4e6a8b0d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a";

    #[test]
    fn xsession_auth_line_and_user_frame_lose_their_tokens() {
        let mut auth = json!({"msgV": 1, "type": "auth", "token": TOKEN});
        assert_eq!(redact_value(&mut auth), 1);
        assert_eq!(auth, json!({"msgV": 1, "type": "auth", "token": REDACTED}));
        let mut user = json!({"msgV": 1, "msgId": "m1", "type": "user",
            "replyToken": TOKEN, "message": {"role": "user", "content": "hi"}});
        assert_eq!(redact_value(&mut user), 1);
        assert!(!user.to_string().contains(TOKEN));
        assert_eq!(
            user["type"], "user",
            "the auth *type* value is not a secret"
        );
    }

    #[test]
    fn nested_arrays_case_and_separators() {
        let mut v = json!({
            "registry": [{"sessionId": "s1", "IPCTOKEN": TOKEN}, {"sessionId": "s2"}],
            "env": {"WORKER_TOKEN": "w-secret-1", "api_key": 12345678, "Password": null},
            "auth": {"kind": "bearer", "list": ["a-secret", "b-secret"]},
            "progressToken": "call-3",
            "maxTokens": 100,
            "tokenKind": "peer"
        });
        // IPCTOKEN, WORKER_TOKEN, api_key, and the two strings plus "bearer" under auth.
        assert_eq!(redact_value(&mut v), 6);
        let text = v.to_string();
        for s in [TOKEN, "w-secret-1", "12345678", "a-secret", "b-secret"] {
            assert!(!text.contains(s), "{s} left in {text}");
        }
        assert_eq!(v["progressToken"], "call-3", "correlation values stay");
        assert_eq!(v["maxTokens"], 100);
        assert_eq!(v["tokenKind"], "peer");
        assert_eq!(v["env"]["Password"], Value::Null, "nothing to hide in null");
        assert_eq!(redact_value(&mut v), 0, "idempotent");
    }

    #[test]
    fn frames_are_borrowed_unless_something_is_hidden() {
        let clean = br#"{"jsonrpc":"2.0","id":"c:5","method":"rukh.close","params":{}}"#;
        assert!(matches!(redact_frame(clean), Cow::Borrowed(_)));
        let audio = [0u8, 0, 0, 9, 0xff, 0xfe, b'"', b't', 0x80];
        assert!(matches!(redact_frame(&audio), Cow::Borrowed(_)));
        let auth = format!(r#"{{"msgV":1,"type":"auth","token":"{TOKEN}"}}"#);
        let out = redact_frame(auth.as_bytes());
        assert!(matches!(out, Cow::Owned(_)));
        let out = std::str::from_utf8(&out).expect("utf8");
        assert_eq!(out, r#"{"msgV":1,"type":"auth","token":"[REDACTED]"}"#);
    }

    #[test]
    fn malformed_and_duplicate_key_frames_are_scrubbed_textually() {
        // Truncated: not JSON at all.
        let cut = format!(r#"{{"msgV":1,"type":"auth","token" : "{TOKEN}"#);
        let out = redact_frame(cut.as_bytes());
        let out = std::str::from_utf8(&out).expect("utf8");
        assert!(!out.contains(TOKEN), "{out}");
        assert!(out.contains(r#""token" : "[REDACTED]"#), "{out}");
        // A duplicate key the parser folds away still must not leak.
        let dup = format!(r#"{{"x":{{"auth":"{TOKEN}"}},"x":1}}"#);
        let out = redact_frame(dup.as_bytes());
        assert!(!std::str::from_utf8(&out).expect("utf8").contains(TOKEN));
        // Escaped quotes inside a secret string are skipped correctly; numbers too.
        let esc = r#"{"password":"a\"b\"cdefgh","n":1,"apiKey":123456}"#;
        let mut found = Vec::new();
        let out = scrub_text(esc, &mut found).expect("changed");
        assert_eq!(
            out,
            r#"{"password":"[REDACTED]","n":1,"apiKey":[REDACTED]}"#
        );
        assert_eq!(found, vec![r#"a\"b\"cdefgh"#.to_string(), "123456".into()]);
    }

    #[test]
    fn quoted_secrets_are_scrubbed_from_other_text() {
        let mut found = Vec::new();
        let mut v = json!({"token": TOKEN});
        redact_value_collect(&mut v, &mut found);
        let mut ev = json!({"verdict": {"reason": format!("\"{TOKEN}\" is not valid"), "code": 1}});
        assert_eq!(scrub_strings(&mut ev, &found), 1);
        assert!(!ev.to_string().contains(TOKEN));
        let mut short = json!({"reason": "abc everywhere"});
        assert_eq!(scrub_strings(&mut short, &["abc".into()]), 0);
    }

    #[test]
    fn headers_keep_the_scheme() {
        assert_eq!(
            redact_header("Authorization", &format!("Bearer {TOKEN}")),
            "Bearer [REDACTED]"
        );
        assert_eq!(redact_header("authorization", TOKEN), REDACTED);
        assert_eq!(redact_header("X-Api-Key", "k"), REDACTED);
        assert_eq!(redact_header("Cookie", "a=b"), REDACTED);
        assert_eq!(
            redact_header("Sec-WebSocket-Protocol", "agentfy.worker.v1"),
            "agentfy.worker.v1"
        );
    }
}
