//! The `contractgen` command line: clap arguments and [`run`] (feature `cli`).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::package::Package;
use crate::{
    Config, EXIT_CONTRACT, EXIT_OK, EXIT_USAGE, GenError, Ir, Lang, breaking, meta_schema_text,
    read_document, vectors, write_file_if_changed,
};

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

/// A `--lang` value: one target, or every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LangArg {
    /// Rust, via typify (one module file per contract).
    Rust,
    /// Markdown protocol pages (one per contract).
    Docs,
    /// A Python package using msgspec.
    Python,
    /// A net8.0 C# class library using System.Text.Json (C# 7.3 syntax).
    Csharp,
    /// A Wireshark Lua dissector per contract.
    Wireshark,
    /// Every target, each into OUT/<lang>/.
    All,
}

impl LangArg {
    /// The targets the values name; `all` among them means every target.
    fn expand(args: &[LangArg]) -> Vec<Lang> {
        if args.contains(&LangArg::All) {
            return Lang::ALL.to_vec();
        }
        let lang = |a: &LangArg| match a {
            LangArg::Rust => Some(Lang::Rust),
            LangArg::Docs => Some(Lang::Docs),
            LangArg::Python => Some(Lang::Python),
            LangArg::Csharp => Some(Lang::Csharp),
            LangArg::Wireshark => Some(Lang::Wireshark),
            LangArg::All => None,
        };
        args.iter().filter_map(lang).collect()
    }
}

/// `contractgen` subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate contracts against the meta-schema and lint their cross-references.
    ///
    /// Prints one line per problem (file#pointer: reason [lint]) and exits 1 if
    /// there are any, 0 if there are none.
    Check {
        /// Documents a plain JSON Schema's references outside itself name.
        #[command(flatten)]
        resources: ResourceArgs,
        /// Contract files, or built-in names (kernel, xsession, rukh, toolchannel).
        #[arg(required = true, value_name = "CONTRACT")]
        contracts: Vec<String>,
    },
    /// Generate code or docs from contracts.
    Generate {
        /// Target language; several (`--lang rust,docs`, or `all`) generate each into
        /// OUT/<lang>/ in one run.
        #[arg(long, value_enum, value_delimiter = ',', required = true)]
        lang: Vec<LangArg>,
        /// Output directory (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Use the templates in DIR (or DIR/<lang>) instead of the built-in ones; those
        /// under partials/ are included with `{{> NAME}}`, not written.
        #[arg(long, value_name = "DIR")]
        templates: Option<PathBuf>,
        /// Do not write: exit 1 if any file in --out differs from what would be generated.
        #[arg(long)]
        check: bool,
        /// How the Python and C# SDKs are named and versioned.
        #[command(flatten)]
        package: PackageArgs,
        /// Documents a plain JSON Schema's references outside itself name.
        #[command(flatten)]
        resources: ResourceArgs,
        /// Contract files.
        #[arg(required = true, value_name = "CONTRACT")]
        contracts: Vec<PathBuf>,
    },
    /// Write the runtime package the generated SDKs of a language depend on
    /// (contract-runtime for Python, Contract.Runtime for C#), versioned as contractgen.
    Runtime {
        /// python or csharp.
        #[arg(long, value_enum)]
        lang: LangArg,
        /// Output directory: the package's root (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Do not write: exit 1 if any file in --out differs from what would be written.
        #[arg(long)]
        check: bool,
    },
    /// Write the cross-language test vectors (valid and labelled invalid messages) of contracts.
    Vectors {
        /// Output directory; each contract gets `<module>/valid.json` and `<module>/invalid.json`.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Documents a plain JSON Schema's references outside itself name.
        #[command(flatten)]
        resources: ResourceArgs,
        /// Contract files.
        #[arg(required = true, value_name = "CONTRACT")]
        contracts: Vec<PathBuf>,
    },
    /// Print every change between two versions of a contract, grouped by section,
    /// each classified as wire-breaking, source-breaking or compatible.
    ///
    /// OLD and NEW are files, built-in names, or `git:REV:PATH` (the file at a revision).
    Diff {
        /// The contract as deployed.
        #[arg(value_name = "OLD")]
        old: String,
        /// The contract as edited.
        #[arg(value_name = "NEW")]
        new: String,
    },
    /// Exit 1 when NEW breaks peers built from OLD, listing each breaking change.
    ///
    /// A contract whose major version went up announces its breaking changes: they
    /// are listed, and the exit is 0. Without a major bump a wire-breaking change is
    /// itself a finding (major-not-bumped). docs/breaking.md has the rule table.
    Breaking {
        /// The contract as deployed (file, built-in name or `git:REV:PATH`).
        #[arg(value_name = "OLD")]
        old: String,
        /// The contract as edited.
        #[arg(value_name = "NEW")]
        new: String,
        /// Which findings count.
        #[arg(long, value_enum, default_value = "all")]
        category: BreakingCategory,
    },
    /// Print the contract format's meta-schema (what schema/contract.schema.json holds).
    MetaSchema {
        /// Write to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

/// Write `files` under `dir` (only those that changed), or with `check` only report the
/// stale ones (exit 1).
fn emit(
    files: &[crate::GeneratedFile],
    dir: &std::path::Path,
    check: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    if check {
        let stale: Vec<_> = files
            .iter()
            .map(|f| dir.join(&f.name))
            .zip(files)
            .filter(|(p, f)| std::fs::read(p).ok().as_deref() != Some(f.contents.as_bytes()))
            .collect();
        for (p, _) in &stale {
            let _ = writeln!(out, "stale {}", p.display());
        }
        if stale.is_empty() {
            let _ = writeln!(err, "{} file(s) fresh", files.len());
            return EXIT_OK;
        }
        let _ = writeln!(
            err,
            "{} file(s) stale: run contractgen without --check",
            stale.len()
        );
        return EXIT_CONTRACT;
    }
    for f in files {
        let path = dir.join(&f.name);
        match write_file_if_changed(&path, f.contents.as_bytes()) {
            Ok(changed) => {
                let verb = if changed { "wrote" } else { "unchanged" };
                let _ = writeln!(out, "{verb} {}", path.display());
            }
            Err(e) => {
                let _ = writeln!(err, "contractgen: {e}");
                return EXIT_USAGE;
            }
        }
    }
    EXIT_OK
}

/// `generate`'s package options (see `contractgen::Package`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PackageArgs {
    /// Python import package of the SDK (default contract_sdk).
    #[arg(long, value_name = "NAME")]
    package: Option<String>,
    /// Python distribution name (default: the package name with - for _).
    #[arg(long, value_name = "NAME")]
    distribution: Option<String>,
    /// C# namespace the contracts' namespaces sit under (default Contract.Sdk).
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// C# assembly and project name (default: the namespace).
    #[arg(long, value_name = "NAME")]
    assembly: Option<String>,
    /// Version of the Python distribution and the C# assembly (default 0.1.0).
    #[arg(long, value_name = "X.Y.Z")]
    package_version: Option<String>,
}

