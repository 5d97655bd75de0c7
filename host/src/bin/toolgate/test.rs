//! `toolgate test`: a guard's unit tests. Each case of each case file
//! (`*.test.toml`, see [`crate::cases`]) runs through the chain of its
//! file's plugins as every face decides ([`toolgate::DecideRequest::decide`]:
//! a fresh instance per call, the real limits), and its expectations are
//! checked against the decision.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::args::{CacheArgs, LoadArgs, StateArg, engine_with_state};
use crate::cases::{self, CaseFile, CaseHttp, Chains, Check};
use crate::{bad, junit};

/// `toolgate test`'s options.
#[derive(clap::Args)]
pub(crate) struct TestArgs {
    /// Case files (`*.test.toml`), or directories searched for them. Default: here.
    paths: Vec<PathBuf>,
    /// Run only the cases whose name contains this.
    #[arg(long)]
    case: Option<String>,
    /// Also write the results as JUnit XML to this file.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Keep running: build each guard directory among the paths (as `toolgate build`) and run
    /// the cases again on every change of a source, manifest or case file; Ctrl-C ends it.
    #[arg(long)]
    watch: bool,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    state: StateArg,
}

/// One case's result.
pub(crate) struct Ran {
    /// The case's name.
    pub(crate) name: String,
    /// How long it took.
    pub(crate) time: Duration,
    /// Why it failed (`None`: it passed).
    pub(crate) failure: Option<String>,
}

/// The results of one case file.
pub(crate) struct FileResults {
    /// The file, as named.
    pub(crate) path: PathBuf,
    /// Its cases' results, in order.
    pub(crate) cases: Vec<Ran>,
}

/// Runs `toolgate test`: every case file is read, and its entries loaded,
/// before any case runs (every bad file: a line naming file, line and key,
/// then exit 2 with no case run); a `--case` filter that matches no
/// case anywhere is exit 2 too. Then each failing case gets one line, and
/// the last line is `N passed, N failed` (exit 1 when N failed is not 0).
pub(crate) async fn run(args: TestArgs) -> Result<()> {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    if args.watch {
        return crate::test_watch::run(&args, &paths).await;
    }
    let (_, failed) = run_once(&args, &paths).await?;
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// One run of the case files under `paths` (see [`run`]): prints a line
/// per failing case and the summary, writes the JUnit file, and returns
/// how many cases passed and failed.
pub(crate) async fn run_once(args: &TestArgs, paths: &[PathBuf]) -> Result<(usize, usize)> {
    let filter = args.case.as_deref();
    let mut bad_files = Vec::new();
    let mut files = Vec::new();
    for path in cases::find(paths)? {
        match CaseFile::read(&path) {
            Ok(file) => files.push(file),
            Err(e) => bad_files.push(e),
        }
    }
    let mut loaded = Vec::new();
    for file in &files {
        // An engine per file: each file's guards start from an empty state.
        let engine = engine_with_state(&args.state)?;
        // Its guards' requests get its cases' answers, never the network.
        let http = Arc::new(CaseHttp::default());
        let mut chains =
            Chains::new(file, engine, &args.cache, &args.load).answering(Arc::clone(&http));
        // The entries as written must load: else the file is bad.
        match chains.set(None).await {
            Ok(_) => loaded.push((file, chains, http)),
            Err(e) => bad_files.push(e),
        }
    }
    // Every bad file on a line of its own (the last one as the error).
    if let Some(last) = bad_files.pop() {
        for e in &bad_files {
            eprintln!("toolgate: error: {e:#}");
        }
        return Err(bad(format!("{last:#}")));
    }
    if let Some(f) = filter
        && !files
            .iter()
            .any(|file| file.selected(Some(f)).next().is_some())
    {
        return Err(bad(format!(
            "--case {f:?} matches no case in {} case file(s)",
            files.len()
        )));
    }
    let mut results = Vec::new();
    for (file, mut chains, http) in loaded {
        let mut ran = Vec::new();
        for case in file.selected(filter) {
            let started = Instant::now();
            let failure = run_case(&mut chains, &http, case).await;
            if let Some(why) = &failure {
                println!(
                    "FAIL {}:{} {:?}: {why}",
                    file.path.display(),
                    case.line,
                    case.name
                );
            }
            ran.push(Ran {
                name: case.name.clone(),
                time: started.elapsed(),
                failure,
            });
        }
        results.push(FileResults {
            path: file.path.clone(),
            cases: ran,
        });
    }
    let all = results.iter().flat_map(|f| &f.cases);
    let failed = all.clone().filter(|r| r.failure.is_some()).count();
    let passed = all.count() - failed;
    if let Some(out) = &args.junit {
        std::fs::write(out, junit::xml(&results))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    if !args.watch {
        println!("{passed} passed, {failed} failed");
    }
    Ok((passed, failed))
}

/// Runs one case, its guards' requests answered by `http` from the case's
/// `[[case.http]]`; `Some(why)` when it fails: what its expectations and
/// its answers say differs, in one line.
async fn run_case(chains: &mut Chains<'_>, http: &CaseHttp, case: &cases::Case) -> Option<String> {
    let loaded = chains.set(case.config.as_ref()).await;
    http.begin(&case.http);
    let mut wrong = decide_case(loaded, case).await;
    wrong.extend(http.finish());
    (!wrong.is_empty()).then(|| wrong.join("; "))
}

/// Runs one case's events and request on `loaded` and checks its
/// expectations: what differs.
async fn decide_case(loaded: Result<Arc<toolgate::PluginSet>>, case: &cases::Case) -> Vec<String> {
    let (request, expect, set) = match (&case.check, loaded) {
        (
            Check::Decide {
                events,
                request,
                expect,
            },
            Ok(set),
        ) => {
            for event in events {
                if let Err(e) = set.observe(request.tenant.as_deref(), event) {
                    return vec![format!("events: not observed: {e}")];
                }
            }
            (request, expect, set)
        }
        (Check::Decide { .. }, Err(e)) => return vec![format!("{e:#}")],
        (Check::ConfigRefused(want), Ok(_)) => {
            return vec![format!(
                "config_refused: expected a refusal containing {want:?}, the config loaded"
            )];
        }
        (Check::ConfigRefused(want), Err(e)) => {
            let got = format!("{e:#}");
            return (!got.contains(want.as_str()))
                .then(|| {
                    format!("config_refused: expected a refusal containing {want:?}, got {got:?}")
                })
                .into_iter()
                .collect();
        }
    };
    let decision = match request.decide(&set).await {
        Ok(decision) => decision,
        Err(refused) => return vec![format!("not decided: {refused}")],
    };
    let seam = request.event.seam();
    expect
        .check(seam, &cases::actual(&decision))
        .iter()
        .map(ToString::to_string)
        .collect()
}
