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
