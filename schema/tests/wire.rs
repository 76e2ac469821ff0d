//! The wire layer against the real contracts: every example survives
//! encode → split → decode → classify, each malformed input is rejected with
//! its own error and the contract's code, and codecs round-trip under
//! arbitrary splitting (property tests).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use contract::model::{Kind, Part};
use contract::wire::{
    BinaryFrame, ChannelCodec, FrameError, JsonError, JsonLimits, ViolationClass, Wire,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio_util::codec::{Decoder, Encoder};

fn wire(name: &str) -> Wire {
    let c = contract::builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    Wire::new(Arc::new(c)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Encode one message with the channel's codec, then decode it fed one byte at a time.
fn through_codec(codec: &mut ChannelCodec, bytes: &[u8]) -> Bytes {
    let mut wire_bytes = BytesMut::new();
    match &mut *codec {
        ChannelCodec::Message(c) => {
            c.check(bytes).expect("within cap");
            return Bytes::copy_from_slice(bytes);
        }
        c => c.encode_json(bytes, &mut wire_bytes).expect("encode"),
    }
    let mut buf = BytesMut::new();
    let mut out = None;
    for b in wire_bytes.iter() {
        buf.extend_from_slice(&[*b]);
        let got = codec.decode_json(&mut buf, false).expect("decode");
        if let Some(f) = got {
            assert!(out.is_none(), "one frame in, one frame out");
            out = Some(f);
        }
    }
    assert!(buf.is_empty());
    out.expect("a frame")
}

#[test]
fn every_example_of_every_contract_decodes_and_validates() {
    let mut seen = 0;
    for (name, _) in contract::BUILTIN {
        let w = wire(name);
        let c = w.contract().clone();
        for (mname, m) in &c.methods {
            for (i, ex) in m.examples.iter().enumerate() {
                let from = ex.from.clone().expect("examples name their sender");
                let bytes = serde_json::to_vec(&ex.message).expect("ser");
                let mut codec = w.codec(&m.channel).expect("codec");
                let frame = through_codec(&mut codec, &bytes);
                let answers = (ex.part != Part::Call).then_some(mname.as_str());
                let msg = w
                    .decode(&m.channel, &from, &frame, answers)
                    .unwrap_or_else(|v| panic!("{name} {mname} example {i} ({}): {v:?}", ex.title));
                let want = match ex.part {
                    Part::Call => m.kind,
                    Part::Result => Kind::Response,
                    Part::Error => Kind::Error,
                };
                let same = msg.kind == want
                    || matches!((msg.kind, want), (Kind::Notification, Kind::Event));
                assert!(
                    same,
                    "{name} {mname} example {i}: kind {:?}, want {want:?}",
                    msg.kind
                );
                assert_eq!(
                    msg.method.as_deref(),
                    Some(mname.as_str()),
                    "{name} example {i}"
                );
                assert_eq!(msg.value, ex.message, "decoded value equals the example");
                seen += 1;
            }
        }
    }
    assert!(seen >= 60, "only {seen} examples");
}

fn violation(w: &Wire, channel: &str, from: &str, bytes: &[u8]) -> contract::wire::Violation {
    match w.decode(channel, from, bytes, None) {
        Ok(m) => panic!("accepted {}: {m:?}", String::from_utf8_lossy(bytes)),
        Err(v) => v,
    }
}

fn violation_answering(w: &Wire, bytes: &[u8], method: &str) -> contract::wire::Violation {
    match w.decode("ipc", "extension", bytes, Some(method)) {
        Ok(m) => panic!("accepted a reply to {method}: {m:?}"),
        Err(v) => v,
    }
}

fn rukh_call(params: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":"c:1","method":"rukh.initialize","params":{params}}}"#)
        .into_bytes()
}

#[test]
fn rukh_strict_json_each_rule_has_its_own_error() {
    let w = wire("rukh");
    type Is = fn(&JsonError) -> bool;
    let cases: Vec<(Vec<u8>, Is)> = vec![
        (
            b"{\"jsonrpc\":\"2.0\",\"method\":\"x\xff\"}".to_vec(),
            |e| matches!(e, JsonError::InvalidUtf8 { .. }),
        ),
        (
            [&[0xEF, 0xBB, 0xBF][..], br#"{"jsonrpc":"2.0"}"#].concat(),
            |e| matches!(e, JsonError::Bom),
        ),
        (br#"{"jsonrpc":"2.0","method":"\udc00"}"#.to_vec(), |e| {
            matches!(e, JsonError::LoneSurrogate { .. })
        }),
        (
            br#"{"jsonrpc":"2.0","id":"c:1","id":"c:2"}"#.to_vec(),
            |e| matches!(e, JsonError::DuplicateKey { .. }),
        ),
        (
            rukh_call(r#"{"a":{"b":{"a":1,"a":2}}}"#),
            |e| matches!(e, JsonError::DuplicateKey { pointer, .. } if pointer == "/params/a/b"),
        ),
        (
            rukh_call(&format!("{}{}", "[".repeat(40), "]".repeat(40))),
            |e| matches!(e, JsonError::TooDeep { max: 32 }),
        ),
        (
            rukh_call(&format!("[{}]", vec!["1"; 5000].join(","))),
            |e| matches!(e, JsonError::TooManyItems { max: 4096 }),
        ),
        (rukh_call("9007199254740992"), |e| {
            matches!(e, JsonError::UnsafeInteger { .. })
        }),
        (rukh_call("1e999"), |e| matches!(e, JsonError::NonFinite)),
        (br#"{"jsonrpc":"2.0"} {}"#.to_vec(), |e| {
            matches!(e, JsonError::TrailingBytes { .. })
        }),
        (br#"{"jsonrpc":"2.0","#.to_vec(), |e| {
            matches!(e, JsonError::Syntax { .. })
        }),
    ];
    for (bytes, is) in cases {
        let v = violation(&w, "ipc", "core", &bytes);
        assert_eq!(
            v.class,
            ViolationClass::Parse,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let e = v.json.as_ref().expect("json error kept");
        assert!(is(e), "{} gave {e:?}", String::from_utf8_lossy(&bytes));
        assert_eq!(
            v.code,
            Some(json!(-32700)),
            "rukh parse errors carry -32700"
        );
    }
    // JSON that is not an object (a batch) parses: it is not a profile message (invalid).
    let v = violation(&w, "ipc", "core", br#"["jsonrpc"]"#);
    assert_eq!(v.class, ViolationClass::Invalid);
    assert_eq!(v.code, Some(json!(-32600)));
    assert!(matches!(v.json, Some(JsonError::NotAnObject)), "{v:?}");
}

#[test]
fn toolchannel_json_caps_are_invalid_requests_not_parse_errors() {
    // toolchannel's maxJsonDepth/maxJsonItems say -32600 (T-18), rukh's say parse_error.
    let w = wire("toolchannel");
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"a":{}1{}}}}}"#,
        "[".repeat(80),
        "]".repeat(80)
    );
    let v = violation(&w, "ws", "host", deep.as_bytes());
    assert_eq!(
        (v.class, v.code.clone()),
        (ViolationClass::Invalid, Some(json!(-32600)))
    );
    assert!(matches!(v.json, Some(JsonError::TooDeep { .. })), "{v:?}");
    assert_eq!(v.count_toward.as_deref(), Some("badFramesMax"));
    let v = violation(&w, "ws", "host", b"[1,2]");
    assert_eq!(
        (v.class, v.code.clone()),
        (ViolationClass::Invalid, Some(json!(-32600)))
    );
}

