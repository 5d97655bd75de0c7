//! `toolgate.toml`: parsing, every rejection (file, line and key named),
//! and manifests driving a registry's chains.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toolgate::OnError;
use toolgate::{ManifestError, manifest::Manifest, manifest::Scope};

const MAX_MEMORY: usize = 1 << 30;

/// A temp dir holding `a.wasm` and `b.wasm` (any bytes: parsing only checks
/// that the files exist) and the manifest `text`.
fn dir_with(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.wasm"), b"a").expect("write");
    std::fs::write(dir.path().join("b.wasm"), b"b").expect("write");
    std::fs::write(dir.path().join("toolgate.toml"), text).expect("write");
    dir
}

fn parse(text: &str, scope: Scope) -> Result<Manifest, ManifestError> {
    let dir = dir_with(text);
    Manifest::load(dir.path(), scope, MAX_MEMORY).map(|m| m.expect("manifest present"))
}

/// Asserts `text` is rejected at `line` with `key`, the message holding
/// `needle`, and the rendered error naming the file.
fn rejects(text: &str, scope: Scope, line: usize, key: &str, needle: &str) {
    let err = parse(text, scope).expect_err("manifest must be rejected");
    assert_eq!(err.line, line, "line of {err}");
    assert_eq!(err.key.as_deref(), Some(key), "key of {err}");
    assert!(err.message.contains(needle), "{needle:?} not in {err}");
    let shown = err.to_string();
    assert!(shown.contains("toolgate.toml:"), "{shown}");
    assert!(shown.contains(&format!(":{line}:")), "{shown}");
    assert!(shown.contains(key), "{shown}");
}

#[test]
fn full_manifest_parses_with_units_and_config() {
    let m = parse(
        r#"
[defaults]
timeout_ms = 150
on_error = "deny"

[[plugin]]
name = "first"
path = "b.wasm"
fuel = 1_000_000
memory_mib = 64
timeout_ms = 50
max_return_kib = 8
host_calls = 7
log_kib = 2
on_error = "skip"
tenants = ["acme", "globex"]
config = { tables = ["users"], limit = 10, ratio = 0.5, strict = true, nested = { a = "b" } }

[[plugin]]
path = "a.wasm"
"#,
        Scope::Global,
    )
    .expect("parses");
    assert_eq!(m.plugins.len(), 2);
    let first = &m.plugins[0];
    assert_eq!(first.spec.name, "first");
    assert!(first.spec.path.ends_with("b.wasm"));
    assert_eq!(first.spec.limits.fuel, 1_000_000);
    assert_eq!(first.spec.limits.memory_bytes, 64 << 20);
    assert_eq!(first.spec.limits.timeout, Duration::from_millis(50));
    assert_eq!(first.spec.limits.max_return_bytes, 8 << 10);
    assert_eq!(first.spec.limits.host_calls, 7);
    assert_eq!(first.spec.limits.log_bytes, 2 << 10);
    assert_eq!(first.spec.on_error, OnError::Skip);
    assert_eq!(
        first
            .tenants
            .as_ref()
            .map(|t| t.iter().map(|t| t.as_str()).collect::<Vec<_>>()),
        Some(vec!["acme", "globex"])
    );
    assert_eq!(
        first.spec.config,
        json!({"tables": ["users"], "limit": 10, "ratio": 0.5, "strict": true, "nested": {"a": "b"}})
    );
    // The second takes its name from the file and the [defaults].
    let second = &m.plugins[1];
    assert_eq!(second.spec.name, "a");
    assert_eq!(second.spec.limits.timeout, Duration::from_millis(150));
    assert_eq!(second.spec.limits.fuel, toolgate::Limits::default().fuel);
    assert_eq!(second.spec.on_error, OnError::Deny);
    assert_eq!(second.spec.config, json!({}));
    assert_eq!(second.tenants, None);
}

#[test]
fn empty_manifest_runs_nothing_and_no_manifest_is_none() {
    assert!(parse("", Scope::Global).expect("parses").plugins.is_empty());
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(
        Manifest::load(dir.path(), Scope::Global, MAX_MEMORY)
            .expect("ok")
            .is_none()
    );
}

