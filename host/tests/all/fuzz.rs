//! Property-based tests of everything a client or a tenant can hand the
//! host as text: manifests, events, request bodies, tenant names, the
//! tenants' tokens file. For arbitrary input: never a panic, and every
//! error names what and where. For valid input: it is accepted and
//! round-trips.
//!
//! Each property runs `PROPTEST_CASES` cases (256 unless set); `scripts/fuzz`
//! runs them with a million or more.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value, json};
use toolgate::TenantName;
use toolgate::event::{Event, Seam};
use toolgate::manifest::{Manifest, Scope};
use tower::ServiceExt;

/// The default config (which reads `PROPTEST_CASES`), without writing
/// regression files into the source tree.
fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

// ---- strategies ---------------------------------------------------------

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        any::<String>().prop_map(Value::String),
        "[a-z_]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field_name(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Field names: mostly the events' own, sometimes anything.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "run_id",
            "tool_name",
            "call_id",
            "args",
            "mode",
            "intent_label",
            "total_tools",
            "narrowed_tool_names",
            "iteration_index",
            "node_name",
            "available_tools",
            "result",
            "error",
            "event",
            "state",
            "tenant",
        ])
        .prop_map(str::to_string),
        any::<String>(),
    ]
}

fn seam() -> impl Strategy<Value = Seam> {
    prop::sample::select(Seam::ALL.to_vec())
}

fn args_object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec(("[a-z]{1,8}", json_value()), 0..4)
        .prop_map(|kv| kv.into_iter().collect())
}

/// A valid event of each seam, as JSON.
fn valid_event(seam: Seam) -> BoxedStrategy<Value> {
    let names = prop::collection::vec("[a-z_]{1,10}", 0..5);
    match seam {
        Seam::Routing => (any::<String>(), names, any::<u32>(), any::<String>())
            .prop_map(|(run, tools, total, label)| {
                json!({"run_id": run, "mode": "enforce", "intent_label": label,
                    "total_tools": total, "narrowed_tool_names": tools})
            })
            .boxed(),
        Seam::Rewrite => (
            any::<String>(),
            "[a-z_]{1,10}",
            args_object(),
            names,
            any::<u32>(),
        )
            .prop_map(|(run, tool, args, available, i)| {
                json!({"run_id": run, "iteration_index": i, "node_name": "react",
                    "call_id": "c", "tool_name": tool, "args": args,
                    "available_tools": available})
            })
            .boxed(),
        Seam::Steering => (any::<String>(), any::<String>(), args_object())
            .prop_map(|(run, tool, args)| {
                json!({"run_id": run, "tool_name": tool, "call_id": "c", "args": args})
            })
            .boxed(),
        Seam::Result => (any::<String>(), "[a-z_]{1,10}", json_value())
            .prop_map(|(run, tool, result)| {
                json!({"run_id": run, "tool_name": tool, "result": result, "call_id": "c"})
            })
            .boxed(),
        Seam::Response => (any::<String>(), any::<i32>(), any::<String>(), any::<String>())
            .prop_map(|(run, i, model, content)| {
                json!({"run_id": run, "iteration_index": i, "model": model,
                    "node_name": "react", "original_content": content})
            })
            .boxed(),
    }
}

fn seam_and_event() -> impl Strategy<Value = (Seam, Value)> {
    seam().prop_flat_map(|s| valid_event(s).prop_map(move |e| (s, e)))
}

/// Tenant names: valid ones, near misses, and anything.
fn tenant_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9_.-]{0,70}",
        "\\.{1,3}[a-z]{0,4}",
        "[a-z]{0,4}[/\\\\ \u{0}:][a-z]{0,4}",
        any::<String>(),
    ]
}

fn is_valid_tenant(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

// ---- manifests ----------------------------------------------------------

/// A directory holding the component files manifests may name.
fn manifest_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["a.wasm", "b.wasm", "c.wasm"] {
        std::fs::write(dir.path().join(name), b"\0asm").expect("write");
    }
    let path = dir.path().join("toolgate.toml");
    (dir, path)
}

/// One generated plugin table and the values it must parse to.
#[derive(Clone, Debug)]
struct PluginToml {
    name: String,
    file: &'static str,
    fuel: Option<u64>,
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
    host_calls: Option<u32>,
    deny: Option<bool>,
    tenants: Option<Vec<String>>,
    config: Vec<(String, i64)>,
}

