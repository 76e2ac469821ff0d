//! Classify decoded frames against a contract: kind, method, ids, trace id,
//! direction and payload schema, or a [`Violation`] carrying the contract's own
//! code and prescribed action.
//!
//! Reasons never quote the offending value (schema errors are rendered
//! masked), so a token that fails its schema cannot leak into a log.
//!
//! [`Wire`] is compiled once per contract (schemas compiled, limits resolved)
//! and is then read-only, so one instance serves every connection.
// A violation is the cold path and carries the whole story of one bad
// message (its code, action, details and the partial parse); returning it by
// value keeps call sites simple, so its size is accepted here.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;

use crate::pointer::{get as lookup, member};
use serde_json::{Map, Value, json};

use super::framing::{ChannelCodec, FrameError, cap_of, duration_of};
use super::json::{self, JsonError, JsonLimits, MAX_DEPTH_SUPPORTED};
use crate::check::rooted;
use crate::model::{Action, ActionKind, Binding, Channel, Contract, Kind};

/// Errors building a [`Wire`] from a contract (the contract passed `check` but
/// cannot drive the wire layer).
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A schema does not compile.
    #[error("{contract}: schema at {pointer} does not compile: {reason}")]
    Schema {
        /// Contract name.
        contract: String,
        /// Where the schema is.
        pointer: String,
        /// Why.
        reason: String,
    },
    /// The framing cannot be built.
    #[error("{contract}: channel {channel}: {source}")]
    Framing {
        /// Contract name.
        contract: String,
        /// Channel name.
        channel: String,
        /// Why.
        source: FrameError,
    },
    /// No such channel.
    #[error("contract {contract} has no channel {channel:?}")]
    NoChannel {
        /// Contract name.
        contract: String,
        /// Channel asked for.
        channel: String,
    },
}

/// The classes of violation a contract can prescribe an action for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViolationClass {
    /// Frame or line over its cap.
    Oversize,
    /// Not JSON, or breaks the strict profile.
    Parse,
    /// JSON, but not a valid message of this protocol.
    Invalid,
    /// A request for an unknown method.
    UnknownRequest,
    /// A notification or event for an unknown method.
    UnknownNotification,
    /// A known method sent by a party that may not send it.
    WrongDirection,
    /// Params (or a result) that fail their schema.
    InvalidParams,
}

impl ViolationClass {
    /// Stable name used in logs.
    pub fn name(self) -> &'static str {
        match self {
            ViolationClass::Oversize => "oversize",
            ViolationClass::Parse => "parse",
            ViolationClass::Invalid => "invalid",
            ViolationClass::UnknownRequest => "unknown-request",
            ViolationClass::UnknownNotification => "unknown-notification",
            ViolationClass::WrongDirection => "wrong-direction",
            ViolationClass::InvalidParams => "invalid-params",
        }
    }
}

/// A message the contract does not accept, with what the contract says to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Which rule it breaks.
    pub class: ViolationClass,
    /// The contract's code for it (error code or close code), if any.
    pub code: Option<Value>,
    /// What the receiver does, per the contract.
    pub action: Option<ActionKind>,
    /// The limit this violation counts toward (e.g. bad frames before a close).
    pub count_toward: Option<String>,
    /// The seed rule it breaks.
    pub seed: Option<String>,
    /// One-line reason.
    pub reason: String,
    /// Structured details an error reply carries (an envelope's missing members, listed
    /// where the `invalid` entry `names`: kernel's `{"fields": [...]}`).
    pub details: Value,
    /// What could be read of the message before it failed (method, id…).
    pub partial: Option<Box<Message>>,
    /// The strict-JSON rule, when `class` is `Parse`.
    pub json: Option<JsonError>,
}

/// The details an error reply carries under its body's `under` (an envelope's
/// `<payload>/details`) that put `missing` where the `invalid` entry `names` its list:
/// kernel's `/payload/details/fields` gives `{"fields": [...]}`. Null where the contract
/// names no list there.
fn listed(names: Option<&str>, under: &str, missing: Vec<String>) -> Value {
    let Some(rest) = names.and_then(|n| n.strip_prefix(under)) else {
        return Value::Null;
    };
    if !rest.starts_with('/') {
        return Value::Null;
    }
    let mut details = Value::Object(Map::new());
    crate::pointer::set(&mut details, rest, json!(missing));
    details
}

/// A classified, validated message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its kind.
    pub kind: Kind,
    /// Method name (requests, notifications, events; and responses once correlated).
    pub method: Option<String>,
    /// Its id.
    pub id: Option<Value>,
    /// The id of the request it answers.
    pub correlation: Option<Value>,
    /// Trace id, as carried.
    pub trace: Option<String>,
    /// The whole decoded message.
    pub value: Value,
}

