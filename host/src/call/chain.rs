//! The chain rules of the four seams, exactly as symfonic's
//! `CallbackManager` applies them to Python handlers — with guards that
//! fault treated like handlers that raised. Everything here is in host
//! types: each guard's reply arrives lifted by `guard_call` (private).

use std::borrow::Cow;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::call::guard_call::{
    Called, GuestEvent, ResponseHook, ResultHook, RewriteHook, RoutingHook, SteeringHook,
};
use crate::call::plugin::{Mode, OnError, Plugin};
use crate::event::{
    BeforeToolCallEvent, Event, ResponseRenderEvent, Rewrite, Seam, Skip, ToolCallDispatchEvent,
    ToolResultCallbackEvent, ToolRoutingDecisionEvent,
};
use crate::fault::Fault;
use crate::runtime::log_writer::redact::Secrets;

/// What one guard did with one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Steering: let the call run. Rewrite / routing: returned nothing.
    Proceed,
    /// Steering: refused the call (this verdict won).
    Skip,
    /// Rewrite: replaced the call (accepted).
    Rewrite,
    /// Routing: returned the tools to keep.
    Narrow,
    /// Result: observed the result.
    Observed,
    /// Returned something the chain rules drop: a skip with empty content,
    /// a rewrite with non-object args, or a rewrite that led to a resulting
    /// call outside `available_tools`.
    Malformed,
    /// The call faulted (see `fault`): the guard's own doing.
    Fault,
    /// The host could not run the guard in time (see `fault`:
    /// `capacity`, `share-exhausted` or `overloaded`). Nothing was decided:
    /// the chain stopped here, and every face answers the request as not
    /// decided (see [`Decision::unavailable`]).
    Unavailable,
}

impl Outcome {
    /// The lowercase name used in traces and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Proceed => "proceed",
            Outcome::Skip => "skip",
            Outcome::Rewrite => "rewrite",
            Outcome::Narrow => "narrow",
            Outcome::Observed => "observed",
            Outcome::Malformed => "malformed",
            Outcome::Fault => "fault",
            Outcome::Unavailable => "unavailable",
        }
    }
}

/// One guard's entry in a decision's trace.
#[derive(Clone, Debug, Serialize)]
pub struct GuardTrace {
    /// The plugin's name.
    pub plugin: String,
    /// `enforce`: its verdict counted; `shadow`: recorded, never applied.
    pub mode: Mode,
    /// What it did.
    pub outcome: Outcome,
    /// Why it faulted, when `outcome` is `fault`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// Detail for a fault or a malformed reply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Fuel burnt, start-up included.
    pub fuel_used: u64,
    /// Wall-clock time of the call (fresh instance included), microseconds.
    pub micros: u64,
}

/// A chain's answer for one event, and how each consulted guard got there.
#[derive(Clone, Debug, Serialize)]
pub struct Decision<T> {
    /// The value the Python hook returns.
    pub result: T,
    /// One entry per guard consulted, in order.
    pub trace: Vec<GuardTrace>,
    /// What the shadow guards (`mode = "shadow"`) would have answered;
    /// `None` when none subscribes to the seam, or they have not run yet
    /// (a face that answers first runs them after the answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Shadow>,
}

/// The shadow chain's run for one event: its guards alone, in their order,
/// under the same chain rules, on the same event — recorded, never applied.
#[derive(Clone, Debug, Serialize)]
pub struct Shadow {
    /// What the shadow chain would have answered: a hook's return value.
    pub result: Verdict,
    /// One entry per shadow guard consulted, in order (each `shadow`).
    pub trace: Vec<GuardTrace>,
    /// Whether `result` is the enforced answer; `None` when the shadow
    /// chain met a guard the host could not run in time (not decided).
    pub agrees: Option<bool>,
}

impl<T> Decision<T> {
    /// A decision with `result` and `trace`, no shadow run.
    fn new(result: T, trace: Vec<GuardTrace>) -> Self {
        Decision {
            result,
            trace,
            shadow: None,
        }
    }

    /// The guard the host could not run in time, if any: then the chain
    /// stopped there and its `result` decides nothing — it must not be
    /// acted on as the guards' answer (the faces answer "not decided":
    /// HTTP 503, `toolgate.BusyError`).
    pub fn unavailable(&self) -> Option<&GuardTrace> {
        self.trace
            .iter()
            .find(|entry| entry.outcome == Outcome::Unavailable)
    }

