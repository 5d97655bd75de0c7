//! Bounded compiles: a component is compiled within a time and a memory
//! bound, or refused.
//!
//! Compiling is the one thing a tenant's file makes the host do that no
//! guard limit covers: a 12 MB component of straight-line code took 105 s
//! and 7.5 GB to compile. Two ways to compile, chosen by the embedder:
//!
//! - [`Compiler::Subprocess`] (what `toolgate serve`, `check`, `replay` and
//!   `list` use, and the Python package's `toolgate.Host` by default): the
//!   bytes go to a child process over a pipe, `toolgate compile` or any
//!   program that runs [`child_main`] (the Python package runs its own
//!   interpreter, `python -P .../toolgate/_compile.py compile ...`). The
//!   child limits itself (`RLIMIT_DATA` to the memory bound, `RLIMIT_CPU` as
//!   a backstop, no core dumps), compiles with the host's engine settings
//!   and writes the native code back; the parent kills it at the time bound
//!   and loads the code it returned, and it dies with the parent (Linux:
//!   `PR_SET_PDEATHSIG`). A compile bomb costs at most the bounds, and the
//!   parent's memory never sees it.
//! - [`Compiler::InProcess`] (the library default, as a library has no
//!   child program of its own to run): the compile runs on a blocking
//!   thread; the registry stops waiting at the time bound and reports the
//!   plugin refused, but the thread runs on until the compiler finishes,
//!   holding its compile slot, and memory is not bounded.
//!
//! Either way the compile reuses, and adds to, the compiled cache's
//! per-function store when the cache is on ([`crate::load::functions`]):
//! the child is told its directory (`--function-cache DIR`) and reports
//! its hits and misses on standard error. And a refused compile is remembered (see [`crate::load::registry`]),
//! and recorded in the compiled cache ([`crate::load::cache::CompileFailure`]):
//! the same bytes with the same settings are not compiled again, not even
//! after a restart. Which compile runs when is [`crate::load::compile_queue`]'s.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use crate::call::plugin::{check_header, compile};
use crate::error::Error;
use crate::load::cache::CompiledCache;
use crate::load::functions::{FunctionStats, FunctionStore};
use crate::runtime::engine::{Engine, EngineConfig};

/// How components are compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Compiler {
    /// On a blocking thread of this process: time-bounded from the
    /// caller's side only, memory not bounded. The default.
    #[default]
    InProcess,
    /// In a child process, `program args... compile --flag=value...`,
    /// under the memory and time bounds. The child must run [`child_main`]
    /// with those flags: `toolgate compile` does (`program` the `toolgate`
    /// executable, `args` empty), and so does the Python package's
    /// `toolgate/_compile.py` run by its interpreter. The child inherits
    /// this process's environment and working directory.
    Subprocess {
        /// The executable to run: `toolgate`, or a Python interpreter.
        program: PathBuf,
        /// Arguments placed before `compile` and its flags (none for
        /// `toolgate`; the interpreter's options and the script for Python).
        args: Vec<OsString>,
    },
}

/// The bounds of one compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileBounds {
    /// Longest a compile may take (wall clock). Default: 120 s (a 10 MB
    /// JavaScript engine took 35 s of CPU, 77 s on a busy 2-core machine).
    pub timeout: Duration,
    /// Most memory a compile may use, in bytes: the child's `RLIMIT_DATA`
    /// (heap and private writable mappings, which tracks its resident size
    /// closely; address space reserved but not used is not counted)
    /// ([`Compiler::Subprocess`] only). Default: 2 GiB.
    pub memory_bytes: u64,
}

impl Default for CompileBounds {
    fn default() -> Self {
        CompileBounds {
            timeout: Duration::from_secs(120),
            memory_bytes: 2 << 30,
        }
    }
}

impl Compiler {
    /// Compiles `bytes` (read from `path`) for `engine` within `bounds`.
    /// Blocking. [`Compiler::InProcess`] does not bound time here: the
    /// caller stops waiting.
    pub fn compile(
        &self,
        engine: &Engine,
        path: &Path,
        bytes: &[u8],
        bounds: &CompileBounds,
    ) -> Result<Component, Error> {
        self.compile_measured(engine, path, bytes, bounds, &CompiledCache::disabled())
            .0
    }

