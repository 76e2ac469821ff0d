//! The contract format as a Rust model.
//!
//! This module is the single definition of what a contract document may
//! contain. `schema/contract.schema.json` is generated from it with schemars
//! (see [`meta_schema`]), so the doc comments below are also the hover text an
//! editor shows while a contract is being typed.
//!
//! Design rules the model encodes:
//! - every number lives once, in [`Contract::limits`]; framing and relations
//!   refer to limits by name;
//! - payload shapes are plain JSON Schema 2020-12 under `$defs`;
//! - each channel declares a [`Binding`], which tells a generic wire layer
//!   where a message keeps its kind, method, id, correlation and trace id.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A machine-readable protocol contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Contract {
    /// Path or URL of `contract.schema.json`, so editors validate the file.
    #[serde(rename = "$schema")]
    pub schema: String,
    /// Short identifier: lower-case letters, digits and dashes.
    #[schemars(regex(pattern = r"^[a-z][a-z0-9-]*$"))]
    pub name: String,
    /// One-line human title.
    pub title: String,
    /// Version of this contract document (semver), not of the protocol.
    #[schemars(regex(pattern = r"^\d+\.\d+\.\d+$"))]
    pub version: String,
    /// The seed file the contract is derived from, relative to the seeds directory.
    pub source: String,
    /// What the protocol is for, in a paragraph.
    pub description: String,
    /// Protocol version identifiers and where each is carried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<VersionInfo>,
    /// The parties that speak the protocol, by name.
    pub parties: IndexMap<String, Party>,
    /// Channels between the parties, each with its framing and message binding.
    pub channels: IndexMap<String, Channel>,
    /// Capabilities a party may declare; methods name the one they need.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub capabilities: IndexMap<String, Capability>,
    /// Every method, message or event, by wire name.
    pub methods: IndexMap<String, Method>,
    /// What a receiver does with each class of bad or unknown input.
    #[serde(default)]
    pub violations: Violations,
    /// The error catalog: every error code the protocol can put on the wire.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ErrorEntry>,
    /// Other code tables: close codes, exit codes, statuses, reasons, outcomes.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub codes: IndexMap<String, CodeTable>,
    /// Every limit, rate and deadline. The only place a number is written.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub limits: IndexMap<String, Limit>,
    /// Relations between limits that a seed states; `contractgen check` evaluates them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relations: Vec<Relation>,
    /// State machines: states, initial, terminal and allowed transitions.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub state_machines: IndexMap<String, StateMachine>,
    /// Credit-based flow control, by name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub credit: IndexMap<String, Credit>,
    /// One live connection per identity a message claims, across redials, by name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub claims: IndexMap<String, Claim>,
    /// Values both parties of a connection hold once its handshake settles them, which
    /// later messages repeat (a session id, an effective version), by name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub agreements: IndexMap<String, Agreement>,
    /// Cues: messages the implementations agree to act on so a conformance suite can watch
    /// them act (kernel's `conformance:*` commands), by name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub cues: IndexMap<String, Cue>,
    /// Rules no data can say yet, each run by a named hook of the tools (a small Rust
    /// extension with a documented interface), by hook name. See `contract::extensions`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub extensions: IndexMap<String, Extension>,
    /// Where the trace id lives, if the protocol has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Trace>,
    /// Files that are part of the protocol but not wire messages (e.g. registries).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub files: IndexMap<String, FileSpec>,
    /// Decisions taken where a seed is silent or contradicts itself.
    pub notes: Vec<Note>,
    /// JSON Schema 2020-12 definitions for every envelope, message, params and result.
    #[serde(rename = "$defs")]
    #[schemars(with = "IndexMap<String, serde_json::Value>")]
    pub defs: IndexMap<String, Value>,
}

/// A protocol version identifier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionInfo {
    /// Identifier used in code and docs.
    pub name: String,
    /// The values this contract describes (e.g. `[1]`, `["2025-06-18"]`).
    pub values: Vec<Value>,
    /// Where on the wire the version is carried (JSON pointer, header, subprotocol).
    #[serde(rename = "where")]
    pub location: String,
    /// How the version is negotiated and what a mismatch does.
    pub description: String,
    /// The negotiation in messages, as data a conformance suite runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negotiation: Option<Negotiation>,
    /// A version each message states for itself, not negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carried>,
    /// Seed section.
    pub seed: String,
}

impl VersionInfo {
    /// The highest of the values this contract describes, where they are numbers: what a
    /// message stating its own version (`carried`) may state at most.
    pub fn highest_number(&self) -> Option<u64> {
        self.values.iter().filter_map(Value::as_u64).max()
    }

    /// The number `m` states at the `carried` pointer, when it is above
    /// [`Self::highest_number`]: a later party's message, which gets `carried.newer`.
    pub fn newer_in(&self, m: &Value) -> Option<u64> {
        let stated = crate::pointer::get(m, &self.carried.as_ref()?.pointer)?.as_u64()?;
        (stated > self.highest_number()?).then_some(stated)
    }
}

/// A version each message states for itself (xsession's `msgV`): where, and what a
/// receiver does with a message stating a higher one than the contract's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Carried {
    /// JSON pointer to the version in a message that carries one.
    pub pointer: String,
    /// The reaction to a message of a higher version (xsession: dropped, no status).
    pub newer: Action,
}

/// A version negotiated by a request: the party that sends `offer` offers versions at
/// `offered`; its result names the one chosen at `chosen`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Negotiation {
    /// The request that offers (its sender is the offering party).
    pub offer: String,
    /// JSON pointer to the offered versions in the request.
    pub offered: String,
    /// `list`: every version the offerer speaks; `single`: the one it prefers.
    pub form: VersionForm,
    /// JSON pointer to the chosen version in the request's result.
    pub chosen: String,
    /// JSON pointer, in the result, to the versions the chooser speaks: the choice is
    /// then the highest both speak. Without it, the choice is any offered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<String>,
    /// What the chooser does when it speaks none of the offered versions; without it, it
    /// answers with one of its own and the offerer decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub none: Option<Action>,
    /// What the offerer does with a choice it does not speak (MCP's client disconnects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Action>,
    /// The `refused` reaction's close reason names both versions, the offered and the
    /// chosen one: no silent downgrade (toolchannel's host closes 4001 "carrying both
    /// values"). Needs a `refused` that closes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub names_both: bool,
}

/// How versions are offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum VersionForm {
    /// An array of every version the offerer speaks.
    List,
    /// The one version the offerer prefers.
    Single,
}

