//! The bad-input families of the derived suite. For each rule the contract declares about
//! input a receiver must not accept (the channel's JSON rules, its frame cap, the
//! `violations` table), one check sends such input after the handshake and expects the
//! reaction the contract prescribes:
//! - `reply-error`: an answer with the contract's code, to the probe's id or to null;
//! - `close`, `drop-connection`, `fail`: the channel ends;
//! - `ignore`: no answer, and the next request is served as usual.
//!
//! What the contract prescribes is never restated here: a probe's bytes go through the
//! suite's own compiled [`Wire`], whose verdict (class, action, code, seed) is the
//! expectation. A probe the contract does not reject, or whose reaction it leaves open
//! (`reply-error` without a code), is not made at all.

use contract::Contract;
use contract::model::{ActionKind, Binding, Kind};
use contract::wire::{Violation, ViolationClass, Wire};
use serde_json::{Map, Value, json};

use super::shape::Shape;
use super::{Session, expect_code, plan_of};
use crate::session::{Ctx, Got, Incoming, with_meanwhile};
use crate::{BodyFuture, Failure, Verdict, pass};

/// One bad (or, for the `at-cap` and `safe-integer` probes, borderline) input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Probe {
    DuplicateKey,
    Bom,
    LoneSurrogate,
    InvalidUtf8,
    UnsafeInteger,
    NonFinite,
    Trailing,
    Depth,
    DepthAtCap,
    Items,
    ItemsAtCap,
    SafeInteger,
    Null,
    NotAnObject,
    Binary,
    OverCap,
    AtCap,
    Invalid,
    Missing,
    UnknownRequest,
    UnknownNotification,
    Parse,
    WrongDirection,
    InvalidParams,
    UnknownMember,
}

impl Probe {
    /// Every probe, in the order the suite lists them.
    pub const ALL: [Probe; 25] = [
        Probe::Parse,
        Probe::DuplicateKey,
        Probe::Bom,
        Probe::LoneSurrogate,
        Probe::InvalidUtf8,
        Probe::SafeInteger,
        Probe::UnsafeInteger,
        Probe::NonFinite,
        Probe::Trailing,
        Probe::DepthAtCap,
        Probe::Depth,
        Probe::ItemsAtCap,
        Probe::Items,
        Probe::Null,
        Probe::NotAnObject,
        Probe::Binary,
        Probe::AtCap,
        Probe::OverCap,
        Probe::Invalid,
        Probe::Missing,
        Probe::UnknownRequest,
        Probe::UnknownNotification,
        Probe::WrongDirection,
        Probe::InvalidParams,
        Probe::UnknownMember,
    ];

    /// The check's name after `<contract>.derived.`.
    pub fn name(self) -> &'static str {
        match self {
            Probe::DuplicateKey => "json.duplicate-key",
            Probe::Bom => "json.bom",
            Probe::LoneSurrogate => "json.lone-surrogate",
            Probe::InvalidUtf8 => "json.invalid-utf8",
            Probe::UnsafeInteger => "json.unsafe-integer",
            Probe::NonFinite => "json.non-finite",
            Probe::Trailing => "json.trailing",
            Probe::Depth => "json.depth",
            Probe::DepthAtCap => "json.depth.at-cap",
            Probe::Items => "json.items",
            Probe::ItemsAtCap => "json.items.at-cap",
            Probe::SafeInteger => "json.safe-integer",
            Probe::Null => "json.null",
            Probe::NotAnObject => "json.not-an-object",
            Probe::Binary => "frame.binary",
            Probe::OverCap => "frame.over-cap",
            Probe::AtCap => "frame.at-cap",
            Probe::Invalid => "invalid",
            Probe::Missing => "invalid.missing",
            Probe::UnknownRequest => "unknown-method",
            Probe::UnknownNotification => "unknown-notification",
            Probe::Parse => "parse",
            Probe::WrongDirection => "wrong-direction",
            Probe::InvalidParams => "invalid-params",
            Probe::UnknownMember => "unknown-member",
        }
    }

    pub fn named(name: &str) -> Option<Probe> {
        Probe::ALL.into_iter().find(|p| p.name() == name)
    }

    /// What is sent, for titles and failures.
    pub fn what(self) -> &'static str {
        match self {
            Probe::DuplicateKey => "a request with a duplicate key",
            Probe::Bom => "a request after a byte-order mark",
            Probe::LoneSurrogate => "a request with a lone surrogate escape",
            Probe::InvalidUtf8 => "a request with an invalid UTF-8 byte",
            Probe::UnsafeInteger => "a request with the integer 2^53",
            Probe::NonFinite => "a request with the number 1e400",
            Probe::Trailing => "a request followed by a second value in its frame",
            Probe::Depth => "a request one level deeper than the depth cap",
            Probe::DepthAtCap => "a request nested exactly to the depth cap",
            Probe::Items => "a request with more items than the item cap",
            Probe::ItemsAtCap => "a request with exactly the item cap's items",
            Probe::SafeInteger => "a request with the integers ±(2^53 − 1)",
            Probe::Null => "a request with a null member",
            Probe::NotAnObject => "a request wrapped in an array (a batch)",
            Probe::Binary => "a request sent as a binary message",
            Probe::OverCap => "a request grown one unit over the frame cap",
            Probe::AtCap => "a request grown exactly to the frame cap",
            Probe::Invalid => "an object with an id but no method, result or error",
            Probe::Missing => {
                "a request without the members its binding requires but routes nothing by"
            }
            Probe::UnknownRequest => "a request of a method the contract does not know",
            Probe::UnknownNotification => "a notification the contract does not know",
            Probe::Parse => "a frame that is not JSON",
            Probe::WrongDirection => "a request only the other party may send",
            Probe::InvalidParams => "a request whose params fail their schema",
            Probe::UnknownMember => "a request with a member its schema leaves open",
        }
    }
}

