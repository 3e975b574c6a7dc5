#!/usr/bin/env bash
# Windows and macOS from this Linux machine (docs/windows.md):
# 1. builds the CLI (crates/cleanroom-cli) for x86_64-pc-windows-gnu with Debian's rustc-web +
#    build-std + mingw, in a cross target dir outside the checkout (below; the Linux target stays
#    warm), with its Wine tests (crates/cleanroom-cli/tests/wine.rs) and their payload
#    (crates/cleanroom-cli/examples/payload.rs);
# 2. runs those tests under Wine 8 with a private WINEPREFIX inside the cross dir (removed
#    afterwards), with the ProcessPrng stand-in DLL (test scaffolding,
#    scripts/windows/processprng.c), and checks the CLI there against Linux's behaviour (config
#    file, --report, --on-leak, list/gc --json, refusals, --exclusive);
# 3. type-checks the library and the CLI for x86_64-apple-darwin.
# A missing tool is a loud failure, never a skip: scripts/test.sh installs rustc-web cargo-web
# rust-web-src gcc-mingw-w64-x86-64 wine64.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "scripts/windows.sh: $*" >&2; exit 1; }
for tool in /usr/bin/rustc /usr/bin/cargo x86_64-w64-mingw32-gcc /usr/lib/wine/wine64 /usr/bin/wineserver; do
  command -v "$tool" >/dev/null ||
    die "$tool is missing (apt-get install rustc-web cargo-web rust-web-src gcc-mingw-w64-x86-64 wine64)"
done
[ -d /usr/src/rustc-1.96.0/library ] || ls -d /usr/src/rustc-*/library >/dev/null 2>&1 ||
  die "the Rust library source is missing (apt-get install rust-web-src): build-std needs it"

export RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
# The cross target dir is a cache outside the checkout, keyed by the toolchain (rustc-web and
# mingw): the cold build of std for two targets (-Zbuild-std) and the Wine prefix template are
# most of this script's time, and a fresh clone, or another checkout, reuses them; a new
# toolchain gets a new dir. $CLEANROOM_CROSS_DIR names another. Run one checkout's windows.sh at
# a time: cargo serializes the builds, not the tests of the cleanroom.exe they share.
toolchain=$({ /usr/bin/rustc -vV; x86_64-w64-mingw32-gcc --version | head -n1; } | sha256sum | cut -c1-16)
export CARGO_TARGET_DIR=${CLEANROOM_CROSS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cleanroom/cross-$toolchain}
echo "scripts/windows.sh: cross target dir $CARGO_TARGET_DIR" >&2
mkdir -p "$CARGO_TARGET_DIR"   # the build log lives there, before cargo creates it
# A private TMPDIR for everything below, removed on exit: a cold build left empty ccXXXXXX files
# of the C toolchain in /tmp, and wineserver puts its socket dir (wine-XXXXXX) there.
export TMPDIR=$CARGO_TARGET_DIR/tmp.$$
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
cargo=(/usr/bin/cargo)
win=(--target x86_64-pc-windows-gnu -Zbuild-std=std,panic_abort --locked)
out=$CARGO_TARGET_DIR/x86_64-pc-windows-gnu/debug

step() { echo "== $* ($(date +%T))" >&2; }

# No clippy exists for Debian's rustc 1.96 (rustup's 1.95 clippy cannot build 1.96's core), so
# compiler warnings in our crates fail the build here instead (cargo replays cached ones).
warnings_in_our_crates() {
  grep -q '^warning: .*\|^warning\[' "$1" && grep -A3 '^warning' "$1" | grep -q -- '--> \(/.*/\)\?crates/'
}

step "build the CLI (crates/cleanroom-cli), the test payload and the Wine tests for Windows"
# Only the Wine tests of the CLI's tests/ build for Windows (the others, and their helpers, are
# Linux's: cfg(unix) dev-dependencies).
log=$CARGO_TARGET_DIR/windows-build.log
"${cargo[@]}" build -p cleanroom-cli --bin cleanroom --example payload --test wine "${win[@]}" 2>&1 |
  tee "$log" >&2
test_exe=$("${cargo[@]}" test -p cleanroom-cli --test wine "${win[@]}" --no-run --message-format=json 2>>"$log" |
  sed -n 's/.*"executable":"\([^"]*wine[^"]*\.exe\)".*/\1/p' | tail -n1)
[ -n "$test_exe" ] || die "cargo did not report the Wine test executable (see $log)"
warnings_in_our_crates "$log" && die "the Windows build has warnings in our crates (see $log)"
cli_exe=$out/cleanroom.exe
mkdir -p "$TMPDIR/cli"

