//! The suite derived from a contract's data, for any contract with a channel bound as
//! JSON-RPC or as an envelope (`shape`): what a contract the project never saw gets from
//! `conformance` with no Rust of its own.
//!
//! Every check reads the contract, never a protocol name:
//! - `handshake`: the lifecycle machine (the first typed machine scoped to a connection or
//!   session) is walked from its initial state to the state that allows the played party
//!   the most methods, by sending the party's own call examples and awaiting the answers its
//!   triggers name; every answer must be one the contract accepts;
//! - `call.<method>`: after the handshake, each request the party may send gets an answer
//!   the contract accepts: a result valid against the method's schema, or an error whose
//!   code the catalog or the method lists;
//! - `version.<name>[.none|.foreign|.refused]` (`versions`): an offer of every version
//!   the contract names gets one chosen (the highest both speak); one of none gets the
//!   contract's reaction, or the chooser's own version;
//!   playing the chooser, a refused offerer offers again or ends the channel;
//! - `out-of-place.<machine>[.<state>]`: a request the machine does not allow where a new
//!   connection puts it (its initial state, or where an `open` trigger takes it), sent
//!   first, or in a state the walk passes where the machine waits for the suite, gets the
//!   machine's `outOfPlace` error;
//! - the bad-input families (`probes`) and the framing family (`framing`) get the
//!   contract's `violations` reactions, or are served like any other;
//! - `count.<limit>` (`counted`): the limit's worth of inputs counting toward it
//!   (`countToward`), each answered by its own entry, then the limit's action;
//! - `refusal.<machine>.<method>[.result|.error]` (`refusals`): a request, or a second
//!   answer, that the lifecycle machine's `refusals` name gets the refusal's action, in
//!   the walk's end state or further on by the played party's own steps;
//! - `frame.method-cap.<method>` (`sizes`): a handshake message whose method has its own
//!   cap, padded to it, is served; one byte over gets the `Wire`'s reaction;
//! - `answer.result-and-error` (`answers`): an answer to the implementation's request that
//!   is both a result and an error gets the `Wire`'s reaction, where it ends the channel
//!   or ignores the answer;
//! - `ids.reuse`, `ids.gap`, `ids.prefix`, `ids.unissued` (`ids`): a request breaking the
//!   party's id rule, or an answer to an id the implementation never issued, gets the
//!   rule's reaction;
//! - `rate.<limit>` (`rates`): a token bucket, whatever it is kept per, refuses what
//!   outruns it with its code, and a message an `ignore` refused is served later;
//! - `connections.<limit>` (`connections`): with a connection cap's worth of sessions
//!   open to the implementation, one more gets the cap's action, the others stay open;
//! - `duplicate.<limit>` (`duplicates`): a message sent again within a duplicate window
//!   gets the window's action;
//! - `capabilities` (`capabilities`): with the played party declaring none, the
//!   implementation uses no capability it would have had to declare;
//! - `messages` (`messages`): every message the implementation sends of its own is one
//!   the contract accepts;
//! - `claim.<name>` (`claims`): a second connection claiming the identity the played
//!   party's handshake claims supersedes the first as the claim says, and one that may not
//!   is refused while the holder goes on serving;
//! - `upgrade.bearer`, `upgrade.subprotocol` (`upgrade`): the channel's WebSocket upgrade
//!   refuses a missing or wrong Bearer token, or an offer of no subprotocol of its own,
//!   with the declared HTTP status; a dialing implementation carries its token and offers
//!   one, and exits as the status maps when refused;
//! - `agreement.<name>[.own]` (`agreements`): a value the handshake settles and later
//!   messages repeat; playing the party the judge is not, another value gets the
//!   `mismatch` reaction; playing the judge, every value the implementation states is the
//!   agreed one, and a known value is its own, never an echo of the suite's;
//! - `redial.<end>` (`redial`): after each end the channel's `redial` lists (a close code,
//!   or a transport break), a dialing implementation dials again within its limit and
//!   claims the same identity with the next attempt;
//! - `exits.<table>` (`exits`): each close code that maps an exit of the implementation's
//!   party ends a fresh launched process with that exit (and any check whose session the
//!   implementation closed with such a code owes it as well);
//! - `cue.<name>` (`cues`): the implementation acts on each cue the contract declares for
//!   the played party, sending what the cue expects, then what ends it, breaking no machine;
//! - `credit.<name>` (`credit`): after the played party's cue that makes the
//!   implementation open a credit key, no data before a grant and never more than granted;
//! - `timer.<limit>` (`timers`): with the suite silent from the clock's start, a deadline
//!   or interval the implementation's party runs sends what it `sends`, or ends the
//!   channel as its `action` says, when it runs out and not before;
//! - `behaviour` (`behaviour`): the policy engine the proxy enforces with
//!   (`contract-policy`), fed both parties' traffic, rules nothing against the
//!   implementation's (a chunk after its stream ended, an id against its rule, credit
//!   overrun).
//!
//! A probe whose answer the contract leaves to the implementation is not made: only
//! `reply-error` actions with a code are checked.

use std::collections::HashMap;
use std::time::Instant;

use contract::Contract;
use contract::join_pointer as join;
use contract::model::{ActionKind, Kind, Part};
use serde_json::Value;

mod agreements;
mod answers;
mod behaviour;
mod capabilities;
mod carried;
mod claims;
mod connections;
mod counted;
mod credit;
mod cues;
mod declared;
mod duplicates;
mod end;
mod exits;
mod framing;
mod ids;
mod messages;
mod newer;
mod notwhile;
mod plan;
mod probes;
mod rates;
mod redial;
mod refusals;
mod shape;
mod sizes;
mod timers;
mod upgrade;
mod versions;

use carried::in_force;
use contract::wire::Wire;
pub(crate) use exits::exit_owed;
use plan::{
    Plan, Step, carriers, id_prefix, id_value, out_of_place_on_the_way, out_of_place_probes,
};
pub(crate) use plan::{example, example_of};
use probes::Probe;
use shape::Shape;

