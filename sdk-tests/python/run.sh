#!/usr/bin/env bash
# Python SDK tests. Usage: sdk-tests/python/run.sh PATH/TO/contractgen
#
# 1. scripts/setup.sh makes .venv-py (msgspec, mypy, pytest) when it is missing;
# 2. generates the contract_sdk package, the contract_runtime package it imports and the
#    cross-language vectors (messages and state machines) into a temp dir;
# 3. builds a wheel of each package (installability) and runs `mypy --strict` on them and on
#    typed_views.py (the types a consumer's checker sees);
# 4. runs pytest on sdk-tests/python/test_*.py against them;
# 5. installs two SDKs named apart (kernel_sdk, rukh_sdk) and the runtime from their wheels into
#    a fresh venv, and uses both in one process.
# Import times are a benchmark: cargo bench -p contractgen --bench py_import (docs/benchmarks.md).
set -euo pipefail

BIN=${1:?usage: sdk-tests/python/run.sh PATH/TO/contractgen}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV="$ROOT/.venv-py"
PY="$VENV/bin/python"

"$ROOT/scripts/setup.sh" py >&2

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PKG="$WORK/pkg"
RT="$WORK/runtime"
VECTORS="$WORK/vectors"

# The built-in contracts and one the project did not write for itself (the jobs fixture), so
# every test here also runs on a contract that is not built in. (examples/lsp is not here
# yet: its hover result, a union of a struct and a free object, is one msgspec refuses.)
CONTRACTS="$WORK/contracts"
mkdir -p "$CONTRACTS"
cp "$ROOT"/schema/contracts/*.json "$ROOT"/proxy/tests/fixtures/jobs.json "$CONTRACTS"/
# And the schema corpus (codegen/tests/corpus): public schemas read as types-only contracts,
# their examples attached; the Rust and C# suites run the same vectors.
# Each corpus example is checked against its schema by an independent validator first.
"$PY" "$ROOT/codegen/tests/corpus/check_examples.py" | tail -n 1
# The entries' `$ref`s outside themselves are read from local copies (`--resource URI=FILE`).
mapfile -t RESOURCES < <("$PY" "$ROOT/codegen/tests/corpus/assemble.py" python "$CONTRACTS")
"$BIN" generate --lang python --out "$PKG" ${RESOURCES[@]+"${RESOURCES[@]}"} "$CONTRACTS"/*.json >/dev/null
"$BIN" runtime --lang python --out "$RT" >/dev/null
"$BIN" vectors --out "$VECTORS" ${RESOURCES[@]+"${RESOURCES[@]}"} "$CONTRACTS"/*.json >/dev/null
echo "generated $(ls "$PKG"/contract_sdk/*.py | wc -l) modules into $PKG; vectors in $VECTORS"

wheel() { "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$WORK/wheel" "$@" >/dev/null; }
wheel "$PKG" "$RT"
echo "built $(cd "$WORK"/wheel && echo *.whl)"

(cd "$RT" && "$PY" -m mypy --strict --cache-dir "$WORK/mypy-cache" contract_runtime)
(cd "$PKG" && MYPYPATH="$RT" "$PY" -m mypy --strict --cache-dir "$WORK/mypy-cache" contract_sdk)
# And what a consumer's type checker sees of the members the module spells for msgspec.
MYPYPATH="$PKG:$RT" "$PY" -m mypy --strict --cache-dir "$WORK/mypy-cache" "$ROOT/sdk-tests/python/typed_views.py"

PYTHONPATH="$PKG:$RT" CONTRACT_VECTORS="$VECTORS" CONTRACTS_DIR="$CONTRACTS" \
    "$PY" -m pytest -q -p no:cacheprovider "$ROOT/sdk-tests/python"

# Two SDKs side by side: each its own distribution and import name, one runtime for both, all
# installed from their wheels (msgspec's too, so nothing else is fetched) into a fresh venv.
"$BIN" generate --lang python --package kernel_sdk --package-version 1.0.0 --out "$WORK/side/kernel" "$ROOT/schema/contracts/kernel.json" >/dev/null
"$BIN" generate --lang python --package rukh_sdk --package-version 2.0.0 --out "$WORK/side/rukh" "$ROOT/schema/contracts/rukh.json" >/dev/null
wheel "$WORK/side/kernel" "$WORK/side/rukh"
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WORK/wheel" "msgspec==$("$PY" -c 'import msgspec; print(msgspec.__version__)')" >/dev/null
"$PY" -m venv "$WORK/side/venv"
"$WORK/side/venv/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$WORK/wheel" kernel-sdk rukh-sdk
"$WORK/side/venv/bin/python" "$ROOT/sdk-tests/python/side_by_side.py"
