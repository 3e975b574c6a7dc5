#!/usr/bin/env bash
# The whole test suite, as README says and CI runs it (.ci/run): on a fresh machine it first
# installs what the tests drive that cargo does not build, then lints, runs the unit and
# integration tests (the 10 s stress test included), runs the tests that depend on where the
# checkout lives again from a copy of it elsewhere, smoke-tests the benchmark harness, builds
# and tests the Windows binary under Wine (scripts/windows.sh, alongside the tests), and builds and runs the library
# example as a program outside the workspace.
# Every test uses private state dirs under temp dirs and leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR   # everything builds in this checkout's target/
started=$SECONDS
phase() { echo "== scripts/test.sh: $* (at $((SECONDS - started)) s)" >&2; }
die() { echo "scripts/test.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Set-up, idempotent: the system packages the tests drive (installed with apt-get as root;
# anyone else is told the exact command and nothing runs), pytest (the pytest recipe), the
# pinned Codex client (the interop test) and cargo-nextest (the nextest recipe).
phase "set-up"
missing=()
need() { # need PACKAGE PROBE...: PACKAGE is missing when a probe (a command or a path) is absent
  local package=$1 probe
  shift
  for probe in "$@"; do
    if [[ $probe == /* ]]; then
      compgen -G "$probe" >/dev/null && continue
    else
      command -v "$probe" >/dev/null && continue
    fi
    missing+=("$package")
    return
  done
}
need util-linux setpriv unshare prlimit setsid flock
need mount mount umount
need coreutils timeout nohup mkfifo
need procps ps pgrep
need iproute2 ip
need perl perl
need bsdutils script                       # a terminal for the foreground and Ctrl-C tests
need e2fsprogs chattr
need gcc cc                                # C payloads of the containment tests
need g++ g++                               # libFuzzer's runtime (scripts/fuzz.sh)
need git git
need python3 python3
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
need npm npm                               # installs the pinned Codex client
need bubblewrap bwrap                      # the benchmark harness's baseline (its smoke run)
need zsh zsh                               # checks the zsh completion script
need bash-completion /usr/share/bash-completion/bash_completion
need groff-base groff                      # renders the man pages
need man-db man                            # finds them as a user's `man` would
# The Windows build and its Wine tests, and the macOS type-check (scripts/windows.sh).
need rustc-web /usr/bin/rustc
need cargo-web /usr/bin/cargo
need rust-web-src "/usr/src/rustc-*/library"
need gcc-mingw-w64-x86-64 x86_64-w64-mingw32-gcc
need wine64 /usr/lib/wine/wine64
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    die "missing packages: ${missing[*]}; install them first:
  sudo apt-get install -y ${missing[*]}"
  fi
fi
if ! python3 -c 'import pytest' 2>/dev/null; then
  pytest_install=(python3 -m pip install --quiet -r examples/pytest/requirements.txt)
  [ "$(id -u)" = 0 ] || pytest_install+=(--user)
  "${pytest_install[@]}" 2>/dev/null || "${pytest_install[@]}" --break-system-packages ||
    die "pytest is missing and could not be installed; run: ${pytest_install[*]}"
fi
cargo nextest --version >/dev/null 2>&1 || cargo install --locked --quiet cargo-nextest
scripts/install-codex.sh

# ---------------------------------------------------------------------------------------------
phase "lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# Counted skips (crates/cleanroom/tests/support/skip.rs): a test, or part of one, that cannot run
# here appends `cleanroom-test-skip: TEST: REASON` to this file. They are listed at the end; with
# CI set (CI runs as root with Landlock and cgroups) any skip fails the suite.
scratch=$(mktemp -d)
trap 'chmod -R u+rwx "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
skip_log=$scratch/skips
: >"$skip_log"
export CLEANROOM_TEST_SKIP_LOG=$skip_log

# The Windows build and its Wine tests (scripts/windows.sh) run meanwhile, in a process group of
# their own and with their output kept for their phase: their cold build of std is minutes of
# CPU, and the Linux tests spend most of theirs waiting on processes. A failure still fails the
# suite at the "windows" phase; an early exit of this script stops them.
windows_log=$scratch/windows.log
setsid scripts/windows.sh >"$windows_log" 2>&1 &
windows_pid=$!
# (`|| true`: under `set -e` a failed kill, the Windows phase having ended already, would end the
# trap before the removal.)
trap '[ -z "$windows_pid" ] || kill -- "-$windows_pid" 2>/dev/null || true; wait 2>/dev/null; chmod -R u+rwx "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
phase "tests"
cargo test --workspace --locked

# ---------------------------------------------------------------------------------------------
# The tests whose harness depends on where the checkout lives, from a copy of it (tracked and
# new files) in a path with a space, inside a 0700 directory, under /tmp: the binaries that
# uid 65534 runs are out of its reach there, and the interop test's private /tmp hides the
# checkout. The copy's target dir is seeded with this one's compiled dependencies, so only the
# workspace's crates and these test binaries are built again.
phase "tests from a checkout elsewhere"
elsewhere=$scratch/moved
mkdir -m 0700 "$elsewhere"
copy="$elsewhere/a checkout/cleanroom"
mkdir -p "$copy/target/debug/deps"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -
else
  tar --exclude=./target -cf - .
fi | tar -xf - -C "$copy"
cp -a target/debug/build target/debug/.fingerprint "$copy/target/debug/"
find target/debug/deps -maxdepth 1 -name 'lib*' ! -name 'libcleanroom*' \
  -exec cp -a -t "$copy/target/debug/deps" {} +
cp -al target/interop "$copy/target/" 2>/dev/null || cp -a target/interop "$copy/target/"
(
  cd "$copy"
  cargo test --locked -p cleanroom --test lock -- machine_locks_are_shared_between_users
  cargo test --locked -p cleanroom-cli --test codex_interop --test containment --test gc \
    --test serve_fs --test serve_policy --test protection --test config --test private_tmp -- \
    codex_c unprivileged_run_falls_back_to_session \
    a_nested_run_uses_the_config_its_outer_run_judged exclusive_locks_still_exclude \
    a_machine_lock_directory_inside_a_shared_path \
    unprivileged_gc_removes_read_only_and_unreadable_trees \
    an_ordinary_users_server_applies_patches every_fs_method_answers fs_calls_are_confined \
    workspace_write_confines a_nested_run_works_under_a_strict_outer_run
)
rm -rf "$elsewhere"
unset CLEANROOM_TEST_SKIP_LOG

# The benchmark harness at tiny sizes (debug build, one round): it must keep working.
phase "bench smoke"
scripts/bench --smoke

# The parsers' fuzz targets, 4 s each from their seed corpus: a crash fails (fuzz/README.md).
phase "fuzz"
scripts/fuzz.sh 4

# Windows: cleanroom.exe built and tested under Wine; macOS type-checked (docs/windows.md).
phase "windows"
windows_status=0
wait "$windows_pid" || windows_status=$?
windows_pid=
cat "$windows_log" >&2
[ "$windows_status" = 0 ] || die "scripts/windows.sh failed (exit $windows_status)"

# examples/library: the crate used from another program (its own lockfile). It builds in the
# workspace's target dir: its lockfile pins the same versions, so nothing but the example itself
# is compiled again (a target dir of its own rebuilt every dependency, testing nothing more).
phase "library example"
CLEANROOM_STATE_DIR="$scratch/example-ns" cargo run --quiet --locked \
  --manifest-path examples/library/Cargo.toml --target-dir target

phase "done"
if [ -s "$skip_log" ]; then
  echo "scripts/test.sh: $(wc -l <"$skip_log") test part(s) skipped:" >&2
  sort "$skip_log" >&2
  if [ -n "${CI:-}" ]; then
    echo "scripts/test.sh: CI set: nothing may skip" >&2
    exit 1
  fi
fi
