//! `toolgate build`: one command for a guard in any language.
//!
//! It finds the guard's language from what is there (`Cargo.toml`,
//! `go.mod` or `*.go`, a `.ts`/`.js` file or `package.json`, a `.py` file
//! or `pyproject.toml`) and hands the work to that language's toolchain:
//! cargo for Rust, and `guest-sdk/<lang>/build` for the others, which
//! install their pinned toolchains on first use. The child's output goes to
//! standard error; standard output gets one line naming the component.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, anyhow};
use serde_json::Value;

use crate::{bad, build_stamp, sdk};

/// A guard's language, found from its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lang {
    Rust,
    Js,
    Python,
    Go,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Js => "js",
            Lang::Python => "python",
            Lang::Go => "go",
        }
    }
}

/// What to build: the language and the path its build command takes (the
/// crate or package directory, or the guard's source file).
#[derive(Debug, PartialEq, Eq)]
struct Source {
    lang: Lang,
    path: PathBuf,
}

/// Entry files looked for, in order, in a JS or Python guard directory.
const JS_ENTRIES: [&str; 4] = ["guard.ts", "guard.js", "index.ts", "index.js"];
const PY_ENTRIES: [&str; 2] = ["guard.py", "main.py"];

fn detect(src: &Path) -> Result<Source> {
    let found = |lang, path: PathBuf| Ok(Source { lang, path });
    if src.is_file() {
        return match src.extension().and_then(OsStr::to_str) {
            Some("ts" | "mts" | "js" | "mjs") => found(Lang::Js, src.into()),
            Some("py") => found(Lang::Python, src.into()),
            Some("go") => found(Lang::Go, parent_dir(src)),
            Some("rs") => Err(bad(format!(
                "{}: give the crate's directory (the one with Cargo.toml), not a source file",
                src.display()
            ))),
            _ => Err(bad(format!(
                "{}: not a guard source (expected .ts, .js, .py or .go, or a directory)",
                src.display()
            ))),
        };
    }
    if !src.is_dir() {
        return Err(bad(format!("{}: no such file or directory", src.display())));
    }
    let has = |name: &str| src.join(name).is_file();
    if has("Cargo.toml") {
        return found(Lang::Rust, src.into());
    }
    if has("go.mod") || has_file_ending(src, ".go") {
        return found(Lang::Go, src.into());
    }
    if let Some(entry) = JS_ENTRIES.iter().find(|e| has(e)) {
        return found(Lang::Js, src.join(entry));
    }
    if let Some(entry) = PY_ENTRIES.iter().find(|e| has(e)) {
        return found(Lang::Python, src.join(entry));
    }
    if has("package.json") || has("pyproject.toml") {
        return Err(bad(format!(
            "{}: no guard entry file; expected one of {} (JS) or {} (Python)",
            src.display(),
            JS_ENTRIES.join(", "),
            PY_ENTRIES.join(", ")
        )));
    }
    Err(bad(format!(
        "{}: cannot tell the guard's language: no Cargo.toml, go.mod or *.go, {} or {}",
        src.display(),
        JS_ENTRIES.join("/"),
        PY_ENTRIES.join("/")
    )))
}

fn parent_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.into(),
        _ => PathBuf::from("."),
    }
}

fn has_file_ending(dir: &Path, suffix: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(suffix))
    })
}

/// Whether `path` is a directory `toolgate build` can tell the language of.
pub(crate) fn is_guard_dir(path: &Path) -> bool {
    path.is_dir() && detect(path).is_ok()
}

/// Whether `path` is a guard's source file `toolgate build` takes (`.ts`,
/// `.mts`, `.js`, `.mjs`, `.py` or `.go`).
pub(crate) fn is_guard_source(path: &Path) -> bool {
    path.is_file() && detect(path).is_ok()
}

/// The component's default name: the guard directory's name, or the
/// source file's stem when it is not a generic entry name.
pub(crate) fn default_output(src: &Path) -> PathBuf {
    let stem = src.file_stem().and_then(OsStr::to_str).unwrap_or("guard");
    let name = if src.is_file()
        && (JS_ENTRIES
            .iter()
            .chain(&PY_ENTRIES)
            .any(|e| Path::new(e).file_stem().and_then(OsStr::to_str) == Some(stem))
            || src.extension() == Some(OsStr::new("go")))
    {
        let dir = parent_dir(src);
        dir.canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "guard".into())
    } else if src.is_dir() {
        src.canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "guard".into())
    } else {
        stem.to_string()
    };
    PathBuf::from(format!("{name}.wasm"))
}

