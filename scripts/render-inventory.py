#!/usr/bin/env python3
"""Renders docs/results/write-inventory.md and docs/results/compatibility.md from the JSON
records tests/node/write_inventory.rs writes (one per generation; scripts/write-inventory.sh runs
both). Usage: render-inventory.py RUNS_DIR UPSTREAM_DIR OUT_DIR. The classification of each
write (operator work, request-driven, boot, elector) and the knob that would stop it are
below, read from the upstream source; the counts and which writes happened come from the run.
"""
import hashlib
import json
import os
import re
import sys

runs, upstream, out = sys.argv[1:4]

# Each generation's tree comes from scripts/lib/generations.sh, through write-inventory.sh
# (INV_TREES: "1.3=passmower 2.2=..."); what it is, from here.
TREES = dict(pair.split("=", 1) for pair in os.environ.get("INV_TREES", "").split())
WHAT = {
    "1.3": "release 1.3.0",
    "2.2": "2.2/2.3 era (no election of its own)",
    "2.4": "2.4.0 (elects itself, Lease `passmower-operators`)",
}
if not TREES:
    sys.exit("render-inventory.py: INV_TREES is not set (run scripts/write-inventory.sh)")
GENERATIONS = [(gen, TREES[gen], WHAT.get(gen, gen)) for gen in TREES]


def identity(folder):
    """The 1.3.0 commit from the upstream README; the PROVENANCE.tsv digest otherwise."""
    path = os.path.join(upstream, folder)
    prov = os.path.join(path, "PROVENANCE.tsv")
    if os.path.exists(prov):
        digest = hashlib.sha256(open(prov, "rb").read()).hexdigest()[:16]
        rows = sum(1 for l in open(prov) if l.strip() and not l.startswith(("path\t", "#")))
        return (f"reconstructed: develop@6ac3a30e with {rows} files replaced, "
                f"`PROVENANCE.tsv` sha256 {digest}")
    readme = open(os.path.join(upstream, "README.md")).read()
    m = re.search(r"`%s/`.*?commit ([0-9a-f]{40})" % re.escape(folder), readme)
    return f"commit {m.group(1)}" if m else "unknown"


# (source, op regex, target regex) -> (class, what makes it, knob that stops it, cost)
RULES = [
    ("apiserver", r".*", r"coordination.k8s.io/leases",
     "elector", "our elector's Lease (the fence allows the holder only)", "-", "-"),
    ("apiserver", r".*", r"(core|events.k8s.io)/events",
     "elector", "our elector's Events", "-", "-"),
    ("apiserver", r".*", r"codemowers.cloud/oidcusers/status",
     "operator work", "activity flush (OIDCUser recentApplications) or the user operator",
     "`ACTIVITY_TRACKING_ENABLED=false`",
     "sign-ins this pod served never reach the OIDCUser's status"),
    ("apiserver", r".*", r"codemowers.cloud/oidc(middleware)?clients/status",
     "operator work", "activity flush (lastUsedAt, the Active condition)",
     "`ACTIVITY_TRACKING_ENABLED=false`",
     "this pod's sign-ins never reach the client's lastUsedAt"),
    ("apiserver", r".*", r"codemowers.cloud/scim.*",
     "operator work", "SCIM connection operator", "none in this tree", "-"),
    ("apiserver", r"(create|update|patch)", r"codemowers.cloud/oidcusers",
     "request-driven", "the login path writes users (KubeOIDCUserService)", "-", "-"),
    ("apiserver", r".*", r"(core/secrets|core/pods|batch/jobs|codemowers.cloud/.*)",
     "operator work", "an operator", "the selector (idle namespace)", "-"),
    ("redis", r".*", r"oidc:(Client:passmower|Clients)$",
     "boot", "the built-in `passmower` client: every replica writes it at boot, each with a "
     "random `client_secret` of its own, which the implicit-flow self client never uses",
     "none (upstream does it with or without an election)", "-"),
    ("redis", r"SADD", r"oidc:Clients:.*",
     "boot", "the built-in client's entry in the client set, with the record above",
     "none", "-"),
    ("redis", r"(DEL|UNLINK|SREM)", r"oidc:(Client:.*|Clients:.*)$",
     "operator work", "ClientRedisReconciler sweep (every pod, at boot and every 5 min)",
     "`RECONCILE_INTERVAL_MS=0`", "none while the leader's operator instance sweeps"),
    ("redis", r".*", r"oidc:Client:.*",
     "operator work", "the client operator's Redis record", "the selector (idle namespace)", "-"),
    ("redis", r".*", r"oidc:OIDCUserEventHookState:.*",
     "operator work", "the user-event-hook operator's first-run seeding (2.4 tree): every "
     "instance runs it before its watch, whatever its selector, until the marker "
     "`__initialized__` exists; it lists the OIDCUsers of the pod's namespace",
     "none in the tree (no variable); only 2.4's own election keeps a serving instance "
     "from running it",
     "none seen: it is written once per Redis, and what a follower seeds is what the "
     "leader would (the same list, by pod namespace, and the same generations)"),
    ("redis", r".*", r"oidc:(SessionMetadata|SiteSession|AccountSiteSession|UidSessions):.*",
     "request-driven", "Passmower's session bookkeeping of a sign-in (`session-service.js`, "
     "`site-session.js`: session metadata, site sessions, the sessions of an interaction)",
     "-", "-"),
    ("redis", r".*", r"oidc:HealthCheck:.*",
     "request-driven", "the liveness probe (`/health` on port 9090) writes and expires a key",
     "-", "-"),
    ("redis", r".*",
     r"oidc:(Interaction|Session|AccountSession|Grant|AuthorizationCode|AccessToken|RefreshToken|"
     r"ReplayDetection|PushedAuthorizationRequest|uid|grant|sessionUid|ClientCredentials|"
     r"DeviceCode|BackchannelAuthenticationRequest|RegistrationAccessToken):.*",
     "request-driven", "oidc-provider state of an HTTP request (login, tokens)", "-", "-"),
]


