//! `[decision_log]` of the global manifest: each key overrides the `serve`
//! flags' (or the embedding's) setting; the whole is then checked by
//! [`DecisionLogConfig::check`], whose error is placed on the key's line.

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::tables::LimitError;
use crate::runtime::decision_log::{DecisionLogConfig, Include, Sink};

/// `[decision_log]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDecisionLog {
    sink: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    include: Option<Spanned<Vec<String>>>,
    mask: Option<Spanned<Vec<String>>>,
    max_string_bytes: Option<Spanned<u64>>,
    queue_lines: Option<Spanned<u64>>,
    max_file_kib: Option<Spanned<u64>>,
    keep_files: Option<Spanned<u32>>,
    batch_lines: Option<Spanned<u64>>,
    flush_ms: Option<Spanned<u64>>,
    retries: Option<Spanned<u32>>,
    timeout_ms: Option<Spanned<u64>>,
}

/// Overrides `config` with every key of `raw` and checks the result. A
/// relative `path` is taken from `dir`, the manifest's directory. `span`
/// is the table's, for an error no one key caused.
pub(super) fn apply(
    config: &mut DecisionLogConfig,
    raw: &RawDecisionLog,
    dir: &Path,
    span: Range<usize>,
) -> Result<(), LimitError> {
    let key = |k: &str| format!("decision_log.{k}");
    let at = |v: Option<Range<usize>>| v.unwrap_or_else(|| span.clone());
    let word = match (&raw.sink, &raw.path, &raw.url) {
        (Some(w), _, _) => Some((w.get_ref().as_str(), w.span())),
        (None, Some(p), _) => Some(("file", p.span())),
        (None, None, Some(u)) => Some(("http", u.span())),
        (None, None, None) => None,
    };
    if let Some((word, word_span)) = word {
        let path = raw.path.as_ref().map(|p| dir.join(p.get_ref()));
        let url = raw.url.as_ref().map(|u| u.get_ref().clone());
        let stray = |v: Option<Range<usize>>, k: &str, kind: &str| match v {
            Some(s) => Err((s, key(k), format!("is only for sink = \"{kind}\""))),
            None => Ok(()),
        };
        config.sink = match word {
            "off" | "stdout" => {
                stray(raw.path.as_ref().map(Spanned::span), "path", "file")?;
                stray(raw.url.as_ref().map(Spanned::span), "url", "http")?;
                if word == "off" {
                    Sink::Off
                } else {
                    Sink::Stdout
                }
            }
            "file" => {
                stray(raw.url.as_ref().map(Spanned::span), "url", "http")?;
                match (path, &config.sink) {
                    (Some(p), _) => Sink::File(p),
                    (None, Sink::File(p)) => Sink::File(p.clone()),
                    (None, _) => {
                        return Err((word_span, key("path"), "missing: the file to write".into()));
                    }
                }
            }
            "http" => {
                stray(raw.path.as_ref().map(Spanned::span), "path", "file")?;
                match (url, &config.sink) {
                    (Some(u), _) => Sink::Http(u),
                    (None, Sink::Http(u)) => Sink::Http(u.clone()),
                    (None, _) => {
                        return Err((
                            word_span,
                            key("url"),
                            "missing: the endpoint to POST to".into(),
                        ));
                    }
                }
            }
            other => {
                return Err((
                    word_span,
                    key("sink"),
                    format!("\"{other}\" is not \"off\", \"stdout\", \"file\" or \"http\""),
                ));
            }
        };
    }
    if let Some(list) = &raw.include {
        let mut include = Include::default();
        for name in list.get_ref() {
            if !include.set(name) {
                return Err((
                    list.span(),
                    key("include"),
                    format!("\"{name}\" is not one of {}", Include::NAMES.join(", ")),
                ));
            }
        }
        config.include = include;
    }
    if let Some(m) = &raw.mask {
        config.mask = m.get_ref().clone();
    }
    let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let c = &mut *config;
    let set = [
        (&raw.max_string_bytes, &mut c.max_string_bytes),
        (&raw.queue_lines, &mut c.queue_lines),
        (&raw.batch_lines, &mut c.batch_lines),
    ];
    for (v, field) in set {
        if let Some(v) = v {
            *field = size(*v.get_ref());
        }
    }
    for (v, field) in [
        (&raw.max_file_kib, &mut c.max_file_kib),
        (&raw.flush_ms, &mut c.flush_ms),
        (&raw.timeout_ms, &mut c.timeout_ms),
    ] {
        if let Some(v) = v {
            *field = *v.get_ref();
        }
    }
    for (v, field) in [
        (&raw.keep_files, &mut c.keep_files),
        (&raw.retries, &mut c.retries),
    ] {
        if let Some(v) = v {
            *field = *v.get_ref();
        }
    }
    config.check().map_err(|(k, why)| {
        let span = raw.span_of(&k);
        (at(span), key(&k), why)
    })
}

impl RawDecisionLog {
    /// Where key `k` is written, if it is.
    fn span_of(&self, k: &str) -> Option<Range<usize>> {
        let s = |v: &Option<Spanned<u64>>| v.as_ref().map(Spanned::span);
        match k {
            "path" => self.path.as_ref().map(Spanned::span),
            "url" => self.url.as_ref().map(Spanned::span),
            "mask" => self.mask.as_ref().map(Spanned::span),
            "max_string_bytes" => s(&self.max_string_bytes),
            "queue_lines" => s(&self.queue_lines),
            "max_file_kib" => s(&self.max_file_kib),
            "batch_lines" => s(&self.batch_lines),
            "flush_ms" => s(&self.flush_ms),
            "timeout_ms" => s(&self.timeout_ms),
            "keep_files" => self.keep_files.as_ref().map(Spanned::span),
            "retries" => self.retries.as_ref().map(Spanned::span),
            _ => None,
        }
        .or_else(|| self.sink.as_ref().map(Spanned::span))
    }
}

/// The decision log's settings from `settings`, a JSON object with the
/// keys of `[decision_log]` (the embedded Python `Host`'s `decision_log`
/// argument), checked as the manifest's table is, over the defaults; a
/// relative `path` is taken from the working directory. The error names
/// the key.
pub fn from_json(
    settings: &serde_json::Map<String, serde_json::Value>,
) -> Result<DecisionLogConfig, String> {
    use serde_json::Value;
    // Each value is written as TOML: JSON's strings, integers, booleans
    // and arrays of them are TOML's too.
    let mut text = String::from("[decision_log]\n");
    for (key, value) in settings {
        let scalar = |v: &Value| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_));
        let fits = match value {
            Value::Array(items) => items.iter().all(scalar),
            v => scalar(v),
        };
        let bare = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !fits || !bare {
            return Err(format!(
                "decision_log: key `{key}`: must name a [decision_log] key with a string, \
                 number, boolean or list of them"
            ));
        }
        text.push_str(&format!("{key} = {value}\n"));
    }
    let raw: RawTable =
        toml::from_str(&text).map_err(|e| format!("decision_log: {}", e.message().trim()))?;
    let mut config = DecisionLogConfig::default();
    let span = raw.decision_log.span();
    apply(&mut config, raw.decision_log.get_ref(), Path::new(""), span)
        .map_err(|(_, key, why)| format!("key `{key}`: {why}"))?;
    Ok(config)
}

/// A document holding only `[decision_log]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    decision_log: Spanned<RawDecisionLog>,
}
