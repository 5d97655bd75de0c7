//! A case file's `[[plugin]]` entries as a real plugin directory: a
//! temporary directory holding a link to each component and a
//! `toolgate.toml` made of the entries, each key on the line it has in the
//! case file (so the manifest's errors name the case file's lines), opened
//! by the registry every command uses: the real loader, the config checked
//! at load, the real limits — and, for `toolgate test`, the outbound
//! requests answered by the cases' `[[case.http]]` instead of the network.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use toolgate::manifest::line_of;
use toolgate::{Engine, PluginSet, Registry};

use super::{CaseFile, CaseHttp};
use crate::args::{CacheArgs, LoadArgs, registry_options};
use crate::bad;

/// The registries a case file's cases run on: one for the entries as
/// written, one more per distinct case `config`.
pub(crate) struct Chains<'a> {
    file: &'a CaseFile,
    engine: Engine,
    cache: &'a CacheArgs,
    load: &'a LoadArgs,
    http: Option<Arc<CaseHttp>>,
    open: BTreeMap<String, (tempfile::TempDir, Registry)>,
}

impl<'a> Chains<'a> {
    /// Chains for `file`'s entries, loaded on `engine` with the command's
    /// cache and load settings.
    pub(crate) fn new(
        file: &'a CaseFile,
        engine: Engine,
        cache: &'a CacheArgs,
        load: &'a LoadArgs,
    ) -> Chains<'a> {
        Chains {
            file,
            engine,
            cache,
            load,
            http: None,
            open: BTreeMap::new(),
        }
    }

    /// The same chains, whose guards' requests get `http`'s answers and
    /// never reach the network.
    pub(crate) fn answering(self, http: Arc<CaseHttp>) -> Chains<'a> {
        Chains {
            http: Some(http),
            ..self
        }
    }

    /// The plugin set for a case whose `config` is `config` (`None`: the
    /// entries' own). Loaded on first use; a plugin that does not load is
    /// an error naming the case file and the line.
    pub(crate) async fn set(&mut self, config: Option<&toml::Table>) -> Result<Arc<PluginSet>> {
        let key = config.map_or(String::new(), |c| format!("{c:?}"));
        if !self.open.contains_key(&key) {
            let opened = self.load(config).await?;
            self.open.insert(key.clone(), opened);
        }
        let (_, registry) = self
            .open
            .get(&key)
            .context("a registry just opened is there")?;
        Ok(registry.plugin_set())
    }

    async fn load(&self, config: Option<&toml::Table>) -> Result<(tempfile::TempDir, Registry)> {
        let dir = tempfile::Builder::new()
            .prefix("toolgate-test-")
            .tempdir()
            .context("cannot make a temporary plugin directory")?;
        let links = self.write_dir(dir.path(), config)?;
        let options = toolgate::RegistryOptions {
            http_answers: self
                .http
                .clone()
                .map(|h| h as Arc<dyn toolgate::HttpAnswers>),
            ..registry_options(self.cache, self.load)?
        };
        let registry = Registry::open_with(self.engine.clone(), dir.path(), options).await?;
        // Messages name the case file and the components, never the
        // temporary directory.
        let manifest = dir.path().join(toolgate::manifest::FILE_NAME);
        let mut names = vec![(manifest, self.file.path.clone())];
        names.extend(links);
        let shown = |message: &str| {
            names.iter().fold(message.to_string(), |m, (from, to)| {
                m.replace(&from.display().to_string(), &to.display().to_string())
            })
        };
        if let Some(issue) = registry.plugin_set().errors.first() {
            // A manifest's error already names the file, line and key.
            if issue.kind == toolgate::IssueKind::Manifest {
                return Err(bad(shown(&issue.message)));
            }
            let which = if config.is_some() {
                " (with the case's config)"
            } else {
                ""
            };
            return Err(bad(format!(
                "{}: not loaded{which}: {}",
                self.file.path.display(),
                shown(&issue.message)
            )));
        }
        Ok((dir, registry))
    }

    /// Writes the links and the manifest into `dir`; returns each link and
    /// the component it stands for.
    fn write_dir(
        &self,
        dir: &Path,
        config: Option<&toml::Table>,
    ) -> Result<Vec<(PathBuf, PathBuf)>> {
        let file = self.file;
        let base = file.path.parent().unwrap_or(Path::new("."));
        let several = file.plugins.len() > 1;
        let mut manifest = String::new();
        let mut links = Vec::new();
        let lines = key_lines(&file.text);
        for (i, entry) in file.plugins.iter().enumerate() {
            let table = entry.get_ref();
            let line = |k: &String| lines.get(i).and_then(|l| l.get(k)).copied().unwrap_or(0);
            let mut keys: Vec<(usize, &String, &toml::Value)> =
                table.iter().map(|(k, v)| (line(k), k, v)).collect();
            keys.sort_by_key(|(line, _, _)| *line);
            let first = keys
                .first()
                .map_or(line_of(&file.text, entry.span().start), |k| k.0);
            pad_to(&mut manifest, first.saturating_sub(1));
            manifest.push_str("[[plugin]]\n");
            let name = match (table.get("name"), table.get("path")) {
                (Some(toml::Value::String(n)), _) => Some(n.clone()),
                (_, Some(toml::Value::String(p))) => Path::new(p)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned()),
                _ => None,
            };
            let replaced = config.and_then(|c| {
                if several {
                    name.as_ref()
                        .and_then(|n| c.get(n))
                        .and_then(|v| v.as_table())
                        .cloned()
                } else {
                    Some(c.clone())
                }
            });
            for (line, key, value) in keys {
                pad_to(&mut manifest, line);
                let value = match (key.as_str(), value) {
                    ("path", toml::Value::String(p)) => {
                        let component = base.join(p);
                        if !component.is_file() {
                            return Err(bad(format!(
                                "{}:{line}: key `plugin[{}].path`: component file {} does not \
                                 exist (build the guard first)",
                                file.path.display(),
                                i + 1,
                                component.display()
                            )));
                        }
                        let link = format!("p{}/{}", i + 1, file_name(p));
                        std::fs::create_dir_all(dir.join(format!("p{}", i + 1)))?;
                        let target = std::path::absolute(&component)?;
                        std::os::unix::fs::symlink(&target, dir.join(&link))?;
                        links.push((dir.join(&link), component));
                        toml::Value::String(link)
                    }
                    ("config", _) if replaced.is_some() => continue,
                    _ => value.clone(),
                };
                let _ = writeln!(manifest, "{key} = {}", inline(&value));
            }
            if let Some(c) = replaced {
                let _ = writeln!(manifest, "config = {}", inline(&toml::Value::Table(c)));
            }
        }
        std::fs::write(dir.join(toolgate::manifest::FILE_NAME), manifest)?;
        Ok(links)
    }
}

