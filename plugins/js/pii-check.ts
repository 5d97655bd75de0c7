// pii-check (steering, outbound HTTP): before `send_email` runs, asks a classifier whether
// the mail carries personal data, and steers the model to remove it if so; the same as
// plugins/rust/pii-check.
//
// It POSTs `{"text": T}` as JSON to the classifier at its config's `url` — `T` is the call's
// `body` argument, or the args as JSON text when there is no `body` — which answers
// `{"pii": true | false}`. On `true` the call is refused with an error result
// (is_error = true) the model retries against. A network fault (the classifier down, slow
// past the call's deadline, off the plugin's grant) traps the call and the plugin's
// `on_error` applies: `skip` lets the mail go, `deny` refuses it. So does an answer that is
// not `{"pii": true | false}` with a 2xx status.
//
//   [[plugin]]
//   path = "pii-check.wasm"
//   allowed_hosts = ["https://pii.internal.example"]
//   http_methods = ["POST"]
//   on_error = "deny"
//   [plugin.config]
//   url = "https://pii.internal.example/v1/classify"
//   tool = "send_email"   # default
//
// The configuration is checked at load, with the Rust guard's messages.

import { config, defineGuard, http, proceed, steer, stringifyJson } from '@toolgate/guest';
import type { JsonObject } from '@toolgate/guest';
import { configString, rustDebug, unknownField } from './lib/serde.js';

/** What the model sees when the mail carries personal data. */
export const MESSAGE =
  'This email contains personal data (an address, a phone number, a name with contact details ...). ' +
  'Remove the personal data from the email, then send it again.';

/** The manifest's `config`, checked. */
interface Settings {
  url: string;
  tool: string;
}

const FIELDS = ['url', 'tool'];

/** The settings in `config`; throws what is wrong with it. */
function settings(config: JsonObject): Settings {
  let url: string | undefined;
  let tool = 'send_email';
  for (const [key, value] of Object.entries(config)) {
    if (key === 'url') url = configString(value);
    else if (key === 'tool') tool = configString(value);
    else throw unknownField(key, FIELDS);
  }
  if (url === undefined) throw new Error('config: missing field `url`');
  if (!url.startsWith('http://') && !url.startsWith('https://')) {
    throw new Error(`config: url must be an http:// or https:// URL, not ${rustDebug(url)}`);
  }
  return { url, tool };
}

export default defineGuard({
  validateConfig(config) {
    settings(config);
  },

  onBeforeToolCall(event) {
    // Checked at load; a config that fails here throws (a fault).
    const s = settings(config());
    if (event.toolName !== s.tool) return proceed();
    const body = event.args.body;
    const text = typeof body === 'string' ? body : stringifyJson(event.args);
    const answer = http.postJson(s.url, { text });
    let pii: unknown;
    try {
      pii = (answer.json() as { pii?: unknown } | null)?.pii;
    } catch {
      // Not JSON: not an answer (below).
    }
    if (answer.ok && pii === true) return steer(MESSAGE);
    if (answer.ok && pii === false) return proceed();
    // Not an answer: a fault, so `on_error` decides.
    throw new Error(`the classifier at ${s.url} answered ${answer.status} ${rustDebug(answer.text())}, not {"pii": true|false}`);
  },
});
