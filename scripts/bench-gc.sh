#!/usr/bin/env bash
# Times `cleanroom gc` reclaiming N stale roots against `rm -rf` of an identical tree.
#
# Each stale root is what a crashed run leaves (scripts/bench-tree.py stale-roots): a real marker
# whose owner has exited, the 9 layout directories, and 3 small files, like the seed bug's 9,272
# roots. Both commands get a freshly built tree before every timed run; on ext4 (/tmp) the tree
# is synced first so the timing includes the real deletion I/O, on tmpfs (/dev/shm) it is CPU only.
#
# Usage: scripts/bench-gc.sh [N...]        (default: 2000 10000)
# Env:   RUNS (default 5), FILESYSTEMS (default "/dev/shm /tmp"), CLEANROOM (default: release
#        build in $CARGO_TARGET_DIR or target/).
# Needs: hyperfine (apt-get install -y hyperfine), python3.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../target}
cleanroom=${CLEANROOM:-$target/release/cleanroom}
runs=${RUNS:-5}
filesystems=${FILESYSTEMS:-/dev/shm /tmp}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(2000 10000)
[ -n "${CLEANROOM:-}" ] || (cd "$here/.." && cargo build --release --quiet -p cleanroom-cli --bin cleanroom)
command -v hyperfine >/dev/null || { echo "needs hyperfine: apt-get install -y hyperfine" >&2; exit 1; }

for fs in $filesystems; do
  work=$(mktemp -d -p "$fs" cleanroom-bench-gc.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  sync_cmd=true
  [ "$(stat -f -c %T "$fs")" = tmpfs ] || sync_cmd=sync
  for n in "${sizes[@]}"; do
    echo "== $n stale roots x 3 files on $fs ($(stat -f -c %T "$fs"), prepare ends with: $sync_cmd)"
    hyperfine -N --runs "$runs" --export-json "$work/result-$n.json" \
      --prepare "sh -c 'rm -rf $work/ns && python3 $here/bench-tree.py stale-roots $work/ns $n 3 && $sync_cmd'" \
      --command-name "cleanroom gc ($n)" "$cleanroom --state-dir $work/ns gc" \
      --prepare "sh -c 'rm -rf $work/copy && python3 $here/bench-tree.py stale-roots $work/copy $n 3 && $sync_cmd'" \
      --command-name "rm -rf ($n)" "rm -rf $work/copy"
    # gc must really have reclaimed everything.
    left=$(find "$work/ns" -mindepth 1 -maxdepth 1 | wc -l)
    [ "$left" -eq 0 ] || { echo "gc left $left entries in $work/ns" >&2; exit 1; }
    python3 - "$work/result-$n.json" <<'EOF'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
gc, rm = [v for k, v in r.items() if k.startswith("cleanroom")][0], [v for k, v in r.items() if k.startswith("rm")][0]
print(f"   gc {gc['mean']*1000:8.1f} ms ± {gc['stddev']*1000:.1f}   rm -rf {rm['mean']*1000:8.1f} ms ± {rm['stddev']*1000:.1f}"
      f"   ratio gc/rm = {gc['mean']/rm['mean']:.2f} (median {gc['median']/rm['median']:.2f})")
EOF
  done
  rm -rf "$work"
  trap - EXIT
done
