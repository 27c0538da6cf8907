#!/usr/bin/env bash
# Passmower 2.4 on real pods, the same faults under four setups, one run:
#   upstream    Passmower's own election alone, as shipped (no inject; the test adds what upstream's
#               2.4 chart has and this tree's chart lacks: Lease RBAC, POD_NAME,
#               LEADER_ELECTION_ENABLED=true). The image's shell-form command leaves /bin/sh as
#               PID 1, which drops the kubelet's SIGTERM: Passmower never releases its Lease.
#   upstream-sigterm  the same with the app's command in exec form (node --no-warnings
#               src/app.js): node is PID 1, gets the SIGTERM and releases the Lease on a stop
#   fence-only  Passmower's own election plus our write fence (inject --passmower-election=fence-only)
#   ours        inject's default: our elector and supervisor, LEADER_ELECTION_ENABLED=false
#   ours-no-standby  ours with inject --no-leader-standby: no warm standby of the leader instance
#   ours-bridge our elector with inject --on-change=lease-bridge: one Passmower process per pod,
#               its own election on and made to follow our grant
# (ours-no-standby and ours-bridge are not in the default list: ask for them in
# PME_SIDE_BY_SIDE_MODES)
# Each mode is one run of tests/node/real_pods.rs's faults test (PME_ELECTION_MODE) on a node of its
# own, PME_SIDE_BY_SIDE_ROUNDS rounds per fault (default 3: the gaps of the faults that end in
# a Lease expiry vary by a second or two from round to round, so one round decides nothing); the
# table, median gap and worst of the rest over the rounds, is written to
# docs/results/side-by-side.md (generated: the command, date and machine on top; do not edit it,
# run this again).
#
#   flock /tmp/real-pods.lock scripts/side-by-side.sh
#   PME_SIDE_BY_SIDE_FAULTS=rollout-restart,delete-leader PME_SIDE_BY_SIDE_MODES="upstream ours" scripts/side-by-side.sh
#   PME_SIDE_BY_SIDE_TABLE_ONLY=1 scripts/side-by-side.sh   # the table again from the last run's reports
# Each mode's report is kept as side-by-side-MODE.txt in PME_SIDE_BY_SIDE_REPORTS (default: the
# cargo target directory); a run for another results page keeps its reports apart with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/generations.sh
. scripts/lib/generations.sh
# The generation whose own election is compared: 2.4 (its tree: generation_upstream).
generation=2.4
generation_tree "$generation" >/dev/null
faults="${PME_SIDE_BY_SIDE_FAULTS:-rollout-restart,delete-leader,app-crash,pod-freeze,apiserver-restart,partition,renew-hang,clock-skew}"
read -r -a modes <<<"${PME_SIDE_BY_SIDE_MODES:-upstream upstream-sigterm fence-only ours}"
rounds="${PME_SIDE_BY_SIDE_ROUNDS:-3}"
if ! [[ "$rounds" =~ ^[1-9][0-9]?$ ]]; then
  echo "side-by-side.sh: PME_SIDE_BY_SIDE_ROUNDS: '$rounds' is not a number of rounds (allowed: 1 to 99)" >&2
  exit 2
fi
target="${CARGO_TARGET_DIR:-target}"
results="${PME_SIDE_BY_SIDE_RESULTS:-docs/results/side-by-side.md}"
report_dir="${PME_SIDE_BY_SIDE_REPORTS:-$target}"
mkdir -p "$report_dir"
# The commit the run tests, read before it starts and kept beside each mode's report: a commit
# made during a long run is not what ran.
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
status=0
reports=()
for mode in "${modes[@]}"; do
  case "$mode" in
    upstream | upstream-sigterm | fence-only | ours | ours-no-standby | ours-bridge) ;;
    *) echo "side-by-side.sh: PME_SIDE_BY_SIDE_MODES: unknown mode '$mode' (allowed: upstream upstream-sigterm fence-only ours ours-no-standby ours-bridge)" >&2; exit 2 ;;
  esac
  report="$report_dir/side-by-side-$mode.txt"
  reports+=("$report")
  [[ -n "${PME_SIDE_BY_SIDE_TABLE_ONLY:-}" ]] && continue
  echo "$commit" >"${report%.txt}.commit"
  PME_PASSMOWER_GENERATIONS="$generation" PME_ELECTION_MODE="$mode" PME_REAL_PODS_ROUNDS="$rounds" \
    PME_REAL_PODS_FAULTS="$faults" PME_REAL_PODS_REPORT="$report" \
    scripts/real-pods.sh --test node -- --exact real_pods::faults_keep_one_writer_and_reconcile || status=$?
done

