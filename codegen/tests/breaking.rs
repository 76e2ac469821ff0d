//! `contractgen breaking`'s rule table: for every rule an OLD/NEW pair that
//! triggers it and a near miss that must not, both edits of the jobs contract
//! (proxy/tests/fixtures/jobs.json, not a built-in); that every rule has its
//! pair; that docs/breaking.md holds the generated table; and the CLI's exit codes.

use contractgen::breaking::{self, Category, RULES};
use serde_json::{Value, json};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// jobs.json with what the cases need besides: a code table, a version set and a
/// spare named type.
fn base() -> Value {
    let text =
        std::fs::read_to_string(root().join("proxy/tests/fixtures/jobs.json")).expect("jobs.json");
    let mut c: Value = serde_json::from_str(&text).expect("json");
    c["codes"] = json!({"closeCodes": {"kind": "close-code", "description": "closes", "seed": "§1",
        "values": [{"value": 4001, "name": "BAD", "description": "bad"}, {"value": 4002, "name": "GONE", "description": "gone"}]}});
    c["versions"] = json!([{"name": "protocol", "values": [1, 2], "where": "/v", "description": "versions", "seed": "§1"}]);
    c["$defs"]["Spare"] = json!({"type": "string"});
    c["extensions"] =
        json!({"rukh.session": {"description": "runs", "reason": "why", "seed": "§1"}});
    c["agreements"] = json!({"owner": {"description": "the owner", "seed": "§1",
        "judge": "runner", "settled": [{"method": "job.start", "pointer": "/params/owner"}],
        "rule": "same", "mismatch": {"action": "close", "code": 4001, "description": "bad", "seed": "§1"}}});
    c
}

type Edit = fn(&mut Value);

