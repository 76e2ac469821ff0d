# Sourced by the reference peers' run scripts (examples/*/run.sh): the workspace's own
# binaries (contractgen, contract-proxy, the Rust peers), rebuilt when the sources changed
# (cargo decides), and the peers' Python venv, created when missing. Overrides:
# CONTRACTGEN, PROXY, PY. Needs ROOT (the repository root).
#
# The build selects what scripts/test.sh's build selects (the workspace, every target):
# cargo unifies features over the packages it builds, so `-p contractgen` alone would
# compile most dependencies again with other features. After that build this is a no-op.
TOOLS_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
(cd "$ROOT" && cargo build --quiet --workspace --all-targets) ||
    { echo "FAIL: cargo build --workspace --all-targets" >&2; exit 1; }
CONTRACTGEN=${CONTRACTGEN:-$TOOLS_BIN/contractgen}
PROXY=${PROXY:-$TOOLS_BIN/contract-proxy}
PY=${PY:-$ROOT/.venv-peers/bin/python}
if [ ! -x "$PY" ]; then
    "$ROOT/scripts/peers-venv.sh" >/dev/null || { echo "FAIL: scripts/peers-venv.sh" >&2; exit 1; }
fi
export CONTRACTGEN PROXY PY

# pcap_check CONTRACT PCAP LOG: the capture `run --pcap` wrote reads in tshark, with the
# contract's generated Wireshark dissector, as the proxy logged it (examples/pcap_check.py).
# Prints one line; non-zero on a difference.
pcap_check() { "$PY" "$ROOT/examples/pcap_check.py" "$@" 2>&1 | tail -n 1; return "${PIPESTATUS[0]}"; }
