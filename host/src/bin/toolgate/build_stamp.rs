//! `toolgate build` skips a JS, TypeScript, Go or Python build whose inputs
//! are unchanged: their toolchains (componentize-js's and componentize-py's
//! snapshots) do not give the same bytes twice, so rebuilding an unchanged
//! guard made a new component, which every later load compiled (and
//! snapshotted) again. Keeping the component as it is keeps its digest, so
//! the compiled cache still holds it.
//!
//! The stamp, `.<component>.inputs` beside the component, records the
//! SHA-256 of the inputs (the guard's directory and the SDK's language
//! directory and contract, every file's path and bytes) and of the
//! component written from them. Both must match for a build to be skipped.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Directory names whose files are not inputs: dependencies, build outputs,
/// caches.
const SKIP: [&str; 5] = ["node_modules", "target", "build", "__pycache__", "dist"];

/// The inputs' digest: the files under `guard_dir` and under `sdk_dirs`
/// (component files, case files and hidden entries aside).
pub(crate) fn inputs(guard_dir: &Path, sdk_dirs: &[PathBuf]) -> String {
    let mut h = Sha256::new();
    for dir in std::iter::once(guard_dir).chain(sdk_dirs.iter().map(PathBuf::as_path)) {
        h.update(dir.to_string_lossy().as_bytes());
        h.update([0]);
        let mut files = Vec::new();
        walk(dir, &mut files);
        files.sort();
        for file in files {
            h.update(file.to_string_lossy().as_bytes());
            h.update([0]);
            // An unreadable file changes the digest, so it is never "unchanged".
            match std::fs::read(&file) {
                Ok(bytes) => {
                    h.update((bytes.len() as u64).to_le_bytes());
                    h.update(&bytes);
                }
                Err(_) => h.update(b"\xffunreadable"),
            }
        }
    }
    hex::encode(h.finalize())
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Components and case files are never a build's input: editing a
        // case does not rebuild the guard beside it.
        if name.starts_with('.') || name.ends_with(".wasm") || name.ends_with(".test.toml") {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && !SKIP.contains(&name.as_str()) {
            walk(&entry.path(), files);
        } else if kind.is_file() {
            files.push(entry.path());
        }
    }
}

/// The stamp file of component `out`.
fn stamp_of(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map_or_else(|| "guard.wasm".into(), |n| n.to_string_lossy().into_owned());
    out.with_file_name(format!(".{name}.inputs"))
}

fn file_digest(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|bytes| hex::encode(Sha256::digest(bytes)))
}

/// Whether `out` was built from inputs with digest `inputs` and is still
/// the component that build wrote.
pub(crate) fn up_to_date(out: &Path, inputs: &str) -> bool {
    let Ok(stamp) = std::fs::read_to_string(stamp_of(out)) else {
        return false;
    };
    let mut words = stamp.split_whitespace();
    match (words.next(), words.next(), file_digest(out)) {
        (Some(i), Some(o), Some(now)) => i == inputs && o == now,
        _ => false,
    }
}

/// Records that `out` was built from inputs with digest `inputs`. A stamp
/// that cannot be written only costs the next build its skip.
pub(crate) fn record(out: &Path, inputs: &str) {
    if let Some(digest) = file_digest(out)
        && let Err(e) = std::fs::write(stamp_of(out), format!("{inputs} {digest}\n"))
    {
        tracing::warn!("cannot write the build stamp of {}: {e}", out.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_input_or_component_is_not_up_to_date() {
        let dir = tempfile::tempdir().expect("tempdir");
        let guard = dir.path().join("g");
        std::fs::create_dir_all(guard.join("node_modules")).expect("mkdir");
        std::fs::write(guard.join("guard.ts"), "a").expect("write");
        let out = guard.join("g.wasm");
        std::fs::write(&out, "component").expect("write");
        let before = inputs(&guard, &[]);
        record(&out, &before);
        assert!(up_to_date(&out, &before));
        // Outputs, case files, hidden files and dependencies are not inputs.
        std::fs::write(guard.join("node_modules/x.js"), "x").expect("write");
        std::fs::write(guard.join("other.wasm"), "x").expect("write");
        std::fs::write(guard.join("g.test.toml"), "[[case]]").expect("write");
        assert_eq!(inputs(&guard, &[]), before);
        std::fs::write(guard.join("guard.ts"), "b").expect("write");
        assert_ne!(inputs(&guard, &[]), before);
        std::fs::write(&out, "another component").expect("write");
        assert!(!up_to_date(&out, &before));
    }
}
