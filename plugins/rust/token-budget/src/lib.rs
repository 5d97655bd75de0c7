//! `token-budget` (lifecycle + steering + routing): adds each
//! `on_llm_end` usage's total tokens to the run's state; once a run has
//! used `max_tokens`, every tool call of that run is cancelled with
//! `{"action": "skip", "content": "Token budget of N exceeded. Answer with
//! what you have.", "is_error": false}` and routing hides every tool. A new
//! run starts from zero (the count is in the run's scope).
//!
//! The total of a usage dict is its `total_tokens` when it has one, else
//! `input_tokens + output_tokens` (Anthropic) or `prompt_tokens +
//! completion_tokens` (OpenAI).
//!
//! ```toml
//! [[plugin]]
//! path = "token-budget.wasm"
//! [plugin.config]
//! max_tokens = 50000   # required, at least 1
//! ```

use toolgate_guest::serde::Deserialize;
use toolgate_guest::serde_json::Value;
use toolgate_guest::state::{self, Scope};
use toolgate_guest::{
    BeforeToolCallEvent, ConfigCheck, Hook, LLMEndEvent, Observer, RoutingGuard, SteeringGuard,
    ToolRoutingDecisionEvent, Verdict,
};

/// The guard.
struct TokenBudget;

/// The plugin's config.
#[derive(Deserialize)]
#[serde(crate = "toolgate_guest::serde", deny_unknown_fields)]
struct Settings {
    /// Tokens a run may use before its tool calls are cancelled.
    max_tokens: i64,
}

/// The run-scope key of the tokens used so far.
const USED: &str = "tokens";

/// The config, checked.
fn settings(config: &Value) -> Result<Settings, String> {
    let s: Settings = toolgate_guest::config_as(config)?;
    if s.max_tokens < 1 {
        return Err(format!(
            "max_tokens must be at least 1, not {}",
            s.max_tokens
        ));
    }
    Ok(s)
}

/// The total tokens of a usage dict.
fn total(usage: &Value) -> i64 {
    let n = |key: &str| usage[key].as_i64().unwrap_or(0).max(0);
    match usage["total_tokens"].as_i64() {
        Some(t) => t.max(0),
        None if usage.get("input_tokens").is_some() || usage.get("output_tokens").is_some() => {
            n("input_tokens").saturating_add(n("output_tokens"))
        }
        None => n("prompt_tokens").saturating_add(n("completion_tokens")),
    }
}

/// The budget when this run has used it up, else `None`.
fn exceeded() -> Option<i64> {
    let max = settings(&toolgate_guest::config()).ok()?.max_tokens;
    let used: i64 = state::get(Scope::Run, USED)?.parse().ok()?;
    (used >= max).then_some(max)
}

impl Observer for TokenBudget {
    const HOOKS: &'static [Hook] = &[Hook::LlmEnd];

    fn on_llm_end(event: LLMEndEvent) {
        let tokens = total(&event.usage);
        if tokens > 0 {
            state::add(Scope::Run, USED, tokens);
        }
    }
}

impl SteeringGuard for TokenBudget {
    fn on_before_tool_call(_event: BeforeToolCallEvent) -> Verdict {
        match exceeded() {
            Some(max) => Verdict::cancel(format!(
                "Token budget of {max} exceeded. Answer with what you have."
            )),
            None => Verdict::proceed(),
        }
    }
}

impl RoutingGuard for TokenBudget {
    fn on_tool_routing_decision(_event: ToolRoutingDecisionEvent) -> Option<Vec<String>> {
        exceeded().map(|_| Vec::new())
    }
}

impl ConfigCheck for TokenBudget {
    fn validate_config(config: &Value) -> Result<(), String> {
        settings(config).map(drop)
    }
}

toolgate_guest::export!(TokenBudget: observe, steering, routing, config);

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_guest::serde_json::json;

    #[test]
    fn a_usage_total_is_read_from_any_provider_shape() {
        assert_eq!(total(&json!({"total_tokens": 30, "input_tokens": 1})), 30);
        assert_eq!(total(&json!({"input_tokens": 10, "output_tokens": 5})), 15);
        assert_eq!(
            total(&json!({"prompt_tokens": 7, "completion_tokens": 2})),
            9
        );
        assert_eq!(total(&json!({})), 0);
        assert_eq!(total(&json!({"total_tokens": -3})), 0);
    }

    #[test]
    fn the_config_needs_a_positive_budget() {
        assert!(settings(&json!({"max_tokens": 100})).is_ok());
        assert!(settings(&json!({"max_tokens": 0})).is_err());
        assert!(settings(&json!({})).is_err());
    }
}
