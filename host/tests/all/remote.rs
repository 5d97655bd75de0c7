//! Plugins fetched by digest: `url` + `sha256` from a real HTTP server on
//! loopback, `oci` from a real registry (Debian's `docker-registry`) after
//! `toolgate push`; verified, kept beside the compiled cache, served after
//! a restart with the network gone; a tampered or oversize download
//! refused while the last good version serves; a tenant's remote source
//! only where the operator allows it.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toolgate::{
    CompiledCache, FetchLimits, IssueKind, LoadLimits, ManifestError, Registry, RegistryOptions,
    manifest::Manifest, manifest::Scope,
};
use toolgate_tests::{NO_EMAIL, SQL_GUARD, STEERING_ONLY};

use crate::file_server::FileServer;
use crate::oci_registry::OciRegistry;
use crate::*;

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn bytes(path: &str) -> Vec<u8> {
    std::fs::read(path).expect("a guest component")
}

fn sha(path: &str) -> String {
    toolgate::digest(&bytes(path))
}

/// Writes `text` as `dir`'s manifest, by the atomic-rename convention.
pub(crate) fn manifest(dir: &Path, text: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let tmp = dir.join(".toolgate.toml.tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, dir.join("toolgate.toml")).expect("rename");
}

/// Fetches tried twice, 10 ms apart, under `max_component_bytes`.
fn load_limits(max_component_bytes: u64) -> LoadLimits {
    LoadLimits {
        max_component_bytes,
        fetch: FetchLimits {
            tries: 2,
            backoff: Duration::from_millis(10),
            ..FetchLimits::default()
        },
        ..LoadLimits::default()
    }
}

async fn open_with(dir: &Path, cache: Option<&Path>, load: LoadLimits) -> Registry {
    let options = RegistryOptions {
        cache: cache.map_or_else(CompiledCache::disabled, CompiledCache::at),
        load,
        ..Default::default()
    };
    Registry::open_with(engine(), dir, options)
        .await
        .expect("registry opens")
}

pub(crate) async fn open(dir: &Path, cache: Option<&Path>) -> Registry {
    open_with(dir, cache, load_limits(64 << 20)).await
}

/// What the chain for `tenant` answers a `DELETE` without `WHERE`: `true`
/// when some guard steers it (the sql-guard does; the others let it by).
pub(crate) async fn steers_delete(reg: &Registry, tenant: Option<&str>) -> bool {
    reg.plugin_set()
        .chain(tenant)
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM users"})),
            &no_state(),
        )
        .await
        .result
        .is_some()
}

/// The sql-guard's answers through the real chain: a refusal, a pass.
async fn decides_as_the_sql_guard(reg: &Registry, tenant: Option<&str>) {
    assert!(steers_delete(reg, tenant).await, "a DELETE is steered");
    let pass = reg
        .plugin_set()
        .chain(tenant)
        .steering(
            &steering("run_query", json!({"sql": "SELECT * FROM t WHERE id = 1"})),
            &no_state(),
        )
        .await;
    assert!(pass.result.is_none(), "{:?}", pass.trace);
    assert!(
        pass.trace.iter().any(|t| t.plugin.ends_with("sql-guard")),
        "{:?}",
        pass.trace
    );
}

fn described(reg: &Registry) -> serde_json::Value {
    serde_json::to_value(reg.plugin_set().describe()).expect("JSON")
}

pub(crate) fn errors_of(reg: &Registry, kind: IssueKind) -> Vec<String> {
    reg.plugin_set()
        .errors
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.message.clone())
        .collect()
}

