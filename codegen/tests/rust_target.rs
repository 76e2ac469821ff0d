//! The Rust target: snapshots of the generated code for all four contracts,
//! byte-for-byte determinism, the CLI writing exactly what `Config::generate`
//! (and so build.rs) returns, and a contract edit reaching the constants.

use std::path::PathBuf;

use contractgen::{Cli, Config};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn contract_path(name: &str) -> PathBuf {
    root().join("schema/contracts").join(format!("{name}.json"))
}

fn generate(paths: &[PathBuf]) -> Vec<contractgen::GeneratedFile> {
    let mut cfg = Config::new();
    cfg.contracts(paths);
    cfg.generate().expect("generate")
}

#[test]
fn snapshots_of_generated_rust() {
    for name in ["kernel", "xsession", "rukh", "toolchannel"] {
        let files = generate(&[contract_path(name)]);
        assert_eq!(files.len(), 1);
        assert!(
            files[0].contents.starts_with("// @generated"),
            "{name}: header"
        );
        insta::assert_snapshot!(format!("{name}_rs"), files[0].contents);
    }
}

#[test]
fn generation_is_deterministic() {
    let a = generate(&[contract_path("kernel"), contract_path("toolchannel")]);
    let b = generate(&[contract_path("kernel"), contract_path("toolchannel")]);
    assert_eq!(a, b);
}

#[test]
fn cli_writes_what_config_generates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths: Vec<PathBuf> = ["kernel", "toolchannel"]
        .iter()
        .map(|n| contract_path(n))
        .collect();
    let mut args: Vec<String> = vec![
        "contractgen".into(),
        "generate".into(),
        "--lang".into(),
        "rust".into(),
        "--out".into(),
    ];
    args.push(dir.path().display().to_string());
    args.extend(paths.iter().map(|p| p.display().to_string()));
    let cli = <Cli as clap::Parser>::try_parse_from(&args).expect("args");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        contractgen::run(&cli, &mut out, &mut err),
        0,
        "{}",
        String::from_utf8_lossy(&err)
    );
    for f in generate(&paths) {
        let written = std::fs::read_to_string(dir.path().join(&f.name)).expect("written");
        assert!(
            written == f.contents,
            "{} differs from Config::generate",
            f.name
        );
    }
    // A second run leaves unchanged files alone.
    let (mut out2, mut err2) = (Vec::new(), Vec::new());
    assert_eq!(contractgen::run(&cli, &mut out2, &mut err2), 0);
    assert!(
        String::from_utf8_lossy(&out2)
            .lines()
            .all(|l| l.starts_with("unchanged ")),
        "{}",
        String::from_utf8_lossy(&out2)
    );
}

