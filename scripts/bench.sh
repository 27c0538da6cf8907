#!/usr/bin/env bash
# The side-by-side benchmarks, in one command: builds the peers (scripts/build-bench-peers.sh),
# our release binary and the control plane (cached), then runs the #[ignore]d tests
#   election     tests/bench/bench_election.rs: docs/results/benchmarks.md and handover.svg
#   supervisors  tests/bench/supervisor_peers.rs: docs/results/supervisor-peers.md
#                (`supervise` + `elect` beside LINBIT's k8s-await-election)
# (generated: command, date and machine in each file; never edit them). Takes about half an
# hour once everything is built; never run by CI. PME_BENCH_SUITES picks suites (both by default).
#
#   scripts/bench.sh
#   PME_BENCH_SUITES=supervisors PME_BENCH_SUPERVISOR_ROUNDS=5 scripts/bench.sh
#   PME_BENCH_HANDOVER_ROUNDS=5 PME_BENCH_CRASH_ROUNDS=1 PME_BENCH_ONLY=ours,cgo \
#     PME_BENCH_OUT=/tmp/bench scripts/bench.sh     # a quick look, not for the docs
#   PME_PASSMOWER_GENERATIONS="1.3 2.2 2.4" scripts/bench.sh   # the real Passmower instead
#
# With PME_PASSMOWER_GENERATIONS set (generations as scripts/real-pods.sh names them) it runs
# the standby benchmark on the real Passmower of each generation instead
# (scripts/bench-generations.sh, docs/results/generations.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ -z "${PME_PASSMOWER_GENERATIONS:-}" ]] || exec scripts/bench-generations.sh

if [[ -z "${PME_CONTROL_PLANE:-}" ]]; then
  PME_CONTROL_PLANE="$(scripts/build-test-cluster.sh | tail -n 1)"
fi
export PME_CONTROL_PLANE

PME_BENCH_PEERS="$(scripts/build-bench-peers.sh | tail -n 1)"
export PME_BENCH_PEERS
set -a
# shellcheck disable=SC1091
. "$PME_BENCH_PEERS/versions.env"
set +a

cargo build --release --locked --bin passmower-elector
target_dir="$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
export PME_BENCH_ELECTOR="$target_dir/release/passmower-elector"

BENCH_DATE="$(date -u '+%Y-%m-%d %H:%M UTC')"
BENCH_RUSTC_VERSION="$(rustc --version)"
BENCH_GIT_REV="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
export BENCH_DATE BENCH_RUSTC_VERSION BENCH_GIT_REV

for suite in ${PME_BENCH_SUITES:-election supervisors}; do
  case "$suite" in
    election) test=bench_election::side_by_side ;;
    supervisors) test=supervisor_peers::supervisor_peers ;;
    *)
      echo "bench.sh: PME_BENCH_SUITES: unknown suite '$suite' (election, supervisors)" >&2
      exit 2
      ;;
  esac
  cargo test --locked --test bench -- --ignored --exact "$test" --nocapture
done
