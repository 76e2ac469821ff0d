//! The stateful contract rules (`policy::*`), driven the way the relay drives
//! them: frames decoded by the real wire layer from the contracts' own examples,
//! instants passed in, exact rulings asserted. Each rule has a test that breaks
//! it and sees the contract's response, and one that keeps it and sees nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use contract::model::Kind;
use contract::wire::{Message, Wire};
use contract_proxy::inspect::{Closing, Dir};
use contract_proxy::policy::ratelimit::{RateLimitError, RateLimitSpec, RateLimiter};
use contract_proxy::policy::{
    self, Act, CreditGate, Ctx, DataRuling, GateDecision, Held, Policy, Ruling, SharedState,
};
use contract_transport::conn::CloseFrame;
use serde_json::{Value, json};

fn wire(name: &str) -> Arc<Wire> {
    Arc::new(Wire::new(Arc::new(contract::builtin(name).expect("contract"))).expect("wire"))
}

/// The `n`th example of `method` of the given part (call, result, error).
fn ex(w: &Wire, method: &str, part: &str, n: usize) -> Value {
    let m = &w.contract().methods[method];
    let found: Vec<Value> = m
        .examples
        .iter()
        .filter(|e| format!("{:?}", e.part).eq_ignore_ascii_case(part))
        .map(|e| e.message.clone())
        .collect();
    found
        .get(n)
        .cloned()
        .unwrap_or_else(|| panic!("{method} has no {part} example #{n}"))
}

/// Limit `name` in base units (bytes, seconds, counts).
fn limit(w: &Wire, name: &str) -> f64 {
    w.limits().number(name).expect("limit")
}

fn secs(w: &Wire, name: &str) -> Duration {
    w.limits().duration(name).expect("a duration")
}

/// A rate limit's refill period: one token per this long.
fn period(w: &Wire, name: &str) -> Duration {
    let rate = w.limits().rate(name).expect("a rate");
    rate.token_period().expect("a positive rate").0
}

/// One side of a route: who sends, and which way that is.
struct Side<'a> {
    from: &'a str,
    to: &'a str,
    dir: Dir,
}

const CORE: Side = Side {
    from: "core",
    to: "extension",
    dir: Dir::Up,
};
const EXT: Side = Side {
    from: "extension",
    to: "core",
    dir: Dir::Down,
};

/// Decode `v` as `side.from` sent it on `channel` and show it to the policy.
#[allow(clippy::too_many_arguments)]
fn feed(
    p: &mut dyn Policy,
    w: &Wire,
    channel: &str,
    route: &str,
    conn: u64,
    side: &Side,
    v: &Value,
    answers: Option<&str>,
    now: Instant,
) -> Vec<Ruling> {
    let bytes = serde_json::to_vec(v).expect("json");
    let msg = w
        .decode(channel, side.from, &bytes, answers)
        .unwrap_or_else(|e| panic!("example does not decode: {}: {v}", e.reason));
    p.on_message(&ctx(route, conn, side, now), &msg, bytes.len())
}

fn ctx<'a>(route: &'a str, conn: u64, side: &Side<'a>, now: Instant) -> Ctx<'a> {
    Ctx {
        route,
        conn,
        session: conn,
        dir: side.dir,
        from: side.from,
        to: side.to,
        now,
    }
}

fn rules(rs: &[Ruling]) -> Vec<&'static str> {
    rs.iter().map(|r| r.rule).collect()
}

/// The reply of the first ruling, which must refuse with a reply and keep the connection.
fn reply_only(rs: &[Ruling]) -> &Value {
    match rs.first().map(|r| &r.act) {
        Some(Act::Refuse {
            reply: Some(reply),
            close: None,
        }) => reply,
        _ => panic!("not a refusal with a reply alone: {rs:?}"),
    }
}

// ---------------------------------------------------------------- rukh

/// The one ruling in `r`: an agreement mismatch from `entry`, refused with -32000 and
/// data.reason context_mismatch, then the connection dropped (R-44, R-45); its reply.
fn context_mismatch<'r>(r: &'r [Ruling], entry: &str) -> &'r Value {
    assert_eq!(rules(r), ["agreement.mismatch"]);
    assert!(r[0].reason.contains(entry), "{}", r[0].reason);
    let Act::Refuse {
        reply: Some(reply),
        close: Some(Closing::Drop),
    } = &r[0].act
    else {
        panic!("{r:?}")
    };
    assert_eq!(reply["error"]["code"], json!(-32000));
    assert_eq!(reply["error"]["data"]["reason"], json!("context_mismatch"));
    reply
}

struct Rukh {
    w: Arc<Wire>,
    p: Box<dyn Policy>,
    t: Instant,
}

impl Rukh {
    fn new() -> Self {
        Self::with(contract::builtin("rukh").expect("rukh"))
    }

    /// A rukh session on an edited copy of the contract.
    fn with(c: contract::Contract) -> Self {
        let w = Arc::new(Wire::new(Arc::new(c)).expect("wire"));
        let mut p = policy::for_contract(&w, &Arc::new(SharedState::new()), 1, 1);
        let t = Instant::now();
        // The session machine joins at the channel's opening (note R-42), as in the relay.
        assert!(p.on_open("r", t).is_empty());
        Rukh { w, p, t }
    }

    fn send(&mut self, side: &Side, v: &Value, answers: Option<&str>) -> Vec<Ruling> {
        let w = self.w.clone();
        feed(&mut *self.p, &w, "ipc", "r", 1, side, v, answers, self.t)
    }

    fn ex(&self, method: &str, part: &str, n: usize) -> Value {
        ex(&self.w, method, part, n)
    }

    /// A request example with its id replaced.
    fn req(&self, method: &str, id: &str) -> Value {
        let mut v = self.ex(method, "call", 0);
        v["id"] = json!(id);
        v
    }

    /// A result example answering `id`.
    fn res(&self, method: &str, id: &str) -> Value {
        let mut v = self.ex(method, "result", 0);
        v["id"] = json!(id);
        v
    }

    /// Assert that `reply`, answering `method`, is a message the contract accepts from
    /// `side`: what the engine answers for a party is that party's to send.
    fn accepts(&self, side: &Side, reply: &Value, method: &str) {
        let bytes = serde_json::to_vec(reply).expect("json");
        let decoded = self.w.decode("ipc", side.from, &bytes, Some(method));
        assert!(decoded.is_ok(), "{decoded:?}");
    }

    /// initialize + its result + invoke, all clean.
    fn running(&mut self) {
        let (i, r) = (
            self.req("rukh.initialize", "c:1"),
            self.res("rukh.initialize", "c:1"),
        );
        assert!(self.send(&CORE, &i, None).is_empty());
        assert!(self.send(&EXT, &r, Some("rukh.initialize")).is_empty());
        let inv = self.req("rukh.invoke", "c:2");
        assert!(self.send(&CORE, &inv, None).is_empty());
    }
}

fn is_fail(r: &Ruling, code: i64, reason: &str) -> bool {
    r.code == Some(json!(code))
        && matches!(&r.act, Act::Refuse { close: Some(Closing::Drop), reply } if reply.as_ref().is_none_or(|m| m["error"]["data"]["reason"] == json!(reason) || reason.is_empty()))
}

#[test]
fn rukh_whole_session_in_order_is_clean() {
    let mut s = Rukh::new();
    s.running();
    let call = s.req("rukh.call", "e:1");
    assert!(s.send(&EXT, &call, None).is_empty());
    let call_res = s.res("rukh.call", "e:1");
    assert!(s.send(&CORE, &call_res, Some("rukh.call")).is_empty());
    let log = s.ex("rukh.log", "call", 0);
    assert!(s.send(&EXT, &log, None).is_empty());
    let ui = s.req("rukh.ui.event", "c:3");
    assert!(s.send(&CORE, &ui, None).is_empty());
    let ui_res = s.res("rukh.ui.event", "c:3");
    assert!(s.send(&EXT, &ui_res, Some("rukh.ui.event")).is_empty());
    let done = s.res("rukh.invoke", "c:2");
    assert!(s.send(&EXT, &done, Some("rukh.invoke")).is_empty());
    let close = s.req("rukh.close", "c:4");
    assert!(s.send(&CORE, &close, None).is_empty());
    let ack = s.res("rukh.close", "c:4");
    assert!(s.send(&EXT, &ack, Some("rukh.close")).is_empty());
}

#[test]
fn rukh_nothing_before_initialize() {
    let before = contract::builtin("rukh")
        .expect("rukh")
        .violations
        .before_handshake;
    let code = before.and_then(|a| a.code);
    // A notification, and a request too: each ends the invocation (`fail`, as every other
    // protocol error), dropped with the connection and never answered.
    for (method, id) in [("rukh.log", None), ("rukh.call", Some("e:1"))] {
        let mut s = Rukh::new();
        let msg = match id {
            Some(id) => s.req(method, id),
            None => s.ex(method, "call", 0),
        };
        let r = s.send(&EXT, &msg, None);
        assert_eq!(rules(&r), ["machine.out-of-place"], "{method}");
        assert_eq!(r[0].code, code, "{method}");
        let dropped = Act::Refuse {
            reply: None,
            close: Some(Closing::Drop),
        };
        assert_eq!(r[0].act, dropped, "{method}");
        let entry = "/stateMachines/session";
        assert!(r[0].reason.contains(entry), "{}", r[0].reason);
    }

    // The initialize exchange itself is allowed.
    let mut s = Rukh::new();
    s.running();
}