/// What the contract says a receiver does with a probe, and the entry that says it.
#[derive(Debug, Clone)]
pub(super) enum Reaction {
    /// Served like any other message (a frame exactly at its cap): answered as `plain`,
    /// the request it was built on, is.
    Answer { plain: Value },
    /// The action of a rule, with its code when it has one.
    Rule {
        action: ActionKind,
        code: Option<Value>,
    },
}

/// A probe made for one contract and one party.
#[derive(Debug, Clone)]
pub(super) struct Built {
    pub bytes: Vec<u8>,
    /// Ids an answer to it may carry: its own, and null (a receiver that cannot read it).
    pub ids: Vec<Value>,
    /// Framed over the channel's cap.
    pub uncapped: bool,
    /// Sent as a binary message on a channel that carries text messages.
    pub binary: bool,
    pub reaction: Reaction,
    /// The contract entry prescribing the reaction (a JSON pointer).
    pub pointer: String,
    /// That entry's seed section.
    pub seed: String,
    /// The count limit the violation counts toward (`countToward`), if any.
    pub counts: Option<String>,
    /// Where the refusal lists the members found missing (the action's `names`), and the
    /// members the probe left out, which it must list.
    pub names: Option<(String, Vec<String>)>,
    /// Whether a request of the implementation's while the suite waits for the channel to
    /// end fails the check: a new exchange shows it went on as if nothing were wrong
    /// (rukh's core closing a session whose completion it had to fail).
    pub quiet: bool,
}

impl Built {
    /// What a check other than a probe (its bytes already sent) expects: `reaction`, to
    /// an answer carrying one of `ids`. Its check cites its own entry.
    pub fn expecting(bytes: Vec<u8>, ids: Vec<Value>, reaction: Reaction) -> Built {
        Built {
            bytes,
            ids,
            uncapped: false,
            binary: false,
            reaction,
            pointer: String::new(),
            seed: String::new(),
            counts: None,
            names: None,
            quiet: false,
        }
    }

    /// Send the probe's bytes as it is framed.
    pub async fn send(&self, peer: &mut crate::Peer) -> Result<(), Failure> {
        match (self.uncapped, self.binary) {
            (true, _) => peer.send_uncapped(&self.bytes).await,
            (_, true) => peer.send_binary(&self.bytes).await,
            _ => peer.send_raw(&self.bytes).await,
        }
    }

    /// The check's title.
    pub fn title(&self, p: Probe) -> String {
        match &self.reaction {
            Reaction::Answer { .. } => format!("{} is served like any other", p.what()),
            Reaction::Rule { action, code } => {
                let code = code.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
                format!("{} gets `{}`{code}", p.what(), action_name(*action))
            }
        }
    }
}

pub(super) fn action_name(a: ActionKind) -> &'static str {
    match a {
        ActionKind::ReplyError => "reply-error",
        ActionKind::Close => "close",
        ActionKind::DropConnection => "drop-connection",
        ActionKind::Ignore => "ignore",
        ActionKind::Fail => "fail",
    }
}

/// `p` for the party `role` of `wire`'s contract, built on the first of `carriers` (the
/// party's requests, each with the next id) it fits; `None` when the contract prescribes
/// nothing checkable for it.
pub(super) fn build(p: Probe, wire: &Wire, role: &str, carriers: &[Value]) -> Option<Built> {
    let c = wire.contract();
    let shape = Shape::of(c)?;
    let ch = shape.channel.as_str();
    match p {
        Probe::AtCap => return at_cap(wire, &shape, role, carriers),
        Probe::DepthAtCap | Probe::ItemsAtCap | Probe::SafeInteger => {
            return json_borderline(p, wire, &shape, role, carriers);
        }
        Probe::UnknownMember => return unknown_member(wire, &shape, role, carriers),
        Probe::Missing => return missing(wire, &shape, role, carriers.first()?),
        _ => {}
    }
    let (carrier, bytes) = match p {
        Probe::WrongDirection => wrong_direction(c, &shape, role, carriers.first()?)?,
        Probe::InvalidParams => invalid_params(wire, &shape, role, carriers)?,
        Probe::OverCap => {
            let cap = over_cap_target(wire, ch)?.checked_add(1)?;
            carriers
                .iter()
                .find_map(|m| Some((m.clone(), grown(wire, &shape, role, m, cap, true)?)))?
        }
        _ => {
            let m = carriers.first()?;
            (m.clone(), bytes_of(p, wire, &shape, m)?)
        }
    };
    let violation = match p {
        Probe::OverCap => wire.violation(ViolationClass::Oversize, "over the frame cap"),
        // A message transport carrying text: the proxy's verdict on a binary message.
        Probe::Binary => match &c.channels.get(ch)?.framing {
            contract::model::Framing::WebsocketText { .. } => {
                wire.violation(ViolationClass::Invalid, "a binary message")
            }
            _ => return None,
        },
        _ => match wire.decode(ch, role, &bytes, None) {
            Ok(_) => return None,
            // An unknown method of the other kind is the other probe's (a tagged binding's
            // every message is one-way).
            Err(v) if p == Probe::UnknownRequest && v.class != ViolationClass::UnknownRequest => {
                return None;
            }
            Err(v) => v,
        },
    };
    let (action, code) = checkable(&violation)?;
    let ids = match shape.id(&carrier) {
        Some(id) if p != Probe::UnknownNotification => vec![id.clone(), Value::Null],
        _ => vec![Value::Null],
    };
    Some(Built {
        bytes,
        ids,
        uncapped: p == Probe::OverCap,
        binary: p == Probe::Binary,
        reaction: Reaction::Rule { action, code },
        pointer: format!("/violations/{}", entry(c, violation.class)),
        seed: violation.seed.unwrap_or_default(),
        counts: violation.count_toward,
        names: None,
        quiet: false,
    })
}

