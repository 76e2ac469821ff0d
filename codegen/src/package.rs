//! How a generated SDK is packaged, and the runtime package every SDK of a language
//! depends on.
//!
//! An SDK is thin generated code (prost-style): its Python package imports
//! `contract_runtime` and its C# assembly references `Contract.Runtime`, one versioned
//! package per language that `contractgen runtime` writes. The runtime's version is
//! contractgen's own, so a generator and the runtime its output needs are released
//! together; the SDK declares the range of runtimes it works with (the next minor for a
//! 0.x version, the next major after), and the Python module checks it again on import.
//!
//! [`Package`] holds what a team names its SDK: the Python import and distribution names,
//! the C# namespace and assembly, and the version. Two SDKs with different names install
//! side by side and share one runtime.

use serde::Serialize;
use serde_json::json;

use crate::config::{GeneratedFile, Lang};
use crate::ir::GenError;
use crate::sdk::Template;

/// The runtime's version: contractgen's.
pub const RUNTIME_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The runtime's Python distribution name.
pub const RUNTIME_DIST: &str = "contract-runtime";
/// The runtime's Python import name.
pub const RUNTIME_MODULE: &str = "contract_runtime";
/// The runtime's C# namespace and assembly name.
pub const RUNTIME_ASSEMBLY: &str = "Contract.Runtime";

/// The runtime packages' templates, by language.
const PYTHON_RUNTIME: &[Template] = &[
    (
        "pyproject.toml.hbs",
        include_str!("../templates/runtime/python/pyproject.toml.hbs"),
    ),
    (
        "contract_runtime/__init__.py.hbs",
        include_str!("../templates/runtime/python/contract_runtime/__init__.py.hbs"),
    ),
    (
        "contract_runtime/py.typed.hbs",
        include_str!("../templates/runtime/python/contract_runtime/py.typed.hbs"),
    ),
];
const CSHARP_RUNTIME: &[Template] = &[
    (
        "Contract.Runtime.csproj.hbs",
        include_str!("../templates/runtime/csharp/Contract.Runtime.csproj.hbs"),
    ),
    (
        "ContractRuntime.cs.hbs",
        include_str!("../templates/runtime/csharp/ContractRuntime.cs.hbs"),
    ),
];

/// What a generated SDK is called and which version it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    python: String,
    distribution: Option<String>,
    namespace: String,
    assembly: Option<String>,
    version: String,
}

impl Default for Package {
    fn default() -> Self {
        Package {
            python: "contract_sdk".into(),
            distribution: None,
            namespace: "Contract.Sdk".into(),
            assembly: None,
            version: "0.1.0".into(),
        }
    }
}

/// Why a package option was refused.
fn bad(option: &str, value: &str, why: &str) -> GenError {
    GenError::Package(format!("{option} {value:?}: {why}"))
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Package {
    /// The Python import name (`contract_sdk`).
    pub fn set_python(&mut self, name: &str) -> Result<(), GenError> {
        if !is_identifier(name) || name == RUNTIME_MODULE {
            return Err(bad(
                "--package",
                name,
                "a Python package name is one identifier (letters, digits, _), not contract_runtime",
            ));
        }
        self.python = name.into();
        Ok(())
    }

    /// The Python distribution name (default: the import name with `-` for `_`).
    pub fn set_distribution(&mut self, name: &str) -> Result<(), GenError> {
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok || normalise(name) == RUNTIME_DIST {
            return Err(bad(
                "--distribution",
                name,
                "a distribution name is letters, digits, -, _ and ., starting and ending with a letter or digit",
            ));
        }
        self.distribution = Some(name.into());
        Ok(())
    }

    /// The C# namespace the contracts' namespaces sit under (`Contract.Sdk`).
    pub fn set_namespace(&mut self, ns: &str) -> Result<(), GenError> {
        self.namespace = dotted("--namespace", ns)?;
        Ok(())
    }

    /// The C# assembly (and project file) name (default: the namespace).
    pub fn set_assembly(&mut self, name: &str) -> Result<(), GenError> {
        self.assembly = Some(dotted("--assembly", name)?);
        Ok(())
    }

    /// The version both packages carry.
    pub fn set_version(&mut self, v: &str) -> Result<(), GenError> {
        if semver(v).is_none() {
            return Err(bad(
                "--package-version",
                v,
                "a version is MAJOR.MINOR.PATCH (both package formats read it)",
            ));
        }
        self.version = v.into();
        Ok(())
    }

    /// The Python import name.
    pub fn python(&self) -> &str {
        &self.python
    }

    /// The C# assembly name.
    pub fn assembly(&self) -> &str {
        self.assembly.as_deref().unwrap_or(&self.namespace)
    }

    /// What the templates see as `package`.
    pub fn context(&self) -> PackageContext<'_> {
        PackageContext {
            python: &self.python,
            distribution: (self.distribution.clone())
                .unwrap_or_else(|| self.python.replace('_', "-")),
            namespace: &self.namespace,
            assembly: self.assembly(),
            version: &self.version,
            runtime: RuntimeContext::get(),
        }
    }
}