use super::session::{Ctx, Got, Incoming, Kept, Peer, STARTUP, with_meanwhile};
use super::{BodyFuture, Check, Failure, Verdict, pass};

/// The checks derived from `c` for the party `role`.
pub fn checks(c: &Contract, role: &str) -> Result<Vec<Check>, String> {
    if !c.parties.contains_key(role) {
        let parties: Vec<&str> = c.parties.keys().map(String::as_str).collect();
        return Err(format!(
            "--play {role:?}: the contract's parties are {parties:?}"
        ));
    }
    if Shape::of(c).is_none() {
        return Err(format!(
            "no conformance suite for contract {:?}: the derived suite needs a channel bound as JSON-RPC or an envelope",
            c.name
        ));
    }
    let plan = Plan::new(c, role);
    let mut out = Vec::new();
    // `shares`: the check needs the handshake done and changes nothing it leads to, so it
    // may run on the session the check before it kept.
    let mut add = |id: String, title: String, seed: &str, body: super::Body, subject, shares| {
        out.push(Check {
            id: format!("{}.derived.{id}", c.name).into(),
            title: title.into(),
            seed: seed.to_string().into(),
            body: Ok(body),
            subject,
            shares,
        });
    };
    if let Some((name, sm)) = &plan.machine {
        let title = format!(
            "the {name} machine reaches `{}` by the contract's own messages",
            plan.target
        );
        let seed = cite(join("/stateMachines", [name]), &sm.seed);
        add("handshake".into(), title, &seed, handshake, None, false);
    }
    for m in plan.callable(c) {
        let title = match c.only_error(&m) {
            Some(code) => format!("an example {m} gets error {code}, its only answer"),
            None => format!("an example {m} gets an answer the contract accepts"),
        };
        add(
            format!("call.{m}"),
            title,
            &cite(join("/methods", [&m]), &c.methods[&m].seed),
            call,
            Some(m.clone()),
            plan.stays(c, &m),
        );
    }
    for (id, title, i, kind) in versions::applies(c, role) {
        let v = &c.versions[i];
        let seed = cite(join("/versions", [&i.to_string(), "negotiation"]), &v.seed);
        add(
            id,
            title,
            &seed,
            versions::body(kind),
            Some(i.to_string()),
            false,
        );
    }
    for (name, sm, method) in out_of_place_probes(c, role) {
        let reaction = match sm.out_of_place.as_ref() {
            Some(a) if a.action != ActionKind::ReplyError => {
                let code = a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
                format!("`{}`{code}", probes::action_name(a.action))
            }
            _ => "its outOfPlace error".into(),
        };
        let title = format!("{method} before the {name} machine allows it gets {reaction}");
        add(
            format!("out-of-place.{name}"),
            title,
            &cite(join("/stateMachines", [&name, "outOfPlace"]), &sm.seed),
            out_of_place,
            Some(name),
            false,
        );
    }
    for r in refusals::applies(c, &plan, role) {
        let (title, seed) = (r.title(), r.seed());
        let id = r.id();
        add(
            id,
            title,
            &seed,
            refusals::body,
            Some(r.index.to_string()),
            true,
        );
    }
    if let Some((name, sm)) = &plan.machine {
        for (state, method) in out_of_place_on_the_way(c, &plan) {
            let title = format!(
                "{method} in `{state}`, on the way to `{}`, gets the {name} machine's outOfPlace error",
                plan.target
            );
            add(
                format!("out-of-place.{name}.{state}"),
                title,
                &cite(join("/stateMachines", [name, "outOfPlace"]), &sm.seed),
                out_of_place_at,
                Some(state),
                false,
            );
        }
    }
    let wire = Wire::new(std::sync::Arc::new(c.clone())).map_err(|e| e.to_string())?;
    let first = id_value(id_prefix(c, role).as_deref(), 1);
    let carriers = carriers(c, role, &plan.staying(c), &first);
    for p in Probe::ALL {
        if let Some(b) = probes::build(p, &wire, role, &carriers) {
            let seed = cite(b.pointer.clone(), &b.seed);
            add(
                p.name().into(),
                b.title(p),
                &seed,
                probes::body,
                Some(p.name().into()),
                // An input counting toward a limit gets a fresh session, where the count
                // starts at zero: on a shared one the limit's action could come first.
                b.counts.is_none(),
            );
        }
    }
    for (limit, title, seed) in counted::applies(c, &wire, role, &carriers) {
        let seed = cite(join("/limits", [&limit]), &seed);
        let id = format!("count.{limit}");
        add(id, title, &seed, counted::body, Some(limit), false);
    }
    for (limit, title, seed) in connections::applies(c, role) {
        let seed = cite(join("/limits", [&limit]), &seed);
        let id = format!("connections.{limit}");
        add(id, title, &seed, connections::body, Some(limit), false);
    }
    for d in duplicates::applies(c, role, &plan.staying(c)) {
        let id = format!("duplicate.{}", d.limit);
        add(id, d.title, &d.seed, duplicates::body, Some(d.limit), false);
    }
    for n in newer::applies(c, &carriers) {
        let id = format!("version.{}.newer", n.name);
        let index = Some(n.index.to_string());
        add(id, n.title, &n.seed, newer::body, index, false);
    }
    for (f, pointer) in framing::applies(c, &wire, &plan.staying(c)) {
        let ch = Shape::of(c).map(|s| s.channel).unwrap_or_default();
        let deadline = wire.frame_deadline(&ch).map(|(n, _)| n.to_string());
        add(
            f.name().into(),
            f.title(deadline.as_deref()),
            &cite(pointer, &c.channels[&ch].seed),
            framing::body,
            Some(f.name().into()),
            f != framing::Family::Stalled,
        );
    }
    for m in sizes::applies(&wire, &plan, role) {
        let id = format!("frame.method-cap.{}", m.method);
        add(
            id,
            m.title(),
            &m.seed(),
            sizes::body,
            Some(m.method.clone()),
            false,
        );
    }
    for r in rates::rate_probes(c, role, &plan.staying(c)) {
        // A fresh session: the bucket is full when the connection opens.
        let id = format!("rate.{}", r.limit);
        add(id, r.title(), &r.seed, rates::body, Some(r.limit), false);
    }
    for (name, title, seed) in ids::applies(c, role) {
        add(
            name.into(),
            title,
            &seed,
            ids::body,
            Some(name.into()),
            true,
        );
    }
    if let Some(a) = answers::applies(&wire, role) {
        let seed = cite(a.pointer.clone(), &a.seed);
        let id = "answer.result-and-error".to_string();
        add(id, a.title(), &seed, answers::body, None, false);
    }
    if let Some((caps, seed)) = capabilities::applies(c, role) {
        let title = format!(
            "with the {role} declaring no capability, the implementation uses none of {}",
            caps.join(", ")
        );
        add(
            "capabilities".into(),
            title,
            &seed,
            capabilities::body,
            None,
            false,
        );
    }
    if let Some((title, seed)) = declared::unknown_applies(c, role, &plan) {
        let id = "capability.unknown".to_string();
        add(id, title, &seed, declared::unknown_body, None, false);
    }
    for u in declared::undeclared_applies(c, role, &plan) {
        let id = format!("capability.undeclared.{}", u.cap);
        add(
            id,
            u.title,
            &u.seed,
            declared::undeclared_body,
            Some(u.cap),
            false,
        );
    }
    if let Some(shape) = Shape::of(c) {
        let ch = &shape.channel;
        add(
            "messages".into(),
            "every message the implementation sends of its own, through the handshake and a call of each request, is one the contract accepts".into(),
            &cite(join("/channels", [ch.as_str()]), &c.channels[ch].seed),
            messages::body,
            None,
            false,
        );
    }
    for (name, title, seed) in claims::applies(c, role) {
        let seed = cite(join("/claims", [&name]), &seed);
        add(
            format!("claim.{name}"),
            title,
            &seed,
            claims::body,
            Some(name),
            false,
        );
    }
    for g in agreements::applies(c, role) {
        let name = g
            .subject
            .split_once(':')
            .map(|(_, n)| n)
            .unwrap_or_default();
        let seed = cite(join("/agreements", [name]), &g.seed);
        let id = format!("agreement.{}", g.id);
        add(id, g.title, &seed, agreements::body, Some(g.subject), false);
    }
    for (m, title, seed) in notwhile::applies(c, role) {
        let seed = cite(join("/methods", [m, "notWhile"]), seed);
        let id = format!("not-while.{m}");
        add(id, title, &seed, notwhile::body, Some(m.to_string()), false);
    }
    for e in end::applies(c, role, &plan) {
        let seed = cite(e.pointer, &e.seed);
        add(
            e.name,
            e.title,
            &seed,
            end::body,
            Some(e.index.to_string()),
            false,
        );
    }
    for (field, title, pointer, seed) in upgrade::applies(c, role) {
        let id = format!("upgrade.{field}");
        let seed = cite(pointer, &seed);
        add(id, title, &seed, upgrade::body, Some(field.into()), false);
    }
    for (end, title, pointer, seed, i) in redial::applies(c, role) {
        let id = format!("redial.{end}");
        let seed = cite(pointer, &seed);
        add(id, title, &seed, redial::body, Some(i.to_string()), false);
    }
    for (name, title, seed) in redial::first_applies(c, role) {
        let seed = cite(join("/claims", [&name, "first"]), &seed);
        let id = format!("claim.{name}.first");
        add(id, title, &seed, redial::first_body, Some(name), false);
    }
    for (table, title, seed) in exits::applies(c, role) {
        let seed = cite(join("/codes", [&table]), &seed);
        add(
            format!("exits.{table}"),
            title,
            &seed,
            exits::body,
            Some(table),
            false,
        );
    }
    for (name, cue) in cues::applies(c, role) {
        let seed = cite(join("/cues", [name]), &cue.seed);
        let id = format!("cue.{name}");
        add(
            id,
            cues::title(cue),
            &seed,
            cues::body,
            Some(name.clone()),
            false,
        );
    }
    for (name, title, seed) in credit::applies(c, role) {
        let seed = cite(join("/credit", [&name]), &seed);
        add(
            format!("credit.{name}"),
            title,
            &seed,
            credit::body,
            Some(name),
            false,
        );
    }
    for (name, l) in timers::applies(c, role) {
        let seed = cite(join("/limits", [name]), &l.seed);
        let id = format!("timer.{name}");
        let title = timers::title(c, role, name, l);
        add(id, title, &seed, timers::body, Some(name.into()), true);
    }
    if let Some(pointer) = behaviour::applies(c) {
        add(
            "behaviour".into(),
            "through the handshake and a call of each request, the policy engine the proxy enforces with rules nothing against a message the implementation sends (machines, ids, rates, deadlines, credit)".into(),
            &cite(pointer, "each finding names its own entry"),
            behaviour::body,
            None,
            false,
        );
    }
    // A tagged binding's messages are all one-way: what the suite sends is a message.
    if let Some(shape) = Shape::of(c) {
        for check in &mut out {
            check.title = shape.say(&check.title).into();
        }
    }
    Ok(out)
}

