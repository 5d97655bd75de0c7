//! `toolgate.toml`: the manifest of one plugin directory.
//!
//! A manifest lists, in order, the plugins a directory runs, each with its
//! component file, limits, configuration, failure mode and (in the global
//! directory only) the tenants it applies to. Without a manifest every
//! `*.wasm` in the directory runs, in file-name order, with default limits.
//! With one, only the plugins it lists run.
//!
//! ```toml
//! [defaults]                 # optional: applies to every [[plugin]] below
//! timeout_ms = 100
//!
//! [[plugin]]
//! name = "sql-guard"         # default: the file's stem
//! path = "sql-guard.wasm"    # relative to this file's directory
//! fuel = 100_000_000
//! memory_mib = 64
//! timeout_ms = 50
//! max_return_kib = 64
//! host_calls = 100
//! log_kib = 16
//! on_error = "deny"          # "skip" (default) | "deny"
//! mode = "shadow"            # "enforce" (default) | "shadow": run, record, never apply
//! prepared = 1               # instances made ahead of need: "auto" (default) or 0..=8
//! snapshot = "auto"          # pre-initialise at load: "auto" (default) | true | false
//! tenants = ["acme"]         # global manifest only; default: every call
//! config = { tables = ["users"] }
//! ```
//!
//! Every key is checked: an unknown key, a value of the wrong type or out of
//! range, a missing component file or a duplicate name rejects the whole
//! manifest with an error naming the file, the line and the key.
//! [`Manifest::parse`] is the entry point; `docs/plugins.md` is the
//! reference.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Component, Path};

use serde::Deserialize;
use serde_json::Value;
use toml::Spanned;

use crate::call::plugin::{Mode, OnError, PluginSpec};
use crate::call::snapshot::SnapshotMode;
pub use crate::error::ManifestError;
use crate::load::files::{self, Opened, PluginDir, Symlinks};
use crate::load::policy::Policy;
use crate::runtime::http::grant::HttpGrant;
use crate::runtime::limits::Limits;
use crate::runtime::prepared::Depth;
use crate::tenant::TenantName;

#[cfg(test)]
mod key_index;
mod locate;
pub(crate) mod log_table;
mod source;
mod tables;

pub use crate::load::remote::Remote;
use locate::{find_key, key_at};
pub use locate::{key_path, line_of};
use tables::{
    LimitError, RawLimits, RawQuarantine, RawShares, apply_quarantine, apply_shares,
    with_limit_keys,
};

/// The manifest's file name.
pub const FILE_NAME: &str = "toolgate.toml";

/// Default cap on a manifest's size (1 MiB); larger is refused unread.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Where a manifest lives, which decides what it may say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The global directory: `tenants` is allowed.
    Global,
    /// A tenant's directory: `tenants` is refused (the directory already
    /// says whose plugins these are).
    Tenant,
}

/// One plugin as the manifest describes it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// How to load it.
    pub spec: PluginSpec,
    /// The tenants it applies to; `None` for every call (including calls
    /// with no tenant). Only set in the global manifest.
    pub tenants: Option<Vec<TenantName>>,
    /// Where its component is fetched from (`url`, `oci`); `None`: the
    /// file at `spec.path`. For a remote source `spec.path` is the
    /// source's [`Remote::location`], which names it in errors and
    /// listings.
    pub remote: Option<Remote>,
}

/// A parsed and checked manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The plugins, in the order they run.
    pub plugins: Vec<Entry>,
    /// The operator's policy in force: the one the manifest was parsed
    /// with, overridden by a global manifest's `[ceilings]`, `[shares]` and
    /// `[quarantine]`.
    pub policy: Policy,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    defaults: Option<RawDefaults>,
    #[serde(default)]
    plugin: Vec<Spanned<RawPlugin>>,
    #[serde(default)]
    ceilings: Option<Spanned<RawCeilings>>,
    #[serde(default)]
    shares: Option<Spanned<RawShares>>,
    #[serde(default)]
    quarantine: Option<Spanned<RawQuarantine>>,
    #[serde(default)]
    decision_log: Option<Spanned<log_table::RawDecisionLog>>,
}