impl Message {
    /// Whether it is a method's own message (a request, notification or event), not an
    /// answer to one.
    pub fn is_call(&self) -> bool {
        !matches!(self.kind, Kind::Response | Kind::Error)
    }
}

#[derive(Debug)]
struct MethodWire {
    kind: Kind,
    from: Vec<String>,
    params: Option<jsonschema::Validator>,
    result: Option<jsonschema::Validator>,
    max_payload: Option<u64>,
    /// Which messages of the exchange `max_payload` holds for (the limit's `caps`).
    max_caps: crate::model::Caps,
    over_max_payload: Option<ActionKind>,
    matches: Vec<(String, Value)>,
}

/// One channel, compiled.
#[derive(Debug)]
pub struct ChannelWire {
    name: String,
    codec: ChannelCodec,
    json: Option<JsonLimits>,
    binding: Option<Binding>,
    envelope: Option<jsonschema::Validator>,
    /// Required envelope fields per wire kind value, for `details.fields`.
    required_by_kind: HashMap<String, Vec<String>>,
    methods: HashMap<String, MethodWire>,
    /// The framing's `frameDeadline`: its limit name and value.
    frame_deadline: Option<(String, std::time::Duration)>,
    /// Tagged bindings: methods in contract order, tried first to last.
    tagged_order: Vec<String>,
}

/// A contract compiled for the wire: codecs, JSON rules and validators per channel.
#[derive(Debug)]
pub struct Wire {
    contract: Arc<Contract>,
    limits: crate::access::Limits,
    channels: HashMap<String, ChannelWire>,
}

fn compile(
    c: &Contract,
    schema: &Value,
    pointer: String,
) -> Result<jsonschema::Validator, WireError> {
    jsonschema::draft202012::new(&rooted(c, schema)).map_err(|e| WireError::Schema {
        contract: c.name.clone(),
        pointer,
        reason: e.to_string(),
    })
}

/// A message may leave its params out when their schema accepts `null` or `{}`: the one
/// rule the wire layer checks and every generated binding follows ([`params_may_be_absent`]).
fn absent_accepted(v: &jsonschema::Validator) -> bool {
    v.is_valid(&Value::Null) || v.is_valid(&json!({}))
}

/// Whether a message of `method` may carry no params at all (see [`absent_accepted`]);
/// `false` for an unknown method or one whose params schema does not compile.
pub fn params_may_be_absent(c: &Contract, method: &str) -> bool {
    match c.methods.get(method).map(|m| &m.params) {
        Some(Some(s)) => compile(c, s, String::new()).is_ok_and(|v| absent_accepted(&v)),
        Some(None) => true,
        None => false,
    }
}

/// The first schema error of `value`, located under `prefix`, with the value masked.
fn first_error(v: &jsonschema::Validator, value: &Value, prefix: &str) -> Option<String> {
    v.iter_errors(value)
        .next()
        .map(|e| format!("{prefix}{}: {}", e.instance_path(), e.masked()))
}

/// For an envelope schema that is a `oneOf` discriminated on the kind field,
/// the `required` list of each branch, keyed by the branch's `const` kind.
fn required_by_kind(
    c: &Contract,
    envelope: &Value,
    kind_ptr: &str,
) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    let field = kind_ptr.trim_start_matches('/');
    let root = c.resolve(envelope);
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let base = strings(root.get("required"));
    for branch in root
        .get("oneOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let b = c.resolve(branch);
        let mut req = base.clone();
        // Branches may extend a shared base with allOf.
        for part in b
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            req.extend(strings(c.resolve(part).get("required")));
        }
        req.extend(strings(b.get("required")));
        let tag = b
            .pointer(&format!("/properties/{field}/const"))
            .or_else(|| b.pointer(&format!("/properties/{field}/enum/0")))
            .and_then(Value::as_str);
        if let Some(tag) = tag {
            req.dedup();
            out.insert(tag.to_string(), req);
        }
    }
    if out.is_empty() && !base.is_empty() {
        out.insert(String::new(), base);
    }
    out
}

impl Wire {
    /// Compile `contract` for the wire.
    pub fn new(contract: Arc<Contract>) -> Result<Self, WireError> {
        let c = &*contract;
        let limits = c.evaluated_limits();
        let mut channels = HashMap::new();
        for (cname, ch) in &c.channels {
            channels.insert(cname.clone(), Self::channel(c, &limits, cname, ch)?);
        }
        Ok(Wire {
            limits,
            contract,
            channels,
        })
    }

