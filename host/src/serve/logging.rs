//! The log every face writes: `tracing` to standard error, filtered by
//! `$TOOLGATE_LOG` (an `EnvFilter` string; default `warn`), as text or as
//! one JSON object a line ([`LogFormat`]).
//!
//! One event is one line, whatever its fields hold: a path, a tenant's
//! file name, a guard's `log` text or stderr may hold a newline, and a
//! newline would let whoever wrote it start a line of their own, forged
//! timestamp and level included. So every line is written through
//! [`OneLine`], which escapes each line break and control character
//! inside it (`\n`, `\r`, `\u000b`, `\u2028`, …) — one place, so no
//! call site can forget it. (tracing-subscriber itself escapes only the
//! terminal's escape sequences.) In the JSON format every field is a JSON
//! string as well.
//!
//! At `debug`, each decision is a span `decide` (seam, tenant) and each
//! guard call inside it a span `guard` (plugin, digest, seam, account; on
//! close: fault, fuel, micros), printed when it closes. The runtime's and
//! the compiler's own logs (wasmtime, cranelift, regalloc2) stay at `warn`
//! unless `$TOOLGATE_LOG` names them.

use std::io::{IsTerminal as _, Write};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

/// How the log's lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `TIME  LEVEL target: message field=value…` (the default).
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields`
    /// (the message and every field, each a JSON value), `span`, `spans`.
    Json,
}

/// Targets kept at `warn` unless `$TOOLGATE_LOG` names them: at `debug`
/// they would print every function they compile.
const QUIET: [&str; 5] = [
    "cranelift_codegen",
    "cranelift_frontend",
    "regalloc2",
    "wasmtime",
    "wasmtime_internal_cranelift",
];

/// The filter `$TOOLGATE_LOG` describes (`warn` when unset or invalid),
/// with the compiler's targets kept quiet.
pub fn filter() -> EnvFilter {
    filter_with(&[])
}

/// What a server logs beside warnings when `$TOOLGATE_LOG` is unset: a
/// line as each global guard's load starts and ends
/// (`crate::load::progress`).
const SERVING: [&str; 1] = ["toolgate::load::progress=info"];

/// [`filter`], with `defaults` added when `$TOOLGATE_LOG` is unset.
fn filter_with(defaults: &[&str]) -> EnvFilter {
    let user = std::env::var("TOOLGATE_LOG").unwrap_or_default();
    let mut directives: Vec<String> = QUIET
        .iter()
        .filter(|t| !user.contains(*t))
        .map(|t| format!("{t}=warn"))
        .collect();
    if user.trim().is_empty() {
        directives.push("warn".into());
        directives.extend(defaults.iter().map(|d| d.to_string()));
    } else {
        directives.push(user);
    }
    EnvFilter::try_new(directives.join(","))
        .or_else(|_| EnvFilter::try_new("warn"))
        .unwrap_or_default()
}

/// Installs the log on standard error, unless the process already has a
/// subscriber (then this does nothing). Colours (ANSI escape codes) only
/// when standard error is a terminal: a log file or pipe gets plain text.
///
/// A line that cannot be written (standard error closed: the process that
/// read it went away) is dropped. tracing-subscriber's default would report
/// the failure with `eprintln!` — on the same closed stream, which panics
/// and would take the server down at its next log line.
pub fn init() {
    init_as(LogFormat::Text);
}

/// [`init`], the lines written in `format`.
pub fn init_as(format: LogFormat) {
    install(format, filter());
}

/// [`init_as`] for a server: unless `$TOOLGATE_LOG` says otherwise, the
/// global guards' loads are logged too (a line as each starts and ends),
/// so a server that listens before its guards are in says what it is
/// doing.
pub fn init_serving(format: LogFormat) {
    install(format, filter_with(&SERVING));
}

fn install(format: LogFormat, filter: EnvFilter) {
    let ansi = format == LogFormat::Text && std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(OneLine::new(std::io::stderr, ansi))
        .with_ansi(ansi)
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// A log writer that keeps each event on one line: every line break and
/// control character inside an event's text is escaped (see this
/// module's comment); only the newline that ends it is written as is.
/// Tab stays (it breaks no line), and so does ESC when the log is
/// coloured (`ansi`: the formatter's own colours; tracing-subscriber
/// escapes any a field holds).
#[derive(Clone, Copy, Debug)]
pub struct OneLine<M> {
    inner: M,
    ansi: bool,
}

impl<M> OneLine<M> {
    /// Writes through `inner`; `ansi`: the formatter writes colours.
    pub fn new(inner: M, ansi: bool) -> Self {
        OneLine { inner, ansi }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = OneLine<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLine::new(self.inner.make_writer(), self.ansi)
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        OneLine::new(self.inner.make_writer_for(meta), self.ansi)
    }
}

impl<W: Write> Write for OneLine<W> {
    /// Takes `buf` whole (the formatter hands over one event at a time):
    /// escaped, then written out.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match one_line(buf, self.ansi) {
            None => self.inner.write_all(buf)?,
            Some(escaped) => self.inner.write_all(&escaped)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// `event` (UTF-8 text, ending in its newline) with every line break and
/// control character before that newline escaped, JSON style (valid
/// inside a JSON string too); `None` when there is none (the common
/// case: nothing copied). Escaped: C0 controls but tab (and ESC when
/// `ansi`), DEL, the C1 controls (NEL, U+0085, among them), U+2028 and
/// U+2029.
pub fn one_line(event: &[u8], ansi: bool) -> Option<Vec<u8>> {
    let body = event.strip_suffix(b"\n").unwrap_or(event);
    let breaks = |i: usize| -> usize {
        let b = body[i];
        match b {
            b'\t' => 0,
            0x1b if ansi => 0,
            0..=0x1f | 0x7f => 1,
            // C1: U+0080..U+009F is C2 80..C2 9F.
            0xc2 if body.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)) => 2,
            // U+2028, U+2029: E2 80 A8, E2 80 A9.
            0xe2 if body.get(i + 1) == Some(&0x80)
                && matches!(body.get(i + 2), Some(0xa8 | 0xa9)) =>
            {
                3
            }
            _ => 0,
        }
    };
    let first = (0..body.len()).find(|&i| breaks(i) > 0)?;
    let mut out = Vec::with_capacity(event.len() + 16);
    out.extend_from_slice(&body[..first]);
    let mut i = first;
    while i < body.len() {
        let n = breaks(i);
        if n == 0 {
            out.push(body[i]);
            i += 1;
            continue;
        }
        let c = std::str::from_utf8(&body[i..i + n])
            .ok()
            .and_then(|s| s.chars().next())
            .map_or(0xfffd, u32::from);
        match c {
            0x0a => out.extend_from_slice(b"\\n"),
            0x0d => out.extend_from_slice(b"\\r"),
            c => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
        }
        i += n;
    }
    out.extend_from_slice(&event[body.len()..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(event: &str, ansi: bool) -> String {
        one_line(event.as_bytes(), ansi).map_or_else(
            || event.to_string(),
            |b| String::from_utf8(b).unwrap_or_default(),
        )
    }

    #[test]
    fn an_event_stays_one_line_whatever_it_quotes() {
        let forged = "2026-12-05T08:20:00.000000Z  WARN x: evil\n2026-12-05T08:20:00.000000Z  INFO \
                      toolgate::load::registry: forged\r\n\u{b}\u{1c}\u{85}\u{2028}\u{2029}\u{7f}\u{1b}[1m end\n";
        let out = escaped(forged, false);
        assert_eq!(
            out,
            "2026-12-05T08:20:00.000000Z  WARN x: evil\\n2026-12-05T08:20:00.000000Z  INFO \
             toolgate::load::registry: forged\\r\\n\\u000b\\u001c\\u0085\\u2028\\u2029\\u007f\\u001b[1m end\n"
        );
        assert_eq!(out.lines().count(), 1);
        // Coloured: the formatter's ESC stays; tab always does.
        assert_eq!(
            escaped("\u{1b}[2mx\u{1b}[0m\ta\nb\n", true),
            "\u{1b}[2mx\u{1b}[0m\ta\\nb\n"
        );
        // Nothing to escape: nothing copied.
        assert!(one_line("plain é text\twith tab\n".as_bytes(), false).is_none());
    }

    #[test]
    fn a_json_event_stays_valid_json() {
        let event = format!(
            "{}\n",
            serde_json::json!({"fields": {"message": "a\u{2028}b\u{85}c"}})
        );
        let out = escaped(&event, false);
        assert_eq!(out.lines().count(), 1);
        let back: serde_json::Value = serde_json::from_str(out.trim_end()).expect("JSON");
        assert_eq!(back["fields"]["message"], "a\u{2028}b\u{85}c");
    }
}
