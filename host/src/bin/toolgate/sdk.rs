//! The guest SDKs and the WIT contract this binary carries (embedded by
//! `host/build.rs`), extracted on demand into the user's cache, so
//! `toolgate new` and `toolgate build` need nothing but the binary and the
//! language's toolchain.
//!
//! The copy lives at `<cache>/sdk/<digest>/` (`guest-sdk/`, `wit/`), where
//! `<cache>` is `$XDG_CACHE_HOME/toolgate` or `~/.cache/toolgate` and
//! `<digest>` is the SHA-256 of the embedded files: a binary with other SDKs
//! gets another directory, and a complete one is never rewritten. What the
//! builds install (Go, componentize-js's packages, componentize-py, the Rust
//! SDK's compiled dependencies) goes to one shared toolchain directory, see
//! [`toolchains`].

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::bad;

include!(concat!(env!("OUT_DIR"), "/embedded_sdk.rs"));

/// The marker a complete extraction holds; written last.
const COMPLETE: &str = ".toolgate-sdk-complete";

/// The embedded files' digest (hex SHA-256 over each path and its bytes).
pub(crate) fn digest() -> String {
    let mut h = Sha256::new();
    for (path, bytes, exec) in FILES {
        h.update(path.as_bytes());
        h.update([0, u8::from(*exec)]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    hex::encode(h.finalize())
}

/// `$XDG_CACHE_HOME/toolgate`, else `$HOME/.cache/toolgate`.
fn cache_root() -> Result<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("toolgate"))
        .ok_or_else(|| {
            bad(
                "no cache directory for the embedded SDK: set XDG_CACHE_HOME or HOME, \
                 or pass --sdk <guest-sdk dir>"
                    .to_string(),
            )
        })
}

/// Where the builds install their toolchains and keep their build caches:
/// `$TOOLGATE_TOOLCHAINS`, else `<cache>/toolchains`. Shared by every SDK
/// version and every project (each install is pinned and checked).
pub(crate) fn toolchains() -> Result<PathBuf> {
    match std::env::var_os("TOOLGATE_TOOLCHAINS").filter(|v| !v.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Ok(cache_root()?.join("toolchains")),
    }
}

/// The `guest-sdk` directory of the embedded SDK, extracted first when it
/// is not in the cache yet.
pub(crate) fn embedded() -> Result<PathBuf> {
    if FILES.is_empty() {
        return Err(bad(
            "this toolgate binary carries no SDK (built outside a checkout): \
             pass --sdk <guest-sdk dir> or set TOOLGATE_SDK"
                .to_string(),
        ));
    }
    let root = extraction_dir()?;
    if !root.join(COMPLETE).is_file() {
        extract(&root)?;
    }
    Ok(root.join("guest-sdk"))
}

/// `<cache>/sdk/<digest>`: where this binary's SDK is extracted.
fn extraction_dir() -> Result<PathBuf> {
    Ok(cache_root()?.join("sdk").join(&digest()[..16]))
}

/// Extracts this binary's SDK when `text` (a guard's `Cargo.toml`) names
/// its extraction directory and the directory is gone.
pub(crate) fn extract_if_named(text: &str) -> Result<()> {
    let Ok(root) = extraction_dir() else {
        return Ok(());
    };
    if !FILES.is_empty() && text.contains(&*root.to_string_lossy()) {
        embedded()?;
    }
    Ok(())
}

/// Whether `path` lies in an extracted embedded SDK (a build script of it).
pub(crate) fn is_embedded(path: &Path) -> bool {
    path.ancestors().any(|dir| dir.join(COMPLETE).is_file())
}

/// Writes every file into a fresh sibling directory, then renames it to
/// `root`: a reader sees a complete copy or none. Losing the race to
/// another process is fine (its copy is the same).
fn extract(root: &Path) -> Result<()> {
    let parent = root.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".extract-")
        .tempdir_in(parent)
        .with_context(|| format!("cannot create a directory in {}", parent.display()))?;
    for (rel, bytes, exec) in FILES {
        let path = tmp.path().join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        if *exec {
            set_executable(&path)?;
        }
    }
    std::fs::write(tmp.path().join(COMPLETE), digest())
        .with_context(|| format!("cannot write in {}", tmp.path().display()))?;
    let tmp = tmp.keep();
    if let Err(e) = std::fs::rename(&tmp, root) {
        let _ = std::fs::remove_dir_all(&tmp);
        if !root.join(COMPLETE).is_file() {
            return Err(anyhow::Error::new(e)
                .context(format!("cannot extract the SDK into {}", root.display())));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carries_every_language_and_the_contract() {
        for want in [
            "guest-sdk/go/build",
            "guest-sdk/js/build",
            "guest-sdk/python/build",
            "guest-sdk/rust/Cargo.toml",
            "guest-sdk/js/package-lock.json",
            "wit/guard.wit",
            "wit/v0.2.0/guard.wit",
        ] {
            assert!(FILES.iter().any(|(p, _, _)| *p == want), "{want}");
        }
        assert!(
            !FILES
                .iter()
                .any(|(p, _, _)| p.contains("/node_modules/") || p.contains("/target/")),
            "no installed dependencies or build outputs"
        );
    }
}
