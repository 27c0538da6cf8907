#!/usr/bin/env bash
# How supervise moves the real Passmower between follower and leader, per generation: for each
# generation in PME_PASSMOWER_GENERATIONS (default "1.3 2.2 2.4"; trees from
# scripts/lib/generations.sh) it npm-installs that tree (scripts/build-passmower-app.sh, cached)
# and runs the standby benchmark (tests/bench/standby_bench.rs, release build) on it: one
# `supervise` around that generation's Passmower against a real kube-apiserver + etcd and
# Redis, pushed a leader grant and a follower grant PME_BENCH_GENERATION_ROUNDS times (default
# 5) per way of switching: `--on-change=restart`, `leader-instance` started afresh, with the
# warm standby, and, for a Passmower that elects itself (2.4), `lease-bridge`. It writes
# docs/results/generations.md (generated: command, date, machine; never edit it): per generation
# and way, promotion → first reconcile of an OIDCClient created while the pod followed, the
# HTTP requests the pod failed around each promotion and demotion (it stays up: every failure is
# the switch's), and the resident memory of each instance and of the pod. About 5 minutes per
# generation once built; bounded (every wait in the benchmark has a limit).
#
#   scripts/bench-generations.sh                          # root
#   PME_PASSMOWER_GENERATIONS=2.4 PME_BENCH_GENERATION_ROUNDS=2 \
#     PME_BENCH_GENERATION_OUT=/tmp/gen.md scripts/bench-generations.sh   # a quick look
#   PME_BENCH_GENERATION_RENDER_ONLY=1 scripts/bench-generations.sh    # the file again from the last runs
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/generations.sh
. scripts/lib/generations.sh

generations_text="$(generation_list "${PME_PASSMOWER_GENERATIONS:-}" "bench-generations.sh: PME_PASSMOWER_GENERATIONS")" || exit 2
mapfile -t generations <<<"$generations_text"
rounds="${PME_BENCH_GENERATION_ROUNDS:-5}"
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "bench-generations.sh: PME_BENCH_GENERATION_ROUNDS must be 1 to 99, not '$rounds'" >&2; exit 2; }
results="${PME_BENCH_GENERATION_OUT:-docs/results/generations.md}"
target="${CARGO_TARGET_DIR:-target}"
runs="$target/bench-generations"
mkdir -p "$runs"
runs="$(cd "$runs" && pwd)"

render_only="${PME_BENCH_GENERATION_RENDER_ONLY:-}"
if [[ -z "$render_only" ]]; then
  export PME_CONTROL_PLANE="${PME_CONTROL_PLANE:-$(scripts/build-test-cluster.sh | tail -n 1)}"
  # Built before the first generation's time limit starts (the release profile links slowly).
  cargo test --release --locked --test bench --no-run
fi

# The machine may be shared: its load average before and after goes into the results.
# The commit the run tests, read before it starts: a commit made during a long run is not what ran.
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
status=0
for gen in "${generations[@]}"; do
  [[ -z "$render_only" ]] || break
  upstream="$(generation_upstream "$gen")"
  app="$(PME_UPSTREAM="$upstream" scripts/build-passmower-app.sh | tail -n 1)"
  rm -f "$runs/$gen.json"
  echo "=== Passmower $gen ($upstream)"
  # Release: the supervisor's own memory is part of the pod's figure, and users run a release.
  PME_PASSMOWER_GENERATION="$gen" PME_UPSTREAM="$upstream" PME_PASSMOWER_APP="$app" \
    PME_STANDBY_BENCH_ROUNDS="$rounds" PME_STANDBY_BENCH_OUT="$runs/$gen.json" \
    timeout 1800 cargo test --release --locked --test bench -- standby_bench:: --ignored \
    --nocapture >"$runs/$gen.log" 2>&1 || {
    status=$?
    echo "Passmower $gen: the standby benchmark failed ($status); last lines of $runs/$gen.log:" >&2
    tail -n 15 "$runs/$gen.log" >&2
  }
done

# What the runs were (for PME_BENCH_GENERATION_RENDER_ONLY), written when they end.
if [[ -z "$render_only" ]]; then
  {
    printf 'GEN_DATE=%q\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
    printf 'GEN_LOAD=%q\n' "$load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
    printf 'GEN_STATUS=%q\n' "$status"
    printf 'GEN_REV=%q\n' "$commit"
    printf 'GEN_MACHINE=%q\n' "$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr), Node.js $(node --version)"
    printf 'GEN_COMMAND=%q\n' "PME_PASSMOWER_GENERATIONS=\"${generations[*]}\" PME_BENCH_GENERATION_ROUNDS=$rounds scripts/bench-generations.sh"
  } >"$runs/run.env"
