// The glue between the component's WIT exports and a guard's hooks. The build generates an
// entry module that does, for each seam the guard implements:
//
//   export const steering = bind.steering(guard);
//
// Each exported function parses the event's JSON fields, calls the hook, checks and converts
// what it returned. A hook that throws (or returns something malformed) is logged through the
// host and the exception rethrown: the call traps, and the host counts a fault for this guard.

import { log as hostLog } from 'toolgate:guard/host@0.3.0';
import type * as Routing from 'toolgate:guard/routing@0.3.0';
import type * as Rewriting from 'toolgate:guard/rewrite@0.3.0';
import type * as Steering from 'toolgate:guard/steering@0.3.0';
import type * as Result from 'toolgate:guard/result@0.3.0';
import type * as Response from 'toolgate:guard/response@0.3.0';
import type * as Config from 'toolgate:guard/config@0.3.0';
import type * as Observe from 'toolgate:guard/observe@0.3.0';
import type { wire } from './generated/types.js';
import { EVENT_JSON_FIELDS, LIFECYCLE_EVENTS, type Hooks, type JsonObject, type Verdict } from './generated/types.js';
import { parseJson, stringifyJson } from './json.js';

type SeamName = keyof typeof EVENT_JSON_FIELDS;

/**
 * Each seam's hook: symfonic's name, then its deprecated former name (the WIT function's;
 * `null` for the response seam, which never had another).
 */
const HOOKS: { [S in SeamName]: readonly [keyof Hooks, keyof Hooks | null] } = {
  routing: ['onToolRoutingDecision', 'narrow'],
  rewrite: ['onToolCallDispatch', 'dispatch'],
  steering: ['onBeforeToolCall', 'beforeToolCall'],
  result: ['onToolResult', 'onResult'],
  response: ['onResponseRender', null],
};

const MAX_LOGGED_ERROR = 4000;

