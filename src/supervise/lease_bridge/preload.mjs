// passmower-elector: the lease bridge (supervise --on-change=lease-bridge). It makes a
// self-electing Passmower's own leader election follow the pod's grant: every read of its Lease
// is answered from the grant, every write is answered here, and none of them reaches the API
// server.
//
// Loaded with NODE_OPTIONS=--import=data:..., before the app's first line. The supervisor
// passes a connected socket in PASSMOWER_ELECTOR_BRIDGE_FD (a socketpair end only it holds the
// other end of) and:
//   supervisor -> here: lines "grant <n> leader|follower", n counting up;
//   here -> supervisor: "ready", "broken <why>", and "read <n> us|other" for each read of the
//   Lease, n the grant it was answered from.
// The supervisor works out from the reads when the app's election has taken a grant in (see
// lease_bridge.rs); nothing here keeps time.
//
// Why the adapter, not the HTTP request (see lease_bridge.rs for the whole argument): the
// election's only input is KubernetesAdapter's getLease/createLease/replaceLease (upstream's
// leader-election.js calls nothing else), and they return plain objects and throw errors with a
// `code`. The request underneath goes through the npm undici that @kubernetes/client-node
// bundles, with a per-request dispatcher built from the kubeconfig; answering there means
// driving undici's handler protocol, which differs between undici majors. The three methods
// are patched on the class's prototype, so every adapter instance (the election's, and the one
// its stop() uses) goes through here, and any answer is local.
//
// Until this bridge has answered "held by us", the process keeps the follower environment it
// was started with (the idle NAMESPACE_SELECTOR): the leader values (PASSMOWER_ELECTOR_BRIDGE_
// LEADER_ENV, a JSON object) are set into process.env right before a read is answered "us",
// and the follower's put back on an "other". Passmower's operators read NAMESPACE_SELECTOR when
// they start, in onStartedLeading; so an election that went round the bridge (a later version
// that reads its Lease another way) can only ever start idle operators.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const FD_VAR = 'PASSMOWER_ELECTOR_BRIDGE_FD';
const LEADER_VAR = 'PASSMOWER_ELECTOR_BRIDGE_LEADER_ENV';
const FOLLOWER_VAR = 'PASSMOWER_ELECTOR_BRIDGE_FOLLOWER_ENV';
const fd = Number(process.env[FD_VAR]);
const parse = (name) => {
  try {
    const v = JSON.parse(process.env[name] || '{}');
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : {};
  } catch {
    return {};
  }
};
const leaderEnv = parse(LEADER_VAR);
const followerEnv = parse(FOLLOWER_VAR);
// Not for the app's own child processes.
for (const name of [FD_VAR, LEADER_VAR, FOLLOWER_VAR]) delete process.env[name];

const say = (text) => {
  try {
    process.stderr.write(`passmower-elector: lease bridge: ${text}\n`);
  } catch {
    // Nowhere to say it.
  }
};

let socket;
const send = (line) => {
  try {
    socket?.write(`${line}\n`);
  } catch {
    // The supervisor is gone; it kills the group when it goes.
  }
};

// The grant as last told: until the first line it is "follower", the answer that never starts
// an operator.
let grant = { n: 0, leader: false };

// Immediate ticks. Upstream's election ticks every LEADER_RETRY_PERIOD_SECONDS (1 s at least),
// so a new grant would wait up to a second to be read, and its ack (the read after the tick that
// took it in) up to another: seconds with no operator at every handover. Instead, a new grant
// starts a tick at once, and a second one as soon as that tick has finished, whose read is the
// ack. Both go through the election's own `ticking` guard (a public field, set and cleared as
// its private #tickQuietly does), so a tick never overlaps another, and the ack still comes
// from a read the app made after the tick that took the grant in had finished. Without the
// election's class (a later layout), the ticks stay on upstream's timer: slower, just as safe.
const elections = new Map(); // a started LeaderElection -> immediate ticks still owed
const tickNow = () => {
  for (const election of elections.keys()) {
    elections.set(election, 2);
    kick(election);
  }
};
const kick = (election) => {
  const owed = elections.get(election) ?? 0;
  // An election without upstream's two flags is not one this knows how to guard: its timer only.
  if (typeof election.ticking !== 'boolean' || typeof election.stopped !== 'boolean') return;
  if (owed <= 0 || election.stopped) return;
  // A tick in flight kicks again when it ends (bridgedTick).
  if (election.ticking) return;
  elections.set(election, owed - 1);
  election.ticking = true;
  Promise.resolve()
    .then(() => election.tick())
    .catch((error) => globalThis.logger?.error({ error }, 'Leader election tick failed'))
    .finally(() => {
      election.ticking = false;
    });
};

