//! `contractgen check`: the meta-schema check plus every cross-reference lint.
//!
//! Each lint reports [`Problem`]s naming the file, the JSON pointer of the
//! fault and a one-line reason. Lints never stop at the first problem, so one
//! run shows everything wrong with a contract.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use serde_json::Value;

use crate::model::{
    Action, ActionKind, Binding, Contract, Example, Expr, Framing, Kind, Method, Part, RelOp, Unit,
};
use crate::pointer::join;

mod limits;
mod machines;
mod parties;

/// Which lint found a problem; printed so a user can look the rule up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lint {
    /// The document does not match `contract.schema.json`.
    MetaSchema,
    /// A schema under `$defs` or inline is not valid JSON Schema 2020-12.
    SchemaValid,
    /// A `$ref` does not resolve inside the document.
    DanglingRef,
    /// An error code a method or action names is not in the catalog.
    ErrorRef,
    /// A code appears twice in the catalog or in a code table.
    DuplicateCode,
    /// An example fails its schema or its method's binding.
    BadExample,
    /// A state machine names an undeclared state or is malformed.
    StateMachine,
    /// A stated relation between limits does not hold.
    Relation,
    /// A reference to a party, channel, capability, limit or code table is dangling.
    NameRef,
}

impl Lint {
    /// Short kebab-case id used in output.
    pub fn id(self) -> &'static str {
        match self {
            Lint::MetaSchema => "meta-schema",
            Lint::SchemaValid => "schema-valid",
            Lint::DanglingRef => "dangling-ref",
            Lint::ErrorRef => "error-ref",
            Lint::DuplicateCode => "duplicate-code",
            Lint::BadExample => "bad-example",
            Lint::StateMachine => "state-machine",
            Lint::Relation => "relation",
            Lint::NameRef => "name-ref",
        }
    }
}

/// One thing wrong with a contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file (or `builtin:NAME`) the contract came from.
    pub file: String,
    /// JSON pointer to the fault.
    pub pointer: String,
    /// Which lint found it.
    pub lint: Lint,
    /// One line saying what is wrong.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{}: {} [{}]",
            self.file,
            self.pointer,
            self.reason,
            self.lint.id()
        )
    }
}