#[test]
fn a_limit_edit_changes_the_constant_with_no_hand_edit() {
    let text = std::fs::read_to_string(contract_path("toolchannel")).expect("contract");
    let mut doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    doc["limits"]["handshakeSeconds"]["value"] = serde_json::json!(12);
    doc["$schema"] = serde_json::json!(
        root()
            .join("schema/contract.schema.json")
            .display()
            .to_string()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let edited = dir.path().join("toolchannel.json");
    std::fs::write(&edited, serde_json::to_string_pretty(&doc).expect("ser")).expect("write");
    let files = generate(std::slice::from_ref(&edited));
    let code = &files[0].contents;
    assert!(
        code.contains("pub const HANDSHAKE_SECONDS: Duration = Duration::from_secs(12);"),
        "handshake constant"
    );
    // The derived host wait follows without being touched.
    assert!(
        code.contains("pub const HOST_HANDSHAKE_SECONDS: Duration = Duration::from_secs(24);"),
        "derived constant"
    );

    // The same edit reaches the other SDKs and the docs, with no hand edit.
    let target = |lang: contractgen::Lang| {
        let mut cfg = Config::new();
        cfg.lang(lang).contract(&edited);
        cfg.generate()
            .expect("generate")
            .into_iter()
            .map(|f| f.contents)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let py = target(contractgen::Lang::Python);
    assert!(
        py.contains("HANDSHAKE_SECONDS: Final[float] = 12.0")
            && py.contains("HOST_HANDSHAKE_SECONDS: Final[float] = 24.0"),
        "python constants"
    );
    let cs = target(contractgen::Lang::Csharp);
    assert!(
        cs.contains("HandshakeSeconds = TimeSpan.FromMilliseconds(12000);")
            && cs.contains("HostHandshakeSeconds = TimeSpan.FromMilliseconds(24000);"),
        "C# constants"
    );
    let md = target(contractgen::Lang::Docs);
    assert!(
        md.contains("| `handshakeSeconds` | 12 s |") && md.contains("2 × handshakeSeconds = 24 s"),
        "docs table"
    );
}

#[test]
fn generate_exit_codes() {
    let parse = |args: &[&str]| <Cli as clap::Parser>::try_parse_from(args);
    assert!(
        parse(&[
            "contractgen",
            "generate",
            "--lang",
            "cobol",
            "--out",
            "x",
            "a.json"
        ])
        .is_err(),
        "unknown language is a usage error"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // Exit code of `contractgen generate --lang rust --out DIR <contract>`.
    let exit_for = |contract: &std::path::Path| {
        let out_dir = dir.path().display().to_string();
        let contract = contract.display().to_string();
        let cli = parse(&[
            "contractgen",
            "generate",
            "--lang",
            "rust",
            "--out",
            &out_dir,
            &contract,
        ])
        .expect("args");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        contractgen::run(&cli, &mut out, &mut err)
    };
    assert_eq!(
        exit_for(&dir.path().join("missing.json")),
        2,
        "missing file is an I/O (usage) error"
    );
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"name\": 1}").expect("write");
    assert_eq!(exit_for(&broken), 1, "a contract error exits 1");
}

#[test]
fn committed_protocol_docs_are_fresh() {
    let mut cfg = Config::new();
    let names = contract::builtin_names();
    cfg.lang(contractgen::Lang::Docs)
        .inputs_relative_to(root())
        .contracts(names.iter().map(|n| contract_path(n)));
    let files = cfg.generate().expect("docs");
    assert_eq!(
        files.len(),
        names.len() + 1,
        "a page per contract and an index"
    );
    for f in files {
        assert!(
            f.contents.starts_with("<!-- @generated"),
            "{}: header",
            f.name
        );
        let committed = std::fs::read_to_string(root().join("docs/protocols").join(&f.name))
            .unwrap_or_default();
        assert!(
            committed == f.contents,
            "docs/protocols/{} is stale: run `cargo run -p contractgen -- generate --lang docs --out docs/protocols schema/contracts/*.json`",
            f.name
        );
    }
}

#[test]
fn docs_pages_carry_every_section() {
    let mut cfg = Config::new();
    cfg.lang(contractgen::Lang::Docs)
        .contract(contract_path("toolchannel"));
    let files = cfg.generate().expect("docs");
    let page = &files
        .iter()
        .find(|f| f.name == "toolchannel.md")
        .expect("page")
        .contents;
    for needle in [
        "## Channels and framing",
        "```text\n+",
        "## Methods",
        "## Error catalog",
        "`-32003`",
        "## Codes",
        "`4006`",
        "## Limits and deadlines",
        "hostHandshakeSeconds",
        "```mermaid\nstateDiagram-v2",
        "## Decisions",
        "**T-1**",
    ] {
        assert!(page.contains(needle), "page lacks {needle:?}");
    }
}

/// A contract that is not built in (proxy/tests/fixtures/jobs.json): its limits' machine
/// form (clock, applies, key, reaction) and its request-id rules reach the page, read from
/// the contract, so an edit there changes the page.
#[test]
fn docs_pages_show_behaviour_data_of_any_contract() {
    let path = root().join("proxy/tests/fixtures/jobs.json");
    let c = contract::load(&path).expect("jobs.json");
    let mut cfg = Config::new();
    cfg.lang(contractgen::Lang::Docs).contract(&path);
    let files = cfg.generate().expect("docs");
    let page = &files
        .iter()
        .find(|f| f.name == "jobs.md")
        .expect("page")
        .contents;
    let row = |key: &str| {
        page.lines()
            .find(|l| l.starts_with(&format!("| `{key}` |")) && l.matches('|').count() == 6)
            .unwrap_or_else(|| panic!("no machine-form row for {key}:\n{page}"))
            .to_string()
    };
    let mut seen = 0;
    for (key, l) in &c.limits {
        let Some(a) = &l.action else { continue };
        let r = row(key);
        let kind = serde_json::to_value(a.action).expect("action");
        assert!(r.contains(kind.as_str().expect("kind")), "{r}");
        if let Some(code) = &a.code {
            assert!(r.contains(&format!("`{code}`")), "{r}");
        }
        for m in l.applies.iter().flat_map(|a| &a.methods) {
            assert!(r.contains(&format!("`{m}`")), "{r}");
        }
        if let Some(contract::model::LimitKey::Pointer { pointer }) = &l.key {
            assert!(r.contains(&format!("`{pointer}`")), "{r}");
        }
        if l.start.is_some() {
            assert!(r.contains("starts at"), "{r}");
        }
        for t in &l.stop {
            if let contract::model::Trigger::Message {
                method: Some(m), ..
            } = t
            {
                assert!(r.contains(&format!("stops at `{m}")), "{r}");
            }
        }
        seen += 1;
    }
    assert!(seen >= 2, "jobs.json has limits in machine form");
    let (party, p) = c
        .parties
        .iter()
        .find(|(_, p)| p.ids.is_some())
        .expect("id rules");
    let ids = p.ids.as_ref().expect("ids");
    let line = page
        .lines()
        .find(|l| l.starts_with(&format!("| `{party}` |")) && l.contains("awaiting an answer"))
        .unwrap_or_else(|| panic!("no request-id row for {party}:\n{page}"));
    let prefix = ids.prefix.as_deref().expect("prefix");
    assert!(line.contains(&format!("`{prefix}`")), "{line}");
    let desc = &ids.action.as_ref().expect("action").description;
    assert!(line.contains(desc.as_str()), "{line}");
}

#[test]
fn templates_dir_overrides_the_built_in_templates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(
        docs.join("{{module}}.txt.hbs"),
        "custom page for {{name}}: {{len methods}} methods\n",
    )
    .expect("write");
    let mut cfg = Config::new();
    cfg.lang(contractgen::Lang::Docs)
        .templates(dir.path())
        .contract(contract_path("rukh"));
    let files = cfg.generate().expect("generate");
    assert_eq!(files.len(), 1, "only the user's templates are rendered");
    assert_eq!(files[0].name, "rukh.txt");
    assert_eq!(files[0].contents, "custom page for rukh: 7 methods\n");
}

/// A one-way message's answers (`answeredBy`) on a contract of its own (the depot fixture):
/// its docs page names each answering method, linked, under the method.
#[test]
fn docs_pages_name_the_answers_of_a_one_way_message() {
    let path = root().join("proxy/tests/fixtures/depot.json");
    let c = contract::load(&path).expect("depot.json");
    let mut cfg = Config::new();
    cfg.lang(contractgen::Lang::Docs).contract(&path);
    let files = cfg.generate().expect("docs");
    let page = &files
        .iter()
        .find(|f| f.name == "depot.md")
        .expect("page")
        .contents;
    let mut seen = 0;
    for m in c.methods.values().filter(|m| !m.answered_by.is_empty()) {
        let links: Vec<String> = (m.answered_by.iter())
            .map(|a| format!("[`{a}`](#method-{a})"))
            .collect();
        let line = format!("- answered by: {},", links.join(", "));
        assert!(page.contains(&line), "{line}\n{page}");
        seen += 1;
    }
    assert!(seen > 0, "depot.json names no answers");
}