    /// The same decision with its result turned by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Decision<U> {
        Decision {
            result: f(self.result),
            trace: self.trace,
            shadow: self.shadow,
        }
    }
}

/// The chain's answer at any seam: the value the Python hook returns,
/// typed. It serialises exactly as that value: a list of names, `null` or
/// a rewrite dict, `null` or a skip dict, `null`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Verdict {
    /// Routing: the tools that stay visible.
    Routing(Vec<String>),
    /// Rewrite: the call to dispatch instead; `None`: the original call.
    Rewrite(Option<Rewrite>),
    /// Steering: the refusal; `None`: the call proceeds.
    Steering(Option<Skip>),
    /// Result: observed; nothing returned.
    Result,
    /// Response: the answer to return, as symfonic's
    /// `CallbackManager.on_response_render` returns it (the event's
    /// `content`, else `original_content`, when no guard changed it).
    Response(String),
}

impl Verdict {
    /// The seam that gave it.
    pub fn seam(&self) -> Seam {
        match self {
            Verdict::Routing(_) => Seam::Routing,
            Verdict::Rewrite(_) => Seam::Rewrite,
            Verdict::Steering(_) => Seam::Steering,
            Verdict::Result => Seam::Result,
            Verdict::Response(_) => Seam::Response,
        }
    }

    /// Every name [`as_str`](Verdict::as_str) gives.
    pub const WORDS: [&'static str; 6] =
        ["proceed", "skip", "rewrite", "narrow", "observed", "render"];

    /// Its name in metrics: `narrow`, `rewrite`, `skip`, `proceed` (no
    /// rewrite, no skip), `observed` or `render` (response).
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Routing(_) => "narrow",
            Verdict::Rewrite(Some(_)) => "rewrite",
            Verdict::Steering(Some(_)) => "skip",
            Verdict::Rewrite(None) | Verdict::Steering(None) => "proceed",
            Verdict::Result => "observed",
            Verdict::Response(_) => "render",
        }
    }
}

/// The message a fail-closed (`on_error = "deny"`) guard's fault steers with.
pub fn fail_closed_message(plugin: &str, fault: Fault) -> String {
    format!(
        "[toolgate] This call was blocked: the guard `{plugin}` failed ({fault}) and is \
         configured to fail closed."
    )
}

/// The answer a fail-closed (`on_error = "deny"`) response guard's fault
/// returns instead of the run's own.
pub fn withheld_message(plugin: &str, fault: Fault) -> String {
    format!(
        "[toolgate] This answer was withheld: the guard `{plugin}` failed ({fault}) and is \
         configured to fail closed."
    )
}

/// An ordered list of guards, consulted by the rules of each seam: the
/// enforced ones decide; the shadow ones (`mode = "shadow"`) form a chain
/// of their own beside them, run by [`Chain::decide`] or [`Chain::shadow`].
#[derive(Clone, Debug, Default)]
pub struct Chain {
    plugins: Vec<Arc<Plugin>>,
    /// The guards the seam methods consult: the enforced ones, or, in the
    /// shadow chain, the shadow ones.
    runs: Mode,
    /// One call's masked values ([`Chain::masking`]), cut out of what the
    /// server log says about its guards.
    secrets: Option<Arc<Secrets>>,
}

impl Chain {
    /// A chain consulting `plugins` in this order.
    pub fn new(plugins: Vec<Arc<Plugin>>) -> Self {
        Chain {
            plugins,
            runs: Mode::Enforce,
            secrets: None,
        }
    }

    /// This chain for one call whose masked values are `secrets`: the
    /// guards' log lines, stdout and stderr, and what the host logs about
    /// their faults, are masked with them (`docs/decision-log.md`, "The
    /// decision log").
    pub(crate) fn masking(&self, secrets: Arc<Secrets>) -> Chain {
        Chain {
            secrets: Some(secrets),
            ..self.clone()
        }
    }

    /// The guards, in order, enforced and shadow.
    pub fn plugins(&self) -> &[Arc<Plugin>] {
        &self.plugins
    }

