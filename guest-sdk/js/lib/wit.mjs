// Locating and preparing the toolgate:guard WIT contract for the JS toolchain.

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The SDK's own directory (guest-sdk/js in a checkout, the package root when installed). */
export const SDK_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The contract package every guard is built against. */
export const WIT_PACKAGE = 'toolgate:guard@0.3.0';

/**
 * The five seams: the WIT interface each one exports, the function in it (`export`: its name
 * in camelCase, as componentize-js maps it), the hook a guard implements for it (symfonic's
 * hook name in camelCase) and the hook's deprecated former name (the function's; `null` for
 * the response seam, which never had another).
 */
export const SEAMS = [
  { seam: 'routing', iface: 'routing', func: 'narrow', export: 'narrow', hook: 'onToolRoutingDecision', deprecatedHook: 'narrow' },
  { seam: 'rewrite', iface: 'rewrite', func: 'dispatch', export: 'dispatch', hook: 'onToolCallDispatch', deprecatedHook: 'dispatch' },
  {
    seam: 'steering',
    iface: 'steering',
    func: 'before-tool-call',
    export: 'beforeToolCall',
    hook: 'onBeforeToolCall',
    deprecatedHook: 'beforeToolCall',
  },
  { seam: 'result', iface: 'result', func: 'on-result', export: 'onResult', hook: 'onToolResult', deprecatedHook: 'onResult' },
  { seam: 'response', iface: 'response', func: 'render', export: 'render', hook: 'onResponseRender', deprecatedHook: null },
];

/**
 * The thirteen lifecycle hooks (interface `observe`), in the WIT variant's order: the case's
 * tag, the hook a guard implements for it (symfonic's hook name in camelCase) and symfonic's
 * own name. A guard implementing any of them exports `observe`, subscribed to exactly those.
 */
export const LIFECYCLE = [
  'agent-start', 'agent-end', 'node-start', 'node-end', 'node-error', 'llm-start', 'llm-pre-call',
  'llm-end', 'token-composition', 'user-correction', 'procedure-selection', 'react-loop-end',
  'fabrication-detected',
].map((tag) => ({
  tag,
  hook: `on${tag.replace(/(^|-)(\w)/g, (_, __, c) => c.toUpperCase())}`,
  symfonic: `on_${tag.replaceAll('-', '_')}`,
}));

/** The lifecycle hook names, in order. */
export const LIFECYCLE_HOOKS = LIFECYCLE.map((l) => l.hook);

/** The export a guard implementing lifecycle hooks adds beside its seams. */
export const OBSERVE = { seam: 'observe', iface: 'observe' };

/** The hook names a guard may implement, one per seam, then the lifecycle hooks. */
export const HOOKS = [...SEAMS.map((s) => s.hook), ...LIFECYCLE_HOOKS];

/** Deprecated: the hooks' former names, still accepted (one per seam that had one). */
export const DEPRECATED_HOOKS = SEAMS.map((s) => s.deprecatedHook).filter((h) => h !== null);

/** Every name a hook may have: its own, or its deprecated one. */
export const ALL_HOOKS = [...HOOKS, ...DEPRECATED_HOOKS];

/**
 * The seams a guard implements, given the names of its hooks (each under its own name or
 * its deprecated one), then `OBSERVE` when it implements a lifecycle hook. Throws when a
 * seam's hook is given under both names.
 */
export function seamsOf(hooks) {
  const seams = SEAMS.filter((s) => {
    const own = hooks.includes(s.hook);
    const old = s.deprecatedHook !== null && hooks.includes(s.deprecatedHook);
    if (own && old) {
      throw new Error(`the guard implements both ${s.hook} and ${s.deprecatedHook}, its deprecated name; keep ${s.hook}`);
    }
    return own || old;
  });
  return hooks.some((h) => LIFECYCLE_HOOKS.includes(h)) ? [...seams, OBSERVE] : seams;
}

/**
 * Finds guard.wit: an explicit path (file or directory) wins; then the copy packed into the
 * npm package (`wit/guard.wit`); then the repository's `wit/` two levels up (a checkout).
 */