/// A party to the protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Party {
    /// What the party is and owns.
    pub description: String,
    /// The rules the ids of this party's requests follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<IdRules>,
    /// Where this party declares the capabilities it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declares: Option<Declaration>,
}

/// How a party numbers its requests. Every rule given must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdRules {
    /// String ids start with this (rukh: `c:` for the core, `e:` for the extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Each id is greater than the one before (the number after the prefix, for strings).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub increasing: bool,
    /// Each id is the one before plus one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gapless: bool,
    /// The first id's number: with `gapless` the first id is this one, with `increasing`
    /// no id is below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    /// No id is used twice in a session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unique: bool,
    /// Limit (by name, a count) on this party's requests awaiting an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<String>,
    /// What a request breaking these rules gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
}

/// Where in the handshake a party lists its capabilities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Declaration {
    /// The method whose message carries the list.
    pub method: String,
    /// Which message: the call itself, or the result answering it.
    pub part: Part,
    /// JSON pointer to the list (MCP: `/result/capabilities`).
    pub pointer: String,
    /// Whether the capabilities are the array's strings or the object's member names.
    pub form: DeclarationForm,
    /// What the other party does with a declaration naming a capability the contract does
    /// not list (rukh: an extension refuses an unsupported mandatory capability, -32003).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<Action>,
    /// What this party does with a message needing one of its capabilities that it left
    /// out of its declaration (rukh: a commandResult the core never offered ends the
    /// invocation). Without it the message is only flagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undeclared: Option<Action>,
}

/// How a capability list is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeclarationForm {
    /// An array of capability names.
    List,
    /// An object whose member names are the capabilities.
    ObjectKeys,
}

/// Credit-based flow control on a data channel, run by one engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credit {
    /// The channel whose frames spend credit.
    pub channel: String,
    /// What one allowance is kept per: a header field of the channel's binary framing
    /// (`stream_id`).
    pub key: String,
    /// The message that grants credit.
    pub grant: Grant,
    /// Limit (by name) on credit before the first grant (0: nothing may flow unasked).
    pub initial: String,
    /// What a frame spends.
    pub counts: CreditCounts,
    /// Limit (by name) on the credit a sender may hold at once, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_held: Option<String>,
    /// The message that opens a key with the `initial` allowance. Absent: every key is
    /// open from its first frame or grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens: Option<KeyAt>,
    /// The messages that end a key for both sides. The first is what an overrun sends
    /// each party, so that the key ends on both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closes: Vec<KeyAt>,
    /// Limit (by name) on the frame bytes (header after the length field, and payload)
    /// an intermediary may hold per key for a sender that ran ahead of its credit, to
    /// absorb a race between the grant and the data. Absent: nothing is held; a frame
    /// beyond the allowance is an overrun at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// What a frame beyond the allowance gets.
    pub overrun: Action,
    /// What the mechanism is for, in the seed's words.
    pub description: String,
    /// Seed section.
    pub seed: String,
}

/// The message that grants credit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// Its method.
    pub method: String,
    /// JSON pointer to the key the grant is for (the stream id).
    pub key: String,
    /// JSON pointer to the amount granted.
    pub amount: String,
}

/// A message that names a credit key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyAt {
    /// Its method.
    pub method: String,
    /// JSON pointer to the key in the message.
    pub key: String,
}

/// One live connection per identity: a message claims an identity (a session id) for its
/// connection, and a later connection that claims it again (a peer that redialled) either
/// supersedes the holder, which is closed, or is refused. The identity outlives a closed
/// holder, so only a redial that may supersede takes it back, until a `releases` message
/// gives it up for good.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Claim {
    /// What is claimed, and by whom.
    pub description: String,
    /// Seed section.
    pub seed: String,
    /// The message that claims the identity (a `message` trigger: method, kind, sender,
    /// matches).
    pub message: Trigger,
    /// JSON pointer to the identity in that message.
    pub key: String,
    /// JSON pointer to who claims it (a process instance): only the same claimant may
    /// supersede. Absent: any claimant may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimant: Option<String>,
    /// JSON pointer to the redial's number: a claim supersedes only with a greater one.
    /// Absent: any claim the claimant rule lets through supersedes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<String>,
    /// The attempt a process's first claim carries (toolchannel's 0); each redial's is one
    /// above the last connection's claim, or this one above where that claimed nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<i64>,
    /// What the connection holding the identity gets when a claim supersedes it (`close`
    /// with its code, or `drop-connection`).
    pub superseded: Action,
    /// What a claim that may not supersede gets, on its own connection.
    pub refused: Action,
    /// The message after which the identity is given up for good once its holder closes
    /// (a `message` trigger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub releases: Option<Trigger>,
}

/// A value both parties of a connection hold: the handshake's messages state it as it is
/// settled (`settled`), later ones repeat it (`repeated`). The `judge` compares what the
/// other party states with the agreed value and reacts to another one with `mismatch`;
/// what the judge states itself must agree too, with no reaction prescribed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Agreement {
    /// What the value is, and who states it where.
    pub description: String,
    /// Seed section.
    pub seed: String,
    /// The party that compares, and reacts to a value other than the agreed one.
    pub judge: String,
    /// Where the handshake states the value as it settles it, in the order they come.
    pub settled: Vec<Place>,
    /// How the settling statements make the agreed value.
    pub rule: AgreementRule,
    /// Where later messages repeat the agreed value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeated: Vec<Place>,
    /// Each party knows the value before the connection opens (toolchannel's host from the
    /// token it issued, the worker from its launch): each states its own, never echoing
    /// the other's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub known: bool,
    /// The version (by name) whose values the agreed value is one of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The close that follows a mismatch names both values, the agreed and the stated one
    /// (toolchannel's reasons, note T-16).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub names_both: bool,
    /// What the judge does with a message of the other party's stating another value.
    pub mismatch: Action,
}

/// How an agreement's settling statements make its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AgreementRule {
    /// Every statement is the same value: the first settles it, another one is a mismatch.
    Same,
    /// The lowest of the statements, once all came: numbers by value, strings of dotted
    /// numbers (`1.10.0`) part by part (toolchannel's effective channel version).
    Lowest,
}

impl Agreement {
    /// The agreed value, from what each settling place stated so far (by index, `None` for
    /// one not come yet): under `same` the first statement, under `lowest` the lowest once
    /// every place stated one.
    pub fn agreed<'s>(&self, stated: &'s [Option<Value>]) -> Option<&'s Value> {
        match self.rule {
            AgreementRule::Same => stated.iter().flatten().next(),
            AgreementRule::Lowest => {
                let all: Option<Vec<&Value>> = stated.iter().map(Option::as_ref).collect();
                all?.into_iter().min_by(|a, b| version_order(a, b))
            }
        }
    }
}

