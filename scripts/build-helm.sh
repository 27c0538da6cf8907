#!/usr/bin/env bash
# Builds the helm CLI from its Go module (helm.sh/helm/v3, or v4 when HELM_VERSION is v4.*) into
# a cache directory keyed by its version, so a warm run only checks that the binary is there.
# Prebuilt helm downloads are not an option here; the Go module proxy is.
#
# Prints the path of the `helm` binary on its last line of stdout.
# Environment: HELM_VERSION (default below), PME_CACHE (cache root).
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${PME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/passmower-elector}"
# One build per cache at a time: another (CI beside a test run, two test binaries) would write
# the same files, and a cached result is only trusted once its builder has finished.
mkdir -p "$CACHE"
exec 9>>"$CACHE/.build-helm.lock"
flock 9
OUT="$CACHE/helm/helm-${HELM_VERSION}"

log() { echo "build-helm: $*" >&2; }

if [[ -x "$OUT/helm" ]]; then
  log "cached: $OUT/helm"
  echo "$OUT/helm"
  exit 0
fi

command -v go >/dev/null || { log "go is required (the Go toolchain builds helm)"; exit 1; }
case "$HELM_VERSION" in
  v3.*) module="helm.sh/helm/v3" ;;
  v4.*) module="helm.sh/helm/v4" ;;
  *) log "HELM_VERSION must be v3.x.y or v4.x.y, got $HELM_VERSION"; exit 1 ;;
esac

mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

cd "$work"
go mod init elector-tools/helm >/dev/null 2>&1
go get "${module}/cmd/helm@${HELM_VERSION}" >&2
log "compiling helm ${HELM_VERSION} (a few minutes on two cores)"
# Helm's Makefile stamps, through -X, its own version and the Kubernetes version it assumes
# for `helm template` / `helm lint` (from its client-go, else v1.20, which fails charts with a
# kubeVersion constraint). Take the variable names from that Makefile, as `make` would.
moddir="$(go list -m -f '{{.Dir}}' "$module")"
client_go_minor="$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)"
ldflags="-s -w"
for var in $(grep -o -- '-X [^ =]*' "$moddir/Makefile" | awk '{print $2}' | sort -u); do
  case "$var" in
    */internal/version.version) ldflags+=" -X $var=${HELM_VERSION}" ;;
    *k8sVersionMajor) ldflags+=" -X $var=1" ;;
    *k8sVersionMinor) ldflags+=" -X $var=${client_go_minor}" ;;
  esac
done
log "ldflags: $ldflags"
go build -trimpath -ldflags "$ldflags" -o "$OUT/helm.tmp" "${module}/cmd/helm"
mv "$OUT/helm.tmp" "$OUT/helm"
log "built: $OUT/helm"
echo "$OUT/helm"