#[test]
fn rukh_request_ids_must_be_gapless_unreused_and_prefixed() {
    let mut s = Rukh::new();
    s.running();
    // c:3 is next; c:4 skips it.
    let r = s.send(&CORE, &s.req("rukh.ui.event", "c:4"), None);
    assert_eq!(rules(&r), ["ids.gap"]);
    assert!(is_fail(&r[0], -32000, ""), "{r:?}");
    assert_eq!(
        r[0].act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        },
        "no response with a broken id"
    );

    let mut s = Rukh::new();
    s.running();
    let r = s.send(&CORE, &s.req("rukh.ui.event", "c:2"), None);
    assert_eq!(rules(&r), ["ids.reuse"]);

    let mut s = Rukh::new();
    s.running();
    // The core using the extension's prefix.
    let r = s.send(&CORE, &s.req("rukh.ui.event", "e:3"), None);
    assert_eq!(rules(&r), ["ids.prefix"]);

    // The extension's counter is its own: e:1 then e:2 are fine, and c:3 still is.
    let mut s = Rukh::new();
    s.running();
    assert!(s.send(&EXT, &s.req("rukh.call", "e:1"), None).is_empty());
    assert!(s.send(&EXT, &s.req("rukh.call", "e:2"), None).is_empty());
    assert!(
        s.send(&CORE, &s.req("rukh.ui.event", "c:3"), None)
            .is_empty()
    );
}

#[test]
fn rukh_responses_to_future_or_own_ids_are_protocol_errors() {
    let mut s = Rukh::new();
    s.running();
    let r = s.send(&EXT, &s.res("rukh.ui.event", "c:9"), None);
    assert_eq!(rules(&r), ["ids.unknown-answer"]);
    assert!(is_fail(&r[0], -32000, ""));

    let mut s = Rukh::new();
    s.running();
    let r = s.send(&EXT, &s.res("rukh.call", "e:1"), None);
    assert_eq!(rules(&r), ["ids.wrong-direction"]);
}

/// The cap is data (`counts: pending-requests`): rukh under another name and without its
/// hook keeps it.
#[test]
fn rukh_pending_requests_are_capped_per_direction() {
    let mut doc = renamed("rukh");
    doc.as_object_mut().expect("object").remove("extensions");
    let c = contract::from_str("elsewhere", &doc.to_string()).expect("contract");
    for s in [Rukh::new(), Rukh::with(c)] {
        pending_capped(s);
    }
}

