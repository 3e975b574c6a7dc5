#!/usr/bin/env bash
# Installs the Codex client pinned for the interop test (crates/cleanroom-cli/tests/codex_interop.rs):
# @openai/codex at the exact version and integrity hashes of crates/cleanroom-cli/tests/codex/npm/
# package-lock.json, from the npm registry, with its linux-x64 native binary, into
# $CLEANROOM_CODEX_DIR (default target/interop/codex-<version> in this checkout), where the test
# looks for it.
# Idempotent: an install made from the same lockfile whose binary reports the pinned version is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
pin=crates/cleanroom-cli/tests/codex/npm
fail() { echo "install-codex: $*" >&2; exit 1; }

[ "$(uname -sm)" = "Linux x86_64" ] || fail "the interop test runs Codex's linux-x64 binary; this machine is $(uname -sm)"
command -v npm >/dev/null || fail "npm is missing (Debian package: npm)"
version=$(sed -n 's/^ *"@openai\/codex": *"\([^"]*\)".*/\1/p' "$pin/package.json")
[ -n "$version" ] || fail "no @openai/codex version in $pin/package.json"
dir=${CLEANROOM_CODEX_DIR:-$PWD/target/interop/codex-$version}
native=node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex

if cmp -s "$pin/package-lock.json" "$dir/package-lock.json" \
  && [ "$("$dir/$native" --version 2>/dev/null)" = "codex-cli $version" ]; then
  echo "install-codex: @openai/codex $version already installed in $dir"
  exit 0
fi
# Only an earlier install of ours is ever replaced: it holds our package.json.
if [ -e "$dir" ] && ! cmp -s "$pin/package.json" "$dir/package.json"; then
  fail "$dir exists and is not an install made by this script; remove it or set CLEANROOM_CODEX_DIR"
fi

parent=$(dirname "$dir")
mkdir -p "$parent"
staging=$(mktemp -d "$parent/.codex-staging.XXXXXX")
trap 'rm -rf "$staging"' EXIT
cp "$pin/package.json" "$pin/package-lock.json" "$staging/"
(cd "$staging" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
got=$("$staging/$native" --version) || fail "the installed native binary $native does not run"
[ "$got" = "codex-cli $version" ] || fail "the installed binary reports '$got', expected 'codex-cli $version'"
rm -rf "$dir"
mv "$staging" "$dir"
echo "install-codex: installed @openai/codex $version (linux-x64) in $dir"
