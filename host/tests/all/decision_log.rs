//! The decision log: a masked field appears in no sink
//! (file, HTTP, stdout), a fault's detail and a skip's message included;
//! a dead HTTP sink costs the decisions nothing and its drops are counted;
//! the file sink rotates, keeping N; a tenant's manifest cannot set it.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use serde_json::{Value, json};
use toolgate::decision_log::DecisionLog;
use toolgate::event::Seam;
use toolgate::manifest::{Manifest, Scope};
use toolgate::{DecideRequest, Metrics, Registry, RegistryOptions};
use toolgate_tests::{ECHO, FETCHER, HIDE_ADMIN_TOOLS, RENDER, RESULT_AUDIT, SQL_GUARD, STATEFUL};

use crate::engine;

/// Parses `text`'s lines. (Their shape is checked against the published
/// schema by `every_line_the_host_writes_matches_the_published_schema`,
/// and by `tests/langs/test_decision_log.py` for `replay` and `check`.)
fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// `dir` with `components` copied in and `manifest` written.
fn plugin_dir(dir: &Path, components: &[&str], manifest: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for c in components {
        let name = Path::new(c).file_name().expect("a file name");
        std::fs::copy(c, dir.join(name)).expect("copy");
    }
    std::fs::write(dir.join("toolgate.toml"), manifest).expect("manifest");
}

async fn open(dir: &Path) -> Registry {
    let reg = Registry::open_with(engine(), dir, RegistryOptions::default())
        .await
        .expect("registry");
    let errors = &reg.plugin_set().errors;
    assert!(errors.is_empty(), "{errors:?}");
    reg
}

fn log_of(reg: &Registry) -> Arc<DecisionLog> {
    reg.plugin_set()
        .decision_log
        .clone()
        .expect("a decision log")
}

async fn decide(reg: &Registry, seam: Seam, body: Value) -> Value {
    let request = DecideRequest::from_value(seam, body).expect("a request");
    request
        .decide(&reg.plugin_set())
        .await
        .expect("decided")
        .answer(false)
}

const PASSWORD: &str = "hunter22";
const EMAIL: &str = "ada@example.org";
const TOKEN: &str = "tok-5ecret";

/// The guards and the masking of the privacy test; `sink` is the
/// `[decision_log]` lines that say where.
fn masking_manifest(sink: &str) -> String {
    format!(
        r#"[decision_log]
{sink}
include = ["args", "content", "state"]
mask = ["args.password", "state.user.email", "content.token"]
max_string_bytes = 64

[[plugin]]
path = "hide-admin-tools.wasm"

[[plugin]]
path = "fetcher.wasm"
allowed_hosts = ["https://example.com"]
config = {{ requests = [{{ url = "http://{{args.password}}.invalid/" }}] }}

[[plugin]]
path = "echo.wasm"

[[plugin]]
path = "result-audit.wasm"
"#
    )
}

/// One call of each seam, every one carrying the secrets; a long string
/// to be cut.
async fn decide_every_seam(reg: &Registry, tenant: Option<&str>) {
    let state = json!({"user": {"email": EMAIL, "name": "Ada"}, "note": "x".repeat(200)});
    let args = json!({"password": PASSWORD, "q": "select 1"});
    let with = |event: Value| {
        let mut body = json!({"event": event, "state": state});
        if let Some(t) = tenant {
            body["tenant"] = t.into();
        }
        body
    };
    let routing = decide(
        reg,
        Seam::Routing,
        with(
            json!({"run_id": "r1", "mode": "enforce", "intent_label": "x", "total_tools": 2,
                    "narrowed_tool_names": ["search", "admin_drop"]}),
        ),
    )
    .await;
    assert_eq!(routing, json!(["search"]));
    let rewrite = decide(
        reg,
        Seam::Rewrite,
        with(
            json!({"run_id": "r1", "iteration_index": 0, "node_name": "react",
                    "call_id": "c1", "tool_name": "search", "args": args,
                    "available_tools": ["search"]}),
        ),
    )
    .await;
    assert_eq!(
        rewrite["args"]["password"], PASSWORD,
        "the answer is not masked"
    );
    let steering = decide(
        reg,
        Seam::Steering,
        with(json!({"run_id": "r1", "call_id": "c2", "tool_name": "search", "args": args})),
    )
    .await;
    assert!(
        steering["content"]
            .as_str()
            .is_some_and(|c| c.contains(PASSWORD)),
        "echo quotes the args: {steering}"
    );
    decide(
        reg,
        Seam::Result,
        with(
            json!({"run_id": "r1", "call_id": "c2", "tool_name": "search",
                    "result": {"token": TOKEN, "rows": 3}}),
        ),
    )
    .await;
}