fn pending_capped(mut s: Rukh) {
    s.running();
    let max = limit(&s.w, "pendingRequestsMax") as u64;
    for n in 1..=max {
        let r = s.send(&EXT, &s.req("rukh.call", &format!("e:{n}")), None);
        assert!(r.is_empty(), "call {n}: {r:?}");
    }
    let over = format!("e:{}", max + 1);
    let r = s.send(&EXT, &s.req("rukh.call", &over), None);
    assert_eq!(rules(&r), ["limit.pending"]);
    let reply = reply_only(&r);
    assert_eq!(reply["id"], json!(over));
    assert_eq!(reply["error"]["code"], json!(-32006));
    // rukh's ErrorData is closed: the entry is named in the detail, and the reply is one
    // the contract (and so a strict binding) accepts from the core.
    let detail = reply["error"]["data"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(detail.contains("/limits/pendingRequestsMax"), "{reply}");
    assert!(reply["error"]["data"].get("entry").is_none(), "{reply}");
    s.accepts(&CORE, reply, "rukh.call");
    // The core's own direction is not affected.
    assert!(
        s.send(&CORE, &s.req("rukh.ui.event", "c:3"), None)
            .is_empty()
    );
    // One answer frees one slot (the refused id was consumed).
    assert!(
        s.send(&CORE, &s.res("rukh.call", "e:1"), Some("rukh.call"))
            .is_empty()
    );
    let next = format!("e:{}", max + 2);
    assert!(s.send(&EXT, &s.req("rukh.call", &next), None).is_empty());
}

/// With both directions at their cap of pending requests, a lifecycle request (the core's
/// rukh.close after the completion) is still tracked, so its ack is an answer, not a stray.
#[test]
fn rukh_lifecycle_requests_are_tracked_with_both_directions_at_their_cap() {
    let mut s = Rukh::new();
    s.running();
    let max = limit(&s.w, "pendingRequestsMax") as u64;
    for n in 1..=max {
        let call = s.req("rukh.call", &format!("e:{n}"));
        assert!(s.send(&EXT, &call, None).is_empty(), "call {n}");
        let ui = s.req("rukh.ui.event", &format!("c:{}", n + 2));
        assert!(s.send(&CORE, &ui, None).is_empty(), "ui event {n}");
    }
    let done = s.res("rukh.invoke", "c:2");
    assert!(s.send(&EXT, &done, Some("rukh.invoke")).is_empty());
    let id = format!("c:{}", max + 3);
    let close = s.req("rukh.close", &id);
    assert!(s.send(&CORE, &close, None).is_empty());
    let ack = s.res("rukh.close", &id);
    let r = s.send(&EXT, &ack, Some("rukh.close"));
    assert!(r.is_empty(), "{r:?}");
}

#[test]
fn rukh_log_intake_excess_is_discarded_and_counted() {
    let mut s = Rukh::new();
    s.running();
    let log = s.ex("rukh.log", "call", 0);
    let records = limit(&s.w, "logIntakeRecordsRate") as usize;
    for n in 0..records {
        assert!(s.send(&EXT, &log, None).is_empty(), "record {n}");
    }
    let r = s.send(&EXT, &log, None);
    assert_eq!(rules(&r), ["limit.rate"]);
    assert_eq!(r[0].act, Act::Discard);
    // One record's worth of time later, one more fits.
    s.t += Duration::from_secs(1) / records as u32;
    assert!(s.send(&EXT, &log, None).is_empty());
    assert_eq!(rules(&s.send(&EXT, &log, None)), ["limit.rate"]);

    // The byte bucket: big records run out of bytes before records.
    let mut s = Rukh::new();
    s.running();
    let mut big = s.ex("rukh.log", "call", 0);
    big["params"]["message"] = json!("x".repeat(15_000));
    let size = serde_json::to_vec(&big).expect("json").len();
    let bytes = limit(&s.w, "logIntakeBytesRate") as usize;
    let fit = bytes / size;
    assert!(
        fit < records,
        "the byte bucket must be the one that runs out"
    );
    for n in 0..fit {
        assert!(s.send(&EXT, &big, None).is_empty(), "record {n}");
    }
    let r = s.send(&EXT, &big, None);
    assert_eq!(rules(&r), ["limit.rate"]);
    assert!(
        r[0].reason.contains("logIntakeBytesRate"),
        "{}",
        r[0].reason
    );
}

/// Hooks follow the contract's `extensions`, not its name: a renamed copy of rukh keeps
/// `rukh.session` (a late response after an accepted cancel), and a copy that drops it gets
/// the engine alone, which has no rule about a wait a cancel ended.
#[test]
fn named_extensions_follow_the_contract_data_not_its_name() {
    let late = |edit: &dyn Fn(&mut contract::Contract)| {
        let mut c = contract::builtin("rukh").expect("rukh");
        edit(&mut c);
        let mut s = Rukh::with(c);
        s.running();
        s.send(&CORE, &s.req("rukh.ui.event", "c:3"), None);
        s.send(&CORE, &s.req("rukh.cancel", "c:4"), None);
        let r = s.send(&EXT, &s.res("rukh.ui.event", "c:3"), Some("rukh.ui.event"));
        rules(&r)
    };
    assert_eq!(
        late(&|c| c.name = "rukh-fork".into()),
        ["rukh.response.late"]
    );
    assert_eq!(late(&|c| c.extensions.clear()), Vec::<&str>::new());
}

#[test]
fn rukh_one_invoke_per_session() {
    let mut s = Rukh::new();
    s.running();
    let r = s.send(&CORE, &s.req("rukh.invoke", "c:3"), None);
    // The session machine's refusal (already_invoked), not the hook.
    assert_eq!(rules(&r), ["machine.out-of-place"]);
    let reply = reply_only(&r);
    assert_eq!(reply["error"]["code"], json!(-32002));
}

#[test]
fn rukh_second_completion_is_a_protocol_error() {
    let mut s = Rukh::new();
    s.running();
    let done = s.res("rukh.invoke", "c:2");
    assert!(s.send(&EXT, &done, Some("rukh.invoke")).is_empty());
    let r = s.send(&EXT, &done, Some("rukh.invoke"));
    assert_eq!(rules(&r), ["machine.out-of-place"]);
    assert!(is_fail(&r[0], -32000, ""));
}

#[test]
fn rukh_no_new_work_after_completion() {
    let mut s = Rukh::new();
    s.running();
    let done = s.res("rukh.invoke", "c:2");
    assert!(s.send(&EXT, &done, Some("rukh.invoke")).is_empty());
    let r = s.send(&EXT, &s.req("rukh.call", "e:1"), None);
    assert_eq!(rules(&r), ["machine.out-of-place"]);
    assert_eq!(r[0].code, Some(json!(-32007)));
}

#[test]
fn rukh_cancel_ends_waits_late_responses_are_discarded() {
    let mut s = Rukh::new();
    s.running();
    assert!(
        s.send(&CORE, &s.req("rukh.ui.event", "c:3"), None)
            .is_empty()
    );
    assert!(s.send(&CORE, &s.req("rukh.cancel", "c:4"), None).is_empty());
    let r = s.send(&EXT, &s.res("rukh.ui.event", "c:3"), Some("rukh.ui.event"));
    assert_eq!(rules(&r), ["rukh.response.late"]);
    assert_eq!(r[0].act, Act::Discard);
    // The cancel's own ack is not late, and the invoke result after it cannot decide.
    assert!(
        s.send(&EXT, &s.res("rukh.cancel", "c:4"), Some("rukh.cancel"))
            .is_empty()
    );
    let r = s.send(&EXT, &s.res("rukh.invoke", "c:2"), Some("rukh.invoke"));
    assert_eq!(rules(&r), ["rukh.cancel.precedence"]);
    assert_eq!(r[0].act, Act::Flag);

    // Without a cancel, the same response is on time.
    let mut s = Rukh::new();
    s.running();
    assert!(
        s.send(&CORE, &s.req("rukh.ui.event", "c:3"), None)
            .is_empty()
    );
    assert!(
        s.send(&EXT, &s.res("rukh.ui.event", "c:3"), Some("rukh.ui.event"))
            .is_empty()
    );
}

/// The pinned context is data (`agreements`, R-44): an extension's call repeating another
/// session id gets -32000 with data.reason context_mismatch, and the invocation ends; the
/// pinned one goes on; the core's own invoke naming another is only flagged.
#[test]
fn rukh_context_fields_must_match_the_pinned_session() {
    let mut s = Rukh::new();
    s.running();
    let mut call = s.req("rukh.call", "e:1");
    call["params"]["sessionId"] = json!("s-someone-else");
    let r = s.send(&EXT, &call, None);
    context_mismatch(&r, "/agreements/sessionId");

    let mut s = Rukh::new();
    s.running();
    let pinned = s.ex("rukh.initialize", "call", 0)["params"]["sessionId"].clone();
    let mut call = s.req("rukh.call", "e:1");
    call["params"]["sessionId"] = pinned;
    assert!(s.send(&EXT, &call, None).is_empty());

    let mut s = Rukh::new();
    let (i, r) = (
        s.req("rukh.initialize", "c:1"),
        s.res("rukh.initialize", "c:1"),
    );
    assert!(s.send(&CORE, &i, None).is_empty());
    assert!(s.send(&EXT, &r, Some("rukh.initialize")).is_empty());
    let mut inv = s.req("rukh.invoke", "c:2");
    inv["params"]["invocationId"] = json!("inv-someone-else");
    let r = s.send(&CORE, &inv, None);
    assert_eq!(rules(&r), ["agreement.mismatch"]);
    assert_eq!(r[0].act, Act::Flag, "the judge's own statement");
}

/// The pinned contract, capabilities and kind are agreements too (R-45): a result that
/// confirms another contract, or other capabilities, ends the invocation (no reply can
/// answer a result); an invoke of another kind than initialize pinned gets the
/// extension's -32000 context_mismatch, a reply the contract's closed ErrorData accepts,
/// and the invocation ends.
#[test]
fn rukh_the_pinned_contract_capabilities_and_kind_are_agreements() {
    for (pointer, other) in [
        ("/result/contract/id", json!("someone/else")),
        ("/result/capabilities", json!([])),
    ] {
        let mut s = Rukh::new();
        assert!(
            s.send(&CORE, &s.req("rukh.initialize", "c:1"), None)
                .is_empty()
        );
        let mut confirm = s.res("rukh.initialize", "c:1");
        contract::set_pointer(&mut confirm, pointer, other);
        let r = s.send(&EXT, &confirm, Some("rukh.initialize"));
        assert_eq!(rules(&r), ["agreement.mismatch"], "{pointer}");
        let want = Act::Refuse {
            reply: None,
            close: Some(Closing::Drop),
        };
        assert_eq!(r[0].act, want, "{pointer}");
    }

    let mut s = Rukh::new();
    assert!(
        s.send(&CORE, &s.req("rukh.initialize", "c:1"), None)
            .is_empty()
    );
    let confirm = s.res("rukh.initialize", "c:1");
    assert!(s.send(&EXT, &confirm, Some("rukh.initialize")).is_empty());
    let mut describe = s.ex("rukh.invoke", "call", 1);
    assert_eq!(
        describe["params"]["kind"],
        json!("describe"),
        "the second example"
    );
    describe["id"] = json!("c:2");
    let r = s.send(&CORE, &describe, None);
    let reply = context_mismatch(&r, "/agreements/kind");
    s.accepts(&EXT, reply, "rukh.invoke");
}

/// rukh's capabilities are the core's declaration (R-47): an offer naming one the contract
/// does not list gets the extension's -32003 (incompatible_session), in a reply the wire
/// accepts from the extension; a completion carrying a commandResult is clean where the
/// core offered command-result/1 and ends the invocation where it did not.
#[test]
fn rukh_an_unknown_capability_is_refused_and_an_unoffered_command_result_fails() {
    let mut s = Rukh::new();
    let mut init = s.req("rukh.initialize", "c:1");
    init["params"]["capabilities"] = json!(["command-result/1", "command-result/2"]);
    let r = s.send(&CORE, &init, None);
    assert_eq!(rules(&r), ["capability.unknown"]);
    let Act::Refuse {
        reply: Some(reply),
        close: None,
    } = &r[0].act
    else {
        panic!("refused with a reply, not {:?}", r[0].act);
    };
    let incompatible =
        s.w.contract()
            .error_code("incompatible_session")
            .expect("code");
    assert_eq!(reply["error"]["code"], *incompatible);
    s.accepts(&EXT, reply, "rukh.initialize");

    for offered in [json!(["command-result/1"]), json!([])] {
        let mut s = Rukh::new();
        let mut init = s.req("rukh.initialize", "c:1");
        init["params"]["capabilities"] = offered.clone();
        let mut confirm = s.res("rukh.initialize", "c:1");
        confirm["result"]["capabilities"] = offered.clone();
        assert!(s.send(&CORE, &init, None).is_empty());
        assert!(s.send(&EXT, &confirm, Some("rukh.initialize")).is_empty());
        assert!(s.send(&CORE, &s.req("rukh.invoke", "c:2"), None).is_empty());
        let mut done = s.ex("rukh.invoke", "result", 1);
        assert!(
            done["result"].get("commandResult").is_some(),
            "the second result example"
        );
        done["id"] = json!("c:2");
        let r = s.send(&EXT, &done, Some("rukh.invoke"));
        if offered == json!([]) {
            assert_eq!(rules(&r), ["capability.undeclared"]);
            let ends = Act::Refuse {
                reply: None,
                close: Some(Closing::Drop),
            };
            assert_eq!(r[0].act, ends);
        } else {
            assert!(r.is_empty(), "offered {offered}: {r:?}");
        }
    }
}

// ---------------------------------------------------------------- toolchannel

const WORKER: Side = Side {
    from: "worker",
    to: "host",
    dir: Dir::Up,
};
const HOST: Side = Side {
    from: "host",
    to: "worker",
    dir: Dir::Down,
};

struct Tool {
    w: Arc<Wire>,
    p: Box<dyn Policy>,
    conn: u64,
}

impl Tool {
    fn new(w: &Arc<Wire>, shared: &Arc<SharedState>, conn: u64, now: Instant) -> Self {
        let mut p = policy::for_contract(w, shared, conn, conn);
        assert!(p.on_open("t", now).is_empty());
        Tool {
            w: w.clone(),
            p,
            conn,
        }
    }

    fn send(&mut self, side: &Side, v: &Value, answers: Option<&str>, now: Instant) -> Vec<Ruling> {
        let w = self.w.clone();
        feed(
            &mut *self.p,
            &w,
            "ws",
            "t",
            self.conn,
            side,
            v,
            answers,
            now,
        )
    }

    /// initialize and its result with this attempt/instance.
    fn handshake(&mut self, instance: &str, attempt: u64, now: Instant) -> Vec<Ruling> {
        let init = ex(&self.w, "initialize", "call", 0);
        assert!(self.send(&HOST, &init, None, now).is_empty());
        let mut res = ex(&self.w, "initialize", "result", 0);
        res["result"]["_meta"]["agentfy"]["instanceId"] = json!(instance);
        res["result"]["_meta"]["agentfy"]["attempt"] = json!(attempt);
        self.send(&WORKER, &res, Some("initialize"), now)
    }

    /// initialized, ready, tools/list and its answer: the session is running.
    fn reach_running(&mut self, now: Instant) {
        let w = self.w.clone();
        for (side, v, a) in [
            (
                &WORKER,
                ex(&w, "notifications/initialized", "call", 0),
                None,
            ),
            (&WORKER, ex(&w, "agentfy/ready", "call", 0), None),
            (&HOST, ex(&w, "tools/list", "call", 0), None),
            (
                &WORKER,
                ex(&w, "tools/list", "result", 0),
                Some("tools/list"),
            ),
        ] {
            let r = self.send(side, &v, a, now);
            assert!(r.is_empty(), "{r:?}");
        }
    }
}

/// Once the host's initialize declared its (no) capabilities, the engine itself refuses a
/// reverse request: it needs a capability the host did not declare, and the contract
/// never serves it (`result: false`, one error), so that error is its answer.
#[test]
fn toolchannel_reverse_requests_after_the_declaration_are_the_engines_to_refuse() {
    let w = wire("toolchannel");
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    for method in ["sampling/createMessage", "elicitation/create", "roots/list"] {
        let mut t = Tool::new(&w, &shared, 1, t0);
        let init = ex(&w, "initialize", "call", 0);
        assert!(t.send(&HOST, &init, None, t0).is_empty());
        let r = t.send(&WORKER, &ex(&w, method, "call", 0), None, t0);
        assert_eq!(rules(&r), ["capability.undeclared"], "{method}");
        let want = w.contract().only_error(method).cloned();
        assert!(want.is_some(), "{method} has one error");
        assert_eq!(r[0].code, want, "{method}");
        let reply = reply_only(&r);
        // The contract's own refusal, with the proxy's reason as its data.
        let example = ex(&w, method, "error", 0);
        assert_eq!(reply["id"], example["id"], "{method}");
        assert_eq!(reply["error"]["code"], example["error"]["code"], "{method}");
        assert_eq!(reply["error"]["message"], example["error"]["message"]);
        let entry = format!("/methods/{}/capability", method.replace('/', "~1"));
        assert_eq!(reply["error"]["data"]["entry"], json!(entry), "{reply}");
    }
}

#[test]
fn toolchannel_reverse_requests_are_refused_before_dispatch() {
    let w = wire("toolchannel");
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    for (method, code) in [
        ("sampling/createMessage", -32003),
        ("elicitation/create", -32004),
        ("roots/list", -32004),
    ] {
        let mut t = Tool::new(&w, &shared, 1, t0);
        let call = ex(&w, method, "call", 0);
        let r = t.send(&WORKER, &call, None, t0);
        assert_eq!(r.len(), 1, "{method}: {r:?}");
        assert_eq!(r[0].code, Some(json!(code)), "{method}");
        let reply = reply_only(&r);
        // The reply is exactly the contract's own example of the refusal.
        assert_eq!(reply, &ex(&w, method, "error", 0), "{method}");
    }
    // Any other sampling/ name too: the wire layer calls it unknown, the policy
    // sees the partial message and answers -32003 instead of the generic -32004.
    let mut t = Tool::new(&w, &shared, 2, t0);
    let bytes = br#"{"jsonrpc":"2.0","id":5,"method":"sampling/other","params":{}}"#;
    let v = w
        .decode("ws", "worker", bytes, None)
        .expect_err("unknown method");
    let partial: Message = *v.partial.expect("partial");
    let r =
        t.p.on_message(&ctx("t", 2, &WORKER, t0), &partial, bytes.len());
    assert_eq!(rules(&r), ["toolchannel.sampling.refused"]);
    assert_eq!(r[0].code, Some(json!(-32003)));
    // An ordinary tool call passes once the session runs.
    assert!(t.handshake("i-1", 0, t0).is_empty());
    t.reach_running(t0);
    let call = ex(&w, "tools/call", "call", 0);
    assert!(t.send(&HOST, &call, None, t0).is_empty());
}

#[test]
fn toolchannel_requests_out_of_handshake_order_get_before_handshake_code() {
    let w = wire("toolchannel");
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    let code = w
        .contract()
        .violations
        .before_handshake
        .as_ref()
        .and_then(|a| a.code.clone())
        .expect("beforeHandshake has a code");
    let mut t = Tool::new(&w, &shared, 1, t0);
    assert!(t.handshake("i-1", 0, t0).is_empty());
    // tools/list before notifications/initialized, tools/call before agentfy/ready.
    for method in ["tools/list", "tools/call"] {
        let call = ex(&w, method, "call", 0);
        let r = t.send(&HOST, &call, None, t0);
        // The hostSession machine's data (allows, outOfPlace) refuses it, as the worker would.
        assert_eq!(rules(&r), ["machine.out-of-place"], "{method}");
        assert_eq!(r[0].code, Some(code.clone()));
        let reply = reply_only(&r);
        assert_eq!(reply["id"], call["id"]);
        assert_eq!(reply["error"]["code"], code);
    }
    // agentfy/ready before notifications/initialized: a refusal without an action (T-65):
    // flagged, nothing to answer, and it moves nothing.
    let ready = ex(&w, "agentfy/ready", "call", 0);
    let r = t.send(&WORKER, &ready, None, t0);
    assert_eq!(rules(&r), ["machine.out-of-place"]);
    assert_eq!(r[0].act, Act::Flag);
    // In order, nothing is said.
    let r = t.send(
        &WORKER,
        &ex(&w, "notifications/initialized", "call", 0),
        None,
        t0,
    );
    assert!(r.is_empty(), "{r:?}");
    // tools/list waits for agentfy/ready; tools/call for the tools/list answer.
    let (list, call) = (
        ex(&w, "tools/list", "call", 0),
        ex(&w, "tools/call", "call", 0),
    );
    let out_of_place = vec!["machine.out-of-place"];
    assert_eq!(rules(&t.send(&HOST, &list, None, t0)), out_of_place);
    assert!(t.send(&WORKER, &ready, None, t0).is_empty());
    assert_eq!(rules(&t.send(&HOST, &call, None, t0)), out_of_place);
    assert!(t.send(&HOST, &list, None, t0).is_empty());
    let listed = ex(&w, "tools/list", "result", 0);
    assert!(t.send(&WORKER, &listed, Some("tools/list"), t0).is_empty());
    assert!(t.send(&HOST, &call, None, t0).is_empty());
}

/// The one deadline ruling `r` holds: its limit, close code and close.
fn deadline(r: &[(u64, Ruling)]) -> (String, Option<Value>, Act) {
    assert_eq!(r.len(), 1, "{r:?}");
    let x = &r[0].1;
    assert_eq!(x.rule, "limit.deadline", "{x:?}");
    let limit = x.reason.split("/limits/").nth(1).unwrap_or_default();
    let limit = limit.trim_end_matches(')').to_string();
    (limit, x.code.clone(), x.act.clone())
}

/// `Act` closing the connection with `code`.
fn closes(code: u16) -> impl Fn(&Act) -> bool {
    move |a| matches!(a, Act::Refuse { reply: None, close: Some(Closing::Code(f)) } if f.code == code)
}

/// The deadlines are the engine's, from the contract's data (T-67): the worker's
/// handshakeSeconds runs from open until initialize, the host's twice that until
/// notifications/initialized; each runs as long as the initialize carried, and ends the
/// socket with its close code.
#[test]
fn toolchannel_handshake_deadlines_close_with_their_codes() {
    let w = wire("toolchannel");
    let t0 = Instant::now();
    let hs = secs(&w, "handshakeSeconds");
    let mut t = Tool::new(&w, &Arc::new(SharedState::new()), 1, t0);
    assert_eq!(t.p.next_deadline(), Some(t0 + hs));
    assert!(t.p.on_tick(t0 + hs - Duration::from_millis(1)).is_empty());
    let (limit, code, act) = deadline(&t.p.on_tick(t0 + hs));
    assert_eq!(
        (limit.as_str(), code),
        ("handshakeSeconds", Some(json!(1001)))
    );
    assert!(closes(1001)(&act), "{act:?}");

    // initialize stops the worker's; the host's runs 2 × the handshakeSeconds it carried.
    let mut t = Tool::new(&w, &Arc::new(SharedState::new()), 2, t0);
    let mut init = ex(&w, "initialize", "call", 0);
    init["params"]["_meta"]["agentfy"]["budgets"]["handshakeSeconds"] = json!(2);
    assert!(t.send(&HOST, &init, None, t0).is_empty());
    let res = ex(&w, "initialize", "result", 0);
    assert!(t.send(&WORKER, &res, Some("initialize"), t0).is_empty());
    let host_wait = t0 + Duration::from_secs(4);
    assert_eq!(t.p.next_deadline(), Some(host_wait));
    let (limit, code, act) = deadline(&t.p.on_tick(host_wait));
    assert_eq!(
        (limit.as_str(), code),
        ("hostHandshakeSeconds", Some(json!(4003)))
    );
    assert!(closes(4003)(&act), "{act:?}");
    assert!(t.p.on_tick(host_wait + hs).is_empty(), "once");

    // Kept: initialized in time moves the host's wait to readySeconds.
    let mut t = Tool::new(&w, &Arc::new(SharedState::new()), 3, t0);
    assert!(t.handshake("inst_a", 0, t0).is_empty());
    let t1 = t0 + Duration::from_secs(1);
    let initialized = ex(&w, "notifications/initialized", "call", 0);
    assert!(t.send(&WORKER, &initialized, None, t1).is_empty());
    assert_eq!(t.p.next_deadline(), Some(t1 + secs(&w, "readySeconds")));
}

/// readySeconds runs from notifications/initialized until tools/list is answered; the
/// worker's readyAckSeconds from agentfy/ready until tools/list arrives.
#[test]
fn toolchannel_ready_deadlines_close_with_their_codes() {
    let w = wire("toolchannel");
    let t0 = Instant::now();
    let up = |conn| {
        let mut t = Tool::new(&w, &Arc::new(SharedState::new()), conn, t0);
        assert!(t.handshake(&format!("inst_{conn}"), 0, t0).is_empty());
        for m in ["notifications/initialized", "agentfy/ready"] {
            assert!(t.send(&WORKER, &ex(&w, m, "call", 0), None, t0).is_empty());
        }
        t
    };
    // No tools/list: the worker's readyAckSeconds runs out first.
    let mut t = up(1);
    let (limit, _, act) = deadline(&t.p.on_tick(t0 + secs(&w, "readyAckSeconds")));
    assert_eq!(limit, "readyAckSeconds");
    assert!(closes(1001)(&act), "{act:?}");
    // tools/list sent, never answered: readySeconds.
    let mut t = up(2);
    assert!(
        t.send(&HOST, &ex(&w, "tools/list", "call", 0), None, t0)
            .is_empty()
    );
    let (limit, code, _) = deadline(&t.p.on_tick(t0 + secs(&w, "readySeconds")));
    assert_eq!((limit.as_str(), code), ("readySeconds", Some(json!(4003))));
}

/// hostHeartbeatSeconds (grace + interval) from running, restarted by each heartbeat;
/// answered heartbeats keep the worker's grace from running out; agentfy/release stops
/// the host's wait, and a declined release starts it afresh (T-12).
#[test]
fn toolchannel_heartbeat_gap_closes_4004_and_release_stops_it() {
    let w = wire("toolchannel");
    let t0 = Instant::now();
    let gap = secs(&w, "hostHeartbeatSeconds");
    assert_eq!(
        gap,
        secs(&w, "heartbeatGraceSeconds") + secs(&w, "heartbeatIntervalSeconds")
    );
    let mut t = Tool::new(&w, &Arc::new(SharedState::new()), 1, t0);
    assert!(t.handshake("inst_a", 0, t0).is_empty());
    t.reach_running(t0);
    // Kept: a heartbeat every interval, each answered.
    let (hb, ok) = (
        ex(&w, "agentfy/heartbeat", "call", 0),
        ex(&w, "agentfy/heartbeat", "result", 0),
    );
    let every = secs(&w, "heartbeatIntervalSeconds");
    let mut now = t0;
    for _ in 0..5 {
        now += every;
        assert!(t.p.on_tick(now).is_empty());
        assert!(t.send(&WORKER, &hb, None, now).is_empty());
        assert!(
            t.send(&HOST, &ok, Some("agentfy/heartbeat"), now)
                .is_empty()
        );
    }
    // Broken: silence for the whole gap.
    assert!(t.p.on_tick(now + gap - Duration::from_millis(1)).is_empty());
    let (limit, code, act) = deadline(&t.p.on_tick(now + gap));
    assert_eq!(
        (limit.as_str(), code),
        ("hostHeartbeatSeconds", Some(json!(4004)))
    );
    assert!(closes(4004)(&act), "{act:?}");

    // A release stops the wait; declined, it starts afresh.
    let mut t = Tool::new(&w, &Arc::new(SharedState::new()), 2, t0);
    assert!(t.handshake("inst_b", 0, t0).is_empty());
    t.reach_running(t0);
    let rel = ex(&w, "agentfy/release", "call", 0);
    assert!(t.send(&HOST, &rel, None, t0).is_empty());
    assert!(
        t.p.on_tick(t0 + gap).is_empty(),
        "no heartbeat owed while releasing"
    );
    let mut declined = ex(&w, "agentfy/release", "result", 0);
    declined["result"]["accepted"] = json!(false);
    let t1 = t0 + gap + Duration::from_secs(1);
    assert!(
        t.send(&WORKER, &declined, Some("agentfy/release"), t1)
            .is_empty()
    );
    let (limit, ..) = deadline(&t.p.on_tick(t1 + gap));
    assert_eq!(limit, "hostHeartbeatSeconds");
}

#[test]
fn toolchannel_redial_supersedes_or_is_refused() {
    let w = wire("toolchannel");
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    let mut first = Tool::new(&w, &shared, 1, t0);
    assert!(first.handshake("inst_5b0e7c1d", 0, t0).is_empty());
    first.reach_running(t0);

    // Same process, greater attempt: forwarded, and the old socket is closed 4009.
    let mut second = Tool::new(&w, &shared, 2, t0);
    let r = second.handshake("inst_5b0e7c1d", 1, t0);
    assert_eq!(rules(&r), ["claim.superseded"]);
    let Act::CloseConn {
        conn: 1,
        close: Closing::Code(CloseFrame { code: 4009, reason }),
    } = &r[0].act
    else {
        panic!("{r:?}")
    };
    let max = limit(&w, "closeReasonMaxBytes") as usize;
    assert!(reason.len() <= max);
    // The superseded connection's timers no longer fire.
    assert!(first.p.on_tick(t0 + Duration::from_secs(3600)).is_empty());

    // The same attempt again, and another instance: refused 4002.
    for (conn, instance, attempt) in [(3, "inst_5b0e7c1d", 1), (4, "inst_other", 2)] {
        let mut t = Tool::new(&w, &shared, conn, t0);
        let r = t.handshake(instance, attempt, t0);
        assert_eq!(rules(&r), ["claim.refused"], "{instance}/{attempt}");
        assert!(matches!(
            &r[0].act,
            Act::Refuse {
                reply: None,
                close: Some(Closing::Code(CloseFrame { code: 4002, .. }))
            }
        ));
    }
    // Another session entirely is no redial.
    let mut other = Tool::new(&w, &shared, 5, t0);
    let mut init = ex(&w, "initialize", "call", 0);
    init["params"]["_meta"]["agentfy"]["sessionId"] = json!("ars_another");
    assert!(other.send(&HOST, &init, None, t0).is_empty());
    let mut res = ex(&w, "initialize", "result", 0);
    res["result"]["_meta"]["agentfy"]["sessionId"] = json!("ars_another");
    assert!(other.send(&WORKER, &res, Some("initialize"), t0).is_empty());
}

// ---------------------------------------------------------------- xsession

const SENDER: Side = Side {
    from: "sender",
    to: "recipient",
    dir: Dir::Up,
};

struct Inbox {
    w: Arc<Wire>,
    shared: Arc<SharedState>,
    conn: u64,
}

impl Inbox {
    fn new() -> Self {
        Inbox {
            w: wire("xsession"),
            shared: Arc::new(SharedState::new()),
            conn: 0,
        }
    }

    /// A user frame from `from` (an inbox path) with body `body`.
    fn user(&self, id: &str, from: Option<&str>, body: &str) -> Value {
        let mut v = ex(&self.w, "user", "call", 0);
        v["msgId"] = json!(id);
        v["message"]["content"] = json!(body);
        match from {
            Some(f) => v["from"] = json!(f),
            None => {
                v.as_object_mut().expect("object").remove("from");
            }
        }
        v
    }

    /// One connection carrying one frame, as xsession senders do.
    fn deliver(&mut self, v: &Value, now: Instant) -> Vec<Ruling> {
        self.conn += 1;
        let mut p = policy::for_contract(&self.w, &self.shared, self.conn, self.conn);
        assert!(p.on_open("x", now).is_empty());
        let w = self.w.clone();
        let r = feed(&mut *p, &w, "inbox", "x", self.conn, &SENDER, v, None, now);
        p.on_close(&ctx("x", self.conn, &SENDER, now));
        r
    }
}

/// The dropped status must be what a recipient would send: a valid auth line and a
/// valid delivery_status frame, to the sender's `from`.
fn assert_dropped(w: &Wire, r: &[Ruling], inbox: &str, orig: &str, reason: &str) {
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].code, Some(json!(reason)));
    let Act::Notify { to, messages } = &r[0].act else {
        panic!("{r:?}")
    };
    assert_eq!(to, inbox);
    let [auth, message] = &messages[..] else {
        panic!("the frame had a replyToken: an auth line, then the status: {messages:?}")
    };
    let auth = serde_json::to_vec(auth).expect("json");
    let a = w
        .decode("inbox", "recipient", &auth, None)
        .expect("auth line");
    assert_eq!(a.method.as_deref(), Some("auth"));
    let bytes = serde_json::to_vec(message).expect("json");
    let m = w
        .decode("inbox", "recipient", &bytes, None)
        .unwrap_or_else(|e| panic!("not a valid delivery_status: {}: {message}", e.reason));
    assert_eq!(m.method.as_deref(), Some("delivery_status"));
    assert_eq!(m.correlation, Some(json!(orig)));
    assert_eq!(message["status"], json!("dropped"));
    assert_eq!(message["dropReason"], json!(reason));
}

