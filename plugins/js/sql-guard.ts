// sql-guard (steering): a `run_query` call whose SQL has no WHERE clause (in any case) is
// refused with an error result the model corrects itself from; every other call proceeds.
//
// The seed's SqlGuard, line for line: like the seed (which raises on a missing key), a
// `run_query` call without a string `sql` argument is an error in the guard; it throws, and
// the host logs the fault and lets the call proceed.

import { defineGuard, proceed, steer } from '@toolgate/guest';

export default defineGuard({
  beforeToolCall(event) {
    if (event.toolName === 'run_query') {
      const sql = event.args.sql;
      if (typeof sql !== 'string') throw new TypeError('run_query called without a string `sql` argument');
      if (!sql.toUpperCase().includes('WHERE')) {
        return steer('Add a WHERE clause before running this query.');
      }
    }
    return proceed();
  },
});