#[test]
fn jsonrpc_invalid_request_is_32600() {
    for (contract, channel, from) in [("rukh", "ipc", "core"), ("toolchannel", "ws", "host")] {
        let w = wire(contract);
        for bad in [
            r#"{"jsonrpc":"1.0","id":"c:1","method":"rukh.close"}"#,
            r#"{"id":1,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":{"x":1},"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":"initialize","params":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","extra":1}"#,
        ] {
            let v = violation(&w, channel, from, bad.as_bytes());
            assert_eq!(v.class, ViolationClass::Invalid, "{contract}: {bad}: {v:?}");
            assert_eq!(v.code, Some(json!(-32600)), "{contract}: {bad}");
        }
    }
}

#[test]
fn kernel_missing_envelope_fields_are_listed() {
    let w = wire("kernel");
    let v = violation(
        &w,
        "control",
        "shell",
        br#"{"type":"request","method":"command.handle","payload":{"text":"hi"}}"#,
    );
    assert_eq!(v.class, ViolationClass::Invalid);
    assert_eq!(v.code, Some(json!("protocol.invalid_envelope")));
    let fields: Vec<&str> = v.details["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for f in ["v", "id", "timestamp", "trace_id"] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
    assert!(
        !fields.contains(&"method") && !fields.contains(&"payload"),
        "{fields:?}"
    );
}

/// The list of missing members goes where the `invalid` entry `names` it, under the
/// details an error reply carries; a contract that names no list gets none.
#[test]
fn missing_members_are_listed_where_the_contract_names_them() {
    let bytes = br#"{"type":"request","method":"command.handle","payload":{"text":"hi"}}"#;
    let with = |names: Option<&str>| {
        let mut c = contract::builtin("kernel").expect("kernel");
        let invalid = c.violations.invalid.as_mut().expect("an invalid entry");
        invalid.names = names.map(str::to_string);
        let w = Wire::new(Arc::new(c)).expect("wire");
        violation(&w, "control", "shell", bytes).details
    };
    let elsewhere = with(Some("/payload/details/absent"));
    let listed = elsewhere["absent"]
        .as_array()
        .expect("listed under `absent`");
    assert!(listed.contains(&json!("trace_id")), "{elsewhere}");
    assert_eq!(with(None), Value::Null);
    // Outside the reply's details the wire layer cannot put it: nothing is listed.
    assert_eq!(with(Some("/payload/fields")), Value::Null);
}

/// `method`'s first call example.
fn call_example(w: &Wire, method: &str) -> Value {
    w.contract().methods[method]
        .examples
        .iter()
        .find(|e| e.part == contract::model::Part::Call)
        .expect("a call example")
        .message
        .clone()
}

fn kernel_envelope(kind: &str, method: &str, payload: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "v": 1, "type": kind, "id": "s-1", "method": method, "timestamp": 1756750000.123,
        "trace_id": "t-1", "payload": payload
    }))
    .expect("ser")
}