/// `name` as a C# namespace or assembly name: dot-separated identifiers, not the runtime's.
fn dotted(option: &str, name: &str) -> Result<String, GenError> {
    if !name.split('.').all(is_identifier) || name == RUNTIME_ASSEMBLY {
        return Err(bad(
            option,
            name,
            "a C# name is dot-separated identifiers, not Contract.Runtime",
        ));
    }
    Ok(name.into())
}

/// PEP 503's name normalisation, enough to compare with the runtime's name.
fn normalise(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

fn semver(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().ok());
    let out = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(out)
}

/// The runtime's name, version and the range of runtimes an SDK of this generator accepts.
/// An SDK's names, as the templates see them (`package`).
#[derive(Serialize)]
pub struct PackageContext<'a> {
    pub python: &'a str,
    pub distribution: String,
    pub namespace: &'a str,
    pub assembly: &'a str,
    pub version: &'a str,
    pub runtime: RuntimeContext,
}

/// The runtime package's names, its version and the `below` bound of the range an SDK
/// accepts.
#[derive(Serialize)]
pub struct RuntimeContext {
    pub version: &'static str,
    pub below: String,
    pub distribution: &'static str,
    pub module: &'static str,
    pub assembly: &'static str,
}

impl RuntimeContext {
    fn get() -> RuntimeContext {
        RuntimeContext {
            version: RUNTIME_VERSION,
            below: below(RUNTIME_VERSION),
            distribution: RUNTIME_DIST,
            module: RUNTIME_MODULE,
            assembly: RUNTIME_ASSEMBLY,
        }
    }
}

/// The first version past the series of `version` that an SDK generated for it accepts: the
/// next minor while the major is 0, else the next major (the SDKs' dependency ranges, and
/// the Python modules' import-time check, read it from here).
fn below(version: &str) -> String {
    match semver(version).unwrap_or((0, 0, 0)) {
        (0, minor, _) => format!("0.{}", minor + 1),
        (major, _, _) => format!("{}", major + 1),
    }
}

/// The runtime package of `lang` (Python or C#), ready to install or build.
pub fn runtime(lang: Lang) -> Result<Vec<GeneratedFile>, GenError> {
    let (name, templates) = match lang {
        Lang::Python => ("runtime/python", PYTHON_RUNTIME),
        Lang::Csharp => ("runtime/csharp", CSHARP_RUNTIME),
        other => {
            return Err(GenError::Package(format!(
                "--lang {}: only python and csharp have a runtime package",
                other.dir()
            )));
        }
    };
    let ctx = json!({ "runtime": RuntimeContext::get() });
    crate::sdk::render_each(name, templates, &ctx)
}

#[cfg(test)]
mod tests {
    use super::below;

    #[test]
    fn an_sdk_accepts_its_runtime_series() {
        assert_eq!(below("0.1.0"), "0.2");
        assert_eq!(below("0.1.4"), "0.2");
        assert_eq!(below("1.1.0"), "2");
        assert_eq!(below("2.3.4"), "3");
    }
}