/// (rule, trigger, near miss).
fn cases() -> Vec<(&'static str, Edit, Edit)> {
    vec![
        (
            "contract-renamed",
            |c| c["name"] = json!("jobs2"),
            |c| c["title"] = json!("another title"),
        ),
        (
            "method-removed",
            |c| remove(c, "/methods", "job.end"),
            |c| c["methods"]["job.end"]["description"] = json!("ends, politely"),
        ),
        (
            "method-added",
            |c| c["methods"]["job.pause"] = c["methods"]["job.end"].clone(),
            |c| c["methods"]["job.end"]["seed"] = json!("§9"),
        ),
        (
            "method-kind-changed",
            |c| c["methods"]["job.end"]["kind"] = json!("request"),
            |c| c["methods"]["job.end"]["kind"] = json!("notification"),
        ),
        (
            "method-channel-changed",
            |c| c["methods"]["job.end"]["channel"] = json!("side"),
            |c| c["methods"]["job.end"]["channel"] = json!("main"),
        ),
        (
            "method-senders-changed",
            |c| c["methods"]["job.end"]["from"] = json!(["client", "runner"]),
            |c| c["methods"]["job.end"]["from"] = json!(["client"]),
        ),
        // A bound added: old senders may send a longer `data`.
        (
            "message-narrowed",
            |c| c["methods"]["job.upload"]["params"]["properties"]["data"]["maxLength"] = json!(10),
            |c| {
                c["methods"]["job.upload"]["params"]["properties"]["data"]["description"] =
                    json!("bytes, as text")
            },
        ),
        // A property added to a closed object: old receivers refuse it. The near miss
        // adds it where the object was open on both sides.
        (
            "message-widened",
            |c| {
                c["methods"]["job.upload"]["params"]["properties"]["note"] =
                    json!({"type": "string"})
            },
            |c| {
                open_upload(c);
                c["methods"]["job.upload"]["params"]["properties"]["note"] =
                    json!({"type": "string"});
            },
        ),
        (
            "method-error-added",
            |c| c["methods"]["job.upload"]["errors"] = json!([-32001, -32002]),
            |c| c["methods"]["job.start"]["errors"] = json!([-32001, -32002]),
        ),
        (
            "method-error-removed",
            |c| c["methods"]["job.start"]["errors"] = json!([-32001]),
            |c| c["methods"]["job.start"]["errors"] = json!([-32002, -32001]),
        ),
        (
            "error-removed",
            |c| drop_error(c, -32002),
            |c| c["errors"][3]["description"] = json!("slower, please"),
        ),
        (
            "error-added",
            |c| push_error(c, -32010, "LATE"),
            |c| c["errors"][0]["seed"] = json!("§9"),
        ),
        (
            "error-renumbered",
            |c| c["errors"][3]["code"] = json!(-32012),
            |c| {
                c["errors"][3]["code"] = json!(-32012);
                c["errors"][3]["name"] = json!("SLOW")
            },
        ),
        (
            "error-renamed",
            |c| c["errors"][3]["name"] = json!("RATE"),
            |c| c["errors"][3]["name"] = json!("TOO_FAST"),
        ),
        (
            "error-meaning-changed",
            |c| c["errors"][3]["retryable"] = json!(false),
            |c| c["errors"][3]["retryable"] = json!(true),
        ),
        (
            "code-removed",
            |c| {
                c["codes"]["closeCodes"]["values"] =
                    json!([{"value": 4001, "name": "BAD", "description": "bad"}])
            },
            |c| c["codes"]["closeCodes"]["values"][1]["description"] = json!("went away"),
        ),
        (
            "code-added",
            |c| {
                push(
                    c,
                    "/codes/closeCodes/values",
                    json!({"value": 4003, "name": "NEW", "description": "new"}),
                )
            },
            |c| c["codes"]["closeCodes"]["description"] = json!("how it closes"),
        ),
        (
            "code-renumbered",
            |c| c["codes"]["closeCodes"]["values"][1]["value"] = json!(4009),
            |c| c["codes"]["closeCodes"]["values"][1]["value"] = json!(4002),
        ),
        (
            "code-renamed",
            |c| c["codes"]["closeCodes"]["values"][1]["name"] = json!("AWAY"),
            |c| c["codes"]["closeCodes"]["values"][1]["name"] = json!("GONE"),
        ),
        (
            "limit-lowered",
            |c| c["limits"]["lineMax"]["value"] = json!(32),
            |c| c["limits"]["lineMax"]["value"] = json!(64),
        ),
        (
            "limit-raised",
            |c| c["limits"]["lineMax"]["value"] = json!(128),
            |c| c["limits"]["lineMax"]["description"] = json!("the longest line"),
        ),
        (
            "limit-changed",
            |c| c["limits"]["greetSeconds"]["value"] = json!(10),
            |c| c["limits"]["greetSeconds"]["onExpiry"] = json!("dropped"),
        ),
        (
            "limit-removed",
            |c| remove(c, "/limits", "startRate"),
            |c| c["limits"]["startRate"]["seed"] = json!("§9"),
        ),
        (
            "limit-added",
            |c| c["limits"]["idleSeconds"] = c["limits"]["greetSeconds"].clone(),
            |c| c["limits"]["greetSeconds"]["seed"] = json!("§9"),
        ),
        (
            "machine-removed",
            |c| remove(c, "/stateMachines", "job"),
            |c| c["stateMachines"]["job"]["description"] = json!("a job"),
        ),
        (
            "machine-added",
            |c| c["stateMachines"]["job2"] = c["stateMachines"]["job"].clone(),
            |c| c["stateMachines"]["job"]["seed"] = json!("§9"),
        ),
        (
            "state-removed",
            |c| remove(c, "/stateMachines/session/states", "closed"),
            |c| c["stateMachines"]["session"]["states"]["closed"] = json!("gone"),
        ),
        (
            "transition-removed",
            |c| remove_item(c, "/stateMachines/session/transitions", 2),
            |c| c["stateMachines"]["session"]["transitions"][2]["on"] = json!("goodbye"),
        ),
        (
            "transition-added",
            |c| {
                push(
                    c,
                    "/stateMachines/job/transitions",
                    json!({"from": "running", "to": "ended", "on": "job.status", "trigger": {"event": "message", "method": "job.status"}}),
                )
            },
            |c| c["stateMachines"]["job"]["transitions"][0]["on"] = json!("start"),
        ),
        (
            "allows-narrowed",
            |c| c["stateMachines"]["job"]["allows"]["job.status"] = json!([]),
            |c| c["stateMachines"]["job"]["allows"]["job.status"] = json!(["running"]),
        ),
        (
            "allows-widened",
            |c| c["stateMachines"]["session"]["allows"]["job.start"] = json!(["ready", "greeting"]),
            |c| c["stateMachines"]["session"]["allows"]["job.start"] = json!(["ready"]),
        ),
        (
            "agreement-removed",
            |c| remove(c, "/agreements", "owner"),
            |c| c["agreements"]["owner"]["description"] = json!("said otherwise"),
        ),
        (
            "agreement-added",
            |c| c["agreements"]["twin"] = c["agreements"]["owner"].clone(),
            |c| c["agreements"]["owner"]["seed"] = json!("§2"),
        ),
        (
            "agreement-changed",
            |c| c["agreements"]["owner"]["mismatch"]["code"] = json!(4002),
            |c| c["agreements"]["owner"]["mismatch"]["description"] = json!("said otherwise"),
        ),
        (
            "ends-changed",
            |c| {
                c["stateMachines"]["job"]["transitions"][0]["ends"] = json!({"by": "server",
                    "action": "close", "code": 4002, "description": "d", "seed": "§1"})
            },
            |c| {
                c["stateMachines"]["job"]["transitions"][0]["description"] = json!("said otherwise")
            },
        ),
        (
            "reaction-changed",
            |c| c["stateMachines"]["job"]["refusals"][0]["action"]["code"] = json!(-32001),
            |c| {
                c["stateMachines"]["job"]["refusals"][0]["action"]["description"] =
                    json!("said otherwise")
            },
        ),
        (
            "channel-removed",
            |c| {
                let ch = c["channels"]["main"].clone();
                c["channels"] = json!({"other": ch})
            },
            |c| c["channels"]["main"]["description"] = json!("the line"),
        ),
        (
            "channel-added",
            |c| c["channels"]["side"] = c["channels"]["main"].clone(),
            |c| c["channels"]["main"]["seed"] = json!("§9"),
        ),
        (
            "framing-changed",
            |c| c["channels"]["main"]["framing"]["lineMeasure"] = json!("utf16"),
            |c| c["channels"]["main"]["framing"]["lineMeasure"] = json!("bytes"),
        ),
        (
            "extension-removed",
            |c| remove(c, "/extensions", "rukh.session"),
            |c| c["extensions"]["rukh.session"]["description"] = json!("runs more"),
        ),
        (
            "extension-added",
            |c| {
                c["extensions"]["xsession.admission"] =
                    json!({"description": "admits", "reason": "why", "seed": "§2"})
            },
            |c| c["extensions"]["rukh.session"]["reason"] = json!("why not"),
        ),
        (
            "party-removed",
            |c| remove(c, "/parties", "runner"),
            |c| c["parties"]["runner"]["description"] = json!("runs"),
        ),
        (
            "party-added",
            |c| c["parties"]["watcher"] = json!({"description": "watches"}),
            |c| c["parties"]["client"]["description"] = json!("starts"),
        ),
        (
            "ids-changed",
            |c| c["parties"]["client"]["ids"]["gapless"] = json!(false),
            |c| c["parties"]["client"]["ids"]["gapless"] = json!(true),
        ),
        (
            "type-removed",
            |c| remove(c, "/$defs", "Spare"),
            |c| c["$defs"]["Spare"]["description"] = json!("spare"),
        ),
        (
            "type-added",
            |c| c["$defs"]["Other"] = json!({"type": "integer"}),
            |c| c["$defs"]["Spare"]["title"] = json!("spare"),
        ),
        (
            "versions-changed",
            |c| c["versions"][0]["values"] = json!([2]),
            |c| c["versions"][0]["values"] = json!([2, 1]),
        ),
        (
            "versions-added",
            |c| c["versions"][0]["values"] = json!([1, 2, 3]),
            |c| c["versions"][0]["description"] = json!("the versions"),
        ),
        // A new major with the version sets as they were; the near miss moves one.
        (
            "versions-stale",
            |c| c["version"] = json!("1.0.0"),
            |c| {
                c["version"] = json!("1.0.0");
                c["versions"][0]["values"] = json!([1, 2, 3]);
            },
        ),
        // Any wire change without a new major; the near miss bumps it.
        (
            "major-not-bumped",
            |c| c["limits"]["lineMax"]["value"] = json!(32),
            |c| {
                c["limits"]["lineMax"]["value"] = json!(32);
                c["version"] = json!("1.0.0")
            },
        ),
    ]
}

