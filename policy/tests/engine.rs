//! The generic policy engine, Playbook style: a contract no built-in module knows
//! (tests/fixtures/jobs.json, every rule written as data) gets its session machine, its
//! per-job machine, its per-owner rate limit, the client's id rules and the runner's
//! declared features enforced through the engine alone, with no Rust of its own.
//! Frames go through the real wire layer; instants are passed in; each test asserts the
//! exact rulings, and every code it expects is read from the contract.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract::wire::Wire;
use contract_policy::{Act, Closing, Ctx, Dir, Engine, GateDecision, Policy, Ruling, SharedState};
use serde_json::{Value, json};

/// A contract file of the repository's test fixtures.
fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../proxy/tests/fixtures")
        .join(name)
}

/// One connection's policy: the engine alone (these contracts name no extension), told
/// the route's channel (`""`: the contract's first).
fn policy(
    w: &Arc<Wire>,
    shared: &Arc<SharedState>,
    conn: u64,
    session: u64,
    channel: &str,
) -> Box<dyn Policy> {
    let engine = Engine::new(w.clone(), shared.clone(), conn, session).on_channel(channel);
    contract_policy::layered(engine, vec![])
}

/// Connection 1's context for a message from `from` to `to` at `now` (the client's go up).
fn at<'a>(from: &'a str, to: &'a str, now: Instant) -> Ctx<'a> {
    let dir = if from == "client" { Dir::Up } else { Dir::Down };
    Ctx {
        route: "r",
        conn: 1,
        session: 1,
        dir,
        from,
        to,
        now,
    }
}

fn beacon() -> Arc<Wire> {
    let c = contract::load(&fixture("beacon.json")).expect("the beacon contract loads");
    Arc::new(Wire::new(Arc::new(c)).expect("wire"))
}

fn jobs() -> Arc<Wire> {
    let path = fixture("jobs.json");
    let c = contract::load(&path).expect("the jobs contract loads");
    Arc::new(Wire::new(Arc::new(c)).expect("wire"))
}

/// One connection of the jobs protocol, driven frame by frame.
struct Play {
    w: Arc<Wire>,
    p: Box<dyn Policy>,
    t: Instant,
    /// Method of each request still unanswered, by id.
    asked: HashMap<String, String>,
    next: u64,
}

impl Play {
    fn new() -> Self {
        let w = jobs();
        let p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "");
        Play {
            w,
            p,
            t: Instant::now(),
            asked: HashMap::new(),
            next: 0,
        }
    }

    fn send(&mut self, from: &str, v: Value) -> Vec<Ruling> {
        let to = if from == "client" { "runner" } else { "client" };
        let answers = v
            .get("id")
            .filter(|_| v.get("method").is_none())
            .and_then(|id| self.asked.remove(&id.to_string()));
        if let (Some(id), Some(m)) = (v.get("id"), v.get("method").and_then(Value::as_str)) {
            self.asked.insert(id.to_string(), m.to_string());
        }
        let bytes = serde_json::to_vec(&v).expect("json");
        let msg = self
            .w
            .decode("main", from, &bytes, answers.as_deref())
            .unwrap_or_else(|e| panic!("{v} does not decode: {}", e.reason));
        self.p.on_message(&at(from, to, self.t), &msg, bytes.len())
    }

    /// A client request with the next id in sequence.
    fn call(&mut self, method: &str, params: Value) -> (String, Vec<Ruling>) {
        self.next += 1;
        let id = format!("c:{}", self.next);
        let v = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (id.clone(), self.send("client", v))
    }

    fn answer(&mut self, id: &str, result: Value) -> Vec<Ruling> {
        self.send(
            "runner",
            json!({"jsonrpc": "2.0", "id": id, "result": result}),
        )
    }

    fn notify(&mut self, from: &str, method: &str, params: Value) -> Vec<Ruling> {
        self.send(
            from,
            json!({"jsonrpc": "2.0", "method": method, "params": params}),
        )
    }

    /// hello, answered with `features`.
    fn greet(&mut self, features: Value) {
        let (id, r) = self.call("hello", json!({}));
        assert_eq!(rules(&r), none());
        assert_eq!(
            rules(&self.answer(&id, json!({"features": features}))),
            none()
        );
    }

    /// Start `job` for `owner` and have it accepted.
    fn start(&mut self, job: &str, owner: &str) -> Vec<Ruling> {
        let (id, r) = self.call("job.start", json!({"job": job, "owner": owner}));
        if r.is_empty() {
            assert_eq!(rules(&self.answer(&id, json!({"accepted": true}))), none());
        }
        r
    }

    fn code(&self, name: &str) -> Value {
        self.w.contract().error_code(name).expect("error").clone()
    }
}

fn rules(rs: &[Ruling]) -> Vec<&'static str> {
    rs.iter().map(|r| r.rule).collect()
}

fn none() -> Vec<&'static str> {
    Vec::new()
}

/// `r` is one `capability.undeclared` ruling, only flagged, naming the entry at `entry`.
fn flagged_undeclared(r: &[Ruling], entry: &str) {
    assert_eq!(rules(r), ["capability.undeclared"]);
    assert_eq!(r[0].act, Act::Flag);
    assert!(r[0].reason.contains(entry), "{}", r[0].reason);
}

/// `r` is one `rule` ruling that discards the message (an `ignore`), naming `entry`.
fn discarded(r: &[Ruling], rule: &str, entry: &str) {
    assert_eq!(rules(r), [rule]);
    assert_eq!(r[0].act, Act::Discard);
    assert!(r[0].reason.contains(entry), "{}", r[0].reason);
}

fn depot() -> Arc<Wire> {
    let c = contract::load(&fixture("depot.json")).expect("the depot contract loads");
    Arc::new(Wire::new(Arc::new(c)).expect("wire"))
}

/// The JSON-RPC error a refusal replies with, as (id, code).
fn refusal(r: &Ruling) -> (Value, Value) {
    let Act::Refuse {
        reply: Some(reply),
        close: None,
    } = &r.act
    else {
        panic!("{} refuses with a reply, not {:?}", r.rule, r.act);
    };
    (reply["id"].clone(), reply["error"]["code"].clone())
}

#[test]
fn a_session_in_order_is_clean() {
    let mut p = Play::new();
    p.greet(json!(["upload"]));
    assert_eq!(rules(&p.start("j1", "ann")), none());
    let (id, r) = p.call("job.upload", json!({"job": "j1", "data": "abc"}));
    assert_eq!(rules(&r), none());
    assert_eq!(rules(&p.answer(&id, json!({}))), none());
    let status = json!({"job": "j1", "status": "busy"});
    assert_eq!(rules(&p.notify("runner", "job.status", status)), none());
    assert_eq!(
        rules(&p.notify("client", "job.end", json!({"job": "j1"}))),
        none()
    );
    let bye = p.send("client", json!({"jsonrpc": "2.0", "method": "bye"}));
    assert_eq!(rules(&bye), none());
}

#[test]
fn nothing_but_hello_before_the_greeting_is_answered() {
    let mut p = Play::new();
    let (id, r) = p.call("job.start", json!({"job": "j1", "owner": "ann"}));
    assert_eq!(rules(&r), ["machine.out-of-place"]);
    assert_eq!(refusal(&r[0]), (json!(id), p.code("OUT_OF_ORDER")));
    assert!(
        r[0].reason.contains("/stateMachines/session"),
        "{}",
        r[0].reason
    );
    // A notification out of place has no one to answer: it is dropped, and reported.
    // Both machines object to ending a job never started, before the greeting.
    let end = p.notify("client", "job.end", json!({"job": "j1"}));
    assert_eq!(
        rules(&end),
        ["machine.out-of-place", "machine.out-of-place"]
    );
    assert!(matches!(
        &end[0].act,
        Act::Refuse {
            reply: None,
            close: None
        }
    ));
    let (hello, r) = p.call("hello", json!({}));
    assert_eq!(rules(&r), none());
    // Still greeting: the runner has not answered.
    let (_, r) = p.call("job.start", json!({"job": "j1", "owner": "ann"}));
    assert_eq!(rules(&r), ["machine.out-of-place"]);
    assert_eq!(rules(&p.answer(&hello, json!({"features": []}))), none());
    // A second hello is out of place once the session is ready.
    let (_, r) = p.call("hello", json!({}));
    assert_eq!(rules(&r), ["machine.out-of-place"]);
}

