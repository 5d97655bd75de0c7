//! `observer`: observes every lifecycle event, as its config scripts,
//! first key that applies:
//!
//! - `"spin": true` — loops until its deadline;
//! - `"trap": true` — panics (a trap);
//! - `"blow": true` — writes values past its state budget;
//! - otherwise — adds 1 to the run's `seen` and appends the hook's name to
//!   the run's `hooks` (comma-separated).
//!
//! Its steering answers every call with a cancel whose content is
//! `seen=<n> hooks=<names>` (the run's state as the call finds it), so a
//! test reads what the observations of the run left before the decision.

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

    fn on_agent_start(_: toolgate_guest::AgentStartEvent) {
        seen("on_agent_start")
    }
    fn on_agent_end(_: toolgate_guest::AgentEndEvent) {
        seen("on_agent_end")
    }
    fn on_node_start(_: toolgate_guest::NodeStartEvent) {
        seen("on_node_start")
    }
    fn on_node_end(_: toolgate_guest::NodeEndEvent) {
        seen("on_node_end")
    }
    fn on_node_error(_: toolgate_guest::NodeErrorEvent) {
        seen("on_node_error")
    }
    fn on_llm_start(_: toolgate_guest::LLMStartEvent) {
        seen("on_llm_start")
    }
    fn on_llm_pre_call(_: toolgate_guest::LLMPreCallEvent) {
        seen("on_llm_pre_call")
    }
    fn on_llm_end(e: toolgate_guest::LLMEndEvent) {
        seen(&format!("on_llm_end:{}", e.usage["total_tokens"]))
    }
    fn on_token_composition(_: toolgate_guest::TokenCompositionEvent) {
        seen("on_token_composition")
    }
    fn on_user_correction(_: toolgate_guest::UserCorrectionEvent) {
        seen("on_user_correction")
    }
    fn on_procedure_selection(_: toolgate_guest::ProcedureSelectionEvent) {
        seen("on_procedure_selection")
    }
    fn on_react_loop_end(_: toolgate_guest::ReactLoopEndEvent) {
        seen("on_react_loop_end")
    }
    fn on_fabrication_detected(_: toolgate_guest::FabricationDetectedEvent) {
        seen("on_fabrication_detected")
    }
}

impl SteeringGuard for Watcher {
    fn on_before_tool_call(_event: BeforeToolCallEvent) -> Verdict {
        let seen = state::get(Scope::Run, "seen").unwrap_or_else(|| "0".into());
        let hooks = state::get(Scope::Run, "hooks").unwrap_or_default();
        Verdict::cancel(format!("seen={seen} hooks={hooks}"))
    }
}

toolgate_guest::export!(Watcher: observe, steering);
