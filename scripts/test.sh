#!/usr/bin/env bash
# Runs every test of the project on a fresh machine, installing what it needs.
# .ci/run calls this; so does a developer. docs/testing.md has each stage's budget.
#
# usage: scripts/test.sh [STAGE...]     (default: every stage, in the order below)
#        scripts/test.sh --list
# Every line a stage prints starts with "[stage] "; a timing table closes the run, and
# the exit status is non-zero when any stage failed (the others still run).
#
# One build serves every stage: `cargo build --workspace --all-targets` with clippy-driver
# as the workspace's compiler (what `cargo clippy` does, but producing the binaries too),
# so the lints, the test binaries, contractgen, the proxy and the peers' binaries come from
# one compilation. Everything else that builds (nextest, the peers' scripts, the tests that
# need the Rust peers) asks cargo for the same selection, and finds it fresh: a narrower
# `-p` selection would unify features differently and compile the dependencies again.
# Installs run in the background while it compiles.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export INSTA_UPDATE=no # snapshots are compared, never rewritten, here
export CARGO_TERM_COLOR=never
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/debug
# shellcheck source=stages.sh
. scripts/stages.sh

# The workspace is compiled by clippy-driver, warnings denied (CLIPPY_ARGS is how
# `cargo clippy -- -D warnings` hands its flags to the driver). Exported, so every cargo
# call below (nextest, the peers' scripts) finds the same build fresh.
RUSTC_WORKSPACE_WRAPPER=$(dirname "$(rustup which cargo)")/clippy-driver
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

ALL=(setup fmt build contracts docs consumer windows sdk-csharp sdk-python cargo-test package wine web peers)

s_setup() {
    # Phoenix is large and only cargo-test needs it: it installs while the build runs,
    # and cargo-test waits for it.
    # Niced: the build is the critical path, unpacking wheels is not.
    case " ${want[*]} " in *" cargo-test "*) stage_bg phoenix nice -n 10 scripts/setup.sh phoenix ;; esac
    stage_bg setup nice -n 5 scripts/setup.sh apt rust peers py cs
}
s_fmt() { stage fmt cargo fmt --all --check; }
# --timings: target/cargo-timings/cargo-timing.html shows where a slow build spent its time.
s_build() { stage build cargo build --quiet --locked --workspace --all-targets --timings; }
s_contracts() { stage contracts "$BIN/contractgen" check schema/contracts/*.json; }
s_docs() {
    stage docs "$BIN/contractgen" generate --lang docs --check --out docs/protocols schema/contracts/*.json
}
s_consumer() { stage consumer "$BIN/contract-consumer-example"; }
s_windows() {
    stage_wait setup
    stage windows env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
        cargo clippy --quiet --locked --target x86_64-pc-windows-gnu -p contract-transport -p contract-policy -p contract-conformance -p contract-proxy --lib --bins -- -D warnings
}
# The Windows build run under Wine, beside the reference pairs (which sleep more than they
# compute), waited for at the end. It builds into a target directory of its own, so the
# cargo calls of the stages beside it do not wait for its lock.
s_wine() { stage_wait setup; stage_bg wine scripts/wine-test.sh; }
# The library crates a build script depends on package and build on their own, as a
# registry would have them (contractgen's templates inside its crate). In the background.
# Packaging both at once verifies contractgen against the packaged contract through a
# local registry that overlays the real one. Cargo unpacks that overlay's crates under
# $CARGO_HOME/registry/src/-<hash>/ (no host in the name) once and reuses them while the
# version stays 0.1.0, so a kept CARGO_HOME would verify against an old contract: those
# unpacked copies are removed first (only ours live there). Cargo also never rebuilds a
# registry crate it has built, whatever its source now says, so the verifying builds get
# a target directory of their own, where contract's artifacts are cleaned first; sharing
# the stages' one also left the packaged contractgen in target/debug, where the stages
# beside this one ran it (CI once did: an old contract refused kernel.json).
s_package() {
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/
    local dir=$TARGET/packaging
    stage_bg package env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS bash -c '
        cargo clean --quiet --target-dir "$1" -p contract &&
        cargo package --quiet --locked --allow-dirty --target-dir "$1" -p contract -p contractgen' \
        package "$dir"
}
# The web view in headless Chromium (proxy/web/tests/browser.mjs): the committed bundle is
# checked fresh, then real kernel and toolchannel sessions are watched through the page.
# In the background, beside the reference pairs.
s_web() { stage_wait setup; stage_bg web scripts/web-test.sh; }
s_sdk-csharp() { stage_wait setup; stage sdk-csharp sdk-tests/csharp/run.sh "$BIN/contractgen"; }
s_sdk-python() { stage_wait setup; stage sdk-python sdk-tests/python/run.sh "$BIN/contractgen"; }
s_cargo-test() {
    stage_wait setup phoenix
    stage cargo-test cargo nextest run --locked --workspace --profile ci
}
# The reference pairs (examples/): each a stage of its own, run side by side; they sleep far
# more than they compute, and each keeps its own temp dir and free ports.
s_peers() {
    stage_wait setup
    stage_bg peers-kernel examples/kernel/run.sh
    stage_bg peers-rukh examples/rukh/run.sh
    stage_bg peers-toolchannel examples/toolchannel/host/run.sh
    stage_bg peers-worker .venv-peers/bin/python examples/toolchannel/test_worker.py
    stage_bg peers-xsession examples/xsession/run.sh
    stage_wait peers-kernel peers-rukh peers-toolchannel peers-worker peers-xsession
}

case "${1:-}" in
    --list) printf '%s\n' "${ALL[@]}"; exit 0 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
esac
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${ALL[@]}")
for s in "${want[@]}"; do
    declare -F "s_$s" >/dev/null || { echo "unknown stage '$s'; stages: ${ALL[*]}" >&2; exit 2; }
done
s_setup # every stage needs its tools, whichever were asked for; present ones cost seconds
for s in "${want[@]}"; do
    [ "$s" = setup ] && continue
    if ! "s_$s" && [ "$s" = build ]; then
        echo "== the build failed: the stages after it are not run"
        break
    fi
done
stage_wait setup phoenix
case " ${want[*]} " in *" wine "*) stage_wait wine ;; esac
case " ${want[*]} " in *" web "*) stage_wait web ;; esac
case " ${want[*]} " in *" package "*) stage_wait package ;; esac
stage_table
