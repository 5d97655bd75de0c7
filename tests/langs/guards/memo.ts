// memo (steering): tries to carry state from one call to the next and says what it saw.
// Each call counts itself in a module-level counter and keeps its call id in a module-level
// object, then cancels with `{"calls": n, "last": <the previous call's id or null>,
// "state": <the event's state>}` as JSON text. On a fresh instance every call sees calls 1
// and last null (snapshotted: what its warm-up left, the same every call).

import { defineGuard, skip } from '@toolgate/guest';

let calls = 0;
const cell: { last: string | null } = { last: null };

export default defineGuard({
  onBeforeToolCall(event) {
    calls += 1;
    const last = cell.last;
    cell.last = event.callId;
    return skip(JSON.stringify({ calls, last, state: event.state }), false);
  },
});
