// The http API: in a built component (run in Node through jco, against a fake host `send`),
// and natively (`@toolgate/guest/testing`), on the example pii-check.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildGuard, componentInterfaces } from '../lib/build.mjs';
import { loadGuard } from '../lib/testing.mjs';
import { cleanup, loadComponent, tempDir } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const PII_CHECK = join(HERE, '..', '..', '..', 'plugins', 'js', 'pii-check.ts');
const enc = (text) => new TextEncoder().encode(text);
const dec = (bytes) => new TextDecoder().decode(bytes);

after(cleanup);

const steering = (state, toolName = 'probe', args = {}) => ({
  runId: 'run-1',
  toolName,
  callId: 'call-1',
  args: JSON.stringify(args),
  state: JSON.stringify(state),
});

describe('a guard using http, built', () => {
  let built;
  let instance;
  let work;

  before(async () => {
    work = await tempDir('toolgate-js-http-');
    built = await buildGuard(join(HERE, 'fixtures', 'http-client.ts'), join(work, 'http-client.wasm'));
    instance = await loadComponent(join(work, 'http-client.wasm'));
  });

  /** Runs `op` with `answer` as the host's response; returns [verdict, requests seen, logs]. */
  const run = async (op, answer) => {
    const sent = [];
    const send = (request) => {
      sent.push({ ...request, body: dec(request.body) });
      return answer;
    };
    const { exports, logs } = await instance({}, undefined, send);
    return [exports.steering.beforeToolCall(steering({ op })), sent, logs];
  };

  test('imports http, and only what it uses', async () => {
    const { imports, exports } = await componentInterfaces(await readFile(join(work, 'http-client.wasm')));
    assert.deepEqual(exports, ['toolgate:guard/steering@0.3.0']);
    assert.deepEqual([...imports].sort(), [
      'toolgate:guard/host@0.3.0',
      'toolgate:guard/http@0.3.0',
      'toolgate:guard/types@0.3.0',
    ]);
    assert.equal(built.world, 'js-guard-steering-http');
    assert.deepEqual([built.http, built.state, built.config], [true, false, false]);
  });

  test('send: the request reaches the host as the contract has it; the response is read back', async () => {
    const answer = { status: 201, headers: [['content-type', 'text/plain']], body: enc('créé') };
    const [verdict, sent] = await run('send', answer);
    assert.deepEqual(sent, [{ method: 'PUT', url: 'http://classifier.test/v1/put', headers: [['x-one', '1']], body: 'héllo' }]);
    assert.deepEqual(verdict, { tag: 'skip', val: { content: '201 true text/plain créé', isError: true } });
  });

  test('bytes both ways; repeated headers kept; any status answered; invalid UTF-8 replaced', async () => {
    const sent = [];
    const send = (request) => {
      sent.push(request);
      return { status: 503, headers: [], body: new Uint8Array([0xff]) };
    };
    const { exports } = await instance({}, undefined, send);
    const verdict = exports.steering.beforeToolCall(steering({ op: 'bytes' }));
    assert.deepEqual(verdict.val.content, '503 false 255 "\ufffd"');
    assert.deepEqual(sent[0].headers, [['x-two', '2'], ['x-two', '3']]);
    assert.deepEqual([...sent[0].body], [0, 255]);
  });

  test('get and postJson; json() keeps big integers exact', async () => {
    const [got, sentGet] = await run('get', { status: 200, headers: [], body: enc('{"a":[1,"x"]}') });
    assert.equal(got.val.content, '{"a":[1,"x"]}');
    assert.deepEqual(sentGet, [
      { method: 'GET', url: 'http://classifier.test/v1/get?q=1', headers: [['accept', 'application/json']], body: '' },
    ]);
    const [posted, sentPost] = await run('post-json', { status: 200, headers: [], body: enc('{"pii": true}') });
    assert.equal(posted.val.content, 'boolean true');
    assert.deepEqual(sentPost, [
      {
        method: 'POST',
        url: 'http://classifier.test/v1',
        headers: [['content-type', 'application/json']],
        body: `{"text":"a@b.c","big":${2n ** 64n}}`,
      },
    ]);
  });

  test('a body that is not JSON, or a misuse, throws: the call faults', async () => {
    const answer = { status: 200, headers: [], body: enc('<html>') };
    await assert.rejects(async () => run('not-json', answer));
    const sent = [];
    const { exports, logs } = await instance({}, undefined, (r) => sent.push(r));
    assert.throws(() => exports.steering.beforeToolCall(steering({ op: 'bad-body' })));
    assert.match(logs[0][1], /TypeError: http.send: body must be a string or a Uint8Array, not number/);
    assert.deepEqual(sent, [], 'nothing was sent');
  });

  test('what the host traps on stops the hook: no verdict', async () => {
    const { exports } = await instance({}, undefined, () => {
      throw new Error('http-denied');
    });
    assert.throws(() => exports.steering.beforeToolCall(steering({ op: 'get' })), /http-denied/);
  });
});

