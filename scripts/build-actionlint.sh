#!/usr/bin/env bash
# Builds actionlint (the GitHub Actions workflow linter) from its Go module into a cache
# directory keyed by its version, as scripts/build-helm.sh does for helm: a warm run only
# checks that the binary is there. Prebuilt downloads are not an option here; the Go module
# proxy is.
#
# Prints the path of the `actionlint` binary on its last line of stdout.
# Environment: ACTIONLINT_VERSION (default below), PME_CACHE (cache root).
set -euo pipefail

ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
CACHE="${PME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/passmower-elector}"
mkdir -p "$CACHE"
exec 9>>"$CACHE/.build-actionlint.lock"
flock 9
OUT="$CACHE/actionlint/actionlint-${ACTIONLINT_VERSION}"

log() { echo "build-actionlint: $*" >&2; }

if [[ -x "$OUT/actionlint" ]]; then
  log "cached: $OUT/actionlint"
  echo "$OUT/actionlint"
  exit 0
fi

command -v go >/dev/null || { log "go is required (the Go toolchain builds actionlint)"; exit 1; }
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
cd "$work"
go mod init elector-tools/actionlint >/dev/null 2>&1
go get "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}" >&2
log "compiling actionlint ${ACTIONLINT_VERSION}"
# The version `actionlint -version` prints, as its release build stamps it.
go build -trimpath -ldflags "-s -w -X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION}" \
  -o "$OUT/actionlint.tmp" github.com/rhysd/actionlint/cmd/actionlint
mv "$OUT/actionlint.tmp" "$OUT/actionlint"
log "built: $OUT/actionlint"
echo "$OUT/actionlint"
