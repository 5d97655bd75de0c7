#!/usr/bin/env node
// toolgate-js: build a JavaScript/TypeScript guard into a toolgate component.
//
//   toolgate-js build <guard.ts|guard.js> -o <out.wasm> [--wit <guard.wit|dir>] [--keep-temp] [--quiet]
//   toolgate-js inspect <component.wasm>      print the component's imports and exports

import { readFile } from 'node:fs/promises';
import { relative } from 'node:path';
import { buildGuard, componentInterfaces } from '../lib/build.mjs';

const USAGE = `usage:
  toolgate-js build <guard.ts|guard.js> -o <out.wasm> [--wit <guard.wit|dir>] [--keep-temp] [--quiet]
  toolgate-js inspect <component.wasm>`;

function fail(message) {
  console.error(`toolgate-js: ${message}`);
  process.exit(message === USAGE ? 2 : 1);
}

function parseArgs(argv) {
  const opts = { positional: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value\n${USAGE}`);
      return argv[++i];
    };
    if (a === '-o' || a === '--out') opts.out = value();
    else if (a === '--wit') opts.wit = value();
    else if (a === '--keep-temp') opts.keepTemp = true;
    else if (a === '--quiet' || a === '-q') opts.quiet = true;
    else if (a === '-h' || a === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (a.startsWith('-')) fail(`unknown option ${a}\n${USAGE}`);
    else opts.positional.push(a);
  }
  return opts;
}

const [command, ...rest] = process.argv.slice(2);
const opts = parseArgs(rest);
try {
  if (command === 'build') {
    if (opts.positional.length !== 1 || !opts.out) fail(USAGE);
    const say = opts.quiet ? () => {} : (m) => console.error(m);
    const r = await buildGuard(opts.positional[0], opts.out, { wit: opts.wit, keepTemp: opts.keepTemp, log: say });
    say(
      `built ${relative(process.cwd(), opts.out) || opts.out}: ${(r.size / 1e6).toFixed(1)} MB in ${(r.millis / 1000).toFixed(1)} s; ` +
        `exports ${r.exports.join(', ')}; imports ${r.imports.join(', ') || 'nothing'}`,
    );
  } else if (command === 'inspect') {
    if (opts.positional.length !== 1) fail(USAGE);
    const r = await componentInterfaces(await readFile(opts.positional[0]));
    console.log(JSON.stringify(r, null, 2));
  } else {
    fail(USAGE);
  }
} catch (err) {
  fail(err.message);
}
