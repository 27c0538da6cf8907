#!/usr/bin/env bash
# Builds the benchmark's peer candidates (scripts/bench.sh) into a cache keyed by the peer
# library's version and a hash of our wrapper's source, so a warm run only checks the binaries:
#   client-go-peer             bench/peers/client-go (k8s.io/client-go/tools/leaderelection)
#   kube-lease-manager-peer    bench/peers/rust/kube-lease-manager-peer
#   kube-leader-election-peer  bench/peers/rust/kube-leader-election-peer
# The Go peer is built from the Go module proxy in a scratch copy; the Rust peers are separate
# cargo projects (their own lock files) with their own target dir under the cache.
#
# Prints a directory on its last stdout line: the three binaries (stripped) and versions.env.
# Never run by CI or scripts/test.sh. Environment: CLIENT_GO_VERSION, PME_CACHE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLIENT_GO_VERSION="${CLIENT_GO_VERSION:-v0.37.2}"
CACHE="${PME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/passmower-elector}/bench-peers"
# One build per cache at a time: another (CI beside a test run, two test binaries) would write
# the same files, and a cached result is only trusted once its builder has finished.
mkdir -p "$CACHE"
exec 9>>"$CACHE/.build-bench-peers.lock"
flock 9
OUT="$CACHE/bin"
mkdir -p "$OUT"

log() { echo "build-bench-peers: $*" >&2; }
src_hash() { cat "$@" | sha256sum | cut -c1-12; }

# --- client-go ---------------------------------------------------------------------------
build_client_go() {
  local src=bench/peers/client-go
  local key dir
  key="client-go-${CLIENT_GO_VERSION}-$(go env GOVERSION)-$(src_hash "$src/main.go" "$src/go.mod")"
  dir="$CACHE/$key"
  if [[ ! -x "$dir/client-go-peer" ]]; then
    command -v go >/dev/null || { log "go is required"; exit 1; }
    log "building client-go-peer with k8s.io/client-go ${CLIENT_GO_VERSION}"
    local work
    work="$(mktemp -d)"
    cp "$src/main.go" "$src/go.mod" "$work/"
    (
      cd "$work"
      export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
      go get "k8s.io/client-go@${CLIENT_GO_VERSION}" "k8s.io/apimachinery@${CLIENT_GO_VERSION}" >&2
      go mod tidy >&2
      mkdir -p "$dir"
      go build -trimpath -ldflags "-s -w" -o "$dir/client-go-peer.tmp" .
      mv "$dir/client-go-peer.tmp" "$dir/client-go-peer"
    )
    rm -rf "$work"
  fi
  cp "$dir/client-go-peer" "$OUT/client-go-peer"
  echo "CLIENT_GO_VERSION=${CLIENT_GO_VERSION}" >>"$OUT/versions.env.tmp"
  echo "GO_VERSION=$(go env GOVERSION)" >>"$OUT/versions.env.tmp"
}

# --- Rust peers --------------------------------------------------------------------------
# crate_version PROJECT CRATE: the version its lock file resolved.
crate_version() {
  awk -v name="$2" '$1=="name" && $3=="\""name"\"" {getline; gsub(/"/,"",$3); print $3; exit}' \
    "$1/Cargo.lock"
}

build_rust_peer() {
  local name="$1" crate="$2"
  local src="bench/peers/rust/$name"
  # The lock file pins the peer library; `cargo update` in the project moves it to the latest.
  # (kube-leader-election asks for k8s-openapi >=0.27 while kube 4 pins 0.28: its lock file
  # unifies them on 0.28, `cargo update -p k8s-openapi@0.29.0 --precise 0.28.0`.)
  [[ -f "$src/Cargo.lock" ]] || cargo generate-lockfile --manifest-path "$src/Cargo.toml" >&2
  local version key dir
  version="$(crate_version "$src" "$crate")"
  key="$name-$version-$(src_hash "$src/Cargo.toml" "$src/Cargo.lock" "$src/src/main.rs" bench/peers/rust/common.rs)"
  dir="$CACHE/$key"
  if [[ ! -x "$dir/$name" ]]; then
    log "building $name with $crate $version (release, several minutes on two cores)"
    CARGO_TARGET_DIR="$CACHE/rust-target" cargo build --release --locked \
      --manifest-path "$src/Cargo.toml" >&2
    mkdir -p "$dir"
    cp "$CACHE/rust-target/release/$name" "$dir/$name"
  fi
  cp "$dir/$name" "$OUT/$name"
  local var
  var="$(echo "$crate" | tr 'a-z-' 'A-Z_')_VERSION"
  echo "$var=$version" >>"$OUT/versions.env.tmp"
}

rm -f "$OUT/versions.env.tmp"
build_client_go
build_rust_peer kube-lease-manager-peer kube-lease-manager
build_rust_peer kube-leader-election-peer kube-leader-election
mv "$OUT/versions.env.tmp" "$OUT/versions.env"
log "built: $OUT"
echo "$OUT"
