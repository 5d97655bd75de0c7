// Generated from wit/guard.wit by scripts/gen-types.mjs: do not edit.
declare module 'toolgate:guard/state@0.3.0' {
  /**
   * The value at `key`, or none when it is absent or expired.
   */
  export function get(scope: Scope, key: string): string | undefined;
  /**
   * Sets `key` to `value`, visible to other calls once this call returns.
   * `ttl-ms`: how long the value lives, in milliseconds (none: as long as
   * its scope; 0: it is gone at once, like `delete`; values above the
   * plugin's `state_max_ttl` are cut to it).
   */
  export function set(scope: Scope, key: string, value: string, ttlMs: bigint | undefined): void;
  /**
   * Removes `key`, visible to other calls once this call returns.
   */
  export { _delete as delete };
  function _delete(scope: Scope, key: string): void;
  /**
   * Adds `delta` to the integer at `key` (absent: 0) at once and
   * atomically, and returns the new value. `ttl-ms` is the expiry of a key
   * this call creates (an existing key keeps its own): a counter over a
   * fixed window. A key holding something other than a decimal integer,
   * or a sum outside s64, is a misuse (`state-invalid`).
   */
  export function add(scope: Scope, key: string, delta: bigint, ttlMs: bigint | undefined): bigint;
  /**
   * Whose state an operation reads or writes.
   * # Variants
   * 
   * ## `"run"`
   * 
   * This run's: owned by (tenant, plugin, the event's `run-id`). It
   * lives while the run is active and is dropped once the run has been
   * idle for the plugin's `state_run_ttl`.
   * ## `"tenant"`
   * 
   * The tenant's: owned by (tenant, plugin), shared by every run of the
   * tenant (and by every replica sharing one store). For limits across
   * runs; the guard builds its own keys inside it (say, from a
   * conversation id it finds in the hook's `state`).
   */
  export type Scope = 'run' | 'tenant';
}
