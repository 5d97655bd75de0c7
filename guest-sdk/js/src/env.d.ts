// The globals a guard can use besides ECMAScript itself.

/** In a guard, `console` writes to the host's log (`log` → info; `warn`, `error`, ... by level). */
interface Console {
  log(...data: unknown[]): void;
  info(...data: unknown[]): void;
  debug(...data: unknown[]): void;
  trace(...data: unknown[]): void;
  warn(...data: unknown[]): void;
  error(...data: unknown[]): void;
}
declare var console: Console;

/** UTF-8 text to bytes (the engine's own, as in browsers and Node). */
declare class TextEncoder {
  encode(input?: string): Uint8Array;
}

/** Bytes to text (UTF-8 by default; invalid sequences become U+FFFD). */
declare class TextDecoder {
  constructor(label?: string);
  decode(input?: Uint8Array): string;
}
