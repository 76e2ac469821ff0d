#!/usr/bin/env bash
# Build and run the kernel reference pair: the C# shell (shell/Shell.cs) and the Python core
# (core.py), both on the SDKs contractgen generates from schema/contracts/kernel.json.
#
#   1. generate the Python and C# SDKs into target/examples-sdk/{python,csharp}/kernel
#   2. compile the shell with Mono mcs (C# 7.3) for the .NET 8 runtime (recipe of sdk-tests/csharp/run.sh)
#   3. run the pair directly                                  -> the shell must exit 0
#   4. run the pair through contract-proxy (observe mode)     -> shell exit 0 and 0 violations
#   5. core --break credit, directly                          -> the shell must catch it (exit 1)
#   6. core --break credit, through the proxy                 -> violations > 0 (credit.overrun)
#   7. shell --break trace-id, through the proxy              -> violations > 0 (missing trace_id)
#   8. contract-proxy conformance --play shell against the core (--ttl 2)      -> exit 0,
#      skipped only 15.7, whose core side is the derived task cue (kernel.derived.cue.task)
#   9. the same against core --break credit                    -> exit 1, only kernel.derived.credit.streams fails
#  10. contract-proxy conformance --play core against the shell (--core none)  -> exit 0,
#      skipped only the two checks that do not apply to a shell (15.8, 15.10)
#  11. the same against shell --break trace-id                 -> exit 1, only kernel.derived.messages
#      fails (a message without trace_id breaks the envelope's schema)
#      (8-11 write --junit; the JUnit file must list every check the suite lists)
#
# usage: examples/kernel/run.sh [--build-only]
# env:   CONTRACTGEN, PROXY, PY (default: the workspace's own builds and .venv-peers, see
#        examples/tools.sh), KEEP=1 keeps the work dir with every log.
# Exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ROOT=$root
# shellcheck source=../tools.sh
. "$root/examples/tools.sh"
gen=$CONTRACTGEN
proxy=$PROXY
py=$PY
contract="$root/schema/contracts/kernel.json"
sdk_py="$root/target/examples-sdk/python/kernel"
sdk_cs="$root/target/examples-sdk/csharp/kernel"
build="$root/target/examples-sdk/csharp/kernel-shell"

