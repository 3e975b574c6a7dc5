#!/bin/sh
# A small test suite with the habits that leak: temp dirs it never removes (mktemp and Python's
# tempfile), a config file written into $HOME, and daemons left running (setsid, nohup, a
# double fork with stdio on /dev/null). Run it bare and it litters; run it under
# `cleanroom run` and everything is contained and removed, and the leaked daemons are named.
set -eu

echo "suite: HOME=$HOME"
echo "suite: TMPDIR=${TMPDIR:-<unset>}"

# 1. temp dirs that are never cleaned up
shell_tmp=$(mktemp -d "${TMPDIR:-/tmp}/leaky-suite-sh.XXXXXX")
echo "fixture data" > "$shell_tmp/data.txt"
echo "suite: mktemp -d made $shell_tmp"
py_tmp=$(python3 -c 'import tempfile; print(tempfile.mkdtemp(prefix="leaky-suite-py-"))')
echo "suite: tempfile.mkdtemp() made $py_tmp"

# 2. a "test" that writes into the user's config
mkdir -p "$HOME/.config/leaky-suite"
echo 'token = "test-token"' > "$HOME/.config/leaky-suite/config.toml"
echo "suite: wrote $HOME/.config/leaky-suite/config.toml"

# 3. daemons left behind
setsid sh -c 'exec sleep 3600' </dev/null >/dev/null 2>&1 &
nohup sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 &
( sh -c 'trap "" TERM; exec sleep 3600' </dev/null >/dev/null 2>&1 & ) 
echo "suite: started 3 background processes"

# 4. the tests themselves pass
echo "suite: 3 passed, 0 failed"