#[test]
fn xsession_per_sender_burst_then_one_per_period() {
    let mut x = Inbox::new();
    let every = period(&x.w, "perSenderRate");
    let burst = x.w.limits().rate("perSenderRate").expect("a rate").burst;
    let t0 = Instant::now();
    let a = "/run/user/1000/qwen-socks/1.sock";
    for n in 0..burst {
        let r = x.deliver(&x.user(&format!("m{n}"), Some(a), &format!("body {n}")), t0);
        assert!(r.is_empty(), "message {n}: {r:?}");
    }
    let r = x.deliver(&x.user("over", Some(a), "one too many"), t0);
    assert_dropped(&x.w, &r, a, "over", "rate-limited");
    assert_eq!(r[0].rule, "limit.rate");
    assert!(
        r[0].reason.ends_with("(/limits/perSenderRate)"),
        "{}",
        r[0].reason
    );
    // Another sender still has its own bucket.
    let b = "/run/user/1000/qwen-socks/2.sock";
    assert!(x.deliver(&x.user("b1", Some(b), "from b"), t0).is_empty());
    // After one period, exactly one more.
    let t1 = t0 + every;
    assert!(
        x.deliver(&x.user("later", Some(a), "later body"), t1)
            .is_empty()
    );
    let r = x.deliver(&x.user("later2", Some(a), "later body 2"), t1);
    assert_dropped(&x.w, &r, a, "later2", "rate-limited");
}