describe('natively (@toolgate/guest/testing), the responder', () => {
  test('answers as the host would; what it returns is checked', async () => {
    const g = await loadGuard(join(HERE, 'fixtures', 'http-client.ts'));
    const run = (op) => g.guard.onBeforeToolCall({ runId: 'r', toolName: 't', callId: 'c', args: {}, state: { op } });
    g.respondWith(() => ({ status: 202, headers: { 'Content-Type': 'text/plain' }, body: 'créé' }));
    assert.equal(run('send').val.content, '202 true text/plain créé');
    const [request] = g.requests;
    assert.deepEqual([request.method, request.url, request.headers, request.text()], ['PUT', 'http://classifier.test/v1/put', [['x-one', '1']], 'héllo']);
    g.respondWith(() => ({ json: { a: [1] } }));
    assert.equal(run('get').val.content, '{"a":[1]}');
    g.respondWith(() => ({ status: 503, body: new Uint8Array([0xff]) }));
    assert.equal(run('bytes').val.content, '503 false 255 "\ufffd"');
    g.respondWith(() => ({ body: [1, 2] }));
    assert.throws(() => run('get'), /the responder's body for GET http:\/\/classifier.test\/v1\/get\?q=1 is neither a string nor a Uint8Array/);
    g.respondWith(() => ({ status: 42 }));
    assert.throws(() => run('get'), /the responder's status 42 is not an HTTP status/);
    assert.equal(g.requests.length, 5);
  });
});

describe('natively (@toolgate/guest/testing), the example pii-check', () => {
  const URL = 'http://pii.test/v1/classify';
  let g;

  before(async () => {
    g = await loadGuard(PII_CHECK, { config: { url: URL } });
    g.respondWith((request) => ({ json: { pii: request.json().text.includes('@') } }));
  });

  const ask = (toolName, args) => g.guard.onBeforeToolCall({ runId: 'r', toolName, callId: 'c', args, state: {} });

  test('asks the classifier about send_email, and steers on personal data', () => {
    const first = g.requests.length;
    const steered = ask('send_email', { to: 'team', body: 'write to jane@example.com' });
    assert.equal(steered.tag, 'skip');
    assert.equal(steered.val.isError, true);
    assert.match(steered.val.content, /personal data/);
    assert.equal(ask('send_email', { to: 'team', body: 'the report is attached' }).tag, 'proceed');
    // Without a `body`, the args as JSON text are classified.
    assert.equal(ask('send_email', { to: 'jane@example.com' }).tag, 'skip');
    // Another tool is not asked about.
    assert.equal(ask('search', { q: 'a@b.c' }).tag, 'proceed');
    const sent = g.requests.slice(first);
    assert.deepEqual(
      sent.map((r) => [r.method, r.url, r.headers, r.text()]),
      [
        ['POST', URL, [['content-type', 'application/json']], '{"text":"write to jane@example.com"}'],
        ['POST', URL, [['content-type', 'application/json']], '{"text":"the report is attached"}'],
        ['POST', URL, [['content-type', 'application/json']], '{"text":"{\\"to\\":\\"jane@example.com\\"}"}'],
      ],
    );
  });

  test('an answer that is not {"pii": true|false} faults, naming the classifier', async () => {
    const other = await loadGuard(PII_CHECK, { config: { url: URL } });
    for (const answer of [{ status: 500, body: 'down' }, { json: { pii: 'yes' } }, { body: 'no' }]) {
      other.respondWith(() => answer);
      assert.throws(() => other.guard.onBeforeToolCall({ runId: 'r', toolName: 'send_email', callId: 'c', args: {}, state: {} }),
        /the classifier at http:\/\/pii.test\/v1\/classify answered \d+ ".*", not \{"pii": true\|false\}/);
    }
  });

  test('with no responder a request throws, naming it (a real call would trap)', async () => {
    const bare = await loadGuard(PII_CHECK, { config: { url: URL } });
    assert.throws(() => bare.guard.onBeforeToolCall({ runId: 'r', toolName: 'send_email', callId: 'c', args: {}, state: {} }),
      /POST http:\/\/pii.test\/v1\/classify: no responder set \(respondWith\)/);
    assert.equal(bare.requests.length, 1);
  });

  test('validateConfig: a url is required, http or https; the Rust guard\'s messages', () => {
    assert.equal(g.validateConfig({ url: URL, tool: 'send_mail' }), undefined);
    assert.equal(g.validateConfig({}), 'config: missing field `url`');
    assert.equal(g.validateConfig({ url: 'ftp://x' }), 'config: url must be an http:// or https:// URL, not "ftp://x"');
    assert.equal(g.validateConfig({ url: 5 }), 'config: invalid type: number, expected a string');
    assert.equal(g.validateConfig({ url: URL, urls: [] }), 'config: unknown field `urls`, expected `url` or `tool`');
  });
});