/// Carrier `m` without the members its binding requires but routes nothing by (an
/// envelope's trace and timestamp, JSON-RPC's `jsonrpc`), where the contract requires
/// them: the `invalid` entry's reaction, whose refusal must list the members left out
/// where that entry `names` its list.
fn missing(wire: &Wire, shape: &Shape, role: &str, m: &Value) -> Option<Built> {
    let c = wire.contract();
    let ch = shape.channel.as_str();
    let members: Vec<String> = match c.channels.get(ch)?.binding.as_ref()? {
        Binding::Envelope {
            trace, timestamp, ..
        } => [trace.clone(), timestamp.clone()]
            .into_iter()
            .flatten()
            .collect(),
        Binding::Jsonrpc { .. } => vec!["/jsonrpc".into()],
        Binding::Tagged { .. } => return None,
    };
    let mut v = m.clone();
    let mut gone = Vec::new();
    for p in members {
        if contract::remove_pointer(&mut v, &p).is_some() {
            gone.push(p.rsplit('/').next().unwrap_or_default().to_string());
        }
    }
    let bytes = v.to_string().into_bytes();
    let violation = match wire.decode(ch, role, &bytes, None) {
        Err(v) if v.class == ViolationClass::Invalid && !gone.is_empty() => v,
        _ => return None,
    };
    let (action, code) = checkable(&violation)?;
    let names = c.violations.invalid.as_ref().and_then(|a| a.names.clone());
    Some(Built {
        ids: vec![shape.id(m)?.clone(), Value::Null],
        bytes,
        uncapped: false,
        binary: false,
        reaction: Reaction::Rule { action, code },
        pointer: "/violations/invalid".into(),
        seed: violation.seed.unwrap_or_default(),
        counts: violation.count_toward,
        names: names.map(|at| (at, gone)),
        quiet: false,
    })
}

/// The action (and code) of a violation the suite can observe.
pub(super) fn checkable(v: &Violation) -> Option<(ActionKind, Option<Value>)> {
    match (v.action?, &v.code) {
        (ActionKind::ReplyError, None) => None,
        (a, code) => Some((a, code.clone())),
    }
}

/// The `violations` member the Wire took `class`'s action from.
pub(super) fn entry(c: &Contract, class: ViolationClass) -> &'static str {
    let v = &c.violations;
    let or_invalid = |own: bool, name| if own { name } else { "invalid" };
    match class {
        ViolationClass::Oversize => or_invalid(v.oversize.is_some(), "oversize"),
        ViolationClass::Parse => "parse",
        ViolationClass::Invalid => "invalid",
        ViolationClass::UnknownRequest => "unknownRequest",
        ViolationClass::UnknownNotification => "unknownNotification",
        ViolationClass::WrongDirection => or_invalid(v.wrong_direction.is_some(), "wrongDirection"),
        ViolationClass::InvalidParams => or_invalid(v.invalid_params.is_some(), "invalidParams"),
    }
}

/// A JSON text with `member` (raw `"key":value`) inserted first in its top-level object.
fn inject(text: &str, member: &str) -> Vec<u8> {
    let rest = text.strip_prefix('{').unwrap_or(text);
    let sep = if rest.starts_with('}') { "" } else { "," };
    format!("{{{member}{sep}{rest}").into_bytes()
}

