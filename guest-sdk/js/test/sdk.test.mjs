// The SDK end to end: a guard with all four hooks is built into a component, which runs in
// Node (jco transpile) on a fresh instance per call against a fake host.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildGuard, componentInterfaces } from '../lib/build.mjs';
import { escapeWitKeywords, worldFor } from '../lib/wit.mjs';
import { cleanup, loadComponent, tempDir } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const SDK = join(HERE, '..');
const BIN = join(SDK, 'bin', 'build.mjs');

after(cleanup);

const steeringEvent = (mode, args = { sql: 'select 1' }) => ({
  runId: 'run-1',
  toolName: 'run_query',
  callId: 'call-1',
  args: JSON.stringify(args),
  state: JSON.stringify({ mode }),
});

describe('a guard implementing every hook', () => {
  let built;
  let instance;
  let work;

  before(async () => {
    work = await tempDir('toolgate-js-sdk-');
    built = await buildGuard(join(HERE, 'fixtures', 'all-seams.ts'), join(work, 'all-seams.wasm'));
    instance = await loadComponent(join(work, 'all-seams.wasm'));
  });

  test('exports exactly the four seams and imports nothing but the contract', async () => {
    const { imports, exports } = await componentInterfaces(await readFile(join(work, 'all-seams.wasm')));
    assert.deepEqual([...exports].sort(), [
      'toolgate:guard/result@0.3.0',
      'toolgate:guard/rewrite@0.3.0',
      'toolgate:guard/routing@0.3.0',
      'toolgate:guard/steering@0.3.0',
    ]);
    // No state, no http, no config: a guard imports and exports only what it uses.
    assert.deepEqual([...imports].sort(), ['toolgate:guard/host@0.3.0', 'toolgate:guard/types@0.3.0']);
    assert.equal(built.world, 'js-guard-routing-rewrite-steering-result');
    assert.equal(built.stringLowering, 'native');
    assert.equal(built.config, false);
    assert.equal(built.state, false);
  });

  test('steering verdict helpers map to the WIT verdict', async () => {
    const run = async (mode) => (await instance()).exports.steering.beforeToolCall(steeringEvent(mode));
    assert.deepEqual(await run('steer'), { tag: 'skip', val: { content: 'no run_query', isError: true } });
    assert.deepEqual(await run('cancel'), { tag: 'skip', val: { content: 'cancelled', isError: false } });
    assert.deepEqual(await run('skip-false'), { tag: 'skip', val: { content: 'benign', isError: false } });
    assert.deepEqual(await run('skip-default'), { tag: 'skip', val: { content: 'plain skip', isError: undefined } });
    assert.deepEqual(await run('proceed'), { tag: 'proceed' });
    assert.deepEqual(await run('nothing'), { tag: 'proceed' });
  });

  test('returned strings reach the host as UTF-8 (a lone surrogate as U+FFFD)', async () => {
    const v = (await instance()).exports.steering.beforeToolCall(steeringEvent('unicode'));
    assert.deepEqual(v, { tag: 'skip', val: { content: 'é😀 \ufffd end', isError: true } });
  });

  test('events arrive parsed, with the other fields intact', async () => {
    const args = { sql: 'select "x"', n: [1, { deep: null }], u: 'é😀' };
    const v = (await instance()).exports.steering.beforeToolCall({ ...steeringEvent('echo'), args: JSON.stringify(args) });
    assert.equal(v.tag, 'skip');
    assert.deepEqual(JSON.parse(v.val.content), { runId: 'run-1', callId: 'call-1', args });
  });

  test('config and log reach the host; console goes to the log', async () => {
    const a = await instance({ limit: 5, name: 'x' });
    assert.deepEqual(JSON.parse(a.exports.steering.beforeToolCall(steeringEvent('config')).val.content), {
      limit: 5,
      name: 'x',
    });
    // Nothing is kept between calls (a snapshot must not freeze its warm-up's config).
    const config = { limit: 1 };
    const c = await instance(config);
    assert.equal(JSON.parse(c.exports.steering.beforeToolCall(steeringEvent('config')).val.content).limit, 1);
    config.limit = 2;
    assert.equal(JSON.parse(c.exports.steering.beforeToolCall(steeringEvent('config')).val.content).limit, 2);
    const b = await instance();
    assert.deepEqual(b.exports.steering.beforeToolCall(steeringEvent('log')), { tag: 'proceed' });
    assert.deepEqual(b.logs, [
      ['warn', 'args {"sql":"select 1"}'],
      ['info', 'console says {"n":1}'],
    ]);
  });

  test('a malformed verdict or a Promise traps, after logging why', async () => {
    for (const [mode, why] of [
      ['bad-verdict', /beforeToolCall returned \{"tag":"maybe"\}/],
      ['promise', /returned a Promise; hooks must be synchronous/],
    ]) {
      const { exports, logs } = await instance();
      assert.throws(() => exports.steering.beforeToolCall(steeringEvent(mode)));
      assert.equal(logs.length, 1, mode);
      assert.equal(logs[0][0], 'error');
      assert.match(logs[0][1], why);
    }
  });

  test('rewrite serialises args; nothing means pass through; bad args trap', async () => {
    const ev = (mode) => ({
      runId: 'r',
      iterationIndex: 3,
      nodeName: 'react',
      callId: 'c',
      toolName: 'search',
      args: JSON.stringify({ q: 'cats é😀', big: 'x'.repeat(100_000) }),
      availableTools: ['search', 'search_v2'],
      state: JSON.stringify({ mode }),
    });
    const r = (await instance()).exports.rewrite.dispatch(ev('rewrite'));
    assert.equal(r.toolName, 'search_v2');
    assert.deepEqual(JSON.parse(r.args), { q: 'cats é😀', big: 'x'.repeat(100_000), iteration: 3 });
    assert.equal((await instance()).exports.rewrite.dispatch(ev('none')), undefined);
    for (const mode of ['throw', 'array-args']) {
      const { exports, logs } = await instance();
      assert.throws(() => exports.rewrite.dispatch(ev(mode)));
      assert.match(logs[0][1], mode === 'throw' ? /dispatch failed: Error: dispatch exploded/ : /return rewrite\(toolName, argsObject\)/);
    }
  });

  test('routing returns the names to keep, or nothing', async () => {
    const ev = (mode) => ({
      runId: 'r',
      mode: 'enforce',
      intentLabel: 'db',
      totalTools: 3,
      narrowedToolNames: ['run_query', 'drop_table', 'search'],
      savedTokensEstimate: 0,
      tools: [],
      query: undefined,
      state: JSON.stringify({ mode }),
    });
    assert.deepEqual((await instance()).exports.routing.narrow(ev('narrow')), ['run_query', 'search']);
    assert.equal((await instance()).exports.routing.narrow(ev('none')), undefined);
  });

  test('result hook observes parsed results', async () => {
    const ev = (mode, result) => ({
      runId: 'r',
      toolName: 't',
      result: JSON.stringify(result),
      callId: 'c',
      deferred: false,
      isError: true,
      state: JSON.stringify({ mode }),
    });
    const a = await instance();
    assert.equal(a.exports.result.onResult(ev('ok', { rows: [1] })), undefined);
    assert.deepEqual(a.logs, [['info', 'result {"rows":[1]} deferred=false error=true']]);
    const b = await instance();
    assert.throws(() => b.exports.result.onResult(ev('throw', null)));
    assert.match(b.logs[1][1], /onResult failed: TypeError: onResult exploded/);
  });
});