#[test]
fn xsession_global_burst_then_one_per_second() {
    let mut x = Inbox::new();
    let burst = x.w.limits().rate("globalRate").expect("a rate").burst;
    let t0 = Instant::now();
    for n in 0..burst {
        let from = format!("/tmp/s{n}.sock");
        assert!(
            x.deliver(&x.user(&format!("m{n}"), Some(&from), "hi"), t0)
                .is_empty()
        );
    }
    let r = x.deliver(&x.user("late", Some("/tmp/new.sock"), "hi"), t0);
    assert_dropped(&x.w, &r, "/tmp/new.sock", "late", "rate-limited");
    let t1 = t0 + period(&x.w, "globalRate");
    assert!(
        x.deliver(&x.user("next", Some("/tmp/new.sock"), "hi"), t1)
            .is_empty()
    );
}

#[test]
fn xsession_same_body_within_the_window_is_a_duplicate() {
    let mut x = Inbox::new();
    let window = secs(&x.w, "duplicateWindow");
    let t0 = Instant::now();
    let a = "/tmp/a.sock";
    assert!(
        x.deliver(&x.user("m1", Some(a), "same body"), t0)
            .is_empty()
    );
    // A resend of the same msgId is not a duplicate of itself (X-5).
    assert!(
        x.deliver(&x.user("m1", Some(a), "same body"), t0)
            .is_empty()
    );
    // Another sender may say the same thing.
    assert!(
        x.deliver(&x.user("b1", Some("/tmp/b.sock"), "same body"), t0)
            .is_empty()
    );
    let r = x.deliver(&x.user("m2", Some(a), "same body"), t0 + window / 2);
    assert_dropped(&x.w, &r, a, "m2", "duplicate");
    assert_eq!(r[0].rule, "limit.duplicate");
    // The window runs from the first one's arrival.
    assert!(
        x.deliver(&x.user("m3", Some(a), "same body"), t0 + window)
            .is_empty()
    );
}

