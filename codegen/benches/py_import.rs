//! Import time of each generated Python SDK module beside msgspec's own (issue 18 item 6).
//!
//! The SDK is generated for every built-in contract, the jobs fixture and the schema corpus
//! (codegen/tests/corpus, assembled for Python), byte-compiled as `pip install` does, and
//! each module imported in a fresh interpreter under `python -X importtime`,
//! PY_IMPORT_ROUNDS times (default 7, the best kept). msgspec is the baseline, from the same
//! runs: its cumulative time in each module's own listing. Printed per module: its own
//! (self) time, the runtime's, the whole import, msgspec's, what the module costs beyond
//! msgspec, and that against the 30 ms goal.
//!
//! The interpreter is .venv-py's (scripts/setup.sh py), or $PY.
//!
//! `cargo bench -p contractgen --bench py_import`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The goal: a module imports in at most this much beyond msgspec.
const GOAL_MS: f64 = 30.0;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    std::env::var_os("PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-py/bin/python"))
}

fn run(cmd: &mut Command) -> Result<String, String> {
    ran(cmd).map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `cmd`'s output, once it succeeded.
fn ran(cmd: &mut Command) -> Result<std::process::Output, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out)
}

/// A `$ref` outside its document, read from a local copy: the URI and the file.
type Resource = (String, PathBuf);

/// The contracts: the built-ins, the jobs fixture and the corpus entries Python runs; and
/// the resources the entries' `$ref`s outside themselves are read from (assemble.py prints
/// them as `--resource URI=FILE`, as the SDK suites pass them to contractgen).
fn contracts(dir: &Path) -> Result<(Vec<PathBuf>, Vec<Resource>), String> {
    let corpus = root().join("codegen/tests/corpus/assemble.py");
    let listed = ran(Command::new(python()).arg(corpus).arg("python").arg(dir))?;
    let resources = (String::from_utf8_lossy(&listed.stdout).lines())
        .filter_map(|l| l.split_once('='))
        .map(|(uri, file)| (uri.to_string(), PathBuf::from(file)))
        .collect();
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("schema/contracts"))
        .map_err(|e| e.to_string())?
        .chain(std::fs::read_dir(dir).map_err(|e| e.to_string())?)
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.push(root().join("proxy/tests/fixtures/jobs.json"));
    out.sort();
    Ok((out, resources))
}

/// `-X importtime` of one import: module name → (self µs, cumulative µs).
fn importtime(pkg: &Path, module: &str) -> Result<BTreeMap<String, (u64, u64)>, String> {
    let listing = run(Command::new(python())
        .args(["-X", "importtime", "-c", &format!("import {module}")])
        .env(
            "PYTHONPATH",
            std::env::join_paths([pkg.to_path_buf(), pkg.join("runtime")])
                .map_err(|e| e.to_string())?,
        ))?;
    let mut out = BTreeMap::new();
    for line in listing.lines() {
        let Some(rest) = line.strip_prefix("import time:") else {
            continue;
        };
        let cols: Vec<&str> = rest.split('|').map(str::trim).collect();
        if let [own, cumulative, name] = cols.as_slice()
            && let (Ok(o), Ok(c)) = (own.parse(), cumulative.parse())
        {
            out.insert(name.to_string(), (o, c));
        }
    }
    Ok(out)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn main() -> Result<(), String> {
    let rounds: usize = std::env::var("PY_IMPORT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(7);
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (inputs, pkg) = (work.path().join("contracts"), work.path().join("pkg"));
    let (files, resources) = contracts(&inputs)?;
    let mut cfg = contractgen::Config::new();
    cfg.contracts(&files).lang(contractgen::Lang::Python);
    for (uri, file) in &resources {
        cfg.resource(Some(uri), file);
    }
    let runtime = contractgen::runtime(contractgen::Lang::Python).map_err(|e| e.to_string())?;
    let sdk = cfg.generate().map_err(|e| e.to_string())?;
    let placed = sdk.iter().map(|f| (pkg.join(&f.name), f)).chain(
        runtime
            .iter()
            .map(|f| (pkg.join("runtime").join(&f.name), f)),
    );
    for (path, f) in placed {
        contractgen::write_file_if_changed(&path, f.contents.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    run(Command::new(python())
        .args(["-m", "compileall", "-q"])
        .arg(&pkg))?;
    let mut modules: Vec<String> = std::fs::read_dir(pkg.join("contract_sdk"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".py").map(str::to_string))
        .filter(|m| !m.starts_with('_'))
        .collect();
    modules.sort();
    println!(
        "python -X importtime, best of {rounds}, {} modules (ms)",
        modules.len()
    );
    println!(
        "{:<36} {:>7} {:>8} {:>8} {:>8} {:>8}  goal",
        "module", "self", "runtime", "total", "msgspec", "beyond"
    );
    let mut worst: f64 = 0.0;
    for m in &modules {
        let name = format!("contract_sdk.{m}");
        let mut best: Option<(u64, u64, u64, u64)> = None;
        for _ in 0..rounds {
            let t = importtime(&pkg, &name)?;
            let get = |k: &str| t.get(k).copied().unwrap_or_default();
            let row = (
                get(&name).0,
                get(contractgen::package::RUNTIME_MODULE).0,
                get(&name).1,
                get("msgspec").1,
            );
            if best.is_none_or(|b| row.2 < b.2) {
                best = Some(row);
            }
        }
        let Some((own, runtime, total, msgspec)) = best else {
            continue;
        };
        let beyond = ms(total.saturating_sub(msgspec));
        worst = worst.max(beyond);
        println!(
            "{m:<36} {:>7.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}  {}",
            ms(own),
            ms(runtime),
            ms(total),
            ms(msgspec),
            beyond,
            if beyond <= GOAL_MS { "ok" } else { "OVER" }
        );
    }
    println!(
        "worst beyond msgspec: {worst:.1} ms of the {GOAL_MS} ms goal ({:.2}x)",
        worst / GOAL_MS
    );
    Ok(())
}
