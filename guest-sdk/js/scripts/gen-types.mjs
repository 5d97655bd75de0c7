#!/usr/bin/env node
// Generates the SDK's TypeScript types from the WIT contract (wit/guard.wit).
//
//   node scripts/gen-types.mjs           write src/generated/
//   node scripts/gen-types.mjs --check   fail if src/generated/ is not what the WIT gives
//
// Two layers:
// - src/generated/wit/*.d.ts: jco's guest types for world `guard`, verbatim: the wire
//   shapes componentize-js exchanges with the host (JSON fields as strings).
// - src/generated/types.ts: what a guard's hooks see: every record with a `json` field
//   again, with that field parsed (`JsonObject` where the contract documents a JSON
//   object, else `JsonValue`) and the events named as symfonic names them (the WIT
//   record's name kept as a deprecated alias), the `Hooks` interface (one optional method
//   per seam, under symfonic's hook name, and its deprecated former name) and, per seam,
//   the event fields the glue parses; then the lifecycle events of interface `observe`, named
//   as symfonic's classes (`LLMEndEvent`), their JSON fields parsed (`dict` a `JsonObject`,
//   `list` a `JsonValue[]`, `Any` a `JsonValue`), one optional hook each in `Hooks`
//   (`onLlmEnd`), and the table `LIFECYCLE_EVENTS` the glue subscribes and dispatches with.

import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { $init, generateTypes } from '@bytecodealliance/jco-transpile/component';
import { LIFECYCLE, SDK_DIR, SEAMS, WIT_PACKAGE, readGuardWit } from '../lib/wit.mjs';

const OUT = join(SDK_DIR, 'src', 'generated');
const HEADER = '// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.\n';
const ver = WIT_PACKAGE.split('@')[1];
const modName = (iface) => `toolgate:guard/${iface}@${ver}`;

/** symfonic's class name of each event whose WIT record (in jco's spelling) is named otherwise. */
const EVENT_NAMES = {
  RoutingEvent: 'ToolRoutingDecisionEvent',
  DispatchEvent: 'ToolCallDispatchEvent',
  ToolResultEvent: 'ToolResultCallbackEvent',
  ResponseEvent: 'ResponseRenderEvent',
};
const sdkName = (record) => EVENT_NAMES[record] ?? record;
/** Events that came with symfonic's name from the start: no deprecated alias. */
const NO_ALIAS = new Set(['ResponseEvent']);

/** Every generated file, as a map of path (relative to src/generated) to text. */
async function generate() {
  const { text } = readGuardWit(process.env.TOOLGATE_WIT);
  await $init;
  const files = generateTypes('guard', {
    wit: { tag: 'source', val: text },
    world: 'guard',
    guest: true,
    features: { tag: 'list', val: [] },
    tlaCompat: false,
  });
  const out = new Map();
  const dec = new TextDecoder();
  for (const [name, bytes] of files) out.set(join('wit', name), HEADER + dec.decode(bytes));
  const typesDts = out.get(join('wit', 'interfaces', 'toolgate-guard-types.d.ts'));
  if (!typesDts) throw new Error('jco produced no toolgate-guard-types.d.ts');
  out.set('types.ts', hookTypes(typesDts, out));
  return out;
}

/** The `declare module '<name>' { ... }` body of one generated .d.ts. */
function moduleBody(dts, name) {
  const start = dts.indexOf(`declare module '${name}' {`);
  if (start < 0) throw new Error(`no module ${name} in jco's output`);
  return dts.slice(start, dts.lastIndexOf('}'));
}

/** Doc comment + declaration pairs at one indentation level of a module body. */
function interfaces(body) {
  const re = /(  \/\*\*[\s\S]*?\*\/\n)?  export interface (\w+) \{\n([\s\S]*?)\n  \}/g;
  const found = [];
  for (const m of body.matchAll(re)) {
    const fields = [];
    const fre = /(    \/\*\*[\s\S]*?\*\/\n)?    (\w+)(\??): ([^\n]+),/g;
    for (const f of m[3].matchAll(fre)) {
      fields.push({ doc: f[1] ?? '', name: f[2], optional: f[3], type: f[4] });
    }
    found.push({ doc: m[1] ?? '', name: m[2], fields });
  }
  return found;
}

