//! Template-rendered targets (Python, C#, Markdown docs).
//!
//! Each target is a set of handlebars templates in `codegen/templates/<lang>/`,
//! embedded in the binary and overridable with `--templates DIR`. A template
//! whose file name contains `{{module}}` is rendered once per contract with
//! that contract's [`Context`]; any other template is rendered once for the
//! whole run with `{ "contracts": [...] }`. A template under `partials/` is a
//! partial, included with `{{> name}}` and never a file of its own; large
//! files are split into partials so that each piece compiles alone, and a
//! partial included on a line of its own is spliced in ([`crate::splice`]).
//! Language-specific spelling (type names, literals) comes from helpers each
//! target registers, so templates only lay out files.

use std::collections::HashMap;
use std::path::Path;

use handlebars::Handlebars;
use serde_json::{Value, json};

use crate::config::GeneratedFile;
use crate::context::Context;
use crate::ir::{GenError, Ir};
use crate::package::Package;

/// One embedded template: its path under `codegen/templates/<lang>/` and its text.
pub type Template = (&'static str, &'static str);

fn engine(register: fn(&mut Handlebars<'static>)) -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    // Generated code is not HTML.
    hb.register_escape_fn(handlebars::no_escape);
    crate::helpers::register(&mut hb);
    hb.register_helper(crate::splice::HELPER, Box::new(crate::splice::Spliced));
    register(&mut hb);
    hb.set_dev_mode(false);
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

/// The partial a template path names (`partials/NAME.hbs` is `NAME`), if it is one.
fn partial_name(path: &str) -> Option<&str> {
    (path.strip_prefix("partials/")).map(|n| n.trim_end_matches(".hbs"))
}

/// Compile `templates` into `hb`: each file under [`file_key`] with the plain inclusions
/// of partials spliced in ([`crate::splice`]), each partial under its name as well.
fn register_all(
    hb: &mut Handlebars<'static>,
    lang: &str,
    templates: &[(String, String)],
) -> Result<(), GenError> {
    let mut partials = HashMap::new();
    let mut files = Vec::new();
    for (name, text) in templates {
        let compiled = handlebars::Template::compile_with_name(text, format!("{lang}/{name}"))
            .map_err(|e| GenError::Template {
                template: format!("{lang}/{name}"),
                reason: e.to_string(),
            })?;
        match partial_name(name) {
            Some(p) => drop(partials.insert(p.to_string(), compiled)),
            None => files.push((file_key(name), compiled)),
        }
    }
    for (key, mut t) in files {
        crate::splice::splice(&mut t, &partials);
        t.name = Some(key.clone());
        hb.register_template(&key, t);
    }
    for (name, mut t) in partials {
        t.name = Some(name.clone());
        hb.register_template(&name, t);
    }
    Ok(())
}

/// A template target: its templates, its spelling helpers, and its own view of a
/// contract, which its per-contract templates see as `target`.
pub struct Target {
    /// Directory name under `codegen/templates/` (and under `--templates DIR`).
    pub lang: &'static str,
    /// The embedded templates.
    pub templates: &'static [Template],
    /// Registers the target's helpers.
    pub register: fn(&mut Handlebars<'static>),
    /// Builds the target's view of one contract.
    pub view: fn(&Context) -> Result<Value, GenError>,
}

/// Render a template target for `irs`, each with its contract's path as headers show it
/// (the context's `input`) and the target's view as `target`.
pub fn generate(
    target: &Target,
    irs: &[(&Ir, &str)],
    (dir, package): (Option<&Path>, &Package),
) -> Result<Vec<GeneratedFile>, GenError> {
    let lang = target.lang;
    let mut hb = engine(target.register);
    let templates = load(lang, target.templates, dir)?;
    // Each template is parsed once, not once per contract it renders.
    register_all(&mut hb, lang, &templates)?;
    let package_ctx = package.context();
    let mut contexts = Vec::with_capacity(irs.len());
    for (ir, input) in irs {
        let mut ctx = Context::build(ir, input, &package_ctx);
        ctx.target = Some((target.view)(&ctx)?);
        contexts.push(ctx);
    }
    // Whole-run files (indexes, package metadata) must not depend on argument order.
    contexts.sort_by(|a, b| a.module.cmp(b.module));
    // Handlebars renders from JSON: each context is serialised once, its view moved in,
    // and every template renders from that one tree (`render` would copy it each time).
    let modules: Vec<&str> = contexts.iter().map(|c| c.module).collect();
    let values: Vec<Value> = (contexts.into_iter())
        .map(as_json)
        .collect::<Result<_, _>>()
        .map_err(|e| GenError::Template {
            template: lang.into(),
            reason: e.to_string(),
        })?;
    let render = |name: &str, ctx: &handlebars::Context| -> Result<String, GenError> {
        hb.render_with_context(&file_key(name), ctx)
            .map_err(|e| GenError::Template {
                template: format!("{lang}/{name}"),
                reason: e.to_string(),
            })
    };
    let out_name = |name: &str| {
        (name.trim_end_matches(".hbs"))
            .replace("{{package}}", package.python())
            .replace("{{assembly}}", package.assembly())
    };
    let (per_contract, per_run): (Vec<&String>, Vec<&String>) = (templates.iter())
        .map(|(name, _)| name)
        .filter(|name| partial_name(name).is_none())
        .partition(|name| out_name(name).contains("{{module}}"));
    // Per-contract files render from each contract's tree, then whole-run files from all
    // of them: each tree moves from the one to the other rather than being copied.
    let mut contexts: Vec<handlebars::Context> =
        values.into_iter().map(handlebars::Context::from).collect();
    let mut files = Vec::new();
    for name in per_contract {
        for (ctx, module) in contexts.iter().zip(&modules) {
            files.push(GeneratedFile {
                name: out_name(name).replace("{{module}}", module),
                contents: render(name, ctx)?,
            });
        }
    }
    let values: Vec<Value> = (contexts.iter_mut())
        .map(|c| std::mem::take(c.data_mut()))
        .collect();
    let run = handlebars::Context::from(json!({ "contracts": values, "package": package_ctx }));
    for name in per_run {
        files.push(GeneratedFile {
            name: out_name(name),
            contents: render(name, &run)?,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// A target's view as the JSON its templates read, named by the target in an error.
pub fn view_json(lang: &str, view: impl serde::Serialize) -> Result<Value, GenError> {
    serde_json::to_value(view).map_err(|e| GenError::Template {
        template: lang.into(),
        reason: e.to_string(),
    })
}

/// `ctx` as JSON, its target's view moved in rather than copied.
fn as_json(mut ctx: Context) -> Result<Value, serde_json::Error> {
    let target = ctx.target.take();
    let mut v = serde_json::to_value(&ctx)?;
    if let (Some(t), Some(map)) = (target, v.as_object_mut()) {
        map.insert("target".into(), t);
    }
    Ok(v)
}

/// Render each of `templates` once with `ctx` (a package that does not depend on the
/// contracts: the runtimes).
pub fn render_each(
    what: &str,
    templates: &[Template],
    ctx: &Value,
) -> Result<Vec<GeneratedFile>, GenError> {
    let hb = engine(|_| {});
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