const setEnv = (values) => {
  for (const [key, value] of Object.entries(values)) {
    if (value === null || value === undefined) delete process.env[key];
    else process.env[key] = String(value);
  }
};

// A descriptor that is no socket (a process started with a copy of the app's environment, as a
// `node -e` run beside it) gets no bridge: every read answers "held by another", never a crash.
const openSocket = () => {
  try {
    return new net.Socket({ fd, readable: true, writable: true });
  } catch (e) {
    say(`${FD_VAR}=${fd} is no socket (${e && e.code}); every read of the Lease is answered "held by another"`);
    return undefined;
  }
};
if (Number.isInteger(fd) && fd >= 3 && (socket = openSocket())) {
  // Never what keeps the app alive, nor what stops it from exiting at shutdown.
  socket.unref();
  socket.setEncoding('utf8');
  let buffered = '';
  socket.on('data', (chunk) => {
    buffered += chunk;
    let i;
    while ((i = buffered.indexOf('\n')) >= 0) {
      const [word, n, mode] = buffered.slice(0, i).split(' ');
      buffered = buffered.slice(i + 1);
      if (word === 'grant' && /^\d+$/.test(n) && Number(n) > grant.n) {
        grant = { n: Number(n), leader: mode === 'leader' };
        tickNow();
      }
    }
  });
  // EOF or an error: the supervisor is gone, or closed its end. Follower from now on; the
  // supervisor's own exit kills this process group anyway.
  const lost = () => {
    grant = { n: Number.MAX_SAFE_INTEGER, leader: false };
    tickNow();
  };
  socket.on('end', lost);
  socket.on('error', lost);
} else if (!(Number.isInteger(fd) && fd >= 3)) {
  say(`${FD_VAR} is not a file descriptor; every read of the Lease is answered "held by another"`);
}

// Upstream's holder identity (podIdentity in src/services/leader-election.js).
const identity = () => process.env.POD_NAME || os.hostname();
const OTHER = 'passmower-elector: another pod leads';
const leaseName = () => process.env.LEADER_ELECTION_LEASE_NAME || 'passmower-operators';
// Fresh by upstream's rule (renewTime within leaseDurationSeconds of now), every time it is read.
const microTime = (d) => d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
let version = 0;
let transitions = 0;
let lastHolder;

const lease = (namespace, name, holder) => {
  if (holder !== lastHolder) {
    transitions += 1;
    lastHolder = holder;
  }
  version += 1;
  const now = microTime(new Date());
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name, namespace, resourceVersion: String(version) },
    spec: {
      holderIdentity: holder,
      leaseDurationSeconds: 15,
      acquireTime: now,
      renewTime: now,
      leaseTransitions: transitions,
    },
  };
};

const conflict = (name) => {
  const e = new Error(`passmower-elector: the pod's grant does not make this pod hold Lease ${name}`);
  e.code = 409;
  e.statusCode = 409;
  return e;
};

