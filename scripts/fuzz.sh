#!/usr/bin/env bash
# Fuzzes cleanroom's parsers (fuzz/README.md): builds the targets of fuzz/ with cargo and
# libFuzzer's coverage instrumentation (fuzz/instrument-rustc: this repository's crates only),
# then runs each for a bounded time from its committed seed corpus, two at a time. A crash, a
# panic (a broken invariant), a hang (one input over 10 s), a run over 2 GiB, or a target that
# leaves a file in its TMPDIR fails the script; a failing input is printed (base64) and kept in
# fuzz/artifacts/TARGET/ to replay with `target/debug/TARGET FILE`.
#
#   scripts/fuzz.sh [SECONDS per target, default 4] [TARGET...]   (default: every target)
#
# The build shares the checkout's target dir (CARGO_TARGET_DIR, else target/) with the
# workspace's own debug build: the dependencies are compiled the same way, so after
# `cargo test` only libFuzzer, the two cleanroom crates (instrumented, their own artifacts) and
# the targets are built. The binaries are copied, under a lock, into a directory of this run's in
# the target dir, so a concurrent run cannot swap them; it and the run's temp dir (corpus, logs,
# TMPDIR) are removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)

seconds=${1:-4}
shift || true
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for source in fuzz/fuzz_targets/*.rs; do
    [ -e "$source" ] && targets+=("$(basename "$source" .rs)")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no target in fuzz/fuzz_targets/" >&2
  exit 1
fi

target_dir=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$target_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The binaries' copies live beside the build, not in the temp dir: /tmp may be mounted noexec.
bin=$(mktemp -d "$target_dir/fuzz-run.XXXXXX")
trap 'rm -rf "$work" "$bin"' EXIT
bins=()
for target in "${targets[@]}"; do
  bins+=(--bin "$target")
done

cargo fmt --manifest-path fuzz/Cargo.toml -- --check
(
  flock 9
  # --locked: a fuzz/Cargo.lock that no longer fits fails here, never rewritten silently. The
  # debug-info override gives the instrumented crates artifacts of their own (and builds them
  # faster); the dependencies keep the workspace's profile, so their artifacts are shared.
  CLEANROOM_FUZZ_ROOT=$root RUSTC_WRAPPER=$root/fuzz/instrument-rustc \
    cargo build --locked --manifest-path fuzz/Cargo.toml --target-dir "$target_dir" \
    --config 'profile.dev.package.cleanroom.debug="line-tables-only"' \
    --config 'profile.dev.package.cleanroom-exec-server.debug="line-tables-only"' \
    --config 'profile.dev.package.cleanroom-fuzz.debug="line-tables-only"' \
    "${bins[@]}"
  for target in "${targets[@]}"; do
    cp "$target_dir/debug/$target" "$bin/"
  done
) 9>"$target_dir/fuzz.lock"

# Runs one target; its exit status and libFuzzer's log stay in $work/TARGET/.
run() {
  local target=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/tmp"
  local status=0
  TMPDIR="$dir/tmp" "$bin/$target" "$dir/corpus" "fuzz/corpus/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1 || status=$?
  if [ "$status" = 0 ] && [ -n "$(ls -A "$dir/tmp")" ]; then
    echo "fuzz: $target left files in its TMPDIR: $(ls -A "$dir/tmp")" >>"$dir/log"
    status=1
  fi
  echo "$status" >"$dir/status"
}

echo "fuzz: ${#targets[@]} targets, ${seconds}s each, two at a time"
running=0
for target in "${targets[@]}"; do
  run "$target" &
  running=$((running + 1))
  if [ "$running" -ge 2 ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=()
for target in "${targets[@]}"; do
  dir=$work/$target
  if [ "$(cat "$dir/status" 2>/dev/null)" != 0 ]; then
    failed+=("$target")
    tail -n 40 "$dir/log" >&2
    mkdir -p "fuzz/artifacts/$target"
    for input in "$dir/artifacts"/*; do
      [ -e "$input" ] || continue
      cp "$input" "fuzz/artifacts/$target/"
      echo "fuzz: $target: fuzz/artifacts/$target/$(basename "$input"), base64: $(base64 -w0 "$input")" >&2
    done
  fi
  stats=$(sed -n 's/^stat::\(number_of_executed_units\|new_units_added\): *//p' "$dir/log" | paste -sd/)
  echo "fuzz: $target: ${stats:-no stats} (executions/new inputs)"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