step "ProcessPrng stand-in DLL"
dll=$CARGO_TARGET_DIR/bcryptprimitives.dll
x86_64-w64-mingw32-gcc -shared -O2 -o "$dll" scripts/windows/processprng.c -ladvapi32

step "tests under Wine"
# A pristine prefix is made once (wineboot takes 30 s to minutes) and copied for every run; the
# copy is private to this run and removed afterwards.
template=$CARGO_TARGET_DIR/wineprefix-template
export WINEDEBUG=-all WINEARCH=win64
if [ ! -f "$template/.ready" ]; then
  rm -rf "$template"
  WINEPREFIX=$template /usr/lib/wine/wine64 wineboot --init >/dev/null 2>&1 ||
    die "wineboot could not create $template"
  WINEPREFIX=$template /usr/bin/wineserver -w
  # Wine links Desktop, Documents, … of the profile to the real $HOME: make them plain
  # directories, so nothing under test can reach the real home and C: is the whole prefix.
  find "$template/drive_c" -type l -lname '/*' -exec sh -c 'rm "$1" && mkdir "$1"' _ {} \;
  touch "$template/.ready"
fi
export WINEPREFIX=$CARGO_TARGET_DIR/wineprefix.$$
trap 'WINEPREFIX=$WINEPREFIX /usr/bin/wineserver -k 2>/dev/null || true; rm -rf "$WINEPREFIX" "$TMPDIR"' EXIT
cp -a "$template" "$WINEPREFIX"
# Wine 8 has no bcryptprimitives.dll at all: the stand-in in system32 serves every program.
cp "$dll" "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
mkdir "$WINEPREFIX/scratch"
CLEANROOM_TEST_SCRATCH="$WINEPREFIX/scratch" CLEANROOM_EXE="$cli_exe" CLEANROOM_PAYLOAD="$out/examples/payload.exe" \
  timeout 600 /usr/lib/wine/wine64 "$test_exe" --test-threads=1 ||
  die "the Wine tests failed (or hung for 10 minutes)"

step "the real CLI under Wine"
# Each check runs cleanroom.exe of crates/cleanroom-cli in a project directory of the prefix's
# scratch, with a state dir of its own, and compares the status (and JSON) with Linux's.
cli_state=$WINEPREFIX/scratch/cli-state
project=$WINEPREFIX/scratch/project
mkdir -p "$project" "$cli_state"
cli() { (cd "$project" && timeout 120 /usr/lib/wine/wine64 "$cli_exe" --state-dir "$(winepath_of "$cli_state")" "$@"); }
winepath_of() { printf 'Z:%s' "$1" | tr / '\\'; }
expect() { # STATUS WHAT -- ARGS...: the real CLI exits STATUS
  local want=$1 what=$2 got=0; shift 3
  cli "$@" >"$TMPDIR/cli/out" 2>"$TMPDIR/cli/err" || got=$?
  [ "$got" = "$want" ] || { cat "$TMPDIR/cli/err" >&2; die "real CLI: $what: exit $got, expected $want"; }
}
leak=(cmd /c 'start /b ping -n 30 127.0.0.1 >NUL & exit 0')
printf '[run]\non-leak = "fail"\n' >"$project/cleanroom.toml"
# A discovered config is skipped on Windows (who could have written it is not judged yet):
# named in a warning; the file named with --config applies.
expect 0 "a discovered cleanroom.toml is skipped" -- run "${leak[@]}"
grep -q 'ignoring config .*cleanroom.toml: who could have written it' "$TMPDIR/cli/err" ||
  die "real CLI: skipping the discovered cleanroom.toml is not said"
expect 123 "cleanroom.toml's on-leak = fail" -- run --config cleanroom.toml --report report.json "${leak[@]}"
python3 - "$project/report.json" <<'PY' || die "real CLI: --report does not have the Linux schema's fields"
import json, sys
report = json.load(open(sys.argv[1]))
fields = {"schema", "version", "run_id", "root", "command", "started_unix_ms", "duration_ms",
          "exit", "containment", "protection", "tmp", "leaks", "killed", "survivors", "cleanup",
          "kept_root", "gc", "env"}  # docs/report.md
