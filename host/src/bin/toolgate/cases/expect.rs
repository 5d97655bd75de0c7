//! A case's `expect`: what the chain must answer, checked against the
//! decision, and the differences written out.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use toolgate::Seam;
use toolgate::manifest::toml_to_json;

/// `expect` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExpect {
    result: Option<toml::Value>,
    action: Option<String>,
    content: Option<String>,
    content_contains: Option<String>,
    is_error: Option<bool>,
    tools: Option<Vec<String>>,
    tool_name: Option<String>,
    args: Option<toml::Table>,
    guards: Option<BTreeMap<String, String>>,
    faults: Option<BTreeMap<String, String>>,
    config_refused: Option<String>,
}

impl RawExpect {
    /// The text a refused config's message must contain, if the case
    /// expects its config refused.
    pub(super) fn config_refused(&self) -> Option<&str> {
        self.config_refused.as_deref()
    }

    /// Whether `config_refused` is the only key given.
    pub(super) fn only_config_refused(&self) -> bool {
        let RawExpect {
            result,
            action,
            content,
            content_contains,
            is_error,
            tools,
            tool_name,
            args,
            guards,
            faults,
            config_refused,
        } = self;
        config_refused.is_some()
            && result.is_none()
            && action.is_none()
            && content.is_none()
            && content_contains.is_none()
            && is_error.is_none()
            && tools.is_none()
            && tool_name.is_none()
            && args.is_none()
            && guards.is_none()
            && faults.is_none()
    }
}

/// A case's expectations, checked: each key applies to the case's seam.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expect {
    result: Option<Value>,
    action: Option<String>,
    content: Option<String>,
    content_contains: Option<String>,
    is_error: Option<bool>,
    tools: Option<Vec<String>>,
    tool_name: Option<String>,
    args: Option<Value>,
    guards: BTreeMap<String, String>,
    faults: BTreeMap<String, String>,
}

/// One expectation not met: the key, and what was expected and found.
#[derive(Debug)]
pub(crate) struct Mismatch {
    /// The `expect` key (`action`, `guards.sql-guard`).
    pub(crate) key: String,
    /// What it expected.
    pub(crate) expected: Value,
    /// What the chain answered there (`null`: nothing).
    pub(crate) actual: Value,
    /// Why, when the trace says (a guard's fault class and detail).
    pub(crate) why: Option<String>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.key, self.expected, self.actual
        )?;
        match &self.why {
            Some(why) => write!(f, " ({why})"),
            None => Ok(()),
        }
    }
}

/// What each seam's chain may answer, as `action`.
fn actions(seam: Seam) -> &'static [&'static str] {
    match seam {
        Seam::Routing => &["narrow"],
        Seam::Rewrite => &["rewrite", "proceed"],
        Seam::Steering => &["skip", "proceed"],
        Seam::Result => &["observed"],
        Seam::Response => &["render"],
    }
}

/// A guard's outcomes in a trace (`toolgate::Outcome::as_str`).
const OUTCOMES: [&str; 8] = [
    "proceed",
    "skip",
    "rewrite",
    "narrow",
    "observed",
    "malformed",
    "fault",
    "unavailable",
];

