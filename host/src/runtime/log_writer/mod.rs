//! The decision log: one JSON line per decision, handed to a sink's writer
//! through a bounded queue, so writing never slows or blocks a decision.
//!
//! Each sink has one writer task, on a thread of its own (its own
//! single-threaded runtime: a stalled sink cannot take a worker from the
//! decisions). A decision's line is offered with `try_send`: when the
//! queue is full — the sink slow or down — the line is dropped and
//! counted ([`dropped_total`], `toolgate_decision_log_dropped_total`), and
//! the log says so at most every 10 s. A batch the HTTP sink could not
//! deliver after its retries is dropped and counted the same way.
//!
//! What a line holds is the faces' business (`serve/decision_record.rs`);
//! this part only queues, masks ([`redact`]) and writes.

pub(crate) mod config;
mod file;
mod http;
pub(crate) mod redact;
mod stdout;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

pub use config::{DecisionLogConfig, Include, Sink};

/// How long the stdout and file writers rest after writing out what was
/// queued: lines gather meanwhile, so a decision's line costs a push on
/// the queue rather than a wake-up of the writer's thread, and the writer
/// makes one write for many lines.
const WRITE_EVERY: Duration = Duration::from_millis(5);

/// How often, at most, the log says lines were dropped.
const DROP_REPORT_EVERY: Duration = Duration::from_secs(10);

/// Lines dropped by every decision log of the process since it started.
static DROPPED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Lines dropped by every decision log of the process since it started
/// (the queue full, or a batch the HTTP sink gave up on).
pub fn dropped_total() -> u64 {
    DROPPED_TOTAL.load(Ordering::Relaxed)
}

/// What goes through a sink's queue.
enum Msg {
    Line(Value),
    /// Write out everything queued before it, then answer.
    Flush(oneshot::Sender<()>),
}

/// Drops, counted once per log and process-wide, reported at most every
/// [`DROP_REPORT_EVERY`].
#[derive(Debug)]
struct Drops {
    count: AtomicU64,
    reported: AtomicU64,
    /// When the last report was made, ms after `since` (0: never).
    last_report_ms: AtomicU64,
    since: Instant,
}

impl Drops {
    fn new() -> Self {
        Drops {
            count: AtomicU64::new(0),
            reported: AtomicU64::new(0),
            last_report_ms: AtomicU64::new(0),
            since: Instant::now(),
        }
    }

    /// Counts `n` lines dropped, and says so unless it did less than
    /// [`DROP_REPORT_EVERY`] ago.
    fn add(&self, n: u64, why: &str) {
        let total = self.count.fetch_add(n, Ordering::Relaxed) + n;
        DROPPED_TOTAL.fetch_add(n, Ordering::Relaxed);
        // +1 so that 0 keeps meaning "never".
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.last_report_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= DROP_REPORT_EVERY.as_millis() as u64;
        if due
            && self
                .last_report_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let before = self.reported.swap(total, Ordering::Relaxed);
            tracing::warn!(
                dropped = total - before,
                dropped_total = total,
                "decision log: lines dropped ({why}); decisions were not delayed"
            );
        }
    }
}

/// A running decision log: its settings and its sink's queue. Dropping
/// the last handle lets the writer write out what is queued and stop.
pub struct DecisionLog {
    config: DecisionLogConfig,
    queue: mpsc::Sender<Msg>,
    drops: Arc<Drops>,
}