#[test]
fn unknown_key_in_a_plugin_is_rejected() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\ntimeout = 5\n",
        Scope::Global,
        3,
        "plugin[1].timeout",
        "unknown field",
    );
}

#[test]
fn unknown_top_level_table_is_rejected() {
    rejects(
        "[[plugins]]\npath = \"a.wasm\"\n",
        Scope::Global,
        1,
        "plugins",
        "unknown field",
    );
}

#[test]
fn unknown_key_in_defaults_is_rejected() {
    rejects(
        "[defaults]\nmemory_mb = 5\n",
        Scope::Global,
        2,
        "defaults.memory_mb",
        "unknown field",
    );
}

#[test]
fn wrong_type_is_rejected() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\n\nfuel = \"lots\"\n",
        Scope::Global,
        4,
        "plugin[1].fuel",
        "invalid type",
    );
}

/// A value of the wrong type is reported with its key's full path —
/// which plugin, which table — and a datetime as a datetime.
#[test]
fn type_errors_keep_the_full_key_path() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\n[[plugin]]\npath = \"b.wasm\"\nhost_calls = true\n",
        Scope::Global,
        5,
        "plugin[2].host_calls",
        "invalid type: boolean",
    );
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\nfuel = 1979-05-27T07:32:00Z\n",
        Scope::Global,
        3,
        "plugin[1].fuel",
        "invalid type: datetime",
    );
    rejects(
        "[defaults]\ntimeout_ms = 07:32:00\n",
        Scope::Global,
        2,
        "defaults.timeout_ms",
        "invalid type: datetime",
    );
    rejects(
        "[shares.tenants.acme]\nrate = \"fast\"\n",
        Scope::Global,
        2,
        "shares.tenants.acme.rate",
        "invalid type: string",
    );
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\ntenants = [\"a\", 2]\n",
        Scope::Global,
        3,
        "plugin[1].tenants[2]",
        "invalid type: integer",
    );
}

#[test]
fn negative_number_is_rejected() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\nmemory_mib = -1\n",
        Scope::Global,
        3,
        "plugin[1].memory_mib",
        "",
    );
}

#[test]
fn bad_on_error_is_rejected() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\non_error = \"explode\"\n",
        Scope::Global,
        3,
        "plugin[1].on_error",
        "unknown variant",
    );
}

/// `mode`: `enforce` unless `shadow` is written, in the global manifest and
/// a tenant's alike; anything else is refused with its file, line and key.
#[test]
fn mode_is_enforce_unless_shadow_and_nothing_else() {
    use toolgate::Mode;
    let text = "[[plugin]]\nname = \"one\"\npath = \"a.wasm\"\n\
                [[plugin]]\nname = \"two\"\npath = \"a.wasm\"\nmode = \"shadow\"\n\
                [[plugin]]\nname = \"three\"\npath = \"b.wasm\"\nmode = \"enforce\"\n";
    for scope in [Scope::Global, Scope::Tenant] {
        let m = parse(text, scope).expect("parses");
        let modes: Vec<Mode> = m.plugins.iter().map(|p| p.spec.mode).collect();
        assert_eq!(modes, [Mode::Enforce, Mode::Shadow, Mode::Enforce]);
    }
    for (scope, value) in [
        (Scope::Global, "\"monitor\""),
        (Scope::Tenant, "\"Shadow\""),
        (Scope::Global, "true"),
    ] {
        rejects(
            &format!("[[plugin]]\npath = \"a.wasm\"\n\nmode = {value}\n"),
            scope,
            4,
            "plugin[1].mode",
            "",
        );
    }
    let err = parse(
        "[[plugin]]\npath = \"a.wasm\"\nmode = \"monitor\"\n",
        Scope::Global,
    )
    .expect_err("refused");
    assert!(
        err.message.contains("expected `enforce` or `shadow`"),
        "{err}"
    );
}

