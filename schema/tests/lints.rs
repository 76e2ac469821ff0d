//! Each lint of `contractgen check` is shown to fire: a clean fixture passes,
//! and one targeted edit per lint makes it fail at the expected pointer.

use contract::check::Lint;
use serde_json::{Value, json};

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/minimal.json")).expect("fixture is JSON")
}

fn problems(doc: &Value) -> Vec<contract::Problem> {
    contract::check_document("fixture.json", doc).1
}

/// Apply `edit`, then assert a problem of `lint` at exactly `pointer`.
fn assert_fires(edit: impl FnOnce(&mut Value), lint: Lint, pointer: &str) {
    let mut doc = fixture();
    edit(&mut doc);
    let ps = problems(&doc);
    assert!(
        ps.iter().any(|p| p.lint == lint && p.pointer == pointer),
        "expected [{}] at {pointer}, got:\n{}",
        lint.id(),
        ps.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn clean_fixture_has_no_problems() {
    let ps = problems(&fixture());
    assert!(ps.is_empty(), "{ps:#?}");
}

#[test]
fn meta_schema_rejects_unknown_key() {
    assert_fires(
        |d| d["methods"]["echo"]["colour"] = json!("red"),
        Lint::MetaSchema,
        "/methods/echo",
    );
}

#[test]
fn meta_schema_rejects_wrong_type() {
    assert_fires(
        |d| d["limits"]["frameMax"]["unit"] = json!("furlongs"),
        Lint::MetaSchema,
        "/limits/frameMax/unit",
    );
}

#[test]
fn dangling_error_reference() {
    assert_fires(
        |d| d["methods"]["echo"]["errors"] = json!([-32099]),
        Lint::ErrorRef,
        "/methods/echo/errors/0",
    );
}

#[test]
fn duplicate_error_code() {
    assert_fires(
        |d| {
            let dup = d["errors"][0].clone();
            d["errors"].as_array_mut().expect("array").push(dup);
        },
        Lint::DuplicateCode,
        "/errors/2/code",
    );
}

#[test]
fn duplicate_code_table_value() {
    assert_fires(
        |d| {
            let v = json!({"value": 4001, "description": "again"});
            d["codes"]["closeCodes"]["values"]
                .as_array_mut()
                .expect("array")
                .push(v);
        },
        Lint::DuplicateCode,
        "/codes/closeCodes/values/1/value",
    );
}

#[test]
fn dangling_dollar_ref() {
    assert_fires(
        |d| d["methods"]["echo"]["params"] = json!({"$ref": "#/$defs/Nope"}),
        Lint::DanglingRef,
        "/methods/echo/params/$ref",
    );
}

#[test]
fn external_ref_is_rejected() {
    assert_fires(
        |d| d["$defs"]["EchoParams"]["properties"]["text"] = json!({"$ref": "other.json#/x"}),
        Lint::DanglingRef,
        "/$defs/EchoParams/properties/text/$ref",
    );
}

#[test]
fn bad_example_params() {
    assert_fires(
        |d| {
            d["methods"]["echo"]["examples"][0]["message"]["params"]["text"] =
                json!("far too long for ten")
        },
        Lint::BadExample,
        "/methods/echo/examples/0/message",
    );
}

#[test]
fn bad_example_unknown_field() {
    assert_fires(
        |d| d["methods"]["echo"]["examples"][1]["message"]["result"]["extra"] = json!(1),
        Lint::BadExample,
        "/methods/echo/examples/1/message",
    );
}

#[test]
fn bad_example_wrong_jsonrpc_version() {
    assert_fires(
        |d| d["methods"]["echo"]["examples"][0]["message"]["jsonrpc"] = json!("1.0"),
        Lint::BadExample,
        "/methods/echo/examples/0/message",
    );
}

#[test]
fn bad_example_error_not_listed() {
    assert_fires(
        |d| d["methods"]["echo"]["examples"][2]["message"]["error"]["code"] = json!(-32050),
        Lint::BadExample,
        "/methods/echo/examples/2/message",
    );
}

#[test]
fn bad_example_wrong_sender() {
    assert_fires(
        |d| d["methods"]["echo"]["examples"][0]["from"] = json!("server"),
        Lint::BadExample,
        "/methods/echo/examples/0/message",
    );
}

#[test]
fn invalid_json_schema() {
    assert_fires(
        |d| d["$defs"]["EchoParams"]["type"] = json!("banana"),
        Lint::SchemaValid,
        "/$defs/EchoParams",
    );
}

#[test]
fn transition_to_undeclared_state() {
    assert_fires(
        |d| d["stateMachines"]["session"]["transitions"][0]["to"] = json!("limbo"),
        Lint::StateMachine,
        "/stateMachines/session/transitions/0/to",
    );
}

#[test]
fn undeclared_initial_state() {
    assert_fires(
        |d| d["stateMachines"]["session"]["initial"] = json!("nowhere"),
        Lint::StateMachine,
        "/stateMachines/session/initial",
    );
}

#[test]
fn terminal_state_with_exit() {
    assert_fires(
        |d| {
            let t = json!({"from": "closed", "to": "open"});
            d["stateMachines"]["session"]["transitions"]
                .as_array_mut()
                .expect("array")
                .push(t);
        },
        Lint::StateMachine,
        "/stateMachines/session/transitions/1/from",
    );
}

#[test]
fn relation_that_does_not_hold() {
    assert_fires(
        |d| d["limits"]["idleSeconds"]["value"] = json!(1000),
        Lint::Relation,
        "/relations/0",
    );
}

#[test]
fn derived_limit_replaced_by_wrong_literal() {
    assert_fires(
        |d| d["limits"]["hostWait"]["value"] = json!(100),
        Lint::Relation,
        "/relations/1",
    );
}

#[test]
fn relation_across_dimensions() {
    assert_fires(
        |d| d["relations"][0]["right"] = json!("frameMax"),
        Lint::Relation,
        "/relations/0",
    );
}

#[test]
fn self_referential_limit() {
    assert_fires(
        |d| d["limits"]["idleSeconds"]["value"] = json!({"sum": ["hostWait", 1]}),
        Lint::Relation,
        "/limits/idleSeconds/value",
    );
}

#[test]
fn undeclared_limit_in_framing() {
    assert_fires(
        |d| d["channels"]["main"]["framing"]["maxPayload"] = json!("missing"),
        Lint::NameRef,
        "/channels/main/framing/maxPayload",
    );
}

#[test]
fn unknown_party_and_channel() {
    assert_fires(
        |d| d["methods"]["echo"]["from"] = json!(["stranger"]),
        Lint::NameRef,
        "/methods/echo/from/0",
    );
    assert_fires(
        |d| d["methods"]["echo"]["channel"] = json!("side"),
        Lint::NameRef,
        "/methods/echo/channel",
    );
}

#[test]
fn code_table_map_to_missing_value() {
    assert_fires(
        |d| d["codes"]["closeCodes"]["values"][0]["maps"]["exitCodes"] = json!(99),
        Lint::NameRef,
        "/codes/closeCodes/values/0/maps/exitCodes",
    );
}

#[test]
fn exit_table_party_must_exist() {
    assert_fires(
        |d| d["codes"]["exitCodes"]["party"] = json!("nobody"),
        Lint::NameRef,
        "/codes/exitCodes/party",
    );
}

#[test]
fn violation_code_must_exist() {
    assert_fires(
        |d| d["violations"]["parse"]["code"] = json!(-32123),
        Lint::ErrorRef,
        "/violations/parse/code",
    );
}

/// JSON-RPC lets a call leave `params` out: fine when the method's schema accepts no
/// parameters (as the wire layer's check does), a bad example when it requires some.
#[test]
fn jsonrpc_params_are_optional_where_the_schema_allows() {
    let mut doc = fixture();
    let mut ping = doc["methods"]["echo"].clone();
    ping["params"] = json!({ "type": "object", "additionalProperties": false });
    ping["result"] = json!({ "type": "object" });
    ping["examples"] = json!([{ "title": "bare call", "part": "call", "from": "client", "seed": "§2",
        "message": { "jsonrpc": "2.0", "id": 2, "method": "ping" } }]);
    doc["methods"]["ping"] = ping;
    let ps = problems(&doc);
    assert!(ps.is_empty(), "{ps:#?}");

    assert_fires(
        |d| {
            d["methods"]["echo"]["examples"][0]["message"]
                .as_object_mut()
                .expect("message")
                .remove("params");
        },
        Lint::BadExample,
        "/methods/echo/examples/0/message",
    );
}

/// A `oneOf` of the meta-schema that nothing matched names the valid choices of its
/// tag, or, for a valid tag, what that branch objects to.
#[test]
fn meta_schema_one_of_names_the_valid_choices() {
    let reason = |edit: fn(&mut Value)| {
        let mut doc = fixture();
        edit(&mut doc);
        problems(&doc)
            .into_iter()
            .find(|p| p.lint == Lint::MetaSchema && p.pointer == "/channels/main/framing")
            .map(|p| p.reason)
            .expect("a meta-schema problem at the framing")
    };
    let unknown = reason(|d| d["channels"]["main"]["framing"]["kind"] = json!("chunked"));
    for kind in ["\"length-prefixed\"", "\"ndjson\"", "\"binary\""] {
        assert!(unknown.contains(kind), "{unknown}");
    }
    assert!(unknown.contains("\"chunked\""), "{unknown}");
    let wrong = reason(|d| d["channels"]["main"]["framing"]["lengthBytes"] = json!("four"));
    assert!(
        wrong.contains("length-prefixed") && wrong.contains("/lengthBytes"),
        "{wrong}"
    );
}

#[test]
fn header_delimited_framing_names_its_limits() {
    let framing = |d: &mut Value, header_limit: &str| {
        d["channels"]["main"]["framing"] = json!({
            "kind": "header-delimited", "lengthHeader": "Content-Length",
            "maxPayload": "frameMax", "maxHeader": header_limit,
            "headers": [{"name": "Content-Type", "values": ["application/json"], "description": "d"}]
        });
    };
    let mut doc = fixture();
    framing(&mut doc, "frameMax");
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| framing(d, "nope"),
        Lint::NameRef,
        "/channels/main/framing/maxHeader",
    );
    assert_fires(
        |d| {
            framing(d, "frameMax");
            d["channels"]["main"]["framing"]["unknownHeaders"] = json!("shrug");
        },
        Lint::MetaSchema,
        "/channels/main/framing",
    );
}

#[test]
fn state_machine_with_an_unreachable_state() {
    assert_fires(
        |d| d["stateMachines"]["session"]["states"]["limbo"] = json!("never entered"),
        Lint::StateMachine,
        "/stateMachines/session/states/limbo",
    );
}

#[test]
fn state_machine_with_a_dead_end() {
    assert_fires(
        |d| {
            let m = &mut d["stateMachines"]["session"];
            m["states"]["stuck"] = json!("entered, never left");
            m["transitions"]
                .as_array_mut()
                .expect("transitions")
                .push(json!({"from": "open", "to": "stuck"}));
        },
        Lint::StateMachine,
        "/stateMachines/session/states/stuck",
    );
}

#[test]
fn trace_pointer_no_example_carries() {
    let mut doc = fixture();
    doc["channels"]["main"]["binding"]["trace"] = json!("/params/text");
    assert!(problems(&doc).is_empty(), "an example carries /params/text");
    assert_fires(
        |d| d["channels"]["main"]["binding"]["trace"] = json!("/params/_meta/nonexistent"),
        Lint::NameRef,
        "/channels/main/binding/trace",
    );
}

/// The fixture's one transition with a typed trigger.
fn with_trigger(d: &mut Value, trigger: Value) {
    d["stateMachines"]["session"]["transitions"][0]["trigger"] = trigger;
}

#[test]
fn typed_trigger_names_what_exists() {
    let mut doc = fixture();
    with_trigger(
        &mut doc,
        json!({"event": "message", "method": "echo", "kind": "response", "from": "server"}),
    );
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    with_trigger(&mut doc, json!({"event": "message", "from": "client"}));
    assert!(
        problems(&doc).is_empty(),
        "any message: {:#?}",
        problems(&doc)
    );
    let at = "/stateMachines/session/transitions/0/trigger";
    for (trigger, field) in [
        (json!({"event": "message", "method": "shout"}), "method"),
        (
            json!({"event": "message", "method": "echo", "from": "nobody"}),
            "from",
        ),
        (
            json!({"event": "message", "method": "echo", "from": "server"}),
            "from",
        ),
        (
            json!({"event": "message", "method": "echo", "kind": "response", "from": "client"}),
            "from",
        ),
        (
            json!({"event": "message", "method": "echo", "kind": "event"}),
            "kind",
        ),
        // Any message, from a party that does not exist.
        (json!({"event": "message", "from": "nobody"}), "from"),
        (json!({"event": "timer", "limit": "frameMax"}), "limit"),
        (json!({"event": "timer", "limit": "nope"}), "limit"),
        (json!({"event": "open", "channel": "side"}), "channel"),
    ] {
        assert_fires(
            |d| with_trigger(d, trigger.clone()),
            Lint::NameRef,
            &format!("{at}/{field}"),
        );
    }
    assert_fires(
        |d| {
            with_trigger(
                d,
                json!({"event": "transport", "channel": "main", "what": "websocket-close", "code": 4999}),
            )
        },
        Lint::ErrorRef,
        &format!("{at}/code"),
    );
}

#[test]
fn a_machine_said_untyped_has_no_trigger() {
    let untyped = |d: &mut Value| {
        d["stateMachines"]["session"]["untyped"] = json!("a file, not a channel");
    };
    let mut doc = fixture();
    untyped(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| {
            untyped(d);
            with_trigger(d, json!({"event": "message", "method": "echo"}));
        },
        Lint::StateMachine,
        "/stateMachines/session/untyped",
    );
}

#[test]
fn a_refusal_names_a_governed_message_and_declared_states() {
    let refusal = |d: &mut Value, method: &str, state: &str| {
        let action =
            json!({"action": "reply-error", "code": -32001, "description": "d", "seed": "s"});
        d["stateMachines"]["session"]["refusals"] = json!([{
            "message": {"event": "message", "method": method},
            "states": [state],
            "action": action,
        }]);
    };
    let at = "/stateMachines/session/refusals/0";
    let governed = |d: &mut Value| {
        with_trigger(
            d,
            json!({"event": "message", "method": "echo", "from": "client"}),
        );
    };
    let mut doc = fixture();
    governed(&mut doc);
    refusal(&mut doc, "echo", "open");
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| {
            governed(d);
            refusal(d, "echo", "nowhere");
        },
        Lint::StateMachine,
        &format!("{at}/states/0"),
    );
    // A message the machine does not govern: the refusal could never apply.
    assert_fires(
        |d| refusal(d, "echo", "open"),
        Lint::StateMachine,
        &format!("{at}/message"),
    );
    assert_fires(
        |d| {
            governed(d);
            refusal(d, "shout", "open");
        },
        Lint::NameRef,
        &format!("{at}/message/method"),
    );
}

