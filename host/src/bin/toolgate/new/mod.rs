//! `toolgate new LANG NAME --seam SEAM[,SEAM]`: a guard project that
//! builds (`toolgate build .`) and passes its tests (`toolgate test`) as
//! written. A seam is one of the five, or `observe` (lifecycle events).
//! The templates are this directory's `*.tmpl` files, embedded in the
//! binary: a line `@@ SEAM` starts a block kept only when that seam is
//! asked for (up to the next `@@` line; `@@ end` ends one), and
//! `{{NAME}}`-style words are filled in.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use toolgate::Seam;

use crate::bad;
use crate::build_guard::sdk_root;

/// `toolgate new`'s options.
#[derive(clap::Args)]
pub(crate) struct NewArgs {
    /// The language: rust, ts, js, go or python.
    lang: String,
    /// The guard's name (and its directory's): letters, digits, `-` and `_`,
    /// starting with a letter.
    name: String,
    /// The seams the guard subscribes to, comma-separated: routing, rewrite,
    /// steering, result, response, and observe (lifecycle events).
    #[arg(long, value_delimiter = ',', required = true)]
    seam: Vec<String>,
    /// The guest-sdk directory (for Rust: the crate the project depends on).
    /// Default: $TOOLGATE_SDK, else the first guest-sdk directory above the
    /// current directory or above this executable.
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// The languages, as `LANG` names them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    Ts,
    Js,
    Go,
    Python,
}

impl Lang {
    fn parse(s: &str) -> Result<Lang> {
        Ok(match s {
            "rust" => Lang::Rust,
            "ts" => Lang::Ts,
            "js" => Lang::Js,
            "go" => Lang::Go,
            "python" => Lang::Python,
            other => {
                return Err(bad(format!(
                    "unknown language {other:?}: rust, ts, js, go or python"
                )));
            }
        })
    }

    /// The name in prose.
    fn language(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Ts => "TypeScript",
            Lang::Js => "JavaScript",
            Lang::Go => "Go",
            Lang::Python => "Python",
        }
    }
}

/// What `--seam` names: one of the five seams, or `observe`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Part {
    /// A seam: the guard answers its decisions.
    Seam(Seam),
    /// Lifecycle events: the guard observes some (the `observe` export).
    Observe,
}

impl Part {
    fn parse(s: &str) -> Result<Part> {
        if s == "observe" {
            return Ok(Part::Observe);
        }
        s.parse().map(Part::Seam).map_err(|_| {
            bad(format!(
                "unknown seam {s:?}: routing, rewrite, steering, result, response or observe"
            ))
        })
    }

    /// Its name: the seam's, or `observe` (also its export's name).
    fn as_str(self) -> &'static str {
        match self {
            Part::Seam(seam) => seam.as_str(),
            Part::Observe => "observe",
        }
    }
}

const RUST_LIB: &str = include_str!("lib.rs.tmpl");
const RUST_CARGO: &str = include_str!("Cargo.toml.tmpl");
const GO_MAIN: &str = include_str!("main.go.tmpl");
const JS_GUARD: &str = include_str!("guard.ts.tmpl");
const PY_GUARD: &str = include_str!("guard.py.tmpl");
const README: &str = include_str!("README.md.tmpl");

/// Runs `toolgate new`: checks everything, then writes the project into a
/// new directory `NAME` (refused when it exists) and prints what it wrote.
pub(crate) fn run(args: NewArgs) -> Result<()> {
    let lang = Lang::parse(&args.lang)?;
    let name = args.name.as_str();
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(bad(format!(
            "invalid guard name {name:?}: 1-64 letters, digits, '-' and '_', starting with a letter"
        )));
    }
    let mut seams = Vec::new();
    for s in &args.seam {
        let part = Part::parse(s.trim())?;
        if !seams.contains(&part) {
            seams.push(part);
        }
    }
    let dir = PathBuf::from(name);
    if dir.symlink_metadata().is_ok() {
        return Err(bad(format!(
            "{name} already exists: choose another name or place"
        )));
    }
    let files = project(lang, name, &seams, args.sdk)?;
    std::fs::create_dir(&dir).with_context(|| format!("cannot create {name}"))?;
    for (file, text) in &files {
        if let Some(parent) = dir.join(file).parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(dir.join(file), text)
            .with_context(|| format!("cannot write {name}/{file}"))?;
    }
    let list: Vec<&str> = files.iter().map(|(f, _)| f.as_str()).collect();
    println!("created {name}/ ({}): {}", lang.language(), list.join(", "));
    println!("next: cd {name} && toolgate build . && toolgate test");
    Ok(())
}

