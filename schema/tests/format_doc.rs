//! docs/contract-format.md's tables of machines and named extensions, held to the built-in
//! contracts: a machine typed or untyped in a contract is in the right column, and every
//! extension a contract names has its row. A contract change that the prose forgets fails
//! here, so the docs cannot drift from the data.

use std::path::PathBuf;

fn format_doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/contract-format.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of the table row that starts with `| {first} |`.
fn row<'d>(doc: &'d str, first: &str) -> Option<Vec<&'d str>> {
    let head = format!("| {first} |");
    let line = doc.lines().find(|l| l.starts_with(&head))?;
    Some(line.trim_matches('|').split(" | ").map(str::trim).collect())
}

#[test]
fn the_machine_table_lists_every_builtin_machine_in_its_column() {
    let doc = format_doc();
    for name in contract::builtin_names() {
        let c = contract::builtin(name).expect("builtin");
        let cells = row(&doc, name)
            .unwrap_or_else(|| panic!("docs/contract-format.md has no machine row for {name}"));
        let (typed, untyped) = (cells[1], cells.get(2).copied().unwrap_or(""));
        for (m, sm) in &c.state_machines {
            let quoted = format!("`{m}`");
            let (here, there) = if sm.is_typed() {
                (typed, untyped)
            } else {
                (untyped, typed)
            };
            assert!(
                here.contains(&quoted) && !there.contains(&quoted),
                "{name}: machine {m} (typed: {}) is in the wrong column of the machine table",
                sm.is_typed()
            );
        }
    }
}

#[test]
fn every_named_extension_has_its_row() {
    let doc = format_doc();
    for name in contract::builtin_names() {
        let c = contract::builtin(name).expect("builtin");
        for hook in c.extensions.keys() {
            assert!(
                row(&doc, &format!("`{hook}`")).is_some(),
                "{name}: extension {hook} has no row in docs/contract-format.md"
            );
        }
    }
}
