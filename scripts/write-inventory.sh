#!/usr/bin/env bash
# Generates docs/results/write-inventory.md (every write a follower makes, per Passmower
# generation) and docs/results/compatibility.md (which generations run under passmower-elector,
# in which mode, and what a user sets), from what tests/node/write_inventory.rs saw on real pods:
# for each generation in PME_PASSMOWER_GENERATIONS (default "1.3 2.2 2.4") it builds that tree's
# images (cached), runs the test on a one-node Kubernetes of its own, and keeps its JSON record;
# a generation whose images do not build or whose test fails is written down as such, with the
# failure's last lines.
#
#   flock /tmp/real-pods.lock scripts/write-inventory.sh      # about 4 minutes per generation
#   PME_PASSMOWER_GENERATIONS=2.2 scripts/write-inventory.sh  # one generation (others: as before)
#
# Needs what scripts/real-pods.sh needs (root, containerd, redis-server, ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

last() { "$@" | tail -n 1; }
export PME_CONTROL_PLANE="${PME_CONTROL_PLANE:-$(last scripts/build-test-cluster.sh)}"
export PME_NODE_BIN="${PME_NODE_BIN:-$(last scripts/build-node.sh)}"
export PME_HELM3="${PME_HELM3:-$(last scripts/build-helm.sh)}"
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target/write-inventory" docs/results
# Absolute: the tests run with another working directory, and CARGO_TARGET_DIR may be either.
runs="$(cd "$target/write-inventory" && pwd)"
export PME_REAL_PODS_REPORT="$runs/report.txt"

# shellcheck source=scripts/lib/generations.sh
. scripts/lib/generations.sh
generations_text="$(generation_list "${PME_PASSMOWER_GENERATIONS:-}" "write-inventory.sh: PME_PASSMOWER_GENERATIONS")" || exit 2
mapfile -t generations <<<"$generations_text"
for gen in "${generations[@]}"; do
  PME_UPSTREAM="$(generation_upstream "$gen")"
  export PME_PASSMOWER_GENERATION="$gen" PME_UPSTREAM
  rm -f "$runs/inventory-$gen.json" "$runs/failed-$gen.txt"
  t0=$SECONDS
  if ! PME_NODE_IMAGES="$(last scripts/build-node-images.sh 2>"$runs/images-$gen.log")"; then
    { echo "the images did not build (scripts/build-node-images.sh):"; tail -n 15 "$runs/images-$gen.log"; } >"$runs/failed-$gen.txt"
    continue
  fi
  export PME_NODE_IMAGES
  if ! PME_INVENTORY_OUT="$runs/inventory-$gen.json" \
    cargo test --locked --features real-pods --test node write_inventory:: -- --ignored --nocapture \
    >"$runs/test-$gen.log" 2>&1; then
    { echo "tests/node/write_inventory.rs failed:"; grep -E "panicked|assert|Error|error" "$runs/test-$gen.log" | tail -n 15; } >"$runs/failed-$gen.txt"
    rm -f "$runs/inventory-$gen.json"
  fi
  echo "$gen: $((SECONDS - t0)) s" | tee -a "$runs/durations.txt"
done

export INV_DATE="$(date -u '+%Y-%m-%d %H:%M UTC')"
export INV_MACHINE="$(uname -srm), $(nproc) cores, Node.js $(node --version)"
export INV_REV="$(git describe --always --dirty 2>/dev/null || echo unknown)"
INV_TREES="$(for g in $PME_ALL_GENERATIONS; do printf '%s=%s ' "$g" "$(generation_tree "$g")"; done)"
export INV_TREES
# The memory per way of switching, from scripts/bench-generations.sh's last run, when there is one.
INV_BENCH="$(cd "$target" && pwd)/bench-generations"
export INV_BENCH
python3 scripts/render-inventory.py "$runs" ../shared/upstream docs/results
echo "wrote docs/results/write-inventory.md and docs/results/compatibility.md"