with_limit_keys! {
    /// `[defaults]`: the limit keys and settings every `[[plugin]]` starts
    /// from.
    #[derive(Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct RawDefaults {} {
        on_error: Option<OnError>,
        snapshot: Option<Spanned<toml::Value>>,
    }
}

with_limit_keys! {
    /// `[ceilings]`: the most any tenant plugin may have, per limit key,
    /// the most outbound HTTP it may be granted, and the remote sources
    /// its component may be fetched from.
    #[derive(Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct RawCeilings {} {
        allowed_hosts: Option<Spanned<Vec<String>>>,
        http_methods: Option<Spanned<Vec<String>>>,
        allowed_networks: Option<Spanned<Vec<String>>>,
        plugin_sources: Option<Spanned<Vec<String>>>,
        trusted_keys: Option<Spanned<Vec<String>>>,
        require_signatures: Option<Spanned<bool>>,
    }
}

with_limit_keys! {
    /// One `[[plugin]]`.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawPlugin {
        name: Option<Spanned<String>>,
        path: Option<Spanned<String>>,
        url: Option<Spanned<String>>,
        sha256: Option<Spanned<String>>,
        oci: Option<Spanned<String>>,
        plain_http: Option<Spanned<bool>>,
    } {
        on_error: Option<OnError>,
        mode: Option<Mode>,
        prepared: Option<Spanned<RawDepth>>,
        snapshot: Option<Spanned<toml::Value>>,
        tenants: Option<Spanned<Vec<String>>>,
        config: Option<Spanned<toml::Table>>,
        allowed_hosts: Option<Spanned<Vec<String>>>,
        http_methods: Option<Spanned<Vec<String>>>,
        allowed_networks: Option<Spanned<Vec<String>>>,
    }
}

/// A table's outbound HTTP grant as written (`allowed_hosts`,
/// `http_methods`, `allowed_networks`), checked; an error names the key
/// under `prefix`.
fn grant(
    hosts: Option<&Spanned<Vec<String>>>,
    methods: Option<&Spanned<Vec<String>>>,
    networks: Option<&Spanned<Vec<String>>>,
    prefix: &str,
) -> Result<HttpGrant, LimitError> {
    fn list(v: Option<&Spanned<Vec<String>>>) -> &[String] {
        v.map_or(&[], |v| v.get_ref().as_slice())
    }
    HttpGrant::parse(
        list(hosts),
        methods.map(|m| m.get_ref().as_slice()),
        list(networks),
    )
    .map_err(|(key, why)| {
        let span = match key {
            "allowed_hosts" => hosts.map(Spanned::span),
            "http_methods" => methods.map(Spanned::span),
            _ => networks.map(Spanned::span),
        };
        (span.unwrap_or(0..0), format!("{prefix}.{key}"), why)
    })
}

/// `prepared` as written: `"auto"` or a count.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDepth {
    Count(i64),
    Word(String),
}

impl RawDepth {
    fn depth(&self) -> Result<Depth, String> {
        let max = crate::runtime::prepared::MAX_DEPTH;
        match self {
            RawDepth::Word(w) if w == "auto" => Ok(Depth::Auto),
            RawDepth::Word(w) => Err(format!("\"{w}\" is not \"auto\" or a count 0..={max}")),
            RawDepth::Count(n) => u32::try_from(*n)
                .ok()
                .filter(|&n| n <= max)
                .map(Depth::Fixed)
                .ok_or_else(|| format!("{n} is out of range: must be \"auto\" or 0..={max}")),
        }
    }
}

impl Manifest {
    /// Reads and checks `dir/toolgate.toml`; `Ok(None)` when there is none.
    /// `max_memory_bytes` is the engine's cap (`memory_mib` may not exceed
    /// it). A tenant manifest is held to the default policy's ceilings.
    pub fn load(
        dir: &Path,
        scope: Scope,
        max_memory_bytes: usize,
    ) -> Result<Option<Manifest>, ManifestError> {
        Manifest::load_with(dir, scope, max_memory_bytes, &Policy::default())
    }

