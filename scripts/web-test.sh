#!/usr/bin/env bash
# The web view (docs/web.md) in headless Chromium:
#
#   1. the front end's npm dependencies (proxy/web/node_modules), installed with `npm ci`
#      when missing or older than package.json / package-lock.json;
#   2. the committed bundle proxy/web/dist (which contract-proxy embeds) is what its
#      sources build: type-check, build into a temp dir, `diff -r` against it;
#   3. the browser test, proxy/web/tests/browser.mjs: real kernel and toolchannel sessions
#      and a recording behind a token, watched through the page (screenshots in
#      target/web-test/screenshots/).
#
# Chromium is Debian's (/usr/bin/chromium, installed by scripts/setup.sh apt); Playwright's
# own browsers are never downloaded. The workspace's binaries are built as the peers'
# scripts build them (examples/tools.sh: a no-op after scripts/test.sh's build), unless
# BIN names a directory holding them already.
#
# usage: scripts/web-test.sh   (env: BIN, PY, CHROMIUM)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WEB=$ROOT/proxy/web
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

if [ ! -x "$CHROMIUM" ]; then
    echo "FAIL: $CHROMIUM is missing: the apt packages chromium and chromium-driver come with scripts/setup.sh apt" >&2
    exit 1
fi
for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (Node.js 20.19+ builds proxy/web)" >&2; exit 1; }
done

# 1. Dependencies: npm ci leaves node_modules/.package-lock.json; older than the lock means stale.
cd "$WEB"
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
    echo "== npm ci (proxy/web)"
    npm ci --no-audit --no-fund
fi

# 2. The committed bundle is fresh.
echo "== proxy/web/dist is what proxy/web/src builds"
FRESH=$(mktemp -d "${TMPDIR:-/tmp}/web-dist.XXXXXX")
trap 'rm -rf "$FRESH"' EXIT
node_modules/.bin/tsc --noEmit
node_modules/.bin/vite build --outDir "$FRESH/dist" --emptyOutDir --logLevel warn
if ! diff -r "$FRESH/dist" dist; then
    echo "FAIL: proxy/web/dist is stale: the sources build something else (diff above)." >&2
    echo "      Run: (cd proxy/web && npm run build), then rebuild contract-proxy, which embeds dist." >&2
    exit 1
fi
echo "dist is fresh: $(cd dist && wc -c index.html assets/app.js assets/app.css | tail -n 1)"
cd "$ROOT"

# 3. The binaries, then the browser test.
if [ -z "${BIN:-}" ]; then
    # shellcheck source=../examples/tools.sh
    . "$ROOT/examples/tools.sh"
    BIN=$TOOLS_BIN
    export PY
fi
export BIN CHROMIUM
echo "== browser test (proxy/web/tests/browser.mjs)"
node "$WEB/tests/browser.mjs"
