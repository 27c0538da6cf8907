#!/usr/bin/env python3
"""HTTP requests lost at a handover, on the real Passmower, restart mode against
`supervise --on-change=leader-instance`. Processes as pods: each pod is a network + mount
namespace this script creates (Passmower's 9090 is fixed, and its Kubernetes client reads the
service-account files from their fixed path), running `elect` and `supervise -- node src/app.js`
from a copy of ../shared/upstream/passmower, against a real kube-apiserver + etcd (audited) and
Redis on loopback. The pods reach the API server and Redis through forwarders on their own
loopback; clients reach the pods through sockets created in the pods' namespaces.

Per mode it measures:
  - a handover on pods that stay up (the leader's elector is stopped gracefully and restarted,
    as the kubelet restarts a sidecar): failed requests per pod, from a client loop on each pod;
  - a rolling restart of three replicas (maxSurge 1, maxUnavailable 0) through a Service that,
    like kube-proxy, sends only to ready endpoints (readiness probe as upstream's chart: GET
    /.well-known/openid-configuration every 10 s, 3 failures) and drops a terminating pod at once;
  - the leaderless gap: from the stop of the leader to a new OIDCClient being reconciled;
  - Redis writes of Passmower's self-client (MONITOR) per handover;
  - RSS and CPU of the serving and the leader instance (leader-instance mode).
and asserts the safety properties: never two pods with a leader app (sampled /mode), no
Kubernetes write by an app outside its pod's leader time (audit log).

The Passmower generation is PME_PASSMOWER_GENERATION (1.3, 2.2 or 2.4, as scripts/real-pods.sh
names them; default 1.3), its tree PME_UPSTREAM (scripts/lib/generations.sh) and its
npm-installed copy PME_PASSMOWER_APP (scripts/build-passmower-app.sh, run here when unset);
each generation gets the environment it needs to boot under our election (from 2.2:
OUTBOUND_EMAIL_ENABLED=false; 2.4: LEADER_ELECTION_ENABLED=false, as inject sets, and POD_NAME).
scripts/bench-generations.sh runs it for each generation.

Usage: scripts/handover-bench.py [--modes restart,leader-instance] [--handovers 3] [--no-rollout]
             [--binary PATH] [--testbed PATH]
Needs root (namespaces), node, npm, redis-server, redis-cli, kubectl, and the test kit's
`pme-testbed` (beside --binary; `cargo build --workspace` builds both), which starts the
control plane the tests run against (binaries from scripts/build-test-cluster.sh, or
PME_CONTROL_PLANE). Bounded: every wait has a limit; the whole run stops itself.
"""

import argparse
import base64
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import http.client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATION = os.environ.get("PME_PASSMOWER_GENERATION") or "1.3"
# What each generation needs besides 1.3.0's environment to boot as a follower under our
# election (testkit/src/node/passmower.rs says the same for the real-pod tests).
GENERATION_ENV = {
    "1.3": {},
    "2.2": {"OUTBOUND_EMAIL_ENABLED": "false"},
    "2.4": {"OUTBOUND_EMAIL_ENABLED": "false", "LEADER_ELECTION_ENABLED": "false"},
}
if GENERATION not in GENERATION_ENV:
    sys.exit(f"handover-bench.py: PME_PASSMOWER_GENERATION={GENERATION!r}: allowed values are "
             f"{', '.join(GENERATION_ENV)}")
UPSTREAM = os.environ.get("PME_UPSTREAM") or os.path.join(
    os.path.dirname(ROOT), "shared", "upstream", "passmower")
TESTBED = None  # pme-testbed, set by main()
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NS = "pm"
ISSUER = "https://passmower.example.com/"
CLONE_NEWNET = 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)
LOCK_NS = threading.Lock()
STARTED = []  # Popen objects this script started, stopped by PID at the end
HOST_NET = os.open("/proc/self/ns/net", os.O_RDONLY)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    STARTED.append(p)
    return p


def stop(p, sig=signal.SIGTERM, limit=15.0):
    if p.poll() is None:
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
    try:
        return p.wait(limit)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        return p.wait(5)


