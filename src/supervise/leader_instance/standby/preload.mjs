// passmower-elector: the warm standby of a leader instance (supervise --leader-standby).
//
// Loaded with NODE_OPTIONS=--import=data:..., last of the preloads (after the port map's, and
// after the container's own --imports), so it runs where the app's main module would start.
// It does not return until the supervisor says "go":
// 1. It imports the app's dependencies (the "dependencies" of the package.json found from the
//    main script upwards), each on its own, resolved as the app's own code would resolve them
//    (see below), so Node's module cache is warm when the app starts. One that fails is skipped.
// 2. It blocks this thread reading the pipe in PASSMOWER_ELECTOR_STANDBY_FD, which only the
//    supervisor holds open for writing. Nothing else runs meanwhile: no timer, no callback of a
//    dependency, no app code.
// 3. The go is the whole content of the pipe up to EOF: a JSON object {"env": {KEY: VALUE or
//    null}} that turns this process's environment into the leader instance's. It is set into
//    process.env, the pipe is closed, and the preload returns: the app's main module then runs
//    with the leader environment, as in a freshly started leader instance.
// EOF without a message (the supervisor died or withdrew the standby), or anything else going
// wrong, exits the process without running the app.
import fs from 'node:fs';
import * as nodeModule from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const VAR = 'PASSMOWER_ELECTOR_STANDBY_FD';
const say = (text) => {
  try {
    process.stderr.write(`passmower-elector: standby: ${text}\n`);
  } catch {
    // Nowhere to say it.
  }
};
const quit = (code, why) => {
  say(`${why}; exiting without running the app`);
  process.exit(code);
};

const fd = Number(process.env[VAR]);
if (!Number.isInteger(fd) || fd < 3) quit(1, `${VAR} is not a file descriptor`);

// How long one dependency's import is waited for. One that takes longer (a top-level await
// that waits on the network) goes on after the go; the standby must not wait for ever.
const IMPORT_WAIT_MS = 10000;

const appPackage = () => {
  const main = process.argv[1];
  if (!main) return undefined;
  let dir = path.dirname(path.resolve(main));
  for (;;) {
    const file = path.join(dir, 'package.json');
    if (fs.existsSync(file)) return { dir, file };
    const up = path.dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
};

// A data: module has no directory to resolve bare specifiers from, so each dependency is
// resolved with the app's directory as parent by Node's own resolver, through the parent
// argument of import.meta.resolve (--experimental-import-meta-resolve, which the supervisor puts
// before this preload): the "import" condition and everything else exactly as the app's own
// `import` would, and the absolute URL it gives is imported. Without that argument (a Node that
// ignores it), module.register() hooks do the same: a private specifier resolves to a virtual
// module in the app's directory whose source is `import "<dependency>";`; they cost a hooks
// thread for the life of the process, so they are only the fallback.
const resolver = (base) => {
  let hooks = false;
  const PREFIX = 'passmower-elector-standby:';
  const viaHooks = () => {
    if (!hooks) {
      const code = `
const PREFIX = ${JSON.stringify(PREFIX)};
const BASE = ${JSON.stringify(base)} + '?';
export async function resolve(specifier, context, next) {
  if (!specifier.startsWith(PREFIX)) return next(specifier, context);
  return { url: BASE + encodeURIComponent(specifier.slice(PREFIX.length)), shortCircuit: true };
}
export async function load(url, context, next) {
  if (!url.startsWith(BASE)) return next(url, context);
  const dependency = decodeURIComponent(url.slice(BASE.length));
  return { format: 'module', source: 'import ' + JSON.stringify(dependency) + ';', shortCircuit: true };
}`;
      nodeModule.register(`data:text/javascript,${encodeURIComponent(code)}`);
      hooks = true;
    }
  };
  const resolve = async (dep) => {
    if (!hooks) {
      try {
        // A promise in Node 18, a string from 20 on.
        return await import.meta.resolve(dep, base);
      } catch (e) {
        if (e.code !== 'ERR_UNSUPPORTED_RESOLVE_REQUEST' || typeof nodeModule.register !== 'function') {
          throw e;
        }
        viaHooks();
      }
    }
    return `${PREFIX}${dep}`;
  };
  return { resolve, hooks: () => hooks };
};

const warm = async () => {
  const found = appPackage();
  if (!found) return 'no package.json above the main script: nothing imported';
  let deps;
  try {
    deps = Object.keys(JSON.parse(fs.readFileSync(found.file, 'utf8')).dependencies || {});
  } catch (e) {
    return `${found.file} unreadable (${e.message})`;
  }
  const base = pathToFileURL(path.join(found.dir, '[passmower-elector standby].mjs')).href;
  const { resolve, hooks } = resolver(base);
  let imported = 0;
  const skipped = [];
  for (const dep of deps) {
    let timer;
    const late = new Promise((done) => {
      timer = setTimeout(() => done('late'), IMPORT_WAIT_MS);
    });
    try {
      const r = await Promise.race([resolve(dep).then((url) => import(url)), late]);
      if (r === 'late') skipped.push(`${dep} (still loading after ${IMPORT_WAIT_MS} ms)`);
      else imported += 1;
    } catch (e) {
      skipped.push(`${dep} (${String(e && e.message).split('\n')[0]})`);
    } finally {
      clearTimeout(timer);
    }
  }
  const also = skipped.length ? `; skipped ${skipped.join(', ')}` : '';
  const how = hooks() ? ' (through module.register hooks)' : '';
  return `${imported} of ${deps.length} dependencies imported${how}${also}`;
};

const started = performance.now();
let warmed;
try {
  warmed = await warm();
} catch (e) {
  warmed = `warming failed (${e && e.message})`;
}
say(`${warmed} in ${Math.round(performance.now() - started)} ms; waiting for the go`);

const chunks = [];
const buffer = Buffer.alloc(65536);
for (;;) {
  let n;
  try {
    n = fs.readSync(fd, buffer, 0, buffer.length, null);
  } catch (e) {
    if (e.code === 'EINTR') continue;
    quit(1, `cannot read the go (${e.message})`);
  }
  if (n === 0) break;
  chunks.push(Buffer.from(buffer.subarray(0, n)));
}
try {
  fs.closeSync(fd);
} catch {
  // Closed already is as good.
}
if (chunks.length === 0) quit(0, 'withdrawn (the supervisor closed the pipe or is gone)');
let go;
try {
  go = JSON.parse(Buffer.concat(chunks).toString('utf8'));
} catch (e) {
  quit(1, `the go is not JSON (${e.message})`);
}
const env = go && go.env;
if (env === null || typeof env !== 'object' || Array.isArray(env)) quit(1, 'the go has no env object');
for (const [key, value] of Object.entries(env)) {
  if (value !== null && typeof value !== 'string') quit(1, `the go's ${key} is neither text nor null`);
}
for (const [key, value] of Object.entries(env)) {
  if (value === null) delete process.env[key];
  else process.env[key] = value;
}
say('go: starting the app as the leader instance');
