// The splice cache: componentize-js's first step, splicing a WIT world's bindings into the
// StarlingMonkey engine, depends on the engine, the world and the engine's features, never on
// the guard's source; it takes seconds (the splicer is itself Wasm run by Node), so its result
// is kept and reused by every later build of a guard of the same world.
//
// Where: toolgate's cache directory, as toolgate finds it ($TOOLGATE_CACHE_DIR, `off` or
// empty: no cache; else $XDG_CACHE_HOME/toolgate, else $HOME/.cache/toolgate), under
// `js-splice/`. An entry is `<key>.wasm` (the spliced engine) and `<key>.json` (the
// bindings, the exports and imports, and the SHA-256 of the `.wasm`); the key is a SHA-256
// over the engine's bytes, the splicer's version, the features, the world's name, the
// splicer's other arguments and every WIT file. An entry's engine becomes the guard's code, so the rules are those of the
// compiled cache: directories are made 0700, files written whole (a temporary file renamed
// into place), and a directory or file that is not this user's, or that its group or
// others may write, is not used. An entry whose `.wasm` does not match its recorded digest
// is ignored and written again.

import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The format of an entry; part of the key. */
const FORMAT = 'toolgate-js-splice-v1';

/** toolgate's cache directory, or undefined when the cache is off. */
export function cacheDir(env = process.env) {
  if (env.TOOLGATE_CACHE_DIR !== undefined) {
    const dir = env.TOOLGATE_CACHE_DIR;
    return dir === '' || dir === 'off' ? undefined : dir;
  }
  const base = env.XDG_CACHE_HOME || (env.HOME && join(env.HOME, '.cache'));
  return base ? join(base, 'toolgate') : undefined;
}

const sha256 = (...parts) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest('hex');
};

/** Whether `path` is this user's and writable by no one else (a missing path: `missingOk`). */
function isPrivate(path, missingOk) {
  let s;
  try {
    s = statSync(path);
  } catch (err) {
    if (err.code === 'ENOENT') return missingOk;
    throw err;
  }
  const uid = process.geteuid?.();
  return (uid === undefined || s.uid === uid) && (s.mode & 0o022) === 0;
}

/** Writes `bytes` to `path` whole or not at all. */
function writeWhole(path, bytes) {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, bytes, { mode: 0o600, flag: 'wx' });
  renameSync(tmp, path);
}

/** The key of a splice of `worldName` (the WIT files in `witPath`) into `engine`. */
function keyOf(version, engine, features, witPath, worldName, rest) {
  const names = readdirSync(witPath).filter((n) => n.endsWith('.wit')).sort();
  const wits = names.map((n) => `${n}\n${readFileSync(join(witPath, n), 'utf8')}`);
  return sha256(FORMAT, version, sha256(engine), JSON.stringify([...features].sort()), worldName, JSON.stringify(rest), ...wits);
}

/** The kept result under `key` in `at`, or undefined. */
function get(dir, at, key) {
  if (!isPrivate(dir, false) || !isPrivate(at, false)) return undefined;
  const wasmPath = join(at, `${key}.wasm`);
  const metaPath = join(at, `${key}.json`);
  if (!isPrivate(wasmPath, false) || !isPrivate(metaPath, false)) return undefined;
  const meta = JSON.parse(readFileSync(metaPath, 'utf8'));
  const whole =
    typeof meta?.jsBindings === 'string' && Array.isArray(meta.exports) && Array.isArray(meta.imports);
  if (!whole) return undefined;
  const wasm = readFileSync(wasmPath);
  if (sha256(wasm) !== meta.wasmSha256) return undefined;
  return {
    wasm: new Uint8Array(wasm.buffer, wasm.byteOffset, wasm.length),
    jsBindings: meta.jsBindings,
    exports: meta.exports,
    imports: meta.imports,
  };
}

/** Keeps `out` under `key` in `at`; false when `dir` is not private. */
function put(dir, at, key, out) {
  if (!isPrivate(dir, true)) return false;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  try {
    mkdirSync(at, { mode: 0o700 });
  } catch (err) {
    if (err.code !== 'EEXIST') throw err;
  }
  if (!isPrivate(at, false)) return false;
  const meta = { wasmSha256: sha256(out.wasm), jsBindings: out.jsBindings, exports: out.exports, imports: out.imports };
  writeWhole(join(at, `${key}.wasm`), out.wasm);
  writeWhole(join(at, `${key}.json`), JSON.stringify(meta));
  return true;
}

/**
 * `splice` (the splicer's `spliceBindings(engine, features, witWorld, witPath, worldName,
 * ...)`) with its results kept: the returned function takes the same arguments and gives the
 * same result, read from the cache when a valid entry exists. A world given as text
 * (`witWorld`), not as a path, is not cached. `version` is the splicer's (componentize-js's);
 * `log` gets a line when the cache cannot be used.
 */
export function cachedSplice(splice, { version, dir = cacheDir(), log = () => {} }) {
  return (engine, features, witWorld, witPath, worldName, ...rest) => {
    const uncached = () => splice(engine, features, witWorld, witPath, worldName, ...rest);
    if (!dir || witWorld !== undefined || typeof witPath !== 'string') return uncached();
    const at = join(dir, 'js-splice');
    let key;
    try {
      key = keyOf(version, engine, features, witPath, worldName, rest);
      const kept = get(dir, at, key);
      if (kept) return kept;
    } catch {
      // An unreadable entry is as good as none: spliced again and written anew.
    }
    const out = uncached();
    try {
      if (key && !put(dir, at, key, out)) {
        log(`note: ${dir} is not private to this user; spliced engines are not kept`);
      }
    } catch (err) {
      log(`note: cannot keep the spliced engine: ${err.message}`);
    }
    return out;
  };
}
