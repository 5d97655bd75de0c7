//! Hot reload: watch a plugin directory tree and call a reload when it
//! changes; call it on `SIGHUP`.
//!
//! The watcher (inotify on Linux, via `notify`) collects change events for
//! the whole tree and sorts them by directory: the global directory (the
//! root) or one tenant's (`tenants/<name>`). Each directory is debounced
//! on its own: once it has been quiet for the settle delay, the reload is
//! called for it (and whatever other directories are due at that moment).
//! A tenant that keeps rewriting its files so delays only itself — and
//! only up to a bound: a directory that has not been quiet for
//! [`MAX_DELAY`] since its first unloaded change is reloaded anyway, and
//! that is logged (a warning naming the directory) and counted
//! ([`unsettled_reloads`]). It knows nothing of what a reload does: the
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

use std::collections::HashMap;
use std::future::Future;
use std::path::{Component, Path};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::Error;

/// The settle delay `toolgate serve` watches with (and the Python `Host`'s
/// `settle_ms` default).
pub const DEFAULT_SETTLE: Duration = Duration::from_millis(250);

/// The longest a directory's change waits for the directory to settle:
/// one that keeps changing is reloaded at least this often.
pub const MAX_DELAY: Duration = Duration::from_secs(5);

/// Reloads made because a directory never settled within [`MAX_DELAY`],
/// counted process-wide (`toolgate_reloads_unsettled_total`).
static UNSETTLED: AtomicU64 = AtomicU64::new(0);

/// How many reloads were made because a directory kept changing for
/// `MAX_DELAY` without settling.
pub fn unsettled_reloads() -> u64 {
    UNSETTLED.load(Ordering::Relaxed)
}

/// A directory of the plugin tree where a change was seen: what a reload
/// looks at again.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// The root: the global directory, its manifest and components.
    Global,
    /// `tenants/<name>` or anything under it (added, changed, removed).
    Tenant(String),
    /// Everything: `tenants/` itself changed, or the watcher lost events.
    All,
}

impl Dir {
    /// The directory a change to `path` (under `root`) belongs to. `root`
    /// must be as the watcher holds it: absolute, as the events' paths are
    /// (a `path` outside `root` is [`Dir::All`]).
    pub fn of(root: &Path, path: &Path) -> Dir {
        let Ok(rel) = path.strip_prefix(root) else {
            return Dir::All;
        };
        let mut parts = rel.components();
        match (parts.next(), parts.next()) {
            (Some(Component::Normal(t)), Some(Component::Normal(name))) if t == "tenants" => {
                Dir::Tenant(name.to_string_lossy().into_owned())
            }
            (Some(Component::Normal(t)), None) if t == "tenants" => Dir::All,
            _ => Dir::Global,
        }
    }
}

