//! The lifecycle walk the derived suite plays: the typed machine a session follows, the
//! state that allows the played party the most, the steps there (what the suite sends,
//! awaits, expects or answers), and what the machine allows on the way; with the
//! examples and ids the suite writes its messages from.

use std::collections::{HashMap, VecDeque};

use contract::Contract;
use contract::model::{Action, ActionKind, Kind, Part, Scope, StateMachine, Trigger};
use serde_json::{Value, json};

use super::shape::Shape;
use crate::Failure;
use crate::Verdict;

/// An action the suite can check: a reply with a code.
pub(super) fn reply_error(a: Option<&Action>) -> Option<&Action> {
    a.filter(|a| a.action == ActionKind::ReplyError && a.code.is_some())
}

/// `a`, when the suite can see it taken on a message sent first: an error with a code,
/// or the channel's end (`fail`, `close`, `drop-connection`). An `ignore` shows only by
/// a next request being served, which a machine that ignores misplaced messages would
/// ignore as well.
pub(super) fn seen_first(a: Option<&Action>) -> Option<&Action> {
    a.filter(|a| {
        reply_error(Some(a)).is_some()
            || !matches!(a.action, ActionKind::ReplyError | ActionKind::Ignore)
    })
}

/// The channel the suite speaks on.
pub(super) fn channel(c: &Contract) -> String {
    Shape::of(c).map(|s| s.channel).unwrap_or_default()
}

/// One step of the handshake. The played party sends its example of a method, or awaits
/// the answer to it; or it expects the other party's message of a method, or answers the
/// request it expected with its own result example (the answering party's walk).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    Send(String),
    Await(String),
    Expect(String),
    Answer(String),
}

/// The lifecycle walk for one party.
#[derive(Clone)]
pub(super) struct Plan {
    pub machine: Option<(String, StateMachine)>,
    pub target: String,
    pub steps: Vec<Step>,
    /// The state the machine is in before each step.
    pub states: Vec<String>,
    pub role: String,
}

impl Plan {
    pub fn new(c: &Contract, role: &str) -> Plan {
        let machine = c
            .state_machines
            .iter()
            .find(|(_, sm)| lifecycle(sm))
            .map(|(n, sm)| (n.clone(), sm.clone()));
        let (target, path) = match &machine {
            Some((_, sm)) => walk(c, sm, role),
            None => (String::new(), Vec::new()),
        };
        let (states, steps) = path.into_iter().unzip();
        Plan {
            machine,
            target,
            steps,
            states,
            role: role.to_string(),
        }
    }

