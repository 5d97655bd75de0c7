// The state API and validateConfig: in a built component (run in Node through jco, against a
// fake host store), and natively (`@toolgate/guest/testing`), on the example tool-call-limit.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildGuard, componentInterfaces } from '../lib/build.mjs';
import { loadGuard, NativeState } from '../lib/testing.mjs';
import { FakeStore, cleanup, loadComponent, tempDir } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const PLUGINS = join(HERE, '..', '..', '..', 'plugins', 'js');
const U64_MAX = 2n ** 64n - 1n;

after(cleanup);

const steering = (state, runId = 'run-1', toolName = 'probe') => ({
  runId,
  toolName,
  callId: 'call-1',
  args: '{}',
  state: JSON.stringify(state),
});

describe('a guard using state and checking its config, built', () => {
  let built;
  let instance;
  let work;

  before(async () => {
    work = await tempDir('toolgate-js-state-');
    built = await buildGuard(join(HERE, 'fixtures', 'stateful.ts'), join(work, 'stateful.wasm'));
    instance = await loadComponent(join(work, 'stateful.wasm'));
  });

  test('imports state and exports config beside its seam', async () => {
    const { imports, exports } = await componentInterfaces(await readFile(join(work, 'stateful.wasm')));
    assert.deepEqual([...exports].sort(), ['toolgate:guard/config@0.3.0', 'toolgate:guard/steering@0.3.0']);
    assert.deepEqual([...imports].sort(), [
      'toolgate:guard/host@0.3.0',
      'toolgate:guard/state@0.3.0',
      'toolgate:guard/types@0.3.0',
    ]);
    assert.equal(built.world, 'js-guard-steering-config-state');
    assert.deepEqual([built.config, built.state, built.int64Lowering], [true, true, 'unsigned-bits']);
  });

  test('get, set, delete reach the host as the contract has them', async () => {
    const store = new FakeStore();
    const call = async (state) => (await instance({}, store)).exports.steering.beforeToolCall(steering(state));
    assert.deepEqual(await call({ op: 'get' }), { tag: 'skip', val: { content: 'null', isError: true } });
    assert.deepEqual(await call({ op: 'set', scope: 'tenant', value: 'x', ttl: 1500 }), { tag: 'proceed' });
    assert.deepEqual(await call({ op: 'get', scope: 'tenant' }), { tag: 'skip', val: { content: '"x"', isError: true } });
    await call({ op: 'set', value: 'y' });
    await call({ op: 'set-forever' });
    await call({ op: 'delete', scope: 'tenant' });
    assert.deepEqual(store.calls, [
      ['get', 'run', 'k'],
      ['set', 'tenant', 'k', 'x', 1500n],
      ['get', 'tenant', 'k'],
      ['set', 'run', 'k', 'y', undefined],
      ['set', 'run', 'k', 'v', U64_MAX],
      ['delete', 'tenant', 'k'],
    ]);
    assert.deepEqual(await call({ op: 'set-then-get', key: 'own' }), { tag: 'skip', val: { content: 'mine', isError: true } });
  });

  test('add returns a number, negative deltas and sums included; addBigInt is exact', async () => {
    const store = new FakeStore();
    const add = async (state) => (await instance({}, store)).exports.steering.beforeToolCall(steering(state)).val.content;
    assert.equal(await add({ op: 'add', delta: 2, ttl: 60000 }), 'number 2');
    assert.equal(await add({ op: 'add', delta: -5 }), 'number -3');
    assert.deepEqual(store.calls, [
      ['add', 'run', 'k', 2n, 60000n],
      ['add', 'run', 'k', -5n, undefined],
    ]);
    assert.equal(await add({ op: 'add-big', key: 'b', delta: String(-(2n ** 63n)) }), `bigint ${-(2n ** 63n)}`);
    assert.equal(await add({ op: 'add-big', key: 'c', delta: String(2n ** 63n - 1n) }), `bigint ${2n ** 63n - 1n}`);
    // A sum a number cannot hold exactly throws (the call faults; the host gives the add back).
    const { exports, logs } = await instance({}, store);
    assert.throws(() => exports.steering.beforeToolCall(steering({ op: 'add', key: 'c', delta: 0 })));
    assert.match(logs[0][1], /RangeError: state.add on "c": 9223372036854775807 is beyond a safe integer; use state.addBigInt/);
  });

  test('a misuse throws before reaching the host, and the call faults', async () => {
    for (const [op, why] of [
      ['bad-scope', /state.get: scope must be 'run' or 'tenant', not thread/],
      ['bad-value', /state.set: value must be a string, not number/],
      ['bad-ttl', /state.set: ttlMs must be an integer 0..2\^64-1 or Infinity, not -1/],
      ['bad-delta', /state.add: delta must be a safe integer or a bigint in s64, not 1.5/],
    ]) {
      const { exports, logs, store } = await instance();
      assert.throws(() => exports.steering.beforeToolCall(steering({ op })), op);
      assert.match(logs[0][1], why);
      assert.deepEqual(store.calls, [], op);
    }
  });

  test('validateConfig: nothing accepts; a message or a throw refuses with it', async () => {
    // What the host is told: jco's host side throws the `err` case's string.
    const validate = async (config) => {
      const { exports } = await instance();
      try {
        return { ok: exports.config.validateConfig(typeof config === 'string' ? config : JSON.stringify(config)) ?? null };
      } catch (err) {
        return { err };
      }
    };
    assert.deepEqual(await validate({ limit: 3 }), { ok: null });
    assert.deepEqual(await validate({ mode: 'throw' }), { err: 'config: limit must be a number' });
    assert.deepEqual(await validate({ mode: 'return' }), { err: 'config: say yes' });
    assert.deepEqual(await validate({ mode: 'empty' }), { err: 'validateConfig refused the config' });
    // The config arrives parsed as the hooks see it: a big integer exact.
    assert.deepEqual(await validate(`{"mode":"big","n":${2n ** 70n}}`), { err: String(2n ** 70n) });
    const promise = await validate({ mode: 'promise' });
    assert.match(promise.err, /^validateConfig returned \{\}; return nothing to accept the config/);
  });
});

