# Sourced by the reference peers' run scripts (examples/*/run.sh): the workspace's own
# contractgen and contract-proxy, rebuilt when the sources changed (cargo decides), and
# the peers' Python venv, created when missing. Overrides: CONTRACTGEN, PROXY, PY.
# Needs ROOT (the repository root).
TOOLS_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
if [ -z "${CONTRACTGEN:-}" ] || [ -z "${PROXY:-}" ]; then
    (cd "$ROOT" && cargo build --quiet -p contractgen -p contract-proxy) ||
        { echo "FAIL: cargo build of contractgen and contract-proxy" >&2; exit 1; }
fi
CONTRACTGEN=${CONTRACTGEN:-$TOOLS_BIN/contractgen}
PROXY=${PROXY:-$TOOLS_BIN/contract-proxy}
PY=${PY:-$ROOT/.venv-peers/bin/python}
if [ ! -x "$PY" ]; then
    "$ROOT/scripts/peers-venv.sh" >/dev/null || { echo "FAIL: scripts/peers-venv.sh" >&2; exit 1; }
fi
export CONTRACTGEN PROXY PY
