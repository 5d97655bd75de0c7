//! Whether an entry may have arrived under `<root>/tenants` since the last
//! listing, answered without a path walk.
//!
//! A call for a tenant its plugin set does not know must not be decided on
//! the global chain alone once `tenants/<name>` exists, even in the moment
//! between the directory's rename and the reload that loads it
//! ([`PluginSet::ready`](crate::load::registry::PluginSet::ready)). The
//! check that guarantees it is an `lstat` of `tenants/<name>` per call: a
//! path walk that, after an agent's idle gap, costs a call 15–25 µs of cold
//! dentry lookups (BENCHMARKS.md, "Against the commit"). This
//! module makes that check unnecessary when nothing changed: an inotify
//! watch on the root and on `tenants/`, drained just before each listing.
//! The kernel queues a watch's event inside the `rename` or `mkdir` that
//! causes it, so when the queue is still empty, and no listing drained it
//! meanwhile, nothing was created under `tenants/` (nor was `tenants/`
//! itself replaced) since the listing: what the listing saw is what is
//! there. Anything else — an event of any kind, a queue overflow, a watch
//! that could not be set, another platform — leaves the `lstat` to decide,
//! exactly as before.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

use crate::error::Error;

/// Whether a watcher failed for want of an inotify instance or a file
/// descriptor (only Linux's watch holds one to give).
fn out_of_instances(e: &notify::Error) -> bool {
    #[cfg(target_os = "linux")]
    {
        matches!(&e.kind, notify::ErrorKind::Io(io) if io.raw_os_error() == Some(libc::EMFILE))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = e;
        false
    }
}

/// What one listing of `tenants/` read, after the drain it follows.
#[derive(Debug)]
struct Listed {
    /// The drain's number ([`Arrivals::before_listing`]).
    drained: u64,
    /// Every entry name under `tenants/` the listing read (tenants,
    /// refused entries, files, hidden names alike).
    entries: BTreeSet<String>,
}

/// The inotify watch on a plugin root and its `tenants/` directory.
#[derive(Debug)]
pub(crate) struct Arrivals {
    /// `None`: no watch (not Linux, inotify refused, or its instance given
    /// up to the tree watcher: [`Arrivals::yield_instance`]): never quiet.
    #[cfg(target_os = "linux")]
    fd: ArcSwapOption<std::os::fd::OwnedFd>,
    /// Bumped by every drain, before it reads the queue.
    drains: AtomicU64,
    /// The last listing that read every entry.
    listed: ArcSwapOption<Listed>,
}

#[cfg(target_os = "linux")]
mod watch {
    use std::os::fd::OwnedFd;
    use std::path::Path;

    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

    pub(super) fn open() -> Option<OwnedFd> {
        inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()
    }

    /// (Re)sets the watches on `root` (an entry created, moved in or out,
    /// removed; the root itself moved or removed), on `root/tenants` (an
    /// entry created or moved in; the directory moved or removed) and on
    /// each of the root's ancestors (moved or removed: the root's path
    /// may then reach another directory). A `tenants/` that does not
    /// exist yet is seen arriving by the root's watch. The watched inodes
    /// must be the ones a lookup of `root/tenants/<name>` reaches, so a
    /// root reached through a symlink, or a `tenants` that is one, is not
    /// watched. `false`: not watched.
    pub(super) fn set(fd: &OwnedFd, root: &Path) -> bool {
        if !std::fs::canonicalize(root).is_ok_and(|real| real == root) {
            return false;
        }
        if std::fs::symlink_metadata(root.join("tenants")).is_ok_and(|m| m.is_symlink()) {
            return false;
        }
        let moved = WatchFlags::MOVE_SELF | WatchFlags::DELETE_SELF;
        for dir in root.ancestors().skip(1) {
            if inotify::add_watch(fd, dir, moved | WatchFlags::ONLYDIR).is_err() {
                return false;
            }
        }
        let root_watch = inotify::add_watch(
            fd,
            root,
            WatchFlags::CREATE
                | WatchFlags::MOVED_TO
                | WatchFlags::MOVED_FROM
                | WatchFlags::DELETE
                | moved,
        );
        let tenants = inotify::add_watch(
            fd,
            root.join("tenants"),
            WatchFlags::CREATE | WatchFlags::MOVED_TO | moved | WatchFlags::DONT_FOLLOW,
        );
        let tenants_ok = match tenants {
            Ok(_) => true,
            Err(e) => e == rustix::io::Errno::NOENT || e == rustix::io::Errno::NOTDIR,
        };
        root_watch.is_ok() && tenants_ok
    }

    /// Reads every queued event (they only ever mean "look").
    pub(super) fn drain(fd: &OwnedFd) {
        let mut buf = [0u8; 4096];
        while matches!(rustix::io::read(fd, &mut buf), Ok(n) if n > 0) {}
    }

    /// The bytes of events queued and not yet read.
    pub(super) fn queued(fd: &OwnedFd) -> Option<u64> {
        rustix::io::ioctl_fionread(fd).ok()
    }
}

