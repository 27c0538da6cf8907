#!/usr/bin/env bash
# The local demo: a real kube-apiserver + etcd on loopback, three "pods" (each an elector sidecar
# plus the supervisor running a stand-in app), and two handovers you can watch:
#   1. graceful: SIGTERM the leader's elector (what a rolling update does);
#   2. crash: SIGKILL the next leader's elector; its supervisor demotes the app on its own when
#      the grant expires, and another pod takes over only after the lease duration.
# Timings are shortened for the demo (lease 6s, renew deadline 3s, retry 1s, kill grace 1s).
# Everything runs under .demo/ and is stopped (by PID) when the script ends.
#
#   scripts/demo.sh --node   the same story on real pods: a one-node Kubernetes (kubelet +
#                            containerd, the test kit's node), the real Passmower installed by
#                            helm with inject as post-renderer, `kubectl get pods -w` and
#                            `get lease -w` live (kubectl watches one type at a time), and three handovers (delete the leader's pod, crash
#                            its elector, freeze its pod). Needs root; see scripts/real-pods.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--node" ]]; then
  last() { "$@" | tail -n 1; }
  # Cold, the builds below take minutes: say so, and let cargo show its progress.
  echo "demo --node: building (cached after the first run): control plane, node, images, helm, then the test kit" >&2
  export PME_CONTROL_PLANE="${PME_CONTROL_PLANE:-$(last scripts/build-test-cluster.sh)}"
  export PME_NODE_BIN="${PME_NODE_BIN:-$(last scripts/build-node.sh)}"
  export PME_NODE_IMAGES="${PME_NODE_IMAGES:-$(last scripts/build-node-images.sh)}"
  export PME_HELM3="${PME_HELM3:-$(last scripts/build-helm.sh)}"
  exec cargo test --features real-pods --test node real_pods::demo_handover -- --ignored --nocapture
fi
ROOT="$PWD"
DEMO="$ROOT/.demo"
PODS=(pod-a pod-b pod-c)
TIMING=(--lease-duration 6s --renew-deadline 3s --retry-period 1s --kill-grace 1s)

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "building passmower-elector (release) and the control plane (minutes the first time, cached after)"
cargo build --release
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/passmower-elector"
# shellcheck source=scripts/control-plane.sh
source "$ROOT/scripts/control-plane.sh"

declare -A ELECTOR_PID SUPERVISOR_PID PROBE TOGGLE
cleanup() {
  local pid
  for pid in "${ELECTOR_PID[@]}" "${SUPERVISOR_PID[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 2
  for pid in "${ELECTOR_PID[@]}" "${SUPERVISOR_PID[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  cp_stop "$DEMO"
}
if [[ -f "$DEMO/pids" ]]; then cp_stop "$DEMO"; fi
rm -rf "$DEMO" && mkdir -p "$DEMO"
trap cleanup EXIT

say "starting etcd and kube-apiserver on loopback"
cp_start "$DEMO"
cp_api "$DEMO" POST /api/v1/namespaces '{"metadata":{"name":"demo"}}' >/dev/null
echo "apiserver: $(cat "$DEMO/server")   logs: $DEMO/*.log"

start_pod() {
  local pod="$1" dir="$DEMO/$1"
  mkdir -p "$dir"
  TOGGLE[$pod]="$(cp_free_port)"
  PROBE[$pod]="$(cp_free_port)"
  # The stand-in app: logs the mode it was started in, then idles like a web server would.
  (cd "$dir" && exec "$BIN" supervise --flag-file "$dir/grant.json" --listen "127.0.0.1:${TOGGLE[$pod]}" \
    --leader-env APP_MODE=leader --follower-env APP_MODE=follower --kill-grace 1s \
    -- sh -c 'echo "$(date +%T.%3N) pid $$ started as $APP_MODE" >>app.log; exec sleep 100000' \
    >"$dir/supervise.log" 2>&1) &
  SUPERVISOR_PID[$pod]=$!
  disown  # we stop it by PID ourselves; no job-control notices
  KUBECONFIG="$DEMO/kubeconfig-admin.json" POD_NAME="$pod" POD_NAMESPACE=demo \
    "$BIN" elect --lease-name passmower --flag-file "$dir/grant.json" \
    --toggle-url "http://127.0.0.1:${TOGGLE[$pod]}/grant" --probe-addr "127.0.0.1:${PROBE[$pod]}" \
    "${TIMING[@]}" >"$dir/elect.log" 2>&1 &
  ELECTOR_PID[$pod]=$!
  disown
}

show() {
  printf '%-6s %-9s %-9s %-10s %s\n' POD ELECTOR APP-MODE APP-PID "LEASE HOLDER (as this pod sees it)"
  local pod leader mode
  for pod in "${PODS[@]}"; do
    leader="$(curl -fsS -m 1 "http://127.0.0.1:${PROBE[$pod]}/leader" 2>/dev/null || echo '{}')"
    mode="$(curl -fsS -m 1 "http://127.0.0.1:${TOGGLE[$pod]}/mode" 2>/dev/null || echo '{}')"
    printf '%-6s %-9s %-9s %-10s %s\n' "$pod" \
      "$(jq_get "$leader" is_leader | sed 's/True/leader/;s/False/follower/;s/^$/(down)/')" \
      "$(jq_get "$mode" mode)" "$(jq_get "$mode" child_pid)" "$(jq_get "$leader" holder)"
  done
}

jq_get() { python3 -c 'import json,sys
try: print(json.loads(sys.argv[1]).get(sys.argv[2], ""))
except Exception: print("")' "$1" "$2"; }

leader_pod() {
  local pod
  for pod in "${PODS[@]}"; do
    if grep -q '"mode":"leader"' "$DEMO/$pod/grant.json" 2>/dev/null && kill -0 "${ELECTOR_PID[$pod]}" 2>/dev/null; then
      echo "$pod"; return 0
    fi
  done
  return 1
}

wait_for_leader_other_than() {
  local old="$1" pod i
  for i in $(seq 1 400); do
    pod="$(leader_pod || true)"
    if [[ -n "$pod" && "$pod" != "$old" ]]; then echo "$pod"; return 0; fi
    sleep 0.05
  done
  return 1
}

say "starting three pods (elector + supervisor + stand-in app each)"
for pod in "${PODS[@]}"; do start_pod "$pod"; done
echo "No Lease exists yet: an elector cannot tell 'never created' from 'deleted under a running"
echo "leader', so the first leader is chosen one lease duration (6s) after start."
first="$(wait_for_leader_other_than none)"
sleep 1
show

say "graceful handover: SIGTERM to $first's elector (a rolling update does this)"
t0=$(date +%s%N)
kill -TERM "${ELECTOR_PID[$first]}"
second="$(wait_for_leader_other_than "$first")"
t1=$(date +%s%N)
echo "$second leads $(( (t1 - t0) / 1000000 )) ms after the SIGTERM (demote, ack from $first's supervisor, release, watch)"
sleep 1
show

say "crash: SIGKILL to $second's elector; its supervisor demotes the app when the grant expires (<= 3s)"
t0=$(date +%s%N)
kill -KILL "${ELECTOR_PID[$second]}"
third="$(wait_for_leader_other_than "$second")"
t1=$(date +%s%N)
echo "$third leads $(( (t1 - t0) / 1000000 )) ms after the SIGKILL (the Lease must stay unchanged for 6s first)"
sleep 1
show

say "what each stand-in app saw (start times and modes)"
for pod in "${PODS[@]}"; do
  echo "-- $pod"; cat "$DEMO/$pod/app.log" 2>/dev/null || true
done
say "done; logs are in $DEMO (stopping everything now)"
