//! `observer`: observes every lifecycle event, as its config scripts,
//! first key that applies:
//!
//! - `"spin": true` — loops until its deadline;
//! - `"trap": true` — panics (a trap);
//! - `"blow": true` — writes values past its state budget;
//! - otherwise — adds 1 to the run's `seen` and appends the hook's name to
//!   the run's `hooks` (comma-separated); with `"detail": true`, the name
//!   followed by the event's run id and key fields, `;`-separated in
//!   parentheses: `on_llm_end(r1;model;12;5)` (see [`detail`]).
//!
//! Its steering answers every call with a cancel whose content is
//! `seen=<n> hooks=<names>` (the run's state as the call finds it), so a
//! test reads what the observations of the run left before the decision;
//! with `"proceed": true` it lets every call proceed (a bench's observer
//! that leaves the run as it is).

use toolgate_guest::state::{self, Scope};
use toolgate_guest::{BeforeToolCallEvent, Hook, Observer, SteeringGuard, Verdict};

/// The guard.
struct Watcher;

/// What every observation does, by config.
fn seen(hook: &str) {
    let config = toolgate_guest::config();
    if config["spin"] == true {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
    if config["trap"] == true {
        panic!("observer: scripted trap");
    }
    if config["blow"] == true {
        let big = "x".repeat(1 << 20);
        for i in 0..1024 {
            state::set(Scope::Run, &format!("k{i}"), &big);
        }
    }
    state::add(Scope::Run, "seen", 1);
    let hooks = state::get(Scope::Run, "hooks").unwrap_or_default();
    let hooks = if hooks.is_empty() {
        hook.to_string()
    } else {
        format!("{hooks},{hook}")
    };
    state::set(Scope::Run, "hooks", &hooks);
}

/// Whether the config asks for the key fields (`"detail": true`).
fn detailed() -> bool {
    toolgate_guest::config()["detail"] == true
}

/// What an observation of `hook` appends: its name, or with `"detail":
/// true` `hook(field;field;...)` (the key fields an adapter's test compares
/// with what a Python handler saw).
fn record(hook: &str, fields: &[&dyn std::fmt::Display]) {
    if detailed() {
        seen(&detail(hook, fields))
    } else {
        seen(hook)
    }
}

/// `hook(a;b;c)`.
fn detail(hook: &str, fields: &[&dyn std::fmt::Display]) -> String {
    let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
    format!("{hook}({})", fields.join(";"))
}

/// A usage count, or `-` when the usage has none.
fn count(usage: &toolgate_guest::serde_json::Value, key: &str) -> String {
    usage[key]
        .as_i64()
        .map_or_else(|| "-".to_string(), |n| n.to_string())
}

impl Observer for Watcher {
    const HOOKS: &'static [Hook] = &[
        Hook::AgentStart,
        Hook::AgentEnd,
        Hook::NodeStart,
        Hook::NodeEnd,
        Hook::NodeError,
        Hook::LlmStart,
        Hook::LlmPreCall,
        Hook::LlmEnd,
        Hook::TokenComposition,
        Hook::UserCorrection,
        Hook::ProcedureSelection,
        Hook::ReactLoopEnd,
        Hook::FabricationDetected,
    ];

    fn on_agent_start(e: toolgate_guest::AgentStartEvent) {
        record("on_agent_start", &[&e.run_id, &e.query])
    }
    fn on_agent_end(e: toolgate_guest::AgentEndEvent) {
        record(
            "on_agent_end",
            &[&e.run_id, &e.final_response.as_deref().unwrap_or("")],
        )
    }
    fn on_node_start(e: toolgate_guest::NodeStartEvent) {
        record("on_node_start", &[&e.run_id, &e.node_name])
    }
    fn on_node_end(e: toolgate_guest::NodeEndEvent) {
        record("on_node_end", &[&e.run_id, &e.node_name])
    }
    fn on_node_error(e: toolgate_guest::NodeErrorEvent) {
        record("on_node_error", &[&e.run_id, &e.node_name, &e.error_type])
    }
    fn on_llm_start(e: toolgate_guest::LLMStartEvent) {
        record("on_llm_start", &[&e.run_id, &e.model, &e.turn_index])
    }
    fn on_llm_pre_call(e: toolgate_guest::LLMPreCallEvent) {
        record(
            "on_llm_pre_call",
            &[&e.run_id, &e.model, &e.tools.as_array().map_or(0, Vec::len)],
        )
    }
    fn on_llm_end(e: toolgate_guest::LLMEndEvent) {
        if detailed() {
            let (input, output) = (
                count(&e.usage, "input_tokens"),
                count(&e.usage, "output_tokens"),
            );
            seen(&detail(
                "on_llm_end",
                &[&e.run_id, &e.model, &input, &output],
            ))
        } else {
            seen(&format!("on_llm_end:{}", e.usage["total_tokens"]))
        }
    }

    fn on_token_composition(e: toolgate_guest::TokenCompositionEvent) {
        record(
            "on_token_composition",
            &[&e.run_id, &e.system_prompt_tokens],
        )
    }
    fn on_user_correction(e: toolgate_guest::UserCorrectionEvent) {
        record("on_user_correction", &[&e.turn_id])
    }
    fn on_procedure_selection(e: toolgate_guest::ProcedureSelectionEvent) {
        record("on_procedure_selection", &[&e.pre_tool])
    }
    fn on_react_loop_end(e: toolgate_guest::ReactLoopEndEvent) {
        record("on_react_loop_end", &[&e.run_id, &e.termination_reason])
    }
    fn on_fabrication_detected(e: toolgate_guest::FabricationDetectedEvent) {
        record("on_fabrication_detected", &[&e.run_id, &e.action_taken])
    }
}

impl SteeringGuard for Watcher {
    fn on_before_tool_call(_event: BeforeToolCallEvent) -> Verdict {
        if toolgate_guest::config()["proceed"] == true {
            return Verdict::proceed();
        }
        let seen = state::get(Scope::Run, "seen").unwrap_or_else(|| "0".into());
        let hooks = state::get(Scope::Run, "hooks").unwrap_or_default();
        Verdict::cancel(format!("seen={seen} hooks={hooks}"))
    }
}

toolgate_guest::export!(Watcher: observe, steering);
