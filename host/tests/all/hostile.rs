//! Hostile guests: every misbehaviour is contained, classified from its
//! type, and the very next call on the same engine is answered normally.

use std::time::Duration;

use serde_json::json;
use toolgate::{Fault, Limits, OnError, Outcome};
use toolgate_tests::HOSTILE;

use crate::*;

/// Runs `attack` at the steering seam with `limits`; returns the trace
/// entry, after checking that a well-behaved call on the same engine and
/// plugin file right after it proceeds.
async fn contained(attack: &str, limits: Limits) -> toolgate::GuardTrace {
    let engine = engine();
    let bad = plugin_with(
        &engine,
        "hostile",
        HOSTILE,
        json!({}),
        limits.clone(),
        OnError::Skip,
    )
    .await;
    let decision = chain(&[&bad])
        .steering(&steering(attack, json!({})), &no_state())
        .await;
    assert_eq!(
        decision.result, None,
        "a fault must never be reported as a skip"
    );
    assert_eq!(decision.trace.len(), 1);
    // The very next call, same engine, same plugin: answered normally.
    let next = chain(&[&bad])
        .steering(&steering("ok", json!({})), &no_state())
        .await;
    assert_eq!(next.result, None);
    assert_eq!(
        next.trace[0].outcome,
        Outcome::Proceed,
        "{:?}",
        next.trace[0]
    );
    decision.trace[0].clone()
}

fn assert_fault(entry: &toolgate::GuardTrace, fault: Fault) {
    assert_eq!(entry.outcome, Outcome::Fault, "{entry:?}");
    assert_eq!(entry.fault, Some(fault), "{entry:?}");
}

#[tokio::test]
async fn infinite_loop_runs_out_of_fuel() {
    let entry = contained("loop", tight()).await;
    assert_fault(&entry, Fault::OutOfFuel);
    assert_eq!(entry.fuel_used, tight().fuel);
}

#[tokio::test]
async fn loop_with_huge_fuel_hits_the_deadline() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        timeout: Duration::from_millis(50),
        ..Limits::default()
    };
    let entry = contained("loop", limits).await;
    assert_fault(&entry, Fault::Deadline);
    assert!(
        entry.micros >= 50_000,
        "stopped before its deadline: {entry:?}"
    );
}

#[tokio::test]
async fn a_deadline_fault_reports_the_fuel_it_burnt() {
    // The spinner burns fuel for its whole 50 ms; the counter lives in a
    // register between calls, and the deadline trap used to leave the
    // store holding only what was counted at the guest's last call.
    let limits = Limits {
        fuel: u64::MAX / 2,
        timeout: Duration::from_millis(50),
        ..Limits::default()
    };
    // The timeout is run time (its thread's CPU), so what the spin burns
    // does not shrink on a busy machine; 2 M — two flush slices, a fiftieth
    // of what 50 ms of spinning burns here — holds on one far slower, and
    // the count at the guest's last call is a few hundred.
    let entry = contained("loop", limits.clone()).await;
    assert_fault(&entry, Fault::Deadline);
    assert!(
        entry.fuel_used >= 2_000_000 && entry.fuel_used < limits.fuel,
        "a 50 ms spin reported {} fuel: {entry:?}",
        entry.fuel_used
    );
}

#[tokio::test]
async fn a_memory_fault_reports_the_fuel_it_burnt() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        ..tight()
    };
    let entry = contained("alloc", limits.clone()).await;
    assert_fault(&entry, Fault::Memory);
    // Filling 32 MiB a byte at a time costs millions of instructions.
    assert!(
        entry.fuel_used >= 1_000_000 && entry.fuel_used < limits.fuel,
        "{entry:?}"
    );
}

#[tokio::test]
async fn memory_bomb_hits_the_memory_cap() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        ..tight()
    };
    assert_fault(&contained("alloc", limits).await, Fault::Memory);
}

#[tokio::test]
async fn unbounded_recursion_overflows_the_stack() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        ..tight()
    };
    assert_fault(&contained("recurse", limits).await, Fault::StackOverflow);
}

#[tokio::test]
async fn unreachable_and_panic_are_unreachable() {
    assert_fault(&contained("trap", tight()).await, Fault::Unreachable);
    assert_fault(&contained("panic", tight()).await, Fault::Unreachable);
}

#[tokio::test]
async fn huge_returned_string_is_refused() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        max_return_bytes: 1 << 20,
        ..tight()
    };
    let entry = contained("huge", limits).await;
    assert_fault(&entry, Fault::OversizedReturn);
    // 16 MiB is over the per-crossing data budget (2 × 1 MiB + 1 MiB): it
    // is refused before the host copies it.
    let detail = entry.detail.as_deref().unwrap_or("");
    assert!(
        detail.contains("returned more than 3145728 bytes"),
        "{entry:?}"
    );

    // Just over max_return_bytes but within the budget: copied, then refused.
    let limits = Limits {
        memory_bytes: 64 << 20,
        max_return_bytes: 8 << 20,
        ..tight()
    };
    let entry = contained("huge", limits).await;
    assert_fault(&entry, Fault::OversizedReturn);
    assert!(
        entry.detail.as_deref().unwrap_or("").contains("16777216"),
        "{entry:?}"
    );
}

