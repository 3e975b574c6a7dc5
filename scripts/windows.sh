#!/usr/bin/env bash
# Windows and macOS from this Linux machine (docs/windows.md):
# 1. builds cleanroom.exe (crates/cleanroom-windows) and its Wine tests for x86_64-pc-windows-gnu
#    with Debian's rustc-web + build-std + mingw, in a cross target dir outside the checkout
#    (below; the Linux target stays warm);
# 2. runs the tests under Wine 8 with a private WINEPREFIX inside target/ (removed afterwards),
#    with the ProcessPrng stand-in DLL (test scaffolding, scripts/windows/processprng.c);
# 3. type-checks the library for x86_64-apple-darwin.
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
manifest=(--manifest-path crates/cleanroom-windows/Cargo.toml)
out=$CARGO_TARGET_DIR/x86_64-pc-windows-gnu/debug

step() { echo "== $* ($(date +%T))" >&2; }

step "build cleanroom.exe, the test payload and the Wine tests"
# No clippy exists for Debian's rustc 1.96 (rustup's 1.95 clippy cannot build 1.96's core), so
# compiler warnings in our crates fail the build here instead (cargo replays cached ones).
log=$CARGO_TARGET_DIR/windows-build.log
"${cargo[@]}" build "${manifest[@]}" "${win[@]}" --bins --examples 2>&1 | tee "$log" >&2
test_exe=$("${cargo[@]}" test "${manifest[@]}" "${win[@]}" --no-run --message-format=json 2>>"$log" |
  sed -n 's/.*"executable":"\([^"]*wine[^"]*\.exe\)".*/\1/p' | tail -n1)
[ -n "$test_exe" ] || die "cargo did not report the Wine test executable (see $log)"
if grep -q '^warning: .*\|^warning\[' "$log" && grep -A3 '^warning' "$log" | grep -q -- '--> \(/.*/\)\?crates/'; then
  die "the Windows build has warnings in our crates (see $log)"
fi

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
CLEANROOM_TEST_SCRATCH="$WINEPREFIX/scratch" CLEANROOM_EXE="$out/cleanroom.exe" CLEANROOM_PAYLOAD="$out/examples/payload.exe" \
  timeout 600 /usr/lib/wine/wine64 "$test_exe" --test-threads=1 ||
  die "the Wine tests failed (or hung for 10 minutes)"

step "type-check the library for x86_64-apple-darwin"
"${cargo[@]}" check -p cleanroom --target x86_64-apple-darwin -Zbuild-std=std,panic_abort --locked
step "done"