const patch = (Adapter) => {
  const proto = Adapter.prototype;
  const originals = {
    getLease: proto.getLease,
    createLease: proto.createLease,
    replaceLease: proto.replaceLease,
  };
  const ours = (name) => name === leaseName();
  proto.getLease = async function bridgedGetLease(namespace, name) {
    if (!ours(name)) return originals.getLease.call(this, namespace, name);
    const { n, leader } = grant;
    if (leader) setEnv(leaderEnv);
    else setEnv(followerEnv);
    send(`read ${n} ${leader ? 'us' : 'other'}`);
    return lease(namespace, name, leader ? identity() : OTHER);
  };
  const write = (original) =>
    async function bridgedWrite(namespace, ...rest) {
      // createLease(namespace, body), replaceLease(namespace, name, body)
      const body = rest[rest.length - 1];
      const name = rest.length > 1 ? rest[0] : body?.metadata?.name;
      if (!ours(name)) return original.call(this, namespace, ...rest);
      if (!grant.leader) throw conflict(name);
      const holder = body?.spec?.holderIdentity ?? null;
      const stored = lease(namespace, name, holder);
      return { ...body, metadata: { ...(body?.metadata || {}), ...stored.metadata }, spec: { ...stored.spec, ...(body?.spec || {}) } };
    };
  proto.createLease = write(originals.createLease);
  proto.replaceLease = write(originals.replaceLease);
};

// Records each election that ticks, and owes it the next immediate tick once this one is over:
// after the caller's own `finally` has cleared `ticking` (setImmediate runs after the promise
// callbacks queued now).
const patchElection = (LeaderElection) => {
  const proto = LeaderElection.prototype;
  const tick = proto.tick;
  proto.tick = function bridgedTick(...args) {
    // Its first tick may have read a grant told before the election existed: one more read
    // right after it, so that grant's ack does not wait for the timer either.
    if (!elections.has(this)) elections.set(this, 1);
    const over = () => {
      if ((elections.get(this) ?? 0) > 0) setImmediate(() => kick(this));
    };
    let running;
    try {
      running = Promise.resolve(tick.apply(this, args));
    } catch (e) {
      over();
      throw e;
    }
    return running.finally(over);
  };
};

// A file of the app's source tree beside its main script (src/app.js -> src/<parts>).
const appFile = (...parts) => {
  const main = process.argv[1];
  if (!main) return undefined;
  let real;
  try {
    real = fs.realpathSync(path.resolve(main));
  } catch {
    return undefined;
  }
  return path.join(path.dirname(real), ...parts);
};
const adapterFile = () => appFile('adapters', 'kubernetes.js');

// The election's class, for immediate ticks; a reason when there is none (not broken: the
// election still follows the grant, on its own timer).
const installTicks = async () => {
  const file = appFile('services', 'leader-election.js');
  if (!file || !fs.existsSync(file)) return `no services/leader-election.js beside the main script`;
  let mod;
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (e) {
    return `cannot import ${file} (${String(e && e.message).split('\n')[0]})`;
  }
  const proto = mod.LeaderElection && mod.LeaderElection.prototype;
  if (!proto || typeof proto.tick !== 'function') return `${file} has no LeaderElection.tick`;
  patchElection(mod.LeaderElection);
  return undefined;
};

const install = async () => {
  const file = adapterFile();
  if (!file || !fs.existsSync(file)) {
    return `no adapters/kubernetes.js beside the main script (${process.argv[1] || 'none'})`;
  }
  let mod;
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (e) {
    return `cannot import ${file} (${String(e && e.message).split('\n')[0]})`;
  }
  const Adapter = mod.KubernetesAdapter;
  const proto = Adapter && Adapter.prototype;
  for (const method of ['getLease', 'createLease', 'replaceLease']) {
    if (!proto || typeof proto[method] !== 'function') {
      return `${file} has no KubernetesAdapter.${method}`;
    }
  }
  patch(Adapter);
  return undefined;
};

let broken;
try {
  broken = await install();
} catch (e) {
  broken = `patching failed (${e && e.message})`;
}
if (broken) {
  say(`${broken}: this app's election cannot follow the grant`);
  send(`broken ${broken}`);
} else {
  let slow;
  try {
    slow = await installTicks();
  } catch (e) {
    slow = `patching the election failed (${e && e.message})`;
  }
  if (slow) say(`${slow}: a new grant waits for the election's next tick`);
  send('ready');
}
