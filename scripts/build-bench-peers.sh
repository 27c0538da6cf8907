#!/usr/bin/env bash
# Builds the benchmark's peer candidates (scripts/bench.sh) into a cache keyed by the peer
# library's version and a hash of our wrapper's source, so a warm run only checks the binaries:
#   client-go-peer             bench/peers/client-go (k8s.io/client-go/tools/leaderelection)
#   kube-lease-manager-peer    bench/peers/rust/kube-lease-manager-peer
#   kube-leader-election-peer  bench/peers/rust/kube-leader-election-peer
#   k8s-await-election         LINBIT's github.com/linbit/k8s-await-election, unmodified (the
#                              supervisor peer: it runs an app only while it holds the Lease)
# The Go peers are built from the Go module proxy in a scratch module; the Rust peers are
# separate cargo projects (their own lock files) with their own target dir under the cache.
# k8s-await-election is a main package: `go get` of the pinned version into a scratch module,
# then `go build` of it. Where the proxy refuses that module, PME_AWAIT_ELECTION_GIT may name a
# clone of github.com/LINBIT/k8s-await-election: the pinned tag is exported from it into a
# scratch directory and built there with its own go.mod (nothing is copied into this repo).
#
# Prints a directory on its last stdout line: the four binaries (stripped) and versions.env.
# Never run by CI or scripts/test.sh. Environment: CLIENT_GO_VERSION, AWAIT_ELECTION_VERSION,
# PME_AWAIT_ELECTION_GIT, PME_CACHE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLIENT_GO_VERSION="${CLIENT_GO_VERSION:-v0.37.2}"
# The newest tag (v0.4.2, 2023); check for a newer one with
# `go mod download -json github.com/linbit/k8s-await-election@vX.Y.Z`.
AWAIT_ELECTION_VERSION="${AWAIT_ELECTION_VERSION:-v0.4.2}"
# shellcheck source=scripts/lib/build.sh
. scripts/lib/build.sh
build_start bench-peers bench-peers
OUT="$CACHE/bin"
mkdir -p "$OUT"
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

# --- k8s-await-election --------------------------------------------------------------------
build_await_election() {
  local module=github.com/linbit/k8s-await-election
  local key dir
  key="k8s-await-election-${AWAIT_ELECTION_VERSION}-$(go env GOVERSION)"
  dir="$CACHE/$key"
  if [[ ! -x "$dir/k8s-await-election" ]]; then
    command -v go >/dev/null || { log "go is required"; exit 1; }
    log "building k8s-await-election ${AWAIT_ELECTION_VERSION}"
    local work ldflags
    work="$(mktemp -d)"
    ldflags="-s -w -X main.Version=${AWAIT_ELECTION_VERSION}"
    mkdir -p "$dir"
    (
      cd "$work"
      local go=(env GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 go)
      "${go[@]}" mod init bench/await-election >/dev/null 2>&1
      if "${go[@]}" get "${module}@${AWAIT_ELECTION_VERSION}" >&2; then
        "${go[@]}" build -trimpath -ldflags "$ldflags" -o "$dir/k8s-await-election.tmp" "$module"
      elif [[ -n "${PME_AWAIT_ELECTION_GIT:-}" ]]; then
        log "the module proxy refused ${module}@${AWAIT_ELECTION_VERSION}; building the tag from $PME_AWAIT_ELECTION_GIT"
        mkdir src
        git -C "$PME_AWAIT_ELECTION_GIT" archive "refs/tags/${AWAIT_ELECTION_VERSION}" | tar -x -C src
        cd src
        "${go[@]}" build -trimpath -ldflags "$ldflags" -o "$dir/k8s-await-election.tmp" .
      else
        log "cannot fetch ${module}@${AWAIT_ELECTION_VERSION}: set PME_AWAIT_ELECTION_GIT to a clone of github.com/LINBIT/k8s-await-election"
        exit 1
      fi
    )
    mv "$dir/k8s-await-election.tmp" "$dir/k8s-await-election"
    rm -rf "$work"
  fi
  cp "$dir/k8s-await-election" "$OUT/k8s-await-election"
  echo "AWAIT_ELECTION_VERSION=${AWAIT_ELECTION_VERSION}" >>"$OUT/versions.env.tmp"
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
build_await_election
build_rust_peer kube-lease-manager-peer kube-lease-manager
build_rust_peer kube-leader-election-peer kube-leader-election
mv "$OUT/versions.env.tmp" "$OUT/versions.env"
log "built: $OUT"
echo "$OUT"
