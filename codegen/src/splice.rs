//! Partials spliced into the templates that include them, when templates are compiled.
//!
//! handlebars finds the line and column of every element by scanning from its template's
//! start, so one large template compiles in time that grows with its size times its
//! element count; split into partials, each piece compiles alone. Rendered as a partial,
//! though, a piece costs a copy of its context at every inclusion (handlebars clones the
//! JSON it hands a partial, which at a file's top level is the whole contract). So a plain
//! `{{> name}}`, with no context argument, hash, block or indent, is replaced by the
//! partial's compiled template, held by a block of the [`Spliced`] helper: the file
//! renders exactly as if the partial's text stood on that line (`../` included), nothing
//! is copied, and an error inside it names the partial and its line. Any other
//! inclusion, and a partial that includes itself, is left to handlebars.

use std::collections::HashMap;

use handlebars::template::{
    DecoratorTemplate, ExpressionSpecBuilder, HelperTemplate, Parameter, TemplateElement,
};
use handlebars::{
    Context, Handlebars, Helper, HelperDef, HelperResult, Output, RenderContext, Renderable,
    Template,
};

/// The name [`Spliced`] is registered under: not one a template would call.
pub const HELPER: &str = "contractgen-spliced-partial";

/// Renders its block, a spliced partial, in the including template's place and context.
pub struct Spliced;

impl HelperDef for Spliced {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        r: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        // Rendering the partial makes it the current template; the includer's name comes back.
        let includer = rc.get_current_template_name();
        if let Some(t) = h.template() {
            t.render(r, ctx, rc, out)?;
        }
        rc.set_current_template_name(includer);
        Ok(())
    }
}

/// Splice every plain inclusion of one of `partials` into `t`, at any depth. Each partial
/// is named `partials/NAME` in errors.
pub fn splice(t: &mut Template, partials: &HashMap<String, Template>) {
    splice_in(t, partials, &mut Vec::new());
}

fn splice_in<'p>(
    t: &mut Template,
    partials: &'p HashMap<String, Template>,
    open: &mut Vec<&'p str>,
) {
    for el in &mut t.elements {
        if let Some((name, part)) = plain_inclusion(el, partials)
            && !open.contains(&name)
        {
            let mut part = part.clone();
            open.push(name);
            splice_in(&mut part, partials, open);
            open.pop();
            part.name = Some(format!("partials/{name}"));
            *el = held(part);
            continue;
        }
        for inner in nested(el) {
            splice_in(inner, partials, open);
        }
    }
}

/// `part` as the block of a [`Spliced`] helper.
fn held(part: Template) -> TemplateElement {
    let spec = ExpressionSpecBuilder::default()
        .name(Parameter::Name(HELPER.into()))
        .params(Vec::new())
        .hash(HashMap::new())
        .omit_pre_ws(false)
        .omit_pro_ws(false)
        .build()
        .expect("every field of the spec is set");
    let mut block = HelperTemplate::new(spec, true, false);
    block.template = Some(part);
    TemplateElement::HelperBlock(Box::new(block))
}

/// The partial `el` includes, named, when it is a plain `{{> name}}` of one of `partials`.
fn plain_inclusion<'p>(
    el: &TemplateElement,
    partials: &'p HashMap<String, Template>,
) -> Option<(&'p str, &'p Template)> {
    let TemplateElement::PartialExpression(d) = el else {
        return None;
    };
    let DecoratorTemplate {
        name,
        params,
        hash,
        template,
        indent,
        ..
    } = d.as_ref();
    let plain = params.is_empty()
        && hash.is_empty()
        && template.is_none()
        && indent.as_deref().is_none_or(str::is_empty);
    let (name, part) = partials.get_key_value(name.as_name()?).filter(|_| plain)?;
    Some((name.as_str(), part))
}

