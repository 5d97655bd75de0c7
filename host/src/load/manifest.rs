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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use toml::Spanned;

use crate::call::plugin::{OnError, PluginSpec};
use crate::call::snapshot::SnapshotMode;
pub use crate::error::ManifestError;
use crate::load::files::{self, Opened, PluginDir, Symlinks};
use crate::load::policy::Policy;
use crate::runtime::limits::Limits;
use crate::runtime::prepared::Depth;
use crate::tenant::TenantName;

/// The manifest's file name.
pub const FILE_NAME: &str = "toolgate.toml";

/// Default cap on a manifest's size (1 MiB); larger is refused unread.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Largest `timeout_ms` a manifest may set (10 minutes).
pub const MAX_TIMEOUT_MS: u64 = 600_000;

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
    ceilings: Option<Spanned<RawLimits>>,
    #[serde(default)]
    shares: Option<Spanned<RawShares>>,
    #[serde(default)]
    quarantine: Option<Spanned<RawQuarantine>>,
}

/// `[shares]`: see [`crate::runtime::shares::Shares`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawShares {
    global_instances: Option<Spanned<u32>>,
    global_memory_mib: Option<Spanned<u64>>,
    tenant_instances: Option<Spanned<u32>>,
    tenant_memory_mib: Option<Spanned<u64>>,
    tenant_plugins: Option<Spanned<u32>>,
    tenant_code_mib: Option<Spanned<u64>>,
    memory_budget_mib: Option<Spanned<u64>>,
    global_requests: Option<Spanned<u32>>,
    tenant_requests: Option<Spanned<u32>>,
    tenant_rate: Option<Spanned<u32>>,
    tenant_burst: Option<Spanned<u32>>,
    tenants: Option<BTreeMap<String, Spanned<RawTenantShares>>>,
    tenant_log_kib_per_s: Option<Spanned<u32>>,
    wait_ms: Option<Spanned<u64>>,
}

/// `[shares.tenants.<name>]`: one tenant's own rate.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenantShares {
    rate: Option<Spanned<u32>>,
    burst: Option<Spanned<u32>>,
}

/// `[quarantine]`: see [`crate::call::quarantine::QuarantinePolicy`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawQuarantine {
    faults: Option<Spanned<u32>>,
    window_ms: Option<Spanned<u64>>,
    cooldown_ms: Option<Spanned<u64>>,
}

// The limit keys are spelled out in each table rather than flattened:
// serde's `flatten` loses both `deny_unknown_fields` and toml's spans.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    fuel: Option<Spanned<u64>>,
    memory_mib: Option<Spanned<u64>>,
    timeout_ms: Option<Spanned<u64>>,
    max_return_kib: Option<Spanned<u64>>,
    host_calls: Option<Spanned<u32>>,
    log_kib: Option<Spanned<u64>>,
    on_error: Option<OnError>,
    snapshot: Option<Spanned<toml::Value>>,
}

/// The limit keys of a `[[plugin]]` or `[defaults]`; as itself, `[ceilings]`:
/// the most any tenant plugin may have, per limit key.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    fuel: Option<Spanned<u64>>,
    memory_mib: Option<Spanned<u64>>,
    timeout_ms: Option<Spanned<u64>>,
    max_return_kib: Option<Spanned<u64>>,
    host_calls: Option<Spanned<u32>>,
    log_kib: Option<Spanned<u64>>,
}

