# Sourced by scripts/test.sh: runs named stages, prefixes every line they print with
# "[name] ", records each one's wall time and result, and prints the timing table.
#
#   stage NAME CMD...       run CMD now
#   stage_bg NAME CMD...    run CMD in the background (its lines interleave, still prefixed)
#   stage_wait NAME...      wait for background stages; fails if one of them failed
#   stage_table             the table: stage, wall time, result, and the run's total, then
#                           "stages: N passed, N failed"
# A stage's result is kept in $STAGES_DIR/NNN-NAME as "MILLISECONDS RESULT", its output in
# $STAGES_DIR/logs/NNN-NAME: a failed stage's FAIL lines and last lines are printed again
# above the table, where a log read from its end (CI's) shows them.

STAGES_DIR=$(mktemp -d "${TMPDIR:-/tmp}/stages.XXXXXX")
mkdir "$STAGES_DIR/logs"
STAGES_T0=$(date +%s%3N)
STAGES_SEQ=0
declare -A STAGES_PID=()

_stage_run() { # FILE NAME CMD...
    local file=$1 name=$2 t0 rc
    shift 2
    t0=$(date +%s%3N)
    # sed -u: each line shows as soon as it is printed, not when a buffer fills.
    { "$@" 2>&1; } | tee "$STAGES_DIR/logs/${file##*/}" | sed -u "s/^/[$name] /"
    rc=${PIPESTATUS[0]}
    local ms=$(($(date +%s%3N) - t0))
    if [ "$rc" -eq 0 ]; then echo "$ms ok" >"$file"; else echo "$ms FAILED($rc)" >"$file"; fi
    return "$rc"
}

_stage_file() { # sets FILE for stage NAME (not in a subshell: it counts the stages)
    STAGES_SEQ=$((STAGES_SEQ + 1))
    FILE=$(printf '%s/%03d-%s' "$STAGES_DIR" "$STAGES_SEQ" "$1")
    echo "0 did-not-finish" >"$FILE"
}

stage() {
    local name=$1 FILE
    shift
    _stage_file "$name"
    echo "== $name: $*"
    _stage_run "$FILE" "$name" "$@"
}

stage_bg() {
    local name=$1 FILE
    shift
    _stage_file "$name"
    echo "== $name (background): $*"
    _stage_run "$FILE" "$name" "$@" &
    STAGES_PID[$name]=$!
}

stage_wait() {
    local rc=0 name
    for name in "$@"; do
        [ -n "${STAGES_PID[$name]:-}" ] || continue
        wait "${STAGES_PID[$name]}" || rc=1
        unset "STAGES_PID[$name]"
    done
    return $rc
}

_fmt_ms() { printf '%dm%02d.%ds' $(($1 / 60000)) $(($1 / 1000 % 60)) $(($1 % 1000 / 100)); }

# A failed stage's lines that say FAIL (the first 20), then its last 30 lines.
_stage_failure() { # NAME LOG
    echo
    echo "== $1 failed: its FAIL lines and its last lines (the whole output is above)"
    [ -f "$2" ] || { echo "[$1] (it printed nothing)"; return 0; }
    grep -m 20 -E 'FAIL|error' "$2" | sed "s/^/[$1] /" || true
    echo "[$1] ..."
    tail -n 30 "$2" | sed "s/^/[$1] /"
}

stage_table() {
    local f name ms result failed=0 passed=0
    for f in "$STAGES_DIR"/*; do
        [ -f "$f" ] || continue
        read -r ms result <"$f"
        name=$(basename "$f")
        [ "$result" = ok ] || _stage_failure "${name#*-}" "$STAGES_DIR/logs/$name"
    done
    echo
    printf '%-18s %10s  %s\n' stage "wall time" result
    for f in "$STAGES_DIR"/*; do
        [ -f "$f" ] || continue
        name=$(basename "$f")
        name=${name#*-}
        read -r ms result <"$f"
        if [ "$result" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
        printf '%-18s %10s  %s\n' "$name" "$(_fmt_ms "$ms")" "$result"
    done
    printf '%-18s %10s  %s\n' total "$(_fmt_ms $(($(date +%s%3N) - STAGES_T0)))" \
        "$([ $failed -eq 0 ] && echo ok || echo "$failed stage(s) failed")"
    # The closing line in the form CI's log readers count.
    echo "stages: $passed passed, $failed failed"
    rm -rf "$STAGES_DIR"
    return $((failed > 0))
}
