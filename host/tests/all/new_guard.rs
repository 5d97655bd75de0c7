//! `toolgate new`: the project each language gets, the refusals, and a
//! Rust project built and tested as generated (the other languages are
//! built by hand: their toolchains take minutes; see docs/first-guard.md).

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn toolgate(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("TOOLGATE_LOG", "error")
        .output()
        .expect("run toolgate")
}

fn text(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn each_language_gets_its_files_with_the_hooks_of_the_seams_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    // (lang, source, a hook of steering, a hook of result, other files)
    let langs: [(&str, &str, &str, &str, &[&str]); 5] = [
        (
            "rust",
            "src/lib.rs",
            "fn on_before_tool_call",
            "fn on_tool_result",
            &["Cargo.toml"],
        ),
        (
            "ts",
            "guard.ts",
            "onBeforeToolCall(",
            "onToolResult(",
            &["tsconfig.json"],
        ),
        ("js", "guard.js", "onBeforeToolCall(", "onToolResult(", &[]),
        (
            "go",
            "main.go",
            "steering.Handle(",
            "result.Handle(",
            &["go.mod"],
        ),
        (
            "python",
            "guard.py",
            "def on_before_tool_call",
            "def on_tool_result",
            &[],
        ),
    ];
    for (lang, source, steering, result, extra) in langs {
        let name = format!("{lang}-guard");
        let out = toolgate(dir.path(), &["new", lang, &name, "--seam", "steering"]);
        assert!(
            out.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let project = dir.path().join(&name);
        let src = text(&project, source);
        assert!(src.contains(steering), "{lang}: {src}");
        assert!(!src.contains(result), "{lang}: only the seams asked: {src}");
        assert!(!src.contains("@@") && !src.contains("{{"), "{lang}: {src}");
        let cases = text(&project, &format!("{name}.test.toml"));
        assert!(
            cases.contains(&format!("path = \"{name}.wasm\"")),
            "{cases}"
        );
        assert_eq!(cases.matches("[[case]]").count(), 2, "{cases}");
        assert!(text(&project, "README.md").contains("toolgate build ."));
        for file in extra {
            assert!(project.join(file).is_file(), "{lang}: {file}");
        }
        // Two seams: both hooks, one case each.
        let two = format!("{lang}-two");
        let out = toolgate(
            dir.path(),
            &["new", lang, &two, "--seam", "steering,result"],
        );
        assert!(
            out.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let src = text(&dir.path().join(&two), source);
        assert!(
            src.contains(steering) && src.contains(result),
            "{lang}: {src}"
        );
        // The response seam, and lifecycle events: their
        // hooks, and cases that feed the observer events before a call.
        let (render, observe) = match lang {
            "rust" => ("fn on_response_render", "fn on_llm_end"),
            "ts" | "js" => ("onResponseRender(", "onLlmEnd("),
            "python" => ("def on_response_render", "def on_llm_end"),
            _ => ("response.Handle(render)", "observe.OnLLMEnd(onLLMEnd)"),
        };
        let seams = "response,observe";
        let both = format!("{lang}-observer");
        let out = toolgate(dir.path(), &["new", lang, &both, "--seam", seams]);
        assert!(
            out.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let src = text(&dir.path().join(&both), source);
        assert!(src.contains(render), "{lang}: {src}");
        assert!(!src.contains(steering), "{lang}: {src}");
        let cases = text(&dir.path().join(&both), &format!("{both}.test.toml"));
        assert!(cases.contains("seam = \"response\""), "{cases}");
        assert!(src.contains(observe), "{lang}: {src}");
        assert!(cases.contains("hook = \"on_llm_end\""), "{cases}");
    }
    let cargo = text(&dir.path().join("rust-guard"), "Cargo.toml");
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-sdk")
        .canonicalize()
        .expect("the SDK");
    // What an editor needs: the Go module and the TypeScript paths name the
    // SDK the project was made with.
    let go_mod = text(&dir.path().join("go-guard"), "go.mod");
    assert!(
        go_mod.contains(&format!(
            "replace toolgate.dev/guest => {}/go",
            sdk.display()
        )),
        "{go_mod}"
    );
    let tsconfig = text(&dir.path().join("ts-guard"), "tsconfig.json");
    let tsconfig: serde_json::Value = serde_json::from_str(&tsconfig).expect("tsconfig is JSON");
    assert_eq!(
        tsconfig["compilerOptions"]["paths"]["@toolgate/guest"][0],
        format!("{}/js/src/index.ts", sdk.display()),
        "{tsconfig}"
    );
    assert!(
        cargo.contains(&format!(
            "toolgate-guest = {{ path = \"{}/rust\" }}",
            sdk.display()
        )),
        "{cargo}"
    );
}

#[test]
fn refusals_are_one_line_and_exit_2_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("taken")).expect("mkdir");
    let cases: [(&[&str], &str); 5] = [
        (
            &["new", "rust", "taken", "--seam", "steering"],
            "toolgate: error: taken already exists: choose another name or place",
        ),
        (
            &["new", "cobol", "g", "--seam", "steering"],
            "toolgate: error: unknown language \"cobol\": rust, ts, js, go or python",
        ),
        (
            &["new", "go", "g", "--seam", "steering,audit"],
            "toolgate: error: unknown seam \"audit\": routing, rewrite, steering, result, response or observe",
        ),
        (
            &["new", "go", "../g", "--seam", "steering"],
            "toolgate: error: invalid guard name \"../g\": 1-64 letters, digits, '-' and '_', starting with a letter",
        ),
        (
            &["new", "ts", "9g", "--seam", "result"],
            "toolgate: error: invalid guard name \"9g\": 1-64 letters, digits, '-' and '_', starting with a letter",
        ),
    ];
    for (args, want) in cases {
        let out = toolgate(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), format!("{want}\n"));
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["taken"], "nothing else written");
    assert_eq!(
        std::fs::read_dir(dir.path().join("taken"))
            .expect("ls")
            .count(),
        0,
        "the existing directory untouched"
    );
}