say() { printf '== %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- 1. SDKs
say "generate SDKs from $contract"
# Afresh: a file an older contractgen wrote (a runtime copy) must not be compiled in.
rm -rf "$sdk_py" "$sdk_py-runtime" "$sdk_cs" "$sdk_cs-runtime"
"$gen" generate --lang python --out "$sdk_py" "$contract" >/dev/null
"$gen" runtime --lang python --out "$sdk_py-runtime" >/dev/null
"$gen" generate --lang csharp --out "$sdk_cs" "$contract" >/dev/null
"$gen" runtime --lang csharp --out "$sdk_cs-runtime" >/dev/null
"$py" -c "import sys; sys.path[:0] = ['$sdk_py', '$sdk_py-runtime']; import contract_sdk.kernel" \
    || die "generated Python SDK does not import with $py"

# ---------------------------------------------------------------- 2. compile the shell
"$root/scripts/setup.sh" apt cs >&2 || die "scripts/setup.sh apt cs (Mono mcs and .venv-cs)"
venv="$root/.venv-cs"
site="$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
rt="$site/dnv/net/runtime/.net"
chmod +x "$rt/dotnet"
ref="$(ls -d "$site"/dotnetcore2/bin/shared/Microsoft.NETCore.App/3.* | head -n1)"
stj="$(ls "$rt"/shared/Microsoft.NETCore.App/8.*/System.Text.Json.dll | head -n1)"
refs=()
for a in System.Private.CoreLib System.Runtime System.Console System.Collections System.Collections.Concurrent \
         System.Linq System.Runtime.Extensions System.Memory System.IO.FileSystem System.Net.Sockets \
         System.Net.Primitives System.Diagnostics.Process System.ComponentModel.Primitives System.Threading \
         System.Threading.Thread netstandard; do
    refs+=("-r:$ref/$a.dll")
done
mkdir -p "$build"
say "compile the shell with mcs -> $build/Shell.dll"
mcs -nostdlib -noconfig -langversion:7.2 -nowarn:1591,0162 "${refs[@]}" -r:"$stj" \
    -out:"$build/Shell.dll" "$sdk_cs"-runtime/*.cs "$sdk_cs"/*.cs "$here/shell/Shell.cs" >"$build/mcs.log" 2>&1 \
    || { cat "$build/mcs.log" >&2; die "mcs failed"; }
grep -E 'error|warning' "$build/mcs.log" >&2 || true
cat >"$build/Shell.runtimeconfig.json" <<'EOF'
{"runtimeOptions":{"framework":{"name":"Microsoft.NETCore.App","version":"3.1.0"},"rollForward":"Major"}}
EOF
[ "${1:-}" = "--build-only" ] && { say "built"; exit 0; }

shell() { DOTNET_ROOT="$rt" DOTNET_CLI_TELEMETRY_OPTOUT=1 "$rt/dotnet" "$build/Shell.dll" "$@"; }

# Unix socket paths must stay short (108 bytes): a fresh dir under /tmp.
work="$(mktemp -d /tmp/kernel-pair.XXXXXX)"
proxy_pid=""
cleanup() {
    if [ -n "$proxy_pid" ] && kill -0 "$proxy_pid" 2>/dev/null; then kill "$proxy_pid" 2>/dev/null || true; fi
    if [ "${KEEP:-0}" = 1 ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
core_cmd="$py $here/core.py --sdk $sdk_py"

# Run the shell (and the core it launches) under a deadline; echo its exit code.
run_pair() { # name, shell args...
    local name="$1"; shift
    local rc=0
    timeout 120 bash -c 'DOTNET_ROOT="$0" DOTNET_CLI_TELEMETRY_OPTOUT=1 "$0/dotnet" "$@"' "$rt" "$build/Shell.dll" "$@" \
        >"$work/$name.out" 2>"$work/$name.err" || rc=$?
    echo "$rc"
}

# Start the proxy with a two-route config (control + data of one session); sets proxy_pid.
start_proxy() { # name
    local name="$1" d="$work/$1"
    mkdir -p "$d"
    cat >"$d/proxy.toml" <<EOF
mode = "observe"

[[route]]
name = "control"
contract = "kernel"
channel = "control"
listen = "unix:$d/control.p"
upstream = "unix:$d/control.s"

[[route]]
name = "data"
contract = "kernel"
channel = "data"
listen = "unix:$d/data.p"
upstream = "unix:$d/data.s"
EOF
    "$proxy" run --config "$d/proxy.toml" --log json --pcap "$d/capture.pcapng" >"$d/proxy.jsonl" 2>"$d/proxy.err" &
    proxy_pid=$!
    for _ in $(seq 1 200); do
        [ -S "$d/control.p" ] && [ -S "$d/data.p" ] && return 0
        kill -0 "$proxy_pid" 2>/dev/null || { cat "$d/proxy.err" >&2; die "proxy exited early"; }
        sleep 0.05
    done
    die "proxy did not listen within 10 s"
}

# Stop the proxy (SIGTERM: it prints its summary line) and echo its violation count.
stop_proxy() { # name
    local d="$work/$1"
    kill -TERM "$proxy_pid" 2>/dev/null || true
    for _ in $(seq 1 200); do kill -0 "$proxy_pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$proxy_pid" 2>/dev/null; then kill -KILL "$proxy_pid"; die "proxy did not stop within 10 s"; fi
    wait "$proxy_pid" 2>/dev/null || true
    proxy_pid=""
    local line
    line="$(grep -E '^contract-proxy: [0-9]+ connections, [0-9]+ frames, [0-9]+ violations' "$d/proxy.err" | tail -n1)"
    [ -n "$line" ] || { cat "$d/proxy.err" >&2; die "$1: no summary line from the proxy"; }
    echo "$line" >"$d/summary"
    sed -E 's/.* ([0-9]+) violations.*/\1/' <<<"$line"
}

