#!/bin/sh
# Benchmark of `cleanroom serve`: round trip of `true`, 256 MiB of child output to one client,
# and raw loopback WebSocket baselines measured by the same harness.
# Usage: scripts/bench-serve.sh [--rounds N] [--bytes B]
# State lives on /dev/shm (tmpfs) so the root's creation and removal do not touch the disk.
set -eu
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
cargo build --release -p cleanroom-cli --bin cleanroom --quiet
cargo build --release -p cleanroom-exec-server --example bench --quiet
state=$(mktemp -d /dev/shm/cleanroom-bench.XXXXXX)
trap 'rm -rf "$state"' EXIT
"$CARGO_TARGET_DIR/release/examples/bench" \
  --cleanroom "$CARGO_TARGET_DIR/release/cleanroom" --state-dir "$state/ns" "$@"
