// pme-testkit: moves a Passmower's fixed metrics port 9090 to any free port (0), so
// tests that run Passmower at the same time on one host do not meet there (EADDRINUSE, and the
// second exits). Loaded with NODE_OPTIONS=--import=file://…. A process under the supervisor's
// own port map (PASSMOWER_ELECTOR_PORT_MAP set: a leader instance or a standby) is left to that
// map, which the test may be checking.
import net from 'node:net';

if (!process.env.PASSMOWER_ELECTOR_PORT_MAP) {
  const listen = net.Server.prototype.listen;
  net.Server.prototype.listen = function pmeTestkitListen(...args) {
    const first = args[0];
    if (first !== null && typeof first === 'object' && Number(first.port) === 9090) {
      return listen.call(this, { ...first, port: 0 }, ...args.slice(1));
    }
    if (Number(first) === 9090) return listen.call(this, 0, ...args.slice(1));
    return listen.apply(this, args);
  };
}
