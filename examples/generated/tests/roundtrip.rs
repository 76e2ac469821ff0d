//! Every contract example through the generated Rust types: it deserializes
//! into its channel's message type and its method's params or result type,
//! and serializes back to an equal JSON value. Plus the typed errors the
//! generator promises, and the gaps of typify it closes.

mod common;
use common::same_json;

use contract::model::Part;
use contract_generated::{kernel, rukh, toolchannel, xsession};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn roundtrip<T: DeserializeOwned + Serialize>(what: &str, v: &Value) {
    let typed: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{v}"));
    let back = serde_json::to_value(&typed).expect("serialize");
    assert!(
        same_json(&back, v),
        "{what}: re-encoded value differs:\n{back}\n{v}"
    );
}

/// Run every example of a contract through `whole` (the channel message type)
/// and the typed Call/Reply of its method.
macro_rules! check_examples {
    ($m:ident, $whole:ty, $payload:expr) => {{
        let wire = $m::CONTRACT.wire().expect("embedded contract");
        let c = wire.contract().clone();
        let mut n = 0;
        for (name, method) in &c.methods {
            for ex in &method.examples {
                let what = format!("{} {name} {:?} {}", stringify!($m), ex.part, ex.title);
                roundtrip::<$whole>(&what, &ex.message);
                let m: $m::Method = name.parse().expect("method");
                let payload: fn(&Value, Part) -> Option<Value> = $payload;
                match ex.part {
                    Part::Call => {
                        let params = payload(&ex.message, Part::Call);
                        let call = $m::Call::from_parts(name, params.clone())
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_eq!(call.method(), m);
                        let back = call.to_params().expect("ser");
                        let same = match (&back, &params) {
                            (Some(a), Some(b)) => same_json(a, b),
                            (a, b) => a == b,
                        };
                        assert!(same, "{what}: params differ:\n{back:?}\n{params:?}");
                    }
                    // xsession has no requests, so its Reply is empty and this arm is dead there.
                    #[allow(unreachable_code, unused_variables)]
                    Part::Result => {
                        let result = payload(&ex.message, Part::Result).expect("result");
                        let reply = $m::Reply::from_parts(m, result.clone())
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        let back = reply.to_value().expect("ser");
                        assert!(
                            same_json(&back, &result),
                            "{what}: result differs:\n{back}\n{result}"
                        );
                    }
                    Part::Error => {}
                }
                n += 1;
            }
        }
        n
    }};
}

fn jsonrpc_payload(v: &Value, part: Part) -> Option<Value> {
    match part {
        Part::Call => v.get("params").cloned(),
        Part::Result => v.get("result").cloned(),
        Part::Error => v.get("error").cloned(),
    }
}

fn envelope_payload(v: &Value, _: Part) -> Option<Value> {
    v.get("payload").cloned()
}

fn whole_frame(v: &Value, _: Part) -> Option<Value> {
    Some(v.clone())
}

#[test]
fn kernel_examples_roundtrip() {
    assert!(check_examples!(kernel, kernel::types::Message, envelope_payload) > 40);
}

#[test]
fn rukh_examples_roundtrip() {
    assert!(check_examples!(rukh, rukh::types::Message, jsonrpc_payload) > 20);
}

#[test]
fn toolchannel_examples_roundtrip() {
    assert!(
        check_examples!(
            toolchannel,
            toolchannel::types::JsonRpcMessage,
            jsonrpc_payload
        ) > 20
    );
}

#[test]
fn xsession_examples_roundtrip() {
    assert!(check_examples!(xsession, xsession::types::FrameEnvelope, whole_frame) >= 7);
}

#[test]
fn unknown_error_code_is_a_typed_error() {
    let e = "protocol.no_such_code"
        .parse::<kernel::ErrorCode>()
        .expect_err("unknown");
    assert_eq!(e.value, "protocol.no_such_code");
    let ok: kernel::ErrorCode = "protocol.unknown_method".parse().expect("known");
    assert_eq!(ok.code(), "protocol.unknown_method");
    assert_eq!(ok.category(), "protocol");
    assert_eq!(ok.to_string(), "protocol.unknown_method");
    let t = toolchannel::ErrorCode::try_from(-32005).expect("known");
    assert_eq!(t.symbol(), Some("SESSION_NOT_RUNNING"));
    assert!(toolchannel::ErrorCode::try_from(-32099).is_err());
    assert_eq!(
        toolchannel::codes::CloseCodes::try_from(4006).map(|c| c.value()),
        Ok(4006)
    );
}

#[test]
fn disallowed_transition_is_a_typed_error() {
    use kernel::states::TaskState;
    assert_eq!(
        TaskState::transition(TaskState::INITIAL, TaskState::Running),
        Ok(TaskState::Running)
    );
    let e =
        TaskState::transition(TaskState::Done, TaskState::Running).expect_err("done is terminal");
    assert_eq!((e.from, e.to, e.ignorable), ("done", "running", false));
    // xsession's delivery status ignores repeats rather than failing.
    use xsession::states::DeliveryStatusState as D;
    let e = D::transition(D::Delivered, D::Held).expect_err("no way back");
    assert!(e.ignorable);
}