    /// The requests (and the one-way messages answered by others, `answeredBy`) the party
    /// may send once the handshake is done, in contract order.
    pub fn callable(&self, c: &Contract) -> Vec<String> {
        // What the handshake sent (or asked, for an answer it awaited) is not called again.
        let sent: Vec<&String> = self
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Send(m) | Step::Await(m) => Some(m),
                Step::Expect(_) | Step::Answer(_) => None,
            })
            .collect();
        c.methods
            .iter()
            .filter(|(_, m)| answered(m) && m.from.contains(&self.role))
            .filter(|(n, _)| !sent.contains(n) && example(c, n, &self.role).is_some())
            .filter(|(n, _)| self.allowed(c, n))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Whether the machine stays where the handshake took it when `method` is sent and
    /// answered (LSP's `shutdown` moves it on its answer).
    pub fn stays(&self, c: &Contract, method: &str) -> bool {
        let Some((_, sm)) = &self.machine else {
            return true;
        };
        !sm.transitions
            .iter()
            .filter(|t| t.from == self.target && t.to != self.target)
            .any(|t| {
                matches!(step_of(c, t.trigger.as_ref(), &self.role),
                Some(Step::Send(m) | Step::Await(m)) if m == method)
            })
    }

    /// The callable requests that leave the machine where it is: what the checks sharing a
    /// session send.
    pub fn staying(&self, c: &Contract) -> Vec<String> {
        let mut all = self.callable(c);
        all.retain(|m| self.stays(c, m));
        all
    }

    /// The walk taken on from its target, by the played party's steps, to the nearest of
    /// `states` (not past a terminal one): rukh's extension answering the invoke, into
    /// `Completing`. The walk itself when its target is among them.
    pub fn onward(&self, c: &Contract, states: &[String]) -> Option<Plan> {
        let (_, sm) = self.machine.as_ref()?;
        let (order, mut paths) = reachable(c, sm, &self.target, &self.role);
        let to = order.into_iter().find(|s| states.contains(s))?;
        let mut plan = self.clone();
        for (from, step) in paths.remove(&to).unwrap_or_default() {
            plan.states.push(from);
            plan.steps.push(step);
        }
        plan.target = to;
        Some(plan)
    }

    /// The walk to the first of `states` it passes on the way to its target (rukh's
    /// `Initializing`, where the extension's answer to initialize is due), else taken on
    /// to the nearest of them ([`Plan::onward`]).
    pub fn reaching(&self, c: &Contract, states: &[String]) -> Option<Plan> {
        let Some(i) = self.states.iter().position(|s| states.contains(s)) else {
            return self.onward(c, states);
        };
        let mut plan = self.clone();
        plan.target = plan.states[i].clone();
        plan.steps.truncate(i);
        plan.states.truncate(i);
        Some(plan)
    }

    /// What a check that needs the handshake done makes of its failure: a skip, since the
    /// handshake check reports it (one broken rule, one failing check); a failure when there
    /// is no handshake check.
    pub fn unreached(&self, f: Failure) -> Result<Verdict, Failure> {
        match &self.machine {
            Some(_) => crate::skip(format!(
                "the handshake did not reach `{}` (its own check reports why): {}",
                self.target, f.why
            )),
            None => Err(f),
        }
    }

    /// A failure when the implementation's `call` is one the machine does not allow in
    /// `state`.
    pub fn out_of_place(
        &self,
        c: &Contract,
        call: Option<&contract::wire::Message>,
        state: &str,
    ) -> Option<Failure> {
        let (name, sm) = self.machine.as_ref()?;
        let method = call?.method.as_deref()?;
        let here = match sm.allows.get(method) {
            Some(states) => states.iter().any(|s| s == state),
            // A method the machine's transitions govern belongs where one of them leaves.
            None => {
                !governed(c, sm, method)
                    || sm.transitions.iter().filter(|t| t.from == state).any(|t| {
                        step_of(c, t.trigger.as_ref(), &self.role)
                            == Some(Step::Expect(method.to_string()))
                    })
            }
        };
        (!here).then(|| {
            Failure::new(format!(
                "the implementation sent {method} in `{state}`, where the {name} machine does not allow it"
            ))
        })
    }

    /// The steps of the transitions that keep the machine in the walk's target.
    fn self_loops(&self, c: &Contract) -> Vec<Step> {
        let Some((_, sm)) = &self.machine else {
            return Vec::new();
        };
        sm.transitions
            .iter()
            .filter(|t| t.from == self.target && t.to == self.target)
            .filter_map(|t| step_of(c, t.trigger.as_ref(), &self.role))
            .collect()
    }

    /// The other party's requests whose transitions keep the machine in the walk's target.
    pub fn keeps(&self, c: &Contract) -> Vec<String> {
        let request = |m: &String| c.methods.get(m).is_some_and(|x| x.kind == Kind::Request);
        self.self_loops(c)
            .into_iter()
            .filter_map(|step| match step {
                Step::Expect(m) if request(&m) => Some(m),
                _ => None,
            })
            .collect()
    }

    pub fn allowed(&self, c: &Contract, method: &str) -> bool {
        let Some((_, sm)) = &self.machine else {
            return true;
        };
        match sm.allows.get(method) {
            Some(states) if states.contains(&self.target) => true,
            // A transition that keeps the machine there allows it too, as the engine
            // judges (toolchannel's heartbeat in `running`).
            Some(_) => self.self_loops(c).contains(&Step::Send(method.to_string())),
            None => !governed(c, sm, method) || leaves(c, sm, &self.target, method, &self.role),
        }
    }
}

