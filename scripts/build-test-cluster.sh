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
# shellcheck source=scripts/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
build_start test-cluster
OUT="$CACHE/control-plane/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}"

# The apiserver reports its version only when the build stamps it (as Kubernetes' own build
# does): Helm compares charts' kubeVersion and `.Capabilities.KubeVersion` with it, and an
# unstamped v0.0.0-master fails both. The marker tells a stamped binary from an older cache.
STAMP="$OUT/kube-apiserver.version-stamped"
[[ -f "$STAMP" ]] && build_cached "$OUT" "$OUT/kube-apiserver" "$OUT/etcd" "$OUT/kubectl"
go_scratch

# kube_build NAME: compiles k8s.io/kubernetes/cmd/NAME with the version stamped in.
kube_build() {
  local name="$1" minor="${KUBE_VERSION#v1.}" ldflags="-s -w" pkg
  kube_module "$work/kube" "$KUBE_VERSION"
  go get "k8s.io/kubernetes/cmd/${name}@${KUBE_VERSION}" >&2
  log "compiling ${name} ${KUBE_VERSION} (minutes on two cores)"
  minor="${minor%%.*}"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  go_build "$OUT/${name}" "$ldflags" "k8s.io/kubernetes/cmd/${name}"
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
  go_build "$OUT/etcd" "-s -w" go.etcd.io/etcd/server/v3
}

[[ -x "$OUT/etcd" ]] || build_etcd
[[ -x "$OUT/kube-apiserver" && -f "$STAMP" ]] || build_kube_apiserver
[[ -x "$OUT/kubectl" ]] || kube_build kubectl
log "built: $OUT"
echo "$OUT"