fi
GEN_DATE=unknown GEN_LOAD=unknown GEN_STATUS=unknown GEN_REV=unknown GEN_MACHINE=unknown GEN_COMMAND=unknown
# shellcheck disable=SC1091
[[ ! -f "$runs/run.env" ]] || . "$runs/run.env"
export GEN_DATE GEN_LOAD GEN_STATUS GEN_REV GEN_MACHINE GEN_COMMAND
mkdir -p "$(dirname "$results")"
# Written whole or not at all: a renderer that fails leaves the last page as it was.
trees=()
for gen in "${generations[@]}"; do trees+=("$gen=$(generation_tree "$gen")"); done
python3 - "$runs" "${trees[@]}" >"$results.tmp" <<'PY'
import json, os, statistics, sys

runs = sys.argv[1]
trees = dict(a.split("=", 1) for a in sys.argv[2:])
gens = list(trees)
env = os.environ
WAYS = {
    "restart": "`restart`: one instance, restarted at each change",
    "fresh": "`leader-instance`, started afresh",
    "standby": "`leader-instance` with `--leader-standby`",
    "bridge": "`lease-bridge`: one process, its own election following the grant",
}


def mmm(values):
    values = sorted(values)
    if not values:
        return "-"
    return f"{values[0]:.0f} / {statistics.median(values):.0f} / {values[-1]:.0f}"


def one(values):
    # Memory is sampled once, in the last round.
    return f"{statistics.median(values):.0f}" if values else "-"


def failed(f):
    return f"{sum(f['failed_promotion']):.0f} / {sum(f['failed_demotion']):.0f} of {f['requests']}"


docs = {}
for gen in gens:
    try:
        docs[gen] = json.load(open(os.path.join(runs, f"{gen}.json")))
    except (OSError, ValueError):
        docs[gen] = None

print("# Follower and leader on the real Passmower, per generation")
print()
print(f"Generated by `{env['GEN_COMMAND']}` on {env['GEN_DATE']} (status {env['GEN_STATUS']}; do not")
print(f"edit, run it again). Machine: {env['GEN_MACHINE']}; load average {env.get('GEN_LOAD', '?')};")
print(f"passmower-elector {env['GEN_REV']} (release build).")
print("What it runs: [testing.md](../testing.md#follower-and-leader-on-the-real-passmower).")
print()
print("| generation | way of switching | rounds | promotion → first reconcile, ms (min / median / max) | failed requests, all rounds: promotions / demotions of sent | RSS MiB: pod as follower | pod as leader | serving instance | waiting standby | leader instance |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for gen in gens:
    doc = docs[gen]
    if doc is None:
        print(f"| {gen} | failed: see its log below | | | | | | | | |")
        continue
    for v in doc["variants"]:
        f = v["figures"]
        print(f"| {gen} (`{trees[gen]}`) | {WAYS.get(v['variant'], v['variant'])} | {len(f['reconcile_ms'])} "
              f"| {mmm(f['reconcile_ms'])} | {failed(f)} | {one(f['pod_follower_mib'])} | {one(f['pod_leader_mib'])} "
              f"| {one(f['serving_mib'])} | {one(f['standby_mib'])} | {one(f['leader_mib'])} |")
print()
print("Each round, while the pod follows (with the standby: once one waits), an OIDCClient is")
print("created and a leader grant pushed; the clock runs from the push to the client's Secret,")
print("written by the operators. Then a follower grant. Requests: `GET")
print("/.well-known/openid-configuration` every 50 ms (1 s timeout) on the app's port, from the")
print("promotion until the pod has settled and from the demotion until it serves again. Memory:")
print("after a 20 s idle window in the last round, the pod being the supervisor and every app")
print("process it runs (the elector sidecar, about the same in every way, not counted); with")
print("`lease-bridge` the one process is the serving instance as follower and the leader instance")
print("as leader. A `lease-bridge` demotion ends the process and starts a follower: its failed")
print("requests are that start.")
for gen in gens:
    path = os.path.join(runs, f"{gen}.log")
    try:
        lines = [l.rstrip() for l in open(path) if " round " in l or "promotion → first reconcile" in l]
    except OSError:
        lines = ["(no log)"]
    print()
    print(f"## {gen}: the run's figures as printed")
    print()
    print("```text")
    for l in lines[-40:]:
        print(l[:600])
    print("```")
PY
mv "$results.tmp" "$results"
echo "wrote $results"
exit "$status"
