// query-limit (rewrite): a `run_query` call whose SQL has no LIMIT (in any case) is rewritten
// to the same tool with " LIMIT 100" appended, after dropping trailing whitespace and `;`;
// every other argument is kept. Other tools, and calls without a string `sql`, pass through.

import { defineGuard, rewrite } from '@toolgate/guest';

const LIMIT = ' LIMIT 100';

// `sql.toUpperCase().includes('LIMIT')` (what the other languages test) without building an
// upper-case copy of a 1 MiB query. Upper-casing maps to these letters only from themselves
// and: ı → I, ﬂ → FL and ﬄ → FFL (ending in L), ẗ → T + U+0308 (starting with T).
const HAS_LIMIT = /[lﬂﬄ][iı]m[iı][tẗ]/i;

// Unicode White_Space (what Rust's `char::is_whitespace` tests), and `;`.
const TRAILING = /[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000;]/;

export default defineGuard({
  onToolCallDispatch(event) {
    const sql = event.args.sql;
    if (event.toolName !== 'run_query' || typeof sql !== 'string' || HAS_LIMIT.test(sql)) {
      return null;
    }
    let end = sql.length;
    while (end > 0 && TRAILING.test(sql[end - 1])) end--;
    return rewrite(event.toolName, { ...event.args, sql: sql.slice(0, end) + LIMIT });
  },
});
