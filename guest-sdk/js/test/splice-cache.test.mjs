// The splice cache (lib/splice-cache.mjs): a world's splice is done once, read back the same,
// and a cache that is not private, or an entry that is not what was written, is never used.

import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { cacheDir, cachedSplice } from '../lib/splice-cache.mjs';
import { cleanup, tempDir } from './harness.mjs';

after(cleanup);

/** A stand-in for the splicer: counts its calls, derives its result from its arguments. */
function countingSplice() {
  const calls = [];
  const splice = (engine, features, witWorld, witPath, worldName, debug) => {
    calls.push(worldName);
    const wit = readFileSync(join(witPath, 'guard.wit'), 'utf8');
    return {
      wasm: new Uint8Array([...engine, wit.length, features.length]),
      jsBindings: `// bindings of ${worldName} (${debug})`,
      exports: [['steering#on-before-tool-call', { params: ['i32'], ret: 'i32', retptr: false, retsize: 4, paramptr: false }]],
      imports: [['toolgate:guard/host', 'log', 2]],
    };
  };
  return { splice, calls };
}

async function witDir(text) {
  const dir = await tempDir('toolgate-splice-');
  writeFileSync(join(dir, 'guard.wit'), text);
  return dir;
}

const ENGINE = new Uint8Array([0, 97, 115, 109]);

test('a world is spliced once; the kept result is the same', async () => {
  const dir = join(await tempDir('toolgate-splice-'), 'cache');
  const wit = await witDir('package toolgate:guard@0.3.0;');
  const { splice, calls } = countingSplice();
  const first = cachedSplice(splice, { version: '1', dir })(ENGINE, ['stdio'], undefined, wit, 'w', false);
  const again = cachedSplice(splice, { version: '1', dir })(ENGINE, ['stdio'], undefined, wit, 'w', false);
  assert.deepEqual(calls, ['w']);
  assert.deepEqual({ ...again, wasm: [...again.wasm] }, { ...first, wasm: [...first.wasm] });
  assert.equal(readdirSync(join(dir, 'js-splice')).length, 2);
});

test('another world, WIT text, feature set or splicer version is spliced again', async () => {
  const dir = join(await tempDir('toolgate-splice-'), 'cache');
  const wit = await witDir('package toolgate:guard@0.3.0;');
  const other = await witDir('package toolgate:guard@0.3.0; // changed');
  const { splice, calls } = countingSplice();
  const run = (version, features, path, world) =>
    cachedSplice(splice, { version, dir })(ENGINE, features, undefined, path, world, false);
  run('1', ['stdio'], wit, 'w');
  run('1', ['stdio'], wit, 'w2');
  run('1', ['stdio'], other, 'w');
  run('1', [], wit, 'w');
  run('2', ['stdio'], wit, 'w');
  run('1', ['stdio'], wit, 'w');
  assert.equal(calls.length, 5);
});

test('an entry whose engine is not what was written is spliced again and rewritten', async () => {
  const dir = join(await tempDir('toolgate-splice-'), 'cache');
  const wit = await witDir('package toolgate:guard@0.3.0;');
  const { splice, calls } = countingSplice();
  const good = cachedSplice(splice, { version: '1', dir })(ENGINE, [], undefined, wit, 'w', false);
  const wasmFile = readdirSync(join(dir, 'js-splice')).find((n) => n.endsWith('.wasm'));
  writeFileSync(join(dir, 'js-splice', wasmFile), new Uint8Array([1, 2, 3]), { mode: 0o600 });
  const out = cachedSplice(splice, { version: '1', dir })(ENGINE, [], undefined, wit, 'w', false);
  assert.deepEqual([...out.wasm], [...good.wasm]);
  assert.equal(calls.length, 2);
  assert.deepEqual([...readFileSync(join(dir, 'js-splice', wasmFile))], [...good.wasm]);
});

test('an entry whose record is not whole is spliced again', async () => {
  const dir = join(await tempDir('toolgate-splice-'), 'cache');
  const wit = await witDir('package toolgate:guard@0.3.0;');
  const { splice, calls } = countingSplice();
  cachedSplice(splice, { version: '1', dir })(ENGINE, [], undefined, wit, 'w', false);
  const jsonFile = readdirSync(join(dir, 'js-splice')).find((n) => n.endsWith('.json'));
  const path = join(dir, 'js-splice', jsonFile);
  const { jsBindings, ...rest } = JSON.parse(readFileSync(path, 'utf8'));
  for (const broken of [JSON.stringify(rest), '{"wasmSha256": 1', 'null']) {
    writeFileSync(path, broken, { mode: 0o600 });
    const out = cachedSplice(splice, { version: '1', dir })(ENGINE, [], undefined, wit, 'w', false);
    assert.equal(out.jsBindings, jsBindings);
  }
  assert.equal(calls.length, 4);
});

test('a cache its group or others may write is neither read nor written', async () => {
  const dir = join(await tempDir('toolgate-splice-'), 'cache');
  mkdirSync(dir, { mode: 0o700 });
  chmodSync(dir, 0o777);
  const wit = await witDir('package toolgate:guard@0.3.0;');
  const { splice, calls } = countingSplice();
  const notes = [];
  const log = (m) => notes.push(m);
  cachedSplice(splice, { version: '1', dir, log })(ENGINE, [], undefined, wit, 'w', false);
  cachedSplice(splice, { version: '1', dir, log })(ENGINE, [], undefined, wit, 'w', false);
  assert.equal(calls.length, 2);
  assert.deepEqual(readdirSync(dir), []);
  assert.match(notes[0], /not private/);
});

test('the cache is where toolgate keeps its own', () => {
  assert.equal(cacheDir({ TOOLGATE_CACHE_DIR: '/c', HOME: '/h' }), '/c');
  assert.equal(cacheDir({ TOOLGATE_CACHE_DIR: 'off', HOME: '/h' }), undefined);
  assert.equal(cacheDir({ TOOLGATE_CACHE_DIR: '', HOME: '/h' }), undefined);
  assert.equal(cacheDir({ XDG_CACHE_HOME: '/x', HOME: '/h' }), '/x/toolgate');
  assert.equal(cacheDir({ HOME: '/h' }), '/h/.cache/toolgate');
  assert.equal(cacheDir({}), undefined);
});
