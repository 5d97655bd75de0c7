// pii-redact (response): replaces every e-mail address and phone number in the run's final
// answer with the config's `mask`, and leaves an answer that has none alone (it returns
// nothing: the content stays as it is); the same as plugins/rust/pii-redact.
//
// - an e-mail address: `local@domain.tld` (a local part of letters, digits and `._%+-`; a
//   domain of at least two dot-separated labels);
// - a phone number: an optional `+`, then 9 to 15 digits, single spaces, dashes, dots or
//   parentheses between them (so a date such as `2024-01-15`, 8 digits, is not one).
//
//   [[plugin]]
//   path = "pii-redact.wasm"
//   [plugin.config]
//   mask = "[redacted]"   # default; must not be empty
//
// The configuration is checked at load, with the Rust guard's messages.

import { config, defineGuard } from '@toolgate/guest';
import type { JsonObject } from '@toolgate/guest';
import { configString, unknownField } from './lib/serde.js';

const DEFAULT_MASK = '[redacted]';

/** The mask in `config`; throws what is wrong with it. */
function maskOf(config: JsonObject): string {
  let mask = DEFAULT_MASK;
  for (const [key, value] of Object.entries(config)) {
    if (key === 'mask') mask = configString(value);
    else throw unknownField(key, ['mask']);
  }
  if (mask === '') throw new Error('mask must not be empty');
  return mask;
}

// Every character a match is made of is ASCII, so testing UTF-16 code units matches what
// the Rust guard's tests on UTF-8 bytes match.
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isAlnum = (c: number) => isDigit(c) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const isLocal = (c: number) => isAlnum(c) || '._%+-'.includes(String.fromCharCode(c));
const isLabel = (c: number) => isAlnum(c) || c === 0x2d;

/** The end of an e-mail address starting at `i`, if one does. */
function emailAt(s: string, i: number): number | undefined {
  if (i > 0 && isLocal(s.charCodeAt(i - 1))) return undefined;
  let j = i;
  while (j < s.length && isLocal(s.charCodeAt(j))) j++;
  if (j === i || s[j] !== '@') return undefined;
  let k = j + 1;
  let labels = 0;
  let end = j + 1;
  for (;;) {
    const start = k;
    while (k < s.length && isLabel(s.charCodeAt(k))) k++;
    if (k === start) break;
    labels++;
    end = k;
    if (s[k] === '.') k++;
    else break;
  }
  return labels >= 2 ? end : undefined;
}

/** The end of a phone number starting at `i`, if one does. */
function phoneAt(s: string, i: number): number | undefined {
  if (i > 0 && (isAlnum(s.charCodeAt(i - 1)) || s[i - 1] === '+')) return undefined;
  let j = i;
  if (s[j] === '+' || s[j] === '(') j++;
  let digits = 0;
  let end: number | undefined;
  let gap = false;
  for (; j < s.length; j++) {
    const c = s[j];
    if (isDigit(s.charCodeAt(j))) {
      digits++;
      end = j + 1;
      gap = false;
    } else if (' -.()'.includes(c) && !gap && digits > 0) {
      gap = c !== ')';
    } else {
      break;
    }
  }
  return digits >= 9 && digits <= 15 ? end : undefined;
}

/** `text` with every address and number replaced by `mask`. */
export function redact(text: string, mask: string): string {
  let out = '';
  let i = 0;
  let last = 0;
  while (i < text.length) {
    const end = emailAt(text, i) ?? phoneAt(text, i);
    if (end === undefined) {
      i++;
      continue;
    }
    out += text.slice(last, i) + mask;
    i = last = end;
  }
  return out + text.slice(last);
}

export default defineGuard({
  validateConfig(config) {
    maskOf(config);
  },

  onResponseRender(event) {
    let mask = DEFAULT_MASK;
    try {
      mask = maskOf(config());
    } catch {
      // Checked at load; the default, as the Rust guard does.
    }
    const redacted = redact(event.content, mask);
    return redacted === event.content ? undefined : redacted;
  },
});
