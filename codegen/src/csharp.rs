//! The C# target (System.Text.Json): PLACEHOLDER — templates and helpers not written yet (issue 5).

use handlebars::Handlebars;

use crate::sdk::Template;

/// The built-in C# templates (none yet).
pub const TEMPLATES: &[Template] = &[];

/// Register the C# helpers (none yet).
pub fn register(_hb: &mut Handlebars<'static>) {}