#[test]
fn kernel_unknown_method_versus_unknown_event() {
    let w = wire("kernel");
    let v = violation(
        &w,
        "control",
        "shell",
        &kernel_envelope("request", "no.such", json!({})),
    );
    assert_eq!(v.class, ViolationClass::UnknownRequest);
    assert_eq!(v.code, Some(json!("protocol.unknown_method")));
    let v = violation(
        &w,
        "control",
        "core",
        &kernel_envelope("event", "no.such", json!({})),
    );
    assert_eq!(v.class, ViolationClass::UnknownNotification);
    assert_eq!(
        v.action,
        Some(contract::model::ActionKind::Ignore),
        "unknown events are ignored (§6)"
    );
}

#[test]
fn kernel_wrong_direction_and_bad_params() {
    let w = wire("kernel");
    let hello = kernel_envelope(
        "request",
        "hello",
        json!({"protocol_versions": [1], "shell_version": "4.0.0", "capabilities": [], "locale": "ru"}),
    );
    assert!(w.decode("control", "shell", &hello, None).is_ok());
    let v = violation(&w, "control", "core", &hello);
    assert_eq!(v.class, ViolationClass::WrongDirection);
    let bad = kernel_envelope("request", "hello", json!({"protocol_versions": "one"}));
    let v = violation(&w, "control", "shell", &bad);
    assert_eq!(v.class, ViolationClass::InvalidParams);
    assert_eq!(v.code, Some(json!("protocol.invalid_payload")));
}

#[test]
fn toolchannel_bad_frames_count_toward_the_close() {
    let w = wire("toolchannel");
    let c = w.contract().clone();
    for bad in [&b"not json"[..], br#"{"jsonrpc":"2.0"}"#] {
        let v = violation(&w, "ws", "worker", bad);
        let limit = v.count_toward.clone().expect("bad frames count");
        let l = c.limits.get(&limit).expect("limit exists");
        let a = l.action.as_ref().expect("limit has an action");
        assert_eq!(a.code, Some(json!(4006)), "{limit} closes with 4006");
    }
}

