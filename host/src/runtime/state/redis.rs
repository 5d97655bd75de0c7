//! The Redis state store: what several replicas share. Every operation is
//! one Lua script, so each is atomic on the server and concurrent calls of
//! every replica count exactly; a call's commit is one script over both of
//! its scopes, all or nothing.
//!
//! # Layout
//!
//! A scope is three Redis keys under one prefix, `tg:{T.P}:t` for the
//! tenant scope and `tg:{T.P}:r:R` for a run's, with T, P and R the
//! tenant, plugin and run in lower-case hex (so no byte of a name means
//! anything to Redis, and the two scopes of one plugin share a hash slot):
//!
//! - `…:h`, a hash: the guard's keys and values;
//! - `…:x`, a sorted set: the keys that expire, scored by when (the
//!   server's clock, in ms);
//! - `…:b`, a string: the key and value bytes the scope holds.
//!
//! Expired keys are reclaimed a few at a time by the next operation on
//! their scope (never by scanning); a run's scope expires whole after
//! `state_run_ttl` without use (`PEXPIRE` on its three keys). Redis's own
//! memory limit (`maxmemory`) is the store's total: a full Redis refuses a
//! script that writes whole, before running it (Redis 7 script flags), as
//! `state-full` — the host's fault, not the guard's.
//!
//! # Each tenant's part
//!
//! A tenant's guards hold at most a quarter of `maxmemory` (read on first
//! use), in charged bytes: key and value bytes, plus 96 per key and 256 per
//! scope for what Redis spends on them. Two keys per tenant T keep count,
//! `tg:{T}:u` (a hash: `k` and `c`, the keys and charged bytes in all, and
//! `<scope>|k`, `<scope>|c` for each scope as last counted) and `tg:{T}:e`
//! (a sorted set: the run scopes, scored by when they go idle). Every
//! script brings the totals in line with the scopes it touched (`sync`),
//! in the same atomic step as its writes, after checking a write against
//! the part. A run's scope that Redis expires leaves its recorded count
//! behind; the tenant's next operations take it off (16 at a time,
//! deleting the run's keys if Redis has not yet), so an idle run's share
//! comes back once — neither leaked nor freed early: a run's score is its
//! keys' expiry when first counted, and one found due whose keys' `PTTL`
//! is still ahead (used since) is scored again rather than reclaimed.
//!
//! # Failures
//!
//! An unreachable, failing or slow Redis is `state-unavailable`, never a
//! wait past the call's deadline (the caller bounds each operation). After
//! a failure a breaker fails operations at once for a while (50 ms,
//! doubling to 2 s) and then lets one through to probe; the connection
//! manager reconnects by itself, so the store comes back with Redis.
//!
//! An `add` whose answer never arrived (Redis slow past the deadline, or
//! lost) may or may not have been applied; neither it nor any other add of
//! its call is given back (see `CallState::end`), so a counter errs toward
//! counting one call too many (a budget refuses early, never late).

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::{Script, ScriptInvocation, Value};
use tokio::sync::OnceCell;

use crate::fault::{Fault, ImportRefused};
use crate::runtime::state::{
    Adds, Pending, ScopeId, StateEntry, StateFilter, StateLimits, Store, Write, Writes,
    over_budget, refused,
};

