// passmower-elector: moves the TCP listeners of a Node.js leader instance out of the way of the
// serving instance beside it (supervise --on-change=leader-instance --leader-port-map).
//
// Loaded with NODE_OPTIONS=--import=data:..., so no file is involved. It patches
// net.Server.prototype.listen, which every HTTP, HTTPS and HTTP/2 server (and Koa, Express...)
// goes through, before the app's own modules run. A listen on a mapped port is sent to the
// mapped port on 127.0.0.1 instead (0: any free port). Unix sockets, handles and file
// descriptors are left alone. The table is PASSMOWER_ELECTOR_PORT_MAP: FROM=TO,FROM=TO...
// with FROM a port or "*" (every port, including listen() without one).
//
// Node runs every --require before any --import, so the supervisor takes the leader instance's
// --require modules (an APM or OpenTelemetry agent that opens a port) out of NODE_OPTIONS and
// passes them in PASSMOWER_ELECTOR_REQUIRE (a JSON array): they are required here, after the
// patch, in their order, resolved from the working directory as Node resolves --require.
//
// With PASSMOWER_ELECTOR_LISTENING_FD (a pipe's write end, given to a leader instance whose
// serving instance waits for its boot), one byte goes into that pipe when the first server of
// this process is listening, and the pipe is closed: the end of the boot, for the supervisor.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';

const LOOPBACK = '127.0.0.1';
const table = new Map();
let every;
for (const entry of (process.env.PASSMOWER_ELECTOR_PORT_MAP || '').split(',')) {
  const [from, to] = entry.split('=');
  if (to === undefined || !/^\d+$/.test(to)) continue;
  if (from === '*') every = Number(to);
  else if (/^\d+$/.test(from)) table.set(Number(from), Number(to));
}

const portOf = (value) => {
  if (value === undefined || value === null) return 0;
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && /^\d+$/.test(value)) return Number(value);
  return undefined;
};

const LISTENING_VAR = 'PASSMOWER_ELECTOR_LISTENING_FD';
let listeningFd = Number(process.env[LISTENING_VAR]);
// Not for the app's own child processes.
delete process.env[LISTENING_VAR];
if (!Number.isInteger(listeningFd) || listeningFd < 3) listeningFd = undefined;
const sayListening = () => {
  if (listeningFd === undefined) return;
  const fd = listeningFd;
  listeningFd = undefined;
  try {
    fs.writeSync(fd, 'L');
  } catch {
    // The supervisor is gone; nobody waits.
  }
  try {
    fs.closeSync(fd);
  } catch {
    // Already closed.
  }
};
const watchListening = (server) => {
  if (listeningFd !== undefined) server.once('listening', sayListening);
};

const target = (port) => (table.has(port) ? table.get(port) : every);

const say = (from, to) =>
  process.stderr.write(
    `passmower-elector: leader instance: listen on port ${from} moved to ${LOOPBACK}:${to}\n`,
  );

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function passmowerElectorListen(...args) {
  watchListening(this);
  const first = args[0];
  if (first !== null && typeof first === 'object') {
    // listen(options[, callback]); a handle ({_handle} / {fd}) or a path is not a TCP port.
    if ('path' in first || '_handle' in first || 'fd' in first) return listen.apply(this, args);
    const from = portOf(first.port);
    const to = from === undefined ? undefined : target(from);
    if (to === undefined) return listen.apply(this, args);
    say(from, to);
    const options = { ...first, port: to, host: LOOPBACK };
    delete options.ipv6Only;
    return listen.call(this, options, ...args.slice(1));
  }
  if (typeof first === 'function') {
    // listen(callback): any port, on every address.
    const to = target(0);
    if (to === undefined) return listen.apply(this, args);
    say(0, to);
    return listen.call(this, to, LOOPBACK, first);
  }
  const from = portOf(first);
  if (from === undefined) return listen.apply(this, args); // a pipe or socket path
  const to = target(from);
  if (to === undefined) return listen.apply(this, args);
  say(from, to);
  // listen(port[, host][, backlog][, callback]): the host goes, backlog and callback stay.
  const rest = args.slice(1).filter((a) => a !== undefined && a !== null && typeof a !== 'string');
  return listen.call(this, to, LOOPBACK, ...rest);
};

const required = process.env.PASSMOWER_ELECTOR_REQUIRE;
if (required) {
  const load = createRequire(path.join(process.cwd(), '[passmower-elector preload]'));
  for (const request of JSON.parse(required)) load(request);
}
