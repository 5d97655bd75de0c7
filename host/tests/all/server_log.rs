//! The server's own log (standard error) and the decision log, from the
//! side of whoever does not write them:
//!
//! - a masked value appears in neither in any form — as written, or
//!   JSON-escaped once or twice — wherever a guard quotes it: a skip's
//!   message, its fault's detail (a panic), its `log` lines, its stderr;
//! - every line of the server's log is one event, starting with its
//!   timestamp and level, whatever a tenant names a file or a guard
//!   writes: a forged line never stands on its own, as text or as JSON.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use toolgate::event::Seam;
use toolgate::{DecideRequest, Registry, RegistryOptions};
use toolgate_tests::{ECHO, FETCHER, HOSTILE};

use crate::{KillOnDrop, capture, engine};

/// The values of the report: a password with a quote and a backslash, one
/// with a newline.
const REPORTED: [&str; 2] = ["se\"cr\\et-77x", "line1\nline2-SEC"];

/// The forms of `value` that must appear nowhere: as written, and
/// JSON-escaped once and twice (the text inside the quotes).
fn forms(value: &str) -> [String; 3] {
    let escape = |s: &str| {
        let quoted = serde_json::to_string(s).expect("a string serialises");
        quoted[1..quoted.len() - 1].to_string()
    };
    let once = escape(value);
    let twice = escape(&once);
    [value.to_string(), once, twice]
}

/// Where in `text` a form of `value` is: the text around each (an event
/// may span lines in the test's capture, so the whole text is searched).
fn leaks(text: &str, value: &str) -> Vec<String> {
    forms(value)
        .iter()
        .flat_map(|form| text.match_indices(form.as_str()).map(|(at, _)| at))
        .map(|at| {
            let from = text.floor_char_boundary(at.saturating_sub(80));
            let to = text.ceil_char_boundary((at + 160).min(text.len()));
            text[from..to].to_string()
        })
        .collect()
}

/// A plugin directory: `fetcher` (a request to a URL holding the
/// password, refused: the host logs the URL), the hostile guard (its
/// attack taken from the tool name: `leak`, `leak-panic`, `forge`), then
/// `echo` (steers with the args as JSON); the decision log to `log`
/// (`[decision_log]` lines `extra`), `args.password` masked; quarantine
/// off, so every call runs every guard.
fn plugin_dir(dir: &Path, log: &Path, extra: &str) {
    std::fs::create_dir_all(dir.join("tenants")).expect("mkdir");
    for c in [FETCHER, HOSTILE, ECHO] {
        let name = Path::new(c).file_name().expect("a file name");
        std::fs::copy(c, dir.join(name)).expect("copy");
    }
    std::fs::write(
        dir.join("toolgate.toml"),
        format!(
            "[quarantine]\nfaults = 0\n\n\
             [decision_log]\npath = {:?}\nmask = [\"args.password\"]\n{extra}\n\n\
             [[plugin]]\npath = \"fetcher.wasm\"\nallowed_hosts = [\"https://example.com\"]\n\
             config = {{ requests = [{{ url = \"http://{{args.password}}.invalid/\" }}] }}\n\n\
             [[plugin]]\npath = \"hostile.wasm\"\n\n[[plugin]]\npath = \"echo.wasm\"\n",
            log.display().to_string()
        ),
    )
    .expect("manifest");
}

/// A steering body for `tool` with `password`.
fn steering(tool: &str, password: &str) -> Value {
    json!({"event": {"run_id": "r", "call_id": "c", "tool_name": tool,
                     "args": {"password": password, "q": "select 1"}}})
}

/// A rewrite body for `tool` with `password`.
fn rewrite(tool: &str, password: &str) -> Value {
    json!({"event": {"run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "c",
                     "tool_name": tool, "args": {"password": password, "q": "select 1"},
                     "available_tools": [tool]}})
}

/// The calls that make the guards quote `password` everywhere: a panic
/// (fault detail, stderr) then echo's skip (JSON once); logged, written
/// to stderr and a skip message (JSON once and twice); a rewrite (echo's
/// new args).
fn quoting_calls(password: &str) -> [(Seam, Value); 3] {
    [
        (Seam::Steering, steering("leak-panic", password)),
        (Seam::Steering, steering("leak", password)),
        (Seam::Rewrite, rewrite("leak", password)),
    ]
}

