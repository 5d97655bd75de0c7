//! What the global directory's loads are doing, guard by guard: which
//! plugin is being compiled or snapshotted, and for how long. A server
//! that listens before its global guards are in answers "not ready" with
//! this (`GET /readyz`), and logs a line when each guard's load starts
//! and one when it ends (target `toolgate::load::progress`, level
//! `info`; `toolgate serve` shows them by default).
//!
//! Tenants' loads are not tracked: their names are not the public's, and
//! a thousand tenants would log two thousand lines at start-up (their
//! progress is `GET /readyz`'s `pending`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// What a guard's load is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadStep {
    /// Fetching its remote source (`url`, `oci`; from the blobs kept, or
    /// the network).
    Fetching,
    /// Compiling its component (or reading it from the compiled cache),
    /// then starting it once (the load probe).
    Compiling,
    /// Snapshotting it at load: instrumenting, compiling, running its
    /// warm-up and compiling the snapshot (or reading the snapshot from
    /// the compiled cache).
    Snapshotting,
}

impl LoadStep {
    fn shown(self) -> &'static str {
        match self {
            LoadStep::Fetching => "fetching",
            LoadStep::Compiling => "compiling",
            LoadStep::Snapshotting => "snapshotting",
        }
    }
}

/// One global guard being loaded now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PluginLoading {
    /// The plugin's name.
    pub plugin: String,
    /// What its load is doing.
    pub step: LoadStep,
    /// How long its load has taken so far, in milliseconds.
    pub for_ms: u64,
}

/// The global guards being loaded, by name.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    loading: Mutex<BTreeMap<String, (LoadStep, Instant)>>,
}

impl Progress {
    /// Marks `plugin`'s load begun at `step`, and logs it (a fetch is
    /// logged once it goes on to a compile: most find their blob kept);
    /// the load is over when the [`Tracked`] is dropped (or
    /// [`Tracked::done`]).
    pub(crate) fn begin(&self, plugin: &str, step: LoadStep) -> Tracked<'_> {
        if step != LoadStep::Fetching {
            tracing::info!(
                plugin,
                step = step.shown(),
                "loading plugin `{plugin}`: {}",
                step.shown()
            );
        }
        let start = Instant::now();
        self.entries().insert(plugin.to_string(), (step, start));
        Tracked {
            progress: self,
            plugin: plugin.to_string(),
            start,
        }
    }

    /// The guards being loaded now, in name order.
    pub(crate) fn now(&self) -> Vec<PluginLoading> {
        self.entries()
            .iter()
            .map(|(plugin, (step, start))| PluginLoading {
                plugin: plugin.clone(),
                step: *step,
                for_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
            .collect()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (LoadStep, Instant)>> {
        self.loading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One guard's load, tracked until dropped.
pub(crate) struct Tracked<'a> {
    progress: &'a Progress,
    plugin: String,
    start: Instant,
}

impl Tracked<'_> {
    /// The load goes on at `step` (a snapshot that failed: the plain
    /// component is compiled instead).
    pub(crate) fn step(&self, step: LoadStep) {
        if let Some(entry) = self.progress.entries().get_mut(&self.plugin) {
            entry.0 = step;
        }
        tracing::info!(
            plugin = %self.plugin,
            step = step.shown(),
            "loading plugin `{}`: {}",
            self.plugin,
            step.shown()
        );
    }

    /// Logs the load's end: `outcome` (`compiled`, `snapshotted`, `from
    /// the compiled cache`, or why it failed), and the seconds it took.
    pub(crate) fn done(self, outcome: &str) {
        let took = self.start.elapsed();
        tracing::info!(
            plugin = %self.plugin,
            seconds = seconds(took),
            "loaded plugin `{}` in {:.1} s: {outcome}",
            self.plugin,
            took.as_secs_f64()
        );
    }
}

fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.progress.entries().remove(&self.plugin);
    }
}