#[test]
fn prepared_is_auto_unless_a_count_is_given() {
    use toolgate::Depth;
    let m = parse(
        "[[plugin]]\nname = \"one\"\npath = \"a.wasm\"\n\
         [[plugin]]\nname = \"two\"\npath = \"a.wasm\"\nprepared = \"auto\"\n\
         [[plugin]]\nname = \"three\"\npath = \"b.wasm\"\nprepared = 0\n\
         [[plugin]]\nname = \"four\"\npath = \"b.wasm\"\nprepared = 8\n",
        Scope::Global,
    )
    .expect("parses");
    let depths: Vec<Depth> = m.plugins.iter().map(|p| p.spec.prepared).collect();
    assert_eq!(
        depths,
        [Depth::Auto, Depth::Auto, Depth::Fixed(0), Depth::Fixed(8)]
    );
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\nprepared = \"sometimes\"\n",
        Scope::Global,
        3,
        "plugin[1].prepared",
        "is not \"auto\"",
    );
}

#[test]
fn out_of_range_limits_are_rejected() {
    for (line, key) in [
        ("fuel = 0", "plugin[1].fuel"),
        ("memory_mib = 0", "plugin[1].memory_mib"),
        ("memory_mib = 4096", "plugin[1].memory_mib"),
        ("timeout_ms = 0", "plugin[1].timeout_ms"),
        ("timeout_ms = 600001", "plugin[1].timeout_ms"),
        ("max_return_kib = 0", "plugin[1].max_return_kib"),
        ("log_kib = 2000000", "plugin[1].log_kib"),
        ("prepared = 9", "plugin[1].prepared"),
        ("prepared = -1", "plugin[1].prepared"),
    ] {
        rejects(
            &format!("[[plugin]]\npath = \"a.wasm\"\n{line}\n"),
            Scope::Global,
            3,
            key,
            "out of range",
        );
    }
    rejects(
        "[defaults]\ntimeout_ms = 0\n",
        Scope::Global,
        2,
        "defaults.timeout_ms",
        "out of range",
    );
}

#[test]
fn missing_path_is_rejected() {
    rejects(
        "[[plugin]]\nname = \"x\"\n",
        Scope::Global,
        1,
        "path",
        "missing field",
    );
}

#[test]
fn missing_file_is_rejected() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\n[[plugin]]\npath = \"gone.wasm\"\n",
        Scope::Global,
        4,
        "plugin[2].path",
        "is missing or not a regular file",
    );
}

#[test]
fn escaping_paths_are_rejected() {
    for path in ["../a.wasm", "/etc/passwd", "sub/../../a.wasm", ""] {
        rejects(
            &format!("[[plugin]]\npath = {path:?}\n"),
            Scope::Global,
            2,
            "plugin[1].path",
            "relative path",
        );
    }
}

#[test]
fn duplicate_names_are_rejected() {
    rejects(
        "[[plugin]]\nname = \"g\"\npath = \"a.wasm\"\n\n[[plugin]]\nname = \"g\"\npath = \"b.wasm\"\n",
        Scope::Global,
        6,
        "plugin[2].name",
        "duplicate plugin name",
    );
    // Also when the name is the default (the file's stem).
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\n[[plugin]]\npath = \"./a.wasm\"\n",
        Scope::Global,
        4,
        "plugin[2].name",
        "duplicate plugin name",
    );
}

#[test]
fn bad_plugin_name_is_rejected() {
    rejects(
        "[[plugin]]\nname = \"has space\"\npath = \"a.wasm\"\n",
        Scope::Global,
        2,
        "plugin[1].name",
        "invalid plugin name",
    );
}

#[test]
fn duplicate_key_is_rejected() {
    let err = parse(
        "[[plugin]]\npath = \"a.wasm\"\nfuel = 1\nfuel = 2\n",
        Scope::Global,
    )
    .expect_err("rejected");
    assert_eq!(err.line, 4, "{err}");
    assert_eq!(err.key.as_deref(), Some("fuel"), "{err}");
}

#[test]
fn toml_syntax_error_names_the_line() {
    let err =
        parse("[[plugin]]\npath = \"a.wasm\nfuel = 1\n", Scope::Global).expect_err("rejected");
    assert_eq!(err.line, 2, "{err}");
}

#[test]
fn tenants_rules() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\ntenants = [\"acme\"]\n",
        Scope::Tenant,
        3,
        "plugin[1].tenants",
        "only in the global manifest",
    );
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\ntenants = []\n",
        Scope::Global,
        3,
        "plugin[1].tenants",
        "empty list",
    );
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\ntenants = [\"../etc\"]\n",
        Scope::Global,
        3,
        "plugin[1].tenants",
        "invalid tenant name",
    );
}

