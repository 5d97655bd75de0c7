// Builds a guard (TypeScript or JavaScript) into a toolgate component.
//
// 1. esbuild bundles the guard with the SDK; the bundle is imported once in Node (with the
//    contract's imports stubbed) to read which hooks its default export implements, and
//    whether it checks its configuration (`validateConfig`).
// 2. An entry module exports, for each of those seams, the SDK's glue bound to the guard
//    (and `config` for `validateConfig`); esbuild bundles it into one ES module that imports
//    only `toolgate:guard/host` and, when the guard uses them, `toolgate:guard/state` and
//    `toolgate:guard/http`.
// 3. componentize-js builds the component against a generated world importing exactly
//    those and exporting exactly those seams, with every WASI feature of the engine
//    disabled: the component imports nothing but `toolgate:guard/*`.

import { mkdtemp, mkdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as esbuild from 'esbuild';
import { _addPreopen } from '@bytecodealliance/preview2-shim/filesystem';
import { componentize } from '@bytecodealliance/componentize-js';
import { componentWit } from '@bytecodealliance/jco-transpile/wasm-tools';
import { cachedSplice } from './splice-cache.mjs';
import { ALL_HOOKS, CONFIG_CHECK, HOOKS, HTTP_MODULE, SDK_DIR, STATE_MODULE, WIT_PACKAGE, readGuardWit, seamsOf, worldFor } from './wit.mjs';

/**
 * componentize-js 0.23.0's generated bindings lower every string a guard returns (a skip's
 * content, a rewrite's args, tool names) with a loop in JavaScript that measures its UTF-8
 * length one UTF-16 unit at a time. StarlingMonkey interprets it: about 2,600 fuel per
 * character in the host, 2.7 billion for 1 MiB. The replacement lets the engine's native
 * TextEncoder do the measuring and the copy. Byte for byte the same result: both write
 * lone surrogates as U+FFFD.
 */
const SLOW_STRING_LOWERING =
  /  let len = 0;\n  let codepoints = 0;\n  for \(let i = 0; i < s\.length; i\+\+\) \{\n[\s\S]*?\n  \}\n  const ptr = realloc\(0, 0, 1, len\);\n  const \{ read, written \} = TEXT_ENCODER_UTF8\.encodeInto\(\n  s,\n  new Uint8Array\(memory\.buffer, ptr, len\),\n  \);\n  if \(read !== s\.length \|\| written !== len\) \{\n    throw new Error\('failed to encode whole string'\);\n  \}\n  const res = \{ ptr, len, codepoints \};/;
const FAST_STRING_LOWERING = [
  '  const bytes = TEXT_ENCODER_UTF8.encode(s);',
  '  const len = bytes.length;',
  '  const ptr = realloc(0, 0, 1, len);',
  '  new Uint8Array(memory.buffer, ptr, len).set(bytes);',
  '  const res = { ptr, len };',
].join('\n');

/**
 * componentize-js 0.23.0's bindings lower an `s64` with `BigInt.asIntN(64, ...)` and hand it
 * to the engine's call of the import, which reads the BigInt as unsigned: a negative value
 * (`state.add(scope, key, -1)`) traps. The same 64 bits as an unsigned BigInt go through,
 * and the host reads them as the s64 they are. (The engine lifts an `s64` result as
 * unsigned too; `state.ts` reads it back as signed.)
 */
const SIGNED_INT64_LOWERING = /(function toInt64\(val\) \{\n  const converted = BigInt\(val\)\n\s*return BigInt\.)asIntN(\(64, converted\);\n\})/;

let bindingsPatched = false;
/** How the last generated bindings lower strings: 'native' (patched) or 'componentize-js'. */
let lastStringLowering = 'componentize-js';
/** How the last generated bindings lower an s64: 'unsigned-bits' (patched) or 'componentize-js'. */
let lastInt64Lowering = 'componentize-js';

/**
 * The time the component's clock stubs report, in ms since the Unix epoch: the epoch.
 * componentize-js stubs the engine's clocks (their feature is disabled) with functions
 * returning the time the stubs were made, which made every build's bytes differ.
 */
const STUBBED_CLOCK_MS = 0;

/**
 * Wraps componentize-js's splicer (the same module instance componentize() calls): its
 * binding generator, so its results are kept (splice-cache.mjs) and the bindings it generates
 * lower strings natively and s64 values as the engine reads them (a componentize-js whose bindings no longer contain what is replaced
 * is left alone); and its WASI stubber, so the clock stubs it writes report
 * STUBBED_CLOCK_MS, not the time of the build.
 */
async function patchSplicer(log) {
  if (bindingsPatched) return;
  bindingsPatched = true;
  const entry = fileURLToPath(import.meta.resolve('@bytecodealliance/componentize-js'));
  const splicerUrl = pathToFileURL(join(dirname(entry), '..', 'lib', 'spidermonkey-embedding-splicer.js'));
  const { splicer } = await import(splicerUrl.href);
  const { version } = JSON.parse(await readFile(join(dirname(entry), '..', 'package.json'), 'utf8'));
  const splice = cachedSplice(splicer.spliceBindings, { version, log });
  splicer.spliceBindings = (...args) => {
    const out = splice(...args);
    lastStringLowering = 'componentize-js';
    if (SLOW_STRING_LOWERING.test(out.jsBindings)) {
      out.jsBindings = out.jsBindings.replace(SLOW_STRING_LOWERING, FAST_STRING_LOWERING);
      lastStringLowering = 'native';
    } else if (out.jsBindings.includes('_utf8AllocateAndEncode')) {
      log('note: componentize-js bindings changed; strings are lowered by its own code');
    }
    lastInt64Lowering = 'componentize-js';
    if (SIGNED_INT64_LOWERING.test(out.jsBindings)) {
      out.jsBindings = out.jsBindings.replace(SIGNED_INT64_LOWERING, '$1asUintN$2');
      lastInt64Lowering = 'unsigned-bits';
    } else if (out.jsBindings.includes('function toInt64(')) {
      log('note: componentize-js bindings changed; s64 values are lowered by its own code');
    }
    return out;
  };
  const stubWasi = splicer.stubWasi;
  splicer.stubWasi = (...args) => {
    // It reads the time through the WASI shim's wall clock, which reads Date.now().
    const now = Date.now;
    Date.now = () => STUBBED_CLOCK_MS;
    try {
      return stubWasi(...args);
    } finally {
      Date.now = now;
    }
  };
}

/** Every optional feature of the StarlingMonkey engine; all are disabled. */
const DISABLED_FEATURES = ['stdio', 'random', 'clocks', 'http', 'fetch-event'];

const HOST_MODULE = `toolgate:guard/host@${WIT_PACKAGE.split('@')[1]}`;

/** The contract modules a guard's bundle may import. */
const CONTRACT_MODULES = [HOST_MODULE, STATE_MODULE, HTTP_MODULE];

/** Every function of the contract's imports, doing nothing: the probe runs the guard in Node. */
const STUB_IMPORTS = [
  'export function log() {}',
  'export function config() { return "{}"; }',
  'export function get() { return undefined; }',
  'export function set() {}',
  'function _delete() {}',
  'export { _delete as delete };',
  'export function add() { return 0n; }',
  'export function send() { return { status: 200, headers: [], body: new Uint8Array(0) }; }',
  '',
].join('\n');

/**
 * The contract's modules stay imports of the bundle, and are side-effect free: a guard that
 * never calls `state` (or `http`) does not import it.
 */
const contractExternal = {
  name: 'toolgate-contract',
  setup(build) {
    build.onResolve({ filter: /^toolgate:/ }, (args) => ({ path: args.path, external: true, sideEffects: false }));
  },
};

/** The bundler options shared by the probe and the component bundle. */
function bundleOptions() {
  return {
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    write: false,
    logLevel: 'silent',
    legalComments: 'none',
    alias: {
      '@toolgate/guest/glue': join(SDK_DIR, 'src', 'glue.ts'),
      '@toolgate/guest': join(SDK_DIR, 'src', 'index.ts'),
    },
  };
}

function bundleError(err, what) {
  const msgs = err?.errors?.map((e) => {
    const loc = e.location ? `${e.location.file}:${e.location.line}:${e.location.column}: ` : '';
    return `${loc}${e.text}`;
  });
  return new Error(`${what}: ${msgs?.length ? msgs.join('\n') : err.message}`);
}

/** The hooks the guard's default export implements, found by running the module in Node. */
async function probeHooks(guardPath, workDir) {
  const stub = {
    name: 'toolgate-host-stub',
    setup(build) {
      build.onResolve({ filter: /^toolgate:/ }, (args) => ({ path: args.path, namespace: 'stub' }));
      build.onLoad({ filter: /.*/, namespace: 'stub' }, () => ({ contents: STUB_IMPORTS, loader: 'js' }));
    },
  };
  let result;
  try {
    result = await esbuild.build({ ...bundleOptions(), entryPoints: [guardPath], plugins: [stub] });
  } catch (err) {
    throw bundleError(err, `cannot bundle ${guardPath}`);
  }
  const probePath = join(workDir, 'probe.mjs');
  await writeFile(probePath, result.outputFiles[0].contents);
  let mod;
  try {
    mod = await import(pathToFileURL(probePath).href);
  } catch (err) {
    throw new Error(`${guardPath} failed to load: ${err.message}`);
  }
  const guard = mod.default;
  if (guard === null || typeof guard !== 'object') {
    throw new Error(`${guardPath} must export default a guard: export default defineGuard({ ... })`);
  }
  const keys = Object.keys(guard);
  const members = keys.filter((k) => k !== CONFIG_CHECK);
  const unknown = members.filter((k) => !ALL_HOOKS.includes(k));
  if (unknown.length) {
    throw new Error(`${guardPath}: unknown hook(s) ${unknown.join(', ')}; hooks are ${HOOKS.join(', ')} (and ${CONFIG_CHECK})`);
  }
  const hooks = members.filter((k) => typeof guard[k] === 'function');
  if (hooks.length !== members.length) {
    throw new Error(`${guardPath}: every hook must be a function`);
  }
  const config = keys.includes(CONFIG_CHECK);
  if (config && typeof guard[CONFIG_CHECK] !== 'function') {
    throw new Error(`${guardPath}: ${CONFIG_CHECK} must be a function`);
  }
  if (hooks.length === 0) {
    throw new Error(`${guardPath}: the guard implements no hook; hooks are ${HOOKS.join(', ')}`);
  }
  try {
    seamsOf(hooks);
  } catch (err) {
    throw new Error(`${guardPath}: ${err.message}`);
  }
  return { hooks, config };
}

/**
 * Bundles the guard and its glue into one ES module importing only the contract's `host`
 * (and `state` and `http`, when the guard uses them). Returns { source, state, http }.
 */
async function bundleComponentSource(guardPath, hooks, config) {
  const seams = seamsOf(hooks);
  const entry = [
    `import guard from ${JSON.stringify(guardPath)};`,
    `import { bind, bindConfig, routeConsoleToHostLog } from '@toolgate/guest/glue';`,
    'routeConsoleToHostLog();',
    ...seams.map((s) => `export const ${s.iface} = bind.${s.seam}(guard);`),
    ...(config ? ['export const config = bindConfig(guard);'] : []),
    '',
  ].join('\n');
  let result;
  try {
    result = await esbuild.build({
      ...bundleOptions(),
      stdin: { contents: entry, resolveDir: dirname(guardPath), sourcefile: 'toolgate-entry.js', loader: 'js' },
      plugins: [contractExternal],
      minifySyntax: true,
      metafile: true,
    });
  } catch (err) {
    throw bundleError(err, `cannot bundle ${guardPath}`);
  }
  // esbuild heads each module with a comment naming its path relative to the current
  // directory: dropped, so the component does not depend on where it was built from.
  const pathComments = new Set(Object.keys(result.metafile.inputs).map((p) => `// ${p}`));
  const source = result.outputFiles[0].text
    .split('\n')
    .filter((line) => !pathComments.has(line))
    .join('\n');
  const imports = result.metafile.outputs[Object.keys(result.metafile.outputs)[0]].imports
    .filter((i) => i.external)
    .map((i) => i.path);
  const foreign = imports.filter((p) => !CONTRACT_MODULES.includes(p));
  if (foreign.length) {
    throw new Error(`${guardPath} imports ${foreign.join(', ')}; a guard may import only ${CONTRACT_MODULES.join(', ')} (through @toolgate/guest) and bundled code`);
  }
  return { source, state: imports.includes(STATE_MODULE), http: imports.includes(HTTP_MODULE) };
}

/** The component's imports and exports, read back from its embedded WIT. */
export async function componentInterfaces(bytes) {
  const wit = await componentWit(bytes);
  // The WIT printer writes keywords used as names in their escaped form (`%result`).
  const pick = (kw) =>
    [...wit.matchAll(new RegExp(`^\\s*${kw} ([\\w:./@%-]+);`, 'gm'))].map((m) => m[1].replaceAll('%', ''));
  return { imports: pick('import'), exports: pick('export') };
}

/**
 * The pre-initialiser componentize-js runs, when `$TOOLGATE_WIZER` names a toolgate
 * executable (`toolgate build` sets it): a link to it named `toolgate-wizer` in `dir`, which
 * toolgate runs as its hidden `wizer` subcommand. That one gives the engine's initialisation
 * fixed random bytes and clocks, and shows it the build's directories at fixed paths, so the
 * same sources give the same component bytes. Without it, componentize-js's own wizer runs
 * (the machine's random bytes, clocks and temporary paths end up in the component).
 */
async function reproducibleWizer(dir) {
  const exe = process.env.TOOLGATE_WIZER;
  if (!exe) return undefined;
  const link = join(dir, 'bin', 'toolgate-wizer');
  await mkdir(dirname(link));
  await symlink(resolve(exe), link);
  return link;
}

/** The variables that locate toolgate's compiled cache, as this process has them. */
function cacheEnv() {
  const names = ['TOOLGATE_CACHE_DIR', 'XDG_CACHE_HOME', 'HOME'];
  return Object.fromEntries(names.filter((n) => process.env[n] !== undefined).map((n) => [n, process.env[n]]));
}

/**
 * Builds `guardPath` into a component at `outPath`.
 * Options: wit (path to guard.wit or its directory), keepTemp (leave the work directory).
 * Returns { hooks, config (whether it exports `config`), state and http (whether it imports
 * them), world, size, imports, exports, stringLowering, int64Lowering, millis }.
 */
export async function buildGuard(guardPath, outPath, { wit, keepTemp = false, log = () => {} } = {}) {
  const started = Date.now();
  guardPath = resolve(guardPath);
  outPath = resolve(outPath);
  const contract = readGuardWit(wit);
  const workDir = await mkdtemp(join(tmpdir(), 'toolgate-js-'));
  try {
    const { hooks, config } = await probeHooks(guardPath, workDir);
    const { source, state, http } = await bundleComponentSource(guardPath, hooks, config);
    const { worldName, extraFile, seams } = worldFor(hooks, { state, http, config });
    log(`${basename(guardPath)}: hooks ${hooks.join(', ')}${config ? `, ${CONFIG_CHECK}` : ''} -> world ${worldName}`);

    const sourcePath = join(workDir, `${basename(guardPath).replace(/\.[cm]?[jt]s$/, '')}.js`);
    await writeFile(sourcePath, source);
    const witDir = join(workDir, 'wit');
    await mkdir(witDir);
    await writeFile(join(witDir, 'guard.wit'), contract.text);
    await writeFile(join(witDir, extraFile.name), extraFile.text);

    // componentize-js parses the WIT inside a Wasm tool that sees only preopened directories.
    _addPreopen(workDir, workDir);
    await patchSplicer(log);
    const wizerBin = await reproducibleWizer(workDir);
    const { component } = await componentize({
      sourcePath,
      witPath: witDir,
      worldName,
      disableFeatures: DISABLED_FEATURES,
      wizerBin,
      // toolgate's wizer keeps the engine's compiled code in toolgate's cache, found
      // through these (it does not show them to the engine's initialisation).
      ...(wizerBin ? { env: cacheEnv() } : {}),
    });

    const { imports, exports } = await componentInterfaces(component);
    const stray = imports.filter((i) => !i.startsWith('toolgate:guard/'));
    if (stray.length) throw new Error(`the component imports ${stray.join(', ')}: only toolgate:guard/* is allowed`);
    const ver = WIT_PACKAGE.split('@')[1];
    const want = [...seams.map((s) => s.iface), ...(config ? ['config'] : [])].map((i) => `toolgate:guard/${i}@${ver}`).sort();
    if (JSON.stringify([...exports].sort()) !== JSON.stringify(want)) {
      throw new Error(`the component exports ${exports.join(', ')}, expected ${want.join(', ')}`);
    }
    await mkdir(dirname(outPath), { recursive: true });
    await writeFile(outPath, component);
    return {
      hooks,
      config,
      state,
      http,
      world: worldName,
      size: component.length,
      imports,
      exports,
      stringLowering: lastStringLowering,
      int64Lowering: lastInt64Lowering,
      millis: Date.now() - started,
    };
  } finally {
    if (keepTemp) log(`work directory kept: ${workDir}`);
    else await rm(workDir, { recursive: true, force: true });
  }
}