    /// [`Manifest::load`] under the operator's `policy`: a tenant manifest
    /// is held to its ceilings; a global manifest may override it.
    pub fn load_with(
        dir: &Path,
        scope: Scope,
        max_memory_bytes: usize,
        policy: &Policy,
    ) -> Result<Option<Manifest>, ManifestError> {
        let symlinks = match scope {
            Scope::Global => Symlinks::Follow,
            Scope::Tenant => Symlinks::Refuse,
        };
        let path = dir.join(FILE_NAME);
        match files::read_in(dir, Path::new(FILE_NAME), symlinks, MAX_MANIFEST_BYTES) {
            Ok(None) => Ok(None),
            Ok(Some(bytes)) => {
                Manifest::parse_bytes(&path, &bytes, scope, max_memory_bytes, policy).map(Some)
            }
            Err(e) => Err(ManifestError::unreadable(&path, &e)),
        }
    }

    /// Parses manifest `bytes` read from `path`: like
    /// [`Manifest::parse_with`], after checking they are UTF-8.
    pub fn parse_bytes(
        path: &Path,
        bytes: &[u8],
        scope: Scope,
        max_memory_bytes: usize,
        policy: &Policy,
    ) -> Result<Manifest, ManifestError> {
        let text = std::str::from_utf8(bytes).map_err(|e| ManifestError {
            path: path.to_path_buf(),
            line: line_of(
                &String::from_utf8_lossy(&bytes[..e.valid_up_to()]),
                usize::MAX,
            ),
            key: None,
            message: format!("is not UTF-8 text: {e}"),
        })?;
        Manifest::parse_with(path, text, scope, max_memory_bytes, policy)
    }

    /// Parses and checks manifest `text` read from `path` (component paths
    /// are resolved against `path`'s directory and must exist), under the
    /// default policy.
    pub fn parse(
        path: &Path,
        text: &str,
        scope: Scope,
        max_memory_bytes: usize,
    ) -> Result<Manifest, ManifestError> {
        Manifest::parse_with(path, text, scope, max_memory_bytes, &Policy::default())
    }

    /// [`Manifest::parse`] under the operator's `policy`. In a tenant's
    /// manifest every limit (in `[defaults]` or a `[[plugin]]`) must be at
    /// most the ceiling, and a limit left unset is the default lowered to
    /// the ceiling; `[ceilings]`, `[shares]` and `[quarantine]` are refused.
    /// In the global manifest those tables override `policy` key by key.
    pub fn parse_with(
        path: &Path,
        text: &str,
        scope: Scope,
        max_memory_bytes: usize,
        policy: &Policy,
    ) -> Result<Manifest, ManifestError> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let symlinks = match scope {
            Scope::Global => Symlinks::Follow,
            Scope::Tenant => Symlinks::Refuse,
        };
        let here = Here { path, text };
        let raw = here.read()?;
        let mut policy = policy.clone();
        apply_tables(&here, &raw, scope, max_memory_bytes, &mut policy)?;
        let ceiling = (scope == Scope::Tenant).then_some(&policy.ceilings);
        let http_ceiling = (scope == Scope::Tenant).then_some(&policy.http_ceiling);
        let defaults = raw.defaults.unwrap_or_default();
        let base = match ceiling {
            Some(c) => Limits::default().clamped_to(c),
            None => Limits::default(),
        };
        let base = Base {
            on_error: defaults.on_error.unwrap_or_default(),
            snapshot: match &defaults.snapshot {
                None => SnapshotMode::default(),
                Some(v) => snapshot_mode(v, "defaults.snapshot".into()).map_err(|e| here.err(e))?,
            },
            limits: RawLimits::from(&defaults)
                .apply(base, "defaults", max_memory_bytes, ceiling)
                .map_err(|e| here.err(e))?,
            max_memory_bytes,
            ceiling,
            http_ceiling,
        };
        let plugins = PluginDir::open(dir, symlinks);
        let opened = match &plugins {
            Opened::Dir(d) => Some(d),
            Opened::Missing | Opened::Refused(_) => None,
        };
        let mut names = BTreeSet::new();
        let mut entries = Vec::new();
        for (i, p) in raw.plugin.into_iter().enumerate() {
            let (span, p) = (p.span(), p.into_inner());
            let at = Plugin {
                here: &here,
                prefix: format!("plugin[{}]", i + 1),
                dir,
                scope,
                sources: &policy.plugin_sources,
            };
            entries.push(at.entry(span, p, opened, &base, &mut names)?);
        }
        Ok(Manifest {
            plugins: entries,
            policy,
        })
    }
}

