#!/usr/bin/env bash
# Builds actionlint (the GitHub Actions workflow linter) from its Go module into a cache
# directory keyed by its version, as scripts/build-helm.sh does for helm: a warm run only
# checks that the binary is there.
#
# Prints the path of the `actionlint` binary on its last line of stdout.
# Environment: ACTIONLINT_VERSION (default below), PME_CACHE (cache root).
set -euo pipefail
# shellcheck source=scripts/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"

ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
build_start actionlint
OUT="$CACHE/actionlint/actionlint-${ACTIONLINT_VERSION}"
build_cached "$OUT/actionlint" "$OUT/actionlint"

go_scratch
go_module elector-tools/actionlint
go get "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}" >&2
log "compiling actionlint ${ACTIONLINT_VERSION}"
# The version `actionlint -version` prints, as its release build stamps it.
go_build "$OUT/actionlint" "-s -w -X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION}" \
  github.com/rhysd/actionlint/cmd/actionlint
log "built: $OUT/actionlint"
echo "$OUT/actionlint"
