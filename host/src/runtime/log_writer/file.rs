//! The file sink (`sink = "file"`): lines appended to one file, rotated by size — the file
//! becomes `FILE.1`, `FILE.1` becomes `FILE.2` ..., and the one past
//! `keep` is deleted — so the log never holds more than about
//! `(keep + 1) × max_bytes`.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::LineSink;

/// A size-rotated file, opened on the first write (and again after a
/// failure).
pub(super) struct Rotating {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    open: Option<(BufWriter<File>, u64)>,
}

impl Rotating {
    pub(super) fn new(path: PathBuf, max_bytes: u64, keep: u32) -> Self {
        Rotating {
            path,
            max_bytes,
            keep,
            open: None,
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        if let Some((mut out, _)) = self.open.take() {
            out.flush()?;
        }
        let numbered = |n: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            return remove(&self.path);
        }
        remove(&numbered(self.keep))?;
        for n in (1..self.keep).rev() {
            rename(&numbered(n), &numbered(n + 1))?;
        }
        rename(&self.path, &numbered(1))
    }
}

impl LineSink for Rotating {
    /// Appends `line`, rotating first when it would take the file past
    /// its size (a file always takes at least one line).
    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        if let Some((_, size)) = &self.open
            && *size > 0
            && size + line.len() as u64 > self.max_bytes
        {
            self.rotate()?;
        }
        let (out, size) = match &mut self.open {
            Some(open) => open,
            None => {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .map_err(|e| with_path(e, &self.path))?;
                let size = file.metadata()?.len();
                self.open.insert((BufWriter::new(file), size))
            }
        };
        out.write_all(line)?;
        *size += line.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.open {
            Some((out, _)) => out.flush(),
            None => Ok(()),
        }
    }
}

fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(with_path(e, path)),
        _ => Ok(()),
    }
}

fn rename(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(with_path(e, from)),
        _ => Ok(()),
    }
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}