/// Runs `attack` with `args` at the steering seam under `limits`.
async fn attack_with(
    attack: &str,
    args: serde_json::Value,
    limits: Limits,
) -> toolgate::GuardTrace {
    let engine = engine();
    let bad = plugin_with(
        &engine,
        "hostile",
        HOSTILE,
        json!({}),
        limits,
        OnError::Skip,
    )
    .await;
    let decision = chain(&[&bad])
        .steering(&steering(attack, args), &no_state())
        .await;
    assert_eq!(decision.result, None);
    decision.trace[0].clone()
}

#[tokio::test]
async fn more_data_than_wasmtime_lets_a_guest_hand_over_is_classified() {
    // 200 MiB is over wasmtime's default hostcall fuel (128 MiB) as well as
    // toolgate's own budget: a reply that big is an oversized return, a
    // log message that big a host-budget fault — not `invalid-result`.
    let limits = Limits {
        fuel: u64::MAX / 2,
        memory_bytes: 512 << 20,
        ..tight()
    };
    let reply = attack_with("huge", json!({"mib": 200}), limits.clone()).await;
    assert_fault(&reply, Fault::OversizedReturn);
    let log = attack_with("log-huge", json!({"mib": 200}), limits.clone()).await;
    assert_fault(&log, Fault::HostBudget);
    assert!(
        log.detail.as_deref().unwrap_or("").contains("host import"),
        "{log:?}"
    );
    // Within the budget but over the log budget: the log budget says no.
    let log = attack_with("log-huge", json!({"mib": 1}), limits).await;
    assert_fault(&log, Fault::HostBudget);
}

#[tokio::test]
async fn huge_returned_string_beyond_memory_cap_is_a_memory_fault() {
    // 16 MiB of content cannot even be built inside an 8 MiB memory.
    let limits = Limits {
        memory_bytes: 8 << 20,
        ..tight()
    };
    assert_fault(&contained("huge", limits).await, Fault::Memory);
}

#[tokio::test]
async fn host_call_flood_exhausts_the_budget() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        ..tight()
    };
    let entry = contained("log-flood", limits).await;
    assert_fault(&entry, Fault::HostBudget);
}

#[tokio::test]
async fn stdout_flood_is_bounded_and_the_call_completes() {
    // About 4 s of work alone; the deadline leaves room for a machine that
    // other tests (or other jobs) keep busy, since the call runs long and so
    // on the low-priority lane.
    let limits = Limits {
        fuel: u64::MAX / 2,
        timeout: Duration::from_secs(120),
        ..tight()
    };
    let entry = contained("stdout-flood", limits).await;
    assert_eq!(entry.outcome, Outcome::Proceed, "{entry:?}");
    // What reaches the log: `cli::a_guards_output_reaches_the_log_bounded`.
}

#[tokio::test]
async fn empty_skip_is_malformed_and_treated_as_proceed() {
    let entry = contained("empty-skip", tight()).await;
    assert_eq!(entry.outcome, Outcome::Malformed, "{entry:?}");
    assert_eq!(entry.fault, None);
}

/// Runs an attack that reports what it managed as a steer message.
async fn report(attack: &str, args: serde_json::Value) -> String {
    let engine = engine();
    let p = plugin_with(
        &engine,
        "hostile",
        HOSTILE,
        json!({}),
        tight(),
        OnError::Skip,
    )
    .await;
    let d = chain(&[&p])
        .steering(&steering(attack, args), &no_state())
        .await;
    d.result.expect("the attack reports by steering").content
}

#[tokio::test]
async fn no_file_system() {
    let said = report("file", json!({})).await;
    assert!(
        !said.contains("READ"),
        "a guest read the host's files: {said}"
    );
    assert!(said.contains("/etc/passwd denied"), "{said}");
    assert!(said.contains("/ denied"), "{said}");
}

#[tokio::test]
async fn no_environment() {
    assert_eq!(report("env", json!({})).await, "env: 0");
}

#[tokio::test]
async fn no_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let said = report("socket", json!({ "port": port })).await;
    assert!(said.starts_with("socket: denied"), "{said}");
}

#[tokio::test]
async fn faults_at_every_seam_are_skipped() {
    let engine = engine();
    let bad = plugin_with(
        &engine,
        "hostile",
        HOSTILE,
        json!({"attack": "trap"}),
        tight(),
        OnError::Skip,
    )
    .await;
    let c = chain(&[&bad]);
    let r = c.routing(&routing(&["a", "b"]), &no_state()).await;
    assert_eq!(r.result, vec!["a", "b"]);
    assert_eq!(r.trace[0].fault, Some(Fault::Unreachable));
    let w = c
        .rewrite(&dispatch("a", json!({"x": 1}), &["a"]), &no_state())
        .await;
    assert_eq!(w.result, None);
    assert_eq!(w.trace[0].fault, Some(Fault::Unreachable));
    let o = c.result(&result("a", json!("done")), &no_state()).await;
    assert_eq!(o.trace[0].fault, Some(Fault::Unreachable));
}