impl PluginToml {
    fn render(&self) -> String {
        let mut t = format!(
            "[[plugin]]\nname = {:?}\npath = {:?}\n",
            self.name, self.file
        );
        let mut num = |k: &str, v: Option<u64>| {
            if let Some(v) = v {
                t.push_str(&format!("{k} = {v}\n"));
            }
        };
        num("fuel", self.fuel);
        num("memory_mib", self.memory_mib);
        num("timeout_ms", self.timeout_ms);
        num("host_calls", self.host_calls.map(u64::from));
        if let Some(deny) = self.deny {
            t.push_str(if deny {
                "on_error = \"deny\"\n"
            } else {
                "on_error = \"skip\"\n"
            });
        }
        if let Some(tenants) = &self.tenants {
            t.push_str(&format!("tenants = {tenants:?}\n"));
        }
        if !self.config.is_empty() {
            t.push_str("[plugin.config]\n");
            for (k, v) in &self.config {
                t.push_str(&format!("{k} = {v}\n"));
            }
        }
        t
    }
}

fn plugin_toml() -> impl Strategy<Value = PluginToml> {
    (
        "[a-z][a-z0-9_-]{0,15}",
        prop::sample::select(vec!["a.wasm", "b.wasm", "c.wasm"]),
        prop::option::of(1_000u64..1_000_000_000),
        prop::option::of(1u64..=128),
        prop::option::of(1u64..=10_000),
        prop::option::of(1u32..=10_000),
        prop::option::of(any::<bool>()),
        prop::option::of(prop::collection::vec("[a-z][a-z0-9_-]{0,10}", 1..4)),
        prop::collection::btree_map("[a-z]{1,8}", any::<i64>(), 0..4),
    )
        .prop_map(
            |(name, file, fuel, memory_mib, timeout_ms, host_calls, deny, tenants, config)| {
                PluginToml {
                    name,
                    file,
                    fuel,
                    memory_mib,
                    timeout_ms,
                    host_calls,
                    deny,
                    tenants,
                    config: config.into_iter().collect(),
                }
            },
        )
}

/// Checks that a manifest error names the file, a line inside the text (or
/// just past its end) and says something.
fn assert_names_where(err: &toolgate::ManifestError, path: &Path, text: &str) {
    assert_eq!(err.path, path);
    let lines = text.lines().count().max(1);
    assert!(
        err.line >= 1 && err.line <= lines + 1,
        "line {} of {lines}: {err}",
        err.line
    );
    assert!(!err.message.trim().is_empty(), "{err:?}");
    assert!(
        err.to_string().contains(&format!(":{}:", err.line)),
        "{err}"
    );
}

#[test]
fn fuzz_manifest_text_never_panics_and_errors_say_where() {
    let (_dir, path) = manifest_dir();
    let text = prop_oneof![
        any::<String>(),
        // TOML-ish: keys, tables, values and punctuation in any order.
        prop::collection::vec(
            prop_oneof![
                Just("[[plugin]]\n".to_string()),
                Just("[defaults]\n".to_string()),
                Just("[plugin.config]\n".to_string()),
                "(path|name|fuel|memory_mib|timeout_ms|max_return_kib|host_calls|log_kib|on_error|tenants|config|bogus) = "
                    .prop_map(String::from),
                "\"[a-z./]{0,8}\"\n",
                "-?[0-9_]{1,22}\n",
                Just("[\"x\", 3]\n".to_string()),
                Just("{ a = 1 }\n".to_string()),
                any::<String>(),
            ],
            0..16,
        )
        .prop_map(|parts| parts.concat()),
    ];
    proptest!(config(), |(text in text)| {
        for scope in [Scope::Global, Scope::Tenant] {
            if let Err(err) = Manifest::parse(&path, &text, scope, 1 << 30) {
                assert_names_where(&err, &path, &text);
            }
        }
    });
}

