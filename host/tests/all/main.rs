//! toolgate's integration tests: one binary, a module per feature.
//!
//! Guest programs are built once by the `toolgate-tests` crate's build
//! script (see `tests/src/lib.rs`); garbage no compiler produces is written
//! inline as WAT here.
//!
//! ## Claims and the tests that fail when they break
//!
//! | claim (README.md, docs/) | tests |
//! |---|---|
//! | a fresh instance for every hook call: nothing of one call is visible to the next (plain, prepared, snapshotted) | `fresh::*` (Rust `memo`), `tests/langs/test_fresh.py` (JS, Python, Go `memo`) |
//! | a prepared instance serves exactly one call | `fresh::a_prepared_instance_serves_one_call_and_keeps_nothing`, `prepared::*` |
//! | a snapshot starts every call from its warm-up | `fresh::a_snapshot_*`, `tests/langs/test_fresh.py::test_a_snapshot_*` |
//! | every event carries the hook's `state` (`{}` when none), as sent | `fresh::a_plain_instance_sees_no_earlier_call_at_any_seam` (library), `cli::state_reaches_the_guard_through_check_and_replay`, `server::state_reaches_the_guard_over_http_as_sent`, `logged::deny_holds_at_every_seam` (result seam), `test_host.py::test_state_reaches_the_guard_as_passed_and_no_call_sees_another`, `test_e2e.py::test_the_adapters_state_reaches_the_guard` (symfonic adapter, in-process and over HTTP), `tests/langs/test_fresh.py` (check, replay, serve) |
//! | a fault is logged: `guard faulted; skipped` with plugin, seam, cause | `logged::a_fault_is_logged_once_with_plugin_seam_and_cause_at_every_seam` |
//! | a malformed reply is dropped and logged | `logged::a_malformed_reply_is_logged_once_with_plugin_and_seam` |
//! | a guard the host could not run (`capacity`, `share-exhausted`, `overloaded`) is not decided and logged at DEBUG per call, never WARNING | `logged::a_guard_the_host_could_not_run_is_logged_at_debug_never_warn`, `server::a_guard_the_host_cannot_run_in_time_gets_503_never_a_silent_proceed` (503, metrics, no quarantine) |
//! | the adapter's circuit breaker: opens after `breaker_threshold` failures (ERROR once), answers at once for the cool-down, probes, closes (WARNING) | `test_adapter.py::test_breaker_opens_then_probes_and_closes`, `test_e2e.py::test_service_lost_mid_run_is_bounded_by_the_breaker` (only `threshold` hooks reach a killed or hung service) |
//! | `on_error = "deny"`: steering refuses, routing hides all, rewrite and result skip the guard | `logged::deny_holds_at_every_seam`, `hostile::fail_closed_guard_steers_with_a_labelled_message` |
//! | big integers and key order pass through every face | `chains::rewrite_passes_big_integers_and_key_order_through`, `server::big_integers_and_key_order_pass_through_http`, `server::state_reaches_the_guard_over_http_as_sent`, `cli::state_reaches_the_guard_through_check_and_replay`, `test_host.py::test_big_integers_and_key_order_survive` |
//! | big integers and key order reach a guard of every language and come back unchanged in a rewrite | `tests/langs/test_echo.py` (Rust, JS, Python, Go `echo`; check and replay), `test_adapter.py::test_big_integers_and_key_order_reach_a_guard_over_http_and_come_back` (the adapter over HTTP) |
//! | the adapter reuses its connection, gives each tool call one time budget, and treats a timeout as a failure under its policy (a real `serve`) | `test_adapter.py::test_connections_are_reused`, `test_adapter.py::test_one_budget_per_tool_call`, `test_adapter.py::test_timeout_is_a_failure` |
//! | the guest SDKs' glue works in the real host | `guest-sdk/python/tests/test_component.py` (every seam, return shape, log and fault of a Python guard), `tests/langs/test_js.py`, `test_go.py`, `test_python.py` |
//! | the Rust SDK's glue: events in with every field, digit and key; verdicts, rewrites, log levels and configuration out; `export!` exports each named seam under the contract's name | `guest-sdk/rust/src/tests.rs`, `guest-sdk/rust/tests/export.rs` (natively, `cargo test` in `guest-sdk/rust`); through the host: the Rust `echo` and `memo` guests above |
//! | HTTP refuses a request nested 128 levels deep, naming line and column | `server::the_nesting_limit_is_at_128_levels`, `cli::nested_args_pass_up_to_the_documented_depth` |
//! | a guard's stdout/stderr go to the log, bounded by `log_kib` | `cli::a_guards_output_reaches_the_log_bounded`, `hostile::stdout_flood_is_bounded_and_the_call_completes` |
//! | a reload under calls loses and fails none; calls see the new version | `reload::reloads_under_concurrent_calls_lose_and_fail_nothing` (library), `reload::serve_swaps_a_guard_under_calls_and_loses_none` (`toolgate serve`, watcher, atomic renames, several connections) |
//! | `--max-connections`: a connection over the cap is closed, those within it served | `http_limits::the_binary_takes_connection_limits` |
//! | `--tenant-tokens-file`: a tenant's token calls as that tenant only; the operator's endpoints are the operator's | `server::the_binary_serves_tenants_by_their_tokens_file`, `server::a_tenant_token_calls_the_seams_as_its_tenant_only` |
//! | the compiled cache's default place: `$TOOLGATE_CACHE_DIR` (`off`, empty: none), else `$XDG_CACHE_HOME/toolgate`, else `$HOME/.cache/toolgate`, else none | `cache::default_location_follows_the_environment` (the binary, one environment per case) |
//! | the log is coloured only on a terminal: a pipe or a file gets plain text | `cli::a_log_written_to_a_pipe_is_plain_text` |
//! | guard state: a budget of N lets exactly N of 1,000 concurrent calls through, in memory and in Redis, and across two replicas sharing Redis | `state::{memory,redis}::a_budget_guard_lets_exactly_n_of_1000_concurrent_calls_through`, `state_redis::two_replicas_sharing_redis_let_exactly_n_of_1000_concurrent_calls_through`, `state_redis::two_serve_replicas_with_state_in_redis_count_one_run_together`, `test_host.py::test_two_hosts_with_state_in_redis_count_one_run_together` |
//! | a Redis down or stalled is `state-unavailable` under the guard's `on_error`; a breaker spares the attempts; state comes back with Redis | `state_redis::a_redis_killed_and_restarted_*`, `state_redis::a_redis_slower_than_the_deadline_*` |
//! | a full store (Redis at `maxmemory`, the memory store at its total) is `state-full`, the host's: not decided, nothing written | `state_redis::a_full_redis_*`, `state::a_full_memory_store_is_the_hosts_fault_not_decided_never_the_guards` |
//! | each tenant's part of a Redis store is bounded: over it `state-budget`, another tenant's budget exact; an idle run's share comes back once, a run in use keeps its state | `state_redis::a_tenant_filling_redis_faults_state_budget_and_another_tenants_budget_stays_exact`, `state_redis::a_tenants_part_comes_back_as_its_runs_go_idle_neither_leaked_nor_exceeded`, `state_redis::a_run_in_use_past_its_first_idle_time_keeps_its_state`, `state::no_tenant_fills_the_memory_store_for_the_others` |
//! | a budget never lets through more than its limit on a slow Redis (120 ms, 200 ms, jitter; sequential and 50 in flight) | `state_redis::a_slow_redis_never_lets_a_budget_through_more_than_its_limit` |
//! | state scopes follow the tenant the call is made for, with or without a directory; tenant-less calls have their own | `case_files::a_global_guards_state_is_each_tenants_own_in_a_case_file_tenants_without_a_directory_too`, `tenancy::a_global_guards_state_follows_the_tenant_the_call_is_for_with_or_without_a_directory`, `server::tenants_without_a_directory_keep_their_own_state_apart_and_apart_from_tenantless_calls` |
//! | operators see and clear state: `toolgate state get/clear` (Redis, or a serve's `/v1/state`) | `state_redis::the_state_cli_shows_and_clears_a_tenants_state_in_redis_and_through_serve`, `server::a_global_guards_state_is_each_tenants_own_and_the_operator_sees_and_clears_it` |
//! | a faulting call (trap, fuel, deadline, memory) leaves no write behind and gives back its adds | `state::{memory,redis}::a_faulting_call_leaves_no_write_of_its_own_and_gives_back_its_adds` |
//! | a call reads its own writes; others see them once it returns | `state::{memory,redis}::a_call_reads_its_own_writes_and_others_see_them_only_once_it_returns` |
//! | no key string reaches another tenant's, plugin's or run's state | `state::{memory,redis}::scopes_are_kept_apart_by_tenant_plugin_and_run_whatever_the_key` |
//! | state budgets fault by class (`state-budget`, `state-invalid`) and commit nothing | `state::{memory,redis}::budgets_fault_by_class_and_commit_nothing`, `state::{memory,redis}::expiries_of_zero_short_and_huge_do_what_the_contract_says` |
//! | `validate-config` refuses a bad config at load with the guard's message | `state::a_bad_config_is_refused_at_load_with_the_guards_message` |
//! | a guard built against `0.1.0` loads and decides as before | `state::a_guard_built_against_0_1_0_loads_and_decides_as_before`, every hand-written WAT guard (`contract::WIT` is `0.1.0`) |
//! | `toolgate test`: cases through the real chain; one line per failing case with what differs, `N passed, N failed`, exit 1; a bad file is one line naming file, line and key, exit 2; JUnit XML with the counts; fault classes under the real limits | `case_files::*`; every example's `*.test.toml` in `scripts/test` |
//! | a shadow guard (`mode = "shadow"`) is never enforced: it steers, rewrites and hides nothing, every verdict of it is counted (or its run dropped and counted), and its faults never quarantine it nor fail closed | `shadow::a_shadow_guard_never_steers_and_every_verdict_is_counted`, `shadow::decide_puts_the_shadow_chains_answer_beside_the_enforced_one`, `shadow::shadow_runs_past_the_backlog_are_dropped_and_counted` |
//! | a shadow run gets only what enforcement leaves: a spinning or memory-growing shadow guard costs its tenant no enforced answer (none 429/503, each as the enforced guards alone answer), its runs without spare room dropped and counted, its faults quarantine nothing | `shadow::a_spinning_or_memory_hungry_shadow_guard_leaves_its_tenants_answers_alone` |
//! | `replay --compare` groups two policy sets' differences by seam and change, exit 1 when they differ, and reads a decision log | `examples::replay_compare_groups_what_a_changed_policy_set_changes` |
//! | every decision log line (every seam, response included, global and tenant, a shadow guard, a shadow guard the host could not run: `state-full`, and `capacity`, `share-exhausted`, `overloaded` put in its place; `replay` and `check`) matches `docs/decision-log.schema.json` | `decision_log::every_line_the_host_writes_matches_the_published_schema`, `tests/langs/test_decision_log.py`, `test_host.py::test_every_decision_is_logged_masked_as_serve_logs_it` (fields, digest) |
//! | `docs/decision-log.schema.json` is the schema generated from the line's types (`TOOLGATE_BLESS=1` rewrites it) | `decision_log::the_published_schema_is_the_generated_one` |
//! | a masked field appears in no sink, a fault's detail and a skip's message included; by default no input is logged | `decision_log::a_masked_field_appears_in_no_sink`, `decision_log::by_default_no_input_is_logged` |
//! | a dead HTTP sink never holds a decision; its drops are counted (`toolgate_decision_log_dropped_total`) | `decision_log::a_dead_http_sink_never_holds_a_decision_and_its_drops_are_counted` |
//! | the file sink rotates by size, keeping N, losing no line between the files kept | `decision_log::the_file_sink_rotates_keeping_n` |
//! | `[decision_log]` is the operator's: refused in a tenant's manifest; bad keys named with file and line | `decision_log::a_tenant_manifest_cannot_set_the_decision_log_and_bad_keys_are_named` |
//! | with no guards, each seam answers its neutral value | `fuzz::fuzz_request_bodies_get_200_or_a_named_400`, `fuzz::fuzz_valid_requests_are_answered` |