SOURCE_NOTES = {
    "1.3": "the operators are the only writers besides the HTTP side, and all of them watch "
           "through `NAMESPACE_SELECTOR`; there is no activity tracker.",
    "2.2": "the activity tracker flushes from every instance, but only clients its own client "
           "operator registered (none on a follower: that operator watches the idle namespace) "
           "and sign-ins its HTTP side recorded (this tree's HTTP side records none). An image "
           "whose login path calls `activityTracker.record()` would make a follower write "
           "`oidcusers/status` and `oidcclients/status` for sign-ins it served: "
           "`ACTIVITY_TRACKING_ENABLED=false` stops it, and those sign-ins then never reach "
           "the status (the flush merges by newest timestamp, so keeping it per pod is the "
           "alternative). In the leader's pod the leader instance serves no request, so it "
           "would record nothing, and its flush cannot overwrite what the serving instances "
           "recorded: it reads, modifies and writes (`mutateNamespacedCustomObjectStatus`), "
           "keeps the newer `lastUsedAt` and merges `recentApplications` by newest timestamp, "
           "and with nothing recorded only recomputes the client's Active condition from the "
           "`lastUsedAt` already there. Nothing in this tree calls `record()` (the login services "
           "and `interactionFinished` paths do not), so a completed sign-in changes nothing "
           "there either (the run above shows it). This tree's user-event-hook operator keeps its state in memory and "
           "watches through the selector (no seeding); the SCIM operator and the user "
           "operator's email-uniqueness pass run only on events of their filtered watches; "
           "`ClientRedisReconciler` runs on every instance (at boot and every 5 min, "
           "`RECONCILE_INTERVAL_MS=0` stops it) but skips records outside its selector, so "
           "on a follower it can delete only set members whose record is already gone.",
    "2.4": "with `LEADER_ELECTION_ENABLED=false` every instance runs all the reconcilers "
           "(`startReconcilers`), so everything said for 2.2 holds, plus the event-hook "
           "seeding above; the activity tracker starts in every instance whatever the "
           "election.",
}


# Why a tree's e-mail sign-in cannot complete, from its source, by generation (none known).
SIGN_IN_LIMITS = {}


