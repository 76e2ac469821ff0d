//! The build.rs API, modelled on `prost_build::Config`.
//!
//! ```no_run
//! // build.rs
//! fn main() -> Result<(), contractgen::GenError> {
//!     contractgen::Config::new()
//!         .contract("../../schema/contracts/kernel.json")
//!         .compile()
//! }
//! ```
//! then `include!(concat!(env!("OUT_DIR"), "/kernel.rs"));` in a module.

use std::path::{Path, PathBuf};

use crate::ir::{GenError, Ir};
use crate::package::Package;

/// One generated file: a path relative to the output directory, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedFile {
    /// Relative path.
    pub name: String,
    /// Contents.
    pub contents: String,
}

/// Target languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Lang {
    /// Rust, via typify (one module file per contract).
    Rust,
    /// Markdown protocol pages (one per contract).
    Docs,
    /// A Python package using msgspec.
    Python,
    /// A net8.0 C# class library using System.Text.Json (C# 7.3 syntax).
    Csharp,
    /// A Wireshark Lua dissector (one per contract).
    Wireshark,
}

impl Lang {
    /// Every target, in the order a several-target run writes them.
    pub const ALL: [Lang; 5] = [
        Lang::Rust,
        Lang::Docs,
        Lang::Python,
        Lang::Csharp,
        Lang::Wireshark,
    ];

    /// The target's directory in a several-target run, as `--lang` spells it.
    pub fn dir(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Docs => "docs",
            Lang::Python => "python",
            Lang::Csharp => "csharp",
            Lang::Wireshark => "wireshark",
        }
    }
}

/// Configuration for one generation run.
#[derive(Debug, Clone)]
pub struct Config {
    contracts: Vec<PathBuf>,
    out_dir: Option<PathBuf>,
    langs: Vec<Lang>,
    templates: Option<PathBuf>,
    breaking_against: Option<String>,
    accepted: Vec<String>,
    shown_from: Option<PathBuf>,
    package: Package,
    resources: Vec<(Option<String>, PathBuf)>,
}

/// A contract loaded for a run: its IR, its file name (the Rust header names it) and its
/// path as the generated docs and dissectors name it.
struct Loaded {
    ir: Ir,
    file: String,
    shown: String,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    /// A configuration generating Rust into `OUT_DIR`.
    pub fn new() -> Self {
        Config {
            contracts: Vec::new(),
            out_dir: None,
            langs: vec![Lang::Rust],
            templates: None,
            breaking_against: None,
            accepted: Vec::new(),
            shown_from: None,
            package: Package::default(),
            resources: Vec::new(),
        }
    }

    /// Name the SDK packages (Python import and distribution names, C# namespace and
    /// assembly, version): see [`Package`]. Two SDKs named apart install side by side.
    pub fn package(&mut self, package: Package) -> &mut Self {
        self.package = package;
        self
    }

    /// Name the contracts in generated headers relative to `dir` (default: the working
    /// directory, as a user typed the paths).
    pub fn inputs_relative_to(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.shown_from = Some(dir.as_ref().to_path_buf());
        self
    }

    /// `path` as headers show it: relative to [`Config::inputs_relative_to`] (or the
    /// working directory) when it lies below it, else as given; `/` separated.
    fn shown(&self, path: &Path) -> String {
        let base = self
            .shown_from
            .clone()
            .or_else(|| std::env::current_dir().ok());
        let rel = match (path.is_absolute(), base) {
            (true, Some(b)) => path.strip_prefix(&b).ok(),
            (false, _) => Some(path),
            (true, None) => None,
        };
        match rel {
            Some(r) => r
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            None => path.display().to_string(),
        }
    }

    /// A document a plain JSON Schema's `$ref` may name outside itself: the file `path`,
    /// known as `uri` or, with `None`, by its own `$id` (OpenRPC's schema names the JSON
    /// Schema meta-schema it extends). Nothing is fetched.
    pub fn resource(&mut self, uri: Option<&str>, path: impl AsRef<Path>) -> &mut Self {
        self.resources
            .push((uri.map(str::to_string), path.as_ref().to_path_buf()));
        self
    }

    /// The resources, read.
    fn read_resources(&self) -> Result<contract::plain::Resources, GenError> {
        let given = (self.resources.iter()).map(|(uri, path)| (uri.as_deref(), path.as_path()));
        Ok(contract::plain::Resources::read(given)?)
    }

    /// Add a contract file.
    pub fn contract(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.contracts.push(path.as_ref().to_path_buf());
        self
    }

    /// Add several contract files.
    pub fn contracts<I: IntoIterator<Item = P>, P: AsRef<Path>>(&mut self, paths: I) -> &mut Self {
        for p in paths {
            self.contract(p);
        }
        self
    }

    /// Write here instead of `OUT_DIR`.
    pub fn out_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Choose the target language.
    pub fn lang(&mut self, lang: Lang) -> &mut Self {
        self.langs = vec![lang];
        self
    }

    /// Generate several targets in one run: the contracts are loaded and their IR built
    /// once, and each target's files are named `<lang>/…` (`rust/kernel.rs`).
    pub fn langs<I: IntoIterator<Item = Lang>>(&mut self, langs: I) -> &mut Self {
        self.langs = Vec::new();
        for l in langs {
            if !self.langs.contains(&l) {
                self.langs.push(l);
            }
        }
        self
    }

