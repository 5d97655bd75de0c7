// echo (rewrite, steering): hands back the call's args as the guard read them. A rewrite
// names the same tool with `event.args` (parsed by the SDK, serialised again); a steering
// call cancels with `event.args` as JSON text. Whatever the SDK loses or reorders of the
// args (big integers, key order) shows up in what comes back.

import { cancel, defineGuard, rewrite, stringifyJson } from '@toolgate/guest';

export default defineGuard({
  onToolCallDispatch(event) {
    return rewrite(event.toolName, event.args);
  },
  onBeforeToolCall(event) {
    return cancel(stringifyJson(event.args) ?? 'null');
  },
});
