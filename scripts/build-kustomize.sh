#!/usr/bin/env bash
# Builds the kustomize CLI from its Go module (sigs.k8s.io/kustomize/kustomize/v5) into a cache
# directory keyed by its version, so a warm run only checks that the binary is there. Prebuilt
# downloads are not an option here; the Go module proxy is.
#
# Prints the path of the `kustomize` binary on its last line of stdout.
# Environment: KUSTOMIZE_VERSION (default below; v5.8.3 needs Go 1.27, CI has 1.26), PME_CACHE.
set -euo pipefail

KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.2}"
CACHE="${PME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/passmower-elector}"
# One build per cache at a time: another (CI beside a test run, two test binaries) would write
# the same files, and a cached result is only trusted once its builder has finished.
mkdir -p "$CACHE"
exec 9>>"$CACHE/.build-kustomize.lock"
flock 9
OUT="$CACHE/kustomize/kustomize-${KUSTOMIZE_VERSION}"

log() { echo "build-kustomize: $*" >&2; }

if [[ -x "$OUT/kustomize" ]]; then
  log "cached: $OUT/kustomize"
  echo "$OUT/kustomize"
  exit 0
fi

command -v go >/dev/null || { log "go is required (the Go toolchain builds kustomize)"; exit 1; }
case "$KUSTOMIZE_VERSION" in
  v5.*) module="sigs.k8s.io/kustomize/kustomize/v5" ;;
  *) log "KUSTOMIZE_VERSION must be v5.x.y, got $KUSTOMIZE_VERSION"; exit 1 ;;
esac

mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

cd "$work"
go mod init elector-tools/kustomize >/dev/null 2>&1
go get "${module}@${KUSTOMIZE_VERSION}" >&2
log "compiling kustomize ${KUSTOMIZE_VERSION} (a minute or two on two cores)"
# `kustomize version` reads this variable (set by kustomize's own release build).
ldflags="-s -w -X sigs.k8s.io/kustomize/api/provenance.version=${KUSTOMIZE_VERSION}"
go build -trimpath -ldflags "$ldflags" -o "$OUT/kustomize.tmp" "${module}"
mv "$OUT/kustomize.tmp" "$OUT/kustomize"
log "built: $OUT/kustomize"
echo "$OUT/kustomize"