    /// Render template targets from the templates in `dir` (or `dir/<lang>`).
    pub fn templates(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.templates = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Refuse to generate from a contract that breaks peers built from its earlier
    /// version: `git:REV` (the same file at a revision), or a directory holding the
    /// earlier files under the same names. A breaking change is let through when the
    /// major version went up, or when [`Config::accept_breaking`] names it.
    pub fn breaking_against(&mut self, old: impl Into<String>) -> &mut Self {
        self.breaking_against = Some(old.into());
        self
    }

    /// Let one breaking finding through, named `RULE@POINTER` as `contractgen
    /// breaking` prints it (e.g. `limit-lowered@/limits/lineMax`).
    pub fn accept_breaking(&mut self, finding: impl Into<String>) -> &mut Self {
        self.accepted.push(finding.into());
        self
    }

    /// The breaking findings of `path` against its earlier version that nobody accepted.
    fn unannounced(&self, path: &Path, against: &str) -> Result<Vec<String>, GenError> {
        let old_spec = match against.strip_prefix("git:") {
            Some(rev) => format!("git:{rev}:{}", path.display()),
            None => Path::new(against)
                .join(path.file_name().unwrap_or_default())
                .display()
                .to_string(),
        };
        let read = |spec: &str| {
            crate::read_document(spec).map_err(|reason| GenError::Breaking {
                contract: path.display().to_string(),
                findings: reason,
            })
        };
        let (old, new) = (read(&old_spec)?, read(&path.display().to_string())?);
        let findings = crate::breaking::compare(&old, &new);
        if crate::breaking::announced(&old, &new, &findings) {
            return Ok(Vec::new());
        }
        Ok(findings
            .iter()
            .filter(|f| f.category() != crate::breaking::Category::Compatible)
            .map(|f| {
                let at = f
                    .new
                    .as_ref()
                    .or(f.old.as_ref())
                    .cloned()
                    .unwrap_or_default();
                (format!("{}@{at}", f.rule), f.to_string())
            })
            .filter(|(key, _)| !self.accepted.contains(key))
            .map(|(key, text)| format!("{key}: {}", text.trim()))
            .collect())
    }

    /// Generate every file without writing anything.
    pub fn generate(&self) -> Result<Vec<GeneratedFile>, GenError> {
        if let Some(against) = &self.breaking_against {
            for path in &self.contracts {
                let left = self.unannounced(path, against)?;
                if !left.is_empty() {
                    return Err(GenError::Breaking {
                        contract: path.display().to_string(),
                        findings: left.join("\n"),
                    });
                }
            }
        }
        // Contracts load, and targets render, independently: in parallel.
        let resources = self.read_resources()?;
        let irs = parallel(&self.contracts, |path| {
            let file = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let ir = Ir::build(contract::load_with(path, &resources)?)?;
            Ok(Loaded {
                ir,
                file,
                shown: self.shown(path),
            })
        })
        .into_iter()
        .collect::<Result<Vec<_>, GenError>>()?;
        if let [lang] = self.langs.as_slice() {
            return self.render(*lang, &irs);
        }
        let mut files = Vec::new();
        let rendered = parallel(&self.langs, |&lang| self.render(lang, &irs));
        for (lang, out) in self.langs.iter().zip(rendered) {
            files.extend(out?.into_iter().map(|f| GeneratedFile {
                name: format!("{}/{}", lang.dir(), f.name),
                contents: f.contents,
            }));
        }
        Ok(files)
    }

    /// One target's files for the built IRs (each with the name of its contract file).
    fn render(&self, lang: Lang, irs: &[Loaded]) -> Result<Vec<GeneratedFile>, GenError> {
        let target = match lang {
            Lang::Rust => {
                return irs
                    .iter()
                    .map(|l| {
                        Ok(GeneratedFile {
                            name: format!("{}.rs", l.ir.module),
                            contents: crate::rust::render(&l.ir, &l.file)?,
                        })
                    })
                    .collect();
            }
            Lang::Docs => &crate::docs::TARGET,
            Lang::Python => &crate::python::TARGET,
            Lang::Csharp => &crate::csharp::TARGET,
            Lang::Wireshark => &crate::wireshark::TARGET,
        };
        let irs: Vec<(&Ir, &str)> = irs.iter().map(|l| (&l.ir, l.shown.as_str())).collect();
        let dir = self.templates.as_deref();
        crate::sdk::generate(target, &irs, (dir, &self.package))
    }

    /// Generate and write into the output directory (default `OUT_DIR`), touching only
    /// files whose content changed, and tell cargo to rerun when a contract changes.
    pub fn compile(&self) -> Result<(), GenError> {
        let out = match &self.out_dir {
            Some(d) => d.clone(),
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or_else(|| GenError::Io {
                    path: "OUT_DIR".into(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "OUT_DIR is not set (call compile() from build.rs, or set out_dir)",
                    ),
                })?,
        };
        for p in &self.contracts {
            println!("cargo:rerun-if-changed={}", p.display());
        }
        for f in self.generate()? {
            write_file_if_changed(&out.join(&f.name), f.contents.as_bytes())?;
        }
        Ok(())
    }
}

/// `f` of each item, on as many threads as the machine runs at once, results in the
/// items' order. A panic in a thread is the same panic as in a one-thread run.
fn parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut out: Vec<Option<R>> = items.iter().map(|_| None).collect();
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
        for j in jobs {
            let done = j.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            for (i, r) in done {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter().flatten().collect()
}

/// Write `contents` to `path` unless it already holds exactly that; returns whether it wrote.
pub fn write_file_if_changed(path: &Path, contents: &[u8]) -> Result<bool, GenError> {
    let io = |source| GenError::Io {
        path: path.display().to_string(),
        source,
    };
    if std::fs::read(path).ok().as_deref() == Some(contents) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    std::fs::write(path, contents).map_err(io)?;
    Ok(true)
}
