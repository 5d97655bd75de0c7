// Runs a guard natively in Node, for its unit tests: no component, no host.
//
//   import { loadGuard } from '@toolgate/guest/testing';
//   const g = await loadGuard('tool-call-limit.ts', { config: { tool: 'send_email', run_limit: 2 } });
//   g.guard.onBeforeToolCall({ runId: 'r', toolName: 'send_email', callId: 'c', args: {}, state: {} });
//   g.validateConfig({});   // -> the refusal message, or undefined
//   g.state.reset();        // empties the in-memory state
//   g.respondWith((req) => ({ json: { pii: req.json().text.includes('@') } }));
//   g.requests;             // every request the guard sent, as the host received it
//
// The guard is bundled as the build bundles it, with the contract's imports bound to an
// in-memory host: `config()` returns `g.config`, `log` and `console` lines land in `g.logs`,
// and `state` works on a map of this guard's, as the Rust SDK's state does off WebAssembly:
// keyed by scope and key (the run scope is the test's one run: `reset()` starts another),
// `ttlMs` 0 removes and any other expiry is ignored; `add` on a value that is not a decimal
// integer, or past s64, throws. Set and delete apply at once (there is no call to commit).
// `http` requests go to the responder set with `respondWith`, as the Rust SDK's
// `respond_with` does: with none set, or when it throws, the request throws (a real call
// would trap, and the host's `on_error` apply).

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as esbuild from 'esbuild';
import { SDK_DIR } from './wit.mjs';

const REGISTRY = Symbol.for('toolgate.guest.testing');
const S64_MIN = -(2n ** 63n);
const S64_MAX = 2n ** 63n - 1n;

/** The in-memory state of one natively loaded guard. */
export class NativeState {
  #map = new Map();

  #slot(scope, key) {
    return `${scope}\u0000${key}`;
  }

  /** The value at `key` in `scope` ('run' or 'tenant'), or undefined. */
  get(scope, key) {
    return this.#map.get(this.#slot(scope, key));
  }

  /** The contract's `set`: `ttlMs` 0 removes the key; other expiries are not kept. */
  set(scope, key, value, ttlMs) {
    if (ttlMs === 0n) this.#map.delete(this.#slot(scope, key));
    else this.#map.set(this.#slot(scope, key), value);
  }

  /** The contract's `delete`. */
  delete(scope, key) {
    this.#map.delete(this.#slot(scope, key));
  }

  /** The contract's `add`: the new value, a bigint; throws on a non-integer or past s64. */
  add(scope, key, delta) {
    const current = this.get(scope, key) ?? '0';
    if (!/^[+-]?\d+$/.test(current)) throw new TypeError(`state add on ${JSON.stringify(key)}: not a decimal integer`);
    const sum = BigInt(current) + delta;
    if (sum < S64_MIN || sum > S64_MAX) throw new RangeError(`state add on ${JSON.stringify(key)}: outside i64`);
    this.#map.set(this.#slot(scope, key), sum.toString());
    return sum;
  }

  /** Every key, as [scope, key, value], in the order they were first written. */
  entries() {
    return [...this.#map].map(([slot, value]) => [...slot.split('\u0000'), value]);
  }

  /** Empties the state (a new run, a new tenant). */
  reset() {
    this.#map.clear();
  }
}

/** A request as the host received it: { method, url, headers, body (bytes) }, and its body read. */
class NativeRequest {
  constructor({ method, url, headers, body }) {
    Object.assign(this, { method, url, headers, body });
  }

  /** The body as UTF-8 text. */
  text() {
    return new TextDecoder().decode(this.body);
  }

  /** The body parsed as JSON. */
  json() {
    return JSON.parse(this.text());
  }
}

/**
 * The contract's `response` for what a responder returned: { status (200), headers (an
 * object or [name, value] pairs), body (text or bytes) } or, instead of `body`, `json` (any
 * value, sent as JSON with `content-type: application/json`).
 */
function wireResponse(answer, request) {
  if (answer === null || typeof answer !== 'object') {
    throw new TypeError(`the responder answered ${request.method} ${request.url} with ${String(answer)}, not { status, headers, body }`);
  }
  const { status = 200, json } = answer;
  let { headers = [], body = '' } = answer;
  headers = Array.isArray(headers) ? headers : Object.entries(headers);
  if (json !== undefined) {
    body = JSON.stringify(json);
    if (!headers.some(([name]) => name.toLowerCase() === 'content-type')) headers = [['content-type', 'application/json'], ...headers];
  }
  if (!Number.isInteger(status) || status < 100 || status > 999) throw new RangeError(`the responder's status ${status} is not an HTTP status`);
  if (typeof body !== 'string' && !(body instanceof Uint8Array)) {
    throw new TypeError(`the responder's body for ${request.method} ${request.url} is neither a string nor a Uint8Array`);
  }
  return {
    status,
    headers: headers.map(([name, value]) => [String(name).toLowerCase(), String(value)]),
    body: typeof body === 'string' ? new TextEncoder().encode(body) : body,
  };
}