/// The four lines `decide_every_seam` wrote: no secret
/// anywhere, each masked field `[masked]`, the fault's detail scrubbed.
fn check_masked(text: &str, tenant: Option<&str>) {
    for secret in [PASSWORD, EMAIL, TOKEN] {
        assert!(!text.contains(secret), "`{secret}` was logged:\n{text}");
    }
    let lines = lines(text);
    let seams: Vec<&str> = lines
        .iter()
        .map(|l| l["seam"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        seams,
        ["routing", "rewrite", "steering", "result"],
        "{text}"
    );
    for line in &lines {
        assert_eq!(line["tenant"].as_str(), tenant);
        assert_eq!(line["state"]["user"]["email"], "[masked]");
        assert_eq!(line["state"]["user"]["name"], "Ada", "unmasked fields stay");
        let note = line["state"]["note"].as_str().expect("note");
        assert!(
            note.starts_with(&"x".repeat(64)) && note.ends_with("[cut 136 bytes]"),
            "{note}"
        );
    }
    let [routing, rewrite, steering, result] = &lines[..] else {
        unreachable!()
    };
    assert_eq!(routing["decision"], json!(["search"]));
    assert_eq!(routing["guards"][0]["outcome"], "narrow");
    assert_eq!(routing["guards"][0]["plugin"], "hide-admin-tools");
    assert_eq!(
        routing["guards"][0]["digest"],
        toolgate::digest(&std::fs::read(HIDE_ADMIN_TOOLS).expect("component"))
    );
    assert_eq!(rewrite["args"]["password"], "[masked]");
    assert_eq!(rewrite["decision"]["args"]["password"], "[masked]");
    assert_eq!(rewrite["decision"]["args"]["q"], "select 1");
    let guards = steering["guards"].as_array().expect("guards");
    let fetcher = &guards[0];
    assert_eq!(
        (&fetcher["plugin"], &fetcher["fault"]),
        (&json!("fetcher"), &json!("http-denied"))
    );
    let detail = fetcher["detail"].as_str().expect("a fault detail");
    assert!(detail.contains("[masked]"), "{detail}");
    assert_eq!(
        (&guards[1]["plugin"], &guards[1]["outcome"]),
        (&json!("echo"), &json!("skip"))
    );
    assert_eq!(steering["verdict"], "skip");
    assert!(
        steering["decision"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("[masked]"))
    );
    assert_eq!(result["content"], json!({"token": "[masked]", "rows": 3}));
    assert_eq!(result["guards"][0]["outcome"], "observed");
}

/// A loopback HTTP endpoint that keeps every body POSTed to it, gunzipped.
async fn collector() -> (SocketAddr, Arc<Mutex<String>>) {
    let got = Arc::new(Mutex::new(String::new()));
    let kept = got.clone();
    let app = axum::Router::new().route(
        "/logs",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                assert_eq!(headers["content-encoding"], "gzip");
                assert_eq!(headers["content-type"], "application/x-ndjson");
                let mut text = String::new();
                flate2::read::GzDecoder::new(&body[..])
                    .read_to_string(&mut text)
                    .expect("a gzipped body");
                kept.lock().expect("lock").push_str(&text);
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masked_field_appears_in_no_sink() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, out) = (
        tmp.path().join("plugins"),
        tmp.path().join("decisions.jsonl"),
    );
    let components = [HIDE_ADMIN_TOOLS, FETCHER, ECHO, RESULT_AUDIT];
    plugin_dir(
        &dir,
        &components,
        &masking_manifest(&format!("path = {:?}", out.display().to_string())),
    );
    std::fs::create_dir_all(dir.join("tenants/acme")).expect("tenant dir");
    let reg = open(&dir).await;

    // The file sink, for the global chain and a tenant's.
    decide_every_seam(&reg, None).await;
    log_of(&reg).flush().await;
    check_masked(&std::fs::read_to_string(&out).expect("the log file"), None);
    decide_every_seam(&reg, Some("acme")).await;
    log_of(&reg).flush().await;
    let text = std::fs::read_to_string(&out).expect("the log file");
    let tenant_lines: Vec<&str> = text.lines().skip(4).collect();
    check_masked(&tenant_lines.join("\n"), Some("acme"));

    // The HTTP sink, after a reload that changed only [decision_log].
    let (addr, got) = collector().await;
    let sink = format!("url = \"http://{addr}/logs\"\nflush_ms = 10");
    std::fs::write(dir.join("toolgate.toml"), masking_manifest(&sink)).expect("manifest");
    reg.reload().await.expect("reload");
    decide_every_seam(&reg, None).await;
    log_of(&reg).flush().await;
    check_masked(&got.lock().expect("lock"), None);

    // stdout, set by `serve`'s flags over a manifest without the table.
    let flags_dir = tmp.path().join("flags");
    let manifest = masking_manifest("");
    let manifest = manifest.split_once("[[plugin]]").map_or("", |(_, p)| p);
    plugin_dir(&flags_dir, &components, &format!("[[plugin]]{manifest}"));
    std::fs::create_dir_all(flags_dir.join("tenants")).expect("tenants dir");
    let mut child = crate::KillOnDrop::spawn(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args([
                "serve",
                "--plugins",
                &flags_dir.display().to_string(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args([
                "--decision-log",
                "stdout",
                "--decision-log-include",
                "args,content,state",
            ])
            .args(["--decision-log-mask", "args.password,state.user.email"])
            .args([
                "--decision-log-mask",
                "content.token",
                "--decision-log-max-string-bytes",
                "64",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let stderr = child.0.stderr.take().expect("stderr");
    let addr = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split_once(" on http://")
                .map(|(_, a)| a.trim().to_string())
        })
        .expect("the address");
    let client = reqwest::Client::new();
    let stdout = child.0.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(4)
            .collect::<Vec<_>>()
    });
    for (seam, event) in http_events() {
        let body = json!({"event": event, "state": {"user": {"email": EMAIL, "name": "Ada"}, "note": "x".repeat(200)}});
        let r = client
            .post(format!("http://{addr}/v1/{seam}"))
            .json(&body)
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), 200);
    }
    let text = reader.join().expect("stdout read").join("\n");
    check_masked(&text, None);
}

/// The events of `decide_every_seam`, as HTTP bodies' events.
fn http_events() -> [(&'static str, Value); 4] {
    let args = json!({"password": PASSWORD, "q": "select 1"});
    [
        (
            "routing",
            json!({"run_id": "r1", "mode": "enforce", "intent_label": "x", "total_tools": 2,
                           "narrowed_tool_names": ["search", "admin_drop"]}),
        ),
        (
            "rewrite",
            json!({"run_id": "r1", "iteration_index": 0, "node_name": "react",
                           "call_id": "c1", "tool_name": "search", "args": args,
                           "available_tools": ["search"]}),
        ),
        (
            "steering",
            json!({"run_id": "r1", "call_id": "c2", "tool_name": "search", "args": args}),
        ),
        (
            "result",
            json!({"run_id": "r1", "call_id": "c2", "tool_name": "search",
                          "result": {"token": TOKEN, "rows": 3}}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_no_input_is_logged() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, out) = (tmp.path().join("plugins"), tmp.path().join("d.jsonl"));
    let manifest = format!(
        "[decision_log]\npath = {:?}\n\n[[plugin]]\npath = \"sql-guard.wasm\"\n",
        out.display().to_string()
    );
    plugin_dir(&dir, &[SQL_GUARD], &manifest);
    let reg = open(&dir).await;
    let answer = decide(
        &reg,
        Seam::Steering,
        json!({"event": {"run_id": "r", "call_id": "c", "tool_name": "run_query",
                         "args": {"sql": "DELETE FROM users"}}, "state": {"k": "v"}}),
    )
    .await;
    assert_eq!(answer["action"], "skip");
    log_of(&reg).flush().await;
    let one = lines(&std::fs::read_to_string(&out).expect("log"));
    let [line] = &one[..] else { panic!("{one:?}") };
    for part in ["args", "state", "content", "shadow", "agrees"] {
        assert!(line.get(part).is_none(), "`{part}` logged: {line}");
    }
    assert_eq!(line["decision"], answer);
    assert_eq!(
        (&line["verdict"], &line["call_id"], &line["tool_name"]),
        (&json!("skip"), &json!("c"), &json!("run_query"))
    );
    assert_eq!(line["guards"][0]["mode"], "enforce");
    assert_eq!(line["generation"], reg.plugin_set().generation);

    // `toolgate check` writes the same line before it exits.
    let event = tmp.path().join("event.json");
    std::fs::write(
        &event,
        r#"{"run_id": "r", "call_id": "c", "tool_name": "run_query", "args": {"sql": "DELETE FROM users"}}"#,
    )
    .expect("event");
    let checked = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args([
            "check",
            "--plugins",
            &dir.display().to_string(),
            "--seam",
            "steering",
        ])
        .args(["--event", &event.display().to_string(), "--no-cache"])
        .output()
        .expect("toolgate check");
    assert!(checked.status.success(), "{checked:?}");
    let both = lines(&std::fs::read_to_string(&out).expect("log"));
    let [first, second] = &both[..] else {
        panic!("{both:?}")
    };
    for key in [
        "seam",
        "tenant",
        "run_id",
        "call_id",
        "tool_name",
        "verdict",
        "decision",
    ] {
        assert_eq!(first[key], second[key], "{key}");
    }
    assert_eq!(first["guards"][0]["digest"], second["guards"][0]["digest"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_http_sink_never_holds_a_decision_and_its_drops_are_counted() {
    // Accepts connections and never answers a byte.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = dead.local_addr().expect("addr");
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for conn in dead.incoming().map_while(Result::ok) {
            keep.lock().expect("lock").push(conn);
        }
    });
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("plugins");
    let manifest = format!(
        "[decision_log]\nurl = \"http://{addr}/logs\"\nqueue_lines = 4\nbatch_lines = 2\nflush_ms = 1\n\
         retries = 0\ntimeout_ms = 600000\n\n[[plugin]]\npath = \"sql-guard.wasm\"\n"
    );
    plugin_dir(&dir, &[SQL_GUARD], &manifest);
    let reg = open(&dir).await;
    let log = log_of(&reg);
    let before = toolgate::decision_log::dropped_total();
    let mut skipped = 0;
    for i in 0..100 {
        let answer = decide(
            &reg,
            Seam::Steering,
            json!({"event": {"run_id": "r", "call_id": format!("c{i}"), "tool_name": "run_query",
                             "args": {"sql": "DELETE FROM users"}}}),
        )
        .await;
        skipped += usize::from(answer["action"] == "skip");
    }
    assert_eq!(skipped, 100, "every call decided while the sink hangs");
    // At most one batch in the hung POST and a full queue were kept.
    assert!(
        log.dropped() >= 100 - 2 - 4 - 1,
        "dropped {}",
        log.dropped()
    );
    assert!(toolgate::decision_log::dropped_total() - before >= log.dropped());
    assert!(
        held.lock().expect("lock").len() <= 1,
        "one POST, never answered"
    );
    let metrics = Metrics::new();
    metrics.observe(&reg);
    let page = metrics.encode();
    let counted = page
        .lines()
        .find_map(|l| l.strip_prefix("toolgate_decision_log_dropped_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no toolgate_decision_log_dropped_total in\n{page}"));
    assert!(
        counted >= log.dropped() as f64,
        "{counted} < {}",
        log.dropped()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_sink_rotates_keeping_n() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, out) = (tmp.path().join("plugins"), tmp.path().join("d.jsonl"));
    let manifest = format!(
        "[decision_log]\npath = {:?}\nmax_file_kib = 1\nkeep_files = 2\n\n[[plugin]]\npath = \"sql-guard.wasm\"\n",
        out.display().to_string()
    );
    plugin_dir(&dir, &[SQL_GUARD], &manifest);
    let reg = open(&dir).await;
    for i in 0..40 {
        decide(
            &reg,
            Seam::Steering,
            json!({"event": {"run_id": "r", "call_id": format!("c{i}"), "tool_name": "run_query",
                             "args": {"sql": "SELECT 1"}}}),
        )
        .await;
    }
    log_of(&reg).flush().await;
    let numbered = |n: u32| PathBuf::from(format!("{}.{n}", out.display()));
    assert!(
        !numbered(3).exists(),
        "only keep_files = 2 rotated files are kept"
    );
    let mut kept = Vec::new();
    for file in [numbered(2), numbered(1), out.clone()] {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.len() <= 1024,
            "{} holds {} bytes",
            file.display(),
            text.len()
        );
        kept.extend(
            lines(&text)
                .into_iter()
                .map(|l| l["call_id"].as_str().unwrap_or("?").to_string()),
        );
    }
    // The newest lines, in order, none lost between the files kept.
    let first: usize = kept[0][1..].parse().expect("a call number");
    let expected: Vec<String> = (first..40).map(|i| format!("c{i}")).collect();
    assert_eq!(kept, expected);
    assert!(first > 0, "40 lines do not fit in three 1 KiB files");
}

#[test]
fn a_tenant_manifest_cannot_set_the_decision_log_and_bad_keys_are_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("toolgate.toml");
    let parse = |text: &str, scope| {
        Manifest::parse(&path, text, scope, 1 << 30)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let tenant =
        parse("# mine\n[decision_log]\nsink = \"off\"\n", Scope::Tenant).expect_err("refused");
    assert!(
        tenant.contains("toolgate.toml:2: key `decision_log`")
            && tenant.contains("only in the global manifest"),
        "{tenant}"
    );
    for (text, key, why) in [
        (
            "[decision_log]\nsink = \"kafka\"\n",
            "decision_log.sink",
            "is not \"off\"",
        ),
        (
            "[decision_log]\nsink = \"file\"\n",
            "decision_log.path",
            "missing",
        ),
        (
            "[decision_log]\n\nmask = [\"password\"]\n",
            "decision_log.mask",
            "not a path under args",
        ),
        (
            "[decision_log]\ninclude = [\"secrets\"]\n",
            "decision_log.include",
            "is not one of",
        ),
        (
            "[decision_log]\nurl = \"ftp://x/\"\n",
            "decision_log.url",
            "not an http(s) URL",
        ),
        (
            "[decision_log]\nsink = \"stdout\"\nqueue_lines = 0\n",
            "decision_log.queue_lines",
            "out of range",
        ),
        (
            "[decision_log]\nsink = \"stdout\"\nkeep = 3\n",
            "decision_log.keep",
            "unknown field",
        ),
    ] {
        let e = parse(text, Scope::Global).expect_err(text);
        assert!(
            e.contains(&format!("key `{key}`")) && e.contains(why),
            "{text}: {e}"
        );
    }
    parse(
        "[decision_log]\nsink = \"stdout\"\nmask = [\"args.a.b\"]\n",
        Scope::Global,
    )
    .expect("valid");
}

/// `docs/decision-log.schema.json` is the schema the host generates from
/// its line's types; `TOOLGATE_BLESS=1` writes it.
#[test]
fn the_published_schema_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/decision-log.schema.json");
    let generated =
        serde_json::to_string_pretty(&toolgate::decision_log::schema()).expect("json") + "\n";
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the schema");
    }
    let published = std::fs::read_to_string(&path).expect("the published schema");
    assert!(
        published == generated,
        "docs/decision-log.schema.json differs from the schema generated from the line's \
         types (serve/decision_line.rs); regenerate it with \
         `TOOLGATE_BLESS=1 cargo test -p toolgate --test all -- decision_log::the_published_schema`"
    );
}

/// `line`'s violations of the generated schema, one string each.
fn violations(line: &Value) -> Vec<String> {
    let schema = toolgate::decision_log::schema();
    let id = schema["$id"].as_str().expect("an $id").to_string();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(&id, schema).expect("the schema");
    let mut schemas = boon::Schemas::new();
    let index = compiler.compile(&id, &mut schemas).expect("compiles");
    match schemas.validate(line, index) {
        Ok(()) => vec![],
        Err(e) => vec![format!("{e:#}")],
    }
}

/// Real lines, written by a registry's file sink: every seam (the
/// response seam's final answer included), global and a tenant's, a
/// shadow guard beside the enforced ones, and a shadow guard the host
/// could not run (its tenant within its quarter of a full state store:
/// `unavailable`, `state-full`, no `agrees`) — each matches the schema the
/// host publishes. The host's other faults (`capacity`, `share-exhausted`,
/// `overloaded`) cannot be had on demand in a shadow run (and an enforced
/// one writes no line): the same real line with each of them matches too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_the_host_writes_matches_the_published_schema() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, out) = (
        tmp.path().join("plugins"),
        tmp.path().join("decisions.jsonl"),
    );
    let shadow = format!(
        "\n[[plugin]]\npath = \"render.wasm\"\n[plugin.config]\nappend = \" ok\"\n\n\
         [[plugin]]\npath = \"stateful.wasm\"\nmode = \"shadow\"\n[plugin.config]\n\
         ops = [{{ op = \"set\", scope = \"run\", key = \"k\", value = \"{}\" }}]\n",
        "v".repeat(30 << 10)
    );
    let manifest = masking_manifest(&format!("path = {:?}", out.display().to_string())) + &shadow;
    plugin_dir(
        &dir,
        &[
            HIDE_ADMIN_TOOLS,
            FETCHER,
            ECHO,
            RESULT_AUDIT,
            RENDER,
            STATEFUL,
        ],
        &manifest,
    );
    for tenant in ["a", "b", "c", "d", "e"] {
        std::fs::create_dir_all(dir.join("tenants").join(tenant)).expect("tenant dir");
    }
    // 400 KiB in all, a quarter each: four tenants' shadow writes fill
    // it, and the fifth's second run, within its quarter, is refused.
    let engine = crate::state::with_state(toolgate::StateBackend::Memory {
        capacity: 400 << 10,
    });
    let reg = Registry::open_with(engine, &dir, RegistryOptions::default())
        .await
        .expect("registry");
    assert!(
        reg.plugin_set().errors.is_empty(),
        "{:?}",
        reg.plugin_set().errors
    );
    decide_every_seam(&reg, None).await;
    decide_every_seam(&reg, Some("a")).await;
    let response = json!({"event": {"run_id": "r", "iteration_index": 0, "model": "m",
        "node_name": "react", "original_content": "hello"}, "state": {}});
    assert_eq!(decide(&reg, Seam::Response, response).await, "hello ok");
    let steer = |tenant: &str, run: &str| {
        json!({"tenant": tenant, "state": {},
               "event": {"run_id": run, "call_id": "c", "tool_name": "t", "args": {}}})
    };
    for tenant in ["b", "c", "d", "e"] {
        for run in ["r1", "r2", "r3"] {
            decide(&reg, Seam::Steering, steer(tenant, run)).await;
        }
    }
    log_of(&reg).flush().await;
    let lines = lines(&std::fs::read_to_string(&out).expect("the log"));
    assert_eq!(lines.len(), 4 + 4 + 1 + 12, "one line per decision");
    let seams: std::collections::BTreeSet<&str> =
        lines.iter().filter_map(|l| l["seam"].as_str()).collect();
    assert_eq!(seams.len(), Seam::ALL.len(), "{seams:?}");
    let full: Vec<&Value> = lines
        .iter()
        .filter(|l| l["shadow"][0]["fault"] == "state-full")
        .collect();
    assert!(!full.is_empty(), "a shadow run on a full store");
    assert!(
        full.iter()
            .all(|l| l["shadow"][0]["outcome"] == "unavailable" && l.get("agrees").is_none()),
        "{full:?}"
    );
    assert!(
        lines.iter().any(|l| l["agrees"].is_boolean()),
        "a shadow run that compared"
    );
    let mut checked = lines.clone();
    for fault in ["capacity", "share-exhausted", "overloaded"] {
        let mut line = full[0].clone();
        line["shadow"][0]["fault"] = fault.into();
        checked.push(line);
    }
    for line in &checked {
        let errors = violations(line);
        assert!(errors.is_empty(), "{line}: {errors:?}");
    }
    // The schema is not a yes to everything.
    let mut wrong = full[0].clone();
    wrong["shadow"][0]["fault"] = "no-such-fault".into();
    assert!(
        !violations(&wrong).is_empty(),
        "an unknown fault is refused"
    );
}