mod autosnap;
mod cache;
mod case_files;
mod case_http;
mod chains;
mod cli;
mod compiles;
mod contract;
mod decision_log;
mod examples;
mod file_server;
mod fleet;
mod fleet_sets;
mod fresh;
mod function_cache;
mod fuzz;
mod hostile;
mod http_limits;
mod lifecycle;
mod logged;
mod manifest;
mod new_guard;
mod oci_registry;
mod outbound;
mod prepared;
mod redis_server;
mod reload;
mod remote;
mod response;
mod serve_startup;
mod server;
mod server_log;
mod shadow;
mod signatures;
mod snapshot;
mod state;
mod state_redis;
mod tenancy;
mod tenant_dirs;
mod tenant_files;
mod test_watch;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::event::{
    BeforeToolCallEvent, ToolCallDispatchEvent, ToolResultCallbackEvent, ToolRoutingDecisionEvent,
};
use toolgate::{Chain, Engine, EngineConfig, Limits, OnError, Plugin, PluginSpec};

/// The long lane's priority in these tests: `nice` 10, not the default
/// `idle`. The tests share the machine's cores with each other, and what
/// they assert of long calls (a memory bomb faults `memory`, spinners burn
/// fuel in proportion) needs those calls to get some CPU while other
/// tests keep the cores busy; at `idle` they would get only what the other
/// tests leave. The default's scheduling class is tested in `turns`, the
/// server and CLI tests run it.
pub const TEST_LANE: toolgate::LanePriority = toolgate::LanePriority::Nice(10);

