//! The per-section comparisons behind [`super::compare`]: each reads one part of
//! both documents and emits findings under the rules of [`super::RULES`].

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::Finding;
use super::schema::{Node, gap};

/// All sections' findings, unsorted.
pub fn all(old: &Value, new: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let d = Docs { old, new };
    if old.get("name") != new.get("name") {
        out.push(d.changed(
            "contract-renamed",
            "/name",
            format!("{} → {}", old["name"], new["name"]),
        ));
    }
    methods(&d, &mut out);
    errors(&d, &mut out);
    codes(&d, &mut out);
    limits(&d, &mut out);
    agreements(&d, &mut out);
    machines(&d, &mut out);
    extensions(&d, &mut out);
    channels(&d, &mut out);
    parties(&d, &mut out);
    keyed(&d, "/$defs", "type-removed", "type-added", &mut out);
    versions(&d, &mut out);
    out
}

struct Docs<'a> {
    old: &'a Value,
    new: &'a Value,
}

fn esc(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

fn obj<'v>(doc: &'v Value, at: &str) -> Option<&'v Map<String, Value>> {
    doc.pointer(at).and_then(Value::as_object)
}

impl Docs<'_> {
    fn finding(
        &self,
        rule: &'static str,
        old: Option<String>,
        new: Option<String>,
        reason: String,
    ) -> Finding {
        Finding {
            rule,
            old,
            new,
            reason,
        }
    }

    fn changed(&self, rule: &'static str, at: &str, reason: String) -> Finding {
        self.finding(rule, Some(at.into()), Some(at.into()), reason)
    }

    /// Keys of the object at `at` in each document: (only old, in both, only new).
    fn keys(&self, at: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
        let k = |d: &Value| -> BTreeSet<String> {
            obj(d, at)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        let (a, b) = (k(self.old), k(self.new));
        (
            a.difference(&b).cloned().collect(),
            a.intersection(&b).cloned().collect(),
            b.difference(&a).cloned().collect(),
        )
    }
}

/// Entries only in one document, as removed and added findings.
fn keyed(d: &Docs, at: &str, removed: &'static str, added: &'static str, out: &mut Vec<Finding>) {
    let (gone, _, fresh) = d.keys(at);
    for k in gone {
        out.push(d.finding(
            removed,
            Some(format!("{at}/{}", esc(&k))),
            None,
            format!("`{k}` removed"),
        ));
    }
    for k in fresh {
        out.push(d.finding(
            added,
            None,
            Some(format!("{at}/{}", esc(&k))),
            format!("`{k}` added"),
        ));
    }
}

fn strings(v: Option<&Value>) -> BTreeSet<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        Some(Value::String(s)) => BTreeSet::from([s.clone()]),
        _ => BTreeSet::new(),
    }
}

fn list(s: &BTreeSet<String>) -> String {
    s.iter().cloned().collect::<Vec<_>>().join(", ")
}

fn methods(d: &Docs, out: &mut Vec<Finding>) {
    keyed(d, "/methods", "method-removed", "method-added", out);
    let (_, both, _) = d.keys("/methods");
    for name in both {
        let at = format!("/methods/{}", esc(&name));
        let (a, b) = (&d.old.pointer(&at), &d.new.pointer(&at));
        let (Some(a), Some(b)) = (a, b) else { continue };
        for (field, rule) in [
            ("kind", "method-kind-changed"),
            ("channel", "method-channel-changed"),
        ] {
            if a.get(field) != b.get(field) {
                out.push(d.changed(
                    rule,
                    &format!("{at}/{field}"),
                    format!("{name}: {field} {} → {}", a[field], b[field]),
                ));
            }
        }
        let (fa, fb) = (strings(a.get("from")), strings(b.get("from")));
        if fa != fb {
            out.push(d.changed(
                "method-senders-changed",
                &format!("{at}/from"),
                format!("{name}: sent by {} → {}", list(&fa), list(&fb)),
            ));
        }
        message(d, &name, &at, "params", &fa, out);
        let answerers = parties_other_than(d.new, &fb);
        for part in ["result", "error"] {
            message(d, &name, &at, part, &answerers, out);
        }
        method_errors(d, &name, &at, a, b, out);
    }
}

