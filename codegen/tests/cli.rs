//! The `contractgen` binary as a user runs it: exit codes, output format, and
//! the committed meta-schema being fresh.

use assert_cmd::Command;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn contractgen() -> Command {
    let mut c = Command::cargo_bin("contractgen").expect("binary built");
    c.current_dir(root());
    c
}

#[test]
fn committed_meta_schema_is_fresh() {
    let committed = std::fs::read_to_string(root().join("schema/contract.schema.json"))
        .expect("committed meta-schema");
    assert!(
        committed == contractgen::meta_schema_text(),
        "schema/contract.schema.json is stale: run `cargo run -p contractgen -- meta-schema --out schema/contract.schema.json`"
    );
}

#[test]
fn check_passes_on_all_four_contracts() {
    let out = contractgen()
        .args([
            "check",
            "schema/contracts/kernel.json",
            "schema/contracts/xsession.json",
            "schema/contracts/rukh.json",
            "schema/contracts/toolchannel.json",
        ])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_accepts_builtin_names() {
    contractgen()
        .args(["check", "kernel", "rukh"])
        .assert()
        .code(0);
}

fn broken(edit: impl FnOnce(&mut serde_json::Value)) -> (tempfile::TempDir, PathBuf) {
    let text = std::fs::read_to_string(root().join("schema/contracts/toolchannel.json"))
        .expect("contract");
    let mut doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    edit(&mut doc);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("ser")).expect("write");
    (dir, path)
}

fn stdout_of_failed_check(path: &PathBuf) -> String {
    let out = contractgen().arg("check").arg(path).output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "check must exit 1 on a broken contract"
    );
    String::from_utf8(out.stdout).expect("utf8")
}

#[test]
fn dangling_error_reference_exits_1_with_pointer() {
    let (_d, p) = broken(|d| {
        let name = d["methods"]
            .as_object()
            .expect("methods")
            .iter()
            .find(|(_, m)| m.get("errors").is_some())
            .map(|(n, _)| n.clone())
            .expect("a method with errors");
        d["methods"][&name]["errors"][0] = serde_json::json!(-31999);
    });
    let out = stdout_of_failed_check(&p);
    assert!(
        out.contains("/errors/0: error code -31999 is not in the error catalog [error-ref]"),
        "{out}"
    );
    assert!(out.contains("broken.json#/methods/"), "{out}");
}

#[test]
fn duplicate_code_exits_1_with_pointer() {
    let (_d, p) = broken(|d| {
        let first = d["errors"][0].clone();
        d["errors"].as_array_mut().expect("errors").push(first);
    });
    let out = stdout_of_failed_check(&p);
    assert!(
        out.contains("#/errors/") && out.contains("[duplicate-code]"),
        "{out}"
    );
}

#[test]
fn bad_example_exits_1_with_pointer() {
    let (_d, p) = broken(|d| {
        d["methods"]["initialize"]["examples"][0]["message"]["jsonrpc"] = serde_json::json!("1.0");
    });
    let out = stdout_of_failed_check(&p);
    assert!(
        out.contains(
            "#/methods/initialize/examples/0/message: `jsonrpc` must be \"2.0\" [bad-example]"
        ),
        "{out}"
    );
}

#[test]
fn missing_file_is_a_usage_error() {
    contractgen()
        .args(["check", "no/such/contract.json"])
        .assert()
        .code(2);
}

#[test]
fn no_arguments_is_a_usage_error() {
    contractgen().arg("check").assert().code(2);
}

#[test]
fn not_json_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("x.json");
    std::fs::write(&p, "{ nope").expect("write");
    contractgen().arg("check").arg(&p).assert().code(1);
}

/// A contract we did not build in (examples/lsp/lsp.json) draws its lifecycle with the
/// typed triggers on the edges, from whatever path it is given.
#[test]
fn docs_draw_typed_triggers_on_machine_edges() {
    let out = tempfile::tempdir().expect("tempdir");
    contractgen()
        .args(["generate", "--lang", "docs", "--out"])
        .arg(out.path())
        .arg(root().join("examples/lsp/lsp.json"))
        .assert()
        .success();
    let page = std::fs::read_to_string(out.path().join("lsp.md")).expect("lsp.md");
    let c = contract::load(&root().join("examples/lsp/lsp.json")).expect("loads");
    let sm = &c.state_machines["lifecycle"];
    let labelled = page
        .lines()
        .filter(|l| l.contains(" --> ") && l.contains(" : "))
        .count();
    let typed = sm
        .transitions
        .iter()
        .filter(|t| t.trigger.is_some())
        .count();
    assert!(
        typed > 0 && labelled == typed,
        "{labelled} labelled edges for {typed} typed triggers:\n{page}"
    );
    assert!(
        page.contains("Starting --> Initializing : initialize response from server"),
        "{page}"
    );
}

