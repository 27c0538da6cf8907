#!/usr/bin/env bash
# The dashboard picture, made from a real run: a real kube-apiserver + etcd on loopback with the
# write fence `inject` generates, three "pods" (each an elector with the default timings, the
# supervisor and a stand-in app that, as leader, writes a Secret every half second with its
# pod's own ServiceAccount token, bound to a Pod object), and a real Prometheus (built from its
# Go module, scripts/build-promtool.sh prometheus) scraping every elector and the apiserver
# every 2s. Pods come and go as targets of a file_sd list, as a PodMonitor's do. The story:
# a fresh install, a rolling replacement of the leader (graceful handover), a crash of the
# leader's whole pod (takeover after the lease duration), a crash of the leader's app, and the
# leader's pod frozen past the lease duration and thawed (its pending write refused by the
# fence). Then scripts/render-dashboard.py queries Prometheus for every panel of the chart's
# dashboard and writes docs/results/dashboard.svg and docs/results/dashboard.md.
#
#   cargo build && scripts/dashboard-run.sh            # about 6 minutes
# Environment: BIN (the passmower-elector binary; default $CARGO_TARGET_DIR/debug), PME_RUN_DIR
# (default a temporary directory; kept with its logs when set), PROMETHEUS (the server binary).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/passmower-elector}"
[[ -x "$BIN" ]] || { echo "dashboard-run: no $BIN: run cargo build first (or set BIN)" >&2; exit 1; }
PROMETHEUS="${PROMETHEUS:-$(scripts/build-promtool.sh prometheus | tail -n 1)}"
RUN="${PME_RUN_DIR:-$(mktemp -d /tmp/pme-dashboard-run.XXXXXX)}"
mkdir -p "$RUN"
NS=passmower
SA=passmower
LEASE=passmower
# shellcheck source=scripts/control-plane.sh
source "$ROOT/scripts/control-plane.sh"
KUBECTL="$(bash scripts/build-test-cluster.sh | tail -n 1)/kubectl"

declare -A ELECTOR SUPERVISOR PROBE TOGGLE
PODS=()
PROM_PID=""
START=0
log() { printf '%6.1fs %s\n' "$(awk -v s="$START" -v n="$(date +%s.%N)" 'BEGIN{print (s?n-s:0)}')" "$*" | tee -a "$RUN/run.log" >&2; }
event() { printf '%s\t%s\n' "$(date +%s.%N)" "$1" >>"$RUN/events.tsv"; log "event: $1"; }

cleanup() {
  local pid
  for pid in "${ELECTOR[@]}" "${SUPERVISOR[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
  sleep 3
  for pid in "${ELECTOR[@]}" "${SUPERVISOR[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  [[ -z "$PROM_PID" ]] || { kill -TERM "$PROM_PID" 2>/dev/null || true; }
  cp_stop "$RUN"
  [[ -n "${PME_RUN_DIR:-}" ]] || rm -rf "$RUN"
}
trap cleanup EXIT

k() { KUBECONFIG="$RUN/admin.kubeconfig" "$KUBECTL" "$@"; }

cp_start "$RUN"
SERVER="$(cat "$RUN/server")"
k create namespace "$NS" >/dev/null
k -n "$NS" create serviceaccount "$SA" >/dev/null
# The Role, RoleBinding and write fence exactly as inject writes them for a Passmower
# Deployment named passmower (its Lease is named after it).
cat >"$RUN/deployment.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: passmower, namespace: $NS}
spec:
  replicas: 3
  selector: {matchLabels: {app: passmower}}
  template:
    metadata: {labels: {app: passmower}}
    spec:
      serviceAccountName: $SA
      containers:
        - {name: passmower, image: passmower:1.3.0, command: [node, src/app.js]}
EOF
"$BIN" inject -f "$RUN/deployment.yaml" --image registry.example.com/passmower-elector:0.1.0 \
  --namespace "$NS" >"$RUN/injected.yaml"