    fn channel(
        c: &Contract,
        limits: &crate::access::Limits,
        cname: &str,
        ch: &Channel,
    ) -> Result<ChannelWire, WireError> {
        let framing_err = |source| WireError::Framing {
            contract: c.name.clone(),
            channel: cname.to_string(),
            source,
        };
        let codec = ChannelCodec::for_channel(limits, ch).map_err(framing_err)?;
        let json = match &ch.json {
            None if ch.binding.is_none() => None,
            None => Some(JsonLimits::default()),
            Some(j) => {
                let lim = |n: &Option<String>, d: usize| -> Result<usize, WireError> {
                    match n {
                        Some(n) => cap_of(limits, n).map(|v| v as usize).map_err(framing_err),
                        None => Ok(d),
                    }
                };
                let d = JsonLimits::default();
                let max_depth = lim(&j.max_depth, d.max_depth)?;
                if max_depth > MAX_DEPTH_SUPPORTED {
                    return Err(framing_err(FrameError::Unsupported(format!(
                        "a JSON depth cap of {max_depth}: the wire parses at most {MAX_DEPTH_SUPPORTED} levels"
                    ))));
                }
                Some(JsonLimits {
                    strict: j.strict,
                    object_only: j.object_only,
                    max_depth,
                    max_items: lim(&j.max_items, d.max_items)?,
                    no_null: j.no_null,
                })
            }
        };
        let envelope = match &ch.message {
            Some(s) => Some(compile(c, s, format!("/channels/{cname}/message"))?),
            None => None,
        };
        let required = match (&ch.message, &ch.binding) {
            (Some(s), Some(Binding::Envelope { kind, .. })) => required_by_kind(c, s, kind),
            _ => HashMap::new(),
        };
        let mut methods = HashMap::new();
        let mut tagged_order = Vec::new();
        for (mname, m) in c.methods.iter().filter(|(_, m)| m.channel == cname) {
            let ptr = crate::pointer::join("/methods", [mname.as_str()]);
            let params = match &m.params {
                Some(s) => Some(compile(c, s, format!("{ptr}/params"))?),
                None => None,
            };
            let result = match &m.result {
                Some(s) => Some(compile(c, s, format!("{ptr}/result"))?),
                None => None,
            };
            let max_payload = match &m.max_payload {
                Some(n) => Some(cap_of(limits, n).map_err(framing_err)?),
                None => None,
            };
            tagged_order.push(mname.clone());
            methods.insert(
                mname.clone(),
                MethodWire {
                    kind: m.kind,
                    from: m.from.clone(),
                    params,
                    result,
                    max_payload,
                    max_caps: m
                        .max_payload
                        .as_ref()
                        .and_then(|n| c.limits.get(n))
                        .and_then(|l| l.caps)
                        .unwrap_or(crate::model::Caps::Both),
                    over_max_payload: m.over_max_payload,
                    matches: m
                        .matches
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                },
            );
        }
        let frame_deadline = match &ch.framing {
            crate::model::Framing::LengthPrefixed {
                frame_deadline: Some(n),
                ..
            }
            | crate::model::Framing::HeaderDelimited {
                frame_deadline: Some(n),
                ..
            } => Some((n.clone(), duration_of(limits, n).map_err(framing_err)?)),
            _ => None,
        };
        Ok(ChannelWire {
            name: cname.to_string(),
            frame_deadline,
            codec,
            json,
            binding: ch.binding.clone(),
            envelope,
            required_by_kind: required,
            methods,
            tagged_order,
        })
    }

    /// The contract this wire was compiled from.
    pub fn contract(&self) -> &Arc<Contract> {
        &self.contract
    }

    /// The contract's limits, evaluated once when the wire was compiled.
    pub fn limits(&self) -> &crate::access::Limits {
        &self.limits
    }

    /// The same wire with every contract duration multiplied by `factor` (finite and
    /// positive): the limits it hands out and each channel's frame deadline. A test
    /// run scales a contract's 30 s deadline to 3 s this way instead of editing it.
    pub fn time_scaled(mut self, factor: f64) -> Wire {
        if !(factor.is_finite() && factor > 0.0) {
            return self;
        }
        self.limits = self.limits.time_scaled(factor);
        for ch in self.channels.values_mut() {
            if let Some((_, d)) = ch.frame_deadline.as_mut() {
                *d = d.mul_f64(factor);
            }
        }
        self
    }

    /// A compiled channel.
    pub fn channel_wire(&self, channel: &str) -> Result<&ChannelWire, WireError> {
        self.channels
            .get(channel)
            .ok_or_else(|| WireError::NoChannel {
                contract: self.contract.name.clone(),
                channel: channel.to_string(),
            })
    }