/// `--resource`: documents a plain schema's `$ref`s name outside it, read from files.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ResourceArgs {
    /// A document a plain JSON Schema's `$ref` names outside itself: FILE, known by its own
    /// `$id`, or URI=FILE. Repeatable; nothing is fetched.
    #[arg(long = "resource", value_name = "[URI=]FILE")]
    resource: Vec<String>,
}

impl ResourceArgs {
    /// Each `--resource` as (URI, file): a URI is what comes before the first `=` when it
    /// is one (`https://…`, `urn:…`), so a file name with `=` still reads as a file.
    fn pairs(&self) -> impl Iterator<Item = (Option<&str>, &Path)> {
        self.resource.iter().map(|r| match r.split_once('=') {
            Some((uri, file)) if uri.contains("://") || uri.starts_with("urn:") => {
                (Some(uri), Path::new(file))
            }
            _ => (None, Path::new(r.as_str())),
        })
    }

    fn configure(&self, cfg: &mut Config) {
        for (uri, file) in self.pairs() {
            cfg.resource(uri, file);
        }
    }

    fn read(&self) -> Result<contract::plain::Resources, contract::LoadError> {
        contract::plain::Resources::read(self.pairs())
    }
}

/// One of [`Package`]'s setters.
type Setter = fn(&mut Package, &str) -> Result<(), GenError>;

impl PackageArgs {
    fn package(&self) -> Result<Package, GenError> {
        let mut p = Package::default();
        let set: [(&Option<String>, Setter); 5] = [
            (&self.package, Package::set_python),
            (&self.distribution, Package::set_distribution),
            (&self.namespace, Package::set_namespace),
            (&self.assembly, Package::set_assembly),
            (&self.package_version, Package::set_version),
        ];
        for (value, setter) in set {
            if let Some(v) = value {
                setter(&mut p, v)?;
            }
        }
        Ok(p)
    }
}

/// The findings `contractgen breaking` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BreakingCategory {
    /// Wire-breaking only.
    Wire,
    /// Source-breaking only.
    Source,
    /// Both.
    All,
}

