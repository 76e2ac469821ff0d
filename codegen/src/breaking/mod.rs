//! `contractgen diff` and `contractgen breaking`: what changed between two
//! versions of a contract, and which changes break peers already deployed.
//!
//! Works on the contract documents as JSON, so every finding names the pointer in
//! both files. Each rule of [`RULES`] classifies one kind of change as wire-breaking
//! (a message or behaviour that one side's old build refuses or cannot produce),
//! source-breaking (code generated from the old contract stops compiling), or
//! compatible. Message schemas are compared per direction with
//! [`schema::gap`]: "old receivers refuse what new senders may send" and "new
//! receivers refuse what old senders may send" are separate findings.
//! docs/breaking.md is this table, checked by a test.

pub mod schema;
mod sections;

use serde_json::Value;

/// How a change affects what is deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// A peer built from the old contract and one built from the new no longer agree on the wire.
    Wire,
    /// Code generated from the old contract no longer compiles against the new.
    Source,
    /// Neither.
    Compatible,
}

impl Category {
    /// The word used in reports and in docs/breaking.md.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Wire => "wire",
            Category::Source => "source",
            Category::Compatible => "compatible",
        }
    }
}

/// One rule of the table: an id, its category and what it means.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Stable id, printed with each finding.
    pub id: &'static str,
    /// Report section.
    pub section: &'static str,
    /// What the rule classifies a change as.
    pub category: Category,
    /// A wire-breaking change that also breaks code generated from the old contract
    /// (a generated constant, type or module is gone): `--category source` lists it too.
    pub also_source: bool,
    /// One line for the docs.
    pub summary: &'static str,
}

macro_rules! rules {
    (@also) => { false };
    (@also $also:ident) => { true };
    ($($id:literal, $section:literal, $cat:ident $(+ $also:ident)?, $summary:literal;)*) => {
        /// Every rule, in report order.
        pub const RULES: &[Rule] = &[$(Rule {
            id: $id,
            section: $section,
            category: Category::$cat,
            also_source: rules!(@also $($also)?),
            summary: $summary,
        }),*];
    };
}

rules! {
    "contract-renamed", "contract", Wire + Source, "the contract's name changed (QUIC ALPN, generated module and package names)";
    "method-removed", "methods", Wire + Source, "a method is gone: old peers still send it";
    "method-added", "methods", Compatible, "a new method: old peers never send it";
    "method-kind-changed", "methods", Wire + Source, "request became notification or the reverse";
    "method-channel-changed", "methods", Wire, "the method moved to another channel";
    "method-senders-changed", "methods", Wire, "the parties allowed to send the method changed (direction)";
    "message-narrowed", "schemas", Wire, "new receivers refuse a message old senders may send (a field made required, a type narrowed, a value or property removed, a bound tightened)";
    "message-widened", "schemas", Wire, "old receivers refuse a message new senders may send (a field or value added where the old schema forbids it, a type widened, a bound loosened)";
    "method-error-added", "errors", Wire, "a method may answer an error code its old callers do not expect";
    "method-error-removed", "errors", Compatible, "a method no longer answers a code";
    "error-removed", "errors", Wire + Source, "a code left the error catalog: old peers still send it";
    "error-added", "errors", Compatible, "a new code in the catalog";
    "error-renumbered", "errors", Wire, "an error keeps its name under a new code";
    "error-renamed", "errors", Source, "a code keeps its number under a new name (generated constants)";
    "error-meaning-changed", "errors", Wire, "a code's category or retryable changed: peers act on it differently";
    "code-removed", "codes", Wire + Source, "a value left a code table (close codes, exit codes…)";
    "code-added", "codes", Compatible, "a new value in a code table";
    "code-renumbered", "codes", Wire, "a named value of a code table has a new number";
    "code-renamed", "codes", Source, "a value of a code table has a new name";
    "limit-lowered", "limits", Wire, "a size, count or rate limit dropped: old senders may exceed it";
    "limit-raised", "limits", Wire, "a size, count or rate limit rose: new senders may exceed what old receivers accept";
    "limit-changed", "limits", Wire, "a deadline, interval, constant or unit changed: the two sides' timers disagree";
    "limit-removed", "limits", Wire + Source, "a limit is gone: new senders may exceed what old receivers still enforce";
    "limit-added", "limits", Wire, "a new limit: old senders do not keep it";
    "agreement-removed", "limits", Wire, "an agreement is gone: old receivers still compare the value it named";
    "agreement-added", "limits", Wire, "a new agreement: old senders do not repeat the value it compares";
    "agreement-changed", "limits", Wire, "an agreement's places, rule, judge or mismatch reaction changed: the two sides compare different values, or react differently";
    "machine-removed", "state machines", Wire, "a state machine is gone";
    "machine-added", "state machines", Wire, "a new state machine: old senders do not follow it";
    "state-removed", "state machines", Wire, "a state is gone";
    "transition-removed", "state machines", Wire, "a transition is gone: what old peers do is now out of place";
    "transition-added", "state machines", Compatible, "a new transition";
    "allows-narrowed", "state machines", Wire, "a method is allowed in fewer states: old senders send it where new receivers refuse";
    "allows-widened", "state machines", Wire, "a method is allowed in more states: new senders send it where old receivers refuse";
    "ends-changed", "state machines", Wire, "a transition ends the channel another way, or no longer or newly does (its `ends`: who, the close or drop and its code, the exit): the other party sees another end and another exit";
    "reaction-changed", "state machines", Wire, "a message out of place gets another action or code (outOfPlace, refusals, onInvalid): old and new receivers answer it differently";
    "extension-removed", "extensions", Wire, "a named extension is gone: receivers built to the old contract still run the rules its hook ran";
    "extension-added", "extensions", Wire, "a new named extension: its hook runs rules old senders do not keep";
    "channel-removed", "framing", Wire, "a channel is gone";
    "channel-added", "framing", Compatible, "a new channel";
    "framing-changed", "framing", Wire, "a channel's framing, JSON rules, binding, transports, upgrade refusals or redial changed";
    "party-removed", "parties", Wire + Source, "a party is gone";
    "party-added", "parties", Compatible, "a new party";
    "ids-changed", "parties", Wire, "a party's request-id rules changed";
    "type-removed", "types", Source, "a named type ($defs) is gone: generated code that uses it breaks";
    "type-added", "types", Compatible, "a new named type";
    "versions-changed", "versions", Wire, "a version set (hello versions, subprotocols) lost an entry";
    "versions-added", "versions", Compatible, "a version set gained an entry";
    "major-not-bumped", "versions", Wire, "a wire-breaking change without a new major version";
    "versions-stale", "versions", Wire, "a new major version while every version set (hello versions, subprotocols) stayed as it was: peers cannot tell the majors apart";
}