/// The bytes of the probes made by rewriting one carrier request.
fn bytes_of(p: Probe, wire: &Wire, shape: &Shape, m: &Value) -> Option<Vec<u8>> {
    let c = wire.contract();
    let ch = shape.channel.as_str();
    let rules = c.channels.get(ch)?.json.as_ref();
    let strict = rules.is_some_and(|r| r.strict);
    let text = m.to_string();
    let limit = |name: Option<&String>| -> Option<usize> {
        usize::try_from(wire.limits().cap(name?).ok()?).ok()
    };
    let member = "\"conformance\":";
    Some(match p {
        Probe::DuplicateKey if strict => {
            let (k, v) = m.as_object()?.iter().next()?;
            inject(&text, &format!("{}:{v}", Value::from(k.as_str())))
        }
        Probe::Bom if strict => [&b"\xEF\xBB\xBF"[..], text.as_bytes()].concat(),
        Probe::LoneSurrogate if strict => inject(&text, &format!("{member}\"\\ud800\"")),
        Probe::InvalidUtf8 if strict => {
            let mut b = inject(&text, &format!("{member}\"\u{1}\""));
            let at = b.iter().position(|x| *x == 1)?;
            b[at] = 0xff;
            b
        }
        Probe::UnsafeInteger if strict => inject(&text, &format!("{member}{}", 1u64 << 53)),
        Probe::NonFinite if strict => inject(&text, &format!("{member}1e400")),
        Probe::Trailing if strict => format!("{text}{{}}").into_bytes(),
        Probe::Depth => {
            // The top-level object is depth 1: `max` nested arrays inside it make max + 1.
            let max = limit(rules?.max_depth.as_ref())?;
            inject(
                &text,
                &format!("{member}{}{}", "[".repeat(max), "]".repeat(max)),
            )
        }
        Probe::Items => {
            let max = limit(rules?.max_items.as_ref())?;
            inject(
                &text,
                &format!("{member}[{}]", vec!["0"; max + 1].join(",")),
            )
        }
        Probe::Null if rules.is_some_and(|r| r.no_null) => inject(&text, &format!("{member}null")),
        Probe::NotAnObject if rules.is_some_and(|r| r.object_only) => {
            format!("[{text}]").into_bytes()
        }
        Probe::Invalid => shape.stripped(m).to_string().into_bytes(),
        Probe::UnknownRequest => {
            let v = shape.renamed(m, "conformance/no-such-method");
            v.to_string().into_bytes()
        }
        Probe::UnknownNotification => {
            let v = shape.renamed(&shape.one_way(m), "conformance/no-such-notification");
            v.to_string().into_bytes()
        }
        Probe::Parse => text.as_bytes()[..text.len() / 2].to_vec(),
        Probe::Binary => text.into_bytes(),
        _ => return None,
    })
}

/// The channel's declared frame cap, when it is one the suite can pad to.
fn over_cap_target(wire: &Wire, ch: &str) -> Option<u64> {
    wire.contract().channels.get(ch)?.framing.payload_cap()?;
    Some(wire.codec(ch).ok()?.cap())
}

/// `text` padded with spaces (JSON whitespace after the value) to `len` bytes; ASCII only,
/// so a cap counted in UTF-16 units counts the same.
pub(super) fn padded(text: &str, len: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(len).ok()?;
    if !text.is_ascii() || text.len() > len {
        return None;
    }
    let mut b = text.as_bytes().to_vec();
    b.resize(len, b' ');
    Some(b)
}

/// A request grown exactly to the cap, which the contract accepts, on the first carrier
/// no per-method cap holds below it.
fn at_cap(wire: &Wire, shape: &Shape, role: &str, carriers: &[Value]) -> Option<Built> {
    let ch = shape.channel.as_str();
    let cap = over_cap_target(wire, ch)?;
    let (field, _) = wire.contract().channels.get(ch)?.framing.payload_cap()?;
    let pointer = format!("/channels/{ch}/framing/{field}");
    carriers.iter().find_map(|m| {
        let bytes = grown(wire, shape, role, m, cap, false)?;
        served_as_is(wire, shape, role, m, bytes, &pointer)
    })
}

/// Carrier `m` grown to exactly `len` units of the channel cap's measure. Counted in
/// bytes, the growth is spaces after the value. Counted otherwise (UTF-16 units), a few
/// characters first go into a string member, chosen so that a receiver counting the wrong
/// measure misjudges the frame: within the cap, 2- and 3-byte ones (more bytes than
/// units); `over` it, astral ones (fewer code points than units). They are few, since an
/// answer may echo them. The member is the first place where they leave the carrier
/// valid, its id untouched.
fn grown(
    wire: &Wire,
    shape: &Shape,
    role: &str,
    m: &Value,
    len: u64,
    over: bool,
) -> Option<Vec<u8>> {
    let ch = shape.channel.as_str();
    let codec = wire.codec(ch).ok()?;
    if codec.counts_bytes() {
        return padded(&m.to_string(), len);
    }
    let marked = if over {
        "\u{1F600}\u{1F600}"
    } else {
        super::framing::WIDE
    };
    places(m).iter().find_map(|place| {
        let v = place.put(m, json!(marked))?;
        let text = v.to_string();
        if shape.id(&v) != shape.id(m) || wire.decode(ch, role, text.as_bytes(), None).is_err() {
            return None;
        }
        let need = usize::try_from(len.checked_sub(codec.measure(text.as_bytes()))?).ok()?;
        let mut bytes = text.into_bytes();
        bytes.resize(bytes.len() + need, b' ');
        Some(bytes)
    })
}

/// `bytes` (carrier `m` at an edge the contract accepts) as a probe served like any
/// other, if the suite's own wire accepts them; `pointer` names the rule.
fn served_as_is(
    wire: &Wire,
    shape: &Shape,
    role: &str,
    m: &Value,
    bytes: Vec<u8>,
    pointer: &str,
) -> Option<Built> {
    let ch = shape.channel.as_str();
    wire.decode(ch, role, &bytes, None).ok()?;
    Some(Built {
        bytes,
        ids: vec![shape.id(m)?.clone()],
        uncapped: false,
        binary: false,
        reaction: Reaction::Answer { plain: m.clone() },
        pointer: pointer.to_string(),
        seed: wire.contract().channels.get(ch)?.seed.clone(),
        counts: None,
        names: None,
        quiet: false,
    })
}

