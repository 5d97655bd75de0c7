// State a guard keeps between calls, in a scope the host chooses (contract 0.3.0, `state`).
//
//   import { state } from '@toolgate/guest';
//   const sent = state.add('run', 'send_email', 1);
//   if (sent > 2) {
//     state.add('run', 'send_email', -1); // a refused call is not counted
//     return cancel("Tool call limit exceeded. Do not call 'send_email' again.");
//   }
//
// A guard that uses `state` imports `toolgate:guard/state`; one that does not, does not.

import { add as witAdd, delete as witDelete, get as witGet, set as witSet } from 'toolgate:guard/state@0.3.0';
import type { Scope as WitScope } from 'toolgate:guard/state@0.3.0';

/**
 * Whose state an operation reads or writes. `'run'`: this run's (tenant, plugin, the event's
 * `runId`), dropped once the run has been idle for the plugin's `state_run_ttl_s`.
 * `'tenant'`: the tenant's (tenant, plugin), shared by all its runs and by every replica
 * sharing one store.
 */
export type Scope = WitScope;

/** How long a value lives. */
export interface TtlOptions {
  /**
   * Milliseconds: a non-negative integer (`number` or `bigint`), or `Infinity` for the
   * longest the plugin allows (its `state_max_ttl_s`; longer values are cut to it too).
   * Absent: as long as its scope. On `set`, 0 removes the key at once, like `delete`; on
   * `add`, it is the expiry of a key the call creates (an existing key keeps its own).
   */
  ttlMs?: number | bigint;
}

const S64_MIN = -(2n ** 63n);
const S64_MAX = 2n ** 63n - 1n;
const U64_MAX = 2n ** 64n - 1n;

function checkScope(op: string, scope: unknown): asserts scope is Scope {
  if (scope !== 'run' && scope !== 'tenant') {
    throw new TypeError(`state.${op}: scope must be 'run' or 'tenant', not ${String(scope)}`);
  }
}

function checkString(op: string, what: string, value: unknown): asserts value is string {
  if (typeof value !== 'string') {
    throw new TypeError(`state.${op}: ${what} must be a string, not ${typeof value}`);
  }
}

/** The wire's `option<u64>` for `options.ttlMs`. */
function ttl(op: string, options: TtlOptions | undefined): bigint | undefined {
  const t = options?.ttlMs;
  if (t === undefined) return undefined;
  if (t === Infinity) return U64_MAX;
  if (typeof t === 'number' && Number.isSafeInteger(t) && t >= 0) return BigInt(t);
  if (typeof t === 'bigint' && t >= 0n && t <= U64_MAX) return t;
  throw new RangeError(`state.${op}: ttlMs must be an integer 0..2^64-1 or Infinity, not ${String(t)}`);
}

/** The wire's `s64` for `delta`. */
function s64(op: string, delta: unknown): bigint {
  if (typeof delta === 'number' && Number.isSafeInteger(delta)) return BigInt(delta);
  if (typeof delta === 'bigint' && delta >= S64_MIN && delta <= S64_MAX) return delta;
  throw new RangeError(`state.${op}: delta must be a safe integer or a bigint in s64, not ${String(delta)}`);
}

/** The contract's `add`, its arguments checked but `delta`'s (already the wire's s64). */
function addWire(scope: Scope, key: string, delta: bigint, options: TtlOptions | undefined): bigint {
  checkScope('add', scope);
  checkString('add', 'key', key);
  // The engine hands the s64 back as an unsigned BigInt of the same 64 bits.
  return BigInt.asIntN(64, witAdd(scope, key, delta, ttl('add', options)));
}

/**
 * The guard's state: strings under string keys, in the `'run'` or the `'tenant'` scope.
 *
 * Within one call a guard reads its own writes. `set` and `delete` become visible to other
 * calls when this call returns; a call that throws (or faults otherwise) leaves none of
 * them. `add` is applied at once and atomically, so concurrent calls count exactly; a call
 * that faults gives back what it added. Going over a budget (operations per call, keys or
 * bytes per scope), the store being unreachable, or `add` on a value that is not an integer
 * traps the call: the host treats it like any fault. So does a misuse caught here (a scope
 * other than `'run'`/`'tenant'`, a key or value that is not a string, a bad `ttlMs`).
 *
 * Off WebAssembly (`@toolgate/guest/testing`), the same calls work on an in-memory map
 * that the test resets.
 */
export const state = {
  /** The value at `key`, or `undefined` when absent or expired. */
  get(scope: Scope, key: string): string | undefined {
    checkScope('get', scope);
    checkString('get', 'key', key);
    return witGet(scope, key);
  },

  /** Sets `key` to `value` (for `ttlMs` milliseconds, or as long as its scope). */
  set(scope: Scope, key: string, value: string, options?: TtlOptions): void {
    checkScope('set', scope);
    checkString('set', 'key', key);
    checkString('set', 'value', value);
    witSet(scope, key, value, ttl('set', options));
  },

  /** Removes `key`. */
  delete(scope: Scope, key: string): void {
    checkScope('delete', scope);
    checkString('delete', 'key', key);
    witDelete(scope, key);
  },

  /**
   * Adds `delta` to the integer at `key` (absent: 0), at once and atomically; returns the
   * new value as a `number`. The host keeps an s64: a sum beyond ±(2^53 - 1), which a
   * `number` cannot hold exactly, throws a RangeError (the call faults, and the host gives
   * the add back); use `addBigInt` for counters that large.
   */
  add(scope: Scope, key: string, delta: number | bigint, options?: TtlOptions): number {
    const sum = addWire(scope, key, s64('add', delta), options);
    const n = Number(sum);
    if (!Number.isSafeInteger(n)) {
      throw new RangeError(`state.add on "${key}": ${sum} is beyond a safe integer; use state.addBigInt`);
    }
    return n;
  },

  /** Like `add`, exact over the whole s64 range: `delta` and the new value are `bigint`s. */
  addBigInt(scope: Scope, key: string, delta: bigint, options?: TtlOptions): bigint {
    return addWire(scope, key, s64('add', delta), options);
  },
};
