//! `pii-check` (steering, outbound HTTP): before `send_email` runs, asks a
//! classifier whether the mail carries personal data, and steers the model
//! to remove it if so.
//!
//! It POSTs `{"text": T}` as JSON to the classifier at its config's `url` —
//! `T` is the call's `body` argument, or the args as JSON text when there is
//! no `body` — which answers `{"pii": true | false}`. On `true` the call is
//! refused with an error result (`is_error = true`) the model retries
//! against. A network fault (the classifier down, slow past the call's
//! deadline, off the plugin's grant) traps the call and the plugin's
//! `on_error` applies: `skip` lets the mail go, `deny` refuses it.
//!
//! ```toml
//! [[plugin]]
//! path = "pii-check.wasm"
//! allowed_hosts = ["https://pii.internal.example"]
//! http_methods = ["POST"]
//! on_error = "deny"
//! [plugin.config]
//! url = "https://pii.internal.example/v1/classify"
//! tool = "send_email"   # default
//! ```

use toolgate_guest::serde::Deserialize;
use toolgate_guest::serde_json::{Value, json};
use toolgate_guest::{BeforeToolCallEvent, ConfigCheck, SteeringGuard, Verdict, http};

/// The guard.
struct PiiCheck;

/// The manifest's `config`.
#[derive(Deserialize)]
#[serde(crate = "toolgate_guest::serde", deny_unknown_fields)]
struct Settings {
    url: String,
    #[serde(default = "send_email")]
    tool: String,
}

fn send_email() -> String {
    "send_email".into()
}

/// What the model sees when the mail carries personal data.
pub const MESSAGE: &str = "This email contains personal data (an address, a phone number, \
    a name with contact details ...). Remove the personal data from the email, then send it again.";

fn settings(config: &Value) -> Result<Settings, String> {
    let s: Settings = toolgate_guest::config_as(config)?;
    if !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
        return Err(format!(
            "config: url must be an http:// or https:// URL, not {:?}",
            s.url
        ));
    }
    Ok(s)
}

impl ConfigCheck for PiiCheck {
    fn validate_config(config: &Value) -> Result<(), String> {
        settings(config).map(drop)
    }
}

impl SteeringGuard for PiiCheck {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        // Checked at load; a config that fails here traps (a fault).
        let s = settings(&toolgate_guest::config()).unwrap_or_else(|e| panic!("{e}"));
        if event.tool_name != s.tool {
            return Verdict::proceed();
        }
        let text = match event.args.get("body") {
            Some(Value::String(body)) => body.clone(),
            _ => event.args.to_string(),
        };
        let answer = http::post_json(&s.url, &json!({ "text": text }));
        let verdict: Value = answer.json().unwrap_or(Value::Null);
        match (answer.ok(), verdict.get("pii")) {
            (true, Some(Value::Bool(true))) => Verdict::steer(MESSAGE),
            (true, Some(Value::Bool(false))) => Verdict::proceed(),
            // Not an answer: a fault, so `on_error` decides.
            _ => panic!(
                "the classifier at {} answered {} {:?}, not {{\"pii\": true|false}}",
                s.url,
                answer.status,
                answer.text()
            ),
        }
    }
}

toolgate_guest::export!(PiiCheck: steering, config);