    /// The same chain serving `tenant`'s calls: its guards that use state
    /// keep it in that tenant's scopes (see [`Plugin::serving`]).
    pub fn serving(&self, tenant: &str) -> Chain {
        let plugins = self
            .plugins
            .iter()
            .map(|p| {
                if p.uses_state() || p.http.is_some() {
                    Arc::new(p.serving(tenant))
                } else {
                    Arc::clone(p)
                }
            })
            .collect();
        Chain {
            plugins,
            runs: self.runs,
            secrets: self.secrets.clone(),
        }
    }

    fn subscribed(&self, seam: Seam) -> impl Iterator<Item = &Arc<Plugin>> {
        self.plugins
            .iter()
            .filter(move |p| p.mode() == self.runs && p.subscribes(seam))
    }

    /// Whether a shadow guard subscribes to `seam`.
    pub fn shadows(&self, seam: Seam) -> bool {
        self.plugins
            .iter()
            .any(|p| p.mode() == Mode::Shadow && p.subscribes(seam))
    }

    /// Runs `event` through the chain of its seam, then its shadow guards
    /// (if any subscribe) into the decision's `shadow`: their cost is
    /// added to this call's. A face that must not wait for them calls
    /// [`Chain::enforce`], answers, then [`Chain::shadow`].
    pub async fn decide(&self, event: &Event, state: &Value) -> Decision<Verdict> {
        let mut decision = self.enforce(event, state).await;
        decision.shadow = self.shadow(event, state, &decision.result).await;
        decision
    }

    /// What the shadow guards would have answered for `event`, beside the
    /// `enforced` answer; `None` when none subscribes to its seam. Their
    /// faults are recorded, never quarantine them (a shadow plugin has
    /// quarantine off) and never reach the enforced answer.
    pub async fn shadow(&self, event: &Event, state: &Value, enforced: &Verdict) -> Option<Shadow> {
        if !self.shadows(event.seam()) {
            return None;
        }
        let shadows = Chain {
            runs: Mode::Shadow,
            ..self.clone()
        };
        let decision = shadows.enforce(event, state).await;
        let agrees = decision
            .unavailable()
            .is_none()
            .then(|| decision.result == *enforced);
        Some(Shadow {
            result: decision.result,
            trace: decision.trace,
            agrees,
        })
    }

    /// Runs `run` (a shadow run of `account`'s call, after the answer) on
    /// the engine's shadow threads (see `LongLane::after_answer`) if the
    /// engine's backlog has a place for it, holding that place until it
    /// ends; `false` — dropped, counted — when it has none, or the chain
    /// has no shadow guard.
    pub(crate) fn after_answer(
        &self,
        account: &str,
        run: impl Future<Output = ()> + Send + 'static,
    ) -> bool {
        let Some(plugin) = self.plugins.iter().find(|p| p.mode() == Mode::Shadow) else {
            return false;
        };
        let Some(place) = plugin.engine.shadow_backlog().take(account) else {
            return false;
        };
        plugin.engine.long_lane().after_answer(async move {
            run.await;
            drop(place);
        });
        true
    }

    /// Runs `event` through the enforced guards of its seam only.
    pub async fn enforce(&self, event: &Event, state: &Value) -> Decision<Verdict> {
        match event {
            Event::Routing(e) => self.routing(e, state).await.map(Verdict::Routing),
            Event::Rewrite(e) => self.rewrite(e, state).await.map(Verdict::Rewrite),
            Event::Steering(e) => self.steering(e, state).await.map(Verdict::Steering),
            Event::Result(e) => self.result(e, state).await.map(|()| Verdict::Result),
            Event::Response(e) => self.response(e, state).await.map(Verdict::Response),
        }
    }

    /// `on_before_tool_call`: registration order; the first valid skip wins
    /// and short-circuits the rest; a skip with empty content is dropped
    /// with a warning; a fault is skipped (or, fail-closed, steers).
    pub async fn steering(
        &self,
        event: &BeforeToolCallEvent,
        state: &Value,
    ) -> Decision<Option<Skip>> {
        let mut trace = Vec::new();
        if self.subscribed(Seam::Steering).next().is_none() {
            return Decision::new(None, trace);
        }
        self.after_observations(&event.run_id).await;
        let guest_event =
            GuestEvent::<SteeringHook>::new(event, &state.to_string(), self.secrets.clone());
        for plugin in self.subscribed(Seam::Steering) {
            let Some(called) = plugin.call(&guest_event).await else {
                continue;
            };
            let (entry, reply) = self.record(plugin, Seam::Steering, called);
            if entry.outcome == Outcome::Unavailable {
                trace.push(entry);
                return Decision::new(None, trace);
            }
            let skip = match reply {
                Err(fault) if plugin.on_error() == OnError::Deny => Some(Skip {
                    content: fail_closed_message(plugin.name(), fault),
                    is_error: true,
                }),
                Err(_) | Ok(None) => None,
                // Python's `not content`: only "" is empty; whitespace is content.
                Ok(Some(skip)) if skip.content.is_empty() => {
                    trace.push(malformed(
                        plugin,
                        Seam::Steering,
                        entry,
                        "skip with empty content; treated as proceed",
                    ));
                    continue;
                }
                Ok(skip) => skip,
            };
            trace.push(entry.with(skip.is_some(), Outcome::Skip, Outcome::Proceed));
            if skip.is_some() {
                return Decision::new(skip, trace);
            }
        }
        Decision::new(None, trace)
    }