def free_port():
    return int(subprocess.run([TESTBED, "free-ports"], check=True, capture_output=True,
                              text=True).stdout)


def in_netns(fd, fn):
    """Runs fn with this thread in network namespace fd; sockets made there stay there."""
    with LOCK_NS:
        if LIBC.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            return fn()
        finally:
            LIBC.setns(HOST_NET, CLONE_NEWNET)


def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def splice(client, upstream):
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def forward_into(netfd, port):
    """A listener on 127.0.0.1:port inside netns netfd forwarding to the host's 127.0.0.1:port."""

    def make():
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        return s

    listener = in_netns(netfd, make)

    def serve():
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", port), timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            splice(c, u)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def connect_in(netfd, port, timeout=2.0):
    s = in_netns(netfd, lambda: socket.socket())
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def http_get(sock, path, timeout=2.0):
    """GET over a connected socket; returns the status code."""
    conn = http.client.HTTPConnection("127.0.0.1", timeout=timeout)
    conn.sock = sock
    conn.request("GET", path, headers={"x-forwarded-proto": "https", "Connection": "close"})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


# ---------------------------------------------------------------- control plane, Redis


class ControlPlane:
    """The tests' control plane (`pme-testbed control-plane`), with an audit log of every write
    and a system:masters token per elector and app."""

    def __init__(self, work):
        self.dir = os.path.join(work, "cp")
        os.makedirs(self.dir)
        d = self.dir
        policy = os.path.join(work, "audit-policy.yaml")
        with open(policy, "w") as f:
            f.write("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                    "rules:\n- level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n"
                    "- level: None\n")
        # Passmower's secret-refresh Pods need no ServiceAccount object (no controller-manager
        # makes the default one here).
        cmd = [TESTBED, "control-plane", d, "--audit-policy", policy,
               "--apiserver-flag=--disable-admission-plugins=ServiceAccount"]
        for i in range(12):
            for role in ("elector", "app"):
                cmd += ["--user", f"{role}-pod{i}"]
        self.testbed = spawn(cmd, stdout=open(f"{d}/testbed.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while not os.path.exists(f"{d}/ready"):
            if self.testbed.poll() is not None:
                raise SystemExit(f"pme-testbed exited ({self.testbed.returncode}): see {d}/testbed.log")
            if time.time() > deadline:
                raise SystemExit(f"the control plane did not become ready in 300 s: see {d}")
            time.sleep(0.2)
        self.port = int(open(f"{d}/server").read().strip().rsplit(":", 1)[1])
        self.tokens = {}
        with open(f"{d}/tokens.csv") as f:
            for line in f:
                token, user = line.split(",")[:2]
                self.tokens[user] = token
        self.tokens["admin"] = open(f"{d}/admin.token").read().strip()
        self.audit = f"{d}/audit.log"
        self.ctx = ssl.create_default_context(cafile=f"{d}/ca.crt")
        self.kubeconfig = self.write_kubeconfig("admin", f"{d}/admin.kubeconfig")

    def write_kubeconfig(self, user, path):
        ca = base64.b64encode(open(f"{self.dir}/ca.crt", "rb").read()).decode()
        with open(path, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{self.port}", certificate-authority-data: {ca}}}}}]
users: [{{name: u, user: {{token: {self.tokens[user]}}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u, namespace: {NS}}}}}]
current-context: c
""")
        return path

    def request(self, method, path, body=None):
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)
        headers = {"Authorization": f"Bearer {self.tokens['admin']}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, None

    def kubectl(self, *args, stdin=None):
        return subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], input=stdin,
                              check=True, capture_output=True, text=True).stdout


class Redis:
    def __init__(self, work):
        self.port = free_port()
        self.dir = os.path.join(work, "redis")
        os.makedirs(self.dir)
        spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", self.dir], stdout=subprocess.DEVNULL)
        for _ in range(100):
            if self.cli("ping").strip() == "PONG":
                break
            time.sleep(0.1)
        self.monitor_file = os.path.join(self.dir, "monitor.log")
        self.monitor = spawn(["redis-cli", "-p", str(self.port), "monitor"],
                             stdout=open(self.monitor_file, "w"))

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                              text=True).stdout

    def self_client_writes(self, since_line=0):
        """(set oidc:Client:passmower, sadd ... passmower) lines after line `since_line`."""
        with open(self.monitor_file) as f:
            lines = f.readlines()
        sets = sadds = 0
        for line in lines[since_line:]:
            low = line.lower()
            if '"set" "oidc:client:passmower"' in low:
                sets += 1
            if '"sadd"' in low and '"passmower"' in low:
                sadds += 1
        return sets, sadds, len(lines)


# ---------------------------------------------------------------- Passmower and pods


def app_dir(work):
    """The generation's src with its production node_modules: PME_PASSMOWER_APP, else what
    scripts/build-passmower-app.sh makes of PME_UPSTREAM (cached, never in the repo), copied
    into the run's work dir (the app reads its files from its working directory)."""
    made = os.environ.get("PME_PASSMOWER_APP")
    if not made:
        out = subprocess.run([os.path.join(ROOT, "scripts/build-passmower-app.sh")],
                             env=dict(os.environ, PME_UPSTREAM=UPSTREAM), check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        made = out.strip().splitlines()[-1]
    d = os.path.join(work, "app")
    os.makedirs(d)
    shutil.copytree(os.path.join(made, "src"), os.path.join(d, "src"))
    shutil.copy(os.path.join(made, "package.json"), os.path.join(d, "package.json"))
    os.symlink(os.path.join(made, "node_modules"), os.path.join(d, "node_modules"))
    return d


class Pod:
    def __init__(self, bench, index):
        self.bench, self.index = bench, index
        self.name = f"pod{index}"
        self.dir = os.path.join(bench.work, self.name)
        cp = bench.cp
        os.makedirs(os.path.join(self.dir, "sa"))
        os.makedirs(os.path.join(self.dir, "grant"))
        for name, text in (("token", cp.tokens[f"app-{self.name}"]), ("namespace", NS)):
            open(os.path.join(self.dir, "sa", name), "w").write(text)
        shutil.copy(f"{cp.dir}/ca.crt", os.path.join(self.dir, "sa", "ca.crt"))
        self.kubeconfig = cp.write_kubeconfig(f"elector-{self.name}",
                                              os.path.join(self.dir, "elector.kubeconfig"))
        ready = os.path.join(self.dir, "ns.ready")
        self.holder = spawn(["unshare", "--net", "--mount", "--propagation", "private", "--", "sh",
                             "-c", f"ip link set lo up && mount --bind {self.dir}/sa {SA_DIR} && "
                                   f"touch {ready} && exec sleep 100000"])
        for _ in range(100):
            if os.path.exists(ready):
                break
            time.sleep(0.05)
        self.net = os.open(f"/proc/{self.holder.pid}/ns/net", os.O_RDONLY)
        self.forwarders = [forward_into(self.net, cp.port), forward_into(self.net, bench.redis.port)]
        enter = ["nsenter", f"--target={self.holder.pid}", "--net", "--mount", f"--wd={bench.app}",
                 "--"]
        binary = bench.binary
        env = dict(os.environ, POD_NAME=self.name, POD_NAMESPACE=NS, KUBECONFIG=self.kubeconfig,
                   ELECTOR_LOG_FORMAT="text")
        self.elector_cmd = enter + [binary, "elect", "--lease-name", "passmower", "--namespace", NS,
                                    "--identity", self.name, "--flag-file",
                                    f"{self.dir}/grant/grant.json", "--toggle-url",
                                    "http://127.0.0.1:8082/grant", "--probe-addr", "127.0.0.1:8081",
                                    "--no-events"]
        self.elector_env = env
        self.start_elector()
        mode_flags = []
        if bench.mode == "leader-instance":
            mode_flags = ["--on-change=leader-instance", "--leader-port-map=*=0"]
        app_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
        app_env.update(bench.app_env)
        app_env["POD_NAME"] = self.name
        self.supervise = spawn(enter + [binary, "supervise", "--flag-file",
                                        f"{self.dir}/grant/grant.json", "--listen", "127.0.0.1:8082",
                                        "--kill-grace", "3s", "--leader-env", "NAMESPACE_SELECTOR=*",
                                        "--follower-env",
                                        "NAMESPACE_SELECTOR=passmower-elector-idle-never-create",
                                        *mode_flags, "--", "node", "--no-warnings", "src/app.js"],
                               cwd=bench.app, env=app_env,
                               stdout=open(os.path.join(self.dir, "app.log"), "w"),
                               stderr=subprocess.STDOUT)
        self.started = time.time()
        self.ready = False
        self.terminating = False
        self.stopped = threading.Event()
        self.failures = []  # (time, what) of the client loop on this pod
        self.requests = 0
        threading.Thread(target=self.prober, daemon=True).start()
        threading.Thread(target=self.sampler, daemon=True).start()
        threading.Thread(target=self.client_loop, daemon=True).start()

    def start_elector(self):
        self.elector = spawn(self.elector_cmd, env=self.elector_env,
                             stdout=open(os.path.join(self.dir, "elector.log"), "a"),
                             stderr=subprocess.STDOUT)

    def get(self, port, path, timeout=2.0):
        return http_get(connect_in(self.net, port, timeout), path, timeout)

    def mode(self):
        s = connect_in(self.net, 8082, 1.0)
        conn = http.client.HTTPConnection("127.0.0.1", timeout=1.0)
        conn.sock = s
        conn.request("GET", "/mode")
        body = conn.getresponse().read()
        conn.close()
        return json.loads(body)

    def prober(self):
        """Upstream's readinessProbe: period 10 s, failure threshold 3, success threshold 1."""
        fails = 0
        while not self.stopped.is_set():
            try:
                ok = self.get(3000, "/.well-known/openid-configuration", 1.0) == 200
            except OSError:
                ok = False
            if ok:
                fails, self.ready = 0, True
            else:
                fails += 1
                if fails >= 3:
                    self.ready = False
            self.stopped.wait(10)

    def sampler(self):
        """Every 50 ms: whether a leader app runs here (for the two-leader check)."""
        while not self.stopped.is_set():
            t = time.time()
            try:
                m = self.mode()
                leading = m.get("child_mode") == "leader" and m.get("child_pid") is not None
                self.bench.samples.append((t, self.name, leading, m))
            except (OSError, ValueError, http.client.HTTPException):
                pass
            self.stopped.wait(0.05)

    def client_loop(self):
        """A client on this pod's HTTP port every 50 ms, once it answered the first time."""
        answered = False
        while not self.stopped.is_set() and not self.terminating:
            t = time.time()
            try:
                status = self.get(3000, "/.well-known/openid-configuration", 2.0)
                ok = status == 200
                what = str(status)
            except (OSError, http.client.HTTPException) as e:
                ok, what = False, type(e).__name__
            if answered and not self.terminating:
                self.requests += 1
                if not ok:
                    self.failures.append((t, what))
            answered = answered or ok
            self.stopped.wait(0.05)

    def terminate(self):
        """The kubelet's order for a native sidecar: the app container, then the elector."""
        self.terminating = True
        t0 = time.time()
        code = stop(self.supervise, limit=40)
        t_app = time.time() - t0
        stop(self.elector, limit=40)
        self.stopped.set()
        stop(self.holder, signal.SIGKILL)
        for f in self.forwarders:
            f.close()
        os.close(self.net)
        return code, t_app


class Service:
    """kube-proxy in miniature: round robin over ready, non-terminating pods."""

    def __init__(self, bench):
        self.bench = bench
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.next = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def endpoints(self):
        return [p for p in self.bench.pods if p.ready and not p.terminating]

    def serve(self):
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            eps = self.endpoints()
            if not eps:
                c.close()
                continue
            pod = eps[self.next % len(eps)]
            self.next += 1
            try:
                u = connect_in(pod.net, 3000, 2.0)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            splice(c, u)


class Bench:
    def __init__(self, args, mode, work):
        self.args, self.mode, self.work = args, mode, work
        self.binary = args.binary
        self.samples = []
        self.cp = ControlPlane(work)
        self.redis = Redis(work)
        self.app = app_dir(work)
        self.pods = []
        self.next_index = 0
        self.cp.kubectl("apply", "-f", os.path.join(UPSTREAM, "charts/passmower/templates/crds.yaml"))
        self.cp.kubectl("create", "namespace", NS)
        jwk = subprocess.run(["node", "-e",
                              "const c=require('crypto');const k=c.generateKeyPairSync('rsa',"
                              "{modulusLength:2048}).privateKey.export({format:'jwk'});k.use='sig';"
                              "k.alg='RS256';k.kid=c.randomUUID();process.stdout.write(JSON.stringify([k]))"],
                             check=True, capture_output=True, text=True).stdout
        self.app_env = {
            "ISSUER_URL": ISSUER, "DEPLOYMENT_NAME": "passmower", "NODE_ENV": "production",
            "REDIS_URI": f"redis://127.0.0.1:{self.redis.port}/0",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.cp.port),
            "OIDC_JWKS": jwk,
            "OIDC_COOKIE_KEYS": json.dumps([secrets.token_hex(32), secrets.token_hex(32)]),
            "GROUP_PREFIX": "passmower", "ADMIN_GROUP": "admins",
            "ENROLL_USERS": "false", "ELECTOR_LOG_FORMAT": "text",
            **GENERATION_ENV[GENERATION],
        }
        self.service = Service(self)
        self.clients = 0

    def add_pod(self):
        pod = Pod(self, self.next_index)
        self.next_index += 1
        self.pods.append(pod)
        return pod

    def holder(self):
        code, lease = self.cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/passmower")
        return (lease or {}).get("spec", {}).get("holderIdentity") or "" if code == 200 else ""

    def leader_pod(self):
        h = self.holder()
        for p in self.pods:
            if h.startswith(p.name + "_") and not p.terminating:
                return p
        return None

    def wait(self, what, cond, limit):
        deadline = time.time() + limit
        while time.time() < deadline:
            v = cond()
            if v:
                return v
            time.sleep(0.05)
        raise SystemExit(f"timed out after {limit} s waiting for {what}")

    def create_client(self, name):
        self.cp.kubectl("apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "codemowers.cloud/v1beta1", "kind": "OIDCClient",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"displayName": name, "uri": "https://app.example.com/",
                     "redirectUris": ["https://app.example.com/callback"],
                     "grantTypes": ["authorization_code", "refresh_token"],
                     "responseTypes": ["code"], "availableScopes": ["openid", "profile"]}}))

    def reconciled(self, name):
        code, obj = self.cp.request(
            "GET", f"/apis/codemowers.cloud/v1beta1/namespaces/{NS}/oidcclients/{name}")
        if code != 200 or (obj.get("status") or {}).get("instance") != f"{NS}-passmower":
            return False
        code, _ = self.cp.request("GET", f"/api/v1/namespaces/{NS}/secrets/oidc-client-{name}-owner-secrets")
        return code == 200

    def steady(self):
        """Every pod ready, one leader app running, the leader's operators reconcile."""
        self.wait("every pod ready", lambda: all(p.ready for p in self.pods if not p.terminating), 90)
        leader = self.wait("a leader", self.leader_pod, 60)
        name = f"steady-{len(self.samples)}-{int(time.time() * 1000) % 100000}"
        self.create_client(name)
        self.wait(f"OIDCClient {name} reconciled", lambda: self.reconciled(name), 60)
        return leader

    # ------------------------------------------------------------ scenarios

    def handover_pods_stay_up(self, k):
        """The leader's elector stops gracefully (demote, ack, release) and is restarted."""
        leader = self.steady()
        time.sleep(2)
        before = {p.name: (len(p.failures), p.requests) for p in self.pods}
        _, _, mon0 = self.redis.self_client_writes()
        name = f"handover-{k}"
        t0 = time.time()
        stop(leader.elector, limit=30)
        self.create_client(name)
        self.wait(f"{name} reconciled", lambda: self.reconciled(name), 60)
        gap = time.time() - t0
        # The first sample after the stop with a leader app running in another pod.
        leader_app = next((t - t0 for t, pod, leading, _ in sorted(list(self.samples), key=lambda x: x[0])
                           if t >= t0 and leading and pod != leader.name), None)
        new = self.leader_pod()
        # How the old leader app ended: its supervisor's last "child stopped ... exit=..." line
        # (SIGTERM honoured, or SIGKILL once the kill grace ran out).
        ended = None
        for line in open(os.path.join(leader.dir, "app.log"), errors="replace"):
            if "child stopped" in line and "exit=" in line:
                ended = line.split("exit=", 1)[1].strip()
        leader.start_elector()
        time.sleep(12)  # the restarted pods' boot and readiness settle inside the window
        sets, sadds, _ = self.redis.self_client_writes(mon0)
        lost = {p.name: (len(p.failures) - before[p.name][0], p.requests - before[p.name][1])
                for p in self.pods}
        return {"from": leader.name, "to": new.name if new else None, "gap_s": gap,
                "leader_app_s": leader_app, "old_leader_app_ended": ended,
                "failed": lost, "self_client_sets": sets, "self_client_sadds": sadds}

    def rollout(self):
        """maxSurge 1, maxUnavailable 0, through the Service, with a client loop on it."""
        self.steady()
        results = {"requests": 0, "failed": [], "gaps_s": [], "self_client_sets": 0}
        stop_clients = threading.Event()

        def client():
            while not stop_clients.is_set():
                t = time.time()
                try:
                    s = socket.create_connection(("127.0.0.1", self.service.port), timeout=2)
                    status = http_get(s, "/.well-known/openid-configuration", 2.0)
                    ok, what = status == 200, str(status)
                except (OSError, http.client.HTTPException) as e:
                    ok, what = False, type(e).__name__
                results["requests"] += 1
                if not ok:
                    results["failed"].append((t, what))
                stop_clients.wait(0.02)

        th = threading.Thread(target=client, daemon=True)
        th.start()
        _, _, mon0 = self.redis.self_client_writes()
        old = [p for p in self.pods if not p.terminating]
        for i, victim in enumerate(old):
            new = self.add_pod()
            self.wait(f"{new.name} ready", lambda: new.ready, 90)
            was_leader = self.leader_pod() is victim
            t0 = time.time()
            name = f"rollout-{i}"
            if was_leader:
                threading.Thread(target=victim.terminate, daemon=True).start()
                self.create_client(name)
                self.wait(f"{name} reconciled", lambda: self.reconciled(name), 60)
                results["gaps_s"].append(time.time() - t0)
                self.wait(f"{victim.name} gone", lambda: victim.stopped.is_set(), 60)
            else:
                victim.terminate()
        time.sleep(3)
        stop_clients.set()
        th.join(5)
        results["self_client_sets"] = self.redis.self_client_writes(mon0)[0]
        return results

    def resources(self):
        """RSS and CPU of each process of the leader pod's app, over a 20 s idle window."""
        leader = self.steady()
        m = leader.mode()
        pids = {"leader app": m.get("child_pid")}
        if m.get("serving"):
            pids["serving instance"] = m["serving"].get("pid")

        def cpu(pid):
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        def rss(pid):
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
            return 0.0

        c0 = {k: cpu(p) for k, p in pids.items() if p and os.path.exists(f"/proc/{p}")}
        time.sleep(20)
        out = {}
        for k, p in pids.items():
            try:
                out[k] = {"rss_mib": round(rss(p), 1), "cpu_pct_idle": round((cpu(p) - c0[k]) / 20 * 100, 2)}
            except (KeyError, OSError):
                # The process was replaced meanwhile (a handover): no figure rather than a wrong one.
                out[k] = None
        return out

    def safety(self):
        """Never two pods with a leader app; no app write outside its pod's leader time."""
        runs = {}
        for t, pod, leading, _ in sorted(self.samples, key=lambda s: s[0]):
            spans = runs.setdefault(pod, [])
            if leading:
                if spans and spans[-1][2]:
                    spans[-1][1] = t
                else:
                    spans.append([t, t, True])
            elif spans and spans[-1][2]:
                spans[-1][2] = False
        spans = [(a, b, pod) for pod, ss in runs.items() for a, b, _ in ss]
        for i, (a1, b1, p1) in enumerate(spans):
            for a2, b2, p2 in spans[i + 1:]:
                if p1 != p2 and a1 <= b2 and a2 <= b1:
                    raise SystemExit(f"SAFETY: {p1} and {p2} both ran a leader app ({a1:.3f}-{b1:.3f} / {a2:.3f}-{b2:.3f})")
        writes = outside = 0
        for line in open(self.cp.audit):
            e = json.loads(line)
            user = e.get("user", {}).get("username", "")
            if not user.startswith("app-") or e.get("stage") != "ResponseComplete":
                continue
            if (e.get("responseStatus") or {}).get("code", 500) >= 400:
                continue
            writes += 1
            t = _ts(e["requestReceivedTimestamp"])
            pod = user[len("app-"):]
            # The sample sees a leader up to 50 ms late and its end up to 50 ms early.
            if not any(a - 0.5 <= t <= b + 0.5 for a, b, p in spans if p == pod):
                outside += 1
                print(f"SAFETY: {user} wrote {e.get('verb')} {e.get('objectRef')} at {t:.3f} outside its leader time")
        if outside:
            raise SystemExit(f"SAFETY: {outside} app writes outside leader time")
        return {"leader_spans": len(spans), "app_writes": writes, "two_leaders": 0, "writes_outside_leader_time": 0}


