//! The Python target (msgspec): PLACEHOLDER — templates and helpers not written yet (issue 5).

use handlebars::Handlebars;

use crate::sdk::Template;

/// The built-in Python templates (none yet).
pub const TEMPLATES: &[Template] = &[];

/// Register the Python helpers (none yet).
pub fn register(_hb: &mut Handlebars<'static>) {}