/** The contract's imports, bound to the native host registered under `id`. */
function hostModule(id) {
  const host = `globalThis[Symbol.for('toolgate.guest.testing')].get(${id})`;
  return [
    `const host = ${host};`,
    'export function log(level, message) { host.logs.push([level, message]); }',
    'export function config() { return host.configText(); }',
    'export function get(scope, key) { return host.state.get(scope, key); }',
    'export function set(scope, key, value, ttlMs) { host.state.set(scope, key, value, ttlMs); }',
    'function _delete(scope, key) { host.state.delete(scope, key); }',
    'export { _delete as delete };',
    'export function add(scope, key, delta, ttlMs) { return host.state.add(scope, key, delta, ttlMs); }',
    'export function send(request) { return host.send(request); }',
    '',
  ].join('\n');
}

let loaded = 0;

/**
 * Loads the guard at `guardPath` (TypeScript or JavaScript) natively. Options: `config`, the
 * plugin's configuration (a JSON object; `{}` by default). Returns { guard (its default
 * export), config (settable: what `config()` returns next), logs ([level, message] pairs),
 * state (a NativeState), validateConfig(config) (what the host would be told: undefined to
 * accept, else the refusal message), respondWith(responder) (answers the guard's `http`
 * requests from now on: `responder(request)` gets { method, url, headers, body, text(),
 * json() } and returns { status, headers, body } or { status, json }; throwing fails the
 * request), requests (every request sent, responded or not) }.
 */
export async function loadGuard(guardPath, { config = {} } = {}) {
  guardPath = resolve(guardPath);
  const id = ++loaded;
  const glue = join(SDK_DIR, 'src', 'glue.ts');
  const entry = [
    `import guard from ${JSON.stringify(guardPath)};`,
    `import { bindConfig } from ${JSON.stringify(glue)};`,
    `import { stringifyJson } from ${JSON.stringify(join(SDK_DIR, 'src', 'json.ts'))};`,
    'export { guard, bindConfig, stringifyJson };',
    '',
  ].join('\n');
  const result = await esbuild.build({
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    write: false,
    logLevel: 'silent',
    stdin: { contents: entry, resolveDir: SDK_DIR, sourcefile: 'toolgate-testing-entry.js', loader: 'js' },
    alias: {
      '@toolgate/guest/glue': glue,
      '@toolgate/guest': join(SDK_DIR, 'src', 'index.ts'),
    },
    plugins: [
      {
        name: 'toolgate-native-host',
        setup(build) {
          build.onResolve({ filter: /^toolgate:/ }, (args) => ({ path: args.path, namespace: 'toolgate-native' }));
          build.onLoad({ filter: /.*/, namespace: 'toolgate-native' }, () => ({ contents: hostModule(id), loader: 'js' }));
        },
      },
    ],
  });
  let mod;
  const host = {
    config,
    logs: [],
    state: new NativeState(),
    configText: () => mod.stringifyJson(host.config),
    requests: [],
    responder: undefined,
    send(wire) {
      const request = new NativeRequest(wire);
      host.requests.push(request);
      if (host.responder === undefined) {
        throw new Error(`${request.method} ${request.url}: no responder set (respondWith)`);
      }
      return wireResponse(host.responder(request), request);
    },
  };
  globalThis[REGISTRY] ??= new Map();
  globalThis[REGISTRY].set(id, host);
  const dir = await mkdtemp(join(tmpdir(), 'toolgate-testing-'));
  try {
    const file = join(dir, 'guard.mjs');
    await writeFile(file, result.outputFiles[0].contents);
    mod = await import(pathToFileURL(file).href);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const check = typeof mod.guard?.validateConfig === 'function' ? mod.bindConfig(mod.guard) : undefined;
  return {
    guard: mod.guard,
    get config() {
      return host.config;
    },
    set config(value) {
      host.config = value;
    },
    logs: host.logs,
    state: host.state,
    requests: host.requests,
    respondWith(responder) {
      if (typeof responder !== 'function') throw new TypeError('respondWith takes a function: (request) => response');
      host.responder = responder;
    },
    validateConfig(value) {
      if (check === undefined) throw new TypeError('the guard has no validateConfig');
      try {
        check.validateConfig(mod.stringifyJson(value));
        return undefined;
      } catch (message) {
        return message;
      }
    },
  };
}