impl fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecisionLog")
            .field("sink", &self.config.sink)
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl DecisionLog {
    /// Starts the writer of `config`'s sink; `Ok(None)` when the sink is
    /// off. The config must have passed [`DecisionLogConfig::check`].
    pub fn start(config: DecisionLogConfig) -> std::io::Result<Option<Arc<DecisionLog>>> {
        if config.sink == Sink::Off {
            return Ok(None);
        }
        let (queue, rx) = mpsc::channel(config.queue_lines.max(1));
        let drops = Arc::new(Drops::new());
        let writer = Writer {
            config: config.clone(),
            rx,
            drops: drops.clone(),
        };
        std::thread::Builder::new()
            .name("toolgate-decision-log".into())
            .spawn(move || writer.run())?;
        Ok(Some(Arc::new(DecisionLog {
            config,
            queue,
            drops,
        })))
    }

    /// The log `config` asks for: `old` itself when its settings are the
    /// same (its writer and queue go on), else a new one (the old one's
    /// writer writes out its queue and stops when its last handle goes). A
    /// sink that cannot start is said in the log, and nothing is logged.
    pub fn reuse_or_start(
        config: &DecisionLogConfig,
        old: Option<&Arc<DecisionLog>>,
    ) -> Option<Arc<DecisionLog>> {
        match old {
            Some(old) if old.config == *config => Some(old.clone()),
            _ => DecisionLog::start(config.clone()).unwrap_or_else(|e| {
                tracing::error!("decision log: cannot start its writer: {e}; nothing is logged");
                None
            }),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &DecisionLogConfig {
        &self.config
    }

    /// Offers one line to the sink without waiting: a full queue drops it
    /// (counted).
    pub fn submit(&self, line: Value) {
        if self.queue.try_send(Msg::Line(line)).is_err() {
            self.drops
                .add(1, "the queue is full: the sink is slow or down");
        }
    }

    /// Lines this log dropped.
    pub fn dropped(&self) -> u64 {
        self.drops.count.load(Ordering::Relaxed)
    }

    /// [`flush`](DecisionLog::flush), waiting at most `bound` (a process
    /// about to exit: `serve` at shutdown, `check`); `false` if it gave up.
    pub async fn flush_within(&self, bound: Duration) -> bool {
        tokio::time::timeout(bound, self.flush()).await.is_ok()
    }

    /// Waits until every line queued before this call has been written
    /// (or, for the HTTP sink, delivered or given up on). For shutdown and
    /// tests; decisions never wait on it.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.send(Msg::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

/// A sink's writer: the receiving end of its queue.
struct Writer {
    config: DecisionLogConfig,
    rx: mpsc::Receiver<Msg>,
    drops: Arc<Drops>,
}

impl Writer {
    /// Runs on the writer's own thread until every handle is dropped.
    fn run(self) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("decision log: cannot start its writer: {e}; nothing is logged");
                return;
            }
        };
        runtime.block_on(async move {
            // The one place sinks are registered: each is a file of its own.
            match self.config.sink.clone() {
                Sink::Off => {}
                Sink::Stdout => self.lines(stdout::Stdout).await,
                Sink::File(path) => {
                    let max_bytes = self.config.max_file_kib.saturating_mul(1024);
                    let keep = self.config.keep_files;
                    self.lines(file::Rotating::new(path, max_bytes, keep)).await;
                }
                Sink::Http(url) => http::run(url, self).await,
            }
        });
    }

    /// The stdout and file sinks: what is queued written out and flushed,
    /// then a rest of [`WRITE_EVERY`].
    async fn lines(mut self, mut out: impl LineSink) {
        while let Some(msg) = self.rx.recv().await {
            let mut next = Some(msg);
            while let Some(msg) = next.take() {
                match msg {
                    Msg::Line(line) => {
                        let mut text = line.to_string();
                        text.push('\n');
                        if let Err(e) = out.write(text.as_bytes()) {
                            self.drops.add(1, &format!("cannot write: {e}"));
                        }
                    }
                    Msg::Flush(done) => {
                        flush(&mut out);
                        let _ = done.send(());
                    }
                }
                next = self.rx.try_recv().ok();
            }
            flush(&mut out);
            tokio::time::sleep(WRITE_EVERY).await;
        }
        flush(&mut out);
    }
}

/// Flushes `out`; a failure is logged.
fn flush(out: &mut impl LineSink) {
    if let Err(e) = out.flush() {
        tracing::warn!("decision log: cannot flush: {e}");
    }
}

/// A sink written line by line (the stdout and file sinks), its lines
/// written out by [`Writer::lines`].
trait LineSink {
    /// Writes one line (its newline included).
    fn write(&mut self, line: &[u8]) -> std::io::Result<()>;

    /// Writes out what is buffered.
    fn flush(&mut self) -> std::io::Result<()>;
}

/// Now as RFC 3339 UTC with microseconds (`2026-12-04T15:20:01.123456Z`).
pub fn now_rfc3339() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        since.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_is_rfc3339_utc() {
        let t = super::now_rfc3339();
        assert_eq!(t.len(), "2026-12-04T15:20:01.123456Z".len(), "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T",
            "{t}"
        );
    }
}