#[tokio::test]
async fn a_url_source_is_fetched_verified_kept_and_served_after_a_restart_without_the_network() {
    let mut server = FileServer::start().await;
    server.put("/guards/sql-guard.wasm", bytes(SQL_GUARD));
    let url = server.url("/guards/sql-guard.wasm");
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[[plugin]]\nurl = \"{url}\"\nsha256 = \"{}\"\n",
        sha(SQL_GUARD)
    );
    manifest(dir.path(), &text);

    let reg = open(dir.path(), Some(cache.path())).await;
    assert!(
        reg.plugin_set().errors.is_empty(),
        "{:?}",
        reg.plugin_set().errors
    );
    let listed = described(&reg);
    assert_eq!(listed["global"][0]["name"], "sql-guard", "{listed}");
    assert_eq!(listed["global"][0]["path"], url.as_str());
    assert_eq!(listed["global"][0]["digest"], sha(SQL_GUARD).as_str());
    decides_as_the_sql_guard(&reg, None).await;
    assert_eq!(server.requests(), 1);
    // Kept content-addressed beside the compiled cache, private.
    let blob = cache.path().join("blobs/sha256").join(sha(SQL_GUARD));
    assert_eq!(
        std::fs::read(&blob).expect("the blob is kept"),
        bytes(SQL_GUARD)
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&blob).expect("blob").permissions().mode();
    assert_eq!(mode & 0o077, 0, "mode {mode:o}");

    // A reload of a changed manifest re-resolves only what changed: the
    // unchanged source, its blob kept, makes no request.
    std::fs::copy(NO_EMAIL, dir.path().join("no-email.wasm")).expect("copy");
    manifest(
        dir.path(),
        &format!("{text}\n[[plugin]]\npath = \"no-email.wasm\"\n"),
    );
    let r = reg.reload().await.expect("reload");
    assert!(r.errors.is_empty(), "{r:?}");
    assert_eq!(reg.plugin_set().global.plugins().len(), 2);
    assert_eq!(
        server.requests(),
        1,
        "an unchanged source is not fetched again"
    );
    drop(reg);

    // A restart, the digest unchanged and the blob kept: no request.
    let reg = open(dir.path(), Some(cache.path())).await;
    assert_eq!(server.requests(), 1, "a restart makes no request");
    decides_as_the_sql_guard(&reg, None).await;
    drop(reg);

    // And with the server gone.
    server.stop();
    let reg = open(dir.path(), Some(cache.path())).await;
    assert!(
        reg.plugin_set().errors.is_empty(),
        "{:?}",
        reg.plugin_set().errors
    );
    assert!(steers_delete(&reg, None).await);
}

#[tokio::test]
async fn with_the_cache_off_a_fetched_component_is_kept_in_memory() {
    let server = FileServer::start().await;
    // Sent in chunks, without a length: read to the end all the same.
    server.put_chunked("/sql-guard.wasm", bytes(SQL_GUARD));
    let dir = tempfile::tempdir().expect("tempdir");
    let entry = |timeout: u32| {
        format!(
            "[[plugin]]\nurl = \"{}\"\nsha256 = \"{}\"\ntimeout_ms = {timeout}\n",
            server.url("/sql-guard.wasm"),
            sha(SQL_GUARD)
        )
    };
    manifest(dir.path(), &entry(100));
    let reg = open(dir.path(), None).await;
    decides_as_the_sql_guard(&reg, None).await;
    assert_eq!(server.requests(), 1);
    // Its settings changed: loaded again, from the bytes kept.
    manifest(dir.path(), &entry(150));
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.loaded.len(), 1, "{r:?}");
    assert_eq!(server.requests(), 1, "kept in memory: no second request");
    assert_eq!(described(&reg)["global"][0]["limits"]["timeout_ms"], 150);
}