#[test]
fn each_job_follows_its_own_machine_by_key() {
    let mut p = Play::new();
    p.greet(json!(["upload"]));
    let upload = |p: &mut Play, job: &str| p.call("job.upload", json!({"job": job, "data": "x"})).1;
    assert_eq!(rules(&upload(&mut p, "j1")), ["machine.out-of-place"]);
    assert_eq!(rules(&p.start("j1", "ann")), none());
    assert_eq!(rules(&p.start("j2", "bob")), none());
    let again = p.start("j1", "cyd");
    assert_eq!(rules(&again), ["machine.out-of-place"]);
    assert!(
        again[0].reason.contains("/stateMachines/job"),
        "{}",
        again[0].reason
    );
    assert_eq!(
        rules(&p.notify("client", "job.end", json!({"job": "j1"}))),
        none()
    );
    assert_eq!(rules(&upload(&mut p, "j1")), ["machine.out-of-place"]);
    // j2 is untouched by j1's end; j1 ended for good (`ended` is terminal).
    let status = json!({"job": "j2", "status": "busy"});
    assert_eq!(rules(&p.notify("runner", "job.status", status)), none());
    assert_eq!(rules(&p.start("j1", "dan")), ["machine.out-of-place"]);
}

/// A refusal gives a message its own code in the states it names; elsewhere the
/// machine's `outOfPlace` code stands: an upload before its job started is out of order, one
/// after the job ended gets JOB_ENDED.
#[test]
fn a_refusal_answers_with_its_own_code_where_it_applies() {
    let mut p = Play::new();
    p.greet(json!(["upload"]));
    let upload = |p: &mut Play| p.call("job.upload", json!({"job": "j1", "data": "x"})).1;
    let early = upload(&mut p);
    assert_eq!(rules(&early), ["machine.out-of-place"]);
    assert_eq!(refusal(&early[0]).1, p.code("OUT_OF_ORDER"));
    assert_eq!(rules(&p.start("j1", "ann")), none());
    let end = p.notify("client", "job.end", json!({"job": "j1"}));
    assert_eq!(rules(&end), none());
    let late = upload(&mut p);
    assert_eq!(rules(&late), ["machine.out-of-place"]);
    assert_eq!(refusal(&late[0]).1, p.code("JOB_ENDED"));
    assert_eq!(late[0].code, Some(p.code("JOB_ENDED")));
}

#[test]
fn starts_are_rate_limited_per_owner_and_answers_always_pass() {
    let mut p = Play::new();
    p.greet(json!(["upload"]));
    let rate = p.w.limits().rate("startRate").expect("a rate");
    let (period, burst) = rate.token_period().expect("a positive rate");
    for n in 0..burst.get() {
        assert_eq!(rules(&p.start(&format!("a{n}"), "ann")), none());
    }
    let (id, over) = p.call("job.start", json!({"job": "a-over", "owner": "ann"}));
    assert_eq!(rules(&over), ["limit.rate"]);
    assert_eq!(refusal(&over[0]), (json!(id), p.code("TOO_FAST")));
    assert!(
        over[0].reason.contains("/limits/startRate"),
        "{}",
        over[0].reason
    );
    // Another owner has a bucket of its own.
    assert_eq!(rules(&p.start("b0", "bob")), none());
    // The refused start never ran: its job is still idle.
    let upload = p
        .call("job.upload", json!({"job": "a-over", "data": "x"}))
        .1;
    assert_eq!(rules(&upload), ["machine.out-of-place"]);
    p.t += period;
    assert_eq!(rules(&p.start("a-later", "ann")), none());
}

#[test]
fn client_ids_are_prefixed_gapless_unique_and_capped_while_pending() {
    let mut p = Play::new();
    p.greet(json!(["upload"]));
    let invalid = p.code("INVALID_REQUEST");
    let start = |id: &str, job: &str| json!({"jsonrpc": "2.0", "id": id, "method": "job.start", "params": {"job": job, "owner": id}});
    let r = p.send("client", start("7", "x"));
    assert_eq!(rules(&r), ["ids.prefix"]);
    assert_eq!(refusal(&r[0]), (json!("7"), invalid.clone()));
    // hello was c:1; c:3 skips c:2, and the count resyncs at c:3: c:1 and c:3 are behind.
    assert_eq!(rules(&p.send("client", start("c:3", "x"))), ["ids.gap"]);
    assert_eq!(rules(&p.send("client", start("c:1", "x"))), ["ids.reuse"]);
    assert_eq!(rules(&p.send("client", start("c:3", "x"))), ["ids.reuse"]);
    let max = p.w.limits().count("pendingMax").expect("a count");
    p.next = 3;
    for n in 0..max {
        let (_, r) = p.call(
            "job.start",
            json!({"job": format!("p{n}"), "owner": format!("o{n}")}),
        );
        assert_eq!(rules(&r), none());
    }
    let (_, r) = p.call("job.start", json!({"job": "one-too-many", "owner": "z"}));
    assert_eq!(rules(&r), ["ids.pending"]);
    assert!(
        r[0].reason.contains("/parties/client/ids"),
        "{}",
        r[0].reason
    );
    // The refused id was good: it counts as used. An answer frees a slot.
    assert_eq!(rules(&p.answer("c:4", json!({"accepted": true}))), none());
    let (_, r) = p.call("job.start", json!({"job": "fits", "owner": "z"}));
    assert_eq!(rules(&r), none());
}

/// An answer must answer an id the client issued: one above its last id answers nothing.
#[test]
fn an_answer_to_an_id_never_issued_breaks_the_client_id_rules() {
    let mut p = Play::new();
    p.greet(json!(["upload"]));
    let v = json!({"jsonrpc": "2.0", "id": "c:9", "result": {"accepted": true}});
    let r = p.send("runner", v);
    assert_eq!(rules(&r), ["ids.unknown-answer"]);
    assert_eq!(r[0].code, Some(p.code("INVALID_REQUEST")));
    // An answer to an issued id is fine, once.
    let (id, _) = p.call("job.start", json!({"job": "j", "owner": "o"}));
    assert_eq!(rules(&p.answer(&id, json!({"accepted": true}))), none());
}

#[test]
fn a_feature_the_runner_did_not_declare_is_flagged() {
    let mut p = Play::new();
    p.greet(json!([]));
    assert_eq!(rules(&p.start("j1", "ann")), none());
    let (_, r) = p.call("job.upload", json!({"job": "j1", "data": "x"}));
    flagged_undeclared(&r, "/methods/job.upload/capability");
}

