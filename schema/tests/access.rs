//! The typed accessor layer on a contract none of the built-in four: units convert
//! once, lookups by name fail with what was missing, and the error-reply builder
//! follows whichever binding the channel declares.

use std::time::Duration;

use contract::{AccessError, Contract};
use serde_json::{Value, json};

/// The minimal fixture with `patch` merged into its top level (limits merged by name).
fn contract_with(patch: Value) -> Contract {
    let mut doc: Value =
        serde_json::from_str(include_str!("fixtures/minimal.json")).expect("fixture is JSON");
    for (k, v) in patch.as_object().expect("patch is an object") {
        match (doc.get_mut(k), v) {
            (Some(Value::Object(old)), Value::Object(new)) => {
                old.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())))
            }
            _ => doc[k] = v.clone(),
        }
    }
    let (c, problems) = contract::check_document("test", &doc);
    assert!(problems.is_empty(), "{problems:?}");
    c.expect("models")
}

fn limit(kind: &str, value: Value, unit: &str) -> Value {
    json!({"kind": kind, "value": value, "unit": unit, "onExpiry": "x", "description": "d", "seed": "§9"})
}

#[test]
fn limits_convert_to_their_rust_types_once() {
    let c = contract_with(json!({"limits": {
        "blob": limit("size", json!(3), "KiB"),
        "grace": limit("deadline", json!(250), "ms"),
        "twice": limit("deadline", json!({"product": [2, "grace"]}), "ms"),
        "dirMode": limit("constant", json!(448), "mode"),
    }}));
    let l = c.evaluated_limits();
    assert_eq!(l.bytes("blob"), Ok(3 * 1024));
    assert_eq!(l.cap("blob"), Ok(3 * 1024));
    assert_eq!(l.duration("grace"), Ok(Duration::from_millis(250)));
    assert_eq!(l.duration("twice"), Ok(Duration::from_millis(500)));
    assert_eq!(l.mode("dirMode"), Ok(0o700));
    assert_eq!(l.count("depthMax").map(|n| n > 0), Ok(true));
}

#[test]
fn a_limit_of_another_dimension_is_refused_by_name() {
    let c = contract_with(json!({}));
    let l = c.evaluated_limits();
    let e = l.duration("frameMax").expect_err("a size is no duration");
    assert!(
        matches!(&e, AccessError::WrongKind { name, wanted: "a duration", .. } if name == "frameMax"),
        "{e}"
    );
    assert_eq!(l.bytes("nope"), Err(AccessError::NoLimit("nope".into())));
    assert!(
        l.rate("frameMax").is_err(),
        "a size without burst is no rate"
    );
}

#[test]
fn rates_give_a_token_period_and_scale_with_time() {
    let c = contract_with(json!({"limits": {
        "calls": {"kind": "rate", "value": 4, "unit": "count", "burst": 8, "perSeconds": 2,
                  "onExpiry": "x", "description": "d", "seed": "§9"},
        "bytesIn": {"kind": "rate", "value": 1, "unit": "KiB", "burst": 2, "perSeconds": 1,
                    "onExpiry": "x", "description": "d", "seed": "§9"},
    }}));
    let l = c.evaluated_limits();
    let r = l.rate("calls").expect("a rate");
    assert_eq!((r.amount, r.per, r.burst), (4.0, Duration::from_secs(2), 8));
    let (period, burst) = r.token_period().expect("positive");
    assert_eq!((period, burst.get()), (Duration::from_millis(500), 8));
    let b = l.rate("bytesIn").expect("a byte rate");
    assert_eq!(
        (b.amount, b.burst),
        (1024.0, 2048),
        "burst in the limit's unit"
    );

    let fast = c.evaluated_limits().time_scaled(0.1);
    assert_eq!(
        fast.rate("calls").map(|r| r.per),
        Ok(Duration::from_millis(200))
    );
    let idle = l.duration("idleSeconds").expect("a deadline");
    assert_eq!(fast.duration("idleSeconds"), Ok(idle.mul_f64(0.1)));
    assert_eq!(
        fast.bytes("frameMax"),
        l.bytes("frameMax"),
        "sizes do not scale"
    );
}

