#!/usr/bin/env bash
# Runs the reference toolchannel host (issue 8) against workers, directly and
# through contract-proxy (ws listen → ws upstream), and asserts exit codes and
# proxy verdicts. Exits non-zero on the first mismatch.
#
#   A. tests/mini_worker.py (test-only scripted worker): full session with the
#      reverse-request probes, 401 on a bad token, 426 on a bad major, redial
#      supersede (4009) / refuse (4002), and --break sampling-accept (the proxy
#      must flag the host's result).
#   B. examples/toolchannel/worker.py (the reference Python worker, owned by
#      another helper): the full pair, directly and through the proxy, with no
#      violation allowed. Skipped LOUDLY (and counted as a failure) if absent.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# shellcheck source=../../tools.sh
. "$ROOT/examples/tools.sh"
PROXY_CONTRACT=${PROXY_CONTRACT:-schema/contracts/toolchannel.json}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/toolchannel-host-run.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    rm -rf "$OUT"
}
trap cleanup EXIT

HOST=$CARGO_TARGET_DIR/debug/toolchannel-host

SDK=$ROOT/target/examples-sdk/python-toolchannel
rm -rf "$SDK"
"$CONTRACTGEN" generate --lang python --out "$SDK" schema/contracts/toolchannel.json >/dev/null
"$CONTRACTGEN" runtime --lang python --out "$SDK-runtime" >/dev/null
export PYTHONPATH=$SDK:$SDK-runtime${PYTHONPATH:+:$PYTHONPATH}

TOKEN=tok-$RANDOM$RANDOM
SID=ars_ref_0001
fails=0
passes=0

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_file() { # wait_file PATH SECONDS
    local i=0
    while [ ! -s "$1" ]; do i=$((i + 1)); [ $i -gt $(($2 * 10)) ] && return 1; sleep 0.1; done
}

# Violations the proxy attributes to the HOST (the scripted worker's reverse-request probes
# and redials are flagged on the worker's side on purpose and do not count here).
count_violations() { # count_violations PROXY_LOG...
    "$PY" - "$@" <<'EOF'
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
        if v is not None and v != "ok" and e.get("from") == "host":
            n += 1
print(n)
EOF
}

# pair NAME HOST_WANT WORKER_WANT VIOLATIONS(-|none|some) "HOST_ARGS" WORKER_CMD...
# The worker command gets URL substituted for the literal @URL@.
pair() {
    local name=$1 hw=$2 ww=$3 viol=$4 hargs=$5
    shift 5
    local log=$OUT/${name//[^A-Za-z0-9_.-]/_}
    rm -f "$log.port"
    # shellcheck disable=SC2086
    timeout 90 "$HOST" --token "$TOKEN" --session-id "$SID" --port-file "$log.port" \
        --heartbeat-interval-seconds 1 --heartbeats 2 $hargs >"$log.host.out" 2>"$log.host.err" &
    local hpid=$!
    PIDS+=("$hpid")
    if ! wait_file "$log.port" 20; then
        fails=$((fails + 1)); echo "FAIL $name: host did not start"; sed 's/^/    host: /' "$log.host.err"; return
    fi
    local hport url ppid=""
    hport=$(tr -d '\n' <"$log.port")
    url=ws://127.0.0.1:$hport/worker
    if [ "$viol" != "-" ]; then
        local pport
        pport=$(free_port)
        "$PROXY" run --contract "$PROXY_CONTRACT" --log json --pcap "$log.pcapng" \
            --listen "ws://127.0.0.1:$pport/worker" --upstream "$url" >"$log.proxy" 2>"$log.proxy.err" &
        ppid=$!
        PIDS+=("$ppid")
        url=ws://127.0.0.1:$pport/worker
        local i=0
        until "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1',$pport),0.2)" 2>/dev/null; do
            i=$((i + 1)); [ $i -gt 100 ] && break; sleep 0.1
        done
    fi
    local args=() a
    for a in "$@"; do args+=("${a//@URL@/$url}"); done
    local wrc=0 hrc=0
    timeout 90 "${args[@]}" >"$log.worker.out" 2>"$log.worker.err" || wrc=$?
    wait "$hpid" || hrc=$?
    local ok=1 why="host exit $hrc, worker exit $wrc"
    [ "$hrc" = "$hw" ] || { ok=0; why="$why (want host $hw)"; }
    [ "$wrc" = "$ww" ] || { ok=0; why="$why (want worker $ww)"; }
    if [ -n "$ppid" ]; then
        sleep 0.3
        kill -TERM "$ppid" 2>/dev/null || true
        wait "$ppid" 2>/dev/null || true
        local n
        n=$(count_violations "$log.proxy" "$log.proxy.err")
        why="$why, proxy violations by the host $n"
        if [ "$viol" = none ] && [ "$n" != 0 ]; then ok=0; why="$why (want none)"; fi
        if [ "$viol" = some ] && [ "$n" = 0 ]; then ok=0; why="$why (want some)"; fi
        local seen
        if seen=$(pcap_check "$PROXY_CONTRACT" "$log.pcapng" "$log.proxy"); then
            why="$why; wireshark: $seen"
        else
            ok=0; why="$why; $seen"
        fi
    fi
    if [ $ok = 1 ]; then
        passes=$((passes + 1)); echo "PASS $name: $why"
    else
        fails=$((fails + 1)); echo "FAIL $name: $why"
        for f in host.err worker.err proxy proxy.err; do
            if [ -f "$log.$f" ]; then tail -n 25 "$log.$f" | sed "s/^/    $f: /"; fi
        done
    fi
}

MINI=("$PY" "$HERE/tests/mini_worker.py" --url @URL@ --token "$TOKEN" --session-id "$SID")

# A. Host against the scripted test worker.
for via in direct proxy; do
    if [ $via = direct ]; then none=-; some=-; else none=none; some=some; fi
    pair "mini/$via/normal" 0 0 $none "" "${MINI[@]}" --scenario normal
    pair "mini/$via/redial" 0 0 $none "" "${MINI[@]}" --scenario redial
    pair "mini/$via/host-break-sampling-accept" 0 0 $some "--break sampling-accept" "${MINI[@]}" --scenario normal --expect-sampling-result
done
# Upgrade refusals happen before any session: the host then gives up on its dial deadline (exit 1).
pair "mini/direct/bad-token-401" 1 0 - "--dial-seconds 3" "${MINI[@]}" --scenario bad-token
pair "mini/direct/bad-major-426" 1 0 - "--dial-seconds 3" "${MINI[@]}" --scenario bad-subprotocol

# B. Host against the reference Python worker.
WORKER=$ROOT/examples/toolchannel/worker.py
if [ -f "$WORKER" ]; then
    WS_DIR=$OUT/workspace
    mkdir -p "$WS_DIR"
    W=("$PY" "$WORKER" --url @URL@ --token "$TOKEN" --session-id "$SID" --workspace "$WS_DIR")
    pair "worker.py/direct" 0 0 - "--tool echo --arguments {\"text\":\"hi\"}" "${W[@]}"
    pair "worker.py/proxy" 0 0 none "--tool echo --arguments {\"text\":\"hi\"}" "${W[@]}"
else
    echo "MISSING examples/toolchannel/worker.py: the host/worker pair was NOT run"
    fails=$((fails + 1))
fi

echo "toolchannel host: $passes passed, $fails failed"
[ "$fails" = 0 ]