def sign_in_section(gen, data):
    """The sign-in on a follower: steps, result, and what the pod wrote meanwhile."""
    s = data.get("sign_in")
    if not s:
        return ["### A sign-in on a follower", "", "Not run.", ""]
    o = s["outcome"]
    done = o.get("token_status") == 200 and o.get("userinfo_status") == 200
    out = ["### A sign-in on a follower", "",
           f"On `{s['pod']}` (not the Lease holder before or after): "
           + ("**signed in**: a code, then tokens (" + ", ".join(o.get("tokens", [])) + ") and "
              "userinfo (claims " + ", ".join(f"`{c}`" for c in o.get("userinfo_claims", []))
              + ")." if done else f"**did not complete**: {o.get('stopped')}."), "",
           "Steps: " + "; ".join(f"`{st}`" for st in o.get("steps", [])) + ".", ""]
    steps = o.get("steps", [])
    if not done and len(steps) >= 3 and steps[-1] == steps[-2] and steps[-1].startswith("POST"):
        out += ["The page answered its form with the same form again: it refused a value the "
                "test sent, so this is the test's input, not a limit of the tree (the other "
                "generations' runs pass the same prompt).", ""]
    if gen in SIGN_IN_LIMITS:
        out += [SIGN_IN_LIMITS[gen], ""]
    writes = s.get("apiserver_writes", [])
    out.append("The pod's apiserver writes meanwhile (besides its elector's Lease): "
               + (", ".join(f"`{w}`" for w in writes) if writes else "none")
               + "; refused: " + (", ".join(f"`{w}`" for w in s.get("refused", [])) or "**none**")
               + ".")
    redis = data.get("sign_in_redis_writes", {})
    out += ["", "Its Redis writes meanwhile: "
            + (", ".join(f"`{k}` ×{n}" for k, n in redis.items()) if redis else "none") + ".", ""]
    act = data.get("activity_after_sign_in")
    if act is not None and gen != "1.3":  # 1.3.0 has no activity tracker
        out += [f"A minute of 5 s activity flushes after it: the OIDCClient's `status.lastUsedAt` "
                f"is {json.dumps(act.get('client_last_used_at')) if act.get('client_last_used_at') else 'unset'}, "
                f"the OIDCUser's `status.recentApplications` "
                f"{json.dumps(act.get('user_recent_applications')) if act.get('user_recent_applications') else 'empty'}.", ""]
    return out


# A write the sign-in's pod made while it served the sign-in (from the test's record of that
# window): the HTTP side's, whatever the general rule for its target says.
SIGN_IN_CLASS = ["request-driven",
                 "the sign-in this pod served: the login path (`Account.createOrUpdateByEmails` → "
                 "`KubeOIDCUserService.updateUserSpecs`) patches the OIDCUser and replaces its "
                 "status, on whichever replica serves it; the write fence leaves both alone",
                 "-", "-"]


def split_sign_in(data, rows):
    """Splits each follower apiserver row into the writes the sign-in's pod made during the
    sign-in (`sign_in: True`) and the rest, by the test's list of that pod's writes then."""
    made = {}
    for w in (data.get("sign_in") or {}).get("apiserver_writes", []):
        parts = w.split()
        if len(parts) >= 2 and parts[-1].isdigit() and parts[-1].startswith("2"):
            made[(parts[0], parts[1])] = made.get((parts[0], parts[1]), 0) + 1
    out = []
    for r in rows:
        target = r["target"].split("/", 1)[-1]
        n = made.get((r["op"], target), 0) if r["source"] == "apiserver" else 0
        n = min(n, r["count"])
        if n:
            out.append({**r, "count": n, "op": r["op"] + " (during the sign-in)", "sign_in": True})
        if r["count"] - n:
            out.append({**r, "count": r["count"] - n})
    return out


def classify(row):
    for source, op, target, *rest in RULES:
        if row["source"] == source and re.fullmatch(op, row["op"].split()[0], re.I) \
                and re.fullmatch(target, row["target"]):
            return rest
    return ["unclassified", "not in the rules of scripts/render-inventory.py", "-", "-"]


def memory(data):
    m = data.get("memory_mib")
    if not m or m.get("leader") is None:
        return "-"
    followers = sorted(m.get("followers") or [])
    span = (f"{followers[0]:.0f}" if len(followers) == 1 or round(followers[0]) == round(followers[-1])
            else f"{followers[0]:.0f}–{followers[-1]:.0f}") if followers else "-"
    return f"{span} / {m['leader']:.0f}"


def load(gen):
    path = os.path.join(runs, f"inventory-{gen}.json")
    if os.path.exists(path):
        return json.load(open(path)), None
    failed = os.path.join(runs, f"failed-{gen}.txt")
    if os.path.exists(failed):
        return None, open(failed).read().strip()
    return None, None


