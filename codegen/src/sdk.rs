//! Template-rendered targets (Python, C#, Markdown docs).
//!
//! Each target is a set of handlebars templates in `codegen/templates/<lang>/`,
//! embedded in the binary and overridable with `--templates DIR`. A template
//! whose file name contains `{{module}}` is rendered once per contract with
//! that contract's [`context`]; any other template is rendered once for the
//! whole run with `{ "contracts": [...] }`. Language-specific spelling (type
//! names, literals) comes from helpers each target registers, so templates
//! only lay out files.

use std::path::Path;

use handlebars::Handlebars;
use serde_json::{Value, json};

use crate::config::GeneratedFile;
use crate::ir::{GenError, Ir};
use crate::package::Package;
use crate::types::TypeModel;

/// One embedded template: its path under `codegen/templates/<lang>/` and its text.
pub type Template = (&'static str, &'static str);

/// The context a per-contract template sees.
pub fn context(ir: &Ir) -> Result<Value, GenError> {
    let c = &ir.contract;
    let ser = |what: &str, v: Result<Value, serde_json::Error>| {
        v.map_err(|e| GenError::Template {
            template: what.into(),
            reason: e.to_string(),
        })
    };
    let types = TypeModel::build(&ir.schemas);
    let channels: Vec<Value> = ir
        .channels
        .iter()
        .map(|ch| {
            let model = &c.channels[ch.key.as_str()];
            let framing = serde_json::to_value(&model.framing).unwrap_or(Value::Null);
            let cap = |name: Option<&str>| -> Value {
                name.and_then(|n| ir.limits.iter().find(|l| l.key == n))
                    .map(|l| json!({"limit": l.key, "ident": l.ident, "bytes": l.base as u64}))
                    .unwrap_or(Value::Null)
            };
            let cap_name = framing
                .get("maxPayload")
                .or_else(|| framing.get("maxLine"))
                .or_else(|| framing.get("maxFrame"))
                .or_else(|| framing.get("maxMessage"))
                .and_then(Value::as_str);
            // The framing's deadline for one frame, from its first byte, in seconds.
            let deadline = framing
                .get("frameDeadline")
                .and_then(Value::as_str)
                .and_then(|n| ir.limits.iter().find(|l| l.key == n))
                .map(|l| json!({"limit": l.key, "ident": l.ident, "seconds": l.base}))
                .unwrap_or(Value::Null);
            let mut v = json!({
                "key": ch.key, "ident": ch.ident, "message": ch.message,
                "description": model.description, "transports": model.transports,
                "connects": model.connects, "framing": framing, "cap": cap(cap_name),
                "frameDeadline": deadline,
                "json": model.json, "binding": model.binding, "seed": model.seed,
            });
            wire_rules(ir, &ch.key, model, &mut v);
            v
        })
        .collect();
    Ok(json!({
        "name": c.name,
        "module": ir.module,
        "title": c.title,
        "version": c.version,
        "source": c.source,
        "description": c.description,
        "versions": ser("versions", serde_json::to_value(&c.versions))?,
        "parties": ir.parties.iter().map(|(i, n)| json!({"ident": i, "name": n, "description": c.parties[n.as_str()].description})).collect::<Vec<_>>(),
        "channels": channels,
        "capabilities": ser("capabilities", serde_json::to_value(&c.capabilities))?,
        "methods": ser("methods", serde_json::to_value(&ir.methods))?,
        "methodExamples": ser("examples", serde_json::to_value(c.methods.iter().map(|(k, m)| (k.clone(), &m.examples)).collect::<indexmap::IndexMap<_, _>>()))?,
        "violations": ser("violations", serde_json::to_value(&c.violations))?,
        "errors": ser("errors", serde_json::to_value(&ir.errors))?,
        "tables": ser("tables", serde_json::to_value(&ir.tables))?,
        "limits": ser("limits", serde_json::to_value(&ir.limits))?,
        "limitTexts": ir.limits.iter().map(crate::rust::limit_text).collect::<Vec<_>>(),
        "engineLimits": crate::docs::engine_limits(c),
        "idRuleTexts": crate::docs::id_rules(c),
        "relations": c.relations.iter().map(|r| json!({
            "left": contract::check::show(&r.left), "op": r.op, "right": contract::check::show(&r.right),
            "description": r.description, "seed": r.seed,
        })).collect::<Vec<_>>(),
        "machines": ser("machines", serde_json::to_value(&ir.machines))?,
        "idRules": ser("idRules", serde_json::to_value(&ir.id_rules))?,
        "credit": ser("credit", serde_json::to_value(&c.credit))?,
        "claims": ser("claims", serde_json::to_value(&c.claims))?,
        "cues": ser("cues", serde_json::to_value(&c.cues))?,
        "extensions": ser("extensions", serde_json::to_value(&c.extensions))?,
        "trace": ser("trace", serde_json::to_value(&c.trace))?,
        "files": ser("files", serde_json::to_value(&c.files))?,
        "notes": ser("notes", serde_json::to_value(&c.notes))?,
        "types": ser("types", serde_json::to_value(&types.types))?,
        "contractJson": serde_json::to_string(c).unwrap_or_default(),
    }))
}