describe('natively (@toolgate/guest/testing)', () => {
  test('state works on the test map, as the Rust SDK does off WebAssembly', () => {
    const s = new NativeState();
    assert.equal(s.get('run', 'k'), undefined);
    s.set('run', 'k', 'v');
    assert.equal(s.get('run', 'k'), 'v');
    assert.equal(s.get('tenant', 'k'), undefined, 'scopes are apart');
    assert.equal(s.add('tenant', 'n', 2n), 2n);
    assert.equal(s.add('tenant', 'n', -5n), -3n);
    s.set('run', 'k', 'v', 0n);
    assert.equal(s.get('run', 'k'), undefined, 'a ttl of 0 removes');
    s.delete('tenant', 'n');
    assert.deepEqual(s.entries(), []);
    s.set('run', 'text', 'abc');
    assert.throws(() => s.add('run', 'text', 1n), /state add on "text": not a decimal integer/);
    s.set('run', 'max', String(2n ** 63n - 1n));
    assert.throws(() => s.add('run', 'max', 1n), /outside i64/);
    assert.equal(s.get('run', 'max'), String(2n ** 63n - 1n), 'an add that throws writes nothing');
    s.reset();
    assert.deepEqual(s.entries(), []);
  });

  describe('plugins/js/tool-call-limit.ts', () => {
    let g;
    const event = (toolName, thread, runId = 'run-1') => ({
      runId,
      toolName,
      callId: 'c',
      args: {},
      state: thread === undefined ? {} : { thread_id: thread },
    });
    const EMAIL = { tag: 'skip', val: { content: "Tool call limit exceeded. Do not call 'send_email' again.", isError: false } };
    const ANY = { tag: 'skip', val: { content: 'Tool call limit exceeded. Do not make additional tool calls.', isError: false } };
    const PROCEED = { tag: 'proceed' };

    before(async () => {
      g = await loadGuard(join(PLUGINS, 'tool-call-limit.ts'));
    });

    test('the third send_email of a run is cancelled and not counted; other tools pass', () => {
      g.state.reset();
      g.config = { tool: 'send_email', run_limit: 2 };
      const verdicts = ['send_email', 'search', 'send_email', 'send_email', 'send_email'].map((t) =>
        g.guard.onBeforeToolCall(event(t)),
      );
      assert.deepEqual(verdicts, [PROCEED, PROCEED, PROCEED, EMAIL, EMAIL]);
      assert.deepEqual(g.state.entries(), [['run', 'calls:send_email', '2']]);
    });

    test('the thread limit holds across runs, in the tenant scope', () => {
      g.state.reset();
      g.config = { tool: 'send_email', run_limit: 5, thread_limit: 2, thread_key: 'conv' };
      const call = (thread) => g.guard.onBeforeToolCall({ ...event('send_email'), state: { conv: thread } });
      assert.deepEqual([call('a'), call('a'), call('a'), call('b'), call(7)], [PROCEED, PROCEED, EMAIL, PROCEED, PROCEED]);
      assert.deepEqual(g.state.entries(), [
        ['run', 'calls:send_email', '4'],
        ['tenant', 'thread:a:calls:send_email', '2'],
        ['tenant', 'thread:b:calls:send_email', '1'],
        ['tenant', 'thread:7:calls:send_email', '1'],
      ]);
      // No conversation id in the state: the thread limit does not apply.
      assert.deepEqual(g.guard.onBeforeToolCall(event('send_email')), PROCEED);
    });

    test('without a tool every call counts, with its own message', () => {
      g.state.reset();
      g.config = { run_limit: 1 };
      assert.deepEqual([g.guard.onBeforeToolCall(event('a')), g.guard.onBeforeToolCall(event('b'))], [PROCEED, ANY]);
      assert.deepEqual(g.state.entries(), [['run', 'calls:*', '1']]);
      g.config = { run_limit: 0 };
      assert.deepEqual(g.guard.onBeforeToolCall(event('a')), ANY);
    });

    test('validateConfig refuses with the Rust guard\'s messages', () => {
      const cases = [
        [{ run_limit: 2 }, undefined],
        [{ thread_limit: 2n ** 63n - 1n }, undefined],
        [{}, 'config: set run_limit, thread_limit or both'],
        [{ tool: 'send_email' }, 'config: set run_limit, thread_limit or both'],
        [{ run_limit: -1 }, 'config: run_limit must be 0 or more'],
        [{ run_limit: 1, thread_limit: -3 }, 'config: thread_limit must be 0 or more'],
        [{ run_limit: 2, foo: 1 }, 'config: unknown field `foo`, expected one of `tool`, `run_limit`, `thread_limit`, `thread_key`'],
        [{ run_limit: '2' }, 'config: invalid type: string "2", expected i64'],
        [{ run_limit: 'a"b\n' }, 'config: invalid type: string "a\\"b\\n", expected i64'],
        [{ run_limit: 2.5 }, 'config: invalid number'],
        [{ run_limit: true }, 'config: invalid type: boolean `true`, expected i64'],
        [{ run_limit: [1] }, 'config: invalid type: sequence, expected i64'],
        [{ run_limit: { a: 1 } }, 'config: invalid type: map, expected i64'],
        [{ tool: 5, run_limit: 1 }, 'config: invalid type: number, expected a string'],
        [{ run_limit: 1, thread_key: false }, 'config: invalid type: boolean `false`, expected a string'],
      ];
      for (const [config, want] of cases) assert.equal(g.validateConfig(config), want, JSON.stringify(String(config)));
    });

    test('a config that slipped past the check throws in the hook (a fault)', () => {
      g.config = { run_limit: 'x' };
      assert.throws(() => g.guard.onBeforeToolCall(event('a')), /config: invalid type: string "x", expected i64/);
    });
  });
});

