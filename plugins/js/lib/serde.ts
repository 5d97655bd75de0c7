// What the example guards share: the words of the Rust guards' config reader (serde), so a
// TypeScript guard refuses a bad config with the same message as its Rust twin.

import type { JsonValue } from '@toolgate/guest';

/** What a value is, in the words of the Rust guard's config reader (serde). */
export function unexpected(value: JsonValue): string {
  if (value === null) return 'null';
  if (typeof value === 'boolean') return `boolean \`${value}\``;
  if (typeof value === 'number' || typeof value === 'bigint') return 'number';
  if (typeof value === 'string') return `string ${rustDebug(value)}`;
  return Array.isArray(value) ? 'sequence' : 'map';
}

/** A string as Rust's `{:?}` writes it. */
export function rustDebug(s: string): string {
  const named: Record<string, string> = { '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0', '"': '\\"', '\\': '\\\\' };
  let out = '';
  for (const c of s) {
    const code = c.codePointAt(0) as number;
    out += named[c] ?? (code < 0x20 || (code >= 0x7f && code < 0xa0) ? `\\u{${code.toString(16)}}` : c);
  }
  return `"${out}"`;
}

/** A string field's value, or serde's refusal of it. */
export function configString(value: JsonValue): string {
  if (typeof value === 'string') return value;
  throw new Error(`config: invalid type: ${unexpected(value)}, expected a string`);
}

/** serde's refusal of a field not among `fields` (`deny_unknown_fields`). */
export function unknownField(key: string, fields: readonly string[]): Error {
  const names = fields.map((f) => `\`${f}\``);
  const expected =
    names.length === 1 ? names[0] : names.length === 2 ? `${names[0]} or ${names[1]}` : `one of ${names.join(', ')}`;
  return new Error(`config: unknown field \`${key}\`, expected ${expected}`);
}
