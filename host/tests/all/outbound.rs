//! Outbound HTTP: a guard reaches exactly what its grant names, through
//! the host's client, against real HTTP servers on loopback that the tests
//! start — and every way off the grant (another host or port, a redirect,
//! a name resolving onto the host's network, a method, a header, a body
//! or a count over budget) is refused with a classified fault, the
//! server never reached; a slow server is cut at the call's deadline.
//!
//! The guest is `fetcher` (tests/guests/fetcher), whose requests come
//! from its config.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use serde_json::{Value, json};
use toolgate::{Engine, Fault, HttpGrant, Limits, OnError, Outcome, Plugin, PluginSpec};
use toolgate_tests::FETCHER;

use crate::{chain, no_state, steering};

/// A real HTTP server on a loopback port, counting the requests each path
/// got and the requests whose client went away before the answer.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
    abandoned: Arc<AtomicU64>,
}

#[derive(Clone)]
struct Seen {
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
    abandoned: Arc<AtomicU64>,
}

impl Seen {
    fn hit(&self, path: &str) {
        *self
            .hits
            .lock()
            .expect("hits")
            .entry(path.into())
            .or_default() += 1;
    }
}

/// Counts a slow answer whose client went away before it was written.
struct Abandoned(Arc<AtomicU64>, bool);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Upstream {
    /// Serves, on `127.0.0.1:0`:
    /// - `/echo`: `{"method", "headers", "body"}` of the request;
    /// - `POST /classify`: `{"pii": true}` when `text` holds an `@`;
    /// - `/redirect?to=URL&status=N`: a redirect (302 by default) to URL;
    /// - `/big?bytes=N`: N bytes of `x`;
    /// - `/slow`: an answer after 60 s.
    pub(crate) async fn start() -> Upstream {
        let seen = Seen {
            hits: Arc::default(),
            abandoned: Arc::default(),
        };
        let app = Router::new()
            .route("/echo", any(echo))
            .route("/classify", post(classify))
            .route("/redirect", any(redirect))
            .route("/big", get(big))
            .route("/slow", get(slow))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream {
            addr,
            hits: seen.hits,
            abandoned: seen.abandoned,
        }
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests `path` got.
    pub(crate) fn hits(&self, path: &str) -> u64 {
        self.hits
            .lock()
            .expect("hits")
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Requests to any path.
    fn all_hits(&self) -> u64 {
        self.hits.lock().expect("hits").values().sum()
    }
}

async fn echo(
    State(seen): State<Seen>,
    method: axum::http::Method,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    seen.hit("/echo");
    let headers: BTreeMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_string()))
        .collect();
    axum::Json(json!({"method": method.as_str(), "headers": headers, "body": body}))
}

async fn classify(State(seen): State<Seen>, body: axum::Json<Value>) -> impl IntoResponse {
    seen.hit("/classify");
    let text = body["text"].as_str().unwrap_or_default();
    axum::Json(json!({"pii": text.contains('@')}))
}

async fn redirect(
    State(seen): State<Seen>,
    Query(q): Query<BTreeMap<String, String>>,
) -> impl IntoResponse {
    seen.hit("/redirect");
    let status = q
        .get("status")
        .and_then(|s| s.parse().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::FOUND);
    (
        status,
        [(header::LOCATION, q.get("to").cloned().unwrap_or_default())],
    )
}

async fn big(
    State(seen): State<Seen>,
    Query(q): Query<BTreeMap<String, String>>,
) -> impl IntoResponse {
    seen.hit("/big");
    let n = q.get("bytes").and_then(|s| s.parse().ok()).unwrap_or(0);
    "x".repeat(n)
}

async fn slow(State(seen): State<Seen>) -> impl IntoResponse {
    seen.hit("/slow");
    let mut guard = Abandoned(Arc::clone(&seen.abandoned), false);
    tokio::time::sleep(Duration::from_secs(60)).await;
    guard.1 = true;
    "late"
}

/// A grant of `hosts` (and `networks`).
pub(crate) fn grant(hosts: &[String], networks: &[&str]) -> HttpGrant {
    let networks: Vec<String> = networks.iter().map(|n| n.to_string()).collect();
    HttpGrant::parse(hosts, None, &networks).expect("a valid grant")
}

