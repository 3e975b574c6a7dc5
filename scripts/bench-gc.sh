#!/usr/bin/env bash
# Times `cleanroom gc` reclaiming N stale roots against `rm -rf` of an identical tree.
#
# Each stale root is what a SIGKILLed run leaves (scripts/bench-tree.py stale-roots): a real
# marker whose owner has exited, the 9 layout directories, and 3 small files, like the seed bug's
# 9,272 roots; as root, each marker records the run's cgroup, as every run made as root does.
# Both commands get a freshly built tree before every timed run; on ext4 (/tmp) the tree is
# synced first so the timing includes the real deletion I/O, on tmpfs (/dev/shm) it is CPU only.
#
# Then, on each filesystem: `gc --kept` of KEPT kept roots against `rm -rf` of a copy, and the
# cost of `cleanroom run -- true` with KEPT kept roots in the namespace against an empty one (the
# start of a run must not pay for the namespace).
#
# Usage: scripts/bench-gc.sh [N...]        (default: 1000)
# Env:   RUNS (default 5), FILESYSTEMS (default "/dev/shm /tmp"), CLEANROOM (default: release
#        build in $CARGO_TARGET_DIR or target/), CGROUPS (as root: "recorded real", else "none";
#        see bench-tree.py: "recorded" = the cgroup is gone, "real" = its empty directory exists
#        and gc must kill and remove it, which `rm -rf` of the copy does not have to do),
#        KEPT (default 3000; 0 skips those parts).
# Needs: hyperfine (apt-get install -y hyperfine), python3.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../target}
cleanroom=${CLEANROOM:-$target/release/cleanroom}
runs=${RUNS:-5}
filesystems=${FILESYSTEMS:-/dev/shm /tmp}
if [ "$(id -u)" = 0 ]; then default_cgroups="recorded real"; else default_cgroups=none; fi
cgroup_modes=${CGROUPS:-$default_cgroups}
kept=${KEPT:-3000}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000)
[ -n "${CLEANROOM:-}" ] || (cd "$here/.." && cargo build --release --quiet -p cleanroom-cli --bin cleanroom)
command -v hyperfine >/dev/null || { echo "needs hyperfine: apt-get install -y hyperfine" >&2; exit 1; }

# Prints the two commands of a hyperfine JSON export and the ratio first/second.
ratio() {
  python3 - "$1" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1]))["results"]
print(f"   {a['command']}: {a['median']*1000:8.1f} ms (mean {a['mean']*1000:.1f} ± {a['stddev']*1000:.1f})"
      f"   {b['command']}: {b['median']*1000:8.1f} ms (mean {b['mean']*1000:.1f} ± {b['stddev']*1000:.1f})"
      f"   ratio = {a['median']/b['median']:.2f} (means {a['mean']/b['mean']:.2f})")
PY
}

for fs in $filesystems; do
  work=$(mktemp -d -p "$fs" cleanroom-bench-gc.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  sync_cmd=true
  [ "$(stat -f -c %T "$fs")" = tmpfs ] || sync_cmd=sync
  for cgroups in $cgroup_modes; do
    # The copy for rm -rf has the same files; real cgroups exist only for gc's tree.
    copy_cgroups=$cgroups
    [ "$cgroups" != real ] || copy_cgroups=recorded
    for n in "${sizes[@]}"; do
      echo "== $n stale roots x 3 files, cgroups $cgroups, on $fs ($(stat -f -c %T "$fs"), prepare ends with: $sync_cmd)"
      hyperfine -N --runs "$runs" --export-json "$work/result-$n.json" \
        --prepare "sh -c 'rm -rf $work/ns && python3 $here/bench-tree.py stale-roots $work/ns $n 3 $cgroups && $sync_cmd'" \
        --command-name "cleanroom gc ($n)" "$cleanroom --state-dir $work/ns gc" \
        --prepare "sh -c 'rm -rf $work/copy && python3 $here/bench-tree.py stale-roots $work/copy $n 3 $copy_cgroups && $sync_cmd'" \
        --command-name "rm -rf ($n)" "rm -rf $work/copy"
      # gc must really have reclaimed everything, cgroups included.
      left=$(find "$work/ns" -mindepth 1 -maxdepth 1 | wc -l)
      [ "$left" -eq 0 ] || { echo "gc left $left entries in $work/ns" >&2; exit 1; }
      if [ "$cgroups" = real ]; then
        mount=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-" && $(i+1) == "cgroup2") print $5 }' /proc/self/mountinfo | head -1)
        cgs=$(find "$mount" -maxdepth 1 -name 'cleanroom-20261129T093000Z-*' | wc -l)
        [ "$cgs" -eq 0 ] || { echo "gc left $cgs cgroups in $mount" >&2; exit 1; }
      fi
      ratio "$work/result-$n.json"
    done
  done
  if [ "$kept" -gt 0 ]; then
    echo "== gc --kept of $kept kept roots on $fs"
    hyperfine -N --runs "$runs" --export-json "$work/kept.json" \
      --prepare "sh -c 'rm -rf $work/ns && python3 $here/bench-tree.py stale-roots $work/ns $kept 3 none kept && $sync_cmd'" \
      --command-name "cleanroom gc --kept" "$cleanroom --state-dir $work/ns gc --kept" \
      --prepare "sh -c 'rm -rf $work/copy && python3 $here/bench-tree.py stale-roots $work/copy $kept 3 none kept && $sync_cmd'" \
      --command-name "rm -rf" "rm -rf $work/copy"
    ratio "$work/kept.json"
    echo "== cleanroom run -- true: empty namespace vs $kept kept roots, on $fs"
    rm -rf "$work/empty" "$work/ns"
    mkdir -m 700 "$work/empty"
    python3 "$here/bench-tree.py" stale-roots "$work/ns" "$kept" 3 none kept
    hyperfine -N --warmup 10 --runs $((runs * 20)) --export-json "$work/run.json" \
      --command-name "run, $kept kept roots" "$cleanroom --state-dir $work/ns run -- true" \
      --command-name "run, empty namespace" "$cleanroom --state-dir $work/empty run -- true"
    ratio "$work/run.json"
  fi
  rm -rf "$work"
  trap - EXIT
done