/// Versions in order: numbers by value, strings of dotted numbers (`1.10.0`) part by part,
/// anything else as text.
pub fn version_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) {
        return x.total_cmp(&y);
    }
    // Part by part as they are read, nothing collected: asked of every message that
    // repeats a version.
    fn nums(s: &str) -> impl Iterator<Item = u64> + '_ {
        s.split('.').map(|p| p.parse().unwrap_or_default())
    }
    fn dotted(v: &Value) -> Option<&str> {
        let s = v.as_str()?;
        s.split('.').all(|p| p.parse::<u64>().is_ok()).then_some(s)
    }
    match (dotted(a), dotted(b)) {
        (Some(x), Some(y)) => nums(x).cmp(nums(y)),
        _ => a.to_string().cmp(&b.to_string()),
    }
}

/// Where a message states a value: a method's message (its own kind, or the answer
/// `kind` names) and a JSON pointer into it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Place {
    /// The method (wire name); for a response or error, the method of the request.
    pub method: String,
    /// Which message: the method's own kind when absent, else `response` or `error` for
    /// the answer to a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    /// JSON pointer to the value in the message.
    pub pointer: String,
}

/// Which part of its method's exchange a message of `kind` is (`None`: the method's own
/// kind): the call itself, its result or its error; `None` for a kind no exchange has.
pub fn part_of(kind: Option<Kind>) -> Option<Part> {
    match kind {
        None => Some(Part::Call),
        Some(Kind::Response) => Some(Part::Result),
        Some(Kind::Error) => Some(Part::Error),
        Some(_) => None,
    }
}

impl Place {
    /// Which part of its method's exchange the place is in.
    pub fn part(&self) -> Option<Part> {
        part_of(self.kind)
    }

    /// The value `m` states here, when it is this place's message (whoever sent it) and
    /// holds one at the pointer.
    pub fn value_in<'m>(&self, c: &Contract, m: &'m crate::wire::Message) -> Option<&'m Value> {
        let named =
            crate::machine::names(c, (&self.method, self.kind), (m.method.as_deref(), m.kind));
        named
            .then(|| crate::pointer::get(&m.value, &self.pointer))
            .flatten()
    }
}

/// A cue: a message one party sends to make the other act where a conformance suite can
/// watch it (stream a text, run a task), and what the acting party then sends. The suite
/// plays `party`, sends `method`'s call example with `set` applied, and expects each of
/// `expects` before the first of `until`, with every message judged by the contract's
/// behaviour data meanwhile (nothing after a terminal state, no id against its rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cue {
    /// What the cue makes the implementation do.
    pub description: String,
    /// Seed section (or note) that says implementations serve it.
    pub seed: String,
    /// The party that sends the cue.
    pub party: String,
    /// The method sent: its call example, with `set` applied.
    pub method: String,
    /// Members set over the example, by JSON pointer into the message.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub set: IndexMap<String, Value>,
    /// Methods the acting party sends before it is done, each at least once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expects: Vec<String>,
    /// The methods that end what the cue set off: the first one sent ends it.
    pub until: Vec<String>,
    /// The answer to the cue and every message of `expects` and `until` carry the cue's
    /// trace id (at the contract's `trace` path).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub traced: bool,
}

/// What a data frame spends of its credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CreditCounts {
    /// Its payload bytes.
    PayloadBytes,
    /// One unit per frame.
    Frames,
}

/// A channel: one byte stream or message stream between two parties.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Channel {
    /// What travels on this channel.
    pub description: String,
    /// Transports this channel runs over in practice (e.g. `unix`, `named-pipe`, `websocket`).
    pub transports: Vec<String>,
    /// The party that connects (dials); the other accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connects: Option<String>,
    /// How messages are delimited on the wire.
    pub framing: Framing,
    /// JSON parsing rules for this channel (absent for binary channels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<JsonRules>,
    /// Where a message keeps its kind, method, id, correlation and trace id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
    /// Schema every message on this channel satisfies (the envelope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub message: Option<Value>,
    /// What the listener refuses at the WebSocket upgrade, before any message (a channel
    /// carried over `websocket`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<Upgrade>,
    /// How the dialer (`connects`) comes back when the channel ends: it dials again and, where
    /// its handshake claims an identity (`claims`), claims the same one with the next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redial: Option<Redial>,
    /// Seed section.
    pub seed: String,
}

/// The dialer's redial: after the channel ends in one of the ways `after` lists, the dialer
/// dials again within the `within` limit. A claim it makes on the new connection keeps its
/// claimant and carries the attempt one above the last connection's claim (1 where that
/// connection claimed nothing: its dial was attempt 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Redial {
    /// The limit (by name, a deadline) the new dial comes within.
    pub within: String,
    /// The ends that bring the dialer back.
    pub after: Vec<RedialAfter>,
    /// What the redial is for, in the contract's words.
    pub description: String,
    /// Seed section (or note).
    pub seed: String,
}

/// An end of the channel after which the dialer redials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RedialAfter {
    /// A close with this code (a value of a `close-code` table).
    Close(u16),
    /// `"break"`: the connection ends without a close (a transport break).
    Break(RedialBreak),
}

/// The one word for a transport break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RedialBreak {
    /// The connection ends without a close frame or a close code.
    Break,
}

/// The rules of a channel's WebSocket upgrade the listener enforces: each refusal is an
/// HTTP status of an `http-status` code table, answered instead of `101`, so no session
/// starts. The dialer's process owes the exit the status `maps` into its party's exit table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Upgrade {
    /// The dialer carries `Authorization: Bearer <token>`, the token it was given; an
    /// upgrade without it, or with another, gets `refused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<UpgradeRefusal>,
    /// An upgrade offering none of the framing's `subprotocols` gets `refused`, listing
    /// them in `Sec-WebSocket-Protocol` (the dialer can log both lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subprotocol: Option<UpgradeRefusal>,
}

/// One refusal at the upgrade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpgradeRefusal {
    /// The HTTP status answered (a value of an `http-status` code table).
    pub refused: u16,
    /// Seed section (or note).
    pub seed: String,
}