assert set(report) == fields, set(report) ^ fields
assert (report["schema"], report["version"]) == ("cleanroom-run-report", 1)
assert set(report["exit"]) == {"status", "code", "signal", "ending", "interrupt_signal", "timeout_signal"}
assert report["exit"]["status"] == 123 and report["exit"]["code"] == 0
assert [set(leak) for leak in report["leaks"]] == [{"pid", "start_time", "command", "found_after_ms"}]
assert "ping" in report["leaks"][0]["command"]
assert report["cleanup"]["status"] == "removed" and report["gc"]["format"] == "cleanroom-gc"
PY
expect 0 "--no-config leaves the leak a warning" -- run --no-config "${leak[@]}"
! grep -q 'ignoring config' "$TMPDIR/cli/err" || die "real CLI: --no-config still looked for a config"
rm "$project/cleanroom.toml" "$project/report.json"
expect 123 "--on-leak fail" -- run --on-leak fail "${leak[@]}"
expect 7 "the command's status" -- run cmd /c 'exit 7'
expect 124 "--timeout" -- run --timeout 1s ping -n 30 127.0.0.1
expect 0 "--keep-root" -- run --keep-root cmd /c 'exit 0'
expect 0 "list --json" -- list --json
python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["format"] == "cleanroom-list" and len(d["entries"]) == 1 and d["entries"][0]["state"] == "kept" and d["locks"] == [], d' \
  <"$TMPDIR/cli/out" || die "real CLI: list --json does not parse with the Linux schema"
expect 0 "gc --kept --json" -- gc --kept --json
python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["format"] == "cleanroom-gc" and d["removed"] == 1, d' \
  <"$TMPDIR/cli/out" || die "real CLI: gc --json does not parse with the Linux schema"
for refused in "--protect home" "--net none" "--lock-scope machine" "--share-tmp C:\\x" "--signal KILL" "--require-protection"; do
  # shellcheck disable=SC2086 # the option and its value are two words
  expect 125 "run $refused is refused" -- run $refused cmd /c 'exit 0'
  grep -q -- "${refused%% *}" "$TMPDIR/cli/err" || die "real CLI: the refusal of $refused does not name it"
done
expect 125 "--keep-root=on-failure is refused" -- run --keep-root=on-failure cmd /c 'exit 0'
grep -q -- "--keep-root=on-failure" "$TMPDIR/cli/err" || die "real CLI: the refusal of --keep-root=on-failure does not name it"
# Refusals judge the values the run would use: a variable refuses as its flag does, a config
# file's value is refused naming the file, and a flag replaces the file's value.
CLEANROOM_PROTECT=home expect 125 "CLEANROOM_PROTECT=home is refused" -- run cmd /c 'exit 0'
grep -q -- "--protect home" "$TMPDIR/cli/err" || die "real CLI: the refusal of CLEANROOM_PROTECT=home does not name it"
printf '[run]\nprotect = "home"\nprotect-path = ["C:\\\\x"]\nlock-scope = "machine"\n' >"$project/linux.toml"
expect 125 "a config file's protect = home is refused" -- run --config linux.toml cmd /c 'exit 0'
grep -q -- "linux.toml: --protect home" "$TMPDIR/cli/err" || die "real CLI: the refusal of the file's protect does not name the file"
expect 0 "flags replace the config file's refused values" -- run --config linux.toml --protect off --lock-scope user cmd /c 'exit 0'
rm "$project/linux.toml"

# --exclusive: LockFileEx locks in the namespace's locks\ (docs/exclusive.md), in a state dir
# of their own. A run holds its lock from before its root exists until its job is empty.
lock_state=$WINEPREFIX/scratch/lock-state
mkdir -p "$lock_state"
lock_cli() { (cd "$project" && timeout 120 /usr/lib/wine/wine64 "$cli_exe" --state-dir "$(winepath_of "$lock_state")" "$@"); }
holds() { # LABEL: a run of lock db that logs its start and end around 4 s of sleep
  lock_cli run --exclusive db -- cmd /c "echo $1-start>>lock.log & ping -n 5 127.0.0.1 >NUL & echo $1-end>>lock.log"
}
# 1. Two runs of one name started together never overlap: one waits, naming the holder.
rm -f "$project/lock.log"
holds A >"$TMPDIR/cli/a.out" 2>"$TMPDIR/cli/a.err" & a=$!
holds B >"$TMPDIR/cli/b.out" 2>"$TMPDIR/cli/b.err" & b=$!
wait $a || die "real CLI: --exclusive: run A failed: $(cat "$TMPDIR/cli/a.err")"
wait $b || die "real CLI: --exclusive: run B failed: $(cat "$TMPDIR/cli/b.err")"
python3 - "$project/lock.log" <<'PY' || die "real CLI: two --exclusive runs of one name overlapped"
import sys
log = open(sys.argv[1]).read().split()
assert len(log) == 4 and {log[0][0], log[2][0]} == {"A", "B"}, log
first, second = log[0][0], log[2][0]
assert log == [f"{first}-start", f"{first}-end", f"{second}-start", f"{second}-end"], log
PY
[ "$(cat "$TMPDIR/cli/a.err" "$TMPDIR/cli/b.err" | grep -c 'waiting for lock db, held by ')" = 1 ] ||
  die "real CLI: --exclusive: the runs did not meet (one should have waited, naming the holder)"