    /// `on_tool_call_dispatch`: registration order; each guard sees the
    /// previous rewrite, whatever tool it names. A reply whose args are not
    /// a JSON object is dropped with a warning and the chain goes on with
    /// what it had (symfonic's manager does the same with a non-dict).
    /// The *resulting* call is validated once, at the end, as symfonic's
    /// React node does: if it names a tool outside `available_tools` the
    /// rewrite is dropped with one warning naming the guards, and the
    /// original call is dispatched (`None`). Returns the final rewrite, or
    /// `None` when no guard rewrote or the result was dropped.
    pub async fn rewrite(
        &self,
        event: &ToolCallDispatchEvent,
        state: &Value,
    ) -> Decision<Option<Rewrite>> {
        let mut trace = Vec::new();
        let mut current: Option<Rewrite> = None;
        if self.subscribed(Seam::Rewrite).next().is_none() {
            return Decision::new(None, trace);
        }
        self.after_observations(&event.run_id).await;
        let state = state.to_string();
        for plugin in self.subscribed(Seam::Rewrite) {
            let (tool_name, args) = match &current {
                Some(r) => (&r.tool_name, &r.args),
                None => (&event.tool_name, &event.args),
            };
            let guest_event = GuestEvent::<RewriteHook>::new(
                (event, tool_name, args),
                &state,
                self.secrets.clone(),
            );
            let Some(called) = plugin.call(&guest_event).await else {
                continue;
            };
            let (entry, reply) = self.record(plugin, Seam::Rewrite, called);
            if entry.outcome == Outcome::Unavailable {
                trace.push(entry);
                return Decision::new(None, trace);
            }
            match reply {
                Ok(Some(Ok(r))) => {
                    current = Some(r);
                    trace.push(entry.with(true, Outcome::Rewrite, Outcome::Proceed));
                }
                Ok(Some(Err(why))) => trace.push(malformed(plugin, Seam::Rewrite, entry, &why)),
                Ok(None) => trace.push(entry.with(false, Outcome::Rewrite, Outcome::Proceed)),
                Err(_) => trace.push(entry),
            }
        }
        let result = match current {
            Some(r) if !event.available_tools.contains(&r.tool_name) => {
                drop_unavailable(&r.tool_name, event, &mut trace);
                None
            }
            current => current,
        };
        Decision::new(result, trace)
    }

    /// `on_tool_routing_decision`: each guard sees the previous narrowing;
    /// the result is the intersection, in the original order — a guard can
    /// hide tools, never add one. A fail-closed guard's fault hides all.
    pub async fn routing(
        &self,
        event: &ToolRoutingDecisionEvent,
        state: &Value,
    ) -> Decision<Vec<String>> {
        let mut trace = Vec::new();
        let mut visible = event.narrowed_tool_names.clone();
        if self.subscribed(Seam::Routing).next().is_some() {
            self.after_observations(&event.run_id).await;
        }
        let state = state.to_string();
        for plugin in self.subscribed(Seam::Routing) {
            let guest_event =
                GuestEvent::<RoutingHook>::new((event, &visible), &state, self.secrets.clone());
            let Some(called) = plugin.call(&guest_event).await else {
                continue;
            };
            let (entry, reply) = self.record(plugin, Seam::Routing, called);
            if entry.outcome == Outcome::Unavailable {
                trace.push(entry);
                return Decision::new(event.narrowed_tool_names.clone(), trace);
            }
            match reply {
                Ok(Some(keep)) => {
                    visible.retain(|name| keep.contains(name));
                    trace.push(entry.with(true, Outcome::Narrow, Outcome::Proceed));
                }
                Ok(None) => trace.push(entry.with(false, Outcome::Narrow, Outcome::Proceed)),
                Err(_) => {
                    if plugin.on_error() == OnError::Deny {
                        visible.clear();
                    }
                    trace.push(entry);
                }
            }
        }
        Decision::new(visible, trace)
    }