/// Run a parsed command, writing reports to `out` and `err`. Returns the exit code.
pub fn run(cli: &Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match &cli.command {
        Command::Check {
            contracts,
            resources,
        } => match resources.read() {
            Ok(res) => check(contracts, &res, out, err),
            Err(e) => {
                let _ = writeln!(err, "contractgen: {e}");
                EXIT_USAGE
            }
        },
        Command::Diff { old, new } => diff(old, new, out, err),
        Command::Breaking { old, new, category } => breaking_cmd(old, new, *category, out, err),
        Command::Generate {
            lang,
            out: dir,
            contracts,
            templates,
            check,
            package,
            resources,
        } => {
            let mut cfg = Config::new();
            resources.configure(&mut cfg);
            if let Some(t) = templates {
                cfg.templates(t);
            }
            let package = match package.package() {
                Ok(p) => p,
                Err(e) => {
                    let _ = writeln!(err, "contractgen: {e}");
                    return EXIT_USAGE;
                }
            };
            cfg.langs(LangArg::expand(lang))
                .out_dir(dir)
                .package(package)
                .contracts(contracts);
            match cfg.generate() {
                Err(e) => {
                    let _ = writeln!(err, "contractgen: {e}");
                    match e {
                        GenError::Io { .. } => EXIT_USAGE,
                        GenError::Load(
                            contract::LoadError::Io { .. }
                            | contract::LoadError::ResourceWithoutId { .. },
                        ) => EXIT_USAGE,
                        _ => EXIT_CONTRACT,
                    }
                }
                Ok(files) => emit(&files, dir, *check, out, err),
            }
        }
        Command::Runtime {
            lang,
            out: dir,
            check,
        } => {
            let files = match LangArg::expand(&[*lang]).as_slice() {
                [lang] => crate::runtime(*lang),
                _ => Err(GenError::Package(
                    "--lang all: name python or csharp".into(),
                )),
            };
            match files {
                Ok(files) => emit(&files, dir, *check, out, err),
                Err(e) => {
                    let _ = writeln!(err, "contractgen: {e}");
                    EXIT_USAGE
                }
            }
        }
        Command::Vectors {
            out: dir,
            contracts,
            resources,
        } => {
            let res = match resources.read() {
                Ok(r) => r,
                Err(e) => {
                    let _ = writeln!(err, "contractgen: {e}");
                    return EXIT_USAGE;
                }
            };
            let mut irs = Vec::new();
            for path in contracts {
                match contract::load_with(path, &res)
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
            emit(&vectors::generate(&irs), dir, false, out, err)
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

fn read_pair(
    old: &str,
    new: &str,
    err: &mut dyn Write,
) -> Option<(serde_json::Value, serde_json::Value)> {
    match (read_document(old), read_document(new)) {
        (Ok(a), Ok(b)) => Some((a, b)),
        (Err(e), _) | (_, Err(e)) => {
            let _ = writeln!(err, "contractgen: {e}");
            None
        }
    }
}

fn diff(old: &str, new: &str, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let Some((a, b)) = read_pair(old, new, err) else {
        return EXIT_USAGE;
    };
    let findings = breaking::compare(&a, &b);
    let all = [
        breaking::Category::Wire,
        breaking::Category::Source,
        breaking::Category::Compatible,
    ];
    let (text, _) = breaking::report(&findings, &all);
    let _ = write!(out, "{text}");
    let changes = breaking::changes(&a, &b);
    let mut section = "";
    for c in &changes {
        let s = breaking::section_of(&c.pointer);
        if s != section {
            section = s;
            let _ = writeln!(out, "changes: {s}");
        }
        let _ = writeln!(out, "  {}", describe(c));
    }
    let _ = writeln!(
        err,
        "{} classified finding(s), {} changed value(s)",
        findings.len(),
        changes.len()
    );
    EXIT_OK
}

/// One raw change on a line, long values cut.
fn describe(c: &breaking::Change) -> String {
    let short = |v: &serde_json::Value| {
        let t = v.to_string();
        match t.char_indices().nth(60) {
            Some((i, _)) => format!("{}…", &t[..i]),
            None => t,
        }
    };
    match (&c.old, &c.new) {
        (None, Some(v)) => format!("+ {} = {}", c.pointer, short(v)),
        (Some(v), None) => format!("- {} = {}", c.pointer, short(v)),
        (Some(a), Some(b)) => format!("~ {}: {} → {}", c.pointer, short(a), short(b)),
        (None, None) => format!("? {}", c.pointer),
    }
}

fn breaking_cmd(
    old: &str,
    new: &str,
    category: BreakingCategory,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let Some((a, b)) = read_pair(old, new, err) else {
        return EXIT_USAGE;
    };
    let wanted: &[breaking::Category] = match category {
        BreakingCategory::Wire => &[breaking::Category::Wire],
        BreakingCategory::Source => &[breaking::Category::Source],
        BreakingCategory::All => &[breaking::Category::Wire, breaking::Category::Source],
    };
    let findings = breaking::compare(&a, &b);
    let (text, n) = breaking::report(&findings, wanted);
    let _ = write!(out, "{text}");
    if n == 0 {
        let _ = writeln!(err, "no breaking change");
        EXIT_OK
    } else if breaking::announced(&a, &b, &findings) {
        let _ = writeln!(
            err,
            "{n} breaking change(s), announced by the major version"
        );
        EXIT_OK
    } else {
        let _ = writeln!(err, "{n} breaking change(s)");
        EXIT_CONTRACT
    }
}

fn check(
    contracts: &[String],
    resources: &contract::plain::Resources,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
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
        // A plain JSON Schema is checked as the types-only contract it is read as.
        let doc = contract::plain::as_contract(&origin, doc, resources);
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