macro_rules! limits_of {
    ($raw:expr) => {
        RawLimits {
            fuel: $raw.fuel,
            memory_mib: $raw.memory_mib,
            timeout_ms: $raw.timeout_ms,
            max_return_kib: $raw.max_return_kib,
            host_calls: $raw.host_calls,
            log_kib: $raw.log_kib,
        }
    };
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    name: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    fuel: Option<Spanned<u64>>,
    memory_mib: Option<Spanned<u64>>,
    timeout_ms: Option<Spanned<u64>>,
    max_return_kib: Option<Spanned<u64>>,
    host_calls: Option<Spanned<u32>>,
    log_kib: Option<Spanned<u64>>,
    on_error: Option<OnError>,
    prepared: Option<Spanned<RawDepth>>,
    snapshot: Option<Spanned<toml::Value>>,
    tenants: Option<Spanned<Vec<String>>>,
    config: Option<Spanned<toml::Table>>,
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
        let opened = match PluginDir::open(dir, symlinks) {
            Opened::Dir(d) => Some(d),
            Opened::Missing | Opened::Refused(_) => None,
        };
        let at = |span: Range<usize>, key: Option<String>, message: String| ManifestError {
            path: path.to_path_buf(),
            line: line_of(text, span.start),
            key,
            message,
        };
        let raw: RawManifest = toml::from_str(text).map_err(|e| {
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
            at(span, key, message)
        })?;
        let mut policy = policy.clone();
        if scope == Scope::Tenant {
            let tables = [
                ("ceilings", raw.ceilings.as_ref().map(Spanned::span)),
                ("shares", raw.shares.as_ref().map(Spanned::span)),
                ("quarantine", raw.quarantine.as_ref().map(Spanned::span)),
            ];
            if let Some((key, Some(span))) = tables.into_iter().find(|(_, s)| s.is_some()) {
                return Err(at(
                    span,
                    Some(key.into()),
                    format!(
                        "`[{key}]` is the operator's: it is allowed only in the global manifest"
                    ),
                ));
            }
        } else {
            let mut whole = 0..0;
            if let Some(c) = raw.ceilings {
                whole = c.span();
                policy.ceilings = c
                    .into_inner()
                    .apply(policy.ceilings, "ceilings", max_memory_bytes, None)
                    .map_err(|(span, key, msg)| at(span, Some(key), msg))?;
            }
            if let Some(sh) = raw.shares {
                whole = sh.span();
                apply_shares(&mut policy, sh.into_inner())
                    .map_err(|(span, key, msg)| at(span, Some(key), msg))?;
            }
            if let Some(q) = raw.quarantine {
                whole = q.span();
                apply_quarantine(&mut policy, q.into_inner())
                    .map_err(|(span, key, msg)| at(span, Some(key), msg))?;
            }
            policy
                .check()
                .map_err(|(key, msg)| at(whole, Some(key), msg))?;
        }
        let ceiling = (scope == Scope::Tenant).then_some(&policy.ceilings);
        let defaults = raw.defaults.unwrap_or_default();
        let base = match ceiling {
            Some(c) => Limits::default().clamped_to(c),
            None => Limits::default(),
        };
        let base_on_error = defaults.on_error.unwrap_or_default();
        let base_snapshot = match &defaults.snapshot {
            None => SnapshotMode::default(),
            Some(v) => snapshot_mode(v, "defaults.snapshot".into())
                .map_err(|(span, key, msg)| at(span, Some(key), msg))?,
        };
        let base = limits_of!(defaults)
            .apply(base, "defaults", max_memory_bytes, ceiling)
            .map_err(|(span, key, msg)| at(span, Some(key), msg))?;
        let mut names = BTreeSet::new();
        let mut plugins = Vec::new();
        for (i, p) in raw.plugin.into_iter().enumerate() {
            let (span, p) = (p.span(), p.into_inner());
            // Checked here, not by serde: the error then names the key
            // from what the manifest holds, never from a message's text.
            let Some(path) = p.path else {
                return Err(at(span, Some("path".into()), "missing field `path`".into()));
            };
            let prefix = format!("plugin[{}]", i + 1);
            let key = |k: &str| Some(format!("{prefix}.{k}"));
            let rel = path.get_ref();
            let rel_path = Path::new(rel);
            if rel.is_empty()
                || rel_path.is_absolute()
                || rel_path
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
            {
                return Err(at(
                    path.span(),
                    key("path"),
                    format!(
                        "{rel:?} must be a relative path inside the manifest's directory (no `..`, not absolute)"
                    ),
                ));
            }
            let file = dir.join(rel_path);
            // One message whether the file is missing, a symlink, a FIFO or
            // a device: it never tells whether a host path exists.
            match opened.as_ref().map(|d| d.check(rel_path)) {
                Some(Ok(())) => {}
                Some(Err(crate::Error::HardLink { links, .. })) => {
                    return Err(at(
                        path.span(),
                        key("path"),
                        format!(
                            "component file {} has {links} hard links; a file in a tenant's \
                             directory must have exactly one (copy it in, do not link it)",
                            file.display()
                        ),
                    ));
                }
                None | Some(Err(_)) => {
                    return Err(at(
                        path.span(),
                        key("path"),
                        format!(
                            "component file {} is missing or not a regular file inside the \
                             manifest's directory (symlinks are not followed in a tenant's \
                             directory)",
                            file.display()
                        ),
                    ));
                }
            }
            let (name, name_span) = match &p.name {
                Some(n) => (n.get_ref().clone(), n.span()),
                None => (
                    rel_path
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    path.span(),
                ),
            };
            if let Err(why) = validate_name(&name) {
                return Err(at(name_span, key("name"), why));
            }
            if !names.insert(name.clone()) {
                return Err(at(
                    name_span,
                    key("name"),
                    format!("duplicate plugin name {name:?}; names must be unique in a manifest"),
                ));
            }
            let limits = limits_of!(p)
                .apply(base.clone(), &prefix, max_memory_bytes, ceiling)
                .map_err(|(span, key, msg)| at(span, Some(key), msg))?;
            let tenants = match p.tenants {
                None => None,
                Some(t) if scope == Scope::Tenant => {
                    return Err(at(
                        t.span(),
                        key("tenants"),
                        "`tenants` is allowed only in the global manifest; a tenant's own \
                         directory already applies to that tenant alone"
                            .into(),
                    ));
                }
                Some(t) => {
                    let span = t.span();
                    let list = t.into_inner();
                    if list.is_empty() {
                        return Err(at(
                            span,
                            key("tenants"),
                            "an empty list would apply to no call; leave the plugin out instead"
                                .into(),
                        ));
                    }
                    let list = list
                        .into_iter()
                        .map(TenantName::try_from)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|why| at(span.clone(), key("tenants"), why.to_string()))?;
                    Some(list)
                }
            };
            let prepared = match &p.prepared {
                None => Depth::Auto,
                Some(v) => v
                    .get_ref()
                    .depth()
                    .map_err(|msg| at(v.span(), Some(format!("{prefix}.prepared")), msg))?,
            };
            let snapshot = match &p.snapshot {
                None => base_snapshot,
                Some(v) => snapshot_mode(v, format!("{prefix}.snapshot"))
                    .map_err(|(span, key, msg)| at(span, Some(key), msg))?,
            };
            let config = match p.config {
                None => Value::Object(Default::default()),
                Some(c) => toml_to_json(toml::Value::Table(c.into_inner())),
            };
            plugins.push(Entry {
                spec: PluginSpec {
                    name,
                    path: file,
                    limits,
                    config,
                    on_error: p.on_error.unwrap_or(base_on_error),
                    prepared,
                    snapshot,
                },
                tenants,
            });
        }
        Ok(Manifest { plugins, policy })
    }
}

