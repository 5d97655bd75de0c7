// sql-guard (steering): a `run_query` call whose SQL has no WHERE clause is refused with an
// error result the model corrects itself from; every other call proceeds.

import { defineGuard, proceed, steer } from '@toolgate/guest';

export default defineGuard({
  beforeToolCall(event) {
    const sql = event.args.sql;
    if (event.toolName === 'run_query' && typeof sql === 'string' && !sql.toUpperCase().includes('WHERE')) {
      return steer('Add a WHERE clause before running this query.');
    }
    return proceed();
  },
});