/// A check's citation: the contract entry it comes from, then the seed section that
/// entry cites.
fn cite(pointer: String, seed: &str) -> String {
    format!("{pointer}: {seed}")
}

/// The suite's session: the peer, and the ids it gave out.
struct Session {
    peer: Peer,
    shape: Shape,
    next: u64,
    prefix: Option<String>,
    /// The trace id each of the suite's requests carried, by request id (a binding that
    /// names a trace field): the implementation's requests on that trace serve it.
    traces: HashMap<String, String>,
    /// The implementation's requests that keep the machine where the handshake took it
    /// (a worker's heartbeat in `running`): answered whenever they come, so a session
    /// shared by many checks lives as long as they take.
    keeps: Vec<String>,
    /// The played party's capability declaration, written empty in the messages the suite
    /// sends from examples (the capabilities check).
    declares_none: Option<contract::model::Declaration>,
    /// Values written over the examples of a method the suite sends, each at its pointer
    /// (a second connection's claimant and attempt, the claims check).
    writes: Vec<(String, String, Value)>,
    /// Answers that came for ids besides the one awaited (a batch's), by id: a later wait
    /// for one of them takes it from here.
    covered: Vec<(Value, Value)>,
    /// Whether an answer the contract rejects fails the wait. A check whose rule is not
    /// the answer's content (a probe: was it answered at all?) clears it: the answer's
    /// own call check reports the breach (one broken rule, one failing check).
    judge_answers: bool,
    /// Whether the last wait for an answer ran out of time (no answer came at all).
    timed_out: bool,
    /// Whether every request of the implementation's the played party can answer is
    /// answered while the suite waits: on a session no other check shares, the
    /// implementation's own work may then run its course (a rukh command's calls).
    serves_all: bool,
    /// The walk's last request sent and its method: an `Await` step takes its answer.
    last: Option<(Value, String)>,
    /// The other party's request the walk expected and has yet to answer: answered by an
    /// `Answer` step, or before the next message is expected (the implementation may wait
    /// for it). A request the walk ends on stays unanswered: its answer would move the
    /// machine on (rukh's invoke result completes the invocation).
    owed: Option<(Value, String)>,
    /// The last request an `Answer` step answered (a second answer's id).
    answered: Option<Value>,
    /// Whether the walk watches [`PATIENCE`] before each step of the suite's own, failing a
    /// message the machine does not allow there (the handshake check: an implementation
    /// that does not wait for the suite).
    patient: bool,
}