/// The last path segment of a `path` value (a missing component is the
/// manifest's to report: the link then dangles).
fn file_name(p: &str) -> String {
    Path::new(p).file_name().map_or_else(
        || "component.wasm".into(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The line each key of each `[[plugin]]` of `text` is written on.
fn key_lines(text: &str) -> Vec<BTreeMap<String, usize>> {
    use toml::de::{DeTable, DeValue};
    let Ok(doc) = DeTable::parse(text) else {
        return Vec::new();
    };
    let plugins = doc
        .get_ref()
        .iter()
        .find(|(k, _)| k.get_ref() == "plugin")
        .map(|(_, v)| v.get_ref());
    let Some(DeValue::Array(entries)) = plugins else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|entry| match entry.get_ref() {
            DeValue::Table(t) => t
                .iter()
                .map(|(k, _)| (k.get_ref().to_string(), line_of(text, k.span().start)))
                .collect(),
            _ => BTreeMap::new(),
        })
        .collect()
}

/// Pads `text` with newlines until its next line is line `line` (1-based).
fn pad_to(text: &mut String, line: usize) {
    while text.matches('\n').count() + 1 < line {
        text.push('\n');
    }
}

/// A value as inline TOML (a basic string is a JSON string).
fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => serde_json::Value::from(s.as_str()).to_string(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) if f.is_nan() => "nan".into(),
        toml::Value::Float(f) if f.is_infinite() => if *f > 0.0 { "inf" } else { "-inf" }.into(),
        toml::Value::Float(f) => format!("{f:?}"),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(a) => {
            format!("[{}]", a.iter().map(inline).collect::<Vec<_>>().join(", "))
        }
        toml::Value::Table(t) => {
            let items: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{} = {}", serde_json::Value::from(k.as_str()), inline(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}
