//! Where the channel's binding keeps the parts of a message the derived suite reads and
//! writes: JSON-RPC's members, or the pointers of a custom envelope (the kernel's `type`,
//! `id`, `correlation_id`, `payload`), or a tagged binding's (xsession's `msgId`,
//! `origMsgId`, and the `dropReason` a report writes its code to). The checks speak of ids,
//! answers and error codes; only this module knows where a binding puts them.

use contract::Contract;
use contract::model::{Action, Binding, Kind};
use contract::{remove_pointer, set_pointer};
use serde_json::Value;

/// The parts of a message of one channel, by binding.
#[derive(Debug, Clone)]
pub(super) struct Shape {
    /// The channel the suite speaks on.
    pub channel: String,
    /// Where an error answer keeps its code (a tagged binding's: where a report writes it).
    error_code: Option<String>,
    form: Form,
}

#[derive(Debug, Clone)]
enum Form {
    Jsonrpc,
    Envelope {
        kind: String,
        /// Each message kind's wire value.
        kinds: Vec<(Kind, Value)>,
        method: String,
        id: Option<String>,
        correlation: Option<String>,
        payload: String,
    },
    /// Messages told apart by their `match` fields; an answer is a message carrying the
    /// correlation (a one-way message's `answeredBy`).
    Tagged {
        id: Option<String>,
        correlation: Option<String>,
        /// Further ids an answer covers.
        batch: Option<String>,
        /// Each method's `match` fields.
        matches: Vec<(String, Vec<(String, Value)>)>,
    },
}

impl Shape {
    /// The first channel with a binding; `None` without one.
    pub fn of(c: &Contract) -> Option<Shape> {
        c.channels.iter().find_map(|(name, ch)| {
            let form = match ch.binding.as_ref()? {
                Binding::Jsonrpc { .. } => Form::Jsonrpc,
                Binding::Envelope {
                    kind,
                    kinds,
                    method,
                    id,
                    correlation,
                    payload,
                    ..
                } => Form::Envelope {
                    kind: kind.clone(),
                    kinds: kinds
                        .iter()
                        .map(|(w, k)| (*k, Value::from(w.as_str())))
                        .collect(),
                    method: method.clone(),
                    id: id.clone(),
                    correlation: correlation.clone(),
                    payload: payload.clone(),
                },
                Binding::Tagged {
                    id,
                    correlation,
                    batch,
                    ..
                } => {
                    let matches = (c.methods.iter())
                        .filter(|(_, m)| m.channel == *name)
                        .map(|(n, m)| {
                            let fields = m.matches.iter().map(|(p, v)| (p.clone(), v.clone()));
                            (n.clone(), fields.collect())
                        })
                        .collect();
                    return Some(Shape {
                        channel: name.clone(),
                        error_code: report_code(c),
                        form: Form::Tagged {
                            id: id.clone(),
                            correlation: correlation.clone(),
                            batch: batch.clone(),
                            matches,
                        },
                    });
                }
            };
            let body = c.error_body_pointer(name)?;
            Some(Shape {
                channel: name.clone(),
                error_code: Some(format!("{body}/code")),
                form,
            })
        })
    }

    fn wire_kind(&self, v: &Value) -> Option<Kind> {
        match &self.form {
            Form::Jsonrpc | Form::Tagged { .. } => None,
            Form::Envelope { kind, kinds, .. } => {
                let w = v.pointer(kind)?;
                kinds.iter().find(|(_, x)| x == w).map(|(k, _)| *k)
            }
        }
    }

