#!/usr/bin/env bash
# The proxy on Windows, run for real under Wine: contract-proxy.exe and the Rust
# kernel peers (kernel-peer.exe) built for x86_64-pc-windows-gnu, in a Wine prefix
# kept under the target directory (docs/proxy.md, "Windows").
#
#   (a) a kernel session over named pipes, control and data, shell <-> proxy <-> core:
#       the live view (--log json) shows the shell's script answered, no violation
#       (no audio yet: see docs/proxy.md, "Windows", on the race it shows);
#       the recording reads on Linux (`show`); the capture (--pcap) reads in tshark as
#       the proxy logged it; Ctrl-C (SIGINT, which Wine turns into the console's
#       CTRL_C_EVENT) stops the proxy with its summary;
#   (b) a pipe bridged to TCP, and (c) TCP bridged to a pipe: the same session;
#   (d) clients arriving together on one pipe: each finds an instance (the listener
#       keeps the next one ready) or retries ERROR_PIPE_BUSY, and each is answered;
#   (e) a stand-in (--listen stdio --upstream exec:…): a line through the child and
#       back, and the child's exit code as the proxy's.
#
# usage: scripts/wine-test.sh   (env: KEEP=1 keeps the work dir; WINE: the wine64 loader)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=../examples/tools.sh
. "$ROOT/examples/tools.sh"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
# The Windows build's own target directory: cargo locks one per build, and the Linux
# stages running beside this one must not wait for it.
WIN_TARGET=${WIN_TARGET:-$TARGET/windows}
WIN=$WIN_TARGET/x86_64-pc-windows-gnu/debug
WINE=${WINE:-$(command -v wine64 || echo /usr/lib/wine/wine64)}
export WINEPREFIX=$TARGET/wine WINEDEBUG=-all
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wine-test.XXXXXX")
PIDS=()
failures=0
cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    "$(dirname "$WINE")/wineserver" -k 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
say() { printf '\n== %s\n' "$*"; }
result() { # ok? text
    if [ "$1" = 1 ]; then printf 'PASS  %s\n' "$2"; else printf 'FAIL  %s\n' "$2"; failures=$((failures + 1)); fi
}
die() { echo "FAIL  $*"; exit 1; }

[ -x "$WINE" ] || die "no wine64 (scripts/setup.sh apt installs Debian's wine64)"
t0=$(date +%s)
env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS cargo build --quiet --locked --target-dir "$WIN_TARGET" \
    --target x86_64-pc-windows-gnu -p contract-proxy -p kernel-peer || die "the Windows build"
echo "windows build: $(($(date +%s) - t0)) s"

# The prefix, once: Wine's own setup, then the bcryptprimitives.dll Wine 8.0 lacks.
dll=$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll
if [ ! -f "$dll" ]; then
    t0=$(date +%s)
    "$WINE" wineboot --init >/dev/null 2>&1
    x86_64-w64-mingw32-gcc -shared -O2 -o "$WORK/bcryptprimitives.dll" \
        scripts/wine/bcryptprimitives.c scripts/wine/bcryptprimitives.def -lbcrypt || die "the DLL stand-in"
    cp "$WORK/bcryptprimitives.dll" "$dll"
    echo "wine prefix: $(($(date +%s) - t0)) s"
fi
"$WINE" "$WIN/contract-proxy.exe" --version >/dev/null 2>&1 || die "contract-proxy.exe does not start under Wine"

# bg NAME EXE ARGS...: start a Windows program; its pid in LAST.
bg() {
    local name=$1 exe=$2
    shift 2
    "$WINE" "$WIN/$exe" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    LAST=$!
    PIDS+=("$LAST")
}
# says FILE TEXT SECONDS: wait (bounded) until FILE holds TEXT; 0 when it does.
says() {
    local i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt $(($3 * 10)) ] && return 1; sleep 0.1
    done
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# answers LOG: the number of responses the proxy logged.
answers() { grep -c '"kind":"response"' "$1" 2>/dev/null || true; }
# until_answers LOG N SECONDS
until_answers() {
    local i=0
    while [ "$(answers "$1")" -lt "$2" ]; do
        i=$((i + 1)); [ $i -gt $(($3 * 10)) ] && return 1; sleep 0.1
    done
}
# stop PID SECONDS: SIGINT, then wait; 0 when it ended in time.
stop() {
    kill -INT "$1" 2>/dev/null
    local i=0
    while kill -0 "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt $(($2 * 10)) ] && return 1; sleep 0.1
    done
}
# The shell's script, as the proxy logged it: requests from the shell, in order.
script_of() {
    "$PY" - "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("kind") == "request" and e.get("from") == "shell":
        print(e["method"], end=" ")
EOF
}
violations() { grep '"verdict":{' "$1" | grep -vc '"verdict":{"verdict":"ok"}' || true; }
# The shell ends its script with `conformance:speak 2`: the core speaks on the data
# channel under the credit the shell grants, which the proxy enforces.
SCRIPT="hello command.handle settings.describe command.handle command.handle command.handle "
SCRIPT_N=6

