// budget (lifecycle + steering + routing): plugins/rust/token-budget in TypeScript, so its
// case file runs against an observer of each language. onLlmEnd adds each usage's total
// tokens to the run's state; once a run has used config `max_tokens`, every tool call of that
// run is cancelled and routing hides every tool.

import { cancel, config, defineGuard, proceed, state } from '@toolgate/guest';
import type { JsonObject } from '@toolgate/guest';

/** The total tokens of a usage dict: `total_tokens`, else input + output, else prompt + completion. */
function total(usage: JsonObject): number {
  const n = (key: string) => {
    const v = usage[key];
    return typeof v === 'number' && v > 0 ? Math.floor(v) : 0;
  };
  if (typeof usage.total_tokens === 'number') return n('total_tokens');
  if ('input_tokens' in usage || 'output_tokens' in usage) return n('input_tokens') + n('output_tokens');
  return n('prompt_tokens') + n('completion_tokens');
}

/** The budget of the config, or why it is refused. */
function budget(cfg: JsonObject): number | string {
  const max = cfg.max_tokens;
  if (typeof max !== 'number' || !Number.isInteger(max)) return 'max_tokens must be an integer';
  return max < 1 ? `max_tokens must be at least 1, not ${max}` : max;
}

/** The budget, when this run has used it up. */
function exceeded(): number | undefined {
  const max = budget(config());
  if (typeof max === 'string') return undefined;
  return Number(state.get('run', 'tokens') ?? '0') >= max ? max : undefined;
}

export default defineGuard({
  onLlmEnd(event) {
    const tokens = total(event.usage);
    if (tokens > 0) state.add('run', 'tokens', tokens);
  },
  onBeforeToolCall() {
    const max = exceeded();
    return max === undefined ? proceed() : cancel(`Token budget of ${max} exceeded. Answer with what you have.`);
  },
  onToolRoutingDecision() {
    return exceeded() === undefined ? undefined : [];
  },
  validateConfig(cfg) {
    const max = budget(cfg);
    return typeof max === 'string' ? max : undefined;
  },
});