/// A request right at a JSON rule's edge (nested exactly to the depth cap, exactly the
/// item cap's items, the largest safe integers), which the contract accepts: served like
/// any other. The edge value goes where the suite's own wire accepts it: a new member of
/// some object of a carrier, else in place of one of its members.
fn json_borderline(
    p: Probe,
    wire: &Wire,
    shape: &Shape,
    role: &str,
    carriers: &[Value],
) -> Option<Built> {
    let ch = shape.channel.as_str();
    let rules = wire.contract().channels.get(ch)?.json.as_ref()?;
    let cap = |name: Option<&String>| -> Option<usize> {
        usize::try_from(wire.limits().cap(name?).ok()?).ok()
    };
    let field = match p {
        Probe::DepthAtCap => "maxDepth",
        Probe::ItemsAtCap => "maxItems",
        _ if rules.strict => "strict",
        _ => return None,
    };
    let at_edge = |m: &Value, place: &Place| -> Option<Value> {
        use contract::wire::json::{depth, items};
        Some(match p {
            Probe::DepthAtCap => {
                let max = cap(rules.max_depth.as_ref())?;
                // The object holding the value is depth `segments + 1`.
                let nest = max.checked_sub(place.0.len() + 1)?;
                let v = (0..nest).fold(json!(0), |v, _| json!([v]));
                place.put(m, v).filter(|v| depth(v) == max)?
            }
            Probe::ItemsAtCap => {
                let max = cap(rules.max_items.as_ref())?;
                let n = max.checked_sub(items(&place.put(m, json!([]))?))?;
                place
                    .put(m, json!(vec![0; n]))
                    .filter(|v| items(v) == max)?
            }
            _ => {
                let safe = (1i64 << 53) - 1;
                place.put(m, json!([safe, -safe]))?
            }
        })
    };
    let pointer = format!("/channels/{ch}/json/{field}");
    carriers.iter().find_map(|m| {
        places(m).iter().find_map(|place| {
            let bytes = at_edge(m, place)?.to_string().into_bytes();
            served_as_is(wire, shape, role, m, bytes, &pointer)
        })
    })
}

/// A request with a member no schema names, in its params where their schema leaves them
/// open (JSON Schema's default): served like any other, since the contract accepts it.
/// The entry cited is the params schema of the request's method.
fn unknown_member(wire: &Wire, shape: &Shape, role: &str, carriers: &[Value]) -> Option<Built> {
    let ch = shape.channel.as_str();
    let params = shape.params_pointer();
    carriers.iter().find_map(|m| {
        let method = wire
            .decode(ch, role, m.to_string().as_bytes(), None)
            .ok()?
            .method?;
        let pointer = contract::join_pointer("/methods", [method.as_str(), "params"]);
        let seed = wire.contract().methods.get(&method)?.seed.clone();
        places(m).iter().find_map(|place| {
            let inside = contract::join_pointer("", &place.0);
            let within = inside == params || inside.starts_with(&format!("{params}/"));
            if !place.is_new() || !within {
                return None;
            }
            let bytes = place.put(m, json!("conformance"))?.to_string().into_bytes();
            let b = served_as_is(wire, shape, role, m, bytes, &pointer)?;
            Some(Built {
                seed: seed.clone(),
                ..b
            })
        })
    })
}

/// Where a probe puts a value in a message: the path to an object, then the member
/// (`None`: a new member, `conformance`).
pub(super) struct Place(Vec<String>, Option<String>);

impl Place {
    /// Whether the place is a new member (one the suite adds), not an existing one.
    pub(super) fn is_new(&self) -> bool {
        self.1.is_none()
    }

    /// `m` with `v` at this place (`None` if `m` has no such place).
    pub(super) fn put(&self, m: &Value, v: Value) -> Option<Value> {
        let mut m = m.clone();
        let mut at = &mut m;
        for seg in &self.0 {
            at = match at {
                Value::Object(o) => o.get_mut(seg),
                Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
                _ => None,
            }?;
        }
        let member = self.1.clone().unwrap_or_else(|| "conformance".into());
        at.as_object_mut()?.insert(member, v);
        Some(m)
    }
}

