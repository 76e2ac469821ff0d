#!/usr/bin/env bash
# xsession reference peers: two sessions register, discover each other and exchange
# messages with delivery_status, (a) directly and (b) through contract-proxy; plus the
# rule-breaking and admission scenarios. Prints PASS/FAIL per check; exits non-zero if
# any check fails. Usage: examples/xsession/run.sh   (env: PY, CONTRACTGEN, PROXY, KEEP=1)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../tools.sh
. "$ROOT/examples/tools.sh"
SDK=$ROOT/target/examples-sdk/python/xsession
SESSION=$HERE/session.py
# Socket paths must stay under 103 bytes: keep the work dir short.
WORK=$(mktemp -d /tmp/xsr.XXXXXX)
PIDS=()
FAILED=0

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ "${KEEP:-0}" = 1 ]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILED=1; }
# check NAME FILE PYEXPR: evaluate PYEXPR with s = the JSON in FILE (or the lines of a log).
check() {
  local name=$1 file=$2 expr=$3
  if "$PY" - "$file" "$expr" <<'EOF'
import json, sys
path, expr = sys.argv[1], sys.argv[2]
try:
    with open(path, encoding="utf-8") as f:
        text = f.read()
except OSError as e:
    print(f"  cannot read {path}: {e}"); sys.exit(1)
try:
    s = json.loads(text)
except ValueError:
    s = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
ok = bool(eval(expr, {"s": s, "any": any, "all": all, "len": len, "sum": sum}))
if not ok:
    print(f"  expression false: {expr}")
sys.exit(0 if ok else 1)
EOF
  then pass "$name"; else fail "$name"; fi
}
# expect_rc NAME WANT GOT
expect_rc() { if [ "$3" = "$2" ]; then pass "$1 (exit $3)"; else fail "$1 (exit $3, want $2)"; fi; }

# wait_pid PID SECONDS: wait for a child with a deadline; kills it when the deadline passes.
wait_pid() {
  local pid=$1 secs=$2 i=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ $i -ge $((secs * 10)) ]; then kill "$pid" 2>/dev/null; echo "  pid $pid killed after ${secs}s"; break; fi
    sleep 0.1; i=$((i + 1))
  done
  wait "$pid"
}

wait_sockets() { # wait_sockets SECONDS PATH...
  local secs=$1 i=0; shift
  for s in "$@"; do
    while [ ! -S "$s" ]; do
      if [ $i -ge $((secs * 10)) ]; then echo "  socket $s did not appear"; return 1; fi
      sleep 0.1; i=$((i + 1))
    done
  done
}

echo "== generating the Python SDK into $SDK"
rm -rf "$SDK"
"$CONTRACTGEN" generate --lang python --out "$SDK" "$ROOT/schema/contracts/xsession.json" >/dev/null || { echo "FAIL contractgen"; exit 1; }
"$CONTRACTGEN" runtime --lang python --out "$SDK-runtime" >/dev/null || { echo "FAIL contractgen runtime"; exit 1; }
export PYTHONPATH=$SDK:$SDK-runtime

# start_proxy DIR NAME...: one contract-proxy, two routes per session: <name>.in (user frames,
# client sender) and <name>.st (delivery_status, client recipient), both to <name>.sock.
# The registry points senders at <name>.in (--ipc-path) and statuses at <name>.st (--reply-path).
start_proxy() {
  local dir=$1; shift
  local cfg=$dir/routes.toml socks=()
  mkdir -p "$dir"
  : >"$cfg"
  for n in "$@"; do
    cat >>"$cfg" <<EOF
[[route]]
name = "to-$n-user"
contract = "xsession"
listen = "unix:$dir/$n.in"
upstream = "unix:$dir/$n.sock"
client = "sender"
auth_required = true

[[route]]
name = "to-$n-status"
contract = "xsession"
listen = "unix:$dir/$n.st"
upstream = "unix:$dir/$n.sock"
client = "recipient"
auth_required = true

EOF
    socks+=("$dir/$n.in" "$dir/$n.st")
  done
  "$PROXY" run --config "$cfg" --log json --pcap "$dir/capture.pcapng" >"$dir/proxy.log" 2>"$dir/proxy.err" &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  wait_sockets 10 "${socks[@]}" || { fail "proxy did not start (see $dir/proxy.err)"; cat "$dir/proxy.err"; return 1; }
}
stop_proxy() { kill -TERM "$PROXY_PID" 2>/dev/null; wait_pid "$PROXY_PID" 10 >/dev/null; }
# via DIR NAME: session options that put the proxy in front of NAME's inbox.
via() { echo "--socket $1/$2.sock --ipc-path $1/$2.in --reply-path $1/$2.st"; }
direct() { echo "--socket $1/$2.sock"; }

