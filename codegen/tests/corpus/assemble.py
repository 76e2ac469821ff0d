"""Assemble the corpus for one target: each entry's schema with its examples attached.

usage: assemble.py TARGET OUT_DIR   (TARGET: rust, python or csharp)

Writes OUT_DIR/<entry>.json for every entry directory beside this file. The file is the
entry's schema.json with each example that SOURCE.toml's [examples] table names appended
to the JSON Schema `examples` of the definition it is an instance of (the document's root
when it names none), so `contractgen vectors` makes it a valid vector and derives invalid
ones from it (and to each definition its `also` list names). Nothing else of the schema changes. An entry whose SOURCE.toml [gaps] table
names TARGET is left out, and its reason printed: what the generators cannot do yet
(CORPUS_GAPS=run runs it anyway, to see whether a gap still holds).
Standard output gets the `--resource URI=FILE` arguments contractgen needs for the entries'
`$ref`s outside themselves (their [resources] tables), one per line.
The Rust side (examples/generated/build.rs) follows the same rule.
"""

import json
import os
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def definition(doc: dict, name: str) -> dict:
    """The definition `name` (draft-07 `definitions` or `$defs`), or the root for ''."""
    if not name:
        return doc
    for key in ("$defs", "definitions"):
        if name in doc.get(key, {}):
            return doc[key][name]
    raise SystemExit(f"no definition {name!r}")


def example_types(value) -> list:
    """SOURCE.toml names an example's type as a string, or in a table: `definition` and the
    further definitions it is also an instance of (`also`)."""
    if isinstance(value, str):
        return [value]
    return [value.get("definition", "")] + list(value.get("also", []))


def assemble(entry: Path, target: str):
    source = tomllib.loads((entry / "SOURCE.toml").read_text())
    gap = source.get("gaps", {}).get(target)
    if gap and os.environ.get("CORPUS_GAPS") == "run":
        print(f"corpus: {entry.name}: a {target} gap, run anyway: {gap}", file=sys.stderr)
    elif gap:
        print(f"corpus: {entry.name}: left out for {target}: {gap}", file=sys.stderr)
        return None
    doc = json.loads((entry / "schema.json").read_text())
    for file, value in sorted(source.get("examples", {}).items()):
        example = json.loads((entry / "examples" / file).read_text())
        for name in example_types(value):
            definition(doc, name or source.get("root", "")).setdefault("examples", []).append(
                example
            )
    return doc


def main() -> None:
    target, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for entry in sorted(p for p in HERE.iterdir() if (p / "SOURCE.toml").is_file()):
        doc = assemble(entry, target)
        if doc is not None:
            (out / f"{entry.name.replace('-', '_')}.json").write_text(json.dumps(doc, indent=1) + "\n")
            resources = tomllib.loads((entry / "SOURCE.toml").read_text()).get("resources", {})
            for uri, rel in sorted(resources.items()):
                print(f"--resource\n{uri}={entry / rel}")


if __name__ == "__main__":
    main()
