#!/usr/bin/env bash
# Proves what Dockerfile.sidecar relies on, without a container engine: the release binary,
# built with crt-static on the gnu target, is statically linked and runs from an otherwise
# empty root (chroot into a directory holding only the binary), including `copy-self`.
#
# Needs root or passwordless sudo (for chroot). Environment: TARGET (default: the host's gnu
# triple); BINARY: check that file instead of building (the release's binaries, .ci/run and
# the release workflow; several files separated by spaces).
set -euo pipefail

cd "$(dirname "$0")/.."
log() { echo "check-static-binary: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

if [[ -n "${BINARY:-}" ]]; then
  if [[ "$BINARY" == *" "* ]]; then
    for one in $BINARY; do BINARY="$one" "$0"; done
    exit 0
  fi
  bin="$BINARY"
  [[ -x "$bin" ]] || fail "BINARY=$bin is not an executable file"
  log "checking $bin"
else
  TARGET="${TARGET:-$(rustc -vV | sed -n 's/^host: //p')}"
  log "building release binary for $TARGET with crt-static"
  # --target keeps RUSTFLAGS away from build scripts and proc macros (which must stay dynamic)
  # and puts the artifact in its own directory, so the normal release build is not invalidated.
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target "$TARGET" >&2
  # CARGO_TARGET_DIR: .ci/run keeps the target dir in its cache.
  bin="${CARGO_TARGET_DIR:-target}/$TARGET/release/passmower-elector"
  [[ -x "$bin" ]] || fail "$bin was not built"
fi
log "size: $(stat -c %s "$bin") bytes"

# 1. Linkage: no program interpreter and no shared-library dependencies.
if readelf -lW "$bin" | grep -q 'INTERP'; then fail "has a program interpreter (dynamically linked)"; fi
if readelf -dW "$bin" | grep -q '(NEEDED)'; then fail "needs shared libraries: $(readelf -dW "$bin" | grep NEEDED)"; fi
log "readelf: no INTERP, no NEEDED"
if command -v file >/dev/null; then
  desc="$(file -b "$bin")"
  log "file: $desc"
  case "$desc" in *"static"*) ;; *) fail "file(1) does not call it static" ;; esac
fi
if ldd "$bin" >/dev/null 2>&1 && ! ldd "$bin" 2>&1 | grep -q 'statically linked\|not a dynamic'; then
  fail "ldd lists libraries: $(ldd "$bin")"
fi
log "ldd: $(ldd "$bin" 2>&1 | head -1 | sed 's/^[[:space:]]*//')"

# 2. An empty root: only the binary (at the image's path) and an empty /x directory target.
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/x"
cp "$bin" "$root/usr/local/bin/passmower-elector"
chroot=(chroot)
if [[ "$(id -u)" != 0 ]]; then
  sudo -n true 2>/dev/null || fail "chroot needs root (or passwordless sudo)"
  chroot=(sudo -n chroot)
fi
version="$("${chroot[@]}" "$root" /usr/local/bin/passmower-elector --version)" || fail "--version failed in an empty root"
log "chroot --version: ${version//$'\n'/; }"
# No /proc in this root (a container would have one): copy-self must still find itself,
# through argv[0], which is the harder case.
"${chroot[@]}" "$root" /usr/local/bin/passmower-elector copy-self /x/passmower-elector \
  || fail "copy-self failed in an empty root"
cmp "$root/x/passmower-elector" "$bin" || fail "copy-self wrote a different file"
[[ "$(stat -c %a "$root/x/passmower-elector")" == 755 ]] || fail "copy-self did not set mode 0755"
copied="$("${chroot[@]}" "$root" /x/passmower-elector --version)" || fail "the copy does not run"
log "chroot copy-self /x/passmower-elector: ok, identical, mode 0755, runs: ${copied//$'\n'/; }"
log "PASS"