function hookTypes(typesDts, out) {
  const body = moduleBody(typesDts, modName('types'));
  const records = interfaces(body);
  const parsed = new Map(); // record name -> json field names
  const lines = [
    HEADER,
    '/// <reference path="./wit/guard.d.ts" />',
    '',
    `import type * as wire from '${modName('types')}';`,
    '',
    '/** Any JSON value; an integer beyond 2^53 is a `bigint` (exact). */',
    'export type JsonValue = null | boolean | number | bigint | string | JsonValue[] | JsonObject;',
    '/** A JSON object. */',
    'export type JsonObject = { [key: string]: JsonValue };',
    '',
  ];
  const reexport = [];
  for (const r of records) {
    const json = r.fields.filter((f) => f.type === 'Json');
    if (json.length === 0) {
      reexport.push(r.name);
      continue;
    }
    parsed.set(r.name, json.map((f) => f.name));
    const name = sdkName(r.name);
    const witRecord = r.name.replace(/[A-Z]/g, (c, i) => (i ? '-' : '') + c.toLowerCase());
    lines.push(
      r.doc
        .replace(/^  /gm, '')
        .trimEnd()
        .replace(/\*\/$/, `*\n * WIT: record \`${witRecord}\`.\n */`),
    );
    lines.push(`export interface ${name} {`);
    for (const f of r.fields) {
      let type = f.type;
      let doc = f.doc.replace(/^    /gm, '  ').trimEnd();
      if (type === 'Json') {
        type = /JSON object/.test(f.doc) ? 'JsonObject' : 'JsonValue';
        doc = doc.replace(/\*\/$/, '*\n   * (JSON text on the wire; the SDK parses and serialises it.)\n   */');
      }
      if (doc) lines.push('  ' + doc.trimStart());
      lines.push(`  ${f.name}${f.optional}: ${type};`);
    }
    lines.push('}', '');
    if (name !== r.name && !NO_ALIAS.has(r.name)) {
      lines.push(`/** @deprecated The former name of \`${name}\`, symfonic's name for it. */`);
      lines.push(`export type ${r.name} = ${name};`, '');
    }
  }
  // Types without JSON fields (and type aliases: Verdict, its cases) are the wire types.
  for (const m of body.matchAll(/^  export type (\w+) = /gm)) {
    if (m[1] !== 'Json') reexport.push(m[1]);
  }
  lines.push(`export type { ${reexport.sort().join(', ')} } from '${modName('types')}';`);
  lines.push(`import type { ${reexport.sort().join(', ')} } from '${modName('types')}';`);
  lines.push(`export type { Level } from '${modName('host')}';`, '');

  // One optional method per seam, under symfonic's hook name and under its deprecated
  // former name (the WIT function's); what it returns may also be nothing.
  lines.push('/**');
  lines.push(' * The hooks a guard may implement: one per seam it subscribes to, named as symfonic');
  lines.push(' * names its callback hooks. Each also has a deprecated former name (the WIT function\'s).');
  lines.push(' */');
  lines.push('export interface Hooks {');
  const eventFields = [];
  for (const s of SEAMS) {
    const dts = out.get(join('wit', 'interfaces', `toolgate-guard-${s.iface}.d.ts`));
    if (!dts) throw new Error(`jco produced no types for interface ${s.iface}`);
    const sb = moduleBody(dts, modName(s.iface));
    const fn = sb.match(/(  \/\*\*[\s\S]*?\*\/\n)?  export function (\w+)\(event: (\w+)\): ([^;]+);/);
    if (!fn || fn[2] !== s.export) {
      throw new Error(`interface ${s.iface} no longer declares ${s.export}(event): update lib/wit.mjs`);
    }
    const ret = fn[4].replace(/ \| undefined$/, '');
    const hookRet = ret === 'void' ? 'void' : `${ret} | null | undefined | void`;
    const doc = (fn[1] ?? '').split('\n').map((l) => l.trim()).filter((l) => l.startsWith('* '));
    const event = sdkName(fn[3]);
    lines.push('  /**', `   * Seam \`${s.seam}\` (\`${modName(s.iface)}\`, function \`${s.func}\`).`, '   *');
    lines.push(...doc.map((l) => '   ' + l), '   */');
    lines.push(`  ${s.hook}?(event: ${event}): ${hookRet};`);
    if (s.deprecatedHook !== null) {
      lines.push(`  /** @deprecated The former name of \`${s.hook}\`. */`);
      lines.push(`  ${s.deprecatedHook}?(event: ${event}): ${hookRet};`);
    }
    eventFields.push(`  ${s.seam}: ${JSON.stringify(parsed.get(fn[3]) ?? [])},`);
  }
  const lifecycle = lifecycleTypes(out);
  lines.push(...lifecycle.hooks);
  lines.push('}', '');
  lines.push(...lifecycle.records);
  lines.push('/** Per seam, the event fields that arrive as JSON text and are parsed for its hook. */');
  lines.push('export const EVENT_JSON_FIELDS = {', ...eventFields, '} as const;', '');
  lines.push(...lifecycle.table);
  lines.push('/** The wire types, for the glue. */');
  lines.push('export type { wire };', '');
  return lines.join('\n');
}

/** symfonic's class name of a lifecycle event, from jco's spelling of its WIT record. */
const lifecycleName = (record) => record.replace(/^Llm/, 'LLM');