#[test]
fn xsession_frames_are_told_apart_by_match() {
    let w = wire("xsession");
    let c = w.contract().clone();
    let ex = &c.methods["delivery_status"].examples[0];
    let bytes = serde_json::to_vec(&ex.message).expect("ser");
    let m = w.decode("inbox", "recipient", &bytes, None).expect("valid");
    assert_eq!(m.method.as_deref(), Some("delivery_status"));
    assert_eq!(m.kind, Kind::Event);
    assert!(m.correlation.is_some(), "origMsgId is the correlation");
    let v = violation(&w, "inbox", "sender", br#"{"type":"mystery"}"#);
    assert_eq!(v.action, Some(contract::model::ActionKind::Ignore));
}

#[test]
fn rukh_lifecycle_frames_have_the_tighter_cap() {
    let w = wire("rukh");
    let c = w.contract().clone();
    let ex = c.methods["rukh.log"]
        .examples
        .iter()
        .find(|e| e.part == Part::Call)
        .expect("log example");
    let mut msg = ex.message.clone();
    // Pad a string field to push the frame just past 16 KiB.
    let pad = "x".repeat(17 * 1024);
    msg["params"]["message"] = json!(pad);
    let bytes = serde_json::to_vec(&msg).expect("ser");
    let v = violation(&w, "ipc", "extension", &bytes);
    assert_eq!(v.class, ViolationClass::Oversize, "{}", v.reason);
}

#[test]
fn rukh_lifecycle_replies_are_capped_like_their_requests() {
    let w = wire("rukh");
    let cap =
        contract::wire::framing::limit_bytes(w.contract(), "lifecyclePayloadMax").expect("cap");
    // A refusal of rukh.initialize, its message padded to land exactly on the cap, then one over.
    let reply = |len: u64| {
        let mut m = json!({"jsonrpc":"2.0","id":"c:1","error":{"code":-32003,"message":""}});
        let base = serde_json::to_vec(&m).expect("ser").len() as u64;
        m["error"]["message"] = json!("x".repeat((len - base) as usize));
        let bytes = serde_json::to_vec(&m).expect("ser");
        assert_eq!(bytes.len() as u64, len);
        bytes
    };
    let at = reply(cap);
    let over = reply(cap + 1);
    w.decode("ipc", "extension", &at, Some("rukh.initialize"))
        .expect("a reply at the cap is fine");
    let v = violation_answering(&w, &over, "rukh.initialize");
    assert_eq!(v.class, ViolationClass::Oversize, "{}", v.reason);
    let partial = v.partial.expect("the violation names what it read");
    assert_eq!(partial.method.as_deref(), Some("rukh.initialize"));
    assert_eq!(partial.correlation, Some(json!("c:1")));
    assert_ne!(v.action, Some(contract::model::ActionKind::Ignore));
    // rukh.invoke has no tighter cap: the same bytes answering it are fine.
    w.decode("ipc", "extension", &over, Some("rukh.invoke"))
        .expect("rukh.invoke replies use the frame cap");
}

#[test]
fn an_oversize_rukh_log_names_its_method_and_is_ignored() {
    let w = wire("rukh");
    let msg = json!({"jsonrpc":"2.0","method":"rukh.log","params":{"level":"info","message":"x".repeat(17 * 1024)}});
    let v = violation(
        &w,
        "ipc",
        "extension",
        &serde_json::to_vec(&msg).expect("ser"),
    );
    assert_eq!(v.class, ViolationClass::Oversize);
    assert_eq!(v.action, Some(contract::model::ActionKind::Ignore));
    let partial = v.partial.expect("partial");
    assert_eq!(partial.method.as_deref(), Some("rukh.log"));
    assert_eq!(partial.kind, Kind::Notification);
}

#[test]
fn the_rukh_framing_names_its_incomplete_frame_deadline() {
    let w = wire("rukh");
    let (name, after) = w.frame_deadline("ipc").expect("rukh has one");
    assert_eq!(name, "incompleteFrameSeconds");
    let l = &w.contract().limits[name];
    let v = contract::check::Evaluator::new(w.contract())
        .limit_value(name)
        .expect("value");
    assert_eq!(after.as_secs_f64(), contract::check::to_base(l.unit, v).0);
    assert!(wire("kernel").frame_deadline("control").is_none());
}

#[test]
fn oversize_frames_are_refused_by_every_stream_codec() {
    for (name, channel) in [("kernel", "control"), ("kernel", "data"), ("rukh", "ipc")] {
        let w = wire(name);
        let mut codec = w.codec(channel).expect("codec");
        let mut buf = BytesMut::from(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0][..]);
        let cap = buf.capacity();
        let r = match &mut codec {
            ChannelCodec::LengthPrefixed(c) => c.decode(&mut buf).map(|_| ()),
            ChannelCodec::Binary(c) => c.decode(&mut buf).map(|_| ()),
            _ => unreachable!(),
        };
        assert!(
            matches!(r, Err(FrameError::Oversize { len, .. }) if len >= 0xFFFF_FFFF - 12),
            "{name}/{channel}: {r:?}"
        );
        assert_eq!(buf.capacity(), cap, "{name}/{channel}: nothing reserved");
    }
    let w = wire("xsession");
    let ChannelCodec::Ndjson(mut c) = w.codec("inbox").expect("codec") else {
        panic!("ndjson")
    };
    // 1 MiB of 3-byte characters is 3 MiB of bytes but exactly at the cap: accepted.
    let line = "€".repeat(1 << 20);
    let mut buf = BytesMut::from(format!("{line}\n").as_bytes());
    assert_eq!(
        c.decode(&mut buf).expect("at cap").map(|b| b.len()),
        Some(3 << 20)
    );
    let mut buf = BytesMut::from(format!("{line}€\n").as_bytes());
    assert!(matches!(
        c.decode(&mut buf),
        Err(FrameError::LineTooLong { .. })
    ));
}