#[test]
fn key_machines_are_shared_by_a_session_and_forgotten_with_their_connection() {
    let w = jobs();
    let shared = Arc::new(SharedState::new());
    let mut p = Play::new();
    p.w = w.clone();
    p.p = policy(&w, &shared, 1, 1, "");
    p.greet(json!(["upload"]));
    assert_eq!(rules(&p.start("j1", "ann")), none());
    let states = |s: &SharedState, m: &str| {
        s.with_engine(|e| {
            e.machines()
                .states("r", m)
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(states(&shared, "job"), ["running"]);
    assert_eq!(states(&shared, "session"), ["ready"]);
    let ctx = Ctx {
        route: "r",
        conn: 1,
        session: 1,
        dir: Dir::Up,
        from: "client",
        to: "runner",
        now: p.t + Duration::from_secs(1),
    };
    assert!(p.p.on_close(&ctx).is_empty());
    assert_eq!(states(&shared, "job"), Vec::<String>::new());
    assert_eq!(states(&shared, "session"), Vec::<String>::new());
}

/// greetSeconds is armed when the connection opens (its `start`), disarmed by the hello
/// answer (its `stop`); run out, it drops the connection (its action) and moves the session
/// machine along its `timer` transition.
#[test]
fn the_greeting_deadline_runs_from_open_to_the_answer() {
    let secs = |p: &Play| p.w.limits().duration("greetSeconds").expect("a duration");
    let mut p = Play::new();
    assert!(p.p.on_open("r", p.t).is_empty());
    let due =
        p.p.next_deadline()
            .expect("armed when the connection opens");
    assert_eq!(due, p.t + secs(&p));
    assert!(p.p.on_tick(due - Duration::from_millis(1)).is_empty());
    let fired = p.p.on_tick(due);
    assert_eq!(fired.len(), 1);
    let (conn, r) = &fired[0];
    assert_eq!((*conn, r.rule), (1, "limit.deadline"));
    assert!(r.reason.contains("/limits/greetSeconds"), "{}", r.reason);
    assert!(matches!(
        &r.act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        }
    ));
    assert_eq!(p.p.next_deadline(), None, "fired once");
    // The session machine moved to `closed`: hello is out of place there.
    let (_, r) = p.call("hello", json!({}));
    assert_eq!(rules(&r), ["machine.out-of-place"]);

    let mut p = Play::new();
    assert!(p.p.on_open("r", p.t).is_empty());
    p.greet(json!([]));
    assert_eq!(p.p.next_deadline(), None, "the answer stopped it");
}

/// tests/fixtures/beacon.json: a clock the station runs, restarted by what its peer sends
/// (`from: peer`) and not by its own beats (which restart only its beat interval, `from:
/// self`). A station beating at a quiet client still hangs up on time; a word from the
/// client puts it off.
#[test]
fn a_clock_restarts_on_its_peer_and_not_on_its_runner() {
    let w = beacon();
    let idle = w.limits().duration("idleSeconds").expect("idle");
    let beat = w.limits().duration("beatSeconds").expect("beat");
    let msg = |from: &str, v: Value| {
        let bytes = serde_json::to_vec(&v).expect("json");
        let m = w.decode("main", from, &bytes, None).expect("decodes");
        (m, bytes.len())
    };
    let at = |from: &'static str, now: Instant| Ctx {
        route: "r",
        conn: 1,
        session: 1,
        dir: if from == "client" { Dir::Up } else { Dir::Down },
        from,
        to: if from == "client" {
            "station"
        } else {
            "client"
        },
        now,
    };
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    let (beat_msg, n) = msg(
        "station",
        json!({"jsonrpc": "2.0", "method": "beat", "params": {"n": 1}}),
    );
    let mut p = policy(&w, &shared, 1, 1, "");
    assert!(p.on_open("r", t0).is_empty());
    assert_eq!(p.next_deadline(), Some(t0 + beat));
    assert!(
        p.on_message(&at("station", t0 + beat), &beat_msg, n)
            .is_empty()
    );
    assert_eq!(p.next_deadline(), Some(t0 + idle.min(beat * 2)));
    let ran_out = p.on_tick(t0 + idle);
    assert_eq!(ran_out.len(), 1, "{ran_out:?}");
    assert!(
        ran_out[0].1.reason.contains("/limits/idleSeconds"),
        "{}",
        ran_out[0].1.reason
    );
    assert!(matches!(
        ran_out[0].1.act,
        Act::Refuse {
            close: Some(Closing::Drop),
            ..
        }
    ));

    let mut p = policy(&w, &shared, 2, 2, "");
    assert!(p.on_open("r", t0).is_empty());
    let (echo, n) = msg(
        "client",
        json!({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"text": "hi"}}),
    );
    let t1 = t0 + idle / 2;
    assert!(p.on_message(&at("client", t1), &echo, n).is_empty());
    assert!(
        p.on_tick(t0 + idle).is_empty(),
        "the client's word put it off"
    );
    assert_eq!(p.on_tick(t1 + idle).len(), 1);
}

/// tests/fixtures/beacon.json: a tune may carry the station's idleSeconds (B-8, the
/// limit's `carried`): from then on the station's clock on that connection runs that
/// long, re-armed from its last start, longer or shorter than the contract's value.
#[test]
fn a_deadline_the_wire_carries_runs_as_long_as_the_message_said() {
    let w = beacon();
    let idle = w.limits().duration("idleSeconds").expect("idle");
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    let mut p = policy(&w, &shared, 1, 1, "");
    assert!(p.on_open("r", t0).is_empty());
    let tune = |id: u64, secs: u64| {
        let v = json!({"jsonrpc": "2.0", "id": id, "method": "tune",
            "params": {"hears": [], "idleSeconds": secs}});
        let bytes = serde_json::to_vec(&v).expect("json");
        let m = w.decode("main", "client", &bytes, None).expect("decodes");
        (m, bytes.len())
    };
    let longer = idle.as_secs() * 4;
    let (m, n) = tune(1, longer);
    let t1 = t0 + Duration::from_millis(10);
    assert!(p.on_message(&at("client", "station", t1), &m, n).is_empty());
    assert!(
        p.on_tick(t0 + idle * 2).is_empty(),
        "the tune's value holds"
    );
    let ran_out = p.on_tick(t1 + Duration::from_secs(longer));
    assert_eq!(ran_out.len(), 1, "{ran_out:?}");
    assert!(ran_out[0].1.reason.contains("/limits/idleSeconds"));
    // Another connection keeps the contract's value.
    let mut q = policy(&w, &shared, 2, 2, "");
    assert!(q.on_open("r", t0).is_empty());
    let ran_out = q.on_tick(t0 + idle);
    assert_eq!(ran_out.len(), 1, "{ran_out:?}");
    assert!(ran_out[0].1.reason.contains("/limits/idleSeconds"));
}

/// schema/contracts/toolchannel.json: a heartbeat's grace runs from the first heartbeat
/// left unanswered, not from the latest (its `start` arms a clock that is not running;
/// only a `restart` re-arms one), and the budgets initialize carries set it (T-67).
#[test]
fn a_started_clock_is_not_started_again_and_follows_the_budgets() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../schema/contracts/toolchannel.json");
    let c = contract::load(&path).expect("toolchannel loads");
    let w = Arc::new(Wire::new(Arc::new(c)).expect("wire"));
    let ex = |method: &str, part: contract::model::Part| {
        let m = &w.contract().methods[method];
        let e = m.examples.iter().find(|e| e.part == part);
        e.expect("an example").message.clone()
    };
    use contract::model::Part::{Call, Result as Answer};
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    let mut p = policy(&w, &shared, 1, 1, "");
    assert!(p.on_open("r", t0).is_empty());
    let mut send = |from: &'static str, v: Value, answers: Option<&str>, at: Instant| {
        let bytes = serde_json::to_vec(&v).expect("json");
        let m = w.decode("ws", from, &bytes, answers).expect("decodes");
        let to = if from == "host" { "worker" } else { "host" };
        let r = p.on_message(&at_ctx(from, to, at), &m, bytes.len());
        assert_eq!(rules(&r), none(), "{v}");
    };
    let mut init = ex("initialize", Call);
    init["params"]["_meta"]["agentfy"]["budgets"]["heartbeatGraceSeconds"] = json!(3);
    send("host", init, None, t0);
    send("worker", ex("initialize", Answer), Some("initialize"), t0);
    for m in ["notifications/initialized", "agentfy/ready"] {
        send("worker", ex(m, Call), None, t0);
    }
    send("host", ex("tools/list", Call), None, t0);
    send("worker", ex("tools/list", Answer), Some("tools/list"), t0);
    let mut beat = ex("agentfy/heartbeat", Call);
    let t1 = t0 + Duration::from_secs(1);
    send("worker", beat.clone(), None, t1);
    beat["id"] = json!(beat["id"].as_u64().unwrap_or(0) + 1);
    send("worker", beat, None, t1 + Duration::from_secs(1));
    assert_eq!(p.next_deadline(), Some(t1 + Duration::from_secs(3)));
}