/// The fetcher, making `requests`, granted `http`, under `limits`.
pub(crate) async fn fetcher(
    engine: &Engine,
    requests: Value,
    http: HttpGrant,
    limits: Limits,
    on_error: OnError,
) -> Arc<Plugin> {
    let spec = PluginSpec {
        name: "fetcher".into(),
        limits,
        config: json!({ "requests": requests }),
        on_error,
        prepared: toolgate::Depth::Fixed(0),
        http,
        ..PluginSpec::new(FETCHER)
    };
    Arc::new(Plugin::load(engine, spec).await.expect("the fetcher loads"))
}

/// What the fetcher answered: its answers (one per request) or its fault
/// and the fault's detail.
async fn fetch(plugin: &Arc<Plugin>) -> Result<Vec<Value>, (Fault, String)> {
    let d = chain(&[plugin])
        .steering(&steering("send_email", json!({})), &no_state())
        .await;
    let t = &d.trace[0];
    match (t.outcome, t.fault) {
        (Outcome::Skip, None) => {
            let content = d.result.expect("a skip").content;
            Ok(serde_json::from_str(&content).expect("the fetcher's JSON"))
        }
        (_, Some(fault)) => Err((fault, t.detail.clone().unwrap_or_default())),
        other => panic!("unexpected {other:?}"),
    }
}