#[test]
fn fuzz_valid_manifests_parse_to_what_they_say() {
    let (dir, path) = manifest_dir();
    let plugins = prop::collection::vec(plugin_toml(), 0..5).prop_filter("unique names", |ps| {
        let mut names: Vec<&str> = ps.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        names.windows(2).all(|w| w[0] != w[1])
    });
    proptest!(config(), |(plugins in plugins)| {
        let text: String = plugins.iter().map(PluginToml::render).collect::<Vec<_>>().join("\n");
        let manifest = Manifest::parse(&path, &text, Scope::Global, 1 << 30)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        prop_assert_eq!(manifest.plugins.len(), plugins.len());
        for (got, want) in manifest.plugins.iter().zip(&plugins) {
            let spec = &got.spec;
            prop_assert_eq!(&spec.name, &want.name);
            prop_assert_eq!(&spec.path, &dir.path().join(want.file));
            if let Some(fuel) = want.fuel {
                prop_assert_eq!(spec.limits.fuel, fuel);
            }
            if let Some(mib) = want.memory_mib {
                prop_assert_eq!(spec.limits.memory_bytes as u64, mib << 20);
            }
            if let Some(ms) = want.timeout_ms {
                prop_assert_eq!(spec.limits.timeout.as_millis(), u128::from(ms));
            }
            if let Some(calls) = want.host_calls {
                prop_assert_eq!(spec.limits.host_calls, calls);
            }
            let on_error = if want.deny == Some(true) {
                toolgate::OnError::Deny
            } else {
                toolgate::OnError::Skip
            };
            prop_assert_eq!(spec.on_error, on_error);
            let tenants = got.tenants.as_ref().map(|t| t.iter().map(|t| t.to_string()).collect::<Vec<_>>());
            prop_assert_eq!(&tenants, &want.tenants);
            let config: Map<String, Value> =
                want.config.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            prop_assert_eq!(&spec.config, &Value::Object(config));
        }
        // A tenant may not say `tenants`: refused, naming the key and line.
        if let Some(i) = plugins.iter().position(|p| p.tenants.is_some()) {
            // Ceilings as high as the generated limits go: the `tenants`
            // key is what must be refused.
            let open = toolgate::Policy {
                ceilings: toolgate::Limits {
                    fuel: u64::MAX,
                    memory_bytes: 1 << 30,
                    timeout: std::time::Duration::from_secs(3600),
                    max_return_bytes: usize::MAX,
                    host_calls: u32::MAX,
                    log_bytes: usize::MAX,
                    ..toolgate::Limits::default()
                },
                ..toolgate::Policy::default()
            };
            let err = Manifest::parse_with(&path, &text, Scope::Tenant, 1 << 30, &open)
                .expect_err("tenants in a tenant manifest");
            prop_assert_eq!(err.key.clone(), Some(format!("plugin[{}].tenants", i + 1)));
            assert_names_where(&err, &path, &text);
        }
    });
}

#[test]
fn fuzz_manifests_with_one_bad_value_name_the_key() {
    let (_dir, path) = manifest_dir();
    let bad = prop::sample::select(vec![
        ("fuel", "-1"),
        ("fuel", "\"lots\""),
        ("memory_mib", "0"),
        ("memory_mib", "4096"),
        ("timeout_ms", "0"),
        ("timeout_ms", "600001"),
        ("host_calls", "-5"),
        ("on_error", "\"maybe\""),
        ("tenants", "[\"../x\"]"),
        ("tenants", "[]"),
        ("path", "\"../escape.wasm\""),
        ("path", "\"missing.wasm\""),
        ("name", "\"a/b\""),
        ("bogus_key", "1"),
    ]);
    proptest!(config(), |(plugins in prop::collection::vec(plugin_toml(), 1..4), pick in any::<prop::sample::Index>(), bad in bad)| {
        let mut text = String::new();
        let target = pick.index(plugins.len());
        for (i, p) in plugins.iter().enumerate() {
            // Unique names, whatever was generated.
            let p = PluginToml { name: format!("p{i}"), ..p.clone() };
            let mut rendered = p.render();
            if i == target {
                // Replace the key if present (TOML refuses a duplicate),
                // else add it right after the table header.
                let key = bad.0;
                let kept: Vec<&str> = rendered
                    .lines()
                    .filter(|l| !l.starts_with(&format!("{key} =")))
                    .collect();
                let mut lines: Vec<String> = kept.iter().map(|l| l.to_string()).collect();
                lines.insert(1, format!("{key} = {}", bad.1));
                rendered = lines.join("\n") + "\n";
            }
            text.push_str(&rendered);
            text.push('\n');
        }
        let err = Manifest::parse(&path, &text, Scope::Global, 1 << 30)
            .expect_err("a bad value is refused");
        assert_names_where(&err, &path, &text);
        let shown = err.to_string();
        prop_assert!(shown.contains(bad.0), "{} does not name {}: {}", shown, bad.0, text);
    });
}