fn at_ctx<'a>(from: &'a str, to: &'a str, now: Instant) -> Ctx<'a> {
    Ctx {
        route: "r",
        conn: 1,
        session: 1,
        dir: if from == "host" { Dir::Down } else { Dir::Up },
        from,
        to,
        now,
    }
}

/// tests/fixtures/beacon.json: a beat needs no capability as a method, but a beat of kind
/// chime needs the client's `chime` (its `needs`, B-5). Once the client's tune has declared
/// what it hears without it (never before, and never for a plain beat), a chime gets the
/// declaration's `undeclared` reaction: the client hangs up (B-16). A tune hearing a
/// sound the contract does not list gets its `unknown` one: UNHEARD, and no declaration.
#[test]
fn a_capability_a_message_needs_by_its_values_gets_the_declarations_reactions() {
    let w = beacon();
    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "");
    let t = Instant::now();
    let mut send = |from: &'static str, v: Value| {
        let bytes = serde_json::to_vec(&v).expect("json");
        let m = w.decode("main", from, &bytes, None).expect("decodes");
        let to = if from == "client" {
            "station"
        } else {
            "client"
        };
        p.on_message(&at(from, to, t), &m, bytes.len())
    };
    let beat = |kind: Option<&str>| {
        let mut v = json!({"jsonrpc": "2.0", "method": "beat", "params": {"n": 1}});
        if let Some(k) = kind {
            v["params"]["kind"] = json!(k);
        }
        v
    };
    let tune = |hears: Value| json!({"jsonrpc": "2.0", "id": 1, "method": "tune", "params": {"hears": hears}});
    assert_eq!(
        rules(&send("station", beat(Some("chime")))),
        none(),
        "nothing declared yet"
    );
    let r = send("client", tune(json!(["chime", "chime-other"])));
    assert_eq!(rules(&r), ["capability.unknown"]);
    let unheard = w.contract().error_code("UNHEARD").expect("UNHEARD").clone();
    assert_eq!(refusal(&r[0]), (json!(1), unheard));
    assert!(r[0].reason.contains("chime-other"), "{}", r[0].reason);
    assert_eq!(
        rules(&send("station", beat(Some("chime")))),
        none(),
        "the refused tune declared nothing"
    );
    assert_eq!(rules(&send("client", tune(json!([])))), none());
    assert_eq!(rules(&send("station", beat(None))), none());
    let r = send("station", beat(Some("chime")));
    assert_eq!(rules(&r), ["capability.undeclared"]);
    let hangs_up = Act::Refuse {
        reply: None,
        close: Some(Closing::Drop),
    };
    assert_eq!(r[0].act, hangs_up);
    for entry in [
        "/methods/beat/needs/0",
        "/parties/client/declares/undeclared",
    ] {
        assert!(r[0].reason.contains(entry), "{}", r[0].reason);
    }
}

/// An `open` trigger names a channel: a connection of a route on another channel does not
/// arm the deadline (the route's channel reaches the engine through `Engine::on_channel`).
#[test]
fn an_open_trigger_arms_only_on_its_own_channel() {
    let w = jobs();
    let shared = Arc::new(SharedState::new());
    let on = |channel: &str| {
        let mut p = policy(&w, &shared, 1, 1, channel);
        let t = Instant::now();
        assert!(p.on_open("r", t).is_empty());
        p.next_deadline()
    };
    assert!(on("main").is_some(), "armed on the channel it names");
    assert_eq!(on("elsewhere"), None, "not on another channel");
}

// ---------------------------------------------------------------- credit, from data

/// tests/fixtures/pipes.json: a made-up protocol whose credit entry names its own methods,
/// pointers, header layout (little-endian, key first of two fields) and bounds.
struct Pipes {
    w: Arc<Wire>,
    ctl: Box<dyn Policy>,
    bulk: Box<dyn Policy>,
    t: Instant,
}

impl Pipes {
    fn new() -> Self {
        let path = fixture("pipes.json");
        let w = Arc::new(Wire::new(Arc::new(contract::load(&path).expect("pipes"))).expect("wire"));
        let shared = Arc::new(SharedState::new());
        let on = |conn, channel: &str| policy(&w, &shared, conn, 1, channel);
        let (mut ctl, mut bulk, t) = (on(1, "ctl"), on(2, "bulk"), Instant::now());
        assert!(ctl.on_open("r", t).is_empty() && bulk.on_open("r", t).is_empty());
        Pipes { w, ctl, bulk, t }
    }