impl Session {
    /// Half-close the session and read it until the implementation closes its side, or
    /// `until`: the implementation has seen it end before the next connection comes.
    async fn close_back(&mut self, until: Instant) {
        self.peer.shutdown().await;
        while !matches!(
            self.peer.next(until).await,
            Incoming::ControlEnd(_) | Incoming::Timeout
        ) {}
    }

    async fn open(cx: &mut Ctx) -> Result<Session, Failure> {
        let c = cx.wire.contract().clone();
        let plan = Plan::new(&c, &cx.role);
        let peer = match cx.open().await {
            // The handshake check, where there is one, reports a session that did not open.
            Err(f) if plan.machine.is_some() => {
                return Err(f.reported_by(format!("{}.derived.handshake", c.name)));
            }
            opened => opened?,
        };
        Session::on(cx, peer, &plan)
    }

    /// A session on `peer`, before `plan`'s handshake.
    fn on(cx: &Ctx, peer: Peer, plan: &Plan) -> Result<Session, Failure> {
        let c = cx.wire.contract();
        let shape = Shape::of(c).ok_or_else(|| Failure::new("suite bug: no bound channel"))?;
        let prefix = id_prefix(c, &cx.role);
        Ok(Session {
            peer,
            shape,
            next: 0,
            prefix,
            traces: HashMap::new(),
            keeps: plan.keeps(c),
            declares_none: None,
            writes: Vec::new(),
            covered: Vec::new(),
            judge_answers: true,
            timed_out: false,
            serves_all: false,
            last: None,
            owed: None,
            answered: None,
            patient: false,
        })
    }

    /// The session the check before kept, or a fresh one taken through the handshake.
    async fn start(cx: &mut Ctx, plan: &Plan) -> Result<Session, Failure> {
        if let Some(s) = cx.kept.take().and_then(Kept::take::<Session>) {
            return Ok(s);
        }
        let mut s = Session::open(cx).await?;
        s.handshake(cx, plan).await?;
        Ok(s)
    }

    /// Leave the session, where the handshake took it, for the next check.
    fn keep(mut self, cx: &mut Ctx) {
        self.judge_answers = true;
        cx.kept = Some(Kept::new(self));
    }

    /// `method`'s example as the played party writes it, with a fresh id for a request.
    fn message(&mut self, cx: &Ctx, method: &str) -> Result<Value, Failure> {
        let c = cx.wire.contract();
        let mut v = example(c, method, &cx.role)
            .ok_or_else(|| Failure::new(format!("the contract has no call example of {method}")))?;
        dealias(&cx.aliases, &mut v);
        self.undeclare(method, Part::Call, &mut v);
        carried::write(cx, method, Part::Call, &mut v);
        agreements::write(cx, self, (method, Part::Call), &mut v);
        self.overwrite(method, &mut v);
        Ok(self.numbered(v))
    }

    /// `v` with the next id given out, when it is a request.
    fn numbered(&mut self, mut v: Value) -> Value {
        if self.shape.id(&v).is_some() {
            let id = self.take_id();
            self.shape.set_id(&mut v, id);
        }
        v
    }

    /// `v` (the `part` of `method`) declaring no capability, where it is the played
    /// party's declaration and [`Session::declares_none`] is set.
    fn undeclare(&self, method: &str, part: Part, v: &mut Value) {
        let Some(d) = self.declares_none.as_ref() else {
            return;
        };
        if d.method == method && d.part == part {
            let empty = match d.form {
                contract::model::DeclarationForm::List => Value::Array(Vec::new()),
                contract::model::DeclarationForm::ObjectKeys => Value::Object(Default::default()),
            };
            contract::set_pointer(v, &d.pointer, empty);
        }
    }

    /// [`Session::writes`] of `method` written into `v`.
    fn overwrite(&self, method: &str, v: &mut Value) {
        for (_, pointer, value) in self.writes.iter().filter(|(m, _, _)| m == method) {
            contract::set_pointer(v, pointer, value.clone());
        }
    }

