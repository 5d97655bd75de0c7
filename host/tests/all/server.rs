//! `toolgate serve`: a real server on 127.0.0.1:0 with real guards, driven
//! over HTTP.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::CompiledCache;
use toolgate::LoadLimits;
use toolgate::Metrics;
use toolgate::TenantTokens;
use toolgate::server::{self, ServerConfig};
use toolgate::{Policy, Registry, RegistryOptions};
use toolgate_tests::{HIDE_ADMIN_TOOLS, HOSTILE, NO_EMAIL, QUERY_LIMIT, RESULT_AUDIT, SQL_GUARD};

/// A server running in this process on a free loopback port.
pub(crate) struct Running {
    base: String,
    dir: tempfile::TempDir,
    pub(crate) registry: Arc<Registry>,
    client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Running {
    async fn start(files: &[(&str, &str)], config: ServerConfig) -> Running {
        Running::start_with(files, &[], config).await
    }

    /// Serves a directory of `files` (name, component to copy) and
    /// `texts` (name, contents: manifests).
    pub(crate) async fn start_with(
        files: &[(&str, &str)],
        texts: &[(&str, &str)],
        config: ServerConfig,
    ) -> Running {
        Running::start_opened(files, texts, RegistryOptions::default(), config).await
    }

    /// [`Running::start_with`], the registry opened with `options`.
    async fn start_opened(
        files: &[(&str, &str)],
        texts: &[(&str, &str)],
        options: RegistryOptions,
        config: ServerConfig,
    ) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, src) in files {
            let dest = dir.path().join(name);
            std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
            std::fs::copy(src, dest).expect("copy");
        }
        for (name, text) in texts {
            let dest = dir.path().join(name);
            std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
            std::fs::write(dest, text).expect("write");
        }
        let registry = Registry::open_with(super::engine(), dir.path(), options)
            .await
            .expect("registry");
        let registry = Arc::new(registry);
        let router = server::router(Arc::clone(&registry), Arc::new(Metrics::new()), config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server::serve(listener, router, async move {
            let _ = stopped.await;
        }));
        Running {
            base,
            dir,
            registry,
            client: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn examples() -> Running {
        Running::start(
            &[
                ("10-sql-guard.wasm", SQL_GUARD),
                ("20-no-email.wasm", NO_EMAIL),
                ("30-query-limit.wasm", QUERY_LIMIT),
                ("40-hide-admin-tools.wasm", HIDE_ADMIN_TOOLS),
                ("50-result-audit.wasm", RESULT_AUDIT),
            ],
            ServerConfig::default(),
        )
        .await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = response.status();
        (status, response.json().await.expect("JSON body"))
    }

    async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        let status = response.status();
        (status, response.json().await.expect("JSON body"))
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, String) {
        let response = self
            .client
            .get(self.url(path))
            .send()
            .await
            .expect("request");
        let status = response.status();
        (status, response.text().await.expect("body"))
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("server stops")
                .expect("server task")
                .expect("server ran");
        }
    }
}

pub(crate) fn steering(tool: &str, args: Value) -> Value {
    json!({"event": {"run_id": "r", "tool_name": tool, "call_id": "c", "args": args}})
}

