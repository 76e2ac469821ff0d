//! `contractgen`: checks contracts and (in later issues) generates code and docs from them.
//!
//! The CLI's clap arguments live in the library (`cli`, feature `cli`, on by default), not
//! in the binary, so tests can parse and run commands without spawning a process; `run`
//! returns the exit code the binary should use: 0 clean, 1 contract problems, 2 usage or
//! I/O errors. A build script depends on the crate with `default-features = false` and
//! compiles no clap.
#![forbid(unsafe_code)]

pub mod breaking;
#[cfg(feature = "cli")]
mod cli;
pub mod config;
pub mod context;
pub mod csharp;
pub mod docs;
pub mod helpers;
pub mod ir;
pub mod names;
pub mod package;
pub mod python;
pub mod rust;
pub mod sdk;
pub mod shapes;
mod splice;
pub mod types;
pub mod vectors;
pub mod wireshark;

#[cfg(feature = "cli")]
pub use cli::{BreakingCategory, Cli, Command, LangArg, run};
pub use config::{Config, GeneratedFile, Lang, write_file_if_changed};
pub use ir::{GenError, Ir};
pub use package::{Package, runtime};

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: a contract has problems.
pub const EXIT_CONTRACT: i32 = 1;
/// Exit code: bad usage or an I/O failure.
pub const EXIT_USAGE: i32 = 2;

/// The meta-schema as pretty JSON text with a trailing newline, exactly as committed.
pub fn meta_schema_text() -> String {
    let mut s = serde_json::to_string_pretty(&contract::model::meta_schema()).unwrap_or_default();
    s.push('\n');
    s
}

/// A contract document by file path, built-in name or `git:REV:PATH`.
pub fn read_document(spec: &str) -> Result<serde_json::Value, String> {
    let text = if let Some(rest) = spec.strip_prefix("git:") {
        let (rev, path) = rest
            .split_once(':')
            .ok_or_else(|| format!("{spec}: expected git:REV:PATH"))?;
        // Asked from the file's own directory, so a path relative to the caller's works.
        let path = std::path::Path::new(path);
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["show", &format!("{rev}:./{name}")])
            .output()
            .map_err(|e| format!("{spec}: cannot run git: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{spec}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        String::from_utf8(out.stdout).map_err(|e| format!("{spec}: not UTF-8: {e}"))?
    } else if let Some((_, t)) = contract::BUILTIN.iter().find(|(n, _)| *n == spec) {
        t.to_string()
    } else {
        std::fs::read_to_string(spec).map_err(|e| format!("{spec}: cannot read: {e}"))?
    };
    serde_json::from_str(&text).map_err(|e| format!("{spec}: not JSON: {e}"))
}