/// What the watcher calls once directories have settled (with them), and
/// `SIGHUP` calls (with [`Dir::All`]): a reload, run on a task of its own.
pub type Reload = Arc<dyn Fn(Vec<Dir>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

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

/// Watches the tree under `root`, calling `reload` for each directory once
/// it has been quiet for `settle` after a change (or has kept changing for
/// [`MAX_DELAY`]). Must be called inside a Tokio runtime.
pub fn spawn(root: &Path, settle: Duration, reload: Reload) -> Result<WatchHandle, Error> {
    spawn_bounded(root, settle, MAX_DELAY.max(settle), reload)
}

/// [`spawn`] with its bound: a directory that keeps changing is reloaded
/// once `max_delay` has passed since its first change not yet reloaded.
pub fn spawn_bounded(
    root: &Path,
    settle: Duration,
    max_delay: Duration,
    reload: Reload,
) -> Result<WatchHandle, Error> {
    let (tx, rx) = mpsc::unbounded_channel::<Dir>();
    // The events name absolute paths: a relative root would match none of
    // them, and every change would be taken for one to every directory.
    let root = crate::load::files::absolute(root);
    let filter_root = root.clone();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        match res {
            Ok(event) => {
                if !matters(&event.kind) {
                    return;
                }
                for p in event.paths.iter().filter(|p| relevant(&filter_root, p)) {
                    let _ = tx.send(Dir::of(&filter_root, p));
                }
            }
            Err(e) => {
                tracing::warn!("plugin directory watcher: {e}");
                // Something was missed (e.g. an event queue overflow):
                // reload to be sure.
                let _ = tx.send(Dir::All);
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
    let task = tokio::spawn(settle_and_reload(rx, settle, max_delay, reload));
    Ok(WatchHandle {
        _watcher: watcher,
        task,
    })
}

/// The watcher's task: waits for each directory that changed to be quiet
/// for `settle` (or to have kept changing for `max_delay`), then calls
/// `reload` with every directory due, without waiting for it.
async fn settle_and_reload(
    mut rx: mpsc::UnboundedReceiver<Dir>,
    settle: Duration,
    max_delay: Duration,
    reload: Reload,
) {
    // Each directory with changes not yet reloaded: when its first such
    // change came, and its last.
    let mut waiting: HashMap<Dir, (Instant, Instant)> = HashMap::new();
    loop {
        let next = waiting
            .values()
            .map(|&(first, last)| (last + settle).min(first + max_delay))
            .min();
        let event = match next {
            None => match rx.recv().await {
                Some(dir) => Some(dir),
                None => return,
            },
            Some(at) => match tokio::time::timeout_at(at, rx.recv()).await {
                Ok(Some(dir)) => Some(dir),
                Ok(None) => return,
                // Something is due.
                Err(_) => None,
            },
        };
        let now = Instant::now();
        if let Some(dir) = event {
            waiting
                .entry(dir)
                .and_modify(|(_, last)| *last = now)
                .or_insert((now, now));
            // Events always ready must not hold back what is due.
            if next.is_none_or(|at| now < at) {
                continue;
            }
        }
        let mut due = take_due(&mut waiting, now, settle, max_delay);
        if !due.is_empty() {
            due.sort();
            // Not awaited: a reload that waits for a slow compile in one
            // directory must not hold up the next change in another.
            tokio::spawn(reload(due));
        }
    }
}

/// Takes the directories due at `now` out of `waiting`: quiet for
/// `settle`, or changing for `max_delay` (counted and logged as reloaded
/// unsettled).
fn take_due(
    waiting: &mut HashMap<Dir, (Instant, Instant)>,
    now: Instant,
    settle: Duration,
    max_delay: Duration,
) -> Vec<Dir> {
    let mut due = Vec::new();
    waiting.retain(|dir, &mut (first, last)| {
        let settled = now >= last + settle;
        let overdue = now >= first + max_delay;
        if !settled && !overdue {
            return true;
        }
        if !settled {
            UNSETTLED.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                directory = ?dir,
                "plugin directory kept changing for {} ms without {} ms of quiet: \
                 reloading it anyway",
                max_delay.as_millis(),
                settle.as_millis()
            );
        }
        due.push(dir.clone());
        false
    });
    due
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
            tokio::spawn(reload(vec![Dir::All]));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::files::absolute;

    /// A relative root, made absolute as the watcher makes it, maps the
    /// absolute paths inotify reports to the directory they are in; taken
    /// as given, it maps every one to `All` (a change to every directory).
    #[test]
    fn a_relative_root_maps_events_to_their_directory() {
        let cwd = std::env::current_dir().expect("current directory");
        let given = Path::new("plugins");
        let event = cwd.join("plugins/tenants/b/guard.wasm");
        assert_eq!(Dir::of(given, &event), Dir::All, "the bug this guards");
        let root = absolute(given);
        assert_eq!(Dir::of(&root, &event), Dir::Tenant("b".into()));
        assert_eq!(Dir::of(&root, &cwd.join("plugins/x.wasm")), Dir::Global);
        assert_eq!(Dir::of(&root, &cwd.join("plugins/tenants")), Dir::All);
        assert!(relevant(&root, &event));
        assert!(!relevant(&root, &cwd.join("plugins/tenants/b/.g.wasm")));
    }
}