fn engine() -> Engine {
    crate::state::with_state(toolgate::StateBackend::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_host_is_reached_and_its_answer_handed_back() {
    let up = Upstream::start().await;
    let e = engine();
    let requests = json!([
        {"url": up.url("/echo?x=1"), "headers": [["x-guard", "yes"]]},
        {"method": "POST", "url": up.url("/classify"), "body": "{\"text\": \"mail a@b.c\"}",
         "headers": [["content-type", "application/json"]]},
    ]);
    let f = fetcher(
        &e,
        requests,
        grant(&[up.url("")], &[]),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let answers = fetch(&f).await.expect("both requests answered");
    assert_eq!(answers[0]["status"], 200);
    let echoed: Value =
        serde_json::from_str(answers[0]["body"].as_str().expect("text")).expect("json");
    assert_eq!(echoed["method"], "GET");
    assert_eq!(echoed["headers"]["x-guard"], "yes");
    assert_eq!(answers[1]["body"], "{\"pii\":true}");
    assert_eq!(answers[1]["headers"]["content-type"], "application/json");
    assert_eq!((up.hits("/echo"), up.hits("/classify")), (1, 1));
}

/// A call that has turned long runs on the long lane's threads: its
/// requests connect from there (those threads once had no IO driver, and
/// the first connect panicked the host).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_reaches_its_host_from_the_long_lane() {
    let up = Upstream::start().await;
    let e = engine();
    let spec = PluginSpec {
        name: "fetcher".into(),
        config: json!({"spin": 10_000_000, "requests": [{"url": up.url("/echo")}]}),
        prepared: toolgate::Depth::Fixed(0),
        http: grant(&[up.url("")], &[]),
        ..PluginSpec::new(FETCHER)
    };
    let f = Arc::new(Plugin::load(&e, spec).await.expect("the fetcher loads"));
    let d = chain(&[&f])
        .steering(&steering("send_email", json!({})), &no_state())
        .await;
    // Long: past the 2 M fuel after which a call takes turns on the lane.
    assert!(d.trace[0].fuel_used > 2_000_000, "{:?}", d.trace[0]);
    let answers: Value = serde_json::from_str(&d.result.expect("answered").content).expect("json");
    assert_eq!(answers[0]["status"], 200);
    assert_eq!(up.hits("/echo"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_off_the_grant_is_refused_before_anything_is_sent() {
    let (up, other) = (Upstream::start().await, Upstream::start().await);
    let e = engine();
    let granted = grant(&[up.url("")], &[]);
    let cases = [
        // Another host (another port of the same address).
        (
            json!([{"url": other.url("/echo")}]),
            Fault::HttpDenied,
            "is not a granted host",
        ),
        // Another scheme.
        (
            json!([{"url": format!("https://{}/echo", up.addr)}]),
            Fault::HttpDenied,
            "is not a granted host",
        ),
        // A method not granted (GET and POST are, by default).
        (
            json!([{"method": "DELETE", "url": up.url("/echo")}]),
            Fault::HttpDenied,
            "is not granted",
        ),
        // A header the host sets.
        (
            json!([{"url": up.url("/echo"), "headers": [["Host", "internal.example"]]}]),
            Fault::HttpDenied,
            "the host sets it",
        ),
        // Not a URL.
        (
            json!([{"url": "/echo"}]),
            Fault::HttpDenied,
            "not an absolute URL",
        ),
        // A body over http_request_kib (64 KiB by default).
        (
            json!([{"method": "POST", "url": up.url("/echo"), "body_bytes": 65537}]),
            Fault::HttpBudget,
            "http_request_kib",
        ),
    ];
    for (requests, fault, says) in cases {
        let f = fetcher(
            &e,
            requests.clone(),
            granted.clone(),
            Limits::default(),
            OnError::Skip,
        )
        .await;
        let (got, detail) = fetch(&f).await.expect_err("refused");
        assert_eq!(got, fault, "{requests}: {detail}");
        assert!(detail.contains(says), "{requests}: {detail}");
    }
    assert_eq!(
        (up.all_hits(), other.all_hits()),
        (0, 0),
        "nothing was sent"
    );
    // No grant at all.
    let f = fetcher(
        &e,
        json!([{"url": up.url("/echo")}]),
        HttpGrant::default(),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let (fault, detail) = fetch(&f).await.expect_err("refused");
    assert_eq!(fault, Fault::HttpDenied);
    assert!(detail.contains("granted no outbound HTTP"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_on_the_grant_and_refused_off_it() {
    let (up, other) = (Upstream::start().await, Upstream::start().await);
    let e = engine();
    let granted = grant(&[up.url("")], &[]);
    let on = format!("/redirect?to={}", up.url("/echo"));
    let f = fetcher(
        &e,
        json!([{"url": up.url(&on)}]),
        granted.clone(),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let answers = fetch(&f).await.expect("followed");
    assert_eq!(answers[0]["status"], 200);
    assert_eq!((up.hits("/redirect"), up.hits("/echo")), (1, 1));
    // Off the grant: refused, the other server never reached.
    let off = format!("/redirect?to={}", other.url("/echo"));
    let f = fetcher(
        &e,
        json!([{"url": up.url(&off)}]),
        granted.clone(),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let (fault, detail) = fetch(&f).await.expect_err("refused");
    assert_eq!(fault, Fault::HttpDenied, "{detail}");
    assert_eq!(other.all_hits(), 0);
    // A redirect loop ends, counted against http_requests.
    let looping = "/redirect?to=/redirect%3Fto%3D/redirect";
    let f = fetcher(
        &e,
        json!([{"url": up.url(looping)}]),
        granted,
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let (fault, detail) = fetch(&f).await.expect_err("cut");
    assert_eq!(fault, Fault::HttpBudget, "{detail}");
    assert!(detail.contains("each redirect counts"), "{detail}");
    // Two before (the cases above), then http_requests = 4 (the default).
    assert_eq!(up.hits("/redirect"), 2 + 4, "each hop counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_onto_the_host_network_is_refused_unless_named() {
    let up = Upstream::start().await;
    let e = engine();
    let by_name = format!("http://localhost:{}", up.addr.port());
    let requests = json!([{"url": format!("{by_name}/echo")}]);
    // Granted the name, not the network it resolves to.
    let f = fetcher(
        &e,
        requests.clone(),
        grant(std::slice::from_ref(&by_name), &[]),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let (fault, detail) = fetch(&f).await.expect_err("refused");
    assert_eq!(fault, Fault::HttpDenied, "{detail}");
    assert!(detail.contains("localhost resolves to"), "{detail}");
    assert_eq!(up.all_hits(), 0, "nothing was sent");
    // The operator names the network: reached.
    let named = grant(&[by_name], &["127.0.0.0/8", "::1/128"]);
    let f = fetcher(&e, requests, named, Limits::default(), OnError::Skip).await;
    assert_eq!(fetch(&f).await.expect("reached")[0]["status"], 200);
    // An address literal in another form is still that address.
    let decimal = format!("http://2130706433:{}/echo", up.addr.port());
    let f = fetcher(
        &e,
        json!([{"url": decimal}]),
        grant(&["http://*.example.com".into()], &[]),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    assert_eq!(fetch(&f).await.expect_err("refused").0, Fault::HttpDenied);
    assert_eq!(up.hits("/echo"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_fault_by_class_and_on_error_applies() {
    let up = Upstream::start().await;
    let e = engine();
    let granted = grant(&[up.url("")], &[]);
    // An answer over http_response_kib.
    let limits = Limits {
        http_response_bytes: 1 << 10,
        ..Limits::default()
    };
    let f = fetcher(
        &e,
        json!([{"url": up.url("/big?bytes=1025")}]),
        granted.clone(),
        limits.clone(),
        OnError::Skip,
    )
    .await;
    let (fault, detail) = fetch(&f).await.expect_err("over");
    assert_eq!(fault, Fault::HttpBudget);
    assert!(detail.contains("http_response_kib"), "{detail}");
    let f = fetcher(
        &e,
        json!([{"url": up.url("/big?bytes=1024")}]),
        granted.clone(),
        limits,
        OnError::Skip,
    )
    .await;
    assert_eq!(
        fetch(&f).await.expect("at the limit")[0]["body"]
            .as_str()
            .map(str::len),
        Some(1024)
    );
    // More requests than http_requests: the one past the budget is not sent.
    let limits = Limits {
        http_requests: 2,
        ..Limits::default()
    };
    let three =
        json!([{"url": up.url("/echo")}, {"url": up.url("/echo")}, {"url": up.url("/echo")}]);
    let f = fetcher(&e, three, granted.clone(), limits, OnError::Skip).await;
    let (fault, detail) = fetch(&f).await.expect_err("over");
    assert_eq!(fault, Fault::HttpBudget);
    assert!(detail.contains("http_requests"), "{detail}");
    assert_eq!(up.hits("/echo"), 2);
    // Fail closed: a refused request steers with the fixed message.
    let f = fetcher(
        &e,
        json!([{"url": "http://192.168.0.1/"}]),
        granted,
        Limits::default(),
        OnError::Deny,
    )
    .await;
    let d = chain(&[&f])
        .steering(&steering("send_email", json!({})), &no_state())
        .await;
    assert_eq!(d.trace[0].fault, Some(Fault::HttpDenied));
    let skip = d.result.expect("denied");
    assert_eq!(
        skip.content,
        toolgate::fail_closed_message("fetcher", Fault::HttpDenied)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_is_cut_at_the_call_deadline_and_the_next_call_served() {
    let up = Upstream::start().await;
    let e = engine();
    let granted = grant(&[up.url("")], &[]);
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let f = fetcher(
        &e,
        json!([{"url": up.url("/slow")}]),
        granted.clone(),
        limits.clone(),
        OnError::Skip,
    )
    .await;
    let (fault, detail) = fetch(&f).await.expect_err("cut");
    assert_eq!(fault, Fault::HttpFailed);
    assert!(
        detail.contains("no answer within the call's 300 ms"),
        "{detail}"
    );
    // The connection was dropped with the call: the server saw its client
    // go (it answers only after 60 s).
    for _ in 0..500 {
        if up.abandoned.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        up.abandoned.load(Ordering::SeqCst),
        1,
        "the request outlived its call"
    );
    // The next call is served.
    let f = fetcher(
        &e,
        json!([{"url": up.url("/echo")}]),
        granted,
        limits,
        OnError::Skip,
    )
    .await;
    assert_eq!(fetch(&f).await.expect("served")[0]["status"], 200);
}

/// The `pii-check` example, asking the classifier at `url`, granted `hosts`.
async fn pii_check(engine: &Engine, url: &str, hosts: &[String], on_error: OnError) -> Arc<Plugin> {
    let spec = PluginSpec {
        name: "pii-check".into(),
        config: json!({ "url": url }),
        on_error,
        prepared: toolgate::Depth::Fixed(0),
        http: grant(hosts, &[]),
        ..PluginSpec::new(toolgate_tests::PII_CHECK)
    };
    Arc::new(Plugin::load(engine, spec).await.expect("pii-check loads"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pii_check_asks_its_classifier_and_steers_on_personal_data() {
    let up = Upstream::start().await;
    let e = engine();
    let guard = pii_check(&e, &up.url("/classify"), &[up.url("")], OnError::Skip).await;
    let ask = |args: Value| {
        let guard = Arc::clone(&guard);
        async move {
            let d = chain(&[&guard])
                .steering(&steering("send_email", args), &no_state())
                .await;
            (d.result, d.trace[0].fault)
        }
    };
    let (steered, fault) = ask(json!({"to": "team", "body": "write to jane@example.com"})).await;
    let steered = steered.expect("steered");
    assert_eq!((steered.is_error, fault), (true, None));
    assert!(
        steered.content.contains("personal data"),
        "{}",
        steered.content
    );
    assert_eq!(
        ask(json!({"to": "team", "body": "the report is attached"})).await,
        (None, None)
    );
    // Without a `body`, the args as JSON text are classified.
    assert!(ask(json!({"to": "jane@example.com"})).await.0.is_some());
    // Another tool is not asked about.
    let d = chain(&[&guard])
        .steering(&steering("search", json!({"q": "a@b.c"})), &no_state())
        .await;
    assert!(d.result.is_none());
    assert_eq!(up.hits("/classify"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pii_check_with_its_classifier_down_follows_on_error() {
    let up = Upstream::start().await;
    // A port nothing listens on: bound, then closed.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let url = format!("http://{gone}/classify");
    let hosts = [format!("http://{gone}")];
    let e = engine();
    let event = steering("send_email", json!({"body": "write to jane@example.com"}));
    let open = pii_check(&e, &url, &hosts, OnError::Skip).await;
    let d = chain(&[&open]).steering(&event, &no_state()).await;
    assert_eq!(
        (d.result.is_none(), d.trace[0].fault),
        (true, Some(Fault::HttpFailed))
    );
    let closed = pii_check(&e, &url, &hosts, OnError::Deny).await;
    let d = chain(&[&closed]).steering(&event, &no_state()).await;
    assert_eq!(d.trace[0].fault, Some(Fault::HttpFailed));
    assert_eq!(
        d.result.expect("refused").content,
        toolgate::fail_closed_message("pii-check", Fault::HttpFailed)
    );
    // A config with no url is refused at load, in the guard's words.
    let spec = PluginSpec {
        name: "pii-check".into(),
        config: json!({ "tool": "send_email" }),
        http: grant(&[up.url("")], &[]),
        ..PluginSpec::new(toolgate_tests::PII_CHECK)
    };
    let Err(err) = Plugin::load(&e, spec).await else {
        panic!("a config with no url loaded");
    };
    assert!(err.to_string().contains("url"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_grant_takes_effect_on_reload() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(FETCHER, dir.path().join("fetcher.wasm")).expect("copy");
    let manifest = |hosts: &str| {
        format!(
            "[[plugin]]\npath = \"fetcher.wasm\"\nallowed_hosts = [{hosts}]\n[plugin.config]\nrequests = [{{ url = \"{}\" }}]\n",
            up.url("/echo")
        )
    };
    let write = |text: String| {
        let tmp = dir.path().join(".toolgate.toml.tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, dir.path().join("toolgate.toml")).expect("rename");
    };
    write(manifest(&format!("\"{}\"", up.url(""))));
    let reg = toolgate::Registry::open(engine(), dir.path())
        .await
        .expect("opens");
    let ask = || async {
        let d = reg
            .plugin_set()
            .chain(None)
            .steering(&steering("send_email", json!({})), &no_state())
            .await;
        d.trace[0].fault
    };
    assert_eq!(ask().await, None, "granted");
    // The grant taken away, nothing else changed: the plugin is reloaded.
    write(manifest(""));
    let report = reg.reload().await.expect("reload");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(ask().await, Some(Fault::HttpDenied));
    assert_eq!(up.hits("/echo"), 1);
}