/// Every script's shared helpers.
const PRELUDE: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Reclaims up to 32 of the scope's expired keys.
local function reap(h, x, b, now)
  local dead = redis.call('ZRANGEBYSCORE', x, '-inf', now, 'LIMIT', 0, 32)
  for _, f in ipairs(dead) do
    local v = redis.call('HGET', h, f)
    if v then
      redis.call('HDEL', h, f)
      redis.call('DECRBY', b, #f + #v)
    end
    redis.call('ZREM', x, f)
  end
end
-- The live value at f (an expired one is removed first), or false.
local function fresh(h, x, b, f, now)
  local at = redis.call('ZSCORE', x, f)
  if at and tonumber(at) <= now then
    local v = redis.call('HGET', h, f)
    if v then
      redis.call('HDEL', h, f)
      redis.call('DECRBY', b, #f + #v)
    end
    redis.call('ZREM', x, f)
    return false
  end
  return redis.call('HGET', h, f)
end
-- A run's scope lives `idle` ms past its last use; an empty scope goes.
local function touch(h, x, b, idle)
  if redis.call('HLEN', h) == 0 then
    redis.call('DEL', h, x, b)
  elseif idle > 0 then
    redis.call('PEXPIRE', h, idle)
    redis.call('PEXPIRE', x, idle)
    redis.call('PEXPIRE', b, idle)
  end
end
local function held(b)
  return tonumber(redis.call('GET', b) or '0')
end
-- Sets f to v (expiring at `at` ms, or never when at < 0); returns the
-- change in bytes.
local function put(h, x, f, old, v, at)
  redis.call('HSET', h, f, v)
  if at >= 0 then redis.call('ZADD', x, at, f) else redis.call('ZREM', x, f) end
  if old then return #v - #old end
  return #f + #v
end
-- What a scope of k keys holding n bytes is charged to its tenant's part:
-- its bytes, and what Redis spends on each key and on the scope itself.
local function charged(k, n)
  if k == 0 then return 0 end
  return n + 96 * k + 256
end
-- The tenant's keys and charged bytes in all (u: `k`, `c`).
local function tenant_held(u)
  local t = redis.call('HMGET', u, 'k', 'c')
  return tonumber(t[1] or '0'), tonumber(t[2] or '0')
end
-- Brings the tenant's totals in line with scope h as it is now: what the
-- scope was last charged (u: base|k, base|c) is replaced by what it holds,
-- and a run scope newly counted is noted (e, scored by when it expires).
local function sync(h, b, u, e, now)
  local base = string.sub(h, 1, -3)
  local k, c = redis.call('HLEN', h), 0
  if k > 0 then c = charged(k, held(b)) end
  local was = redis.call('HMGET', u, base .. '|k', base .. '|c')
  local ok, oc = tonumber(was[1] or '0'), tonumber(was[2] or '0')
  if k ~= ok then redis.call('HINCRBY', u, 'k', k - ok) end
  if c ~= oc then redis.call('HINCRBY', u, 'c', c - oc) end
  local run = string.sub(base, -2) ~= ':t'
  if k == 0 then
    if ok ~= 0 or oc ~= 0 then redis.call('HDEL', u, base .. '|k', base .. '|c') end
    if run then redis.call('ZREM', e, base) end
  else
    if k ~= ok or c ~= oc then redis.call('HSET', u, base .. '|k', k, base .. '|c', c) end
    if run and ok == 0 then
      local ttl = redis.call('PTTL', h)
      if ttl > 0 then redis.call('ZADD', e, now + ttl, base) end
    end
  end
end
-- Reclaims up to 16 of the tenant's runs that may have gone idle: one
-- used since (its keys' expiry, PTTL, still ahead) is scored again; one
-- idle has its keys deleted (whether or not Redis has dropped them yet)
-- and what it was charged taken off.
local function idle_runs(u, e, now)
  local due = redis.call('ZRANGEBYSCORE', e, '-inf', now, 'LIMIT', 0, 16)
  for _, base in ipairs(due) do
    local ttl = redis.call('PTTL', base .. ':h')
    if ttl > 0 then
      redis.call('ZADD', e, now + ttl, base)
    else
      redis.call('DEL', base .. ':h', base .. ':x', base .. ':b')
      sync(base .. ':h', base .. ':b', u, e, now)
    end
  end
end
-- Ends an operation on a scope: touched, and its tenant's totals synced.
local function finish(h, x, b, u, e, idle, now)
  touch(h, x, b, idle)
  sync(h, b, u, e, now)
end
"#;

/// `get`: KEYS h x b u e; ARGV key, idle ms. The value or nil.
const GET: &str = r#"
local h, x, b, u, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_ms()
reap(h, x, b, now)
local v = fresh(h, x, b, ARGV[1], now)
finish(h, x, b, u, e, tonumber(ARGV[2]), now)
return v
"#;

/// `add`: KEYS h x b u e; ARGV key, delta, ttl ms (-1: none), idle ms, max
/// keys, max bytes, the tenant's part (charged bytes). `{"ok", sum,
/// created}`, `{"keys"|"bytes"|"part", n}` or `{"invalid", message}`.
const ADD: &str = r#"
local h, x, b, u, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local f, delta, ttl, idle = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local maxk, maxb, part = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms()
idle_runs(u, e, now)
reap(h, x, b, now)
local old = fresh(h, x, b, f, now)
sync(h, b, u, e, now)
local _, tc = tenant_held(u)
local k0, n0 = redis.call('HLEN', h), held(b)
if not old then
  if ttl == 0 then return {'ok', delta, '0'} end
  local keys, bytes = k0 + 1, n0 + #f + #delta
  if keys > maxk then finish(h, x, b, u, e, idle, now) return {'keys', tostring(keys)} end
  if bytes > maxb then finish(h, x, b, u, e, idle, now) return {'bytes', tostring(bytes)} end
  local grown = tc + charged(keys, bytes) - charged(k0, n0)
  if grown > part then finish(h, x, b, u, e, idle, now) return {'part', tostring(grown)} end
  local at = -1
  if ttl > 0 then at = now + ttl end
  redis.call('INCRBY', b, put(h, x, f, false, delta, at))
  finish(h, x, b, u, e, idle, now)
  return {'ok', delta, '1'}
end
local ok, err = pcall(redis.call, 'HINCRBY', h, f, delta)
if not ok then
  finish(h, x, b, u, e, idle, now)
  return {'invalid', tostring(err.err or err)}
end
local v = redis.call('HGET', h, f)
local bytes = n0 + #v - #old
local grown = tc + #v - #old
if #v > #old and (bytes > maxb or grown > part) then
  redis.call('HSET', h, f, old)
  finish(h, x, b, u, e, idle, now)
  if bytes > maxb then return {'bytes', tostring(bytes)} end
  return {'part', tostring(grown)}
end
redis.call('INCRBY', b, #v - #old)
finish(h, x, b, u, e, idle, now)
return {'ok', v, '0'}
"#;

/// A call's commit: KEYS h x b of each scope, then u e; ARGV max keys, max
/// bytes, the tenant's part, then per scope: idle ms, writes, and per
/// write: key, `s` value ttl-ms (-1: none) or `d`. Every scope, and the
/// tenant's part, is checked before anything is written. `{"ok"}`,
/// `{"keys"|"bytes", n, scope index}` or `{"part", n}`.
const COMMIT: &str = r#"
local maxk, maxb, part = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local u, e = KEYS[#KEYS - 1], KEYS[#KEYS]
local now = now_ms()
idle_runs(u, e, now)
local scopes, i, grow = {}, 4, 0
for s = 1, (#KEYS - 2) / 3 do
  local h, x, b = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
  local idle, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  i = i + 2
  reap(h, x, b, now)
  sync(h, b, u, e, now)
  local keys, bytes, writes = redis.call('HLEN', h), held(b), {}
  local k0, n0 = keys, bytes
  for _ = 1, n do
    local f, kind = ARGV[i], ARGV[i + 1]
    local old = fresh(h, x, b, f, now)
    if kind == 's' then
      local v, ttl = ARGV[i + 2], tonumber(ARGV[i + 3])
      i = i + 4
      if old then bytes = bytes + #v - #old else keys, bytes = keys + 1, bytes + #f + #v end
      local at = -1
      if ttl >= 0 then at = now + ttl end
      writes[#writes + 1] = {f, old, v, at}
    else
      i = i + 2
      if old then keys, bytes = keys - 1, bytes - #f - #old end
      writes[#writes + 1] = {f, old}
    end
  end
  if keys > maxk then return {'keys', tostring(keys), tostring(s)} end
  if bytes > maxb then return {'bytes', tostring(bytes), tostring(s)} end
  grow = grow + charged(keys, bytes) - charged(k0, n0)
  scopes[s] = {h, x, b, idle, writes}
end
local _, tc = tenant_held(u)
if grow > 0 and tc + grow > part then return {'part', tostring(tc + grow)} end
for _, s in ipairs(scopes) do
  local h, x, b, idle, writes = s[1], s[2], s[3], s[4], s[5]
  local grown = 0
  for _, w in ipairs(writes) do
    if w[3] then
      grown = grown + put(h, x, w[1], w[2], w[3], w[4])
    elseif w[2] then
      redis.call('HDEL', h, w[1])
      redis.call('ZREM', x, w[1])
      grown = grown - #w[1] - #w[2]
    end
  end
  redis.call('INCRBY', b, grown)
  finish(h, x, b, u, e, idle, now)
end
return {'ok'}
"#;

/// A faulted call's adds given back, newest first: KEYS h x b per add,
/// then u e; ARGV per add: key, the delta that gives it back, created
/// (`1`/`0`). A key gone, or no longer an integer, is left as it is; a
/// created key back at 0 is removed.
const UNDO: &str = r#"
local u, e = KEYS[#KEYS - 1], KEYS[#KEYS]
local now = now_ms()
for a = 1, (#KEYS - 2) / 3 do
  local h, x, b = KEYS[3 * a - 2], KEYS[3 * a - 1], KEYS[3 * a]
  local f, back, created = ARGV[3 * a - 2], ARGV[3 * a - 1], ARGV[3 * a]
  local old = fresh(h, x, b, f, now)
  if old then
    if pcall(redis.call, 'HINCRBY', h, f, back) then
      local v = redis.call('HGET', h, f)
      if created == '1' and v == '0' then
        redis.call('HDEL', h, f)
        redis.call('ZREM', x, f)
        redis.call('DECRBY', b, #f + #old)
      else
        redis.call('INCRBY', b, #v - #old)
      end
    end
    if redis.call('HLEN', h) == 0 then redis.call('DEL', h, x, b) end
  end
  sync(h, b, u, e, now)
end
return 0
"#;

/// The operator's clear of one scope: KEYS h x b u e. How many keys it
/// held.
const CLEAR: &str = r#"
local h, x, b, u, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local n = redis.call('HLEN', h)
redis.call('DEL', h, x, b)
sync(h, b, u, e, now_ms())
return n
"#;

/// The scripts, hashed once.
struct Scripts {
    get: Script,
    add: Script,
    commit: Script,
    undo: Script,
    clear: Script,
}

impl Scripts {
    fn new() -> Scripts {
        // A script that may grow the store is refused whole, before it
        // runs, by a Redis past its `maxmemory` (Redis 7's script flags):
        // nothing of it is applied, and the refusal is known. Reads, gives
        // back and clears run all the same (they free, or barely grow).
        let script = |flags: &str, body: &str| Script::new(&format!("{flags}\n{PRELUDE}{body}"));
        Scripts {
            get: script("#!lua flags=allow-oom", GET),
            add: script("#!lua", ADD),
            commit: script("#!lua", COMMIT),
            undo: script("#!lua flags=allow-oom", UNDO),
            clear: script("#!lua flags=allow-oom", CLEAR),
        }
    }
}

/// One scope as read for the operator: its keys and values, its expiries
/// (ms since the epoch) and the server's `TIME`.
type ScopeDump = (Vec<(String, String)>, Vec<(String, f64)>, (u64, u64));

/// The store (see the module docs).
pub struct RedisStore {
    client: redis::Client,
    /// Where it is, as said in faults (the URL without its password).
    shown: String,
    connection: OnceCell<ConnectionManager>,
    /// Each tenant's part, in charged bytes: read from the server once.
    part: OnceCell<u64>,
    scripts: Scripts,
    breaker: Breaker,
}

/// A tenant's part of a Redis without a `maxmemory`: a quarter of the
/// memory store's default.
const PART_UNBOUNDED: u64 = 16 << 20;

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisStore({})", self.shown)
    }
}

/// The three Redis keys of one scope.
struct Keys([String; 3]);

fn keys(id: &ScopeId) -> Keys {
    let base = format!(
        "tg:{{{}.{}}}:{}",
        hex::encode(id.tenant.as_bytes()),
        hex::encode(id.plugin.as_bytes()),
        match &id.run {
            None => "t".to_string(),
            Some(run) => format!("r:{}", hex::encode(run.as_bytes())),
        }
    );
    Keys([
        format!("{base}:h"),
        format!("{base}:x"),
        format!("{base}:b"),
    ])
}

/// The two Redis keys of one tenant's account: `u`, a hash of its keys and
/// charged bytes in all and per scope, and `e`, its run scopes by when
/// they go idle (see the module docs).
fn tenant_keys(tenant: &str) -> [String; 2] {
    let t = hex::encode(tenant.as_bytes());
    [format!("tg:{{{t}}}:u"), format!("tg:{{{t}}}:e")]
}

/// The scope a hash key (`…:h`) names, or `None` for a key not ours.
fn scope_of(key: &str) -> Option<ScopeId> {
    let rest = key.strip_prefix("tg:{")?.strip_suffix(":h")?;
    let (owner, scope) = rest.split_once("}:")?;
    let (tenant, plugin) = owner.split_once('.')?;
    let text = |h: &str| String::from_utf8(hex::decode(h).ok()?).ok();
    let run = match scope {
        "t" => None,
        run => Some(text(run.strip_prefix("r:")?)?.into()),
    };
    Some(ScopeId {
        tenant: text(tenant)?.into(),
        plugin: text(plugin)?.into(),
        run,
    })
}

/// The `SCAN MATCH` pattern of the hash keys `filter` selects.
fn pattern(filter: &StateFilter) -> String {
    let plugin = filter
        .plugin
        .as_deref()
        .map_or("*".to_string(), |p| format!("{}}}", hex::encode(p)));
    let scope = filter
        .run
        .as_deref()
        .map_or("*".to_string(), |r| format!("r:{}", hex::encode(r)));
    let tenant = hex::encode(filter.tenant.as_bytes());
    if filter.plugin.is_some() {
        format!("tg:{{{tenant}.{plugin}:{scope}:h")
    } else {
        // `}` ends the plugin's hex; a run filter then needs `}:r:…`.
        format!("tg:{{{tenant}.*}}:{scope}:h")
    }
}

/// A run's idle time, in ms, as the scripts take it (0: the tenant scope).
fn idle_ms(id: &ScopeId, limits: &StateLimits) -> u64 {
    match id.run {
        Some(_) => millis(limits.run_ttl).max(1),
        None => 0,
    }
}

/// An expiry as the scripts take it: ms, or -1 for none.
fn ttl_arg(ttl: Option<Duration>) -> i64 {
    ttl.map_or(-1, |t| i64::try_from(millis(t)).unwrap_or(i64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A script's reply as strings (nil: `None`).
fn strings(value: Value) -> Vec<Option<String>> {
    let text = |v: Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Value::SimpleString(s) => Some(s),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    match value {
        Value::Array(items) => items.into_iter().map(text).collect(),
        other => vec![text(other)],
    }
}

impl RedisStore {
    /// A store at `url` (`redis://[:password@]host[:port][/db]`); checks
    /// the URL only: the connection is made on first use, and remade
    /// whenever it is lost.
    pub fn open(url: &str) -> Result<RedisStore, crate::Error> {
        let client = redis::Client::open(url)
            .map_err(|e| crate::Error::Engine(format!("state store {url:?}: {e}")))?;
        let info = client.get_connection_info();
        let shown = format!("redis://{}/{}", info.addr(), info.redis_settings().db());
        Ok(RedisStore {
            client,
            shown,
            connection: OnceCell::new(),
            part: OnceCell::new(),
            scripts: Scripts::new(),
            breaker: Breaker::default(),
        })
    }

    async fn connection(&self) -> Result<ConnectionManager, ImportRefused> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        self.connection
            .get_or_try_init(|| async {
                ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            })
            .await
            .cloned()
            .map_err(|e| self.unavailable(&e))
    }

    /// What one tenant's guards may hold, in charged bytes: a quarter of
    /// the server's `maxmemory` (read on first use), as the memory store
    /// gives each tenant a quarter of its capacity; [`PART_UNBOUNDED`]
    /// when it has none.
    async fn part(&self) -> Result<u64, ImportRefused> {
        self.part
            .get_or_try_init(|| async {
                let mut connection = self.connection().await?;
                let info: String = redis::cmd("INFO")
                    .arg("memory")
                    .query_async(&mut connection)
                    .await
                    .map_err(|e| self.unavailable(&e))?;
                let max = info
                    .lines()
                    .find_map(|l| l.strip_prefix("maxmemory:"))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                Ok(if max == 0 { PART_UNBOUNDED } else { max / 4 })
            })
            .await
            .copied()
    }

    fn unavailable(&self, e: &redis::RedisError) -> ImportRefused {
        if e.code() == Some("OOM") {
            return refused(
                Fault::StateFull,
                format!(
                    "the state store at {} is full (its maxmemory); nothing was written",
                    self.shown
                ),
            );
        }
        refused(
            Fault::StateUnavailable,
            format!("the state store at {} failed: {e}", self.shown),
        )
    }

    /// Runs one script invocation through the breaker.
    async fn run(&self, invocation: &ScriptInvocation<'_>) -> Result<Value, ImportRefused> {
        let attempt = self.breaker.attempt().map_err(|left| {
            refused(
                Fault::StateUnavailable,
                format!(
                    "the state store at {} failed just now; not tried again for {} ms",
                    self.shown,
                    left.as_millis()
                ),
            )
        })?;
        let mut connection = self.connection().await?;
        match invocation.invoke_async::<Value>(&mut connection).await {
            Ok(value) => {
                attempt.succeeded();
                Ok(value)
            }
            Err(e) => {
                // A refusal by a working server (a full one, a script
                // error) is not an outage.
                if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                {
                    attempt.failed();
                } else {
                    attempt.succeeded();
                }
                Err(self.unavailable(&e))
            }
        }
    }

    pub(crate) async fn get(
        &self,
        id: &ScopeId,
        key: &str,
        limits: &StateLimits,
    ) -> Result<Option<String>, ImportRefused> {
        let Keys(k) = keys(id);
        let mut inv = self.scripts.get.prepare_invoke();
        inv.key(&k[..])
            .key(&tenant_keys(&id.tenant)[..])
            .arg(key)
            .arg(idle_ms(id, limits));
        Ok(strings(self.run(&inv).await?).into_iter().next().flatten())
    }

    pub(crate) async fn add(
        &self,
        id: &ScopeId,
        key: &str,
        delta: i64,
        ttl: Option<Duration>,
        limits: &StateLimits,
    ) -> Result<(i64, bool), ImportRefused> {
        let Keys(k) = keys(id);
        let ttl = ttl_arg(ttl);
        let part = self.part().await?;
        let mut inv = self.scripts.add.prepare_invoke();
        inv.key(&k[..])
            .key(&tenant_keys(&id.tenant)[..])
            .arg(key)
            .arg(delta)
            .arg(ttl)
            .arg(idle_ms(id, limits))
            .arg(limits.keys)
            .arg(limits.bytes)
            .arg(part);
        let reply = strings(self.run(&inv).await?);
        let field = |i: usize| reply.get(i).cloned().flatten().unwrap_or_default();
        match field(0).as_str() {
            "ok" => {
                let sum = field(1).parse::<i64>().map_err(|_| self.garbled("add"))?;
                Ok((sum, field(2) == "1"))
            }
            "invalid" if field(1).contains("overflow") => Err(refused(
                Fault::StateInvalid,
                format!("state add on {key:?}: adding {delta} is outside s64"),
            )),
            "invalid" => Err(refused(
                Fault::StateInvalid,
                format!("state add on {key:?}: its value is not a decimal integer"),
            )),
            "part" => Err(self.over_part(part)),
            class => Err(self.budget(class, &field(1), id, limits)),
        }
    }

    /// The refusal of a write that would take its tenant over its part.
    fn over_part(&self, part: u64) -> ImportRefused {
        refused(
            Fault::StateBudget,
            format!(
                "this tenant's part of the state store at {} is full ({} KiB, a quarter of its \
                 maxmemory, with what Redis spends on each key)",
                self.shown,
                part >> 10
            ),
        )
    }

    fn garbled(&self, what: &str) -> ImportRefused {
        refused(
            Fault::StateUnavailable,
            format!("the state store at {} answered {what} oddly", self.shown),
        )
    }

    /// The refusal of a script's budget answer (`keys` or `bytes`, with
    /// the count the scope would hold).
    fn budget(&self, class: &str, n: &str, id: &ScopeId, limits: &StateLimits) -> ImportRefused {
        let n: usize = match n.parse() {
            Ok(n) => n,
            Err(_) => return self.garbled("a budget check"),
        };
        let (keys, bytes) = match class {
            "keys" => (n, 0),
            "bytes" => (0, n),
            _ => return self.garbled("a budget check"),
        };
        over_budget(id, keys, bytes, limits)
            .err()
            .unwrap_or_else(|| self.garbled("a budget check"))
    }

    pub(crate) async fn commit(
        &self,
        writes: &Writes,
        limits: &StateLimits,
    ) -> Result<(), ImportRefused> {
        let Some((first, _)) = writes.first() else {
            return Ok(());
        };
        let part = self.part().await?;
        let mut inv = self.scripts.commit.prepare_invoke();
        inv.arg(limits.keys).arg(limits.bytes).arg(part);
        for (id, scope_writes) in writes {
            let Keys(k) = keys(id);
            inv.key(&k[..])
                .arg(idle_ms(id, limits))
                .arg(scope_writes.len());
            for (key, write) in scope_writes {
                match write {
                    Write::Set(value, ttl) if ttl.is_none_or(|t| !t.is_zero()) => {
                        let ttl = ttl_arg(*ttl);
                        inv.arg(key).arg("s").arg(value).arg(ttl);
                    }
                    _ => {
                        inv.arg(key).arg("d");
                    }
                }
            }
        }
        // A call writes its own tenant's scopes only.
        inv.key(&tenant_keys(&first.tenant)[..]);
        let reply = strings(self.run(&inv).await?);
        let field = |i: usize| reply.get(i).cloned().flatten().unwrap_or_default();
        match field(0).as_str() {
            "ok" => return Ok(()),
            "part" => return Err(self.over_part(part)),
            _ => {}
        }
        let scope = field(2)
            .parse::<usize>()
            .ok()
            .and_then(|s| writes.get(s.checked_sub(1)?));
        match scope {
            Some((id, _)) => Err(self.budget(&field(0), &field(1), id, limits)),
            None => Err(self.garbled("a commit")),
        }
    }

    pub(crate) async fn undo(&self, adds: &Adds) -> Result<(), ImportRefused> {
        // A call's adds are all in its own tenant's scopes.
        let Some(first) = adds.first() else {
            return Ok(());
        };
        let mut inv = self.scripts.undo.prepare_invoke();
        // An add of i64::MIN has no negation in s64: it stays, as an
        // uncertain add does (a counter errs toward counting).
        for added in adds.iter().rev() {
            let Some(back) = added.delta.checked_neg() else {
                continue;
            };
            let Keys(k) = keys(&added.id);
            inv.key(&k[..])
                .arg(&added.key)
                .arg(back)
                .arg(if added.created { "1" } else { "0" });
        }
        inv.key(&tenant_keys(&first.id.tenant)[..]);
        self.run(&inv).await.map(drop)
    }

    async fn scan(&self, filter: &StateFilter) -> Result<Vec<(String, ScopeId)>, crate::Error> {
        let mut connection = self.connection().await.map_err(store_error)?;
        let mut found = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern(filter))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut connection)
                .await
                .map_err(|e| store_error(self.unavailable(&e)))?;
            found.extend(
                page.into_iter()
                    .filter_map(|k| Some((k.clone(), scope_of(&k)?)))
                    .filter(|(_, id)| filter.matches(id)),
            );
            if next == 0 {
                return Ok(found);
            }
            cursor = next;
        }
    }

    /// Every live key `filter` selects.
    pub(crate) async fn entries(
        &self,
        filter: &StateFilter,
    ) -> Result<Vec<StateEntry>, crate::Error> {
        let mut connection = self.connection().await.map_err(store_error)?;
        let fail = |e: redis::RedisError| store_error(self.unavailable(&e));
        let mut out = Vec::new();
        for (hash, id) in self.scan(filter).await? {
            let expiries = format!("{}x", hash.trim_end_matches('h'));
            let (values, expires, (secs, micros)): ScopeDump = redis::pipe()
                .hgetall(&hash)
                .zrange_withscores(&expiries, 0, -1)
                .cmd("TIME")
                .query_async(&mut connection)
                .await
                .map_err(fail)?;
            let now = secs * 1000 + micros / 1000;
            for (key, value) in values {
                // Scores are whole milliseconds.
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "expiry scores are whole ms since the epoch"
                )]
                let at = expires
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, at)| *at as u64);
                if at.is_some_and(|at| at <= now) {
                    continue;
                }
                out.push(StateEntry {
                    id: id.clone(),
                    key,
                    value,
                    ttl_ms: at.map(|at| at.saturating_sub(now)),
                });
            }
        }
        out.sort_by(|a, b| (&a.id, &a.key).cmp(&(&b.id, &b.key)));
        Ok(out)
    }

    /// Removes every key `filter` selects.
    pub(crate) async fn clear(&self, filter: &StateFilter) -> Result<u64, crate::Error> {
        let mut connection = self.connection().await.map_err(store_error)?;
        let mut removed = 0;
        for (_, id) in self.scan(filter).await? {
            let Keys(k) = keys(&id);
            let n: u64 = self
                .scripts
                .clear
                .key(&k[..])
                .key(&tenant_keys(&id.tenant)[..])
                .invoke_async(&mut connection)
                .await
                .map_err(|e| store_error(self.unavailable(&e)))?;
            removed += n;
        }
        Ok(removed)
    }
}

fn store_error(refusal: ImportRefused) -> crate::Error {
    crate::Error::State(refusal.message)
}

/// Fails operations at once for a while after one failed (see the module
/// docs).
#[derive(Default)]
struct Breaker(Mutex<BreakerState>);

#[derive(Default)]
struct BreakerState {
    /// Failures in a row.
    failures: u32,
    /// Closed again at this time, then half open: one probe at a time.
    open_until: Option<Instant>,
    probing: bool,
}

/// One operation let through; dropped without [`Attempt::succeeded`] it
/// opens the breaker if it failed, or was abandoned at its call's deadline
/// after waiting [`Breaker::SLOW`] or more. One abandoned sooner says
/// nothing of Redis — only that its call's deadline was short, which a
/// tenant chooses — so it leaves the breaker as it was.
struct Attempt<'a> {
    breaker: &'a Breaker,
    probe: bool,
    done: bool,
    started: Instant,
}

impl Breaker {
    const FIRST: Duration = Duration::from_millis(50);
    const LONGEST: Duration = Duration::from_secs(2);
    /// A wait no answer of a working Redis takes.
    const SLOW: Duration = Duration::from_millis(100);

    fn lock(&self) -> MutexGuard<'_, BreakerState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets an operation through, or says how long the breaker stays open.
    fn attempt(&self) -> Result<Attempt<'_>, Duration> {
        let mut s = self.lock();
        let probe = match s.open_until {
            None => false,
            Some(until) => {
                let now = Instant::now();
                if now < until {
                    return Err(until - now);
                }
                if s.probing {
                    return Err(Duration::ZERO);
                }
                s.probing = true;
                true
            }
        };
        Ok(Attempt {
            breaker: self,
            probe,
            done: false,
            started: Instant::now(),
        })
    }
}

impl Attempt<'_> {
    fn succeeded(mut self) {
        self.done = true;
        let mut s = self.breaker.lock();
        if self.probe || s.failures > 0 {
            *s = BreakerState::default();
        }
    }
}

impl Attempt<'_> {
    fn failed(mut self) {
        self.open();
    }

    /// Opens the breaker (longer after each failure in a row).
    fn open(&mut self) {
        self.done = true;
        let mut s = self.breaker.lock();
        s.failures = s.failures.saturating_add(1);
        let wait = Breaker::FIRST
            .saturating_mul(1 << (s.failures - 1).min(6))
            .min(Breaker::LONGEST);
        s.open_until = Some(Instant::now() + wait);
        if self.probe {
            s.probing = false;
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if self.started.elapsed() >= Breaker::SLOW {
            self.open();
        } else if self.probe {
            self.breaker.lock().probing = false;
        }
    }
}

impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn shown(&self) -> String {
        format!("redis at {}", self.shown)
    }

    fn get<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<Option<String>, ImportRefused>> {
        Box::pin(RedisStore::get(self, id, key, limits))
    }

    fn add<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        delta: i64,
        ttl: Option<Duration>,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(i64, bool), ImportRefused>> {
        Box::pin(RedisStore::add(self, id, key, delta, ttl, limits))
    }

    fn commit<'a>(
        &'a self,
        writes: &'a Writes,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(), ImportRefused>> {
        Box::pin(RedisStore::commit(self, writes, limits))
    }

    fn undo<'a>(&'a self, adds: &'a Adds) -> Pending<'a, Result<(), ImportRefused>> {
        Box::pin(RedisStore::undo(self, adds))
    }

    fn entries<'a>(
        &'a self,
        filter: &'a StateFilter,
    ) -> Pending<'a, Result<Vec<StateEntry>, crate::Error>> {
        Box::pin(RedisStore::entries(self, filter))
    }

    fn clear<'a>(&'a self, filter: &'a StateFilter) -> Pending<'a, Result<u64, crate::Error>> {
        Box::pin(RedisStore::clear(self, filter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(tenant: &str, plugin: &str, run: Option<&str>) -> ScopeId {
        ScopeId {
            tenant: tenant.into(),
            plugin: plugin.into(),
            run: run.map(Into::into),
        }
    }

    #[test]
    fn only_a_failure_or_a_long_wait_opens_the_breaker_never_a_short_deadline() {
        let breaker = Breaker::default();
        // A call cut at a deadline it chose short (a tenant's timeout_ms):
        // Redis is not to blame, and nobody else's calls are refused.
        drop(breaker.attempt().expect("closed"));
        assert!(breaker.attempt().is_ok(), "still closed");
        // A wait no working Redis needs, then abandoned: opens it.
        let slow = breaker.attempt().expect("closed");
        std::thread::sleep(Breaker::SLOW);
        drop(slow);
        assert!(breaker.attempt().is_err(), "open");
        // So does a failure.
        let other = Breaker::default();
        other.attempt().expect("closed").failed();
        assert!(other.attempt().is_err(), "open");
    }

    #[test]
    fn a_scopes_keys_name_it_whatever_bytes_its_names_hold() {
        for owner in [
            id("", "p", None),
            id("acme", "tool-call-limit", Some("run-1")),
            id("a}:b", "{x}*", Some(":r:")),
            id("t.1", "p.q", Some("")),
        ] {
            let Keys(k) = keys(&owner);
            assert_eq!(scope_of(&k[0]), Some(owner.clone()), "{k:?}");
            let slot = |k: &str| k[..k.find('}').expect("tag")].to_string();
            assert!(
                k.iter().all(|key| slot(key) == slot(&k[0])),
                "one hash slot"
            );
        }
        assert_eq!(scope_of("tg:{zz.00}:t:h"), None, "not hex");
        assert_eq!(scope_of("other"), None);
    }

    #[test]
    fn a_filters_pattern_selects_its_tenants_plugins_and_runs_keys_only() {
        let matches = |pattern: &str, key: &str| {
            // Redis's glob, for the patterns made here (`*` only).
            let parts: Vec<&str> = pattern.split('*').collect();
            let mut rest = key;
            for (i, part) in parts.iter().enumerate() {
                match rest.find(part) {
                    Some(at) if i > 0 || at == 0 => rest = &rest[at + part.len()..],
                    _ => return false,
                }
            }
            parts
                .last()
                .is_none_or(|p| p.is_empty() || key.ends_with(p))
        };
        let filter = |tenant: &str, plugin: Option<&str>, run: Option<&str>| StateFilter {
            tenant: tenant.into(),
            plugin: plugin.map(Into::into),
            run: run.map(Into::into),
        };
        let all = [
            id("a", "p", None),
            id("a", "p", Some("r")),
            id("a", "q", Some("r")),
            id("ab", "p", None),
            id("a", "pq", Some("rs")),
        ];
        for f in [
            filter("a", None, None),
            filter("a", Some("p"), None),
            filter("a", None, Some("r")),
            filter("a", Some("p"), Some("r")),
        ] {
            for owner in &all {
                let Keys(k) = keys(owner);
                assert_eq!(
                    matches(&pattern(&f), &k[0]),
                    f.matches(owner),
                    "{f:?} {owner:?} {}",
                    pattern(&f)
                );
            }
        }
    }
}