/// The project's files, by name.
fn project(
    lang: Lang,
    name: &str,
    seams: &[Part],
    sdk: Option<PathBuf>,
) -> Result<Vec<(String, String)>> {
    let seam_list = seams
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let fill = |template: &str, extra: &[(&str, &str)]| {
        let mut text = keep(template, seams);
        for (key, value) in [("NAME", name), ("SEAMS", seam_list.as_str())]
            .iter()
            .chain(extra)
        {
            text = text.replace(&format!("{{{{{key}}}}}"), value);
        }
        text
    };
    let mut files = Vec::new();
    let (source, sdk_note) = match lang {
        Lang::Rust => {
            let root = sdk_root(sdk, Path::new("."), "rust/Cargo.toml")?;
            let root = root.canonicalize().unwrap_or(root);
            // The SDK's lock file: the guard starts from the dependency versions the SDK
            // is tested with, the ones the shared build cache already holds.
            let lock =
                std::fs::read_to_string(root.join("rust/Cargo.lock")).with_context(|| {
                    format!("cannot read {}", root.join("rust/Cargo.lock").display())
                })?;
            let target = crate::sdk::toolchains()?.join("rust-target");
            let root = root.display().to_string();
            files.push(("Cargo.toml".into(), fill(RUST_CARGO, &[("SDK", &root)])));
            files.push(("Cargo.lock".into(), lock));
            files.push((
                ".cargo/config.toml".into(),
                format!(
                    "# Every guard made by `toolgate new` builds in one target directory, so the\n\
                     # SDK's dependencies compile once for all of them.\n\
                     [build]\ntarget-dir = {:?}\n",
                    target.display().to_string()
                ),
            ));
            files.push((
                "src/lib.rs".into(),
                fill(RUST_LIB, &[("EXPORTS", &seam_list)]),
            ));
            (
                "src/lib.rs",
                format!(
                    "The crate `toolgate-guest`, by path: `Cargo.toml` names `{root}/rust`, \
                     where `toolgate new` found it (`--sdk`, `$TOOLGATE_SDK`, the first \
                     `guest-sdk` above the current directory or the `toolgate` executable, \
                     else the copy the `toolgate` binary carries, extracted into its cache; \
                     `toolgate build` extracts it again if the cache was cleared). \
                     `.cargo/config.toml` builds in a target directory shared by every \
                     guard, so the SDK's dependencies compile once. Building needs the \
                     `wasm32-wasip2` target (`rustup target add wasm32-wasip2`)."
                ),
            )
        }
        Lang::Go => {
            let root = sdk_root(sdk, Path::new("."), "go/build")?;
            let root = root.canonicalize().unwrap_or(root).display().to_string();
            files.push(("main.go".into(), fill(GO_MAIN, &[])));
            files.push((
                "go.mod".into(),
                format!(
                    "module {name}\n\ngo 1.27\n\nrequire toolgate.dev/guest v0.0.0\n\n\
                     // The toolgate guest SDK, where `toolgate new` found it.\n\
                     replace toolgate.dev/guest => {root}/go\n"
                ),
            ));
            (
                "main.go",
                format!(
                    "`go.mod` points `toolgate.dev/guest` at the SDK `toolgate new` found \
                     (`{root}/go`: `--sdk`, `$TOOLGATE_SDK`, the first `guest-sdk` above the \
                     current directory or the `toolgate` executable, else the copy the \
                     `toolgate` binary carries, extracted into its cache), so an editor's \
                     gopls resolves it; `toolgate build` builds the module in place with the \
                     SDK's pinned Go toolchain, installed on first use."
                ),
            )
        }
        Lang::Ts | Lang::Js => {
            let file = if lang == Lang::Ts {
                "guard.ts"
            } else {
                "guard.js"
            };
            files.push((file.into(), fill(JS_GUARD, &[])));
            if lang == Lang::Ts {
                let root = sdk_root(sdk, Path::new("."), "js/build")?;
                let js = root.canonicalize().unwrap_or(root).join("js");
                let js = js.display();
                files.push((
                    "tsconfig.json".into(),
                    format!(
                        "{{\n  \"extends\": \"{js}/tsconfig.json\",\n  \"compilerOptions\": {{\n    \
                         \"paths\": {{ \"@toolgate/guest\": [\"{js}/src/index.ts\"] }}\n  }},\n  \
                         \"include\": [\"*.ts\", \"{js}/src/env.d.ts\", \"{js}/src/generated/wit/**/*.d.ts\"]\n}}\n"
                    ),
                ));
            }
            (
                file,
                format!(
                    "`{file}` imports `@toolgate/guest`; `toolgate build` resolves it to the SDK \
                     it finds (`--sdk`, `$TOOLGATE_SDK`, the first `guest-sdk` above the \
                     project or the `toolgate` executable, else the copy the `toolgate` binary \
                     carries) and installs the SDK's pinned toolchain (componentize-js) on \
                     first use. A TypeScript guard is type-checked first (`tsc --noEmit` with \
                     the SDK's types): a type error fails the build. `tsconfig.json` lets an \
                     editor find the same types."
                ),
            )
        }
        Lang::Python => {
            let class = name
                .split(['-', '_'])
                .filter(|w| !w.is_empty())
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                        .unwrap_or_default()
                })
                .collect::<String>();
            files.push(("guard.py".into(), fill(PY_GUARD, &[("CLASS", &class)])));
            (
                "guard.py",
                "`guard.py` imports `toolgate_guest`; `toolgate build` finds the SDK \
                 (`--sdk`, `$TOOLGATE_SDK`, or the first `guest-sdk` above the project or \
                 the `toolgate` executable) and installs its pinned toolchain \
                 (componentize-py) on first use."
                    .to_string(),
            )
        }
    };
    files.push((format!("{name}.test.toml"), cases(name, seams)));
    let mut listing = String::new();
    for (file, _) in &files {
        let what = if file.ends_with(".test.toml") {
            "its tests: the cases `toolgate test` runs"
        } else if file == source {
            "the guard: one stub per seam"
        } else {
            "the build configuration"
        };
        let _ = writeln!(listing, "- `{file}`: {what}");
    }
    let readme = fill(
        README,
        &[
            ("LANGUAGE", lang.language()),
            ("SOURCE", source),
            ("FILES", listing.trim_end()),
            ("SDK_NOTE", &sdk_note),
        ],
    );
    files.push(("README.md".into(), readme));
    Ok(files)
}

