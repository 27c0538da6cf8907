#!/usr/bin/env bash
# A throwaway local control plane for the demo: the tests' own (etcd + kube-apiserver on
# loopback, generated certificates, static-token auth, RBAC), started by the test kit's
# `pme-testbed`. Source it, then:
#   cp_start DIR [FLAG...]   start it with its files under DIR (DIR/kubeconfig-admin.json,
#                            DIR/server, DIR/ca.crt, DIR/admin.token); FLAGs go to
#                            `pme-testbed control-plane` (--user, --audit-policy, --apiserver-flag)
#   cp_stop DIR              stop it (by PID)
#   cp_api DIR METHOD PATH [JSON]   call the API as admin (curl)
#   cp_free_port             a free loopback port
# The binaries come from scripts/build-test-cluster.sh (built once, cached by version).

CP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The path of pme-testbed, built once per shell.
cp_testbed() {
  if [[ -z "${CP_TESTBED:-}" ]]; then
    cargo build --quiet --manifest-path "$CP_ROOT/Cargo.toml" -p pme-testkit --bin pme-testbed >&2
    CP_TESTBED="$(cargo metadata --format-version 1 --no-deps --manifest-path "$CP_ROOT/Cargo.toml" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/pme-testbed"
  fi
  echo "$CP_TESTBED"
}

cp_free_port() {
  "$(cp_testbed)" free-ports
}

cp_start() {
  local dir="$1" testbed i
  shift
  testbed="$(cp_testbed)"
  mkdir -p "$dir"
  rm -f "$dir/ready"
  PME_CONTROL_PLANE="${PME_CONTROL_PLANE:-$(bash "$CP_ROOT/scripts/build-test-cluster.sh" | tail -n 1)}" \
    "$testbed" control-plane "$dir" "$@" >"$dir/testbed.log" 2>&1 &
  echo $! >"$dir/pids"
  disown
  for i in $(seq 1 300); do
    [[ -f "$dir/ready" ]] && return 0
    if ! kill -0 "$(cat "$dir/pids")" 2>/dev/null; then
      echo "pme-testbed exited; its log:" >&2
      tail -n 30 "$dir/testbed.log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "the control plane did not become ready; last log lines:" >&2
  tail -n 20 "$dir/testbed.log" "$dir/kube-apiserver.log" >&2
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
  # pme-testbed stops etcd and kube-apiserver by PID on SIGTERM.
  for pid in $(cat "$dir/pids"); do
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  : >"$dir/pids"
}
