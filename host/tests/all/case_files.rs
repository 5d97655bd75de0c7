//! `toolgate test`: case files (`*.test.toml`) run through the real chain,
//! as a guard author runs them.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// A directory holding `components` (name, built path) and the case file
/// `guard.test.toml` with `text`.
pub(crate) fn case_dir(components: &[(&str, &str)], text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, src) in components {
        std::fs::copy(src, dir.path().join(name)).expect("copy");
    }
    std::fs::write(dir.path().join("guard.test.toml"), text).expect("write");
    dir
}

pub(crate) fn test(dir: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("test")
        .arg(dir)
        .args(extra)
        .current_dir(dir)
        .env("TOOLGATE_LOG", "error")
        .output()
        .expect("run toolgate test")
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const SQL_CASES: &str = r#"
[[plugin]]
path = "sql-guard.wasm"

[[case]]
name = "no where"
seam = "steering"
event = { run_id = "r", tool_name = "run_query", call_id = "c1", args = { sql = "DELETE FROM t" } }
expect = { action = "skip", is_error = true, content_contains = "WHERE" }

[[case]]
name = "with where"
seam = "steering"
event = '{"run_id": "r", "tool_name": "run_query", "call_id": "c2", "args": {"sql": "DELETE FROM t WHERE id = 1"}}'
expect = { action = "proceed", guards = { sql-guard = "proceed" } }
"#;

#[test]
fn a_passing_file_says_so_and_exits_0() {
    let dir = case_dir(&[("sql-guard.wasm", toolgate_tests::SQL_GUARD)], SQL_CASES);
    let out = test(dir.path(), &[]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out), "2 passed, 0 failed\n");
}

