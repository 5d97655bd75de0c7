//! The CPU priority of the lane's threads, and the threads themselves.

/// The CPU priority of the threads long calls run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LanePriority {
    /// Linux's `SCHED_IDLE` class: the thread runs only when no thread of a
    /// normal class wants the core, and gives it up as soon as one does.
    /// Elsewhere, or where the class cannot be set, `nice` 19.
    #[default]
    Idle,
    /// The normal class at this `nice` value (0..=19): the thread gets a
    /// share of a busy core (at 10, about a tenth against a thread at 0).
    Nice(i32),
}

/// The `nice` value [`LanePriority::Idle`] falls back to.
pub(super) const IDLE_NICE: i32 = 19;

impl LanePriority {
    /// Applies this priority to the calling thread (Linux applies it to the
    /// thread alone). A thread can always lower its own priority; an error
    /// means the system refused it.
    pub(crate) fn apply_to_this_thread(self) -> std::io::Result<()> {
        let nice = match self {
            LanePriority::Idle => {
                #[cfg(target_os = "linux")]
                {
                    let param = libc::sched_param { sched_priority: 0 };
                    // SAFETY: `param` is a valid `sched_param` for the call's
                    // duration; pid 0 is the calling thread.
                    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
                        return Ok(());
                    }
                }
                IDLE_NICE
            }
            LanePriority::Nice(n) => n,
        };
        rustix::process::setpriority_process(None, nice).map_err(Into::into)
    }
}

impl std::str::FromStr for LanePriority {
    type Err = String;

    /// `idle`, or a `nice` value from 0 to 19.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "idle" {
            return Ok(LanePriority::Idle);
        }
        match s.parse::<i32>() {
            Ok(n) if (0..=19).contains(&n) => Ok(LanePriority::Nice(n)),
            _ => Err(format!(
                "`{s}` is not a lane priority: `idle`, or a nice value from 0 to 19"
            )),
        }
    }
}

impl std::fmt::Display for LanePriority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LanePriority::Idle => f.write_str("idle"),
            LanePriority::Nice(n) => write!(f, "{n}"),
        }
    }
}

/// The threads long calls run on: a runtime of `width` threads at a
/// [`LanePriority`]. `None` where it could not be started; long calls then
/// stay on the thread they started on (still taking turns). Whatever runs
/// there for a caller logs where the caller logs: [`Threads::spawn`] and
/// [`Threads::spawn_blocking`] carry the caller's `tracing` subscriber.
#[derive(Debug)]
pub(super) struct Threads(pub(super) Option<tokio::runtime::Runtime>);

impl Threads {
    /// Runs `work` on these threads with the caller's subscriber; `work`
    /// back where they could not start.
    pub(super) fn spawn<F>(&self, work: F) -> Result<tokio::task::JoinHandle<F::Output>, F>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        use tracing::instrument::WithSubscriber;
        match &self.0 {
            Some(runtime) => Ok(runtime.spawn(work.with_current_subscriber())),
            None => Err(work),
        }
    }

    /// Runs `work` on these threads' blocking thread with the caller's
    /// subscriber; `work` back where they could not start.
    pub(super) fn spawn_blocking<F>(&self, work: F) -> Result<(), F>
    where
        F: FnOnce() + Send + 'static,
    {
        match &self.0 {
            Some(runtime) => {
                let log = tracing::dispatcher::get_default(tracing::Dispatch::clone);
                drop(runtime.spawn_blocking(move || tracing::dispatcher::with_default(&log, work)));
                Ok(())
            }
            None => Err(work),
        }
    }

    pub(super) fn start(width: u32, priority: LanePriority, name: &'static str) -> Threads {
        // The one blocking thread is the teardown thread (`drop_later`).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(width as usize)
            .max_blocking_threads(1)
            .thread_name(name)
            .on_thread_start(move || {
                // Where this fails long calls still take turns, at the
                // default priority.
                if let Err(e) = priority.apply_to_this_thread() {
                    tracing::debug!("long-call thread keeps the default priority: {e}");
                }
            })
            // IO too: a long call's outbound HTTP (`http.send`) connects
            // from these threads.
            .enable_all()
            .build();
        match runtime {
            Ok(runtime) => Threads(Some(runtime)),
            Err(e) => {
                tracing::warn!(
                    "cannot start the long-call threads; long calls stay where they start: {e}"
                );
                Threads(None)
            }
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        // The engine may be dropped inside an async context, where a
        // runtime must not block on its threads.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
