//! Bounded JSON parsing, with the strict profile some contracts demand.
//!
//! Parsing goes through serde_json with a [`DeserializeSeed`] that builds the
//! `Value` itself, so depth, member count, duplicate keys and integer range are
//! checked while the tree is built, in one pass, and nothing beyond the caps is
//! ever allocated. serde_json already rejects invalid UTF-8, lone surrogates and
//! trailing bytes; the few of those it reports only as generic syntax errors
//! are told apart here, so each has its own variant, by a scan that runs only
//! once a parse has failed (a frame serde_json accepts is valid UTF-8 without
//! lone surrogates, so well-formed frames are read once, not three times).

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Largest integer magnitude exactly representable in binary64: 2^53 − 1.
pub const SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// Rules for one channel, resolved from the contract's `json` section and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Strict profile (BOM, duplicate keys, unsafe integers are errors).
    pub strict: bool,
    /// The top-level value must be an object.
    pub object_only: bool,
    /// Maximum nesting depth (the top-level value is depth 1).
    pub max_depth: usize,
    /// Maximum object members plus array elements in one frame.
    pub max_items: usize,
    /// A `null` anywhere is refused.
    pub no_null: bool,
}

/// The deepest JSON a contract may allow: the parser recurses once per level, on the
/// stack of whatever thread decodes (a runtime worker's 2 MiB), so the cap bounds it.
pub const MAX_DEPTH_SUPPORTED: usize = 512;

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            strict: false,
            object_only: false,
            max_depth: 100,
            max_items: usize::MAX,
            no_null: false,
        }
    }
}

/// Why a frame is not acceptable JSON. Each strict-profile rule has its own variant.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsonError {
    /// The bytes are not UTF-8.
    #[error("invalid UTF-8 at byte {offset}")]
    InvalidUtf8 {
        /// Offset of the first bad byte.
        offset: usize,
    },
    /// The frame starts with a UTF-8 byte-order mark.
    #[error("byte-order mark before the JSON value")]
    Bom,
    /// A `\u` escape encodes half a surrogate pair.
    #[error("lone surrogate \\u{code:04X} in a string escape")]
    LoneSurrogate {
        /// The unpaired UTF-16 code unit.
        code: u16,
    },
    /// An object has the same key twice.
    #[error("duplicate key {key:?} at {pointer}")]
    DuplicateKey {
        /// The repeated key.
        key: String,
        /// JSON pointer of the object holding it.
        pointer: String,
    },
    /// Nesting is deeper than allowed.
    #[error("nesting deeper than {max}")]
    TooDeep {
        /// The cap.
        max: usize,
    },
    /// Too many object members plus array elements.
    #[error("more than {max} object members plus array elements")]
    TooManyItems {
        /// The cap.
        max: usize,
    },
    /// An integer outside ±(2^53 − 1).
    #[error("integer {literal} outside ±(2^53 − 1)")]
    UnsafeInteger {
        /// The integer as written.
        literal: String,
    },
    /// A number that does not fit a finite binary64.
    #[error("number is not a finite binary64")]
    NonFinite,
    /// Non-whitespace bytes after the value.
    #[error("trailing bytes after the JSON value at line {line} column {column}")]
    TrailingBytes {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// The top-level value is not an object.
    #[error("the frame must hold a JSON object")]
    NotAnObject,
    /// A `null` where the channel allows none.
    #[error("null at {pointer} (the channel sends no null)")]
    Null {
        /// JSON pointer of the null.
        pointer: String,
    },
    /// Anything else that is not JSON.
    #[error("not JSON: {message} at line {line} column {column}")]
    Syntax {
        /// serde_json's description.
        message: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
}

/// Nesting depth as [`JsonLimits::max_depth`] counts it: the top-level object
/// is 1, each nested object or array adds 1.
pub fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Items as [`JsonLimits::max_items`] counts them: object members plus array
/// elements, over the whole value.
pub fn items(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len() + m.values().map(items).sum::<usize>(),
        Value::Array(a) => a.len() + a.iter().map(items).sum::<usize>(),
        _ => 0,
    }
}

/// Parse one frame under `limits`.
pub fn parse(bytes: &[u8], limits: &JsonLimits) -> Result<Value, JsonError> {
    const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];
    if bytes.starts_with(&BOM) {
        if limits.strict {
            return Err(JsonError::Bom);
        }
        // Lenient parsing forgives exactly one mark; offsets stay relative to the frame.
        return parse_body(&bytes[3..], limits).map_err(|e| match e {
            JsonError::InvalidUtf8 { offset } => JsonError::InvalidUtf8 { offset: offset + 3 },
            other => other,
        });
    }
    parse_body(bytes, limits)
}

