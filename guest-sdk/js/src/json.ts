// JSON text <-> JSON values without losing integers: the host passes integers of any size
// through unchanged, and so must a guard that reads and rewrites them.
//
// `parseJson` is `JSON.parse`, except that an integer outside Number's safe range (beyond
// 2^53) comes out as a `bigint` holding its exact value; `stringifyJson` is `JSON.stringify`
// that writes a `bigint` as its digits. Text with no run of 16 or more digits
// holds no such integer and goes to `JSON.parse` as is.

import type { JsonValue } from './generated/types.js';

/** A run of digits long enough to be an integer beyond 2^53 (9007199254740992 has 16). */
const LONG_DIGITS = /\d{16}/;

/** Parses JSON text; integers beyond Number's safe range become exact `bigint`s. */
export function parseJson(text: string): JsonValue {
  if (!LONG_DIGITS.test(text)) return JSON.parse(text) as JsonValue;
  return new Parser(text).document();
}

/**
 * Serialises a JSON value as `JSON.stringify` does (no spaces, `toJSON` honoured, members
 * that are `undefined` or functions left out), writing a `bigint` as its digits;
 * `undefined` for what JSON cannot hold at the top (as `JSON.stringify`).
 */
export function stringifyJson(value: unknown, key = ''): string | undefined {
  if (typeof value === 'bigint') return value.toString();
  if (value !== null && typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    value = (value as { toJSON(key: string): unknown }).toJSON(key);
  }
  if (value === null || typeof value !== 'object') {
    return typeof value === 'bigint' ? value.toString() : JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return `[${value.map((v, i) => stringifyJson(v, String(i)) ?? 'null').join(',')}]`;
  }
  const members: string[] = [];
  for (const [k, v] of Object.entries(value)) {
    const text = stringifyJson(v, k);
    if (text !== undefined) members.push(`${JSON.stringify(k)}:${text}`);
  }
  return `{${members.join(',')}}`;
}

/** A recursive-descent parser for the texts that may hold a big integer. */
class Parser {
  private at = 0;

  constructor(private readonly text: string) {}

  document(): JsonValue {
    const value = this.value();
    this.space();
    if (this.at !== this.text.length) this.fail('unexpected text after the JSON value');
    return value;
  }

  private fail(what: string): never {
    throw new SyntaxError(`${what} at position ${this.at}`);
  }

  private space(): void {
    while (this.at < this.text.length && ' \t\n\r'.includes(this.text[this.at])) this.at += 1;
  }

  private value(): JsonValue {
    this.space();
    const c = this.text[this.at];
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"') return this.string();
    if (c === '-' || (c >= '0' && c <= '9')) return this.number();
    for (const [word, value] of [['true', true], ['false', false], ['null', null]] as const) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length;
        return value;
      }
    }
    return this.fail('expected a JSON value');
  }

  private object(): JsonValue {
    const out: { [key: string]: JsonValue } = {};
    this.at += 1;
    this.space();
    if (this.text[this.at] === '}') {
      this.at += 1;
      return out;
    }
    for (;;) {
      this.space();
      if (this.text[this.at] !== '"') this.fail('expected a string key');
      const key = this.string();
      this.space();
      if (this.text[this.at] !== ':') this.fail("expected ':'");
      this.at += 1;
      // As JSON.parse: a repeated key keeps its last value (defineProperty, so "__proto__"
      // is a plain key).
      Object.defineProperty(out, key, { value: this.value(), enumerable: true, writable: true, configurable: true });
      this.space();
      const c = this.text[this.at++];
      if (c === '}') return out;
      if (c !== ',') this.fail("expected ',' or '}'");
    }
  }

  private array(): JsonValue {
    const out: JsonValue[] = [];
    this.at += 1;
    this.space();
    if (this.text[this.at] === ']') {
      this.at += 1;
      return out;
    }
    for (;;) {
      out.push(this.value());
      this.space();
      const c = this.text[this.at++];
      if (c === ']') return out;
      if (c !== ',') this.fail("expected ',' or ']'");
    }
  }

  private string(): string {
    // The string's text, escapes included, is read by JSON.parse itself.
    const start = this.at;
    this.at += 1;
    for (;;) {
      const c = this.text[this.at];
      if (c === undefined) this.fail('unterminated string');
      this.at += c === '\\' ? 2 : 1;
      if (c === '"') return JSON.parse(this.text.slice(start, this.at)) as string;
    }
  }

  private number(): number | bigint {
    const match = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;
    match.lastIndex = this.at;
    const m = match.exec(this.text);
    if (m === null) this.fail('malformed number');
    this.at += m[0].length;
    const n = Number(m[0]);
    if (m[1] === undefined && m[2] === undefined && !Number.isSafeInteger(n)) return BigInt(m[0]);
    return n;
  }
}
