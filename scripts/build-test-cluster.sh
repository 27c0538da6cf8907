#!/usr/bin/env bash
# Builds the real control plane the integration tests run against: kube-apiserver from the
# k8s.io/kubernetes Go module and etcd from the go.etcd.io Go modules, each into a cache
# directory keyed by its version, so a warm run only checks that the binaries are there.
#
# Prints the directory holding `kube-apiserver`, `etcd` and `kubectl` on its last line of stdout.
# kubectl comes from the same module and version as the apiserver: the tests run the commands the
# install pages (docs/install/) document, and Debian packages no kubectl.
# Environment: KUBE_VERSION (default below), ETCD_VERSION, PME_CACHE (cache root).
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${PME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/passmower-elector}"
# One build per cache at a time: another (CI beside a test run, two test binaries) would write
# the same files, and a cached result is only trusted once its builder has finished.
mkdir -p "$CACHE"
exec 9>>"$CACHE/.build-test-cluster.lock"
flock 9
OUT="$CACHE/control-plane/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}"

log() { echo "build-test-cluster: $*" >&2; }

# The apiserver reports its version only when the build stamps it (as Kubernetes' own build
# does): Helm compares charts' kubeVersion and `.Capabilities.KubeVersion` with it, and an
# unstamped v0.0.0-master fails both. The marker tells a stamped binary from an older cache.
STAMP="$OUT/kube-apiserver.version-stamped"
if [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" && -x "$OUT/kubectl" && -f "$STAMP" ]]; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { log "go is required (the Go toolchain builds kube-apiserver and etcd)"; exit 1; }
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

# kube-apiserver: k8s.io/kubernetes points its staging modules (k8s.io/api, ...) at ./staging
# with version v0.0.0; outside its repository those replace lines do not apply, so a wrapper
# module replaces each staging module with its published v0.MINOR.PATCH twin.
kube_module() {
  local dir="$work/kube" staging
  if [[ -f "$dir/go.mod" ]]; then cd "$dir"; return; fi
  mkdir -p "$dir" && cd "$dir"
  go mod init elector-test/kube >/dev/null 2>&1
  go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" >"$dir/dl.json"
  local gomod
  gomod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' "$dir/dl.json")"
  staging="v0.${KUBE_VERSION#v1.}"
  {
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } >>go.mod
}

# kube_build NAME: compiles k8s.io/kubernetes/cmd/NAME with the version stamped in.
kube_build() {
  local name="$1" minor="${KUBE_VERSION#v1.}" ldflags="-s -w" pkg
  kube_module
  go get "k8s.io/kubernetes/cmd/${name}@${KUBE_VERSION}" >&2
  log "compiling ${name} ${KUBE_VERSION} (minutes on two cores)"
  minor="${minor%%.*}"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  go build -trimpath -ldflags "$ldflags" -o "$OUT/${name}.tmp" "k8s.io/kubernetes/cmd/${name}"
  mv "$OUT/${name}.tmp" "$OUT/${name}"
}

build_kube_apiserver() {
  kube_build kube-apiserver
  touch "$STAMP"
}

# etcd: the server module refers to its sibling modules through ../ replace lines, which
# likewise do not apply outside the repository, so pin the siblings to the same release.
build_etcd() {
  local dir="$work/etcd"
  mkdir -p "$dir" && cd "$dir"
  go mod init elector-test/etcd >/dev/null 2>&1
  cat >>go.mod <<MOD
replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/server/v3 => go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
)
MOD
  go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
  log "compiling etcd ${ETCD_VERSION}"
  go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$OUT/etcd.tmp" "$OUT/etcd"
}

[[ -x "$OUT/etcd" ]] || build_etcd
[[ -x "$OUT/kube-apiserver" && -f "$STAMP" ]] || build_kube_apiserver
[[ -x "$OUT/kubectl" ]] || kube_build kubectl
log "built: $OUT"
echo "$OUT"