/// The committed meta-schema, parsed once (the validator and `choices_hint` read it).
fn meta_doc() -> Result<&'static Value, String> {
    static D: OnceLock<Result<Value, String>> = OnceLock::new();
    D.get_or_init(|| {
        serde_json::from_str(crate::META_SCHEMA)
            .map_err(|e| format!("committed contract.schema.json is not JSON: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn meta_validator() -> Result<&'static jsonschema::Validator, String> {
    static V: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    V.get_or_init(|| {
        jsonschema::draft202012::new(meta_doc()?)
            .map_err(|e| format!("committed contract.schema.json does not compile: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// For a `oneOf`/`anyOf` of the meta-schema that nothing matched, say what would: the
/// tag every branch fixes (a framing's `kind`, a binding's `model`) and its valid values,
/// or, when the tag is valid, what its own branch objects to. `None` when the branches
/// share no such tag (the validator's own message stands).
fn choices_hint(schema_path: &str, doc: &Value, instance_path: &str) -> Option<String> {
    if !(schema_path.ends_with("/oneOf") || schema_path.ends_with("/anyOf")) {
        return None;
    }
    let meta = meta_doc().ok()?;
    let branches: Vec<&Value> = follow(meta, schema_path)?
        .as_array()?
        .iter()
        .map(|b| resolve(meta, b))
        .collect();
    let tags: Vec<Vec<(&String, &Value)>> = branches.iter().map(|b| const_tags(meta, b)).collect();
    let tag = tags
        .first()?
        .iter()
        .map(|(k, _)| *k)
        .find(|k| tags.iter().all(|t| t.iter().any(|(bk, _)| bk == k)))?;
    // Each branch's value of the tag, as text ("\"ndjson\"").
    let values: Vec<Option<String>> = tags
        .iter()
        .map(|t| {
            t.iter()
                .find(|(k, _)| *k == tag)
                .map(|(_, v)| v.to_string())
        })
        .collect();
    let instance = doc.pointer(instance_path)?;
    let got = instance.get(tag).map(Value::to_string);
    let Some(i) = values.iter().position(|v| v.is_some() && *v == got) else {
        let valid: Vec<&str> = values.iter().flatten().map(String::as_str).collect();
        let got = got.unwrap_or_else(|| "missing".to_string());
        return Some(format!(
            "`{tag}` is {got}; it must be one of {}",
            valid.join(", ")
        ));
    };
    // The tag is valid: the branch it picks says what is wrong.
    let mut root = branches[i].clone();
    root["$defs"] = meta.get("$defs")?.clone();
    let why: Vec<String> = jsonschema::draft202012::new(&root)
        .ok()?
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    Some(format!("as a {tag} {}: {}", got?, why.join("; ")))
}

/// A branch's required properties that a `const` fixes, with their values.
fn const_tags<'a>(meta: &'a Value, branch: &'a Value) -> Vec<(&'a String, &'a Value)> {
    let required: Vec<&str> = branch
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    branch
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .filter(|(k, _)| required.contains(&k.as_str()))
                .filter_map(|(k, v)| Some((k, resolve(meta, v).get("const")?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The meta-schema node at a validator's schema path, stepping through local `$ref`s.
fn follow<'a>(meta: &'a Value, schema_path: &str) -> Option<&'a Value> {
    let mut node = meta;
    for seg in schema_path.split('/').skip(1) {
        let seg = crate::pointer::unescape(seg);
        node = if seg == "$ref" {
            resolve(meta, node)
        } else {
            match node {
                Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
                _ => node.get(&seg)?,
            }
        };
    }
    Some(node)
}

/// A local `$ref` (`#/$defs/X`) resolved; any other node as it is.
fn resolve<'a>(meta: &'a Value, node: &'a Value) -> &'a Value {
    node.get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|p| meta.pointer(p))
        .unwrap_or(node)
}

/// Check a parsed JSON document. Returns the model when it deserializes, and
/// every problem found (empty when the contract is clean).
pub fn check_document(file: &str, doc: &Value) -> (Option<Contract>, Vec<Problem>) {
    let mut cx = Cx {
        file,
        doc,
        problems: Vec::new(),
    };
    match meta_validator() {
        Ok(v) => {
            for e in v.iter_errors(doc) {
                let reason =
                    choices_hint(e.schema_path().as_str(), doc, e.instance_path().as_str())
                        .unwrap_or_else(|| e.to_string());
                cx.push(Lint::MetaSchema, e.instance_path().to_string(), reason);
            }
        }
        Err(e) => cx.push(Lint::MetaSchema, String::new(), e),
    }
    if !cx.problems.is_empty() {
        return (None, cx.problems);
    }
    let contract: Contract = match serde_json::from_value(doc.clone()) {
        Ok(c) => c,
        Err(e) => {
            cx.push(
                Lint::MetaSchema,
                String::new(),
                format!("does not fit the model: {e}"),
            );
            return (None, cx.problems);
        }
    };
    cx.refs();
    cx.schemas(&contract);
    // The catalog and code tables, indexed once for every lint that looks codes up.
    let idx = CodeIndex::new(&contract);
    cx.names(&contract, &idx);
    cx.codes(&contract, &idx);
    cx.examples(&contract, &idx);
    cx.state_machines(&contract);
    cx.machine_triggers(&contract, &idx);
    cx.limit_behaviour(&contract, &idx);
    cx.party_behaviour(&contract, &idx);
    cx.trace_pointers(&contract);
    cx.relations(&contract);
    cx.extensions(&contract);
    (Some(contract), cx.problems)
}

struct Cx<'a> {
    file: &'a str,
    doc: &'a Value,
    problems: Vec<Problem>,
}

/// The catalog and code-table values of a contract, for reference checks.
struct CodeIndex {
    errors: HashSet<String>,
    tables: BTreeMap<String, HashSet<String>>,
}

/// Whether some example of `methods` (of `part`; of any part when `None`) carries a value
/// at `pointer`: the behaviour lints' test that a pointer names something real.
fn carried<'m>(
    methods: impl IntoIterator<Item = &'m Method>,
    part: Option<Part>,
    pointer: &str,
) -> bool {
    methods
        .into_iter()
        .flat_map(|m| &m.examples)
        .any(|e| part.is_none_or(|p| e.part == p) && e.message.pointer(pointer).is_some())
}

/// Canonical text of a wire code, so `4002` and `-32001` compare as values.
fn code_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl CodeIndex {
    fn new(c: &Contract) -> Self {
        let mut errors = HashSet::new();
        for e in &c.errors {
            errors.insert(code_key(&e.code));
            if let Some(n) = &e.name {
                errors.insert(n.clone());
            }
        }
        let tables = c
            .codes
            .iter()
            .map(|(name, t)| {
                let mut set = HashSet::new();
                for v in &t.values {
                    set.insert(code_key(&v.value));
                    if let Some(n) = &v.name {
                        set.insert(n.clone());
                    }
                }
                (name.clone(), set)
            })
            .collect();
        CodeIndex { errors, tables }
    }

    fn is_error(&self, v: &Value) -> bool {
        self.errors.contains(&code_key(v))
    }

    fn in_any_table(&self, v: &Value) -> bool {
        let k = code_key(v);
        self.tables.values().any(|s| s.contains(&k))
    }
}

impl Cx<'_> {
    /// Whether party `p` exists; a name-ref problem at `at` when it does not.
    fn party_known(&mut self, c: &Contract, at: String, p: &str) -> bool {
        let known = c.parties.contains_key(p);
        if !known {
            self.push(Lint::NameRef, at, format!("unknown party {p:?}"));
        }
        known
    }

    fn push(&mut self, lint: Lint, pointer: String, reason: impl Into<String>) {
        self.problems.push(Problem {
            file: self.file.to_string(),
            pointer,
            lint,
            reason: reason.into(),
        });
    }

    /// Every `$ref` in the document resolves to a node of the document.
    fn refs(&mut self) {
        for (ptr, target) in crate::pointer::references(self.doc) {
            match target.strip_prefix('#') {
                Some(frag) if self.doc.pointer(&percent_decode(frag)).is_some() => {}
                Some(_) => self.push(
                    Lint::DanglingRef,
                    ptr,
                    format!("$ref {target:?} does not resolve"),
                ),
                None => self.push(
                    Lint::DanglingRef,
                    ptr,
                    format!(
                        "$ref {target:?} leaves the document; contracts must be self-contained"
                    ),
                ),
            }
        }
    }

    /// Every schema the contract holds compiles as JSON Schema 2020-12.
    fn schemas(&mut self, c: &Contract) {
        let mut list: Vec<(String, &Value)> = Vec::new();
        for (name, s) in &c.defs {
            list.push((join("/$defs", [name]), s));
        }
        for (name, ch) in &c.channels {
            if let Some(s) = &ch.message {
                list.push((join("/channels", [name, "message"]), s));
            }
        }
        for (name, m) in &c.methods {
            if let Some(s) = &m.params {
                list.push((join("/methods", [name, "params"]), s));
            }
            if let Some(s) = &m.result {
                list.push((join("/methods", [name, "result"]), s));
            }
        }
        for (name, f) in &c.files {
            list.push((join("/files", [name, "schema"]), &f.schema));
        }
        for (ptr, s) in list {
            if let Err(e) = jsonschema::draft202012::meta::validate(s) {
                self.push(
                    Lint::SchemaValid,
                    ptr,
                    format!("not valid JSON Schema 2020-12: {e}"),
                );
            }
        }
    }

    /// Names of parties, channels, capabilities, limits and tables resolve.
    fn names(&mut self, c: &Contract, idx: &CodeIndex) {
        let limit = |n: &str| c.limits.contains_key(n);
        let mut limit_refs: Vec<(String, String)> = Vec::new();
        for (cname, ch) in &c.channels {
            let base = join("/channels", [cname]);
            if let Some(p) = &ch.connects {
                self.party_known(c, join(&base, ["connects"]), p);
            }
            match &ch.framing {
                Framing::LengthPrefixed {
                    max_payload,
                    frame_deadline,
                    ..
                } => {
                    if let Some(l) = max_payload {
                        limit_refs.push((join(&base, ["framing", "maxPayload"]), l.clone()));
                    }
                    if let Some(l) = frame_deadline {
                        limit_refs.push((join(&base, ["framing", "frameDeadline"]), l.clone()));
                    }
                }
                Framing::Binary {
                    max_frame,
                    header,
                    sequence,
                    ..
                } => {
                    if let Some(f) = sequence
                        .as_ref()
                        .filter(|f| !header.iter().any(|h| h.name == **f))
                    {
                        self.push(
                            Lint::NameRef,
                            join(&base, ["framing", "sequence"]),
                            format!("no header field {f:?}"),
                        );
                    }
                    if let Some(l) = max_frame {
                        limit_refs.push((join(&base, ["framing", "maxFrame"]), l.clone()));
                    }
                    if header.first().and_then(|h| h.counts).is_none() {
                        self.push(
                            Lint::NameRef,
                            join(&base, ["framing", "header", "0"]),
                            "the first header field of a binary frame must be its length field (set `counts`)",
                        );
                    }
                }
                Framing::HeaderDelimited {
                    max_payload,
                    max_header,
                    frame_deadline,
                    ..
                } => {
                    for (k, v) in [
                        ("maxPayload", max_payload),
                        ("maxHeader", max_header),
                        ("frameDeadline", frame_deadline),
                    ] {
                        if let Some(l) = v {
                            limit_refs.push((join(&base, ["framing", k]), l.clone()));
                        }
                    }
                }
                Framing::Ndjson { max_line, .. } => {
                    limit_refs.push((join(&base, ["framing", "maxLine"]), max_line.clone()));
                }
                Framing::WebsocketText { max_message, .. } => {
                    if let Some(l) = max_message {
                        limit_refs.push((join(&base, ["framing", "maxMessage"]), l.clone()));
                    }
                }
            }
            if let Some(j) = &ch.json {
                for (k, v) in [("maxDepth", &j.max_depth), ("maxItems", &j.max_items)] {
                    if let Some(l) = v {
                        limit_refs.push((join(&base, ["json", k]), l.clone()));
                    }
                }
            }
        }
        for (name, cap) in &c.capabilities {
            let at = join("/capabilities", [name, "declaredBy"]);
            self.party_known(c, at, &cap.declared_by);
        }
        for (mname, m) in &c.methods {
            let base = join("/methods", [mname]);
            for (i, p) in m.from.iter().enumerate() {
                self.party_known(c, join(&base, ["from", &i.to_string()]), p);
            }
            if !c.channels.contains_key(&m.channel) {
                self.push(
                    Lint::NameRef,
                    join(&base, ["channel"]),
                    format!("unknown channel {:?}", m.channel),
                );
            }
            if let Some(cap) = &m.capability
                && !c.capabilities.contains_key(cap)
            {
                self.push(
                    Lint::NameRef,
                    join(&base, ["capability"]),
                    format!("capability {cap:?} is not declared"),
                );
            }
            for (i, need) in m.needs.iter().enumerate() {
                let at = join(&base, ["needs", &i.to_string()]);
                if need.matches.is_empty() && need.present.is_empty() {
                    let why =
                        "a `needs` entry holding on every message: give `matches` or `present`";
                    self.push(Lint::NameRef, at.clone(), why);
                }
                for cap in (need.capabilities.iter()).filter(|k| !c.capabilities.contains_key(*k)) {
                    self.push(
                        Lint::NameRef,
                        join(&at, ["capabilities"]),
                        format!("capability {cap:?} is not declared"),
                    );
                }
            }
            if let Some(l) = &m.max_payload {
                limit_refs.push((join(&base, ["maxPayload"]), l.clone()));
            }
            if let Some(w) = &m.not_while {
                self.not_while(c, &join(&base, ["notWhile"]), m, w);
            }
            if m.kind == Kind::Request && m.result.is_none() {
                self.push(
                    Lint::NameRef,
                    join(&base, ["result"]),
                    "a request must declare its result schema",
                );
            }
            if m.kind != Kind::Request && m.result.is_some() {
                self.push(
                    Lint::NameRef,
                    join(&base, ["result"]),
                    "only requests have a result",
                );
            }
            if m.kind == Kind::Response || m.kind == Kind::Error {
                self.push(
                    Lint::NameRef,
                    join(&base, ["kind"]),
                    "responses and errors are declared by their request's `result` and `errors`, not as methods",
                );
            }
            let binding = c
                .channels
                .get(&m.channel)
                .and_then(|ch| ch.binding.as_ref());
            if matches!(binding, Some(Binding::Tagged { .. })) && m.matches.is_empty() {
                self.push(
                    Lint::NameRef,
                    join(&base, ["match"]),
                    "a method on a `tagged` channel needs a `match`",
                );
            }
        }
        for (lname, l) in &c.limits {
            let base = join("/limits", [lname]);
            if let Some(a) = &l.action {
                self.action_names(c, idx, &join(&base, ["action"]), a);
            }
            if let Some(t) = &l.timer
                && t != "both"
                && !c.parties.contains_key(t)
            {
                self.push(
                    Lint::NameRef,
                    join(&base, ["timer"]),
                    format!("unknown party {t:?} (or `both`)"),
                );
            }
        }
        let v = &c.violations;
        for (k, a) in [
            ("parse", &v.parse),
            ("invalid", &v.invalid),
            ("oversize", &v.oversize),
            ("unknownRequest", &v.unknown_request),
            ("unknownNotification", &v.unknown_notification),
            ("wrongDirection", &v.wrong_direction),
            ("invalidParams", &v.invalid_params),
            ("beforeHandshake", &v.before_handshake),
        ] {
            if let Some(a) = a {
                self.action_names(c, idx, &join("/violations", [k]), a);
            }
        }
        if let Some(t) = &c.trace
            && !c.channels.contains_key(&t.channel)
        {
            self.push(
                Lint::NameRef,
                "/trace/channel".into(),
                format!("unknown channel {:?}", t.channel),
            );
        }
        for (ptr, l) in limit_refs {
            if !limit(&l) {
                self.push(
                    Lint::NameRef,
                    ptr,
                    format!("limit {l:?} is not declared in `limits`"),
                );
            }
        }
    }

    /// A `notWhile`: each pending method a request some sender of `m` sends, `unless`
    /// naming values.
    fn not_while(&mut self, c: &Contract, at: &str, m: &Method, w: &crate::model::NotWhile) {
        if w.pending.is_empty() {
            self.push(Lint::NameRef, join(at, ["pending"]), "names no request");
        }
        for (i, p) in w.pending.iter().enumerate() {
            let ok = c.methods.get(p).is_some_and(|r| {
                r.kind == Kind::Request && r.from.iter().any(|f| m.from.contains(f))
            });
            if !ok {
                let why = format!("{p:?} is no request a sender of this method sends");
                self.push(Lint::NameRef, join(at, ["pending", &i.to_string()]), why);
            }
        }
        for (p, _) in (w.unless.iter()).filter(|(_, v)| v.is_empty()) {
            let why = format!("{p} lists no value");
            self.push(Lint::NameRef, join(at, ["unless", p]), why);
        }
    }

    fn action_names(&mut self, c: &Contract, idx: &CodeIndex, ptr: &str, a: &Action) {
        if let Some(l) = &a.count_toward
            && !c.limits.contains_key(l)
        {
            self.push(
                Lint::NameRef,
                join(ptr, ["countToward"]),
                format!("limit {l:?} is not declared in `limits`"),
            );
        }
        if let Some(code) = &a.code
            && !idx.is_error(code)
            && !idx.in_any_table(code)
        {
            self.push(
                Lint::ErrorRef,
                join(ptr, ["code"]),
                format!(
                    "code {} is neither in the error catalog nor in any code table",
                    code_key(code)
                ),
            );
        }
        if let Some(then) = &a.then {
            if a.action != crate::model::ActionKind::ReplyError {
                let why = "`then` follows an error reply: it is for a `reply-error` action";
                self.push(Lint::NameRef, join(ptr, ["then"]), why.to_string());
            }
            self.action_names(c, idx, &join(ptr, ["then"]), then);
        }
        let named = matches!(a.action, ActionKind::Close | ActionKind::ReplyError);
        if a.reason.is_some() && !named {
            let why = "`reason` names a close's reason or an error reply's data.reason: it is for a `close` or `reply-error` action".to_string();
            self.push(Lint::NameRef, join(ptr, ["reason"]), why);
        }
        let reports = a.report.iter().flat_map(|r| r.messages.iter().enumerate());
        for (i, m) in reports.filter(|(_, m)| !c.methods.contains_key(&m.method)) {
            let at = join(ptr, ["report", "messages", &i.to_string(), "method"]);
            self.push(Lint::NameRef, at, format!("unknown method {:?}", m.method));
        }
    }

    /// Codes are unique, and every code a method names exists.
    fn codes(&mut self, c: &Contract, idx: &CodeIndex) {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, e) in c.errors.iter().enumerate() {
            if let Some(first) = seen.insert(code_key(&e.code), i) {
                self.push(
                    Lint::DuplicateCode,
                    format!("/errors/{i}/code"),
                    format!(
                        "code {} already defined at /errors/{first}",
                        code_key(&e.code)
                    ),
                );
            }
        }
        for (tname, t) in &c.codes {
            if let Some(p) = &t.party {
                self.party_known(c, join("/codes", [tname, "party"]), p);
            }
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for (i, v) in t.values.iter().enumerate() {
                let ptr = join("/codes", [tname, "values", &i.to_string()]);
                if let Some(first) = seen.insert(code_key(&v.value), i) {
                    self.push(
                        Lint::DuplicateCode,
                        join(&ptr, ["value"]),
                        format!(
                            "value {} already defined at index {first} of table {tname:?}",
                            code_key(&v.value)
                        ),
                    );
                }
                for (target, val) in &v.maps {
                    match c.codes.get(target) {
                        None => self.push(
                            Lint::NameRef,
                            join(&ptr, ["maps", target]),
                            format!("no code table {target:?}"),
                        ),
                        Some(tt)
                            if !tt
                                .values
                                .iter()
                                .any(|x| code_key(&x.value) == code_key(val)) =>
                        {
                            self.push(
                                Lint::NameRef,
                                join(&ptr, ["maps", target]),
                                format!("value {} is not in code table {target:?}", code_key(val)),
                            )
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        for (mname, m) in &c.methods {
            for (i, code) in m.errors.iter().enumerate() {
                if !idx.is_error(code) {
                    self.push(
                        Lint::ErrorRef,
                        join("/methods", [mname, "errors", &i.to_string()]),
                        format!("error code {} is not in the error catalog", code_key(code)),
                    );
                }
            }
        }
    }

    /// Every example validates against the schemas its binding implies.
    fn examples(&mut self, c: &Contract, idx: &CodeIndex) {
        let mut sc = Schemas::new(c);
        for (mname, m) in &c.methods {
            for (i, ex) in m.examples.iter().enumerate() {
                let ptr = join("/methods", [mname, "examples", &i.to_string(), "message"]);
                for reason in example_faults(&mut sc, idx, mname, m, ex) {
                    self.push(Lint::BadExample, ptr.clone(), reason);
                }
            }
        }
        for (fname, f) in &c.files {
            for (i, ex) in f.examples.iter().enumerate() {
                let ptr = join("/files", [fname, "examples", &i.to_string()]);
                for reason in sc.faults(&f.schema, ex, "") {
                    self.push(Lint::BadExample, ptr.clone(), reason);
                }
            }
        }
    }

    fn state_machines(&mut self, c: &Contract) {
        for (sname, sm) in &c.state_machines {
            let base = join("/stateMachines", [sname]);
            if !sm.states.contains_key(&sm.initial) {
                self.push(
                    Lint::StateMachine,
                    join(&base, ["initial"]),
                    format!("initial state {:?} is not declared", sm.initial),
                );
            }
            for (i, t) in sm.terminal.iter().enumerate() {
                if !sm.states.contains_key(t) {
                    self.push(
                        Lint::StateMachine,
                        join(&base, ["terminal", &i.to_string()]),
                        format!("terminal state {t:?} is not declared"),
                    );
                }
            }
            let mut pairs = HashSet::new();
            for (i, t) in sm.transitions.iter().enumerate() {
                let tp = join(&base, ["transitions", &i.to_string()]);
                for (k, s) in [("from", &t.from), ("to", &t.to)] {
                    if !sm.states.contains_key(s) {
                        self.push(
                            Lint::StateMachine,
                            join(&tp, [k]),
                            format!("state {s:?} is not declared"),
                        );
                    }
                }
                if sm.terminal.contains(&t.from) {
                    self.push(
                        Lint::StateMachine,
                        join(&tp, ["from"]),
                        format!("terminal state {:?} has an outgoing transition", t.from),
                    );
                }
                // Two typed triggers may lead the same way (progress and partial both keep a
                // task running); the same trigger twice is the duplicate.
                let trigger = t
                    .trigger
                    .as_ref()
                    .map(|x| serde_json::to_string(x).unwrap_or_default());
                if !pairs.insert((t.from.clone(), t.to.clone(), trigger)) {
                    self.push(
                        Lint::StateMachine,
                        tp.clone(),
                        format!("transition {} → {} is listed twice", t.from, t.to),
                    );
                }
                if let Some(e) = &t.ends {
                    self.ending(c, join(&tp, ["ends"]), e);
                }
            }
            self.machine_graph(&base, sm);
        }
    }

    /// A transition's `ends`: a known party, a way to end a channel (a `close` with its code),
    /// and an exit its party's exit-code table holds.
    fn ending(&mut self, c: &Contract, at: String, e: &crate::model::Ending) {
        use crate::model::{ActionKind, CodeKind};
        self.party_known(c, join(&at, ["by"]), &e.by);
        match (e.action, &e.code) {
            (ActionKind::Close, None) => self.push(
                Lint::StateMachine,
                join(&at, ["code"]),
                "a `close` needs its close code",
            ),
            (ActionKind::Close | ActionKind::DropConnection, _) => {}
            (other, _) => self.push(
                Lint::StateMachine,
                join(&at, ["action"]),
                format!("{other:?} does not end a channel: `close` or `drop-connection`"),
            ),
        }
        let Some(exit) = e.exit else { return };
        let tables: Vec<_> = (c.codes.values())
            .filter(|t| matches!(t.kind, CodeKind::ExitCode | CodeKind::CliExitCode))
            .filter(|t| t.party.as_deref() == Some(e.by.as_str()))
            .collect();
        if !tables
            .iter()
            .any(|t| t.values.iter().any(|v| v.value == exit))
        {
            let why = format!(
                "exit {exit} is in no exit-code table of the {} (a table's `party`)",
                e.by
            );
            self.push(Lint::StateMachine, join(&at, ["exit"]), why);
        }
    }

    /// Each trace-id pointer (the contract's `trace`, a binding's `trace`) is carried by at
    /// least one example on its channel; one that matches nothing is a typo.
    /// Every named extension is a hook the tools implement.
    fn extensions(&mut self, c: &Contract) {
        for name in crate::extensions::unknown(c) {
            let at = crate::join_pointer("/extensions", [name]);
            let known = crate::extensions::known_names();
            let why = format!("no hook named {name:?} (the tools have: {known})");
            self.push(Lint::NameRef, at, why);
        }
    }

    fn trace_pointers(&mut self, c: &Contract) {
        let mut pointers: Vec<(String, &str, &str)> = Vec::new();
        if let Some(t) = &c.trace {
            pointers.push(("/trace/path".into(), t.channel.as_str(), t.path.as_str()));
        }
        for (cname, ch) in &c.channels {
            let trace = match &ch.binding {
                Some(Binding::Jsonrpc { trace, .. })
                | Some(Binding::Envelope { trace, .. })
                | Some(Binding::Tagged { trace, .. }) => trace.as_deref(),
                _ => None,
            };
            if let Some(p) = trace {
                pointers.push((join("/channels", [cname, "binding", "trace"]), cname, p));
            }
        }
        for (at, channel, ptr) in pointers {
            let on_channel = c.methods.values().filter(|m| m.channel == channel);
            if !carried(on_channel, None, ptr) {
                self.push(
                    Lint::NameRef,
                    at,
                    format!("no example on channel {channel:?} carries a value at {ptr}"),
                );
            }
        }
    }

    fn relations(&mut self, c: &Contract) {
        let mut ev = Evaluator::new(c);
        for (lname, l) in &c.limits {
            if let Err(e) = ev.limit(lname) {
                self.push(Lint::Relation, join("/limits", [lname, "value"]), e);
            }
            if l.kind == crate::model::LimitKind::Rate
                && (l.burst.is_none() || l.per_seconds.is_none())
            {
                self.push(
                    Lint::Relation,
                    join("/limits", [lname]),
                    "a rate needs `burst` and `perSeconds`",
                );
            }
        }
        for (i, r) in c.relations.iter().enumerate() {
            let ptr = format!("/relations/{i}");
            let (l, r_) = match (ev.expr(&r.left), ev.expr(&r.right)) {
                (Ok(l), Ok(r_)) => (l, r_),
                (Err(e), _) | (_, Err(e)) => {
                    self.push(Lint::Relation, ptr, e);
                    continue;
                }
            };
            if l.1 != r_.1 && l.1 != Dim::Scalar && r_.1 != Dim::Scalar {
                self.push(
                    Lint::Relation,
                    ptr,
                    format!("compares {:?} with {:?}", l.1, r_.1),
                );
                continue;
            }
            let holds = match r.op {
                RelOp::Lt => l.0 < r_.0,
                RelOp::Le => l.0 <= r_.0,
                RelOp::Eq => (l.0 - r_.0).abs() < 1e-9,
                RelOp::Ge => l.0 >= r_.0,
                RelOp::Gt => l.0 > r_.0,
            };
            if !holds {
                self.push(
                    Lint::Relation,
                    ptr,
                    format!(
                        "{} {} {} does not hold ({} vs {}): {}",
                        show(&r.left),
                        op_str(r.op),
                        show(&r.right),
                        l.0,
                        r_.0,
                        r.description
                    ),
                );
            }
        }
    }
}

fn op_str(op: RelOp) -> &'static str {
    match op {
        RelOp::Lt => "<",
        RelOp::Le => "<=",
        RelOp::Eq => "==",
        RelOp::Ge => ">=",
        RelOp::Gt => ">",
    }
}

/// Render an expression the way the docs print it.
pub fn show(e: &Expr) -> String {
    match e {
        Expr::Number(n) => format!("{n}"),
        Expr::Ref(s) => s.clone(),
        Expr::Sum { sum } => format!("({})", sum.iter().map(show).collect::<Vec<_>>().join(" + ")),
        Expr::Product { product } => product.iter().map(show).collect::<Vec<_>>().join(" × "),
    }
}

/// The physical dimension of a limit, so relations cannot compare bytes with seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dim {
    /// A size in bytes.
    Bytes,
    /// A duration in seconds.
    Seconds,
    /// A count, mode or UTF-16 length: compared as plain numbers.
    Scalar,
}

/// Scale a value in `unit` to the base unit of its dimension.
pub fn to_base(unit: Unit, v: f64) -> (f64, Dim) {
    match unit {
        Unit::Bytes => (v, Dim::Bytes),
        Unit::KiB => (v * 1024.0, Dim::Bytes),
        Unit::MiB => (v * 1024.0 * 1024.0, Dim::Bytes),
        Unit::Seconds => (v, Dim::Seconds),
        Unit::Millis => (v / 1000.0, Dim::Seconds),
        Unit::Utf16Units | Unit::Count | Unit::Mode => (v, Dim::Scalar),
    }
}

/// Evaluates limit values and relation sides in base units.
pub struct Evaluator<'c> {
    c: &'c Contract,
    stack: Vec<String>,
    /// Values that hold in place of the declared ones, in each limit's own unit.
    given: Option<&'c HashMap<String, f64>>,
}

impl<'c> Evaluator<'c> {
    /// An evaluator over one contract's limits.
    pub fn new(c: &'c Contract) -> Self {
        Evaluator {
            c,
            stack: Vec::new(),
            given: None,
        }
    }

    /// An evaluator where `given` values (in each limit's own unit) replace the declared
    /// ones, and every expression over them follows.
    pub fn with_given(c: &'c Contract, given: &'c HashMap<String, f64>) -> Self {
        Evaluator {
            given: Some(given),
            ..Evaluator::new(c)
        }
    }

    /// The value of a limit in its own unit.
    pub fn limit_value(&mut self, name: &str) -> Result<f64, String> {
        let l = self
            .c
            .limits
            .get(name)
            .ok_or_else(|| format!("unknown limit {name:?}"))?;
        if let Some(v) = self.given.and_then(|g| g.get(name)) {
            return Ok(*v);
        }
        if self.stack.iter().any(|s| s == name) {
            return Err(format!("limit {name:?} is defined in terms of itself"));
        }
        self.stack.push(name.to_string());
        let r = self.expr(&l.value);
        self.stack.pop();
        let (base, dim) = r?;
        // Convert the base-unit result back into this limit's own unit.
        let (one, own_dim) = to_base(l.unit, 1.0);
        if dim != Dim::Scalar && own_dim != dim {
            return Err(format!(
                "limit {name:?} in {:?} is computed from {dim:?}",
                l.unit
            ));
        }
        Ok(if dim == Dim::Scalar { base } else { base / one })
    }

    fn limit(&mut self, name: &str) -> Result<(f64, Dim), String> {
        let v = self.limit_value(name)?;
        let unit = self
            .c
            .limits
            .get(name)
            .map(|l| l.unit)
            .unwrap_or(Unit::Count);
        Ok(to_base(unit, v))
    }

    /// Evaluate an expression in base units.
    pub fn expr(&mut self, e: &Expr) -> Result<(f64, Dim), String> {
        Ok(match e {
            Expr::Number(n) => (*n, Dim::Scalar),
            Expr::Ref(name) => self.limit(name)?,
            Expr::Sum { sum } => {
                let mut total = 0.0;
                let mut dim = Dim::Scalar;
                for t in sum {
                    let (v, d) = self.expr(t)?;
                    if dim != Dim::Scalar && d != Dim::Scalar && d != dim {
                        return Err(format!("adds {dim:?} to {d:?} in {}", show(e)));
                    }
                    if d != Dim::Scalar {
                        dim = d;
                    }
                    total += v;
                }
                (total, dim)
            }
            Expr::Product { product } => {
                let mut total = 1.0;
                let mut dim = Dim::Scalar;
                for t in product {
                    let (v, d) = self.expr(t)?;
                    if d != Dim::Scalar {
                        if dim != Dim::Scalar {
                            return Err(format!(
                                "multiplies two dimensioned values in {}",
                                show(e)
                            ));
                        }
                        dim = d;
                    }
                    total *= v;
                }
                (total, dim)
            }
        })
    }
}

fn percent_decode(s: &str) -> String {
    // Fragment pointers in our contracts never need percent-escapes beyond these.
    s.replace("%25", "%")
        .replace("%22", "\"")
        .replace("%20", " ")
}

/// Wrap a schema fragment so its `#/$defs/...` references resolve against the contract.
pub fn rooted(c: &Contract, schema: &Value) -> Value {
    let defs = Value::Object(c.defs.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    let mut root = serde_json::Map::new();
    root.insert(
        "$schema".into(),
        Value::String("https://json-schema.org/draft/2020-12/schema".into()),
    );
    root.insert("$defs".into(), defs);
    match schema {
        Value::Object(m) => {
            for (k, v) in m {
                if k != "$defs" {
                    root.insert(k.clone(), v.clone());
                }
            }
        }
        Value::Bool(false) => {
            root.insert("not".into(), serde_json::json!({}));
        }
        _ => {}
    }
    Value::Object(root)
}

/// The contract's schema fragments, each compiled once per check however many examples
/// it validates (compiling, with the contract's `$defs` rooted in, is the check's cost).
struct Schemas<'c> {
    c: &'c Contract,
    /// By the fragment's address in `c`, which stays put while `c` is borrowed.
    compiled: HashMap<*const Value, Result<jsonschema::Validator, String>>,
}

impl<'c> Schemas<'c> {
    fn new(c: &'c Contract) -> Self {
        Schemas {
            c,
            compiled: HashMap::new(),
        }
    }

    /// Reasons `instance` fails `schema` (rooted at the contract), prefixed by `at`.
    fn faults(&mut self, schema: &'c Value, instance: &Value, at: &str) -> Vec<String> {
        let c = self.c;
        let compiled = (self.compiled.entry(std::ptr::from_ref(schema))).or_insert_with(|| {
            jsonschema::draft202012::new(&rooted(c, schema)).map_err(|e| e.to_string())
        });
        match compiled {
            Err(e) => vec![format!("schema does not compile: {e}")],
            Ok(v) => v
                .iter_errors(instance)
                .map(|e| format!("{at}{}: {e}", e.instance_path()))
                .collect(),
        }
    }

    /// Whether a JSON-RPC call may leave `params` out: its schema accepts `null` or `{}`
    /// (the rule `wire::classify` applies to live traffic).
    fn params_omittable(&mut self, schema: &'c Value) -> bool {
        [Value::Null, Value::Object(Default::default())]
            .iter()
            .any(|v| self.faults(schema, v, "").is_empty())
    }
}

fn example_faults<'c>(
    sc: &mut Schemas<'c>,
    idx: &CodeIndex,
    mname: &str,
    m: &'c Method,
    ex: &Example,
) -> Vec<String> {
    let c = sc.c;
    let mut out = Vec::new();
    let Some(ch) = c.channels.get(&m.channel) else {
        return out;
    };
    let msg = &ex.message;
    if let Some(from) = &ex.from
        && !m.from.contains(from)
        && ex.part == Part::Call
    {
        out.push(format!(
            "example is sent by {from:?}, but only {:?} may send {mname}",
            m.from
        ));
    }
    if let Some(s) = &ch.message {
        out.extend(sc.faults(s, msg, "envelope "));
    }
    let (payload_ptr, method_ptr, error_code_ptr): (String, Option<String>, Option<String>) =
        match &ch.binding {
            Some(Binding::Jsonrpc { version, .. }) => {
                if msg.get("jsonrpc").and_then(Value::as_str) != Some(version) {
                    out.push(format!("`jsonrpc` must be {version:?}"));
                }
                match ex.part {
                    Part::Call => ("/params".into(), Some("/method".into()), None),
                    Part::Result => ("/result".into(), None, None),
                    Part::Error => ("/error".into(), None, Some("/error/code".into())),
                }
            }
            Some(Binding::Envelope {
                payload,
                method,
                kind,
                kinds,
                ..
            }) => {
                let wire_kind = msg
                    .pointer(kind)
                    .and_then(Value::as_str)
                    .and_then(|k| kinds.get(k))
                    .copied();
                let expect: &[Kind] = match ex.part {
                    Part::Call => &[m.kind],
                    Part::Result => &[Kind::Response],
                    Part::Error => &[Kind::Error],
                };
                if let Some(k) = wire_kind
                    && !expect.contains(&k)
                {
                    out.push(format!(
                        "{kind} says {k:?}, but this example is a {:?}",
                        ex.part
                    ));
                }
                let err = match ex.part {
                    Part::Error => Some(format!("{payload}/code")),
                    _ => None,
                };
                let mp = (ex.part == Part::Call).then(|| method.clone());
                (payload.clone(), mp, err)
            }
            Some(Binding::Tagged { .. }) => {
                for (p, want) in &m.matches {
                    if msg.pointer(p) != Some(want) {
                        out.push(format!("{p} must be {want} to be a {mname} frame"));
                    }
                }
                (String::new(), None, None)
            }
            None => (String::new(), None, None),
        };
    if let Some(mp) = method_ptr
        && msg.pointer(&mp).and_then(Value::as_str) != Some(mname)
    {
        out.push(format!("{mp} must be {mname:?}"));
    }
    let jsonrpc_call = matches!(ch.binding, Some(Binding::Jsonrpc { .. })) && ex.part == Part::Call;
    let schema = match ex.part {
        Part::Call => m.params.as_ref(),
        Part::Result => m.result.as_ref(),
        Part::Error => None,
    };
    if let Some(s) = schema {
        match msg.pointer(&payload_ptr) {
            Some(p) => out.extend(sc.faults(s, p, &format!("{payload_ptr} "))),
            // JSON-RPC lets a call leave `params` out; the wire layer accepts that when
            // the method's schema accepts no parameters, and so does this lint.
            None if jsonrpc_call && sc.params_omittable(s) => {}
            None => out.push(format!("{payload_ptr} is missing")),
        }
    }
    if let Some(ep) = error_code_ptr {
        match msg.pointer(&ep) {
            Some(code) if !idx.is_error(code) => out.push(format!(
                "error code {} is not in the error catalog",
                code_key(code)
            )),
            Some(code)
                if !m.errors.iter().any(|e| code_key(e) == code_key(code))
                    && !is_generic_error(c, code) =>
            {
                out.push(format!(
                    "{mname} does not list error {} in its `errors`",
                    code_key(code)
                ))
            }
            Some(_) => {}
            None => out.push(format!("{ep} is missing")),
        }
    }
    out
}

/// Codes any method may answer with (the contract's own violation codes).
fn is_generic_error(c: &Contract, code: &Value) -> bool {
    c.violations.codes().any(|v| code_key(v) == code_key(code))
}

/// The set of all error codes and code-table values, for callers that render them.
pub fn all_code_values(c: &Contract) -> BTreeSet<String> {
    let idx = CodeIndex::new(c);
    let mut out: BTreeSet<String> = idx.errors.into_iter().collect();
    for s in idx.tables.into_values() {
        out.extend(s);
    }
    out
}
