// hostile-observe: every lifecycle event it observes throws (on_llm_end, on_agent_start);
// its steering hook still answers, steering calls to `forbidden`.

import { defineGuard, proceed, steer } from '@toolgate/guest';

export default defineGuard({
  onLlmEnd(event) {
    throw new Error(`onLlmEnd exploded on ${event.runId}`);
  },
  onAgentStart() {
    throw new Error('onAgentStart exploded');
  },
  onBeforeToolCall(event) {
    return event.toolName === 'forbidden' ? steer('no') : proceed();
  },
});