#[test]
fn config_must_be_a_table() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\nconfig = \"x\"\n",
        Scope::Global,
        3,
        "plugin[1].config",
        "invalid type",
    );
}

#[test]
fn manifest_order_limits_and_config_reach_the_guard() {
    // Two scripted guards, listed in the reverse of file-name order, each
    // appending its name to the args' trail: the trail shows the order and
    // that each got its own config.
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["one.wasm", "two.wasm", "unlisted.wasm"] {
        std::fs::copy(toolgate_tests::SCRIPTED, dir.path().join(name)).expect("copy");
    }
    std::fs::write(
        dir.path().join("toolgate.toml"),
        r#"
[[plugin]]
name = "second"
path = "two.wasm"
timeout_ms = 75
config = { rewrite = { append_trail = "two" } }

[[plugin]]
name = "first"
path = "one.wasm"
on_error = "deny"
config = { rewrite = { append_trail = "one" } }
"#,
    )
    .expect("write");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let reg = crate::reload::open(dir.path(), None).await;
        let set = reg.plugin_set();
        assert!(set.errors.is_empty(), "{:?}", set.errors);
        let chain = set.chain(None);
        let names: Vec<&str> = chain.plugins().iter().map(|p| p.name()).collect();
        assert_eq!(names, ["second", "first"]);
        assert_eq!(
            chain.plugins()[0].limits().timeout,
            Duration::from_millis(75)
        );
        assert_eq!(chain.plugins()[1].on_error(), OnError::Deny);
        let d = chain
            .rewrite(&crate::dispatch("t", json!({}), &["t"]), &crate::no_state())
            .await;
        assert_eq!(
            d.result.expect("rewritten").args["trail"],
            json!(["two", "one"])
        );
    });
}

#[test]
fn manifest_error_is_a_load_issue_naming_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(toolgate_tests::SQL_GUARD, dir.path().join("sql.wasm")).expect("copy");
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"sql.wasm\"\nmemory = 5\n",
    )
    .expect("write");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let reg = crate::reload::open(dir.path(), None).await;
        let set = reg.plugin_set();
        assert_eq!(set.errors.len(), 1);
        let e = &set.errors[0];
        assert_eq!(e.path, Path::new(dir.path()).join("toolgate.toml"));
        assert!(e.message.contains(":3:"), "{}", e.message);
        assert!(e.message.contains("memory"), "{}", e.message);
        // Nothing loaded: a bad manifest never silently falls back to
        // running every file.
        assert!(set.chain(None).plugins().is_empty());
    });
}

/// Every load error says its kind: a rejected manifest is `manifest`, a
/// component that is not one is `compile`, and `toolgate list` / `serve`
/// tell manifest errors apart by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_issues_say_their_kind() {
    use toolgate::IssueKind;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").expect("write");
    let tenant = dir.path().join("tenants").join("acme");
    std::fs::create_dir_all(&tenant).expect("tenant dir");
    std::fs::write(tenant.join("toolgate.toml"), "[[plugin]]\nfuel = 1\n").expect("write");
    let registry = toolgate::Registry::open(super::engine(), dir.path())
        .await
        .expect("registry");
    let set = registry.plugin_set();
    let kinds: Vec<(IssueKind, String)> = set
        .errors
        .iter()
        .map(|e| (e.kind, e.path.display().to_string()))
        .collect();
    assert!(
        kinds
            .iter()
            .any(|(k, p)| *k == IssueKind::Compile && p.ends_with("core.wasm")),
        "{kinds:?}"
    );
    let manifest = set
        .errors
        .iter()
        .find(|e| e.kind == IssueKind::Manifest)
        .expect("the tenant's manifest is rejected");
    assert!(manifest.path.ends_with("tenants/acme/toolgate.toml"));
    assert!(
        manifest
            .message
            .contains(":1: key `path`: missing field `path`"),
        "{}",
        manifest.message
    );
    let listed = serde_json::to_value(set.describe()).expect("JSON");
    assert!(
        listed["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .any(|e| e["kind"] == "manifest"),
        "{listed}"
    );
}

