//! `[decision_log]` of the global manifest: each key overrides the `serve`
//! flags' (or the embedding's) setting; the whole is then checked by
//! [`DecisionLogConfig::check`], whose error is placed on the key's line.

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::tables::LimitError;
use crate::runtime::log_writer::{DecisionLogConfig, Include, Sink};

/// Generates [`RawDecisionLog`] — `[decision_log]` as written: the sink's
/// keys, `include` and `mask`, then every number of `decision_log_keys!`
/// (`runtime/log_writer/config.rs`) — with where each key is written,
/// how the numbers override the settings, and the table read from JSON.
macro_rules! raw_decision_log {
    (keys { $( {
        $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, $lo:expr, $hi:expr;
    } )* }) => {
        raw_decision_log! { @raw
            [sink: String, path: String, url: String, include: Vec<String>, mask: Vec<String>]
            [$( $field: $ty ),*]
        }
    };
    (@raw [$( $own:ident: $own_ty:ty ),*] [$( $num:ident: $num_ty:ty ),*]) => {
        /// `[decision_log]` as written.
        #[derive(Deserialize, Default)]
        #[serde(deny_unknown_fields)]
        pub(super) struct RawDecisionLog {
            $( $own: Option<Spanned<$own_ty>>, )*
            $( $num: Option<Spanned<$num_ty>>, )*
        }

        impl RawDecisionLog {
            /// Every key, in order.
            const KEYS: &[&str] = &[$( stringify!($own), )* $( stringify!($num) ),*];

            /// Where key `k` is written, if it is.
            fn span_of(&self, k: &str) -> Option<Range<usize>> {
                match k {
                    $( stringify!($own) => self.$own.as_ref().map(Spanned::span), )*
                    $( stringify!($num) => self.$num.as_ref().map(Spanned::span), )*
                    _ => None,
                }
            }

            /// Overrides `config`'s numbers with every one set here.
            fn apply_numbers(&self, config: &mut DecisionLogConfig) {
                $( if let Some(v) = &self.$num {
                    config.$num = *v.get_ref();
                } )*
            }

            /// The table from `settings`, a JSON object of its keys (no spans:
            /// an error names the key).
            fn from_json(
                settings: &serde_json::Map<String, serde_json::Value>,
            ) -> Result<RawDecisionLog, String> {
                let mut raw = RawDecisionLog::default();
                for (key, value) in settings {
                    let bad = |e: serde_json::Error| format!("decision_log: key `{key}`: {e}");
                    match key.as_str() {
                        $( stringify!($own) => {
                            raw.$own = Some(Spanned::new(0..0, <$own_ty>::deserialize(value).map_err(bad)?));
                        } )*
                        $( stringify!($num) => {
                            raw.$num = Some(Spanned::new(0..0, <$num_ty>::deserialize(value).map_err(bad)?));
                        } )*
                        other => {
                            return Err(format!(
                                "decision_log: unknown field `{other}`, expected one of {}",
                                RawDecisionLog::KEYS.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                            ));
                        }
                    }
                }
                Ok(raw)
            }
        }
    };
}

crate::decision_log_keys!(raw_decision_log);

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
        let Some(&(_, own)) = Sink::KINDS.iter().find(|(w, _)| *w == word) else {
            let words: Vec<_> = Sink::KINDS
                .iter()
                .map(|(w, _)| format!("\"{w}\""))
                .collect();
            let (last, rest) = words.split_last().unwrap_or((&words[0], &[]));
            return Err((
                word_span,
                key("sink"),
                format!("\"{word}\" is not {} or {last}", rest.join(", ")),
            ));
        };
        // Another sink's key is a mistake, whichever it is.
        for (kind, k) in Sink::KINDS {
            if let Some(k) = k.filter(|&k| Some(k) != own)
                && let Some(s) = raw.span_of(k)
            {
                return Err((s, key(k), format!("is only for sink = \"{kind}\"")));
            }
        }
        let missing =
            |k: &str, what: &str| Err((word_span.clone(), key(k), format!("missing: {what}")));
        config.sink = match (word, &config.sink) {
            ("off", _) => Sink::Off,
            ("stdout", _) => Sink::Stdout,
            ("file", previous) => match (path, previous) {
                (Some(p), _) => Sink::File(p),
                (None, Sink::File(p)) => Sink::File(p.clone()),
                (None, _) => return missing("path", "the file to write"),
            },
            (_, previous) => match (url, previous) {
                (Some(u), _) => Sink::Http(u),
                (None, Sink::Http(u)) => Sink::Http(u.clone()),
                (None, _) => return missing("url", "the endpoint to POST to"),
            },
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
    raw.apply_numbers(config);
    config.check().map_err(|(k, why)| {
        let span = raw.span_of(&k).or_else(|| raw.span_of("sink"));
        (at(span), key(&k), why)
    })
}

