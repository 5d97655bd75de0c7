//! A call's run time: the time spent inside its own polls.

use super::*;

/// Poll time measured by the wall clock, at most this much per poll, until
/// a call has this much; from then on by its thread's CPU clock. The wall
/// clock costs nothing but counts time the thread was preempted; the CPU
/// clock is a system call per poll, paid only by calls already this slow.
/// A quick call preempted for long thus counts at most this much of it.
pub(super) const WALL_CLOCKED: Duration = Duration::from_millis(1);

/// The CPU time the calling thread has used.
pub(super) fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// A call's run time: the time spent inside its own polls, wherever it
/// runs — by the wall clock for a poll's first [`WALL_CLOCKED`] (at most)
/// until the call has that much, then by its thread's CPU clock. A poll
/// that ticks (runs past an epoch tick) reads the CPU clock from its
/// first tick on, so a long poll is measured by the CPU clock whatever
/// came before. Time the call waited for a core, preempted or queued, is
/// not run time.
///
/// A call whose polls are not clocked (one run outside [`LongLane::run`]:
/// a load-time probe, a benchmark) has the wall-clock time since its
/// [`Ticks`] were made as its run time.
#[derive(Debug, Default)]
pub(super) struct RunClock {
    /// When its ticks were made, until its first clocked poll.
    pub(super) unclocked_since: Option<Instant>,
    /// The run time of its finished polls.
    pub(super) ran: Duration,
    /// The poll under way: when it started, and (once read) its thread's
    /// CPU clock with the run time counted before that reading.
    pub(super) poll: Option<(Instant, Option<(Duration, Duration)>)>,
}

impl RunClock {
    pub(super) fn start_poll(&mut self) {
        self.unclocked_since = None;
        let cpu = (self.ran >= WALL_CLOCKED).then(|| (thread_cpu_time(), Duration::ZERO));
        self.poll = Some((Instant::now(), cpu));
    }

    /// The run time so far, inside a poll on the polling thread; reads the
    /// CPU clock.
    pub(super) fn now(&mut self) -> Duration {
        let Some((start, cpu)) = &mut self.poll else {
            return match self.unclocked_since {
                Some(since) => since.elapsed(),
                None => self.ran,
            };
        };
        let now = thread_cpu_time();
        let (at, before) = *cpu.get_or_insert_with(|| (now, start.elapsed().min(WALL_CLOCKED)));
        self.ran + before + now.saturating_sub(at)
    }

    pub(super) fn end_poll(&mut self) {
        self.ran += match self.poll.take() {
            Some((_, Some((at, before)))) => before + thread_cpu_time().saturating_sub(at),
            Some((start, None)) => start.elapsed().min(WALL_CLOCKED),
            None => Duration::ZERO,
        };
    }
}
