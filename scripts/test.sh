#!/usr/bin/env bash
# The test command: makes sure the real control plane (kube-apiserver + etcd, built from Go
# modules and cached by version) is there, then runs every test target against it: the
# scenario, api and bench tiers (tests/<tier>/), the unit tests, and the examples'.
#
#   scripts/test.sh                                   # everything
#   scripts/test.sh --test api -- control_plane:: --nocapture
#
# Extra arguments go to `cargo test` (with `--all-targets` unless they choose targets). Set PME_CONTROL_PLANE to a directory with
# `kube-apiserver` and `etcd` to use those instead of building, and PME_PASSMOWER_APP to an
# npm-installed Passmower tree (scripts/build-passmower-app.sh makes and caches one).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/generations.sh
. scripts/lib/generations.sh

if [[ -z "${PME_CONTROL_PLANE:-}" ]]; then
  # The script logs to stderr and prints the binaries' directory as its last stdout line.
  PME_CONTROL_PLANE="$(scripts/build-test-cluster.sh | tail -n 1)"
fi
for bin in kube-apiserver etcd; do
  if [[ ! -x "$PME_CONTROL_PLANE/$bin" ]]; then
    echo "test.sh: $PME_CONTROL_PLANE/$bin is missing (PME_CONTROL_PLANE)" >&2
    exit 1
  fi
done
export PME_CONTROL_PLANE
# Upstream Passmower, npm-installed and cached, for the tests that run it as a plain process.
if [[ -z "${PME_PASSMOWER_APP:-}" ]]; then
  PME_PASSMOWER_APP="$(scripts/build-passmower-app.sh | tail -n 1)"
fi
export PME_PASSMOWER_APP
# Passmower 2.4 (its own leader election), for tests/api/native_election.rs.
if [[ -z "${PME_PASSMOWER_APP_24:-}" ]]; then
  PME_PASSMOWER_APP_24="$(PME_UPSTREAM="$(generation_upstream 2.4)" \
    scripts/build-passmower-app.sh | tail -n 1)"
fi
export PME_PASSMOWER_APP_24

# `cargo test` compiles the examples but does not leave them at target/<profile>/examples/NAME,
# where tests/scenarios/consumer_example.rs runs the reference consumer from.
cargo build --examples --quiet
# Every target unless the arguments choose some (`--test NAME`, `--lib`, ...): cargo runs the
# union of `--all-targets` and any target flag, so adding it would run everything anyway.
targets=(--all-targets)
for arg in "$@"; do
  [[ "$arg" == -- ]] && break
  case "$arg" in
    --test | --test=* | --lib | --bin | --bin=* | --bins | --example | --example=* | --examples | \
      --bench | --bench=* | --benches | --tests | --doc) targets=() ;;
  esac
done
# A progress line on stderr at most every 30 s while a test binary runs (the API tier takes
# minutes); cargo's own output passes through unchanged.
progress() {
  local line total=0 done=0 last=$SECONDS start=$SECONDS
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case "$line" in
      "running "*" test"*)
        total="${line#running }" total="${total%% *}" done=0 start=$SECONDS last=$SECONDS ;;
      "test "*" ... "*)
        done=$((done + 1))
        if ((SECONDS - last >= 30 && done < total)); then
          last=$SECONDS
          printf 'test.sh: %d of %d tests done (%dm%02ds)\n' "$done" "$total" \
            $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) >&2
        fi ;;
    esac
  done
}
cargo test "${targets[@]}" "$@" | progress