    /// Like [`Compiler::compile`], with the CPU time the compile used:
    /// the child process's user and system time
    /// ([`Compiler::Subprocess`]), or the wall-clock time
    /// ([`Compiler::InProcess`], whose compiler threads are not told apart
    /// from this process's). What a tenant's compiles are charged (see
    /// `crate::load::compile_queue`). Functions come from, and go to,
    /// `cache`'s per-function store when it has one
    /// ([`CompiledCache::function_dir`]), counted in its
    /// [`CompiledCache::function_stats`].
    pub fn compile_measured(
        &self,
        engine: &Engine,
        path: &Path,
        bytes: &[u8],
        bounds: &CompileBounds,
        cache: &CompiledCache,
    ) -> (Result<Component, Error>, Duration) {
        let start = Instant::now();
        let mut cpu = None;
        let functions = cache.function_dir();
        let code = match (self, &functions) {
            (Compiler::InProcess, None) => {
                return (compile(engine, path, bytes), start.elapsed());
            }
            (Compiler::InProcess, Some(dir)) => check_header(path, bytes).and_then(|()| {
                precompile(engine.config(), bytes, Some(dir)).map_err(|message| Error::Compile {
                    path: path.into(),
                    message,
                })
            }),
            (Compiler::Subprocess { program, args }, dir) => {
                check_header(path, bytes).and_then(|()| {
                    run_child(
                        program,
                        args,
                        child_args(engine.config(), bounds, dir.as_deref()),
                        path,
                        bytes,
                        bounds,
                        &mut cpu,
                    )
                })
            }
        };
        let compiled = code.and_then(|(code, stats)| {
            cache.count_functions(stats);
            tracing::debug!(
                path = %path.display(),
                functions_reused = stats.hits,
                functions_compiled = stats.misses,
                "compiled"
            );
            // SAFETY: `code` is what `wasmtime::Engine::precompile_component`
            // returned, in this process or in our own compile child
            // ([`child_main`], read whole from its stdout pipe; nothing else
            // can write to that pipe). Functions in it may come from the
            // per-function store, whose entries are checked like the compiled
            // cache's (see `crate::load::functions`). wasmtime still checks
            // the header and the engine compatibility.
            unsafe { Component::deserialize(engine.wasmtime(), &code) }.map_err(|e| {
                Error::Compile {
                    path: path.into(),
                    message: format!("cannot load the compiled code: {e:#}"),
                }
            })
        });
        (compiled, cpu.unwrap_or_else(|| start.elapsed()))
    }
}

/// Exit code of the compile child ([`child_main`], `toolgate compile`) for
/// a component that does not compile (its message on stderr).
pub const EXIT_DOES_NOT_COMPILE: i32 = 2;

/// The flags of the compile child (after `compile`), for `config`,
/// `bounds` and the per-function store in `functions`: what [`ChildArgs`]
/// parses.
fn child_args(
    config: &EngineConfig,
    bounds: &CompileBounds,
    functions: Option<&Path>,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "compile".into(),
        format!("--max-memory-bytes={}", config.max_memory_bytes),
        format!("--max-wasm-stack={}", config.max_wasm_stack),
        format!("--data-bytes={}", bounds.memory_bytes),
        // A backstop: the wall-clock bound is the parent's (the child
        // also dies with the parent), and parallel compilation uses more
        // than one core.
        format!(
            "--cpu-secs={}",
            bounds.timeout.as_secs().saturating_mul(4).max(4)
        ),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    if let Some(dir) = functions {
        args.push("--function-cache".into());
        args.push(dir.into());
    }
    args
}

/// Runs the compile child on `bytes` with `flags` ([`child_args`]): its
/// native code and its use of the per-function store, or why not. `cpu` gets the CPU time
/// the child used (user and system), once it is reaped.
fn run_child(
    program: &Path,
    leading: &[OsString],
    flags: Vec<OsString>,
    path: &Path,
    bytes: &[u8],
    bounds: &CompileBounds,
    cpu: &mut Option<Duration>,
) -> Result<(Vec<u8>, FunctionStats), Error> {
    let mut command = Command::new(program);
    command
        .args(leading)
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut command);
    let mut child = command.spawn().map_err(|e| Error::Compiler {
        path: path.into(),
        message: format!(
            "cannot run the compiler {} for {}: {e}",
            program.display(),
            path.display()
        ),
        source: Some(e),
    })?;
    let Some(pipes) = Pipes::start(&mut child, bytes, bounds.memory_bytes) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Error::Compiler {
            path: path.into(),
            message: format!("the compiler's pipes for {} are missing", path.display()),
            source: None,
        });
    };
    let (ended, timed_out) = wait_within(&mut child, bounds.timeout);
    let (out, err) = pipes.finish();
    let status = ended.map(|(status, used)| {
        *cpu = Some(used);
        status
    });
    if timed_out {
        return Err(Error::CompileBound {
            path: path.into(),
            message: format!(
                "took longer than the compile time limit of {} ms",
                bounds.timeout.as_millis()
            ),
        });
    }
    let Some(status) = status else {
        return Err(Error::Compiler {
            path: path.into(),
            message: format!("lost the compiler process for {}", path.display()),
            source: None,
        });
    };
    let err = err.trim();
    judge_child(program, path, bounds, status, out, err)
        .map(|code| (code, FunctionStats::parse(err)))
}

