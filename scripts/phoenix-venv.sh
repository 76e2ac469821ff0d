#!/usr/bin/env bash
# .venv-phoenix (repo root): Arize Phoenix, the real trace store the proxy's end-to-end
# tracing test (proxy/tests/phoenix.rs) exports into; a few hundred MB, installed once per
# machine by scripts/setup.sh. Prints the venv path.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh" phoenix >&2
echo "$ROOT/.venv-phoenix"