    /// Send each of `methods` once and wait for its answer (what it is, is its call
    /// check's to judge), then listen [`LINGER`] more for what the calls set off. The
    /// stretches of the log that came while the suite waited in vain for an answer.
    async fn call_each(
        &mut self,
        cx: &Ctx,
        methods: &[String],
    ) -> Result<Vec<std::ops::Range<usize>>, Failure> {
        let mut in_vain = Vec::new();
        for m in methods {
            let id = self.send(cx, m).await?.unwrap_or(Value::Null);
            let from = self.peer.log.len();
            if self.wait_answer(cx, &[id], m, cx.soon()).await.is_err() {
                in_vain.push(from..self.peer.log.len());
            }
        }
        self.linger(cx).await;
        Ok(in_vain)
    }

    /// Take what the implementation sends for [`LINGER`] more, until it falls quiet or
    /// the channel ends (what was set off runs its course into the log). On a session that
    /// serves all, its requests are answered, so its own work goes on (a rukh command's
    /// calls, then its completion); a reply that cannot be sent leaves the end to the log.
    async fn linger(&mut self, cx: &Ctx) {
        let until = Instant::now() + LINGER;
        loop {
            match self.peer.next(until).await {
                Incoming::Control(got) if self.serves_all => {
                    let _ = self.respond(cx, &got).await;
                }
                Incoming::Control(_) | Incoming::Data { .. } => {}
                _ => return,
            }
        }
    }

    /// The id the next request gets.
    fn peek_id(&self) -> Value {
        id_value(self.prefix.as_deref(), self.next + 1)
    }

    /// Give out the next id.
    fn take_id(&mut self) -> Value {
        let id = self.peek_id();
        self.next += 1;
        id
    }

    /// The examples of `methods`, each with the next id (only one of them is sent).
    fn carriers(&self, cx: &Ctx, methods: &[String]) -> Vec<Value> {
        let mut all = carriers(cx.wire.contract(), &cx.role, methods, &self.peek_id());
        for v in &mut all {
            dealias(&cx.aliases, v);
            let bytes = serde_json::to_vec(v).unwrap_or_default();
            let decoded = cx.wire.decode(&self.shape.channel, &cx.role, &bytes, None);
            if let Some(m) = decoded.ok().and_then(|m| m.method) {
                agreements::write(cx, self, (&m, Part::Call), v);
            }
        }
        all
    }

    /// Send `method`'s example; its id when it is a request.
    async fn send(&mut self, cx: &Ctx, method: &str) -> Result<Option<Value>, Failure> {
        let v = self.message(cx, method)?;
        self.send_value(&v).await
    }

    /// Send `v`, remembering the trace it carries (see [`Session::serves`]); its id when
    /// it is a request.
    async fn send_value(&mut self, v: &Value) -> Result<Option<Value>, Failure> {
        let sent = self.peer.send(v).await?;
        let id = self.shape.id(v).cloned();
        if let (Some(id), Some(trace)) = (&id, sent.trace) {
            self.traces.insert(id.to_string(), trace);
        }
        Ok(id)
    }

    /// The answer to request `id`, checked against the contract; other traffic is skipped.
    async fn answer(&mut self, cx: &Ctx, id: &Value, what: &str) -> Result<Value, Failure> {
        self.answer_by(cx, id, what, cx.soon()).await
    }

    /// [`Self::answer`], waiting until `until`.
    async fn answer_by(
        &mut self,
        cx: &Ctx,
        id: &Value,
        what: &str,
        until: Instant,
    ) -> Result<Value, Failure> {
        let (v, _) = self
            .wait_answer(cx, std::slice::from_ref(id), what, until)
            .await?;
        Ok(v)
    }

    /// The first answer to any of `ids`, with the other answers and the rejected messages
    /// that came before it (shown if the wait fails, judged by a caller that expects none).
    async fn wait_answer(
        &mut self,
        cx: &Ctx,
        ids: &[Value],
        what: &str,
        until: Instant,
    ) -> Result<(Value, Vec<Got>), Failure> {
        let waited = until.saturating_duration_since(Instant::now());
        if let Some(i) = self.covered.iter().position(|(id, _)| ids.contains(id)) {
            return Ok((self.covered.remove(i).1, Vec::new()));
        }
        let mut unclaimed = Vec::new();
        self.timed_out = false;
        loop {
            match self.peer.next(until).await {
                Incoming::Control(got) => {
                    let to = got.value().map(|v| self.shape.answered_all(v));
                    let to = to.unwrap_or_default();
                    let answer = !to.is_empty();
                    if let Some(v) = got.value() {
                        let others = to.iter().filter(|id| !ids.contains(id));
                        let room = COVERED_MAX.saturating_sub(self.covered.len());
                        let others = others.take(room).map(|id| (id.clone(), v.clone()));
                        self.covered.extend(others);
                    }
                    if !to.iter().any(|id| ids.contains(id)) {
                        let ours =
                            self.serves_all || self.serves(ids, &got) || self.keeps_alive(&got);
                        if !answer && ours && self.respond(cx, &got).await? {
                            continue;
                        }
                        if (answer || got.msg.is_err()) && unclaimed.len() < UNCLAIMED {
                            unclaimed.push(*got);
                        }
                        continue;
                    }
                    let Some(v) = got.value() else { continue };
                    return match &got.msg {
                        Ok(m) => known_code(cx.wire.contract(), &self.shape, m, &got.raw, what)
                            .map(|()| (v.clone(), unclaimed)),
                        Err(_) if !self.judge_answers => Ok((v.clone(), unclaimed)),
                        Err(bad) => Err(Failure::new(format!(
                            "the answer to {what} breaks the contract: {}",
                            bad.reason
                        ))
                        .with("the answer", &got.raw)),
                    };
                }
                Incoming::Timeout => {
                    self.timed_out = true;
                    let secs = waited.as_secs_f64();
                    let f = Failure::new(format!("no answer to {what} within {secs:.1} s"));
                    return Err(with_meanwhile(f, unclaimed));
                }
                Incoming::ControlEnd(why) => {
                    let f = Failure::new(format!(
                        "the channel ended before the answer to {what}: {why}"
                    ));
                    return Err(with_meanwhile(f, unclaimed));
                }
                Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            }
        }
    }

