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
cargo test --workspace --locked

# Windows: cleanroom.exe built and tested under Wine; macOS type-checked (docs/windows.md).
scripts/windows.sh

# examples/library: the crate used from another program (its own lockfile and target dir).
example_state=$(mktemp -d)
trap 'rm -rf "$example_state"' EXIT
CLEANROOM_STATE_DIR="$example_state/ns" cargo run --quiet --locked \
  --manifest-path examples/library/Cargo.toml --target-dir target/examples