#[test]
fn truncated_stream_is_an_error_at_eof() {
    let w = wire("rukh");
    let ChannelCodec::LengthPrefixed(mut c) = w.codec("ipc").expect("codec") else {
        panic!()
    };
    let mut buf = BytesMut::from(&[0, 0, 0, 9, b'{'][..]);
    assert!(matches!(
        c.decode_eof(&mut buf),
        Err(FrameError::Truncated { buffered: 5 })
    ));
}

fn split_feed<D: Decoder>(d: &mut D, bytes: &[u8], cuts: &[usize]) -> Vec<D::Item>
where
    D::Error: std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut buf = BytesMut::new();
    let mut pos = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.push(bytes.len());
    for p in points {
        if p < pos {
            continue;
        }
        buf.extend_from_slice(&bytes[pos..p]);
        pos = p;
        while let Some(f) = d.decode(&mut buf).expect("decode") {
            out.push(f);
        }
    }
    while let Some(f) = d.decode_eof(&mut buf).expect("eof") {
        out.push(f);
    }
    out
}

proptest! {
    #[test]
    fn length_prefixed_roundtrip_under_any_split(frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..8), cuts in prop::collection::vec(any::<usize>(), 0..20)) {
        let w = wire("rukh");
        let ChannelCodec::LengthPrefixed(mut c) = w.codec("ipc").expect("codec") else { panic!() };
        let mut bytes = BytesMut::new();
        for f in &frames { c.encode(f.as_slice(), &mut bytes).expect("encode"); }
        let got = split_feed(&mut c, &bytes, &cuts);
        prop_assert_eq!(got.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), frames);
    }

    #[test]
    fn binary_roundtrip_under_any_split(frames in prop::collection::vec((any::<u32>(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..200)), 1..8), cuts in prop::collection::vec(any::<usize>(), 0..20)) {
        let w = wire("kernel");
        let ChannelCodec::Binary(mut c) = w.codec("data").expect("codec") else { panic!() };
        let want: Vec<BinaryFrame> = frames.into_iter().map(|(s, q, p)| BinaryFrame { fields: vec![u64::from(s), q], payload: Bytes::from(p) }).collect();
        let mut bytes = BytesMut::new();
        for f in &want { c.encode(f, &mut bytes).expect("encode"); }
        let got = split_feed(&mut c, &bytes, &cuts);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn ndjson_roundtrip_under_any_split(lines in prop::collection::vec("[^\n\r]{0,60}", 1..8), cuts in prop::collection::vec(any::<usize>(), 0..20)) {
        let w = wire("xsession");
        let ChannelCodec::Ndjson(mut c) = w.codec("inbox").expect("codec") else { panic!() };
        let mut bytes = BytesMut::new();
        for l in &lines { c.encode(l.as_bytes(), &mut bytes).expect("encode"); }
        let got = split_feed(&mut c, &bytes, &cuts);
        prop_assert_eq!(got.iter().map(|b| String::from_utf8(b.to_vec()).expect("utf8")).collect::<Vec<_>>(), lines);
    }

    #[test]
    fn strict_json_roundtrips_what_serde_writes(v in arb_json()) {
        let limits = contract::wire::JsonLimits { strict: true, object_only: false, max_depth: 32, max_items: 4096, no_null: false };
        let bytes = serde_json::to_vec(&v).expect("ser");
        let back = contract::wire::json::parse(&bytes, &limits).expect("parse");
        prop_assert_eq!(back, v);
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn violation_reasons_never_quote_the_value() {
    let w = wire("rukh");
    let frame = br#"{"jsonrpc":"2.0","method":"rukh.log","params":{"level":"SECRET-TOKEN-123","message":"m"}}"#;
    let v = violation(&w, "ipc", "extension", frame);
    assert_eq!(v.class, ViolationClass::InvalidParams);
    assert!(!v.reason.contains("SECRET-TOKEN-123"), "{}", v.reason);
    assert!(
        v.reason.contains("/params/level"),
        "the reason still says where: {}",
        v.reason
    );
}

#[test]
fn depth_and_items_measure_what_the_parser_limits() {
    use contract::wire::json::{depth, items, parse};
    let limits = JsonLimits {
        max_depth: 4,
        max_items: 5,
        ..JsonLimits::default()
    };
    let at = json!({"a": [[{}]]});
    assert_eq!((depth(&at), items(&at)), (4, 3));
    parse(at.to_string().as_bytes(), &limits).expect("at both caps' edge");
    let deeper = json!({"a": [[[{}]]]});
    assert_eq!(depth(&deeper), 5);
    assert!(matches!(
        parse(deeper.to_string().as_bytes(), &limits),
        Err(JsonError::TooDeep { .. })
    ));
    let more = json!({"a": [1, 2, 3, 4, 5]});
    assert_eq!(items(&more), 6);
    assert!(matches!(
        parse(more.to_string().as_bytes(), &limits),
        Err(JsonError::TooManyItems { .. })
    ));
}

/// An oversize request still names its id, so the refusal can answer it (a JSON-RPC error
/// with the request's id, not null: a client waiting on that id would otherwise hang).
#[test]
fn an_oversize_request_keeps_its_id_for_the_refusal() {
    let w = wire("rukh");
    let call = call_example(&w, "rukh.cancel");
    let cap =
        contract::wire::framing::limit_bytes(w.contract(), "lifecyclePayloadMax").expect("cap");
    let mut big = call.clone();
    big["params"]["pad"] = json!("x".repeat(cap as usize));
    let v = violation(&w, "ipc", "core", &serde_json::to_vec(&big).expect("ser"));
    assert_eq!(v.class, ViolationClass::Oversize, "{}", v.reason);
    let partial = v.partial.expect("partial");
    assert_eq!(partial.id.as_ref(), call.get("id"));
    assert_eq!(partial.kind, Kind::Request);
}

/// An error answer whose `category` or `retryable` disagrees with the catalog entry of its
/// code breaks the contract (`invalidParams` of the answer), as a result failing its
/// schema does; the reply `Contract::error_reply` writes from the same entry passes.
#[test]
fn an_error_answer_must_agree_with_the_catalog() {
    let w = wire("kernel");
    let c = w.contract();
    let request = serde_json::from_slice::<Value>(&kernel_envelope(
        "request",
        "settings.describe",
        json!({}),
    ))
    .expect("json");
    let entry = c.errors.first().expect("a catalog entry");
    let other = c
        .errors
        .iter()
        .find(|e| e.category != entry.category)
        .expect("two categories");
    let mut reply = c
        .error_reply(
            "control",
            Some(&request),
            Some(json!("c-1")),
            &entry.code,
            "x",
            None,
        )
        .expect("an error reply");
    reply["timestamp"] = json!(1756750000.5);
    let decode = |v: &Value| {
        w.decode(
            "control",
            "core",
            v.to_string().as_bytes(),
            Some("settings.describe"),
        )
        .map_err(Box::new)
    };
    assert!(decode(&reply).is_ok(), "the catalog's own reply: {reply}");
    for (member, wrong) in [
        ("category", json!(other.category)),
        ("retryable", json!(!entry.retryable)),
    ] {
        let mut bad = reply.clone();
        bad["payload"][member] = wrong.clone();
        let v = decode(&bad).expect_err("off the catalog");
        assert_eq!(v.class, ViolationClass::InvalidParams, "{member}");
        assert!(
            v.reason.contains(&format!("{member} is {wrong}")),
            "{member}: {}",
            v.reason
        );
    }
}

/// K-42: permission.request carries exactly its own members, so a core that leaks the
/// call's arguments into it sends invalid params.
#[test]
fn a_permission_request_carrying_the_calls_arguments_is_invalid() {
    let w = wire("kernel");
    let example = call_example(&w, "permission.request");
    let bytes = |v: &Value| v.to_string().into_bytes();
    assert!(w.decode("control", "core", &bytes(&example), None).is_ok());
    let mut leaking = example;
    leaking["payload"]["arguments"] = json!({"mode": "shutdown", "delay": 0});
    let v = violation(&w, "control", "core", &bytes(&leaking));
    assert_eq!(v.class, ViolationClass::InvalidParams, "{}", v.reason);
}
