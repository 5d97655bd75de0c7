// observe-all: observes all thirteen lifecycle hooks, keeping each event as the SDK hands it
// over (JSON fields parsed) in tenant state under the hook's symfonic name; its steering hook
// answers every event kept, as one JSON object, so a test reads each event off the answer.

import { LIFECYCLE_EVENTS, defineGuard, parseJson, state, steer, stringifyJson } from '@toolgate/guest';
import type { Guard, JsonObject } from '@toolgate/guest';

const observers = Object.fromEntries(
  LIFECYCLE_EVENTS.map((l) => [l.hook, (event: object) => state.set('tenant', l.symfonic, stringifyJson(event) ?? 'null')]),
);

export default defineGuard({
  ...observers,
  onBeforeToolCall() {
    const seen: JsonObject = {};
    for (const l of LIFECYCLE_EVENTS) {
      const kept = state.get('tenant', l.symfonic);
      if (kept !== undefined) seen[l.symfonic] = parseJson(kept);
    }
    return steer(stringifyJson(seen) ?? '{}');
  },
} as Guard);
