//! What the conformance tests share: run `contract-proxy conformance` as a child
//! with a deadline and read its PASS/FAIL/SKIP lines and JUnit file; build the
//! reference peers and generate their Python SDK once per test binary.
#![allow(dead_code)] // each test file uses a part

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The proxy binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_contract-proxy");

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The directory the binaries are built into (the one holding contract-proxy).
pub fn bin_dir() -> PathBuf {
    Path::new(BIN).parent().expect("bin dir").to_path_buf()
}

/// Build the workspace's binaries (the reference peers among them) into the target
/// directory that holds contract-proxy, then check that `packages`' binaries are there.
///
/// The selection is the whole workspace with every target, as in scripts/test.sh's
/// build: cargo unifies features over the packages it is asked for, so building
/// `-p rukh-core` alone resolves different features for shared dependencies and
/// compiles most of them a second time. With the same selection this is a no-op
/// after the test build.
///
/// The variables cargo sets for a test process (CARGO_MANIFEST_DIR, CARGO_PKG_*, ...)
/// are not passed on: build scripts that track them (ring's does) would see them
/// change and rebuild half the tree, twice per run.
pub fn cargo_build(packages: &[&str]) {
    let target = bin_dir().parent().expect("target dir").to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let per_test = [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
        ]
        .iter()
        .any(|p| k.starts_with(p))
            || ["CARGO_TARGET_TMPDIR", "CARGO_PRIMARY_PACKAGE", "OUT_DIR"].contains(&&*k);
        if per_test {
            cmd.env_remove(&*k);
        }
    }
    let st = cmd
        .current_dir(root())
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "-q", "--workspace", "--all-targets"])
        .status()
        .expect("run cargo build");
    assert!(st.success(), "cargo build --workspace --all-targets failed");
    for p in packages {
        let bin = bin_dir().join(p);
        assert!(bin.exists(), "{} was not built", bin.display());
    }
}

/// The peers' Python (`PEERS_PYTHON` or `PY`, else the repo's `.venv-peers`).
pub fn peers_python() -> PathBuf {
    let p = std::env::var_os("PEERS_PYTHON")
        .or_else(|| std::env::var_os("PY"))
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-peers/bin/python"));
    assert!(
        p.exists(),
        "peer venv missing at {}: run scripts/peers-venv.sh (or set PEERS_PYTHON)",
        p.display()
    );
    p
}

/// The Python SDK of `contract`, generated once per test binary (never committed),
/// by `CONTRACTGEN` or the contractgen next to contract-proxy (built if missing), with the
/// `contract_runtime` package it imports in `<dir>-runtime` (see [`python_path`]).
pub fn python_sdk(contract: &str) -> PathBuf {
    static SDKS: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut sdks = SDKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = sdks.get(contract) {
        return p.clone();
    }
    let cgen = std::env::var_os("CONTRACTGEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| bin_dir().join("contractgen"));
    if !cgen.exists() {
        cargo_build(&["contractgen"]);
    }
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("conformance-{contract}-sdk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut runtime = out.clone().into_os_string();
    runtime.push("-runtime");
    let _ = std::fs::remove_dir_all(&runtime);
    let mut generate = Command::new(&cgen);
    generate
        .args(["generate", "--lang", "python", "--out"])
        .arg(&out)
        .arg(root().join(format!("schema/contracts/{contract}.json")));
    let mut write_runtime = Command::new(&cgen);
    write_runtime
        .args(["runtime", "--lang", "python", "--out"])
        .arg(&runtime);
    for mut cmd in [generate, write_runtime] {
        let st = cmd.stdout(Stdio::null()).status().expect("run contractgen");
        assert!(st.success(), "{cmd:?} failed: {st}");
    }
    sdks.insert(contract.to_string(), out.clone());
    out
}

/// PYTHONPATH for the Python SDK of `contract` ([`python_sdk`]) and its runtime.
pub fn python_path(contract: &str) -> String {
    let sdk = python_sdk(contract);
    format!("{0}:{0}-runtime", sdk.display())
}

/// `contract-proxy conformance ARGS` (with the Python SDK of `sdk` on PYTHONPATH),
/// finished within `limit`.
pub fn conformance(args: &[&str], sdk: Option<&str>, limit: Duration) -> Run {
    conformance_env(args, sdk, &[], limit)
}

/// [`conformance`] with extra environment variables (the time scale, say).
pub fn conformance_env(
    args: &[&str],
    sdk: Option<&str>,
    env: &[(&str, &str)],
    limit: Duration,
) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.envs(env.iter().copied());
    cmd.arg("conformance")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(contract) = sdk {
        cmd.env("PYTHONPATH", python_path(contract));
    }
    finish(cmd.spawn().expect("start contract-proxy"), limit)
}

/// Every check id `conformance --list` gives for `contract` played as `play`: the checks
/// derived from the contract first (the handshake leading), then `hand_written`, in order.
pub fn listed_ids(contract: &str, play: &str, target: &str, hand_written: &[&str]) -> Vec<String> {
    let args = [
        "--contract",
        contract,
        "--play",
        play,
        "--target",
        target,
        "--list",
    ];
    let r = conformance(&args, None, Duration::from_secs(30));
    assert_eq!(r.code, 0, "{}", show(&r));
    let ids: Vec<String> = r
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let (derived, hand) = ids.split_at(ids.len().saturating_sub(hand_written.len()));
    assert_eq!(hand, hand_written, "{}", show(&r));
    let prefix = format!("{contract}.derived.");
    assert!(
        derived.len() > 10
            && derived.iter().all(|d| d.starts_with(&prefix))
            && derived[0] == format!("{prefix}handshake"),
        "{}",
        show(&r)
    );
    ids
}

/// The JUnit file a run wrote, and the check id of each test case in it.
pub fn junit_ids(path: &Path) -> (quick_junit::Report, Vec<String>) {
    let xml = std::fs::read_to_string(path).expect("junit written");
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("well-formed JUnit XML");
    let ids = report
        .test_suites
        .iter()
        .flat_map(|s| s.test_cases.iter())
        .map(|c| c.name.as_str().split(':').next().unwrap_or("").to_string())
        .collect();
    (report, ids)
}

/// A file path `name` in a fresh temporary directory (kept alive by the guard).
pub fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join(name);
    (dir, p)
}