fn parse_body(bytes: &[u8], limits: &JsonLimits) -> Result<Value, JsonError> {
    // serde_json rejects invalid UTF-8 and lone surrogates, but only as generic
    // syntax errors. Once a parse fails, look for them first so the error names
    // the rule; they take precedence over whatever else went wrong, wherever in
    // the frame they are.
    let named = |e: JsonError| -> JsonError {
        if let Err(u) = std::str::from_utf8(bytes) {
            return JsonError::InvalidUtf8 {
                offset: u.valid_up_to(),
            };
        }
        if memchr::memchr(b'\\', bytes).is_some()
            && let Some(code) = lone_surrogate(bytes)
        {
            return JsonError::LoneSurrogate { code };
        }
        e
    };
    let mut state = State {
        limits,
        items: 0,
        error: None,
        big_float: false,
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // serde_json's own guard stops at 128 levels, below a contract's cap of 128 (LSP's):
    // ours, checked before each level is entered, is the one that bounds the recursion.
    de.disable_recursion_limit();
    let value = match (ValueSeed {
        state: &mut state,
        depth: 1,
        pointer: &Ptr::Root,
    })
    .deserialize(&mut de)
    {
        Ok(v) => v,
        Err(e) => return Err(named(state.error.take().unwrap_or_else(|| syntax(&e)))),
    };
    if let Err(e) = de.end() {
        return Err(named(JsonError::TrailingBytes {
            line: e.line(),
            column: e.column(),
        }));
    }
    // An integer literal too large for 64 bits reaches the visitor as a float;
    // only then is the text scanned to tell `18446744073709551616` from `1.8e19`.
    if state.big_float
        && let Some(literal) = oversized_integer_literal(bytes)
    {
        return Err(JsonError::UnsafeInteger { literal });
    }
    if limits.object_only && !value.is_object() {
        return Err(JsonError::NotAnObject);
    }
    Ok(value)
}

/// The first integer literal (no `.`, `e`, `E`) outside strings whose magnitude exceeds 2^53 − 1.
fn oversized_integer_literal(bytes: &[u8]) -> Option<String> {
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if b == b'-' || b.is_ascii_digit() {
            let start = i;
            while i < bytes.len()
                && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
            {
                i += 1;
            }
            let tok = &bytes[start..i];
            if !tok.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) {
                let digits = tok.strip_prefix(b"-").unwrap_or(tok);
                let too_big = digits.len() > 16
                    || std::str::from_utf8(digits)
                        .ok()
                        .and_then(|d| d.parse::<u64>().ok())
                        .is_some_and(|n| n > SAFE_INTEGER_MAX);
                if too_big {
                    return Some(String::from_utf8_lossy(tok).into_owned());
                }
            }
            continue;
        }
        i += 1;
    }
    None
}

fn syntax(e: &serde_json::Error) -> JsonError {
    let message = e.to_string();
    // serde_json reports an overflowing float literal this way; it is the one
    // syntax error the strict profile names separately.
    if message.starts_with("number out of range") {
        return JsonError::NonFinite;
    }
    let message = match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    };
    JsonError::Syntax {
        message,
        line: e.line(),
        column: e.column(),
    }
}

/// Scan `\uXXXX` escapes inside strings for an unpaired surrogate.
fn lone_surrogate(bytes: &[u8]) -> Option<u16> {
    let hex = |s: &[u8]| -> Option<u16> {
        std::str::from_utf8(s)
            .ok()
            .and_then(|t| u16::from_str_radix(t, 16).ok())
    };
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                if bytes.get(i + 1) == Some(&b'u') {
                    let code = hex(bytes.get(i + 2..i + 6)?)?;
                    if (0xD800..0xDC00).contains(&code) {
                        let next_ok = bytes.get(i + 6..i + 8) == Some(b"\\u")
                            && bytes
                                .get(i + 8..i + 12)
                                .and_then(hex)
                                .is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
                        if !next_ok {
                            return Some(code);
                        }
                        i += 12;
                        continue;
                    }
                    if (0xDC00..0xE000).contains(&code) {
                        return Some(code);
                    }
                    i += 6;
                    continue;
                }
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

struct State<'l> {
    limits: &'l JsonLimits,
    items: usize,
    /// The rule that stopped the parse; serde's error only carries a message.
    error: Option<JsonError>,
    /// A float of integral value beyond 2^53 was seen (strict only): maybe a huge integer literal.
    big_float: bool,
}

impl State<'_> {
    fn fail<E: de::Error>(&mut self, e: JsonError) -> E {
        let msg = e.to_string();
        self.error = Some(e);
        E::custom(msg)
    }

    fn count_item<E: de::Error>(&mut self) -> Result<(), E> {
        self.items += 1;
        if self.items > self.limits.max_items {
            return Err(self.fail(JsonError::TooManyItems {
                max: self.limits.max_items,
            }));
        }
        Ok(())
    }
}

