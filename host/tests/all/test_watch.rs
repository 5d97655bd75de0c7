//! `toolgate test --watch`: the cases run again on every change of a case
//! file, one summary line a run; a bad file is a line and the loop goes
//! on; Ctrl-C ends it with exit 0.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::case_files::case_dir;

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// Generous: the machine may be loaded.
const WAIT: Duration = Duration::from_secs(120);

const CASES: &str = r#"
[[plugin]]
path = "pii-check.wasm"
on_error = "deny"
allowed_hosts = ["https://pii.example"]
config = { url = "https://pii.example/v1/classify" }

[[case]]
name = "mail"
seam = "steering"
event = { run_id = "r", tool_name = "send_email", call_id = "c", args = { body = "hi" } }
expect = { action = "proceed" }
[[case.http]]
method = "POST"
url = "https://pii.example/v1/classify"
json = { pii = false }
"#;

#[test]
fn an_edited_case_file_runs_again_and_ctrl_c_exits_0() {
    let dir = case_dir(&[("pii-check.wasm", toolgate_tests::PII_CHECK)], CASES);
    let file = dir.path().join("guard.test.toml");
    let mut child = Command::new(BIN)
        .args(["test", "--watch"])
        .arg(dir.path())
        .env("TOOLGATE_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolgate test --watch");
    let (tx, lines) = mpsc::channel();
    let out = child.stdout.take().expect("its stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The next line that ends a run.
    let summary = || loop {
        let line = lines.recv_timeout(WAIT).expect("a run's summary line");
        if line.ends_with("waiting for a change") {
            return line;
        }
    };
    assert!(summary().starts_with("1 passed, 0 failed ("));
    let edit = |from: &str, to: &str| {
        let text = std::fs::read_to_string(&file).expect("read");
        std::fs::write(&file, text.replace(from, to)).expect("write");
    };
    // The answer now says the mail carries personal data: the guard steers.
    edit("pii = false", "pii = true");
    assert!(summary().starts_with("0 passed, 1 failed ("));
    // A file that does not parse is a line, and the loop goes on.
    edit("[[case.http]]", "[[case.http]");
    assert!(summary().starts_with("error: "));
    edit("[[case.http]", "[[case.http]]");
    edit(
        "expect = { action = \"proceed\" }",
        "expect = { action = \"skip\" }",
    );
    assert!(summary().starts_with("1 passed, 0 failed ("));
    // No change, no run: Ctrl-C is the next thing it hears.
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupted.success());
    let status = child.wait().expect("it exits");
    assert_eq!(status.code(), Some(0));
    assert!(lines.try_recv().is_err(), "no run after the last change");
}
