#!/usr/bin/env bash
# Builds the Kubernetes node components the real-pod tests run beside the test control plane
# (scripts/build-test-cluster.sh: kube-apiserver + etcd), from Go modules, into a cache
# directory keyed by both versions, so a warm run only checks that the binaries are there:
#
#   kubelet, kube-proxy                          KUBELET_VERSION (default v1.34.4)
#   kube-apiserver, kube-controller-manager,     KUBE_VERSION    (default v1.37.2, the
#   kube-scheduler, kubectl                                       test control plane's)
#
# Why the kubelet is older than the apiserver. The machines this runs on (Firecracker VMs) mount
# a cgroup v1 hierarchy, and the only container runtime Debian ships is containerd 1.6. Kubelet
# 1.35 refuses cgroup v1 unless told otherwise (failCgroupV1 defaults to true) and Kubernetes
# 1.36 drops containerd 1.x; 1.34 is the newest minor that runs on both without opt-ins, and a
# kubelet (and kube-proxy) three minors behind the apiserver is within the supported version
# skew. kube-controller-manager and kube-scheduler may not be more than one minor behind the
# apiserver, so they take its version — which also lets them reuse the Go build cache the
# apiserver build filled (same module versions, same flags), and kubectl with them.
#
# The node runs its own kube-apiserver, the same version as scripts/build-test-cluster.sh's
# but with the version stamped (-X k8s.io/component-base/version...): helm refuses to render
# a chart whose templates compare the server's version when /version reports the unstamped
# v0.0.0-master+$Format:...$. Its packages come from the Go build cache; only the link is new.
#
# Commands that share a version are built by one `go build` invocation, so the packages they
# share are compiled once. CGO_ENABLED=0: the kubelet needs no cgo on Linux for what the tests
# use (no cadvisor GPU accounting, no systemd journal), and static binaries need no library.
#
# Prints the directory holding the six binaries on its last line of stdout.
# Environment: KUBELET_VERSION, KUBE_VERSION, PME_CACHE (cache root).
set -euo pipefail
# shellcheck source=scripts/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"

KUBELET_VERSION="${KUBELET_VERSION:-v1.34.4}"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
build_start node
OUT="$CACHE/node/kubelet-${KUBELET_VERSION}-kube-${KUBE_VERSION}"
NODE_BINS=(kubelet kube-proxy)
CONTROL_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

have_all() {
  local b
  for b in "$@"; do [[ -x "$OUT/$b" ]] || return 1; done
}
have_all "${NODE_BINS[@]}" "${CONTROL_BINS[@]}" && build_cached "$OUT"
mkdir -p "$OUT"
go_scratch

# build VERSION CMD...: one wrapper module and one `go build` for every command of k8s.io/kubernetes
# at VERSION.
build() {
  local version="$1" dir="$work/kube-$1" cmd
  shift
  kube_module "$dir" "$version"
  local pkgs=()
  for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
  for cmd in "${pkgs[@]}"; do go get "${cmd}@${version}" >&2; done
  log "compiling $* ${version} (several minutes on two cores)"
  local t0=$SECONDS
  mkdir -p "$dir/out"
  # The version stamp kubectl and the kubelet report (`kubectl version`, the Node's
  # status.nodeInfo.kubeletVersion): the apiserver's skew checks and humans read it.
  local v="k8s.io/component-base/version"
  go build -trimpath \
    -ldflags "-s -w -X $v.gitVersion=${version} -X $v.gitMajor=1 -X $v.gitMinor=$(cut -d. -f2 <<<"$version")" \
    -o "$dir/out/" "${pkgs[@]}"
  for cmd in "$@"; do mv "$dir/out/$cmd" "$OUT/$cmd"; done
  log "compiled $* ${version} in $((SECONDS - t0))s"
}

have_all "${NODE_BINS[@]}" || build "$KUBELET_VERSION" "${NODE_BINS[@]}"
have_all "${CONTROL_BINS[@]}" || build "$KUBE_VERSION" "${CONTROL_BINS[@]}"
log "built: $OUT ($(du -sh "$OUT" | cut -f1))"
echo "$OUT"
