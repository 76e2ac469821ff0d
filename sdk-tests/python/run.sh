#!/usr/bin/env bash
# Python SDK tests. Usage: sdk-tests/python/run.sh PATH/TO/contractgen
#
# 1. scripts/setup.sh makes .venv-py (msgspec, mypy, pytest) when it is missing;
# 2. generates the contract_sdk package and the cross-language vectors (messages and state
#    machines) into a temp dir;
# 3. builds a wheel of the package (installability) and runs `mypy --strict` on it;
# 4. runs pytest on sdk-tests/python/test_*.py against it;
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
"$PY" "$ROOT/codegen/tests/corpus/assemble.py" python "$CONTRACTS"
"$BIN" generate --lang python --out "$PKG" "$CONTRACTS"/*.json >/dev/null
"$BIN" vectors --out "$VECTORS" "$CONTRACTS"/*.json >/dev/null
echo "generated $(ls "$PKG"/contract_sdk/*.py | wc -l) modules into $PKG; vectors in $VECTORS"

"$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$WORK/wheel" "$PKG" >/dev/null
echo "built $(basename "$WORK"/wheel/*.whl)"

(cd "$PKG" && "$PY" -m mypy --strict --cache-dir "$WORK/mypy-cache" contract_sdk)

PYTHONPATH="$PKG" CONTRACT_VECTORS="$VECTORS" CONTRACTS_DIR="$CONTRACTS" \
    "$PY" -m pytest -q -p no:cacheprovider "$ROOT/sdk-tests/python"