    /// How long one frame on `channel` may stay incomplete once its first byte
    /// arrived (the framing's `frameDeadline`), with the limit's name.
    pub fn frame_deadline(&self, channel: &str) -> Option<(&str, std::time::Duration)> {
        self.channels
            .get(channel)
            .and_then(|c| c.frame_deadline.as_ref())
            .map(|(n, d)| (n.as_str(), *d))
    }

    /// A fresh codec for `channel` (codecs carry per-stream state).
    pub fn codec(&self, channel: &str) -> Result<ChannelCodec, WireError> {
        Ok(self.channel_wire(channel)?.codec.clone())
    }

    /// Build a violation of `class`, filled with the contract's prescribed action.
    pub fn violation(&self, class: ViolationClass, reason: impl Into<String>) -> Violation {
        let v = &self.contract.violations;
        let action: Option<&Action> = match class {
            ViolationClass::Oversize => v.oversize.as_ref().or(v.invalid.as_ref()),
            ViolationClass::Parse => v.parse.as_ref(),
            ViolationClass::Invalid => v.invalid.as_ref(),
            ViolationClass::UnknownRequest => v.unknown_request.as_ref(),
            ViolationClass::UnknownNotification => v.unknown_notification.as_ref(),
            ViolationClass::WrongDirection => v.wrong_direction.as_ref().or(v.invalid.as_ref()),
            ViolationClass::InvalidParams => v.invalid_params.as_ref().or(v.invalid.as_ref()),
        };
        Violation {
            class,
            code: action.and_then(|a| a.code.clone()),
            action: action.map(|a| a.action),
            count_toward: action.and_then(|a| a.count_toward.clone()),
            seed: action.map(|a| a.seed.clone()),
            reason: reason.into(),
            details: Value::Null,
            partial: None,
            json: None,
        }
    }

    /// The class of a strict-JSON failure. JSON that is not an object is valid
    /// JSON but not a message: `invalid`. A depth or item cap is whichever of
    /// `parse` and `invalid` its limit's action code names (rukh: parse_error,
    /// toolchannel: -32600); `parse` when the limit says nothing.
    fn json_error_class(&self, channel: &str, e: &JsonError) -> ViolationClass {
        let rules = self
            .contract
            .channels
            .get(channel)
            .and_then(|c| c.json.as_ref());
        let limit = match e {
            JsonError::NotAnObject | JsonError::Null { .. } => return ViolationClass::Invalid,
            JsonError::TooDeep { .. } => rules.and_then(|r| r.max_depth.as_ref()),
            JsonError::TooManyItems { .. } => rules.and_then(|r| r.max_items.as_ref()),
            _ => None,
        };
        let code = limit.and_then(|l| self.limits.action_code(l));
        let v = &self.contract.violations;
        let is =
            |a: &Option<Action>| code.is_some() && a.as_ref().and_then(|a| a.code.as_ref()) == code;
        if is(&v.invalid) && !is(&v.parse) {
            ViolationClass::Invalid
        } else {
            ViolationClass::Parse
        }
    }

    /// Parse and classify one frame's bytes that `from` sent on `channel`.
    ///
    /// `answers` is the method of the request a response answers, when the
    /// caller tracks requests (see [`Correlator`]); without it a response is
    /// classified but its result is not schema-checked.
    pub fn decode(
        &self,
        channel: &str,
        from: &str,
        bytes: &[u8],
        answers: Option<&str>,
    ) -> Result<Message, Violation> {
        self.decode_with(channel, from, bytes, &|_| answers.map(str::to_string))
    }

    /// Like [`Wire::decode`], for callers that track requests: once the frame is
    /// parsed, `answers` is asked for the method of the request a reply answers,
    /// given the reply's correlation id. The frame is parsed only once.
    pub fn decode_with(
        &self,
        channel: &str,
        from: &str,
        bytes: &[u8],
        answers: &dyn Fn(&Value) -> Option<String>,
    ) -> Result<Message, Violation> {
        let ch = self
            .channel_wire(channel)
            .map_err(|e| self.violation(ViolationClass::Invalid, e.to_string()))?;
        let limits = ch.json.unwrap_or_default();
        let value = json::parse(bytes, &limits).map_err(|e| {
            let class = self.json_error_class(channel, &e);
            let mut v = self.violation(class, e.to_string());
            v.json = Some(e);
            v
        })?;
        // Per-method caps are checked before any schema work, as the contracts require.
        let method = match &ch.binding {
            Some(Binding::Jsonrpc { .. }) => lookup(&value, "/method").and_then(Value::as_str),
            Some(Binding::Envelope { method, .. }) => {
                lookup(&value, method).and_then(Value::as_str)
            }
            _ => None,
        };
        if let Some(mut v) = method.and_then(|m| self.over_method_cap(ch, m, bytes.len(), None)) {
            // The id is recovered, so the refusal can answer the request it refuses.
            if let Some(p) = v.partial.as_mut() {
                p.id = request_id(ch.binding.as_ref(), &value).cloned();
            }
            return Err(v);
        }
        // Only replies (no method) answer a request; their correlation id names it.
        let reply_to = match (&ch.binding, method) {
            (Some(Binding::Jsonrpc { .. }), None) => lookup(&value, "/id"),
            (
                Some(Binding::Envelope {
                    correlation: Some(c),
                    ..
                }),
                None,
            ) => lookup(&value, c),
            _ => None,
        };
        let answered = reply_to.and_then(answers);
        // A method's cap holds for the replies to it too unless its limit says `caps`
        // (rukh R-4: the lifecycle requests and their responses), once the reply is known
        // to answer it.
        if let Some(v) = answered
            .as_deref()
            .and_then(|m| self.over_method_cap(ch, m, bytes.len(), reply_to))
        {
            return Err(v);
        }
        self.classify_value(ch, from, value, answered.as_deref())
    }

