#!/usr/bin/env bash
# The whole test suite: lint, then unit and integration tests (the 10 s stress test included),
# then the Windows build and its Wine tests (scripts/windows.sh), then the library example built
# and run as a program outside the workspace.
# Every test uses private state dirs under temp dirs and leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the tests drive that cargo does not build: the pinned Codex client (interop test) and
# pytest (the pytest recipe, crates/cleanroom-cli/tests/recipes.rs).
scripts/install-codex.sh
if ! python3 -c 'import pytest' 2>/dev/null; then
  python3 -m pip install --quiet -r examples/pytest/requirements.txt ||
    python3 -m pip install --quiet --break-system-packages -r examples/pytest/requirements.txt
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# Counted skips (crates/cleanroom/tests/support/skip.rs): a test, or part of one, that cannot run
# here appends `cleanroom-test-skip: TEST: REASON` to this file. They are listed at the end; with
# CI set (CI runs as root with Landlock and cgroups) any skip fails the suite.
skip_log=$(mktemp)
example_state=$(mktemp -d)
trap 'rm -rf "$skip_log" "$example_state"' EXIT
export CLEANROOM_TEST_SKIP_LOG=$skip_log
cargo test --workspace --locked
unset CLEANROOM_TEST_SKIP_LOG
# The benchmark harness at tiny sizes (debug build, one round): it must keep working.
scripts/bench --smoke

# Windows: cleanroom.exe built and tested under Wine; macOS type-checked (docs/windows.md).
scripts/windows.sh

# examples/library: the crate used from another program (its own lockfile and target dir).
CLEANROOM_STATE_DIR="$example_state/ns" cargo run --quiet --locked \
  --manifest-path examples/library/Cargo.toml --target-dir target/examples

if [ -s "$skip_log" ]; then
  echo "scripts/test.sh: $(wc -l <"$skip_log") test part(s) skipped:" >&2
  sort "$skip_log" >&2
  if [ -n "${CI:-}" ]; then
    echo "scripts/test.sh: CI set: nothing may skip" >&2
    exit 1
  fi
fi
