//! A lifecycle event request, `{"hook": "on_llm_end", "event": {...},
//! "tenant"?: "t"}`: what `POST /v1/observe` reads. Every error is one
//! line naming the field at fault (`hook`, `event.usage`, `tenant`).

use serde_json::Value;

use crate::event::{LifecycleEvent, LifecycleHook};
use crate::tenant::TenantName;

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