    /// The handshake of `plan`.
    async fn handshake(&mut self, cx: &Ctx, plan: &Plan) -> Result<(), Failure> {
        self.walk_to(cx, plan, plan.steps.len()).await
    }

    /// The first `n` steps of `plan`'s handshake.
    async fn walk_to(&mut self, cx: &Ctx, plan: &Plan, n: usize) -> Result<(), Failure> {
        self.walk_steps(cx, plan, 0..n).await
    }

    /// `plan`'s steps in `range`, on from where the session's walk left off.
    async fn walk_steps(
        &mut self,
        cx: &Ctx,
        plan: &Plan,
        range: std::ops::Range<usize>,
    ) -> Result<(), Failure> {
        let mut first = range.start == 0;
        let steps = plan.steps.iter().zip(&plan.states);
        for (step, state) in steps.skip(range.start).take(range.len()) {
            // The first wait of a fresh session also pays for the launch: a step that only
            // sends (MCP's initialize) leaves it to the answer it awaits.
            let waits = !matches!(step, Step::Send(_));
            let wait = match first && waits {
                true => cx.opts.deadline.max(STARTUP),
                false => cx.opts.deadline,
            };
            first &= !waits;
            let ours = match step {
                Step::Send(m) | Step::Answer(m) => Some(m),
                Step::Await(m) => (self.last.as_ref())
                    .filter(|(_, s)| s == m)
                    .is_none()
                    .then_some(m),
                Step::Expect(_) => None,
            };
            if let Some(m) = ours.filter(|_| self.patient) {
                self.bide(cx, plan, state, m).await?;
            }
            let until = Instant::now() + wait;
            match step {
                Step::Send(m) => self.last = self.send(cx, m).await?.map(|id| (id, m.clone())),
                Step::Await(m) => {
                    // A machine may move on the answer alone (LSP's initialize): ask first.
                    let id = match self.last.take().filter(|(_, s)| s == m) {
                        Some((id, _)) => id,
                        None => self.send(cx, m).await?.unwrap_or(Value::Null),
                    };
                    self.answer_by(cx, &id, m, until).await?;
                }
                Step::Expect(m) => {
                    let got = self.expect(cx, plan, state, m, until).await?;
                    if let Some((request, m)) = self.owed.take() {
                        self.reply(cx, &m, &request).await?;
                    }
                    self.owed = got.map(|request| (request, m.clone()));
                }
                Step::Answer(m) => {
                    // A machine that moves on the answer alone (the kernel's hello) names no
                    // step for the request: expect it first.
                    let request = match self.owed.take().filter(|(_, r)| r == m) {
                        Some((request, _)) => request,
                        None => self
                            .expect(cx, plan, state, m, until)
                            .await?
                            .ok_or_else(|| Failure::new(format!("{m} came without an id")))?,
                    };
                    self.reply(cx, m, &request).await?;
                    self.answered = Some(request);
                }
            }
        }
        Ok(())
    }