// ---- events -------------------------------------------------------------

/// `value` read as `seam`'s event, as every face reads a request's.
fn event_of(seam: Seam, value: Value) -> Result<Event, String> {
    toolgate::DecideRequest::from_value(seam, json!({ "event": value })).map(|r| r.event)
}

#[test]
fn fuzz_event_json_never_panics_and_errors_say_what() {
    let shapes = prop_oneof![
        json_value(),
        seam_and_event().prop_map(|(_, e)| e),
        // A valid event with one field changed to anything.
        (seam_and_event(), field_name(), json_value()).prop_map(|((_, mut e), k, v)| {
            if let Value::Object(fields) = &mut e {
                fields.insert(k, v);
            }
            e
        }),
    ];
    proptest!(config(), |(seam in seam(), value in shapes)| {
        if let Err(err) = event_of(seam, value) {
            prop_assert!(!err.to_string().trim().is_empty());
        }
    });
}

#[test]
fn fuzz_valid_events_round_trip_and_a_missing_field_is_named() {
    proptest!(config(), |((seam, value) in seam_and_event(), drop in any::<prop::sample::Index>())| {
        let event = event_of(seam, value.clone())
            .unwrap_or_else(|e| panic!("{seam} {value}: {e}"));
        prop_assert_eq!(event.seam(), seam);
        let back = match &event {
            Event::Routing(e) => serde_json::to_value(e),
            Event::Rewrite(e) => serde_json::to_value(e),
            Event::Steering(e) => serde_json::to_value(e),
            Event::Result(e) => serde_json::to_value(e),
            Event::Response(e) => serde_json::to_value(e),
        }
        .expect("serialises");
        prop_assert_eq!(event_of(seam, back).expect("reparses"), event);
        // Without one of its required fields, the error names that field.
        let Value::Object(fields) = &value else { unreachable!() };
        let required: Vec<&String> = fields
            .keys()
            .filter(|k| k.as_str() != "result")
            .collect();
        let gone = required[drop.index(required.len())].clone();
        let mut cut = fields.clone();
        cut.remove(&gone);
        let err = event_of(seam, Value::Object(cut)).expect_err("missing field");
        prop_assert!(err.to_string().contains(&format!("`{gone}`")), "{}: {}", gone, err);
    });
}

// ---- tenant names -------------------------------------------------------

#[test]
fn fuzz_tenant_names_are_checked_exactly() {
    proptest!(config(), |(name in tenant_name())| {
        match TenantName::try_from(name.as_str()).map_err(|e| e.to_string()) {
            Ok(_) => prop_assert!(is_valid_tenant(&name), "accepted {:?}", name),
            Err(why) => {
                prop_assert!(!is_valid_tenant(&name), "refused {:?}: {}", name, why);
                prop_assert!(why.contains(&format!("{name:?}")), "{}", why);
            }
        }
    });
}

// ---- tenants' tokens files ---------------------------------------------