/// Overrides `policy.shares` with every key of `[shares]`, checking ranges.
fn apply_shares(policy: &mut Policy, raw: RawShares) -> Result<(), LimitError> {
    let s = &mut policy.shares;
    let key = |k: &str| format!("shares.{k}");
    if let Some(v) = &raw.global_instances {
        s.global_instances = range(v, key("global_instances"), 1, 1 << 16, "")?;
    }
    if let Some(v) = &raw.global_memory_mib {
        s.global_memory_mib = range(v, key("global_memory_mib"), 1, 1 << 30, " MiB")?;
    }
    if let Some(v) = &raw.tenant_instances {
        s.tenant_instances = range(v, key("tenant_instances"), 1, 1 << 16, "")?;
    }
    if let Some(v) = &raw.tenant_memory_mib {
        s.tenant_memory_mib = range(v, key("tenant_memory_mib"), 1, 1 << 30, " MiB")?;
    }
    if let Some(v) = &raw.tenant_plugins {
        s.tenant_plugins = range(v, key("tenant_plugins"), 1, 1 << 10, "")?;
    }
    if let Some(v) = &raw.tenant_code_mib {
        s.tenant_code_mib = range(v, key("tenant_code_mib"), 1, 1 << 30, " MiB")?;
    }
    if let Some(v) = &raw.tenant_log_kib_per_s {
        s.tenant_log_kib_per_s = range(v, key("tenant_log_kib_per_s"), 0, 1 << 22, " KiB/s")?;
    }
    if let Some(v) = &raw.memory_budget_mib {
        s.memory_budget_mib = range(v, key("memory_budget_mib"), 1, 1 << 40, " MiB")?;
    }
    if let Some(v) = &raw.global_requests {
        s.global_requests = range(v, key("global_requests"), 1, 1 << 16, "")?;
    }
    if let Some(v) = &raw.tenant_requests {
        s.tenant_requests = range(v, key("tenant_requests"), 1, 1 << 16, "")?;
    }
    if let Some(v) = &raw.tenant_rate {
        s.tenant_rate = range(v, key("tenant_rate"), 0, 1_000_000, " requests/s")?;
    }
    if let Some(v) = &raw.tenant_burst {
        s.tenant_burst = range(v, key("tenant_burst"), 0, 1_000_000, "")?;
    }
    for (name, own) in raw.tenants.iter().flatten() {
        let table = format!("shares.tenants.{name}");
        TenantName::try_from(name.clone())
            .map_err(|e| (own.span(), table.clone(), e.to_string()))?;
        let key = |k: &str| format!("{table}.{k}");
        let RawTenantShares { rate, burst } = own.get_ref();
        let Some(rate) = rate else {
            return Err((
                own.span(),
                key("rate"),
                "missing: the tenant's requests a second (0: no limit)".into(),
            ));
        };
        let rate = range(rate, key("rate"), 0, 1_000_000, " requests/s")?;
        let burst = match burst {
            Some(v) if rate == 0 => {
                return Err((
                    v.span(),
                    key("burst"),
                    "has no effect without a rate".into(),
                ));
            }
            Some(v) => range(v, key("burst"), 0, 1_000_000, "")?,
            None => 0,
        };
        s.tenant_rates
            .insert(name.clone(), crate::runtime::shares::Rate::new(rate, burst));
    }
    if let Some(v) = &raw.wait_ms {
        s.wait = Duration::from_millis(range(v, key("wait_ms"), 0, 60_000, " ms")?);
    }
    Ok(())
}