#[test]
fn a_deadline_waited_on_is_started() {
    let started = |d: &mut Value| {
        with_trigger(d, json!({"event": "timer", "limit": "idleSeconds"}));
    };
    assert_fires(
        started,
        Lint::NameRef,
        "/stateMachines/session/transitions/0/trigger/limit",
    );
    let mut doc = fixture();
    started(&mut doc);
    doc["limits"]["idleSeconds"]["start"] = json!({"event": "open", "channel": "main"});
    doc["limits"]["idleSeconds"]["stop"] = json!([{"event": "message", "method": "echo"}]);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
}

/// A limit's trigger may name `self` or `peer` only where the limit says whose clock it is
/// (`timer`), and what a timer `sends` is a method every party running it sends.
#[test]
fn a_clock_relative_to_its_runner_names_the_runner() {
    let clock = |d: &mut Value| {
        d["methods"]["echo"]["from"] = json!(["client", "server"]);
        d["limits"]["idleSeconds"]["start"] = json!({"event": "open", "channel": "main"});
        d["limits"]["idleSeconds"]["restart"] = json!([{"event": "message", "from": "peer"},
            {"event": "message", "method": "echo", "from": "self"}]);
        d["limits"]["idleSeconds"]["sends"] = json!("echo");
    };
    let mut doc = fixture();
    clock(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    let nobody = |d: &mut Value| {
        clock(d);
        d["limits"]["idleSeconds"]
            .as_object_mut()
            .map(|o| o.remove("timer"));
    };
    assert_fires(nobody, Lint::NameRef, "/limits/idleSeconds/restart/0/from");
    let client_only = |d: &mut Value| {
        clock(d);
        d["methods"]["echo"]["from"] = json!(["client"]);
    };
    assert_fires(client_only, Lint::NameRef, "/limits/idleSeconds/sends");
    let unknown = |d: &mut Value| {
        clock(d);
        d["limits"]["idleSeconds"]["sends"] = json!("shout");
    };
    assert_fires(unknown, Lint::NameRef, "/limits/idleSeconds/sends");
}

#[test]
fn machine_scope_and_allows_refer_to_what_exists() {
    assert_fires(
        |d| d["stateMachines"]["session"]["allows"] = json!({"shout": ["open"]}),
        Lint::NameRef,
        "/stateMachines/session/allows/shout",
    );
    assert_fires(
        |d| d["stateMachines"]["session"]["allows"] = json!({"echo": ["ajar"]}),
        Lint::StateMachine,
        "/stateMachines/session/allows/echo/0",
    );
    assert_fires(
        |d| d["stateMachines"]["session"]["scope"] = json!({"per": "party", "party": "nobody"}),
        Lint::NameRef,
        "/stateMachines/session/scope/party",
    );
    assert_fires(
        |d| {
            with_trigger(d, json!({"event": "message", "method": "echo"}));
            d["stateMachines"]["session"]["scope"] =
                json!({"per": "key", "pointer": "/params/nope"});
        },
        Lint::NameRef,
        "/stateMachines/session/scope/pointer",
    );
    assert_fires(
        |d| {
            d["stateMachines"]["session"]["outOfPlace"] =
                json!({"action": "reply-error", "code": -32099, "description": "d", "seed": "§6"})
        },
        Lint::ErrorRef,
        "/stateMachines/session/outOfPlace/code",
    );
}

#[test]
fn a_rate_limit_keys_and_applies_to_what_exists() {
    let rate = |key: &str, method: &str| {
        json!({"kind": "rate", "value": 1, "unit": "count", "burst": 5, "perSeconds": 1,
               "onExpiry": "refused", "description": "d", "seed": "§5",
               "applies": {"methods": [method], "channel": "main", "from": "client"},
               "key": {"per": "pointer", "pointer": key}})
    };
    let mut doc = fixture();
    doc["limits"]["echoRate"] = rate("/params/text", "echo");
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| d["limits"]["echoRate"] = rate("/params/who", "echo"),
        Lint::NameRef,
        "/limits/echoRate/key/pointer",
    );
    assert_fires(
        |d| d["limits"]["echoRate"] = rate("/params/text", "shout"),
        Lint::NameRef,
        "/limits/echoRate/applies/methods/0",
    );
}