impl Expect {
    /// Checks `raw` for a case at `seam`; an error is the key (under
    /// `prefix`) and why.
    pub(super) fn read(
        seam: Seam,
        raw: &RawExpect,
        prefix: &str,
    ) -> Result<Expect, (String, String)> {
        let key = |k: &str| format!("{prefix}.{k}");
        let only = |k: &str, given: bool, at: Seam| {
            if given && seam != at {
                Err((key(k), format!("applies to the {at} seam, not {seam}")))
            } else {
                Ok(())
            }
        };
        // The response seam's answer is its content.
        if seam != Seam::Response {
            only("content", raw.content.is_some(), Seam::Steering)?;
            only(
                "content_contains",
                raw.content_contains.is_some(),
                Seam::Steering,
            )?;
        }
        only("is_error", raw.is_error.is_some(), Seam::Steering)?;
        only("tools", raw.tools.is_some(), Seam::Routing)?;
        only("tool_name", raw.tool_name.is_some(), Seam::Rewrite)?;
        only("args", raw.args.is_some(), Seam::Rewrite)?;
        if let Some(a) = raw
            .action
            .as_ref()
            .filter(|a| !actions(seam).contains(&a.as_str()))
        {
            return Err((
                key("action"),
                format!(
                    "{a:?} is not an answer of the {seam} seam: {}",
                    actions(seam).join(", ")
                ),
            ));
        }
        for (name, outcome) in raw.guards.iter().flatten() {
            if !OUTCOMES.contains(&outcome.as_str()) {
                return Err((
                    key(&format!("guards.{name}")),
                    format!("{outcome:?} is not an outcome: {}", OUTCOMES.join(", ")),
                ));
            }
        }
        let expect = Expect {
            result: raw.result.clone().map(toml_to_json),
            action: raw.action.clone(),
            content: raw.content.clone(),
            content_contains: raw.content_contains.clone(),
            is_error: raw.is_error,
            tools: raw.tools.clone(),
            tool_name: raw.tool_name.clone(),
            args: raw
                .args
                .clone()
                .map(|t| toml_to_json(toml::Value::Table(t))),
            guards: raw.guards.clone().unwrap_or_default(),
            faults: raw.faults.clone().unwrap_or_default(),
        };
        if expect.is_empty() {
            return Err((
                prefix.to_string(),
                "expects nothing: give `result`, `action` or another key".into(),
            ));
        }
        Ok(expect)
    }

    fn is_empty(&self) -> bool {
        self.result.is_none()
            && self.action.is_none()
            && self.content.is_none()
            && self.content_contains.is_none()
            && self.is_error.is_none()
            && self.tools.is_none()
            && self.tool_name.is_none()
            && self.args.is_none()
            && self.guards.is_empty()
            && self.faults.is_empty()
    }

    /// What in `actual` (`{"result": ..., "trace": [...]}`, see
    /// [`super::actual`]) differs from the expectations; empty when all
    /// hold.
    pub(crate) fn check(&self, seam: Seam, actual: &Value) -> Vec<Mismatch> {
        let result = &actual["result"];
        let mut out = Vec::new();
        let mut want = |key: &str, expected: Value, got: Value, ok: bool| {
            if !ok {
                out.push(Mismatch {
                    key: key.to_string(),
                    expected,
                    actual: got,
                    why: None,
                });
            }
        };
        if let Some(r) = &self.result {
            want("result", r.clone(), result.clone(), r == result);
        }
        if let Some(a) = &self.action {
            let got = action(seam, result);
            want(
                "action",
                Value::from(a.as_str()),
                Value::from(got),
                a == got,
            );
        }
        let field = |name: &str| match result {
            // The response seam's result is the answer: its content.
            Value::String(_) if name == "content" => result.clone(),
            _ => result.get(name).cloned().unwrap_or(Value::Null),
        };
        // A key that expects one field of the result to be exactly a value.
        let same = |key: &'static str, expected: Option<Value>| {
            expected.map(|expected| {
                let got = field(key);
                let ok = got == expected;
                (key, expected, got, ok)
            })
        };
        let checks = [
            same("content", self.content.as_deref().map(Value::from)),
            self.content_contains.as_ref().map(|c| {
                let got = field("content");
                let ok = got.as_str().is_some_and(|s| s.contains(c.as_str()));
                ("content_contains", Value::from(c.as_str()), got, ok)
            }),
            same("is_error", self.is_error.map(Value::from)),
            self.tools.as_ref().map(|t| {
                let expected = Value::from(t.clone());
                let ok = result == &expected;
                ("tools", expected, result.clone(), ok)
            }),
            same("tool_name", self.tool_name.as_deref().map(Value::from)),
            same("args", self.args.clone()),
        ];
        for (key, expected, got, ok) in checks.into_iter().flatten() {
            want(key, expected, got, ok);
        }
        let traced = |name: &str, what: &str| {
            actual["trace"]
                .as_array()
                .and_then(|t| t.iter().find(|g| g["plugin"] == name))
                .map_or(Value::Null, |g| g[what].clone())
        };
        for (name, outcome) in &self.guards {
            let got = traced(name, "outcome");
            let key = format!("guards.{name}");
            want(
                &key,
                Value::from(outcome.as_str()),
                got.clone(),
                got == outcome.as_str(),
            );
        }
        for (name, fault) in &self.faults {
            let got = traced(name, "fault");
            let key = format!("faults.{name}");
            want(
                &key,
                Value::from(fault.as_str()),
                got.clone(),
                got == fault.as_str(),
            );
        }
        // A guard that faulted: its mismatch names the class and detail.
        for m in &mut out {
            let Some(name) = m.key.strip_prefix("guards.") else {
                continue;
            };
            if let Some(fault) = traced(name, "fault").as_str() {
                m.why = Some(match traced(name, "detail").as_str() {
                    Some(detail) => format!("{fault}: {detail}"),
                    None => fault.to_string(),
                });
            }
        }
        out
    }
}