/// The parties of `doc` not in `senders` (who answers a request).
fn parties_other_than(doc: &Value, senders: &BTreeSet<String>) -> BTreeSet<String> {
    obj(doc, "/parties")
        .map(|m| {
            m.keys()
                .filter(|k| !senders.contains(*k))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// One message part of a method, compared in both directions.
fn message(
    d: &Docs,
    name: &str,
    at: &str,
    part: &str,
    senders: &BTreeSet<String>,
    out: &mut Vec<Finding>,
) {
    let p = format!("{at}/{part}");
    let (a, b) = (d.old.pointer(&p).is_some(), d.new.pointer(&p).is_some());
    if !a && !b {
        return;
    }
    fn node<'a>(root: &'a Value, at: &'a str) -> Node<'a> {
        Node { root, at }
    }
    // An absent schema accepts anything (for params, JSON-RPC lets them be left out).
    let none = Value::Bool(true);
    let (ra, pa) = if a { (d.old, p.as_str()) } else { (&none, "") };
    let (rb, pb) = if b { (d.new, p.as_str()) } else { (&none, "") };
    let who = if senders.is_empty() {
        "senders".to_string()
    } else {
        list(senders)
    };
    // A part only one side has is named by its place in the method.
    let place = |ptr: String| if ptr.is_empty() { p.clone() } else { ptr };
    if let Some(g) = gap(node(rb, pb), node(ra, pa)) {
        out.push(d.finding(
            "message-narrowed",
            Some(place(g.b.clone())),
            Some(place(g.a.clone())),
            format!(
                "{name} {part}: new receivers refuse what old {who} may send: {}",
                g.reason
            ),
        ));
    }
    if let Some(g) = gap(node(ra, pa), node(rb, pb)) {
        out.push(d.finding(
            "message-widened",
            Some(place(g.a.clone())),
            Some(place(g.b.clone())),
            format!(
                "{name} {part}: old receivers refuse what new {who} may send: {}",
                g.reason
            ),
        ));
    }
}

fn method_errors(d: &Docs, name: &str, at: &str, a: &Value, b: &Value, out: &mut Vec<Finding>) {
    let codes = |v: &Value| -> BTreeSet<String> {
        v.get("errors")
            .and_then(Value::as_array)
            .map(|e| e.iter().map(Value::to_string).collect())
            .unwrap_or_default()
    };
    let (ca, cb) = (codes(a), codes(b));
    let p = Some(format!("{at}/errors"));
    for c in cb.difference(&ca) {
        out.push(d.finding(
            "method-error-added",
            p.clone(),
            p.clone(),
            format!("{name} may now answer {c}"),
        ));
    }
    for c in ca.difference(&cb) {
        out.push(d.finding(
            "method-error-removed",
            p.clone(),
            p.clone(),
            format!("{name} no longer answers {c}"),
        ));
    }
}

/// The error catalog, keyed by code.
fn catalog(doc: &Value) -> Vec<(usize, String, String, Value)> {
    doc.get("errors")
        .and_then(Value::as_array)
        .map(|e| {
            e.iter()
                .enumerate()
                .map(|(i, x)| {
                    (
                        i,
                        x["code"].to_string(),
                        x["name"].as_str().unwrap_or_default().to_string(),
                        x.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn errors(d: &Docs, out: &mut Vec<Finding>) {
    let (a, b) = (catalog(d.old), catalog(d.new));
    let at = |i: usize| Some(format!("/errors/{i}"));
    for (i, code, name, x) in &a {
        match b.iter().find(|e| &e.1 == code) {
            Some((j, _, bname, y)) => {
                if bname != name {
                    out.push(d.finding(
                        "error-renamed",
                        at(*i),
                        at(*j),
                        format!("{code}: {name} → {bname}"),
                    ));
                }
                if x.get("category") != y.get("category")
                    || x.get("retryable") != y.get("retryable")
                {
                    out.push(d.finding(
                        "error-meaning-changed",
                        at(*i),
                        at(*j),
                        format!(
                            "{code} {name}: category {} retryable {} → category {} retryable {}",
                            x["category"], x["retryable"], y["category"], y["retryable"]
                        ),
                    ));
                }
            }
            None => match b.iter().find(|e| &e.2 == name && !name.is_empty()) {
                Some((j, bcode, ..)) => out.push(d.finding(
                    "error-renumbered",
                    at(*i),
                    at(*j),
                    format!("{name}: {code} → {bcode}"),
                )),
                None => out.push(d.finding(
                    "error-removed",
                    at(*i),
                    None,
                    format!("{code} {name} removed"),
                )),
            },
        }
    }
    for (j, code, name, _) in &b {
        let known = a
            .iter()
            .any(|e| &e.1 == code || (&e.2 == name && !name.is_empty()));
        if !known {
            out.push(d.finding("error-added", None, at(*j), format!("{code} {name} added")));
        }
    }
}

fn codes(d: &Docs, out: &mut Vec<Finding>) {
    let (_, both, _) = d.keys("/codes");
    keyed(d, "/codes", "code-removed", "code-added", out);
    for table in both {
        let at = format!("/codes/{}/values", esc(&table));
        let vals = |doc: &Value| -> Vec<(usize, Value, String)> {
            doc.pointer(&at)
                .and_then(Value::as_array)
                .map(|v| {
                    v.iter()
                        .enumerate()
                        .map(|(i, x)| {
                            (
                                i,
                                x["value"].clone(),
                                x["name"].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let (a, b) = (vals(d.old), vals(d.new));
        let p = |i: usize| Some(format!("{at}/{i}"));
        for (i, v, name) in &a {
            match b.iter().find(|e| &e.1 == v) {
                Some((j, _, bname)) if bname != name => {
                    out.push(d.finding(
                        "code-renamed",
                        p(*i),
                        p(*j),
                        format!("{table} {v}: {name} → {bname}"),
                    ));
                }
                Some(_) => {}
                None => match b.iter().find(|e| &e.2 == name && !name.is_empty()) {
                    Some((j, bv, _)) => out.push(d.finding(
                        "code-renumbered",
                        p(*i),
                        p(*j),
                        format!("{table} {name}: {v} → {bv}"),
                    )),
                    None => out.push(d.finding(
                        "code-removed",
                        p(*i),
                        None,
                        format!("{table} {v} {name} removed"),
                    )),
                },
            }
        }
        for (j, v, name) in &b {
            if !a
                .iter()
                .any(|e| &e.1 == v || (&e.2 == name && !name.is_empty()))
            {
                out.push(d.finding(
                    "code-added",
                    None,
                    p(*j),
                    format!("{table} {v} {name} added"),
                ));
            }
        }
    }
}

fn limits(d: &Docs, out: &mut Vec<Finding>) {
    keyed(d, "/limits", "limit-removed", "limit-added", out);
    let (_, both, _) = d.keys("/limits");
    for name in both {
        let at = format!("/limits/{}", esc(&name));
        let (Some(a), Some(b)) = (d.old.pointer(&at), d.new.pointer(&at)) else {
            continue;
        };
        let fields = ["value", "unit", "burst", "perSeconds", "kind"];
        if fields.iter().all(|f| a.get(*f) == b.get(*f)) {
            continue;
        }
        let bounded = matches!(a["kind"].as_str(), Some("size" | "count" | "rate"))
            && a["kind"] == b["kind"]
            && a["unit"] == b["unit"];
        let (va, vb) = (a["value"].as_f64(), b["value"].as_f64());
        let what = format!(
            "{name}: {} {} → {} {}",
            a["value"], a["unit"], b["value"], b["unit"]
        );
        let rule = match (bounded, va, vb) {
            (true, Some(x), Some(y)) if y < x => "limit-lowered",
            (true, Some(x), Some(y)) if y > x => "limit-raised",
            _ => "limit-changed",
        };
        let what = if rule == "limit-changed" && a["value"] == b["value"] && a["unit"] == b["unit"]
        {
            format!(
                "{name}: {} changed",
                fields
                    .iter()
                    .find(|f| a.get(**f) != b.get(**f))
                    .unwrap_or(&"kind")
            )
        } else {
            what
        };
        out.push(d.changed(rule, &at, what));
    }
}

fn machines(d: &Docs, out: &mut Vec<Finding>) {
    keyed(d, "/stateMachines", "machine-removed", "machine-added", out);
    let (_, both, _) = d.keys("/stateMachines");
    for m in both {
        let at = format!("/stateMachines/{}", esc(&m));
        let (gone, _, _) = d.keys(&format!("{at}/states"));
        for s in gone {
            out.push(d.finding(
                "state-removed",
                Some(format!("{at}/states/{}", esc(&s))),
                None,
                format!("{m}: state `{s}` removed"),
            ));
        }
        transitions(d, &m, &at, out);
        allows(d, &m, &at, out);
        reaction(d, &m, &at, out);
    }
}

/// What a message out of place gets, without the prose: `onInvalid`, `outOfPlace`'s action
/// and code, and each refusal's message, states, action and code.
fn reaction(d: &Docs, m: &str, at: &str, out: &mut Vec<Finding>) {
    let act = |a: Option<&Value>| a.map(|a| (a["action"].clone(), a["code"].clone()));
    let of = |doc: &Value| {
        let sm = doc.pointer(at);
        let refusals: Vec<_> = sm
            .and_then(|s| s["refusals"].as_array())
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["message"].clone(),
                    r["states"].clone(),
                    act(r.get("action")),
                )
            })
            .collect();
        let get = |k: &str| sm.and_then(|s| s.get(k));
        (get("onInvalid").cloned(), act(get("outOfPlace")), refusals)
    };
    if of(d.old) != of(d.new) {
        let what = format!("{m}: what a message out of place gets changed");
        out.push(d.changed("reaction-changed", at, what));
    }
}

/// A machine's transitions, each with its index and its key (from, to, trigger).
type Keyed = [(usize, String)];

fn transitions(d: &Docs, m: &str, at: &str, out: &mut Vec<Finding>) {
    let key = |t: &Value| {
        format!(
            "{} → {} on {}",
            t["from"],
            t["to"],
            t.get("trigger").unwrap_or(&t["on"])
        )
    };
    let ts = |doc: &Value| -> Vec<(usize, String)> {
        doc.pointer(&format!("{at}/transitions"))
            .and_then(Value::as_array)
            .map(|v| v.iter().enumerate().map(|(i, t)| (i, key(t))).collect())
            .unwrap_or_default()
    };
    let (a, b) = (ts(d.old), ts(d.new));
    for (i, k) in &a {
        if !b.iter().any(|x| &x.1 == k) {
            out.push(d.finding(
                "transition-removed",
                Some(format!("{at}/transitions/{i}")),
                None,
                format!("{m}: {k}"),
            ));
        }
    }
    for (j, k) in &b {
        if !a.iter().any(|x| &x.1 == k) {
            out.push(d.finding(
                "transition-added",
                None,
                Some(format!("{at}/transitions/{j}")),
                format!("{m}: {k}"),
            ));
        }
    }
    ends(d, m, at, (&a, &b), out);
}

/// A transition in both files whose `ends` differs, without the prose: who, the action and
/// its code, the exit.
fn ends(d: &Docs, m: &str, at: &str, (a, b): (&Keyed, &Keyed), out: &mut Vec<Finding>) {
    let ending = |doc: &Value, i: usize| {
        let e = doc.pointer(&format!("{at}/transitions/{i}/ends"))?;
        Some([&e["by"], &e["action"], &e["code"], &e["exit"]].map(Value::clone))
    };
    for (i, k) in a {
        let Some((j, _)) = b.iter().find(|x| &x.1 == k) else {
            continue;
        };
        if ending(d.old, *i) != ending(d.new, *j) {
            out.push(d.finding(
                "ends-changed",
                Some(format!("{at}/transitions/{i}/ends")),
                Some(format!("{at}/transitions/{j}/ends")),
                format!("{m}: {k} ends the channel otherwise"),
            ));
        }
    }
}

fn allows(d: &Docs, m: &str, at: &str, out: &mut Vec<Finding>) {
    let p = format!("{at}/allows");
    let (gone, both, fresh) = d.keys(&p);
    // A method that gains an entry was allowed everywhere, one that loses it too.
    for method in both.iter().chain(&gone).chain(&fresh) {
        let get = |doc: &Value| {
            doc.pointer(&format!("{p}/{}", esc(method)))
                .map(|v| strings(Some(v)))
        };
        let (sa, sb) = (get(d.old), get(d.new));
        let ptr = Some(format!("{p}/{}", esc(method)));
        let (narrower, wider) = match (&sa, &sb) {
            (Some(a), Some(b)) => (!a.is_subset(b) || a.len() > b.len(), !b.is_subset(a)),
            (None, Some(_)) => (true, false),
            (Some(_), None) => (false, true),
            (None, None) => (false, false),
        };
        let states = |s: &Option<BTreeSet<String>>| {
            s.as_ref().map(list).unwrap_or_else(|| "any state".into())
        };
        let what = format!("{m}: {method} allowed in {} → {}", states(&sa), states(&sb));
        if narrower {
            out.push(d.finding("allows-narrowed", ptr.clone(), ptr.clone(), what.clone()));
        }
        if wider {
            out.push(d.finding("allows-widened", ptr.clone(), ptr, what));
        }
    }
}

fn channels(d: &Docs, out: &mut Vec<Finding>) {
    keyed(d, "/channels", "channel-removed", "channel-added", out);
    let (_, both, _) = d.keys("/channels");
    for c in both {
        let at = format!("/channels/{}", esc(&c));
        for field in [
            "framing",
            "json",
            "binding",
            "transports",
            "connects",
            "upgrade",
            "redial",
        ] {
            let p = format!("{at}/{field}");
            if d.old.pointer(&p) != d.new.pointer(&p) {
                out.push(d.changed(
                    "framing-changed",
                    &p,
                    format!("channel {c}: {field} changed"),
                ));
            }
        }
    }
}

fn agreements(d: &Docs, out: &mut Vec<Finding>) {
    keyed(
        d,
        "/agreements",
        "agreement-removed",
        "agreement-added",
        out,
    );
    let (_, both, _) = d.keys("/agreements");
    for a in both {
        let at = format!("/agreements/{}", esc(&a));
        let (old, new) = (d.old.pointer(&at), d.new.pointer(&at));
        if old.map(wordless) != new.map(wordless) {
            out.push(d.changed("agreement-changed", &at, format!("agreement {a} changed")));
        }
    }
}

/// `v` without its prose (`description`, `seed`), at any depth: what a rule does.
fn wordless(v: &Value) -> Value {
    match v {
        Value::Object(m) => (m.iter())
            .filter(|(k, _)| !matches!(k.as_str(), "description" | "seed"))
            .map(|(k, x)| (k.clone(), wordless(x)))
            .collect::<Map<String, Value>>()
            .into(),
        Value::Array(xs) => Value::Array(xs.iter().map(wordless).collect()),
        other => other.clone(),
    }
}

fn extensions(d: &Docs, out: &mut Vec<Finding>) {
    keyed(
        d,
        "/extensions",
        "extension-removed",
        "extension-added",
        out,
    );
}

fn parties(d: &Docs, out: &mut Vec<Finding>) {
    keyed(d, "/parties", "party-removed", "party-added", out);
    let (_, both, _) = d.keys("/parties");
    for p in both {
        let at = format!("/parties/{}/ids", esc(&p));
        if d.old.pointer(&at) != d.new.pointer(&at) {
            out.push(d.changed("ids-changed", &at, format!("{p}: request-id rules changed")));
        }
    }
}

/// The version sets, by name: (index, values).
fn version_sets(doc: &Value) -> Vec<(usize, String, BTreeSet<String>)> {
    doc.get("versions")
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .enumerate()
                .map(|(i, e)| {
                    let vals = e["values"]
                        .as_array()
                        .map(|a| a.iter().map(Value::to_string).collect())
                        .unwrap_or_default();
                    (i, e["name"].as_str().unwrap_or_default().to_string(), vals)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn versions(d: &Docs, out: &mut Vec<Finding>) {
    let (a, b) = (version_sets(d.old), version_sets(d.new));
    let at = |i: usize| Some(format!("/versions/{i}"));
    for (i, name, va) in &a {
        let Some((j, _, vb)) = b.iter().find(|e| &e.1 == name) else {
            out.push(d.finding(
                "versions-changed",
                at(*i),
                None,
                format!("{name}: the whole set is gone"),
            ));
            continue;
        };
        let gone: BTreeSet<_> = va.difference(vb).cloned().collect();
        let fresh: BTreeSet<_> = vb.difference(va).cloned().collect();
        if !gone.is_empty() {
            out.push(d.finding(
                "versions-changed",
                at(*i),
                at(*j),
                format!("{name}: {} no longer offered", list(&gone)),
            ));
        }
        if !fresh.is_empty() {
            out.push(d.finding(
                "versions-added",
                at(*i),
                at(*j),
                format!("{name}: {} added", list(&fresh)),
            ));
        }
    }
    for (j, name, _) in &b {
        if !a.iter().any(|e| &e.1 == name) {
            out.push(d.finding(
                "versions-added",
                None,
                at(*j),
                format!("{name}: a new version set"),
            ));
        }
    }
}