rm "$project/lock.log"
# 2. A holder killed hard (TerminateProcess) releases the lock at once: while it lives, list
# shows it and --lock-timeout gives up naming it; once it is killed, the next run starts.
# The holder sleeps in the test payload, not in Wine's ping, whose end does not depend on us alone.
payload=$(winepath_of "$out/examples/payload.exe")
lock_cli run --exclusive db -- "$payload" sleep 120 >/dev/null 2>"$TMPDIR/cli/holder.err" & holder=$!
holder_pid=
for _ in $(seq 100); do
  lock_cli list --json >"$TMPDIR/cli/out" 2>/dev/null || true
  holder_pid=$(python3 -c '
import json, sys
locks = json.load(sys.stdin)["locks"]
assert [set(l) for l in locks] == [{"record", "writer_alive"}], locks
record = locks[0]["record"]
fields = {"format", "version", "name", "scope", "run_id", "owner_sid", "owner", "host", "since_unix_ms", "command"}
assert set(record) == fields, set(record) ^ fields  # Linux: euid in owner_sid'"'"'s place
assert locks[0]["writer_alive"] and (record["name"], record["scope"]) == ("db", "user"), locks
assert record["command"][1:] == ["sleep", "120"] and record["command"][0].endswith("payload.exe"), record
print(record["owner"]["pid"])' <"$TMPDIR/cli/out" 2>/dev/null) && break
  sleep 0.2
done
[ -n "$holder_pid" ] || die "real CLI: list --json does not show the held lock db: $(cat "$TMPDIR/cli/out")
the holder $(kill -0 $holder 2>/dev/null && echo 'still runs' || echo 'has ended'); its stderr: $(cat "$TMPDIR/cli/holder.err")"
expect_lock() { local want=$1 what=$2 got=0; shift 2
  lock_cli "$@" >"$TMPDIR/cli/out" 2>"$TMPDIR/cli/err" || got=$?
  [ "$got" = "$want" ] || { cat "$TMPDIR/cli/err" >&2; die "real CLI: $what: exit $got, expected $want"; }
}
expect_lock 125 "--lock-timeout while the lock is held" run --exclusive db --lock-timeout 1s -- cmd /c 'exit 0'
grep -q "timed out.*db.*pid $holder_pid.*payload.exe sleep 120" "$TMPDIR/cli/err" ||
  die "real CLI: --lock-timeout does not name the holder (pid $holder_pid): $(cat "$TMPDIR/cli/err")"
/usr/lib/wine/wine64 taskkill /F /PID "$holder_pid" >/dev/null 2>&1 ||
  die "real CLI: taskkill /F /PID $holder_pid failed"
wait $holder || true
started=$(date +%s%N)
expect_lock 5 "a run after its holder was killed" run --exclusive db --lock-timeout 10s -- cmd /c 'exit 5'
waited_ms=$(( ($(date +%s%N) - started) / 1000000 ))
[ "$waited_ms" -lt 8000 ] || die "real CLI: the lock of a killed holder was taken only after $waited_ms ms"
grep -q 'waiting for lock' "$TMPDIR/cli/err" && die "real CLI: a killed holder's lock was waited for"
# What stays: the killed run's root (gc reclaims it) and the empty lock file; the stale owner
# record and token hash were replaced and withdrawn by the run after it.
# 3. A run nested in the holder's run presents the token it inherited and joins as a member
# instead of waiting for its own enclosing run (the nested run is this cleanroom.exe again).
expect_lock 4 "a nested run of the same lock joins" run --exclusive db -- \
  "$(winepath_of "$cli_exe")" --state-dir "$(winepath_of "$lock_state")" \
  run --exclusive db --lock-timeout 5s -- cmd /c 'exit 4'
grep -q 'waiting for lock' "$TMPDIR/cli/err" && die "real CLI: a nested run waited for its enclosing run's lock"
expect_lock 0 "gc after the killed holder" gc
[ "$(cd "$lock_state" && find . -mindepth 1 | sort | tr '\n' ' ')" = "./locks ./locks/db.lock " ] ||
  die "real CLI: after the lock checks and gc, the state dir holds: $(cd "$lock_state" && find . -mindepth 1)"
expect 125 "serve" -- serve
grep -q 'not available on Windows' "$TMPDIR/cli/err" || die "real CLI: serve does not say it is not available"
expect 0 "completions" -- completions powershell
expect 0 "man" -- man
[ -z "$(ls -A "$cli_state")" ] || die "real CLI: the state dir is not empty after the checks"

step "type-check the library and the CLI for x86_64-apple-darwin"
"${cargo[@]}" check -p cleanroom -p cleanroom-cli --target x86_64-apple-darwin -Zbuild-std=std,panic_abort --locked
step "done"