function describe(value: unknown): string {
  try {
    const text = stringifyJson(value);
    if (text !== undefined) return text.length > 200 ? `${text.slice(0, 200)}...` : text;
  } catch {
    // fall through
  }
  return String(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * A copy of the event whose JSON fields are parsed on first access (then kept): a hook that
 * never reads `args` or `state` does not pay for parsing them.
 */
function parseEvent<E extends object>(seam: SeamName, event: E): any {
  return parseFields(event, EVENT_JSON_FIELDS[seam]);
}

/** A copy of `event` whose `fields` (JSON text) are parsed on first access. */
function parseFields<E extends object>(event: E, fields: readonly string[]): any {
  const parsed: Record<string, unknown> = { ...(event as Record<string, unknown>) };
  for (const field of fields) {
    const text = (event as Record<string, unknown>)[field] as string;
    Object.defineProperty(parsed, field, {
      enumerable: true,
      configurable: true,
      get() {
        let value: unknown;
        try {
          value = parseJson(text);
        } catch (err) {
          throw new TypeError(`event field "${field}" is not JSON: ${(err as Error).message}`);
        }
        Object.defineProperty(parsed, field, { value, enumerable: true, writable: true, configurable: true });
        return value;
      },
    });
  }
  return parsed;
}

/**
 * Runs a hook and converts what it returned; a throw (or a return that does not convert) is
 * logged through the host, then rethrown: a fault.
 */
function call<T, R>(hook: string, run: () => T, convert: (value: T, hook: string) => R): R {
  try {
    const out = run();
    if (out !== null && typeof out === 'object' && typeof (out as { then?: unknown }).then === 'function') {
      throw new TypeError(`${hook} returned a Promise; hooks must be synchronous`);
    }
    return convert(out, hook);
  } catch (err) {
    const text = err instanceof Error ? `${err.name}: ${err.message}\n${err.stack ?? ''}` : describe(err);
    try {
      hostLog('error', `${hook} failed: ${text}`.slice(0, MAX_LOGGED_ERROR));
    } catch {
      // The log budget is spent; the rethrow below still faults the call.
    }
    throw err;
  }
}

/**
 * The guard's hook for `seam`, under symfonic's name or its deprecated one, and the name it
 * goes by (for messages).
 */
function hookOf(guard: Hooks, seam: SeamName): [(event: any) => unknown, string] {
  const [name, deprecated] = HOOKS[seam];
  const own = typeof guard?.[name] === 'function';
  const old = deprecated !== null && typeof guard?.[deprecated] === 'function';
  if (own && old) {
    throw new TypeError(`the guard implements both ${name} and ${deprecated}, its deprecated name; keep ${name}`);
  }
  const key = own || deprecated === null ? name : deprecated;
  const fn = guard?.[key];
  if (typeof fn !== 'function') throw new TypeError(`the guard has no ${name} hook`);
  return [(fn as (event: any) => unknown).bind(guard), key];
}

function toVerdict(value: unknown, hook: string): wire.Verdict {
  if (value === undefined || value === null) return { tag: 'proceed' };
  const v = value as Verdict;
  if (v.tag === 'proceed') return { tag: 'proceed' };
  if (v.tag === 'skip' && isPlainObject(v.val) && typeof v.val.content === 'string') {
    const isError = v.val.isError;
    if (isError === undefined || isError === null || typeof isError === 'boolean') {
      return { tag: 'skip', val: { content: v.val.content, isError: isError ?? undefined } };
    }
  }
  throw new TypeError(
    `${hook} returned ${describe(value)}; return proceed(), steer(msg), cancel(msg), skip(msg, isError) or nothing`,
  );
}

function toRewrite(value: unknown, hook: string): wire.Rewrite | undefined {
  if (value === undefined || value === null) return undefined;
  if (isPlainObject(value) && typeof value.toolName === 'string' && isPlainObject(value.args)) {
    return { toolName: value.toolName, args: stringifyJson(value.args) as string };
  }
  throw new TypeError(
    `${hook} returned ${describe(value)}; return rewrite(toolName, argsObject) or nothing`,
  );
}

function toAnswer(value: unknown, hook: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  throw new TypeError(`${hook} returned ${describe(value)}; return the answer to give (a string) or nothing`);
}

function toNames(value: unknown, hook: string): string[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (Array.isArray(value) && value.every((n) => typeof n === 'string')) return [...value];
  throw new TypeError(`${hook} returned ${describe(value)}; return a list of tool names or nothing`);
}

/**
 * Per seam, the object componentize-js exports for that seam's interface: its WIT function
 * (`narrow`, `dispatch`, `beforeToolCall`, `onResult`, `render`) calling the guard's hook;
 * and `observe`, for the lifecycle hooks.
 */
export const bind = {
  routing(guard: Hooks): typeof Routing {
    const [hook, name] = hookOf(guard, 'routing');
    return { narrow: (e) => call(name, () => hook(parseEvent('routing', e)), toNames) };
  },
  rewrite(guard: Hooks): typeof Rewriting {
    const [hook, name] = hookOf(guard, 'rewrite');
    return { dispatch: (e) => call(name, () => hook(parseEvent('rewrite', e)), toRewrite) };
  },
  steering(guard: Hooks): typeof Steering {
    const [hook, name] = hookOf(guard, 'steering');
    return { beforeToolCall: (e) => call(name, () => hook(parseEvent('steering', e)), toVerdict) };
  },
  result(guard: Hooks): typeof Result {
    const [hook, name] = hookOf(guard, 'result');
    return {
      onResult: (e) => {
        call(name, () => hook(parseEvent('result', e)), () => undefined);
      },
    };
  },
  response(guard: Hooks): typeof Response {
    const [hook, name] = hookOf(guard, 'response');
    return { render: (e) => call(name, () => hook(parseEvent('response', e)), toAnswer) };
  },
  observe: bindObserve,
};

/**
 * The `observe` interface's export for a guard implementing lifecycle hooks (`onLlmEnd`, ...):
 * `subscriptions` answers the flags of exactly the hooks the guard implements, and `observe`
 * calls the hook of the event's case with the event, its JSON fields parsed on first access.
 * A hook that throws faults the observation (logged, rethrown: the host counts and skips it).
 */
function bindObserve(guard: Hooks): typeof Observe {
  const implemented = LIFECYCLE_EVENTS.filter((l) => typeof guard?.[l.hook] === 'function');
  if (implemented.length === 0) throw new TypeError('the guard implements no lifecycle hook');
  const byTag = new Map<string, (typeof LIFECYCLE_EVENTS)[number]>(implemented.map((l) => [l.tag, l]));
  return {
    subscriptions: () => Object.fromEntries(implemented.map((l) => [l.flag, true])) as Observe.EventKinds,
    observe: (e) => {
      const l = byTag.get(e.tag);
      // The host sends only the events subscribed to; anything else is ignored.
      if (l === undefined) return;
      const hook = (guard[l.hook] as (event: any) => unknown).bind(guard);
      call(l.hook, () => hook(parseFields(e.val, l.json)), () => undefined);
    },
  };
}

/** A guard's check of its configuration (the `validateConfig` member of its default export). */
type ConfigCheck = { validateConfig?: (config: JsonObject) => unknown };

/** Why `validateConfig` refused: a thrown error's message, else the thrown value described. */
function refusal(err: unknown): string {
  const text = err instanceof Error ? err.message : typeof err === 'string' ? err : describe(err);
  return text === '' ? 'validateConfig refused the config' : text;
}

/**
 * The `config` interface's export: `validate-config` calls the guard's `validateConfig`
 * with the manifest `config`, parsed. Returning nothing accepts it; returning a string, or
 * throwing, refuses the plugin with that message (a thrown error's `message`). Any other
 * return value (a Promise, an object) refuses it too, saying so.
 */
export function bindConfig(guard: ConfigCheck): typeof Config {
  const check = guard?.validateConfig;
  if (typeof check !== 'function') throw new TypeError('the guard has no validateConfig');
  return {
    validateConfig(text: string): void {
      let out: unknown;
      try {
        out = check.call(guard, (text.trim() === '' ? {} : parseJson(text)) as JsonObject);
      } catch (err) {
        // componentize-js turns what an export throws into the result's `err` case.
        throw refusal(err);
      }
      if (out === undefined || out === null) return;
      if (typeof out === 'string') throw refusal(out);
      throw `validateConfig returned ${describe(out)}; return nothing to accept the config, or a message (or throw) to refuse it`;
    },
  };
}

/** Sends `console.*` to the host's log (the component has no stdout of its own). */
export function routeConsoleToHostLog(): void {
  const at = (level: 'trace' | 'debug' | 'info' | 'warn' | 'error') =>
    (...items: unknown[]) =>
      hostLog(level, items.map((i) => (typeof i === 'string' ? i : describe(i))).join(' '));
  const console = {
    log: at('info'),
    info: at('info'),
    debug: at('debug'),
    trace: at('trace'),
    warn: at('warn'),
    error: at('error'),
  };
  (globalThis as unknown as { console: unknown }).console = console;
}