    /// The violation for a frame of `len` bytes of `method` (a reply to it when
    /// `reply_to` is its correlation id) over the method's `maxPayload`. It names
    /// the method in `partial`, so a receiver can apply `overMaxPayload`.
    fn over_method_cap(
        &self,
        ch: &ChannelWire,
        method: &str,
        len: usize,
        reply_to: Option<&Value>,
    ) -> Option<Violation> {
        let (name, m) = ch.methods.get_key_value(method)?;
        let cap = m.max_payload?;
        let holds = match m.max_caps {
            crate::model::Caps::Both => true,
            crate::model::Caps::Requests => reply_to.is_none(),
            crate::model::Caps::Replies => reply_to.is_some(),
        };
        if !holds || len as u64 <= cap {
            return None;
        }
        let what = if reply_to.is_some() { "reply to " } else { "" };
        let mut v = self.violation(
            ViolationClass::Oversize,
            format!("{what}{name} frame of {len} bytes exceeds its {cap}-byte cap"),
        );
        if reply_to.is_none() && m.over_max_payload.is_some() {
            v.action = m.over_max_payload;
        }
        v.partial = Some(Box::new(Message {
            kind: match reply_to {
                Some(_) => Kind::Response,
                None => m.kind,
            },
            method: Some(name.clone()),
            id: None,
            correlation: reply_to.cloned(),
            trace: None,
            value: Value::Null,
        }));
        Some(v)
    }

    /// Classify an already-parsed value.
    pub fn classify(
        &self,
        channel: &str,
        from: &str,
        value: Value,
        answers: Option<&str>,
    ) -> Result<Message, Violation> {
        let ch = self
            .channel_wire(channel)
            .map_err(|e| self.violation(ViolationClass::Invalid, e.to_string()))?;
        self.classify_value(ch, from, value, answers)
    }