/// The templates nested in a block element: its body and its `else`.
fn nested(el: &mut TemplateElement) -> Vec<&mut Template> {
    match el {
        TemplateElement::HelperBlock(h) => {
            let h = h.as_mut();
            (h.template.iter_mut())
                .chain(h.inverse.iter_mut())
                .collect()
        }
        TemplateElement::DecoratorBlock(d) | TemplateElement::PartialBlock(d) => {
            d.template.iter_mut().collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handlebars::Handlebars;
    use serde_json::json;

    /// Render `main` with `partials` spliced in, and (for comparison) `whole`, one template.
    fn render(main: &str, partials: &[(&str, &str)], data: &serde_json::Value) -> String {
        let parts: HashMap<String, Template> = (partials.iter())
            .map(|(n, t)| (n.to_string(), Template::compile(t).expect("partial")))
            .collect();
        let mut t = Template::compile(main).expect("main");
        splice(&mut t, &parts);
        let mut hb = Handlebars::new();
        hb.set_strict_mode(true);
        hb.register_helper(HELPER, Box::new(Spliced));
        for (n, p) in parts {
            hb.register_template(&n, p);
        }
        hb.register_template("main", t);
        hb.render("main", data).expect("render")
    }

    fn whole(text: &str, data: &serde_json::Value) -> String {
        let mut hb = Handlebars::new();
        hb.set_strict_mode(true);
        hb.render_template(text, data).expect("render whole")
    }

    #[test]
    fn a_spliced_partial_renders_as_its_text_written_in_place() {
        let data =
            json!({"name": "depot", "items": [{"name": "a", "n": 1}, {"name": "b", "n": 2}]});
        let item = "{{#if n}}\n  {{name}} of {{../name}} #{{@index}}\n{{/if}}\n";
        let main = "head\n{{#each items}}\n{{> item}}\n{{/each}}\ntail\n";
        let inline = main.replace("{{> item}}\n", item);
        assert_eq!(
            render(main, &[("item", item)], &data),
            whole(&inline, &data)
        );
        assert_eq!(
            render(main, &[("item", item)], &data),
            "head\n  a of depot #0\n  b of depot #1\ntail\n"
        );
    }

    #[test]
    fn an_error_inside_a_spliced_partial_names_the_partial_and_its_line() {
        let parts: HashMap<String, Template> = [(
            "p".to_string(),
            Template::compile("ok\n{{missing}}\n").expect("p"),
        )]
        .into();
        let mut t = Template::compile("a\n{{#if x}}\n{{> p}}\n{{/if}}\n").expect("main");
        t.name = Some("main".into());
        splice(&mut t, &parts);
        let mut hb = Handlebars::new();
        hb.set_strict_mode(true);
        hb.register_helper(HELPER, Box::new(Spliced));
        hb.register_template("main", t);
        let err = hb.render("main", &json!({"x": true})).expect_err("strict");
        assert_eq!(err.template_name.as_deref(), Some("partials/p"));
        assert_eq!(err.line_no, Some(2));
    }

    #[test]
    fn partials_nest_and_reach_into_else_branches() {
        let data = json!({"x": false, "v": "deep"});
        let parts = [("outer", "<{{> inner}}>\n"), ("inner", "{{v}}")];
        let main = "{{#if x}}\nno\n{{else}}\n{{> outer}}\n{{/if}}\n";
        assert_eq!(render(main, &parts, &data), "<deep>\n");
    }

    #[test]
    fn inclusions_with_a_context_or_an_indent_are_left_to_handlebars() {
        let data = json!({"inner": {"v": 1}, "v": 2});
        let parts = [("p", "v={{v}}\n")];
        // With a context argument, handlebars renders it as a partial of that context.
        assert_eq!(render("{{> p inner}}", &parts, &data), "v=1\n");
        // An indented inclusion keeps handlebars' indenting of each line.
        assert_eq!(render("a\n  {{> p}}\nb\n", &parts, &data), "a\n  v=2\nb\n");
    }

    #[test]
    fn a_partial_that_includes_itself_is_not_spliced_forever() {
        let parts = [(
            "loop",
            "{{#if more}}{{#each more}}[{{> loop}}]{{/each}}{{/if}}",
        )];
        let data = json!({"more": [{"more": [{}]}]});
        assert_eq!(render("{{> loop}}", &parts, &data), "[[]]");
    }
}