    /// [`PATIENCE`] of the implementation's traffic while the walk's next step, `next`, is
    /// the suite's: a message the machine does not allow in `state` fails (it did not wait
    /// for the suite); the rest is handed back to the steps after.
    async fn bide(
        &mut self,
        cx: &Ctx,
        plan: &Plan,
        state: &str,
        next: &str,
    ) -> Result<(), Failure> {
        let until = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let got = self.peer.next(until).await;
            if let Incoming::Control(g) = &got {
                let call = g.ok().filter(|m| m.is_call());
                if let Some(mut f) = plan.out_of_place(cx.wire.contract(), call, state) {
                    f.why += &format!(", before the suite's {next}");
                    return Err(f.with("the message", &g.raw));
                }
            }
            let more = matches!(got, Incoming::Control(_) | Incoming::Data { .. });
            if !matches!(got, Incoming::Timeout) {
                seen.push(got);
            }
            if !more {
                break;
            }
        }
        self.peer.unread(seen);
        Ok(())
    }

    /// Wait for the implementation's message of `method` with the machine in `state`; the
    /// message, when it is a request. Its other requests meanwhile are answered as any
    /// other, unless the machine does not allow them in `state`: that fails.
    async fn expect(
        &mut self,
        cx: &Ctx,
        plan: &Plan,
        state: &str,
        method: &str,
        until: Instant,
    ) -> Result<Option<Value>, Failure> {
        let mut seen = Vec::new();
        loop {
            match self.peer.next(until).await {
                Incoming::Control(got) => {
                    let call = got.ok().filter(|m| m.is_call());
                    if let Some(m) = call.filter(|m| m.method.as_deref() == Some(method)) {
                        return Ok(m.id.is_some().then(|| m.value.clone()));
                    }
                    if let Some(f) = plan.out_of_place(cx.wire.contract(), call, state) {
                        return Err(f.with("the message", &got.raw));
                    }
                    if !self.respond(cx, &got).await? && seen.len() < UNCLAIMED {
                        seen.push(*got);
                    }
                }
                Incoming::Timeout => {
                    let f = Failure::new(format!("the implementation sent no {method}"));
                    return Err(with_meanwhile(f, seen));
                }
                Incoming::ControlEnd(why) => {
                    let f = Failure::new(format!("the channel ended before {method}: {why}"));
                    return Err(with_meanwhile(f, seen));
                }
                Incoming::Data { .. } | Incoming::DataEnd(_) => {}
            }
        }
    }

    /// Answer the implementation's `request` of `method` with the played party's result
    /// example, echoing what the example pair echoes (see [`echoed`]).
    async fn reply(&mut self, cx: &Ctx, method: &str, request: &Value) -> Result<(), Failure> {
        let v = self.answer_for(cx, method, request)?;
        self.peer.send(&v).await.map(|_| ())
    }

    /// The answer [`Session::reply`] sends to `request`.
    fn answer_for(&mut self, cx: &Ctx, method: &str, request: &Value) -> Result<Value, Failure> {
        self.answer_as(cx, method, request, Part::Result)
    }

    /// The played party's `part` example of `method` (a result or an error) answering
    /// `request`.
    fn answer_as(
        &mut self,
        cx: &Ctx,
        method: &str,
        request: &Value,
        part: Part,
    ) -> Result<Value, Failure> {
        let c = cx.wire.contract();
        let mut v = example_of(c, method, part, &cx.role).ok_or_else(|| {
            let part = format!("{part:?}").to_lowercase();
            Failure::new(format!("the contract has no {part} example of {method}"))
        })?;
        dealias(&cx.aliases, &mut v);
        self.undeclare(method, part, &mut v);
        carried::write(cx, method, part, &mut v);
        agreements::write(cx, self, (method, part), &mut v);
        let call = example_of(c, method, Part::Call, &cx.other);
        echoed(&self.shape, &mut v, call.as_ref(), request);
        // What a check writes over is the last word, over an echo too.
        self.overwrite(method, &mut v);
        let own = self.shape.answers_have_ids().then(|| self.take_id());
        self.shape.answer_to(&mut v, request, own);
        Ok(v)
    }

    /// Remember the trace of a request the suite sends as raw bytes (a probe), when the
    /// contract accepts them: see [`Session::serves`].
    fn remember(&mut self, cx: &Ctx, bytes: &[u8]) {
        if let Ok(m) = cx.wire.decode(&self.shape.channel, &cx.role, bytes, None)
            && let (Some(id), Some(trace)) = (m.id, m.trace)
        {
            self.traces.insert(id.to_string(), trace);
        }
    }

    /// Whether `got` is a request the implementation makes to serve one of `ids`: it
    /// carries that request's trace id (the kernel core's programs.index on the trace of
    /// the command it launches a program for).
    fn serves(&self, ids: &[Value], got: &Got) -> bool {
        let trace = got.ok().and_then(|m| m.trace.as_deref());
        trace.is_some_and(|t| {
            ids.iter()
                .any(|id| self.traces.get(&id.to_string()).is_some_and(|x| x == t))
        })
    }

    /// Whether `got` is one of the requests in [`Session::keeps`].
    fn keeps_alive(&self, got: &Got) -> bool {
        got.ok()
            .and_then(|m| m.method.as_ref())
            .is_some_and(|m| self.keeps.contains(m))
    }

    /// Answer `got` if it is a request of the implementation's the played party serves:
    /// a ping while the suite expects the next handshake message, or a request the
    /// implementation makes to serve one of the suite's ([`Session::serves`]), or any on a
    /// session that serves all. A request that comes otherwise stays unanswered, so the
    /// implementation's own work (a rukh command awaiting its rukh.call) does not move the
    /// session on between the checks that share it. Whether it answered.
    async fn respond(&mut self, cx: &Ctx, got: &Got) -> Result<bool, Failure> {
        let Some(m) = got.ok().filter(|m| m.kind == Kind::Request) else {
            return Ok(false);
        };
        let (Some(method), Some(_)) = (m.method.clone(), m.id.as_ref()) else {
            return Ok(false);
        };
        if example_of(cx.wire.contract(), &method, Part::Result, &cx.role).is_none() {
            return Ok(false);
        }
        self.reply(cx, &method, &m.value.clone()).await?;
        Ok(true)
    }
}

/// Write the session's value for each example value `aliases` names, throughout `v`.
fn dealias(aliases: &[(Value, Value)], v: &mut Value) {
    if let Some((_, to)) = aliases.iter().find(|(from, _)| from == v) {
        *v = to.clone();
        return;
    }
    match v {
        Value::Array(a) => a.iter_mut().for_each(|x| dealias(aliases, x)),
        Value::Object(o) => o.values_mut().for_each(|x| dealias(aliases, x)),
        _ => {}
    }
}

/// Give `answer` (a result example) the request's own value of each member the contract's
/// example pair echoes: a result member equal to the call example's params member of the
/// same name (rukh's initialize confirms the session it was given).
fn echoed(shape: &Shape, answer: &mut Value, call: Option<&Value>, request: &Value) {
    let params = shape.params_pointer();
    let Some(example) = call.and_then(|c| c.pointer(params)) else {
        return;
    };
    let result = answer.pointer_mut(shape.result_pointer());
    let Some(result) = result.and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in result.iter_mut() {
        if example.get(k) == Some(v)
            && let Some(actual) = request.pointer(&join(params, [k]))
        {
            *v = actual.clone();
        }
    }
}

/// Answers kept for ids a batch covered ([`Session::covered`]).
const COVERED_MAX: usize = 256;

/// Unclaimed messages kept per wait.
const UNCLAIMED: usize = 8;

/// How late past a time the contract gives (a frame deadline, a clock, a redial's window)
/// the implementation may act, on a loaded machine.
const LATE: std::time::Duration = std::time::Duration::from_millis(2500);

/// How long the suite listens after its calls for what they set off (a stream's chunks, a
/// task's events): the messages and capabilities checks.
const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// How long the handshake check watches, before each step of the suite's own, for a
/// message the implementation should have waited with.
const PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// An error answer must carry a code the contract knows.
fn known_code(
    c: &Contract,
    shape: &Shape,
    m: &contract::wire::Message,
    raw: &[u8],
    what: &str,
) -> Result<(), Failure> {
    if m.kind != Kind::Error {
        return Ok(());
    }
    let code = shape.error_code(&m.value).cloned().unwrap_or(Value::Null);
    if c.knows_error(m.method.as_deref(), &code) {
        return Ok(());
    }
    let reason =
        format!("the answer to {what}: error code {code} is not in the contract's catalog");
    Err(Failure::new(reason).with("the answer", raw))
}

fn expect_code(shape: &Shape, got: &Value, want: &Value, what: &str) -> Result<Verdict, Failure> {
    match shape.error_code(got) {
        Some(code) if code == want => pass(format!("{what}: error {code}")),
        _ => Err(Failure::new(format!("{what}: expected error {want}"))
            .with("the answer", got.to_string().as_bytes())),
    }
}