#[test]
fn request_ids_follow_the_party_prefix() {
    let mut doc = fixture();
    doc["parties"]["client"]["ids"] =
        json!({"prefix": "c:", "increasing": true, "maxPending": "depthMax"});
    assert_fires(
        |d| d["parties"]["client"]["ids"] = json!({"prefix": "c:"}),
        Lint::BadExample,
        "/methods/echo/examples/0/message/id",
    );
    doc["methods"]["echo"]["examples"][0]["message"]["id"] = json!("c:1");
    doc["methods"]["echo"]["examples"][1]["message"]["id"] = json!("c:1");
    doc["methods"]["echo"]["examples"][2]["message"]["id"] = json!("c:1");
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| d["parties"]["client"]["ids"] = json!({"maxPending": "frameMax"}),
        Lint::NameRef,
        "/parties/client/ids/maxPending",
    );
}

#[test]
fn a_capability_declaration_points_at_what_an_example_carries() {
    let mut doc = fixture();
    doc["parties"]["server"]["declares"] =
        json!({"method": "echo", "part": "result", "pointer": "/result", "form": "object-keys"});
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| d["parties"]["server"]["declares"] = json!({"method": "echo", "part": "result", "pointer": "/result/capabilities", "form": "object-keys"}),
        Lint::NameRef,
        "/parties/server/declares/pointer",
    );
    assert_fires(
        |d| {
            d["parties"]["server"]["declares"] =
                json!({"method": "hello", "part": "call", "pointer": "/params", "form": "list"})
        },
        Lint::NameRef,
        "/parties/server/declares/method",
    );
}