/// Overrides `policy.quarantine` with every key of `[quarantine]`.
fn apply_quarantine(policy: &mut Policy, raw: RawQuarantine) -> Result<(), LimitError> {
    let q = &mut policy.quarantine;
    let key = |k: &str| format!("quarantine.{k}");
    if let Some(v) = &raw.faults {
        q.faults = range(v, key("faults"), 0, 1_000_000, "")?;
    }
    if let Some(v) = &raw.window_ms {
        q.window = Duration::from_millis(range(v, key("window_ms"), 1, 86_400_000, " ms")?);
    }
    if let Some(v) = &raw.cooldown_ms {
        q.cooldown = Duration::from_millis(range(v, key("cooldown_ms"), 1, 86_400_000, " ms")?);
    }
    Ok(())
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

/// `v` if it is within `lo..=hi`, else an error naming `key`.
fn range<T: Copy + PartialOrd + fmt::Display>(
    v: &Spanned<T>,
    key: String,
    lo: T,
    hi: T,
    unit: &str,
) -> Result<T, LimitError> {
    let x = *v.get_ref();
    if x < lo || x > hi {
        return Err((
            v.span(),
            key,
            format!("{x} is out of range: must be {lo}..={hi}{unit}"),
        ));
    }
    Ok(x)
}

type LimitError = (Range<usize>, String, String);

impl RawLimits {
    /// Overrides `limits` with every key set here, checking ranges and,
    /// for a tenant's manifest, the operator's `ceiling`.
    fn apply(
        &self,
        mut limits: Limits,
        prefix: &str,
        max_memory_bytes: usize,
        ceiling: Option<&Limits>,
    ) -> Result<Limits, LimitError> {
        self.apply_ranges(&mut limits, prefix, max_memory_bytes)?;
        let Some(ceiling) = ceiling else {
            return Ok(limits);
        };
        // Only what this table sets can be above the ceiling: the base it
        // starts from is already within it.
        match limits.above(ceiling) {
            None => Ok(limits),
            Some((k, value, max)) => {
                let span = match k {
                    "fuel" => self.fuel.as_ref().map(Spanned::span),
                    "memory_mib" => self.memory_mib.as_ref().map(Spanned::span),
                    "timeout_ms" => self.timeout_ms.as_ref().map(Spanned::span),
                    "max_return_kib" => self.max_return_kib.as_ref().map(Spanned::span),
                    "host_calls" => self.host_calls.as_ref().map(Spanned::span),
                    _ => self.log_kib.as_ref().map(Spanned::span),
                }
                .unwrap_or(0..0);
                Err((
                    span,
                    format!("{prefix}.{k}"),
                    format!(
                        "{value} is above the operator's ceiling for tenant plugins ({max}; \
                         `[ceilings]` in the global manifest)"
                    ),
                ))
            }
        }
    }

    /// Overrides `limits` with every key set here, checking ranges.
    fn apply_ranges(
        &self,
        limits: &mut Limits,
        prefix: &str,
        max_memory_bytes: usize,
    ) -> Result<(), LimitError> {
        let key = |k: &str| format!("{prefix}.{k}");
        const KIB: u64 = 1 << 10;
        const MIB: u64 = 1 << 20;
        if let Some(v) = &self.fuel {
            limits.fuel = range(v, key("fuel"), 1, u64::MAX, "")?;
        }
        if let Some(v) = &self.memory_mib {
            let max = (max_memory_bytes as u64 / MIB).max(1);
            let mib = range(v, key("memory_mib"), 1, max, " MiB (the engine's maximum)")?;
            limits.memory_bytes = usize::try_from(mib * MIB).unwrap_or(usize::MAX);
        }
        if let Some(v) = &self.timeout_ms {
            let ms = range(v, key("timeout_ms"), 1, MAX_TIMEOUT_MS, " ms")?;
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(v) = &self.max_return_kib {
            let kib = range(v, key("max_return_kib"), 1, 1 << 20, " KiB")?;
            limits.max_return_bytes = usize::try_from(kib * KIB).unwrap_or(usize::MAX);
        }
        if let Some(v) = &self.host_calls {
            limits.host_calls = *v.get_ref();
        }
        if let Some(v) = &self.log_kib {
            let kib = range(v, key("log_kib"), 0, 1 << 20, " KiB")?;
            limits.log_bytes = usize::try_from(kib * KIB).unwrap_or(usize::MAX);
        }
        Ok(())
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

/// The 1-based line holding byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key a toml error at `span` of `text` is about, found from the span
/// and the document (never from the error's message): the key the span
/// covers (an unknown or a duplicate key, a table's header), else the
/// `key = ` the span's line starts with (a value of the wrong type).
fn key_at(text: &str, span: Range<usize>) -> Option<String> {
    let bare = |k: &str| {
        !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    };
    let start = span.start.min(text.len());
    let covered = text.get(span).map_or("", str::trim);
    let covered = covered.trim_start_matches('[').trim_end_matches(']').trim();
    let after_equals = text
        .get(..start)
        .is_some_and(|t| t.trim_end().ends_with('='));
    if bare(covered) && !after_equals {
        return Some(covered.to_string());
    }
    let line_start = text.get(..start)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next().unwrap_or("").trim();
    if let Some(header) = line.strip_prefix('[') {
        let header = header
            .trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or("")
            .trim();
        return bare(header).then(|| header.to_string());
    }
    let (k, _) = line.split_once('=')?;
    let k = k.trim();
    (!k.is_empty()).then(|| k.to_string())
}

/// The key a toml error at byte `at` is about, by its place in the parsed
/// document.
struct FoundKey {
    /// Its full path (`plugin[2].fuel`, `shares.tenants.acme.rate`); `None`
    /// at the top of the document.
    path: Option<String>,
    /// Whether its value is a datetime.
    datetime: bool,
}

/// The innermost key of `text` whose key or value holds byte `at`, with its
/// full path (arrays of tables numbered from 1, as [`ManifestError`]s
/// number plugins); `None` when `text` does not parse as TOML.
fn find_key(text: &str, at: usize) -> Option<FoundKey> {
    use toml::de::{DeTable, DeValue};
    /// Whether `at` is in `value` (its path pushed onto `path`), and if so
    /// whether the innermost value there is a datetime.
    fn walk(value: &toml::Spanned<DeValue<'_>>, at: usize, path: &mut Vec<String>) -> Option<bool> {
        match value.get_ref() {
            DeValue::Table(table) => {
                for (key, item) in table.iter() {
                    path.push(format!(".{}", key.get_ref()));
                    // The key itself (an unknown or a duplicate key), else
                    // inside its value.
                    if key.span().contains(&at) {
                        return Some(matches!(item.get_ref(), DeValue::Datetime(_)));
                    }
                    if let Some(datetime) = walk(item, at, path) {
                        return Some(datetime);
                    }
                    path.pop();
                }
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(format!("[{}]", i + 1));
                    if let Some(datetime) = walk(item, at, path) {
                        return Some(datetime);
                    }
                    path.pop();
                }
            }
            _ => {}
        }
        value
            .span()
            .contains(&at)
            .then(|| matches!(value.get_ref(), DeValue::Datetime(_)))
    }
    let doc = DeTable::parse(text).ok()?;
    let root = toml::Spanned::new(doc.span(), DeValue::Table(doc.into_inner()));
    let mut path = Vec::new();
    let datetime = walk(&root, at, &mut path).unwrap_or(false);
    let path = path.concat();
    Some(FoundKey {
        path: (!path.is_empty()).then(|| path.trim_start_matches('.').to_string()),
        datetime,
    })
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
