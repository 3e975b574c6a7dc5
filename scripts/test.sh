#!/usr/bin/env bash
# The whole test suite: lint, unit and integration tests, then the (ignored-by-default) stress test.
# Every test uses private state dirs under temp dirs and leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
cargo test -p cleanroom-cli --locked --test stress -- --ignored