    fn classify_value(
        &self,
        ch: &ChannelWire,
        from: &str,
        value: Value,
        answers: Option<&str>,
    ) -> Result<Message, Violation> {
        let msg = match &ch.binding {
            Some(Binding::Jsonrpc { version, trace }) => {
                let msg = self.jsonrpc(version, trace.as_deref(), value)?;
                self.error_enveloped(ch, msg)?
            }
            Some(Binding::Envelope {
                kind,
                kinds,
                method,
                id,
                correlation,
                trace,
                payload,
                ..
            }) => {
                let wire_kind = lookup(&value, kind)
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let k = wire_kind.as_deref().and_then(|w| kinds.get(w)).copied();
                let get =
                    |p: &Option<String>| p.as_deref().and_then(|p| lookup(&value, p)).cloned();
                let msg = Message {
                    kind: k.unwrap_or(Kind::Notification),
                    method: lookup(&value, method)
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    id: get(id),
                    correlation: get(correlation),
                    trace: get(trace).and_then(|t| t.as_str().map(str::to_string)),
                    value,
                };
                if let Some(env) = &ch.envelope
                    && !env.is_valid(&msg.value)
                {
                    let missing: Vec<String> = ch
                        .required_by_kind
                        .get(wire_kind.as_deref().unwrap_or(""))
                        .or_else(|| ch.required_by_kind.get(""))
                        .into_iter()
                        .flatten()
                        .filter(|f| msg.value.get(f.as_str()).is_none())
                        .cloned()
                        .collect();
                    let first = first_error(env, &msg.value, "");
                    let mut v = self.violation(
                        ViolationClass::Invalid,
                        if missing.is_empty() {
                            format!("invalid envelope: {}", first.unwrap_or_default())
                        } else {
                            format!("envelope is missing {}", missing.join(", "))
                        },
                    );
                    let names = self.contract.violations.invalid.as_ref();
                    let names = names.and_then(|a| a.names.as_deref());
                    v.details = listed(names, &format!("{payload}/details"), missing);
                    v.partial = Some(Box::new(msg));
                    return Err(v);
                }
                if k.is_none() {
                    let mut v = self.violation(
                        ViolationClass::Invalid,
                        format!("unknown message kind {wire_kind:?}"),
                    );
                    v.partial = Some(Box::new(msg));
                    return Err(v);
                }
                msg
            }
            Some(Binding::Tagged {
                id,
                correlation,
                trace,
                ..
            }) => {
                let name = ch.tagged_order.iter().find(|n| {
                    ch.methods.get(n.as_str()).is_some_and(|m| {
                        m.matches
                            .iter()
                            .all(|(p, want)| lookup(&value, p) == Some(want))
                    })
                });
                let get =
                    |p: &Option<String>| p.as_deref().and_then(|p| lookup(&value, p)).cloned();
                let (kind, method) = match name {
                    Some(n) => (
                        ch.methods
                            .get(n.as_str())
                            .map(|m| m.kind)
                            .unwrap_or(Kind::Notification),
                        Some(n.clone()),
                    ),
                    None => (Kind::Notification, None),
                };
                let msg = Message {
                    kind,
                    method,
                    id: get(id),
                    correlation: get(correlation),
                    trace: get(trace).and_then(|t| t.as_str().map(str::to_string)),
                    value,
                };
                if let Some(env) = &ch.envelope
                    && !env.is_valid(&msg.value)
                {
                    let first = first_error(env, &msg.value, "");
                    let mut v = self.violation(
                        ViolationClass::Invalid,
                        format!("invalid frame: {}", first.unwrap_or_default()),
                    );
                    v.partial = Some(Box::new(msg));
                    return Err(v);
                }
                msg
            }
            None => {
                return Err(self.violation(
                    ViolationClass::Invalid,
                    format!("channel {} carries no JSON messages", ch.name),
                ));
            }
        };
        self.check_method(ch, from, msg, answers)
    }