/// The rules an SDK enforces on a channel's messages beyond their types, language-neutral
/// (each target spells them), added to the channel's context:
///
/// - `methodCaps`: the channel's methods with a frame cap of their own (`maxPayload`), in
///   contract order, as `{method, limit, ident, ignore}` (`ignore`: `overMaxPayload: ignore`,
///   an over-cap request or notification is dropped and counted). A cap naming no limit is left out.
/// - `methodAt` / `replyAt`: where a frame names its method and, for a reply, the id of the
///   request it answers, as unescaped member names (JSON-RPC: `method`, `id`; an envelope:
///   its pointers); null where the binding has none.
/// - `wireRules`: null when a plain decode is all the channel needs; else
///   `{strict, objectOnly, maxDepth, maxItems, noNull}` with each cap `{limit, ident}` or
///   null. It is set when the channel's `json` section is strict, caps depth or items or
///   says noNull, or when a method of the channel has a cap of its own.
fn wire_rules(ir: &Ir, key: &str, model: &contract::model::Channel, out: &mut Value) {
    use contract::model::{ActionKind, Binding};
    let limit = |name: &str| -> Option<Value> {
        ir.limits
            .iter()
            .find(|l| l.key == name)
            .map(|l| json!({"limit": l.key, "ident": l.ident}))
    };
    let caps: Vec<Value> = ir
        .contract
        .methods
        .iter()
        .filter(|(_, m)| m.channel == key)
        .filter_map(|(name, m)| {
            let cap = m.max_payload.as_deref()?;
            let l = limit(cap)?;
            Some(json!({
                "method": name, "limit": cap, "ident": l["ident"],
                "ignore": m.over_max_payload == Some(ActionKind::Ignore),
            }))
        })
        .collect();
    let segments = |p: &str| -> Value {
        p.split('/')
            .skip(1)
            .map(|k| Value::String(k.replace("~1", "/").replace("~0", "~")))
            .collect()
    };
    let (method_at, reply_at) = match &model.binding {
        Some(Binding::Jsonrpc { .. }) => (json!(["method"]), json!(["id"])),
        Some(Binding::Envelope {
            method,
            correlation,
            ..
        }) => (
            segments(method),
            correlation.as_deref().map(segments).unwrap_or(Value::Null),
        ),
        _ => (Value::Null, Value::Null),
    };
    let (strict, object_only, depth, items, no_null) = match &model.json {
        Some(j) => (
            j.strict,
            j.object_only,
            j.max_depth.as_deref().and_then(limit),
            j.max_items.as_deref().and_then(limit),
            j.no_null,
        ),
        None => (false, false, None, None, false),
    };
    let any = strict || no_null || depth.is_some() || items.is_some() || !caps.is_empty();
    out["wireRules"] = if any {
        json!({"strict": strict, "objectOnly": object_only, "maxDepth": depth, "maxItems": items, "noNull": no_null})
    } else {
        Value::Null
    };
    out["methodCaps"] = Value::Array(caps);
    out["methodAt"] = method_at;
    out["replyAt"] = reply_at;
}