/// Framing of a channel. Sizes refer to [`Contract::limits`] by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Framing {
    /// An unsigned length prefix, then that many bytes of UTF-8 JSON.
    LengthPrefixed {
        /// Width of the length prefix in bytes.
        #[serde(rename = "lengthBytes")]
        length_bytes: u8,
        /// Byte order of the prefix.
        #[serde(rename = "byteOrder")]
        byte_order: ByteOrder,
        /// Limit (by name) capping the payload length; checked before allocation.
        #[serde(
            rename = "maxPayload",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        max_payload: Option<String>,
        /// Limit (by name, a deadline): once a frame's first byte has arrived, the
        /// whole frame must arrive within it. Progress does not reset it, so a peer
        /// trickling one byte at a time cannot hold the reader forever.
        #[serde(
            rename = "frameDeadline",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        frame_deadline: Option<String>,
        /// Per-method tighter caps are declared on the method (`maxPayload`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// A binary frame: fixed header fields, then opaque payload bytes.
    Binary {
        /// Byte order of every header field.
        #[serde(rename = "byteOrder")]
        byte_order: ByteOrder,
        /// Header fields in wire order.
        header: Vec<HeaderField>,
        /// Limit (by name) capping the whole frame after the length field.
        #[serde(rename = "maxFrame", default, skip_serializing_if = "Option::is_none")]
        max_frame: Option<String>,
        /// The header field that numbers frames from 0, +1 per frame, in each direction and
        /// per credit key (a channel with `credit`), else per direction: a gap is flagged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sequence: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// One JSON value per line, terminated by `\n`.
    Ndjson {
        /// Limit (by name) capping one line.
        #[serde(rename = "maxLine")]
        max_line: String,
        /// How the line limit is measured.
        #[serde(rename = "lineMeasure")]
        line_measure: LineMeasure,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// ASCII header lines (`Name: value\r\n`), an empty line, then a body whose length
    /// one header gives in decimal: the LSP and DAP base protocol.
    HeaderDelimited {
        /// The header that carries the body length in bytes (`Content-Length`).
        #[serde(rename = "lengthHeader")]
        length_header: String,
        /// Limit (by name) capping the body; checked before a byte of it is buffered.
        #[serde(
            rename = "maxPayload",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        max_payload: Option<String>,
        /// Limit (by name) capping the header section, its closing empty line included.
        #[serde(rename = "maxHeader", default, skip_serializing_if = "Option::is_none")]
        max_header: Option<String>,
        /// The other header fields the protocol defines, and the values each may take.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<HeaderLine>,
        /// What a header field the contract does not list gets.
        #[serde(rename = "unknownHeaders", default)]
        unknown_headers: UnknownHeaders,
        /// Limit (by name, a deadline): a frame's whole header and body must arrive within
        /// it once its first byte has, as for `length-prefixed`.
        #[serde(
            rename = "frameDeadline",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        frame_deadline: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// One JSON message per WebSocket text message.
    WebsocketText {
        /// Limit (by name) capping one message.
        #[serde(
            rename = "maxMessage",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        max_message: Option<String>,
        /// WebSocket subprotocols offered at the upgrade.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        subprotocols: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
}

impl Framing {
    /// The WebSocket subprotocols offered at the upgrade (none but for `websocket-text`).
    pub fn subprotocols(&self) -> &[String] {
        match self {
            Framing::WebsocketText { subprotocols, .. } => subprotocols,
            _ => &[],
        }
    }

    /// The limit capping one frame's payload, with the framing field that names it
    /// (`maxPayload`, `maxLine`, `maxMessage`); `None` when the contract sets no cap.
    pub fn payload_cap(&self) -> Option<(&'static str, &str)> {
        match self {
            Framing::LengthPrefixed { max_payload, .. }
            | Framing::HeaderDelimited { max_payload, .. } => {
                max_payload.as_deref().map(|l| ("maxPayload", l))
            }
            Framing::Binary { .. } => None,
            Framing::Ndjson { max_line, .. } => Some(("maxLine", max_line.as_str())),
            Framing::WebsocketText { max_message, .. } => {
                max_message.as_deref().map(|l| ("maxMessage", l))
            }
        }
    }
}

/// One header field of a `header-delimited` framing. Names compare case-insensitively,
/// as in HTTP, whose header syntax these protocols borrow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderLine {
    /// Field name, e.g. `Content-Type`.
    pub name: String,
    /// Whether every frame must carry it.
    #[serde(default)]
    pub required: bool,
    /// The values it may take (compared case-insensitively); empty means any. A writer
    /// that must send it sends the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// What it means.
    pub description: String,
}

/// What a `header-delimited` reader does with a header field the contract does not list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownHeaders {
    /// The frame is a framing error.
    #[default]
    Reject,
    /// The field is skipped.
    Ignore,
}

/// Byte order of a multi-byte integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ByteOrder {
    /// Most significant byte first (network order).
    Big,
    /// Least significant byte first.
    Little,
}

/// How a line-length limit is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LineMeasure {
    /// Raw bytes on the wire.
    Bytes,
    /// UTF-16 code units of the decoded line (JavaScript `string.length`).
    Utf16Units,
}

/// One fixed-width header field of a binary frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderField {
    /// Field name.
    pub name: String,
    /// Width in bytes.
    pub bytes: u8,
    /// Whether the integer is signed.
    #[serde(default)]
    pub signed: bool,
    /// What a length field counts, if this is the length field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<LengthCounts>,
    /// Meaning of the field.
    pub description: String,
}

/// What a length field counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LengthCounts {
    /// Every byte after the length field itself.
    RestOfFrame,
    /// Only the payload after the whole header.
    Payload,
}

/// JSON parsing rules for a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsonRules {
    /// Strict profile: rejects BOM, lone surrogates, duplicate keys, unsafe integers,
    /// non-finite numbers and trailing bytes, each with its own error.
    pub strict: bool,
    /// The top-level value must be an object.
    #[serde(default)]
    pub object_only: bool,
    /// Limit (by name) on nesting depth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<String>,
    /// Limit (by name) on object members plus array elements in one frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<String>,
    /// No `null` anywhere in a message: an absent optional member is omitted (the kernel's
    /// K-22). A null is an `invalid` message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_null: bool,
    /// Seed section.
    pub seed: String,
}

