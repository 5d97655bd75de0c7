//! Builds the guest programs the integration tests run, once, and generates
//! a path constant for each.
//!
//! Two workspaces of `cdylib` guests are built with cargo for
//! `wasm32-wasip2` (release): the example guards in `plugins/rust` and the
//! test programs in `tests/guests`. They build into `target/wasm-guests`
//! (outside the directory this build holds locked), the target directory
//! `scripts/build-plugins` uses too, so either build reuses the other's
//! compiled dependencies. Each component is copied into `OUT_DIR`, and
//! `$OUT_DIR/programs.rs` (included by `src/lib.rs`) gets one
//! `pub const <NAME>: &str` per program plus the `foreach_program!` macro.

use std::collections::BTreeSet;
use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest workspaces, relative to the repository root.
const WORKSPACES: &[&str] = &["plugins/rust", "tests/guests"];

/// The target every guest is built for.
const TARGET: &str = "wasm32-wasip2";

/// One guest program: a member crate of a guest workspace.
struct Program {
    /// The crate name, e.g. `sql-guard`.
    name: String,
    /// The crate's `description`, for the constant's doc comment.
    description: String,
    /// The crate's directory relative to the repository root.
    dir: String,
}

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .expect("tests/ has a parent directory")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = root.join("target").join("wasm-guests");

    for path in ["wit", "guest-sdk/rust/src"] {
        rerun_if_changed(&root.join(path));
    }
    for path in ["Cargo.toml", "Cargo.lock"] {
        rerun_if_changed(&root.join("guest-sdk/rust").join(path));
    }

    check_target_installed();

    let mut programs = Vec::new();
    for workspace in WORKSPACES {
        let ws = root.join(workspace);
        rerun_if_changed(&ws.join("Cargo.toml"));
        rerun_if_changed(&ws.join("Cargo.lock"));
        let members = members(&ws, workspace);
        for member in &members {
            rerun_if_changed(&root.join(&member.dir).join("Cargo.toml"));
            rerun_if_changed(&root.join(&member.dir).join("src"));
        }
        build_workspace(&ws, &target_dir);
        programs.extend(members);
    }

    let mut seen = BTreeSet::new();
    for program in &programs {
        assert!(
            seen.insert(const_name(&program.name)),
            "two guest programs are named `{}`",
            program.name
        );
    }

    let dest_dir = out_dir.join("guests");
    fs::create_dir_all(&dest_dir).expect("create OUT_DIR/guests");
    let mut code = String::new();
    for program in &programs {
        let built = target_dir
            .join(TARGET)
            .join("release")
            .join(format!("{}.wasm", program.name.replace('-', "_")));
        let dest = dest_dir.join(format!("{}.wasm", program.name));
        fs::copy(&built, &dest).unwrap_or_else(|err| {
            panic!(
                "guest program `{}` built no component at {}: {err}",
                program.name,
                built.display()
            )
        });
        let dest = dest.to_str().expect("OUT_DIR is valid UTF-8");
        writeln!(code, "/// `{}`: {}", program.name, program.description).expect("write");
        writeln!(code, "///").expect("write");
        writeln!(
            code,
            "/// Absolute path of the component built from `{}`.",
            program.dir
        )
        .expect("write");
        writeln!(
            code,
            "pub const {}: &str = {dest:?};\n",
            const_name(&program.name)
        )
        .expect("write");
    }

    code.push_str("/// Every guest program as `(crate name, path of its component)`.\n");
    code.push_str("pub const PROGRAMS: &[(&str, &str)] = &[\n");
    for program in &programs {
        writeln!(
            code,
            "    ({:?}, {}),",
            program.name,
            const_name(&program.name)
        )
        .expect("write");
    }
    code.push_str("];\n\n");

    code.push_str(
        "/// Calls `$mac!(name)` once per guest program, `name` being the crate\n\
         /// name in snake case (`sql_guard`, `hostile`, ...). Tests use it to\n\
         /// assert at compile time that every program has a test.\n\
         #[macro_export]\n\
         macro_rules! foreach_program {\n    ($mac:ident) => {\n",
    );
    for program in &programs {
        writeln!(code, "        $mac!({});", program.name.replace('-', "_")).expect("write");
    }
    code.push_str("    };\n}\n");

    fs::write(out_dir.join("programs.rs"), code).expect("write OUT_DIR/programs.rs");
}