/// The files under `dir`, by path relative to it.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).expect("under dir").to_path_buf();
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

#[test]
fn one_run_of_every_target_writes_what_each_target_writes_alone() {
    let contracts: Vec<PathBuf> = std::fs::read_dir(root().join("schema/contracts"))
        .expect("contracts")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let all = dir.path().join("all");
    contractgen()
        .args(["generate", "--lang", "all", "--out"])
        .arg(&all)
        .args(&contracts)
        .assert()
        .success();
    let mut alone = std::collections::BTreeMap::new();
    for lang in contractgen::Lang::ALL.map(contractgen::Lang::dir) {
        let out = dir.path().join(lang);
        contractgen()
            .args(["generate", "--lang", lang, "--out"])
            .arg(&out)
            .args(&contracts)
            .assert()
            .success();
        for (rel, bytes) in tree(&out) {
            alone.insert(PathBuf::from(lang).join(rel), bytes);
        }
    }
    let together = tree(&all);
    assert_eq!(
        together.keys().collect::<Vec<_>>(),
        alone.keys().collect::<Vec<_>>()
    );
    assert!(together == alone, "a file differs between the runs");
    // A list of targets is the same run; --check reads the same layout.
    contractgen()
        .args(["generate", "--lang", "python,csharp", "--check", "--out"])
        .arg(&all)
        .args(&contracts)
        .assert()
        .success();
    std::fs::write(all.join("docs/kernel.md"), "edited").expect("edit");
    let out = contractgen()
        .args(["generate", "--lang", "rust,docs", "--check", "--out"])
        .arg(&all)
        .args(&contracts)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("docs/kernel.md"), "{out}");
}

/// Every contract file the project holds, built in or a test fixture that no built-in
/// shaped (pipes.json's claim releases without `matches` once broke the docs), renders in
/// every target.
#[test]
fn every_contract_the_project_holds_renders_in_every_target() {
    let mut contracts = Vec::new();
    for dir in ["schema/contracts", "proxy/tests/fixtures"] {
        let found = std::fs::read_dir(root().join(dir)).expect("contracts");
        contracts.extend(
            found
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json")),
        );
    }
    contracts.sort();
    assert!(contracts.len() > 4, "{contracts:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    contractgen()
        .args(["generate", "--lang", "all", "--out"])
        .arg(dir.path())
        .args(&contracts)
        .assert()
        .success();
}

/// The generated headers name the contract as the user gave it, relative to the working
/// directory: a relative path as typed, an absolute one below the working directory
/// made relative, one elsewhere as given.
#[test]
fn headers_name_the_input_path_as_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let protos = dir.path().join("protos");
    std::fs::create_dir(&protos).expect("mkdir");
    std::fs::copy(
        root().join("schema/contracts/mcp.json"),
        protos.join("my-mcp.json"),
    )
    .expect("copy");
    let header = |arg: &str, lang: &str, file: &str| {
        let out = dir.path().join(format!("out-{lang}"));
        contractgen()
            .current_dir(dir.path())
            .args(["generate", "--lang", lang, "--out"])
            .arg(&out)
            .arg(arg)
            .assert()
            .success();
        let text = std::fs::read_to_string(out.join(file)).expect("generated");
        text.lines().take(2).collect::<Vec<_>>().join("\n")
    };
    let absolute = protos.join("my-mcp.json");
    for (arg, lang, file) in [
        ("protos/my-mcp.json", "docs", "mcp.md"),
        (absolute.to_str().expect("utf-8"), "wireshark", "mcp.lua"),
        ("./protos/my-mcp.json", "python", "contract_sdk/mcp.py"),
    ] {
        let h = header(arg, lang, file);
        assert!(
            h.contains("from protos/my-mcp.json") || h.contains("from ./protos/my-mcp.json"),
            "{lang} from {arg}: {h}"
        );
        assert!(!h.contains("schema/contracts"), "{lang}: {h}");
    }
    // Outside the working directory: the path as given.
    let elsewhere = root().join("schema/contracts/mcp.json");
    let h = header(elsewhere.to_str().expect("utf-8"), "csharp", "mcp.cs");
    assert!(h.contains(&format!("from {}", elsewhere.display())), "{h}");
}