#[test]
fn credit_runs_on_a_binary_channel_with_a_grant_examples_show() {
    let credit = |channel: &str, key: &str, amount: &str| {
        json!({"s": {"channel": channel, "key": "stream_id",
                     "grant": {"method": "echo", "key": key, "amount": amount},
                     "initial": "frameMax", "counts": "payload-bytes",
                     "overrun": {"action": "close", "code": 4001, "description": "d", "seed": "§8"},
                     "description": "d", "seed": "§8"}})
    };
    let with_data = |d: &mut Value| {
        d["channels"]["data"] = json!({
            "description": "frames", "transports": ["unix"], "connects": "client", "seed": "§8",
            "framing": {"kind": "binary", "byteOrder": "big", "header": [
                {"name": "length", "bytes": 4, "counts": "rest-of-frame", "description": "l"},
                {"name": "stream_id", "bytes": 4, "description": "s"}]}});
    };
    let mut doc = fixture();
    with_data(&mut doc);
    doc["credit"] = credit("data", "/id", "/params/text");
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| d["credit"] = credit("main", "/id", "/params/text"),
        Lint::NameRef,
        "/credit/s/channel",
    );
    assert_fires(
        |d| {
            with_data(d);
            d["credit"] = credit("data", "/id", "/params/bytes");
        },
        Lint::NameRef,
        "/credit/s/grant/amount",
    );
    assert_fires(
        |d| {
            with_data(d);
            d["credit"] = credit("data", "/id", "/params/text");
            d["credit"]["s"]["key"] = json!("seq");
        },
        Lint::NameRef,
        "/credit/s/key",
    );
    // What opens and closes a key is a method whose examples carry the key; `hold` a limit.
    let mut ok = doc.clone();
    ok["credit"]["s"]["opens"] = json!({"method": "echo", "key": "/id"});
    ok["credit"]["s"]["closes"] = json!([{"method": "echo", "key": "/id"}]);
    ok["credit"]["s"]["hold"] = json!("frameMax");
    assert!(problems(&ok).is_empty(), "{:#?}", problems(&ok));
    for (field, value, at) in [
        (
            "opens",
            json!({"method": "nope", "key": "/id"}),
            "/credit/s/opens/method",
        ),
        (
            "opens",
            json!({"method": "echo", "key": "/params/none"}),
            "/credit/s/opens/key",
        ),
        (
            "closes",
            json!([{"method": "echo", "key": "/params/none"}]),
            "/credit/s/closes/0/key",
        ),
        ("hold", json!("noSuchLimit"), "/credit/s/hold"),
    ] {
        let with = |d: &mut Value| {
            *d = ok.clone();
            d["credit"]["s"][field] = value;
        };
        assert_fires(with, Lint::NameRef, at);
    }
    // A binary framing's `sequence` names one of its header fields.
    let mut numbered = doc.clone();
    numbered["channels"]["data"]["framing"]["sequence"] = json!("stream_id");
    assert!(problems(&numbered).is_empty(), "{:#?}", problems(&numbered));
    let unnumbered = |d: &mut Value| {
        with_data(d);
        d["channels"]["data"]["framing"]["sequence"] = json!("seq");
    };
    assert_fires(unnumbered, Lint::NameRef, "/channels/data/framing/sequence");
}