#[test]
fn snapshot_key_takes_auto_true_or_false() {
    use toolgate::SnapshotMode;
    let m = parse(
        "[defaults]\nsnapshot = false\n\n[[plugin]]\npath = \"a.wasm\"\n\n[[plugin]]\npath = \"b.wasm\"\nsnapshot = \"auto\"\n",
        Scope::Tenant,
    )
    .expect("parses");
    let modes: Vec<SnapshotMode> = m.plugins.iter().map(|p| p.spec.snapshot).collect();
    assert_eq!(modes, [SnapshotMode::Off, SnapshotMode::Auto]);
    let m = parse(
        "[[plugin]]\npath = \"a.wasm\"\nsnapshot = true\n",
        Scope::Global,
    )
    .expect("parses");
    assert_eq!(m.plugins[0].spec.snapshot, SnapshotMode::On);
    let m = parse("[[plugin]]\npath = \"a.wasm\"\n", Scope::Global).expect("parses");
    assert_eq!(
        m.plugins[0].spec.snapshot,
        SnapshotMode::Auto,
        "the default"
    );
}

#[test]
fn bad_snapshot_values_are_rejected() {
    rejects(
        "[[plugin]]\npath = \"a.wasm\"\n\nsnapshot = \"yes\"\n",
        Scope::Global,
        4,
        "plugin[1].snapshot",
        "must be \"auto\", true or false, not \"yes\"",
    );
    rejects(
        "[defaults]\nsnapshot = 1\n[[plugin]]\npath = \"a.wasm\"\n",
        Scope::Tenant,
        2,
        "defaults.snapshot",
        "not a value of type integer",
    );
}

/// `[shares.tenants.<name>]` gives one tenant a rate of its own in place
/// of `tenant_rate` (0: none at all); a bad tenant name, a missing rate, a
/// burst without a rate and an unknown key are refused, each with its key.
#[test]
fn a_tenant_may_have_a_rate_of_its_own() {
    use toolgate::Rate;
    let m = parse(
        "[shares]\ntenant_rate = 10\n\n[shares.tenants.acme]\nrate = 1000\nburst = 50\n\n\
         [shares.tenants.trusted]\nrate = 0\n",
        Scope::Global,
    )
    .expect("parses");
    let s = &m.policy.shares;
    assert_eq!(s.tenant_lends("acme").rate, Rate::new(1000, 50));
    assert_eq!(s.tenant_lends("trusted").rate, None);
    assert_eq!(s.tenant_lends("other").rate, Rate::new(10, 10));

    rejects(
        "[shares.tenants.\"../b\"]\nrate = 1\n",
        Scope::Global,
        1,
        "shares.tenants.../b",
        "tenant",
    );
    rejects(
        "[shares.tenants.acme]\nburst = 5\n",
        Scope::Global,
        1,
        "shares.tenants.acme.rate",
        "missing",
    );
    rejects(
        "[shares.tenants.acme]\nrate = 0\nburst = 5\n",
        Scope::Global,
        3,
        "shares.tenants.acme.burst",
        "no effect without a rate",
    );
    rejects(
        "[shares.tenants.acme]\nrate = 2000000\n",
        Scope::Global,
        2,
        "shares.tenants.acme.rate",
        "out of range",
    );
}