#[test]
fn a_new_rust_guard_builds_and_passes_its_tests_as_generated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = toolgate(
        dir.path(),
        &["new", "rust", "fresh", "--seam", "routing,rewrite"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let project = dir.path().join("fresh");
    // The examples' target directory: the SDK and its dependencies are
    // compiled there already (same profile), so only the guard compiles.
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm-guests");
    let build = Command::new(BIN)
        .args(["build", "."])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("toolgate build");
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    assert!(project.join("fresh.wasm").is_file());
    let test = toolgate(&project, &["test"]);
    assert!(
        test.status.success(),
        "{}",
        String::from_utf8_lossy(&test.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&test.stdout),
        "2 passed, 0 failed\n"
    );
}

/// The binary alone, copied into an empty directory outside the checkout
/// with an empty cache: `new`, `build` and `test` work from the SDK the
/// binary carries, for Rust and TypeScript. The toolchains (the Rust SDK's
/// compiled dependencies, componentize-js's packages) are kept between runs
/// under the tests' target directory; the SDK itself is extracted afresh.
#[test]
fn the_binary_alone_scaffolds_builds_and_tests_rust_and_ts_guards() {
    let home = tempfile::tempdir().expect("tempdir");
    let bin = home.path().join("bin/toolgate");
    std::fs::create_dir_all(bin.parent().expect("bin dir")).expect("mkdir");
    std::fs::copy(BIN, &bin).expect("copy the binary");
    let cache = home.path().join("cache");
    let toolchains = Path::new(env!("CARGO_TARGET_TMPDIR")).join("new-guard-toolchains");
    let work = home.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let run = |dir: &Path, args: &[&str]| {
        let out = Command::new(&bin)
            .args(args)
            .current_dir(dir)
            .env("XDG_CACHE_HOME", &cache)
            .env("TOOLGATE_TOOLCHAINS", &toolchains)
            .env_remove("TOOLGATE_SDK")
            .env_remove("CARGO_TARGET_DIR")
            .env("TOOLGATE_LOG", "error")
            .output()
            .expect("run the copied toolgate");
        assert!(
            out.status.success(),
            "toolgate {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Rust: the response seam and an observer; TypeScript: steering and an
    // observer (two cases each).
    for (lang, name, seams) in [
        ("rust", "alone-rs", "response,observe"),
        ("ts", "alone-ts", "steering,observe"),
    ] {
        run(&work, &["new", lang, name, "--seam", seams]);
        let project = work.join(name);
        let built = run(&project, &["build", "."]);
        assert!(built.starts_with(&format!("built {name}.wasm")), "{built}");
        assert_eq!(run(&project, &["test"]), "2 passed, 0 failed\n", "{lang}");
    }
    // Built again unchanged: the same component, byte for byte (the JS
    // toolchain's output differs on every run, so the build is skipped),
    // and `toolgate test` finds it compiled already.
    let project = work.join("alone-ts");
    let component = std::fs::read(project.join("alone-ts.wasm")).expect("the component");
    let again = run(&project, &["build", "."]);
    assert!(again.starts_with("unchanged alone-ts.wasm"), "{again}");
    assert_eq!(
        std::fs::read(project.join("alone-ts.wasm")).expect("the component"),
        component,
        "the component is kept as it was"
    );
    // A type error fails the TypeScript build, naming it.
    let source = text(&project, "guard.ts");
    std::fs::write(
        project.join("guard.ts"),
        format!("{source}\nconst n: number = \"x\";\n"),
    )
    .expect("write");
    let out = Command::new(&bin)
        .args(["build", "."])
        .current_dir(&project)
        .env("XDG_CACHE_HOME", &cache)
        .env("TOOLGATE_TOOLCHAINS", &toolchains)
        .env_remove("TOOLGATE_SDK")
        .output()
        .expect("run the copied toolgate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("TS2322"), "{stderr}");
    // The SDK came out of the binary, into the cache; the Rust guard
    // depends on that copy and builds in the shared target directory.
    let sdk: Vec<_> = std::fs::read_dir(cache.join("toolgate/sdk"))
        .expect("the SDK extracted into the cache")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(sdk.len(), 1, "{sdk:?}");
    assert!(sdk[0].join("guest-sdk/rust/Cargo.toml").is_file());
    let cargo = text(&work.join("alone-rs"), "Cargo.toml");
    assert!(cargo.contains(&*sdk[0].to_string_lossy()), "{cargo}");
    let config = text(&work.join("alone-rs"), ".cargo/config.toml");
    assert!(
        config.contains(&*toolchains.join("rust-target").to_string_lossy()),
        "{config}"
    );
    // The cache cleared: the next build puts the SDK back.
    std::fs::remove_dir_all(cache.join("toolgate/sdk")).expect("clear the cache");
    run(&work.join("alone-rs"), &["build", "."]);
    assert!(sdk[0].join("guest-sdk/rust/Cargo.toml").is_file());
}
