//! `toolgate test` answers a guard's outbound HTTP from its case's
//! `[[case.http]]`: no server runs, the grant is still checked, and a
//! request no answer matches fails the case naming it.

use crate::case_files::{case_dir, stderr, stdout, test};

/// pii-check, asking the classifier at `https://pii.example` (a name no
/// server answers here), then `cases`.
fn pii_check(cases: &str) -> tempfile::TempDir {
    let text = format!(
        r#"
[[plugin]]
path = "pii-check.wasm"
on_error = "deny"
allowed_hosts = ["https://pii.example"]
http_methods = ["POST"]
config = {{ url = "https://pii.example/v1/classify" }}
{cases}"#
    );
    case_dir(&[("pii-check.wasm", toolgate_tests::PII_CHECK)], &text)
}

const MAIL: &str = r#"
[[case]]
name = "mail"
seam = "steering"
event = { run_id = "r", tool_name = "send_email", call_id = "c", args = { body = "write to jane@example.com" } }
"#;

#[test]
fn a_case_whose_requests_are_answered_passes_with_no_server() {
    let cases = format!(
        r#"{MAIL}expect = {{ action = "skip", is_error = true, content_contains = "personal data" }}
[[case.http]]
method = "POST"
url = "https://pii.example/v1/classify"
json = {{ pii = true }}
times = 1

[[case]]
name = "clean"
seam = "steering"
event = {{ run_id = "r", tool_name = "send_email", call_id = "c2", args = {{ body = "hello" }} }}
expect = {{ action = "proceed", guards = {{ pii-check = "proceed" }} }}
[[case.http]]
method = "POST"
url = "https://pii.example/v1/classify"
body = '{{"pii": false}}'
"#
    );
    let dir = pii_check(&cases);
    let out = test(dir.path(), &[]);
    assert_eq!(stdout(&out), "2 passed, 0 failed\n", "{}", stderr(&out));
    assert!(out.status.success());
}

#[test]
fn a_request_no_answer_matches_fails_the_case_naming_method_and_url() {
    // The guard sees an unreachable host (`http-failed`), as the case
    // expects; the case fails all the same, on the request.
    let cases = format!(
        r#"{MAIL}expect = {{ action = "skip", faults = {{ pii-check = "http-failed" }} }}
[[case.http]]
method = "POST"
url = "https://pii.example/v2/classify"
json = {{ pii = true }}
"#
    );
    let dir = pii_check(&cases);
    let out = test(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let file = dir.path().join("guard.test.toml");
    assert_eq!(
        stdout(&out),
        format!(
            "FAIL {}:10 \"mail\": http: unexpected request POST \
             https://pii.example/v1/classify (no [[case.http]] answers it)\n0 passed, 1 failed\n",
            file.display()
        )
    );
}

#[test]
fn a_host_off_the_grant_is_refused_though_an_answer_is_scripted_for_it() {
    let answer = r#"
[[case.http]]
method = "POST"
url = "https://elsewhere.example/classify"
json = { pii = false }
"#;
    let refused = format!(
        r#"{MAIL}config = {{ url = "https://elsewhere.example/classify" }}
expect = {{ action = "skip", content_contains = "configured to fail closed", faults = {{ pii-check = "http-denied" }} }}
{answer}"#
    );
    let dir = pii_check(&refused);
    let out = test(dir.path(), &[]);
    assert_eq!(stdout(&out), "1 passed, 0 failed\n", "{}", stderr(&out));
    // `times` says the answer must be asked: it never was.
    let dir = pii_check(&format!("{refused}times = 1\n"));
    let out = test(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(
            "\"mail\": http: POST https://elsewhere.example/classify was asked 0 time(s), \
             expected 1 (times)\n0 passed, 1 failed\n"
        ),
        "{}",
        stdout(&out)
    );
}

#[test]
fn the_answers_status_headers_and_body_reach_the_guard_in_order() {
    // The fetcher answers with what each of its requests got.
    let text = r#"
[[plugin]]
path = "fetcher.wasm"
allowed_hosts = ["http://10.1.2.3:8080"]
config = { requests = [{ url = "http://10.1.2.3:8080/x" }, { url = "http://10.1.2.3:8080/x" }] }

[[case]]
name = "two answers, one each"
seam = "steering"
event = { run_id = "r", tool_name = "t", call_id = "c", args = {} }
expect = { action = "skip", content = '[{"status":418,"body":"teapot","headers":{"x-kind":"tea"}},{"status":204,"body":"","headers":{}}]' }
[[case.http]]
url = "http://10.1.2.3:8080/x"
status = 418
headers = { x-kind = "tea" }
body = "teapot"
times = 1
[[case.http]]
url = "http://10.1.2.3:8080/x"
status = 204
times = 1
"#;
    let dir = case_dir(&[("fetcher.wasm", toolgate_tests::FETCHER)], text);
    let out = test(dir.path(), &[]);
    assert_eq!(stdout(&out), "1 passed, 0 failed\n", "{}", stderr(&out));
}

#[test]
fn a_bad_answer_is_refused_naming_file_line_and_key() {
    let cases = format!(
        r#"{MAIL}expect = {{ action = "skip" }}
[[case.http]]
method = "POST"
url = "pii.example/v1/classify"
"#
    );
    let dir = pii_check(&cases);
    let out = test(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let file = dir.path().join("guard.test.toml");
    assert!(
        stderr(&out).contains(&format!(
            "{}:14: key `case[1].http[1].url`: \"pii.example/v1/classify\" is not an absolute http(s) URL",
            file.display()
        )),
        "{}",
        stderr(&out)
    );
}

/// The pii-check example's own case file, its component the test build's:
/// its cases answer the classifier themselves.
fn the_examples_case_file() -> tempfile::TempDir {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../plugins/rust/pii-check/pii-check.test.toml"
    ))
    .expect("the example's case file");
    let text = text.replace(
        "../../../build/plugins/rust/pii-check.wasm",
        "pii-check.wasm",
    );
    case_dir(&[("pii-check.wasm", toolgate_tests::PII_CHECK)], &text)
}

