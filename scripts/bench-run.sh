#!/usr/bin/env bash
# Wrapper overhead: `cleanroom run -- true` against bare `true` and `bwrap --dev-bind / / true`.
# Prints hyperfine's table; the ratios against bwrap are what the closing notes quote.
# Usage: scripts/bench-run.sh [RUNS]   (needs hyperfine and bubblewrap: apt-get install hyperfine bubblewrap)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}
cargo build --release --quiet
bin=$PWD/target/release/cleanroom
shm=$(mktemp -d /dev/shm/cleanroom-bench.XXXXXX)
tmp=$(mktemp -d /tmp/cleanroom-bench.XXXXXX)
trap 'rm -rf "$shm" "$tmp"' EXIT
# The state dirs hold roots only while a run lives; the marker is fdatasync'ed, which is what
# the /tmp (ext4 here) line pays for.
echo "# state dir on tmpfs ($shm/ns) and on the /tmp filesystem ($tmp/ns)"
hyperfine -N --warmup 20 --runs "$runs" --export-markdown "$shm/result.md" \
  'true' \
  'bwrap --dev-bind / / true' \
  "$bin --state-dir $shm/ns run -- true" \
  "$bin --state-dir $shm/ns run --contain session --protect off -- true" \
  "$bin --state-dir $tmp/ns run -- true"
cat "$shm/result.md"