date, machine, rev = (os.environ.get(k, "unknown") for k in ("INV_DATE", "INV_MACHINE", "INV_REV"))
header = (f"Generated by `scripts/write-inventory.sh` (tests/node/write_inventory.rs on real pods: "
          f"kubelet + containerd, kube-apiserver 1.37, Redis 7) on {date}, passmower-elector "
          f"{rev}, {machine}. Do not edit by hand.\n")

inv = ["# Follower write inventory, per Passmower generation", "", header,
       "Each generation: 3 replicas retrofitted by `inject` (helm post-renderer), "
       "`ACTIVITY_FLUSH_INTERVAL_SECONDS=5`, an OIDCClient and an OIDCUser in the namespace, a "
       "rollout restart so every pod boots with them present, then on every pod three rounds of "
       "discovery, the authorization request (a login starts) and the login page it redirects "
       "to, then a whole sign-in on a follower, and a minute of quiet. The sign-in is the e-mail "
       "(magic link) login: e-mail login and outbound mail on (`EMAIL_*` below), the mail "
       "caught by an SMTP sink the test runs on the node's bridge address "
       "(testkit/src/node/smtp.rs), its link opened in the same browser, the prompts that "
       "follow answered, the code exchanged at `/token` and `/me` asked "
       "(testkit/src/node/email_login.rs), with the write fence `inject` installs in place. "
       "A write is a follower's when its pod (by source address in the audit log, by client "
       "address in Redis `MONITOR`) did not hold the Lease at that instant.", "",
       "Classes: **operator work** must come only from the leader; **request-driven** any pod "
       "may make while serving; **boot** is a record every replica writes when it starts; **elector** is "
       "ours, not Passmower's.", ""]
compat = ["# Passmower generations under passmower-elector", "", header,
          "| generation | tree | supported | mode by default | a user must set | memory per pod, MiB: followers / leader | what the run showed |",
          "|---|---|---|---|---|---:|---|"]

for gen, folder, what in GENERATIONS:
    data, failure = load(gen)
    inv += [f"## {gen}: {what}", "", f"Source: `../shared/upstream/{folder}/`, {identity(folder)}.", ""]
    if data is None:
        reason = failure or "not run"
        inv += ["**Not inventoried**:", "", "```", reason, "```", ""]
        compat.append(f"| {gen} | `{folder}` | not shown | - | - | - | {reason.splitlines()[0]} |")
        continue
    env = data["required_env"]
    # The test's own values win over the generation's (outbound e-mail on, for the sign-in).
    overridden = {e.split("=", 1)[0] for e in data["extra_env"]}
    inv.append("App environment the test adds besides the chart: "
               + ", ".join(f"`{e}`" for e in [e for e in env if e.split("=", 1)[0] not in overridden]
                           + data["extra_env"]) + ".")
    inv.append("")
    http = "; ".join(f"{h['pod']}: discovery {h['discovery']}, /auth {h['authorize']}"
                     f" (to `{(h.get('authorize_location') or '-').split('?')[0]}`), "
                     f"login page {h['login_page']}" for h in data["http"])
    inv += [f"HTTP on every pod (first round): {http}.", "",
            f"Observed {data['observed_seconds']:.0f} s, {data['tenures']} tenure(s); the "
            f"OIDCClient was reconciled and no operator write came from a non-leader "
            f"(testkit/src/node/single_writer.rs).", ""]
    follower = split_sign_in(data, [r for r in data["writes"] if r["role"] == "follower"])
    inv += ["### Follower writes", "",
            "| source | write | target | count | class | made by | knob that stops it | cost |",
            "|---|---|---|---|---|---|---|---|"]
    op_work = []
    for r in follower:
        cls, who, knob, cost = SIGN_IN_CLASS if r.get("sign_in") else classify(r)
        if cls == "operator work":
            op_work.append(f"{r['op']} {r['target']}")
        inv.append(f"| {r['source']} | {r['op']} | `{r['target']}` | {r['count']} | {cls} | "
                   f"{who} | {knob} | {cost} |")
    if not follower:
        inv.append("| - | none | - | 0 | - | - | - | - |")
    inv.append("")
    leader = [r for r in data["writes"] if r["role"] == "leader"]
    inv += ["### The leader's pod, for contrast", "",
            ", ".join(f"{r['source']} {r['op']} `{r['target']}` ×{r['count']}" for r in leader)
            or "none", ""]
    inv += sign_in_section(gen, data)
    inv += [f"From the source, not seen in the run: {SOURCE_NOTES[gen]}", ""]
    inv += ["Operator-work writes by followers: "
            + ("**" + "; ".join(op_work) + "**" if op_work else "**none**") + ".", ""]
    mode = "ours (inject's election; the app's operators idle on followers)"
    must = ", ".join(f"`{e}`" for e in env
                     if not e.startswith(("POD_NAME", "LEADER_ELECTION_ENABLED"))) or "nothing"
    if gen == "2.4":
        mode += "; 2.4's own election off (inject sets `LEADER_ELECTION_ENABLED=false`)"
    signed = data.get("sign_in", {}).get("outcome", {})
    # A write the apiserver refused (the write fence, RBAC) is no write: said apart.
    refused = [w for w in op_work if "refused" in w]
    admitted = [w for w in op_work if "refused" not in w]
    shown = ("installed, 3 Ready, client reconciled by the leader only, "
             + (f"{len(admitted)} kind(s) of operator-work write from followers" if admitted
                else "no operator-work write from followers")
             + (f" ({len(refused)} kind(s) refused by the apiserver)" if refused else "")
             + ("; a sign-in on a follower completed (tokens, userinfo), no write refused"
                if signed.get("token_status") == 200 and signed.get("userinfo_status") == 200
                else f"; a sign-in on a follower did not complete ({signed.get('stopped', 'not run')})"))
    compat.append(f"| {gen} | `{folder}` | yes | {mode} | {must} | {memory(data)} | {shown} |")

