//! contractgen's speed beside quicktype's on the same schemas, in one run (issue 24).
//!
//! Three timings over every contract in schema/contracts, each the median of
//! GENERATE_BENCH_ROUNDS runs (default 7; quicktype: GENERATE_BENCH_QT_ROUNDS, default 3):
//! 1. `contractgen generate --lang all`: one process, all four targets;
//! 2. `contractgen generate --lang L`, one process per target, as a build ran before;
//! 3. quicktype (npm `quicktype@26`), one process per output, for the targets both tools
//!    have (Rust, Python, C#), from a JSON Schema holding the contract's `$defs` with a
//!    top-level object referring to each, so that every type is generated.
//!
//! quicktype is taken from $QUICKTYPE, else target/bench-tools, where it is installed
//! with npm when missing; without npm the baseline is skipped and says how to get it.
//! The load average is printed before and after; a run that starts with more than half
//! the cores busy is marked as under load.
//!
//! `cargo bench -p contractgen --bench generate`

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The targets quicktype has too, as its `--lang` spells them.
const SHARED_TARGETS: [&str; 3] = ["rust", "python", "csharp"];
const ALL_TARGETS: [&str; 4] = ["rust", "docs", "python", "csharp"];
const QUICKTYPE: &str = "quicktype@26";

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn contracts() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("schema/contracts"))
        .expect("schema/contracts")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.sort();
    out
}

/// Run `cmd` to success; its wall time.
fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let st = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    assert!(st.success(), "{cmd:?} failed: {st}");
    start.elapsed()
}

fn median(rounds: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut v: Vec<Duration> = (0..rounds).map(|_| f()).collect();
    v.sort();
    v[v.len() / 2]
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// quicktype's binary: $QUICKTYPE, or the copy under target/bench-tools (installed now if
/// npm is here); None, with the reason printed, when neither can be had.
fn quicktype() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("QUICKTYPE") {
        return Some(PathBuf::from(p));
    }
    let dir = root().join("target/bench-tools");
    let bin = dir.join("node_modules/.bin/quicktype");
    if bin.exists() {
        return Some(bin);
    }
    let _ = std::fs::create_dir_all(&dir);
    let installed = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .arg(QUICKTYPE)
        .stdout(Stdio::null())
        .status();
    match installed {
        Ok(st) if st.success() && bin.exists() => Some(bin),
        other => {
            println!(
                "quicktype baseline skipped: `npm install --prefix {} {QUICKTYPE}` failed ({other:?}); or set QUICKTYPE",
                dir.display()
            );
            None
        }
    }
}

/// One JSON Schema per contract: its `$defs`, and a top-level object referring to each.
fn schemas(contracts: &[PathBuf], dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for c in contracts {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(c).expect("contract")).expect("json");
        let defs = doc["$defs"].as_object().cloned().unwrap_or_default();
        let props: serde_json::Map<String, serde_json::Value> = (defs.keys())
            .map(|k| {
                (
                    k.clone(),
                    serde_json::json!({"$ref": format!("#/$defs/{k}")}),
                )
            })
            .collect();
        let schema = serde_json::json!({
            "$defs": defs, "type": "object", "properties": props,
        });
        let stem = c.file_stem().expect("stem").to_string_lossy().into_owned();
        let path = dir.join(format!("{stem}.schema.json"));
        std::fs::write(&path, schema.to_string()).expect("write schema");
        out.push(path);
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let rounds = env_num("GENERATE_BENCH_ROUNDS", 7);
    let qt_rounds = env_num("GENERATE_BENCH_QT_ROUNDS", 3);
    let exe = env!("CARGO_BIN_EXE_contractgen");
    let contracts = contracts();
    let n = contracts.len();
    let tmp = tempfile::tempdir().expect("tempdir");
    let load_before = load();
    let generate = |langs: &str, out: &Path| {
        let mut c = Command::new(exe);
        c.args(["generate", "--lang", langs, "--out"])
            .arg(out)
            .args(&contracts);
        timed(&mut c)
    };
    let all = median(rounds, || generate("all", &tmp.path().join("all")));
    let apart = median(rounds, || {
        (ALL_TARGETS.iter())
            .map(|l| generate(l, &tmp.path().join(l)))
            .sum()
    });
    let shared = SHARED_TARGETS.join(",");
    let same = median(rounds, || generate(&shared, &tmp.path().join("shared")));
    println!("contracts: {n} (schema/contracts)");
    println!("{:<52} {:>7} {:>10}", "run", "outputs", "median ms");
    let row = |what: &str, outputs: usize, d: Duration| {
        println!("{what:<52} {outputs:>7} {:>10.1}", ms(d));
    };
    row("contractgen --lang all (one process)", 4 * n, all);
    row(
        "contractgen --lang L (one process per target)",
        4 * n,
        apart,
    );
    row("contractgen --lang rust,python,csharp", 3 * n, same);
    if let Some(qt) = quicktype() {
        let inputs = schemas(&contracts, tmp.path());
        let qt_time = median(qt_rounds, || {
            let mut total = Duration::ZERO;
            for (s, lang) in inputs.iter().flat_map(|s| SHARED_TARGETS.map(|l| (s, l))) {
                let out = tmp.path().join(format!("qt.{lang}"));
                let mut c = Command::new(&qt);
                c.args([
                    "--src-lang",
                    "schema",
                    "--lang",
                    lang,
                    "--top-level",
                    "Types",
                ])
                .arg("--out")
                .arg(&out)
                .arg(s);
                total += timed(&mut c);
            }
            total
        });
        row("quicktype (one process per output)", 3 * n, qt_time);
        println!(
            "ratio quicktype / contractgen, same three targets: {:.1}x; against all four targets in one process: {:.1}x",
            qt_time.as_secs_f64() / same.as_secs_f64(),
            qt_time.as_secs_f64() / all.as_secs_f64()
        );
    }
    println!(
        "ratio one process / one per target: {:.2}",
        all.as_secs_f64() / apart.as_secs_f64()
    );
    let load_after = load();
    // The run itself keeps the cores busy; what was running before it is the load.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let busy = load_before.parse::<f64>().is_ok_and(|v| v > 0.5 * cores);
    println!(
        "load average (1 min): {load_before} before, {load_after} after{}",
        if busy { "  [UNDER LOAD]" } else { "" }
    );
}
