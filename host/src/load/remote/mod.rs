//! Plugins fetched by digest: a manifest's `url` + `sha256`, or `oci` (a
//! registry reference pinned by `@sha256:`), instead of a `path`.
//!
//! What is fetched is named by its digest, never by where it is found: the
//! bytes are verified before anything compiles them, kept content-addressed
//! beside the compiled cache (`<cache dir>/blobs/sha256/<hex>`, or in memory
//! for the process's life when the cache is off), and loaded from then on
//! exactly as a local file is. A restart with the digest unchanged and the
//! blob kept makes no request. See `docs/remote.md`, "Remote plugin
//! sources", and `docs/design.md`, "Why digests".
//!
//! - [`Remote`]: a source as a manifest names it, checked ([`Remote::url`],
//!   [`Remote::oci`]), and whether the operator's `plugin_sources` allow
//!   it for a tenant ([`Remote::allowed_by`]);
//! - `fetch.rs`: the download (bounded, timed, retried) and the blobs;
//! - `push.rs`: publishing a component, or a whole plugin directory as a
//!   policy set, as an OCI artifact (`toolgate push [--set]`);
//! - [`set`]: policy sets followed by their tag (`toolgate serve --set`);
//! - [`signature`]: signatures on components and artifacts, and the keys
//!   trusted to make them.

use std::time::Duration;

use serde::Serialize;

mod fetch;
mod push;
pub mod set;
pub mod signature;

pub(crate) use fetch::Fetcher;
pub use push::{PushOptions, push, push_set};

/// The media type of a wasm artifact's config (the CNCF wasm OCI artifact
/// layout that `wkg` and `oras` use).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// The media type of a wasm artifact's one layer: the component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// The layer media type of older wasm artifacts (`wasm-to-oci`), accepted
/// on fetch.
const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// Where a plugin's component is fetched from, pinned by its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Remote {
    /// `url = "https://..."` with `sha256`: the bytes at the URL, whose
    /// SHA-256 must be `sha256`.
    Url {
        /// The URL, `http` or `https`, without credentials.
        url: String,
        /// The component's SHA-256, 64 lowercase hex digits.
        sha256: String,
    },
    /// `oci = "registry/repo[:tag]@sha256:<hex>"`: the wasm layer of the
    /// OCI manifest whose digest is `digest` (the tag, if any, is only a
    /// name for people: it is never resolved).
    Oci {
        /// The reference as written, normalised (`registry/repo[:tag]@sha256:hex`).
        reference: String,
        /// The registry, `host[:port]` (`docker.io` when none is written).
        registry: String,
        /// The repository within it (`guards/sql-guard`).
        repository: String,
        /// The manifest's SHA-256, 64 lowercase hex digits.
        digest: String,
        /// Whether the registry is spoken to in plain HTTP: a loopback
        /// registry (`localhost`, `127.0.0.0/8`, `[::1]`), or one the entry
        /// marks `plain_http = true`. Else HTTPS.
        plain_http: bool,
    },
}

impl Remote {
    /// A `url` source: `http`/`https`, a host, no credentials; `sha256` 64
    /// hex digits. The error says what is wrong and which key (`url` or
    /// `sha256`) it is about.
    pub fn url(url: &str, sha256: &str) -> Result<Remote, (&'static str, String)> {
        let parsed = reqwest::Url::parse(url).map_err(|e| ("url", format!("{url:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err((
                "url",
                format!("{url:?}: must be an http:// or https:// URL"),
            ));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(("url", format!("{url:?}: has no host")));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err((
                "url",
                "must not hold credentials (they would be shown in logs and listings)".into(),
            ));
        }
        let sha256 = sha256_hex(sha256).map_err(|why| ("sha256", why))?;
        Ok(Remote::Url {
            url: parsed.to_string(),
            sha256,
        })
    }