/// A manifest's text and where it was read from, for errors naming both.
struct Here<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Here<'_> {
    /// An error at `span` about `key`.
    fn at(&self, span: Range<usize>, key: Option<String>, message: String) -> ManifestError {
        ManifestError {
            path: self.path.to_path_buf(),
            line: line_of(self.text, span.start),
            key,
            message,
        }
    }

    /// A table's error (its span, key and message) as the manifest's.
    fn err(&self, (span, key, message): LimitError) -> ManifestError {
        self.at(span, Some(key), message)
    }

    /// The manifest's tables as written, or toml's error naming its key.
    fn read(&self) -> Result<RawManifest, ManifestError> {
        let text = self.text;
        toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let mut message = e.message().trim().to_string();
            let key = match find_key(text, span.start) {
                Some(found) => {
                    // toml hands a datetime to serde as a map: say what
                    // the manifest holds.
                    if found.datetime {
                        message =
                            message.replacen("invalid type: map", "invalid type: datetime", 1);
                    }
                    found.path
                }
                None => key_at(text, span.clone()),
            };
            self.at(span, key, message)
        })
    }
}

/// The operator's tables: refused in a tenant's manifest; in the global
/// one, each overrides `policy` key by key, and the result is checked.
fn apply_tables(
    here: &Here<'_>,
    raw: &RawManifest,
    scope: Scope,
    max_memory_bytes: usize,
    policy: &mut Policy,
) -> Result<(), ManifestError> {
    let tables = [
        ("ceilings", raw.ceilings.as_ref().map(Spanned::span)),
        ("shares", raw.shares.as_ref().map(Spanned::span)),
        ("quarantine", raw.quarantine.as_ref().map(Spanned::span)),
        ("decision_log", raw.decision_log.as_ref().map(Spanned::span)),
    ];
    if scope == Scope::Tenant {
        if let Some((key, Some(span))) = tables.into_iter().find(|(_, s)| s.is_some()) {
            return Err(here.at(
                span,
                Some(key.into()),
                format!("`[{key}]` is the operator's: it is allowed only in the global manifest"),
            ));
        }
        return Ok(());
    }
    if let Some(c) = &raw.ceilings {
        let c = c.get_ref();
        policy.ceilings = RawLimits::from(c)
            .apply(policy.ceilings.clone(), "ceilings", max_memory_bytes, None)
            .map_err(|e| here.err(e))?;
        if c.allowed_hosts.is_some() || c.http_methods.is_some() || c.allowed_networks.is_some() {
            policy.http_ceiling = grant(
                c.allowed_hosts.as_ref(),
                c.http_methods.as_ref(),
                c.allowed_networks.as_ref(),
                "ceilings",
            )
            .map_err(|e| here.err(e))?;
        }
        source::apply_plugin_sources(policy, c).map_err(|e| here.err(e))?;
        source::apply_signatures(policy, c).map_err(|e| here.err(e))?;
    }
    if let Some(sh) = &raw.shares {
        apply_shares(policy, sh.get_ref()).map_err(|e| here.err(e))?;
    }
    if let Some(q) = &raw.quarantine {
        apply_quarantine(policy, q.get_ref()).map_err(|e| here.err(e))?;
    }
    if let Some(d) = &raw.decision_log {
        let dir = here.path.parent().unwrap_or(Path::new("."));
        log_table::apply(&mut policy.decision_log, d.get_ref(), dir, d.span())
            .map_err(|e| here.err(e))?;
    }
    // A cross-key error names the last table given.
    let whole = tables.into_iter().rev().find_map(|(_, s)| s);
    policy
        .check()
        .map_err(|(key, msg)| here.at(whole.unwrap_or(0..0), Some(key), msg))
}

/// What every `[[plugin]]` starts from: `[defaults]` over the defaults
/// (lowered to the ceiling in a tenant's manifest).
struct Base<'a> {
    limits: Limits,
    on_error: OnError,
    snapshot: SnapshotMode,
    max_memory_bytes: usize,
    ceiling: Option<&'a Limits>,
    /// A tenant's manifest's: the most outbound HTTP its plugins may have.
    http_ceiling: Option<&'a HttpGrant>,
}