describe("a guard naming its hooks as symfonic does", () => {
  let work;
  let instance;

  before(async () => {
    // Built by the CLI, in a process of its own: componentize-js sees one work directory
    // per process.
    work = await tempDir('toolgate-js-named-');
    const out = join(work, 'named-hooks.wasm');
    const p = spawnSync(process.execPath, [BIN, 'build', join(HERE, 'fixtures', 'named-hooks.ts'), '-o', out], {
      encoding: 'utf8',
    });
    assert.equal(p.status, 0, p.stderr);
    instance = await loadComponent(out);
  });

  test('every seam is exported and reaches its hook', async () => {
    const { exports: seams } = await componentInterfaces(await readFile(join(work, 'named-hooks.wasm')));
    assert.equal(seams.length, 5);
    assert.ok(seams.includes('toolgate:guard/response@0.3.0'), seams.join(', '));
    const { exports, logs } = await instance();
    const routing = {
      runId: 'r',
      mode: 'enforce',
      intentLabel: 'db',
      totalTools: 2,
      narrowedToolNames: ['a', 'b'],
      savedTokensEstimate: 0,
      tools: [],
      query: undefined,
      state: '{}',
    };
    assert.deepEqual(exports.routing.narrow(routing), ['a']);
    const dispatch = {
      runId: 'r',
      iterationIndex: 0,
      nodeName: 'react',
      callId: 'c',
      toolName: 't',
      args: '{}',
      availableTools: ['search'],
      state: '{"mode":"x"}',
    };
    const r = exports.rewrite.dispatch(dispatch);
    assert.equal(r.toolName, 'search');
    assert.deepEqual(JSON.parse(r.args), { was: 't', mode: 'x' });
    assert.deepEqual(exports.steering.beforeToolCall(steeringEvent('x')), {
      tag: 'skip',
      val: { content: 'no run_query', isError: true },
    });
    const result = { runId: 'r', toolName: 't', result: '[1]', callId: 'c', deferred: false, isError: false, state: '{}' };
    assert.equal(exports.result.onResult(result), undefined);
    assert.deepEqual(logs, [['info', 'saw t [1]']]);
  });

  test('the response hook answers a string, or nothing to keep the content; anything else traps', async () => {
    const { exports, logs } = await instance();
    const render = (content) =>
      exports.response.render({
        runId: 'r',
        iterationIndex: 2,
        model: 'm',
        nodeName: 'react',
        originalContent: 'orig',
        content,
        state: '{"mode":"x"}',
      });
    assert.equal(render('now'), 'now|orig|m|2|x');
    assert.equal(render('keep'), undefined);
    assert.throws(() => render('bad'));
    assert.match(logs[0][1], /onResponseRender returned 42; return the answer to give \(a string\) or nothing/);
  });

  test('a malformed reply names the hook as the guard wrote it', async () => {
    const { exports, logs } = await instance();
    assert.throws(() => exports.steering.beforeToolCall(steeringEvent('bad')));
    assert.match(logs[0][1], /onBeforeToolCall returned \{"tag":"maybe"\}/);
  });
});