/// An SDK is named and versioned by the options a team publishes it under, carries no copy
/// of the runtime, and declares the runtime package `contractgen runtime` writes (same
/// version as contractgen); options a package format cannot take are refused with exit 2.
#[test]
fn sdks_are_named_by_their_options_and_depend_on_the_runtime_package() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sdk");
    contractgen()
        .args([
            "generate",
            "--lang",
            "python,csharp",
            "--package",
            "acme_proto",
        ])
        .args([
            "--distribution",
            "acme-proto-sdk",
            "--namespace",
            "Acme.Proto",
        ])
        .args([
            "--assembly",
            "Acme.Proto.Sdk",
            "--package-version",
            "2.3.4",
            "--out",
        ])
        .arg(&out)
        .arg(root().join("schema/contracts/kernel.json"))
        .assert()
        .success();
    let files: std::collections::BTreeMap<String, String> = tree(&out)
        .into_iter()
        .map(|(p, b)| {
            (
                p.display().to_string(),
                String::from_utf8_lossy(&b).into_owned(),
            )
        })
        .collect();
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "csharp/Acme.Proto.Sdk.csproj",
            "csharp/kernel.cs",
            "python/acme_proto/__init__.py",
            "python/acme_proto/kernel.py",
            "python/acme_proto/py.typed",
            "python/pyproject.toml",
        ],
        "no runtime copied into the SDK"
    );
    let version = env!("CARGO_PKG_VERSION");
    let pyproject = &files["python/pyproject.toml"];
    for want in [
        "name = \"acme-proto-sdk\"",
        "version = \"2.3.4\"",
        &format!("\"contract-runtime>={version},<"),
        "packages = [\"acme_proto\"]",
    ] {
        assert!(pyproject.contains(want), "{want} in {pyproject}");
    }
    let module = &files["python/acme_proto/kernel.py"];
    assert!(
        module.contains("import contract_runtime as _rt"),
        "{module}"
    );
    // The module checks on import the same range its distribution declares.
    let below = pyproject
        .split(&format!("\"contract-runtime>={version},<"))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the runtime's range");
    assert!(
        module.contains(&format!(
            "_rt.require(\"{version}\", \"{below}\", __name__)"
        )),
        "{module}"
    );
    let csproj = &files["csharp/Acme.Proto.Sdk.csproj"];
    for want in [
        "<RootNamespace>Acme.Proto</RootNamespace>",
        "<AssemblyName>Acme.Proto.Sdk</AssemblyName>",
        "<Version>2.3.4</Version>",
        &format!("<PackageReference Include=\"Contract.Runtime\" Version=\"[{version},"),
    ] {
        assert!(csproj.contains(want), "{want} in {csproj}");
    }
    let cs = &files["csharp/kernel.cs"];
    assert!(cs.contains("namespace Acme.Proto.Kernel") && cs.contains("using Contract.Runtime;"));

    for (flag, value) in [
        ("--package", "acme-proto"),
        ("--package", "contract_runtime"),
        ("--namespace", "Contract.Runtime"),
        ("--namespace", "Acme..Proto"),
        ("--distribution", "acme proto"),
        ("--package-version", "2.3"),
    ] {
        let assert = contractgen()
            .args(["generate", "--lang", "python", flag, value, "--out"])
            .arg(dir.path().join("refused"))
            .arg(root().join("schema/contracts/kernel.json"))
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert!(
            err.contains(flag) && err.contains(value),
            "{flag} {value}: {err}"
        );
    }
}

/// `contractgen runtime` writes each language's runtime package at contractgen's version;
/// `--check` tells a stale copy; a language without a runtime is refused.
#[test]
fn the_runtime_packages_carry_contractgens_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let version = env!("CARGO_PKG_VERSION");
    for (lang, file, want) in [
        (
            "python",
            "pyproject.toml",
            format!("version = \"{version}\""),
        ),
        (
            "python",
            "contract_runtime/__init__.py",
            format!("__version__ = \"{version}\""),
        ),
        (
            "csharp",
            "Contract.Runtime.csproj",
            format!("<Version>{version}</Version>"),
        ),
        (
            "csharp",
            "ContractRuntime.cs",
            "namespace Contract.Runtime".to_string(),
        ),
    ] {
        let out = dir.path().join(lang);
        contractgen()
            .args(["runtime", "--lang", lang, "--out"])
            .arg(&out)
            .assert()
            .success();
        let text = std::fs::read_to_string(out.join(file)).expect(file);
        assert!(text.contains(&want), "{lang}/{file}: {want}");
        contractgen()
            .args(["runtime", "--check", "--lang", lang, "--out"])
            .arg(&out)
            .assert()
            .success();
    }
    std::fs::write(dir.path().join("python/pyproject.toml"), "edited").expect("edit");
    contractgen()
        .args(["runtime", "--check", "--lang", "python", "--out"])
        .arg(dir.path().join("python"))
        .assert()
        .code(1);
    contractgen()
        .args(["runtime", "--lang", "rust", "--out"])
        .arg(dir.path().join("rust"))
        .assert()
        .code(2);
}

