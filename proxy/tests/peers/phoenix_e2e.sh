#!/usr/bin/env bash
# The Phoenix end-to-end run (proxy/tests/phoenix.rs), executed under `unshare -n`:
# a private network namespace with only loopback up, so Phoenix's OTLP gRPC
# receiver (which binds every interface) is reachable from this namespace only.
# Starts Phoenix, waits until it is ready, runs the proxy half (the test binary's
# phoenix_child_session: a kernel session relayed through the proxy with OTLP
# export to Phoenix), then reads the spans back through Phoenix's REST API into
# $WORK/spans.json. Every wait has a deadline.
# Usage: phoenix_e2e.sh VENV WORK TEST_BINARY
set -euo pipefail
VENV=$1
WORK=$2
TESTBIN=$3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY="$VENV/bin/python"

ip link set lo up
export PHOENIX_WORKING_DIR="$WORK/phoenix" PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=6006 \
    PHOENIX_GRPC_PORT=4317 PHOENIX_TELEMETRY_ENABLED=false
mkdir -p "$PHOENIX_WORKING_DIR"
"$PY" -m phoenix.server.main serve >"$WORK/phoenix.log" 2>&1 &
PHX=$!
trap 'kill $PHX 2>/dev/null || true; wait $PHX 2>/dev/null || true' EXIT

# Phoenix takes a minute or more to start on a busy machine.
if ! "$PY" "$HERE/phoenix_query.py" wait http://127.0.0.1:6006 4317 600 "$PHX"; then
    echo "phoenix_e2e: Phoenix did not become ready; its log:" >&2
    tail -40 "$WORK/phoenix.log" >&2
    exit 1
fi

if ! PHOENIX_OTLP_URL=http://127.0.0.1:4317 PHOENIX_WORK="$WORK" \
    timeout 180 "$TESTBIN" --ignored --exact phoenix_child_session --nocapture \
    >"$WORK/child.log" 2>&1; then
    echo "phoenix_e2e: the proxy half failed; its log:" >&2
    cat "$WORK/child.log" >&2
    exit 1
fi

EXPECT=$(cat "$WORK/exported")
"$PY" "$HERE/phoenix_query.py" spans http://127.0.0.1:6006 default "$EXPECT" 120 >"$WORK/spans.json"
echo "phoenix_e2e: $(wc -c <"$WORK/spans.json") bytes of spans from Phoenix (expected $EXPECT spans)"
