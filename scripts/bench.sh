#!/usr/bin/env bash
# Runs every benchmark (each prints its baseline from the same run beside it, and the
# ratios) and appends a dated results section to docs/benchmarks.md, with the machine's
# 1-minute load average before and after each benchmark. A benchmark that starts with
# more than half the cores busy is marked UNDER LOAD: compare idle runs with idle runs.
#
# usage: scripts/bench.sh [BENCH...]    (default: wire relay enforce generate)
#        BENCH_DOC=FILE to write somewhere else; BENCH_DRY=1 to print without writing
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A PKG=([wire]=contract [relay]=contract-proxy [enforce]=contract-proxy [generate]=contractgen)
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(wire relay enforce generate)
for b in "${benches[@]}"; do
    [ -n "${PKG[$b]:-}" ] || { echo "bench.sh: unknown benchmark $b (${!PKG[*]})" >&2; exit 2; }
done
DOC=${BENCH_DOC:-docs/benchmarks.md}
cores=$(nproc)
load() { cut -d' ' -f1 /proc/loadavg; }

# The baselines' tools: socat, websocat and the Python peers (present ones cost seconds).
scripts/setup.sh apt peers >&2

section=$(mktemp)
trap 'rm -f "$section" "$section.out"' EXIT
{
    echo
    echo "## Results $(date -u '+%Y-%m-%d %H:%M') UTC, $(git rev-parse --short HEAD), $cores cores"
} >"$section"
for b in "${benches[@]}"; do
    # Built before the load is read: compiling is not the benchmark's load.
    cargo bench --no-run -p "${PKG[$b]}" --bench "$b" >&2
    before=$(load)
    cargo bench -p "${PKG[$b]}" --bench "$b" 2>/dev/null | tee "$section.out"
    after=$(load)
    mark=""
    awk -v l="$before" -v c="$cores" 'BEGIN { exit !(l > c / 2) }' && mark=" **UNDER LOAD**"
    {
        echo
        echo "### \`cargo bench -p ${PKG[$b]} --bench $b\`"
        echo
        echo "Load average (1 min): $before before, $after after.$mark"
        echo
        echo '```'
        cat "$section.out"
        echo '```'
    } >>"$section"
done
if [ -n "${BENCH_DRY:-}" ]; then
    cat "$section"
else
    cat "$section" >>"$DOC"
    echo "bench.sh: results appended to $DOC" >&2
fi