/// One `[[plugin]]` of a manifest, for errors naming its keys.
struct Plugin<'a> {
    here: &'a Here<'a>,
    /// `plugin[N]`.
    prefix: String,
    /// The manifest's directory.
    dir: &'a Path,
    scope: Scope,
    /// The remote sources a tenant's plugins may name.
    sources: &'a [String],
}

impl Plugin<'_> {
    fn key(&self, k: &str) -> Option<String> {
        Some(format!("{}.{k}", self.prefix))
    }

    /// The plugin checked: its component file, name, limits, tenants and
    /// settings; `names` holds the names taken before it.
    fn entry(
        &self,
        span: Range<usize>,
        p: RawPlugin,
        opened: Option<&PluginDir>,
        base: &Base<'_>,
        names: &mut BTreeSet<String>,
    ) -> Result<Entry, ManifestError> {
        let here = self.here;
        // Checked here, not by serde: the error then names the key
        // from what the manifest holds, never from a message's text.
        let (file, remote, stem) = self.source(span.clone(), &p, opened)?;
        let name = self.name(p.name.as_ref(), stem, names)?;
        let limits = RawLimits::from(&p)
            .apply(
                base.limits.clone(),
                &self.prefix,
                base.max_memory_bytes,
                base.ceiling,
            )
            .map_err(|e| here.err(e))?;
        let http = self.grant(&p, base.http_ceiling)?;
        let tenants = self.tenants(p.tenants)?;
        let prepared = match &p.prepared {
            None => Depth::Auto,
            Some(v) => v
                .get_ref()
                .depth()
                .map_err(|msg| here.at(v.span(), self.key("prepared"), msg))?,
        };
        let snapshot = match &p.snapshot {
            None => base.snapshot,
            Some(v) => {
                snapshot_mode(v, format!("{}.snapshot", self.prefix)).map_err(|e| here.err(e))?
            }
        };
        // The line of its `config` (or, without one, of the plugin).
        let config_at = Some((
            here.path.to_path_buf(),
            line_of(
                here.text,
                p.config.as_ref().map_or(span.start, |c| c.span().start),
            ),
        ));
        let config = match p.config {
            None => Value::Object(Default::default()),
            Some(c) => toml_to_json(toml::Value::Table(c.into_inner())),
        };
        Ok(Entry {
            spec: PluginSpec {
                name,
                path: file,
                limits,
                config,
                on_error: p.on_error.unwrap_or(base.on_error),
                mode: p.mode.unwrap_or_default(),
                prepared,
                snapshot,
                config_at,
                http,
                http_answers: None,
            },
            tenants,
            remote,
        })
    }

    /// The plugin's outbound HTTP grant, checked; in a tenant's manifest,
    /// held within the operator's `ceiling`.
    fn grant(
        &self,
        p: &RawPlugin,
        ceiling: Option<&HttpGrant>,
    ) -> Result<HttpGrant, ManifestError> {
        let here = self.here;
        let keys = (&p.allowed_hosts, &p.http_methods, &p.allowed_networks);
        let granted = grant(
            keys.0.as_ref(),
            keys.1.as_ref(),
            keys.2.as_ref(),
            &self.prefix,
        )
        .map_err(|e| here.err(e))?;
        let Some((key, why)) = ceiling.and_then(|c| granted.beyond(c)) else {
            return Ok(granted);
        };
        let span = match key {
            "allowed_hosts" => keys.0.as_ref().map(Spanned::span),
            "http_methods" => keys.1.as_ref().map(Spanned::span),
            _ => keys.2.as_ref().or(keys.0.as_ref()).map(Spanned::span),
        };
        Err(here.at(span.unwrap_or(0..0), self.key(key), why))
    }

    /// The component file `path` names, checked to be a regular file
    /// inside the manifest's directory.
    fn component(
        &self,
        path: &Spanned<String>,
        opened: Option<&PluginDir>,
    ) -> Result<std::path::PathBuf, ManifestError> {
        let here = self.here;
        let rel = path.get_ref();
        let rel_path = Path::new(rel);
        if rel.is_empty()
            || rel_path.is_absolute()
            || rel_path
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(here.at(
                path.span(),
                self.key("path"),
                format!(
                    "{rel:?} must be a relative path inside the manifest's directory (no `..`, not absolute)"
                ),
            ));
        }
        let file = self.dir.join(rel_path);
        // One message whether the file is missing, a symlink, a FIFO or
        // a device: it never tells whether a host path exists.
        match opened.map(|d| d.check(rel_path)) {
            Some(Ok(())) => Ok(file),
            Some(Err(crate::Error::HardLink { links, .. })) => Err(here.at(
                path.span(),
                self.key("path"),
                format!(
                    "component file {} has {links} hard links; a file in a tenant's \
                     directory must have exactly one (copy it in, do not link it)",
                    file.display()
                ),
            )),
            None | Some(Err(_)) => Err(here.at(
                path.span(),
                self.key("path"),
                format!(
                    "component file {} is missing or not a regular file inside the \
                     manifest's directory{}",
                    file.display(),
                    match self.scope {
                        Scope::Tenant => " (symlinks are not followed in a tenant's directory)",
                        Scope::Global => "",
                    }
                ),
            )),
        }
    }

    /// The plugin's name (default: `stem`, the file's stem or the remote
    /// source's, with the span of its key), valid and not taken.
    fn name(
        &self,
        name: Option<&Spanned<String>>,
        stem: (String, Range<usize>),
        names: &mut BTreeSet<String>,
    ) -> Result<String, ManifestError> {
        let here = self.here;
        let (name, name_span) = match name {
            Some(n) => (n.get_ref().clone(), n.span()),
            None => stem,
        };
        if let Err(why) = validate_name(&name) {
            return Err(here.at(name_span, self.key("name"), why));
        }
        if !names.insert(name.clone()) {
            return Err(here.at(
                name_span,
                self.key("name"),
                format!("duplicate plugin name {name:?}; names must be unique in a manifest"),
            ));
        }
        Ok(name)
    }

    /// `tenants`: only in the global manifest, never empty, valid names.
    fn tenants(
        &self,
        tenants: Option<Spanned<Vec<String>>>,
    ) -> Result<Option<Vec<TenantName>>, ManifestError> {
        let here = self.here;
        let Some(t) = tenants else {
            return Ok(None);
        };
        if self.scope == Scope::Tenant {
            return Err(here.at(
                t.span(),
                self.key("tenants"),
                "`tenants` is allowed only in the global manifest; a tenant's own \
                 directory already applies to that tenant alone"
                    .into(),
            ));
        }
        let span = t.span();
        let list = t.into_inner();
        if list.is_empty() {
            return Err(here.at(
                span,
                self.key("tenants"),
                "an empty list would apply to no call; leave the plugin out instead".into(),
            ));
        }
        list.into_iter()
            .map(TenantName::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
            .map_err(|why| here.at(span, self.key("tenants"), why.to_string()))
    }
}

/// A `snapshot` value: `"auto"`, `true` or `false`, else an error naming
/// `key`.
fn snapshot_mode(v: &Spanned<toml::Value>, key: String) -> Result<SnapshotMode, LimitError> {
    match v.get_ref() {
        toml::Value::Boolean(true) => Ok(SnapshotMode::On),
        toml::Value::Boolean(false) => Ok(SnapshotMode::Off),
        toml::Value::String(s) if s == "auto" => Ok(SnapshotMode::Auto),
        other => {
            let found = match other {
                toml::Value::String(s) => format!("{s:?}"),
                other => format!("a value of type {}", other.type_str()),
            };
            Err((
                v.span(),
                key,
                format!("must be \"auto\", true or false, not {found}"),
            ))
        }
    }
}

/// A plugin name follows the one rule for names
/// ([`crate::tenant::is_valid_name`]); else the error says what it may be.
pub(crate) fn validate_name(name: &str) -> Result<(), String> {
    if crate::tenant::is_valid_name(name) {
        Ok(())
    } else {
        Err(format!(
            "invalid plugin name {name:?}: use {}",
            crate::tenant::NAME_RULE
        ))
    }
}

/// A toml value as JSON; datetimes become their RFC 3339 text.
pub fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}