/// A typed machine one session follows.
pub(super) fn lifecycle(sm: &StateMachine) -> bool {
    sm.transitions.iter().any(|t| t.trigger.is_some())
        && matches!(
            sm.scope,
            None | Some(Scope::Connection { .. } | Scope::Session)
        )
}

pub(super) fn governed(c: &Contract, sm: &StateMachine, method: &str) -> bool {
    sm.allows.contains_key(method)
        || sm.transitions.iter().any(|t| {
            matches!(&t.trigger, Some(Trigger::Message { method: Some(m), kind, .. })
                if m == method && kind.is_none_or(|k| c.methods.get(m).is_some_and(|x| x.kind == k)))
        })
}

/// Whether `role` sending `method` moves `sm` out of `state`.
pub(super) fn leaves(
    c: &Contract,
    sm: &StateMachine,
    state: &str,
    method: &str,
    role: &str,
) -> bool {
    sm.transitions
        .iter()
        .filter(|t| t.from == state)
        .any(|t| step_of(c, t.trigger.as_ref(), role) == Some(Step::Send(method.to_string())))
}

/// What the suite playing `role` does to fire `t`, if it can.
pub(super) fn step_of(c: &Contract, t: Option<&Trigger>, role: &str) -> Option<Step> {
    let Some(Trigger::Message {
        method: Some(method),
        kind,
        from,
        matches,
    }) = t
    else {
        return None;
    };
    let m = c.methods.get(method)?;
    if !matches.is_empty() {
        return None;
    }
    let sender = from.as_deref();
    let (mine, theirs) = (
        m.from.iter().any(|p| p == role),
        m.from.iter().any(|p| p != role),
    );
    let step = match kind {
        None | Some(Kind::Request | Kind::Notification | Kind::Event)
            if kind.is_none_or(|k| k == m.kind) =>
        {
            match sender {
                None if mine => Step::Send,
                Some(p) if p == role && mine => Step::Send,
                None if theirs => Step::Expect,
                Some(p) if p != role && theirs => Step::Expect,
                _ => return None,
            }
        }
        Some(Kind::Response) if sender.is_none_or(|p| p != role) => Step::Await,
        Some(Kind::Response) => Step::Answer,
        _ => return None,
    };
    Some(step(method.clone()))
}

/// The state allowing `role` the most methods (the furthest on a tie) and the steps there,
/// each with the state it starts from.
pub(super) fn walk(c: &Contract, sm: &StateMachine, role: &str) -> (String, Path) {
    // The suite's connection is open before its first step.
    let start = sm.opened(&channel(c));
    let (order, mut paths) = reachable(c, sm, start, role);
    // On a tie the furthest state wins (max_by_key keeps the last): rukh's `Running`,
    // past the invoke, where the core's requests come. A machine that allows nothing by
    // name (xsession's inboxConnection) is walked to its furthest state.
    let best = match sm.allows.is_empty() {
        true => order.last(),
        false => order.iter().max_by_key(|s| allowed_in(sm, s)),
    };
    let best = best.cloned().unwrap_or_default();
    let mut steps = Vec::new();
    for (state, step) in paths.remove(&best).unwrap_or_default() {
        steps.extend(only_here(c, sm, &state, role, &step).map(|s| (state.clone(), s)));
        steps.push((state, step));
    }
    (best, steps)
}

/// Steps to a state, each with the state it starts from.
type Path = Vec<(String, Step)>;