describe('the build refuses broken guards before compiling', () => {
  const cases = [
    ['typo.ts', `import { defineGuard } from '@toolgate/guest';\nexport default defineGuard({ beforeToolcall() {} } as never);\n`, /unknown hook "beforeToolcall"/],
    ['plain.js', `export default { dispatch: 1 };\n`, /every hook must be a function/],
    ['empty.js', `export default {};\n`, /implements no hook/],
    ['nodefault.js', `export const x = 1;\n`, /must export default a guard/],
    ['fs.js', `import { readFileSync } from 'fs';\nexport default { onResult() { readFileSync('/x'); } };\n`, /Could not resolve "fs"|imports fs/],
    ['syntax.ts', `export default {\n`, /cannot bundle .*syntax\.ts/],
    ['both.js', `export default { onBeforeToolCall() {}, beforeToolCall() {} };\n`, /implements both onBeforeToolCall and beforeToolCall/],
    ['check-only.js', `export default { validateConfig() {} };\n`, /implements no hook/],
    ['check-not-fn.js', `export default { onBeforeToolCall() {}, validateConfig: 'yes' };\n`, /validateConfig must be a function/],
  ];
  for (const [name, source, why] of cases) {
    test(name, async () => {
      const dir = await tempDir('toolgate-js-bad-');
      await writeFile(join(dir, name), source);
      const p = spawnSync(process.execPath, [BIN, 'build', join(dir, name), '-o', join(dir, 'out.wasm')], {
        encoding: 'utf8',
      });
      assert.equal(p.status, 1, p.stderr);
      assert.match(p.stderr, why);
    });
  }
});

describe('contract handling', () => {
  test('the SDK, its test guard and the example plugins typecheck', () => {
    const tsc = join(SDK, 'node_modules', 'typescript', 'bin', 'tsc');
    for (const project of [join(SDK, 'tsconfig.json'), join(SDK, '..', '..', 'plugins', 'js', 'tsconfig.json')]) {
      const p = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
      assert.equal(p.status, 0, `${project}: ${p.stdout}${p.stderr}`);
    }
  });

  test('the generated types match the WIT', () => {
    const p = spawnSync(process.execPath, [join(SDK, 'scripts', 'gen-types.mjs'), '--check'], { encoding: 'utf8' });
    assert.equal(p.status, 0, p.stderr);
  });

  test('keywords used as names are escaped, escaped ones left alone', () => {
    const wit = 'interface result {\n  f: func();\n}\nrecord r {\n    result: json,\n}\nworld w {\n    export result;\n    export %result;\n}\n';
    assert.equal(
      escapeWitKeywords(wit),
      'interface %result {\n  f: func();\n}\nrecord r {\n    %result: json,\n}\nworld w {\n    export %result;\n    export %result;\n}\n',
    );
  });

  test('the world imports host (and state and http when used) and exports exactly the seams (and config)', () => {
    // The contract's own <seam>-guard worlds import state and http: never used as they are.
    const one = worldFor(['beforeToolCall']);
    assert.equal(one.worldName, 'js-guard-steering');
    assert.match(one.extraFile.text, /^package toolgate:guard@0\.3\.0;$/m);
    assert.match(one.extraFile.text, /world js-guard-steering \{\n    import host;\n    export %steering;\n\}/);
    const w = worldFor(['onResult', 'dispatch']);
    assert.equal(w.worldName, 'js-guard-rewrite-result');
    assert.match(w.extraFile.text, /world js-guard-rewrite-result \{\n    import host;\n    export %rewrite;\n    export %result;\n\}/);
    const s = worldFor(['onBeforeToolCall'], { state: true, config: true });
    assert.equal(s.worldName, 'js-guard-steering-config-state');
    assert.match(s.extraFile.text, /\{\n    import host;\n    import state;\n    export %steering;\n    export config;\n\}/);
    const h = worldFor(['onBeforeToolCall'], { state: true, http: true });
    assert.equal(h.worldName, 'js-guard-steering-state-http');
    assert.match(h.extraFile.text, /\{\n    import host;\n    import state;\n    import http;\n    export %steering;\n\}/);
    assert.throws(() => worldFor([]), /at least one hook/);
    assert.equal(worldFor(['onToolResult', 'onToolCallDispatch']).worldName, 'js-guard-rewrite-result');
  });
});
