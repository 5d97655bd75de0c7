// Lifecycle events: a guard's lifecycle hooks (onLlmEnd, ...) are built into the `observe`
// export, subscribed to exactly the hooks it implements; each event reaches its hook with its
// JSON fields parsed; a hook that throws traps (the host counts the fault) and the guard's
// decisions still answer. Each guard is built by the CLI in a process of its own.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { componentInterfaces } from '../lib/build.mjs';
import { worldFor } from '../lib/wit.mjs';
import { FakeStore, cleanup, loadComponent, tempDir } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const BIN = join(HERE, '..', 'bin', 'build.mjs');

after(cleanup);

async function built(fixture) {
  const work = await tempDir('toolgate-js-observe-');
  const out = join(work, fixture.replace(/\.ts$/, '.wasm'));
  const p = spawnSync(process.execPath, [BIN, 'build', join(HERE, 'fixtures', fixture), '-o', out], { encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  return { out, instance: await loadComponent(out) };
}

const llmEnd = (usage, runId = 'run-1') => ({
  tag: 'llm-end',
  val: {
    model: 'm',
    output: 'o',
    usage: JSON.stringify(usage),
    runId,
    nodeName: 'react',
    pricingUnknown: false,
    durationMs: 1.5,
    startedAtUtc: '',
    iterationIndex: 0,
    turnIndex: 0,
  },
});

const steering = (toolName = 'search') => ({ runId: 'run-1', toolName, callId: 'c', args: '{}', state: '{}' });

/** The flags set in an `event-kinds` value. */
const subscribed = (flags) => Object.keys(flags).filter((k) => flags[k]).sort();

describe('a TypeScript token budget (onLlmEnd, onAgentStart, steering, routing)', () => {
  let out;
  let instance;

  before(async () => {
    ({ out, instance } = await built('token-budget.ts'));
  });

  test('exports observe beside its seams, subscribed to exactly the hooks it implements', async () => {
    const { exports } = await componentInterfaces(await readFile(out));
    assert.deepEqual([...exports].sort(), [
      'toolgate:guard/observe@0.3.0',
      'toolgate:guard/routing@0.3.0',
      'toolgate:guard/steering@0.3.0',
    ]);
    const { exports: e } = await instance();
    assert.deepEqual(subscribed(e.observe.subscriptions()), ['agentStart', 'llmEnd']);
  });

  test('usage arrives parsed and is counted into run state; over budget, calls are cancelled and tools hidden', async () => {
    const store = new FakeStore();
    const call = async (f) => f((await instance({ max_tokens: 100 }, store)).exports);
    assert.deepEqual(await call((e) => e.steering.beforeToolCall(steering())), { tag: 'proceed' });
    await call((e) => e.observe.observe(llmEnd({ total_tokens: 60, input_tokens: 1 })));
    await call((e) => e.observe.observe(llmEnd({ input_tokens: 20, output_tokens: 10 })));
    assert.deepEqual(await call((e) => e.steering.beforeToolCall(steering())), { tag: 'proceed' });
    await call((e) => e.observe.observe(llmEnd({ prompt_tokens: 9, completion_tokens: 1 })));
    assert.deepEqual(store.values.get('run/tokens'), '100');
    assert.deepEqual(await call((e) => e.steering.beforeToolCall(steering())), {
      tag: 'skip',
      val: { content: 'Token budget of 100 exceeded. Answer with what you have.', isError: false },
    });
    const routing = {
      runId: 'run-1', mode: 'enforce', intentLabel: 'i', totalTools: 2, narrowedToolNames: ['a', 'b'],
      savedTokensEstimate: 0, tools: [], query: undefined, state: '{}',
    };
    assert.deepEqual(await call((e) => e.routing.narrow(routing)), []);
    // The adds reached the host as whole numbers, with no expiry.
    assert.deepEqual(store.calls.filter((c) => c[0] === 'add').map((c) => c[3]), [60n, 30n, 10n]);
  });

  test('a second hook is reached with its own event', async () => {
    const { exports, logs } = await instance();
    exports.observe.observe({ tag: 'agent-start', val: { query: 'what is é?', runId: 'run-9' } });
    assert.deepEqual(logs, [['info', 'run run-9 asks: what is é?']]);
  });
});

describe('a hostile observer: every lifecycle hook throws', () => {
  let instance;

  before(async () => {
    ({ instance } = await built('hostile-observer.ts'));
  });

  test('each observation traps after logging which hook failed; decisions still answer', async () => {
    const { exports } = await instance();
    assert.deepEqual(subscribed(exports.observe.subscriptions()), ['fabricationDetected', 'llmEnd', 'nodeError']);
    const events = [
      [llmEnd({ total_tokens: 1 }), /onLlmEnd failed: Error: onLlmEnd exploded on run-1/],
      [{ tag: 'node-error', val: { nodeName: 'n', runId: 'r', error: 'e', errorType: 'ValueError' } }, /onNodeError failed: "a thrown string"/],
      [
        {
          tag: 'fabrication-detected',
          val: {
            runId: 'r', mode: 'observe', actionTaken: 'observed', findings: '[{"claim":"x"},{"claim":"y"}]',
            refuseThreshold: 0.5, maxFindingConfidence: 0.9, originalDraftPreview: 'd', replacementPreview: undefined,
            previewTruncated: false,
          },
        },
        /onFabricationDetected failed: RangeError: 2 findings/,
      ],
    ];
    for (const [event, logged] of events) {
      const { exports: e, logs } = await instance();
      assert.throws(() => e.observe.observe(event));
      assert.equal(logs.length, 1, JSON.stringify(logs));
      assert.equal(logs[0][0], 'error');
      assert.match(logs[0][1], logged);
    }
    assert.deepEqual(exports.steering.beforeToolCall(steering('forbidden')), { tag: 'skip', val: { content: 'no', isError: true } });
    assert.deepEqual((await instance()).exports.steering.beforeToolCall(steering()), { tag: 'proceed' });
  });
});

describe('the world of an observer', () => {
  test('exports observe (and only its seams) when the guard implements a lifecycle hook', () => {
    const { worldName, extraFile } = worldFor(['onLlmEnd', 'onBeforeToolCall'], { state: true });
    assert.equal(worldName, 'js-guard-steering-observe-state');
    assert.match(extraFile.text, /export %observe;/);
    assert.doesNotMatch(worldFor(['onBeforeToolCall']).extraFile.text, /observe/);
  });
});