#[test]
fn codes_errors_notes_and_machines_by_name() {
    let c = contract_with(json!({}));
    assert_eq!(c.error_code("TOO_LOUD").map(|v| v.is_i64()), Ok(true));
    let code = c.error_code("TOO_LOUD").expect("named").clone();
    assert_eq!(
        c.error_for(&code).and_then(|e| e.name.as_deref()),
        Some("TOO_LOUD")
    );
    assert!(matches!(c.error("NOPE"), Err(AccessError::NoError(_))));
    let bye = c.code("closeCodes", "BYE").expect("named close code");
    let exit = bye.mapped("exitCodes").expect("maps an exit");
    assert!(c.code_for("exitCodes", exit).is_ok());
    assert!(matches!(
        c.code("closeCodes", "HI"),
        Err(AccessError::NoCode { .. })
    ));
    assert!(matches!(c.code("nope", "HI"), Err(AccessError::NoTable(_))));
    assert!(c.note_seed("M-1").ends_with("(M-1)"));
    let m = c.machine("session").expect("machine");
    let to: Vec<&str> = m.next(&m.initial).collect();
    assert!(!to.is_empty() && to.iter().all(|s| m.allows(&m.initial, s) && m.has_state(s)));
    assert!(!m.allows(&m.terminal[0], &m.initial));
}

#[test]
fn error_reply_follows_a_jsonrpc_binding() {
    let c = contract_with(json!({}));
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": "echo", "params": {"text": "x"}});
    let code = c.error_code("TOO_LOUD").expect("named").clone();
    let r = c
        .error_reply(
            "main",
            Some(&req),
            None,
            &code,
            "too loud",
            Some(json!({"n": 1})),
        )
        .expect("a binding");
    assert_eq!(r["id"], 7);
    assert_eq!(r["error"]["code"], code);
    assert_eq!(r["error"]["message"], "TOO_LOUD", "the catalog's name");
    assert_eq!(r["error"]["data"]["n"], 1);
    assert!(c.error_reply("nope", None, None, &code, "", None).is_err());
}

#[test]
fn error_reply_follows_an_envelope_binding() {
    let c = contract_with(json!({
        "channels": {"main": {
            "description": "an envelope channel", "transports": ["unix"], "connects": "client",
            "framing": {"kind": "ndjson", "maxLine": "frameMax", "lineMeasure": "bytes"},
            "binding": {"model": "envelope", "kind": "/t", "kinds": {"req": "request", "res": "response", "err": "error"},
                        "method": "/m", "id": "/i", "correlation": "/re", "trace": "/x/trace", "payload": "/body"},
            "seed": "§1"
        }},
        "methods": {"echo": {"kind": "request", "from": ["client"], "channel": "main",
                             "description": "echoes", "seed": "§2",
                             "params": {"type": "object"}, "result": {"type": "object"},
                             "examples": [{"title": "call", "part": "call", "from": "client", "seed": "§2",
                                           "message": {"t": "req", "m": "echo", "i": "a1", "x": {"trace": "t9"}, "body": {}}}]}},
        "errors": [{"code": "user.too_loud", "category": "user", "retryable": true,
                    "description": "d", "seed": "§3"}],
        "violations": {"parse": {"action": "ignore", "description": "d", "seed": "§3"}}
    }));
    let req = json!({"t": "req", "m": "echo", "i": "a1", "x": {"trace": "t9"}, "body": {}});
    let code = c.error_code("user.too_loud").expect("by code").clone();
    let r = c
        .error_reply(
            "main",
            Some(&req),
            Some(json!("b1")),
            &code,
            "too loud",
            None,
        )
        .expect("a binding");
    assert_eq!(
        r,
        json!({"t": "err", "m": "echo", "i": "b1", "re": "a1", "x": {"trace": "t9"},
               "body": {"code": "user.too_loud", "message": "too loud", "category": "user", "retryable": true}})
    );
}