/// Where a message keeps its routing facts. JSON pointers throughout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "model", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Binding {
    /// JSON-RPC 2.0: the kind follows from which of method/id/result/error are present.
    Jsonrpc {
        /// Required value of the `jsonrpc` member.
        version: String,
        /// Pointer to a trace carrier inside params, if any (e.g. `/params/_meta/traceparent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
    /// A custom envelope with an explicit kind field.
    Envelope {
        /// Pointer to the kind field.
        kind: String,
        /// Wire value of the kind field → message kind.
        kinds: IndexMap<String, Kind>,
        /// Pointer to the method name.
        method: String,
        /// Pointer to the message id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Pointer to the id of the request a reply answers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        correlation: Option<String>,
        /// Pointer to the trace id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
        /// Pointer to the negotiated protocol version.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        /// Pointer to the send time, in seconds since the Unix epoch, when every
        /// message carries one: a message an intermediary makes up gets it too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<String>,
        /// Pointer to the payload (params, result or error body).
        payload: String,
    },
    /// Frames told apart by literal values at fixed pointers; each method has a `match`.
    Tagged {
        /// Pointer to the message id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Pointer to the id of the message a reply refers to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        correlation: Option<String>,
        /// Pointer to an array of further ids the same reply covers: one verdict on a
        /// batch (xsession's `droppedMsgIds`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<String>,
        /// Pointer to the frame-format version.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        /// Pointer to the trace id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
}

/// The kind of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Expects exactly one response or error.
    Request,
    /// The successful answer to a request.
    Response,
    /// A one-way message that expects no answer.
    Notification,
    /// A one-way report of something that happened, possibly tied to a request.
    Event,
    /// The failed answer to a request (or a standalone error report).
    Error,
}

impl Kind {
    /// The kind as contracts spell it (`request`, `notification`, …).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Response => "response",
            Kind::Notification => "notification",
            Kind::Event => "event",
            Kind::Error => "error",
        }
    }
}

/// A capability a party declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capability {
    /// Party that declares (offers) the capability.
    pub declared_by: String,
    /// What the capability promises.
    pub description: String,
    /// Seed section.
    pub seed: String,
}

/// A method, message or event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Method {
    /// Request, notification or event.
    pub kind: Kind,
    /// Party (or parties) that may send it.
    pub from: Vec<String>,
    /// Channel it travels on.
    pub channel: String,
    /// Capability the receiver must have declared before this may be sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// Capabilities a message of this method needs only when its members hold given
    /// values (kernel's stream.open of kind audio.output needs the shell's audio.output
    /// and the core's tts), on top of `capability`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<Need>,
    /// What it does.
    pub description: String,
    /// Seed section.
    pub seed: String,
    /// For `tagged` bindings: pointer → literal value that identifies this message.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[serde(rename = "match")]
    #[schemars(with = "IndexMap<String, serde_json::Value>")]
    pub matches: IndexMap<String, Value>,
    /// Schema of the params / payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub params: Option<Value>,
    /// Schema of the successful result (requests only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub result: Option<Value>,
    /// Error codes (from `errors`) this method may answer with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub errors: Vec<Value>,
    /// For a one-way message: the other party's messages that answer it, carrying its id
    /// at the binding's `correlation` (xsession's delivery_status about a user frame). Such
    /// answers are best-effort: one may never come, and one that comes must be valid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered_by: Vec<String>,
    /// Limit (by name) capping this method's frames, tighter than the channel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_payload: Option<String>,
    /// What a frame over `maxPayload` gets when it is not the `oversize` violation's
    /// action (rukh.log: the record is dropped and counted, `ignore`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_max_payload: Option<ActionKind>,
    /// When a message of this method may not be sent: while its sender awaits the answer
    /// to a request of another method (toolchannel's host never releases idle or
    /// explicitly during its tools/call, note T-12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_while: Option<NotWhile>,
    /// Whole wire messages that show the method, each validated by `contractgen check`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<Example>,
}

/// A method's message is not sent while its sender awaits the answer to a request of one
/// of `pending`, unless it holds one of the `unless` values. Its receiver cannot undo what
/// was sent, so a breach is only flagged (the proxy) or failed (the conformance suite).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NotWhile {
    /// The requests (wire names) whose answers the sender must have first.
    pub pending: Vec<String>,
    /// JSON pointer into the whole message → the values that let it be sent anyway
    /// (toolchannel: a release of reason `deadline` or `failed`).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[schemars(with = "IndexMap<String, Vec<serde_json::Value>>")]
    pub unless: IndexMap<String, Vec<Value>>,
    /// Why, in the seed's terms.
    pub description: String,
    /// Seed section (or note) the rule comes from.
    pub seed: String,
}

impl Need {
    /// Whether `message` (a whole message) is one this entry asks capabilities of.
    pub fn holds(&self, message: &Value) -> bool {
        crate::pointer::matches_all(&self.matches, message)
            && (self.present.iter()).all(|p| crate::pointer::get(message, p).is_some())
    }
}

impl NotWhile {
    /// Whether `v`, a whole message, holds one of the `unless` values.
    pub fn lifted(&self, v: &Value) -> bool {
        (self.unless.iter())
            .any(|(p, vals)| crate::pointer::get(v, p).is_some_and(|x| vals.contains(x)))
    }
}

/// Capabilities a message needs when every one of its `matches` holds and every member
/// `present` names is there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Need {
    /// JSON pointer into the whole message → the literal value it must hold.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[schemars(with = "IndexMap<String, serde_json::Value>")]
    pub matches: IndexMap<String, Value>,
    /// JSON pointers into the whole message that must hold something, whatever it is
    /// (rukh's `/result/commandResult`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub present: Vec<String>,
    /// The capabilities needed, each declared by its own `declaredBy` party.
    pub capabilities: Vec<String>,
    /// Seed section (or note) the rule comes from.
    pub seed: String,
}

/// An example wire message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Example {
    /// What the example shows.
    pub title: String,
    /// Which message of the exchange this is.
    pub part: Part,
    /// Party that sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Seed section it comes from, or `contract` for examples written here.
    pub seed: String,
    /// How it differs from the seed's text, if at all (placeholders, comments removed…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapted: Option<String>,
    /// The whole message as it travels.
    #[schemars(with = "serde_json::Value")]
    pub message: Value,
}

/// Which message of an exchange an example shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// The request, notification or event itself (validated against `params`).
    Call,
    /// The successful response (validated against `result`).
    Result,
    /// The error reply (validated against the error schema).
    Error,
}

/// What a receiver does about one class of bad or unknown input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Violations {
    /// Bytes that are not valid JSON (or break the strict profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse: Option<Action>,
    /// Valid JSON that is not a valid message (envelope, shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<Action>,
    /// A frame or line over its size cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oversize: Option<Action>,
    /// A request whose method is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_request: Option<Action>,
    /// A notification or event whose method is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_notification: Option<Action>,
    /// A known method sent by a party that may not send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrong_direction: Option<Action>,
    /// A known method whose params fail their schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_params: Option<Action>,
    /// Anything but the handshake before the handshake completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_handshake: Option<Action>,
}

