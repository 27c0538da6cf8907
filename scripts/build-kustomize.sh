#!/usr/bin/env bash
# Builds the kustomize CLI from its Go module (sigs.k8s.io/kustomize/kustomize/v5) into a cache
# directory keyed by its version, so a warm run only checks that the binary is there.
#
# Prints the path of the `kustomize` binary on its last line of stdout.
# Environment: KUSTOMIZE_VERSION (default below; v5.8.3 needs Go 1.27, CI has 1.26), PME_CACHE.
set -euo pipefail
# shellcheck source=scripts/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"

KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.2}"
build_start kustomize
OUT="$CACHE/kustomize/kustomize-${KUSTOMIZE_VERSION}"
build_cached "$OUT/kustomize" "$OUT/kustomize"

case "$KUSTOMIZE_VERSION" in
  v5.*) module="sigs.k8s.io/kustomize/kustomize/v5" ;;
  *) die "KUSTOMIZE_VERSION must be v5.x.y, got $KUSTOMIZE_VERSION" ;;
esac
go_scratch
go_module elector-tools/kustomize
go get "${module}@${KUSTOMIZE_VERSION}" >&2
log "compiling kustomize ${KUSTOMIZE_VERSION} (a minute or two on two cores)"
# `kustomize version` reads this variable (set by kustomize's own release build).
ldflags="-s -w -X sigs.k8s.io/kustomize/api/provenance.version=${KUSTOMIZE_VERSION}"
go_build "$OUT/kustomize" "$ldflags" "${module}"
log "built: $OUT/kustomize"
echo "$OUT/kustomize"
