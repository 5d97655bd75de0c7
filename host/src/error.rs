//! The library's error type: every variant names the file (or key) at fault.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::fault::Fault;

/// `manifest:line (component)`, or the component alone.
fn config_where(path: &Path, at: Option<&(PathBuf, usize)>) -> String {
    match at {
        Some((manifest, line)) => format!("{}:{line} ({})", manifest.display(), path.display()),
        None => path.display().to_string(),
    }
}

/// Why something could not be loaded or built. Faults of a guard *call* are
/// not errors: they are [`Fault`]s recorded in the trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wasmtime engine could not be configured.
    #[error("engine: {0}")]
    Engine(String),
    /// The state store (Redis) could not be reached or refused the
    /// operator's request; guards' own calls fault instead.
    #[error("state store: {0}")]
    State(String),
    /// A plugin directory could not be watched for changes.
    #[error("cannot watch {path}: {source}")]
    Watch {
        /// The directory.
        path: PathBuf,
        /// The watcher's error.
        source: notify::Error,
    },
    /// A signal handler could not be installed.
    #[error("cannot listen for {signal}: {source}")]
    Signal {
        /// The signal, e.g. `SIGHUP`.
        signal: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A thread of the host's own could not be started.
    #[error("cannot start the {what}: {source}")]
    Thread {
        /// The thread, e.g. `epoch ticker`.
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A task the host ran on its blocking threads panicked or was
    /// cancelled.
    #[error("{what} task failed: {source}")]
    Task {
        /// The task, e.g. `compile` or `load`.
        what: &'static str,
        /// The join error.
        source: tokio::task::JoinError,
    },
    /// The compiler child process could not be run, or was lost.
    #[error("{message}")]
    Compiler {
        /// The component being compiled.
        path: PathBuf,
        /// What went wrong.
        message: String,
        /// The I/O error, when there is one.
        source: Option<std::io::Error>,
    },
    /// A manifest (`toolgate.toml`) that cannot be read or is rejected:
    /// its file, line and key.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is a core wasm module, not a component.
    #[error(
        "{path}: is a core WebAssembly module, not a component; build it as a component \
         (e.g. for the wasm32-wasip2 target) against toolgate:guard@0.3.0 (or 0.2.0, 0.1.0)"
    )]
    CoreModule {
        /// The file.
        path: PathBuf,
    },
    /// The file is not WebAssembly at all (or is cut short).
    #[error("{path}: is not a WebAssembly component (bad magic number or truncated file)")]
    NotWasm {
        /// The file.
        path: PathBuf,
    },
    /// The component failed to validate or compile.
    #[error("{path}: does not compile: {message}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// What the compiler said.
        message: String,
    },
    /// The component imports something the host does not provide.
    #[error("{path}: imports something the host does not provide: {message}")]
    Link {
        /// The file.
        path: PathBuf,
        /// What the linker said.
        message: String,
    },
    /// The component exports none of the seams.
    #[error(
        "{path}: exports none of the toolgate:guard seams (routing, rewrite, steering, \
         result; at 0.3.0, 0.2.0 or 0.1.0); it exports: {exports}"
    )]
    NoSeams {
        /// The file.
        path: PathBuf,
        /// What it does export, comma-separated.
        exports: String,
    },
    /// An export has the right name but the wrong shape.
    #[error("{path}: its `{export}` export does not match the toolgate:guard contract: {message}")]
    Contract {
        /// The file.
        path: PathBuf,
        /// The export (the WIT interface) whose function is wrong: a
        /// seam's name (`routing`, ..., `response`) or `observe`.
        export: &'static str,
        /// What did not match.
        message: String,
    },
    /// The guard's `validate-config` refused its manifest `config` (or
    /// faulted checking it).
    #[error("{}: plugin `{plugin}` refuses its config: {message}", config_where(.path, .at.as_ref()))]
    ConfigRefused {
        /// The file.
        path: PathBuf,
        /// Where the config was written: the manifest and its line.
        at: Option<(PathBuf, usize)>,
        /// The plugin's name.
        plugin: String,
        /// The guard's own message.
        message: String,
    },
    /// Instantiating the component for the load-time probe failed.
    #[error("{path}: fails to start ({fault}): {message}")]
    Start {
        /// The file.
        path: PathBuf,
        /// The classified cause.
        fault: Fault,
        /// The underlying error.
        message: String,
    },
    /// A plugin's limits are outside what the engine allows.
    #[error("{path}: {message}")]
    Limits {
        /// The file (or manifest) that set the limit.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A plugin file that is missing, not a regular file, or not inside its
    /// own directory (a symlink in a tenant's directory, a FIFO, a device,
    /// a directory). One message for all: it never tells whether some host
    /// path exists.
    #[error("{path}: not loaded: {}", refused_rule(*.tenant))]
    Refused {
        /// The file, as the directory names it.
        path: PathBuf,
        /// Whether it is in a tenant's directory (no symlink followed)
        /// rather than the global one: what the message says the rule is.
        tenant: bool,
    },
    /// A file in a tenant's directory (manifest or component) that has other
    /// hard links: its inode may be another file's, outside the directory.
    #[error(
        "{path}: not loaded: it has {links} hard links; a file in a tenant's directory must have \
         exactly one (copy it in, do not link it)"
    )]
    HardLink {
        /// The file, as the directory names it.
        path: PathBuf,
        /// How many names its inode has.
        links: u64,
    },
    /// A component whose file name does not make a valid plugin name (a
    /// directory without a manifest names each plugin by its file's stem).
    #[error("{path}: not loaded: {message}")]
    Name {
        /// The file.
        path: PathBuf,
        /// What is wrong with the name and what it may be.
        message: String,
    },
    /// A plugin file larger than its cap.
    #[error("{path}: not loaded: larger than the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap, in bytes.
        limit: u64,
    },
    /// A plugin's remote source (`url`, `oci`) could not be fetched: the
    /// host unreachable after its tries, an HTTP error, a download over the
    /// size cap, an artifact that is not a wasm one.
    #[error("{location}: not fetched: {message}")]
    Fetch {
        /// The source: the URL, or `oci://` and the reference.
        location: String,
        /// What went wrong.
        message: String,
    },
    /// Bytes fetched from a remote source whose SHA-256 is not the digest
    /// that pins them: refused before anything compiles them.
    #[error(
        "{location}: refused: the bytes fetched have SHA-256 {found}, not the pinned {expected} \
         (nothing of them was compiled)"
    )]
    Digest {
        /// The source: the URL, or `oci://` and the reference.
        location: String,
        /// The digest pinned (by the manifest, or by the OCI manifest for
        /// its layer), hex.
        expected: String,
        /// The digest of what was fetched, hex.
        found: String,
    },
    /// A component without the signature the operator requires, or with
    /// one that no trusted key made (`[ceilings] trusted_keys`,
    /// `require_signatures`): refused before anything compiles it.
    #[error("{location}: refused: {message} (nothing of it was compiled)")]
    Signature {
        /// The component: its file, or its source.
        location: String,
        /// What is wrong with its signature.
        message: String,
    },
    /// A component could not be pushed to an OCI registry.
    #[error("pushing to {reference}: {message}")]
    Push {
        /// The reference pushed to.
        reference: String,
        /// What went wrong.
        message: String,
    },
    /// A version of a policy set (`serve --set`) that is not served: not
    /// fetched, not signed as required, not a policy set, or not loaded
    /// whole. The version serving, if any, keeps serving.
    #[error("policy set {set}: {digest}: refused: {message}")]
    Set {
        /// The set's source, `oci://registry/repo:tag`.
        set: String,
        /// The version's manifest digest (`sha256:<hex>`), or `-` when the
        /// tag could not be resolved.
        digest: String,
        /// Why.
        message: String,
    },
    /// A compile that went past the operator's time or memory bound.
    #[error("{path}: compile refused: {message}")]
    CompileBound {
        /// The component.
        path: PathBuf,
        /// Which bound, and its value.
        message: String,
    },
    /// A guard could not be pre-initialised into a snapshot.
    #[error("{path}: cannot snapshot: {message}")]
    Snapshot {
        /// The component.
        path: PathBuf,
        /// What went wrong (a warm-up call's fault names its seam).
        message: String,
    },
    /// The compiled cache's directory (or an entry) may be written by
    /// someone other than toolgate's user: it is not used.
    #[error("compiled cache {path}: {message}")]
    UnsafeCache {
        /// The directory or entry.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl Error {
    /// Whether the error may pass on its own (an I/O or engine error, a
    /// task or compiler process lost): what failed is tried again at the
    /// next reload even if nothing changed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Engine(_)
                | Error::Read { .. }
                | Error::Task { .. }
                | Error::Thread { .. }
                | Error::Compiler { .. }
                | Error::Fetch { .. }
        )
    }
}