impl Violations {
    /// The codes of the entries that carry one: what any method may be answered with.
    pub fn codes(&self) -> impl Iterator<Item = &Value> {
        [
            &self.parse,
            &self.invalid,
            &self.oversize,
            &self.unknown_request,
            &self.unknown_notification,
            &self.wrong_direction,
            &self.invalid_params,
            &self.before_handshake,
        ]
        .into_iter()
        .filter_map(|a| a.as_ref()?.code.as_ref())
    }
}

/// A receiver's reaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Action {
    /// What is done.
    pub action: ActionKind,
    /// The error code (from `errors`) or close code (from a code table) used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub code: Option<Value>,
    /// Limit (by name) this violation counts toward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_toward: Option<String>,
    /// Who is told, and how, when the message is dropped (`ignore`): the receiver's report
    /// to an address the message names (xsession's delivery_status to the sender's inbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    /// For a `close`: the name its close reason carries (toolchannel's failureReason,
    /// `handshake_timeout`, note T-6); for a `reply-error`: the error data's `reason`
    /// (rukh's `context_mismatch`, R-44). It tells apart reactions sharing one code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For a `reply-error` to a message missing members (`invalid`): JSON pointer, in the
    /// error reply, to the list of the names of the members found missing or invalid
    /// (kernel's `/payload/details/fields`, 4.0-D04).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<String>,
    /// For a `reply-error`: what follows the reply (toolchannel's close 4002 after -32002).
    /// Where the offending message is no request, nothing can answer it: only this action
    /// is taken, its close reason starting with the error's code and name (note T-4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<Box<Action>>,
    /// Why, in the seed's terms.
    pub description: String,
    /// Seed section.
    pub seed: String,
}

/// A report of a dropped message, sent where the message says: dial the address at `to`
/// (on the route's transport), write `messages` in the channel's framing, half-close.
/// Without an address at `to` no report can be sent, and the drop is only counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Report {
    /// JSON pointer to the address in the dropped message.
    pub to: String,
    /// The messages written there, in order.
    pub messages: Vec<ReportMessage>,
}

/// One message of a [`Report`]: its method's own `matches` fields, then these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportMessage {
    /// Its method.
    pub method: String,
    /// Pointer into the dropped message: the report message is written only when it is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Fields copied from the dropped message: pointer here → pointer there.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[schemars(with = "std::collections::BTreeMap<String, String>")]
    pub copy: IndexMap<String, String>,
    /// Fields with fixed values: pointer here → value.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[schemars(with = "std::collections::BTreeMap<String, serde_json::Value>")]
    pub set: IndexMap<String, Value>,
    /// Where the action's code goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Where a one-line reason goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where a fresh message id goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Reactions a contract can prescribe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ActionKind {
    /// Answer with an error reply carrying `code`, keep the connection.
    ReplyError,
    /// Close the connection with `code` (a close code).
    Close,
    /// Drop the connection without a word.
    DropConnection,
    /// Discard the message silently.
    Ignore,
    /// End the whole session or invocation with a protocol error.
    Fail,
}

/// One entry of the error catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorEntry {
    /// The code as it appears on the wire (string or integer).
    #[schemars(with = "serde_json::Value")]
    pub code: Value,
    /// Symbolic name, for integer codes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Category (e.g. `protocol`, `user`, `permission`).
    pub category: String,
    /// Whether repeating the same request may succeed.
    pub retryable: bool,
    /// When it is sent and what it means.
    pub description: String,
    /// Seed section.
    pub seed: String,
    /// True when the seed lost this entry and the contract reconstructed it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconstructed: bool,
}

/// A table of codes of one kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodeTable {
    /// What kind of code this is.
    pub kind: CodeKind,
    /// What the table covers.
    pub description: String,
    /// Seed section.
    pub seed: String,
    /// The party whose process ends with these values (an exit-code table): what another
    /// table's `maps` into this one owes of that party's process, which the conformance
    /// suite watches where it launches the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub party: Option<String>,
    /// The values, in the seed's order.
    pub values: Vec<CodeValue>,
}

/// Kinds of code tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CodeKind {
    /// WebSocket close codes.
    CloseCode,
    /// Process exit codes.
    ExitCode,
    /// Exit codes of a command-line tool.
    CliExitCode,
    /// HTTP statuses.
    HttpStatus,
    /// Status values (e.g. delivery status).
    Status,
    /// Reasons (drop reasons, stop reasons, failure reasons).
    Reason,
    /// Outcomes of a run.
    Outcome,
    /// Any other closed vocabulary.
    Enumeration,
}

/// One value in a code table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodeValue {
    /// The value as it appears on the wire (string or integer).
    #[schemars(with = "serde_json::Value")]
    pub value: Value,
    /// Symbolic name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Meaning.
    pub description: String,
    /// Values in other tables this one implies, by table name (e.g. close 4002 → exit 77).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[schemars(with = "IndexMap<String, serde_json::Value>")]
    pub maps: IndexMap<String, Value>,
    /// Seed section, when different from the table's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
}

/// A limit, rate or deadline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limit {
    /// What kind of number it is.
    pub kind: LimitKind,
    /// The value: a number, or an expression over other limits.
    pub value: Expr,
    /// Unit of `value`.
    pub unit: Unit,
    /// For rates: the bucket size before refilling applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// For rates: `value` units are allowed per this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_seconds: Option<f64>,
    /// Party whose timer or counter this is (or `both`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer: Option<String>,
    /// What the timer or counter is counted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// What happens when it expires or is exceeded.
    pub on_expiry: String,
    /// The reaction in machine form, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// Which messages the limit applies to; all it can apply to when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applies: Option<Applies>,
    /// For rates: what one bucket is kept per.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<LimitKey>,
    /// A duplicate window (`kind: interval`): a message the limit `applies` to that agrees
    /// with an earlier one that went on within the window at every `same` pointer, under
    /// another id, gets the limit's `action` (xsession's duplicateWindow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicates: Option<Duplicates>,
    /// For counts the engine keeps: what it counts. `open-connections`: the connections a
    /// listener (a route) has open at once; `pending-requests`: the requests it `applies`
    /// to that one sender has awaiting an answer on a connection. One beyond `value` gets
    /// the `action`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<LimitCounts>,
    /// For size caps on requests: whether the cap holds for the requests, their replies, or both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<Caps>,
    /// For deadlines: what starts the clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Trigger>,
    /// For deadlines: what stops it in time (any one of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<Trigger>,
    /// For deadlines: what starts the clock afresh, running or not (xsession's every
    /// parseable line, a heartbeat).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart: Vec<Trigger>,
    /// For a deadline or interval a party runs (`timer`): the method that party sends when
    /// the time runs out (the kernel's ping after a silence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sends: Option<String>,
    /// Where the wire carries the limit's value for a connection: a value found there holds
    /// on that connection from then on, in place of `value`, which is the default
    /// (toolchannel's budgets in `initialize`, cut by a heartbeat's answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<LimitCarrier>,
    /// What the limit is.
    pub description: String,
    /// Seed section.
    pub seed: String,
}