/// The path to the value being built, kept as a linked list on the stack so
/// pointers are only rendered when a duplicate key is reported.
enum Ptr<'a> {
    Root,
    Key(&'a Ptr<'a>, &'a str),
    Index(&'a Ptr<'a>, usize),
}

impl fmt::Display for Ptr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ptr::Root => Ok(()),
            Ptr::Key(p, k) => write!(f, "{p}/{}", crate::pointer::escape(k)),
            Ptr::Index(p, i) => write!(f, "{p}/{i}"),
        }
    }
}

struct ValueSeed<'s, 'l, 'p> {
    state: &'s mut State<'l>,
    depth: usize,
    pointer: &'p Ptr<'p>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        if self.state.limits.strict && v.unsigned_abs() > SAFE_INTEGER_MAX {
            return Err(self.state.fail(JsonError::UnsafeInteger {
                literal: v.to_string(),
            }));
        }
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        if self.state.limits.strict && v > SAFE_INTEGER_MAX {
            return Err(self.state.fail(JsonError::UnsafeInteger {
                literal: v.to_string(),
            }));
        }
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        if self.state.limits.strict && v.fract() == 0.0 && v.abs() > SAFE_INTEGER_MAX as f64 {
            self.state.big_float = true;
        }
        match Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => Err(self.state.fail(JsonError::NonFinite)),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        if self.state.limits.no_null {
            let pointer = self.pointer.to_string();
            return Err(self.state.fail(JsonError::Null { pointer }));
        }
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.depth > self.state.limits.max_depth {
            return Err(self.state.fail(JsonError::TooDeep {
                max: self.state.limits.max_depth,
            }));
        }
        let mut out = Vec::new();
        loop {
            let ptr = Ptr::Index(self.pointer, out.len());
            let seed = ValueSeed {
                state: &mut *self.state,
                depth: self.depth + 1,
                pointer: &ptr,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => {
                    self.state.count_item()?;
                    out.push(v);
                }
                None => break,
            }
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self.depth > self.state.limits.max_depth {
            return Err(self.state.fail(JsonError::TooDeep {
                max: self.state.limits.max_depth,
            }));
        }
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.state.count_item()?;
            let ptr = Ptr::Key(self.pointer, &key);
            let seed = ValueSeed {
                state: &mut *self.state,
                depth: self.depth + 1,
                pointer: &ptr,
            };
            let v = map.next_value_seed(seed)?;
            // One hash per member: the entry both detects a duplicate and inserts.
            match out.entry(key) {
                Entry::Vacant(e) => {
                    e.insert(v);
                }
                Entry::Occupied(mut e) => {
                    if self.state.limits.strict {
                        let (key, pointer) = (e.key().clone(), self.pointer.to_string());
                        return Err(self.state.fail(JsonError::DuplicateKey { key, pointer }));
                    }
                    // Lenient parsing keeps the last value, as serde_json does.
                    e.insert(v);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: JsonLimits = JsonLimits {
        strict: true,
        object_only: true,
        max_depth: 32,
        max_items: 4096,
        no_null: false,
    };

    #[test]
    fn no_null_names_where_the_null_is() {
        let limits = JsonLimits {
            no_null: true,
            ..STRICT
        };
        let e = parse(br#"{"a":{"b":[1,null]}}"#, &limits).expect_err("a null");
        assert_eq!(
            e,
            JsonError::Null {
                pointer: "/a/b/1".into()
            }
        );
        assert!(parse(br#"{"a":{"b":[1,2]}}"#, &limits).is_ok());
        assert!(
            parse(br#"{"a":null}"#, &STRICT).is_ok(),
            "allowed unless the channel says"
        );
    }

    fn err(s: &[u8]) -> JsonError {
        parse(s, &STRICT).expect_err("must be rejected")
    }

    #[test]
    fn accepts_plain_object() {
        let v = parse(br#"{"a":[1,2,{"b":null}],"c":"\ud83d\ude00"}"#, &STRICT).expect("valid");
        assert_eq!(v["c"], "😀");
    }

    #[test]
    fn each_rule_has_its_own_error() {
        assert_eq!(
            err(b"{\"a\":\"\xff\"}"),
            JsonError::InvalidUtf8 { offset: 6 }
        );
        assert_eq!(err(b"\xEF\xBB\xBF{}"), JsonError::Bom);
        assert_eq!(
            err(br#"{"a":"\ud800"}"#),
            JsonError::LoneSurrogate { code: 0xD800 }
        );
        assert_eq!(
            err(br#"{"a":"\udc00x"}"#),
            JsonError::LoneSurrogate { code: 0xDC00 }
        );
        assert_eq!(
            err(br#"{"a":"\ud800\u0041"}"#),
            JsonError::LoneSurrogate { code: 0xD800 }
        );
        assert_eq!(
            err(br#"{"a":{"b":1,"b":2}}"#),
            JsonError::DuplicateKey {
                key: "b".into(),
                pointer: "/a".into()
            }
        );
        assert_eq!(
            err(br#"{"a":9007199254740992}"#),
            JsonError::UnsafeInteger {
                literal: "9007199254740992".into()
            }
        );
        assert_eq!(
            err(br#"{"a":-9007199254740992}"#),
            JsonError::UnsafeInteger {
                literal: "-9007199254740992".into()
            }
        );
        assert_eq!(err(br#"{"a":1e400}"#), JsonError::NonFinite);
        assert!(matches!(err(br#"{"a":NaN}"#), JsonError::Syntax { .. }));
        assert!(matches!(err(br#"{} x"#), JsonError::TrailingBytes { .. }));
        assert_eq!(err(br#"[1]"#), JsonError::NotAnObject);
    }

    #[test]
    fn integers_beyond_64_bits_are_unsafe_but_big_floats_are_not() {
        assert_eq!(
            err(br#"{"a":18446744073709551616}"#),
            JsonError::UnsafeInteger {
                literal: "18446744073709551616".into()
            }
        );
        assert!(matches!(
            err(br#"{"s":"1e5","a":-9223372036854775809}"#),
            JsonError::UnsafeInteger { .. }
        ));
        assert!(
            parse(
                br#"{"a":1.8446744073709552e19,"b":"99999999999999999999"}"#,
                &STRICT
            )
            .is_ok()
        );
    }

    #[test]
    fn lenient_forgives_one_bom_only() {
        let lenient = JsonLimits {
            strict: false,
            ..STRICT
        };
        assert!(parse(b"\xEF\xBB\xBF{}", &lenient).is_ok());
        assert!(parse(b"\xEF\xBB\xBF\xEF\xBB\xBF{}", &lenient).is_err());
        assert_eq!(
            parse(b"\xEF\xBB\xBF{\"a\":\"\xff\"}", &lenient),
            Err(JsonError::InvalidUtf8 { offset: 9 })
        );
    }

    #[test]
    fn safe_integer_bounds_are_inclusive() {
        assert!(parse(br#"{"a":9007199254740991,"b":-9007199254740991}"#, &STRICT).is_ok());
    }

    #[test]
    fn the_deepest_supported_cap_is_parsed_exactly_on_a_default_stack() {
        let max = MAX_DEPTH_SUPPORTED;
        let limits = JsonLimits {
            max_depth: max,
            ..JsonLimits::default()
        };
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        // A thread with the stack a runtime worker has.
        let parsed = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                (
                    parse(nested(max).as_bytes(), &limits).is_ok(),
                    parse(nested(max + 1).as_bytes(), &limits).err(),
                    parse(nested(100_000).as_bytes(), &limits).err(),
                )
            })
            .expect("a thread")
            .join()
            .expect("no stack overflow");
        assert!(parsed.0, "{max} levels are allowed");
        assert_eq!(parsed.1, Some(JsonError::TooDeep { max }));
        assert_eq!(parsed.2, Some(JsonError::TooDeep { max }));
    }

    #[test]
    fn depth_cap_is_exact() {
        let ok = format!("{}{}", "[".repeat(31), "]".repeat(31));
        let ok = format!("{{\"a\":{ok}}}");
        assert!(
            parse(ok.as_bytes(), &STRICT).is_ok(),
            "32 levels are allowed"
        );
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(32), "]".repeat(32));
        assert_eq!(err(deep.as_bytes()), JsonError::TooDeep { max: 32 });
    }

    #[test]
    fn item_cap_is_exact() {
        let items = |n: usize| format!("{{\"a\":[{}]}}", vec!["0"; n].join(","));
        assert!(
            parse(items(4095).as_bytes(), &STRICT).is_ok(),
            "1 member + 4095 elements = 4096"
        );
        assert_eq!(
            err(items(4096).as_bytes()),
            JsonError::TooManyItems { max: 4096 }
        );
    }

    #[test]
    fn lenient_keeps_last_duplicate_and_big_integers() {
        let lenient = JsonLimits {
            strict: false,
            ..STRICT
        };
        let v = parse(br#"{"a":1,"a":2,"n":9007199254740993}"#, &lenient).expect("lenient");
        assert_eq!(v["a"], 2);
        assert_eq!(v["n"], 9007199254740993u64);
        // Depth and item caps still apply.
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(32), "]".repeat(32));
        assert_eq!(
            parse(deep.as_bytes(), &lenient),
            Err(JsonError::TooDeep { max: 32 })
        );
    }

    #[test]
    fn escaped_backslash_before_u_is_not_an_escape() {
        assert!(parse(br#"{"a":"\\ud800"}"#, &STRICT).is_ok());
    }
}