# Memory per pod by way of switching, from the standby benchmark's last run per generation
# (scripts/bench-generations.sh), when INV_BENCH names its directory.
def bench_memory():
    bench = os.environ.get("INV_BENCH", "")
    if not bench or not os.path.isdir(bench):
        return []
    env = {}
    try:
        for line in open(os.path.join(bench, "run.env")):
            k, _, v = line.strip().partition("=")
            env[k] = v.strip("'\"").replace("\\ ", " ")
    except OSError:
        return []
    ways = [("restart", "restart"), ("fresh", "leader-instance"),
            ("standby", "leader-instance + standby"), ("bridge", "lease-bridge")]
    rows = []
    for gen, folder, _ in GENERATIONS:
        try:
            doc = json.load(open(os.path.join(bench, f"{gen}.json")))
        except (OSError, ValueError):
            continue
        by = {v["variant"]: v["figures"] for v in doc.get("variants", [])}
        def cell(name):
            f = by.get(name)
            if not f or not f.get("pod_follower_mib") or not f.get("pod_leader_mib"):
                return "-"
            return f"{f['pod_follower_mib'][0]:.0f} / {f['pod_leader_mib'][0]:.0f}"
        rows.append(f"| {gen} | " + " | ".join(cell(n) for n, _ in ways) + " |")
    if not rows:
        return []
    return ["", "Memory per pod by way of switching the app between follower and leader, MiB as "
            "follower / as leader: the supervisor and every app process it runs after a 20 s idle "
            "window, processes against a real kube-apiserver and Redis (the elector, about 8 MiB, "
            "and the sandbox not counted); from the run of "
            f"`scripts/bench-generations.sh` on {env.get('GEN_DATE', 'unknown')}, passmower-elector "
            f"{env.get('GEN_REV', 'unknown')} ([generations.md](generations.md)). `lease-bridge` is "
            "for a Passmower that elects itself.", "",
            "| generation | " + " | ".join(w for _, w in ways) + " |",
            "|---|" + "---:|" * len(ways)] + rows


compat += ["", "Memory per pod: resident memory summed over every process of the pod (the serving "
           "instance, the waiting standby or the leader instance, the elector, the supervisor, "
           "the sandbox), after a 20 s idle window, with the chart's defaults (no memory request, "
           "so inject keeps the warm standby); the followers' range, then the leader's pod."]
compat += bench_memory()
compat += [
           "",
           "Every generation also needs what 1.3.0 needs: `ISSUER_URL` on a public-suffix "
           "domain and the `oidc-keys` Secret (`OIDC_JWKS`, `OIDC_COOKIE_KEYS`). The sources of "
           "the newer generations are reconstructed (docs/results/write-inventory.md names their "
           "provenance), so this table says what those trees do, not every published image."]
open(os.path.join(out, "write-inventory.md"), "w").write("\n".join(inv).rstrip() + "\n")
open(os.path.join(out, "compatibility.md"), "w").write("\n".join(compat).rstrip() + "\n")