/// `sql-guard` → `SQL_GUARD`.
fn const_name(crate_name: &str) -> String {
    crate_name.replace('-', "_").to_uppercase()
}

fn rerun_if_changed(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

/// The member crates of a guest workspace: every directory in it holding a
/// `Cargo.toml` (the workspaces list exactly those as members).
fn members(ws: &Path, rel: &str) -> Vec<Program> {
    let mut members = Vec::new();
    let entries = fs::read_dir(ws).unwrap_or_else(|err| panic!("read {}: {err}", ws.display()));
    for entry in entries {
        let dir = entry.expect("read_dir entry").path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let text = fs::read_to_string(&manifest)
            .unwrap_or_else(|err| panic!("read {}: {err}", manifest.display()));
        let field = |key: &str| {
            text.lines().find_map(|line| {
                let value = line
                    .strip_prefix(key)?
                    .trim_start()
                    .strip_prefix('=')?
                    .trim();
                Some(value.trim_matches('"').to_string())
            })
        };
        let name =
            field("name").unwrap_or_else(|| panic!("{} has no package name", manifest.display()));
        let description = field("description").unwrap_or_default();
        let dir_name = dir.file_name().expect("dir name").to_string_lossy();
        members.push(Program {
            name,
            description,
            dir: format!("{rel}/{dir_name}"),
        });
    }
    members.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!members.is_empty(), "{} has no member crates", ws.display());
    members
}

/// Fails the build with a clear message when the toolchain lacks the
/// `wasm32-wasip2` standard library.
fn check_target_installed() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let output = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", rustc.to_string_lossy()));
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let lib = Path::new(&sysroot).join("lib/rustlib").join(TARGET);
    if !lib.is_dir() {
        panic!(
            "\n\nThe guest programs need the `{TARGET}` Rust target, which is not installed \
             for the toolchain at {sysroot}.\nInstall it with:\n\n    rustup target add {TARGET}\n\n"
        );
    }
}

/// Runs `cargo build --release --target wasm32-wasip2` in a guest
/// workspace, with a clean environment: nothing of this (host) build's
/// configuration may leak into the guests' build.
fn build_workspace(ws: &Path, target_dir: &Path) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(ws)
        .args(["build", "--release", "--target", TARGET])
        .arg("--manifest-path")
        .arg(ws.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let leaks = matches!(
            key,
            "CARGO_ENCODED_RUSTFLAGS"
                | "RUSTFLAGS"
                | "CARGO_BUILD_RUSTFLAGS"
                | "CARGO_BUILD_TARGET"
                | "CARGO_BUILD_TARGET_DIR"
                | "CARGO_MAKEFLAGS"
                | "MAKEFLAGS"
                | "MFLAGS"
                | "RUSTC_WORKSPACE_WRAPPER"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_CRATE_NAME"
                | "OUT_DIR"
                | "TARGET"
                | "HOST"
                | "PROFILE"
                | "OPT_LEVEL"
                | "DEBUG"
                | "NUM_JOBS"
        ) || key.starts_with("CARGO_CFG_")
            || key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || key.starts_with("DEP_");
        if leaks {
            cmd.env_remove(key);
        }
    }
    eprintln!("running: {cmd:?}");
    let status = cmd
        .status()
        .unwrap_or_else(|err| panic!("cannot run cargo for {}: {err}", ws.display()));
    if !status.success() {
        panic!(
            "building the guest programs in {} failed ({status}); see cargo's output above",
            ws.display()
        );
    }
}