/// Builds the guard at `src` into the component `out` (default: its name
/// plus `.wasm`, here); `sdk` is the `guest-sdk` directory to use.
/// Returns where the component was written.
pub fn build(src: &Path, out: Option<PathBuf>, sdk: Option<PathBuf>) -> Result<PathBuf> {
    let source = detect(src)?;
    let out = out.unwrap_or_else(|| default_output(src));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| bad(format!("output directory {}: {e}", dir.display())))?;
    }
    match source.lang {
        Lang::Rust => build_rust(&source.path, &out)?,
        lang => {
            let script = sdk_script(lang, sdk, src)?;
            // The inputs: the guard's directory, the SDK's language directory
            // and the contract beside it.
            let lang_dir = parent_dir(&script);
            let sdk_dirs = [lang_dir.clone(), parent_dir(&lang_dir).join("../wit")];
            let guard_dir = if source.path.is_dir() {
                source.path.clone()
            } else {
                parent_dir(&source.path)
            };
            let inputs = build_stamp::inputs(&guard_dir, &sdk_dirs);
            if build_stamp::up_to_date(&out, &inputs) {
                println!(
                    "unchanged {} ({} guard: its sources and SDK are as when it was built)",
                    out.display(),
                    lang.name()
                );
                return Ok(out);
            }
            let mut cmd = Command::new(&script);
            cmd.arg(&source.path).arg("-o").arg(&out);
            if lang == Lang::Js {
                // The JS build pre-initialises its engine with this executable's
                // deterministic wizer (`toolgate wizer`): the same sources, the same bytes.
                let exe = std::env::current_exe().context("cannot find this executable")?;
                cmd.env("TOOLGATE_WIZER", exe);
            }
            if sdk::is_embedded(&script) && std::env::var_os("TOOLGATE_TOOLCHAINS").is_none() {
                cmd.env("TOOLGATE_TOOLCHAINS", sdk::toolchains()?);
            }
            run(cmd, lang, &source.path)?;
            build_stamp::record(&out, &inputs);
        }
    }
    let size = std::fs::metadata(&out)
        .with_context(|| {
            format!(
                "the {} build wrote no {}",
                source.lang.name(),
                out.display()
            )
        })?
        .len();
    println!(
        "built {} ({} guard, {size} bytes)",
        out.display(),
        source.lang.name()
    );
    Ok(out)
}

/// Runs a build step, its output to our standard error.
fn run(mut cmd: Command, lang: Lang, what: &Path) -> Result<std::process::Output> {
    let output = cmd
        .stderr(Stdio::inherit())
        .stdout(if lang == Lang::Rust {
            Stdio::piped()
        } else {
            Stdio::from(std::io::stderr())
        })
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !output.status.success() {
        return Err(anyhow!(
            "the {} build of {} failed ({})",
            lang.name(),
            what.display(),
            output.status
        ));
    }
    Ok(output)
}

/// `cargo build` for wasm32-wasip2 in release; the component is the crate's
/// `cdylib` artifact, read from cargo's JSON messages.
fn build_rust(dir: &Path, out: &Path) -> Result<()> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", dir.display()))?;
    let manifest = dir.join("Cargo.toml");
    // A crate made by `toolgate new` from the SDK this binary carries: put
    // the SDK back if the cache was cleared since.
    if let Ok(text) = std::fs::read_to_string(&manifest) {
        sdk::extract_if_named(&text)?;
    }
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    // Run in the crate's directory, so rustup honours its rust-toolchain.toml.
    cmd.current_dir(&dir)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .args(["--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest);
    let output = run(cmd, Lang::Rust, &dir)?;
    let manifest = manifest.canonicalize()?;
    let wasm = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["manifest_path"]
                .as_str()
                .and_then(|p| Path::new(p).canonicalize().ok())
                .is_some_and(|p| p == manifest)
        })
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| match &m["filenames"] {
            Value::Array(files) => files.clone(),
            _ => Vec::new(),
        })
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .find(|f| f.extension() == Some(OsStr::new("wasm")));
    let wasm = wasm.ok_or_else(|| {
        bad(format!(
            "{}: built no component; the crate needs `crate-type = [\"cdylib\"]` under [lib]",
            manifest.display()
        ))
    })?;
    std::fs::copy(&wasm, out)
        .with_context(|| format!("copying {} to {}", wasm.display(), out.display()))?;
    Ok(())
}