#[test]
fn outbound_http_keys_parse_and_bad_ones_name_their_key() {
    let m = parse(
        r#"
[[plugin]]
path = "a.wasm"
allowed_hosts = ["https://api.example.com", "http://*.corp.example:8080", "http://127.0.0.1:9000"]
http_methods = ["get", "POST"]
allowed_networks = ["10.1.0.0/16"]
http_requests = 2
http_request_kib = 8
http_response_kib = 32
"#,
        Scope::Global,
    )
    .expect("parses");
    let spec = &m.plugins[0].spec;
    let hosts: Vec<String> = spec.http.hosts.iter().map(ToString::to_string).collect();
    assert_eq!(
        hosts,
        [
            "https://api.example.com",
            "http://*.corp.example:8080",
            "http://127.0.0.1:9000"
        ]
    );
    assert_eq!(spec.http.methods, ["GET", "POST"]);
    assert_eq!(spec.http.networks.len(), 1);
    assert_eq!(
        (
            spec.limits.http_requests,
            spec.limits.http_request_bytes,
            spec.limits.http_response_bytes
        ),
        (2, 8 << 10, 32 << 10)
    );
    // Without the keys: no network.
    let m = parse("[[plugin]]\npath = \"a.wasm\"\n", Scope::Global).expect("parses");
    assert!(m.plugins[0].spec.http.is_empty());
    let entry = "[[plugin]]\npath = \"a.wasm\"\n";
    rejects(
        &format!("{entry}allowed_hosts = [\"api.example.com\"]\n"),
        Scope::Global,
        3,
        "plugin[1].allowed_hosts",
        "no scheme",
    );
    rejects(
        &format!("{entry}http_methods = [\"FETCH\"]\n"),
        Scope::Global,
        3,
        "plugin[1].http_methods",
        "\"FETCH\" is not one of",
    );
    rejects(
        &format!("{entry}allowed_networks = [\"10.0.0.0/40\"]\n"),
        Scope::Global,
        3,
        "plugin[1].allowed_networks",
        "is not a network",
    );
    rejects(
        &format!("{entry}http_requests = 5000\n"),
        Scope::Global,
        3,
        "plugin[1].http_requests",
        "out of range",
    );
}

#[test]
fn a_tenant_grant_may_only_narrow_the_operators() {
    let global = dir_with(
        r#"
[ceilings]
allowed_hosts = ["https://*.example.com", "http://127.0.0.1:9000"]
allowed_networks = ["10.0.0.0/8"]
http_requests = 3
"#,
    );
    let policy = Manifest::load(global.path(), Scope::Global, MAX_MEMORY)
        .expect("the global manifest parses")
        .expect("present")
        .policy;
    let tenant = |text: &str| {
        let dir = dir_with(text);
        Manifest::load_with(dir.path(), Scope::Tenant, MAX_MEMORY, &policy)
            .map(|m| m.expect("present"))
    };
    let entry = "[[plugin]]\npath = \"a.wasm\"\n";
    let ok = tenant(&format!(
        "{entry}allowed_hosts = [\"https://api.eu.example.com\", \"http://127.0.0.1:9000\"]\nallowed_networks = [\"10.2.0.0/16\"]\n"
    ))
    .expect("within the grant");
    // A limit left unset is lowered to the ceiling.
    assert_eq!(ok.plugins[0].spec.limits.http_requests, 3);
    for (extra, line, key, says) in [
        (
            "allowed_hosts = [\"https://example.org\"]",
            3,
            "plugin[1].allowed_hosts",
            "https://example.org is not within the operator's grant",
        ),
        (
            "allowed_hosts = [\"http://api.example.com\"]",
            3,
            "plugin[1].allowed_hosts",
            "is not within",
        ),
        (
            "allowed_hosts = [\"http://127.0.0.1:9001\"]",
            3,
            "plugin[1].allowed_hosts",
            "is not within",
        ),
        (
            "allowed_hosts = [\"https://a.example.com\"]\nallowed_networks = [\"192.168.0.0/16\"]",
            4,
            "plugin[1].allowed_networks",
            "192.168.0.0/16 is not within",
        ),
        (
            "allowed_hosts = [\"https://a.example.com\"]\nhttp_methods = [\"PUT\"]",
            4,
            "plugin[1].http_methods",
            "PUT is not within",
        ),
        (
            "http_requests = 4",
            3,
            "plugin[1].http_requests",
            "above the operator's ceiling",
        ),
    ] {
        let err = tenant(&format!("{entry}{extra}\n")).expect_err(extra);
        assert_eq!((err.line, err.key.as_deref()), (line, Some(key)), "{err}");
        assert!(err.message.contains(says), "{err}");
    }
    // With no `[ceilings]` grant at all, a tenant plugin may have none.
    let err = Manifest::load_with(
        dir_with(&format!(
            "{entry}allowed_hosts = [\"https://api.example.com\"]\n"
        ))
        .path(),
        Scope::Tenant,
        MAX_MEMORY,
        &toolgate::Policy::default(),
    )
    .expect_err("no grant to narrow");
    assert!(
        err.message.contains("(none; `[ceilings] allowed_hosts`"),
        "{err}"
    );
}