/// A message that carries a limit's value, in the limit's own unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitCarrier {
    /// The method (wire name); for a response or error, the method of the request.
    pub method: String,
    /// Which message: the method's own kind when absent, else `response` or `error` for
    /// the answer to a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    /// JSON pointer to the number in the message.
    pub pointer: String,
    /// Whether the value may only lower the one in force: a larger one is ignored (a
    /// budget the receiver caps, never raised over the wire).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lower_only: bool,
    /// Whether the value here only repeats the one in force and sets nothing: another one
    /// breaks the contract (toolchannel's release `graceSeconds`, note T-52).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeats: bool,
}

impl LimitCarrier {
    /// Which part of its method the carrier is: the call itself, its result or its
    /// error; `None` for a kind no method's exchange has besides its own.
    pub fn part(&self) -> Option<Part> {
        part_of(self.kind)
    }

    /// The value `m` carries here, when it is this carrier's message (whoever sent it) and
    /// holds a number at the pointer.
    pub fn value_in(&self, c: &Contract, m: &crate::wire::Message) -> Option<f64> {
        let named =
            crate::machine::names(c, (&self.method, self.kind), (m.method.as_deref(), m.kind));
        named
            .then(|| crate::pointer::get(&m.value, &self.pointer)?.as_f64())
            .flatten()
            .filter(|v| v.is_finite() && *v >= 0.0)
    }
}

/// What a count limit counts, when the engine keeps the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LimitCounts {
    /// Connections a listener (a route) has open at once.
    OpenConnections,
    /// Requests (those the limit applies to) one sender has awaiting an answer on a
    /// connection: rukh's operation and UI requests per direction.
    PendingRequests,
}

/// The messages a limit applies to: every condition given must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Applies {
    /// Methods (wire names); any method when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// The channel; any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The sending party; any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// What makes two messages duplicates of each other, for a [`Limit`]'s window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Duplicates {
    /// JSON pointers into the message: messages with equal values at all of them are the
    /// same (xsession: the sender's `from`, the recipient session and the body).
    pub same: Vec<String>,
    /// JSON pointer to the message's own id: the same message sent again under its own id
    /// is no duplicate of itself (xsession's msgId, X-5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct: Option<String>,
}

/// What one token bucket of a rate limit is kept per.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "per", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LimitKey {
    /// One bucket per value at `pointer` in the message (xsession's `from`).
    Pointer {
        /// JSON pointer into the message.
        pointer: String,
    },
    /// One bucket per connection.
    Connection,
    /// One bucket per sending party, across its connections.
    Party,
    /// One bucket for everything the limit applies to.
    Global,
}

/// Which messages of a request's exchange a size cap holds for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Caps {
    /// The requests (and notifications) only.
    Requests,
    /// The replies only.
    Replies,
    /// Both.
    Both,
}

/// What kind of number a limit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LimitKind {
    /// A size cap.
    Size,
    /// A count cap.
    Count,
    /// A deadline or timeout.
    Deadline,
    /// A period (heartbeat interval, keepalive).
    Interval,
    /// A token-bucket rate.
    Rate,
    /// Any other fixed number (permissions mode, id length).
    Constant,
}

/// Units of limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Unit {
    /// Bytes.
    #[serde(rename = "bytes")]
    Bytes,
    /// 1024 bytes.
    #[serde(rename = "KiB")]
    KiB,
    /// 1024 × 1024 bytes.
    #[serde(rename = "MiB")]
    MiB,
    /// UTF-16 code units.
    #[serde(rename = "utf16-units")]
    Utf16Units,
    /// Seconds.
    #[serde(rename = "s")]
    Seconds,
    /// Milliseconds.
    #[serde(rename = "ms")]
    Millis,
    /// A plain count (messages, frames, levels, connections…).
    #[serde(rename = "count")]
    Count,
    /// A Unix file mode, written in decimal here and shown in octal.
    #[serde(rename = "mode")]
    Mode,
}

/// An expression over numbers and limit names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Expr {
    /// A literal number.
    Number(f64),
    /// The value of another limit, by name.
    Ref(String),
    /// Sum of the terms.
    Sum {
        /// Terms to add.
        sum: Vec<Expr>,
    },
    /// Product of the terms.
    Product {
        /// Terms to multiply.
        product: Vec<Expr>,
    },
}

/// A relation between limits a seed states, checked by `contractgen check`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Relation {
    /// Left side.
    pub left: Expr,
    /// Comparison.
    pub op: RelOp,
    /// Right side.
    pub right: Expr,
    /// Why it must hold.
    pub description: String,
    /// Seed section.
    pub seed: String,
}

/// Comparison operators for relations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RelOp {
    /// Strictly less.
    #[serde(rename = "<")]
    Lt,
    /// Less or equal.
    #[serde(rename = "<=")]
    Le,
    /// Equal.
    #[serde(rename = "==")]
    Eq,
    /// Greater or equal.
    #[serde(rename = ">=")]
    Ge,
    /// Strictly greater.
    #[serde(rename = ">")]
    Gt,
}

/// A state machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateMachine {
    /// What the machine tracks and who holds it.
    pub description: String,
    /// Seed section.
    pub seed: String,
    /// States and their meaning.
    pub states: IndexMap<String, String>,
    /// The state a new instance starts in.
    pub initial: String,
    /// States with no way out.
    pub terminal: Vec<String>,
    /// Allowed transitions.
    pub transitions: Vec<Transition>,
    /// What a transition the machine does not allow means.
    pub on_invalid: InvalidTransition,
    /// What one instance of the machine follows (a connection, a session, a key, a party).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// Methods that may be sent without moving the machine, and the states they may be
    /// sent in. A method whose message triggers a transition may also be sent in that
    /// transition's `from` state.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub allows: IndexMap<String, Vec<String>>,
    /// What a message of a method the machine governs gets when it is sent in a state
    /// that neither allows it nor leaves by it (e.g. a request before the handshake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_place: Option<Action>,
    /// Why no transition has a typed trigger, for a machine that is documentation on
    /// purpose: what it follows is not on any channel (a registry file, a process's exit
    /// status, a peer's internal pipeline), or another entry runs it (`/credit`, the
    /// parties' `ids`, a named extension). A machine with neither typed triggers nor this
    /// reason is one nobody has typed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untyped: Option<String>,
    /// Reactions other than `outOfPlace` for given messages in given states (rukh answers
    /// a second invoke with already_invoked, work after the completion with
    /// session_closing): the first refusal whose message matches and which names the state
    /// applies. A refusal changes what a governed message out of place gets; it does not
    /// make a message governed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<Refusal>,
}