    fn ctx(&self, from: &'static str, conn: u64) -> Ctx<'static> {
        let (to, dir) = match from {
            "sender" => ("sink", Dir::Up),
            _ => ("sender", Dir::Down),
        };
        Ctx {
            route: "r",
            conn,
            session: 1,
            dir,
            from,
            to,
            now: self.t,
        }
    }

    /// A control note of `op` about `pipe` (and `bytes`), from `from`.
    fn note(&mut self, from: &'static str, op: &str, pipe: u64, bytes: Option<u64>) -> Vec<Ruling> {
        let mut body = json!({"pipe": pipe});
        if let Some(b) = bytes {
            body["bytes"] = json!(b);
        }
        let v = json!({"k": "note", "op": op, "n": format!("{from}-{op}"), "ver": 1, "at": 1.0, "body": body});
        let bytes = serde_json::to_vec(&v).expect("json");
        let msg = self
            .w
            .decode("ctl", from, &bytes, None)
            .expect("a valid note");
        let ctx = self.ctx(from, 1);
        self.ctl.on_message(&ctx, &msg, bytes.len())
    }

    /// A bulk frame of `payload` bytes on `pipe` from the sender (enforce mode).
    fn bulk(&mut self, pipe: u64, seq: u64, payload: usize) -> contract_policy::DataRuling {
        let ctx = self.ctx("sender", 2);
        self.bulk.on_data(&ctx, held(pipe, seq, payload), true)
    }
}

fn held(pipe: u64, seq: u64, payload: usize) -> contract_policy::Held {
    let mut b = ((6 + payload) as u32).to_le_bytes().to_vec();
    b.extend_from_slice(&(pipe as u16).to_le_bytes());
    b.extend_from_slice(&(seq as u32).to_le_bytes());
    b.resize(10 + payload, 7);
    contract_policy::Held {
        stream: pipe,
        seq,
        payload_len: payload as u64,
        bytes: b.into(),
    }
}

/// Credit is data: held until granted, released in order, an overrun past the contract's
/// own hold bound answered with its own error and close messages, and credit from the
/// wrong party flagged. Every number and name comes from pipes.json.
#[test]
fn a_contract_of_its_own_gets_credit_from_its_data() {
    use contract_policy::GateDecision::{Exceeded, Forward, Hold};
    let mut p = Pipes::new();
    let c = p.w.contract().clone();
    let hold = c.evaluated_limits().cap("holdMax").expect("holdMax");
    assert_eq!(rules(&p.note("sender", "pipe.open", 3, None)), none());
    // Nothing flows before a grant (startCredit 0): held, 6 header bytes each, up to holdMax.
    let payload = (hold / 2 - 6) as usize;
    assert_eq!(p.bulk(3, 0, payload).decision, Hold);
    assert_eq!(p.bulk(3, 1, payload).decision, Hold);
    // A grant that covers the first frame releases it alone.
    let r = p.note("sink", "pipe.grant", 3, Some(payload as u64));
    assert_eq!(rules(&r), ["credit.release"]);
    assert_eq!(
        r[0].act,
        Act::Release {
            frames: vec![held(3, 0, payload)]
        }
    );
    let next = p.bulk(3, 2, 1);
    assert_eq!(
        (next.ready, next.decision),
        (vec![held(3, 0, payload)], Hold)
    );
    // Credit from the sender is not the sink's grant.
    assert_eq!(
        rules(&p.note("sender", "pipe.grant", 3, Some(1))),
        ["credit.grantor"]
    );
    // Past holdMax: the overrun, with the contract's code and its own messages.
    let Exceeded(o) = p.bulk(3, 3, payload).decision else {
        panic!("an overrun")
    };
    assert_eq!(o.ruling.rule, "credit.overrun");
    assert_eq!(o.ruling.code.as_ref(), Some(&json!("pipe.overrun")));
    assert_eq!(o.dropped_held, 2);
    let [error, shut] = &o.to_sender[..] else {
        panic!("{:?}", o.to_sender)
    };
    assert_eq!(
        (&error["k"], &error["body"]["code"], &error["body"]["pipe"]),
        (&json!("err"), &json!("pipe.overrun"), &json!(3))
    );
    assert_eq!(
        (&shut["op"], &shut["body"]),
        (&json!("pipe.shut"), &json!({"pipe": 3}))
    );
    for m in o.to_sender.iter().chain(&o.to_receiver) {
        assert!(
            m["n"].is_string() && m["at"].is_number() && m["ver"] == json!(1),
            "{m}"
        );
        let bytes = serde_json::to_vec(m).expect("json");
        p.w.decode("ctl", "sink", &bytes, None)
            .unwrap_or_else(|e| panic!("{m}: {}", e.reason));
    }
    // The pipe is gone: later bytes are forwarded and flagged; another pipe is untouched.
    let late = p.bulk(3, 4, 1);
    assert_eq!(late.ruling.map(|r| r.rule), Some("credit.unknown-key"));
    assert_eq!(late.decision, Forward(held(3, 4, 1)));
    assert_eq!(rules(&p.note("sender", "pipe.open", 4, None)), none());
    assert_eq!(rules(&p.note("sink", "pipe.grant", 4, Some(10))), none());
    assert_eq!(p.bulk(4, 0, 10).decision, Forward(held(4, 0, 10)));
    // A shut pipe with frames held drops them, as its sink would.
    assert_eq!(p.bulk(4, 1, 1).decision, Hold);
    assert_eq!(
        rules(&p.note("sink", "pipe.shut", 4, None)),
        ["credit.closed-held"]
    );
}

/// Control and data travel on different connections, so a close can be read before the
/// frames its sender wrote ahead of it. Those frames are covered by the credit the pipe
/// had left, and pass unflagged; a frame past that tail is data for a pipe not open, and
/// a pipe opened again starts afresh.
#[test]
fn frames_in_flight_behind_a_close_spend_the_credit_it_left() {
    use contract_policy::GateDecision::{Forward, Hold};
    let mut p = Pipes::new();
    assert_eq!(rules(&p.note("sender", "pipe.open", 5, None)), none());
    assert_eq!(rules(&p.note("sink", "pipe.grant", 5, Some(10))), none());
    assert_eq!(p.bulk(5, 0, 3).decision, Forward(held(5, 0, 3)));
    assert_eq!(rules(&p.note("sender", "pipe.shut", 5, None)), none());
    // Seven bytes were left: the tail passes, with no ruling.
    let tail = p.bulk(5, 1, 4);
    assert_eq!((tail.decision, tail.ruling), (Forward(held(5, 1, 4)), None));
    // Opened again, the pipe has the start credit (zero), not the old tail.
    assert_eq!(rules(&p.note("sender", "pipe.open", 5, None)), none());
    assert_eq!(p.bulk(5, 2, 1).decision, Hold);
    assert_eq!(
        rules(&p.note("sink", "pipe.grant", 5, Some(5))),
        ["credit.release"]
    );
    // A frame past what a tail has left ends it: it and the next are for a pipe not open.
    assert_eq!(rules(&p.note("sink", "pipe.shut", 5, None)), none());
    for (seq, n) in [(3, 5), (4, 1)] {
        let late = p.bulk(5, seq, n);
        assert_eq!(late.ruling.map(|r| r.rule), Some("credit.unknown-key"));
    }
}

/// The other race: a pipe's first frames read before the note that opens it. Within the
/// contract's hold bound they wait (enforce) and spend the pipe's credit once it opens, in
/// order; past the bound they are data for a pipe not open. In observe mode they pass and
/// are counted, and the open settles them against its credit.
#[test]
fn frames_ahead_of_their_open_wait_for_it() {
    use contract_policy::GateDecision::{Forward, Hold};
    let mut p = Pipes::new();
    let hold =
        p.w.contract()
            .evaluated_limits()
            .cap("holdMax")
            .expect("holdMax");
    let payload = (hold / 2 - 6) as usize;
    for seq in 0..2 {
        let early = p.bulk(7, seq, payload);
        assert_eq!((early.decision, early.ruling), (Hold, None), "frame {seq}");
    }
    let past = p.bulk(7, 2, 1);
    assert_eq!(past.ruling.map(|r| r.rule), Some("credit.unknown-key"));
    assert_eq!(past.decision, Forward(held(7, 2, 1)));
    // The open gives startCredit (zero): the early frames stay held, a grant releases them.
    assert_eq!(rules(&p.note("sender", "pipe.open", 7, None)), none());
    let r = p.note("sink", "pipe.grant", 7, Some(2 * payload as u64));
    assert_eq!(
        r[0].act,
        Act::Release {
            frames: vec![held(7, 0, payload), held(7, 1, payload)]
        }
    );
    // Observe mode: an early frame passes unflagged, and the open finds it beyond the
    // pipe's opening credit.
    let ctx = p.ctx("sender", 2);
    let seen = p.bulk.on_data(&ctx, held(8, 0, 3), false);
    assert_eq!((seen.decision, seen.ruling), (Forward(held(8, 0, 3)), None));
    let r = p.note("sender", "pipe.open", 8, None);
    assert_eq!(rules(&r), ["credit.overrun"]);
    assert!(r[0].reason.contains("before it opened"), "{}", r[0].reason);
}

/// A connection cap is data (`counts: open-connections`): pipes.json's listener keeps
/// `sendersMax` connections; the next is dropped unread and never counted, another route has
/// its own count, and a closed connection makes room.
#[test]
fn a_contract_of_its_own_caps_its_listeners_connections() {
    let path = fixture("pipes.json");
    let w = Arc::new(Wire::new(Arc::new(contract::load(&path).expect("pipes"))).expect("wire"));
    let max = w
        .contract()
        .evaluated_limits()
        .count("sendersMax")
        .expect("a count");
    let (shared, t) = (Arc::new(SharedState::new()), Instant::now());
    let open = |conn: u64, route: &str| {
        let mut p = policy(&w, &shared, conn, conn, "");
        let r = p.on_open(route, t);
        (p, r)
    };
    let mut kept: Vec<_> = (1..=max).map(|conn| open(conn, "r")).collect();
    assert!(kept.iter().all(|(_, r)| r.is_empty()));
    let (_, r) = open(max + 1, "r");
    assert_eq!(rules(&r), ["limit.connections"]);
    assert_eq!(
        r[0].act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        }
    );
    assert!(
        r[0].reason.ends_with("(/limits/sendersMax)"),
        "{}",
        r[0].reason
    );
    assert_eq!(
        shared.open_connections("r"),
        max as usize,
        "the refused one never counted"
    );
    assert!(
        open(max + 2, "elsewhere").1.is_empty(),
        "another listener has its own count"
    );
    let (mut first, _) = kept.remove(0);
    let ctx = Ctx {
        route: "r",
        conn: 1,
        session: 1,
        dir: Dir::Up,
        from: "sender",
        to: "sink",
        now: t,
    };
    first.on_close(&ctx);
    assert!(
        open(max + 3, "r").1.is_empty(),
        "a closed connection made room"
    );
}

