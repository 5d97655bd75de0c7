//! The stdout sink (`sink = "stdout"`): lines on the process's standard
//! output.

use std::io::{self, Write as _};

use super::LineSink;

/// The process's standard output.
pub(super) struct Stdout;

impl LineSink for Stdout {
    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        io::stdout().lock().write_all(line)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().lock().flush()
    }
}