/// The rule with `id`.
pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}

/// One classified change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule that classified it.
    pub rule: &'static str,
    /// Pointer into the old document (`None`: not there).
    pub old: Option<String>,
    /// Pointer into the new document.
    pub new: Option<String>,
    /// What changed, and why it matters.
    pub reason: String,
}

impl Finding {
    /// The finding's rule (every finding's id is in [`RULES`]).
    pub fn rule(&self) -> &'static Rule {
        rule(self.rule).unwrap_or(&RULES[0])
    }

    /// Its category.
    pub fn category(&self) -> Category {
        self.rule().category
    }

    /// Whether a report of `wanted` categories lists it.
    pub fn in_any(&self, wanted: &[Category]) -> bool {
        let r = self.rule();
        wanted.contains(&r.category) || (r.also_source && wanted.contains(&Category::Source))
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = |x: &Option<String>| x.clone().unwrap_or_else(|| "-".into());
        write!(
            f,
            "{:<10} {} → {}: {} [{}]",
            self.category().as_str(),
            p(&self.old),
            p(&self.new),
            self.reason,
            self.rule
        )
    }
}

/// Every classified change from `old` to `new`, in section order, and the
/// version check on top.
pub fn compare(old: &Value, new: &Value) -> Vec<Finding> {
    let mut out = sections::all(old, new);
    out.extend(version_check(old, new, &out));
    out.extend(stale_versions(old, new, &out));
    let order = |f: &Finding| {
        RULES
            .iter()
            .position(|r| r.id == f.rule)
            .unwrap_or(usize::MAX)
    };
    out.sort_by_key(|f| (section_rank(f.rule().section), order(f)));
    out
}

fn section_rank(section: &str) -> usize {
    RULES
        .iter()
        .position(|r| r.section == section)
        .unwrap_or(usize::MAX)
}

/// The major of a semver `version`, if it is one.
fn major(doc: &Value) -> Option<u64> {
    let v = doc.get("version")?.as_str()?;
    let mut parts = v.split('.');
    let m = parts.next()?.parse().ok()?;
    (parts.count() == 2).then_some(m)
}