python3 - "$RUN/injected.yaml" >"$RUN/companions.yaml" <<'PY'
import re, sys
docs = open(sys.argv[1]).read().split("\n---\n")
keep = ("Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
print("\n---\n".join(d for d in docs if (m := re.search(r"^kind: (\w+)", d, re.M)) and m.group(1) in keep))
PY
k apply -f "$RUN/companions.yaml" >/dev/null
# What Passmower's own chart grants its operators on Secrets (the fence decides whose writes
# land, RBAC only whether the ServiceAccount may write at all).
k -n "$NS" create role passmower-operator --verb=get,create,update,patch --resource=secrets >/dev/null
k -n "$NS" create rolebinding passmower-operator --role=passmower-operator --serviceaccount="$NS:$SA" >/dev/null
# The Secret the leader's stand-in app keeps writing (a fenced operator write).
k -n "$NS" create secret generic oidc-client-demo-owner-secrets --from-literal=writer=none >/dev/null

cat >"$RUN/app.py" <<'PY'
# The stand-in app: as leader it writes a Secret every half second, as Passmower's operators
# write client Secrets, with the pod's own bound token; as follower it only idles.
import json, os, ssl, sys, time, http.client, urllib.parse
mode, pod = os.environ["APP_MODE"], os.environ["POD_NAME"]
with open("app.log", "a") as f:
    f.write(f"{time.time():.3f} pid {os.getpid()} started as {mode}\n")
if mode != "leader":
    while True:
        time.sleep(3600)
url = urllib.parse.urlparse(os.environ["API_SERVER"])
context = ssl.create_default_context(cafile=os.environ["API_CA"])
token = open(os.environ["API_TOKEN_FILE"]).read().strip()
path = f"/api/v1/namespaces/{os.environ['POD_NAMESPACE']}/secrets/oidc-client-demo-owner-secrets"
conn = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=5)
while True:
    body = json.dumps({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "oidc-client-demo-owner-secrets"},
                       "stringData": {"writer": pod, "at": f"{time.time():.3f}"}})
    try:
        conn.request("PUT", path, body, {"Authorization": f"Bearer {token}",
                                         "Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read()
        if resp.status >= 300:
            with open("app.log", "a") as f:
                f.write(f"{time.time():.3f} PUT {resp.status} {text[:300]!r}\n")
    except Exception as e:
        conn.close()
        conn = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=5)
    time.sleep(0.5)
PY

write_targets() {
  local p sep="" out="["
  for p in "${PODS[@]}"; do
    out+="$sep{\"targets\":[\"127.0.0.1:${PROBE[$p]}\"],\"labels\":{\"namespace\":\"$NS\",\"pod\":\"$p\"}}"
    sep=","
  done
  printf '%s]\n' "$out" >"$RUN/targets.json.tmp"
  mv "$RUN/targets.json.tmp" "$RUN/targets.json"
}

start_pod() {
  local pod="$1" dir="$RUN/$1" uid
  mkdir -p "$dir"
  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $pod, labels: {app: passmower}}
spec:
  serviceAccountName: $SA
  containers: [{name: passmower, image: passmower:1.3.0}]
EOF
  uid="$(k -n "$NS" get pod "$pod" -o jsonpath='{.metadata.uid}')"
  k -n "$NS" create token "$SA" --bound-object-kind Pod --bound-object-name "$pod" \
    --bound-object-uid "$uid" --duration 2h >"$dir/token"
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: run, cluster: {server: $SERVER, certificate-authority: $RUN/ca.crt}}]
users: [{name: $pod, user: {tokenFile: $dir/token}}]
contexts: [{name: run, context: {cluster: run, user: $pod, namespace: $NS}}]
current-context: run
EOF
  TOGGLE[$pod]="$(cp_free_port)"
  PROBE[$pod]="$(cp_free_port)"
  (cd "$dir" && POD_NAME="$pod" POD_NAMESPACE="$NS" API_SERVER="$SERVER" API_CA="$RUN/ca.crt" \
    API_TOKEN_FILE="$dir/token" exec "$BIN" supervise --flag-file "$dir/grant.json" \
    --listen "127.0.0.1:${TOGGLE[$pod]}" --leader-env APP_MODE=leader --follower-env APP_MODE=follower \
    -- python3 "$RUN/app.py" >"$dir/supervise.log" 2>&1) &
  SUPERVISOR[$pod]=$!
  disown
  KUBECONFIG="$dir/kubeconfig" POD_NAME="$pod" POD_NAMESPACE="$NS" POD_UID="$uid" \
    "$BIN" elect --lease-name "$LEASE" --flag-file "$dir/grant.json" \
    --toggle-url "http://127.0.0.1:${TOGGLE[$pod]}/grant" --probe-addr "127.0.0.1:${PROBE[$pod]}" \
    >"$dir/elect.log" 2>&1 &
  ELECTOR[$pod]=$!
  disown
  PODS+=("$pod")
  write_targets
  log "started $pod (uid $uid, probe ${PROBE[$pod]})"
}