impl Arrivals {
    /// A watch for `root`'s `tenants/` (set at each listing).
    pub(crate) fn new() -> Arc<Arrivals> {
        Arc::new(Arrivals {
            #[cfg(target_os = "linux")]
            fd: ArcSwapOption::from(watch::open().map(Arc::new)),
            drains: AtomicU64::new(0),
            listed: ArcSwapOption::empty(),
        })
    }

    /// Called just before `tenants/` under `root` is listed: sets the
    /// watches and empties the queue, so that whatever arrives from now on
    /// is either in the listing or queued. Returns the drain's number to
    /// give [`Arrivals::listed`] with the listing, or `None` when no watch
    /// could be set (calls then always look).
    pub(crate) fn before_listing(&self, root: &Path) -> Option<u64> {
        // Bumped before the queue is read: a call that finds the queue
        // empty because this drain read it also finds the count moved.
        let drained = self.drains.fetch_add(1, Ordering::SeqCst) + 1;
        #[cfg(target_os = "linux")]
        {
            let fd = self.fd.load_full()?;
            if !watch::set(&fd, root) {
                return None;
            }
            watch::drain(&fd);
            Some(drained)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (root, drained);
            None
        }
    }

    /// Records what a listing read after the drain numbered `drained`:
    /// `entries`, every entry's name (`None`: not every entry could be
    /// read, so nothing is recorded).
    pub(crate) fn listed(&self, drained: Option<u64>, entries: Option<BTreeSet<String>>) {
        if let (Some(drained), Some(entries)) = (drained, entries) {
            self.listed
                .store(Some(Arc::new(Listed { drained, entries })));
        }
    }

    /// Whether `tenants/<name>` certainly does not exist: the last
    /// listing did not see it, and nothing arrived (and no other listing
    /// drained the queue) since. `false` means "look": it may exist.
    pub(crate) fn certainly_absent(&self, name: &str) -> bool {
        let listed = self.listed.load();
        listed
            .as_ref()
            .is_some_and(|l| !l.entries.contains(name) && self.quiet_since(l.drained))
    }