mkdir -p "$(dirname "$results")"
{
  echo "# Side by side on real pods: Passmower 2.4 under $(printf '%s, ' "${modes[@]}" | sed 's/, $//')"
  echo
  results_var=""
  [[ "$results" == docs/results/side-by-side.md ]] || results_var=" PME_SIDE_BY_SIDE_RESULTS=$results"
  [[ -z "${PME_SIDE_BY_SIDE_REPORTS:-}" ]] || results_var="$results_var PME_SIDE_BY_SIDE_REPORTS=DIR"
  tested_at="$commit"
  command="PME_SIDE_BY_SIDE_FAULTS=$faults PME_SIDE_BY_SIDE_MODES=\"${modes[*]}\" PME_SIDE_BY_SIDE_ROUNDS=$rounds$results_var scripts/side-by-side.sh"
  if [[ -n "${PME_SIDE_BY_SIDE_TABLE_ONLY:-}" ]]; then
    # Each mode's report may come from a run of its own: say when and at which commit.
    written=""
    for i in "${!modes[@]}"; do
      written="${written:+$written, }${modes[$i]} $(date -u -r "${reports[$i]}" '+%Y-%m-%d %H:%M UTC' 2>/dev/null || echo unknown)"
      written="$written at $(cat "${reports[$i]%.txt}.commit" 2>/dev/null || echo unknown)"
    done
    tested_at="at each report's commit above"
    echo "Table from each mode's last report ($written), rewritten on $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "by \`PME_SIDE_BY_SIDE_TABLE_ONLY=1\`; a whole run: \`$command\` (do not edit, run it again)."
  else
    echo "Generated by \`$command\` on"
    echo "$(date -u '+%Y-%m-%d %H:%M UTC') (test status $status; do not edit, run it again)."
  fi
  echo "Machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1),"
  echo "$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr);"
  echo "passmower-elector $tested_at. Rounds per fault per mode: as each report shows."
  echo "What it measures: [testing.md](../testing.md#side-by-side-passmowers-own-election-against-ours)."
  echo
  python3 - "${reports[@]}" <<'PY'
import itertools, math, re, statistics, sys
# Every round's line, per (fault, mode), in the order the faults ran.
rows = {}
order = []
for path in sys.argv[1:]:
    try:
        text = open(path).read()
    except OSError:
        continue
    for line in text.splitlines():
        m = re.search(r"side-by-side (.*)$", line)
        if not m:
            continue
        kv = dict(p.split("=", 1) for p in m.group(1).split())
        if kv["fault"] not in order:
            order.append(kv["fault"])
        rows.setdefault((kv["fault"], kv["mode"]), []).append(kv)
# The modes that ran, in this order.
modes = [m for m in ["upstream", "upstream-sigterm", "fence-only", "ours", "ours-no-standby", "ours-bridge"] if any(mm == m for (_, mm) in rows)]
# The verdict's anchor: upstream's election at its best (SIGTERM delivered) when it ran.
anchor = "upstream-sigterm" if any(m == "upstream-sigterm" for (_, m) in rows) else "upstream"
def get(r, key):
    # Reports written before a column existed lack it.
    return r.get(key, "-")
def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
def nums(rs, key):
    return [x for x in (num(r.get(key)) for r in rs) if x is not None]
def median(rs, key):
    xs = nums(rs, key)
    return statistics.median(xs) if xs else None
def worst(rs, key):
    return max(nums(rs, key), default=0)
def total(rs, key):
    return int(sum(nums(rs, key)))
def u_stat(xs, ys):
    # Pairs in which the x is longer than the y; a tie counts half.
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in xs for y in ys)
def longer_p(xs, ys):
    """One-sided p for "the xs are longer than the ys": the share of all splits of the pooled
    rounds into groups of their sizes whose U is at least the observed one (exact; the rule is
    fixed before a run is looked at). None with fewer than two rounds on a side."""
    if len(xs) < 2 or len(ys) < 2:
        return None
    pooled = xs + ys
    splits = math.comb(len(pooled), len(xs))
    if splits > 2_000_000:
        return None
    observed = u_stat(xs, ys)
    hits = 0
    for pick in itertools.combinations(range(len(pooled)), len(xs)):
        chosen = set(pick)
        a = [pooled[i] for i in pick]
        b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += u_stat(a, b) >= observed - 1e-9
    return hits / splits
INF = float("inf")
def ranked(rs, key):
    # Every round, one that never got a value (never reconciled) ranked last, as the longest:
    # dropping it would let a mode that fails to reconcile look faster.
    return [INF if num(r.get(key)) is None else num(r.get(key)) for r in rs]
def gap(rs, key="gap_ms"):
    if all(key not in r for r in rs):
        return "-"
    xs = sorted(nums(rs, key))
    none = len(rs) - len(xs)
    if not xs:
        return "none"
    text = f"{statistics.median(xs):.0f}" if len(xs) == 1 else f"{statistics.median(xs):.0f} ({xs[0]:.0f}–{xs[-1]:.0f})"
    return text + (f", {none} none" if none else "")
def redis_total(rs):
    return "-" if all("non_holder_redis" not in r for r in rs) else str(total(rs, "non_holder_redis"))
print("| fault | election | rounds | two pods running operators, worst round (ms) | admitted operator writes from a non-holder, all rounds: apiserver / Redis | gap to first reconcile, median (min–max) ms | longest with no operator, median (ms) | failed requests, all rounds: pods that stay up / all pods / Service | Lease writes per minute, median |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for fault in order:
    for mode in modes:
        rs = rows.get((fault, mode))
        if not rs:
            print(f"| {fault} | {mode} | not run | | | | | | |")
            continue
        print(f"| {fault} | {mode} | {len(rs)} | {worst(rs, 'two_operators_ms'):.0f} | {total(rs, 'non_holder_writes')} / {redis_total(rs)} | {gap(rs)} | {median(rs, 'no_operator_ms'):.0f} | {total(rs, 'failed_stay_up')} / {total(rs, 'failed_pods')} / {total(rs, 'failed_service')} | {median(rs, 'lease_writes_per_min'):.1f} |")
print()
print("Who wrote first after each fault, and what the counts above hide. First writer: the pod that")
print("first wrote the OIDCClient created right after the fault (apiserver or Redis), per round: the")
print("leader the fault hit while the Lease still named it, the same after it no longer did, or")
print("another pod. Handover: the fault to the first operator write of the first other pod the Lease")
print("named after it (the same pod restarted when none did), made while the Lease named it.")
print("No operator: the longest sampled stretch with no pod running operators, from and to (ms after")
print("the fault; negative: it began before). After release: admitted operator writes a pod sent")
print("after it released the Lease itself, and the longest delay. Thaw (pod-freeze): how long after")
print("the SIGCONT the thawed pod was still seen running operators (the sampler excuses it for the")
print("kill grace), and its writes the stores admitted from then on.")
print()
print("| fault | election | first writer: hit leader holding / hit leader not holding / another pod | handover to the new holder's first write, median (min–max) ms | no operator, median from → to (ms) | writes after own release, all rounds (longest delay ms) | thaw: operating after SIGCONT, worst (ms) / admitted writes |")
print("|---|---|---:|---:|---:|---:|---:|")
def firsts(rs):
    if all("first_writer_old_leader" not in r for r in rs):
        return "-"
    old_held = sum(1 for r in rs if get(r, "first_writer_old_leader") == "true" and get(r, "first_writer_held") == "true")
    old_not = sum(1 for r in rs if get(r, "first_writer_old_leader") == "true" and get(r, "first_writer_held") == "false")
    other = sum(1 for r in rs if get(r, "first_writer_old_leader") == "false")
    return f"{old_held} / {old_not} / {other}"
def stretch(rs):
    f, t = median(rs, "no_operator_from_ms"), median(rs, "no_operator_to_ms")
    return "-" if f is None or t is None else f"{f:.0f} → {t:.0f}"
def released(rs):
    if all("after_release" not in r for r in rs):
        return "-"
    worst_ms = max(nums(rs, "after_release_max_ms"), default=None)
    return f"{total(rs, 'after_release')}" + (f" ({worst_ms:.0f})" if worst_ms is not None else "")
def thaw(rs):
    if all(get(r, "thaw_writes_admitted") == "-" for r in rs):
        return "-"
    alive = nums(rs, "thaw_operating_ms")
    seen = f"{max(alive):.0f}" if alive else "never seen"
    return f"{seen} / {total(rs, 'thaw_writes_admitted')}"
for fault in order:
    for mode in modes:
        rs = rows.get((fault, mode))
        if not rs:
            continue
        print(f"| {fault} | {mode} | {firsts(rs)} | {gap(rs, 'handover_ms')} | {stretch(rs)} | {released(rs)} | {thaw(rs)} |")
print()
# Memory per pod, from reports that carry it: every process of the pod (app, elector,
# supervisor, sandbox), sampled about every half second from just before the fault to steady
# again.
if any("pod_rss_mib" in r for rs in rows.values() for r in rs):
    print("Resident memory per pod (MiB; every process of the pod: app, elector, supervisor, sandbox),")
    print("sampled about every half second from just before the fault to steady again: the median")
    print("of the rounds' medians over every pod / the largest pod seen in any round.")
    print()
    print("| fault | " + " | ".join(modes) + " |")
    print("|---|" + "---:|" * len(modes))
    def memory(rs):
        if not rs or all(num(r.get("pod_rss_mib")) is None for r in rs):
            return "-"
        return f"{median(rs, 'pod_rss_mib'):.0f} / {max(nums(rs, 'pod_rss_peak_mib')):.0f}"
    for fault in order:
        print(f"| {fault} | " + " | ".join(memory(rows.get((fault, mode))) for mode in modes) + " |")
    print()
print(f"Goal, checked per fault against upstream's election ({anchor}): ours has no two-writer time (no")
print("two pods running operators, no admitted write from a non-holder, in any round) where upstream")
print("shows any, a median gap no longer than upstream's, and no failed request on pods that stay up.")
print("A median above upstream's is called even when the rounds cannot show that ours is longer: a")
print("one-sided exact rank test (Mann-Whitney U over every split of the pooled rounds; ties count")
print("half; a round that never reconciled ranks last) gives p >= 0.05 for \"ours longer\". With")
print("p < 0.05 it is NO, and so it is when the rounds cannot decide (fewer than two a side, or too")
print("many splits to enumerate).")
print()
# One verdict table per election of ours that ran; "ours" when none did.
for mine in [m for m in ("ours", "ours-no-standby", "ours-bridge") if m in modes] or ["ours"]:
    print(f"| fault | {anchor} two-writer | {mine} two-writer | {mine} median gap ≤ {anchor}'s | {mine}: failed on pods that stay up |")
    print("|---|---|---|---|---:|")
    for fault in order:
        u, o = rows.get((fault, anchor)), rows.get((fault, mine))
        if not u or not o:
            print(f"| {fault} | {'not run' if not u else ''} | {'not run' if not o else ''} | | |")
            continue
        tw = lambda rs: f"{worst(rs, 'two_operators_ms'):.0f} ms, {total(rs, 'non_holder_writes')} writes, Redis {redis_total(rs)}"
        ox, ux = ranked(o, "gap_ms"), ranked(u, "gap_ms")
        og, ug = statistics.median(ox), statistics.median(ux)
        ms = lambda v: "none" if v == INF else f"{v:.0f}"
        if og == INF:
            verdict = f"NO: {mine} did not reconcile in most rounds"
        elif og <= ug:
            verdict = f"yes ({ms(og)} vs {ms(ug)} ms)"
        else:
            p = longer_p(ox, ux)
            if p is None:
                # Fails closed: "even" is a claim the rounds must support.
                verdict = f"NO: the rounds cannot decide ({ms(og)} vs {ms(ug)} ms; too few rounds or too many to enumerate)"
            elif p >= 0.05:
                # The rounds cannot tell the two apart: a median that flips from run to run.
                verdict = f"even: the rounds do not show {mine} longer ({ms(og)} vs {ms(ug)} ms, p = {p:.2f})"
            else:
                verdict = f"NO ({ms(og)} vs {ms(ug)} ms, p = {p:.3f})"
        print(f"| {fault} | {tw(u)} | {tw(o)} | {verdict} | {total(o, 'failed_stay_up')} |")
    print()
print("Columns: two pods running operators = sampled every ~100-600 ms from the processes (ours: the")
print("Passmower process with the real NAMESPACE_SELECTOR; upstream and fence-only: a live Passmower")
print("whose log last said \"Acquired the operator lease\"; ours-bridge: the live process that logged")
print("that line itself), a stopped (frozen) process counting as")
print("running nothing. Admitted non-holder writes = operator writes (codemowers.cloud but OIDCUsers,")
print("Secrets, Pods, Jobs, Traefik middlewares; dry runs are none) the apiserver admitted from a pod")
print("the Lease (ours, ours-no-standby and ours-bridge: passmower; upstream's: passmower-operators) did not name at that instant, from")
print("its audit log; Redis: writes to the operators' keys (oidc:Client:* and their oidc:Clients:*")
print("entries but the built-in client's, oidc:OIDCUserEventHookState:*) from such a pod, from")
print("MONITOR by client address. Gap = fault to the first operator write for an")
print("OIDCClient created right after the fault (\"none\": not reconciled in 240 s); a frozen, cut-off or")
print("hung leader is hit right after its renew of the Lease was seen, so every election's takeover")
print("starts from the same point of its renew cycle. Lease writes = write requests to Leases by")
print("Passmower's ServiceAccount, any answer, fault to steady again.")
PY
  echo
  echo "## The runs' reports"
  for r in "${reports[@]}"; do
    echo
    echo "### $(basename "$r" .txt)"
    echo
    echo '```text'
    cat "$r" 2>/dev/null || echo "(no report)"
    echo '```'
  done
} >"$results"
echo "wrote $results"
exit "$status"