export function findGuardWit(explicit) {
  const candidates = explicit
    ? [explicit, join(explicit, 'guard.wit')]
    : [join(SDK_DIR, 'wit', 'guard.wit'), join(SDK_DIR, '..', '..', 'wit', 'guard.wit')];
  for (const c of candidates) {
    if (existsSync(c) && c.endsWith('.wit')) return resolve(c);
  }
  throw new Error(`guard.wit not found (looked at ${candidates.join(', ')}); pass --wit <path>`);
}

// WIT keywords that may also be wanted as names. wit-parser rejects a bare keyword where an
// identifier is expected; `%name` is the escaped form and means the same name.
const KEYWORDS = [
  'result', 'option', 'list', 'string', 'bool', 'char', 'type', 'record', 'variant', 'enum',
  'flags', 'resource', 'func', 'use', 'own', 'borrow', 'future', 'stream', 'tuple', 'static',
  'constructor', 'interface', 'world', 'import', 'export', 'package', 'include', 'with', 'as',
  'from', 'async', 'u8', 'u16', 'u32', 'u64', 's8', 's16', 's32', 's64', 'f32', 'f64',
];
const KW = KEYWORDS.join('|');

/**
 * Escapes keywords used as names (`interface result`, `export result;`, a field `result: t`)
 * to their `%` form, which every WIT parser accepts. A contract that already escapes them
 * (or uses no keyword as a name) is returned unchanged.
 */
export function escapeWitKeywords(text) {
  return text
    .replace(new RegExp(`^(\\s*interface\\s+)(${KW})(\\s*\\{)`, 'gm'), '$1%$2$3')
    .replace(new RegExp(`^(\\s*(?:export|import)\\s+)(${KW})(\\s*;)`, 'gm'), '$1%$2$3')
    .replace(new RegExp(`^(\\s*)(${KW})(\\s*:)`, 'gm'), '$1%$2$3');
}

/** The contract's text, ready for the JS toolchain's WIT parser. */
export function readGuardWit(explicit) {
  const path = findGuardWit(explicit);
  const text = escapeWitKeywords(readFileSync(path, 'utf8'));
  if (!new RegExp(`^package\\s+${WIT_PACKAGE.replace(/[.:@]/g, '\\$&')}\\s*;`, 'm').test(text)) {
    throw new Error(`${path} is not the ${WIT_PACKAGE} contract this SDK targets`);
  }
  return { path, text };
}

/** The member of a guard's default export that checks its configuration (`config` export). */
export const CONFIG_CHECK = 'validateConfig';

/** The contract interface a guard that uses `state` imports. */
export const STATE_MODULE = `toolgate:guard/state@${WIT_PACKAGE.split('@')[1]}`;

/** The contract interface a guard that uses `http` imports. */
export const HTTP_MODULE = `toolgate:guard/http@${WIT_PACKAGE.split('@')[1]}`;

/**
 * The WIT world a guard implementing `hooks` is built against, generated in a second file
 * of the contract's package: it imports `host`, and `state` and `http` when the guard uses
 * them (the contract's own `<seam>-guard` worlds import both always), and exports exactly
 * those seams' interfaces, and `config` when the guard checks its configuration.
 * Returns { worldName, extraFile: { name, text }, seams }.
 */
export function worldFor(hooks, { state = false, http = false, config = false } = {}) {
  const seams = seamsOf(hooks);
  if (seams.length === 0) throw new Error('a guard must implement at least one hook');
  const parts = [
    ...seams.map((s) => s.seam),
    ...(config ? ['config'] : []),
    ...(state ? ['state'] : []),
    ...(http ? ['http'] : []),
  ];
  const worldName = `js-guard-${parts.join('-')}`;
  const text = [
    `package ${WIT_PACKAGE};`,
    '',
    `/// Generated by @toolgate/guest: the seams this guard implements.`,
    `world ${worldName} {`,
    '    import host;',
    ...(state ? ['    import state;'] : []),
    ...(http ? ['    import http;'] : []),
    ...seams.map((s) => `    export %${s.iface};`),
    ...(config ? ['    export config;'] : []),
    '}',
    '',
  ].join('\n');
  return { worldName, extraFile: { name: 'js-guard-world.wit', text }, seams };
}