fn remove(c: &mut Value, at: &str, key: &str) {
    c.pointer_mut(at)
        .and_then(Value::as_object_mut)
        .expect(at)
        .remove(key);
}

fn remove_item(c: &mut Value, at: &str, i: usize) {
    c.pointer_mut(at)
        .and_then(Value::as_array_mut)
        .expect(at)
        .remove(i);
}

fn push(c: &mut Value, at: &str, v: Value) {
    c.pointer_mut(at)
        .and_then(Value::as_array_mut)
        .expect(at)
        .push(v);
}

fn drop_error(c: &mut Value, code: i64) {
    c["errors"]
        .as_array_mut()
        .expect("errors")
        .retain(|e| e["code"] != code);
}

fn push_error(c: &mut Value, code: i64, name: &str) {
    push(
        c,
        "/errors",
        json!({"code": code, "name": name, "category": "protocol", "retryable": false, "description": "late", "seed": "§9"}),
    );
}

fn open_upload(c: &mut Value) {
    remove(c, "/methods/job.upload/params", "additionalProperties");
}

/// The near miss of `message-widened` starts from an open object on both sides.
fn old_for(rule: &str) -> Value {
    let mut c = base();
    if rule == "message-widened" {
        open_upload(&mut c);
    }
    c
}

fn rules_of(old: &Value, new: &Value) -> Vec<&'static str> {
    breaking::compare(old, new).iter().map(|f| f.rule).collect()
}