#[test]
fn a_failing_case_gets_one_line_with_what_differs_and_exit_1() {
    let text = SQL_CASES
        .replace(
            "expect = { action = \"skip\", is_error = true, content_contains = \"WHERE\" }",
            "expect = { action = \"skip\", is_error = false, content_contains = \"LIMIT\" }",
        )
        .replace("sql-guard = \"proceed\"", "sql-guard = \"skip\"");
    let dir = case_dir(&[("sql-guard.wasm", toolgate_tests::SQL_GUARD)], &text);
    let out = test(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let file = dir.path().join("guard.test.toml");
    let file = file.display();
    assert_eq!(
        stdout(&out),
        format!(
            "FAIL {file}:6 \"no where\": content_contains: expected \"LIMIT\", got \
             \"Add a WHERE clause before running this query.\"; is_error: expected false, got true\n\
             FAIL {file}:12 \"with where\": guards.sql-guard: expected \"skip\", got \"proceed\"\n\
             0 passed, 2 failed\n"
        )
    );
    // --case runs only the cases whose name matches.
    let out = test(dir.path(), &["--case", "with"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).ends_with("\n0 passed, 1 failed\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_bad_file_is_refused_naming_file_line_and_key_exit_2() {
    let sql = [("sql-guard.wasm", toolgate_tests::SQL_GUARD)];
    let cases = [
        (
            SQL_CASES.replace(
                "seam = \"steering\"\nevent = '",
                "seam = \"steer\"\nevent = '",
            ),
            ":13: key `case[2].seam`: \"steer\" is not a seam: routing, rewrite, steering or result",
        ),
        (
            SQL_CASES.replace("is_error = true,", "is_eror = true,"),
            ":9: key `case[1].expect.is_eror`: unknown field `is_eror`",
        ),
        (
            SQL_CASES.replace("action = \"proceed\", guards", "tools = [], guards"),
            ":15: key `case[2].expect.tools`: applies to the routing seam, not steering",
        ),
        (
            SQL_CASES.replace(
                "path = \"sql-guard.wasm\"",
                "path = \"sql-guard.wasm\"\nfuel = 0",
            ),
            ":4: key `plugin[1].fuel`:",
        ),
        (
            SQL_CASES.replace("sql-guard.wasm", "missing.wasm"),
            ":3: key `plugin[1].path`: component file ",
        ),
    ];
    for (text, want) in cases {
        let dir = case_dir(&sql, &text);
        let out = test(dir.path(), &[]);
        assert_eq!(out.status.code(), Some(2), "{want}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        let file = dir.path().join("guard.test.toml");
        let prefix = format!("toolgate: error: {}{want}", file.display());
        assert!(err.starts_with(&prefix), "want {prefix:?}, got {err:?}");
        assert!(!err.contains("toolgate-test-"), "no temporary path: {err}");
        assert_eq!(stdout(&out), "", "nothing ran");
    }
}

#[test]
fn every_file_loads_before_any_case_runs_and_each_bad_one_is_named() {
    // `a.test.toml` is good; `b/` and `c/` name components that are not
    // there. No case of `a` runs, and both bad files get a line.
    let dir = case_dir(&[("sql-guard.wasm", toolgate_tests::SQL_GUARD)], "");
    std::fs::write(dir.path().join("a.test.toml"), SQL_CASES).expect("write");
    for sub in ["b", "c"] {
        std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        std::fs::write(
            dir.path().join(sub).join("guard.test.toml"),
            SQL_CASES.replace("sql-guard.wasm", "missing.wasm"),
        )
        .expect("write");
    }
    std::fs::remove_file(dir.path().join("guard.test.toml")).expect("rm");
    let out = test(dir.path(), &[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(stdout(&out), "", "no case ran");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 2, "{err}");
    for sub in ["b", "c"] {
        let file = dir.path().join(sub).join("guard.test.toml");
        assert!(
            err.contains(&format!("{}:3: key `plugin[1].path`", file.display())),
            "{sub}: {err}"
        );
    }
}

#[test]
fn a_case_filter_that_matches_nothing_is_refused() {
    let dir = case_dir(&[("sql-guard.wasm", toolgate_tests::SQL_GUARD)], SQL_CASES);
    let out = test(dir.path(), &["--case", "nomatch"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        "toolgate: error: --case \"nomatch\" matches no case in 1 case file(s)\n"
    );
    let out = test(dir.path(), &["--case", "with"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("1 passed, 0 failed\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn junit_output_is_well_formed_xml_with_the_counts() {
    let text = SQL_CASES.replace("sql-guard = \"proceed\"", "sql-guard = \"skip\"");
    let dir = case_dir(&[("sql-guard.wasm", toolgate_tests::SQL_GUARD)], &text);
    let report = dir.path().join("report.xml");
    let out = test(dir.path(), &["--junit", &report.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Python's XML parser (the suite's own interpreter) as the referee.
    let check = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, xml.etree.ElementTree as E\n\
             r = E.parse(sys.argv[1]).getroot()\n\
             s = r.find('testsuite')\n\
             cases = s.findall('testcase')\n\
             print(r.get('tests'), r.get('failures'), s.get('tests'), s.get('failures'), len(cases),\n\
                   [c.get('name') for c in cases if c.find('failure') is not None],\n\
                   cases[1].find('failure').get('message'))",
        )
        .arg(&report)
        .output()
        .expect("python3");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&check.stdout),
        "2 1 2 1 2 ['with where'] guards.sql-guard: expected \"skip\", got \"proceed\"\n"
    );
}

#[test]
fn a_hostile_guest_case_expects_its_fault_class_under_the_real_limits() {
    let text = r#"
[[plugin]]
path = "hostile.wasm"
fuel = 10_000_000
memory_mib = 4
on_error = "deny"

[[case]]
name = "a loop runs out of fuel, and fail-closed steers"
seam = "steering"
event = { run_id = "r", tool_name = "loop", call_id = "c", args = {} }
expect = { action = "skip", content_contains = "`hostile` failed (out-of-fuel)", guards = { hostile = "fault" }, faults = { hostile = "out-of-fuel" } }

[[case]]
name = "an allocation bomb meets the memory cap"
seam = "steering"
event = { run_id = "r", tool_name = "alloc", call_id = "c", args = {} }
expect = { faults = { hostile = "memory" } }

[[case]]
name = "the case's config reaches the guard"
seam = "steering"
event = { run_id = "r", tool_name = "ok", call_id = "c", args = {} }
config = { attack = "trap" }
expect = { action = "skip", content_contains = "`hostile` failed (unreachable)", faults = { hostile = "unreachable" } }
"#;
    let dir = case_dir(&[("hostile.wasm", toolgate_tests::HOSTILE)], text);
    let out = test(dir.path(), &[]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out), "3 passed, 0 failed\n");
}

#[test]
fn a_config_the_guard_refuses_is_a_failing_case_with_its_message() {
    let text = r#"
[[plugin]]
path = "tool-call-limit.wasm"
config = { run_limit = 1 }

[[case]]
name = "first"
seam = "steering"
event = { run_id = "r", tool_name = "search", call_id = "c", args = {} }
expect = { action = "proceed" }

[[case]]
name = "refused"
seam = "steering"
event = { run_id = "r", tool_name = "search", call_id = "c", args = {} }
config = { run_limit = -1 }
expect = { action = "proceed" }
"#;
    let dir = case_dir(
        &[("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT)],
        text,
    );
    let out = test(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = stdout(&out);
    assert!(
        out.contains("\"refused\": ") && out.contains("config: run_limit must be 0 or more"),
        "{out}"
    );
    assert!(out.ends_with("1 passed, 1 failed\n"), "{out}");
    // The file's own entries must load: else the file is bad (exit 2).
    let dir = case_dir(
        &[("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT)],
        &text.replace("config = { run_limit = 1 }", "config = { run_limit = -1 }"),
    );
    let out = test(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    let file = dir.path().join("guard.test.toml");
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "toolgate: error: {}: not loaded: {}:4 (",
            file.display(),
            file.display()
        )),
        "{err}"
    );
    assert!(err.contains("config: run_limit must be 0 or more"), "{err}");
}

#[test]
fn a_config_refusal_case_passes_when_refused_and_fails_when_loaded() {
    let text = r#"
[[plugin]]
path = "tool-call-limit.wasm"
config = { run_limit = 1 }

[[case]]
name = "a negative limit is refused"
config = { run_limit = -1 }
expect = { config_refused = "run_limit must be 0 or more" }

[[case]]
name = "a good limit loads"
config = { run_limit = 3 }
expect = { config_refused = "run_limit" }

[[case]]
name = "another message"
config = { run_limit = -2 }
expect = { config_refused = "no such text" }
"#;
    let dir = case_dir(
        &[("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT)],
        text,
    );
    let out = test(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = stdout(&out);
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].ends_with(
            ":12 \"a good limit loads\": config_refused: expected a refusal containing \"run_limit\", the config loaded"
        ),
        "{out}"
    );
    assert!(
        lines[1].contains(":17 \"another message\": config_refused: expected a refusal containing \"no such text\", got ")
            && lines[1].contains("run_limit must be 0 or more"),
        "{out}"
    );
    assert_eq!(lines[2], "1 passed, 2 failed");
    // A refusal case runs no event, and has a config to refuse.
    for (from, to, want) in [
        (
            "name = \"a negative limit is refused\"\n",
            "name = \"a negative limit is refused\"\nseam = \"steering\"\n",
            ":8: key `case[1].seam`: a case that expects `config_refused` runs no event",
        ),
        (
            "config = { run_limit = -1 }\n",
            "",
            ":8: key `case[1].expect.config_refused`: needs the case's `config`",
        ),
        (
            "config_refused = \"run_limit must be 0 or more\"",
            "config_refused = \"run_limit must be 0 or more\", action = \"proceed\"",
            ":9: key `case[1].expect`: `config_refused` is the only expectation",
        ),
    ] {
        let dir = case_dir(
            &[("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT)],
            &text.replacen(from, to, 1),
        );
        let out = test(dir.path(), &[]);
        assert_eq!(out.status.code(), Some(2), "{want}: {}", stdout(&out));
        let file = dir.path().join("guard.test.toml");
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!("toolgate: error: {}{want}", file.display())),
            "want {want:?}, got {err:?}"
        );
    }
}

#[test]
fn check_and_bench_read_the_cases_events() {
    let dir = case_dir(&[("sql-guard.wasm", toolgate_tests::SQL_GUARD)], SQL_CASES);
    let file = dir.path().join("guard.test.toml").display().to_string();
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("TOOLGATE_LOG", "error")
            .output()
            .expect("run toolgate")
    };
    // check: each selected case's decision, with its name.
    let out = run(&["check", "--cases", &file, "--case", "no where"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(decision["case"], "no where");
    assert_eq!(decision["result"]["action"], "skip");
    assert_eq!(decision["trace"][0]["plugin"], "sql-guard");
    // The same events through another directory's chain (here: no guard).
    let empty = tempfile::tempdir().expect("tempdir");
    let plugins = empty.path().display().to_string();
    let out = run(&[
        "check",
        "--cases",
        &file,
        "--plugins",
        &plugins,
        "--case",
        "no where",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(decision["result"], serde_json::Value::Null);
    // --cases and --event are one or the other.
    let out = run(&["check", "--cases", &file, "--seam", "steering"]);
    assert_eq!(out.status.code(), Some(2));
    // bench: the cases' events, measured on the case file's guards.
    let out = run(&[
        "bench",
        "--cases",
        &file,
        "--seconds",
        "0.05",
        "--concurrency",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["seams"][0]["seam"], "steering");
    assert_eq!(report["seams"][0]["events"], 2);
    assert_eq!(report["seams"][0]["guards"][0]["plugin"], "sql-guard");
    let out = run(&[
        "bench",
        "--cases",
        &file,
        "--case",
        "with",
        "--seconds",
        "0.05",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["seams"][0]["events"], 1);
}

#[test]
fn a_global_guards_state_is_each_tenants_own_in_a_case_file_tenants_without_a_directory_too() {
    // The bundled tool-call-limit, one conversation `T` per tenant: no
    // tenant has a directory, and none shares another's count, nor that of
    // calls without a tenant.
    let search = |tenant: &str, call: &str, expect: &str| {
        let tenant = match tenant {
            "" => String::new(),
            t => format!("tenant = \"{t}\"\n"),
        };
        format!(
            "[[case]]\nname = \"{call}\"\nseam = \"steering\"\n{tenant}\
             event = {{ run_id = \"{call}\", tool_name = \"search\", call_id = \"{call}\", args = {{}} }}\n\
             state = {{ thread_id = \"T\" }}\nexpect = {{ action = \"{expect}\" }}\n"
        )
    };
    let text = [
        "[[plugin]]\npath = \"tool-call-limit.wasm\"\nconfig = { thread_limit = 1 }\n".to_string(),
        search("acme", "acme first", "proceed"),
        search("zeta", "zeta first", "proceed"),
        search("", "tenant-less first", "proceed"),
        search("acme", "acme second", "skip"),
        search("zeta", "zeta second", "skip"),
        search("", "tenant-less second", "skip"),
    ]
    .join("\n");
    let dir = case_dir(
        &[("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT)],
        &text,
    );
    let out = test(dir.path(), &[]);
    assert_eq!(stdout(&out), "6 passed, 0 failed\n", "{}", stderr(&out));
}

/// A guard's source file given to `toolgate test` stands for its cases:
/// `<stem>.test.toml` beside it, else the case files of its directory; a
/// source with neither is refused, naming the file it looked for. It is
/// never read as a case file.
#[test]
fn a_guards_source_file_stands_for_its_cases() {
    let test_source = |source: &Path| {
        Command::new(BIN)
            .arg("test")
            .arg(source)
            .env("TOOLGATE_LOG", "error")
            .output()
            .expect("run toolgate test")
    };
    let dir = case_dir(&[("sql-guard.wasm", toolgate_tests::SQL_GUARD)], SQL_CASES);
    // The directory's case file (guard.test.toml) serves a source named otherwise.
    std::fs::write(dir.path().join("main.go"), "package main\n").expect("write");
    let out = test_source(&dir.path().join("main.go"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("2 passed, 0 failed\n"),
        "{}",
        stdout(&out)
    );
    // `<stem>.test.toml` beside it is preferred: here one with one case.
    let one = SQL_CASES
        .split("[[case]]")
        .take(2)
        .collect::<Vec<_>>()
        .join("[[case]]");
    std::fs::write(dir.path().join("sql-guard.test.toml"), one).expect("write");
    std::fs::write(dir.path().join("sql-guard.ts"), "export default {};\n").expect("write");
    let out = test_source(&dir.path().join("sql-guard.ts"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("1 passed, 0 failed\n"),
        "{}",
        stdout(&out)
    );

    let lonely = tempfile::tempdir().expect("tempdir");
    let source = lonely.path().join("guard.py");
    std::fs::write(&source, "x = 1\n").expect("write");
    let out = test_source(&source);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "toolgate: error: {}: a guard's source, with no case file: expected {} (or a *.test.toml beside it)\n",
            source.display(),
            lonely.path().join("guard.test.toml").display()
        )
    );
}