/// Every place in `m`, outermost first: a new member of each object, then each member.
pub(super) fn places(m: &Value) -> Vec<Place> {
    fn objects(v: &Value, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Vec<String>)>) {
        match v {
            Value::Object(o) => {
                out.push((path.clone(), o.keys().cloned().collect()));
                for (k, child) in o {
                    path.push(k.clone());
                    objects(child, path, out);
                    path.pop();
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    path.push(i.to_string());
                    objects(child, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    objects(m, &mut Vec::new(), &mut found);
    let added = found.iter().map(|(p, _)| Place(p.clone(), None));
    let replaced = found
        .iter()
        .flat_map(|(p, keys)| keys.iter().map(|k| Place(p.clone(), Some(k.clone()))));
    added.chain(replaced).collect()
}

/// A request example of a method `role` may not send, with the carrier's id.
fn wrong_direction(
    c: &Contract,
    shape: &Shape,
    role: &str,
    carrier: &Value,
) -> Option<(Value, Vec<u8>)> {
    let id = shape.id(carrier)?;
    c.methods.values().find_map(|m| {
        if m.kind != Kind::Request || m.from.iter().any(|p| p == role) {
            return None;
        }
        let example = m
            .examples
            .iter()
            .find(|e| e.part == contract::model::Part::Call)?;
        let mut v = example.message.clone();
        shape.id(&v)?;
        shape.set_id(&mut v, id.clone());
        let bytes = v.to_string().into_bytes();
        Some((v, bytes))
    })
}

/// The first carrier whose params the Wire calls invalid once mutated: a member of the
/// wrong type or a member dropped (on any carrier), else params of the wrong shape.
fn invalid_params(
    wire: &Wire,
    shape: &Shape,
    role: &str,
    carriers: &[Value],
) -> Option<(Value, Vec<u8>)> {
    let (ch, at) = (shape.channel.as_str(), shape.params_pointer());
    let invalid = |m: &Value, p: Value| {
        let mut v = m.clone();
        contract::set_pointer(&mut v, at, p);
        let bytes = v.to_string().into_bytes();
        match wire.decode(ch, role, &bytes, None) {
            Err(e) if e.class == ViolationClass::InvalidParams => Some((v, bytes)),
            _ => None,
        }
    };
    let members = |m: &Value| -> Vec<Value> {
        let Some(params) = m.pointer(at).and_then(Value::as_object) else {
            return Vec::new();
        };
        let mut tries = Vec::new();
        for (k, v) in params {
            let mut wrong = params.clone();
            wrong.insert(k.clone(), wrong_type(v));
            tries.push(Value::Object(wrong));
            let mut dropped: Map<String, Value> = params.clone();
            dropped.remove(k);
            tries.push(Value::Object(dropped));
        }
        tries
    };
    let shapes = || {
        [
            json!(["conformance"]),
            json!({"conformance": {"unexpected": true}}),
        ]
    };
    carriers
        .iter()
        .find_map(|m| members(m).into_iter().find_map(|p| invalid(m, p)))
        .or_else(|| {
            carriers
                .iter()
                .find_map(|m| shapes().into_iter().find_map(|p| invalid(m, p)))
        })
}

fn wrong_type(v: &Value) -> Value {
    match v {
        Value::String(_) => json!(12345),
        _ => json!("conformance"),
    }
}

/// The body of every probe check: the handshake, the probe, then the reaction.
pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let name = cx.subject.clone().unwrap_or_default();
        let p = Probe::named(&name)
            .ok_or_else(|| Failure::new(format!("suite bug: no probe {name}")))?;
        let plan = plan_of(cx);
        let callable = plan.staying(cx.wire.contract());
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let mut b = built(p, cx, &s, &callable)?;
        measured(cx, p, &b.bytes);
        // Only an error reply is the probe's own rule; another answer's content is its
        // call check's to judge.
        s.judge_answers = matches!(
            b.reaction,
            Reaction::Rule {
                action: ActionKind::ReplyError,
                ..
            }
        );
        if ends(&b.reaction) {
            // An end the session would have reached anyway is no evidence: it must be
            // alive right before the probe.
            if let Some(m) = callable.first() {
                let id = s.send(cx, m).await?.unwrap_or(Value::Null);
                s.answer(cx, &id, &format!("{m} just before the probe"))
                    .await?;
                b = built(p, cx, &s, &callable)?;
            }
        }
        if b.ids.first().is_some_and(|id| !id.is_null()) {
            s.take_id();
        }
        s.remember(cx, &b.bytes);
        let sent = b.send(&mut s.peer).await;
        let verdict = match sent {
            // A receiver that reads a length over the cap and ends the channel at once
            // (before allocating) makes the rest of the write fail: that is the reaction.
            Err(f) if ends(&b.reaction) => Verdict::Pass(format!(
                "the channel ended while the suite wrote: {}",
                f.why
            )),
            sent => {
                // The implementation ended the channel under the probe, where the contract
                // keeps it open (an oversize frame it should skip and report).
                let what = s.shape.say(p.what());
                sent.map_err(|f| {
                    Failure::new(format!(
                        "the channel ended while the suite wrote {what}, which {}: {}",
                        b.title(p).trim_start_matches(p.what()).trim(),
                        f.why
                    ))
                    .sent(&b.bytes)
                })?;
                react(&mut s, cx, &b, &what, &callable)
                    .await
                    .map_err(|f| f.sent(&b.bytes))?
            }
        };
        settle(s, cx, &b, verdict)
            .await
            .map_err(|f| f.sent(&b.bytes))
    })
}

/// For a cap probe on a cap counted other than in bytes, a note giving both sizes: which
/// one the receiver counted is what such a check turns on.
fn measured(cx: &mut Ctx, p: Probe, bytes: &[u8]) {
    if !matches!(p, Probe::AtCap | Probe::OverCap) {
        return;
    }
    let channel = Shape::of(cx.wire.contract()).map(|s| s.channel);
    let Some(codec) = channel.and_then(|ch| cx.wire.codec(&ch).ok()) else {
        return;
    };
    if !codec.counts_bytes() {
        let chars = String::from_utf8_lossy(bytes).chars().count();
        cx.notes.push(format!(
            "the frame is {} {} (the cap: {}), {} bytes, {chars} code points",
            codec.measure(bytes),
            codec.unit(),
            codec.cap(),
            bytes.len()
        ));
    }
}

/// [`react`] to `b`, sent, showing its bytes on a failure; then [`settle`] the session.
pub(super) async fn judged(
    mut s: Session,
    cx: &mut Ctx,
    b: &Built,
    what: &str,
    callable: &[String],
) -> Result<Verdict, Failure> {
    let verdict = react(&mut s, cx, b, what, callable)
        .await
        .map_err(|f| f.sent(&b.bytes))?;
    settle(s, cx, b, verdict).await
}

/// After a passing probe: the session goes on for the next check, or, when the reaction
/// ended it, the suite's end hook ([`Ctx::on_end`]) adds what it also expects.
pub(super) async fn settle(
    s: Session,
    cx: &mut Ctx,
    b: &Built,
    verdict: Verdict,
) -> Result<Verdict, Failure> {
    if !ends(&b.reaction) {
        s.keep(cx);
        return Ok(verdict);
    }
    let Verdict::Pass(seen) = &verdict else {
        return Ok(verdict);
    };
    match after_close(s, cx).await? {
        Some(also) => Ok(Verdict::Pass(format!("{seen}; {also}"))),
        None => Ok(verdict),
    }
}

/// What else must happen once the implementation ended `s`: the suite's own end hook, else
/// the exit the contract's data owes after its close code; `None` when nothing is owed.
pub(super) async fn after_close(s: Session, cx: &mut Ctx) -> Result<Option<String>, Failure> {
    cx.closed_code = (s.peer.closed_with.as_ref())
        .and_then(|f| f.as_ref())
        .map(|f| f.code);
    drop(s);
    let data = super::exits::any_owed(cx.wire.contract(), &cx.role);
    let hook = cx
        .on_end
        .or_else(|| data.then_some(super::exits::owed as crate::session::EndHook));
    match hook {
        Some(hook) => hook(cx).await.map(Some),
        None => Ok(None),
    }
}

/// `p` built on the session's next id.
pub(super) fn built(
    p: Probe,
    cx: &Ctx,
    s: &Session,
    callable: &[String],
) -> Result<Built, Failure> {
    let carriers = s.carriers(cx, callable);
    build(p, &cx.wire, &cx.role, &carriers)
        .ok_or_else(|| Failure::new(format!("suite bug: {} does not apply", p.name())))
}

/// Whether the reaction ends the channel.
fn ends(r: &Reaction) -> bool {
    matches!(r, Reaction::Rule { action, .. } if ends_the_channel(*action))
}

/// Whether `action` ends the channel (close, drop-connection, fail).
pub(super) fn ends_the_channel(action: ActionKind) -> bool {
    !matches!(action, ActionKind::ReplyError | ActionKind::Ignore)
}

/// For a `close` with a code on a message transport (a WebSocket): the implementation's
/// close frame carried that code. A byte stream has no close frame to carry one.
pub(super) fn closed_as(
    s: &Session,
    cx: &Ctx,
    action: ActionKind,
    code: Option<&Value>,
) -> Result<(), Failure> {
    let (ActionKind::Close, Some(code)) = (action, code) else {
        return Ok(());
    };
    let framing = cx
        .wire
        .contract()
        .channels
        .get(&s.shape.channel)
        .map(|c| &c.framing);
    if !matches!(
        framing,
        Some(contract::model::Framing::WebsocketText { .. })
    ) {
        return Ok(());
    }
    match &s.peer.closed_with {
        Some(Some(f)) if code.as_u64() == Some(u64::from(f.code)) => Ok(()),
        Some(Some(f)) => Err(Failure::new(format!(
            "the implementation closed with {} {:?}; the contract prescribes close {code}",
            f.code, f.reason
        ))),
        Some(None) => Err(Failure::new(format!(
            "the implementation closed with no code; the contract prescribes close {code}"
        ))),
        None => Err(Failure::new(format!(
            "the connection ended without a close frame; the contract prescribes close {code}"
        ))),
    }
}

/// Whether `g` answers one of `ids` with a result (served, not refused).
fn served(shape: &Shape, g: &Got, ids: &[Value]) -> bool {
    g.value()
        .is_some_and(|v| shape.is_result(v) && answers(shape, g, ids))
}

/// Whether `g` refuses the probe with a code other than its rule's (which names one).
fn refused_otherwise(shape: &Shape, g: &Got, b: &Built) -> bool {
    let Reaction::Rule {
        code: Some(want), ..
    } = &b.reaction
    else {
        return false;
    };
    let code = g.value().and_then(|v| shape.error_code(v));
    answers(shape, g, &b.ids) && code.is_some_and(|c| c != want)
}

/// Whether `g` answers one of `ids` at all.
fn answers(shape: &Shape, g: &Got, ids: &[Value]) -> bool {
    let to = g.value().map(|v| shape.answered_all(v)).unwrap_or_default();
    to.iter().any(|id| ids.contains(id))
}

/// Judge what the implementation did after `b` was sent.
pub(super) async fn react(
    s: &mut Session,
    cx: &Ctx,
    b: &Built,
    what: &str,
    callable: &[String],
) -> Result<Verdict, Failure> {
    match &b.reaction {
        Reaction::Answer { plain } => {
            let (v, _) = s.wait_answer(cx, &b.ids, what, cx.soon()).await?;
            let refusing =
                |code: &&Value| cx.wire.contract().violations.codes().any(|c| c == *code);
            let Some(code) = s.shape.error_code(&v).filter(refusing).cloned() else {
                return pass(format!("{what}: answered as any other"));
            };
            // A code the contract also gives bad input may be the method's own answer to
            // this request (MCP's unknown tool is invalid params): ask without the edge.
            let refused = || {
                Failure::new(format!(
                    "{what} was refused with {code}, though the contract accepts it"
                ))
                .with("the answer", v.to_string().as_bytes())
            };
            let plain = s.numbered(plain.clone());
            let sent = s.send_value(&plain).await.map_err(|_| refused())?;
            let id = sent.unwrap_or(Value::Null);
            let (w, _) = s
                .wait_answer(cx, &[id], "the request without the edge", cx.soon())
                .await?;
            match s.shape.error_code(&w) == Some(&code) {
                true => pass(format!(
                    "{what}: answered {code}, as the request without the edge is"
                )),
                false => {
                    Err(refused().with("the answer without the edge", w.to_string().as_bytes()))
                }
            }
        }
        Reaction::Rule {
            action: ActionKind::ReplyError,
            code,
        } => {
            let (v, _) = s.wait_answer(cx, &b.ids, what, cx.soon()).await?;
            let verdict = expect_code(&s.shape, &v, code.as_ref().unwrap_or(&Value::Null), what)?;
            match &b.names {
                Some((at, gone)) => listed(&v, at, gone, what),
                None => Ok(verdict),
            }
        }
        Reaction::Rule {
            action: ActionKind::Ignore,
            ..
        } => ignored(s, cx, b, what, callable).await,
        Reaction::Rule { action, .. } => ended(s, cx, b, *action, what).await,
    }
}

/// The refusal `v` lists each of `gone` in the list at `at` (the action's `names`).
fn listed(v: &Value, at: &str, gone: &[String], what: &str) -> Result<Verdict, Failure> {
    let list: Vec<&str> = (v
        .pointer(at)
        .and_then(Value::as_array)
        .into_iter()
        .flatten())
    .filter_map(Value::as_str)
    .collect();
    let unlisted: Vec<&String> = gone
        .iter()
        .filter(|g| !list.contains(&g.as_str()))
        .collect();
    if unlisted.is_empty() {
        return pass(format!("{what}: refused, listing {list:?} at {at}"));
    }
    Err(Failure::new(format!(
        "{what}: the refusal lists {list:?} at {at}, not {unlisted:?} (the `invalid` entry's `names`)"
    ))
    .with("the answer", v.to_string().as_bytes()))
}

/// `ignore`: nothing answers the probe, and the party's next request is served.
async fn ignored(
    s: &mut Session,
    cx: &Ctx,
    b: &Built,
    what: &str,
    callable: &[String],
) -> Result<Verdict, Failure> {
    let follow = callable
        .first()
        .ok_or_else(|| Failure::new("no request to send after the probe"))?;
    let id = s.send(cx, follow).await?.unwrap_or(Value::Null);
    let (v, before) = s
        .wait_answer(cx, std::slice::from_ref(&id), follow, cx.soon())
        .await?;
    // An answer covering several messages (a batch) may answer the probe with the next.
    let probe = |to: &Value| !to.is_null() && b.ids.contains(to);
    let answered = before.iter().find(|g| answers(&s.shape, g, &b.ids));
    let raw = match answered {
        Some(g) => g.raw.to_vec(),
        None if s.shape.answered_all(&v).iter().any(probe) => v.to_string().into_bytes(),
        None => {
            return pass(format!(
                "{what}: not answered; {follow} was served after it"
            ));
        }
    };
    Err(Failure::new(format!(
        "{what} was answered, where the contract says to ignore it"
    ))
    .with("the answer", &raw))
}

/// `close`, `drop-connection`, `fail`: the channel ends; serving the probe is a failure.
pub(super) async fn ended(
    s: &mut Session,
    cx: &Ctx,
    b: &Built,
    action: ActionKind,
    what: &str,
) -> Result<Verdict, Failure> {
    let until = cx.soon();
    let waited = until.saturating_duration_since(std::time::Instant::now());
    let mut seen = Vec::new();
    let kind = action;
    let action = action_name(action);
    loop {
        match s.peer.next(until).await {
            Incoming::Control(g) if served(&s.shape, &g, &b.ids) => {
                return Err(Failure::new(format!(
                    "{what} was served, where the contract prescribes `{action}`"
                ))
                .with("the answer", &g.raw));
            }
            // A refusal before the end is the implementation's to send, but with the
            // contract's code.
            Incoming::Control(g) if refused_otherwise(&s.shape, &g, b) => {
                return Err(Failure::new(format!(
                    "{what} was refused with another code than the contract's for `{action}`"
                ))
                .with("the answer", &g.raw));
            }
            Incoming::Control(g) if b.quiet && g.ok().is_some_and(|m| m.kind == Kind::Request) => {
                return Err(Failure::new(format!(
                    "the implementation went on after {what}, where the contract prescribes `{action}`"
                ))
                .with("its request", &g.raw));
            }
            Incoming::Control(g) => {
                if seen.len() < super::UNCLAIMED {
                    seen.push(*g);
                }
            }
            Incoming::ControlEnd(why) => {
                let code = match &b.reaction {
                    Reaction::Rule { code, .. } => code.as_ref(),
                    Reaction::Answer { .. } => None,
                };
                closed_as(s, cx, kind, code).map_err(|f| with_meanwhile(f, seen.clone()))?;
                let after: Vec<String> = seen.iter().map(Got::brief).collect();
                return pass(format!("the channel ended ({why}) after {after:?}"));
            }
            Incoming::Timeout => {
                let secs = waited.as_secs_f64();
                let f = Failure::new(format!(
                    "the channel was still open {secs:.1} s after {what}; the contract prescribes `{action}`"
                ));
                return Err(with_meanwhile(f, seen));
            }
            Incoming::Data { .. } | Incoming::DataEnd(_) => {}
        }
    }
}