#[tokio::test]
async fn a_tampered_download_is_refused_and_the_last_good_version_keeps_serving() {
    let server = FileServer::start().await;
    server.put("/v1.wasm", bytes(SQL_GUARD));
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let pinned = |path: &str, sha: String| {
        format!(
            "[[plugin]]\nname = \"guard\"\nurl = \"{}\"\nsha256 = \"{sha}\"\n",
            server.url(path)
        )
    };
    manifest(dir.path(), &pinned("/v1.wasm", sha(SQL_GUARD)));
    let reg = open(dir.path(), Some(cache.path())).await;
    assert!(steers_delete(&reg, None).await);

    // v2 is published and pinned, but the server hands out other bytes.
    let mut tampered = bytes(STEERING_ONLY);
    let last = tampered.len() - 1;
    tampered[last] ^= 0x01;
    server.put("/v2.wasm", tampered.clone());
    manifest(dir.path(), &pinned("/v2.wasm", sha(STEERING_ONLY)));
    let (log, _guard) = capture(tracing::Level::WARN);
    let r = reg.reload().await.expect("reload");
    let fetch = errors_of(&reg, IssueKind::Fetch);
    assert_eq!(fetch.len(), 1, "{r:?}");
    let v2 = server.url("/v2.wasm");
    assert!(
        fetch[0].starts_with(&format!("{v2}: refused:")),
        "{}",
        fetch[0]
    );
    assert!(fetch[0].contains(&sha(STEERING_ONLY)), "{}", fetch[0]);
    assert!(
        fetch[0].contains(&toolgate::digest(&tampered)),
        "{}",
        fetch[0]
    );
    // v1 keeps serving, under its own source.
    let listed = described(&reg);
    assert_eq!(
        listed["global"][0]["digest"],
        sha(SQL_GUARD).as_str(),
        "{listed}"
    );
    assert!(
        steers_delete(&reg, None).await,
        "the last good version serves"
    );
    assert!(
        listed["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .any(|e| e["kind"] == "fetch" && e["path"] == v2.as_str()),
        "{listed}"
    );
    // Logged, naming plugin, source and why; counted.
    let text = log.text();
    assert!(
        text.lines().any(|l| l.contains("WARN")
            && l.contains("plugin source not fetched")
            && l.contains("plugin=\"guard\"")
            && l.contains(&v2)
            && l.contains("SHA-256")),
        "{text}"
    );
    assert_eq!(reg.fetch_failures().get("guard"), Some(&1));
    let metrics = toolgate::Metrics::new();
    metrics.observe(&reg);
    let page = metrics.encode();
    assert!(
        page.contains("toolgate_plugin_fetch_failures_total{plugin=\"guard\"} 1"),
        "{page}"
    );
    // Nothing tampered was kept.
    let kept = cache.path().join("blobs/sha256");
    assert!(!kept.join(toolgate::digest(&tampered)).exists());
    assert!(!kept.join(sha(STEERING_ONLY)).exists());

    // The server fixed, the next reload loads v2.
    server.put("/v2.wasm", bytes(STEERING_ONLY));
    let r = reg.reload().await.expect("reload");
    assert!(r.errors.is_empty(), "{r:?}");
    assert!(!steers_delete(&reg, None).await, "v2 lets every call by");
}

#[tokio::test]
async fn a_download_over_the_component_cap_is_refused_unkept() {
    let server = FileServer::start().await;
    server.put("/big.wasm", bytes(SQL_GUARD));
    server.put_chunked("/big-chunked.wasm", bytes(SQL_GUARD));
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let cap = 64 << 10;
    assert!(
        bytes(SQL_GUARD).len() > cap,
        "the guard is larger than the cap"
    );
    manifest(
        dir.path(),
        &format!(
            "[[plugin]]\nurl = \"{}\"\nsha256 = \"{sha}\"\n\n[[plugin]]\nurl = \"{}\"\nsha256 = \"{sha}\"\n",
            server.url("/big.wasm"),
            server.url("/big-chunked.wasm"),
            sha = sha(SQL_GUARD)
        ),
    );
    let reg = open_with(dir.path(), Some(cache.path()), load_limits(cap as u64)).await;
    let fetch = errors_of(&reg, IssueKind::Fetch);
    assert_eq!(fetch.len(), 2, "{:?}", reg.plugin_set().errors);
    for e in &fetch {
        assert!(
            e.contains(&format!(
                "not fetched: larger than the limit of {cap} bytes"
            )),
            "{e}"
        );
    }
    // Not tried again: no try can do better.
    assert_eq!(server.requests(), 2);
    assert!(reg.plugin_set().global.plugins().is_empty());
    assert!(
        !cache
            .path()
            .join("blobs/sha256")
            .join(sha(SQL_GUARD))
            .exists()
    );
}

#[tokio::test]
async fn a_source_down_at_the_first_start_is_reported_and_the_rest_serve() {
    let port = FileServer::free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(NO_EMAIL, dir.path().join("no-email.wasm")).expect("copy");
    let url = format!("http://127.0.0.1:{port}/sql-guard.wasm");
    manifest(
        dir.path(),
        &format!(
            "[[plugin]]\npath = \"no-email.wasm\"\n\n[[plugin]]\nurl = \"{url}\"\nsha256 = \"{}\"\n",
            sha(SQL_GUARD)
        ),
    );
    let reg = open(dir.path(), None).await;
    let fetch = errors_of(&reg, IssueKind::Fetch);
    assert_eq!(fetch.len(), 1, "{:?}", reg.plugin_set().errors);
    assert!(
        fetch[0].starts_with(&format!("{url}: not fetched:")),
        "{}",
        fetch[0]
    );
    assert!(fetch[0].contains("(2 tries)"), "{}", fetch[0]);
    // The rest serve.
    let names: Vec<String> = reg
        .plugin_set()
        .global
        .plugins()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(names, ["no-email"]);
    let d = reg
        .plugin_set()
        .chain(None)
        .steering(&steering("send_email", json!({"to": "x"})), &no_state())
        .await;
    assert!(d.result.is_some(), "no-email serves: {:?}", d.trace);
    assert!(!steers_delete(&reg, None).await);

    // The source up, the next reload fetches it.
    let server = FileServer::start_on(port).await;
    server.put("/sql-guard.wasm", bytes(SQL_GUARD));
    let r = reg.reload().await.expect("reload");
    assert!(r.errors.is_empty(), "{r:?}");
    assert!(steers_delete(&reg, None).await);
}

#[tokio::test]
async fn a_tenants_remote_source_is_refused_unless_the_operator_allows_its_host() {
    let server = FileServer::start().await;
    server.put("/acme/sql-guard.wasm", bytes(SQL_GUARD));
    let dir = tempfile::tempdir().expect("tempdir");
    let url = server.url("/acme/sql-guard.wasm");
    let tenant = dir.path().join("tenants/acme");
    manifest(
        &tenant,
        &format!(
            "[[plugin]]\nurl = \"{url}\"\nsha256 = \"{}\"\n",
            sha(SQL_GUARD)
        ),
    );
    // No plugin_sources: a tenant may not fetch at all. A rule for another
    // port does not allow it either.
    for global in [
        String::new(),
        format!(
            "[ceilings]\nplugin_sources = [\"127.0.0.1:{}\"]\n",
            FileServer::free_port()
        ),
    ] {
        manifest(dir.path(), &global);
        let reg = open(dir.path(), None).await;
        let refused = errors_of(&reg, IssueKind::Manifest);
        assert_eq!(refused.len(), 1, "{:?}", reg.plugin_set().errors);
        let want = format!(
            "{}:2: key `plugin[1].url`: {url}: a tenant's plugin may be fetched only from the \
             sources the operator allows",
            tenant.join("toolgate.toml").display()
        );
        assert!(
            refused[0].starts_with(&want),
            "{}\nwanted {want}",
            refused[0]
        );
        assert!(!steers_delete(&reg, Some("acme")).await);
    }
    assert_eq!(
        server.requests(),
        0,
        "nothing is fetched for a refused source"
    );

    // Allowed by host and port, or by a URL prefix.
    for rule in [server.authority(), server.url("/acme")] {
        manifest(
            dir.path(),
            &format!("[ceilings]\nplugin_sources = [\"{rule}\"]\n"),
        );
        let reg = open(dir.path(), None).await;
        assert!(
            reg.plugin_set().errors.is_empty(),
            "{:?}",
            reg.plugin_set().errors
        );
        assert_eq!(
            described(&reg)["tenants"]["acme"][0]["name"],
            "acme/sql-guard"
        );
        decides_as_the_sql_guard(&reg, Some("acme")).await;
        assert_eq!(
            described(&reg)["policy"]["plugin_sources"][0],
            rule.as_str()
        );
    }
}

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn parse(text: &str, scope: Scope) -> Result<Manifest, ManifestError> {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.wasm"), b"a").expect("write");
    manifest(dir.path(), text);
    Manifest::load(dir.path(), scope, 1 << 30).map(|m| m.expect("a manifest"))
}

fn rejects(text: &str, line: usize, key: &str, needle: &str) {
    let err = parse(text, Scope::Global).expect_err("refused");
    let shown = err.to_string();
    assert!(
        shown.contains(&format!("toolgate.toml:{line}: key `{key}`: ")),
        "{shown}\nwanted line {line}, key {key}"
    );
    assert!(err.message.contains(needle), "{needle:?} not in {shown}");
}

#[test]
fn remote_source_keys_are_checked_at_load_naming_file_line_and_key() {
    let oci = format!("127.0.0.1:5000/guards/x:v1@sha256:{HEX}");
    rejects(
        &format!("[[plugin]]\npath = \"a.wasm\"\nurl = \"https://x/y.wasm\"\nsha256 = \"{HEX}\"\n"),
        3,
        "plugin[1].url",
        "`path` and `url` are both given",
    );
    rejects(
        &format!("[[plugin]]\nurl = \"https://x/y.wasm\"\nsha256 = \"{HEX}\"\noci = \"{oci}\"\n"),
        4,
        "plugin[1].oci",
        "`url` and `oci` are both given",
    );
    rejects(
        "[[plugin]]\nurl = \"https://x/y.wasm\"\n",
        2,
        "plugin[1].sha256",
        "a `url` source is pinned by the SHA-256",
    );
    rejects(
        "[[plugin]]\nurl = \"https://x/y.wasm\"\nsha256 = \"abc123\"\n",
        3,
        "plugin[1].sha256",
        "must be 64 hex digits",
    );
    rejects(
        &format!(
            "[[plugin]]\nurl = \"https://x/y.wasm\"\nsha256 = \"{}\"\n",
            "g".repeat(64)
        ),
        3,
        "plugin[1].sha256",
        "must be 64 hex digits",
    );
    rejects(
        &format!("[[plugin]]\nurl = \"file:///etc/y.wasm\"\nsha256 = \"{HEX}\"\n"),
        2,
        "plugin[1].url",
        "must be an http:// or https:// URL",
    );
    rejects(
        "[[plugin]]\noci = \"127.0.0.1:5000/guards/x:v1\"\n",
        2,
        "plugin[1].oci",
        "names no digest",
    );
    rejects(
        &format!("[[plugin]]\noci = \"{oci}\"\nsha256 = \"{HEX}\"\n"),
        3,
        "plugin[1].sha256",
        "an `oci` reference carries its digest",
    );
    rejects(
        &format!("[[plugin]]\nurl = \"https://x/y.wasm\"\nsha256 = \"{HEX}\"\nplain_http = true\n"),
        4,
        "plugin[1].plain_http",
        "goes with `oci` only",
    );
    rejects(
        "[ceilings]\nplugin_sources = [\"ftp://x\"]\n",
        2,
        "ceilings.plugin_sources",
        "must be `host[:port]`",
    );
    // Names default to the URL's file stem and the repository's last part.
    let m = parse(
        &format!(
            "[[plugin]]\nurl = \"https://p.example.com/g/pii.wasm\"\nsha256 = \"{HEX}\"\n\n\
             [[plugin]]\noci = \"{oci}\"\n\n[[plugin]]\noci = \"ghcr.io/acme/guards/audit@sha256:{HEX}\"\n"
        ),
        Scope::Global,
    )
    .expect("parses");
    let names: Vec<&str> = m.plugins.iter().map(|e| e.spec.name.as_str()).collect();
    assert_eq!(names, ["pii", "x", "audit"]);
    assert!(matches!(
        &m.plugins[1].remote,
        Some(toolgate::manifest::Remote::Oci {
            plain_http: true,
            ..
        })
    ));
    assert!(matches!(
        &m.plugins[2].remote,
        Some(toolgate::manifest::Remote::Oci {
            plain_http: false,
            ..
        })
    ));
}

/// `toolgate push FILE oci://REF --plain-http`: the pinned reference it
/// prints.
fn push(file: &str, reference: &str) -> String {
    let out = std::process::Command::new(BIN)
        .args(["push", file, reference, "--plain-http"])
        .output()
        .expect("run toolgate push");
    assert!(
        out.status.success(),
        "toolgate push failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string()
}

#[tokio::test]
async fn an_oci_artifact_pushed_with_toolgate_push_loads_by_digest_and_outlives_its_registry() {
    let mut registry = OciRegistry::start();
    let at = registry.authority();
    let pinned = push(SQL_GUARD, &format!("oci://{at}/guards/sql-guard:v1"));
    let prefix = format!("{at}/guards/sql-guard:v1@sha256:");
    let digest = pinned
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{pinned}"));
    assert_eq!(digest.len(), 64, "{pinned}");
    // The same bytes push to the same digest.
    assert_eq!(
        push(SQL_GUARD, &format!("oci://{at}/guards/sql-guard:v1")),
        pinned
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    manifest(dir.path(), &format!("[[plugin]]\noci = \"{pinned}\"\n"));
    let reg = open(dir.path(), Some(cache.path())).await;
    assert!(
        reg.plugin_set().errors.is_empty(),
        "{:?}",
        reg.plugin_set().errors
    );
    let listed = described(&reg);
    assert_eq!(listed["global"][0]["name"], "sql-guard", "{listed}");
    assert_eq!(
        listed["global"][0]["path"],
        format!("oci://{pinned}").as_str()
    );
    assert_eq!(listed["global"][0]["digest"], sha(SQL_GUARD).as_str());
    decides_as_the_sql_guard(&reg, None).await;
    // The manifest and the layer are kept, each under its digest.
    let blobs = cache.path().join("blobs/sha256");
    assert_eq!(
        std::fs::read(blobs.join(sha(SQL_GUARD))).expect("layer kept"),
        bytes(SQL_GUARD)
    );
    assert!(blobs.join(digest).is_file(), "the OCI manifest is kept");
    drop(reg);

    // A tag alone is refused at load, with file, line and key.
    let tagged = dir.path().join("tagged");
    manifest(
        &tagged,
        &format!("[[plugin]]\noci = \"{at}/guards/sql-guard:v1\"\n"),
    );
    let reg = open(&tagged, None).await;
    let refused = errors_of(&reg, IssueKind::Manifest);
    assert_eq!(refused.len(), 1, "{:?}", reg.plugin_set().errors);
    let want = format!(
        "{}:2: key `plugin[1].oci`: \"{at}/guards/sql-guard:v1\" names no digest",
        tagged.join("toolgate.toml").display()
    );
    assert!(
        refused[0].starts_with(&want),
        "{}\nwanted {want}",
        refused[0]
    );
    drop(reg);

    // A digest the registry does not hold is not fetched.
    let unknown = dir.path().join("unknown");
    manifest(
        &unknown,
        &format!("[[plugin]]\noci = \"{at}/guards/sql-guard@sha256:{HEX}\"\n"),
    );
    let reg = open(&unknown, None).await;
    let fetch = errors_of(&reg, IssueKind::Fetch);
    assert_eq!(fetch.len(), 1, "{:?}", reg.plugin_set().errors);
    assert!(fetch[0].contains("not fetched: HTTP 404"), "{}", fetch[0]);
    drop(reg);

    // The registry stopped: a restart serves the kept copy.
    registry.stop();
    let reg = open(dir.path(), Some(cache.path())).await;
    assert!(
        reg.plugin_set().errors.is_empty(),
        "{:?}",
        reg.plugin_set().errors
    );
    decides_as_the_sql_guard(&reg, None).await;
    // Without the kept copy it is reported, not loaded.
    let reg = open(dir.path(), None).await;
    let fetch = errors_of(&reg, IssueKind::Fetch);
    assert_eq!(fetch.len(), 1, "{:?}", reg.plugin_set().errors);
    assert!(
        fetch[0].starts_with(&format!("oci://{pinned}: not fetched:")),
        "{}",
        fetch[0]
    );
}

/// `toolgate push FILE REF` without `--plain-http`: its exit status,
/// stdout and stderr.
fn push_plainly(file: &str, reference: &str) -> (bool, String, String) {
    let out = std::process::Command::new(BIN)
        .args(["push", file, reference])
        .output()
        .expect("run toolgate push");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).trim().to_string();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

#[test]
fn push_to_a_loopback_registry_speaks_plain_http_as_a_manifest_does() {
    let registry = OciRegistry::start();
    let at = registry.authority();
    // Without --plain-http: the same pinned reference as with it.
    let (ok, pinned, stderr) = push_plainly(SQL_GUARD, &format!("oci://{at}/guards/plain:v1"));
    assert!(ok, "push to loopback without --plain-http failed: {stderr}");
    assert_eq!(
        push(SQL_GUARD, &format!("oci://{at}/guards/plain:v1")),
        pinned
    );
    // A registry not named as loopback (0.0.0.0 reaches this machine) is
    // spoken to over HTTPS; the plain-HTTP registry fails that, and the
    // error names the way out.
    let port = at.rsplit(':').next().expect("a port");
    let (ok, _, stderr) = push_plainly(SQL_GUARD, &format!("oci://0.0.0.0:{port}/guards/plain:v1"));
    assert!(!ok, "an HTTPS push to a plain-HTTP registry succeeded");
    assert!(stderr.contains("--plain-http"), "{stderr}");
}

#[tokio::test]
async fn a_tenant_loads_from_an_allowed_registry() {
    let registry = OciRegistry::start();
    let at = registry.authority();
    let pinned = toolgate::remote::push(
        &bytes(SQL_GUARD),
        &format!("{at}/acme/sql-guard:v2"),
        &toolgate::remote::PushOptions {
            plain_http: true,
            ..Default::default()
        },
    )
    .await
    .expect("pushed");
    let dir = tempfile::tempdir().expect("tempdir");
    manifest(
        &dir.path().join("tenants/acme"),
        &format!("[[plugin]]\noci = \"{pinned}\"\n"),
    );
    manifest(
        dir.path(),
        &format!("[ceilings]\nplugin_sources = [\"{at}\"]\n"),
    );
    let reg = open(dir.path(), None).await;
    assert!(
        reg.plugin_set().errors.is_empty(),
        "{:?}",
        reg.plugin_set().errors
    );
    decides_as_the_sql_guard(&reg, Some("acme")).await;
    assert!(
        !steers_delete(&reg, None).await,
        "acme's guard is acme's alone"
    );
}
