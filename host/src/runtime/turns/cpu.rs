//! Each account's place in the lane and its recent use of the CPU, which
//! decides the set of threads its long calls run on.

use super::*;

/// One account's place in the lane: at most one of its long calls queues
/// for (or holds) a lane turn at a time; and its recent use of the CPU,
/// which decides the lane its long calls run in.
#[derive(Debug)]
pub struct AccountTurn {
    pub(super) turn: Arc<Semaphore>,
    pub(super) cpu: Arc<CpuUse>,
}

impl Default for AccountTurn {
    fn default() -> Self {
        AccountTurn {
            turn: Arc::new(Semaphore::new(1)),
            cpu: Arc::default(),
        }
    }
}

/// How long one window of CPU accounting lasts. An account's recent use
/// is its use in the current window and the one before.
pub(super) const CPU_WINDOW: Duration = Duration::from_millis(500);

/// Run time in one window and the one before.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Windowed {
    pub(super) window: u64,
    pub(super) this: Duration,
    pub(super) before: Duration,
}

impl Windowed {
    /// Moves to `window`; whether it had been in another.
    pub(super) fn roll(&mut self, window: u64) -> bool {
        if self.window == window {
            return false;
        }
        self.before = if self.window + 1 == window {
            self.this
        } else {
            Duration::ZERO
        };
        self.this = Duration::ZERO;
        self.window = window;
        true
    }

    pub(super) fn recent(&self) -> Duration {
        self.this + self.before
    }
}

/// One account's recent run time of guard calls.
#[derive(Debug, Default)]
pub(crate) struct CpuUse(Mutex<Windowed>);

/// The guards' recent run time host-wide, and how many accounts it came
/// from: an account's *part* of it is an equal share of what the accounts
/// that ran anything lately used.
///
/// This is what keeps the lane fair between accounts whatever the OS
/// priority of its threads: a tenant whose spinning guards take more than
/// their part runs its long calls at the low priority (behind everyone's
/// quick calls), while a tenant within its part — a guard that needs a few
/// milliseconds for a big event, beside another tenant's flood of quick
/// calls — runs them at the normal priority, and gets the CPU.
#[derive(Debug)]
pub(super) struct CpuMeter {
    pub(super) start: Instant,
    pub(super) state: Mutex<MeterState>,
}

#[derive(Debug, Default)]
pub(super) struct MeterState {
    pub(super) total: Windowed,
    /// Accounts that ran a call in this window and in the one before.
    pub(super) active: u32,
    pub(super) active_before: u32,
}

impl Default for CpuMeter {
    fn default() -> Self {
        CpuMeter {
            start: Instant::now(),
            state: Mutex::default(),
        }
    }
}

impl CpuMeter {
    pub(super) fn window(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis() / CPU_WINDOW.as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn rolled(&self) -> std::sync::MutexGuard<'_, MeterState> {
        let window = self.window();
        let mut state = lock(&self.state);
        let consecutive = state.total.window + 1 == window;
        if state.total.roll(window) {
            state.active_before = if consecutive { state.active } else { 0 };
            state.active = 0;
        }
        state
    }

    /// Counts `run` of an account's call.
    pub(super) fn record(&self, account: &CpuUse, run: Duration) {
        let mut state = self.rolled();
        let window = state.total.window;
        state.total.this += run;
        let mut own = lock(&account.0);
        own.roll(window);
        let first = own.this.is_zero();
        own.this += run;
        if first && !own.this.is_zero() {
            state.active += 1;
        }
    }

    /// Whether the account has used no more than its part of the recent
    /// run time.
    pub(super) fn within_part(&self, account: &CpuUse) -> bool {
        let state = self.rolled();
        let mut own = lock(&account.0);
        own.roll(state.total.window);
        let accounts = state.active.max(state.active_before).max(1);
        own.recent().saturating_mul(accounts) <= state.total.recent()
    }
}