#[test]
fn what_a_count_counts_fits_it() {
    let mut doc = fixture();
    doc["limits"]["depthMax"]["counts"] = json!("pending-requests");
    doc["limits"]["depthMax"]["applies"] = json!({"methods": ["echo"]});
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    assert_fires(
        |d| d["limits"]["frameMax"]["counts"] = json!("open-connections"),
        Lint::NameRef,
        "/limits/frameMax/counts",
    );
    // Only requests wait for an answer.
    assert_fires(
        |d| {
            d["methods"]["echo"]["kind"] = json!("notification");
            d["limits"]["depthMax"]["counts"] = json!("pending-requests");
            d["limits"]["depthMax"]["applies"] = json!({"methods": ["echo"]});
        },
        Lint::NameRef,
        "/limits/depthMax/applies/methods/0",
    );
}

#[test]
fn a_claim_names_a_message_whose_examples_carry_its_pointers() {
    let claim = || {
        json!({"one": {"description": "d", "seed": "§8",
            "message": {"event": "message", "method": "echo"},
            "key": "/params/text", "attempt": "/id",
            "superseded": {"action": "drop-connection", "description": "d", "seed": "§8"},
            "refused": {"action": "close", "code": 4001, "description": "d", "seed": "§8"},
            "releases": {"event": "message", "method": "echo", "kind": "response"}}})
    };
    let mut doc = fixture();
    doc["claims"] = claim();
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    let name_ref = [
        ("key", json!("/params/none"), "/claims/one/key"),
        ("claimant", json!("/params/none"), "/claims/one/claimant"),
        (
            "message",
            json!({"event": "message", "method": "nope"}),
            "/claims/one/message/method",
        ),
        (
            "message",
            json!({"event": "timer", "limit": "frameMax"}),
            "/claims/one/message",
        ),
        (
            "superseded",
            json!({"action": "ignore", "description": "d", "seed": "§8"}),
            "/claims/one/superseded/action",
        ),
    ]
    .map(|(f, v, at)| (f, v, at, Lint::NameRef));
    let unknown_code = (
        "refused",
        json!({"action": "close", "code": 4999, "description": "d", "seed": "§8"}),
        "/claims/one/refused/code",
        Lint::ErrorRef,
    );
    for (field, value, at, lint) in name_ref.into_iter().chain([unknown_code]) {
        let with = |d: &mut Value| {
            d["claims"] = claim();
            d["claims"]["one"][field] = value;
        };
        assert_fires(with, lint, at);
    }
}