#[test]
fn out_of_range_integer_is_rejected_by_decode() {
    // 2^53 + 1 in a rukh frame: typify's i64 would take it; decode must not.
    let frame = br#"{"jsonrpc":"2.0","method":"rukh.log","params":{"level":"info","message":"m","fields":{"n":9007199254740993}}}"#;
    let e = rukh::decode::<rukh::types::Message>(
        rukh::Channel::Ipc,
        rukh::Party::Extension,
        frame,
        None,
    )
    .expect_err("unsafe integer");
    assert!(
        matches!(e, rukh::DecodeError::Violation(ref v) if v.class == contract::wire::ViolationClass::Parse),
        "{e}"
    );
    // A bounded integer in toolchannel (a budget above its maximum) is refused by the schema.
    let c = toolchannel::CONTRACT
        .wire()
        .expect("contract")
        .contract()
        .clone();
    let ex = c.methods["agentfy/heartbeat"]
        .examples
        .iter()
        .find(|e| e.part == Part::Call)
        .expect("example");
    let mut msg = ex.message.clone();
    msg["params"]["idleSeconds"] = json!(-1);
    let bytes = serde_json::to_vec(&msg).expect("ser");
    let e = toolchannel::decode::<toolchannel::types::JsonRpcMessage>(
        toolchannel::Channel::Ws,
        toolchannel::Party::Worker,
        &bytes,
        None,
    )
    .expect_err("negative seconds");
    assert!(matches!(e, toolchannel::DecodeError::Violation(_)), "{e}");
}

#[test]
fn jsonrpc_1_0_is_rejected_by_types_and_decode() {
    let frame = json!({"jsonrpc": "1.0", "id": "c:1", "method": "rukh.close", "params": {}});
    assert!(
        serde_json::from_value::<rukh::types::Message>(frame.clone()).is_err(),
        "typify's const gap is closed"
    );
    let bytes = serde_json::to_vec(&frame).expect("ser");
    assert!(rukh::decode::<Value>(rukh::Channel::Ipc, rukh::Party::Core, &bytes, None).is_err());
}

#[test]
fn methods_know_direction_and_capability() {
    use kernel::{Method, Party};
    assert_eq!(Method::Hello.direction(), &[Party::Shell]);
    assert_eq!(Method::PermissionRequest.direction(), &[Party::Core]);
    assert_eq!(
        "command.handle".parse::<Method>(),
        Ok(Method::CommandHandle)
    );
    assert!(Method::ALL.iter().any(|m| m.capability().is_some()));
    assert_eq!(
        toolchannel::Method::ToolsCall.kind(),
        contract::model::Kind::Request
    );
}

#[test]
fn limits_are_typed_constants() {
    use std::time::Duration;
    assert_eq!(
        toolchannel::limits::HOST_HANDSHAKE_SECONDS,
        2 * toolchannel::limits::HANDSHAKE_SECONDS
    );
    assert!(toolchannel::limits::IDLE_SECONDS < toolchannel::limits::MAX_EXEC_SECONDS);
    assert_eq!(rukh::limits::FRAME_PAYLOAD_MAX, 1024 * 1024);
    assert_eq!(
        rukh::limits::INCOMPLETE_FRAME_SECONDS,
        Duration::from_secs(2)
    );
    assert_eq!(xsession::limits::PER_SENDER_RATE.burst, 30);
    assert_eq!(
        xsession::limits::PER_SENDER_RATE.per,
        Duration::from_secs(2)
    );
    assert_eq!(xsession::limits::REGISTRY_FILE_MODE, 0o600);
}

/// A call whose params are left out types as the wire layer admits it: `Call::from_parts(m,
/// None)` succeeds exactly for the methods whose messages may carry no params, and such a
/// call writes no params back (JSON-RPC lets `params` be absent; MCP's `tools/list` is one).
macro_rules! absent_params {
    ($m:ident) => {{
        let wire = $m::CONTRACT.wire().expect("embedded contract");
        let c = wire.contract().clone();
        let mut optional = 0;
        for name in c.methods.keys() {
            let may = contract::wire::params_may_be_absent(&c, name);
            match $m::Call::from_parts(name, None) {
                Ok(call) => {
                    assert!(may, "{name}: typed without params the wire layer requires");
                    assert_eq!(call.to_params().expect("ser"), None, "{name}");
                    optional += 1;
                }
                Err(e) => assert!(!may, "{name}: the wire layer admits no params: {e}"),
            }
        }
        optional
    }};
}

#[test]
fn absent_params_type_as_the_wire_layer_admits_them() {
    use contract_generated::{jobs, mcp};
    assert!(
        absent_params!(mcp) > 5,
        "mcp: tools/list, ping… take no params"
    );
    assert!(absent_params!(toolchannel) > 0);
    absent_params!(kernel);
    absent_params!(rukh);
    absent_params!(xsession);
    absent_params!(jobs);
    let call = mcp::Call::from_parts("tools/list", None).expect("tools/list without params");
    assert_eq!(call.method(), mcp::Method::ToolsList);
}

/// An optional member is absent or its type: `null` is refused where the schema does not
/// allow it (serde's `Option` would read it as absent), and kept where it does.
#[test]
fn null_in_an_optional_member_is_its_types_to_accept() {
    use contract_generated::{corpus, mcp};
    let tool = json!({"name": "t", "inputSchema": {"type": "object"}});
    let back = mcp::roundtrip_named("Tool", tool.clone()).expect("type");
    assert_eq!(back.expect("absent description"), tool);
    let mut with_null = tool.clone();
    with_null["description"] = Value::Null;
    let e = mcp::roundtrip_named("Tool", with_null).expect("type");
    assert!(e.is_err(), "a null description (a string) was accepted");
    // CloudEvents' `subject` is `["string", "null"]`: null stays null, absent stays absent.
    let event = json!({"id": "1", "source": "/s", "specversion": "1.0", "type": "t"});
    let mut nulled = event.clone();
    nulled["subject"] = Value::Null;
    for v in [event, nulled] {
        let back = corpus::roundtrip("cloudevents", "Cloudevents", v.clone()).expect("type");
        assert_eq!(back.expect("valid event"), v);
    }
}
