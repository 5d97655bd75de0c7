//! Embeds the guest SDKs and the WIT contract in the `toolgate` binary, so
//! `toolgate new` and `toolgate build` work with nothing but the binary.
//!
//! Writes `$OUT_DIR/embedded_sdk.rs`: a list of `(path, bytes, executable)`
//! for every file under `guest-sdk/` and `wit/` that a build needs (not
//! installed dependencies, build outputs or tests). The binary extracts it
//! on demand (`src/bin/toolgate/sdk.rs`). Outside a checkout (a packaged
//! crate) the list is empty and the binary says so when asked for an SDK.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Directory names never embedded: installed dependencies, build outputs,
/// tests and caches.
const SKIP_DIRS: [&str; 7] = [
    "node_modules",
    "target",
    "__pycache__",
    "test",
    "tests",
    "harness",
    "build",
];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("..");
    let mut files = Vec::new();
    for top in ["guest-sdk", "wit"] {
        // Only files are watched: cargo scans a watched directory whole,
        // installed dependencies (node_modules) included.
        walk(&root.join(top), top, &mut files);
    }
    files.sort();
    let mut out = String::from(
        "/// Every embedded file: its path under the SDK root, its bytes, and whether it is executable.\n",
    );
    out.push_str("pub(crate) static FILES: &[(&str, &[u8], bool)] = &[\n");
    for (rel, abs, exec) in &files {
        let _ = writeln!(
            out,
            "    ({rel:?}, include_bytes!({:?}), {exec}),",
            abs.display().to_string()
        );
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it")).join("embedded_sdk.rs");
    std::fs::write(&dest, out).expect("write embedded_sdk.rs");
}

fn walk(dir: &Path, rel: &str, files: &mut Vec<(String, PathBuf, bool)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with(".egg-info") {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let rel = format!("{rel}/{name}");
        if meta.is_dir() {
            if SKIP_DIRS.contains(&name.as_str()) {
                continue;
            }
            walk(&path, &rel, files);
        } else if meta.is_file() && !name.ends_with(".pyc") && !name.ends_with(".wasm") {
            println!("cargo:rerun-if-changed={}", path.display());
            files.push((rel, path, executable(&meta)));
        }
    }
}

#[cfg(unix)]
fn executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn executable(_: &std::fs::Metadata) -> bool {
    false
}