#[test]
fn xsession_without_from_a_drop_is_only_discarded() {
    let mut x = Inbox::new();
    let t0 = Instant::now();
    assert!(x.deliver(&x.user("m1", None, "anonymous"), t0).is_empty());
    let r = x.deliver(&x.user("m2", None, "anonymous"), t0);
    assert_eq!(rules(&r), ["limit.duplicate"]);
    assert_eq!(r[0].act, Act::Discard);
}

#[test]
fn xsession_connections_beyond_the_cap_are_dropped() {
    let w = wire("xsession");
    let shared = Arc::new(SharedState::new());
    let max = limit(&w, "maxConnections") as u64;
    let t0 = Instant::now();
    let mut open: Vec<Box<dyn Policy>> = Vec::new();
    for conn in 1..=max {
        let mut p = policy::for_contract(&w, &shared, conn, conn);
        assert!(p.on_open("x", t0).is_empty(), "connection {conn}");
        open.push(p);
    }
    assert_eq!(shared.open_connections("x"), max as usize);
    let mut extra = policy::for_contract(&w, &shared, max + 1, max + 1);
    let r = extra.on_open("x", t0);
    assert_eq!(rules(&r), ["limit.connections"]);
    assert!(
        r[0].reason.ends_with("(/limits/maxConnections)"),
        "{}",
        r[0].reason
    );
    assert_eq!(
        r[0].act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        }
    );
    extra.on_close(&ctx("x", max + 1, &SENDER, t0));
    assert_eq!(
        shared.open_connections("x"),
        max as usize,
        "a refused connection never counted"
    );
    // Another route has its own listener.
    let mut other = policy::for_contract(&w, &shared, max + 2, max + 2);
    assert!(other.on_open("y", t0).is_empty());
    // One closes: room for one more.
    let mut first = open.remove(0);
    first.on_close(&ctx("x", 1, &SENDER, t0));
    let mut again = policy::for_contract(&w, &shared, max + 3, max + 3);
    assert!(again.on_open("x", t0).is_empty());
}

#[test]
fn xsession_line_deadline_is_not_extended_by_garbage() {
    let x = Inbox::new();
    let d = secs(&x.w, "parseableLineDeadline");
    let t0 = Instant::now();
    let mut p = policy::for_contract(&x.w, &x.shared, 1, 1);
    assert!(p.on_open("x", t0).is_empty());
    assert_eq!(p.next_deadline(), Some(t0 + d));
    // Garbage never decodes, so it never reaches the policy and the deadline stays.
    assert!(x.w.decode("inbox", "sender", b"not json", None).is_err());
    assert_eq!(p.next_deadline(), Some(t0 + d));
    // A parseable line restarts it.
    let t1 = t0 + d / 3;
    let auth = ex(&x.w, "auth", "call", 0);
    let w = x.w.clone();
    assert!(feed(&mut *p, &w, "inbox", "x", 1, &SENDER, &auth, None, t1).is_empty());
    assert_eq!(p.next_deadline(), Some(t1 + d));
    assert!(p.on_tick(t0 + d).is_empty());
    let r = p.on_tick(t1 + d);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0, r[0].1.rule), (1, "limit.deadline"));
    assert_eq!(
        r[0].1.act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        }
    );
    assert_eq!(p.next_deadline(), None);
}

#[test]
fn xsession_an_inbox_with_a_token_demands_the_auth_line_first() {
    let x = Inbox::new();
    let t0 = Instant::now();
    let w = x.w.clone();
    let with_token = policy::RouteRules {
        auth_required: true,
        ..Default::default()
    };
    let user = x.user("m-1", Some("/tmp/s.sock"), "hi");
    // A user frame first: beforeHandshake, the connection dropped without a word.
    let mut p = policy::for_route(&w, &x.shared, 1, 1, with_token.clone());
    assert!(p.on_open("x", t0).is_empty());
    let r = feed(&mut *p, &w, "inbox", "x", 1, &SENDER, &user, None, t0);
    assert_eq!(rules(&r), ["xsession.auth.missing"]);
    assert_eq!(
        r[0].act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        }
    );
    // Garbage first is no auth line either.
    let mut p = policy::for_route(&w, &x.shared, 2, 2, with_token.clone());
    assert!(p.on_open("x", t0).is_empty());
    let r = p.on_unreadable(&ctx("x", 2, &SENDER, t0));
    assert_eq!(rules(&r), ["xsession.auth.missing"]);
    // The auth line first, then the frame: nothing to say.
    let mut p = policy::for_route(&w, &x.shared, 3, 3, with_token);
    assert!(p.on_open("x", t0).is_empty());
    let auth = ex(&w, "auth", "call", 0);
    assert!(feed(&mut *p, &w, "inbox", "x", 3, &SENDER, &auth, None, t0).is_empty());
    assert!(feed(&mut *p, &w, "inbox", "x", 3, &SENDER, &user, None, t0).is_empty());
    // Without a token (the default) an inbox takes frames without an auth line.
    let mut p = policy::for_contract(&w, &x.shared, 4, 4);
    assert!(p.on_open("x", t0).is_empty());
    let other = x.user("m-2", Some("/tmp/s.sock"), "hello");
    assert!(feed(&mut *p, &w, "inbox", "x", 4, &SENDER, &other, None, t0).is_empty());
}

// ---------------------------------------------------------------- kernel credit

