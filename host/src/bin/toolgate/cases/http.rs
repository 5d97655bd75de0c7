//! A case's `[[case.http]]`: the outbound requests it answers, matched by
//! method and URL, and how often each must be asked. Under `toolgate
//! test` every granted request of a case's guards gets one of these
//! answers (the grant is checked first, as in serving) and none reaches
//! the network; a request none matches fails as an unreachable host does
//! (`http-failed`) and fails the case, naming its method and URL.
//! `toolgate check --cases` answers each case's requests the same way
//! (and warns of a request none matched); `toolgate bench --cases` with
//! every selected case's answers at once ([`CaseHttp::begin_all`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Deserialize;
use toolgate::{HttpAnswer, HttpAnswers};

/// One `[[case.http]]` as written.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnswer {
    method: Option<String>,
    url: String,
    status: Option<u16>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<String>,
    json: Option<toml::Value>,
    times: Option<u32>,
}

/// One answer of a case: the request it matches and what it answers.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    /// The method it matches (upper case).
    method: String,
    /// The URL it matches, as the host normalises it.
    url: String,
    /// How many times it must be asked (and answers at most); `None`: any.
    times: Option<u32>,
    /// What it answers.
    answer: HttpAnswer,
}

impl RawAnswer {
    /// The answer, checked; `Err((key, why))` names the key at fault.
    pub(super) fn read(self) -> Result<Answer, (&'static str, String)> {
        let method = self.method.unwrap_or_else(|| "GET".into());
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err((
                "method",
                format!("{method:?} is not a method (upper case, as GET or POST)"),
            ));
        }
        let url = url::Url::parse(&self.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| {
                (
                    "url",
                    format!("{:?} is not an absolute http(s) URL", self.url),
                )
            })?;
        let status = self.status.unwrap_or(200);
        if !(100..=599).contains(&status) {
            return Err((
                "status",
                format!("{status} is not an HTTP status (100-599)"),
            ));
        }
        let mut headers: Vec<(String, String)> =
            self.headers.unwrap_or_default().into_iter().collect();
        let body = match (self.body, self.json) {
            (Some(_), Some(_)) => {
                return Err(("json", "give `body` (text) or `json`, not both".into()));
            }
            (Some(text), None) => text.into_bytes(),
            (None, Some(value)) => {
                if !headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                {
                    headers.push(("content-type".into(), "application/json".into()));
                }
                toolgate::manifest::toml_to_json(value)
                    .to_string()
                    .into_bytes()
            }
            (None, None) => Vec::new(),
        };
        Ok(Answer {
            method,
            url: url.to_string(),
            times: self.times,
            answer: HttpAnswer {
                status,
                headers,
                body,
            },
        })
    }
}

/// What the guards of one case file ask while a case runs: the case's
/// answers and how often each was used, and the requests none matched.
#[derive(Debug, Default)]
pub(crate) struct CaseHttp {
    now: Mutex<Script>,
}

#[derive(Debug, Default)]
struct Script {
    answers: Vec<(Answer, u32)>,
    unexpected: Vec<String>,
}

impl CaseHttp {
    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers with `answers` from now on, none used yet.
    pub(crate) fn begin(&self, answers: &[Answer]) {
        *self.script() = Script {
            answers: answers.iter().map(|a| (a.clone(), 0)).collect(),
            unexpected: Vec::new(),
        };
    }

    /// Answers with every answer of `cases`, each as often as it is asked
    /// (its `times` not counted), the first that matches a request
    /// answering it: `toolgate bench --cases`, whose cases' events run
    /// together.
    pub(crate) fn begin_all<'c>(&self, cases: impl IntoIterator<Item = &'c super::Case>) {
        let answers: Vec<Answer> = cases
            .into_iter()
            .flat_map(|c| &c.http)
            .map(|a| Answer {
                times: None,
                ..a.clone()
            })
            .collect();
        self.begin(&answers);
    }

    /// What went against the case's answers since [`CaseHttp::begin`]:
    /// each request none matched, each answer asked other than its
    /// `times`. Answers nothing until the next `begin`.
    pub(crate) fn finish(&self) -> Vec<String> {
        let done = std::mem::take(&mut *self.script());
        let mut wrong: Vec<String> = done
            .unexpected
            .into_iter()
            .map(|r| format!("http: unexpected request {r} (no [[case.http]] answers it)"))
            .collect();
        for (a, used) in done.answers {
            if let Some(times) = a.times.filter(|t| *t != used) {
                wrong.push(format!(
                    "http: {} {} was asked {used} time(s), expected {times} (times)",
                    a.method, a.url
                ));
            }
        }
        wrong
    }
}

impl HttpAnswers for CaseHttp {
    fn answer(&self, method: &str, url: &str, _body: &[u8]) -> Option<HttpAnswer> {
        let mut script = self.script();
        let found = script.answers.iter_mut().find(|(a, used)| {
            a.method == method && a.url == url && a.times.is_none_or(|t| *used < t)
        });
        match found {
            Some((a, used)) => {
                *used += 1;
                Some(a.answer.clone())
            }
            None => {
                // Each once: a bench asks the same many times.
                let request = format!("{method} {url}");
                if !script.unexpected.contains(&request) {
                    script.unexpected.push(request);
                }
                None
            }
        }
    }
}