/// The threads that feed a compile child its component and read what it
/// writes, each bounded.
struct Pipes {
    writer: std::thread::JoinHandle<()>,
    reader: std::thread::JoinHandle<Vec<u8>>,
    errs: std::thread::JoinHandle<Vec<u8>>,
}

impl Pipes {
    /// Starts feeding `bytes` to the child and reading at most `out_cap`
    /// (+1, to tell "over") bytes of its output and 64 KiB of its errors;
    /// `None` if the child has no pipes.
    fn start(child: &mut std::process::Child, bytes: &[u8], out_cap: u64) -> Option<Pipes> {
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return None;
        };
        let input = bytes.to_vec();
        Some(Pipes {
            // A child that dies early closes its stdin: the write error is
            // moot, its exit status says why.
            writer: std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            }),
            reader: std::thread::spawn(move || {
                let mut out = Vec::new();
                // Past the cap the pipe is dropped: the child gets EPIPE and dies.
                let _ = stdout.take(out_cap.saturating_add(1)).read_to_end(&mut out);
                out
            }),
            errs: std::thread::spawn(move || {
                let mut err = Vec::new();
                let _ = stderr.take(64 << 10).read_to_end(&mut err);
                err
            }),
        })
    }

    /// What the child wrote to its output and to its errors.
    fn finish(self) -> (Vec<u8>, String) {
        let _ = self.writer.join();
        let out = self.reader.join().unwrap_or_default();
        let err = String::from_utf8_lossy(&self.errs.join().unwrap_or_default()).into_owned();
        (out, err)
    }
}

/// Waits for the child to end, killing it at `timeout`: its exit status
/// and the CPU time it used (when it could be reaped), and whether it was
/// killed at the bound. Reaped here (not by `child.wait`) for the CPU time
/// it used; until then its pid is its own, so `child.kill` is safe.
fn wait_within(
    child: &mut std::process::Child,
    timeout: Duration,
) -> (Option<(std::process::ExitStatus, Duration)>, bool) {
    let start = Instant::now();
    let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
    loop {
        match reap(pid, false) {
            Ok(Some(ended)) => return (Some(ended), false),
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                return (reap(pid, true).ok().flatten(), true);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => {
                let _ = child.kill();
                return (reap(pid, true).ok().flatten(), false);
            }
        }
    }
}