# session NAME SHELL_CONTROL SHELL_DATA PROXY_CONTROL PROXY_DATA: shell, proxy and core;
# checks the live view, then stops the proxy with Ctrl-C.
session() {
    local name=$1 sc=$2 sd=$3 pc=$4 pd=$5 d=$WORK/$1
    mkdir -p "$d"
    cat >"$d/proxy.toml" <<EOF
mode = "enforce"

[[route]]
name = "control"
contract = "kernel"
channel = "control"
listen = "$pc"
upstream = "$sc"

[[route]]
name = "data"
contract = "kernel"
channel = "data"
listen = "$pd"
upstream = "$sd"
EOF
    bg "$name.shell" kernel-peer.exe shell --control "$sc" --data "$sd" --sessions 1 --speak 2
    local shell=$LAST
    sleep 1
    bg "$name.proxy" contract-proxy.exe run --config "$d/proxy.toml" --log json \
        --record "$d/session.cprec" --pcap "$d/session.pcapng"
    local proxy=$LAST
    says "$WORK/$name.proxy.err" "data: listening" 20
    bg "$name.core" kernel-peer.exe core --control "$pc" --data "$pd"
    local core=$LAST
    local log=$WORK/$name.proxy.out
    until_answers "$log" "$SCRIPT_N" 60
    result $([ "$(script_of "$log")" = "$SCRIPT" ] && echo 1 || echo 0) \
        "$name: the proxy relayed the shell's script ($(script_of "$log"))"
    result $([ "$(answers "$log")" -ge "$SCRIPT_N" ] && echo 1 || echo 0) "$name: every request answered ($(answers "$log") responses)"
    says "$log" '"method":"stream.close"' 30
    kill -KILL "$core" 2>/dev/null
    wait "$core" 2>/dev/null
    stop "$proxy" 20
    local stopped=$?
    result $([ $stopped = 0 ] && grep -q '^contract-proxy: stopping' "$WORK/$name.proxy.err" &&
        grep -qE '^contract-proxy: [0-9]+ connections, [0-9]+ frames' "$WORK/$name.proxy.err" && echo 1 || echo 0) \
        "$name: Ctrl-C stopped the proxy with its summary"
    # Counted once the proxy has stopped: the stream's last frames may be logged after
    # its close, which travelled on the other connection.
    local audio
    audio=$(grep -c '"route":"data"' "$log" || true)
    result $([ "$audio" -gt 0 ] && echo 1 || echo 0) "$name: the core spoke under credit ($audio data frames)"
    result $([ "$(violations "$log")" = 0 ] && echo 1 || echo 0) "$name: no violation ($(violations "$log"))"
    kill -KILL "$shell" 2>/dev/null
    wait "$shell" 2>/dev/null
    local frames shown
    frames=$(grep -c '"verdict":{' "$log" || true)
    shown=$("$PROXY" show --log json "$d/session.cprec" 2>/dev/null | grep -c '"verdict":{' || true)
    result $([ "$shown" = "$frames" ] && [ "$frames" -gt 0 ] && echo 1 || echo 0) \
        "$name: the recording reads on Linux ($shown of $frames frames)"
    # The pretty live view, as Windows prints it, is the one Linux prints of the same frames.
    "$WINE" "$WIN/contract-proxy.exe" show --log pretty "$d/session.cprec" 2>/dev/null | tr -d '\r' >"$d/pretty.win"
    "$PROXY" show --log pretty "$d/session.cprec" 2>/dev/null >"$d/pretty.linux"
    result $(cmp -s "$d/pretty.win" "$d/pretty.linux" && [ -s "$d/pretty.win" ] && echo 1 || echo 0) \
        "$name: the pretty view on Windows matches Linux's ($(wc -l <"$d/pretty.win") lines)"
    local seen
    if seen=$(pcap_check "$ROOT/schema/contracts/kernel.json" "$d/session.pcapng" "$log"); then
        result 1 "$name: wireshark: $seen"
    else
        result 0 "$name: wireshark: $seen"
    fi
}

