//! Lints of the behaviour a contract declares per party and per data channel: request-id
//! rules (their pending limit, and every example id carrying the party's prefix),
//! capability declarations (a method and pointer some example carries) and credit (a
//! binary channel with the key field, a grant whose examples carry key and amount) and
//! claims (a claiming message whose examples carry the key, claimant and attempt) and
//! cues (a method its party sends, answered by methods the other party sends) and a
//! channel's upgrade refusals (a WebSocket channel, statuses an `http-status` table holds)
//! and its redial (a dialer, a deadline, close codes a `close-code` table holds) and
//! agreements (a judging party, places their methods' examples carry).

use serde_json::Value;

use super::{CodeIndex, Cx, Lint, carried};
use crate::model::{
    ActionKind, Agreement, AgreementRule, Binding, Carried, Channel, Claim, CodeKind, Contract,
    Cue, Framing, Kind, LimitKind, Method, Negotiation, Part, Redial, RedialAfter, Trigger,
    Upgrade,
};
use crate::pointer::join;

impl Cx<'_> {
    /// `ids` and `declares` of every party, and every `credit` entry.
    pub(super) fn party_behaviour(&mut self, c: &Contract, idx: &CodeIndex) {
        for (pname, p) in &c.parties {
            let base = join("/parties", [pname]);
            if let Some(ids) = &p.ids {
                if let Some(l) = &ids.max_pending {
                    self.count_limit(c, &join(&base, ["ids", "maxPending"]), l);
                }
                if let Some(a) = &ids.action {
                    self.action_names(c, idx, &join(&base, ["ids", "action"]), a);
                }
                if let Some(prefix) = &ids.prefix {
                    self.ids_prefixed(c, pname, prefix);
                }
            }
            if let Some(d) = &p.declares {
                let at = join(&base, ["declares"]);
                let (m_at, p_at) = (join(&at, ["method"]), join(&at, ["pointer"]));
                self.carried_by(c, (&m_at, &p_at), &d.method, d.part, &d.pointer);
                for (key, a) in [("unknown", &d.unknown), ("undeclared", &d.undeclared)] {
                    if let Some(a) = a {
                        self.action_names(c, idx, &join(&at, [key]), a);
                    }
                }
            }
        }
        for (name, cr) in &c.credit {
            self.credit(c, idx, name, cr);
        }
        for (name, cl) in &c.claims {
            self.claim(c, idx, name, cl);
        }
        for (name, cue) in &c.cues {
            self.cue(c, name, cue);
        }
        for (name, a) in &c.agreements {
            self.agreement(c, idx, name, a);
        }
        for (name, m) in &c.methods {
            self.answered_by(c, name, m);
        }
        for (name, ch) in &c.channels {
            if let Some(u) = &ch.upgrade {
                self.upgrade(c, name, ch, u);
            }
            if let Some(r) = &ch.redial {
                self.redial(c, name, ch, r);
            }
        }
        for (i, v) in c.versions.iter().enumerate() {
            if let Some(n) = &v.negotiation {
                self.negotiation(
                    c,
                    idx,
                    &join("/versions", [&i.to_string(), "negotiation"]),
                    n,
                );
            }
            if let Some(cv) = &v.carried {
                self.carried(c, idx, &join("/versions", [&i.to_string(), "carried"]), cv);
            }
        }
    }

    /// An upgrade belongs to a channel carried over `websocket`; each refusal is a status
    /// of an `http-status` table; a subprotocol refusal has subprotocols to list.
    fn upgrade(&mut self, c: &Contract, name: &str, ch: &Channel, u: &Upgrade) {
        let at = join("/channels", [name, "upgrade"]);
        if !ch.transports.iter().any(|t| t == "websocket") {
            let why = "an upgrade needs the channel carried over `websocket` (its `transports`)";
            self.push(Lint::NameRef, at.clone(), why);
        }
        let statuses = |s: u16| c.code_of_kind(CodeKind::HttpStatus, s).is_some();
        for (field, r) in [("bearer", &u.bearer), ("subprotocol", &u.subprotocol)] {
            if let Some(r) = r.as_ref().filter(|r| !statuses(r.refused)) {
                let why = format!(
                    "HTTP status {} is in no `http-status` code table",
                    r.refused
                );
                self.push(Lint::NameRef, join(&at, [field, "refused"]), why);
            }
        }
        if u.subprotocol.is_some() && ch.framing.subprotocols().is_empty() {
            let why =
                "a subprotocol refusal needs a `websocket-text` framing listing `subprotocols`";
            self.push(Lint::NameRef, join(&at, ["subprotocol"]), why);
        }
    }

    /// A redial belongs to a channel with a dialer, comes within a deadline, and comes back
    /// after a close code a `close-code` table holds (on a channel that has close frames).
    fn redial(&mut self, c: &Contract, name: &str, ch: &Channel, r: &Redial) {
        let at = join("/channels", [name, "redial"]);
        if ch.connects.is_none() {
            let why = "a redial needs the channel's dialer (its `connects`)";
            self.push(Lint::NameRef, at.clone(), why);
        }
        match c.limits.get(&r.within) {
            None => {
                let why = format!("unknown limit {:?}", r.within);
                self.push(Lint::NameRef, join(&at, ["within"]), why);
            }
            Some(l) if l.kind != LimitKind::Deadline => {
                let why = format!("limit {:?} is not a deadline", r.within);
                self.push(Lint::NameRef, join(&at, ["within"]), why);
            }
            Some(_) => {}
        }
        if r.after.is_empty() {
            let why = "a redial needs an end it comes back after (`after`)";
            self.push(Lint::NameRef, join(&at, ["after"]), why);
        }
        let websocket = ch.transports.iter().any(|t| t == "websocket");
        for (i, after) in r.after.iter().enumerate() {
            let RedialAfter::Close(code) = after else {
                continue;
            };
            let i_at = join(&at, ["after", &i.to_string()]);
            if !websocket {
                let why = "a close code needs the channel carried over `websocket`";
                self.push(Lint::NameRef, i_at.clone(), why);
            }
            let known = c.code_of_kind(CodeKind::CloseCode, *code).is_some();
            if !known {
                let why = format!("close code {code} is in no `close-code` table");
                self.push(Lint::NameRef, i_at, why);
            }
        }
    }

    /// A carried version is at its pointer in some example, and its reaction names codes
    /// the contract holds.
    fn carried(&mut self, c: &Contract, idx: &CodeIndex, at: &str, cv: &Carried) {
        if !carried(c.methods.values(), None, &cv.pointer) {
            let why = format!("no example carries a version at {}", cv.pointer);
            self.push(Lint::NameRef, join(at, ["pointer"]), why);
        }
        self.action_names(c, idx, &join(at, ["newer"]), &cv.newer);
    }

    /// A negotiation's offer is a request whose examples carry the offered versions, and
    /// whose results carry the choice (and the chooser's own versions, where named).
    fn negotiation(&mut self, c: &Contract, idx: &CodeIndex, at: &str, n: &Negotiation) {
        let m_at = join(at, ["offer"]);
        if c.methods
            .get(&n.offer)
            .is_some_and(|m| m.kind != Kind::Request)
        {
            let why = format!("{} is not a request: nothing answers the offer", n.offer);
            return self.push(Lint::NameRef, m_at, why);
        }
        let slots = [
            (Part::Call, "offered", &n.offered),
            (Part::Result, "chosen", &n.chosen),
        ];
        let own = n.own.as_ref().map(|o| (Part::Result, "own", o));
        for (part, field, pointer) in slots.into_iter().chain(own) {
            let p_at = join(at, [field]);
            self.carried_by(c, (&m_at, &p_at), &n.offer, part, pointer);
        }
        if let Some(a) = &n.none {
            self.action_names(c, idx, &join(at, ["none"]), a);
        }
        if let Some(a) = &n.refused {
            self.action_names(c, idx, &join(at, ["refused"]), a);
        }
        if n.names_both
            && !n
                .refused
                .as_ref()
                .is_some_and(|a| a.action == ActionKind::Close)
        {
            let why =
                "namesBoth needs a `refused` reaction that closes: the close reason names both";
            self.push(Lint::NameRef, join(at, ["namesBoth"]), why.to_string());
        }
    }

    /// A cue is a method its party sends, with a call example to send; what it expects and
    /// what ends it are methods another party sends; its `set` pointers are pointers.
    /// `answeredBy`: on a one-way message of a channel whose binding names a correlation,
    /// each answer a method another party sends on the same channel.
    fn answered_by(&mut self, c: &Contract, name: &str, m: &Method) {
        if m.answered_by.is_empty() {
            return;
        }
        let at = join("/methods", [name, "answeredBy"]);
        if m.kind == Kind::Request {
            let why = "a request's answers are its response and errors".to_string();
            self.push(Lint::NameRef, at.clone(), why);
        }
        let correlated = c
            .channels
            .get(&m.channel)
            .and_then(|ch| ch.binding.as_ref());
        let correlated = match correlated {
            Some(Binding::Tagged { correlation, .. } | Binding::Envelope { correlation, .. }) => {
                correlation.is_some()
            }
            _ => false,
        };
        if !correlated {
            let why = format!("channel {} names no correlation to carry the id", m.channel);
            self.push(Lint::NameRef, at.clone(), why);
        }
        for a in &m.answered_by {
            let ok = c.methods.get(a).is_some_and(|x| {
                x.channel == m.channel && x.from.iter().any(|f| !m.from.contains(f))
            });
            if !ok {
                let why = format!("{a:?} is no method another party sends on {}", m.channel);
                self.push(Lint::NameRef, at.clone(), why);
            }
        }
    }

    fn cue(&mut self, c: &Contract, name: &str, cue: &Cue) {
        let at = join("/cues", [name]);
        if !self.party_known(c, join(&at, ["party"]), &cue.party) {
            return;
        }
        match c.methods.get(&cue.method) {
            None => {
                let why = format!("no method {:?}", cue.method);
                self.push(Lint::NameRef, join(&at, ["method"]), why);
            }
            Some(m) if !m.from.contains(&cue.party) => {
                let why = format!("{} does not send {}", cue.party, cue.method);
                self.push(Lint::NameRef, join(&at, ["method"]), why);
            }
            Some(_) => {}
        }
        if cue.until.is_empty() {
            let why = "a cue names what ends it".to_string();
            self.push(Lint::NameRef, join(&at, ["until"]), why);
        }
        let answers = (cue.expects.iter().map(|m| ("expects", m)))
            .chain(cue.until.iter().map(|m| ("until", m)));
        for (field, method) in answers {
            let others = c
                .methods
                .get(method)
                .map(|m| m.from.iter().any(|f| *f != cue.party));
            if others != Some(true) {
                let why = format!(
                    "{method:?} is no method another party than {} sends",
                    cue.party
                );
                self.push(Lint::NameRef, join(&at, [field]), why);
            }
        }
        for pointer in cue.set.keys().filter(|p| !p.starts_with('/')) {
            let why = format!("{pointer:?} is not a JSON pointer");
            self.push(Lint::NameRef, join(&at, ["set"]), why);
        }
    }

    /// A claim names a message some example of which carries its pointers, actions that
    /// exist, and a superseded action that ends the holder's connection.
    fn claim(&mut self, c: &Contract, idx: &CodeIndex, name: &str, cl: &Claim) {
        let at = join("/claims", [name]);
        let message = join(&at, ["message"]);
        self.trigger(c, idx, &message, &cl.message);
        if let Some(r) = &cl.releases {
            self.trigger(c, idx, &join(&at, ["releases"]), r);
        }
        self.action_names(c, idx, &join(&at, ["superseded"]), &cl.superseded);
        self.action_names(c, idx, &join(&at, ["refused"]), &cl.refused);
        if !matches!(
            cl.superseded.action,
            ActionKind::Close | ActionKind::DropConnection
        ) {
            let why = "a superseded holder is closed: `close` or `drop-connection`".to_string();
            self.push(Lint::NameRef, join(&at, ["superseded", "action"]), why);
        }
        let Trigger::Message {
            method: Some(method),
            kind,
            ..
        } = &cl.message
        else {
            let why = "a claim is made by one method's message".to_string();
            return self.push(Lint::NameRef, message, why);
        };
        let Some(m) = c.methods.get(method) else {
            return; // the trigger lint said so
        };
        let part = match kind.unwrap_or(m.kind) {
            Kind::Response => Part::Result,
            Kind::Error => Part::Error,
            _ => Part::Call,
        };
        let pointers = [("key", Some(&cl.key)), ("claimant", cl.claimant.as_ref())];
        let pointers = pointers
            .into_iter()
            .chain([("attempt", cl.attempt.as_ref())]);
        for (field, ptr) in pointers.filter_map(|(f, p)| Some((f, p?))) {
            let at = (&join(&message, ["method"]), &join(&at, [field]));
            self.carried_by(c, (at.0.as_str(), at.1.as_str()), method, part, ptr);
        }
    }

    /// An agreement's judge is a party, its places are carried by their methods' examples,
    /// a `lowest` has more than one statement to compare, and its version is declared.
    fn agreement(&mut self, c: &Contract, idx: &CodeIndex, name: &str, a: &Agreement) {
        let at = join("/agreements", [name]);
        self.party_known(c, join(&at, ["judge"]), &a.judge);
        self.action_names(c, idx, &join(&at, ["mismatch"]), &a.mismatch);
        let enough = match a.rule {
            AgreementRule::Same => 1,
            AgreementRule::Lowest => 2,
        };
        if a.settled.len() < enough {
            let why = format!("`{:?}` needs at least {enough} settling place(s)", a.rule);
            self.push(Lint::NameRef, join(&at, ["settled"]), why);
        }
        let places = (a.settled.iter().enumerate()).map(|(i, p)| ("settled", i, p));
        let places = places.chain(
            a.repeated
                .iter()
                .enumerate()
                .map(|(i, p)| ("repeated", i, p)),
        );
        for (field, i, p) in places {
            let here = join(&at, [field, &i.to_string()]);
            let Some(part) = p.part() else {
                let why = "a place is a method's own message, its response or its error";
                self.push(Lint::NameRef, join(&here, ["kind"]), why);
                continue;
            };
            let (m_at, p_at) = (join(&here, ["method"]), join(&here, ["pointer"]));
            self.carried_by(c, (&m_at, &p_at), &p.method, part, &p.pointer);
        }
        if let Some(v) = &a.version
            && !c.versions.iter().any(|x| &x.name == v)
        {
            let why = format!("version {v:?} is not declared in `versions`");
            self.push(Lint::NameRef, join(&at, ["version"]), why);
        }
    }

    fn count_limit(&mut self, c: &Contract, at: &str, name: &str) {
        match c.limits.get(name) {
            None => self.push(Lint::NameRef, at.into(), format!("unknown limit {name:?}")),
            Some(l) if l.kind != LimitKind::Count => self.push(
                Lint::NameRef,
                at.into(),
                format!("limit {name:?} is not a count"),
            ),
            Some(_) => {}
        }
    }

    /// Every request example this party sends has a string id with its prefix.
    fn ids_prefixed(&mut self, c: &Contract, party: &str, prefix: &str) {
        for (mname, m) in &c.methods {
            let Some(ptr) = id_pointer(c, &m.channel) else {
                continue;
            };
            if m.kind != Kind::Request {
                continue;
            }
            for (i, e) in m.examples.iter().enumerate() {
                if e.part != Part::Call || e.from.as_deref() != Some(party) {
                    continue;
                }
                let ok = e
                    .message
                    .pointer(&ptr)
                    .and_then(Value::as_str)
                    .is_some_and(|id| id.starts_with(prefix));
                if !ok {
                    self.push(
                        Lint::BadExample,
                        join("/methods", [mname, "examples", &i.to_string(), "message"]) + &ptr,
                        format!("{party}'s request ids start with {prefix:?}"),
                    );
                }
            }
        }
    }

    /// `method` exists, and some example of its `part` carries `pointer`; problems are
    /// reported at the two pointers of `at` (where the method, where the pointer is named).
    fn carried_by(
        &mut self,
        c: &Contract,
        at: (&str, &str),
        method: &str,
        part: Part,
        pointer: &str,
    ) {
        let Some(m) = c.methods.get(method) else {
            self.push(
                Lint::NameRef,
                at.0.into(),
                format!("unknown method {method:?}"),
            );
            return;
        };
        if !carried([m], Some(part), pointer) {
            let part = match part {
                Part::Call => "call",
                Part::Result => "result",
                Part::Error => "error",
            };
            self.push(
                Lint::NameRef,
                at.1.into(),
                format!("no {part} example of {method} carries {pointer}"),
            );
        }
    }

    fn credit(&mut self, c: &Contract, idx: &CodeIndex, name: &str, cr: &crate::model::Credit) {
        let at = join("/credit", [name]);
        match c.channels.get(&cr.channel).map(|ch| &ch.framing) {
            None => self.push(
                Lint::NameRef,
                join(&at, ["channel"]),
                format!("unknown channel {:?}", cr.channel),
            ),
            Some(Framing::Binary { header, .. }) => {
                if !header.iter().any(|h| h.name == cr.key) {
                    self.push(
                        Lint::NameRef,
                        join(&at, ["key"]),
                        format!("{} frames have no header field {:?}", cr.channel, cr.key),
                    );
                }
            }
            Some(_) => self.push(
                Lint::NameRef,
                join(&at, ["channel"]),
                format!(
                    "credit needs a binary channel with a key field; {} is not one",
                    cr.channel
                ),
            ),
        }
        let m_at = join(&at, ["grant", "method"]);
        for (field, ptr) in [("key", &cr.grant.key), ("amount", &cr.grant.amount)] {
            let p_at = join(&at, ["grant", field]);
            self.carried_by(c, (&m_at, &p_at), &cr.grant.method, Part::Call, ptr);
            if !c.methods.contains_key(&cr.grant.method) {
                break;
            }
        }
        let opens = cr.opens.iter().map(|k| (join(&at, ["opens"]), k));
        let closes = cr.closes.iter().enumerate();
        let closes = closes.map(|(i, k)| (join(&at, ["closes", &i.to_string()]), k));
        for (k_at, k) in opens.chain(closes) {
            let m_at = join(&k_at, ["method"]);
            self.carried_by(
                c,
                (&m_at, &join(&k_at, ["key"])),
                &k.method,
                Part::Call,
                &k.key,
            );
        }
        for (field, l) in [
            ("initial", Some(&cr.initial)),
            ("maxHeld", cr.max_held.as_ref()),
            ("hold", cr.hold.as_ref()),
        ] {
            if let Some(l) = l.filter(|l| !c.limits.contains_key(*l)) {
                self.push(
                    Lint::NameRef,
                    join(&at, [field]),
                    format!("unknown limit {l:?}"),
                );
            }
        }
        self.action_names(c, idx, &join(&at, ["overrun"]), &cr.overrun);
    }
}

/// Where a request keeps its id on `channel`.
fn id_pointer(c: &Contract, channel: &str) -> Option<String> {
    match c.channels.get(channel)?.binding.as_ref()? {
        Binding::Jsonrpc { .. } => Some("/id".into()),
        Binding::Envelope { id, .. } | Binding::Tagged { id, .. } => id.clone(),
    }
}
