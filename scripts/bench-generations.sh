#!/usr/bin/env bash
# The handover on the real Passmower, per generation: for each generation in
# PME_PASSMOWER_GENERATIONS (default "1.3 2.2 2.4"; trees from scripts/lib/generations.sh) it
# npm-installs that tree (scripts/build-passmower-app.sh, cached) and runs
# scripts/handover-bench.py on it: three processes-as-pods, each running `elect` and
# `supervise --on-change=leader-instance` (inject's default for Passmower) around that
# generation's Passmower, against a real kube-apiserver + etcd and Redis; the leader's elector
# is stopped gracefully PME_BENCH_GENERATION_HANDOVERS times (default 3). It writes
# docs/results/generations.md (generated: command, date, machine; never edit it): per
# generation, the gap from the stop to a leader app running in another pod and to the first
# reconcile of an OIDCClient created right after the stop, failed requests on the pods (which
# all stay up), the self-client's Redis writes and the safety check (never two leader apps, no
# app write outside its pod's leader time). About 2 minutes per generation once built; bounded
# (every wait in handover-bench.py has a limit).
#
#   scripts/bench-generations.sh                          # root
#   PME_PASSMOWER_GENERATIONS=2.4 PME_BENCH_GENERATION_HANDOVERS=1 \
#     PME_BENCH_GENERATION_OUT=/tmp/gen.md scripts/bench-generations.sh   # a quick look
#   PME_BENCH_GENERATION_RENDER_ONLY=1 scripts/bench-generations.sh    # the file again from the last runs
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/generations.sh
. scripts/lib/generations.sh

generations_text="$(generation_list "${PME_PASSMOWER_GENERATIONS:-}" "bench-generations.sh: PME_PASSMOWER_GENERATIONS")" || exit 2
mapfile -t generations <<<"$generations_text"
handovers="${PME_BENCH_GENERATION_HANDOVERS:-3}"
[[ "$handovers" =~ ^[1-9][0-9]?$ ]] || { echo "bench-generations.sh: PME_BENCH_GENERATION_HANDOVERS must be 1 to 99, not '$handovers'" >&2; exit 2; }
results="${PME_BENCH_GENERATION_OUT:-docs/results/generations.md}"
target="${CARGO_TARGET_DIR:-target}"
runs="$target/bench-generations"
mkdir -p "$runs"
runs="$(cd "$runs" && pwd)"

render_only="${PME_BENCH_GENERATION_RENDER_ONLY:-}"
[[ -n "$render_only" ]] || export PME_CONTROL_PLANE="${PME_CONTROL_PLANE:-$(scripts/build-test-cluster.sh | tail -n 1)}"
# PME_BENCH_ELECTOR: a passmower-elector binary to use instead of this tree's release build.
binary="${PME_BENCH_ELECTOR:-}"
if [[ -z "$binary" && -z "$render_only" ]]; then
  cargo build --release --locked --bin passmower-elector
  binary="$(cd "$target" && pwd)/release/passmower-elector"
fi

# The machine is shared: its load average before and after goes into the results.
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
  PME_PASSMOWER_GENERATION="$gen" PME_UPSTREAM="$upstream" PME_PASSMOWER_APP="$app" \
    timeout 900 python3 scripts/handover-bench.py --binary "$binary" --modes leader-instance \
    --handovers "$handovers" --no-rollout --json "$runs/$gen.json" >"$runs/$gen.log" 2>&1 || {
    status=$?
    echo "Passmower $gen: handover-bench.py failed ($status); last lines of $runs/$gen.log:" >&2
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
  } >"$runs/run.env"