fn steer_where() -> Value {
    json!({"action": "skip", "content": "Add a WHERE clause before running this query.", "is_error": true})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_seam_answers_exactly_the_hook_value() {
    let s = Running::examples().await;

    let (status, body) = s
        .post(
            "/v1/steering",
            steering("run_query", json!({"sql": "DELETE FROM users"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());

    let (_, body) = s
        .post(
            "/v1/steering",
            steering(
                "run_query",
                json!({"sql": "DELETE FROM users WHERE id = 1"}),
            ),
        )
        .await;
    assert_eq!(body, Value::Null);

    let (_, body) = s
        .post(
            "/v1/steering",
            steering("send_email", json!({"to": "a@b.c"})),
        )
        .await;
    assert_eq!(body["action"], "skip");
    assert_eq!(body["is_error"], false, "a cancel: {body}");

    let (status, body) = s
        .post(
            "/v1/rewrite",
            json!({"event": {"run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "c",
                "tool_name": "run_query", "args": {"sql": "SELECT * FROM t", "db": "main"},
                "available_tools": ["run_query", "search"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"tool_name": "run_query", "args": {"sql": "SELECT * FROM t LIMIT 100", "db": "main"}})
    );

    let (_, body) = s
        .post(
            "/v1/rewrite",
            json!({"event": {"run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "c",
                "tool_name": "search", "args": {"q": "x"}, "available_tools": ["run_query", "search"]}}),
        )
        .await;
    assert_eq!(body, Value::Null, "no guard rewrote");

    let (status, body) = s
        .post(
            "/v1/routing",
            json!({"event": {"run_id": "r", "mode": "enforce", "intent_label": "db", "total_tools": 3,
                "narrowed_tool_names": ["search", "admin_drop", "run_query"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!(["search", "run_query"]));

    let (status, body) = s
        .post(
            "/v1/result",
            json!({"event": {"run_id": "r", "tool_name": "run_query", "result": [{"id": 1}], "call_id": "c"},
                "state": {"tenant_id": "t"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, Value::Null);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_wraps_the_result() {
    let s = Running::examples().await;
    let (status, body) = s
        .post(
            "/v1/steering?trace=1",
            steering("run_query", json!({"sql": "DELETE FROM users"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["result"], steer_where());
    let trace = body["trace"].as_array().expect("trace");
    assert_eq!(trace.len(), 1, "the first skip short-circuits: {trace:?}");
    assert_eq!(trace[0]["plugin"], "10-sql-guard");
    assert_eq!(trace[0]["outcome"], "skip");
    assert!(trace[0]["fuel_used"].as_u64().expect("fuel") > 0);
    assert!(trace[0]["micros"].is_u64());

    let (_, body) = s
        .post(
            "/v1/steering?trace=1",
            steering("search", json!({"q": "x"})),
        )
        .await;
    assert_eq!(body["result"], Value::Null);
    let outcomes: Vec<&str> = body["trace"]
        .as_array()
        .expect("trace")
        .iter()
        .map(|t| t["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, ["proceed", "proceed"], "both steering guards ran");

    let (status, body) = s
        .post("/v1/steering?trace=yes", steering("search", json!({})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().expect("error").contains("trace"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_plugins_and_reload() {
    let s = Running::start(&[("10-sql-guard.wasm", SQL_GUARD)], ServerConfig::default()).await;
    let (status, body) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let health: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(health["status"], "ok");

    let (status, body) = s.get("/v1/plugins").await;
    assert_eq!(status, StatusCode::OK);
    let listed: Value = serde_json::from_str(&body).expect("JSON");
    let global = listed["global"].as_array().expect("global");
    assert_eq!(global.len(), 1);
    assert_eq!(global[0]["name"], "10-sql-guard");
    assert_eq!(global[0]["seams"], json!(["steering"]));
    assert_eq!(global[0]["on_error"], "skip");
    assert_eq!(global[0]["digest"].as_str().expect("digest").len(), 64);
    assert!(global[0]["limits"]["fuel"].as_u64().expect("fuel") > 0);
    assert_eq!(listed["tenants"], json!({}));
    assert_eq!(listed["errors"], json!([]));

    // A new global guard, a tenant's guard and a corrupt file, then reload.
    std::fs::copy(NO_EMAIL, s.dir.path().join("20-no-email.wasm")).expect("copy");
    std::fs::create_dir_all(s.dir.path().join("tenants/acme")).expect("mkdir");
    std::fs::copy(HOSTILE, s.dir.path().join("tenants/acme/hostile.wasm")).expect("copy");
    std::fs::write(s.dir.path().join("30-corrupt.wasm"), b"not wasm").expect("write");
    let (status, report) = s.post("/v1/reload", json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let loaded: Vec<&str> = report["loaded"]
        .as_array()
        .expect("loaded")
        .iter()
        .map(|p| p.as_str().expect("path"))
        .collect();
    assert_eq!(loaded.len(), 2, "{report}");
    assert!(loaded.iter().any(|p| p.ends_with("20-no-email.wasm")));
    assert!(loaded.iter().any(|p| p.ends_with("hostile.wasm")));
    assert_eq!(report["errors"].as_array().expect("errors").len(), 1);
    assert!(report["generation"].as_u64().expect("generation") >= 2);

    let (_, body) = s.get("/v1/plugins").await;
    let listed: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(listed["global"].as_array().expect("global").len(), 2);
    assert_eq!(listed["tenants"]["acme"][0]["name"], "acme/hostile");
    assert!(
        listed["errors"][0]["path"]
            .as_str()
            .expect("path")
            .ends_with("30-corrupt.wasm")
    );

    // The tenant's chain runs the global guards, then its own.
    let mut call = steering("send_email", json!({}));
    call["tenant"] = json!("acme");
    let (_, body) = s.post("/v1/steering?trace=1", call).await;
    let plugins: Vec<&str> = body["trace"]
        .as_array()
        .expect("trace")
        .iter()
        .map(|t| t["plugin"].as_str().expect("plugin"))
        .collect();
    assert_eq!(
        plugins,
        ["10-sql-guard", "20-no-email"],
        "no-email cancels first"
    );
    let mut call = steering("ok", json!({}));
    call["tenant"] = json!("acme");
    let (_, body) = s.post("/v1/steering?trace=1", call).await;
    assert_eq!(body["trace"].as_array().expect("trace").len(), 3);
    // Without the tenant, only the global chain.
    let (_, body) = s
        .post("/v1/steering?trace=1", steering("ok", json!({})))
        .await;
    assert_eq!(body["trace"].as_array().expect("trace").len(), 2);
    s.stop().await;
}

/// How long the load probe of a spinning start function runs in the
/// reload tests: the slow load a reload request must not wait out.
const SLOW_PROBE: Duration = Duration::from_secs(5);

/// Registry options under which tenant `spin` (see [`add_spinning_tenant`])
/// loads slowly: its start function spins until the load probe's cap,
/// [`SLOW_PROBE`], which the operator's ceilings let it ask for.
fn slow_probe_options() -> RegistryOptions {
    let mut policy = Policy::default();
    policy.ceilings.timeout = Duration::from_secs(20);
    policy.ceilings.fuel = u64::MAX;
    RegistryOptions {
        cache: CompiledCache::disabled(),
        policy,
        load: LoadLimits {
            probe_timeout: SLOW_PROBE,
            ..LoadLimits::default()
        },
        http_answers: None,
    }
}

/// Adds tenant `spin` under `root`: one guard whose start function never
/// returns, asking for a 20 s timeout. Returns the guard's path.
fn add_spinning_tenant(root: &Path) -> std::path::PathBuf {
    let spin = root.join("tenants").join("spin");
    std::fs::create_dir_all(&spin).expect("mkdir");
    std::fs::write(
        spin.join("spin.wasm"),
        super::tenant_files::spinning_start(),
    )
    .expect("write");
    std::fs::write(
        spin.join("toolgate.toml"),
        "[[plugin]]\npath = \"spin.wasm\"\ntimeout_ms = 20000\nfuel = 9223372036854775807\n",
    )
    .expect("write");
    spin.join("spin.wasm")
}

/// The message `/v1/plugins` lists for `path`, if any.
async fn listed_error(s: &Running, path: &Path) -> Option<String> {
    let (status, body) = s.get("/v1/plugins").await;
    assert_eq!(status, StatusCode::OK);
    let listed: Value = serde_json::from_str(&body).expect("JSON");
    listed["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .find(|e| e["path"].as_str() == Some(&*path.display().to_string()))
        .map(|e| e["message"].as_str().expect("message").to_string())
}

/// Waits for `/v1/plugins` to list an error for `path` (the slow load's
/// outcome) and returns it; fails the test if it never does.
async fn outcome_shows(s: &Running, path: &Path) -> String {
    let deadline = Instant::now() + SLOW_PROBE + Duration::from_secs(60);
    loop {
        if let Some(m) = listed_error(s, path).await {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "the reload's outcome never showed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A reload that must wait on a tenant's slow load is answered 202 once the
/// reload wait is up, naming the tenant still loading; the server answers
/// everything else meanwhile; the load goes on (the request's end does not
/// cut it) and its outcome shows in `/v1/plugins` without another reload;
/// a reload with nothing slow to do is answered 200 with its report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reload_is_answered_202_and_finishes_in_the_background() {
    let s = Running::start_opened(
        &[("10-sql-guard.wasm", SQL_GUARD)],
        &[],
        slow_probe_options(),
        ServerConfig {
            reload_wait: Duration::from_secs(1),
            ..ServerConfig::default()
        },
    )
    .await;
    let spin = add_spinning_tenant(s.dir.path());
    let before = s.registry.plugin_set().generation;

    let (status, body) = s.post("/v1/reload", json!(null)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "reloading", "{body}");
    assert_eq!(
        body["loading"],
        json!({"global": false, "tenants": ["spin"]})
    );
    assert_eq!(body["generation"], before);
    assert_eq!(body["waited_ms"], 1000);
    assert!(
        body["result"]
            .as_str()
            .expect("result")
            .contains("GET /v1/plugins"),
        "{body}"
    );

    // Meanwhile the server answers: health, a seam, what is loaded.
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let delete = steering("run_query", json!({"sql": "DELETE FROM users"}));
    let (status, body) = s.post("/v1/steering", delete).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());
    assert_eq!(listed_error(&s, &spin).await, None, "not loaded yet");
    let (_, text) = s.get("/metrics").await;
    assert_eq!(
        series(&text, "toolgate_http_reloads_accepted_total"),
        Some(1.0),
        "{text}"
    );

    // The load goes on and its outcome appears without another reload.
    let message = outcome_shows(&s, &spin).await;
    assert!(message.contains("fails to start (deadline)"), "{message}");
    assert!(s.registry.loading().is_empty());

    // Nothing slow left (the failure is remembered): answered with the
    // report, and not counted as accepted.
    let (status, report) = s.post("/v1/reload", json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert!(
        report["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .any(|e| e["message"].as_str() == Some(&*message)),
        "{report}"
    );
    let (_, text) = s.get("/metrics").await;
    assert_eq!(
        series(&text, "toolgate_http_reloads_accepted_total"),
        Some(1.0)
    );
    s.stop().await;
}

/// A reload request cut by the request timeout (a reload wait longer than
/// it) is answered 503, and the reload is not cut with it: the slow load
/// finishes and its outcome shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_timeout_never_cuts_a_reload() {
    let s = Running::start_opened(
        &[("10-sql-guard.wasm", SQL_GUARD)],
        &[],
        slow_probe_options(),
        ServerConfig {
            request_timeout: Duration::from_millis(300),
            reload_wait: Duration::from_secs(60),
            ..ServerConfig::default()
        },
    )
    .await;
    let spin = add_spinning_tenant(s.dir.path());
    let (status, body) = s.post("/v1/reload", json!(null)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let message = outcome_shows(&s, &spin).await;
    assert!(message.contains("fails to start (deadline)"), "{message}");
    s.stop().await;
}

/// The value of the series line `name{labels}` in `text`.
pub(crate) fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name_and_labels)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_calls_outcomes_and_requests() {
    let s = Running::start(
        &[
            ("10-sql-guard.wasm", SQL_GUARD),
            ("20-hostile.wasm", HOSTILE),
        ],
        ServerConfig::default(),
    )
    .await;
    for _ in 0..3 {
        s.post(
            "/v1/steering",
            steering("run_query", json!({"sql": "DROP TABLE t"})),
        )
        .await;
    }
    s.post("/v1/steering", steering("trap", json!({}))).await;
    s.post("/v1/steering", json!({"event": {}})).await;

    let (status, text) = s.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let calls = |plugin: &str| {
        series(
            &text,
            &format!("toolgate_guard_calls_total{{plugin=\"{plugin}\",seam=\"steering\"}}"),
        )
    };
    assert_eq!(calls("10-sql-guard"), Some(4.0), "{text}");
    assert_eq!(
        calls("20-hostile"),
        Some(1.0),
        "skipped calls never reach it: {text}"
    );
    assert_eq!(
        series(
            &text,
            "toolgate_guard_outcomes_total{plugin=\"10-sql-guard\",seam=\"steering\",outcome=\"skip\",cause=\"none\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "toolgate_guard_outcomes_total{plugin=\"20-hostile\",seam=\"steering\",outcome=\"fault\",cause=\"unreachable\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "toolgate_guard_fuel_count{plugin=\"10-sql-guard\",seam=\"steering\"}"
        ),
        Some(4.0),
        "{text}"
    );
    let fuel_sum = series(
        &text,
        "toolgate_guard_fuel_sum{plugin=\"10-sql-guard\",seam=\"steering\"}",
    )
    .expect("fuel sum");
    assert!(fuel_sum > 0.0);
    assert!(
        text.contains(
            "toolgate_guard_latency_seconds_bucket{le=\"+Inf\",plugin=\"10-sql-guard\",seam=\"steering\"} 4"
        ),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "toolgate_decisions_total{seam=\"steering\",verdict=\"skip\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "toolgate_http_requests_total{endpoint=\"/v1/steering\",status=\"200\"}"
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "toolgate_http_requests_total{endpoint=\"/v1/steering\",status=\"400\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        series(&text, "toolgate_plugins_loaded{chain=\"global\"}"),
        Some(2.0),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));
    s.stop().await;
}

/// One sample of a metrics page: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// Parses `text` as Prometheus reads the OpenMetrics text format: each
/// line a `# HELP` / `# TYPE` / `# UNIT` comment or a sample
/// `name{label="value",...} number`, label values escaped with `\\`,
/// `\"` and `\n` only, and `# EOF` last; anything else is an error.
fn parse_page(text: &str) -> Result<Vec<Sample>, String> {
    let body = text
        .strip_suffix("# EOF\n")
        .ok_or("the page does not end with `# EOF`")?;
    let mut samples = Vec::new();
    for line in body.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            if ["HELP ", "TYPE ", "UNIT "]
                .iter()
                .any(|k| comment.starts_with(k))
            {
                continue;
            }
            return Err(format!("bad comment: {line:?}"));
        }
        let name_end = line.find(['{', ' ']).ok_or(format!("no value: {line:?}"))?;
        let name = &line[..name_end];
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
        {
            return Err(format!("bad metric name: {line:?}"));
        }
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            rest = inner;
            while !rest.starts_with('}') {
                let eq = rest.find("=\"").ok_or(format!("bad label: {line:?}"))?;
                let key = rest[..eq].to_string();
                let mut value = String::new();
                let mut chars = rest[eq + 2..].char_indices();
                let end = loop {
                    match chars.next() {
                        Some((i, '"')) => break i,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            _ => return Err(format!("bad escape: {line:?}")),
                        },
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("unterminated label: {line:?}")),
                    }
                };
                labels.push((key, value));
                rest = &rest[eq + 2 + end + 1..];
                rest = rest.strip_prefix(',').unwrap_or(rest);
            }
            rest = &rest[1..];
        }
        let value = rest
            .strip_prefix(' ')
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or(format!("bad value: {line:?}"))?;
        samples.push((name.to_string(), labels, value));
    }
    Ok(samples)
}

/// No name can forge a series or break `/metrics`. A component whose file
/// name holds a quote, a newline and a backslash (which would end its
/// label and start a forged series of another account) is refused at
/// load, naming the file; a tenant directory named `global` is refused
/// (the global account's series are the operator's); a name that reaches
/// the metrics through the library's API is escaped. The page parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_cannot_forge_or_break_the_metrics() {
    const FORGED: &str = "x\"} 1\ntoolgate_share_busy{account=\"b\"} 99\n# \\";
    let evil = format!("{FORGED}.wasm");
    let s = Running::start(
        &[
            ("10-sql-guard.wasm", SQL_GUARD),
            (&evil, SQL_GUARD),
            ("tenants/global/sql.wasm", SQL_GUARD),
            ("tenants/b/sql.wasm", SQL_GUARD),
        ],
        ServerConfig::default(),
    )
    .await;
    let errors = s.registry.plugin_set().errors.clone();
    let refused = |path: &Path| {
        errors
            .iter()
            .find(|e| e.path == path)
            .map(|e| e.message.clone())
            .unwrap_or_else(|| panic!("{} not reported: {errors:?}", path.display()))
    };
    let message = refused(&s.dir.path().join(&evil));
    assert!(message.contains("invalid plugin name"), "{message}");
    assert!(message.contains("rename the file"), "{message}");
    let message = refused(&s.dir.path().join("tenants").join("global"));
    assert!(message.contains("reserved"), "{message}");
    let mut call = steering("run_query", json!({"sql": "DELETE FROM t"}));
    call["tenant"] = json!("b");
    let (status, body) = s.post("/v1/steering", call).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());
    let mut call = steering("run_query", json!({"sql": "DELETE FROM t"}));
    call["tenant"] = json!("global");
    let (status, body) = s.post("/v1/steering", call).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (status, text) = s.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let samples = parse_page(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let busy_b: Vec<f64> = samples
        .iter()
        .filter(|(name, labels, _)| {
            name == "toolgate_share_busy" && labels.contains(&("account".into(), "b".into()))
        })
        .map(|s| s.2)
        .collect();
    assert_eq!(busy_b, [0.0], "{text}");
    assert!(
        samples.iter().all(|(_, labels, _)| labels
            .iter()
            .all(|(_, v)| !v.contains('"') && v != "tenant:global")),
        "{text}"
    );

    // Through the library nothing checks a name: the label is escaped.
    let metrics = Metrics::new();
    metrics.record_request(FORGED, 200, Duration::ZERO);
    let text = metrics.encode();
    let samples = parse_page(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(
        samples
            .iter()
            .any(|(name, labels, _)| name == "toolgate_http_requests_total"
                && labels.contains(&("endpoint".into(), FORGED.into()))),
        "{text}"
    );
    assert!(
        !samples
            .iter()
            .any(|(name, _, _)| name == "toolgate_share_busy"),
        "a forged series: {text}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_4xx() {
    let s = Running::start(
        &[("10-sql-guard.wasm", SQL_GUARD)],
        ServerConfig {
            max_body_bytes: 4096,
            ..ServerConfig::default()
        },
    )
    .await;
    let error = |body: &Value| body["error"].as_str().expect("error message").to_string();

    // Over the body limit.
    let big = steering("run_query", json!({"sql": "x".repeat(10_000)}));
    let (status, body) = s.post("/v1/steering", big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(error(&body).contains("limit"), "{body}");

    // Not JSON.
    let (status, body) = s.post_raw("/v1/steering", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("not valid JSON"), "{body}");

    // Not an object; no event; an unknown field.
    let (status, body) = s.post("/v1/steering", json!([1, 2])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("JSON object"), "{body}");
    let (status, body) = s.post("/v1/steering", json!({"state": {}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("`event`"), "{body}");
    let (status, body) = s
        .post("/v1/steering", json!({"event": {}, "tenat": "x"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("`tenat`"), "{body}");

    // An event missing a field, and one with a mistyped field.
    let (status, body) = s
        .post(
            "/v1/steering",
            json!({"event": {"run_id": "r", "tool_name": "t", "call_id": "c"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("missing field `args`"), "{body}");
    let (status, body) = s
        .post(
            "/v1/rewrite",
            json!({"event": {"run_id": "r", "iteration_index": "zero", "node_name": "react",
                "call_id": "c", "tool_name": "t", "args": {}, "available_tools": []}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("event.iteration_index"), "{body}");

    // State not an object, tenant not a string or not a valid name.
    let mut call = steering("t", json!({}));
    call["state"] = json!([1]);
    let (status, body) = s.post("/v1/steering", call).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("`state`"), "{body}");
    for tenant in [json!("../etc"), json!(""), json!(".hidden"), json!(7)] {
        let mut call = steering("t", json!({}));
        call["tenant"] = tenant.clone();
        let (status, body) = s.post("/v1/steering", call).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{tenant}");
        assert!(error(&body).contains("tenant"), "{body}");
    }

    // Unknown seam, unknown path, wrong method.
    let (status, body) = s.post("/v1/steerin", steering("t", json!({}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error(&body).contains("unknown seam `steerin`"), "{body}");
    let (status, _) = s.get("/v2/steering").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s.get("/v1/steering").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // A name under /v1/ that is no seam is no path, whatever the method.
    let (status, body) = s.get("/v1/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("no such endpoint: /v1/nope"), "{body}");
    let response = s
        .client
        .post(s.url("/healthz"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = response.json().await.expect("JSON body");
    assert!(error(&body).contains("not allowed"), "{body}");

    // After all that, it still answers.
    let (status, body) = s
        .post(
            "/v1/steering",
            steering("run_query", json!({"sql": "DELETE FROM t"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_endpoint_but_healthz() {
    let s = Running::start(
        &[("10-sql-guard.wasm", SQL_GUARD)],
        ServerConfig {
            token: Some("s3cret-token".into()),
            ..ServerConfig::default()
        },
    )
    .await;
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    for path in ["/v1/plugins", "/metrics"] {
        let (status, _) = s.get(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    for path in ["/v1/steering", "/v1/reload"] {
        let (status, body) = s.post(path, steering("t", json!({}))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(body["error"].as_str().expect("error").contains("bearer"));
    }
    let with = |token: &str| {
        s.client
            .post(s.url("/v1/steering"))
            .header("authorization", format!("Bearer {token}"))
            .json(&steering("run_query", json!({"sql": "DELETE FROM t"})))
            .send()
    };
    let wrong = with("s3cret-tokeN").await.expect("request");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        wrong
            .headers()
            .get("www-authenticate")
            .map(|v| v.as_bytes()),
        Some(&b"Bearer"[..])
    );
    let right = with("s3cret-token").await.expect("request");
    assert_eq!(right.status(), StatusCode::OK);
    assert_eq!(right.json::<Value>().await.expect("JSON"), steer_where());
    let metrics = s
        .client
        .get(s.url("/metrics"))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .expect("request");
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.expect("text");
    assert_eq!(
        series(
            &text,
            "toolgate_http_requests_total{endpoint=\"/v1/steering\",status=\"401\"}"
        ),
        Some(2.0),
        "{text}"
    );
    // No route discovery without the token: unknown paths and wrong
    // methods are 401 too, and 404 / 405 only with it.
    for (method, path, known) in [
        (reqwest::Method::GET, "/nope", StatusCode::NOT_FOUND),
        (reqwest::Method::POST, "/nope", StatusCode::NOT_FOUND),
        (reqwest::Method::GET, "/v1/nope", StatusCode::NOT_FOUND),
        (
            reqwest::Method::GET,
            "/v1/steering",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            reqwest::Method::GET,
            "/v1/reload",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
    ] {
        let request = || s.client.request(method.clone(), s.url(path));
        let anonymous = request().send().await.expect("request");
        assert_eq!(
            anonymous.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
        let with_token = request()
            .bearer_auth("s3cret-token")
            .send()
            .await
            .expect("request");
        assert_eq!(with_token.status(), known, "{method} {path}");
    }
    s.stop().await;
}

/// A tenant's own token calls the seams as that tenant and nothing else:
/// not as another tenant, not the operator's endpoints. The operator's
/// token still calls as anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_token_calls_the_seams_as_its_tenant_only() {
    // `printf %s a-secret | sha256sum`, `printf %s b-secret | sha256sum`
    let tokens = TenantTokens::parse(&format!(
        "a = \"sha256:{}\"\nb = \"sha256:{}\"\n",
        hex(b"a-secret"),
        hex(b"b-secret")
    ))
    .expect("tokens parse");
    let s = Running::start(
        &[
            ("10-sql-guard.wasm", SQL_GUARD),
            ("tenants/a/no-email.wasm", NO_EMAIL),
        ],
        ServerConfig {
            token: Some("operator".into()),
            tenant_tokens: tokens,
            ..ServerConfig::default()
        },
    )
    .await;
    let call = |token: &'static str, path: &'static str, body: Value| {
        let request = s.client.post(s.url(path)).bearer_auth(token).json(&body);
        async move {
            let r = request.send().await.expect("request");
            let status = r.status();
            (status, r.json::<Value>().await.expect("JSON"))
        }
    };
    let email = json!({"event": {"run_id": "r", "tool_name": "send", "call_id": "c",
        "args": {"to": "x@example.com"}}});
    // No tenant named: the token's tenant's chain runs (a's no-email).
    let (status, body) = call("a-secret", "/v1/steering?trace=1", email.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["trace"][1]["plugin"], "a/no-email", "{body}");
    let mut as_a = email.clone();
    as_a["tenant"] = json!("a");
    let (status, _) = call("a-secret", "/v1/steering", as_a.clone()).await;
    assert_eq!(status, StatusCode::OK);
    // b's token cannot call as a, nor a's as anyone else.
    let (status, body) = call("b-secret", "/v1/steering", as_a.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["error"],
        "tenant `b`'s token cannot call as tenant `a`"
    );
    // b's own calls run b's chain: the global one only.
    let (status, body) = call("b-secret", "/v1/steering?trace=1", email.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["trace"].as_array().map(Vec::len), Some(1), "{body}");
    // The operator's endpoints are the operator's.
    let (status, body) = call("a-secret", "/v1/reload", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("operator's token"),
        "{body}"
    );
    for path in ["/v1/plugins", "/metrics"] {
        for (token, status) in [
            ("a-secret", StatusCode::FORBIDDEN),
            ("operator", StatusCode::OK),
        ] {
            let r = s.client.get(s.url(path)).bearer_auth(token).send().await;
            assert_eq!(r.expect("request").status(), status, "{path} with {token}");
        }
    }
    let (status, _) = call("operator", "/v1/steering", as_a).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call("c-secret", "/v1/steering", email).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    s.stop().await;
}

/// Waits until `holds` (60 s: a hang guard, not a measure).
async fn eventually(what: &str, mut holds: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !holds() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    assert!(waited.await.is_ok(), "never: {what}");
}

/// Asserts that a spinning guard's request (`?trace=1`) ended as the host
/// stops a spinner: at its run-time deadline (skipped, 200), or, on a
/// machine too busy to give the lane the CPU, at its wall-clock bound
/// first (`overloaded`: not decided, 503).
fn spun_out(status: StatusCode, answer: &Value) {
    let deadline = status == StatusCode::OK
        && answer["trace"]
            .as_array()
            .is_some_and(|t| t.iter().any(|e| e["fault"] == "deadline"));
    let overloaded = status == StatusCode::SERVICE_UNAVAILABLE
        && answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("(overloaded)"));
    assert!(deadline || overloaded, "{status}: {answer}");
}

/// Lower-case hex of the SHA-256 of `bytes`.
fn hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulting_guard_is_skipped_and_the_server_keeps_serving() {
    let s = Running::start(
        &[
            ("10-hostile.wasm", HOSTILE),
            ("20-sql-guard.wasm", SQL_GUARD),
        ],
        ServerConfig::default(),
    )
    .await;
    // "loop" spins until its deadline (default 200 ms) or fuel runs out.
    let (status, body) = s.post("/v1/steering", steering("loop", json!({}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, Value::Null, "a faulting guard is skipped");

    let (_, body) = s
        .post("/v1/steering?trace=1", steering("trap", json!({})))
        .await;
    assert_eq!(body["result"], Value::Null);
    assert_eq!(body["trace"][0]["outcome"], "fault");
    assert_eq!(body["trace"][0]["fault"], "unreachable");
    assert_eq!(body["trace"][1]["outcome"], "proceed");

    // The hostile guard faults, the next guard still steers.
    let mut call = steering("run_query", json!({"sql": "DELETE FROM t"}));
    call["event"]["tool_name"] = json!("run_query");
    let (_, body) = s.post("/v1/steering", call).await;
    assert_eq!(body, steer_where());
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_parallel_requests_are_all_answered() {
    let s = Arc::new(Running::examples().await);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let s = Arc::clone(&s);
        tasks.push(tokio::spawn(async move {
            let sql = if i % 2 == 0 {
                format!("DELETE FROM t{i}")
            } else {
                format!("DELETE FROM t{i} WHERE id = {i}")
            };
            let (status, body) = s
                .post("/v1/steering", steering("run_query", json!({ "sql": sql })))
                .await;
            (i, status, body)
        }));
    }
    for task in tasks {
        let (i, status, body) = task.await.expect("task");
        assert_eq!(status, StatusCode::OK);
        if i % 2 == 0 {
            assert_eq!(body, steer_where(), "request {i}");
        } else {
            assert_eq!(body, Value::Null, "request {i}");
        }
    }
    let s = Arc::into_inner(s).expect("sole owner");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_requests_in_flight() {
    let s = Running::start(&[("10-hostile.wasm", HOSTILE)], ServerConfig::default()).await;
    // Warm the connection pool so the slow request is on an open connection.
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let slow = tokio::spawn({
        let client = s.client.clone();
        let url = s.url("/v1/steering?trace=1");
        async move {
            let response = client
                .post(url)
                .json(&steering("loop", json!({})))
                .send()
                .await
                .expect("in-flight request answered");
            (
                response.status(),
                response.json::<Value>().await.expect("JSON"),
            )
        }
    });
    // Once the request is in the guard (spinning, a long call), shut down.
    let lane = Arc::clone(s.registry.engine().long_lane());
    eventually("the spinner runs", || lane.usage().running > 0).await;
    let base = s.base.clone();
    s.stop().await;
    let (status, body) = slow.await.expect("task");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["result"], Value::Null);
    assert_eq!(body["trace"][0]["outcome"], "fault");
    // Nothing listens any more.
    let refused = reqwest::Client::new()
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    assert!(refused.is_err(), "the listener is closed");
}

/// The binary: `toolgate serve` prints its address, answers, warns when
/// exposed without a token, and exits cleanly on SIGTERM.
#[test]
fn the_binary_serves_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("sql-guard.wasm")).expect("copy");
    let (mut child, addr, banner) = spawn_serve(dir.path(), &["--listen", "127.0.0.1:0"]);
    assert!(!banner.contains("warning"), "{banner}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let body = runtime.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{addr}/v1/steering"))
            .json(&steering("run_query", json!({"sql": "DELETE FROM t"})))
            .send()
            .await
            .expect("request")
            .json::<Value>()
            .await
            .expect("JSON")
    });
    assert_eq!(body, steer_where());
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

#[test]
fn the_binary_warns_when_exposed_without_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("sql-guard.wasm")).expect("copy");
    let (mut child, _, banner) = spawn_serve(dir.path(), &["--listen", "0.0.0.0:0"]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(banner.contains("warning"), "{banner}");
    assert!(banner.contains("--token-file"), "{banner}");

    let token = dir.path().join("token");
    std::fs::write(&token, "abc\n").expect("write");
    let (mut child, _, banner) = spawn_serve(
        dir.path(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--token-file",
            &token.display().to_string(),
        ],
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(!banner.contains("warning"), "{banner}");

    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--plugins", "/nonexistent/plugins"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

/// `--reload-wait-ms` reaches the server (0: a reload not done at once is
/// answered 202; this one's tenant spins in its start function until its
/// deadline) and must be under `--request-timeout-ms`.
#[test]
fn the_binary_takes_the_reload_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("sql-guard.wasm")).expect("copy");
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--plugins", &dir.path().display().to_string()])
        .args(["--listen", "127.0.0.1:0", "--request-timeout-ms", "5000"])
        .args(["--reload-wait-ms", "5000"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--reload-wait-ms"), "{err}");

    let (mut child, addr, _) = spawn_serve(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-cache",
            "--no-watch",
            "--reload-wait-ms",
            "0",
        ],
    );
    let spin = dir.path().join("tenants").join("spin");
    std::fs::create_dir_all(&spin).expect("mkdir");
    std::fs::write(
        spin.join("spin.wasm"),
        super::tenant_files::spinning_start(),
    )
    .expect("write");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (status, body) = runtime.block_on(async {
        let response = reqwest::Client::new()
            .post(format!("http://{addr}/v1/reload"))
            .json(&json!(null))
            .send()
            .await
            .expect("request");
        let status = response.status();
        (status, response.json::<Value>().await.expect("JSON"))
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["waited_ms"], 0, "{body}");
}

/// Starts `toolgate serve --plugins dir args...`; returns the child, the
/// address it printed and everything it printed up to that line.
/// A server whose standard error is closed once it has started (its reader
/// went away, as `spawn_serve`'s does after the banner) keeps serving: the
/// log lines it can no longer write — a faulting guard's warning, the
/// reload's — are dropped, and nothing panics.
#[test]
fn a_closed_standard_error_never_stops_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(HOSTILE, dir.path().join("hostile.wasm")).expect("copy");
    let mut child = crate::KillOnDrop::spawn(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--plugins", &dir.path().display().to_string()])
            .args(["--listen", "127.0.0.1:0", "--no-cache", "--no-watch"])
            .env("TOOLGATE_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = child.stderr.take().expect("stderr");
    let mut addr = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("line");
        if let Some(at) = line.find(" on http://") {
            addr = Some(line[at + " on http://".len()..].trim().to_string());
            break;
        }
    }
    // The reader is gone: every later write to standard error fails.
    let addr = addr.expect("the server printed its address");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let statuses = runtime.block_on(async {
        let client = reqwest::Client::new();
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let trap = client
                .post(format!("http://{addr}/v1/steering"))
                .json(&steering("trap", json!({})))
                .send()
                .await;
            statuses.push(trap.map(|r| r.status().as_u16()).unwrap_or(0));
            let reload = client
                .post(format!("http://{addr}/v1/reload"))
                .json(&json!(null))
                .send()
                .await;
            statuses.push(reload.map(|r| r.status().as_u16()).unwrap_or(0));
        }
        let health = client.get(format!("http://{addr}/healthz")).send().await;
        statuses.push(health.map(|r| r.status().as_u16()).unwrap_or(0));
        statuses
    });
    let exited = child.try_wait().expect("try_wait");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(exited, None, "the server exited");
    assert_eq!(statuses, [200; 7], "answers after standard error closed");
}

pub(crate) fn spawn_serve(dir: &Path, args: &[&str]) -> (crate::KillOnDrop, String, String) {
    let mut child = crate::KillOnDrop::spawn(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--plugins", &dir.display().to_string()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = child.stderr.take().expect("stderr");
    let mut banner = String::new();
    let mut addr = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("line");
        banner.push_str(&line);
        banner.push('\n');
        if let Some(at) = line.find(" on http://") {
            addr = Some(line[at + " on http://".len()..].trim().to_string());
            break;
        }
    }
    let addr = addr.unwrap_or_else(|| panic!("no address printed: {banner}"));
    (child, addr, banner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_finishes_times_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Running::start(
        &[("10-sql-guard.wasm", SQL_GUARD)],
        ServerConfig {
            request_timeout: Duration::from_millis(300),
            ..ServerConfig::default()
        },
    )
    .await;
    // Promise 100 bytes of body, send 10, then go quiet. (The server's
    // clock starts after this one.)
    let started = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(s.base.trim_start_matches("http://"))
        .await
        .expect("connect");
    stream
        .write_all(
            b"POST /v1/steering HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"event\":",
        )
        .await
        .expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
            if answer.windows(9).any(|w| w == b"timed out") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer within 60 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("timed out after 300 ms"), "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Other clients were never held up.
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await;
}

/// `toolgate serve` reloads on a change in the directory (the watcher) and,
/// with `--no-watch`, on SIGHUP.
#[test]
fn the_binary_reloads_on_change_and_on_sighup() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let global_plugins = |addr: &str| {
        runtime.block_on(async {
            let listed: Value = reqwest::get(format!("http://{addr}/v1/plugins"))
                .await
                .expect("request")
                .json()
                .await
                .expect("JSON");
            listed["global"].as_array().expect("global").len()
        })
    };
    let wait_for = |addr: &str, n: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while global_plugins(addr) != n {
            assert!(Instant::now() < deadline, "never saw {n} plugins");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("10-sql-guard.wasm")).expect("copy");
    let (mut child, addr, _) = spawn_serve(dir.path(), &["--listen", "127.0.0.1:0", "--no-cache"]);
    assert_eq!(global_plugins(&addr), 1);
    std::fs::copy(NO_EMAIL, dir.path().join(".20-no-email.wasm.tmp")).expect("copy");
    std::fs::rename(
        dir.path().join(".20-no-email.wasm.tmp"),
        dir.path().join("20-no-email.wasm"),
    )
    .expect("rename");
    wait_for(&addr, 2);
    let _ = child.kill();
    let _ = child.wait();

    let (mut child, addr, _) = spawn_serve(
        dir.path(),
        &["--listen", "127.0.0.1:0", "--no-cache", "--no-watch"],
    );
    assert_eq!(global_plugins(&addr), 2);
    std::fs::remove_file(dir.path().join("20-no-email.wasm")).expect("rm");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(global_plugins(&addr), 2, "--no-watch: no reload yet");
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    wait_for(&addr, 1);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_bodies_never_break_the_server() {
    let s = Running::start(&[("10-sql-guard.wasm", SQL_GUARD)], ServerConfig::default()).await;
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_event = format!(
        r#"{{"event":{{"run_id":"r","tool_name":"t","call_id":"c","args":{{"x":{}}}}}}}"#,
        format_args!("{}1{}", "[".repeat(5_000), "]".repeat(5_000))
    );
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"null".to_vec(),
        b"\xff\xfe\x00garbage".to_vec(),
        deep.into_bytes(),
        deep_event.into_bytes(),
        br#"{"event": {"run_id": "r", "tool_name": "t", "call_id": "c", "args": {}}, "event": 1}"#
            .to_vec(),
        br#"{"event": {"run_id": 1e999, "tool_name": "t", "call_id": "c", "args": {}}}"#.to_vec(),
        br#"{"event": {"run_id": "\ud800", "tool_name": "t", "call_id": "c", "args": {}}}"#
            .to_vec(),
    ];
    for body in bodies {
        let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
        let (status, answer) = s.post_raw("/v1/steering", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{shown}: {answer}");
        assert!(answer["error"].is_string(), "{shown}: {answer}");
    }
    // Large but legal values are fine: unicode, big args, a deep state.
    let mut call = steering(
        "run_query",
        json!({"sql": "DELETE FROM \u{1F600} ✓", "n": u64::MAX}),
    );
    call["state"] = json!({"nested": {"a": [[[[[[1]]]]]]}});
    let (status, answer) = s.post("/v1/steering", call).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer, steer_where());
    s.stop().await;
}

/// Integers of any size (including 10^39, whose digits are also a float's
/// shortest form) and the key order of args come back exactly as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_integers_and_key_order_pass_through_http() {
    let s = Running::start(&[("q.wasm", QUERY_LIMIT)], ServerConfig::default()).await;
    let body = r#"{"event": {"run_id": "r", "iteration_index": 0, "node_name": "react",
        "call_id": "c", "tool_name": "run_query", "available_tools": ["run_query"],
        "args": {"z": 1000000000000000000000000000000000000000, "sql": "SELECT 1",
                 "id": -18446744073709551616}}}"#;
    let response = reqwest::Client::new()
        .post(s.url("/v1/rewrite"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.expect("body");
    assert!(
        text.contains(
            r#""args":{"z":1000000000000000000000000000000000000000,"sql":"SELECT 1 LIMIT 100","id":-18446744073709551616}"#
        ),
        "{text}"
    );
    s.stop().await;
}

/// A global plugin restricted to some tenants is listed by `/v1/plugins`
/// (with its `tenants`) and counted in `plugins_loaded`, as `toolgate list`
/// shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_lists_global_plugins_restricted_to_tenants() {
    let s = Running::start(
        &[
            ("10-sql-guard.wasm", SQL_GUARD),
            ("20-no-email.wasm", NO_EMAIL),
        ],
        ServerConfig::default(),
    )
    .await;
    std::fs::write(
        s.dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"10-sql-guard.wasm\"\n\n\
         [[plugin]]\nname = \"no-email\"\npath = \"20-no-email.wasm\"\ntenants = [\"acme\"]\n",
    )
    .expect("manifest");
    let (status, report) = s.post("/v1/reload", json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let (_, body) = s.get("/v1/plugins").await;
    let listed: Value = serde_json::from_str(&body).expect("JSON");
    let global = listed["global"].as_array().expect("global");
    let names: Vec<&str> = global
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["10-sql-guard", "no-email"], "{listed}");
    assert_eq!(global[0].get("tenants"), None, "{listed}");
    assert_eq!(global[1]["tenants"], json!(["acme"]), "{listed}");
    let (_, metrics) = s.get("/metrics").await;
    assert!(
        metrics.contains("toolgate_plugins_loaded{chain=\"global\"} 2"),
        "{metrics}"
    );
    s.stop().await;
}

/// A tenant with more requests in progress than `[shares] tenant_requests`
/// gets 429 (with `Retry-After`) once its request waited `wait_ms`, counted
/// in `share_busy`; another tenant and the global chain are answered
/// meanwhile, and the tenant's request in progress still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_requests_in_progress_gets_429_and_no_one_else_does() {
    let s = Running::start_with(
        &[
            ("sql-guard.wasm", SQL_GUARD),
            ("tenants/a/hostile.wasm", HOSTILE),
            ("tenants/b/no-email.wasm", NO_EMAIL),
        ],
        &[
            (
                "toolgate.toml",
                "[ceilings]\ntimeout_ms = 5000\nfuel = 9223372036854775807\n\n[shares]\ntenant_requests = 1\nwait_ms = 100\n\n\
                 [quarantine]\nfaults = 0\n\n[[plugin]]\npath = \"sql-guard.wasm\"\n",
            ),
            (
                "tenants/a/toolgate.toml",
                "[[plugin]]\npath = \"hostile.wasm\"\ntimeout_ms = 1500\nfuel = 9223372036854775807\n",
            ),
        ],
        ServerConfig::default(),
    )
    .await;
    let (status, plugins) = s.get("/v1/plugins").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!plugins.contains("\"errors\":[{"), "{plugins}");
    let mut spin = steering("loop", json!({}));
    spin["tenant"] = json!("a");
    let spinning = tokio::spawn({
        let (client, url) = (s.client.clone(), s.url("/v1/steering?trace=1"));
        let spin = spin.clone();
        async move {
            let response = client.post(url).json(&spin).send().await.expect("request");
            (
                response.status(),
                response.json::<Value>().await.expect("JSON"),
            )
        }
    });
    let account = Arc::clone(&s.registry.plugin_set().accounts.tenants["a"]);
    eventually("the spinner's request is in progress", || {
        account.usage().requests == 1
    })
    .await;

    let busy = s
        .client
        .post(s.url("/v1/steering"))
        .json(&spin)
        .send()
        .await
        .expect("request");
    assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        busy.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let error = busy.json::<Value>().await.expect("JSON")["error"].clone();
    let error = error.as_str().expect("error text");
    assert!(
        error.contains("`a` has 1 requests in progress") && error.contains("tenant_requests"),
        "{error}"
    );
    for tenant in [json!("b"), Value::Null] {
        let mut call = steering("run_query", json!({"sql": "DELETE FROM users"}));
        call["tenant"] = tenant.clone();
        let (status, body) = s.post("/v1/steering", call).await;
        assert_eq!(
            (status, &body),
            (StatusCode::OK, &steer_where()),
            "{tenant}"
        );
    }
    let (_, metrics) = s.get("/metrics").await;
    assert_eq!(
        series(&metrics, "toolgate_share_busy{account=\"a\"}"),
        Some(1.0)
    );
    assert_eq!(
        series(&metrics, "toolgate_share_requests{account=\"a\"}"),
        Some(1.0)
    );
    assert_eq!(
        series(&metrics, "toolgate_share_requests_max{account=\"a\"}"),
        Some(1.0)
    );

    let (status, answer) = spinning.await.expect("task");
    spun_out(status, &answer);
    s.stop().await;
}

/// A guard the host cannot run in time is never skipped as if it had said
/// nothing: tenant `a`'s one instance is held by a spinning call, so its
/// next call cannot get one for the global sql-guard within `wait_ms` —
/// `share-exhausted`, the host's doing — and the request is answered 503
/// with `Retry-After`, naming the guard, not decided (a DELETE approved
/// unguarded before); counted as the guard's `unavailable` outcome, not as
/// a fault toward its quarantine. Tenant `b` is answered as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_the_host_cannot_run_in_time_gets_503_never_a_silent_proceed() {
    let s = Running::start_with(
        &[
            ("sql-guard.wasm", SQL_GUARD),
            ("tenants/a/hostile.wasm", HOSTILE),
            ("tenants/b/no-email.wasm", NO_EMAIL),
        ],
        &[
            (
                "toolgate.toml",
                "[ceilings]\ntimeout_ms = 5000\nfuel = 9223372036854775807\n\n\
                 [shares]\ntenant_instances = 1\ntenant_requests = 2\nwait_ms = 100\n\n\
                 [quarantine]\nfaults = 1\n\n[[plugin]]\npath = \"sql-guard.wasm\"\n",
            ),
            (
                "tenants/a/toolgate.toml",
                "[[plugin]]\npath = \"hostile.wasm\"\ntimeout_ms = 1500\nfuel = 9223372036854775807\n",
            ),
        ],
        ServerConfig::default(),
    )
    .await;
    let mut spin = steering("loop", json!({}));
    spin["tenant"] = json!("a");
    let spinning = tokio::spawn({
        let (client, url) = (s.client.clone(), s.url("/v1/steering?trace=1"));
        async move {
            let response = client.post(url).json(&spin).send().await.expect("request");
            (
                response.status(),
                response.json::<Value>().await.expect("JSON"),
            )
        }
    });
    // Until the spinner holds a's one instance.
    let held = tokio::time::timeout(Duration::from_secs(60), async {
        while s.registry.plugin_set().accounts.tenants["a"]
            .usage()
            .instances
            == 0
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    assert!(held.await.is_ok(), "the spinner never got its instance");
    // Past the spinner's quick sql-guard call, into its 1.5 s spin (a
    // long call: on the lane).
    let lane = Arc::clone(s.registry.engine().long_lane());
    eventually("the spinner spins", || lane.usage().running > 0).await;

    let mut delete = steering("run_query", json!({"sql": "DELETE FROM users"}));
    delete["tenant"] = json!("a");
    let refused = s
        .client
        .post(s.url("/v1/steering"))
        .json(&delete)
        .send()
        .await
        .expect("request");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        refused.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let error = refused.json::<Value>().await.expect("JSON")["error"].clone();
    let error = error.as_str().expect("error text");
    assert!(
        error.contains("guard `sql-guard`")
            && error.contains("share-exhausted")
            && error.contains("not decided"),
        "{error}"
    );
    let mut call = steering("run_query", json!({"sql": "DELETE FROM users"}));
    call["tenant"] = json!("b");
    assert_eq!(
        s.post("/v1/steering", call).await,
        (StatusCode::OK, steer_where())
    );
    let (_, metrics) = s.get("/metrics").await;
    assert_eq!(
        series(
            &metrics,
            "toolgate_guard_outcomes_total{plugin=\"sql-guard\",seam=\"steering\",outcome=\"unavailable\",cause=\"share-exhausted\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    // One fault quarantines (faults = 1); the host's own did not.
    let (_, plugins) = s.get("/v1/plugins").await;
    let plugins: Value = serde_json::from_str(&plugins).expect("JSON");
    assert_eq!(plugins["global"][0]["health"]["state"], "ok", "{plugins}");
    let (status, answer) = spinning.await.expect("task");
    spun_out(status, &answer);
    s.stop().await;
}

/// A tenant over `[shares] tenant_rate` waits for its turn, and a request
/// whose turn is further away than `wait_ms` is refused with 429 after
/// waiting `wait_ms` (a flooder that retries at once is slowed down too),
/// counted in `share_over_rate`; another tenant, whose own rate
/// (`[shares.tenants.b]`) is none, is answered at the same moment, and the
/// tenant's next turn comes at its rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_rate_waits_then_gets_429_and_no_one_else_does() {
    let s = Running::start_with(
        &[
            ("sql-guard.wasm", SQL_GUARD),
            ("tenants/a/no-email.wasm", NO_EMAIL),
            ("tenants/b/no-email.wasm", NO_EMAIL),
        ],
        &[(
            "toolgate.toml",
            "[shares]\ntenant_rate = 1\ntenant_burst = 2\ntenant_requests = 16\nwait_ms = 300\n\n\
             [shares.tenants.b]\nrate = 0\n\n[[plugin]]\npath = \"sql-guard.wasm\"\n",
        )],
        ServerConfig::default(),
    )
    .await;
    let call = |tenant: &str| {
        let mut call = steering("run_query", json!({"sql": "DELETE FROM users"}));
        call["tenant"] = json!(tenant);
        call
    };
    let start = Instant::now();
    let flood = (0..10).map(|_| {
        let (client, url, call) = (s.client.clone(), s.url("/v1/steering"), call("a"));
        tokio::spawn(async move {
            let response = client.post(url).json(&call).send().await.expect("request");
            let status = response.status();
            let body = response.json::<Value>().await.expect("JSON");
            (status, body, start.elapsed())
        })
    });
    let flood: Vec<_> = flood.collect();
    // b, whose own rate is none, in the middle of a's flood.
    for _ in 0..5 {
        let (status, body) = s.post("/v1/steering", call("b")).await;
        assert_eq!((status, &body), (StatusCode::OK, &steer_where()), "b");
    }
    let (mut answered, mut last) = (0, Duration::ZERO);
    for task in flood {
        let (status, body, took) = task.await.expect("task");
        last = last.max(took);
        if status == StatusCode::OK {
            assert_eq!(body, steer_where());
            answered += 1;
            continue;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        let error = body["error"].as_str().expect("error text");
        assert!(
            error.contains("`a` may start 1 requests a second (2 at once)")
                && error.contains("tenant_rate"),
            "{error}"
        );
        assert!(took >= Duration::from_millis(300), "refused after {took:?}");
    }
    // The burst of 2 at once; the next turn is a second away, past the
    // wait: a flood that reaches the server within it gets just those 2. On
    // a machine slow enough to spread the flood over seconds, the turns
    // that came meanwhile, at most one a second of it.
    let earned = 2 + last.as_secs();
    assert!(
        answered >= 2 && answered <= earned,
        "{answered} answered in {last:?}"
    );
    let (_, metrics) = s.get("/metrics").await;
    let over_rate = (10 - answered) as f64;
    for (series_name, value) in [
        ("toolgate_share_over_rate{account=\"a\"}", over_rate),
        ("toolgate_share_rate{account=\"a\"}", 1.0),
        ("toolgate_share_over_rate{account=\"b\"}", 0.0),
        ("toolgate_share_rate{account=\"b\"}", 0.0),
        ("toolgate_share_busy{account=\"a\"}", 0.0),
    ] {
        assert_eq!(series(&metrics, series_name), Some(value), "{series_name}");
    }
    // Refused requests took no turn: the next comes a second after the
    // last answered one (answered by `last`), not eight seconds later.
    let next = start + last + Duration::from_secs(answered - 1) + Duration::from_millis(100);
    tokio::time::sleep_until(next.into()).await;
    let (status, body) = s.post("/v1/steering", call("a")).await;
    assert_eq!(
        (status, &body),
        (StatusCode::OK, &steer_where()),
        "a's next turn"
    );
    s.stop().await;
}

/// `serve` answers as soon as the global directory is loaded: a tenant
/// still loading (its start function spins for the whole load probe) is
/// answered 503 with `Retry-After` — never decided without its guards —
/// and `/readyz` names it, while `/healthz`, the global chain and every
/// tenant already loaded answer; each tenant comes online when it is ready.
#[test]
fn the_binary_serves_from_its_first_second_and_tenants_come_online_one_by_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("10-sql-guard.wasm")).expect("copy");
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[ceilings]\ntimeout_ms = 600000\nfuel = 9223372036854775807\n\n\
         [[plugin]]\npath = \"10-sql-guard.wasm\"\n",
    )
    .expect("write");
    let spin = dir.path().join("tenants").join("spin");
    std::fs::create_dir_all(&spin).expect("mkdir");
    std::fs::write(
        spin.join("spin.wasm"),
        super::tenant_files::spinning_start(),
    )
    .expect("write");
    std::fs::write(
        spin.join("toolgate.toml"),
        "[[plugin]]\npath = \"spin.wasm\"\ntimeout_ms = 600000\nfuel = 9223372036854775807\n",
    )
    .expect("write");
    let b = dir.path().join("tenants").join("b");
    std::fs::create_dir_all(&b).expect("mkdir");
    std::fs::copy(NO_EMAIL, b.join("no-email.wasm")).expect("copy");
    let (mut child, addr, banner) = spawn_serve(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-cache",
            "--probe-timeout-ms",
            "600000",
        ],
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::new();
    let call = |tenant: &str, args: Value| {
        runtime.block_on(async {
            let r = client
                .post(format!("http://{addr}/v1/steering"))
                .json(&json!({"event": {"run_id": "r", "call_id": "c", "tool_name": "send_email", "args": args}, "tenant": tenant}))
                .send()
                .await
                .expect("request");
            let status = r.status();
            let retry = r.headers().get("retry-after").is_some();
            let body: Value = r.json().await.expect("JSON");
            (status, retry, body)
        })
    };
    let get = |path: &str| {
        runtime.block_on(async {
            let r = client
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .expect("request");
            let status = r.status();
            (status, r.json::<Value>().await.expect("JSON"))
        })
    };
    // The spinning tenant is still loading: answered, refused, named.
    let (status, retry, body) = call("spin", json!({"to": "a@b.c"}));
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body} {banner}");
    assert!(retry, "Retry-After");
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("tenant `spin` is not ready"),
        "{body}"
    );
    let (status, ready) = get("/readyz");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert!(
        ready["tenants"]
            .as_array()
            .expect("tenants")
            .contains(&json!("spin")),
        "{ready}"
    );
    assert_eq!(get("/healthz").0, StatusCode::OK);
    // The global chain serves.
    let (status, _, body) = call("nobody", json!({"sql": "DELETE FROM t"}));
    assert_eq!(status, StatusCode::OK, "{body}");
    // Tenant b comes online on its own, spin still loading.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _, body) = call("b", json!({"to": "a@b.c"}));
        if status == StatusCode::OK {
            assert_eq!(body["action"], "skip", "no-email steers: {body}");
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(Instant::now() < deadline, "tenant b never came online");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, ready) = get("/readyz");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert_eq!(ready["tenants"], json!(["spin"]), "{ready}");
    assert_eq!(call("spin", json!({})).0, StatusCode::SERVICE_UNAVAILABLE);
    let _ = child.kill();
    let _ = child.wait();
}

/// The request's `state` reaches the guard as sent — integers beyond
/// `i64` and `f64`, keys out of order — at steering and rewrite, and
/// `{}` when the request has none (the `memo` guest echoes it).
#[tokio::test]
async fn state_reaches_the_guard_over_http_as_sent() {
    let s = Running::start(
        &[("memo.wasm", toolgate_tests::MEMO)],
        ServerConfig::default(),
    )
    .await;
    let state = r#"{"z":18446744073709551616,"a":{"y":-170141183460469231731687303715884105729,"b":0.1},"tenant":"acme"}"#;
    let steering = r#"{"run_id": "r", "tool_name": "t", "call_id": "c", "args": {}}"#;
    let dispatch = r#"{"run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "d",
        "tool_name": "t", "args": {}, "available_tools": ["t"]}"#;
    let post = |path: &'static str, body: String| {
        let request = s
            .client
            .post(s.url(path))
            .header("content-type", "application/json")
            .body(body);
        async move {
            let response = request.send().await.expect("request");
            assert_eq!(response.status(), StatusCode::OK);
            response.text().await.expect("body")
        }
    };
    let seen = format!(r#"{{"calls":1,"last":null,"state":{state}}}"#);
    let text = post(
        "/v1/steering",
        format!(r#"{{"event": {steering}, "state": {state}}}"#),
    )
    .await;
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(answer["content"].as_str(), Some(seen.as_str()), "{text}");
    let text = post(
        "/v1/rewrite",
        format!(r#"{{"event": {dispatch}, "state": {state}}}"#),
    )
    .await;
    assert!(text.contains(&format!(r#""args":{seen}"#)), "{text}");
    let text = post("/v1/steering", format!(r#"{{"event": {steering}}}"#)).await;
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        answer["content"].as_str(),
        Some(r#"{"calls":1,"last":null,"state":{}}"#),
        "{text}"
    );
    s.stop().await;
}

/// A request nested 127 levels deep (the body's own object the first) is
/// answered; one level more — 128, serde_json's recursion limit — is
/// refused with 400 naming the line and the column (README: "refuse a
/// request nested 128 levels deep or deeper").
#[tokio::test]
async fn the_nesting_limit_is_at_128_levels() {
    let s = Running::start(&[("sql-guard.wasm", SQL_GUARD)], ServerConfig::default()).await;
    // `{"event": {..., "args": {"deep": [[...1...]]}}}`: three objects, then
    // `depth - 3` arrays.
    let body = |depth: usize| {
        let arrays = depth - 3;
        format!(
            r#"{{"event": {{"run_id": "r", "tool_name": "search", "call_id": "c", "args": {{"deep": {}1{}}}}}}}"#,
            "[".repeat(arrays),
            "]".repeat(arrays)
        )
    };
    let (status, answer) = s.post_raw("/v1/steering", body(127)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer, Value::Null);
    let (status, answer) = s.post_raw("/v1/steering", body(128)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let error = answer.to_string();
    assert!(
        error.contains("recursion limit") && error.contains("line 1") && error.contains("column"),
        "{error}"
    );
    s.stop().await;
}

/// `toolgate serve --tenant-tokens-file`: the binary reads the file; a
/// tenant's token calls as that tenant (its own guard runs), cannot call
/// as another (403) nor reach the operator's endpoints (403); an unknown
/// token is refused (401); a file without `--token-file`, or one that
/// cannot be parsed, stops the binary at start with exit 2 naming it.
#[test]
fn the_binary_serves_tenants_by_their_tokens_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins");
    for (name, src) in [
        ("tenants/acme/sql-guard.wasm", SQL_GUARD),
        ("tenants/beta/no-email.wasm", NO_EMAIL),
    ] {
        let dest = plugins.join(name);
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        std::fs::copy(src, dest).expect("copy");
    }
    let operator = dir.path().join("token");
    std::fs::write(&operator, "operator-secret\n").expect("write");
    let tenants = dir.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        format!(
            "acme = \"sha256:{}\"\nbeta = \"sha256:{}\"\n",
            hex(b"acme-secret"),
            hex(b"beta-secret")
        ),
    )
    .expect("write");
    let (operator, tenants) = (
        operator.display().to_string(),
        tenants.display().to_string(),
    );

    // Refused at start: no operator token, or a file that does not parse.
    let refused = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--plugins", &plugins.display().to_string()])
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&["--tenant-tokens-file", &tenants]);
    assert!(
        err.contains("--tenant-tokens-file needs --token-file"),
        "{err}"
    );
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "acme = \"not-a-digest\"\n").expect("write");
    let err = refused(&[
        "--token-file",
        &operator,
        "--tenant-tokens-file",
        &broken.display().to_string(),
    ]);
    assert!(err.contains("broken.toml") && err.contains("acme"), "{err}");

    let (mut child, addr, _) = spawn_serve(
        &plugins,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            &operator,
            "--tenant-tokens-file",
            &tenants,
        ],
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let call = |token: &str, body: &Value| {
            client
                .post(format!("http://{addr}/v1/steering"))
                .bearer_auth(token)
                .json(body)
                .send()
        };
        // Tenants come online after the server answers: until `/readyz`.
        let ready = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let r = client.get(format!("http://{addr}/readyz")).send().await;
                if r.is_ok_and(|r| r.status() == StatusCode::OK) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert!(ready.await.is_ok(), "every tenant loaded");
        let delete = steering("run_query", json!({"sql": "DELETE FROM t"}));
        let email = steering("send_email", json!({"to": "x@example.com"}));
        // Each token runs its own tenant's guards.
        let r = call("acme-secret", &delete).await.expect("request");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.json::<Value>().await.expect("JSON"), steer_where());
        let r = call("beta-secret", &delete).await.expect("request");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.json::<Value>().await.expect("JSON"), Value::Null);
        let r = call("beta-secret", &email).await.expect("request");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.json::<Value>().await.expect("JSON")["action"],
            json!("skip")
        );
        // beta's token cannot call as acme.
        let mut as_acme = delete.clone();
        as_acme["tenant"] = json!("acme");
        let r = call("beta-secret", &as_acme).await.expect("request");
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let body = r.json::<Value>().await.expect("JSON");
        assert_eq!(
            body["error"],
            "tenant `beta`'s token cannot call as tenant `acme`"
        );
        // The operator's token calls as anyone; the plugin list is its alone.
        let r = call("operator-secret", &as_acme).await.expect("request");
        assert_eq!(r.json::<Value>().await.expect("JSON"), steer_where());
        for (token, status) in [
            ("acme-secret", StatusCode::FORBIDDEN),
            ("operator-secret", StatusCode::OK),
        ] {
            let r = client
                .get(format!("http://{addr}/v1/plugins"))
                .bearer_auth(token)
                .send()
                .await
                .expect("request");
            assert_eq!(r.status(), status, "{token}");
        }
        let r = call("nobody-secret", &delete).await.expect("request");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    });
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn a_global_guards_state_is_each_tenants_own_and_the_operator_sees_and_clears_it() {
    let manifest = "[[plugin]]\npath = \"tool-call-limit.wasm\"\n\
                    [plugin.config]\ntool = \"send_email\"\nrun_limit = 1\n";
    let s = Running::start_with(
        &[
            ("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT),
            ("tenants/a/sql-guard.wasm", SQL_GUARD),
            ("tenants/b/sql-guard.wasm", SQL_GUARD),
        ],
        &[("toolgate.toml", manifest)],
        ServerConfig::default(),
    )
    .await;
    let email = |tenant: &str, call: &str| {
        json!({"tenant": tenant, "event": {"run_id": "r", "tool_name": "send_email",
            "call_id": call, "args": {}}})
    };
    let cancelled = json!({"action": "skip", "is_error": false,
        "content": "Tool call limit exceeded. Do not call 'send_email' again."});
    assert_eq!(
        s.post("/v1/steering", email("a", "1")).await,
        (StatusCode::OK, Value::Null)
    );
    assert_eq!(
        s.post("/v1/steering", email("a", "2")).await,
        (StatusCode::OK, cancelled.clone())
    );
    // The same guard, run id and key for tenant b: b's own count.
    assert_eq!(
        s.post("/v1/steering", email("b", "3")).await,
        (StatusCode::OK, Value::Null)
    );
    let (status, body) = s.get("/v1/state?tenant=a").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        listed["entries"],
        json!([{"tenant": "a", "plugin": "tool-call-limit", "run": "r",
            "key": "calls:send_email", "value": "1", "ttl_ms": null}]),
        "{body}"
    );
    let r = s
        .client
        .delete(s.url("/v1/state?tenant=a&run=r"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!({"removed": 1})
    );
    assert_eq!(
        s.post("/v1/steering", email("a", "4")).await,
        (StatusCode::OK, Value::Null),
        "cleared"
    );
    assert_eq!(
        s.post("/v1/steering", email("b", "5")).await,
        (StatusCode::OK, cancelled),
        "b untouched"
    );
    let (status, body) = s.get("/v1/state").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_requests_show_in_plugins_and_metrics() {
    let up = crate::outbound::Upstream::start().await;
    let manifest = format!(
        r#"
[[plugin]]
name = "asks"
path = "fetcher.wasm"
allowed_hosts = ["{granted}"]
[plugin.config]
requests = [{{ url = "{echo}" }}]

[[plugin]]
name = "strays"
path = "fetcher.wasm"
allowed_hosts = ["{granted}"]
[plugin.config]
requests = [{{ url = "http://198.51.100.7/x" }}]
"#,
        granted = up.url(""),
        echo = up.url("/echo"),
    );
    let s = Running::start_with(
        &[("fetcher.wasm", toolgate_tests::FETCHER)],
        &[("toolgate.toml", &manifest)],
        ServerConfig::default(),
    )
    .await;
    // `asks` answers (a skip listing what came back): the chain stops there.
    let (status, body) = s
        .post("/v1/steering", steering("send_email", json!({})))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["content"]
            .as_str()
            .expect("content")
            .contains("\"status\":200"),
        "{body}"
    );
    // `strays` alone: its request is off its grant.
    let strays = s.registry.plugin_set();
    let strays = &strays.global_plugins[1].plugin;
    let d = toolgate::Chain::new(vec![Arc::clone(strays)])
        .steering(&crate::steering("send_email", json!({})), &json!({}))
        .await;
    assert_eq!(d.trace[0].fault, Some(toolgate::Fault::HttpDenied));

    let (_, body) = s.get("/v1/plugins").await;
    let listed: Value = serde_json::from_str(&body).expect("JSON");
    let asks = &listed["global"][0]["http"];
    assert_eq!(asks["grant"]["hosts"], json!([up.url("")]), "{listed}");
    assert_eq!(asks["grant"]["methods"], json!(["GET", "POST"]));
    let requests = asks["requests"].as_array().expect("requests");
    assert_eq!(requests.len(), 1, "{asks}");
    assert_eq!(
        (
            &requests[0]["host"],
            &requests[0]["outcome"],
            &requests[0]["count"]
        ),
        (&json!(up.url("")), &json!("ok"), &json!(1))
    );
    assert!(requests[0]["received"].as_u64().expect("bytes") > 0);
    let strays = &listed["global"][1]["http"]["requests"][0];
    assert_eq!(
        (&strays["host"], &strays["outcome"]),
        (&json!("-"), &json!("http-denied"))
    );

    let (_, text) = s.get("/metrics").await;
    let granted = up.url("");
    assert_eq!(
        series(
            &text,
            &format!(
                "toolgate_outbound_requests{{plugin=\"asks\",host=\"{granted}\",outcome=\"ok\"}}"
            )
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "toolgate_outbound_requests{plugin=\"strays\",host=\"-\",outcome=\"http-denied\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        series(&text, &format!("toolgate_outbound_bytes{{plugin=\"asks\",host=\"{granted}\",direction=\"received\"}}"))
            .is_some_and(|b| b > 0.0),
        "{text}"
    );
}

#[tokio::test]
async fn tenants_without_a_directory_keep_their_own_state_apart_and_apart_from_tenantless_calls() {
    let manifest = "[[plugin]]\npath = \"tool-call-limit.wasm\"\n\
                    [plugin.config]\nthread_limit = 1\n";
    let s = Running::start_with(
        &[("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT)],
        &[("toolgate.toml", manifest)],
        ServerConfig::default(),
    )
    .await;
    let search = |tenant: Option<&str>, run: &str| {
        let mut body = json!({"event": {"run_id": run, "tool_name": "search",
            "call_id": "c", "args": {}}, "state": {"thread_id": "T"}});
        if let Some(t) = tenant {
            body["tenant"] = json!(t);
        }
        body
    };
    // acme's first search proceeds, and so does zeta's first: neither has
    // a directory, and neither counts against the other or against calls
    // without a tenant.
    for tenant in [Some("acme"), Some("zeta"), None] {
        assert_eq!(
            s.post("/v1/steering", search(tenant, "r1")).await,
            (StatusCode::OK, Value::Null),
            "{tenant:?}"
        );
    }
    for tenant in [Some("acme"), Some("zeta"), None] {
        let (status, answer) = s.post("/v1/steering", search(tenant, "r2")).await;
        assert_eq!(
            (status, &answer["action"]),
            (StatusCode::OK, &json!("skip")),
            "{tenant:?}"
        );
    }
    // The operator sees them apart.
    for tenant in ["acme", "zeta", ""] {
        let (status, body) = s.get(&format!("/v1/state?tenant={tenant}")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let listed: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(
            listed["entries"],
            json!([{"tenant": tenant, "plugin": "tool-call-limit", "run": null,
                "key": "thread:T:calls:*", "value": "1", "ttl_ms": listed["entries"][0]["ttl_ms"]}]),
            "{body}"
        );
    }
    s.stop().await;
}