#[test]
fn every_rule_fires_on_its_trigger_and_not_on_its_near_miss() {
    let mut failures = Vec::new();
    for (rule, trigger, near) in cases() {
        let old = base();
        let mut new = old.clone();
        trigger(&mut new);
        if !rules_of(&old, &new).contains(&rule) {
            failures.push(format!(
                "{rule}: trigger not caught ({:?})",
                breaking::compare(&old, &new)
            ));
        }
        let old = old_for(rule);
        let mut new = old.clone();
        near(&mut new);
        if rules_of(&old, &new).contains(&rule) {
            failures.push(format!(
                "{rule}: near miss reported ({:?})",
                breaking::compare(&old, &new)
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_rule_has_its_pair() {
    let covered: Vec<&str> = cases().iter().map(|c| c.0).collect();
    let missing: Vec<&str> = RULES
        .iter()
        .map(|r| r.id)
        .filter(|id| !covered.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a trigger/near-miss pair: {missing:?}"
    );
}

#[test]
fn an_unchanged_contract_has_no_finding() {
    for name in contract::builtin_names() {
        let c = contractgen::read_document(name).expect("builtin");
        assert_eq!(breaking::compare(&c, &c), vec![], "{name}");
    }
}

/// Each finding names where the change is in both files when it is in both.
#[test]
fn findings_point_into_both_files() {
    let old = base();
    let mut new = old.clone();
    new["methods"]["job.upload"]["params"]["required"] = json!(["job", "data", "size"]);
    new["methods"]["job.upload"]["params"]["properties"]["size"] = json!({"type": "integer"});
    let f = breaking::compare(&old, &new);
    let narrowed = f
        .iter()
        .find(|f| f.rule == "message-narrowed")
        .expect("narrowed");
    assert_eq!(narrowed.category(), Category::Wire);
    assert_eq!(
        narrowed.old.as_deref(),
        Some("/methods/job.upload/params"),
        "{narrowed}"
    );
    assert!(narrowed.reason.contains("`size` is required"), "{narrowed}");
    for p in [&narrowed.old, &narrowed.new].into_iter().flatten() {
        assert!(old.pointer(p).is_some() || new.pointer(p).is_some(), "{p}");
    }
}

#[test]
fn docs_breaking_md_holds_the_rule_table() {
    let doc = std::fs::read_to_string(root().join("docs/breaking.md")).expect("docs/breaking.md");
    assert!(
        doc.contains(&breaking::rules_markdown()),
        "docs/breaking.md's rule table is stale; paste in:\n{}",
        breaking::rules_markdown()
    );
}

/// The CLI: exit 1 on a breaking change, 0 when none or when the major went up.
#[test]
fn the_cli_exits_by_what_it_finds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_string_pretty(v).expect("json")).expect("write");
        p.display().to_string()
    };
    let old = base();
    let mut lowered = old.clone();
    lowered["limits"]["lineMax"]["value"] = json!(32);
    let mut stale = lowered.clone();
    stale["version"] = json!("1.0.0");
    let mut bumped = stale.clone();
    bumped["versions"][0]["values"] = json!([2, 3]);
    let mut described = old.clone();
    described["description"] = json!("said otherwise");
    let (o, l, b, d) = (
        write("o.json", &old),
        write("l.json", &lowered),
        write("b.json", &bumped),
        write("d.json", &described),
    );
    let st = write("s.json", &stale);
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_contractgen"))
            .args(args)
            .output()
            .expect("runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, text) = run(&["breaking", &o, &l]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("[limit-lowered]") && text.contains("[major-not-bumped]"),
        "{text}"
    );
    assert_eq!(run(&["breaking", &o, &b]).0, Some(0), "announced by 1.0.0");
    let (code, text) = run(&["breaking", &o, &st]);
    assert_eq!(
        code,
        Some(1),
        "1.0.0 with the version sets unchanged: {text}"
    );
    assert!(text.contains("[versions-stale]"), "{text}");
    assert_eq!(run(&["breaking", &o, &d]).0, Some(0), "no breaking change");
    assert_eq!(
        run(&["breaking", "--category", "source", &o, &l]).0,
        Some(0),
        "nothing source-breaking"
    );
    let mut no_limit = old.clone();
    no_limit["limits"]
        .as_object_mut()
        .expect("limits")
        .remove("startRate");
    let nl = write("nl.json", &no_limit);
    let (code, text) = run(&["breaking", "--category", "source", &o, &nl]);
    assert_eq!(
        code,
        Some(1),
        "a removed limit takes its generated constant along: {text}"
    );
    assert!(text.contains("[limit-removed]"), "{text}");
    let (code, text) = run(&["diff", &o, &d]);
    assert_eq!(code, Some(0));
    assert!(text.contains("~ /description"), "{text}");
    assert_eq!(run(&["breaking", &o, "no/such/file.json"]).0, Some(2));
}

/// build.rs: `breaking_against` refuses an unannounced breaking edit, from a
/// directory of earlier files or from a git revision; `accept_breaking` names
/// each finding it lets through.
#[test]
fn config_refuses_an_unannounced_breaking_edit() {
    let old_dir = tempfile::tempdir().expect("tempdir");
    let repo = tempfile::tempdir().expect("tempdir");
    let old = base();
    let mut new = old.clone();
    new["limits"]["lineMax"]["value"] = json!(32);
    let text = |v: &Value| serde_json::to_string_pretty(v).expect("json");
    std::fs::write(old_dir.path().join("jobs.json"), text(&old)).expect("write");
    let file = repo.path().join("jobs.json");
    std::fs::write(&file, text(&old)).expect("write");
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(repo.path())
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .expect("git runs")
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "jobs.json"]);
    git(&["commit", "-q", "-m", "old"]);
    std::fs::write(&file, text(&new)).expect("write");
    for against in [old_dir.path().display().to_string(), "git:HEAD".to_string()] {
        let mut cfg = contractgen::Config::new();
        cfg.lang(contractgen::Lang::Docs)
            .contract(&file)
            .breaking_against(&against);
        let e = cfg.generate().expect_err("refused").to_string();
        assert!(
            e.contains("limit-lowered@/limits/lineMax"),
            "{against}: {e}"
        );
        assert!(e.contains("major-not-bumped@/version"), "{against}: {e}");
        cfg.accept_breaking("limit-lowered@/limits/lineMax");
        let e = cfg.generate().expect_err("one finding left").to_string();
        assert!(!e.contains("limit-lowered"), "{e}");
        cfg.accept_breaking("major-not-bumped@/version");
        assert!(cfg.generate().is_ok(), "{against}: both accepted");
    }
    let mut bumped = new.clone();
    bumped["version"] = json!("1.0.0");
    bumped["versions"][0]["values"] = json!([3]);
    std::fs::write(&file, text(&bumped)).expect("write");
    let mut cfg = contractgen::Config::new();
    cfg.lang(contractgen::Lang::Docs)
        .contract(&file)
        .breaking_against("git:HEAD");
    assert!(cfg.generate().is_ok(), "announced by the major version");
}