/// A report is data: pipes.json's `opensRate` ignores a third quick pipe.open and, as its
/// action's `report` says, shuts the pipe at the address the open names (`/body/replyTo`),
/// with a pipe.shut built from the contract. An open naming no address is only dropped.
#[test]
fn a_contract_of_its_own_reports_a_drop_where_the_message_says() {
    let mut p = Pipes::new();
    let w = p.w.clone();
    let burst = w.limits().rate("opensRate").expect("a rate").burst;
    let open = |pipe: u64, reply: Option<&str>| {
        let mut body = json!({"pipe": pipe});
        if let Some(r) = reply {
            body["replyTo"] = json!(r);
        }
        json!({"k": "note", "op": "pipe.open", "n": format!("o-{pipe}"), "ver": 1, "at": 1.0, "body": body})
    };
    let mut send = |v: Value| {
        let bytes = serde_json::to_vec(&v).expect("json");
        let msg = w
            .decode("ctl", "sender", &bytes, None)
            .expect("a valid open");
        let ctx = p.ctx("sender", 1);
        p.ctl.on_message(&ctx, &msg, bytes.len())
    };
    for pipe in 0..burst {
        assert_eq!(rules(&send(open(pipe, Some("/tmp/me.sock")))), none());
    }
    let r = send(open(50, Some("/tmp/me.sock")));
    assert_eq!(rules(&r), ["limit.rate"]);
    assert_eq!(r[0].code, Some(json!("pipe.busy")));
    let Act::Notify { to, messages } = &r[0].act else {
        panic!("a report: {r:?}")
    };
    assert_eq!(to, "/tmp/me.sock");
    let [shut] = &messages[..] else {
        panic!("{messages:?}")
    };
    assert_eq!(
        (&shut["k"], &shut["op"], &shut["body"]),
        (&json!("note"), &json!("pipe.shut"), &json!({"pipe": 50}))
    );
    assert!(shut["n"].is_string(), "{shut}");
    let bytes = serde_json::to_vec(shut).expect("json");
    w.decode("ctl", "sink", &bytes, None)
        .unwrap_or_else(|e| panic!("{shut}: {}", e.reason));
    let r = send(open(51, None));
    assert_eq!((rules(&r), &r[0].act), (vec!["limit.rate"], &Act::Discard));
    // The dropped open opened nothing: bytes for its pipe wait for an open (the two
    // connections race), which never comes; the session's end flags them.
    let late = p.bulk(50, 0, 1);
    assert_eq!((late.decision, late.ruling), (GateDecision::Hold, None));
    let ctx = p.ctx("sender", 1);
    assert_eq!(
        rules(&p.ctl.on_close(&ctx)),
        ["credit.closed-held", "credit.unknown-key"]
    );
}

// ---------------------------------------------------------------- claims, from data

/// One connection per identity is data: pipes.json's `claims.station`. A redial of the
/// same sender process (same boot, greater try) supersedes the holder, which gets the
/// entry's `superseded` action on its own connection while the redial's attach goes on;
/// any other attach of a held station is refused on the attaching connection. A holder
/// that closes keeps the station for a redial to take back; one that detached first
/// gives it up, and anyone may attach it afresh.
#[test]
fn a_contract_of_its_own_keeps_one_connection_per_claimed_identity() {
    let path = fixture("pipes.json");
    let w = Arc::new(Wire::new(Arc::new(contract::load(&path).expect("pipes"))).expect("wire"));
    let (shared, t) = (Arc::new(SharedState::new()), Instant::now());
    let open = |conn: u64| {
        let mut p = policy(&w, &shared, conn, conn, "ctl");
        assert!(p.on_open("r", t).is_empty());
        p
    };
    let ctx = |conn: u64| Ctx {
        route: "r",
        conn,
        session: conn,
        dir: Dir::Up,
        from: "sender",
        to: "sink",
        now: t,
    };
    let send = |p: &mut Box<dyn Policy>, conn: u64, op: &str, body: Value| {
        let v = json!({"k": "note", "op": op, "n": format!("s-{conn}"), "ver": 1, "at": 1.0, "body": body});
        let bytes = serde_json::to_vec(&v).expect("json");
        let msg = w
            .decode("ctl", "sender", &bytes, None)
            .expect("a valid note");
        p.on_message(&ctx(conn), &msg, bytes.len())
    };
    let attach = |p: &mut Box<dyn Policy>, conn: u64, boot: &str, try_: u64| {
        let body = json!({"station": "north", "boot": boot, "try": try_});
        send(p, conn, "pipe.attach", body)
    };
    let refused = |r: &[Ruling]| {
        assert_eq!(rules(r), ["claim.refused"]);
        assert_eq!(
            r[0].act,
            Act::Refuse {
                reply: None,
                close: Some(Closing::Drop)
            }
        );
        assert!(r[0].reason.ends_with("(/claims/station/refused)"), "{r:?}");
    };

    let mut first = open(1);
    assert_eq!(rules(&attach(&mut first, 1, "b-7", 0)), none());
    assert_eq!(
        rules(&attach(&mut first, 1, "b-7", 0)),
        none(),
        "the holder may say it again"
    );
    let mut second = open(2);
    let r = attach(&mut second, 2, "b-7", 1);
    assert_eq!(rules(&r), ["claim.superseded"]);
    assert_eq!(
        r[0].act,
        Act::CloseConn {
            conn: 1,
            close: Closing::Drop
        }
    );
    assert!(
        r[0].reason.ends_with("(/claims/station/superseded)"),
        "{r:?}"
    );
    first.on_close(&ctx(1));

    // Another process, and the same process with a try not greater: refused.
    for (conn, boot, try_) in [(3, "b-8", 5), (4, "b-7", 1)] {
        let mut p = open(conn);
        refused(&attach(&mut p, conn, boot, try_));
        p.on_close(&ctx(conn));
    }

    // The holder closes without detaching: only a redial that may supersede takes it back.
    second.on_close(&ctx(2));
    let mut stranger = open(5);
    refused(&attach(&mut stranger, 5, "b-8", 9));
    stranger.on_close(&ctx(5));
    let mut third = open(6);
    assert_eq!(
        rules(&attach(&mut third, 6, "b-7", 2)),
        none(),
        "nothing to close"
    );

    // Detached, then closed: the station is free for anyone.
    assert_eq!(
        rules(&send(
            &mut third,
            6,
            "pipe.detach",
            json!({"station": "north"})
        )),
        none()
    );
    third.on_close(&ctx(6));
    let mut fresh = open(7);
    assert_eq!(rules(&attach(&mut fresh, 7, "b-9", 0)), none());
}

/// tests/fixtures/depot.json: each parcel states its form (`versions[].carried`, D-4); one
/// stating a form above the contract's is a later courier's and gets the entry's `newer`
/// reaction (ignore: enforce mode discards it, as the depot skips it), while parcels of
/// the contract's form, or stating none, pass. The bound is the contract's own.
#[test]
fn a_message_stating_a_newer_version_gets_the_entrys_reaction() {
    let w = depot();
    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "");
    let t = Instant::now();
    let mut send = |v: Value| {
        let bytes = serde_json::to_vec(&v).expect("json");
        let m = w.decode("desk", "courier", &bytes, None).expect("decodes");
        p.on_message(&at("courier", "depot", t), &m, bytes.len())
    };
    let top = w.contract().versions[0].highest_number().expect("a number");
    let parcel = |no: &str, v: Option<u64>| {
        let mut m = json!({"t": "parcel", "no": no, "weight": 1});
        if let Some(v) = v {
            m["v"] = json!(v);
        }
        m
    };
    assert_eq!(rules(&send(json!({"t": "hello", "courier": "c"}))), none());
    assert_eq!(rules(&send(parcel("p-1", Some(top)))), none());
    assert_eq!(rules(&send(parcel("p-2", None))), none());
    let r = send(parcel("p-3", Some(top + 1)));
    discarded(&r, "version.newer", "/versions/0/carried/newer");
    assert_eq!(rules(&send(parcel("p-4", Some(top)))), none());
}

