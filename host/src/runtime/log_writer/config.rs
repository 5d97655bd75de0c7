//! `[decision_log]`: where decisions are written, what of the input goes
//! with them, and the bounds of the queue and the sinks. Every key and its
//! default is in `docs/decision-log.md` ("The decision log").

use std::path::PathBuf;

use serde::Serialize;

/// Where the lines go.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sink {
    /// Nothing is logged (the default): a decision pays nothing.
    #[default]
    Off,
    /// One line per decision on the process's standard output.
    Stdout,
    /// A file, rotated by size (`max_file_kib`), `keep_files` kept.
    File(PathBuf),
    /// An HTTP(S) endpoint: batches of lines POSTed gzipped, retried.
    Http(String),
}

impl Sink {
    /// Every sink, as (its `sink` word, the key naming where it writes):
    /// the one list of sinks the manifest's `[decision_log]` reads.
    pub const KINDS: [(&'static str, Option<&'static str>); 4] = [
        ("off", None),
        ("stdout", None),
        ("file", Some("path")),
        ("http", Some("url")),
    ];
}

/// What of the input a line carries besides the decision (privacy by
/// default: none of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Include {
    /// The call's `args` (steering, rewrite) and a rewrite's new args.
    pub args: bool,
    /// The tool's result (result seam).
    pub content: bool,
    /// The hook's `state`.
    pub state: bool,
}

impl Include {
    /// The names `include` accepts.
    pub const NAMES: [&'static str; 3] = ["args", "content", "state"];

    /// Sets the part named `name`; `false` when there is no such part.
    pub fn set(&mut self, name: &str) -> bool {
        match name {
            "args" => self.args = true,
            "content" => self.content = true,
            "state" => self.state = true,
            _ => return false,
        }
        true
    }
}

/// The `[decision_log]` keys that are numbers, each declared once: its
/// field of [`DecisionLogConfig`] (doc, type — also the type it is written
/// as —, default) and its range. [`DecisionLogConfig`], its `Default` and
/// its range checks are generated from this table here; the manifest's
/// `[decision_log]` table, its spans and the Python `Host`'s settings in
/// `load/manifest/log_table.rs`. `decision_log_keys!(then)` calls the
/// macro `then` with `keys { $( { $(#[doc])* field: Type = default, lo, hi; } )* }`.
#[doc(hidden)]
#[macro_export]
macro_rules! decision_log_keys {
    ($then:ident) => {
        $then! { keys {
            {
                /// Strings longer than this many bytes are cut (and say so). Default
                /// 1024.
                max_string_bytes: usize = 1024, 16, 1 << 20;
            }
            {
                /// Lines waiting for the sink; when full, new lines are dropped and
                /// counted. Default 10,000.
                queue_lines: usize = 10_000, 1, 1_000_000;
            }
            {
                /// File sink: the file is rotated past this size, KiB. Default 65,536
                /// (64 MiB).
                max_file_kib: u64 = 64 << 10, 1, 1 << 30;
            }
            {
                /// File sink: rotated files kept (`FILE.1` newest .. `FILE.N`).
                /// Default 5.
                keep_files: u32 = 5, 0, 1_000;
            }
            {
                /// HTTP sink: the most lines in one POST. Default 500.
                batch_lines: usize = 500, 1, 100_000;
            }
            {
                /// HTTP sink: a batch is sent after this long even if not full, ms.
                /// Default 1,000.
                flush_ms: u64 = 1_000, 1, 600_000;
            }
            {
                /// HTTP sink: tries after the first failed one before a batch is
                /// dropped (and counted), with backoff doubling from 100 ms. Default 3.
                retries: u32 = 3, 0, 100;
            }
            {
                /// HTTP sink: one POST's deadline, ms. Default 5,000.
                timeout_ms: u64 = 5_000, 1, 600_000;
            }
        } }
    };
}

/// Generates [`DecisionLogConfig`], its `Default` and its range checks
/// from [`decision_log_keys!`](crate::decision_log_keys).
macro_rules! decision_log_config {
    (keys { $( {
        $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, $lo:expr, $hi:expr;
    } )* }) => {
        /// The decision log's settings: `[decision_log]` of the global manifest
        /// over the `serve` flags (or the Python `Host`'s `decision_log`
        /// argument), key by key.
        #[derive(Clone, Debug, PartialEq, Eq, Serialize)]
        pub struct DecisionLogConfig {
            /// Where lines go. Default: [`Sink::Off`].
            pub sink: Sink,
            /// What of the input is written. Default: nothing.
            pub include: Include,
            /// Paths masked wherever they would be written (`args.password`,
            /// `state.user.email`, `content.token`): the value is replaced by
            /// `"[masked]"`, and its text is cut out of every other string of the
            /// line (a fault's detail, a skip's message). Default: none.
            pub mask: Vec<String>,
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl Default for DecisionLogConfig {
            fn default() -> Self {
                DecisionLogConfig {
                    sink: Sink::Off,
                    include: Include::default(),
                    mask: Vec::new(),
                    $( $field: $default, )*
                }
            }
        }

        impl DecisionLogConfig {
            /// The first number out of its range, as (key, why).
            fn out_of_range(&self) -> Option<(String, String)> {
                $( {
                    let (v, lo, hi): ($ty, $ty, $ty) = (self.$field, $lo, $hi);
                    if !(lo..=hi).contains(&v) {
                        return Some((
                            stringify!($field).to_string(),
                            format!("{v} is out of range {lo}..={hi}"),
                        ));
                    }
                } )*
                None
            }
        }
    };
}

crate::decision_log_keys!(decision_log_config);

/// The roots a mask path may start with.
const MASK_ROOTS: [&str; 3] = ["args", "content", "state"];

impl DecisionLogConfig {
    /// Checks the settings as a whole; the error names the key (as the
    /// manifest spells it, without `decision_log.`) and why.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, why: String| Err((key.to_string(), why));
        match &self.sink {
            Sink::File(path) if path.as_os_str().is_empty() => {
                return bad("path", "the file sink needs a file path".into());
            }
            Sink::Http(url) => match url::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                Ok(_) => return bad("url", format!("`{url}` is not an http(s) URL with a host")),
                Err(e) => return bad("url", format!("`{url}` is not a URL: {e}")),
            },
            _ => {}
        }
        for path in &self.mask {
            let mut parts = path.split('.');
            let root = parts.next().unwrap_or_default();
            if !MASK_ROOTS.contains(&root) || path.split('.').any(str::is_empty) {
                return bad(
                    "mask",
                    format!(
                        "`{path}` is not a path under args, content or state \
                         (e.g. \"args.password\", \"state.user.email\")"
                    ),
                );
            }
        }
        self.out_of_range().map_or(Ok(()), Err)
    }

    /// The sink a `serve --decision-log` value names: `off`, `stdout`, an
    /// `http://` or `https://` URL, else a file path.
    pub fn sink_from_flag(value: &str) -> Sink {
        match value {
            "off" | "" => Sink::Off,
            "stdout" | "-" => Sink::Stdout,
            v if v.starts_with("http://") || v.starts_with("https://") => Sink::Http(v.into()),
            v => Sink::File(PathBuf::from(v)),
        }
    }
}