/// What a compile child's end means: its compiled code, a component that
/// does not compile, a compile past one of its bounds, or a compiler that
/// could not do its job (not the component's doing).
fn judge_child(
    program: &Path,
    path: &Path,
    bounds: &CompileBounds,
    status: std::process::ExitStatus,
    out: Vec<u8>,
    err: &str,
) -> Result<Vec<u8>, Error> {
    let out_cap = bounds.memory_bytes;
    let bound = |message: String| Error::CompileBound {
        path: path.into(),
        message,
    };
    if status.success() {
        if out.len() as u64 > out_cap {
            return Err(bound(format!(
                "its compiled code is larger than the compile memory limit of {} MiB",
                bounds.memory_bytes >> 20
            )));
        }
        return Ok(out);
    }
    if status.code() == Some(EXIT_DOES_NOT_COMPILE) {
        let message = err.strip_prefix("toolgate: error: ").unwrap_or(err);
        if message.contains("out of memory") || message.contains("Cannot allocate memory") {
            return Err(bound(memory_message(bounds)));
        }
        return Err(Error::Compile {
            path: path.into(),
            message: message.to_string(),
        });
    }
    let out_of_memory = err.contains("memory allocation of")
        || err.contains("out of memory")
        || err.contains("MemoryError");
    if status.code() == Some(EXIT_CHILD_FAILED) && !out_of_memory && out.len() as u64 <= out_cap {
        // The child could not do its job (it did not start, say a Python
        // interpreter that cannot import toolgate): not the component's
        // doing, so tried again at the next reload.
        return Err(Error::Compiler {
            path: path.into(),
            message: format!(
                "the compiler {} failed for {} ({status}): {}",
                program.display(),
                path.display(),
                tail(err, 600)
            ),
            source: None,
        });
    }
    use std::os::unix::process::ExitStatusExt;
    if status.signal() == Some(rustix::process::Signal::XCPU.as_raw()) {
        return Err(bound(format!(
            "used more than its CPU-time backstop ({} s)",
            bounds.timeout.as_secs().saturating_mul(4).max(4)
        )));
    }
    if out_of_memory {
        return Err(bound(memory_message(bounds)));
    }
    Err(bound(format!(
        "the compiler process failed ({status}), most likely past the compile memory limit of \
         {} MiB{}",
        bounds.memory_bytes >> 20,
        if err.is_empty() {
            String::new()
        } else {
            format!(": {}", tail(err, 300))
        }
    )))
}

/// Makes the child `command` starts die with this process (Linux:
/// `PR_SET_PDEATHSIG`, set in the child before it runs the program): a
/// server killed outright leaves no compile running. The signal comes
/// when the *thread* that spawned the child ends; [`run_child`]'s thread
/// waits for the child, so it outlives it.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    use rustix::process::{Signal, getpid, getppid, set_parent_process_death_signal};
    use std::os::unix::process::CommandExt;
    let parent = getpid();
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed: it makes two system calls
    // and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent died before the signal was asked for: none will
            // come, so do not start.
            if getppid() != Some(parent) {
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_: &mut Command) {}