/// The states `role` can take `sm` to from `from` by its own steps, not past a terminal
/// one, nearest first (`from` itself first), each with the steps there and the state each
/// starts from.
fn reachable(
    c: &Contract,
    sm: &StateMachine,
    from: &str,
    role: &str,
) -> (Vec<String>, HashMap<String, Path>) {
    let mut paths = HashMap::from([(from.to_string(), Vec::new())]);
    let mut order = vec![from.to_string()];
    let mut queue = VecDeque::from([from.to_string()]);
    while let Some(state) = queue.pop_front() {
        for t in sm.transitions.iter().filter(|t| t.from == state) {
            let Some(step) = step_of(c, t.trigger.as_ref(), role) else {
                continue;
            };
            if paths.contains_key(&t.to) || sm.terminal.contains(&t.to) {
                continue;
            }
            let mut path = paths[&state].clone();
            path.push((state.clone(), step));
            paths.insert(t.to.clone(), path);
            order.push(t.to.clone());
            queue.push_back(t.to.clone());
        }
    }
    (order, paths)
}

/// How many methods `sm` allows in `state`: those its `allows` lists there, and those
/// whose transitions leave it (or keep it there: a heartbeat in a running session).
pub(super) fn allowed_in(sm: &StateMachine, state: &str) -> usize {
    let mut methods: Vec<&str> = sm
        .allows
        .iter()
        .filter(|(_, states)| states.iter().any(|s| s == state))
        .map(|(m, _)| m.as_str())
        .collect();
    for t in sm.transitions.iter().filter(|t| t.from == state) {
        if let Some(Trigger::Message {
            method: Some(m), ..
        }) = &t.trigger
            && !methods.contains(&m.as_str())
        {
            methods.push(m);
        }
    }
    methods.len()
}

/// The requests `sm` allows only in `state`, where the walk passes on its way out by
/// `next` (toolchannel's initialize, which the host sends in `handshaking` while the
/// machine waits for the worker's notification): sent and awaited by the party that
/// sends them, answered by the other.
pub(super) fn only_here(
    c: &Contract,
    sm: &StateMachine,
    state: &str,
    role: &str,
    next: &Step,
) -> impl Iterator<Item = Step> {
    let steps: Vec<Step> = sm
        .allows
        .iter()
        .filter(|(_, states)| states.len() == 1 && states[0] == state)
        .filter_map(|(m, _)| {
            let method = c.methods.get(m).filter(|x| x.kind == Kind::Request)?;
            let next_too = matches!(next,
                Step::Send(n) | Step::Await(n) | Step::Expect(n) | Step::Answer(n) if n == m);
            // The suite needs its own example: a call to send, or a result to answer with.
            let (step, part) = match method.from.iter().any(|p| p == role) {
                true => (Step::Await(m.clone()), Part::Call),
                false => (Step::Answer(m.clone()), Part::Result),
            };
            (!next_too && example_of(c, m, part, role).is_some()).then_some(step)
        })
        .collect();
    steps.into_iter()
}

/// The probes of machines with an `outOfPlace` error: (machine, its definition, a request
/// of `role` it does not allow once the connection opened).
pub(super) fn out_of_place_probes<'c>(
    c: &'c Contract,
    role: &str,
) -> Vec<(String, &'c StateMachine, String)> {
    c.state_machines
        .iter()
        .filter(|(_, sm)| lifecycle(sm) && seen_first(sm.out_of_place.as_ref()).is_some())
        .filter_map(|(name, sm)| {
            let method = misplaced(c, sm, sm.opened(&channel(c)), role, None)?;
            Some((name.clone(), sm, method))
        })
        .collect()
}

/// A request of `role` (with an example) that `sm` does not allow in `state` and that does
/// not leave it; preferring one `later` allows (a call made too early, toolchannel's
/// tools/call before the tool list) to one never allowed there.
pub(super) fn misplaced(
    c: &Contract,
    sm: &StateMachine,
    state: &str,
    role: &str,
    later: Option<&str>,
) -> Option<String> {
    let candidates: Vec<&String> = sm
        .allows
        .iter()
        .filter(|(m, states)| {
            let request = c
                .methods
                .get(*m)
                .is_some_and(|x| x.kind == Kind::Request && x.from.iter().any(|p| p == role));
            request
                && !states.iter().any(|s| s == state)
                && !leaves(c, sm, state, m, role)
                && example(c, m, role).is_some()
        })
        .map(|(m, _)| m)
        .collect();
    let early = |m: &&&String| later.is_some_and(|l| sm.allows[m.as_str()].iter().any(|s| s == l));
    candidates
        .iter()
        .find(early)
        .or(candidates.first())
        .map(|m| (*m).clone())
}