fi
GEN_DATE=unknown GEN_LOAD=unknown GEN_STATUS=unknown GEN_REV=unknown
# shellcheck disable=SC1091
[[ ! -f "$runs/run.env" ]] || . "$runs/run.env"
export GEN_DATE GEN_LOAD GEN_STATUS GEN_REV
export GEN_MACHINE="$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr), Node.js $(node --version)"
export GEN_COMMAND="PME_PASSMOWER_GENERATIONS=\"${generations[*]}\" PME_BENCH_GENERATION_HANDOVERS=$handovers${PME_BENCH_ELECTOR:+ PME_BENCH_ELECTOR=$PME_BENCH_ELECTOR} scripts/bench-generations.sh"
mkdir -p "$(dirname "$results")"
python3 - "$runs" "${generations[@]}" >"$results" <<'PY'
import json, os, statistics, sys

runs, gens = sys.argv[1], sys.argv[2:]
env = os.environ


def mmm(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return "-"
    return f"{values[0] * 1000:.0f} / {statistics.median(values) * 1000:.0f} / {values[-1] * 1000:.0f}"


def ended(hs):
    """How the old leader apps ended, counted: `killed by SIGTERM ×3`."""
    counts = {}
    for h in hs:
        e = h.get("old_leader_app_ended") or "unknown"
        counts[e] = counts.get(e, 0) + 1
    return ", ".join(f"{e} ×{n}" for e, n in counts.items()) or "-"


print("# Handover on the real Passmower, per generation")
print()
print(f"Generated by `{env['GEN_COMMAND']}` on {env['GEN_DATE']} (status {env['GEN_STATUS']}; do not")
print(f"edit, run it again). Machine: {env['GEN_MACHINE']}; load average {env.get('GEN_LOAD', '?')};")
print(f"passmower-elector {env['GEN_REV']}.")
print("What it runs: [testing.md](../testing.md#handover-on-the-real-passmower).")
print()
print("| generation | handovers | stop → leader app running in another pod (ms, min / median / max) | stop → first reconcile of a new OIDCClient (ms) | the old leader app ended | failed requests on the pods (all stay up) | self-client Redis writes per handover | two leader apps / app writes outside leader time |")
print("|---|---:|---:|---:|---|---:|---:|---:|")
for gen in gens:
    try:
        doc = json.load(open(os.path.join(runs, f"{gen}.json")))[0]
    except (OSError, ValueError, IndexError):
        print(f"| {gen} | failed: see below | | | | | | |")
        continue
    hs = doc.get("handovers", [])
    failed = sum(f for h in hs for f, _ in h["failed"].values())
    sent = sum(n for h in hs for _, n in h["failed"].values())
    sets = [h["self_client_sets"] for h in hs]
    safety = doc.get("safety", {})
    print(f"| {gen} (`{os.path.basename(doc['upstream'])}`) | {len(hs)} | {mmm(h.get('leader_app_s') for h in hs)} "
          f"| {mmm(h['gap_s'] for h in hs)} | {ended(hs)} | {failed} of {sent} | {statistics.mean(sets) if sets else 0:.1f} "
          f"| {safety.get('two_leaders', '-')} / {safety.get('writes_outside_leader_time', '-')} |")
print()
print("Each handover: the leader's elector is stopped gracefully (it demotes its app, waits for the")
print("ack and releases the Lease), an OIDCClient is created at once, and the elector is started")
print("again as the kubelet restarts a sidecar. The leader app is sampled every 50 ms from each")
print("pod's `supervise` (`GET /mode`); the reconcile is the client's status and Secret seen through")
print("the API. Requests: `GET /.well-known/openid-configuration` every 50 ms on every pod.")
print("The old leader app ends by SIGTERM, or by SIGKILL when it has not exited within the kill")
print("grace (3 s): the demotion's ack, and so the release and the takeover, wait for its end.")
for gen in gens:
    path = os.path.join(runs, f"{gen}.log")
    try:
        lines = [l.rstrip() for l in open(path) if "] " in l and not l.startswith("{")]
    except OSError:
        lines = ["(no log)"]
    print()
    print(f"## {gen}: the run's log")
    print()
    print("```text")
    for l in lines[-14:]:
        print(l[:400])
    print("```")
PY
echo "wrote $results"
exit "$status"