    fn jsonrpc(
        &self,
        version: &str,
        trace: Option<&str>,
        value: Value,
    ) -> Result<Message, Violation> {
        let invalid = |reason: String, value: &Value| {
            let mut v = self.violation(ViolationClass::Invalid, reason);
            v.partial = Some(Box::new(Message {
                kind: Kind::Notification,
                method: value
                    .get("method")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                id: value.get("id").cloned(),
                correlation: None,
                trace: None,
                value: value.clone(),
            }));
            v
        };
        let Some(obj) = value.as_object() else {
            return Err(invalid(
                "a JSON-RPC message must be an object".into(),
                &value,
            ));
        };
        if member(obj, "jsonrpc").and_then(Value::as_str) != Some(version) {
            return Err(invalid(format!("`jsonrpc` must be {version:?}"), &value));
        }
        let id = member(obj, "id");
        if let Some(id) = id
            && !(id.is_string() || id.is_number() || id.is_null())
        {
            return Err(invalid("`id` must be a string or a number".into(), &value));
        }
        let method = member(obj, "method");
        let kind = match (method, id, member(obj, "result"), member(obj, "error")) {
            (Some(Value::String(_)), Some(_), None, None) => Kind::Request,
            (Some(Value::String(_)), None, None, None) => Kind::Notification,
            (None, Some(_), Some(_), None) => Kind::Response,
            (None, Some(_), None, Some(e)) => {
                let ok = e.get("code").is_some_and(|c| c.is_i64())
                    && e.get("message").is_some_and(Value::is_string);
                if !ok {
                    return Err(invalid(
                        "`error` needs an integer `code` and a string `message`".into(),
                        &value,
                    ));
                }
                Kind::Error
            }
            (Some(_), _, _, _) => {
                return Err(invalid(
                    "`method` must be a string, without `result` or `error`".into(),
                    &value,
                ));
            }
            _ => {
                return Err(invalid(
                    "not a request, notification, response or error".into(),
                    &value,
                ));
            }
        };
        if let Some(p) = member(obj, "params")
            && (kind == Kind::Request || kind == Kind::Notification)
            && !(p.is_object() || p.is_array())
        {
            return Err(invalid(
                "`params` must be an object or an array".into(),
                &value,
            ));
        }
        let allowed = ["jsonrpc", "id", "method", "params", "result", "error"];
        if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(invalid(format!("unexpected member {k:?}"), &value));
        }
        let trace = trace
            .and_then(|p| lookup(&value, p))
            .and_then(Value::as_str)
            .map(str::to_string);
        let (id, correlation) = match kind {
            Kind::Response | Kind::Error => (None, id.cloned()),
            _ => (id.cloned(), None),
        };
        Ok(Message {
            kind,
            method: method.and_then(Value::as_str).map(str::to_string),
            id,
            correlation,
            trace,
            value,
        })
    }

    /// A JSON-RPC error held to the channel's message schema, where it has one: the
    /// method's schemas judge requests and results, but only the envelope says what an
    /// error's `data` may hold (rukh's closed `ErrorData`, which its bindings decode
    /// strictly). Another member there is `invalid`.
    fn error_enveloped(&self, ch: &ChannelWire, msg: Message) -> Result<Message, Violation> {
        let Some(env) = ch.envelope.as_ref().filter(|_| msg.kind == Kind::Error) else {
            return Ok(msg);
        };
        if env.is_valid(&msg.value) {
            return Ok(msg);
        }
        let first = first_error(env, &msg.value, "");
        let mut v = self.violation(
            ViolationClass::Invalid,
            format!("invalid error: {}", first.unwrap_or_default()),
        );
        v.partial = Some(Box::new(msg));
        Err(v)
    }

    /// Why an error body disagrees with the catalog entry of its code: a `category` or a
    /// `retryable` member (where the body carries one) other than the entry's.
    fn off_catalog(&self, body: &Value) -> Option<String> {
        let code = body.get("code")?;
        let e = self.contract.error_for(code)?;
        let want = [
            ("category", Value::from(e.category.as_str())),
            ("retryable", Value::from(e.retryable)),
        ];
        want.into_iter().find_map(|(member, want)| {
            let got = body.get(member)?;
            (*got != want)
                .then(|| format!("error {code}: {member} is {got}, the catalog says {want}"))
        })
    }

    fn check_method(
        &self,
        ch: &ChannelWire,
        from: &str,
        mut msg: Message,
        answers: Option<&str>,
    ) -> Result<Message, Violation> {
        let payload_ptr: &str = match &ch.binding {
            Some(Binding::Envelope { payload, .. }) => payload,
            Some(Binding::Jsonrpc { .. }) => match msg.kind {
                Kind::Response => "/result",
                Kind::Error => "/error",
                _ => "/params",
            },
            _ => "",
        };
        match msg.kind {
            Kind::Response | Kind::Error => {
                if msg.method.is_none() {
                    msg.method = answers.map(str::to_string);
                }
                if msg.kind == Kind::Error
                    && let Some(body) = lookup(&msg.value, payload_ptr)
                    && let Some(why) = self.off_catalog(body)
                {
                    let mut viol = self.violation(ViolationClass::InvalidParams, why);
                    viol.partial = Some(Box::new(msg));
                    return Err(viol);
                }
                if msg.kind == Kind::Response
                    && let Some(m) = answers.and_then(|a| ch.methods.get(a))
                    && let Some(v) = &m.result
                {
                    let payload = lookup(&msg.value, payload_ptr).unwrap_or(&Value::Null);
                    if !v.is_valid(payload) {
                        let first = first_error(v, payload, payload_ptr);
                        let mut viol = self.violation(
                            ViolationClass::InvalidParams,
                            format!(
                                "result of {}: {}",
                                answers.unwrap_or(""),
                                first.unwrap_or_default()
                            ),
                        );
                        viol.partial = Some(Box::new(msg));
                        return Err(viol);
                    }
                }
                Ok(msg)
            }
            Kind::Request | Kind::Notification | Kind::Event => {
                let Some(name) = msg.method.clone() else {
                    // A tagged frame no method's `match` fits is of a type the reader does
                    // not know (xsession §7: skipped); elsewhere a message needs a method.
                    let (class, why) = match &ch.binding {
                        Some(Binding::Tagged { .. }) => (
                            ViolationClass::UnknownNotification,
                            "no method's match fits the frame",
                        ),
                        _ => (ViolationClass::Invalid, "message has no method"),
                    };
                    let mut v = self.violation(class, why);
                    v.partial = Some(Box::new(msg));
                    return Err(v);
                };
                let Some(m) = ch.methods.get(&name) else {
                    let class = if msg.kind == Kind::Request {
                        ViolationClass::UnknownRequest
                    } else {
                        ViolationClass::UnknownNotification
                    };
                    let mut v = self.violation(class, format!("unknown method {name:?}"));
                    v.partial = Some(Box::new(msg));
                    return Err(v);
                };
                // A JSON-RPC notification for a method declared as an event is the same thing.
                let same_kind = m.kind == msg.kind
                    || (matches!(m.kind, Kind::Event | Kind::Notification)
                        && matches!(msg.kind, Kind::Event | Kind::Notification));
                if !same_kind {
                    let mut v = self.violation(
                        ViolationClass::Invalid,
                        format!("{name} is a {:?}, not a {:?}", m.kind, msg.kind),
                    );
                    v.partial = Some(Box::new(msg));
                    return Err(v);
                }
                if matches!(ch.binding, Some(Binding::Tagged { .. })) {
                    msg.kind = m.kind;
                }
                if !m.from.iter().any(|p| p == from) {
                    let mut v = self.violation(
                        ViolationClass::WrongDirection,
                        format!(
                            "{name} may be sent only by {}, not by {from}",
                            m.from.join(" or ")
                        ),
                    );
                    v.partial = Some(Box::new(msg));
                    return Err(v);
                }
                if let Some(v) = &m.params {
                    let payload = lookup(&msg.value, payload_ptr);
                    let ok = match payload {
                        Some(p) => v.is_valid(p),
                        None => absent_accepted(v),
                    };
                    if !ok {
                        let p = payload.cloned().unwrap_or(Value::Null);
                        let first = first_error(v, &p, payload_ptr);
                        let mut viol = self.violation(
                            ViolationClass::InvalidParams,
                            format!("{name}: {}", first.unwrap_or_default()),
                        );
                        viol.partial = Some(Box::new(msg));
                        return Err(viol);
                    }
                }
                Ok(msg)
            }
        }
    }
}