/// tests/fixtures/depot.json: a parcel handed in again (the same `no`) within its
/// duplicate window (`dedupeSeconds`, D-5) gets the window's action (ignore: discarded),
/// wherever it comes from in the window; one the window no longer holds, or another
/// number, goes on. Only what went on is remembered: a duplicate does not restart it.
#[test]
fn a_parcel_handed_in_again_within_its_window_is_a_duplicate() {
    let w = depot();
    let window = w.limits().duration("dedupeSeconds").expect("a window");
    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "");
    let t0 = Instant::now();
    let mut send = |v: Value, t: Instant| {
        let bytes = serde_json::to_vec(&v).expect("json");
        let m = w.decode("desk", "courier", &bytes, None).expect("decodes");
        p.on_message(&at("courier", "depot", t), &m, bytes.len())
    };
    let parcel = |no: &str| json!({"t": "parcel", "no": no, "weight": 1});
    assert_eq!(
        rules(&send(json!({"t": "hello", "courier": "c"}), t0)),
        none()
    );
    assert_eq!(rules(&send(parcel("p-1"), t0)), none());
    let r = send(parcel("p-1"), t0 + window / 2);
    discarded(&r, "limit.duplicate", "/limits/dedupeSeconds");
    assert_eq!(rules(&send(parcel("p-2"), t0 + window / 2)), none());
    // The window runs from the first parcel, not from the skipped one.
    assert_eq!(rules(&send(parcel("p-1"), t0 + window)), none());
    let r = send(parcel("p-1"), t0 + window + window / 2);
    assert_eq!(rules(&r), ["limit.duplicate"]);
}

/// A line of `from` on `w`'s channel `ch` to connection 1's policy `p`, answering `asked`
/// where it is an answer.
fn said(
    p: &mut Box<dyn Policy>,
    w: &Wire,
    (ch, from, to): (&str, &'static str, &'static str),
    asked: Option<&str>,
    v: Value,
) -> Vec<Ruling> {
    let bytes = serde_json::to_vec(&v).expect("json");
    let msg = w
        .decode(ch, from, &bytes, asked)
        .unwrap_or_else(|e| panic!("{v} does not decode: {}", e.reason));
    p.on_message(&at(from, to, Instant::now()), &msg, bytes.len())
}

/// tests/fixtures/beacon.json: the band a tune names is an agreement the station judges
/// (B-12). A ring naming it again goes on; one naming another is answered OFF_BAND and
/// the connection dropped (`mismatch` with `then`); the station's own result naming
/// another band is only flagged, as nobody prescribes what the client does about it.
#[test]
fn a_contract_of_its_own_agrees_a_value_and_refuses_another() {
    let w = beacon();
    let up = ("main", "client", "station");
    let down = ("main", "station", "client");
    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "");
    let tune = json!({"jsonrpc": "2.0", "id": 1, "method": "tune", "params": {"band": "fm"}});
    assert_eq!(rules(&said(&mut p, &w, up, None, tune)), none());
    let tuned = json!({"jsonrpc": "2.0", "id": 1, "result": {"band": "fm"}});
    assert_eq!(rules(&said(&mut p, &w, down, Some("tune"), tuned)), none());
    let ring = |id: u64, band: &str| json!({"jsonrpc": "2.0", "id": id, "method": "ring", "params": {"bell": "tenor", "band": band}});
    assert_eq!(rules(&said(&mut p, &w, up, None, ring(2, "fm"))), none());
    let r = said(&mut p, &w, up, None, ring(3, "am"));
    assert_eq!(rules(&r), ["agreement.mismatch"]);
    assert!(r[0].reason.contains("/agreements/band"), "{}", r[0].reason);
    assert!(
        r[0].reason.contains("expected=fm got=am"),
        "{}",
        r[0].reason
    );
    let Act::Refuse {
        reply: Some(reply),
        close: Some(Closing::Drop),
    } = &r[0].act
    else {
        panic!("OFF_BAND, then the drop: {:?}", r[0].act);
    };
    let off = w.contract().error_code("OFF_BAND").expect("OFF_BAND");
    assert_eq!((&reply["id"], &reply["error"]["code"]), (&json!(3), off));

    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "");
    let tune = json!({"jsonrpc": "2.0", "id": 1, "method": "tune", "params": {"band": "fm"}});
    assert_eq!(rules(&said(&mut p, &w, up, None, tune)), none());
    let tuned = json!({"jsonrpc": "2.0", "id": 1, "result": {"band": "am"}});
    let r = said(&mut p, &w, down, Some("tune"), tuned);
    assert_eq!(rules(&r), ["agreement.mismatch"]);
    assert_eq!(r[0].act, Act::Flag, "the judge's own statement");
}

/// schema/contracts/toolchannel.json, compiled.
fn toolchannel() -> Arc<Wire> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../schema/contracts/toolchannel.json");
    let c = contract::load(&path).expect("toolchannel");
    Arc::new(Wire::new(Arc::new(c)).expect("wire"))
}

/// The first `part` example of `method`.
fn example(w: &Wire, method: &str, part: contract::model::Part) -> Value {
    let m = &w.contract().methods[method];
    let e = m.examples.iter().find(|e| e.part == part);
    e.unwrap_or_else(|| panic!("an example of {method}"))
        .message
        .clone()
}

/// toolchannel.json's agreements (T-70): the effective channel version is the lowest of
/// initialize's and its result's, and a heartbeat carrying another gets -32001, then close
/// 4001; a result stating another session than initialize cannot be answered, so it gets
/// only the close 4002, its reason naming the code (T-4) and both values (T-16).
#[test]
fn toolchannel_agrees_the_lowest_version_and_one_session() {
    let w = toolchannel();
    let init = |sid: &str| {
        let mut v = example(&w, "initialize", contract::model::Part::Call);
        v["params"]["_meta"]["agentfy"]["sessionId"] = json!(sid);
        v
    };
    let result = |sid: &str| {
        let mut v = example(&w, "initialize", contract::model::Part::Result);
        v["result"]["_meta"]["agentfy"]["sessionId"] = json!(sid);
        v
    };
    let (up, down) = (("ws", "host", "worker"), ("ws", "worker", "host"));
    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "ws");
    assert!(p.on_open("r", Instant::now()).is_empty());
    assert_eq!(rules(&said(&mut p, &w, up, None, init("s-1"))), none());
    assert_eq!(
        rules(&said(&mut p, &w, down, Some("initialize"), result("s-1"))),
        none()
    );
    let beat = |id: u64, v: &str| {
        let mut b = example(&w, "agentfy/heartbeat", contract::model::Part::Call);
        b["id"] = json!(id);
        b["params"]["sessionId"] = json!("s-1");
        b["params"]["channelVersion"] = json!(v);
        b
    };
    let host = init("s-1")["params"]["_meta"]["agentfy"]["channelVersion"].clone();
    let worker = result("s-1")["result"]["_meta"]["agentfy"]["channelVersion"].clone();
    let lowest = contract::model::version_order(&host, &worker).min(std::cmp::Ordering::Equal);
    let (low, high) = match lowest {
        std::cmp::Ordering::Less => (host, worker),
        _ => (worker, host),
    };
    assert_ne!(
        low, high,
        "the examples' versions differ, so the rule shows"
    );
    let low = low.as_str().expect("a string");
    // The machine would have the session serve first: only the agreement is judged here.
    let agreed = |r: Vec<Ruling>| -> Vec<Ruling> {
        r.into_iter()
            .filter(|r| r.rule.starts_with("agreement."))
            .collect()
    };
    let r = agreed(said(&mut p, &w, down, None, beat(7, low)));
    assert_eq!(rules(&r), none());
    let high = high.as_str().expect("a string");
    let r = agreed(said(&mut p, &w, down, None, beat(8, high)));
    assert_eq!(rules(&r), ["agreement.mismatch"]);
    let Act::Refuse {
        reply: Some(reply),
        close: Some(Closing::Code(close)),
    } = &r[0].act
    else {
        panic!("-32001, then close 4001: {:?}", r[0].act);
    };
    let code = w
        .contract()
        .error_code("CHANNEL_VERSION_MISMATCH")
        .expect("code");
    assert_eq!(&reply["error"]["code"], code);
    let want = w
        .contract()
        .code("closeCodes", "VERSION_UNSUPPORTED")
        .expect("4001");
    assert_eq!(want.value, close.code);

    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "ws");
    assert!(p.on_open("r", Instant::now()).is_empty());
    assert_eq!(rules(&said(&mut p, &w, up, None, init("s-1"))), none());
    let r = said(&mut p, &w, down, Some("initialize"), result("s-2"));
    assert_eq!(rules(&r), ["agreement.mismatch"]);
    let Act::Refuse {
        reply: None,
        close: Some(Closing::Code(close)),
    } = &r[0].act
    else {
        panic!("only the close: {:?}", r[0].act);
    };
    let mismatch = w.contract().error_code("SESSION_MISMATCH").expect("code");
    assert!(
        close
            .reason
            .starts_with(&format!("{mismatch} SESSION_MISMATCH")),
        "{}",
        close.reason
    );
    assert!(
        close.reason.contains("expected=s-1 got=s-2"),
        "{}",
        close.reason
    );
    let want = w
        .contract()
        .code("closeCodes", "SESSION_REJECTED")
        .expect("4002");
    assert_eq!(want.value, close.code);
}

