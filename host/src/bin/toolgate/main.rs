//! The `toolgate` command: check one event, replay a trace, list plugins,
//! serve the seams over HTTP, build a guard, see and clear guards' state,
//! push a guard to an OCI registry, start a guard project and run guards'
//! unit tests.
//! Each subcommand lives in its own module; this one parses the command
//! line and dispatches.

mod args;
mod bench;
mod build_guard;
mod build_stamp;
mod cases;
mod check;
mod compare;
mod junit;
mod list;
mod new;
mod push;
mod replay;
mod sdk;
mod serve;
mod snapshot;
mod state;
mod test;
mod test_watch;
mod wizer;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "toolgate",
    version,
    about = "Sandboxed WebAssembly guards for AI-agent tool calls"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one event through a plugin directory's chain and print the result as JSON.
    Check(check::CheckArgs),
    /// Replay a JSON-lines trace of `{seam, event, state?, tenant?}` and summarise.
    Replay(replay::ReplayArgs),
    /// List the plugins in a directory, the seams each subscribes to and its limits.
    List(list::ListArgs),
    /// Measure what a directory's guards cost: per guard, fresh-instance calls against a
    /// kept instance; per seam, the whole chain's decisions/s at a concurrency.
    Bench(bench::BenchArgs),
    /// Serve the four seams over HTTP (see the server module's docs for the endpoints).
    Serve(Box<serve::ServeArgs>),
    /// Build a guard in Rust, Go, JS/TS or Python (told apart by its files) into a component.
    Build {
        /// The guard: its directory (with Cargo.toml, go.mod or *.go, guard.ts/js,
        /// index.ts/js, guard.py or main.py) or its source file.
        src: PathBuf,
        /// The component to write. Default: the guard's name plus .wasm, here.
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The guest-sdk directory holding <lang>/build. Default: $TOOLGATE_SDK, else the
        /// first guest-sdk directory above the guard or above this executable, else the
        /// SDK this binary carries (extracted into the user's cache).
        #[arg(long)]
        sdk: Option<PathBuf>,
        /// Then pre-initialise the component (see `toolgate snapshot`).
        #[arg(long)]
        snapshot: bool,
    },
    /// Compile a component read from standard input and write its native code to
    /// standard output, under memory and CPU limits (run by toolgate itself: the
    /// bounded compile of `docs/loading.md`).
    #[command(hide = true)]
    Compile(toolgate::compile::ChildArgs),
    /// Pre-initialise a guard: call each of its seams once and save the warmed-up
    /// instance as a new component, so every fresh instance skips the runtime's start-up.
    Snapshot(snapshot::SnapshotArgs),
    /// Show or clear guards' state: in a Redis store (`--state redis://...`) or a running
    /// `toolgate serve`'s (`--server http://...`).
    State(state::StateArgs),
    /// Write a new guard project (source with stubbed hooks, build configuration,
    /// README, a case file) that `toolgate build .` builds and `toolgate test` passes.
    New(new::NewArgs),
    /// Run guards' unit tests: the cases of `*.test.toml` files, each through the real
    /// chain; prints each failing case with what differs and `N passed, N failed`.
    Test(test::TestArgs),
    /// Push a component to an OCI registry as a wasm artifact (or, with --set, a plugin
    /// directory as a policy set for `serve --set`) and print its reference pinned by
    /// digest (`registry/repo:tag@sha256:...`).
    Push(push::PushArgs),
    /// Sign component files with a private key: writes `<file>.sig` beside each
    /// (what `[ceilings] trusted_keys` checks; as `cosign sign-blob` does).
    Sign(push::SignArgs),
    /// Make an ECDSA P-256 key pair for `push --sign` and `sign`: NAME.key, NAME.pub.
    Keygen(push::KeygenArgs),
    /// Pre-initialise a JS guard's engine deterministically: wizer's command line, run
    /// by the JS build (componentize-js) as `toolgate-wizer` (see the wizer module).
    #[command(hide = true)]
    Wizer(wizer::WizerArgs),
}

/// Bad input from the user: reported on one line, exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

fn bad(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(command_line());
    match &cli.command {
        Command::Serve(args) => toolgate::logging::init_serving(args.log_format.into()),
        _ => toolgate::logging::init_as(toolgate::logging::LogFormat::Text),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<BadInput>() || e.is::<toolgate::Error>() => {
            eprintln!("toolgate: error: {e:#}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("toolgate: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The command line; invoked by the name [`wizer::LINK_NAME`] (a link the JS
/// build makes), it is `toolgate wizer` with the same arguments.
fn command_line() -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = std::env::args_os().collect();
    let name = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name().map(|n| n.to_owned()));
    if name.as_deref() == Some(std::ffi::OsStr::new(wizer::LINK_NAME)) {
        args.insert(1, "wizer".into());
    }
    args
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Check(args) => check::run(args).await,
        Command::Replay(args) => replay::run(args).await,
        Command::List(args) => list::run(args).await,
        // The compile child: its exit code says how it went.
        Command::Compile(args) => std::process::exit(toolgate::compile::child_main(&args)),
        Command::Serve(args) => serve::run(*args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Build {
            src,
            out,
            sdk,
            snapshot,
        } => {
            let out = build_guard::build(&src, out, sdk)?;
            if snapshot {
                snapshot::snapshot_file(&out, None, None, &serde_json::json!({})).await?;
            }
            Ok(())
        }
        Command::Snapshot(args) => snapshot::run(args).await,
        Command::State(args) => state::run(args).await,
        Command::Push(args) => push::run(args).await,
        Command::Sign(args) => push::sign(args),
        Command::Keygen(args) => push::keygen(args),
        Command::Test(args) => test::run(args).await,
        Command::New(args) => new::run(args),
        Command::Wizer(args) => wizer::run(args).await,
    }
}