    /// Closes the watch's inotify instance, if it holds one, so the tree
    /// watcher can have it: a user at the kernel's limit of instances
    /// (`fs.inotify.max_user_instances`, 128 by default) keeps hot reload,
    /// and every call for a tenant the set does not know looks again, as
    /// without the watch. Returns whether an instance was given up.
    pub(crate) fn yield_instance(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.fd.swap(None).is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// Runs `spawn` (the tree watcher's start); when it fails for want of
    /// an inotify instance (`EMFILE`: the user's or the process's limit)
    /// and this watch holds one, gives that one up
    /// ([`Arrivals::yield_instance`]), says so, and runs `spawn` again:
    /// hot reload matters more than the `lstat` the watch spares.
    pub(crate) fn yielding<T>(
        &self,
        mut spawn: impl FnMut() -> Result<T, Error>,
    ) -> Result<T, Error> {
        match spawn() {
            Err(Error::Watch { path, source }) if out_of_instances(&source) => {
                if !self.yield_instance() {
                    return Err(Error::Watch { path, source });
                }
                tracing::warn!(
                    "no inotify instance left for the watcher of {} ({source}): the watch for \
                     arriving tenants gave up its own, so a call for a tenant not loaded looks \
                     for its directory each time (raise fs.inotify.max_user_instances to keep both)",
                    path.display()
                );
                spawn()
            }
            other => other,
        }
    }

    /// Whether nothing was queued and nothing drained since the drain
    /// numbered `drained`.
    fn quiet_since(&self, drained: u64) -> bool {
        #[cfg(target_os = "linux")]
        {
            let fd = self.fd.load();
            let Some(fd) = fd.as_deref() else {
                return false;
            };
            self.drains.load(Ordering::SeqCst) == drained
                && watch::queued(fd) == Some(0)
                && self.drains.load(Ordering::SeqCst) == drained
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = drained;
            false
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A listing as the registry makes one: drain, then read.
    fn list(arrivals: &Arrivals, root: &Path) {
        let drained = arrivals.before_listing(root);
        assert!(drained.is_some(), "the watch is set");
        let entries = match std::fs::read_dir(root.join("tenants")) {
            Ok(dir) => dir
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => BTreeSet::new(),
        };
        arrivals.listed(drained, Some(entries));
    }

    #[test]
    fn a_name_is_certainly_absent_only_until_something_arrives() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // Canonical: a root reached through a symlink is never watched.
        let real = std::fs::canonicalize(tmp.path()).expect("canonical");
        let root = real.as_path();
        let a = Arrivals::new();
        assert!(!a.certainly_absent("acme"), "nothing listed yet: look");

        // No tenants/ yet: it appearing is seen by the root's watch.
        list(&a, root);
        assert!(a.certainly_absent("acme"));
        std::fs::create_dir(root.join("tenants")).expect("mkdir");
        assert!(!a.certainly_absent("acme"));

        // Listed again: quiet, and a name listed is never "absent".
        std::fs::create_dir(root.join("tenants/known")).expect("mkdir");
        list(&a, root);
        assert!(a.certainly_absent("acme"));
        assert!(!a.certainly_absent("known"));

        // A directory renamed in (the atomic way to add a tenant): any
        // arrival means look, for every name.
        std::fs::create_dir(root.join(".acme")).expect("mkdir");
        assert!(!a.certainly_absent("acme"), "the root changed");
        list(&a, root);
        assert!(a.certainly_absent("acme"));
        std::fs::rename(root.join(".acme"), root.join("tenants/acme")).expect("rename");
        assert!(!a.certainly_absent("acme"));
        assert!(!a.certainly_absent("other"));

        // A drain whose listing has not been recorded yet: look (the
        // queue it emptied may have held an arrival).
        list(&a, root);
        assert!(a.certainly_absent("other"));
        let drained = a.before_listing(root);
        assert!(!a.certainly_absent("other"));
        a.listed(drained, None);
        assert!(
            !a.certainly_absent("other"),
            "a listing that could not read every entry"
        );
        list(&a, root);
        assert!(a.certainly_absent("other"));

        // tenants/ moved away, and another moved in its place.
        std::fs::create_dir(root.join("next")).expect("mkdir");
        list(&a, root);
        std::fs::rename(root.join("tenants"), root.join("old")).expect("rename");
        assert!(!a.certainly_absent("other"));
        list(&a, root);
        assert!(a.certainly_absent("other"));
        std::fs::rename(root.join("next"), root.join("tenants")).expect("rename");
        assert!(!a.certainly_absent("other"));

        // An ancestor of the root moved: its path may reach another tree.
        let parent = root.parent().expect("a parent");
        let outer = tempfile::tempdir_in(parent).expect("tempdir");
        let nested = outer.path().join("plugins");
        std::fs::create_dir_all(nested.join("tenants")).expect("mkdir");
        let b = Arrivals::new();
        list(&b, &nested);
        assert!(b.certainly_absent("other"));
        let moved = parent.join(format!("{}-moved", outer.path().display()));
        std::fs::rename(outer.path(), &moved).expect("rename");
        assert!(!b.certainly_absent("other"));
        std::fs::rename(&moved, outer.path()).expect("rename back");

        // A tenants/ that is a symlink, or a root reached through one, is
        // not watched: every call looks.
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let linked = outer.path().join("linked");
        std::fs::create_dir(&linked).expect("mkdir");
        std::os::unix::fs::symlink(elsewhere.path(), linked.join("tenants")).expect("symlink");
        let c = Arrivals::new();
        assert_eq!(c.before_listing(&linked), None);
        let through = outer.path().join("through");
        std::os::unix::fs::symlink(&nested, &through).expect("symlink");
        assert_eq!(c.before_listing(&through), None);

        // A file created in tenants/ under the name.
        list(&a, root);
        assert!(a.certainly_absent("other"));
        std::fs::write(root.join("tenants/other"), b"").expect("write");
        assert!(!a.certainly_absent("other"));
        list(&a, root);
        assert!(!a.certainly_absent("other"), "listed: look");

        // Its instance given up to the tree watcher: every call looks.
        let d = Arrivals::new();
        list(&d, root);
        assert!(d.certainly_absent("acme"));
        assert!(d.yield_instance());
        assert!(!d.certainly_absent("acme"));
        assert_eq!(d.before_listing(root), None);
        assert!(!d.yield_instance(), "given up once");
    }

    fn out_of_instances_error() -> Error {
        Error::Watch {
            path: "/plugins".into(),
            source: notify::Error::io(std::io::Error::from_raw_os_error(libc::EMFILE)),
        }
    }

    #[test]
    fn a_watcher_short_of_an_instance_gets_the_watch_s_and_other_failures_are_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let a = Arrivals::new();
        list(&a, &root);
        assert!(a.certainly_absent("acme"));
        let mut tries = 0;
        let started = a.yielding(|| {
            tries += 1;
            if tries == 1 {
                Err(out_of_instances_error())
            } else {
                Ok("watching")
            }
        });
        assert_eq!(started.ok(), Some("watching"));
        assert_eq!(tries, 2, "tried again once the instance was given up");
        assert!(!a.certainly_absent("acme"), "calls look again");

        // Nothing left to give: the watcher's error stands, tried once.
        let mut tries = 0;
        let e = a.yielding(|| -> Result<(), Error> {
            tries += 1;
            Err(out_of_instances_error())
        });
        assert!(matches!(e, Err(Error::Watch { .. })));
        assert_eq!(tries, 1);

        // Any other failure is the watcher's own: the watch keeps its.
        let b = Arrivals::new();
        list(&b, &root);
        let e = b.yielding(|| -> Result<(), Error> {
            Err(Error::Watch {
                path: "/plugins".into(),
                source: notify::Error::path_not_found(),
            })
        });
        assert!(matches!(e, Err(Error::Watch { .. })));
        assert!(b.certainly_absent("acme"), "still watching");
    }
}