/// Reaps child `pid` if it has ended (`block`: waits for it to end): its
/// exit status and the CPU time it used (user and system).
fn reap(pid: i32, block: bool) -> std::io::Result<Option<(ExitStatus, Duration)>> {
    use std::os::unix::process::ExitStatusExt;
    let mut status = 0;
    // SAFETY: `rusage` is plain integers, for which zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: `pid` is our own child, not yet reaped; both pointers
        // are to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if r == pid {
            let time = |t: libc::timeval| {
                Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
            };
            let used = time(usage.ru_utime) + time(usage.ru_stime);
            return Ok(Some((ExitStatus::from_raw(status), used)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn memory_message(bounds: &CompileBounds) -> String {
    format!(
        "needed more than the compile memory limit of {} MiB",
        bounds.memory_bytes >> 20
    )
}

fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// What the compile child does, after [`limit_this_process`]: compiles the
/// component `bytes` for an engine with `config`'s code-relevant settings
/// and returns its native code, as [`Component::serialize`] would, and
/// its use of the per-function store in `functions` (none if `None`, or
/// if that directory is not private to this user).
pub fn precompile(
    config: &EngineConfig,
    bytes: &[u8],
    functions: Option<&Path>,
) -> Result<(Vec<u8>, FunctionStats), String> {
    // Pooling changes nothing in the code, and a compile needs no pool.
    let config = EngineConfig {
        pooling: false,
        ..config.clone()
    };
    let mut wasmtime_config = crate::runtime::engine::wasmtime_config(&config);
    let engine = wasmtime::Engine::new(&wasmtime_config).map_err(|e| format!("engine: {e:#}"))?;
    // The store's key needs the engine's compatibility hash, which the
    // store itself does not change: one engine to ask, one to compile.
    let Some(store) = functions.and_then(|dir| FunctionStore::open(dir, &engine)) else {
        let code = engine
            .precompile_component(bytes)
            .map_err(|e| format!("{e:#}"))?;
        return Ok((code, FunctionStats::default()));
    };
    wasmtime_config
        .enable_incremental_compilation(store.clone())
        .map_err(|e| format!("engine: {e:#}"))?;
    let engine = wasmtime::Engine::new(&wasmtime_config).map_err(|e| format!("engine: {e:#}"))?;
    let code = engine
        .precompile_component(bytes)
        .map_err(|e| format!("{e:#}"));
    store.trim();
    Ok((code?, store.stats()))
}

/// Limits this process to `data_bytes` of data (`RLIMIT_DATA`: heap and
/// private writable mappings) and `cpu_secs` of CPU time, and turns off
/// core dumps: what the compile child ([`child_main`]) does first.
pub fn limit_this_process(data_bytes: u64, cpu_secs: u64) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let limit = |n: u64| Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    setrlimit(Resource::Core, limit(0))?;
    setrlimit(Resource::Cpu, limit(cpu_secs))?;
    setrlimit(Resource::Data, limit(data_bytes))?;
    Ok(())
}

/// The code-relevant engine settings the compile child was given.
pub fn child_engine_config(max_memory_bytes: usize, max_wasm_stack: usize) -> EngineConfig {
    EngineConfig {
        max_memory_bytes,
        max_wasm_stack,
        pooling: false,
        ..EngineConfig::default()
    }
}

/// The flags of the compile child, `compile --max-memory-bytes=N
/// --max-wasm-stack=N --data-bytes=N --cpu-secs=N`: the engine's
/// code-relevant settings and the limits the process puts on itself. The
/// parent writes them ([`Compiler::Subprocess`]); `toolgate compile` and the
/// Python package's `toolgate._compile` parse them with this one parser.
#[derive(Clone, Debug, PartialEq, Eq, clap::Parser)]
#[command(name = "compile")]
pub struct ChildArgs {
    /// The engine's largest linear memory, bytes.
    #[arg(long)]
    pub max_memory_bytes: usize,
    /// The engine's maximum wasm stack, bytes.
    #[arg(long)]
    pub max_wasm_stack: usize,
    /// RLIMIT_DATA of this process, bytes.
    #[arg(long)]
    pub data_bytes: u64,
    /// RLIMIT_CPU of this process, seconds.
    #[arg(long)]
    pub cpu_secs: u64,
    /// The compiled cache's per-function store to reuse and add to.
    #[arg(long)]
    pub function_cache: Option<PathBuf>,
}

/// Exit code of the compile child when it cannot do its job at all (bad
/// flags, no limits, a closed pipe); its message on stderr.
pub const EXIT_CHILD_FAILED: i32 = 1;

/// The compile child's whole run, shared by `toolgate compile` and the
/// Python package's `toolgate._compile`: limits this process
/// (`limit_this_process`), reads a component on standard input, compiles
/// it for `args`' engine settings (`precompile`) and writes the native
/// code on standard output. Returns the process exit code: 0,
/// `EXIT_DOES_NOT_COMPILE` for a component that does not compile, or
/// `EXIT_CHILD_FAILED`; a failure's message is on standard error,
/// `toolgate: error: <message>`.
///
/// Call it only in a process of its own: the limits stay on the process.
pub fn child_main(args: &ChildArgs) -> i32 {
    let fail = |code: i32, message: &str| {
        let _ = writeln!(std::io::stderr(), "toolgate: error: {message}");
        code
    };
    if let Err(e) = limit_this_process(args.data_bytes, args.cpu_secs) {
        return fail(
            EXIT_CHILD_FAILED,
            &format!("cannot set the compile limits: {e}"),
        );
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut bytes) {
        return fail(
            EXIT_CHILD_FAILED,
            &format!("cannot read the component: {e}"),
        );
    }
    let config = child_engine_config(args.max_memory_bytes, args.max_wasm_stack);
    match precompile(&config, &bytes, args.function_cache.as_deref()) {
        Ok((code, stats)) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&code).and_then(|()| out.flush()) {
                Ok(()) => {
                    let _ = writeln!(std::io::stderr(), "{}", stats.line());
                    0
                }
                Err(e) => fail(
                    EXIT_CHILD_FAILED,
                    &format!("cannot write the compiled code: {e}"),
                ),
            }
        }
        Err(message) => fail(EXIT_DOES_NOT_COMPILE, &message),
    }
}

/// [`child_main`] for the command line `argv` (`compile --flag=value...`;
/// the first item is the command's name): flags that do not parse print
/// clap's message and return `EXIT_CHILD_FAILED`.
pub fn child_main_from<I, T>(argv: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    use clap::Parser as _;
    match ChildArgs::try_parse_from(argv) {
        Ok(args) => child_main(&args),
        Err(e) => {
            // clap's message begins with `error: `.
            let _ = write!(std::io::stderr(), "toolgate: {e}");
            EXIT_CHILD_FAILED
        }
    }
}