fn engine(lang: &str, register: fn(&mut Handlebars<'static>)) -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    // Generated code is not HTML.
    hb.register_escape_fn(handlebars::no_escape);
    crate::helpers::register(&mut hb);
    register(&mut hb);
    hb.set_dev_mode(false);
    let _ = lang;
    hb
}

/// Load templates: the embedded set, or every `*.hbs` file of `dir` when given.
fn load(
    lang: &str,
    embedded: &[Template],
    dir: Option<&Path>,
) -> Result<Vec<(String, String)>, GenError> {
    let Some(dir) = dir else {
        return Ok(embedded
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect());
    };
    let root = dir.join(lang);
    let root = if root.is_dir() {
        root
    } else {
        dir.to_path_buf()
    };
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|source| GenError::Io {
            path: d.display().to_string(),
            source,
        })?;
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "hbs") {
                let text = std::fs::read_to_string(&p).map_err(|source| GenError::Io {
                    path: p.display().to_string(),
                    source,
                })?;
                let rel = p.strip_prefix(&root).unwrap_or(&p).with_extension("");
                out.push((rel.to_string_lossy().replace('\\', "/"), text));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The registry key of a file template, apart from the partials' names.
fn file_key(name: &str) -> String {
    format!("file:{name}")
}

/// A target's own view of a contract, which its per-contract templates see as `target`.
pub type TargetView = fn(&Ir) -> Result<Value, GenError>;

/// Render a template target for `irs`, each with its contract's path as headers show it
/// (the context's `input`): `register` adds the target's helpers, `target` (when given)
/// its own view to each contract's context.
pub fn generate(
    lang: &str,
    irs: &[(&Ir, &str)],
    embedded: &[Template],
    (register, target): (fn(&mut Handlebars<'static>), Option<TargetView>),
    (dir, package): (Option<&Path>, &Package),
) -> Result<Vec<GeneratedFile>, GenError> {
    let mut hb = engine(lang, register);
    let templates = load(lang, embedded, dir)?;
    // Each template is parsed once, not once per contract it renders.
    for (name, text) in &templates {
        hb.register_template_string(&file_key(name), text)
            .map_err(|e| GenError::Template {
                template: format!("{lang}/{name}"),
                reason: e.to_string(),
            })?;
    }
    let package_ctx = package.context();
    let with_target = |(ir, input): &(&Ir, &str)| -> Result<Value, GenError> {
        let mut ctx = context(ir)?;
        ctx["input"] = Value::String(input.to_string());
        ctx["package"] = package_ctx.clone();
        if let Some(view) = target {
            ctx["target"] = view(ir)?;
        }
        Ok(ctx)
    };
    let mut contexts: Vec<Value> = irs.iter().map(with_target).collect::<Result<_, _>>()?;
    // Whole-run files (indexes, package metadata) must not depend on argument order.
    contexts.sort_by(|a, b| a["module"].as_str().cmp(&b["module"].as_str()));
    let mut files = Vec::new();
    let render = |name: &str, ctx: &Value| -> Result<String, GenError> {
        hb.render(&file_key(name), ctx)
            .map_err(|e| GenError::Template {
                template: format!("{lang}/{name}"),
                reason: e.to_string(),
            })
    };
    for (name, _) in &templates {
        let out_name = name
            .trim_end_matches(".hbs")
            .replace("{{package}}", package.python())
            .replace("{{assembly}}", package.assembly());
        if out_name.contains("{{module}}") {
            for ctx in &contexts {
                let module = ctx["module"].as_str().unwrap_or_default();
                files.push(GeneratedFile {
                    name: out_name.replace("{{module}}", module),
                    contents: render(name, ctx)?,
                });
            }
        } else {
            let ctx = json!({ "contracts": contexts, "package": package_ctx });
            files.push(GeneratedFile {
                name: out_name,
                contents: render(name, &ctx)?,
            });
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// Render each of `templates` once with `ctx` (a package that does not depend on the
/// contracts: the runtimes).
pub fn render_each(
    what: &str,
    templates: &[Template],
    ctx: &Value,
) -> Result<Vec<GeneratedFile>, GenError> {
    let hb = engine(what, |_| {});
    let mut files = Vec::new();
    for (name, text) in templates {
        let contents = hb
            .render_template(text, ctx)
            .map_err(|e| GenError::Template {
                template: format!("{what}/{name}"),
                reason: e.to_string(),
            })?;
        files.push(GeneratedFile {
            name: name.trim_end_matches(".hbs").to_string(),
            contents,
        });
    }
    Ok(files)
}