/// Where the replayed history ends: a fixed commit, so the snapshot changes only
/// when this line moves (move it to review the breaking edits made since).
const HISTORY_END: &str = "674f47ac80d5";

fn git(args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root())
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {} (this test needs the repository's history: a clone without --depth)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The built-in contracts' git history through `breaking`, commit by commit: the
/// breaking edits the project has already made, for review.
#[test]
fn the_history_of_the_built_in_contracts() {
    let mut report = String::new();
    for name in ["kernel", "xsession", "rukh", "toolchannel"] {
        let path = format!("schema/contracts/{name}.json");
        let log = git(&[
            "log",
            "--reverse",
            "--format=%h %s",
            HISTORY_END,
            "--",
            &path,
        ]);
        let commits: Vec<(&str, &str)> = log.lines().filter_map(|l| l.split_once(' ')).collect();
        report.push_str(&format!("## {name}: {} commits\n", commits.len()));
        let doc = |rev: &str| -> Value {
            serde_json::from_str(&git(&["show", &format!("{rev}:{path}")])).expect("json")
        };
        for pair in commits.windows(2) {
            let (a, b) = (doc(pair[0].0), doc(pair[1].0));
            let findings: Vec<_> = breaking::compare(&a, &b)
                .into_iter()
                .filter(|f| f.category() != Category::Compatible)
                .collect();
            let subject: String = pair[1].1.chars().take(70).collect();
            report.push_str(&format!(
                "{} {subject}: {} breaking\n",
                pair[1].0,
                findings.len()
            ));
            for f in findings {
                let at = f
                    .new
                    .as_ref()
                    .or(f.old.as_ref())
                    .cloned()
                    .unwrap_or_default();
                report.push_str(&format!("  {}@{at}\n", f.rule));
            }
        }
    }
    insta::assert_snapshot!(report);
}

// ---------------------------------------------------------------------------
// By example: instances generated from each side's schema, validated against the
// other. Where the rules find no narrowing, every instance of OLD must pass NEW;
// where they find no widening, every instance of NEW must pass OLD. An instance
// that fails where the rules said "fine" is a bug in the rules.

/// A method part's schema as a standalone document (its `$defs` alongside).
fn standalone(doc: &Value, at: &str) -> Option<Value> {
    let part = doc.pointer(at)?;
    let mut root = serde_json::Map::new();
    root.insert(
        "$defs".into(),
        doc.get("$defs").cloned().unwrap_or(json!({})),
    );
    match part {
        Value::Object(m) => root.extend(
            m.iter()
                .filter(|(k, _)| *k != "$defs")
                .map(|(k, v)| (k.clone(), v.clone())),
        ),
        Value::Bool(false) => {
            root.insert("not".into(), json!({}));
        }
        _ => {}
    }
    Some(Value::Object(root))
}

/// Instances of the schema at `at` in `doc`: boundary values, each enum member, each
/// optional property present and absent. Not all need be valid: callers keep those
/// their own schema accepts.
fn instances(doc: &Value, at: &str, depth: usize) -> Vec<Value> {
    let Some(s) = doc.pointer(at) else {
        return vec![];
    };
    if depth > 6 {
        return vec![json!(null)];
    }
    if let Some(r) = s
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
    {
        return instances(doc, r, depth + 1);
    }
    if let Some(c) = s.get("const") {
        return vec![c.clone()];
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return e.clone();
    }
    for kw in ["anyOf", "oneOf", "allOf"] {
        if let Some(b) = s.get(kw).and_then(Value::as_array) {
            return (0..b.len())
                .flat_map(|i| instances(doc, &format!("{at}/{kw}/{i}"), depth + 1))
                .collect();
        }
    }
    let types: Vec<String> = match s.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ if s.get("properties").is_some() => vec!["object".into()],
        _ => vec![
            "null".into(),
            "integer".into(),
            "string".into(),
            "object".into(),
            "array".into(),
        ],
    };
    types
        .iter()
        .flat_map(|t| of_type(doc, at, s, t, depth))
        .collect()
}

