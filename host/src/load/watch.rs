//! Hot reload: watch a plugin directory tree and call a reload when it
//! changes; call it on `SIGHUP`.
//!
//! The watcher (inotify on Linux, via `notify`) collects change events for
//! the whole tree, waits until the tree has been quiet for its settle delay,
//! then calls the reload once. It knows nothing of what a reload does: the
//! [`Registry`](crate::Registry) hands it one (`Registry::watch`,
//! `Registry::on_sighup`), in which calls in flight finish on the plugin set
//! they started with and new calls see the new one.
//!
//! **Shipping a file safely (the atomic-rename convention).** Write the new
//! component or manifest under a name the watcher ignores — a dotfile
//! (`.sql-guard.wasm`) or a `*.tmp` / `*.part` name — in the *same*
//! directory, then `mv` it onto its final name. A rename is atomic: a reload
//! sees the old file or the new one, never half of either. Events for
//! ignored names never trigger a reload, and ignored names are never loaded
//! (only `*.wasm` files and `toolgate.toml` are).
//!
//! A plain in-place copy (`cp new.wasm plugins/`) also works, less neatly:
//! if a reload happens to read the file half-written, the truncated
//! component fails to compile, is reported, and the previous version keeps
//! serving; the copy's later writes trigger another reload that loads the
//! complete file.

use std::future::Future;
use std::path::{Component, Path};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::Error;

/// The settle delay `toolgate serve` watches with (and the Python `Host`'s
/// `settle_ms` default).
pub const DEFAULT_SETTLE: Duration = Duration::from_millis(250);

/// What the watcher calls once the tree has settled, and `SIGHUP` calls:
/// a reload, run on a task of its own.
pub type Reload = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A running watcher; dropping it stops watching.
pub struct WatchHandle {
    _watcher: RecommendedWatcher,
    task: JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for WatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHandle").finish_non_exhaustive()
    }
}

/// Watches the tree under `root`, calling `reload` once it has been quiet
/// for `settle` after a change. Must be called inside a Tokio runtime.
pub fn spawn(root: &Path, settle: Duration, reload: Reload) -> Result<WatchHandle, Error> {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let root = root.to_path_buf();
    let filter_root = root.clone();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        match res {
            Ok(event) => {
                if matters(&event.kind) && event.paths.iter().any(|p| relevant(&filter_root, p)) {
                    let _ = tx.send(());
                }
            }
            Err(e) => {
                tracing::warn!("plugin directory watcher: {e}");
                // Something was missed (e.g. an event queue overflow):
                // reload to be sure.
                let _ = tx.send(());
            }
        }
    })
    .map_err(|source| Error::Watch {
        path: root.clone(),
        source,
    })?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .map_err(|source| Error::Watch {
            path: root.clone(),
            source,
        })?;
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Debounce: wait until nothing has changed for `settle`.
            loop {
                match tokio::time::timeout(settle, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_quiet) => break,
                }
            }
            // Not awaited: a reload that waits for a slow compile in one
            // directory must not hold up the next change in another.
            tokio::spawn(reload());
        }
    });
    Ok(WatchHandle {
        _watcher: watcher,
        task,
    })
}

/// Calls `reload` on every `SIGHUP` until the task is aborted. Must be
/// called inside a Tokio runtime.
#[cfg(unix)]
pub fn on_sighup(reload: Reload) -> Result<JoinHandle<()>, Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).map_err(|source| Error::Signal {
        signal: "SIGHUP",
        source,
    })?;
    Ok(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tokio::spawn(reload());
        }
    }))
}

/// Whether an event of this kind can change what a reload loads (opening
/// or reading a file cannot).
fn matters(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether a change to `path` (under `root`) can matter: not a dotfile or
/// inside a hidden directory, not a temporary or partial file.
pub fn relevant(root: &Path, path: &Path) -> bool {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let hidden = rel.components().any(|c| match c {
        Component::Normal(s) => s.to_string_lossy().starts_with('.'),
        _ => false,
    });
    if hidden {
        return false;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    const PARTIAL: [&str; 6] = [".tmp", ".part", ".partial", ".swp", ".crdownload", "~"];
    !PARTIAL.iter().any(|s| name.ends_with(s))
}
