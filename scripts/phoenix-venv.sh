#!/usr/bin/env bash
# Creates .venv-phoenix (repo root) with Arize Phoenix, the real trace store the
# proxy's end-to-end tracing test (proxy/tests/phoenix.rs) exports into. Phoenix is
# large (a few hundred MB with its dependencies): it is installed once and reused.
# Idempotent; prints the venv path.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv-phoenix"
PY="$VENV/bin/python"
[ -x "$PY" ] || python3 -m venv "$VENV"
if ! "$PY" -c "import phoenix.server.main" 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check "arize-phoenix==20.26.1" >&2
fi
echo "$VENV"