fn of_type(doc: &Value, at: &str, s: &Value, t: &str, depth: usize) -> Vec<Value> {
    let n = |k: &str| s.get(k).and_then(Value::as_f64);
    match t {
        "null" => vec![json!(null)],
        "boolean" => vec![json!(true), json!(false)],
        "integer" | "number" => {
            let mut v: Vec<Value> = [
                n("minimum"),
                n("maximum"),
                Some(0.0),
                Some(1.0),
                Some(-1.0),
                Some(1e6),
            ]
            .into_iter()
            .flatten()
            .map(|x| json!(x as i64))
            .collect();
            if t == "number" {
                v.push(json!(0.5));
            }
            v
        }
        "string" => {
            let (lo, hi) = (
                n("minLength").unwrap_or(0.0) as usize,
                n("maxLength").map(|x| x as usize),
            );
            let mut v = vec![json!("x".repeat(lo)), json!("x".repeat(lo.max(3)))];
            v.extend(hi.map(|h| json!("x".repeat(h))));
            v.push(json!("x".repeat(hi.unwrap_or(64) + 1)));
            v
        }
        "array" => {
            let items = instances(doc, &format!("{at}/items"), depth + 1);
            let mut v = vec![json!([])];
            if let Some(first) = items.first() {
                v.push(json!([first]));
            }
            v
        }
        "object" => objects(doc, at, s, depth),
        _ => vec![],
    }
}