    /// An `oci` source: a reference with a `@sha256:` digest (a tag alone
    /// is refused: it can be moved to other bytes at any time).
    pub fn oci(reference: &str, plain_http: bool) -> Result<Remote, String> {
        let parsed = oci_client::Reference::try_from(reference)
            .map_err(|e| format!("{reference:?} is not an OCI reference: {e}"))?;
        let Some(digest) = parsed.digest() else {
            return Err(format!(
                "{reference:?} names no digest: a tag can be moved to other bytes at any time, \
                 so a plugin is pinned by its manifest's digest \
                 (`registry/repo:tag@sha256:<64 hex>`; `toolgate push` prints it)"
            ));
        };
        let hex = digest
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("{reference:?}: only sha256 digests are supported"))
            .and_then(sha256_hex)?;
        let registry = parsed.registry().to_string();
        let normalised = match parsed.tag() {
            Some(tag) => format!("{registry}/{}:{tag}@sha256:{hex}", parsed.repository()),
            None => format!("{registry}/{}@sha256:{hex}", parsed.repository()),
        };
        Ok(Remote::Oci {
            plain_http: plain_http || is_loopback(host_of(&registry)),
            repository: parsed.repository().to_string(),
            reference: normalised,
            registry,
            digest: hex,
        })
    }

    /// What names the source where a file's path would be (errors, the
    /// plugin's `path` in listings): the URL, or `oci://` and the
    /// reference.
    pub fn location(&self) -> String {
        match self {
            Remote::Url { url, .. } => url.clone(),
            Remote::Oci { reference, .. } => format!("oci://{reference}"),
        }
    }

    /// The plugin's name when the manifest gives none: the URL's file
    /// stem, or the repository's last segment.
    pub fn default_name(&self) -> String {
        let last = match self {
            Remote::Url { url, .. } => reqwest::Url::parse(url)
                .ok()
                .and_then(|u| {
                    u.path_segments()
                        .and_then(|mut s| s.next_back().map(str::to_string))
                })
                .unwrap_or_default(),
            Remote::Oci { repository, .. } => repository
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        match last.rsplit_once('.') {
            Some((stem, _)) if !stem.is_empty() => stem.to_string(),
            _ => last,
        }
    }

    /// Whether one of the operator's `plugin_sources` allows a tenant to
    /// name this source: an entry with a scheme (`https://host[:port][/path]`)
    /// allows the URLs under it; one without (`host[:port]`) allows that
    /// registry, and URLs on that host and port.
    pub fn allowed_by(&self, sources: &[String]) -> bool {
        sources.iter().any(|rule| self.matches(rule))
    }

    fn matches(&self, rule: &str) -> bool {
        let rule = rule.trim_end_matches('/');
        match (self, rule.contains("://")) {
            (Remote::Url { url, .. }, true) => {
                let (Ok(u), Ok(r)) = (reqwest::Url::parse(url), reqwest::Url::parse(rule)) else {
                    return false;
                };
                let prefix = r.path().trim_end_matches('/');
                u.scheme() == r.scheme()
                    && u.host_str() == r.host_str()
                    && u.port_or_known_default() == r.port_or_known_default()
                    && u.path()
                        .strip_prefix(prefix)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
            (Remote::Url { url, .. }, false) => reqwest::Url::parse(url).is_ok_and(|u| {
                let host = u.host_str().unwrap_or_default();
                match u.port() {
                    Some(p) => format!("{host}:{p}") == rule,
                    None => host == rule,
                }
            }),
            (Remote::Oci { registry, .. }, false) => registry == rule,
            (Remote::Oci { .. }, true) => false,
        }
    }
}

/// Checks one of the operator's `plugin_sources`: `host[:port]` or an
/// `http(s)://host[:port][/path]` prefix.
pub(crate) fn check_source_rule(rule: &str) -> Result<(), String> {
    if rule.contains("://") {
        let u = reqwest::Url::parse(rule).map_err(|e| format!("{rule:?}: {e}"))?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
            return Err(format!(
                "{rule:?}: must be `host[:port]` or an http(s)://host[:port][/path] prefix"
            ));
        }
        if u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() {
            return Err(format!(
                "{rule:?}: a prefix has no query, fragment or credentials"
            ));
        }
        return Ok(());
    }
    let ok = !rule.is_empty()
        && rule
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{rule:?}: must be `host[:port]` or an http(s)://host[:port][/path] prefix"
        ))
    }
}