#[test]
fn a_masked_value_appears_in_no_form_in_the_decision_log_nor_the_server_log() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tmp");
    for (n, include) in ["", "include = [\"args\"]"].into_iter().enumerate() {
        let (dir, log) = (
            tmp.path().join(format!("plugins{n}")),
            tmp.path().join(format!("decisions{n}.jsonl")),
        );
        plugin_dir(&dir, &log, include);
        let reg = runtime.block_on(async {
            let reg = Registry::open_with(engine(), &dir, RegistryOptions::default())
                .await
                .expect("registry");
            assert!(reg.plugin_set().errors.is_empty());
            reg
        });
        let (kept, _log) = capture(tracing::Level::INFO);
        let decide_all = |password: &str| {
            runtime.block_on(async {
                for (seam, body) in quoting_calls(password) {
                    let request = DecideRequest::from_value(seam, body).expect("a request");
                    request.decide(&reg.plugin_set()).await.expect("decided");
                }
                let set = reg.plugin_set();
                set.decision_log.as_ref().expect("a log").flush().await;
            })
        };
        let check = |value: &str| -> Result<(), TestCaseError> {
            let (server, decisions) = (kept.text(), std::fs::read_to_string(&log).expect("log"));
            let (in_server, in_decisions) = (leaks(&server, value), leaks(&decisions, value));
            prop_assert!(
                in_server.is_empty(),
                "{value:?} in the server log: {in_server:#?}"
            );
            prop_assert!(
                in_decisions.is_empty(),
                "{value:?} in the decision log: {in_decisions:#?}"
            );
            Ok(())
        };
        for value in REPORTED {
            decide_all(value);
            check(value).unwrap_or_else(|e| panic!("{e}"));
        }
        // The guards did quote it, and each place says so.
        let (server, decisions) = (kept.text(), std::fs::read_to_string(&log).expect("log"));
        for (what, text) in [("server", &server), ("decision", &decisions)] {
            assert!(
                text.contains("[masked]"),
                "no [masked] in the {what} log:\n{text}"
            );
        }
        assert!(decisions.contains("leak: "), "{decisions}");
        for needle in [
            "stderr",
            "panicked",
            "guard faulted",
            "outbound request refused",
        ] {
            assert!(server.contains(needle), "no {needle:?} in:\n{server}");
        }
        assert!(
            server.matches("[masked]").count() >= 6,
            "the guards' lines, masked:\n{server}"
        );
        let mut runner = TestRunner::new(Config {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(48),
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&secret(), |value| {
                decide_all(&value);
                check(&value)
            })
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A value full of what escaping changes — quotes, backslashes, control
/// characters, line separators, `<>&`, non-ASCII and astral characters —
/// around a marker, so that no form of it occurs in a line by chance.
fn secret() -> impl Strategy<Value = String> {
    let tricky = prop_oneof![
        Just('"'),
        Just('\\'),
        Just('/'),
        Just('\n'),
        Just('\r'),
        Just('\t'),
        (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap_or('?')),
        Just('\u{7f}'),
        Just('\u{85}'),
        Just('\u{2028}'),
        Just('<'),
        Just('&'),
        Just('é'),
        Just('€'),
        Just('😀'),
        any::<char>(),
        proptest::char::range('a', 'z'),
    ];
    let side = || prop::collection::vec(tricky.clone(), 1..8);
    (side(), side()).prop_map(|(a, b)| {
        format!(
            "{}-SEC-{}",
            a.into_iter().collect::<String>(),
            b.into_iter().collect::<String>()
        )
    })
}

/// A running `toolgate serve` and every line of its standard error.
struct Served {
    child: KillOnDrop,
    addr: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// `toolgate serve --plugins dir` with `flags`, logging at `info`.
    fn start(dir: &Path, flags: &[&str]) -> Served {
        let mut child = KillOnDrop::spawn(
            Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .args(["serve", "--plugins", &dir.display().to_string()])
                .args(["--listen", "127.0.0.1:0"])
                .args(flags)
                .env("TOOLGATE_LOG", "info")
                .env("NO_COLOR", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        );
        let stderr = child.0.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let kept = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some((_, a)) = line.split_once(" on http://") {
                    let a = a.split(['"', ' ']).next().unwrap_or_default();
                    let _ = tx.send(a.to_string());
                }
                kept.lock().expect("lock").push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no address: {:?}", lines.lock().expect("lock")));
        Served { child, addr, lines }
    }

    /// Waits (at most 30 s) until a line holds `needle`.
    fn wait_for(&self, needle: &str) {
        let start = Instant::now();
        while !self.text().contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no line with {needle:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn text(&self) -> String {
        self.lines.lock().expect("lock").join("\n")
    }

    /// Stops the server; its log, every line.
    fn stop(mut self) -> Vec<String> {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        std::thread::sleep(Duration::from_millis(100));
        self.lines.lock().expect("lock").clone()
    }

    async fn post(&self, seam: &str, body: &Value) -> reqwest::StatusCode {
        reqwest::Client::new()
            .post(format!("http://{}/v1/{seam}", self.addr))
            .json(body)
            .send()
            .await
            .expect("answered")
            .status()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_masks_the_reported_values_in_every_form_in_both_logs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, log) = (
        tmp.path().join("plugins"),
        tmp.path().join("decisions.jsonl"),
    );
    plugin_dir(&dir, &log, "");
    // The mask set by the flag, as reported; the manifest's too.
    let served = Served::start(&dir, &["--decision-log-mask", "args.password"]);
    for value in REPORTED {
        for (seam, body) in quoting_calls(value) {
            assert_eq!(served.post(seam.as_str(), &body).await, 200);
        }
    }
    served.wait_for("panicked");
    let start = Instant::now();
    let decisions = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 6 || start.elapsed() > Duration::from_secs(30) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(decisions.lines().count(), 6, "{decisions}");
    let server = served.stop().join("\n");
    for value in REPORTED {
        assert_eq!(leaks(&server, value), Vec::<String>::new(), "{value:?}");
        assert_eq!(leaks(&decisions, value), Vec::<String>::new(), "{value:?}");
    }
    assert!(decisions.contains("[masked]") && server.contains("[masked]"));
}

/// A file name that holds a whole forged log line.
const FORGED_NAME: &str = "evil\n2026-12-05T08:20:00.000000Z  INFO toolgate::load::registry: \
                           plugin set reloaded generation=99 loaded=[] x=.wasm";

/// Whether `line` starts as a line of the text log does: a timestamp,
/// then a level.
fn starts_as_an_event(line: &str) -> bool {
    let Some((time, rest)) = line.split_once(' ') else {
        return false;
    };
    let level = rest.trim_start().split(' ').next().unwrap_or_default();
    time.len() == "2026-12-05T08:20:00.000000Z".len()
        && time.ends_with('Z')
        && time.as_bytes()[10] == b'T'
        && ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level)
}

/// A running server on `dir` (`flags`), a tenant's file named
/// [`FORGED_NAME`] planted in it, and the hostile guard's `forge` attack
/// (its `log` text, stderr and stdout with line breaks) called: the
/// server's log, every line.
async fn forged_log(flags: &[&str]) -> Vec<String> {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("plugins");
    std::fs::create_dir_all(dir.join("tenants/acme")).expect("mkdir");
    std::fs::copy(HOSTILE, dir.join("hostile.wasm")).expect("copy");
    let served = Served::start(&dir, flags);
    std::fs::write(
        dir.join("tenants/acme").join(FORGED_NAME),
        b"not a component",
    )
    .expect("plant the file");
    served.wait_for("x=.wasm");
    let body = json!({"event": {"run_id": "r", "call_id": "c", "tool_name": "forge", "args": {}}});
    assert_eq!(served.post("steering", &body).await, 200);
    served.wait_for("FORGED");
    served.stop()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_name_or_a_guards_text_never_makes_a_line_of_its_own() {
    let lines = forged_log(&[]).await;
    let text = lines.join("\n");
    for line in &lines {
        // `serve`'s own status lines, then the events.
        assert!(
            line.starts_with("toolgate: ") || starts_as_an_event(line),
            "a line that is no event: {line:?}\nin:\n{text}"
        );
        assert!(!line.starts_with("2026-12-05T08:20:00"), "forged: {line:?}");
    }
    // The planted name and the guard's text are there, escaped, on the
    // lines of the events that quote them.
    for needle in [
        "evil\\n2026-12-05T08:20:00",
        "hostile\\n2026-12-05T08:20:00",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
    assert!(
        lines.iter().any(|l| l.contains("stream=\"stderr\"")
            && l.contains("FORGED\\r\\n\\u2028FORGED\\u000bFORGED")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_log_format_json_every_line_is_one_json_event() {
    let lines = forged_log(&["--log-format", "json"]).await;
    let text = lines.join("\n");
    let mut quoted = 0;
    for line in &lines {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\nin:\n{text}"));
        assert!(event["timestamp"].is_string(), "{line}");
        assert!(event["level"].is_string(), "{line}");
        let fields = event["fields"].to_string();
        if fields.contains("2026-12-05T08:20:00") {
            quoted += 1;
        }
    }
    // The planted name's refusal, the guard's log line, stderr and stdout.
    assert!(
        quoted >= 4,
        "{quoted} events quote the forged text:\n{text}"
    );
}