/// A small engine for tests: few pooled slots, the default limits.
pub fn engine() -> Engine {
    Engine::new(EngineConfig {
        max_instances: 32,
        long_lane_priority: TEST_LANE,
        ..EngineConfig::default()
    })
    .expect("engine")
}

/// Loads `path` as plugin `name` with `config` and default limits.
pub async fn plugin(engine: &Engine, name: &str, path: &str, config: Value) -> Arc<Plugin> {
    plugin_with(engine, name, path, config, Limits::default(), OnError::Skip).await
}

/// Loads `path` as plugin `name` with everything spelled out.
pub async fn plugin_with(
    engine: &Engine,
    name: &str,
    path: &str,
    config: Value,
    limits: Limits,
    on_error: OnError,
) -> Arc<Plugin> {
    let spec = PluginSpec {
        name: name.into(),
        path: path.into(),
        limits,
        config,
        on_error,
        mode: Default::default(),
        prepared: toolgate::Depth::Fixed(0),
        snapshot: Default::default(),
        config_at: None,
        http: Default::default(),
        http_answers: None,
    };
    Arc::new(Plugin::load(engine, spec).await.expect("plugin loads"))
}

/// `snap`, the snapshot of `plain`'s guard, decided `event` as `plain`
/// did, burning less fuel (fuel is deterministic: the snapshot skips the
/// guest's start-up; every call still gets its own instance).
pub fn same_answer_less_fuel<T: PartialEq + std::fmt::Debug>(
    plain: &toolgate::Decision<T>,
    snap: &toolgate::Decision<T>,
    event: &impl std::fmt::Debug,
) {
    assert_eq!(plain.result, snap.result, "{event:?}");
    assert_eq!(plain.trace[0].outcome, snap.trace[0].outcome, "{event:?}");
    assert!(
        snap.trace[0].fuel_used < plain.trace[0].fuel_used,
        "snapshot {} vs plain {} fuel",
        snap.trace[0].fuel_used,
        plain.trace[0].fuel_used
    );
}