#[test]
fn an_upgrade_refuses_with_a_status_of_its_own_over_a_websocket() {
    let with_upgrade = |d: &mut Value| {
        let ch = &mut d["channels"]["main"];
        ch["transports"] = json!(["websocket"]);
        ch["framing"] = json!({"kind": "websocket-text", "subprotocols": ["mini.v1"]});
        ch["upgrade"] = json!({
            "bearer": {"refused": 401, "seed": "§1"},
            "subprotocol": {"refused": 426, "seed": "§1"}});
        d["codes"]["httpStatus"] = json!({"kind": "http-status", "seed": "§1",
            "description": "d", "values": [
                {"value": 401, "name": "UNAUTHORIZED", "description": "d"},
                {"value": 426, "name": "UPGRADE_REQUIRED", "description": "d"}]});
    };
    let mut doc = fixture();
    with_upgrade(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    let edits = [
        ("/transports", json!(["unix"]), "/channels/main/upgrade"),
        (
            "/upgrade/bearer/refused",
            json!(403),
            "/channels/main/upgrade/bearer/refused",
        ),
        (
            "/framing/subprotocols",
            json!([]),
            "/channels/main/upgrade/subprotocol",
        ),
    ];
    for (field, value, at) in edits {
        let both = |d: &mut Value| {
            with_upgrade(d);
            let main = &mut d["channels"]["main"];
            *main.pointer_mut(field).expect("the field") = value;
        };
        assert_fires(both, Lint::NameRef, at);
    }
}

#[test]
fn a_redial_comes_within_a_deadline_after_close_codes_of_its_own() {
    let with_redial = |d: &mut Value| {
        let ch = &mut d["channels"]["main"];
        ch["transports"] = json!(["websocket"]);
        ch["framing"] = json!({"kind": "websocket-text"});
        ch["redial"] = json!({"within": "idleSeconds", "after": [4001, "break"],
            "description": "d", "seed": "§1"});
    };
    let mut doc = fixture();
    with_redial(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    let edits = [
        (
            "/redial/within",
            json!("frameMax"),
            "/channels/main/redial/within",
        ),
        (
            "/redial/within",
            json!("nothing"),
            "/channels/main/redial/within",
        ),
        (
            "/redial/after/0",
            json!(4999),
            "/channels/main/redial/after/0",
        ),
        (
            "/transports",
            json!(["unix"]),
            "/channels/main/redial/after/0",
        ),
        ("/connects", Value::Null, "/channels/main/redial"),
        ("/redial/after", json!([]), "/channels/main/redial/after"),
    ];
    for (field, value, at) in edits {
        let both = |d: &mut Value| {
            with_redial(d);
            let main = &mut d["channels"]["main"];
            match value.is_null() {
                true => drop(main.as_object_mut().and_then(|m| m.remove(&field[1..]))),
                false => *main.pointer_mut(field).expect("the field") = value,
            }
        };
        assert_fires(both, Lint::NameRef, at);
    }
}

/// An agreement: a judge among the parties, places the examples carry, enough settling
/// places for its rule, a declared version, codes the contract knows, and `then` only
/// after an error reply.
#[test]
fn an_agreement_names_parties_places_and_codes_the_contract_has() {
    let with = |d: &mut Value| {
        d["agreements"] = json!({"text": {
            "description": "d", "seed": "§1", "judge": "server",
            "settled": [{"method": "echo", "pointer": "/params/text"},
                        {"method": "echo", "kind": "response", "pointer": "/result/text"}],
            "rule": "same",
            "mismatch": {"action": "reply-error", "code": -32001, "description": "d", "seed": "§1",
                "then": {"action": "drop-connection", "description": "d", "seed": "§1"}}
        }});
    };
    let mut doc = fixture();
    with(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    let at = "/agreements/text";
    let (name, code) = (Lint::NameRef, Lint::ErrorRef);
    let edits = [
        ("/judge", json!("nobody"), "/judge", name),
        (
            "/settled/1/pointer",
            json!("/result/none"),
            "/settled/1/pointer",
            name,
        ),
        (
            "/settled/0/method",
            json!("shout"),
            "/settled/0/method",
            name,
        ),
        ("/settled/1/kind", json!("event"), "/settled/1/kind", name),
        (
            "/settled",
            json!([{"method": "echo", "pointer": "/params/text"}]),
            "",
            name,
        ),
        ("/version", json!("v9"), "/version", name),
        ("/mismatch/code", json!(-32099), "/mismatch/code", code),
        ("/mismatch/action", json!("close"), "/mismatch/then", name),
    ];
    for (field, value, pointer, lint) in edits {
        let edit = |d: &mut Value| {
            with(d);
            let a = &mut d["agreements"]["text"];
            if field == "/settled" {
                // One settling place is too few for `lowest`.
                a["rule"] = json!("lowest");
            }
            match a.pointer_mut(field) {
                Some(v) => *v = value.clone(),
                None => a[&field[1..]] = value.clone(),
            }
        };
        let pointer = match pointer {
            "" => format!("{at}/settled"),
            p => format!("{at}{p}"),
        };
        assert_fires(edit, lint, &pointer);
    }
}

/// A `notWhile` names requests its method's sender sends, and each `unless` pointer some
/// value; a carrier that only `repeats` the value in force lowers nothing.
#[test]
fn not_while_names_the_senders_requests_and_a_repeated_value_lowers_nothing() {
    let with = |d: &mut Value| {
        d["methods"]["cancel"] = json!({
            "kind": "notification", "from": ["client"], "channel": "main",
            "description": "d", "seed": "§2",
            "notWhile": {"pending": ["echo"], "unless": {"/params/why": ["shutdown"]},
                         "description": "d", "seed": "§2"}
        });
        d["limits"]["idleSeconds"]["carried"] =
            json!([{"method": "echo", "pointer": "/id", "repeats": true}]);
    };
    let mut doc = fixture();
    with(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    let at = "/methods/cancel/notWhile";
    let edits: [(&str, Value, String); 4] = [
        ("/pending", json!(["shout"]), format!("{at}/pending/0")),
        ("/pending", json!([]), format!("{at}/pending")),
        (
            "/unless",
            json!({"/params/why": []}),
            format!("{at}/unless/~1params~1why"),
        ),
        ("/from", json!(["server"]), format!("{at}/pending/0")),
    ];
    for (field, value, pointer) in edits {
        let edit = |d: &mut Value| {
            with(d);
            let m = &mut d["methods"]["cancel"];
            match field {
                "/from" => m["from"] = value.clone(),
                f => m["notWhile"][&f[1..]] = value.clone(),
            }
        };
        assert_fires(edit, Lint::NameRef, &pointer);
    }
    let lowering = |d: &mut Value| {
        with(d);
        d["limits"]["idleSeconds"]["carried"][0]["lowerOnly"] = json!(true);
    };
    let at = "/limits/idleSeconds/carried/0/lowerOnly";
    assert_fires(lowering, Lint::NameRef, at);
}

#[test]
fn an_extension_the_tools_lack_is_named_with_the_ones_they_have() {
    let unknown = |d: &mut Value| {
        d["extensions"] = json!({"acme.magic": {"description": "d", "reason": "r", "seed": "s"}});
    };
    assert_fires(unknown, Lint::NameRef, "/extensions/acme.magic");
    let mut doc = fixture();
    unknown(&mut doc);
    let why = problems(&doc)
        .into_iter()
        .map(|p| p.reason)
        .collect::<Vec<_>>()
        .join("\n");
    for h in contract::extensions::KNOWN {
        assert!(why.contains(h.name), "{why}");
    }
    // A hook the tools have passes.
    let mut doc = fixture();
    let name = contract::extensions::KNOWN[0].name;
    doc["extensions"] = json!({name: {"description": "d", "reason": "r", "seed": "s"}});
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
}

#[test]
fn a_transition_listed_twice_fires_but_two_triggers_the_same_way_do_not() {
    let twice = |d: &mut Value| {
        let t = d["stateMachines"]["session"]["transitions"][0].clone();
        d["stateMachines"]["session"]["transitions"] = json!([t.clone(), t]);
    };
    assert_fires(
        twice,
        Lint::StateMachine,
        "/stateMachines/session/transitions/1",
    );
    let mut doc = fixture();
    let ch = doc["channels"]
        .as_object()
        .and_then(|m| m.keys().next().cloned());
    let open = json!({"event": "open", "channel": ch});
    let close = json!({"event": "close", "channel": ch});
    let t =
        |trigger: &Value| json!({"from": "open", "to": "closed", "on": "x", "trigger": trigger});
    doc["stateMachines"]["session"]["transitions"] = json!([t(&open), t(&close)]);
    let twice: Vec<_> = problems(&doc)
        .into_iter()
        .filter(|p| p.reason.contains("listed twice"))
        .collect();
    assert!(twice.is_empty(), "{twice:#?}");
}

/// A cue is a method its party sends, and what it expects and what ends it are methods
/// another party sends; `set` holds JSON pointers.
#[test]
fn a_cue_is_sent_by_its_party_and_answered_by_another() {
    let cue = |d: &mut Value| {
        d["methods"]["echo"]["from"] = json!(["client", "server"]);
        d["cues"] = json!({"one": {"description": "d", "seed": "§8", "party": "client",
            "method": "echo", "set": {"/params/text": "cue"}, "until": ["echo"]}});
    };
    let mut doc = fixture();
    cue(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    for (field, value, at) in [
        ("party", json!("nobody"), "/cues/one/party"),
        ("method", json!("nope"), "/cues/one/method"),
        ("until", json!([]), "/cues/one/until"),
        ("until", json!(["nope"]), "/cues/one/until"),
        ("expects", json!(["nope"]), "/cues/one/expects"),
        ("set", json!({"params": 1}), "/cues/one/set"),
    ] {
        let with = |d: &mut Value| {
            cue(d);
            d["cues"]["one"][field] = value;
        };
        assert_fires(with, Lint::NameRef, at);
    }
    // A method only the cue's own party sends cannot answer it.
    let own = |d: &mut Value| {
        cue(d);
        d["methods"]["echo"]["from"] = json!(["client"]);
    };
    assert_fires(own, Lint::NameRef, "/cues/one/until");
}

/// `namesBoth` needs a `refused` reaction with a close reason to name the versions in:
/// toolchannel's negotiation is clean as it is, and fires once its refusal only drops.
#[test]
fn names_both_needs_a_refusal_that_closes() {
    let mut doc: Value =
        serde_json::from_str(include_str!("../contracts/toolchannel.json")).expect("JSON");
    let at = doc["versions"]
        .as_array()
        .and_then(|vs| {
            vs.iter()
                .position(|v| v["negotiation"]["namesBoth"] == true)
        })
        .expect("toolchannel names both versions");
    let pointer = format!("/versions/{at}/negotiation/namesBoth");
    assert!(!problems(&doc).iter().any(|p| p.pointer == pointer));
    doc["versions"][at]["negotiation"]["refused"]["action"] = json!("drop-connection");
    doc["versions"][at]["negotiation"]["refused"]
        .as_object_mut()
        .expect("refused")
        .remove("code");
    let ps = problems(&doc);
    assert!(
        ps.iter()
            .any(|p| p.lint == Lint::NameRef && p.pointer == pointer),
        "{ps:?}"
    );
}

/// `answeredBy` names methods another party sends on the same channel, on a one-way message
/// of a channel whose binding names a correlation (the depot fixture, not built in).
#[test]
fn answered_by_names_the_other_partys_methods_on_a_correlated_channel() {
    let mut doc: Value =
        serde_json::from_str(include_str!("../../proxy/tests/fixtures/depot.json")).expect("JSON");
    let pointer = "/methods/parcel/answeredBy";
    let ours = |doc: &Value| {
        problems(doc)
            .into_iter()
            .filter(|p| p.lint == Lint::NameRef && p.pointer == pointer)
            .count()
    };
    assert_eq!(ours(&doc), 0);
    // The courier's own hello cannot answer the courier's parcel.
    doc["methods"]["parcel"]["answeredBy"] = json!(["hello"]);
    assert_eq!(ours(&doc), 1);
    doc["methods"]["parcel"]["answeredBy"] = json!(["receipt"]);
    let binding = doc["channels"]["desk"]["binding"]
        .as_object_mut()
        .expect("binding");
    binding.remove("correlation");
    binding.remove("batch");
    assert_eq!(ours(&doc), 1);
}

/// A limit's value carried on the wire: a known method, a message that method has, and a
/// number some example of that message holds at the pointer.
#[test]
fn a_carried_limit_names_a_message_whose_examples_hold_a_number_there() {
    let carried = |carrier: Value| {
        move |d: &mut Value| d["limits"]["idleSeconds"]["carried"] = json!([carrier])
    };
    let mut doc = fixture();
    carried(json!({"method": "echo", "pointer": "/id", "lowerOnly": true}))(&mut doc);
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));
    let at = "/limits/idleSeconds/carried/0";
    let text = carried(json!({"method": "echo", "pointer": "/params/text"}));
    assert_fires(text, Lint::NameRef, &format!("{at}/pointer"));
    let missing = carried(json!({"method": "echo", "kind": "response", "pointer": "/result/wait"}));
    assert_fires(missing, Lint::NameRef, &format!("{at}/pointer"));
    let unknown = carried(json!({"method": "shout", "pointer": "/id"}));
    assert_fires(unknown, Lint::NameRef, &format!("{at}/method"));
    let event = carried(json!({"method": "echo", "kind": "event", "pointer": "/id"}));
    assert_fires(event, Lint::NameRef, &format!("{at}/kind"));
}

/// A named reason belongs to a `close` (its close reason) or a `reply-error` (its error
/// data's `reason`, rukh's context_mismatch); any other action has nowhere to carry it.
#[test]
fn a_named_reason_is_for_a_close_or_an_error_reply() {
    let mut doc = fixture();
    let close = json!({"action": "close", "code": -32001, "reason": "too_loud",
        "description": "d", "seed": "§5"});
    doc["limits"]["frameMax"]["action"] = close;
    let ps: Vec<_> = problems(&doc)
        .into_iter()
        .filter(|p| p.pointer.ends_with("/reason"))
        .collect();
    assert!(ps.is_empty(), "{ps:?}");
    doc["limits"]["frameMax"]["action"] = json!({"action": "reply-error", "code": -32001,
        "reason": "too_loud", "description": "d", "seed": "§5"});
    let ps: Vec<_> = problems(&doc)
        .into_iter()
        .filter(|p| p.pointer.ends_with("/reason"))
        .collect();
    assert!(ps.is_empty(), "{ps:?}");
    let dropped = |d: &mut Value| {
        d["limits"]["frameMax"]["action"] = json!({"action": "drop-connection",
            "reason": "too_loud", "description": "d", "seed": "§5"});
    };
    assert_fires(dropped, Lint::NameRef, "/limits/frameMax/action/reason");
}

/// A `needs` entry must say what it holds on: `matches` or `present`; one with neither
/// would gate every message of its method.
#[test]
fn a_needs_entry_holding_on_every_message() {
    assert_fires(
        |d| {
            d["capabilities"] =
                json!({"loud": {"declaredBy": "server", "description": "x", "seed": "§2"}});
            d["methods"]["echo"]["needs"] = json!([{"capabilities": ["loud"], "seed": "§2"}]);
        },
        Lint::NameRef,
        "/methods/echo/needs/0",
    );
}

/// A declaration's `unknown` and `undeclared` reactions name codes the contract knows.
#[test]
fn a_declarations_reactions_name_known_codes() {
    for key in ["unknown", "undeclared"] {
        assert_fires(
            |d| {
                d["parties"]["client"]["declares"] = json!({
                    "method": "echo", "part": "call", "pointer": "/params/text", "form": "list",
                    key: {"action": "reply-error", "code": -32077, "description": "x", "seed": "§2"}
                });
            },
            Lint::ErrorRef,
            &format!("/parties/client/declares/{key}/code"),
        );
    }
}
