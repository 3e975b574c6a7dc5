#!/usr/bin/env bash
# Times cleanroom's removal walk against `rm -rf` on a 100,000-file tree (1,000 dirs x 100
# 12-byte files), on tmpfs (/dev/shm, CPU only) and on ext4 (/tmp, synced before each run).
#
# The walk is run through the example binary `remove_tree` (cleanroom::remove::remove_contents,
# then rmdir of the emptied top), so only the removal is timed, not run setup or gc judging.
#
# Usage: scripts/bench-remove.sh [NDIRS NFILES]      (default: 1000 100)
# Env:   RUNS (default 5), FILESYSTEMS (default "/dev/shm /tmp").
# Needs: hyperfine (apt-get install -y hyperfine), python3.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../target}
remove_tree=${REMOVE_TREE:-$target/release/examples/remove_tree}
runs=${RUNS:-5}
filesystems=${FILESYSTEMS:-/dev/shm /tmp}
ndirs=${1:-1000}
nfiles=${2:-100}
[ -n "${REMOVE_TREE:-}" ] || (cd "$here/.." && cargo build --release --quiet -p cleanroom --example remove_tree)
command -v hyperfine >/dev/null || { echo "needs hyperfine: apt-get install -y hyperfine" >&2; exit 1; }

for fs in $filesystems; do
  work=$(mktemp -d -p "$fs" cleanroom-bench-remove.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  sync_cmd=true
  [ "$(stat -f -c %T "$fs")" = tmpfs ] || sync_cmd=sync
  echo "== $ndirs dirs x $nfiles files on $fs ($(stat -f -c %T "$fs"), prepare ends with: $sync_cmd)"
  hyperfine -N --runs "$runs" --export-json "$work/result.json" \
    --prepare "sh -c 'rm -rf $work/a && python3 $here/bench-tree.py plain $work/a $ndirs $nfiles && $sync_cmd'" \
    --command-name "cleanroom remove" "$remove_tree $work/a" \
    --prepare "sh -c 'rm -rf $work/b && python3 $here/bench-tree.py plain $work/b $ndirs $nfiles && $sync_cmd'" \
    --command-name "rm -rf" "rm -rf $work/b"
  [ ! -e "$work/a" ] || { echo "remove_tree left $work/a" >&2; exit 1; }
  python3 - "$work/result.json" <<'EOF'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
cr, rm = r["cleanroom remove"], r["rm -rf"]
print(f"   remove {cr['mean']*1000:8.1f} ms ± {cr['stddev']*1000:.1f} (user {cr['user']*1000:.0f}, sys {cr['system']*1000:.0f})"
      f"   rm -rf {rm['mean']*1000:8.1f} ms ± {rm['stddev']*1000:.1f} (user {rm['user']*1000:.0f}, sys {rm['system']*1000:.0f})"
      f"   ratio = {cr['mean']/rm['mean']:.2f} (median {cr['median']/rm['median']:.2f})")
EOF
  rm -rf "$work"
  trap - EXIT
done
