//! The Rust side of the machine vectors (`contractgen vectors`, `machines.json`): every
//! typed state machine of the generated bindings steps on its messages and events exactly as
//! the vectors say. Python and C# run the same files; the vectors come from
//! `contract::machine`, which the proxy's policy engine runs.

mod common;

use contract::model::Kind;
use contract::wire::Message;
use serde_json::Value;

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().map(str::to_string).unwrap_or_default()
}

macro_rules! machine_suite {
    ($test:ident, $m:ident, $path:literal) => {
        #[test]
        fn $test() {
            use contract_generated::$m::states;
            let v = common::vectors($path, &["machines.json"]).remove(0);
            let messages = v["messages"].as_array().expect("messages");
            let events = v["events"].as_array().expect("events");
            assert!(
                !messages.is_empty() && !events.is_empty(),
                "no typed machine in {}",
                $path
            );
            for x in messages {
                let id = text(x, "id");
                let kind: Kind = serde_json::from_value(x["kind"].clone()).expect("kind");
                let msg = Message {
                    kind,
                    method: x["method"].as_str().map(str::to_string),
                    id: None,
                    correlation: None,
                    trace: None,
                    value: x["message"].clone(),
                };
                let got = states::on_message_named(
                    &text(x, "machine"),
                    &text(x, "state"),
                    &text(x, "from"),
                    &msg,
                )
                .unwrap_or_else(|| panic!("{id}: unknown machine, state or party"))
                .unwrap_or_else(|e| panic!("{id}: {e}"));
                let want = (
                    text(x, "expect"),
                    x["to"].as_str().map(str::to_string),
                    x["event"].as_str().map(str::to_string),
                    x["ignorable"].as_bool().unwrap_or(false),
                );
                let got = (
                    got.0.to_string(),
                    got.1.map(str::to_string),
                    got.2.map(str::to_string),
                    got.3,
                );
                assert_eq!(got, want, "{id}");
            }
            for x in events {
                let id = text(x, "id");
                let got =
                    states::on_named(&text(x, "machine"), &text(x, "state"), &text(x, "event"))
                        .unwrap_or_else(|| panic!("{id}: unknown machine, state or event"));
                match (got, x["to"].as_str()) {
                    (Ok(to), Some(want)) => assert_eq!(to, want, "{id}"),
                    (Err(e), None) => {
                        assert_eq!(Some(e.ignorable), x["ignorable"].as_bool(), "{id}")
                    }
                    (got, want) => panic!("{id}: got {got:?}, want {want:?}"),
                }
            }
        }
    };
}

machine_suite!(kernel_machines, kernel, "schema/contracts/kernel.json");
machine_suite!(mcp_machines, mcp, "schema/contracts/mcp.json");
machine_suite!(jobs_machines, jobs, "proxy/tests/fixtures/jobs.json");
