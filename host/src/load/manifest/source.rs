//! Where a `[[plugin]]`'s component comes from — `path`, or a remote
//! source (`url` + `sha256`, `oci`, with `plain_http`) — and the
//! operator's `[ceilings] plugin_sources`, the remote sources a tenant's
//! manifest may name.

use std::ops::Range;
use toml::Spanned;

use std::path::{Path, PathBuf};

use super::tables::LimitError;
use super::{Plugin, RawPlugin, Scope};
use crate::error::ManifestError;
use crate::load::files::PluginDir;
use crate::load::policy::Policy;
use crate::load::remote::{Remote, check_source_rule};

/// Sets `policy.plugin_sources` from `[ceilings]`, each entry checked.
pub(super) fn apply_plugin_sources(
    policy: &mut Policy,
    raw: &super::RawCeilings,
) -> Result<(), LimitError> {
    let Some(sources) = &raw.plugin_sources else {
        return Ok(());
    };
    for rule in sources.get_ref() {
        check_source_rule(rule)
            .map_err(|why| (sources.span(), "ceilings.plugin_sources".into(), why))?;
    }
    policy.plugin_sources = sources.get_ref().clone();
    Ok(())
}

/// Sets `policy.signatures` from `[ceilings] trusted_keys` (each a PEM
/// public key) and `require_signatures` (which needs a key).
pub(super) fn apply_signatures(
    policy: &mut Policy,
    raw: &super::RawCeilings,
) -> Result<(), LimitError> {
    use crate::load::remote::signature::TrustedKey;
    if let Some(keys) = &raw.trusted_keys {
        policy.signatures.keys = keys
            .get_ref()
            .iter()
            .enumerate()
            .map(|(i, pem)| {
                TrustedKey::from_pem(pem).map_err(|why| {
                    (
                        keys.span(),
                        "ceilings.trusted_keys".into(),
                        format!("key {}: {why}", i + 1),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(required) = &raw.require_signatures {
        if *required.get_ref() && policy.signatures.keys.is_empty() {
            return Err((
                required.span(),
                "ceilings.require_signatures".into(),
                "needs `trusted_keys`: the PEM public keys a signature may be made with".into(),
            ));
        }
        policy.signatures.required = *required.get_ref();
    }
    Ok(())
}

/// A `[[plugin]]`'s source keys, as written.
pub(super) struct SourceKeys<'a> {
    pub(super) path: Option<&'a Spanned<String>>,
    pub(super) url: Option<&'a Spanned<String>>,
    pub(super) sha256: Option<&'a Spanned<String>>,
    pub(super) oci: Option<&'a Spanned<String>>,
    pub(super) plain_http: Option<&'a Spanned<bool>>,
}

/// Where the component comes from.
pub(super) enum Source<'a> {
    /// A file in the manifest's directory.
    Path(&'a Spanned<String>),
    /// Fetched, pinned by its digest; the span of its key.
    Remote(Remote, Range<usize>),
}

impl<'a> SourceKeys<'a> {
    /// Exactly one of `path`, `url` and `oci`, with the keys that go with
    /// it; the error names the key (without the `plugin[N].` prefix) at
    /// `plugin`'s span when none is given.
    pub(super) fn source(&self, plugin: Range<usize>) -> Result<Source<'a>, LimitError> {
        let given: Vec<(&str, &Spanned<String>)> =
            [("path", self.path), ("url", self.url), ("oci", self.oci)]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
        let (key, value) = match given.as_slice() {
            [] => {
                return Err((
                    plugin,
                    "path".into(),
                    "missing field `path` (or a remote source: `url` with `sha256`, or `oci`)"
                        .into(),
                ));
            }
            [one] => *one,
            [(first, _), (second, v), ..] => {
                return Err((
                    v.span(),
                    (*second).into(),
                    format!("`{first}` and `{second}` are both given: a plugin has one source"),
                ));
            }
        };
        if let Some(sha) = self.sha256.filter(|_| key != "url") {
            let why = match key {
                "oci" => "goes with `url` only: an `oci` reference carries its digest",
                _ => "goes with `url` only",
            };
            return Err((sha.span(), "sha256".into(), why.into()));
        }
        if let Some(p) = self.plain_http.filter(|_| key != "oci") {
            return Err((p.span(), "plain_http".into(), "goes with `oci` only".into()));
        }
        match key {
            "path" => Ok(Source::Path(value)),
            "url" => {
                let Some(sha) = self.sha256 else {
                    return Err((
                        value.span(),
                        "sha256".into(),
                        "missing: a `url` source is pinned by the SHA-256 of its bytes \
                         (`sha256 = \"<64 hex digits>\"`)"
                            .into(),
                    ));
                };
                Remote::url(value.get_ref(), sha.get_ref())
                    .map(|r| Source::Remote(r, value.span()))
                    .map_err(|(k, why)| {
                        let span = if k == "sha256" {
                            sha.span()
                        } else {
                            value.span()
                        };
                        (span, k.into(), why)
                    })
            }
            _ => {
                let plain = self.plain_http.is_some_and(|p| *p.get_ref());
                Remote::oci(value.get_ref(), plain)
                    .map(|r| Source::Remote(r, value.span()))
                    .map_err(|why| (value.span(), "oci".into(), why))
            }
        }
    }
}

/// Why a tenant's manifest may not name `remote` (the operator's
/// `plugin_sources` do not allow it), if it may not.
pub(super) fn refused_for_tenant(remote: &Remote, sources: &[String]) -> Option<String> {
    if remote.allowed_by(sources) {
        return None;
    }
    let allowed = if sources.is_empty() {
        "none is allowed now".to_string()
    } else {
        format!("allowed: {sources:?}")
    };
    Some(format!(
        "{}: a tenant's plugin may be fetched only from the sources the operator allows \
         (`[ceilings] plugin_sources` in the global manifest; {allowed})",
        remote.location()
    ))
}

/// A plugin's component path (a file's, or a remote source's location),
/// its remote source if any, and the name it gives by default with the
/// span of its key.
pub(super) type Chosen = (PathBuf, Option<Remote>, (String, Range<usize>));

impl Plugin<'_> {
    /// The `[[plugin]]`'s source: the component file `path` names (checked
    /// as a file inside the manifest's directory), or the remote source
    /// (for a tenant, one the operator allows) with the source's location
    /// as its path; and the name it gives by default, with the span of its
    /// key.
    pub(super) fn source(
        &self,
        span: Range<usize>,
        p: &RawPlugin,
        opened: Option<&PluginDir>,
    ) -> Result<Chosen, ManifestError> {
        let here = self.here;
        let keys = SourceKeys {
            path: p.path.as_ref(),
            url: p.url.as_ref(),
            sha256: p.sha256.as_ref(),
            oci: p.oci.as_ref(),
            plain_http: p.plain_http.as_ref(),
        };
        let (file, remote, stem) = match keys.source(span) {
            // Without a source the key is named bare, as it always was.
            Err((span, key, why)) if p.path.is_none() && p.url.is_none() && p.oci.is_none() => {
                return Err(here.at(span, Some(key), why));
            }
            Err((span, key, why)) => return Err(here.at(span, self.key(&key), why)),
            Ok(Source::Path(path)) => {
                let stem = Path::new(path.get_ref())
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (self.component(path, opened)?, None, (stem, path.span()))
            }
            Ok(Source::Remote(remote, at)) => {
                let key = if p.url.is_some() { "url" } else { "oci" };
                let refused = (self.scope == Scope::Tenant)
                    .then(|| refused_for_tenant(&remote, self.sources))
                    .flatten();
                if let Some(why) = refused {
                    return Err(here.at(at, self.key(key), why));
                }
                let stem = (remote.default_name(), at);
                (remote.location().into(), Some(remote), stem)
            }
        };
        Ok((file, remote, stem))
    }
}