/// The decision log's settings from `settings`, a JSON object with the
/// keys of `[decision_log]` (the embedded Python `Host`'s `decision_log`
/// argument), checked as the manifest's table is, over the defaults; a
/// relative `path` is taken from the working directory. The error names
/// the key.
pub fn from_json(
    settings: &serde_json::Map<String, serde_json::Value>,
) -> Result<DecisionLogConfig, String> {
    let raw = RawDecisionLog::from_json(settings)?;
    let mut config = DecisionLogConfig::default();
    apply(&mut config, &raw, Path::new(""), 0..0)
        .map_err(|(_, key, why)| format!("key `{key}`: {why}"))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{Value, json};

    use super::from_json;
    use crate::load::manifest::{Manifest, Scope};
    use crate::runtime::log_writer::Sink;

    /// Every number of `[decision_log]` as (key, lowest, highest).
    macro_rules! number_bounds {
        (keys { $( {
            $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, $lo:expr, $hi:expr;
        } )* }) => {
            [$( (stringify!($field), ($lo as $ty) as u64, ($hi as $ty) as u64) ),*]
        };
    }

    /// Every number of `[decision_log]` as (key, default).
    macro_rules! number_defaults {
        (keys { $( {
            $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, $lo:expr, $hi:expr;
        } )* }) => {
            [$( (stringify!($field), ($default as $ty).to_string()) ),*]
        };
    }

    /// docs/decision-log.md's `[decision_log]` table gives every number its
    /// default.
    #[test]
    fn docs_list_every_decision_log_number_with_its_default() {
        let docs = include_str!("../../../../docs/decision-log.md");
        for (key, default) in crate::decision_log_keys!(number_defaults) {
            let row = format!("| `{key}` | `{default}` |");
            assert!(
                docs.lines().any(|l| l.starts_with(&row)),
                "docs/decision-log.md has no row {row}"
            );
        }
    }

    fn settings(key: &str, value: Value) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert(key.into(), value);
        m
    }

    /// The Python `Host`'s settings are read as JSON, not rewritten as
    /// TOML: a value of the wrong type, or a number TOML cannot hold, is
    /// refused naming its key; every number is held to its range, in the
    /// manifest as in JSON, naming the key (and, in the manifest, its line).
    #[test]
    fn every_decision_log_number_is_checked_naming_its_key_in_json_and_the_manifest() {
        let path = Path::new("plugins/toolgate.toml");
        for (key, lo, hi) in crate::decision_log_keys!(number_bounds) {
            for bad in [
                json!("x"),
                json!(null),
                json!(-1),
                json!(1.5),
                json!(u64::MAX),
            ] {
                let e = from_json(&settings(key, bad.clone())).expect_err("refused");
                assert!(e.contains(&format!("{key}`")), "{key} = {bad}: {e}");
            }
            let e = from_json(&settings(key, json!(hi + 1))).expect_err("above its range");
            assert!(
                e.contains(&format!("`decision_log.{key}`")) && e.contains("out of range"),
                "{key} = {}: {e}",
                hi + 1
            );
            for ok in [lo, hi] {
                from_json(&settings(key, json!(ok)))
                    .unwrap_or_else(|e| panic!("{key} = {ok}: {e}"));
            }
            let mut bad = vec![hi + 1];
            if lo > 0 {
                bad.push(lo - 1);
            }
            for value in bad {
                let text = format!("[decision_log]\n# a comment\n{key} = {value}\n");
                let e =
                    Manifest::parse(path, &text, Scope::Global, 1 << 30).expect_err("out of range");
                assert_eq!(
                    (e.key.as_deref(), e.line),
                    (Some(format!("decision_log.{key}").as_str()), 3),
                    "{key} = {value}: {}",
                    e.message
                );
            }
        }
    }

    /// The sink's keys from JSON: `path` alone is the file sink; an
    /// unknown key is refused naming it.
    #[test]
    fn json_settings_name_the_sink_and_refuse_unknown_keys() {
        let config = from_json(&settings("path", json!("log.jsonl"))).expect("a file sink");
        assert_eq!(config.sink, Sink::File("log.jsonl".into()));
        let e = from_json(&settings("sinks", json!("stdout"))).expect_err("unknown");
        assert!(e.starts_with("decision_log: unknown field `sinks`"), "{e}");
    }
}