# Violations by rule/class from the JSON live view, for the report.
violations_seen() { # name
    "$py" - "$work/$1/proxy.jsonl" <<'EOF'
import json, sys, collections
c = collections.Counter()
for line in open(sys.argv[1], encoding="utf-8"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    v = e.get("verdict")
    if not isinstance(v, dict) or v.get("verdict") in (None, "ok"):
        continue
    what = v.get("rule") or v.get("class") or ""
    c[f"{v.get('verdict')} {what} {v.get('code') or ''} on {e.get('method')}: {v.get('reason', '')}"] += 1
for k, n in sorted(c.items()):
    print(f"     {n} x {k}")
EOF
}

summary_line() { grep -E '^shell: [0-9]+ passed, [0-9]+ failed' "$work/$1.out" | tail -n1 || true; }

failures=0
result() { # ok?, text
    if [ "$1" = 1 ]; then printf 'PASS  %s\n' "$2"; else printf 'FAIL  %s\n' "$2"; failures=$((failures + 1)); fi
}

say "proxy: $proxy"
[ -x "$proxy" ] || die "no contract-proxy at $proxy (cargo build -p contract-proxy, or set PROXY)"

# ---------------------------------------------------------------- 3. direct
say "(a) shell <-> core directly"
d="$work/direct"; mkdir -p "$d"
rc=$(run_pair direct --control "unix:$d/control.s" --data "unix:$d/data.s" --core "$core_cmd")
echo "   $(summary_line direct)"
result $([ "$rc" = 0 ] && echo 1 || echo 0) "direct: shell exit $rc (want 0)"
[ "$rc" = 0 ] || { tail -n 40 "$work/direct.out" "$work/direct.err" >&2; }

# ---------------------------------------------------------------- 4. through the proxy
say "(b) shell <-> contract-proxy (control + data routes) <-> core"
start_proxy proxied
d="$work/proxied"
rc=$(run_pair proxied --control "unix:$d/control.s" --data "unix:$d/data.s" \
    --core-control "unix:$d/control.p" --core-data "unix:$d/data.p" --core "$core_cmd")
v=$(stop_proxy proxied)
echo "   $(summary_line proxied)"
echo "   $(cat "$d/summary")"
violations_seen proxied
result $([ "$rc" = 0 ] && echo 1 || echo 0) "proxied: shell exit $rc (want 0)"
result $([ "$v" = 0 ] && echo 1 || echo 0) "proxied: proxy counted $v violations (want 0)"
if seen=$(pcap_check "$root/schema/contracts/kernel.json" "$d/capture.pcapng" "$d/proxy.jsonl"); then
    result 1 "proxied: wireshark: $seen"
else
    result 0 "proxied: wireshark: $seen"
fi
[ "$rc" = 0 ] || { tail -n 40 "$work/proxied.out" "$work/proxied.err" >&2; }

# ---------------------------------------------------------------- 5./6. core --break credit
say "(c) core --break credit, directly: the shell must catch the overrun"
d="$work/credit-direct"; mkdir -p "$d"
rc=$(run_pair credit-direct --control "unix:$d/control.s" --data "unix:$d/data.s" --core "$core_cmd --break credit")
echo "   $(summary_line credit-direct)"
grep -E 'FAIL .*credit' "$work/credit-direct.out" | head -n 3 | sed 's/^/   /' || true
caught=0; grep -q 'exceeds the granted credit' "$work/credit-direct.out" && caught=1
result $([ "$rc" = 1 ] && [ "$caught" = 1 ] && echo 1 || echo 0) "credit-direct: shell exit $rc (want 1) and reported the overrun"

say "(d) core --break credit, through the proxy: the proxy must flag it"
start_proxy credit-proxied
d="$work/credit-proxied"
rc=$(run_pair credit-proxied --control "unix:$d/control.s" --data "unix:$d/data.s" \
    --core-control "unix:$d/control.p" --core-data "unix:$d/data.p" --core "$core_cmd --break credit")
v=$(stop_proxy credit-proxied)
echo "   $(cat "$d/summary")"
violations_seen credit-proxied
flagged=0; grep -q 'credit.overrun' "$d/proxy.jsonl" && flagged=1
result $([ "$v" -gt 0 ] && [ "$flagged" = 1 ] && echo 1 || echo 0) "credit-proxied: proxy counted $v violations (want > 0, credit.overrun among them)"
result $([ "$rc" = 1 ] && echo 1 || echo 0) "credit-proxied: shell exit $rc (want 1)"

# ---------------------------------------------------------------- 7. shell --break trace-id
say "(e) shell --break trace-id, through the proxy: the proxy must flag the request without trace_id"
start_proxy trace-proxied
d="$work/trace-proxied"
rc=$(run_pair trace-proxied --control "unix:$d/control.s" --data "unix:$d/data.s" \
    --core-control "unix:$d/control.p" --core-data "unix:$d/data.p" --core "$core_cmd" --break trace-id)
v=$(stop_proxy trace-proxied)
echo "   $(summary_line trace-proxied)"
echo "   $(cat "$d/summary")"
violations_seen trace-proxied
grep -h 'BREAK trace-id' "$work/trace-proxied.out" | sed 's/^/   /' || true
result $([ "$v" -gt 0 ] && echo 1 || echo 0) "trace-proxied: proxy counted $v violations (want > 0)"

# ---------------------------------------------------------------- 8.-11. conformance suite
# The suite launches the target afresh for every check and fills in {control}/{data}. The shell
# is the .NET app: its runtime root goes to the suite's environment, which the child inherits.
# TIME_SCALE (CONTRACT_TIME_SCALE, honoured by the suite and both peers) shortens the contract's
# heartbeat timers for the runs whose point is another check; (f) and (h) keep the contract's own.
conformance() { # name, role, expected rc, expected failed ids (comma list), expected skipped ids, target
    local name="$1" role="$2" want_rc="$3" want_failed="$4" want_skipped="$5" target="$6"
    local d="$work/$name" rc=0
    mkdir -p "$d"
    "$proxy" conformance --contract kernel --play "$role" --list --target exec:true >"$d/list" \
        || die "$name: conformance --list failed"
    timeout 900 env DOTNET_ROOT="$rt" DOTNET_CLI_TELEMETRY_OPTOUT=1 CONTRACT_TIME_SCALE="${TIME_SCALE:-1}" \
        "$proxy" conformance --contract kernel --play "$role" --target "$target" \
        --task-seconds 2 --junit "$d/junit.xml" >"$d/out" 2>"$d/err" || rc=$?
    grep -E '^(PASS|FAIL|SKIP) ' "$d/out" | sed 's/^/   /' || true
    echo "   $(tail -n1 "$d/out")"
    result $([ "$rc" = "$want_rc" ] && echo 1 || echo 0) "$name: conformance exit $rc (want $want_rc)"
    local verdict
    verdict=$("$py" - "$d/list" "$d/junit.xml" "$want_failed" "$want_skipped" <<'EOF'
import sys
import xml.etree.ElementTree as ET
listed = [line.split()[0] for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
want_failed = {x for x in sys.argv[3].split(",") if x}
want_skipped = {x for x in sys.argv[4].split(",") if x}
try:
    root = ET.parse(sys.argv[2]).getroot()
except (OSError, ET.ParseError) as e:
    print(f"no readable JUnit file: {e}")
    sys.exit(0)
ids, failed, skipped = [], set(), set()
for tc in root.iter("testcase"):
    cid = next((p.get("value") for p in tc.iter("property") if p.get("name") == "id"), None)
    ids.append(cid)
    if tc.find("failure") is not None or tc.find("error") is not None:
        failed.add(cid)
    if tc.find("skipped") is not None:
        skipped.add(cid)
problems = []
if not listed or ids != listed:
    problems.append(f"JUnit lists {ids}, the suite lists {listed}")
if failed != want_failed:
    problems.append(f"failed {sorted(failed)}, want {sorted(want_failed)}")
if skipped != want_skipped:
    problems.append(f"skipped {sorted(skipped)}, want {sorted(want_skipped)}")
print("; ".join(problems) if problems else "ok")
EOF
)
    local detail=""
    [ "$verdict" = ok ] || detail=" ($verdict)"
    result $([ "$verdict" = ok ] && echo 1 || echo 0) "$name: JUnit lists all $(wc -l <"$d/list") checks; failed/skipped as expected$detail"
    if [ "$rc" != "$want_rc" ] || [ "$verdict" != ok ]; then
        grep -A8 -E '^FAIL ' "$d/out" | head -n 40 >&2 || true
        tail -n 20 "$d/err" >&2 || true
    fi
}

not_for_shells="kernel.15.8,kernel.15.10"
# 15.7's and 15.5's core sides are derived from the contract's task cue and credit entry
# (kernel.derived.cue.task, kernel.derived.credit.streams).
not_for_cores="kernel.15.5,kernel.15.7"
py_core="exec:$py $here/core.py --sdk $sdk_py --control {control} --data {data} --ttl 2"
cs_shell="exec:$rt/dotnet $build/Shell.dll --control {control} --data {data} --core none"

say "(f) conformance --play shell against the Python core: every check passes"
conformance suite-core shell 0 "" "$not_for_cores" "$py_core"

say "(g) conformance --play shell against core --break credit: exactly kernel.derived.credit.streams fails"
TIME_SCALE=0.2 conformance suite-core-credit shell 1 "kernel.derived.credit.streams" "$not_for_cores" "$py_core --break credit"

say "(h) conformance --play core against the C# shell (--core none): every applicable check passes"
conformance suite-shell core 0 "" "$not_for_shells" "$cs_shell"

say "(i) conformance --play core against shell --break trace-id: exactly kernel.derived.messages fails"
TIME_SCALE=0.2 conformance suite-shell-trace core 1 "kernel.derived.messages" "$not_for_shells" "$cs_shell --break trace-id"

echo
if [ "$failures" = 0 ]; then echo "kernel pair: all runs as expected"; else echo "kernel pair: $failures run check(s) failed"; fi
[ "$failures" = 0 ]