# exchange LABEL DIR ADDR_FN: alpha and beta message each other. alpha sends two messages and
# re-sends the second msgId (beta replays its verdict, alpha ignores the repeat); alpha holds
# inbound messages and releases them after 0.3 s, so beta sees held -> delivered.
exchange() {
  local label=$1 dir=$2 how=$3
  mkdir -p "$dir"
  "$PY" "$SESSION" --registry "$dir/reg" --name alpha $($how "$dir" alpha) \
    --send-to beta --text "hello beta" --text "second message" --resend-last \
    --inbound hold --release-held-after 0.3 --expect 1 --timeout 20 \
    --summary "$dir/alpha.json" >"$dir/alpha.out" 2>"$dir/alpha.err" &
  local a=$!
  "$PY" "$SESSION" --registry "$dir/reg" --name beta $($how "$dir" beta) \
    --send-to alpha --text "hello alpha" --expect 2 --timeout 20 \
    --summary "$dir/beta.json" >"$dir/beta.out" 2>"$dir/beta.err" &
  local b=$!
  PIDS+=("$a" "$b")
  wait_pid $a 30; local ra=$?
  wait_pid $b 30; local rb=$?
  expect_rc "$label: alpha" 0 $ra
  expect_rc "$label: beta" 0 $rb
  check "$label: alpha's 2 messages delivered" "$dir/alpha.json" \
    "len(s['sent'])==2 and all(v['state']=='delivered' for v in s['sent'].values())"
  check "$label: alpha ignored the replayed verdict as a repeat" "$dir/alpha.json" "s['repeatsIgnored']>=1"
  check "$label: beta's message went held -> delivered" "$dir/beta.json" \
    "[v['history'] for v in s['sent'].values()]==[['held','delivered']]"
  check "$label: beta received alpha's 2 messages" "$dir/beta.json" \
    "sorted(m['content'] for m in s['received'])==['hello beta','second message']"
  check "$label: alpha received beta's message" "$dir/alpha.json" \
    "[m['content'] for m in s['received']]==['hello alpha']"
  check "$label: registry records removed on exit" "$dir/alpha.json" \
    "__import__('os').listdir('$dir/reg')==[]"
}

# no_auth LABEL DIR HOW: alpha --break no-auth; beta must drop the connection silently.
no_auth() {
  local label=$1 dir=$2 how=$3
  mkdir -p "$dir"
  "$PY" "$SESSION" --registry "$dir/reg" --name beta $($how "$dir" beta) --serve --timeout 20 \
    --summary "$dir/beta.json" >"$dir/beta.out" 2>"$dir/beta.err" &
  local b=$!
  PIDS+=("$b")
  "$PY" "$SESSION" --registry "$dir/reg" --name alpha $($how "$dir" alpha) --break no-auth \
    --send-to beta --text "no auth line" --timeout 3 \
    --summary "$dir/alpha.json" >"$dir/alpha.out" 2>"$dir/alpha.err" &
  local a=$!
  PIDS+=("$a")
  wait_pid $a 15; local ra=$?
  kill -TERM $b 2>/dev/null
  wait_pid $b 10; local rb=$?
  expect_rc "$label: alpha gets no status (unsettled)" 3 $ra
  expect_rc "$label: beta" 0 $rb
  check "$label: alpha's message stays pending" "$dir/alpha.json" \
    "[v['state'] for v in s['sent'].values()]==['pending']"
  check "$label: beta dropped the connection (no-auth), delivered nothing" "$dir/beta.json" \
    "s['connectionsDropped'].get('no-auth',0)>=1 and s['received']==[] and s['statusesSent']==0"
}

echo "== (a) direct exchange"
exchange "a/direct" "$WORK/a" direct