/// A method's `maxPayload` limit says whether it caps the requests, the replies or both
/// (an honest large reply to a small request is not oversize when only requests are capped).
#[test]
fn a_method_cap_holds_for_what_its_limit_caps() {
    use contract::wire::{ViolationClass, Wire};
    let wire = |caps: Option<&str>| {
        let mut cap = limit("size", json!(64), "bytes");
        if let Some(k) = caps {
            cap["caps"] = json!(k);
        }
        let mut c = contract_with(json!({"limits": {"echoMax": cap}}));
        c.methods["echo"].max_payload = Some("echoMax".into());
        Wire::new(std::sync::Arc::new(c)).expect("compiles")
    };
    let pad = " ".repeat(100);
    let request =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":{{"text":"hi"}}{pad}}}"#);
    let reply = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"hi"}}{pad}}}"#);
    let oversize = |w: &Wire, from: &str, bytes: &str, answers: Option<&str>| {
        matches!(w.decode("main", from, bytes.as_bytes(), answers),
                 Err(v) if v.class == ViolationClass::Oversize)
    };
    for (caps, req_capped, reply_capped) in [
        (None, true, true),
        (Some("both"), true, true),
        (Some("requests"), true, false),
        (Some("replies"), false, true),
    ] {
        let w = wire(caps);
        assert_eq!(
            oversize(&w, "client", &request, None),
            req_capped,
            "{caps:?} request"
        );
        assert_eq!(
            oversize(&w, "server", &reply, Some("echo")),
            reply_capped,
            "{caps:?} reply"
        );
    }
}

#[test]
fn an_unknown_contract_name_lists_the_built_in_ones() {
    let err = contract::resolve("nope")
        .expect_err("no such contract")
        .to_string();
    for name in contract::builtin_names() {
        assert!(err.contains(name), "{err}");
    }
    // A path that does not exist is still reported as a file that cannot be read.
    let err = contract::resolve("missing/nope.json")
        .expect_err("no such file")
        .to_string();
    assert!(err.contains("cannot read"), "{err}");
}

/// A limit whose value the wire carries: the carried value holds, limits computed from it
/// follow, a `lowerOnly` value above the one in force is ignored, and a carried duration
/// is real time, never scaled again.
#[test]
fn a_value_the_wire_carries_holds_and_what_is_computed_from_it_follows() {
    let carried = json!([{"method": "echo", "pointer": "/id", "lowerOnly": true}]);
    let mut idle = limit("deadline", json!(90), "s");
    idle["carried"] = carried;
    let c = contract_with(json!({"limits": {
        "idleSeconds": idle,
        "hostWait": limit("deadline", json!({"product": [2, "idleSeconds"]}), "s"),
    }}));
    let wire = contract::wire::Wire::new(std::sync::Arc::new(c.clone())).expect("compiles");
    let echo = |id: u64| {
        let bytes = json!({"jsonrpc": "2.0", "id": id, "method": "echo", "params": {"text": "hi"}});
        let bytes = serde_json::to_vec(&bytes).expect("json");
        wire.decode("main", "client", &bytes, None)
            .expect("valid echo")
    };
    let mut l = c.evaluated_limits().time_scaled(0.5);
    assert_eq!(l.duration("hostWait"), Ok(Duration::from_secs(90)));
    assert_eq!(l.carry(&c, &echo(7)), vec!["idleSeconds".to_string()]);
    assert_eq!(l.duration("idleSeconds"), Ok(Duration::from_secs(7)));
    assert_eq!(l.duration("hostWait"), Ok(Duration::from_secs(14)));
    // Only lowers: 100 is above the 7 in force.
    assert!(l.carry(&c, &echo(100)).is_empty());
    assert_eq!(l.duration("idleSeconds"), Ok(Duration::from_secs(7)));
    // An answer is not the carrier (the carrier is echo's call).
    let answer = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 3, "result": {"text": "hi"}}))
        .expect("json");
    let answer = wire
        .decode("main", "server", &answer, Some("echo"))
        .expect("valid answer");
    assert!(l.carry(&c, &answer).is_empty());
}

