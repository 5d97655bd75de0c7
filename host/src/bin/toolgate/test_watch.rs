//! `toolgate test --watch`: the author's loop. Runs the cases, then again
//! after every change under the paths given (a guard's sources, its
//! manifest — `Cargo.toml`, `go.mod`, `package.json` — or a case file),
//! once the change has settled ([`toolgate::watch::DEFAULT_SETTLE`]). Each
//! path that is a guard's directory, or a guard's source file (whose case
//! files are watched with it), is built first, as `toolgate build`
//! builds it (an unchanged JS, TS, Go or Python guard is skipped by its
//! build stamp), into the component its case file names. A build error or
//! a bad case file is printed and the loop waits for the next change;
//! Ctrl-C ends it with exit 0.

use std::path::{Component, Path, PathBuf};

use anyhow::Result;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::cases::{self, CaseFile};
use crate::test::{TestArgs, run_once};
use crate::{bad, build_guard};

/// Directory names whose files are never a guard's inputs: dependencies,
/// build outputs and caches (a build writing there starts no run).
const SKIP: [&str; 5] = ["node_modules", "target", "build", "__pycache__", "dist"];

/// Runs the cases on every change under `paths`, until Ctrl-C.
pub(crate) async fn run(args: &TestArgs, paths: &[PathBuf]) -> Result<()> {
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    // A guard's source file brings its case files (`cases::find`).
    let case_files = paths
        .iter()
        .filter(|p| build_guard::is_guard_source(p))
        .flat_map(|p| cases::find(std::slice::from_ref(p)).unwrap_or_default());
    let roots: Vec<PathBuf> = paths
        .iter()
        .cloned()
        .chain(case_files)
        .map(|p| std::path::absolute(&p))
        .collect::<std::io::Result<_>>()?;
    let (tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let watched = roots.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Lost events: run again, to be sure.
        let changed = event.map_or(true, |e| {
            matters(&e.kind) && e.paths.iter().any(|p| is_input(&watched, p))
        });
        if changed {
            let _ = tx.send(());
        }
    })
    .map_err(|e| bad(format!("cannot watch: {e}")))?;
    for root in &roots {
        // A file is watched through its directory: an editor that saves by
        // renaming replaces the file a watch on it would hold.
        let (at, mode) = match root.is_dir() {
            true => (root.as_path(), RecursiveMode::Recursive),
            false => (root.parent().unwrap_or(root), RecursiveMode::NonRecursive),
        };
        watcher
            .watch(at, mode)
            .map_err(|e| bad(format!("cannot watch {}: {e}", root.display())))?;
    }
    println!("watching {} (Ctrl-C ends)", shown(paths));
    loop {
        tokio::select! {
            () = round(args, paths) => {}
            _ = interrupt.recv() => std::process::exit(0),
        }
        tokio::select! {
            got = changes.recv() => if got.is_none() { return Ok(()) },
            _ = interrupt.recv() => return Ok(()),
        }
        // Settle: wait until no change came for the settle delay.
        while let Ok(Some(())) =
            tokio::time::timeout(toolgate::watch::DEFAULT_SETTLE, changes.recv()).await
        {}
    }
}

/// One run: build each guard directory among `paths`, then run the cases;
/// every outcome ends in one line.
async fn round(args: &TestArgs, paths: &[PathBuf]) {
    let started = std::time::Instant::now();
    let built = {
        let paths = paths.to_vec();
        tokio::task::spawn_blocking(move || build_all(&paths)).await
    };
    let outcome = match built {
        Ok(Ok(())) => run_once(args, paths)
            .await
            .map(|(passed, failed)| format!("{passed} passed, {failed} failed")),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(bad(format!("the build stopped: {e}"))),
    };
    let took = started.elapsed().as_secs_f64();
    match outcome {
        Ok(summary) => println!("{summary} ({took:.1} s); waiting for a change"),
        Err(e) => println!("error: {e:#} ({took:.1} s); waiting for a change"),
    }
}

/// Builds every guard directory or source file among `paths` into the
/// component its case file names (the one called as `toolgate build`
/// calls it), else where `toolgate build` writes it.
fn build_all(paths: &[PathBuf]) -> Result<()> {
    let guards = paths
        .iter()
        .filter(|p| build_guard::is_guard_dir(p) || build_guard::is_guard_source(p));
    for dir in guards {
        let name = build_guard::default_output(dir);
        let named = cases::find(std::slice::from_ref(dir))
            .unwrap_or_default()
            .iter()
            .filter_map(|f| CaseFile::read(f).ok())
            .flat_map(|f| f.components())
            .find(|c| c.file_name() == name.file_name());
        build_guard::build(dir, named, None)?;
    }
    Ok(())
}

/// Whether an event of this kind can change a file (opening or reading
/// one cannot).
fn matters(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether a change to `path` is to a guard's input: under one of `roots`,
/// not hidden or partial ([`toolgate::watch::relevant`]), not a component,
/// not in a dependency or build directory.
fn is_input(roots: &[PathBuf], path: &Path) -> bool {
    let Some(root) = roots.iter().find(|r| path.starts_with(r)) else {
        return false;
    };
    let rel = path.strip_prefix(root).unwrap_or(path);
    let skipped = rel.components().any(|c| match c {
        Component::Normal(s) => SKIP.contains(&s.to_string_lossy().as_ref()),
        _ => false,
    });
    toolgate::watch::relevant(root, path)
        && !skipped
        && path.extension().is_none_or(|e| e != "wasm")
}

fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