#[test]
fn a_plain_schema_reaching_outside_itself_is_read_with_the_resources_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, v: serde_json::Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).expect("write");
        p.display().to_string()
    };
    let doc = write(
        "doc.json",
        serde_json::json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Doc",
            "type": "object",
            "properties": { "schema": { "$ref": "https://meta.example/" } },
            "examples": [{ "schema": { "type": "string" } }]
        }),
    );
    let meta = serde_json::json!({
        "$id": "https://meta.example/",
        "title": "Meta",
        "type": "object",
        "properties": { "type": { "type": "string" } }
    });
    let by_id = write("meta.json", meta.clone());
    let mut unnamed = meta;
    unnamed.as_object_mut().map(|o| o.remove("$id"));
    let unnamed = write("unnamed.json", unnamed);
    let out = dir.path().join("out").display().to_string();

    // Without the resource the reference leaves the document: a contract problem, named.
    let bare = contractgen().args(["check", &doc]).output().expect("runs");
    assert_eq!(bare.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bare.stdout).contains("leaves the document"));
    // By its own $id, or by a URI given for a file without one.
    contractgen()
        .args(["check", "--resource", &by_id, &doc])
        .assert()
        .code(0);
    let given = format!("https://meta.example={unnamed}");
    contractgen()
        .args(["vectors", "--out", &out, "--resource", &given, &doc])
        .assert()
        .code(0);
    contractgen()
        .args([
            "generate",
            "--lang",
            "python",
            "--out",
            &out,
            "--resource",
            &by_id,
            &doc,
        ])
        .assert()
        .code(0);
    // A file without an $id and no URI is a usage error that says how to name it.
    let no_id = contractgen()
        .args([
            "generate",
            "--lang",
            "docs",
            "--out",
            &out,
            "--resource",
            &unnamed,
            &doc,
        ])
        .output()
        .expect("runs");
    assert_eq!(no_id.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_id.stderr).contains("give it as URI=FILE"));
}

/// A team's own templates (`--templates DIR`) split into partials, on a contract that is not
/// one of the four: a partial included on a line of its own reads as if written there
/// (`../` reaches the contract), it is not written as a file, and a missing partial is an
/// error naming the template.
#[test]
fn a_users_templates_include_partials_from_their_partials_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(docs.join("partials")).expect("mkdir");
    std::fs::write(
        docs.join("{{module}}.txt.hbs"),
        "# {{name}}\n{{#each methods}}\n{{> method}}\n{{/each}}\n",
    )
    .expect("write");
    std::fs::write(
        docs.join("partials/method.hbs"),
        "{{#if @first}}\nmethods:\n{{/if}}\n- {{wire}} of {{../name}}\n",
    )
    .expect("write");
    let out = dir.path().join("out");
    let generate = || {
        let mut cmd = contractgen();
        cmd.args(["generate", "--lang", "docs", "--templates"])
            .arg(dir.path())
            .arg("--out")
            .arg(&out)
            .arg(root().join("proxy/tests/fixtures/depot.json"));
        cmd.assert()
    };
    generate().success();
    let written: Vec<PathBuf> = tree(&out).into_keys().collect();
    assert_eq!(
        written,
        [PathBuf::from("depot.txt")],
        "no partial is a file"
    );
    let page = std::fs::read_to_string(out.join("depot.txt")).expect("page");
    assert_eq!(
        page,
        "# depot\nmethods:\n- hello of depot\n- parcel of depot\n- receipt of depot\n"
    );

    std::fs::remove_file(docs.join("partials/method.hbs")).expect("rm");
    let err = generate().failure().get_output().stderr.clone();
    let err = String::from_utf8_lossy(&err);
    assert!(
        err.contains("{{module}}.txt") && err.contains("method"),
        "the error names the template and the partial: {err}"
    );
}