/// The language's build script: `<sdk>/<lang>/build`, where `sdk` is
/// [`sdk_root`]'s.
fn sdk_script(lang: Lang, sdk: Option<PathBuf>, src: &Path) -> Result<PathBuf> {
    let probe = format!("{}/build", lang.name());
    Ok(sdk_root(sdk, src, &probe)?.join(probe))
}

/// The `guest-sdk` directory holding `probe` (`go/build`, `rust/Cargo.toml`):
/// `sdk` (`--sdk`), else `$TOOLGATE_SDK`, else the first `guest-sdk`
/// directory above `near` or above this executable (a checkout), else the
/// SDK this binary carries, extracted into the user's cache ([`sdk::embedded`]).
pub(crate) fn sdk_root(sdk: Option<PathBuf>, near: &Path, probe: &str) -> Result<PathBuf> {
    if let Some(root) = sdk.or_else(|| std::env::var_os("TOOLGATE_SDK").map(PathBuf::from)) {
        return if root.join(probe).is_file() {
            Ok(root)
        } else {
            Err(bad(format!(
                "the SDK's {} does not exist",
                root.join(probe).display()
            )))
        };
    }
    let starts = [near.canonicalize().ok(), std::env::current_exe().ok()];
    let found = starts
        .iter()
        .flatten()
        .flat_map(|start| start.ancestors())
        .map(|dir| dir.join("guest-sdk"))
        .find(|root| root.join(probe).is_file());
    match found {
        Some(root) => Ok(root),
        None => sdk::embedded(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for f in files {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        dir
    }

    #[test]
    fn detects_each_language() {
        let cases: [(&[&str], Lang, Option<&str>); 6] = [
            (&["Cargo.toml", "guard.py"], Lang::Rust, None),
            (&["go.mod"], Lang::Go, None),
            (&["main.go"], Lang::Go, None),
            (&["package.json", "index.ts"], Lang::Js, Some("index.ts")),
            (&["guard.js"], Lang::Js, Some("guard.js")),
            (
                &["pyproject.toml", "guard.py"],
                Lang::Python,
                Some("guard.py"),
            ),
        ];
        for (files, lang, entry) in cases {
            let dir = tree(files);
            let found = detect(dir.path()).expect("detected");
            assert_eq!(found.lang, lang, "{files:?}");
            let want = entry.map_or(dir.path().to_path_buf(), |e| dir.path().join(e));
            assert_eq!(found.path, want, "{files:?}");
        }
    }

    #[test]
    fn files_are_detected_by_extension() {
        let dir = tree(&["a.ts", "b.py", "c.go", "d.rs", "e.txt"]);
        let lang = |f: &str| detect(&dir.path().join(f)).map(|s| s.lang);
        assert_eq!(lang("a.ts").ok(), Some(Lang::Js));
        assert_eq!(lang("b.py").ok(), Some(Lang::Python));
        assert_eq!(lang("c.go").ok(), Some(Lang::Go));
        assert!(lang("d.rs").is_err());
        assert!(lang("e.txt").is_err());
    }

    #[test]
    fn unknown_and_missing_are_clear_errors() {
        let dir = tree(&["README.md"]);
        let e = detect(dir.path())
            .expect_err("nothing to build")
            .to_string();
        assert!(e.contains("cannot tell the guard's language"), "{e}");
        let dir = tree(&["package.json"]);
        let e = detect(dir.path()).expect_err("no entry").to_string();
        assert!(e.contains("no guard entry file"), "{e}");
        let e = detect(Path::new("/no/such/guard"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("/no/such/guard: no such file"), "{e}");
    }

    #[test]
    fn output_is_named_after_the_guard() {
        let dir = tempfile::tempdir().expect("tempdir");
        let guard = dir.path().join("sql-guard");
        std::fs::create_dir(&guard).expect("mkdir");
        std::fs::write(guard.join("guard.py"), "").expect("write");
        std::fs::write(dir.path().join("query-limit.ts"), "").expect("write");
        assert_eq!(default_output(&guard), PathBuf::from("sql-guard.wasm"));
        assert_eq!(
            default_output(&guard.join("guard.py")),
            PathBuf::from("sql-guard.wasm")
        );
        assert_eq!(
            default_output(&dir.path().join("query-limit.ts")),
            PathBuf::from("query-limit.wasm")
        );
    }
}
