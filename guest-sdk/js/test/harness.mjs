// Runs a built component in Node (jco transpile), with a fake host that records log lines.

import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { transpileBytes } from '@bytecodealliance/jco-transpile';

const temps = [];

/** A temporary directory, removed by `cleanup()`. */
export async function tempDir(prefix) {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  temps.push(dir);
  return dir;
}

/** Removes every directory `tempDir` made. */
export async function cleanup() {
  await Promise.all(temps.splice(0).map((d) => rm(d, { recursive: true, force: true })));
}

/** Transpiles the component once; returns a function making a fresh instance per call. */
export async function loadComponent(wasmPath) {
  const { files } = await transpileBytes(await readFile(wasmPath), {
    name: 'guard',
    instantiation: { tag: 'async' },
    noTypescript: true,
  });
  const dir = await tempDir('toolgate-js-test-');
  for (const [name, bytes] of Object.entries(files)) {
    await mkdir(dirname(join(dir, name)), { recursive: true });
    await writeFile(join(dir, name), bytes);
  }
  const mod = await import(pathToFileURL(join(dir, 'guard.js')).href);
  const cores = new Map();
  const getCore = async (name) => {
    if (!cores.has(name)) cores.set(name, await WebAssembly.compile(await readFile(join(dir, name))));
    return cores.get(name);
  };
  /**
   * A fresh instance: { exports, logs, store } with the given plugin config (a JSON object),
   * state store (a FakeStore, shared by the instances given the same one) and `http.send`
   * (the contract's: request record in, response record out).
   */
  return async function instance(config = {}, store = new FakeStore(), send = noNetwork) {
    const logs = [];
    const exports = await mod.instantiate(getCore, {
      'toolgate:guard/host': {
        log: (level, message) => logs.push([level, message]),
        config: () => JSON.stringify(config),
      },
      'toolgate:guard/state': store.imports(),
      'toolgate:guard/http': { send },
      'toolgate:guard/types': {},
    });
    return { exports, logs, store };
  };
}

function noNetwork(request) {
  throw new Error(`${request.method} ${request.url}: this test's host grants no network`);
}

/** The host's state, faked: a map per scope, and every call as the host received it. */
export class FakeStore {
  values = new Map();
  calls = [];

  imports() {
    const slot = (scope, key) => `${scope}/${key}`;
    return {
      get: (scope, key) => {
        this.calls.push(['get', scope, key]);
        return this.values.get(slot(scope, key));
      },
      set: (scope, key, value, ttlMs) => {
        this.calls.push(['set', scope, key, value, ttlMs]);
        this.values.set(slot(scope, key), value);
      },
      delete: (scope, key) => {
        this.calls.push(['delete', scope, key]);
        this.values.delete(slot(scope, key));
      },
      add: (scope, key, delta, ttlMs) => {
        this.calls.push(['add', scope, key, delta, ttlMs]);
        const sum = BigInt(this.values.get(slot(scope, key)) ?? '0') + delta;
        this.values.set(slot(scope, key), sum.toString());
        return sum;
      },
    };
  }
}