/// `template` with the blocks of the seams not in `seams` dropped.
fn keep(template: &str, seams: &[Part]) -> String {
    let mut out = String::new();
    let mut keeping = true;
    for line in template.lines() {
        if let Some(tag) = line.strip_prefix("@@ ") {
            keeping = match Part::parse(tag.trim()) {
                Ok(part) => seams.contains(&part),
                Err(_) => true,
            };
            continue;
        }
        if keeping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The project's case file: cases the stubs pass — two of the first seam
/// when there is one, else one per seam.
fn cases(name: &str, seams: &[Part]) -> String {
    let mut out = format!(
        "# {name}'s unit tests: `toolgate test` runs every case through the guard\n\
         # ({name}.wasm, which `toolgate build .` writes here) and checks `expect`.\n\
         # The stubs let every call through; change these as you write the policy.\n\
         # The format: docs/testing.md in the toolgate repository.\n\n\
         [[plugin]]\npath = \"{name}.wasm\"\n"
    );
    let per_seam = if seams.len() == 1 { 2 } else { 1 };
    let steering = seams.contains(&Part::Seam(Seam::Steering));
    for part in seams {
        for i in 0..per_seam {
            out.push('\n');
            out.push_str(&case(name, *part, steering, i));
        }
    }
    out
}

/// Case `i` of `part`: for `observe`, lifecycle events then a steering
/// decision (which the guard answers too when it has the steering seam).
fn case(name: &str, part: Part, steering: bool, i: usize) -> String {
    let seam = match part {
        Part::Seam(seam) => seam,
        Part::Observe => return observe_case(name, steering, i),
    };
    let (title, event, expect) = match (seam, i) {
        (Seam::Routing, 0) => (
            "every tool stays visible",
            r#"{ run_id = "r1", mode = "enforce", intent_label = "data", total_tools = 2, narrowed_tool_names = ["search", "run_query"] }"#,
            format!(r#"{{ tools = ["search", "run_query"], guards = {{ {name} = "proceed" }} }}"#),
        ),
        (Seam::Routing, _) => (
            "an empty palette stays empty",
            r#"{ run_id = "r1", mode = "enforce", intent_label = "data", total_tools = 0, narrowed_tool_names = [] }"#,
            "{ tools = [] }".to_string(),
        ),
        (Seam::Rewrite, 0) => (
            "a call is dispatched as it is",
            r#"{ run_id = "r1", iteration_index = 0, node_name = "react", call_id = "c1", tool_name = "search", args = { q = "toolgate" }, available_tools = ["search"] }"#,
            format!(r#"{{ action = "proceed", guards = {{ {name} = "proceed" }} }}"#),
        ),
        (Seam::Rewrite, _) => (
            "a call with no arguments is dispatched as it is",
            r#"{ run_id = "r1", iteration_index = 1, node_name = "react", call_id = "c2", tool_name = "list_tables", args = {}, available_tools = ["list_tables"] }"#,
            r#"{ action = "proceed" }"#.to_string(),
        ),
        (Seam::Steering, 0) => (
            "a call proceeds",
            r#"{ run_id = "r1", tool_name = "search", call_id = "c1", args = { q = "toolgate" } }"#,
            format!(r#"{{ action = "proceed", guards = {{ {name} = "proceed" }} }}"#),
        ),
        (Seam::Steering, _) => (
            "a call with no arguments proceeds",
            r#"{ run_id = "r1", tool_name = "list_tables", call_id = "c2", args = {} }"#,
            r#"{ action = "proceed" }"#.to_string(),
        ),
        (Seam::Result, 0) => (
            "a result is observed",
            r#"{ run_id = "r1", tool_name = "search", call_id = "c1", result = "3 hits" }"#,
            format!(r#"{{ action = "observed", guards = {{ {name} = "observed" }} }}"#),
        ),
        (Seam::Result, _) => (
            "an error result is observed",
            r#"{ run_id = "r1", tool_name = "search", call_id = "c2", result = "timed out", is_error = true }"#,
            format!(r#"{{ guards = {{ {name} = "observed" }} }}"#),
        ),
        (Seam::Response, 0) => (
            "an answer is given as it is",
            r#"{ run_id = "r1", iteration_index = 0, model = "m", node_name = "react", original_content = "done" }"#,
            format!(
                r#"{{ action = "render", result = "done", guards = {{ {name} = "proceed" }} }}"#
            ),
        ),
        (Seam::Response, _) => (
            "an earlier guard's answer is kept",
            r#"{ run_id = "r1", iteration_index = -1, model = "m", node_name = "react", original_content = "draft", content = "done" }"#,
            r#"{ action = "render", result = "done" }"#.to_string(),
        ),
    };
    format!("[[case]]\nname = \"{title}\"\nseam = \"{seam}\"\nevent = {event}\nexpect = {expect}\n")
}

/// The `observe` cases: events the stubs observe, then a call that
/// proceeds.
fn observe_case(name: &str, steering: bool, i: usize) -> String {
    let (title, events) = if i == 0 {
        (
            "an LLM call's usage is observed, then a call proceeds",
            r#"[{ hook = "on_llm_end", event = { model = "m", output = "o", usage = { total_tokens = 120 }, run_id = "r1" } }]"#,
        )
    } else {
        (
            "a run's start is observed, then a call proceeds",
            r#"[{ hook = "on_agent_start", event = { query = "find toolgate", run_id = "r2" } }]"#,
        )
    };
    let run = if i == 0 { "r1" } else { "r2" };
    let expect = if steering {
        format!(r#"{{ action = "proceed", guards = {{ {name} = "proceed" }} }}"#)
    } else {
        r#"{ action = "proceed" }"#.to_string()
    };
    format!(
        "[[case]]\nname = \"{title}\"\nseam = \"steering\"\nevents = {events}\n\
         event = {{ run_id = \"{run}\", tool_name = \"search\", call_id = \"c1\", args = {{}} }}\n\
         expect = {expect}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_other_seams_are_dropped() {
        let t = "a\n@@ steering\ns\n@@ result\nr\n@@ end\nz\n";
        let steering = Part::Seam(Seam::Steering);
        let result = Part::Seam(Seam::Result);
        assert_eq!(keep(t, &[steering]), "a\ns\nz\n");
        assert_eq!(keep(t, &[result, steering]), "a\ns\nr\nz\n");
        assert_eq!(keep(t, &[Part::Seam(Seam::Routing)]), "a\nz\n");
        let t = "a\n@@ observe\no\n@@ end\nz\n";
        assert_eq!(keep(t, &[Part::Observe]), "a\no\nz\n");
        assert_eq!(keep(t, &[steering]), "a\nz\n");
    }

    #[test]
    fn every_template_fills_every_placeholder() {
        let seams = [
            Seam::Routing,
            Seam::Rewrite,
            Seam::Steering,
            Seam::Result,
            Seam::Response,
        ];
        let mut all: Vec<Part> = seams.into_iter().map(Part::Seam).collect();
        all.push(Part::Observe);
        for lang in [Lang::Rust, Lang::Ts, Lang::Js, Lang::Go, Lang::Python] {
            let all = &all[..];
            let sdk = Some(PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../guest-sdk"
            )));
            let files = project(lang, "my-guard", all, sdk).expect("project");
            for (file, text) in files {
                assert!(
                    !text.contains("{{") && !text.contains("@@"),
                    "{file}: {text}"
                );
            }
        }
    }
}