/// `text` as a SHA-256 digest: 64 hex digits, returned lowercase.
pub(crate) fn sha256_hex(text: &str) -> Result<String, String> {
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(format!(
            "{text:?} is not a SHA-256 digest: must be 64 hex digits"
        ))
    }
}

/// The host of `host[:port]` (IPv6 in brackets).
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    authority.split(':').next().unwrap_or_default()
}

/// Whether `host` is this machine: `localhost`, `127.0.0.0/8`, `::1`.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How remote sources are fetched. The size cap is the component cap
/// ([`LoadLimits::max_component_bytes`](crate::LoadLimits)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchLimits {
    /// The longest one try may take, connecting included. Default: 30 s.
    pub timeout: Duration,
    /// Tries in all, when a try fails in a way that may pass (the host
    /// unreachable, a timeout, HTTP 5xx or 429). Default: 3.
    pub tries: u32,
    /// The wait before the second try; each later wait doubles. Default:
    /// 250 ms.
    pub backoff: Duration,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            timeout: Duration::from_secs(30),
            tries: 3,
            backoff: Duration::from_millis(250),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_url_source_is_checked_and_named_by_its_file_stem() {
        let r = Remote::url("https://plugins.example.com/g/sql-guard.wasm", HEX).expect("ok");
        assert_eq!(r.default_name(), "sql-guard");
        assert_eq!(r.location(), "https://plugins.example.com/g/sql-guard.wasm");
        assert_eq!(
            Remote::url("ftp://x/y.wasm", HEX).map_err(|e| e.0),
            Err("url")
        );
        assert_eq!(
            Remote::url("https://u:p@x/y.wasm", HEX).map_err(|e| e.0),
            Err("url")
        );
        assert_eq!(
            Remote::url("https://x/y.wasm", "abc").map_err(|e| e.0),
            Err("sha256")
        );
        let upper = HEX.to_ascii_uppercase();
        assert!(matches!(
            Remote::url("https://x/y.wasm", &upper),
            Ok(Remote::Url { sha256, .. }) if sha256 == HEX
        ));
    }

    #[test]
    fn an_oci_source_needs_a_sha256_digest_and_loopback_is_plain_http() {
        let r =
            Remote::oci(&format!("127.0.0.1:5000/guards/x:v1@sha256:{HEX}"), false).expect("ok");
        assert_eq!(r.default_name(), "x");
        assert!(
            matches!(&r, Remote::Oci { plain_http: true, registry, .. } if registry == "127.0.0.1:5000")
        );
        let r = Remote::oci(&format!("ghcr.io/acme/guards/pii@sha256:{HEX}"), false).expect("ok");
        assert!(matches!(
            &r,
            Remote::Oci {
                plain_http: false,
                ..
            }
        ));
        assert!(
            Remote::oci("ghcr.io/acme/pii:v1", false).is_err_and(|e| e.contains("names no digest"))
        );
        let sha512 = "f".repeat(128);
        assert!(Remote::oci(&format!("ghcr.io/a/b@sha512:{sha512}"), false).is_err());
    }

    #[test]
    fn plugin_sources_allow_by_prefix_or_by_host() {
        let url = Remote::url("https://plugins.example.com/acme/x.wasm", HEX).expect("ok");
        let allow = |rules: &[&str]| {
            url.allowed_by(&rules.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert!(allow(&["https://plugins.example.com"]));
        assert!(allow(&["https://plugins.example.com/acme/"]));
        assert!(!allow(&["https://plugins.example.com/acm"]));
        assert!(!allow(&["http://plugins.example.com"]));
        assert!(allow(&["plugins.example.com"]));
        assert!(!allow(&["plugins.example.com:8443"]));
        assert!(!allow(&[]));
        let oci = Remote::oci(&format!("127.0.0.1:5000/g/x@sha256:{HEX}"), false).expect("ok");
        assert!(oci.allowed_by(&["127.0.0.1:5000".into()]));
        assert!(!oci.allowed_by(&["127.0.0.1:5001".into(), "http://127.0.0.1:5000".into()]));
        assert!(check_source_rule("127.0.0.1:5000").is_ok());
        assert!(check_source_rule("https://p.example.com/x").is_ok());
        assert!(check_source_rule("ftp://p").is_err());
        assert!(check_source_rule("a b").is_err());
    }
}