fn frame(stream: u64, seq: u64, payload: usize) -> Held {
    // The encoded frame: length, stream_id, seq, payload (§2).
    let mut b = Vec::with_capacity(16 + payload);
    b.extend_from_slice(&((12 + payload) as u32).to_be_bytes());
    b.extend_from_slice(&(stream as u32).to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.resize(16 + payload, 0xab);
    Held {
        stream,
        seq,
        payload_len: payload as u64,
        bytes: Bytes::from(b),
    }
}

const KCORE: Side = Side {
    from: "core",
    to: "shell",
    dir: Dir::Up,
};
const KSHELL: Side = Side {
    from: "shell",
    to: "core",
    dir: Dir::Down,
};

/// The policy of connection 1 of route `k`, opened, with the hello exchange done, as a
/// session does before anything else (the session machine answers anything earlier with
/// not_ready).
fn kernel_ready(w: &Arc<Wire>, shared: &Arc<SharedState>, t: Instant) -> Box<dyn Policy> {
    let mut p = policy::for_contract(w, shared, 1, 1);
    assert!(p.on_open("k", t).is_empty());
    let hello = ex(w, "hello", "call", 0);
    let answer = ex(w, "hello", "result", 0);
    assert!(feed(&mut *p, w, "control", "k", 1, &KSHELL, &hello, None, t).is_empty());
    let answered = feed(
        &mut *p,
        w,
        "control",
        "k",
        1,
        &KCORE,
        &answer,
        Some("hello"),
        t,
    );
    assert!(answered.is_empty());
    p
}

/// The data connection (2) of the session `kernel_ready` opened (1), opened.
fn kernel_data(w: &Arc<Wire>, shared: &Arc<SharedState>, t: Instant) -> Box<dyn Policy> {
    let rules = policy::RouteRules {
        channel: "data".into(),
        ..Default::default()
    };
    let mut d = policy::for_route(w, shared, 2, 1, rules);
    assert!(d.on_open("k", t).is_empty());
    d
}

/// One data frame through data connection `d`, from `side`'s sender.
fn data(d: &mut dyn Policy, side: &Side, f: Held, enforce: bool, t: Instant) -> DataRuling {
    let mut at = ctx("k", 2, side, t);
    at.session = 1;
    d.on_data(&at, f, enforce)
}

fn decision(r: DataRuling) -> GateDecision {
    r.decision
}

#[test]
fn kernel_no_data_before_credit_then_credit_releases_in_order() {
    let w = wire("kernel");
    assert_eq!(limit(&w, "initialCreditBytes"), 0.0);
    let mut g = CreditGate::new(&w, "streams");
    g.open(11, json!({}));
    assert_eq!(g.offer(frame(11, 0, 100)).ok(), Some(GateDecision::Hold));
    assert_eq!(g.offer(frame(11, 1, 100)).ok(), Some(GateDecision::Hold));
    // Only payload bytes count: 150 covers the first (100), not the second.
    assert_eq!(g.grant(11, 150, "core"), Some(vec![frame(11, 0, 100)]));
    // A frame that credit covers may not overtake a held one.
    assert_eq!(g.offer(frame(11, 2, 10)).ok(), Some(GateDecision::Hold));
    let both = vec![frame(11, 1, 100), frame(11, 2, 10)];
    assert_eq!(g.grant(11, 60, "core"), Some(both));
    assert_eq!(g.credit(11), Some(0));
    // Kept: data within credit goes straight through.
    g.grant(11, 64, "core");
    let within = GateDecision::Forward(frame(11, 3, 64));
    assert_eq!(g.offer(frame(11, 3, 64)).ok(), Some(within));
    // A stream the gate does not know is forwarded (K-3: the receiver discards it).
    let unknown = GateDecision::Forward(frame(99, 0, 5));
    assert_eq!(g.offer(frame(99, 0, 5)).ok(), Some(unknown));
}

/// A gate tracks a bounded number of keys: past it a new key is not tracked (its frames
/// are forwarded and flagged), and the keys already open keep their credit.
#[test]
fn credit_keys_are_bounded() {
    let w = wire("kernel");
    let mut g = CreditGate::new(&w, "streams");
    let mut n = 0;
    while g.open(n, json!({})) && g.knows(n) {
        n += 1;
        assert!(n < 1 << 20, "no bound on keys");
    }
    assert!(!g.knows(n), "key {n} is beyond the bound");
    assert!(g.knows(0) && g.grant(0, 5, "core").is_some());
    assert_eq!(g.credit(0), Some(5));
}

#[test]
fn kernel_overrun_beyond_the_held_bound_is_credit_exceeded() {
    let w = wire("kernel");
    let max_payload = limit(&w, "dataPayloadMax") as usize;
    let (shared, t) = (Arc::new(SharedState::new()), Instant::now());
    let mut p = kernel_ready(&w, &shared, t);
    let mut d = kernel_data(&w, &shared, t);
    for (stream, trace) in [(11, "t-mic"), (12, "t-tts")] {
        let mut open = ex(&w, "stream.open", "call", 0);
        open["payload"]["stream_id"] = json!(stream);
        open["trace_id"] = json!(trace);
        assert!(feed(&mut *p, &w, "control", "k", 1, &KCORE, &open, None, t).is_empty());
    }
    // The core receives stream 11 (it grants), the shell stream 12.
    for (stream, side, bytes) in [(11, &KCORE, 1), (12, &KSHELL, 1000)] {
        let mut credit = ex(&w, "stream.credit", "call", 0);
        credit["stream_id"] = json!(stream);
        credit["payload"]["bytes"] = json!(bytes);
        assert!(feed(&mut *p, &w, "control", "k", 1, side, &credit, None, t).is_empty());
    }
    // One maximal frame fits the held bound; the next does not.
    let held = data(&mut *d, &KSHELL, frame(11, 0, max_payload), true, t);
    assert_eq!(decision(held), GateDecision::Hold);
    let GateDecision::Exceeded(o) = decision(data(&mut *d, &KSHELL, frame(11, 1, 1), true, t))
    else {
        panic!("overrun")
    };
    assert_eq!(o.ruling.rule, "credit.overrun");
    assert_eq!(o.ruling.code, Some(json!("protocol.credit_exceeded")));
    assert!(
        o.ruling.reason.ends_with("(/credit/streams)"),
        "{}",
        o.ruling.reason
    );
    assert_eq!(o.ruling.act, Act::Discard);
    assert_eq!(o.dropped_held, 1);
    // What the relay sends: valid kernel messages, as the receiver (core) would.
    let [error, close] = &o.to_sender[..] else {
        panic!("{:?}", o.to_sender)
    };
    for (v, method) in [(error, None), (close, Some("stream.close"))] {
        let bytes = serde_json::to_vec(v).expect("json");
        let m = w
            .decode("control", "core", &bytes, None)
            .unwrap_or_else(|e| panic!("not a valid kernel message: {}: {v}", e.reason));
        assert_eq!(m.method.as_deref(), method);
        assert_eq!(v["stream_id"], json!(11));
        assert_eq!(v["trace_id"], json!("t-mic"));
    }
    assert_eq!(error["payload"]["code"], json!("protocol.credit_exceeded"));
    assert_ne!(error["id"], close["id"]);
    let bytes = serde_json::to_vec(&o.to_receiver[0]).expect("json");
    let m = w.decode("control", "shell", &bytes, None).expect("valid");
    assert_eq!(m.method.as_deref(), Some("stream.close"));
    // The other stream was never blocked, and the closed one is now unknown: forwarded, flagged.
    let other = decision(data(&mut *d, &KCORE, frame(12, 0, 1000), true, t));
    assert_eq!(other, GateDecision::Forward(frame(12, 0, 1000)));
    let late = data(&mut *d, &KSHELL, frame(11, 2, 1), true, t);
    assert_eq!(late.ruling.map(|r| r.rule), Some("credit.unknown-key"));
    assert_eq!(late.decision, GateDecision::Forward(frame(11, 2, 1)));
}

#[test]
fn kernel_policy_feeds_the_gate_from_the_control_channel() {
    let w = wire("kernel");
    let shared = Arc::new(SharedState::new());
    let t0 = Instant::now();
    let mut p = kernel_ready(&w, &shared, t0);
    let mut d = kernel_data(&w, &shared, t0);
    let open = ex(&w, "stream.open", "call", 0);
    let stream = open["payload"]["stream_id"].as_u64().expect("id");
    assert!(feed(&mut *p, &w, "control", "k", 1, &KCORE, &open, None, t0).is_empty());
    // Data before any credit is held (enforce), then released by stream.credit.
    let first = data(&mut *d, &KSHELL, frame(stream, 0, 300), true, t0);
    assert_eq!(decision(first), GateDecision::Hold);
    let mut credit = ex(&w, "stream.credit", "call", 0);
    credit["stream_id"] = json!(stream);
    credit["payload"]["bytes"] = json!(1000);
    let r = feed(&mut *p, &w, "control", "k", 1, &KCORE, &credit, None, t0);
    assert_eq!(rules(&r), ["credit.release"]);
    let released = vec![frame(stream, 0, 300)];
    assert_eq!(
        r[0].act,
        Act::Release {
            frames: released.clone()
        }
    );
    // The released frame goes out first, ahead of the next one toward the core.
    let next = data(&mut *d, &KSHELL, frame(stream, 1, 700), true, t0);
    assert_eq!(next.ready, released);
    assert_eq!(next.decision, GateDecision::Forward(frame(stream, 1, 700)));
    // Observe mode accounts without holding, and flags the overrun.
    assert!(
        data(&mut *d, &KSHELL, frame(stream, 2, 0), false, t0)
            .ruling
            .is_none()
    );
    let flag = data(&mut *d, &KSHELL, frame(stream, 3, 1), false, t0)
        .ruling
        .expect("overrun");
    assert_eq!((flag.rule, flag.act), ("credit.overrun", Act::Flag));
    // Credit from the data's sender is not the receiver's grant.
    let mut wrong = ex(&w, "stream.credit", "call", 1);
    wrong["stream_id"] = json!(stream);
    let r = feed(&mut *p, &w, "control", "k", 1, &KSHELL, &wrong, None, t0);
    assert_eq!(rules(&r), ["credit.grantor"]);
    // stream.close forgets it: later data is forwarded and flagged.
    let mut close = ex(&w, "stream.close", "call", 0);
    close["stream_id"] = json!(stream);
    assert!(feed(&mut *p, &w, "control", "k", 1, &KSHELL, &close, None, t0).is_empty());
    let late = data(&mut *d, &KSHELL, frame(stream, 4, 5), true, t0);
    assert_eq!(late.decision, GateDecision::Forward(frame(stream, 4, 5)));
    assert_eq!(late.ruling.map(|r| r.rule), Some("credit.unknown-key"));
}

/// kernel's text-stream machine is data (one instance per `/stream_id`, stream.end's reason
/// in `matches`), run by the engine: a chunk after its stream ended is flagged (`onInvalid:
/// ignore`: the shell drops it, the proxy reports it), and another stream is untouched.
#[test]
fn kernel_a_chunk_after_its_stream_ended_is_flagged() {
    let w = wire("kernel");
    let t0 = Instant::now();
    let mut p = kernel_ready(&w, &Arc::new(SharedState::new()), t0);
    let chunk = ex(&w, "stream.chunk", "call", 0);
    let end = ex(&w, "stream.end", "call", 0);
    assert_eq!(chunk["stream_id"], end["stream_id"]);
    let mut send = |v: &Value| feed(&mut *p, &w, "control", "k", 1, &KCORE, v, None, t0);
    assert!(send(&chunk).is_empty());
    assert!(send(&end).is_empty());
    let late = send(&chunk);
    assert_eq!(rules(&late), ["machine.out-of-place"]);
    assert_eq!(late[0].act, Act::Flag);
    assert!(
        late[0].reason.contains("/stateMachines/text-stream"),
        "{}",
        late[0].reason
    );
    let mut other = chunk.clone();
    other["stream_id"] = json!(chunk["stream_id"].as_u64().expect("id") + 1);
    assert!(send(&other).is_empty());
}

/// kernel's silence clocks are data (K-44): each side keeps one from the hello's answer,
/// restarted only by what its peer sends (`from: peer`). A shell pinging a silent core
/// keeps the core's clock running but not its own: when the shell's clock runs out the
/// connection is dropped, whoever kept talking.
#[test]
fn kernel_each_side_keeps_its_own_silence_clock() {
    let w = wire("kernel");
    let dead = secs(&w, "deadAfterSilenceSeconds");
    let silence = secs(&w, "heartbeatSilenceSeconds");
    let t0 = Instant::now();
    let mut p = kernel_ready(&w, &Arc::new(SharedState::new()), t0);
    assert_eq!(
        p.next_deadline(),
        Some(t0 + silence),
        "armed by hello's answer"
    );
    // The shell pings every silence period; the core says nothing.
    let ping = ex(&w, "ping", "call", 0);
    let mut t = t0;
    while t + silence < t0 + dead {
        t += silence;
        assert!(
            p.on_tick(t).is_empty(),
            "an interval with no action rules nothing"
        );
        assert!(feed(&mut *p, &w, "control", "k", 1, &KSHELL, &ping, None, t).is_empty());
    }
    assert!(p.on_tick(t0 + dead - Duration::from_millis(1)).is_empty());
    let r = p.on_tick(t0 + dead);
    assert_eq!(
        rules(&r.iter().map(|x| x.1.clone()).collect::<Vec<_>>()),
        ["limit.deadline"]
    );
    assert!(
        r[0].1.reason.contains("/limits/deadAfterSilenceSeconds"),
        "{}",
        r[0].1.reason
    );
    assert_eq!(
        r[0].1.act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        }
    );
    // A ping answered restarts both clocks.
    let mut p = kernel_ready(&w, &Arc::new(SharedState::new()), t0);
    let pong = ex(&w, "pong", "call", 0);
    let t1 = t0 + dead / 2;
    assert!(feed(&mut *p, &w, "control", "k", 1, &KSHELL, &ping, None, t1).is_empty());
    assert!(feed(&mut *p, &w, "control", "k", 1, &KCORE, &pong, None, t1).is_empty());
    assert!(p.on_tick(t0 + dead).is_empty());
    assert_eq!(
        rules(
            &p.on_tick(t1 + dead)
                .into_iter()
                .map(|x| x.1)
                .collect::<Vec<_>>()
        ),
        ["limit.deadline"]
    );
}