/// The chain's answer as an `action`: `narrow`, `rewrite`, `skip`,
/// `proceed`, `observed` or `render`.
fn action(seam: Seam, result: &Value) -> &'static str {
    match (seam, result.is_null()) {
        (Seam::Routing, _) => "narrow",
        (Seam::Result, _) => "observed",
        (Seam::Response, _) => "render",
        (Seam::Rewrite, false) => "rewrite",
        (Seam::Steering, false) => "skip",
        (_, true) => "proceed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn expect(seam: Seam, toml: &str) -> Result<Expect, (String, String)> {
        let raw: RawExpect = toml::from_str(toml).expect("toml");
        Expect::read(seam, &raw, "case[1].expect")
    }

    #[test]
    fn predicates_hold_or_say_what_differs() {
        let e = expect(
            Seam::Steering,
            "action = \"skip\"\ncontent_contains = \"WHERE\"\nis_error = true\nguards = { sql = \"skip\" }",
        )
        .expect("valid");
        let skip = json!({
            "result": {"content": "add a WHERE clause", "is_error": true},
            "trace": [{"plugin": "sql", "outcome": "skip"}],
        });
        assert!(e.check(Seam::Steering, &skip).is_empty());
        let proceed = json!({"result": null, "trace": [{"plugin": "sql", "outcome": "proceed"}]});
        let diff: Vec<String> = e
            .check(Seam::Steering, &proceed)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            diff,
            [
                "action: expected \"skip\", got \"proceed\"",
                "content_contains: expected \"WHERE\", got null",
                "is_error: expected true, got null",
                "guards.sql: expected \"skip\", got \"proceed\"",
            ]
        );
        let fault = json!({"result": null, "trace": [
            {"plugin": "sql", "outcome": "fault", "fault": "out-of-fuel", "detail": "all fuel consumed"},
        ]});
        let diff = e.check(Seam::Steering, &fault);
        assert_eq!(
            diff.last().map(ToString::to_string).as_deref(),
            Some("guards.sql: expected \"skip\", got \"fault\" (out-of-fuel: all fuel consumed)")
        );
    }

    #[test]
    fn keys_of_another_seam_and_empty_expectations_are_refused() {
        let (key, why) = expect(Seam::Routing, "content = \"x\"").expect_err("steering key");
        assert_eq!(key, "case[1].expect.content");
        assert_eq!(why, "applies to the steering seam, not routing");
        let (key, why) = expect(Seam::Rewrite, "action = \"skip\"").expect_err("bad action");
        assert_eq!(key, "case[1].expect.action");
        assert_eq!(
            why,
            "\"skip\" is not an answer of the rewrite seam: rewrite, proceed"
        );
        let (key, _) = expect(Seam::Result, "").expect_err("empty");
        assert_eq!(key, "case[1].expect");
    }
}