echo "== (b) exchange through contract-proxy"
if start_proxy "$WORK/b" alpha beta; then
  exchange "b/proxy" "$WORK/b" via
  stop_proxy
  check "b/proxy: proxy relayed the user frames" "$WORK/b/proxy.log" \
    "sum(1 for e in s if e.get('method')=='user')>=4"
  check "b/proxy: proxy relayed auth lines and delivery_status frames" "$WORK/b/proxy.log" \
    "sum(1 for e in s if e.get('method')=='auth')>=4 and sum(1 for e in s if e.get('method')=='delivery_status')>=5"
  check "b/proxy: proxy saw 0 violations" "$WORK/b/proxy.log" \
    "all(e['verdict']['verdict']=='ok' for e in s if 'verdict' in e)"
  if seen=$(pcap_check "$ROOT/schema/contracts/xsession.json" "$WORK/b/capture.pcapng" "$WORK/b/proxy.log"); then
    pass "b/proxy: wireshark: $seen"
  else
    fail "b/proxy: wireshark: $seen"
  fi
fi

echo "== (c) --break no-auth, direct"
no_auth "c/no-auth" "$WORK/c" direct

echo "== (d) --break no-auth through contract-proxy"
if start_proxy "$WORK/d" alpha beta; then
  no_auth "d/no-auth-proxy" "$WORK/d" via
  stop_proxy
  check "d/no-auth-proxy: proxy relayed the auth-less user frame" "$WORK/d/proxy.log" \
    "any(e.get('method')=='user' for e in s)"
  # The routes say the inboxes have tokens (auth_required), so the proxy applies
  # beforeHandshake to a first line that is not an auth line.
  check "d/no-auth-proxy: proxy flagged a violation" "$WORK/d/proxy.log" \
    "any(e['verdict']['verdict']!='ok' for e in s if 'verdict' in e)"
fi

echo "== (e) admission: 32 messages at once -> 30 delivered, 2 dropped/rate-limited"
mkdir -p "$WORK/e"
"$PY" "$SESSION" --registry "$WORK/e/reg" --name beta --socket "$WORK/e/beta.sock" --inbound accept \
  --serve --timeout 30 --summary "$WORK/e/beta.json" >"$WORK/e/beta.out" 2>"$WORK/e/beta.err" &
EB=$!
PIDS+=("$EB")
"$PY" "$SESSION" --registry "$WORK/e/reg" --name alpha --socket "$WORK/e/alpha.sock" \
  --send-to beta --text burst --count 32 --no-sender-limit --timeout 20 \
  --summary "$WORK/e/alpha.json" >"$WORK/e/alpha.out" 2>"$WORK/e/alpha.err" &
EA=$!
PIDS+=("$EA")
wait_pid $EA 30; RA=$?
kill -TERM $EB 2>/dev/null; wait_pid $EB 10 >/dev/null
expect_rc "e/admission: alpha" 0 $RA
check "e/admission: 30 delivered, 2 dropped rate-limited" "$WORK/e/alpha.json" \
  "sorted((v['state'],v['dropReason']) for v in s['sent'].values()).count(('delivered',None))==30 and [v['dropReason'] for v in s['sent'].values() if v['state']=='dropped']==['rate-limited']*2"

echo "== (f) admission: the same body twice -> dropped/duplicate; the sender's own mirror refuses the 31st"
mkdir -p "$WORK/f"
"$PY" "$SESSION" --registry "$WORK/f/reg" --name beta --socket "$WORK/f/beta.sock" --inbound accept \
  --serve --timeout 30 --summary "$WORK/f/beta.json" >"$WORK/f/beta.out" 2>"$WORK/f/beta.err" &
FB=$!
PIDS+=("$FB")
"$PY" "$SESSION" --registry "$WORK/f/reg" --name alpha --socket "$WORK/f/alpha.sock" \
  --send-to beta --text "same body" --count 31 --same-text --timeout 20 \
  --summary "$WORK/f/alpha.json" >"$WORK/f/alpha.out" 2>"$WORK/f/alpha.err" &
FA=$!
PIDS+=("$FA")
wait_pid $FA 30; RA=$?
kill -TERM $FB 2>/dev/null; wait_pid $FB 10 >/dev/null
expect_rc "f/duplicate: alpha" 0 $RA
check "f/duplicate: 1 delivered, 29 dropped duplicate, 1 refused locally" "$WORK/f/alpha.json" \
  "[v['state'] for v in s['sent'].values()].count('delivered')==1 and [v['dropReason'] for v in s['sent'].values() if v['state']=='dropped']==['duplicate']*29 and s['localRefusals']==1"

echo
if [ $FAILED = 0 ]; then echo "xsession run.sh: ALL PASSED"; else echo "xsession run.sh: SOME CHECKS FAILED"; fi
exit $FAILED
