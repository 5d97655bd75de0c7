//! Case files (`*.test.toml`): a guard's unit tests, the guards they run
//! (`[[plugin]]`, as a manifest's entries) and the cases (`[[case]]`: an
//! event, and what the chain must answer). `toolgate test` runs them;
//! `toolgate check --cases` and `toolgate bench --cases` take their events.
//! The format is documented in `docs/testing.md`.

mod expect;
mod http;
mod plugins;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;
use serde_json::{Value, json};
use toml::Spanned;
use toolgate::manifest::{key_path, line_of, toml_to_json};
use toolgate::{DecideRequest, Seam, TenantName};

use crate::bad;
pub(crate) use expect::Expect;
pub(crate) use http::CaseHttp;

pub(crate) use plugins::Chains;

/// The suffix that makes a file a case file.
pub(crate) const SUFFIX: &str = ".test.toml";

/// Largest case file read (1 MiB, as a manifest).
const MAX_BYTES: u64 = 1 << 20;

/// A parsed and checked case file.
pub(crate) struct CaseFile {
    /// Where it was read from.
    pub(crate) path: PathBuf,
    /// Its text (for the lines of its `[[plugin]]` keys).
    text: String,
    /// Its `[[plugin]]` tables as written, with the span of each.
    plugins: Vec<Spanned<toml::Table>>,
    /// Its cases, in order.
    pub(crate) cases: Vec<Case>,
}

/// One `[[case]]`.
pub(crate) struct Case {
    /// Its `name`.
    pub(crate) name: String,
    /// The line its `name` is on.
    pub(crate) line: usize,
    /// The config that replaces the `[[plugin]]` entries' for this case.
    pub(crate) config: Option<toml::Table>,
    /// What the case runs and checks.
    pub(crate) check: Check,
    /// The outbound requests it answers (`[[case.http]]`).
    pub(crate) http: Vec<http::Answer>,
}

/// What a case runs and what it checks.
pub(crate) enum Check {
    /// An event through the chain, and what the chain must answer.
    Decide {
        /// Lifecycle events observed first (`events = [{ hook = "...",
        /// event = {...} }]`), in order; the decision waits for them.
        events: Vec<toolgate::LifecycleEvent>,
        /// The event, state and tenant, checked as a request body is.
        request: Box<DecideRequest>,
        /// What the chain must answer.
        expect: Box<Expect>,
    },
    /// The case's `config` must be refused at load, with a message
    /// containing this text (`expect = { config_refused = "..." }`).
    ConfigRefused(String),
}

impl Case {
    /// The case's request, unless it is a config refusal (which runs none).
    pub(crate) fn request(&self) -> Option<&DecideRequest> {
        match &self.check {
            Check::Decide { request, .. } => Some(request.as_ref()),
            Check::ConfigRefused(_) => None,
        }
    }

    /// The lifecycle events the case delivers before its request.
    pub(crate) fn events(&self) -> &[toolgate::LifecycleEvent] {
        match &self.check {
            Check::Decide { events, .. } => events,
            Check::ConfigRefused(_) => &[],
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    plugin: Vec<Spanned<toml::Table>>,
    #[serde(default)]
    case: Vec<Spanned<RawCase>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: Spanned<String>,
    seam: Option<Spanned<String>>,
    event: Option<Spanned<toml::Value>>,
    state: Option<Spanned<toml::Value>>,
    config: Option<Spanned<toml::Table>>,
    tenant: Option<Spanned<String>>,
    events: Option<Spanned<Vec<RawLifecycle>>>,
    expect: Option<Spanned<expect::RawExpect>>,
    http: Option<Vec<Spanned<http::RawAnswer>>>,
}

/// One of a case's `events`: a lifecycle hook and its event.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLifecycle {
    hook: String,
    event: toml::Value,
}

/// A bad case file's error: `file:line: key `k`: message`.
struct Here<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Here<'_> {
    fn err(&self, span: Range<usize>, key: &str, message: impl std::fmt::Display) -> anyhow::Error {
        bad(format!(
            "{}:{}: key `{key}`: {message}",
            self.path.display(),
            line_of(self.text, span.start)
        ))
    }
}

impl CaseFile {
    /// Reads and checks the case file at `path`: an error names the file,
    /// the line and the key.
    pub(crate) fn read(path: &Path) -> Result<CaseFile> {
        use std::io::Read as _;
        let file = std::fs::File::open(path)
            .map_err(|e| bad(format!("case file {}: {e}", path.display())))?;
        let mut text = String::new();
        file.take(MAX_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| bad(format!("case file {}: {e}", path.display())))?;
        if text.len() as u64 > MAX_BYTES {
            return Err(bad(format!(
                "case file {}: larger than {} KiB",
                path.display(),
                MAX_BYTES >> 10
            )));
        }
        CaseFile::parse(path, text)
    }