#[test]
fn fuzz_tenant_tokens_files_never_panic_and_valid_ones_give_each_its_token() {
    use toolgate::TenantTokens;
    let line = prop_oneof![
        "[a-z0-9_.-]{1,8} = \"sha256:[0-9a-f]{64}\"",
        "[a-z0-9 =\"\\[\\]:#-]{0,40}",
        any::<String>(),
    ];
    proptest!(config(), |(lines in prop::collection::vec(line, 0..6))| {
        let text = lines.join("\n");
        if let Err(e) = TenantTokens::parse(&text) {
            prop_assert!(e.starts_with("line ") || e.starts_with("key `"), "{}", e);
        }
    });
    let tenant = "[a-z][a-z0-9_-]{0,7}";
    let secret = "[ -~]{1,24}";
    proptest!(config(), |(pairs in prop::collection::btree_map(tenant, secret, 0..6))| {
        let mut secrets = std::collections::BTreeSet::new();
        prop_assume!(pairs.values().all(|s| secrets.insert(s.clone())));
        let text: String = pairs
            .iter()
            .map(|(t, s)| format!("{t} = \"sha256:{}\"\n", sha256_hex(s)))
            .collect();
        let tokens = TenantTokens::parse(&text).map_err(TestCaseError::fail)?;
        for secret in pairs.values() {
            prop_assert!(tokens.holds(secret), "{:?}", secret);
        }
        let stranger = "a secret longer than any of theirs";
        prop_assert!(!tokens.holds(stranger));
    });
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---- HTTP request bodies ------------------------------------------------

/// The service's router over an empty plugin directory (no guards: the
/// properties are about parsing), and a runtime to drive it.
fn service() -> (tokio::runtime::Runtime, axum::Router, tempfile::TempDir) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = runtime
        .block_on(toolgate::Registry::open(super::engine(), dir.path()))
        .expect("registry");
    let router = toolgate::server::router(
        Arc::new(registry),
        Arc::new(toolgate::Metrics::new()),
        toolgate::server::ServerConfig::default(),
    );
    (runtime, router, dir)
}

/// POSTs `body` to `path`; returns the status and the JSON answer.
fn post(
    runtime: &tokio::runtime::Runtime,
    router: &axum::Router,
    path: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    runtime.block_on(async {
        let response = router.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{status}: answer is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        (status, value)
    })
}

#[test]
fn fuzz_request_bodies_get_200_or_a_named_400() {
    let (runtime, router, _dir) = service();
    let body = prop_oneof![
        any::<Vec<u8>>(),
        any::<String>().prop_map(String::into_bytes),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        (json_value(), json_value(), tenant_name()).prop_map(|(event, state, tenant)| {
            json!({"event": event, "state": state, "tenant": tenant})
                .to_string()
                .into_bytes()
        }),
        (seam_and_event(), field_name(), json_value()).prop_map(|((_, mut e), k, v)| {
            if let Value::Object(fields) = &mut e {
                fields.insert(k, v);
            }
            json!({"event": e}).to_string().into_bytes()
        }),
    ];
    proptest!(config(), |(seam in seam(), body in body)| {
        let sent: Option<Value> = serde_json::from_slice(&body).ok();
        let (status, answer) = post(&runtime, &router, &format!("/v1/{seam}"), body);
        if status == StatusCode::OK {
            // No guards: the answer is the seam's neutral value, every
            // visible tool at routing, the original answer at response and
            // null elsewhere.
            let neutral = match (seam, &sent) {
                (Seam::Routing, Some(sent)) => sent["event"]["narrowed_tool_names"].clone(),
                (Seam::Response, Some(sent)) => sent["event"]["original_content"].clone(),
                _ => Value::Null,
            };
            prop_assert_eq!(&answer, &neutral, "{:?}", sent);
        } else {
            prop_assert_eq!(status, StatusCode::BAD_REQUEST, "{}", answer);
            let message = answer["error"].as_str().unwrap_or_default();
            prop_assert!(!message.is_empty(), "{}", answer);
            // It says where: the body, a named field or the event's path.
            prop_assert!(
                message.contains("request body")
                    || message.contains("field `")
                    || message.contains("event"),
                "{}", message
            );
        }
    });
}

#[test]
fn fuzz_valid_requests_are_answered() {
    let (runtime, router, _dir) = service();
    let tenant = prop::option::of("[a-z][a-z0-9_-]{0,20}");
    proptest!(config(), |((seam, event) in seam_and_event(), state in args_object(), tenant in tenant)| {
        let mut request = json!({"event": event.clone(), "state": state});
        if let Some(t) = tenant {
            request["tenant"] = json!(t);
        }
        let (status, answer) = post(&runtime, &router, &format!("/v1/{seam}"), request.to_string().into_bytes());
        prop_assert_eq!(status, StatusCode::OK, "{}", answer);
        let expected = match seam {
            // No guard narrows: every visible tool stays.
            Seam::Routing => event["narrowed_tool_names"].clone(),
            // No guard renders: the answer is the original.
            Seam::Response => event["original_content"].clone(),
            _ => Value::Null,
        };
        prop_assert_eq!(answer, expected);
    });
}