/// A close code owes an exit only of the party its exit-code table names.
#[test]
fn a_close_code_owes_the_exit_of_its_tables_party() {
    let mut c = contract_with(json!({}));
    assert!(c.exits_after_close("server").is_empty());
    let exits = c.codes.get_mut("exitCodes").expect("fixture's exit table");
    exits.party = Some("server".into());
    let owed: Vec<(String, u16, String, i32)> = c
        .exits_after_close("server")
        .into_iter()
        .map(|(t, code, e, exit)| (t.to_string(), code, e.to_string(), exit))
        .collect();
    let close = &c.codes["closeCodes"].values[0];
    let want_exit = close.mapped("exitCodes").and_then(Value::as_i64);
    assert_eq!(owed.len(), 1, "{owed:?}");
    assert_eq!(owed[0].0, "closeCodes");
    assert_eq!(Some(u64::from(owed[0].1)), close.value.as_u64());
    assert_eq!(owed[0].2, "exitCodes");
    assert_eq!(Some(i64::from(owed[0].3)), want_exit);
    assert!(c.exits_after_close("client").is_empty());
}

/// A channel whose message schema closes an error's data (as rukh's `ErrorData` does):
/// the reply builder keeps only the members it lists, and the wire refuses an error that
/// carries another, so what the proxy answers is what a strict binding decodes.
#[test]
fn error_data_keeps_to_the_members_a_closed_schema_lists() {
    let c = contract_with(json!({
        "channels": {"main": {
            "description": "the only channel", "transports": ["unix"], "connects": "client",
            "framing": {"kind": "length-prefixed", "lengthBytes": 4, "byteOrder": "big", "maxPayload": "frameMax"},
            "json": {"strict": true, "objectOnly": true, "maxDepth": "depthMax", "seed": "§1"},
            "binding": {"model": "jsonrpc", "version": "2.0"},
            "message": {"oneOf": [{"$ref": "#/$defs/Call"}, {"$ref": "#/$defs/Answer"}, {"$ref": "#/$defs/Failure"}]},
            "seed": "§1"
        }},
        "$defs": {
            "EchoParams": {"type": "object", "additionalProperties": false, "required": ["text"],
                           "properties": {"text": {"type": "string", "maxLength": 10}}},
            "Call": {"type": "object", "required": ["method"]},
            "Answer": {"type": "object", "required": ["result"]},
            "Failure": {"type": "object", "required": ["error"],
                        "properties": {"error": {"type": "object", "properties": {"data": {"$ref": "#/$defs/Why"}}}}},
            "Why": {"type": "object", "additionalProperties": false, "properties": {"detail": {"type": "string"}}}
        }
    }));
    let members = c.error_data_members("main").expect("closed");
    assert_eq!(members.into_iter().collect::<Vec<_>>(), ["detail"]);
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": "echo", "params": {"text": "x"}});
    let code = c.error_code("TOO_LOUD").expect("named").clone();
    let data = json!({"detail": "too loud", "entry": "/limits/frameMax"});
    let r = c
        .error_reply("main", Some(&req), None, &code, "too loud", Some(data))
        .expect("a binding");
    assert_eq!(r["error"]["data"], json!({"detail": "too loud"}), "{r}");

    let w = contract::wire::Wire::new(std::sync::Arc::new(c)).expect("wire");
    let bytes = |v: &Value| serde_json::to_vec(v).expect("json");
    let decoded = w.decode("main", "server", &bytes(&r), Some("echo"));
    assert!(decoded.is_ok(), "{decoded:?}");
    let mut extra = r.clone();
    extra["error"]["data"]["entry"] = json!("/limits/frameMax");
    let v = w
        .decode("main", "server", &bytes(&extra), Some("echo"))
        .expect_err("an error's data the schema closes");
    assert!(v.reason.contains("invalid error"), "{}", v.reason);
}

/// Versions order numbers by value and dotted strings part by part (`1.10.0` above
/// `1.9.2`, `1.2` below `1.2.0`), anything else as text.
#[test]
fn versions_order_part_by_part() {
    use std::cmp::Ordering::{Greater, Less};
    let order = |a: serde_json::Value, b: serde_json::Value| contract::model::version_order(&a, &b);
    assert_eq!(order(json!("1.10.0"), json!("1.9.2")), Greater);
    assert_eq!(order(json!("1.2"), json!("1.2.0")), Less);
    assert_eq!(order(json!(2), json!(10)), Less);
    assert_eq!(order(json!("1.x"), json!("1.10")), Greater, "as text");
}