    /// Parses and checks case-file `text` read from `path`.
    pub(crate) fn parse(path: &Path, text: String) -> Result<CaseFile> {
        let here = Here { path, text: &text };
        let raw: RawFile = toml::from_str(&text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let key = key_path(&text, span.clone()).unwrap_or_else(|| "-".into());
            here.err(span, &key, e.message().trim())
        })?;
        if raw.plugin.is_empty() {
            return Err(bad(format!(
                "{}:1: no [[plugin]]: a case file names the component(s) it tests",
                path.display()
            )));
        }
        if raw.case.is_empty() {
            return Err(bad(format!("{}:1: no [[case]]", path.display())));
        }
        let mut names = BTreeMap::new();
        let mut cases = Vec::new();
        for (i, c) in raw.case.into_iter().enumerate() {
            let key = format!("case[{}]", i + 1);
            let (span, c) = (c.span(), c.into_inner());
            let case = read_case(&here, &key, span, c, raw.plugin.len())?;
            if let Some(first) = names.insert(case.name.clone(), case.line) {
                return Err(bad(format!(
                    "{}:{}: key `{key}.name`: {:?} is already the name of the case on line {first}",
                    path.display(),
                    case.line,
                    case.name
                )));
            }
            cases.push(case);
        }
        Ok(CaseFile {
            path: path.to_path_buf(),
            plugins: raw.plugin,
            text,
            cases,
        })
    }

    /// The components its `[[plugin]]` entries name (`path`, relative to
    /// the file's directory).
    pub(crate) fn components(&self) -> Vec<PathBuf> {
        let base = self.path.parent().unwrap_or(Path::new("."));
        self.plugins
            .iter()
            .filter_map(|p| p.get_ref().get("path")?.as_str().map(|p| base.join(p)))
            .collect()
    }

    /// The cases whose name contains `filter` (all of them for `None`).
    pub(crate) fn selected<'a>(
        &'a self,
        filter: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Case> {
        self.cases
            .iter()
            .filter(move |c| filter.is_none_or(|f| c.name.contains(f)))
    }
}

fn read_case(
    here: &Here<'_>,
    key: &str,
    span: Range<usize>,
    c: RawCase,
    plugins: usize,
) -> Result<Case> {
    if let (Some(config), true) = (&c.config, plugins > 1) {
        // With several guards, `config` is keyed by the guard's name.
        if let Some((k, _)) = config.get_ref().iter().find(|(_, v)| !v.is_table()) {
            return Err(here.err(
                config.span(),
                &format!("{key}.config.{k}"),
                "with several [[plugin]] entries, `config` holds one table per plugin name",
            ));
        }
    }
    let Some(expect) = c.expect.as_ref() else {
        return Err(here.err(
            span,
            key,
            "no `expect`: a case says what the chain must answer",
        ));
    };
    let expect_key = format!("{key}.expect");
    let mut answers = Vec::new();
    for (i, a) in c.http.iter().flatten().enumerate() {
        let span = a.span();
        let raw: http::RawAnswer = a.get_ref().clone();
        let answer = raw
            .read()
            .map_err(|(k, why)| here.err(span, &format!("{key}.http[{}].{k}", i + 1), why))?;
        answers.push(answer);
    }
    let check = match expect.get_ref().config_refused() {
        Some(text) => config_refused(here, key, &c, text)?,
        None => {
            let (Some(seam), Some(event)) = (c.seam, c.event) else {
                return Err(here.err(
                    span,
                    key,
                    "no `seam` and `event`: a case runs an event (or expects `config_refused`)",
                ));
            };
            let seam: Seam = seam.get_ref().parse().map_err(|_| {
                here.err(
                    seam.span(),
                    &format!("{key}.seam"),
                    format!(
                        "{:?} is not a seam: routing, rewrite, steering or result",
                        seam.get_ref()
                    ),
                )
            })?;
            let mut body = serde_json::Map::new();
            body.insert(
                "event".into(),
                json_of(here, &format!("{key}.event"), event)?,
            );
            if let Some(state) = c.state {
                body.insert(
                    "state".into(),
                    json_of(here, &format!("{key}.state"), state)?,
                );
            }
            let mut request = DecideRequest::from_value(seam, Value::Object(body))
                .map_err(|e| here.err(span.clone(), key, e))?;
            if let Some(t) = &c.tenant {
                let tenant = TenantName::try_from(t.get_ref().as_str())
                    .map_err(|e| here.err(t.span(), &format!("{key}.tenant"), e))?;
                request.tenant = Some(tenant);
            }
            let expect = Expect::read(seam, expect.get_ref(), &expect_key)
                .map_err(|(k, why)| here.err(expect.span(), &k, why))?;
            let mut events = Vec::new();
            if let Some(raw) = &c.events {
                for (i, e) in raw.get_ref().iter().enumerate() {
                    let at = format!("{key}.events[{i}]");
                    let hook: toolgate::LifecycleHook = e
                        .hook
                        .parse()
                        .map_err(|why: String| here.err(raw.span(), &format!("{at}.hook"), why))?;
                    let event =
                        toolgate::LifecycleEvent::from_value(hook, toml_to_json(e.event.clone()))
                            .map_err(|why| here.err(raw.span(), &at, why))?;
                    events.push(event);
                }
            }
            Check::Decide {
                events,
                request: Box::new(request),
                expect: Box::new(expect),
            }
        }
    };
    Ok(Case {
        name: c.name.get_ref().clone(),
        line: line_of(here.text, c.name.span().start),
        config: c.config.map(Spanned::into_inner),
        check,
        http: answers,
    })
}

