//! `tool-call-limit` (steering, stateful): LangChain's
//! `ToolCallLimitMiddleware` as a guard. At most `run_limit` calls per run
//! and `thread_limit` per conversation — of the tool named `tool`, or of
//! every tool when `tool` is absent. A call over a limit is cancelled (a
//! benign result, `is_error = false`) and not counted.
//!
//! ```toml
//! [plugin.config]
//! tool = "send_email"      # absent: every tool
//! run_limit = 2            # calls allowed per run
//! thread_limit = 20        # calls allowed per conversation, across runs
//! thread_key = "thread_id" # the key in the hook's `state` holding the
//!                          # conversation id (default); absent from the
//!                          # state: the thread limit does not apply
//! ```
//!
//! Run counts live in the run's scope; conversation counts in the tenant's
//! (keyed by the conversation id), for the plugin's `state_max_ttl_s`.
//! Several replicas sharing one Redis count together.

use toolgate_guest::serde::Deserialize;
use toolgate_guest::serde_json::Value;
use toolgate_guest::state::{self, Scope};
use toolgate_guest::{BeforeToolCallEvent, ConfigCheck, SteeringGuard, Verdict};

/// The guard.
struct ToolCallLimit;

/// The manifest's `config`.
#[derive(Deserialize)]
#[serde(crate = "toolgate_guest::serde", deny_unknown_fields)]
struct Settings {
    tool: Option<String>,
    run_limit: Option<i64>,
    thread_limit: Option<i64>,
    #[serde(default = "thread_key")]
    thread_key: String,
}

fn thread_key() -> String {
    "thread_id".into()
}

fn settings(config: &Value) -> Result<Settings, String> {
    let s: Settings = toolgate_guest::config_as(config)?;
    if s.run_limit.is_none() && s.thread_limit.is_none() {
        return Err("config: set run_limit, thread_limit or both".into());
    }
    for (key, limit) in [("run_limit", s.run_limit), ("thread_limit", s.thread_limit)] {
        if limit.is_some_and(|n| n < 0) {
            return Err(format!("config: {key} must be 0 or more"));
        }
    }
    Ok(s)
}

impl ConfigCheck for ToolCallLimit {
    fn validate_config(config: &Value) -> Result<(), String> {
        settings(config).map(drop)
    }
}

impl SteeringGuard for ToolCallLimit {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        // Checked at load; a config that fails here traps (a fault).
        let s = settings(&toolgate_guest::config()).unwrap_or_else(|e| panic!("{e}"));
        if s.tool.as_ref().is_some_and(|t| *t != event.tool_name) {
            return Verdict::proceed();
        }
        let tool = s.tool.as_deref().unwrap_or("*");
        let thread = event.state.get(&s.thread_key).and_then(|id| match id {
            Value::String(id) => Some(id.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        });
        // Count first (atomically), then give back what was over: exactly
        // `limit` concurrent calls get through.
        let mut counted = Vec::new();
        let mut over = false;
        if let Some(limit) = s.run_limit {
            let key = format!("calls:{tool}");
            over |= state::add(Scope::Run, &key, 1) > limit;
            counted.push((Scope::Run, key));
        }
        if let (Some(limit), Some(thread)) = (s.thread_limit, thread) {
            let key = format!("thread:{thread}:calls:{tool}");
            over |= state::add_with_ttl(Scope::Tenant, &key, 1, u64::MAX) > limit;
            counted.push((Scope::Tenant, key));
        }
        if !over {
            return Verdict::proceed();
        }
        for (scope, key) in counted {
            state::add(scope, &key, -1);
        }
        Verdict::cancel(match &s.tool {
            Some(t) => format!("Tool call limit exceeded. Do not call '{t}' again."),
            None => "Tool call limit exceeded. Do not make additional tool calls.".into(),
        })
    }
}

toolgate_guest::export!(ToolCallLimit: steering, config);
