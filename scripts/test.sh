#!/usr/bin/env bash
# The whole test suite: lint, then unit and integration tests (the 10 s stress test included).
# Every test uses private state dirs under temp dirs and leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the tests drive that cargo does not build: the pinned Codex client (interop test).
scripts/install-codex.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
