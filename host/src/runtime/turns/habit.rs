//! Whether a plugin's calls have lately run long.

use super::*;

/// Whether one plugin's calls, for one account, have lately run long.
/// After a call that ran long, its plugin's next [`REMEMBERED`] calls start
/// on the lane's threads instead of a serving thread — a guard that spins
/// on every call then never holds a serving thread for the millisecond or
/// so each call took to turn long — and each call that does not run long
/// counts one off. A guard that ran long once pays for it with a few calls
/// at the lane's priority; a guard that keeps running long is not run on
/// a serving thread at all.
#[derive(Debug, Default)]
pub(crate) struct Habit(AtomicU32);

/// How many calls start on the lane after one that ran long.
pub(crate) const REMEMBERED: u32 = 8;

impl Habit {
    /// Whether the next call is expected to run long.
    pub(crate) fn expects_long(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }

    /// Records whether a call ran long.
    pub(crate) fn record(&self, ran_long: bool) {
        if ran_long {
            self.0.store(REMEMBERED, Ordering::Relaxed);
        } else if self.expects_long() {
            let _ = self
                .0
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }
}