/// Steering events that take the sql-guard down each of its paths: a
/// refusal, a pass, arguments of the wrong type, another tool.
pub fn sql_guard_events() -> [BeforeToolCallEvent; 4] {
    [
        steering("run_query", json!({"sql": "DELETE FROM users"})),
        steering("run_query", json!({"sql": "SELECT * FROM t WHERE id = 1"})),
        steering("run_query", json!({"sql": 42})),
        steering("search", json!({"q": "DELETE"})),
    ]
}

/// A chain of the given plugins.
pub fn chain(plugins: &[&Arc<Plugin>]) -> Chain {
    Chain::new(plugins.iter().map(|p| Arc::clone(p)).collect())
}

/// A steering event for `tool` with `args`.
pub fn steering(tool: &str, args: Value) -> BeforeToolCallEvent {
    serde_json::from_value(json!({
        "run_id": "run-1", "tool_name": tool, "call_id": "call-1", "args": args,
    }))
    .expect("event")
}

/// A dispatch event for `tool` with `args`, `available` tools.
pub fn dispatch(tool: &str, args: Value, available: &[&str]) -> ToolCallDispatchEvent {
    serde_json::from_value(json!({
        "run_id": "run-1", "iteration_index": 0, "node_name": "react", "call_id": "call-1",
        "tool_name": tool, "args": args, "available_tools": available,
    }))
    .expect("event")
}

/// A routing event with `tools` visible.
pub fn routing(tools: &[&str]) -> ToolRoutingDecisionEvent {
    serde_json::from_value(json!({
        "run_id": "run-1", "mode": "enforce", "intent_label": "sql", "total_tools": tools.len(),
        "narrowed_tool_names": tools,
    }))
    .expect("event")
}

/// A result event for `tool`.
pub fn result(tool: &str, value: Value) -> ToolResultCallbackEvent {
    serde_json::from_value(json!({
        "run_id": "run-1", "tool_name": tool, "result": value, "call_id": "call-1",
    }))
    .expect("event")
}

/// Tight limits for hostile tests, so each fault trips fast.
pub fn tight() -> Limits {
    Limits {
        fuel: 50_000_000,
        memory_bytes: 32 << 20,
        timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

/// The empty state.
pub fn no_state() -> Value {
    json!({})
}

/// Captures this thread's log at `level` and above until the guard is
/// dropped.
pub fn capture(level: tracing::Level) -> (Kept, tracing::subscriber::DefaultGuard) {
    let kept = Kept::default();
    let writer = kept.clone();
    let guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    (kept, guard)
}

/// A writer the test's log goes to, kept for reading.
#[derive(Clone, Default)]
pub struct Kept(pub Arc<std::sync::Mutex<Vec<u8>>>);

impl Kept {
    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        String::from_utf8(bytes).expect("the log is UTF-8")
    }
}

impl std::io::Write for Kept {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A child process (a `toolgate serve`, a long `toolgate` command) that is
/// killed and reaped when dropped, so a test that fails (panics) while it
/// runs leaves no process behind.
pub struct KillOnDrop(pub std::process::Child);

impl KillOnDrop {
    /// Starts `command` under the guard.
    pub fn spawn(command: &mut std::process::Command) -> KillOnDrop {
        KillOnDrop(command.spawn().expect("spawn toolgate"))
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;

    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Already exited (and reaped by the test): both are no-ops.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