fn objects(doc: &Value, at: &str, s: &Value, depth: usize) -> Vec<Value> {
    let empty = serde_json::Map::new();
    let props = s
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let first = |name: &str| {
        instances(
            doc,
            &format!(
                "{at}/properties/{}",
                name.replace('~', "~0").replace('/', "~1")
            ),
            depth + 1,
        )
        .into_iter()
        .next()
        .unwrap_or(json!(null))
    };
    let mut base = serde_json::Map::new();
    for r in &required {
        base.insert(r.to_string(), first(r));
    }
    let mut out = vec![Value::Object(base.clone())];
    let mut all = base.clone();
    for name in props.keys() {
        let mut one = base.clone();
        one.insert(name.clone(), first(name));
        all.insert(name.clone(), first(name));
        out.push(Value::Object(one));
        // Each value of each property, in the required base.
        for v in instances(
            doc,
            &format!(
                "{at}/properties/{}",
                name.replace('~', "~0").replace('/', "~1")
            ),
            depth + 1,
        )
        .into_iter()
        .take(6)
        {
            let mut o = base.clone();
            o.insert(name.clone(), v);
            out.push(Value::Object(o));
        }
    }
    out.push(Value::Object(all.clone()));
    let mut extra = all;
    extra.insert("zz_extra".into(), json!(1));
    out.push(Value::Object(extra));
    out
}

fn validator(doc: &Value, at: &str) -> Option<jsonschema::Validator> {
    jsonschema::draft202012::new(&standalone(doc, at)?).ok()
}

/// Instances of OLD's `at` that OLD accepts and NEW refuses (and the reverse).
fn disagreements(from: &Value, to: &Value, at: &str) -> Vec<Value> {
    let (Some(own), Some(other)) = (validator(from, at), validator(to, at)) else {
        return vec![];
    };
    instances(from, at, 0)
        .into_iter()
        .filter(|i| own.is_valid(i) && !other.is_valid(i))
        .collect()
}