    /// `on_response_render`: registration order; each guard sees the
    /// previous guard's answer as `content` (the first sees the event's
    /// `content`, else `original_content`) and returns a replacement or
    /// nothing (keep it).
    /// A fault skips that guard's contribution and the chain goes on with
    /// the content it had, as symfonic's manager does with a raising
    /// handler; a fail-closed guard's fault withholds the answer
    /// ([`withheld_message`]) and ends the chain. Returns the answer to
    /// give (the first guard's `content` when nothing changed it).
    pub async fn response(&self, event: &ResponseRenderEvent, state: &Value) -> Decision<String> {
        let mut trace = Vec::new();
        let mut content = event.content().to_owned();
        if self.subscribed(Seam::Response).next().is_none() {
            return Decision::new(content, trace);
        }
        self.after_observations(&event.run_id).await;
        let state = state.to_string();
        for plugin in self.subscribed(Seam::Response) {
            let guest_event =
                GuestEvent::<ResponseHook>::new((event, &content), &state, self.secrets.clone());
            let Some(called) = plugin.call(&guest_event).await else {
                continue;
            };
            let (entry, reply) = self.record(plugin, Seam::Response, called);
            if entry.outcome == Outcome::Unavailable {
                trace.push(entry);
                return Decision::new(event.original_content.clone(), trace);
            }
            match reply {
                Ok(Some(rendered)) => {
                    content = rendered;
                    trace.push(entry.with(true, Outcome::Rewrite, Outcome::Proceed));
                }
                Ok(None) => trace.push(entry.with(false, Outcome::Rewrite, Outcome::Proceed)),
                Err(fault) if plugin.on_error() == OnError::Deny => {
                    trace.push(entry);
                    return Decision::new(withheld_message(plugin.name(), fault), trace);
                }
                Err(_) => trace.push(entry),
            }
        }
        Decision::new(content, trace)
    }

    /// `on_tool_result`: every subscribed guard observes; nothing returned.
    pub async fn result(&self, event: &ToolResultCallbackEvent, state: &Value) -> Decision<()> {
        let mut trace = Vec::new();
        if self.subscribed(Seam::Result).next().is_none() {
            return Decision::new((), trace);
        }
        self.after_observations(&event.run_id).await;
        let guest_event =
            GuestEvent::<ResultHook>::new(event, &state.to_string(), self.secrets.clone());
        for plugin in self.subscribed(Seam::Result) {
            if let Some(called) = plugin.call(&guest_event).await {
                let (entry, reply) = self.record(plugin, Seam::Result, called);
                if entry.outcome == Outcome::Unavailable {
                    trace.push(entry);
                    break;
                }
                trace.push(entry.with(reply.is_ok(), Outcome::Observed, Outcome::Fault));
            }
        }
        Decision::new((), trace)
    }
}

impl Chain {
    /// Turns one call into a trace entry (see [`record`]), the fault's
    /// detail masked in the server log with the call's masked values.
    fn record<R>(
        &self,
        plugin: &Plugin,
        seam: Seam,
        called: Called<R>,
    ) -> (GuardTrace, Result<R, Fault>) {
        record(plugin, seam, called, self.secrets.as_deref())
    }
}