CLIENTS=8
# burst: a Linux echo server (rukh framing) behind proxy A (pipe listener), proxy B (TCP
# listener, pipe upstream) in front; CLIENTS connections to B at once, one call each.
burst() {
    local e b
    e=$(free_port); b=$(free_port)
    "$PY" "$ROOT/scripts/wine/echo.py" serve "$e" >"$WORK/echo.out" 2>&1 &
    PIDS+=("$!")
    disown "$!" # killed at the end, without bash reporting it
    bg burst.a contract-proxy.exe run --contract rukh --client extension --log json \
        --listen "pipe:$tag-burst" --upstream "tcp:127.0.0.1:$e"
    local a=$LAST
    sleep 1
    bg burst.b contract-proxy.exe run --contract rukh --client extension --log json \
        --listen "tcp:127.0.0.1:$b" --upstream "pipe:$tag-burst"
    local bp=$LAST
    says "$WORK/burst.b.err" "listening on" 30
    local got
    got=$("$PY" "$ROOT/scripts/wine/echo.py" burst "$b" "$CLIENTS")
    result $([ "$got" = "$CLIENTS" ] && echo 1 || echo 0) \
        "burst: $got of $CLIENTS clients at once went through the pipe and were answered"
    # The live view is written in batches: wait (with a deadline) for its lines.
    local conns i=0
    until conns=$(grep -c 'connected from pipe' "$WORK/burst.a.out" || true); [ "$conns" -ge "$CLIENTS" ] || [ $i -ge 100 ]; do
        i=$((i + 1)); sleep 0.1
    done
    result $([ "$conns" = "$CLIENTS" ] && echo 1 || echo 0) "burst: proxy A accepted $conns pipe clients"
    stop "$bp" 20
    stop "$a" 20
}

tag=w$$
say "(a) named pipes: shell <-> contract-proxy.exe <-> core"
session pipes "pipe:$tag-sc" "pipe:$tag-sd" "pipe:$tag-pc" "pipe:$tag-pd"

say "(b) a pipe bridged to TCP: the core dials pipes, the shell listens on TCP"
p1=$(free_port); p2=$(free_port)
session pipe-to-tcp "tcp:127.0.0.1:$p1" "tcp:127.0.0.1:$p2" "pipe:$tag-bc" "pipe:$tag-bd"

say "(c) TCP bridged to a pipe: the core dials TCP, the shell listens on pipes"
p3=$(free_port); p4=$(free_port)
session tcp-to-pipe "pipe:$tag-tc" "pipe:$tag-td" "tcp:127.0.0.1:$p3" "tcp:127.0.0.1:$p4"

say "(d) $CLIENTS clients at once on one pipe: TCP -> proxy B -> pipe -> proxy A -> TCP echo"
burst

say "(e) a stand-in: --listen stdio --upstream exec:…, the child's exit code passed through"
line='{"jsonrpc":"2.0","id":1,"method":"ping"}'
printf '%s\n' "$line" >"$WORK/ping.jsonl"
rc=0
timeout 60 "$WINE" "$WIN/contract-proxy.exe" run --contract mcp --listen stdio \
    --upstream "exec:cmd /c more" <"$WORK/ping.jsonl" >"$WORK/standin.out" 2>"$WORK/standin.err" || rc=$?
result $([ "$rc" = 0 ] && [ "$(tr -d '\r' <"$WORK/standin.out")" = "$line" ] && echo 1 || echo 0) \
    "stand-in: the line went through the child and back (exit $rc)"
rc=0
timeout 60 "$WINE" "$WIN/contract-proxy.exe" run --contract mcp --listen stdio \
    --upstream "exec:cmd /c exit 3" </dev/null >/dev/null 2>"$WORK/standin3.err" || rc=$?
result $([ "$rc" = 3 ] && echo 1 || echo 0) "stand-in: the child's exit code 3 is the proxy's ($rc)"

say "(f) the pipe's security descriptor: its own user and LocalSystem, no one else"
x86_64-w64-mingw32-gcc -O2 -o "$WORK/pipe_sddl.exe" scripts/wine/pipe_sddl.c -ladvapi32 || die "pipe_sddl.exe"
bg acl contract-proxy.exe run --contract rukh --listen "pipe:$tag-acl" --upstream "tcp:127.0.0.1:$(free_port)"
acl=$LAST
says "$WORK/acl.err" "listening on pipe:$tag-acl" 20
sddl=$("$WINE" "$WORK/pipe_sddl.exe" "$tag-acl" 2>&1 | tr -d '\r')
stop "$acl" 20
result $(echo "$sddl" | grep -qE '^D:P\(A;;GA;;;S-1-5-[0-9-]+\)\(A;;GA;;;SY\)$' && echo 1 || echo 0) \
    "pipe ACL: a protected DACL for the listening user and SYSTEM only ($sddl)"

echo
if [ "$failures" = 0 ]; then echo "wine: all checks passed"; else echo "wine: $failures checks failed"; fi
[ "$failures" = 0 ]
