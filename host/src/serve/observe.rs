//! A lifecycle event request, `{"hook": "on_llm_end", "event": {...},
//! "tenant"?: "t"}`: what `POST /v1/observe` (and the Python `Host.observe`)
//! reads. Every error is one line naming the field at fault (`hook`,
//! `event.usage`, `tenant`). And what `GET /v1/hooks` (and `Host.hooks()`)
//! answers: which hooks are worth sending now.

use serde_json::{Value, json};

use crate::event::{LifecycleEvent, LifecycleHook, Seam};
use crate::load::registry::PluginSet;
use crate::tenant::TenantName;

/// What `GET /v1/hooks` answers for `set`: `{"hooks": [...], "response":
/// bool, "generation": n}` — the lifecycle hooks some loaded guard of any
/// tenant observes, whether some loaded guard of any tenant answers the
/// response seam, and the plugin set's generation (it changes with every
/// reload that changed something, so an adapter polling this knows when
/// to look again). An adapter offers its agent only these hooks.
pub fn hooks_body(set: &PluginSet) -> Value {
    let response = std::iter::once(&set.global)
        .chain(set.tenants.values())
        .any(|chain| chain.plugins().iter().any(|p| p.subscribes(Seam::Response)));
    json!({
        "hooks": set.observed_hooks().names(),
        "response": response,
        "generation": set.generation,
    })
}

/// A lifecycle event request, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ObserveRequest {
    /// The event, typed for its hook.
    pub event: LifecycleEvent,
    /// The tenant whose chain observes it after the global one.
    pub tenant: Option<TenantName>,
}

impl ObserveRequest {
    /// Parses `body` (JSON text).
    pub fn parse(body: &[u8]) -> Result<ObserveRequest, String> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| format!("request body is not valid JSON: {e}"))?;
        let Value::Object(mut map) = value else {
            return Err(
                r#"request body must be a JSON object {"hook": "...", "event": {...}, "tenant"?: "..."}"#
                    .to_string(),
            );
        };
        if let Some(unknown) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "hook" | "event" | "tenant"))
        {
            return Err(format!(
                "unknown field `{unknown}` in request body (expected hook, event, tenant)"
            ));
        }
        let hook: LifecycleHook = match map.remove("hook") {
            Some(Value::String(h)) => h.parse().map_err(|e| format!("field `hook`: {e}"))?,
            Some(_) => return Err("field `hook` must be a string".to_string()),
            None => return Err("missing field `hook` in request body".to_string()),
        };
        let event = map
            .remove("event")
            .ok_or_else(|| "missing field `event` in request body".to_string())?;
        let event = LifecycleEvent::from_value(hook, event)?;
        let tenant = match map.remove("tenant") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => {
                Some(TenantName::try_from(t).map_err(|e| format!("field `tenant`: {e}"))?)
            }
            Some(_) => return Err("field `tenant` must be a string".to_string()),
        };
        Ok(ObserveRequest { event, tenant })
    }
}