/// Turns one call into a trace entry, logging a fault (its detail masked
/// with `secrets`); the entry's outcome is `fault` for the guard's own
/// fault, `unavailable` for the host's, and is set by the caller otherwise.
fn record<R>(
    plugin: &Plugin,
    seam: Seam,
    called: Called<R>,
    secrets: Option<&Secrets>,
) -> (GuardTrace, Result<R, Fault>) {
    let mut entry = GuardTrace {
        plugin: plugin.name().to_string(),
        mode: plugin.mode(),
        outcome: Outcome::Fault,
        fault: None,
        detail: None,
        fuel_used: called.fuel_used,
        micros: called.micros,
    };
    let result = called.result.map_err(|(fault, detail)| {
        // Quarantine and shares log when their state changes, not per
        // call; a request the host could not decide is answered so, and
        // counted. The detail may quote the call's masked values.
        let shown = secrets.map_or(Cow::Borrowed(detail.as_str()), |s| s.scrubbed(&detail));
        if !fault.is_guards() {
            entry.outcome = Outcome::Unavailable;
            tracing::debug!(plugin = plugin.name(), %seam, %fault, detail = %shown, "guard not run in time; not decided");
        } else if fault == Fault::Quarantined {
            tracing::debug!(plugin = plugin.name(), %seam, %fault, detail = %shown, "guard not run");
        } else if plugin.may_log_about(HOST_LINE + detail.len()) {
            tracing::warn!(
                plugin = plugin.name(),
                %seam,
                %fault,
                detail = %shown,
                on_error = ?plugin.on_error(),
                mode = plugin.mode().as_str(),
                "guard faulted; skipped as if it returned nothing"
            );
        }
        entry.fault = Some(fault);
        entry.detail = Some(detail);
        fault
    });
    (entry, result)
}

/// About how long a line the host writes about a guard's call is, besides
/// its detail: what it costs the account's log budget.
const HOST_LINE: usize = 160;

fn malformed(plugin: &Plugin, seam: Seam, mut entry: GuardTrace, why: &str) -> GuardTrace {
    if plugin.may_log_about(HOST_LINE + why.len()) {
        tracing::warn!(plugin = plugin.name(), %seam, "malformed reply dropped: {why}");
    }
    entry.outcome = Outcome::Malformed;
    entry.detail = Some(why.to_string());
    entry
}

impl GuardTrace {
    /// Sets the outcome of a non-faulted entry: `yes` if `cond`, else `no`.
    fn with(mut self, cond: bool, yes: Outcome, no: Outcome) -> Self {
        if self.fault.is_none() {
            self.outcome = if cond { yes } else { no };
        }
        self
    }
}

/// The resulting call names a tool outside the palette: every rewrite that
/// led to it is dropped (its entry becomes `malformed`) and one warning
/// names the guards; the caller dispatches the original call.
fn drop_unavailable(tool_name: &str, event: &ToolCallDispatchEvent, trace: &mut [GuardTrace]) {
    let why = format!(
        "the resulting call names tool `{tool_name}`, which is not in available_tools; \
         rewrite dropped, the original call `{}` is dispatched",
        event.tool_name
    );
    let mut guards = Vec::new();
    for entry in trace.iter_mut().filter(|e| e.outcome == Outcome::Rewrite) {
        entry.outcome = Outcome::Malformed;
        entry.detail = Some(why.clone());
        guards.push(entry.plugin.clone());
    }
    tracing::warn!(seam = %Seam::Rewrite, guards = ?guards, call_id = %event.call_id, "{why}");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A verdict serialises exactly as the hook's return value it holds,
    /// and names itself in metrics as the chain's answer.
    #[test]
    fn a_verdict_is_the_hooks_return_value() {
        let skip = Skip {
            content: "no".into(),
            is_error: true,
        };
        let mut args = serde_json::Map::new();
        args.insert("z".into(), json!(1));
        args.insert("a".into(), json!(10_u128.pow(30)));
        let rewrite = Rewrite {
            tool_name: "t".into(),
            args,
        };
        let names = vec!["b".to_string(), "a".to_string()];
        // What symfonic's hooks return, written out: the narrowed names in
        // order; `None`; the rewritten call with its args' order and big
        // integer as given; the skip; nothing.
        for (verdict, text, name) in [
            (Verdict::Routing(names), r#"["b","a"]"#, "narrow"),
            (Verdict::Rewrite(None), "null", "proceed"),
            (
                Verdict::Rewrite(Some(rewrite)),
                r#"{"tool_name":"t","args":{"z":1,"a":1000000000000000000000000000000}}"#,
                "rewrite",
            ),
            (Verdict::Steering(None), "null", "proceed"),
            (
                Verdict::Steering(Some(skip)),
                r#"{"action":"skip","content":"no","is_error":true}"#,
                "skip",
            ),
            (Verdict::Result, "null", "observed"),
        ] {
            assert_eq!(
                serde_json::to_string(&verdict).ok().as_deref(),
                Some(text),
                "{verdict:?}"
            );
            assert_eq!(verdict.as_str(), name);
        }
    }
}