/// One message refused in some states with its own action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Refusal {
    /// The message, as a `message` trigger (method, kind, sender; `matches` are not used).
    pub message: Trigger,
    /// The states it is refused in.
    pub states: Vec<String>,
    /// What it gets there; when absent it is only reported (flagged), not acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// Why, for a refusal without an action (an action says its own why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// What one instance of a state machine follows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "per", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Scope {
    /// One instance per connection (of `channel`, or of any channel).
    Connection {
        /// The channel whose connections each get one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        channel: Option<String>,
    },
    /// One instance per session: all of a session's connections share it.
    Session,
    /// One instance per value at `pointer` in the messages that trigger it (a stream id,
    /// a task id, a request id).
    Key {
        /// JSON pointer into the triggering messages.
        pointer: String,
    },
    /// One instance per party, across its connections (a peer that redials keeps it).
    Party {
        /// The party.
        party: String,
    },
}

/// What makes a transition fire: one vocabulary for machines, timers and rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Trigger {
    /// A message of the contract.
    Message {
        /// Its method (wire name); for a response or error, the method of the request.
        /// Any message (of `kind`, from `from`) when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        method: Option<String>,
        /// Which message: the method's own kind when absent, else `response` or `error`
        /// for the answer to a request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<Kind>,
        /// The party that sends it; any party the method allows when absent. In a limit's
        /// `start`, `stop` and `restart`, also `self` (the party running the timer) or `peer`
        /// (any other party): a `both` timer runs one clock per party.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        /// JSON pointer → value pairs the message must all hold (e.g. a kernel response
        /// whose `/payload/status` is `running`).
        #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
        #[schemars(with = "IndexMap<String, serde_json::Value>")]
        matches: IndexMap<String, Value>,
    },
    /// A deadline or interval limit runs out.
    Timer {
        /// The limit (a `deadline` or `interval`).
        limit: String,
    },
    /// A connection opens on a channel.
    Open {
        /// The channel.
        channel: String,
    },
    /// A connection on a channel closes or breaks.
    Close {
        /// The channel.
        channel: String,
    },
    /// A transport event the binding knows about.
    Transport {
        /// The channel it happens on.
        channel: String,
        /// What happens.
        what: TransportEvent,
        /// The close code or HTTP status, from one of the contract's code tables; any when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(with = "Option<serde_json::Value>")]
        code: Option<Value>,
    },
}

/// Transport events a trigger can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TransportEvent {
    /// A WebSocket close frame arrives.
    WebsocketClose,
    /// The HTTP upgrade is answered.
    HttpStatus,
}

/// An allowed transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Transition {
    /// Source state.
    pub from: String,
    /// Target state.
    pub to: String,
    /// What triggers it, in the seed's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
    /// What triggers it, as data an engine can run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    /// How the channel ends once this transition is taken, where the seed says (a
    /// toolchannel worker closing 4005 after its release result; an LSP server exiting 0
    /// after `exit` that followed `shutdown`, 1 after one that did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends: Option<Ending>,
}

/// How a transition ends the channel: who ends it, how, and the exit its process makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ending {
    /// The party that ends the channel.
    pub by: String,
    /// `close` (with `code`, a close code) or `drop-connection` (the stream just ends).
    pub action: ActionKind,
    /// The close code, for a `close`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub code: Option<Value>,
    /// The exit code `by`'s process ends with, a value of its exit-code table (a table
    /// whose `party` is `by`); where a close code already `maps` one, that one holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i64>,
    /// The channel ends by the machine's own steps from the transition's target, not at
    /// once: what the machine allows there may come first (rukh's core closing after an
    /// error answer to its invoke), its requests answered by the other party, which ends
    /// its side once its answer takes the machine to a terminal state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steps: bool,
    /// Why, in the seed's terms.
    pub description: String,
    /// Seed section.
    pub seed: String,
}

/// What a disallowed transition means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InvalidTransition {
    /// It is a protocol error.
    Error,
    /// It is a repeat or a late report and is ignored.
    Ignore,
}

/// A named extension: what its hook enforces for this contract, and why data cannot say it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Extension {
    /// The rules the hook runs for this contract.
    pub description: String,
    /// Why the contract's data cannot express them (or not yet).
    pub reason: String,
    /// Seed sections and notes the rules come from.
    pub seed: String,
}

/// Where the trace id lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Trace {
    /// Channel that carries it.
    pub channel: String,
    /// Pointer to it in each message.
    pub path: String,
    /// Its format.
    pub format: TraceFormat,
    /// Which messages carry it.
    pub propagation: String,
    /// An answer carries the trace id of the request it answers (kernel's K-31: every
    /// message an action causes carries its trace); the derived call checks hold each
    /// answer to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answers_inherit: bool,
    /// Seed section.
    pub seed: String,
}

/// Trace id formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// An opaque string chosen by the originator.
    Opaque,
    /// A W3C `traceparent` header value.
    W3cTraceparent,
}

/// A file that is part of the protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileSpec {
    /// Where it lives.
    pub path: String,
    /// Its contents' schema.
    #[schemars(with = "serde_json::Value")]
    pub schema: Value,
    /// Who writes, who reads, and the rules.
    pub description: String,
    /// Seed section.
    pub seed: String,
    /// Example contents, validated against `schema`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub examples: Vec<Value>,
}

/// A decision taken where a seed is silent or contradicts itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Note {
    /// Stable identifier, e.g. `K-3`.
    pub id: String,
    /// Seed section (and digest gap id) it concerns.
    pub seed: String,
    /// What the seed says or lacks.
    pub issue: String,
    /// What the contract decided, and why.
    pub decision: String,
}

/// The meta-schema for contract documents, as committed in `schema/contract.schema.json`.
pub fn meta_schema() -> Value {
    let schema = schemars::schema_for!(Contract);
    schema.to_value()
}