/// A wire-breaking change under semver needs a new major version.
fn version_check(old: &Value, new: &Value, found: &[Finding]) -> Option<Finding> {
    let (Some(a), Some(b)) = (major(old), major(new)) else {
        return None;
    };
    let wire = found
        .iter()
        .filter(|f| f.category() == Category::Wire)
        .count();
    (wire > 0 && b <= a).then(|| Finding {
        rule: "major-not-bumped",
        old: Some("/version".into()),
        new: Some("/version".into()),
        reason: format!(
            "{wire} wire-breaking change(s) but the major version stays {b} (from {})",
            old["version"].as_str().unwrap_or_default()
        ),
    })
}

/// A new major needs a version set that says so, when the contract has any.
fn stale_versions(old: &Value, new: &Value, found: &[Finding]) -> Option<Finding> {
    let sets = new
        .get("versions")
        .and_then(Value::as_array)
        .is_some_and(|v| !v.is_empty());
    let moved = found
        .iter()
        .any(|f| matches!(f.rule, "versions-changed" | "versions-added"));
    (sets && major_bumped(old, new) && !moved).then(|| Finding {
        rule: "versions-stale",
        old: Some("/versions".into()),
        new: Some("/versions".into()),
        reason: format!(
            "version {} → {}, yet no version set changed",
            old["version"].as_str().unwrap_or_default(),
            new["version"].as_str().unwrap_or_default()
        ),
    })
}

/// Whether NEW announces its breaking changes: a new major version whose version
/// sets moved with it.
pub fn announced(old: &Value, new: &Value, findings: &[Finding]) -> bool {
    major_bumped(old, new) && !findings.iter().any(|f| f.rule == "versions-stale")
}

/// Whether the major version went up (breaking changes are then announced).
pub fn major_bumped(old: &Value, new: &Value) -> bool {
    matches!((major(old), major(new)), (Some(a), Some(b)) if b > a)
}

/// One raw difference between the documents, for `diff`: every added, removed
/// or changed value, by pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Where.
    pub pointer: String,
    /// The old value (`None`: added).
    pub old: Option<Value>,
    /// The new value (`None`: removed).
    pub new: Option<Value>,
}

/// Every leaf-level difference, objects compared by key and arrays by position.
pub fn changes(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    walk("", Some(old), Some(new), &mut out);
    out
}

fn walk(at: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<Change>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                walk(&p, x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            for i in 0..x.len().max(y.len()) {
                walk(&format!("{at}/{i}"), x.get(i), y.get(i), out);
            }
        }
        (a, b) if a != b => out.push(Change {
            pointer: at.to_string(),
            old: a.cloned(),
            new: b.cloned(),
        }),
        _ => {}
    }
}

/// The section a pointer belongs to in a `diff` report.
pub fn section_of(pointer: &str) -> &'static str {
    let top = pointer.split('/').nth(1).unwrap_or_default();
    match top {
        "methods" => "methods",
        "parties" => "parties",
        "errors" | "codes" | "violations" => "errors and codes",
        "limits" | "relations" | "credit" | "claims" | "agreements" => "limits",
        "stateMachines" => "state machines",
        "extensions" => "extensions",
        "channels" => "framing",
        "version" | "versions" => "versions",
        "$defs" => "types",
        _ => "contract",
    }
}

/// The report of `contractgen breaking`: each finding of `category` (or worse),
/// grouped by section. Returns the text and how many breaking findings it has.
pub fn report(findings: &[Finding], wanted: &[Category]) -> (String, usize) {
    let mut text = String::new();
    let mut section = "";
    let mut breaking = 0;
    for f in findings.iter().filter(|f| f.in_any(wanted)) {
        if f.rule().section != section {
            section = f.rule().section;
            text.push_str(&format!("{section}\n"));
        }
        text.push_str(&format!("  {f}\n"));
        if f.category() != Category::Compatible {
            breaking += 1;
        }
    }
    (text, breaking)
}

/// The rule table of docs/breaking.md, generated so the docs cannot drift.
pub fn rules_markdown() -> String {
    let mut s = String::from("| rule | section | category | meaning |\n|---|---|---|---|\n");
    for r in RULES {
        let cat = if r.also_source {
            format!("{}, source", r.category.as_str())
        } else {
            r.category.as_str().to_string()
        };
        s.push_str(&format!(
            "| `{}` | {} | {cat} | {} |\n",
            r.id, r.section, r.summary
        ));
    }
    s
}