/// A manifest that was rejected: the file, the 1-based line, the key at
/// fault (when one can be named) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    /// The manifest file.
    pub path: PathBuf,
    /// The 1-based line of the offending key or value.
    pub line: usize,
    /// The key at fault, e.g. `plugin[2].memory_mib` or `fuel`.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.path.display(), self.line)?;
        if let Some(key) = &self.key {
            write!(f, "key `{key}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ManifestError {}

impl ManifestError {
    /// A manifest that could not be read (not a regular file inside its
    /// directory, too large, an I/O error): line 1, no key.
    pub fn unreadable(path: &Path, error: &Error) -> Self {
        let shown = error.to_string();
        let prefix = format!("{}: ", path.display());
        ManifestError {
            path: path.to_path_buf(),
            line: 1,
            key: None,
            message: shown.strip_prefix(&prefix).unwrap_or(&shown).to_string(),
        }
    }
}

/// What [`Error::Refused`] says the rule is, in a tenant's directory or
/// the global one.
fn refused_rule(tenant: bool) -> &'static str {
    if tenant {
        "missing or not a regular file inside its directory (symlinks are not followed in a \
         tenant's directory; FIFOs, devices and directories are refused)"
    } else {
        "missing or not a regular file (FIFOs, devices and directories are refused)"
    }
}