#[tokio::test]
async fn fail_closed_guard_steers_with_a_labelled_message() {
    let engine = engine();
    let bad = plugin_with(
        &engine,
        "strict",
        HOSTILE,
        json!({"attack": "trap"}),
        tight(),
        OnError::Deny,
    )
    .await;
    let d = chain(&[&bad])
        .steering(&steering("run_query", json!({})), &no_state())
        .await;
    let skip = d.result.expect("fail-closed fault steers");
    assert!(skip.is_error);
    assert_eq!(
        skip.content,
        toolgate::fail_closed_message("strict", Fault::Unreachable)
    );
    assert!(skip.content.starts_with("[toolgate]"));
    assert_eq!(d.trace[0].outcome, Outcome::Fault);
    // Fail-closed at routing hides every tool.
    let r = chain(&[&bad])
        .routing(&routing(&["a", "b"]), &no_state())
        .await;
    assert!(r.result.is_empty());
}

#[tokio::test]
async fn a_fault_does_not_stop_the_chain() {
    let engine = engine();
    let bad = plugin_with(
        &engine,
        "hostile",
        HOSTILE,
        json!({"attack": "loop"}),
        tight(),
        OnError::Skip,
    )
    .await;
    let sql = plugin(&engine, "sql-guard", toolgate_tests::SQL_GUARD, json!({})).await;
    let d = chain(&[&bad, &sql])
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM users"})),
            &no_state(),
        )
        .await;
    assert_eq!(d.trace[0].fault, Some(Fault::OutOfFuel));
    assert_eq!(
        d.result.expect("sql-guard still steers").content,
        "Add a WHERE clause before running this query."
    );
}

/// The hostile guest spinning forever, stopped only by its `timeout`.
async fn spinner(engine: &toolgate::Engine, timeout: Duration) -> std::sync::Arc<toolgate::Plugin> {
    let limits = Limits {
        fuel: u64::MAX / 2,
        timeout,
        ..Limits::default()
    };
    plugin_with(
        engine,
        "hostile",
        HOSTILE,
        json!({"attack": "loop"}),
        limits,
        OnError::Skip,
    )
    .await
}

/// A steering call through `plugin` on a task of its own.
fn spawn_steering(
    plugin: &std::sync::Arc<toolgate::Plugin>,
) -> tokio::task::JoinHandle<toolgate::Decision<Option<toolgate::event::Skip>>> {
    let c = chain(&[plugin]);
    tokio::spawn(async move { c.steering(&steering("x", json!({})), &no_state()).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_hostile_calls_do_not_disturb_each_other() {
    let engine = engine();
    let looping = spawn_steering(&spinner(&engine, Duration::from_millis(100)).await);
    let sql = plugin(&engine, "sql-guard", toolgate_tests::SQL_GUARD, json!({})).await;
    // While one guard spins, another plugin on the same engine answers.
    for _ in 0..20 {
        let d = chain(&[&sql])
            .steering(
                &steering("run_query", json!({"sql": "SELECT 1 WHERE 1=1"})),
                &no_state(),
            )
            .await;
        assert_eq!(d.trace[0].outcome, Outcome::Proceed);
    }
    let spun = looping.await.expect("task");
    // Stopped at its deadline, or — on a machine too busy to give it its
    // run time within its wall-clock bound — as `overloaded`: never left
    // running, never answered.
    assert!(
        matches!(
            spun.trace[0].fault,
            Some(Fault::Deadline | Fault::Overloaded)
        ),
        "{:?}",
        spun.trace[0]
    );
}

/// A spinning guest yields to the executor at every epoch tick: on a
/// single-threaded runtime, another call runs to completion while the
/// spinner is still inside its deadline, and dropping the spinner's call
/// stops it.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_guest_never_holds_the_thread() {
    let engine = engine();
    let looping = spawn_steering(&spinner(&engine, Duration::from_secs(60)).await);
    let sql = plugin(&engine, "sql-guard", toolgate_tests::SQL_GUARD, json!({})).await;
    // Let the spinner start: without yielding it would keep this thread
    // for its whole 60 s deadline.
    tokio::task::yield_now().await;
    let d = chain(&[&sql])
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM t"})),
            &no_state(),
        )
        .await;
    assert_eq!(d.trace[0].outcome, Outcome::Skip);
    assert!(!looping.is_finished(), "the spinner finished first");
    looping.abort();
    let stopped = looping.await.expect_err("the spinner was aborted");
    assert!(stopped.is_cancelled());
}
