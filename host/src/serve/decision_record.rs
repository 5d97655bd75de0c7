//! The decision log's line for one decision, the same from every face
//! (they all decide through [`DecideRequest::decide`]): what was asked,
//! what was answered, and each guard's part in it, with the input left
//! out unless the operator opted in, masked and cut (`runtime/decision_log`
//! queues and writes it). The line's shape is [`DecisionLine`], published as
//! `docs/decision-log.schema.json`.

use std::sync::Arc;

use serde_json::Value;

use crate::call::chain::{Chain, Decision, GuardTrace, Verdict};
use crate::event::Event;
use crate::runtime::log_writer::{DecisionLog, now_rfc3339, redact};
use crate::serve::decision_line::{DecisionLine, GuardLine};
use crate::serve::request::DecideRequest;

/// The input parts a line may carry, by the name `include` and `mask` use.
struct Parts {
    args: Option<Value>,
    content: Option<Value>,
    state: Option<Value>,
}

/// The masked values of `request` (`mask`: the `[decision_log]` paths),
/// each in every form it may take in a line; `None` when nothing is
/// masked, so a call with no mask configured pays nothing.
pub(crate) fn secrets(mask: &[String], request: &DecideRequest) -> Option<Arc<redact::Secrets>> {
    if mask.is_empty() {
        return None;
    }
    // A response's content masks in both its forms: the original and the
    // answer as it stood when the guards were consulted.
    let answers = match &request.event {
        Event::Response(e) => Some(Value::Array(
            [Some(&e.original_content), e.content.as_ref()]
                .into_iter()
                .flatten()
                .map(|s| Value::String(s.clone()))
                .collect(),
        )),
        _ => None,
    };
    let (args, content) = match &request.event {
        Event::Routing(_) => (None, None),
        Event::Rewrite(e) => (Some(&e.args), None),
        Event::Steering(e) => (Some(&e.args), None),
        Event::Result(e) => (None, Some(&e.result)),
        Event::Response(_) => (None, answers.as_ref()),
    };
    let secrets = redact::Secrets::of(mask, args, content, &request.state);
    (!secrets.is_empty()).then(|| Arc::new(secrets))
}

/// A response event's `original_content`, the content of its line.
fn original_content(request: &DecideRequest) -> Option<Value> {
    match &request.event {
        Event::Response(e) => Some(Value::String(e.original_content.clone())),
        _ => None,
    }
}

/// Writes `decision` of `request`, decided by `chain` of plugin set
/// `generation`, to `log` (queued; never waits).
pub(crate) fn record(
    log: &DecisionLog,
    generation: u64,
    chain: &Chain,
    request: &DecideRequest,
    decision: &Decision<Verdict>,
) {
    let config = log.config();
    let include = config.include;
    let original = original_content(request);
    let (run_id, call_id, tool_name, args, content) = match &request.event {
        Event::Routing(e) => (&e.run_id, None, None, None, None),
        Event::Response(e) => (&e.run_id, None, None, None, original.as_ref()),
        Event::Rewrite(e) => (
            &e.run_id,
            Some(&e.call_id),
            Some(&e.tool_name),
            Some(&e.args),
            None,
        ),
        Event::Steering(e) => (
            &e.run_id,
            Some(&e.call_id),
            Some(&e.tool_name),
            Some(&e.args),
            None,
        ),
        Event::Result(e) => (
            &e.run_id,
            Some(&e.call_id),
            Some(&e.tool_name),
            None,
            Some(&e.result),
        ),
    };
    let masked = |root: &str| {
        config
            .mask
            .iter()
            .any(|m| m.split('.').next() == Some(root))
    };
    let wanted = |on: bool, root: &str| on || masked(root);
    let mut parts = Parts {
        args: args
            .filter(|_| wanted(include.args, "args"))
            .map(|a| Value::Object(a.clone())),
        content: content
            .filter(|_| wanted(include.content, "content"))
            .cloned(),
        state: Some(&request.state)
            .filter(|_| wanted(include.state, "state"))
            .cloned(),
    };
    let mut verdict = serde_json::to_value(&decision.result).unwrap_or(Value::Null);
    // A rewrite's new args are args: written only when args are.
    let mut new_args = match &mut verdict {
        Value::Object(rewrite) if decision.result.seam() == crate::event::Seam::Rewrite => {
            rewrite.remove("args")
        }
        _ => None,
    };
    // A response's answer is content: written only when content is.
    let answer = decision.result.seam() == crate::event::Seam::Response;
    if answer && !wanted(include.content, "content") {
        verdict = Value::Null;
    }
    let mut secrets = redact::Secrets::default();
    for path in &config.mask {
        let keys: Vec<&str> = path.split('.').collect();
        let (root, rest) = keys.split_first().unwrap_or((&"", &[]));
        let (part, on) = match *root {
            "args" => (&mut parts.args, include.args),
            "content" => (&mut parts.content, include.content),
            _ => (&mut parts.state, include.state),
        };
        if let Some(v) = part {
            redact::mask(v, rest, &mut secrets, on);
        }
        if *root == "args"
            && let Some(v) = &mut new_args
        {
            redact::mask(v, rest, &mut secrets, true);
        }
        if *root == "content" && answer {
            redact::mask(&mut verdict, rest, &mut secrets, include.content);
        }
    }
    if include.args
        && let (Value::Object(rewrite), Some(a)) = (&mut verdict, new_args)
    {
        rewrite.insert("args".into(), a);
    }
    let shadow = decision.shadow.as_ref();
    let line = DecisionLine {
        time: now_rfc3339(),
        seam: request.event.seam(),
        tenant: request.tenant.as_deref(),
        run_id: run_id.as_str(),
        call_id: call_id.map(String::as_str),
        tool_name: tool_name.map(String::as_str),
        generation,
        verdict: decision.result.as_str(),
        decision: verdict,
        guards: guard_lines(chain, &decision.trace),
        shadow: shadow.map(|s| guard_lines(chain, &s.trace)),
        shadow_verdict: shadow.map(|s| s.result.as_str()),
        agrees: shadow.and_then(|s| s.agrees),
        args: parts.args.filter(|_| include.args),
        content: parts.content.filter(|_| include.content),
        state: parts.state.filter(|_| include.state),
    };
    let Ok(mut line) = serde_json::to_value(&line) else {
        return;
    };
    redact::scrub_and_cut(&mut line, &secrets, config.max_string_bytes);
    log.submit(line);
}

/// `trace`'s entries as the line writes them, each with its component's
/// digest.
fn guard_lines<'a>(chain: &'a Chain, trace: &'a [GuardTrace]) -> Vec<GuardLine<'a>> {
    let digest = |entry: &GuardTrace| {
        chain
            .plugins()
            .iter()
            .find(|p| p.name() == entry.plugin)
            .map(|p| p.digest())
    };
    trace
        .iter()
        .map(|entry| GuardLine::of(entry, digest(entry)))
        .collect()
}