forget_pod() {
  local pod="$1" p keep=()
  for p in "${PODS[@]}"; do [[ "$p" == "$pod" ]] || keep+=("$p"); done
  PODS=("${keep[@]}")
  write_targets
  k -n "$NS" delete pod "$pod" --wait=false >/dev/null
}

app_pid() { ps --ppid "${SUPERVISOR[$1]}" -o pid= | head -n 1 | tr -d ' '; }

leader_pod() {
  local pod
  for pod in "${PODS[@]}"; do
    if curl -fsS -m 1 "http://127.0.0.1:${PROBE[$pod]}/leader" 2>/dev/null | grep -q '"operators_running":true'; then
      echo "$pod"; return 0
    fi
  done
  return 1
}

wait_leader() {
  local old="${1:-}" pod i
  for i in $(seq 1 600); do
    pod="$(leader_pod || true)"
    if [[ -n "$pod" && "$pod" != "$old" ]]; then echo "$pod"; return 0; fi
    sleep 0.1
  done
  echo "dashboard-run: no new leader" >&2
  return 1
}

cat >"$RUN/prometheus.yml" <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: $NS/passmower
    file_sd_configs: [{files: [$RUN/targets.json], refresh_interval: 1s}]
  - job_name: apiserver
    scheme: https
    tls_config: {ca_file: $RUN/ca.crt}
    authorization: {credentials_file: $RUN/admin.token}
    static_configs: [{targets: ["${SERVER#https://}"]}]
    metric_relabel_configs:
      - {source_labels: [__name__], regex: apiserver_validating_admission_policy_.*, action: keep}
EOF
echo '[]' >"$RUN/targets.json"
PROM_PORT="$(cp_free_port)"
"$PROMETHEUS" --config.file "$RUN/prometheus.yml" --storage.tsdb.path "$RUN/tsdb" \
  --web.listen-address "127.0.0.1:$PROM_PORT" >"$RUN/prometheus.log" 2>&1 &
PROM_PID=$!
disown
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done

START="$(date +%s.%N)"
: >"$RUN/events.tsv"
event "install: 3 pods, no Lease"
for pod in passmower-a passmower-b passmower-c; do start_pod "$pod"; done
first="$(wait_leader)"
log "$first leads"
sleep 30

event "rollout: $first replaced"
start_pod passmower-d
sleep 8
kill -TERM "${ELECTOR[$first]}"
second="$(wait_leader "$first")"
log "$second leads"
while kill -0 "${ELECTOR[$first]}" 2>/dev/null; do sleep 0.1; done
kill -TERM "${SUPERVISOR[$first]}"
forget_pod "$first"
sleep 30

event "crash: $second's pod killed"
pid="$(app_pid "$second")"
kill -KILL "${ELECTOR[$second]}" "${SUPERVISOR[$second]}" ${pid:+"-$pid"} 2>/dev/null || true
forget_pod "$second"
third="$(wait_leader "$second")"
log "$third leads"
sleep 10
start_pod passmower-e
sleep 25

event "app crash: $third's leader app killed"
pid="$(app_pid "$third")"
kill -KILL "-$pid"
sleep 35

event "freeze: $third's pod stopped for 25s"
pid="$(app_pid "$third")"
kill -STOP "-$pid" "${SUPERVISOR[$third]}" "${ELECTOR[$third]}"
sleep 25
# Thawed as a cgroup thaw may schedule them: the app first, with the write it had pending.
kill -CONT "-$pid"
sleep 0.05
kill -CONT "${SUPERVISOR[$third]}" "${ELECTOR[$third]}"
event "thaw: $third"
sleep 40
END="$(date +%s.%N)"
event "end"
grep -h "PUT 403" "$RUN"/*/app.log | head -n 3 | cut -c1-400 | sed 's/^/refused: /' >&2 || true

python3 scripts/render-dashboard.py --prometheus "http://127.0.0.1:$PROM_PORT" \
  --start "$START" --end "$END" --events "$RUN/events.tsv" --namespace "$NS" --job "$NS/passmower" \
  --command "cargo build && scripts/dashboard-run.sh" --out docs/results/dashboard
