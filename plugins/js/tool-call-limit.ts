// tool-call-limit (steering, stateful): LangChain's ToolCallLimitMiddleware as a guard, the
// same as plugins/rust/tool-call-limit. At most `run_limit` calls per run and `thread_limit`
// per conversation — of the tool named `tool`, or of every tool when `tool` is absent. A
// call over a limit is cancelled (a benign result, is_error = false) and not counted.
//
//   [plugin.config]
//   tool = "send_email"      # absent: every tool
//   run_limit = 2            # calls allowed per run
//   thread_limit = 20        # calls allowed per conversation, across runs
//   thread_key = "thread_id" # the key in the hook's `state` holding the conversation id
//                            # (default); absent from the state: the thread limit does not apply
//
// Run counts live in the run's scope; conversation counts in the tenant's (keyed by the
// conversation id), for the plugin's `state_max_ttl_s`. The configuration is checked at load,
// with the Rust guard's messages.

import { cancel, config, defineGuard, proceed, state, stringifyJson } from '@toolgate/guest';
import type { JsonObject, JsonValue, Scope } from '@toolgate/guest';
import { configString, unexpected, unknownField } from './lib/serde.js';

/** The manifest's `config`, checked. */
interface Settings {
  tool?: string;
  runLimit?: number | bigint;
  threadLimit?: number | bigint;
  threadKey: string;
}

const FIELDS = ['tool', 'run_limit', 'thread_limit', 'thread_key'];

/** An integer limit (absent when null), or why not. */
function limit(value: JsonValue): number | bigint | undefined {
  if (value === null) return undefined;
  if (typeof value === 'bigint' || (typeof value === 'number' && Number.isInteger(value))) return value;
  if (typeof value === 'number') throw new Error('config: invalid number');
  throw new Error(`config: invalid type: ${unexpected(value)}, expected i64`);
}

/** The settings in `config`; throws what is wrong with it. */
function settings(config: JsonObject): Settings {
  const s: Settings = { threadKey: 'thread_id' };
  for (const [key, value] of Object.entries(config)) {
    if (key === 'tool') s.tool = value === null ? undefined : configString(value);
    else if (key === 'run_limit') s.runLimit = limit(value);
    else if (key === 'thread_limit') s.threadLimit = limit(value);
    else if (key === 'thread_key') s.threadKey = configString(value);
    else throw unknownField(key, FIELDS);
  }
  if (s.runLimit === undefined && s.threadLimit === undefined) {
    throw new Error('config: set run_limit, thread_limit or both');
  }
  for (const [key, n] of [['run_limit', s.runLimit], ['thread_limit', s.threadLimit]] as const) {
    if (n !== undefined && n < 0) throw new Error(`config: ${key} must be 0 or more`);
  }
  return s;
}

export default defineGuard({
  validateConfig(config) {
    settings(config);
  },

  onBeforeToolCall(event) {
    // Checked at load; a config that fails here throws (a fault).
    const s = settings(config());
    if (s.tool !== undefined && s.tool !== event.toolName) return proceed();
    const tool = s.tool ?? '*';
    const id = event.state[s.threadKey];
    const thread = id === undefined || id === null ? undefined : typeof id === 'string' ? id : stringifyJson(id);
    // Count first (atomically), then give back what was over: exactly `limit` concurrent
    // calls get through.
    const counted: [Scope, string][] = [];
    let over = false;
    if (s.runLimit !== undefined) {
      const key = `calls:${tool}`;
      over = state.add('run', key, 1) > s.runLimit || over;
      counted.push(['run', key]);
    }
    if (s.threadLimit !== undefined && thread !== undefined) {
      const key = `thread:${thread}:calls:${tool}`;
      over = state.add('tenant', key, 1, { ttlMs: Infinity }) > s.threadLimit || over;
      counted.push(['tenant', key]);
    }
    if (!over) return proceed();
    for (const [scope, key] of counted) state.add(scope, key, -1);
    return cancel(
      s.tool !== undefined
        ? `Tool call limit exceeded. Do not call '${s.tool}' again.`
        : 'Tool call limit exceeded. Do not make additional tool calls.',
    );
  },
});
