//! `contractgen`: checks contracts and (in later issues) generates code and docs from them.
//!
//! The CLI's clap arguments live here, not in the binary, so tests can parse
//! and run commands without spawning a process. [`run`] returns the exit code
//! the binary should use: 0 clean, 1 contract problems, 2 usage or I/O errors.
#![forbid(unsafe_code)]

pub mod config;
pub mod csharp;
pub mod docs;
pub mod helpers;
pub mod ir;
pub mod python;
pub mod rust;
pub mod sdk;
pub mod types;
pub mod vectors;

pub use config::{Config, GeneratedFile, Lang, write_file_if_changed};
pub use ir::{GenError, Ir};

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Command-line interface of `contractgen`.
#[derive(Debug, Parser)]
#[command(
    name = "contractgen",
    version,
    about = "Check wire-protocol contracts and generate code and docs from them"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `contractgen` subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate contracts against the meta-schema and lint their cross-references.
    ///
    /// Prints one line per problem (file#pointer: reason [lint]) and exits 1 if
    /// there are any, 0 if there are none.
    Check {
        /// Contract files, or built-in names (kernel, xsession, rukh, toolchannel).
        #[arg(required = true, value_name = "CONTRACT")]
        contracts: Vec<String>,
    },
    /// Generate code or docs from contracts.
    Generate {
        /// Target language.
        #[arg(long, value_enum)]
        lang: Lang,
        /// Output directory (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Use the templates in DIR (or DIR/<lang>) instead of the built-in ones.
        #[arg(long, value_name = "DIR")]
        templates: Option<PathBuf>,
        /// Do not write: exit 1 if any file in --out differs from what would be generated.
        #[arg(long)]
        check: bool,
        /// Contract files.
        #[arg(required = true, value_name = "CONTRACT")]
        contracts: Vec<PathBuf>,
    },
    /// Write the cross-language test vectors (valid and labelled invalid messages) of contracts.
    Vectors {
        /// Output directory; each contract gets `<module>/valid.json` and `<module>/invalid.json`.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Contract files.
        #[arg(required = true, value_name = "CONTRACT")]
        contracts: Vec<PathBuf>,
    },
    /// Print the contract format's meta-schema (what schema/contract.schema.json holds).
    MetaSchema {
        /// Write to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

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

/// Run a parsed command, writing reports to `out` and `err`. Returns the exit code.
pub fn run(cli: &Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match &cli.command {
        Command::Check { contracts } => check(contracts, out, err),
        Command::Generate {
            lang,
            out: dir,
            contracts,
            templates,
            check,
        } => {
            let mut cfg = Config::new();
            if let Some(t) = templates {
                cfg.templates(t);
            }
            cfg.lang(*lang).out_dir(dir).contracts(contracts);
            match cfg.generate() {
                Err(e) => {
                    let _ = writeln!(err, "contractgen: {e}");
                    match e {
                        GenError::Io { .. } => EXIT_USAGE,
                        GenError::Load(contract::LoadError::Io { .. }) => EXIT_USAGE,
                        _ => EXIT_CONTRACT,
                    }
                }
                Ok(files) if *check => {
                    let mut stale = 0;
                    for f in &files {
                        let path = dir.join(&f.name);
                        if std::fs::read(&path).ok().as_deref() != Some(f.contents.as_bytes()) {
                            let _ = writeln!(out, "stale {}", path.display());
                            stale += 1;
                        }
                    }
                    if stale == 0 {
                        let _ = writeln!(err, "{} file(s) fresh", files.len());
                        EXIT_OK
                    } else {
                        let _ = writeln!(
                            err,
                            "{stale} file(s) stale: run contractgen generate without --check"
                        );
                        EXIT_CONTRACT
                    }
                }
                Ok(files) => {
                    for f in files {
                        match write_file_if_changed(&dir.join(&f.name), f.contents.as_bytes()) {
                            Ok(changed) => {
                                let _ = writeln!(
                                    out,
                                    "{} {}",
                                    if changed { "wrote" } else { "unchanged" },
                                    dir.join(&f.name).display()
                                );
                            }
                            Err(e) => {
                                let _ = writeln!(err, "contractgen: {e}");
                                return EXIT_USAGE;
                            }
                        }
                    }
                    EXIT_OK
                }
            }
        }
        Command::Vectors {
            out: dir,
            contracts,
        } => {
            let mut irs = Vec::new();
            for path in contracts {
                match contract::load(path)
                    .map_err(GenError::from)
                    .and_then(Ir::build)
                {
                    Ok(ir) => irs.push(ir),
                    Err(e) => {
                        let _ = writeln!(err, "contractgen: {e}");
                        return match e {
                            GenError::Load(contract::LoadError::Io { .. }) => EXIT_USAGE,
                            _ => EXIT_CONTRACT,
                        };
                    }
                }
            }
            for f in vectors::generate(&irs) {
                let path = dir.join(&f.name);
                match write_file_if_changed(&path, f.contents.as_bytes()) {
                    Ok(changed) => {
                        let _ = writeln!(
                            out,
                            "{} {}",
                            if changed { "wrote" } else { "unchanged" },
                            path.display()
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(err, "contractgen: {e}");
                        return EXIT_USAGE;
                    }
                }
            }
            EXIT_OK
        }
        Command::MetaSchema { out: file } => {
            let text = meta_schema_text();
            let res = match file {
                Some(p) => std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display())),
                None => out.write_all(text.as_bytes()).map_err(|e| e.to_string()),
            };
            match res {
                Ok(()) => EXIT_OK,
                Err(e) => {
                    let _ = writeln!(err, "contractgen: {e}");
                    EXIT_USAGE
                }
            }
        }
    }
}

fn check(contracts: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut worst = EXIT_OK;
    for name in contracts {
        let (origin, text) = match contract::BUILTIN.iter().find(|(n, _)| n == name) {
            Some((n, t)) => (format!("builtin:{n}"), t.to_string()),
            None => match std::fs::read_to_string(name) {
                Ok(t) => (name.clone(), t),
                Err(e) => {
                    let _ = writeln!(err, "{name}: cannot read: {e}");
                    worst = EXIT_USAGE;
                    continue;
                }
            },
        };
        let doc: serde_json::Value = match serde_json::from_str(&text) {
            Ok(d) => d,
            Err(e) => {
                let _ = writeln!(out, "{origin}#: not JSON: {e} [json]");
                worst = worst.max(EXIT_CONTRACT);
                continue;
            }
        };
        let (_, problems) = contract::check_document(&origin, &doc);
        for p in &problems {
            let _ = writeln!(out, "{p}");
        }
        if problems.is_empty() {
            let _ = writeln!(err, "{origin}: ok");
        } else {
            let _ = writeln!(err, "{origin}: {} problem(s)", problems.len());
            worst = worst.max(EXIT_CONTRACT);
        }
    }
    worst
}