/// A fresh session taken through the contract's handshake, for a check that plays on
/// from there, every message judged by the policy engine from the start
/// (`Peer::judge`); `Ok(Err(verdict))` where the handshake did not get there (its own
/// check reports why).
async fn handshaken(cx: &mut Ctx) -> Result<Result<Session, Verdict>, Failure> {
    let plan = plan_of(cx);
    let mut s = Session::open(cx).await?;
    s.peer.judge();
    match s.handshake(cx, &plan).await {
        Ok(()) => Ok(Ok(s)),
        Err(f) => plan.unreached(f).map(Err),
    }
}

fn plan_of(cx: &Ctx) -> Plan {
    Plan::new(cx.wire.contract(), &cx.role)
}

fn handshake(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let plan = plan_of(cx);
        let opened = Session::open(cx).await;
        // A session that does not open is this check's to report.
        let mut s = opened.map_err(|f| Failure {
            reported_by: None,
            ..f
        })?;
        s.patient = true;
        s.handshake(cx, &plan).await?;
        s.patient = false;
        s.keep(cx);
        pass(format!(
            "reached {} in {} steps: {:?}",
            plan.target,
            plan.steps.len(),
            plan.steps
        ))
    })
}

fn call(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let method = cx.subject.clone().unwrap_or_default();
        let plan = plan_of(cx);
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let id = s.send(cx, &method).await?.unwrap_or(Value::Null);
        let started = Instant::now();
        let by = &cx.wire.contract().methods[&method].answered_by;
        let got = match s.answer(cx, &id, &method).await {
            // A one-way message's answers are best-effort: one that comes must be valid.
            Err(f) if !by.is_empty() && s.timed_out => {
                return crate::skip(format!(
                    "no {} came, and the contract does not require one: {}",
                    by.join(" or "),
                    f.why
                ));
            }
            r => r?,
        };
        if let Some(want) = cx.wire.contract().only_error(&method) {
            let v = expect_code(&s.shape, &got, want, &method)?;
            if plan.stays(cx.wire.contract(), &method) {
                s.keep(cx);
            }
            return Ok(v);
        }
        inherits_trace(cx.wire.contract(), &s, &id, &got)?;
        let refused = s.shape.error_code(&got).is_some();
        if plan.stays(cx.wire.contract(), &method) {
            s.keep(cx);
        }
        let how = if refused {
            "an error the contract knows"
        } else {
            "a valid result"
        };
        pass(format!("{how} in {:?}", started.elapsed()))
    })
}

/// Where the contract's answers inherit their request's trace id (`trace.answersInherit`),
/// `answer` to request `id` carries the one the suite sent (an answer with none breaks
/// the envelope, which the messages check judges).
fn inherits_trace(c: &Contract, s: &Session, id: &Value, answer: &Value) -> Result<(), Failure> {
    let Some(t) = c.trace.as_ref().filter(|t| t.answers_inherit) else {
        return Ok(());
    };
    let (Some(sent), Some(got)) = (s.traces.get(&id.to_string()), answer.pointer(&t.path)) else {
        return Ok(());
    };
    if got.as_str() == Some(sent.as_str()) {
        return Ok(());
    }
    let why = format!(
        "the answer carries trace {got} at {}, not the {sent:?} of what it answers (/trace/answersInherit: {})",
        t.path, t.seed
    );
    let raw = serde_json::to_vec(answer).unwrap_or_default();
    Err(Failure::new(why).with("the answer", &raw))
}

fn out_of_place(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let name = cx.subject.clone().unwrap_or_default();
        let c = cx.wire.contract().clone();
        let (_, sm, method) = out_of_place_probes(&c, &cx.role)
            .into_iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(|| Failure::new(format!("suite bug: no probe for {name}")))?;
        let action = sm
            .out_of_place
            .clone()
            .ok_or_else(|| Failure::new(format!("suite bug: {name} has no outOfPlace")))?;
        let want = action.code.clone().unwrap_or_default();
        let mut s = Session::open(cx).await?;
        let first = sm.opened(&s.shape.channel);
        let what = format!("{method} in `{first}`");
        if action.action == ActionKind::ReplyError {
            let id = s.send(cx, &method).await?.unwrap_or(Value::Null);
            let got = s.answer(cx, &id, &method).await?;
            return expect_code(&s.shape, &got, &want, &what);
        }
        // The channel ends (the session machine's `fail`): nothing may serve the request.
        let v = s.message(cx, &method)?;
        let id = s.send_value(&v).await?.unwrap_or(Value::Null);
        let b = probes::Built::expecting(
            v.to_string().into_bytes(),
            vec![id, Value::Null],
            probes::Reaction::Rule {
                action: action.action,
                code: action.code,
            },
        );
        probes::judged(s, cx, &b, &what, &[]).await
    })
}

/// A request the machine does not allow in a state the walk passes, sent once the walk
/// is there, gets the machine's outOfPlace error.
fn out_of_place_at(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let state = cx.subject.clone().unwrap_or_default();
        let c = cx.wire.contract().clone();
        let plan = plan_of(cx);
        let (_, method) = out_of_place_on_the_way(&c, &plan)
            .into_iter()
            .find(|(s, _)| *s == state)
            .ok_or_else(|| Failure::new(format!("suite bug: no probe in {state}")))?;
        let want = plan
            .machine
            .as_ref()
            .and_then(|(_, sm)| sm.out_of_place.as_ref()?.code.clone())
            .unwrap_or_default();
        let n = plan.states.iter().position(|s| *s == state).unwrap_or(0);
        let mut s = Session::open(cx).await?;
        if let Err(f) = s.walk_to(cx, &plan, n).await {
            return plan.unreached(f);
        }
        let id = s.send(cx, &method).await?.unwrap_or(Value::Null);
        let got = s.answer(cx, &id, &method).await?;
        expect_code(&s.shape, &got, &want, &format!("{method} in `{state}`"))
    })
}
