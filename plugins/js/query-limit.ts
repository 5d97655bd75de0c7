// query-limit (rewrite): a `run_query` call whose SQL has no LIMIT (in any case) is rewritten
// to the same tool with " LIMIT 100" appended, after dropping trailing whitespace and `;`;
// every other argument is kept. Other tools, and calls without a string `sql`, pass through.
//
//   [plugin.config]
//   limit = 100   # the row cap appended (default 100): an integer from 1 to 1000000000
//
// The configuration is checked at load: another key, or a limit that is not such an
// integer, refuses the plugin.

import { config, defineGuard, rewrite, stringifyJson } from '@toolgate/guest';
import type { JsonObject } from '@toolgate/guest';

const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 1_000_000_000;

/** The row cap `config` sets; throws what is wrong with it. */
function limitOf(config: JsonObject): number {
  for (const key of Object.keys(config)) {
    if (key !== 'limit') throw new Error(`config: unknown key \`${key}\`; the only key is \`limit\``);
  }
  const limit = config.limit ?? DEFAULT_LIMIT;
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new Error(`config: limit must be an integer from 1 to ${MAX_LIMIT}, not ${stringifyJson(limit)}`);
  }
  return limit;
}

// `sql.toUpperCase().includes('LIMIT')` (what the other languages test) without building an
// upper-case copy of a 1 MiB query. Upper-casing maps to these letters only from themselves
// and: ı → I, ﬂ → FL and ﬄ → FFL (ending in L), ẗ → T + U+0308 (starting with T).
const HAS_LIMIT = /[lﬂﬄ][iı]m[iı][tẗ]/i;

// Unicode White_Space (what Rust's `char::is_whitespace` tests), and `;`.
const TRAILING = /[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000;]/;

export default defineGuard({
  validateConfig(config) {
    limitOf(config);
  },

  onToolCallDispatch(event) {
    const sql = event.args.sql;
    if (event.toolName !== 'run_query' || typeof sql !== 'string' || HAS_LIMIT.test(sql)) {
      return null;
    }
    let end = sql.length;
    while (end > 0 && TRAILING.test(sql[end - 1])) end--;
    return rewrite(event.toolName, { ...event.args, sql: `${sql.slice(0, end)} LIMIT ${limitOf(config())}` });
  },
});