describe('plugins/js/query-limit.ts, natively', () => {
  const dispatch = (sql) => ({
    runId: 'r',
    iterationIndex: 0,
    nodeName: 'react',
    callId: 'c',
    toolName: 'run_query',
    args: { sql, db: 'main' },
    availableTools: ['run_query'],
    state: {},
  });

  test('validateConfig accepts a limit and nothing else', async () => {
    const g = await loadGuard(join(PLUGINS, 'query-limit.ts'));
    assert.equal(g.validateConfig({}), undefined);
    assert.equal(g.validateConfig({ limit: 10 }), undefined);
    assert.equal(g.validateConfig({ limit: 0 }), 'config: limit must be an integer from 1 to 1000000000, not 0');
    assert.equal(g.validateConfig({ limit: '5' }), 'config: limit must be an integer from 1 to 1000000000, not "5"');
    assert.equal(g.validateConfig({ limit: 2.5 }), 'config: limit must be an integer from 1 to 1000000000, not 2.5');
    assert.equal(g.validateConfig({ rows: 5 }), 'config: unknown key `rows`; the only key is `limit`');
  });

  test('the limit configured is the one appended (100 by default)', async () => {
    const g = await loadGuard(join(PLUGINS, 'query-limit.ts'));
    assert.deepEqual(g.guard.onToolCallDispatch(dispatch('select 1;')), {
      toolName: 'run_query',
      args: { sql: 'select 1 LIMIT 100', db: 'main' },
    });
    g.config = { limit: 7 };
    assert.equal(g.guard.onToolCallDispatch(dispatch('select 1 \n')).args.sql, 'select 1 LIMIT 7');
  });
});