/// Out-of-place probes in the states the walk passes after the first and before its
/// target: (state, the request `role` sends there). Only where the machine waits for the
/// suite (its next step is the suite's to take): where it waits for the implementation,
/// the implementation may have moved on before the probe reaches it.
pub(super) fn out_of_place_on_the_way(c: &Contract, plan: &Plan) -> Vec<(String, String)> {
    let Some((_, sm)) = &plan.machine else {
        return Vec::new();
    };
    if reply_error(sm.out_of_place.as_ref()).is_none() {
        return Vec::new();
    }
    let mut seen = vec![sm.opened(&channel(c)).to_string(), plan.target.clone()];
    let mut out = Vec::new();
    for (n, state) in plan.states.iter().enumerate() {
        let in_flight = |m: &String| n > 0 && plan.steps[n - 1] == Step::Send(m.clone());
        let waits_for_suite = match &plan.steps[n] {
            Step::Send(_) | Step::Answer(_) => true,
            Step::Await(m) => !in_flight(m),
            Step::Expect(_) => false,
        };
        if seen.contains(state) || !waits_for_suite {
            continue;
        }
        seen.push(state.clone());
        if let Some(m) = misplaced(c, sm, state, &plan.role, Some(&plan.target)) {
            out.push((state.clone(), m));
        }
    }
    out
}

/// `role`'s first call example of `method` (any call example when none names a sender).
pub(crate) fn example(c: &Contract, method: &str, role: &str) -> Option<Value> {
    example_of(c, method, Part::Call, role)
}

/// `role`'s first `part` example of `method` (one naming no sender when none names it).
pub(crate) fn example_of(c: &Contract, method: &str, part: Part, role: &str) -> Option<Value> {
    let m = c.methods.get(method)?;
    let of = || m.examples.iter().filter(|e| e.part == part);
    of().find(|e| e.from.as_deref() == Some(role))
        .or_else(|| of().find(|e| e.from.is_none()))
        .map(|e| e.message.clone())
}

/// What the party's ids start with: the prefix its id rule declares, else what its
/// examples' string ids have before their number (`s-0001`: `s-`); `None`: number ids.
pub(super) fn id_prefix(c: &Contract, role: &str) -> Option<String> {
    if let Some(p) = c
        .parties
        .get(role)?
        .ids
        .as_ref()
        .and_then(|i| i.prefix.clone())
    {
        return Some(p);
    }
    let shape = Shape::of(c)?;
    let sent = c.methods.values().flat_map(|m| &m.examples);
    // A call's id is the party's own; an answer's is the asker's.
    let mut sent = sent.filter(|e| e.from.as_deref() == Some(role) && e.part == Part::Call);
    let id = sent.find_map(|e| shape.id(&e.message)?.as_str())?;
    Some(
        id.trim_end_matches(|ch: char| ch.is_ascii_digit())
            .to_string(),
    )
}

/// Request id number `n`, under the party's id prefix when it has one.
pub(super) fn id_value(prefix: Option<&str>, n: u64) -> Value {
    match prefix {
        Some(p) => json!(format!("{p}{n}")),
        None => json!(n),
    }
}

/// The call examples of `methods` (requests) with `id`.
pub(super) fn carriers(c: &Contract, role: &str, methods: &[String], id: &Value) -> Vec<Value> {
    let Some(shape) = Shape::of(c) else {
        return Vec::new();
    };
    methods
        .iter()
        .filter_map(|m| example(c, m, role))
        .filter(|v| shape.id(v).is_some())
        .map(|mut v| {
            shape.set_id(&mut v, id.clone());
            v
        })
        .collect()
}

/// Whether `m` gets answers: a request, or a one-way message with `answeredBy`.
pub(super) fn answered(m: &contract::model::Method) -> bool {
    m.kind == Kind::Request || !m.answered_by.is_empty()
}
