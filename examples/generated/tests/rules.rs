//! The Rust side of the rule vectors (`contractgen vectors`, `rules.json`): the generated
//! `rules` module hands out each party's id rules and a limiter per keyed rate limit, and
//! with them `contract::ids::IdCounter` and `contract::rate::KeyedRate` issue, check, admit
//! and refuse exactly as the vectors say. Python and C# run the same files.

use std::time::{Duration, Instant};

mod common;

use contract::ids::IdCounter;
use contract::rate::Taken;
use serde_json::Value;

fn taken(t: Taken) -> &'static str {
    match t {
        Taken::NotApplicable => "not-applicable",
        Taken::Admitted => "admitted",
        Taken::Refused => "refused",
    }
}

macro_rules! rule_suite {
    ($test:ident, $m:ident, $path:literal) => {
        #[test]
        fn $test() {
            use contract_generated::$m::{Party, rules};
            let v = common::vectors($path, &["rules.json"]).remove(0);
            let ids = v["ids"].as_array().expect("ids");
            let rates = v["rates"].as_array().expect("rates");
            assert!(
                !ids.is_empty() && !rates.is_empty(),
                "no id rules or keyed rate in {}",
                $path
            );
            for x in ids {
                let name = x["party"].as_str().expect("party");
                let party = *Party::ALL
                    .iter()
                    .find(|p| p.name() == name)
                    .expect("a party");
                let r = rules::id_rules(party).unwrap_or_else(|| panic!("{name}: no id rules"));
                let mut issuer = IdCounter::new();
                let issued: Vec<Value> = x["next"]
                    .as_array()
                    .expect("next")
                    .iter()
                    .map(|_| issuer.next_id(&r))
                    .collect();
                assert_eq!(&Value::Array(issued), &x["next"], "{name}");
                let mut checker = IdCounter::new();
                for a in x["admit"].as_array().expect("admit") {
                    let got = checker
                        .admit(&r, &a["id"])
                        .map_or_else(|b| b.rule, |()| "ok");
                    assert_eq!(Some(got), a["expect"].as_str(), "{name}: {}", a["id"]);
                }
            }
            for x in rates {
                let name = x["limit"].as_str().expect("limit");
                let mut limiter = rules::keyed_rate_named(name)
                    .unwrap_or_else(|| panic!("{name}: no limiter"))
                    .expect("limiter");
                let base = Instant::now();
                for c in x["calls"].as_array().expect("calls") {
                    let now = base + Duration::from_secs_f64(c["t"].as_f64().expect("t"));
                    let size = c["size"].as_u64().expect("size") as usize;
                    let from = c["from"].as_str().expect("from");
                    let got =
                        limiter.take((from, 0), c["method"].as_str(), (&c["message"], size), now);
                    assert_eq!(
                        Some(taken(got)),
                        c["expect"].as_str(),
                        "{name} at {}",
                        c["t"]
                    );
                }
            }
        }
    };
}

rule_suite!(rukh_rules, rukh, "schema/contracts/rukh.json");
rule_suite!(mcp_rules, mcp, "schema/contracts/mcp.json");
rule_suite!(jobs_rules, jobs, "proxy/tests/fixtures/jobs.json");
