#!/usr/bin/env bash
# Runs every benchmark (each prints its baseline from the same run beside it, and the
# ratios) and appends a dated results section to docs/benchmarks.md, with the machine's
# 1-minute load average before and after each benchmark. A benchmark that starts with
# more than half the cores busy (after waiting up to 3 min for the load to fade) is
# marked UNDER LOAD: compare idle runs with idle runs. A benchmark that fails is recorded
# as failed with the end of its stderr, and the script exits 1 after the others ran.
#
# usage: scripts/bench.sh [BENCH...]    (default: wire relay enforce scale secure generate py_import)
#        BENCH_DOC=FILE to write somewhere else; BENCH_DRY=1 to print without writing
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A PKG=([wire]=contract [relay]=contract-proxy [enforce]=contract-proxy [scale]=contract-proxy [secure]=contract-proxy [generate]=contractgen
    [py_import]=contractgen)
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(wire relay enforce scale secure generate py_import)
for b in "${benches[@]}"; do
    [ -n "${PKG[$b]:-}" ] || { echo "bench.sh: unknown benchmark $b (${!PKG[*]})" >&2; exit 2; }
done
DOC=${BENCH_DOC:-docs/benchmarks.md}
cores=$(nproc)
load() { cut -d' ' -f1 /proc/loadavg; }

# The baselines' tools: socat, websocat, the Python peers and the SDK suite's venv (msgspec)
# (present ones cost seconds).
scripts/setup.sh apt peers py >&2

section=$(mktemp)
trap 'rm -f "$section" "$section.out" "$section.err"' EXIT
{
    echo
    echo "## Results $(date -u '+%Y-%m-%d %H:%M') UTC, $(git rev-parse --short HEAD), $cores cores"
} >"$section"
busy() { awk -v l="$(load)" -v c="$cores" 'BEGIN { exit !(l > c / 2) }'; }
# Let the load of what ran before (a build, the previous benchmark) fade, for at most 3 min.
settle() {
    local i
    for i in $(seq 18); do busy || return 0; sleep 10; done
}
# Criterion's per-measurement blocks stay in target/criterion; the page keeps the summary
# lines each benchmark prints (ratios, verdicts, tables).
summary() { grep -vE '^( |$|Found |[A-Za-z0-9_-]+/[A-Za-z0-9_/.-]+( |$))' || true; }
failed=0
for b in "${benches[@]}"; do
    # Built before the load is read: compiling is not the benchmark's load.
    cargo bench --no-run -p "${PKG[$b]}" --bench "$b" >&2
    settle
    before=$(load)
    mark=""
    busy && mark=" **UNDER LOAD**"
    status=0
    cargo bench -p "${PKG[$b]}" --bench "$b" 2>"$section.err" | tee "$section.out" || status=$?
    after=$(load)
    {
        echo
        echo "### \`cargo bench -p ${PKG[$b]} --bench $b\`"
        echo
        echo "Load average (1 min): $before before, $after after.$mark"
        echo
        echo '```'
        summary <"$section.out"
        if [ "$status" -ne 0 ]; then
            echo "FAILED (exit $status); the end of its stderr:"
            tail -n 15 "$section.err"
        fi
        echo '```'
    } >>"$section"
    [ "$status" -eq 0 ] || { failed=1; tail -n 15 "$section.err" >&2; }
done
if [ -n "${BENCH_DRY:-}" ]; then
    cat "$section"
else
    cat "$section" >>"$DOC"
    echo "bench.sh: results appended to $DOC" >&2
    # The scale benchmark's curves, as plotted in this run.
    if [[ " ${benches[*]} " == *" scale "* ]] && [ -f target/scale-bench.svg ]; then
        cp target/scale-bench.svg "$(dirname "$DOC")/benchmarks-scale.svg"
        echo "bench.sh: the scale curves are in $(dirname "$DOC")/benchmarks-scale.svg" >&2
    fi
fi
exit "$failed"
