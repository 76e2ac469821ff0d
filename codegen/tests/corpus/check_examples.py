"""Validate every example instance in the schema corpus against its schema.

For each entry directory next to this file (one that holds ``SOURCE.toml``),
read ``schema.json`` and validate every file in ``examples/`` with the
`jsonschema` package, using the validator for the draft named by
``SOURCE.toml``'s ``draft`` key.  When the ``[examples]`` table names a
``definition`` for a file, the instance is validated against
``{"$ref": "<schema base>#/definitions/<name>"}`` (or ``#/$defs/<name>``)
resolved within the schema document; an empty definition falls back to the
entry's ``root`` key, and an empty ``root`` means the document root.  Names
listed in ``also`` are checked the same way.  External documents
the schema refers to are served from local copies listed in the optional
``[resources]`` table (URI = path relative to the entry); nothing is fetched
over the network.

Usage: python check_examples.py [ENTRY ...]
Needs Python 3.11+ (tomllib) and ``pip install jsonschema``.  Exits non-zero
if any example is invalid or any example file and the table disagree.
"""

import json
import sys
import tomllib
from pathlib import Path
from urllib.parse import quote

import jsonschema
import referencing.jsonschema as specs
from referencing import Registry

CORPUS = Path(__file__).resolve().parent

DRAFTS = {
    "draft-04": (jsonschema.Draft4Validator, specs.DRAFT4),
    "draft-06": (jsonschema.Draft6Validator, specs.DRAFT6),
    "draft-07": (jsonschema.Draft7Validator, specs.DRAFT7),
    "2019-09": (jsonschema.Draft201909Validator, specs.DRAFT201909),
    "2020-12": (jsonschema.Draft202012Validator, specs.DRAFT202012),
}


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def target(schema, base, name):
    """Return the schema to validate against for definition `name`."""
    if not name:
        return schema
    for key in ("$defs", "definitions"):
        if name in schema.get(key, {}):
            token = name.replace("~", "~0").replace("/", "~1")
            return {"$ref": f"{base}#/{key}/{quote(token, safe='~')}"}
    raise KeyError(f"no definition named {name!r}")


def check_entry(entry):
    """Validate the examples of one entry; return the number of failures."""
    with open(entry / "SOURCE.toml", "rb") as f:
        source = tomllib.load(f)
    validator_cls, spec = DRAFTS[source["draft"]]
    schema = load_json(entry / "schema.json")
    base = spec.id_of(schema) or f"urn:contractgen-corpus:{entry.name}"
    resources = [(base, spec.create_resource(schema))]
    for uri, rel in source.get("resources", {}).items():
        resources.append((uri, spec.create_resource(load_json(entry / rel))))
    registry = Registry().with_resources(resources)

    table = source.get("examples", {})
    files = sorted(p.name for p in (entry / "examples").glob("*.json"))
    failures = 0
    for name in sorted(set(table) ^ set(files)):
        print(f"FAIL {entry.name}/{name}: example file and [examples] table disagree")
        failures += 1
    for name in files:
        if name not in table:
            continue
        meta = table[name]
        instance = load_json(entry / "examples" / name)
        first = meta.get("definition") or source.get("root", "")
        for definition in [first] + meta.get("also", []):
            label = f"{entry.name}/{name} as {definition or '<root>'}"
            try:
                validator = validator_cls(
                    target(schema, base, definition),
                    registry=registry,
                    format_checker=validator_cls.FORMAT_CHECKER,
                )
                errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
            except Exception as exc:  # unresolvable $ref, unknown definition, ...
                print(f"FAIL {label}: {type(exc).__name__}: {exc}")
                failures += 1
                continue
            if errors:
                failures += 1
                print(f"FAIL {label}: {len(errors)} error(s)")
                for err in errors[:5]:
                    where = "/".join(str(p) for p in err.absolute_path) or "<instance>"
                    print(f"     at {where}: {err.message[:200]}")
            else:
                print(f"ok   {label}")
    return failures


def main(argv):
    names = argv[1:] or sorted(p.parent.name for p in CORPUS.glob("*/SOURCE.toml"))
    failures = sum(check_entry(CORPUS / name) for name in names)
    print(f"{len(names)} entries checked, {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
