#!/usr/bin/env bash
# Runs the reference rukh peers (issue 8): rukh-core with the Rust extension
# (rukh-ext) and with the Python extension (ext.py), directly and with
# contract-proxy standing in for the extension (the core launches the proxy on
# fd 3; the proxy launches the real extension with exec-fd:3). Asserts every
# exit code (0 / command's own / 124 / 130 / 125), that the proxy saw no
# violation in the honest runs, and that each --break flag makes it flag one.
# Exits non-zero on the first mismatch.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# shellcheck source=../tools.sh
. "$ROOT/examples/tools.sh"
PROXY_CONTRACT=${PROXY_CONTRACT:-schema/contracts/rukh.json}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rukh-run.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

CORE=$CARGO_TARGET_DIR/debug/rukh-core
EXT_RS=$CARGO_TARGET_DIR/debug/rukh-ext

# The Python SDK is generated, never committed.
SDK=$ROOT/target/examples-sdk/python-rukh
rm -rf "$SDK"
"$CONTRACTGEN" generate --lang python --out "$SDK" schema/contracts/rukh.json >/dev/null
"$CONTRACTGEN" runtime --lang python --out "$SDK-runtime" >/dev/null
export PYTHONPATH=$SDK:$SDK-runtime${PYTHONPATH:+:$PYTHONPATH}

fails=0
passes=0

# case NAME EXPECTED_EXIT VIOLATIONS(none|some|-) EXTENSION_CMD -- CORE_ARGS...
case_run() {
    local name=$1 want=$2 viol=$3 ext=$4
    shift 5
    local log=$OUT/${name//[^A-Za-z0-9_.-]/_}
    local cmd
    if [ "$viol" = "-" ]; then
        # shellcheck disable=SC2086
        cmd=("$CORE" "$@" -- $ext)
    else
        cmd=("$CORE" "$@" -- "$PROXY" run --contract "$PROXY_CONTRACT" --log json
             --pcap "$log.pcapng" --listen fd:3 --upstream "exec-fd:3:$ext")
    fi
    local rc=0
    timeout 60 "${cmd[@]}" >"$log.out" 2>"$log.err" || rc=$?
    local ok=1 why=""
    if [ "$rc" != "$want" ]; then ok=0; why="exit $rc, want $want"; fi
    if [ "$viol" != "-" ]; then
        local n
        n=$("$PY" - "$log.out" "$log.err" <<'EOF'
import json, sys
n = 0
# The proxy's --log json events: {"verdict": {"verdict": "ok"|"violation"|…, "class": …}, …}
for path in sys.argv[1:]:
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        v = e.get("verdict")
        if isinstance(v, dict):
            v = v.get("verdict")
        if v is not None and v != "ok":
            n += 1
print(n)
EOF
)
        if [ "$viol" = none ] && [ "$n" != 0 ]; then ok=0; why="$why proxy flagged $n violation(s), want none"; fi
        if [ "$viol" = some ] && [ "$n" = 0 ]; then ok=0; why="$why proxy flagged nothing, want a violation"; fi
        why="$why [proxy violations: $n]"
        local seen
        if seen=$(pcap_check "$PROXY_CONTRACT" "$log.pcapng" "$log.out" "$log.err"); then
            why="$why [wireshark: $seen]"
        else
            ok=0; why="$why $seen"
        fi
    fi
    if [ $ok = 1 ]; then
        passes=$((passes + 1)); echo "PASS $name (exit $rc)$why"
    else
        fails=$((fails + 1)); echo "FAIL $name: $why"
        sed 's/^/    out: /' "$log.out" | tail -n 20
        sed 's/^/    err: /' "$log.err" | tail -n 20
    fi
}

for flavour in rust python; do
    if [ $flavour = rust ]; then EXT="$EXT_RS"; else EXT="$PY $HERE/ext.py"; fi
    for via in direct proxy; do
        if [ $via = direct ]; then none=-; some=-; else none=none; some=some; fi
        case_run "$flavour/$via/succeeded" 0 $none "$EXT" -- --inputs '{"path":"."}' --explicit path
        case_run "$flavour/$via/command-result" 0 $none "$EXT" -- --command-result
        case_run "$flavour/$via/describe" 0 $none "$EXT" -- --kind describe
        case_run "$flavour/$via/command_failed" 3 $none "$EXT" -- --inputs '{"exit":3}'
        case_run "$flavour/$via/cancel-user" 130 $none "$EXT" -- --inputs '{"sleepMs":10000}' --cancel-after-ms 500
        case_run "$flavour/$via/deadline" 124 $none "$EXT" -- --inputs '{"sleepMs":10000}' --deadline-ms 800
        case_run "$flavour/$via/ext-break-id-gap" 125 $some "$EXT --break id-gap" --
        case_run "$flavour/$via/core-break-before-initialize" 125 $some "$EXT" -- --break before-initialize
    done
done

echo "rukh peers: $passes passed, $fails failed"
[ "$fails" = 0 ]
