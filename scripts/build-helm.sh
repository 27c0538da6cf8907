#!/usr/bin/env bash
# Builds the helm CLI from its Go module (helm.sh/helm/v3, or v4 when HELM_VERSION is v4.*) into
# a cache directory keyed by its version, so a warm run only checks that the binary is there.
#
# Prints the path of the `helm` binary on its last line of stdout.
# Environment: HELM_VERSION (default below), PME_CACHE (cache root).
set -euo pipefail
# shellcheck source=scripts/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
build_start helm
OUT="$CACHE/helm/helm-${HELM_VERSION}"
build_cached "$OUT/helm" "$OUT/helm"

case "$HELM_VERSION" in
  v3.*) module="helm.sh/helm/v3" ;;
  v4.*) module="helm.sh/helm/v4" ;;
  *) die "HELM_VERSION must be v3.x.y or v4.x.y, got $HELM_VERSION" ;;
esac
go_scratch
go_module elector-tools/helm
go get "${module}/cmd/helm@${HELM_VERSION}" >&2
log "compiling helm ${HELM_VERSION} (a few minutes on two cores)"
# Helm's Makefile stamps, through -X, its own version and the Kubernetes version it assumes
# for `helm template` / `helm lint` (from its client-go, else v1.20, which fails charts with a
# kubeVersion constraint). Take the variable names from that Makefile, as `make` would.
moddir="$(go list -m -f '{{.Dir}}' "$module")"
client_go_minor="$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)"
ldflags="-s -w"
while read -r var; do
  case "$var" in
    */internal/version.version) ldflags+=" -X $var=${HELM_VERSION}" ;;
    *k8sVersionMajor) ldflags+=" -X $var=1" ;;
    *k8sVersionMinor) ldflags+=" -X $var=${client_go_minor}" ;;
  esac
done < <(grep -o -- '-X [^ =]*' "$moddir/Makefile" | awk '{print $2}' | sort -u)
log "ldflags: $ldflags"
go_build "$OUT/helm" "$ldflags" "${module}/cmd/helm"
log "built: $OUT/helm"
echo "$OUT/helm"
