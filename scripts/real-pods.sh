#!/usr/bin/env bash
# The end-to-end tests on a real one-node Kubernetes, all of them, for every Passmower
# generation: builds (or finds in the cache) the control plane, the node binaries, helm and, per
# generation, the images, then runs tests/node_smoke.rs, tests/webhook_node.rs and
# tests/real_pods.rs with PME_REAL_PODS_ROUNDS rounds per fault (default 3), including the tests
# marked ignored (but the hold-for-a-look and the demo, which are for people). Cargo runs the
# test binaries one after another, each with a node of its own.
#
#   scripts/real-pods.sh                       # everything, 3 rounds per fault, 1.3 2.2 2.4
#   PME_PASSMOWER_GENERATIONS=2.4 scripts/real-pods.sh
#   PME_REAL_PODS_ROUNDS=1 scripts/real-pods.sh --test real_pods -- faults
#
# PME_PASSMOWER_GENERATIONS (space or comma separated; default "1.3 2.2 2.4") names the upstream
# trees under ../shared/upstream/: 1.3 = passmower/ (release 1.3.0), 2.2 =
# passmower-before-election/ (the 2.2 era), 2.4 = passmower-with-election/ (2.4.0, which elects
# itself). Each generation's images are built from its tree (cached by its inputs) and the
# tests read PME_PASSMOWER_GENERATION for its chart values and environment.
#
# Needs root (network/mount namespaces, cgroups) and the Debian packages .ci/run installs
# (containerd, runc, containernetworking-plugins, iptables, conntrack, redis-server, debootstrap,
# curl). Figures are printed and written to $CARGO_TARGET_DIR/real-pods-report.txt
# (PME_REAL_PODS_REPORT), each generation's under a heading. Extra arguments replace the default
# test selection.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

last() { "$@" | tail -n 1; }
export PME_CONTROL_PLANE="${PME_CONTROL_PLANE:-$(last scripts/build-test-cluster.sh)}"
export PME_NODE_BIN="${PME_NODE_BIN:-$(last scripts/build-node.sh)}"
export PME_HELM3="${PME_HELM3:-$(last scripts/build-helm.sh)}"
export PME_REAL_PODS_ROUNDS="${PME_REAL_PODS_ROUNDS:-3}"
target="${CARGO_TARGET_DIR:-target}"
export PME_REAL_PODS_REPORT="${PME_REAL_PODS_REPORT:-$target/real-pods-report.txt}"
mkdir -p "$(dirname "$PME_REAL_PODS_REPORT")"
: >"$PME_REAL_PODS_REPORT"

if (($#)); then
  args=("$@")
else
  args=(--test node_smoke --test webhook_node --test real_pods -- --include-ignored --skip hold_for_a_look --skip demo_)
fi
status=0
read -r -a generations <<<"${PME_PASSMOWER_GENERATIONS:-1.3 2.2 2.4}"
[[ ${#generations[@]} -eq 1 ]] && IFS=, read -r -a generations <<<"${generations[0]}"
for gen in "${generations[@]}"; do
  case "$gen" in
    1.3) tree=passmower ;;
    2.2) tree=passmower-before-election ;;
    2.4) tree=passmower-with-election ;;
    *) echo "real-pods.sh: PME_PASSMOWER_GENERATIONS: unknown generation '$gen' (allowed: 1.3 2.2 2.4)" >&2; exit 2 ;;
  esac
  export PME_PASSMOWER_GENERATION="$gen" PME_UPSTREAM="$PWD/../shared/upstream/$tree"
  PME_NODE_IMAGES="$(last scripts/build-node-images.sh)"
  export PME_NODE_IMAGES
  echo "=== Passmower $gen ($PME_UPSTREAM) ===" | tee -a "$PME_REAL_PODS_REPORT"
  cargo test --features real-pods "${args[@]}" || status=$?
done
echo
echo "=== report ($PME_REAL_PODS_REPORT) ==="
cat "$PME_REAL_PODS_REPORT"
exit "$status"