    /// The message's own id.
    pub fn id<'v>(&self, v: &'v Value) -> Option<&'v Value> {
        match &self.form {
            Form::Jsonrpc => v.get("id"),
            Form::Envelope { id, .. } | Form::Tagged { id, .. } => v.pointer(id.as_deref()?),
        }
    }

    /// Give the message `id` as its own.
    pub fn set_id(&self, v: &mut Value, id: Value) {
        match &self.form {
            Form::Jsonrpc => v["id"] = id,
            Form::Envelope { id: Some(p), .. } | Form::Tagged { id: Some(p), .. } => {
                set_pointer(v, p, id);
            }
            Form::Envelope { id: None, .. } | Form::Tagged { id: None, .. } => {}
        }
    }

    /// Whether the message answers a request (a result or an error).
    pub fn is_answer(&self, v: &Value) -> bool {
        match &self.form {
            Form::Jsonrpc => v.get("method").is_none(),
            Form::Envelope { .. } => {
                matches!(self.wire_kind(v), Some(Kind::Response | Kind::Error))
            }
            Form::Tagged { correlation, .. } => correlation
                .as_deref()
                .is_some_and(|p| v.pointer(p).is_some()),
        }
    }

    /// The id of the request an answer answers (null: it could not tell).
    pub fn answered(&self, v: &Value) -> Option<Value> {
        if !self.is_answer(v) {
            return None;
        }
        let to = match &self.form {
            Form::Jsonrpc => v.get("id"),
            Form::Envelope { correlation, .. } | Form::Tagged { correlation, .. } => {
                correlation.as_deref().and_then(|p| v.pointer(p))
            }
        };
        Some(to.cloned().unwrap_or(Value::Null))
    }

    /// Every id an answer covers: the one it answers, and a batch's others.
    pub fn answered_all(&self, v: &Value) -> Vec<Value> {
        let mut all: Vec<Value> = self.answered(v).into_iter().collect();
        if let Form::Tagged { batch: Some(p), .. } = &self.form
            && let Some(more) = v.pointer(p).and_then(Value::as_array)
        {
            all.extend(more.iter().cloned());
        }
        all
    }

    /// Whether an answer is a result (the request was served).
    pub fn is_result(&self, v: &Value) -> bool {
        match &self.form {
            Form::Jsonrpc => v.get("result").is_some(),
            Form::Envelope { .. } => self.wire_kind(v) == Some(Kind::Response),
            Form::Tagged { .. } => self.is_answer(v) && self.error_code(v).is_none(),
        }
    }

    /// An error answer's code.
    pub fn error_code<'v>(&self, v: &'v Value) -> Option<&'v Value> {
        match &self.form {
            Form::Envelope { .. } if self.wire_kind(v) != Some(Kind::Error) => None,
            _ => v.pointer(self.error_code.as_deref()?),
        }
    }

    /// Where a call carries its params.
    pub fn params_pointer(&self) -> &str {
        match &self.form {
            Form::Jsonrpc => "/params",
            Form::Envelope { payload, .. } => payload,
            Form::Tagged { .. } => "",
        }
    }

    /// Where a result answer carries its result.
    pub fn result_pointer(&self) -> &str {
        match &self.form {
            Form::Jsonrpc => "/result",
            Form::Envelope { payload, .. } => payload,
            Form::Tagged { .. } => "",
        }
    }

    /// `text` (a title, what a probe sent) as this binding says it: where every message is
    /// one-way (a tagged binding: depot's parcels, xsession's frames), the suite sends
    /// messages, not requests.
    pub fn say(&self, text: &str) -> String {
        let Form::Tagged { .. } = self.form else {
            return text.to_string();
        };
        text.replace(
            "an object with an id but no method, result or error",
            "a message without the fields that tell its method",
        )
        .replace(
            "a call of each request",
            "one of each message the suite sends",
        )
        .replace("two requests", "two messages")
        .replace("a request", "a message")
    }

    /// `answer` made both a result and an error (JSON-RPC's `result` and `error`
    /// together, which no message may be); `None` for a binding whose answers cannot be.
    pub fn spoil(&self, answer: &mut Value, code: Value) -> Option<()> {
        let Form::Jsonrpc = self.form else {
            return None;
        };
        let error = serde_json::json!({"code": code, "message": "conformance: result and error"});
        answer.as_object_mut()?.insert("error".into(), error);
        Some(())
    }

    /// Whether an answer carries an id of its own (an envelope's every message does),
    /// which the answering party gives out like a request's.
    pub fn answers_have_ids(&self) -> bool {
        matches!(
            &self.form,
            Form::Envelope { id: Some(_), .. } | Form::Tagged { id: Some(_), .. }
        )
    }

    /// Make `reply` (a result example) the answer to `request`, with `own` as its own id
    /// (see [`Shape::answers_have_ids`]).
    pub fn answer_to(&self, reply: &mut Value, request: &Value, own: Option<Value>) {
        let to = self.id(request).cloned().unwrap_or(Value::Null);
        match &self.form {
            Form::Jsonrpc => reply["id"] = to,
            Form::Envelope {
                correlation, id, ..
            }
            | Form::Tagged {
                correlation, id, ..
            } => {
                if let Some(p) = correlation {
                    set_pointer(reply, p, to);
                }
                if let (Some(p), Some(own)) = (id, own) {
                    set_pointer(reply, p, own);
                }
            }
        }
    }

    /// The message as a call of `method` (params kept where the binding needs a payload).
    pub fn renamed(&self, v: &Value, method: &str) -> Value {
        let mut v = v.clone();
        match &self.form {
            Form::Jsonrpc => {
                remove_pointer(&mut v, "/params");
                v["method"] = Value::from(method);
            }
            Form::Envelope { method: p, .. } => set_pointer(&mut v, p, Value::from(method)),
            Form::Tagged { matches, .. } => match matches.iter().find(|(m, _)| m == method) {
                Some((_, fields)) => {
                    for (p, w) in fields {
                        set_pointer(&mut v, p, w.clone());
                    }
                }
                // A method no `match` names: its name where the message has a tag.
                None => {
                    for (p, _) in matches.iter().flat_map(|(_, f)| f) {
                        if v.pointer(p).is_some() {
                            set_pointer(&mut v, p, Value::from(method));
                        }
                    }
                }
            },
        }
        v
    }

    /// The call as a one-way message (no answer expected).
    pub fn one_way(&self, v: &Value) -> Value {
        let mut v = v.clone();
        match &self.form {
            Form::Jsonrpc => {
                remove_pointer(&mut v, "/id");
            }
            Form::Envelope { kind, kinds, .. } => {
                let one_way = kinds
                    .iter()
                    .find(|(k, _)| matches!(k, Kind::Notification | Kind::Event));
                if let Some((_, w)) = one_way {
                    set_pointer(&mut v, kind, w.clone());
                }
            }
            // Every tagged message is one-way.
            Form::Tagged { .. } => {}
        }
        v
    }

    /// The call with what makes it a message taken away: its method and params (JSON-RPC),
    /// or its kind and method (an envelope); its id stays.
    pub fn stripped(&self, v: &Value) -> Value {
        let mut v = v.clone();
        let gone: Vec<&str> = match &self.form {
            Form::Jsonrpc => vec!["/method", "/params"],
            Form::Envelope { kind, method, .. } => vec![kind, method],
            Form::Tagged { matches, .. } => {
                let mut all: Vec<&str> = matches
                    .iter()
                    .flat_map(|(_, f)| f)
                    .map(|(p, _)| p.as_str())
                    .collect();
                all.sort_unstable();
                all.dedup();
                all
            }
        };
        for p in gone {
            remove_pointer(&mut v, p);
        }
        v
    }
}

/// Whether a report of `a` writes its code (xsession's `delivery_status` `dropped`): on the
/// wire that refusal is an answer carrying the code, as an error answer is.
pub(super) fn reports_code(a: &Action) -> bool {
    let report = a.report.as_ref().map(|r| r.messages.as_slice());
    report.unwrap_or_default().iter().any(|m| m.code.is_some())
}

/// Where the contract's reports write an action's code (xsession's `/dropReason`): the
/// first report message that places one.
fn report_code(c: &Contract) -> Option<String> {
    (c.limits.values().filter_map(|l| l.action.as_ref()))
        .filter_map(|a| a.report.as_ref())
        .flat_map(|r| &r.messages)
        .find_map(|m| m.code.clone())
}
