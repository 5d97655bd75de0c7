// sql-guard (steering): a `run_query` call whose SQL has no WHERE clause (in any case) is
// refused with an error result the model corrects itself from; every other call proceeds.
//
// The seed's SqlGuard, line for line: like the seed (which raises on a missing key), a
// `run_query` call without a string `sql` argument is an error in the guard; it throws, and
// the host logs the fault and lets the call proceed.
//
// `/where/i` is `sql.toUpperCase().includes('WHERE')` (the seed's test) at half the cost on
// a 1 MiB query: upper-casing maps to W, H, E, R only from w/W, h/H, ...; the expansions that
// contain them (ẘ → W + U+030A, ẖ → H + U+0331) neither end in W nor start with E.

import { defineGuard, proceed, steer } from '@toolgate/guest';

export default defineGuard({
  onBeforeToolCall(event) {
    if (event.toolName === 'run_query') {
      const sql = event.args.sql;
      if (typeof sql !== 'string') throw new TypeError('run_query called without a string `sql` argument');
      if (!/where/i.test(sql)) {
        return steer('Add a WHERE clause before running this query.');
      }
    }
    return proceed();
  },
});