/// Every method part of both documents where the rules said "compatible" in a
/// direction and an instance says otherwise.
fn unsound(old: &Value, new: &Value) -> Vec<String> {
    let findings = breaking::compare(old, new);
    let said = |rule: &str, at: &str| {
        findings
            .iter()
            .any(|f| f.rule == rule && f.reason.starts_with(at))
    };
    let mut out = Vec::new();
    let methods = old["methods"].as_object().cloned().unwrap_or_default();
    for (name, _) in methods
        .iter()
        .filter(|(n, _)| new["methods"].get(n.as_str()).is_some())
    {
        for part in ["params", "result"] {
            let at = format!(
                "/methods/{}/{part}",
                name.replace('~', "~0").replace('/', "~1")
            );
            if old.pointer(&at).is_none() || new.pointer(&at).is_none() {
                continue;
            }
            let label = format!("{name} {part}");
            if !said("message-narrowed", &label) {
                for i in disagreements(old, new, &at).into_iter().take(1) {
                    out.push(format!("{label}: not narrowed, yet NEW refuses old {i}"));
                }
            }
            if !said("message-widened", &label) {
                for i in disagreements(new, old, &at).into_iter().take(1) {
                    out.push(format!("{label}: not widened, yet OLD refuses new {i}"));
                }
            }
        }
    }
    out
}

#[test]
fn generated_instances_agree_with_the_rules_on_every_case() {
    let mut bad = Vec::new();
    for (rule, trigger, near) in cases() {
        for (kind, edit) in [("trigger", trigger), ("near miss", near)] {
            let old = old_for(rule);
            let mut new = old.clone();
            edit(&mut new);
            bad.extend(
                unsound(&old, &new)
                    .into_iter()
                    .map(|u| format!("{rule} {kind}: {u}")),
            );
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn generated_instances_agree_with_the_rules_on_the_project_history() {
    let mut bad = Vec::new();
    for name in ["kernel", "xsession", "rukh", "toolchannel"] {
        let path = format!("schema/contracts/{name}.json");
        let log = git(&["log", "--reverse", "--format=%h", HISTORY_END, "--", &path]);
        let docs: Vec<Value> = log
            .lines()
            .map(|rev| {
                serde_json::from_str(&git(&["show", &format!("{rev}:{path}")])).expect("json")
            })
            .collect();
        for pair in docs.windows(2) {
            bad.extend(
                unsound(&pair[0], &pair[1])
                    .into_iter()
                    .map(|u| format!("{name}: {u}")),
            );
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The last commit before the contract format gained typed behaviour (994d6aa): the first
/// format, which today's tools must still load (issue 15, item 10).
const FIRST_FORMAT: &str = "994d6aa~1";

/// Each built-in contract as the first format wrote it checks clean, compiles into a wire
/// layer, and generates in every target with today's tools: no migration step is needed,
/// since every addition of the second format is optional.
#[test]
fn the_first_format_still_loads_checks_and_generates() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["kernel", "xsession", "rukh", "toolchannel"] {
        let text = git(&[
            "show",
            &format!("{FIRST_FORMAT}:schema/contracts/{name}.json"),
        ]);
        let doc: Value = serde_json::from_str(&text).expect("json");
        assert!(
            doc.pointer("/stateMachines").is_some(),
            "{name}: a real contract"
        );
        let (c, problems) = contract::check_document(name, &doc);
        assert!(problems.is_empty(), "{name}: {problems:#?}");
        let c = std::sync::Arc::new(c.expect("model"));
        contract::wire::Wire::new(c).expect("wire");
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, &text).expect("write");
        for lang in [
            contractgen::Lang::Rust,
            contractgen::Lang::Docs,
            contractgen::Lang::Python,
            contractgen::Lang::Csharp,
        ] {
            let mut cfg = contractgen::Config::new();
            cfg.contracts([&path]).lang(lang);
            let files = cfg
                .generate()
                .unwrap_or_else(|e| panic!("{name} {lang:?}: {e}"));
            assert!(!files.is_empty(), "{name} {lang:?}");
        }
    }
}