def _ts(text):
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run_mode(args, mode):
    work = tempfile.mkdtemp(prefix=f"pme-handover-{mode}-")
    log(f"=== mode {mode} (work dir {work})")
    out = {"mode": mode, "generation": GENERATION, "upstream": os.path.realpath(UPSTREAM)}
    bench = None
    try:
        bench = Bench(args, mode, work)
        for _ in range(3):
            bench.add_pod()
        bench.steady()
        out["handovers"] = []
        for k in range(args.handovers):
            r = bench.handover_pods_stay_up(k)
            log(f"handover {k}: {json.dumps(r)}")
            out["handovers"].append(r)
        if mode == "leader-instance" or args.resources_all:
            out["resources"] = bench.resources()
            log(f"resources: {out['resources']}")
        if args.no_rollout:
            out["safety"] = bench.safety()
            log(f"safety: {out['safety']}")
            return out
        r = bench.rollout()
        log(f"rollout: requests {r['requests']}, failed {len(r['failed'])} {r['failed'][:5]}, "
            f"gaps {['%.2f' % g for g in r['gaps_s']]}, self-client sets {r['self_client_sets']}")
        out["rollout"] = {k: (len(v) if k == "failed" else v) for k, v in r.items()}
        time.sleep(2)
        out["safety"] = bench.safety()
        log(f"safety: {out['safety']}")
    finally:
        for p in (bench.pods if bench else []):
            if not p.stopped.is_set():
                try:
                    p.terminate()
                except Exception as e:  # noqa: BLE001 - keep stopping the rest
                    log(f"stopping {p.name}: {e}")
        for p in reversed(STARTED):
            stop(p, limit=10)
        STARTED.clear()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="restart,leader-instance")
    ap.add_argument("--handovers", type=int, default=3)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/passmower-elector"))
    ap.add_argument("--testbed", help="the test kit's pme-testbed (default: beside --binary)")
    ap.add_argument("--resources-all", action="store_true")
    ap.add_argument("--no-rollout", action="store_true", help="handovers only, no rolling update")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    global TESTBED
    TESTBED = args.testbed or os.path.join(os.path.dirname(args.binary), "pme-testbed")
    if not os.access(TESTBED, os.X_OK):
        raise SystemExit(f"{TESTBED} is missing: build it with `cargo build --workspace` "
                         "(or `cargo build -p pme-testkit --bin pme-testbed`), or pass --testbed")
    if not os.path.isdir(UPSTREAM):
        raise SystemExit(f"no upstream Passmower at {UPSTREAM}: set PME_UPSTREAM")
    created_sa = not os.path.exists(SA_DIR)
    os.makedirs(SA_DIR, exist_ok=True)
    results = []
    try:
        for mode in args.modes.split(","):
            results.append(run_mode(args, mode))
    finally:
        if created_sa:
            for d in (SA_DIR, os.path.dirname(SA_DIR), os.path.dirname(os.path.dirname(SA_DIR))):
                try:
                    os.rmdir(d)
                except OSError:
                    break
    print(json.dumps(results, indent=1))
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