/// A case that expects its `config` refused: it has a `config`, no event,
/// and `config_refused` is its only expectation.
fn config_refused(here: &Here<'_>, key: &str, c: &RawCase, text: &str) -> Result<Check> {
    let Some(expect) = &c.expect else {
        return Err(here.err(0..0, key, "no `expect`"));
    };
    if c.config.is_none() {
        return Err(here.err(
            expect.span(),
            &format!("{key}.expect.config_refused"),
            "needs the case's `config`: the config that must be refused",
        ));
    }
    let extra = [
        ("seam", c.seam.as_ref().map(Spanned::span)),
        ("event", c.event.as_ref().map(Spanned::span)),
        ("state", c.state.as_ref().map(Spanned::span)),
        ("tenant", c.tenant.as_ref().map(Spanned::span)),
        (
            "http",
            c.http.as_ref().and_then(|h| h.first()).map(Spanned::span),
        ),
    ];
    if let Some((k, Some(span))) = extra.into_iter().find(|(_, s)| s.is_some()) {
        return Err(here.err(
            span,
            &format!("{key}.{k}"),
            "a case that expects `config_refused` runs no event",
        ));
    }
    if !expect.get_ref().only_config_refused() {
        return Err(here.err(
            expect.span(),
            &format!("{key}.expect"),
            "`config_refused` is the only expectation of a case whose config is refused",
        ));
    }
    if text.is_empty() {
        return Err(here.err(
            expect.span(),
            &format!("{key}.expect.config_refused"),
            "is empty: give (part of) the message the guard refuses the config with",
        ));
    }
    Ok(Check::ConfigRefused(text.to_string()))
}

/// An `event` or `state` as JSON: a table, or a string of JSON text (as a
/// trace line's, pasted).
fn json_of(here: &Here<'_>, key: &str, v: Spanned<toml::Value>) -> Result<Value> {
    let span = v.span();
    match v.into_inner() {
        toml::Value::String(s) => serde_json::from_str(&s)
            .map_err(|e| here.err(span, key, format!("is not valid JSON: {e}"))),
        t @ toml::Value::Table(_) => Ok(toml_to_json(t)),
        other => Err(here.err(
            span,
            key,
            format!(
                "must be a table or a string of JSON, not {}",
                other.type_str()
            ),
        )),
    }
}

/// The case files `paths` name: files as given, directories searched
/// (recursively, in name order, skipping hidden directories, `target`,
/// `node_modules` and `build`) for `*.test.toml`, and a guard's source
/// file ([`crate::build_guard::is_guard_source`]) for its cases: the
/// `<stem>.test.toml` beside it, else the `*.test.toml` files of its
/// directory.
pub(crate) fn find(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for path in paths {
        if path.is_dir() {
            let before = found.len();
            walk(path, &mut found)
                .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
            if found.len() == before {
                return Err(bad(format!(
                    "no *{SUFFIX} case files under {}",
                    path.display()
                )));
            }
        } else if path.is_file()
            && !path.to_string_lossy().ends_with(SUFFIX)
            && crate::build_guard::is_guard_source(path)
        {
            found.extend(cases_of_source(path)?);
        } else if path.is_file() {
            found.push(path.clone());
        } else {
            return Err(bad(format!(
                "{}: no such file or directory",
                path.display()
            )));
        }
    }
    Ok(found)
}

/// The case files of the guard whose source file is `source`.
fn cases_of_source(source: &Path) -> Result<Vec<PathBuf>> {
    let dir = match source.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let stem = source.file_stem().map(|s| s.to_string_lossy().into_owned());
    let beside = dir.join(format!("{}{SUFFIX}", stem.as_deref().unwrap_or("guard")));
    if beside.is_file() {
        return Ok(vec![beside]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| bad(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(SUFFIX))
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(bad(format!(
            "{}: a guard's source, with no case file: expected {} (or a *{SUFFIX} beside it)",
            source.display(),
            beside.display()
        )));
    }
    Ok(found)
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            let skipped = name.starts_with('.')
                || matches!(name.as_ref(), "target" | "node_modules" | "build");
            if !skipped {
                walk(&entry.path(), found)?;
            }
        } else if name.ends_with(SUFFIX) {
            found.push(entry.path());
        }
    }
    Ok(())
}

/// The JSON of a decision the expectations are checked against.
pub(crate) fn actual(decision: &toolgate::Decision<toolgate::Verdict>) -> Value {
    json!({"result": decision.result, "trace": decision.trace})
}
