//! Tearing down big instances off the serving threads, at low priority.
//!
//! Dropping an instance gives its linear memory back to the pool, which
//! decommits every page the guest touched (`madvise`); for a guest that
//! filled a hundred MiB that is milliseconds of kernel time. Done on the
//! thread that served the call, it stalls every other call queued on that
//! thread — a tenant's memory bombs would be paid for by its neighbours.
//!
//! So an instance whose memories hold more than [`BIG`] is handed, with
//! the pool slot and the share it holds, to one reaper thread running at
//! a lower CPU priority (`nice` [`NICE`]): when the host is busy, serving
//! goes first and the teardown waits. Until the reaper has dropped it, the
//! instance still counts against its account's share, so a tenant whose
//! teardowns lag behind is slowed down on its own share, no one else's.
//! The caller's answer never waits for the teardown.

use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

/// Memory an instance's memories must hold for its teardown to go to the
/// reaper; smaller ones are dropped in place (a hop to another thread
/// costs more than their decommit).
pub(crate) const BIG: usize = 32 << 20;

/// The reaper thread's `nice` value: a tenth or so of a busy core's time
/// against serving threads at the default priority.
const NICE: i32 = 10;

type Remains = Box<dyn Send>;

/// Drops `remains` on the reaper thread, or here if the thread cannot run.
pub(crate) fn drop_later(remains: impl Send + 'static) {
    static REAPER: OnceLock<Option<Sender<Remains>>> = OnceLock::new();
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Remains>();
        std::thread::Builder::new()
            .name("toolgate-reaper".into())
            .spawn(move || {
                // Linux applies it to this thread alone; where it fails the
                // reaper still works, at the default priority.
                if let Err(e) = rustix::process::setpriority_process(None, NICE) {
                    tracing::debug!("reaper keeps the default priority: {e}");
                }
                for remains in rx {
                    drop(remains);
                }
            })
            .map_err(|e| tracing::warn!("cannot start the reaper thread, dropping in place: {e}"))
            .ok()
            .map(|_| tx)
    });
    let remains: Remains = Box::new(remains);
    match reaper {
        // The thread is gone only if it panicked; drop in place then.
        Some(tx) => {
            if let Err(unsent) = tx.send(remains) {
                drop(unsent.0);
            }
        }
        None => drop(remains),
    }
}
