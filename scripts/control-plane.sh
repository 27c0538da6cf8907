#!/usr/bin/env bash
# A throwaway local control plane for the demo: etcd + kube-apiserver on loopback, with
# generated certificates, static-token auth and RBAC. Source it, then:
#   cp_start DIR    start everything under DIR, write DIR/admin.kubeconfig, DIR/pids
#   cp_stop DIR     stop what cp_start started, by PID
#   cp_api DIR METHOD PATH [JSON]   call the API as admin (curl)
# Binaries come from scripts/build-test-cluster.sh (built once, cached by version).

cp_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

cp_start() {
  local dir="$1" bins
  bins="$(bash "$(dirname "${BASH_SOURCE[0]}")/build-test-cluster.sh" | tail -n 1)"
  mkdir -p "$dir/etcd-data"
  : >"$dir/pids"
  # Certificates: a CA and an apiserver serving certificate for 127.0.0.1, so clients verify TLS.
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=elector-demo-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$dir/apiserver.key" -out "$dir/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san.ext"
  openssl x509 -req -in "$dir/apiserver.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$dir/san.ext" -out "$dir/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  local token
  token="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  echo "$token,admin,admin,system:masters" >"$dir/tokens.csv"
  echo "$token" >"$dir/admin.token"

  local etcd_port etcd_peer api_port
  etcd_port="$(cp_free_port)"; etcd_peer="$(cp_free_port)"; api_port="$(cp_free_port)"
  "$bins/etcd" --data-dir "$dir/etcd-data" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "default=http://127.0.0.1:$etcd_peer" >"$dir/etcd.log" 2>&1 &
  echo $! >>"$dir/pids"
  disown
  "$bins/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --secure-port "$api_port" \
    --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
    --tls-cert-file "$dir/apiserver.crt" --tls-private-key-file "$dir/apiserver.key" \
    --client-ca-file "$dir/ca.crt" --token-auth-file "$dir/tokens.csv" \
    --authorization-mode Node,RBAC \
    --service-account-key-file "$dir/sa.key" --service-account-signing-key-file "$dir/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.0.0.0/24 \
    --disable-admission-plugins ServiceAccount >"$dir/apiserver.log" 2>&1 &
  echo $! >>"$dir/pids"
  disown
  echo "https://127.0.0.1:$api_port" >"$dir/server"
  cat >"$dir/admin.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: demo
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 "$dir/ca.crt")
users:
- name: admin
  user:
    token: $token
contexts:
- name: demo
  context: {cluster: demo, user: admin}
current-context: demo
KC
  local i
  for i in $(seq 1 120); do
    if curl -fsS --cacert "$dir/ca.crt" -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  echo "kube-apiserver did not become ready; last log lines:" >&2
  tail -n 20 "$dir/apiserver.log" >&2
  return 1
}

cp_api() {
  local dir="$1" method="$2" path="$3" body="${4:-}"
  curl -fsS --cacert "$dir/ca.crt" -H "Authorization: Bearer $(cat "$dir/admin.token")" \
    -H 'Content-Type: application/json' -X "$method" ${body:+--data "$body"} "$(cat "$dir/server")$path"
}

cp_stop() {
  local dir="$1" pid
  [[ -f "$dir/pids" ]] || return 0
  # Stop in reverse order of start (apiserver before etcd), by the PIDs we recorded.
  for pid in $(tac "$dir/pids"); do
    kill "$pid" 2>/dev/null || true
  done
  for pid in $(tac "$dir/pids"); do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  : >"$dir/pids"
}
