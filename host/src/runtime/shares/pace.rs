//! Rates: when an account's requests may start, and how much guest log its
//! calls may write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// A rate requests may start at: `per_s` a second, `burst` at once after
/// a pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Rate {
    /// Requests a second.
    pub per_s: u32,
    /// Requests at once on top of the rate (at least 1).
    pub burst: u32,
}

impl Rate {
    /// `per_s` a second (0: no limit, `None`) with a burst of `burst`
    /// (0: a second's worth).
    pub fn new(per_s: u32, burst: u32) -> Option<Rate> {
        (per_s > 0).then_some(Rate {
            per_s,
            burst: if burst == 0 { per_s } else { burst },
        })
    }
}

/// When an account's requests may start, for its [`Rate`]: the generic
/// cell rate algorithm, as a queue of turns. Each request takes the next
/// turn — `1 / per_s` after the one before, or now if that has passed —
/// and may start up to `burst - 1` turns early.
#[derive(Debug)]
pub(super) struct Pace {
    /// The rate it keeps.
    pub(super) rate: Rate,
    /// Between two turns.
    interval: Duration,
    /// How early a turn may be taken.
    tolerance: Duration,
    /// The next turn not yet taken (`None`: never taken, so now).
    next: std::sync::Mutex<Option<Instant>>,
}

impl Pace {
    pub(super) fn new(rate: Rate) -> Pace {
        let interval = Duration::from_secs(1) / rate.per_s.max(1);
        Pace {
            rate,
            interval,
            tolerance: interval * rate.burst.max(1).saturating_sub(1),
            next: std::sync::Mutex::new(None),
        }
    }

    /// Takes the next turn for a request that came `now`, when it may
    /// start; or, when that is more than `wait` away, takes nothing and
    /// says how far away it was.
    pub(super) fn take(&self, now: Instant, wait: Duration) -> Result<Instant, Duration> {
        let mut next = self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let turn = next.map_or(now, |t| t.max(now));
        let start = turn.checked_sub(self.tolerance).map_or(now, |s| s.max(now));
        let away = start - now;
        if away > wait {
            return Err(away);
        }
        *next = Some(turn + self.interval);
        Ok(start)
    }
}

/// How much guest log an account's calls may write: a bucket of `per_s`
/// bytes, refilled at `per_s` a second. A line that does not fit is
/// dropped whole and counted.
#[derive(Debug)]
pub(super) struct LogBudget {
    per_s: u64,
    state: std::sync::Mutex<LogState>,
    pub(super) dropped: AtomicU64,
}

#[derive(Debug)]
struct LogState {
    /// Bytes that may be written as of `at`.
    left: u64,
    at: Instant,
    /// When a dropped line was last logged.
    warned: Option<Instant>,
}

/// How often the log says an account's guest lines are being dropped.
const LOG_DROPS_WARNED_EVERY: Duration = Duration::from_secs(10);

impl LogBudget {
    pub(super) fn new(per_s: u64) -> LogBudget {
        LogBudget {
            per_s,
            state: std::sync::Mutex::new(LogState {
                left: per_s,
                at: Instant::now(),
                warned: None,
            }),
            dropped: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` from the bucket at `now`, or counts them dropped.
    pub(super) fn spend(&self, account: &str, bytes: usize, now: Instant) -> bool {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let warn = {
            let mut s = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Times taken on other threads may come in out of order: a
            // moment already counted is not earned twice.
            let earned = now.saturating_duration_since(s.at).as_nanos() * u128::from(self.per_s)
                / 1_000_000_000;
            s.left = u64::try_from(earned)
                .unwrap_or(u64::MAX)
                .saturating_add(s.left)
                .min(self.per_s);
            s.at = s.at.max(now);
            if let Some(left) = s.left.checked_sub(bytes) {
                s.left = left;
                return true;
            }
            let due = s
                .warned
                .is_none_or(|w| now.saturating_duration_since(w) >= LOG_DROPS_WARNED_EVERY);
            if due {
                s.warned = Some(now);
            }
            due
        };
        let dropped = self.dropped.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if warn {
            tracing::warn!(
                account,
                dropped_bytes = dropped,
                "`{account}`'s guards write (or the host writes about their calls) more than \
                 {} KiB of log a second ([shares] tenant_log_kib_per_s): lines beyond it are \
                 dropped ({dropped} bytes so far)",
                self.per_s >> 10
            );
        }
        false
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::shares::{Account, Lends};

    #[test]
    fn turns_come_at_the_rate_after_a_burst_and_too_far_ones_are_not_taken() {
        let pace = Pace::new(Rate {
            per_s: 10,
            burst: 3,
        });
        let (now, ms) = (Instant::now(), Duration::from_millis);
        let wait = ms(150);
        for _ in 0..3 {
            assert_eq!(pace.take(now, wait), Ok(now), "the burst starts at once");
        }
        assert_eq!(pace.take(now, wait), Ok(now + ms(100)));
        assert_eq!(pace.take(now, wait), Err(ms(200)), "past the wait");
        assert_eq!(pace.take(now, wait), Err(ms(200)), "a refusal took no turn");
        assert_eq!(pace.take(now + ms(50), wait), Ok(now + ms(200)));
        // After a pause the whole burst is back, and no more.
        let later = now + ms(2000);
        for _ in 0..3 {
            assert_eq!(pace.take(later, Duration::ZERO), Ok(later));
        }
        assert_eq!(pace.take(later, Duration::ZERO), Err(ms(100)));
    }

    #[test]
    fn a_log_budget_lets_a_second_s_worth_through_then_refills_at_its_rate() {
        let budget = LogBudget::new(1000);
        let t0 = Instant::now();
        assert!(budget.spend("a", 600, t0));
        assert!(budget.spend("a", 400, t0), "a second's worth at once");
        assert!(!budget.spend("a", 1, t0), "then nothing");
        assert!(
            !budget.spend("a", 300, t0 + Duration::from_millis(200)),
            "200 bytes earned"
        );
        assert!(budget.spend("a", 200, t0 + Duration::from_millis(200)));
        assert!(
            !budget.spend("a", 1001, t0 + Duration::from_secs(60)),
            "never more than the bucket"
        );
        assert!(
            budget.spend("a", 1000, t0 + Duration::from_secs(60)),
            "a full bucket, not 60 s of it"
        );
        assert_eq!(budget.dropped.load(Ordering::Relaxed), 1 + 300 + 1001);
        let unlimited = Account::new(
            "a",
            Lends {
                requests: 4,
                rate: None,
                instances: 1,
                memory_mib: 1,
                log_kib_per_s: 0,
            },
            Duration::ZERO,
        );
        assert!(unlimited.may_log(usize::MAX), "0: no limit");
        assert_eq!(unlimited.usage().log_dropped_bytes, 0);
    }
}