fn run(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .arg("--cases")
        .arg(dir.join("guard.test.toml"))
        .arg("--no-cache")
        .current_dir(dir)
        .env("TOOLGATE_LOG", "warn")
        .output()
        .expect("run toolgate")
}

#[test]
fn check_cases_answers_the_examples_requests_from_its_case_file_with_no_server() {
    let dir = the_examples_case_file();
    let out = run(dir.path(), &["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = stdout(&out);
    let decided: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::Deserializer::from_str(&printed)
            .into_iter::<serde_json::Value>()
            .map(|d| {
                let d = d.expect("JSON");
                (d["case"].as_str().expect("case").to_string(), d)
            })
            .collect();
    let steered = &decided["a mail the classifier finds personal data in is steered"];
    assert_eq!(steered["result"]["action"], "skip", "{steered}");
    assert!(
        steered["result"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("personal data")),
        "{steered}"
    );
    let clean = &decided["a clean mail proceeds"];
    assert_eq!(clean["result"], serde_json::Value::Null, "{clean}");
    assert_eq!(clean["trace"][0]["outcome"], "proceed", "{clean}");
    // No request went unanswered (none reached for the network).
    let err = stderr(&out);
    assert!(!err.contains("http-failed"), "{err}");
    assert!(!err.contains("unexpected request"), "{err}");
}

#[test]
fn bench_cases_answers_the_examples_requests_from_its_case_file_with_no_server() {
    let dir = the_examples_case_file();
    let out = run(
        dir.path(),
        &["bench", "--seconds", "0.2", "--concurrency", "2", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let seam = &report["seams"][0];
    assert_eq!(seam["seam"], "steering", "{report}");
    assert!(seam["chain"]["decisions"].as_u64() > Some(0), "{report}");
    assert_eq!(seam["chain"]["faults"], 0, "{report}");
    let err = stderr(&out);
    assert!(!err.contains("http-failed"), "{err}");
    assert!(!err.contains("unexpected request"), "{err}");
}