/** The TypeScript type of a lifecycle event's JSON field, from the seed type its doc names. */
function jsonType(doc) {
  if (/`\w+: dict/.test(doc)) return 'JsonObject';
  if (/`\w+: list/.test(doc)) return 'JsonValue[]';
  return 'JsonValue';
}

/**
 * The lifecycle events (interface `observe`): their records as a guard sees them, one hook
 * per event for `Hooks`, and the table the glue works from. Returns { records, hooks, table }.
 */
function lifecycleTypes(out) {
  const dts = out.get(join('wit', 'interfaces', 'toolgate-guard-observe.d.ts'));
  if (!dts) throw new Error('jco produced no types for interface observe');
  const body = moduleBody(dts, modName('observe'));
  const records = new Map(interfaces(body).map((r) => [r.name, r]));
  const recordLines = [];
  const hooks = [];
  const table = [];
  for (const l of LIFECYCLE) {
    const caseName = l.tag.replace(/(^|-)(\w)/g, (_, __, c) => c.toUpperCase());
    const m = body.match(new RegExp(`export interface LifecycleEvent${caseName} \\{\\n\\s*tag: '${l.tag}',\\n\\s*val: (\\w+),`));
    if (!m) throw new Error(`interface observe has no case ${l.tag}: update lib/wit.mjs`);
    const r = records.get(m[1]);
    if (!r) throw new Error(`no record ${m[1]} in interface observe`);
    const name = lifecycleName(r.name);
    const witRecord = r.name.replace(/[A-Z]/g, (c, i) => (i ? '-' : '') + c.toLowerCase());
    // The first record's doc match starts at the functions' docs before it: keep its own.
    recordLines.push(
      r.doc
        .slice(Math.max(0, r.doc.lastIndexOf('  /**')))
        .replace(/^  /gm, '')
        .trimEnd()
        .replace(/\*\/$/, `*\n * WIT: record \`${witRecord}\` (interface \`observe\`).\n */`),
    );
    recordLines.push(`export interface ${name} {`);
    const json = [];
    for (const f of r.fields) {
      let type = f.type;
      let doc = f.doc.replace(/^    /gm, '  ').trimEnd();
      if (type === 'Json') {
        json.push(f.name);
        type = jsonType(f.doc);
        doc = doc.replace(/\*\/$/, '*\n   * (JSON text on the wire; the SDK parses it.)\n   */');
      }
      if (doc) recordLines.push('  ' + doc.trimStart());
      recordLines.push(`  ${f.name}${f.optional}: ${type};`);
    }
    recordLines.push('}', '');
    hooks.push('  /**');
    hooks.push(`   * Lifecycle hook \`${l.symfonic}\` (\`${modName('observe')}\`, case \`${l.tag}\`): ${name}.`);
    hooks.push('   * Observes the event; nothing to return. A guard implementing any lifecycle hook');
    hooks.push('   * exports `observe`, subscribed to exactly the hooks it implements.');
    hooks.push('   */');
    hooks.push(`  ${l.hook}?(event: ${name}): void;`);
    const flag = caseName[0].toLowerCase() + caseName.slice(1);
    table.push(`  { tag: '${l.tag}', hook: '${l.hook}', symfonic: '${l.symfonic}', flag: '${flag}', json: ${JSON.stringify(json)} },`);
  }
  return {
    records: recordLines,
    hooks,
    table: [
      '/**',
      ' * Per lifecycle event (the `observe` variant\'s case, in order): its hook, symfonic\'s name,',
      ' * its `event-kinds` flag and the fields that arrive as JSON text.',
      ' */',
      'export const LIFECYCLE_EVENTS = [',
      ...table,
      '] as const;',
      '',
    ],
  };
}

function listFiles(dir, base = dir) {
  let acc = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) acc = acc.concat(listFiles(p, base));
    else acc.push(relative(base, p));
  }
  return acc;
}

const files = await generate();
if (process.argv.includes('--check')) {
  let have = [];
  try {
    have = listFiles(OUT);
  } catch {}
  const stale = [];
  for (const [name, text] of files) {
    let cur = null;
    try {
      cur = readFileSync(join(OUT, name), 'utf8');
    } catch {}
    if (cur !== text) stale.push(name);
  }
  for (const name of have) if (!files.has(name)) stale.push(name);
  if (stale.length) {
    console.error(`src/generated is out of date with the WIT (${stale.join(', ')}); run npm run gen-types`);
    process.exit(1);
  }
  console.log('src/generated matches the WIT');
} else {
  rmSync(OUT, { recursive: true, force: true });
  for (const [name, text] of files) {
    mkdirSync(dirname(join(OUT, name)), { recursive: true });
    writeFileSync(join(OUT, name), text);
  }
  console.log(`wrote ${files.size} files to ${relative(process.cwd(), OUT) || '.'}`);
}