/// tests/fixtures/beacon.json: a station asking the client's time holds its plain beats
/// until the answer (beat's `notWhile`, B-13). A beat while `time` awaits its answer is
/// flagged naming the request; a chime is allowed all the same (`unless`); once answered,
/// a beat goes on. A client's own requests are nothing to it.
#[test]
fn a_contract_of_its_own_says_what_is_not_sent_while_a_request_waits() {
    let w = beacon();
    let up = ("main", "client", "station");
    let down = ("main", "station", "client");
    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "");
    let tune = json!({"jsonrpc": "2.0", "id": 1, "method": "tune", "params": {"hears": ["chime"]}});
    assert_eq!(rules(&said(&mut p, &w, up, None, tune)), none());
    let tuned = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    assert_eq!(rules(&said(&mut p, &w, down, Some("tune"), tuned)), none());
    let beat = |kind: Option<&str>| match kind {
        Some(k) => json!({"jsonrpc": "2.0", "method": "beat", "params": {"n": 1, "kind": k}}),
        None => json!({"jsonrpc": "2.0", "method": "beat", "params": {"n": 1}}),
    };
    assert_eq!(rules(&said(&mut p, &w, down, None, beat(None))), none());
    let echo = json!({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {"text": "x"}});
    assert_eq!(rules(&said(&mut p, &w, up, None, echo)), none());
    assert_eq!(rules(&said(&mut p, &w, down, None, beat(None))), none());
    let time = json!({"jsonrpc": "2.0", "id": "s:1", "method": "time", "params": {}});
    assert_eq!(rules(&said(&mut p, &w, down, None, time)), none());
    let r = said(&mut p, &w, down, None, beat(None));
    assert_eq!(rules(&r), ["method.not-while"]);
    assert_eq!(r[0].act, Act::Flag, "what was sent cannot be taken back");
    assert!(
        r[0].reason
            .contains("while its time \"s:1\" awaits an answer")
            && r[0].reason.contains("/methods/beat/notWhile"),
        "{}",
        r[0].reason
    );
    assert_eq!(
        rules(&said(&mut p, &w, down, None, beat(Some("chime")))),
        none()
    );
    let clock = json!({"jsonrpc": "2.0", "id": "s:1", "result": {"unixMs": 1}});
    assert_eq!(rules(&said(&mut p, &w, up, Some("time"), clock)), none());
    assert_eq!(rules(&said(&mut p, &w, down, None, beat(None))), none());
}

/// toolchannel.json (T-71): the host does not release idle or explicitly while its
/// tools/call is unanswered, though a deadline release may come any time; the release's
/// graceSeconds only repeats the releaseGraceSeconds initialize carried (T-52), and
/// another value is flagged without changing the one in force.
#[test]
fn toolchannel_releases_after_its_call_and_repeats_its_grace() {
    let w = toolchannel();
    let up = ("ws", "host", "worker");
    let mut p = policy(&w, &Arc::new(SharedState::new()), 1, 1, "ws");
    assert!(p.on_open("r", Instant::now()).is_empty());
    use contract::model::Part::{Call, Result as Answer};
    let init = example(&w, "initialize", Call);
    let sid = init["params"]["_meta"]["agentfy"]["sessionId"].clone();
    let grace = init["params"]["_meta"]["agentfy"]["budgets"]["releaseGraceSeconds"].clone();
    let down = ("ws", "worker", "host");
    // The session runs: the handshake of the examples, each message clean.
    assert_eq!(rules(&said(&mut p, &w, up, None, init)), none());
    let answer = example(&w, "initialize", Answer);
    assert_eq!(
        rules(&said(&mut p, &w, down, Some("initialize"), answer)),
        none()
    );
    for m in ["notifications/initialized", "agentfy/ready"] {
        assert_eq!(
            rules(&said(&mut p, &w, down, None, example(&w, m, Call))),
            none()
        );
    }
    let list = example(&w, "tools/list", Call);
    assert_eq!(rules(&said(&mut p, &w, up, None, list)), none());
    let listed = example(&w, "tools/list", Answer);
    assert_eq!(
        rules(&said(&mut p, &w, down, Some("tools/list"), listed)),
        none()
    );
    let mut call = example(&w, "tools/call", Call);
    call["id"] = json!(40);
    assert_eq!(rules(&said(&mut p, &w, up, None, call)), none());
    let release = |id: u64, reason: &str, grace: &Value| {
        let mut v = example(&w, "agentfy/release", Call);
        v["id"] = json!(id);
        v["params"]["sessionId"] = sid.clone();
        v["params"]["reason"] = json!(reason);
        v["params"]["graceSeconds"] = grace.clone();
        v
    };
    // Only the rules at stake: the machine would have the session running first.
    let at_stake = |r: Vec<Ruling>| -> Vec<&'static str> {
        let r = r
            .into_iter()
            .filter(|r| r.rule.starts_with("method.") || r.rule == "limit.repeated");
        r.map(|r| r.rule).collect()
    };
    let r = said(&mut p, &w, up, None, release(41, "explicit", &grace));
    assert_eq!(at_stake(r), ["method.not-while"]);
    let r = said(&mut p, &w, up, None, release(42, "deadline", &grace));
    assert_eq!(at_stake(r), none());
    let mut done = example(&w, "tools/call", Answer);
    done["id"] = json!(40);
    said(&mut p, &w, down, Some("tools/call"), done);
    let r = said(&mut p, &w, up, None, release(43, "idle", &grace));
    assert_eq!(at_stake(r), none());
    let more = json!(grace.as_f64().expect("a number") + 1.0);
    let r = said(&mut p, &w, up, None, release(44, "idle", &more));
    assert_eq!(at_stake(r), ["limit.repeated"]);
    // The stray value set nothing: the one initialize carried is still the one in force.
    let r = said(&mut p, &w, up, None, release(45, "idle", &grace));
    assert_eq!(at_stake(r), none());
}