/// kernel's task machine is data too (one instance per `/payload/task_id`): progress keeps a
/// task running, its one final event ends it, and any task event after that is flagged; a
/// task may end before its first progress (K-39), and another task is untouched.
#[test]
fn kernel_a_task_event_after_its_final_event_is_flagged() {
    let w = wire("kernel");
    let t0 = Instant::now();
    let mut p = kernel_ready(&w, &Arc::new(SharedState::new()), t0);
    let task = |method: &str, id: &str| {
        let mut v = ex(&w, method, "call", 0);
        v["payload"]["task_id"] = json!(id);
        v
    };
    let mut send = |v: &Value| rules(&feed(&mut *p, &w, "control", "k", 1, &KCORE, v, None, t0));
    for m in [
        "task.progress",
        "task.partial",
        "task.progress",
        "task.done",
    ] {
        assert!(send(&task(m, "task-1")).is_empty(), "{m}");
    }
    assert_eq!(
        send(&task("task.progress", "task-1")),
        ["machine.out-of-place"]
    );
    assert_eq!(
        send(&task("task.failed", "task-1")),
        ["machine.out-of-place"]
    );
    // Cancelled before any progress, then nothing more.
    assert!(send(&task("task.cancelled", "task-2")).is_empty());
    assert_eq!(send(&task("task.done", "task-2")), ["machine.out-of-place"]);
    assert!(send(&task("task.progress", "task-3")).is_empty());
}

// ---------------------------------------------------------------- generic rate limits

fn spec(method: Option<&str>, per_second: f64, burst: u32) -> RateLimitSpec {
    RateLimitSpec {
        method: method.map(str::to_string),
        per_second,
        burst,
    }
}

#[test]
fn ratelimit_refuses_with_the_contract_code_when_it_has_one() {
    let w = wire("rukh");
    let mut rl = RateLimiter::new(&[spec(None, 2.0, 2)], w.contract()).expect("limiter");
    let call = ex(&w, "rukh.call", "call", 0);
    let msg = w
        .decode(
            "ipc",
            "extension",
            &serde_json::to_vec(&call).expect("json"),
            None,
        )
        .expect("valid");
    let t0 = Instant::now();
    assert_eq!(rl.check_message(&msg, t0), None);
    assert_eq!(rl.check_message(&msg, t0), None);
    let r = rl.check_message(&msg, t0).expect("over");
    assert_eq!(r.rule, "ratelimit.route");
    assert_eq!(r.code, Some(json!(-32006)));
    let Act::Refuse {
        reply: Some(reply),
        close: None,
    } = &r.act
    else {
        panic!("{r:?}")
    };
    assert_eq!(reply["id"], call["id"]);
    let bytes = serde_json::to_vec(reply).expect("json");
    assert_eq!(
        w.decode("ipc", "core", &bytes, Some("rukh.call"))
            .expect("valid")
            .kind,
        Kind::Error
    );
    // Answers never take a token: the core's reply to a call passes an empty bucket.
    let answer = ex(&w, "rukh.call", "result", 0);
    let answer = w
        .decode(
            "ipc",
            "core",
            &serde_json::to_vec(&answer).expect("json"),
            Some("rukh.call"),
        )
        .expect("valid");
    assert_eq!(rl.check_message(&answer, t0), None);
    // Half a second later (2 per second) one more.
    assert_eq!(
        rl.check_message(&msg, t0 + Duration::from_millis(500)),
        None
    );
}

#[test]
fn ratelimit_only_flags_without_a_contract_code_and_counts_per_method() {
    let w = wire("toolchannel");
    let mut rl =
        RateLimiter::new(&[spec(Some("tools/call"), 1.0, 1)], w.contract()).expect("limiter");
    let t0 = Instant::now();
    assert_eq!(rl.check(Some("tools/call"), t0), None);
    // Other methods are not counted by a method bucket.
    for _ in 0..10 {
        assert_eq!(rl.check(Some("tools/list"), t0), None);
    }
    let r = rl.check(Some("tools/call"), t0).expect("over");
    assert_eq!(
        (r.rule, r.code, r.act),
        ("ratelimit.method", None, Act::Flag)
    );
    assert_eq!(
        rl.check(Some("tools/call"), t0 + Duration::from_secs(1)),
        None
    );
}

#[test]
fn ratelimit_specs_are_checked() {
    let s: RateLimitSpec =
        toml::from_str("method = \"rukh.call\"\nper_second = 5.0\nburst = 10").expect("spec");
    assert_eq!(s, spec(Some("rukh.call"), 5.0, 10));
    assert!(toml::from_str::<RateLimitSpec>("per_second = 1.0\nburst = 1\nrate = 3").is_err());
    let c = wire("rukh");
    assert_eq!(
        RateLimiter::new(&[spec(None, 0.0, 1)], c.contract()).err(),
        Some(RateLimitError::PerSecond {
            index: 1,
            value: 0.0
        })
    );
    assert_eq!(
        RateLimiter::new(&[spec(None, 1.0, 1), spec(None, 1.0, 0)], c.contract()).err(),
        Some(RateLimitError::Burst { index: 2 })
    );
    assert!(RateLimiter::new(&[spec(None, f64::NAN, 1)], c.contract()).is_err());
}

/// A kernel request before hello is refused by the session machine's data, with a reply
/// the shell can read: a valid envelope with its own id and send time (the binding's
/// `id` and `timestamp`), correlated to the request, in its trace.
#[test]
fn kernel_a_request_before_hello_gets_a_valid_stamped_reply() {
    let w = wire("kernel");
    let (shared, t) = (Arc::new(SharedState::new()), Instant::now());
    let mut p = policy::for_contract(&w, &shared, 1, 1);
    assert!(p.on_open("k", t).is_empty());
    let asked = ex(&w, "programs.index", "call", 0);
    let r = feed(&mut *p, &w, "control", "k", 1, &KCORE, &asked, None, t);
    let Some(Act::Refuse {
        reply: Some(reply), ..
    }) = r.first().map(|r| &r.act)
    else {
        panic!("a refusal with a reply: {r:?}")
    };
    let bytes = serde_json::to_vec(reply).expect("json");
    let m = w
        .decode("control", "shell", &bytes, Some("programs.index"))
        .unwrap_or_else(|e| panic!("not a valid kernel message: {}: {reply}", e.reason));
    assert_eq!(m.kind, Kind::Error);
    assert_eq!(reply["correlation_id"], asked["id"]);
    assert_eq!(reply["trace_id"], asked["trace_id"]);
    assert!(
        reply["id"].is_string() && reply["timestamp"].is_number(),
        "{reply}"
    );
}

/// Built-in contract `name`'s document, renamed: the same data, with nothing the proxy could
/// recognise by name.
fn renamed(name: &str) -> Value {
    let text = contract::BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .expect("built in");
    let mut doc: Value = serde_json::from_str(text.1).expect("json");
    doc["name"] = json!("elsewhere");
    doc
}

/// A framing's `frameDeadline` is data: rukh's document under another name and without its
/// hook still has its incomplete-frame deadline, with the limit's action.
#[test]
fn a_frame_deadline_runs_from_the_framing_alone() {
    let mut doc = renamed("rukh");
    doc.as_object_mut().expect("object").remove("extensions");
    let c = contract::from_str("elsewhere", &doc.to_string()).expect("contract");
    let w = Arc::new(Wire::new(Arc::new(c)).expect("wire"));
    let p = policy::for_contract(&w, &Arc::new(SharedState::new()), 1, 1);
    let (after, r) = p.incomplete_frame().expect("a frame deadline");
    assert_eq!(after, secs(&w, "incompleteFrameSeconds"));
    assert_eq!(r.rule, "frame.incomplete");
    assert_eq!(
        r.act,
        Act::Refuse {
            reply: None,
            close: Some(Closing::Drop)
        }
    );
    assert!(
        r.reason.ends_with("(/limits/incompleteFrameSeconds)"),
        "{}",
        r.reason
    );
}

/// Credit is data: the kernel's document under another name, with no extension, holds data
/// beyond credit from its `credit` entry alone; without the entry, nothing is held.
#[test]
fn credit_runs_from_the_contract_entry_alone() {
    let mut doc = renamed("kernel");
    assert!(doc.get("extensions").is_none(), "the kernel names no hook");
    for with_credit in [true, false] {
        if !with_credit {
            doc.as_object_mut().expect("object").remove("credit");
        }
        let c = contract::from_str("elsewhere", &doc.to_string()).expect("contract");
        let w = Arc::new(Wire::new(Arc::new(c)).expect("wire"));
        let (shared, t0) = (Arc::new(SharedState::new()), Instant::now());
        let mut p = kernel_ready(&w, &shared, t0);
        let mut d = kernel_data(&w, &shared, t0);
        let open = ex(&w, "stream.open", "call", 0);
        let stream = open["payload"]["stream_id"].as_u64().expect("id");
        assert!(feed(&mut *p, &w, "control", "k", 1, &KCORE, &open, None, t0).is_empty());
        let first = decision(data(&mut *d, &KSHELL, frame(stream, 0, 10), true, t0));
        let expected = match with_credit {
            true => GateDecision::Hold,
            false => GateDecision::Forward(frame(stream, 0, 10)),
        };
        assert_eq!(first, expected, "with the credit entry: {with_credit}");
    }
}
