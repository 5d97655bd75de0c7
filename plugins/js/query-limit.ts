// query-limit (rewrite): a `run_query` call whose SQL has no LIMIT gets one. The SQL loses
// its trailing whitespace and semicolons and gains " LIMIT 100"; the other arguments are kept.

import { defineGuard, rewrite } from '@toolgate/guest';

export default defineGuard({
  dispatch(event) {
    const sql = event.args.sql;
    if (event.toolName !== 'run_query' || typeof sql !== 'string' || sql.toUpperCase().includes('LIMIT')) {
      return null;
    }
    let end = sql.length;
    while (end > 0 && (sql[end - 1] === ';' || /\s/.test(sql[end - 1]))) end--;
    return rewrite('run_query', { ...event.args, sql: `${sql.slice(0, end)} LIMIT 100` });
  },
});