/// One finished suite run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Every check line as (PASS|FAIL|SKIP, check id).
    pub fn lines(&self) -> Vec<(String, String)> {
        self.stdout
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let tag = w.next()?;
                ["PASS", "FAIL", "SKIP"]
                    .contains(&tag)
                    .then(|| (tag.to_string(), w.next().unwrap_or("").to_string()))
            })
            .collect()
    }

    /// The ids of the checks with this tag.
    pub fn with(&self, tag: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, id)| id)
            .collect()
    }
}

/// A run for a failure message.
pub fn show(r: &Run) -> String {
    format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        r.code, r.stdout, r.stderr
    )
}

/// Wait for `child` at most `limit`, killing it after; stdout and stderr read on threads.
pub fn finish(mut child: Child, limit: Duration) -> Run {
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st.code().unwrap_or(-1);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        code,
        stdout: t_out.join().expect("stdout thread"),
        stderr: t_err.join().expect("stderr thread"),
    }
}

/// A Python peer script (tests/peers/) run with the peers' Python, reporting JSON
/// lines on stdout (`{"event": …}`); killed when dropped.
pub struct PyPeer {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl PyPeer {
    /// Start `script` with `args`.
    pub fn start(script: &str, args: &[&str]) -> PyPeer {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(peers_python())
            .arg(root().join("proxy/tests/peers").join(script))
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{script} starts: {e}"));
        let out = child.stdout.take().expect("stdout");
        PyPeer {
            child,
            lines: tokio::io::BufReader::new(out).lines(),
        }
    }

    /// The next report line, whatever its event.
    pub async fn next(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .expect("a peer report in time")
            .expect("read the peer's stdout")
            .expect("the peer still runs (websockets missing? run scripts/peers-venv.sh)");
        serde_json::from_str(&line).expect("a JSON line")
    }

    /// The next report with `"event": name`, skipping others.
    pub async fn event(&mut self, name: &str) -> serde_json::Value {
        loop {
            let v = self.next().await;
            if v["event"] == name {
                return v;
            }
        }
    }

    /// The port of its `{"event": "listening", "port": N}` report.
    pub async fn port(&mut self) -> u16 {
        let v = self.event("listening").await;
        v["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .expect("a port")
    }

    /// Kill it now (a peer that dies).
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill the peer");
    }
}

/// Write `recs` to a new recording at `path` through the proxy's recorder (each queued
/// and the whole finished within a deadline); what the recorder wrote.
pub async fn write_recording(
    path: &Path,
    header: contract_proxy::record::Header,
    recs: Vec<contract_proxy::record::Record>,
) -> contract_proxy::record::RecordStats {
    const LIMIT: Duration = Duration::from_secs(20);
    let rec = contract_proxy::record::Recorder::create(path, header).expect("create");
    for r in recs {
        tokio::time::timeout(LIMIT, rec.record(r))
            .await
            .expect("in time")
            .expect("queued");
    }
    tokio::time::timeout(LIMIT, rec.finish())
        .await
        .expect("in time")
        .expect("finished")
}

/// examples/pcap_check.py: the capture `run --pcap` wrote reads in tshark, with
/// `contract`'s generated Wireshark dissector, frame by frame as the proxy logged it.
pub fn pcap_check(contract: &Path, pcap: &Path, log: &Path) {
    cargo_build(&["contractgen"]);
    let check = Command::new(peers_python())
        .arg(root().join("examples/pcap_check.py"))
        .arg(contract)
        .arg(pcap)
        .arg(log)
        .env("CONTRACTGEN", bin_dir().join("contractgen"))
        .output()
        .expect("pcap_check");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}