/// Tracks requests in flight so responses can be matched to their method.
///
/// Bounded: at most `cap` requests per sending party; beyond that
/// [`Correlator::open`] refuses and the caller decides (count, flag, enforce).
#[derive(Debug)]
pub struct Correlator {
    cap: usize,
    pending: HashMap<(String, String), String>,
    per_party: HashMap<String, usize>,
}

fn id_key(id: &Value) -> String {
    id.to_string()
}

impl Correlator {
    /// A correlator holding at most `cap` open requests per party.
    pub fn new(cap: usize) -> Self {
        Correlator {
            cap,
            pending: HashMap::new(),
            per_party: HashMap::new(),
        }
    }

    /// Record a request `from` sent. False when the party already has `cap` open requests
    /// or reuses an open id.
    pub fn open(&mut self, from: &str, id: &Value, method: &str) -> bool {
        let n = self.per_party.entry(from.to_string()).or_default();
        if *n >= self.cap {
            return false;
        }
        let key = (from.to_string(), id_key(id));
        if self.pending.contains_key(&key) {
            return false;
        }
        *n += 1;
        self.pending.insert(key, method.to_string());
        true
    }

    /// Match a reply to a request `requester` sent; removes it.
    pub fn close(&mut self, requester: &str, id: &Value) -> Option<String> {
        let m = self.pending.remove(&(requester.to_string(), id_key(id)))?;
        if let Some(n) = self.per_party.get_mut(requester) {
            *n = n.saturating_sub(1);
        }
        Some(m)
    }

    /// The method of an open request of `requester`, without closing it.
    pub fn peek(&self, requester: &str, id: &Value) -> Option<String> {
        self.pending
            .get(&(requester.to_string(), id_key(id)))
            .cloned()
    }

    /// Open requests of one party.
    pub fn open_count(&self, party: &str) -> usize {
        self.per_party.get(party).copied().unwrap_or(0)
    }
}

/// Where a request carries its id under `binding`.
fn request_id<'v>(binding: Option<&Binding>, value: &'v Value) -> Option<&'v Value> {
    match binding {
        Some(Binding::Jsonrpc { .. }) => lookup(value, "/id"),
        Some(Binding::Envelope { id: Some(p), .. }) => lookup(value, p),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_agrees_with_value_pointer() {
        let mut v = json!({"a": {"b/c": 1, "m~n": 2, "": 3, "list": [10, 20]}, "x": null});
        // An object too big for the linear scan, to cover both ways of finding a member.
        v["big"] = (0..12).map(|i| (format!("k{i}"), json!(i))).collect();
        let pointers = [
            "/big/k0",
            "/big/k11",
            "/big/k12",
            "",
            "/",
            "/a",
            "/a/b~1c",
            "/a/m~0n",
            "/a/",
            "/a/list",
            "/a/list/0",
            "/a/list/1",
            "/a/list/2",
            "/a/list/01",
            "/a/list/+1",
            "/a/list/-1",
            "/x",
            "/x/y",
            "a",
            "/nope",
        ];
        for p in pointers {
            assert_eq!(lookup(&v, p), v.pointer(p), "pointer {p:?}");
        }
    }
}
