#!/usr/bin/env bash
# Runs every test of the project on a fresh machine, installing what it needs.
# .ci/run calls this; so does a developer.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== contracts: contractgen check on all four"
cargo run --quiet --locked -p contractgen -- check schema/contracts/*.json

echo "== cargo test (workspace)"
cargo test --locked --workspace
