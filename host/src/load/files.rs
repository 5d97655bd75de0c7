//! Reading plugin files safely: only regular files, only inside their own
//! directory, never more than a size cap, never blocking.
//!
//! The rules (see `docs/reload.md`, "Files"):
//!
//! - A manifest or component is read only if it is a **regular file**. A
//!   FIFO, a socket, a device (`/dev/zero`) or a directory named `x.wasm`
//!   is refused at once: files are opened with `O_NONBLOCK` (opening a FIFO
//!   never waits for a writer) and the type is checked on the *opened*
//!   descriptor, not on the path, so a file swapped between the check and
//!   the read is still caught.
//! - In a **tenant's** directory no symlink is followed: not the tenant
//!   directory itself, not a subdirectory on a manifest `path`, not the
//!   manifest, not a component. Every step is opened with `O_NOFOLLOW`
//!   relative to the descriptor of the step before, so nothing can point
//!   a tenant's file outside its directory, even by a rename in between.
//! - A **tenant's** file must have exactly one name: one with other hard
//!   links (`st_nlink > 1`, read on the opened descriptor) is refused
//!   ([`Error::HardLink`]), since another name may be outside the
//!   directory — another tenant's component, linked in. Refusing is
//!   simpler than copying: nothing is ever read through a shared inode.
//! - In the **global** directory (the operator's) symlinks are followed,
//!   so a directory mounted as a symlink farm (a Kubernetes ConfigMap)
//!   works, except under `tenants/`, where the tenant rule applies. The
//!   target must still be a regular file under the cap.
//! - Every refusal of a file that is missing, not regular, or a symlink is
//!   one message ([`Error::Refused`]): it never says whether some host path
//!   exists, so a tenant cannot probe the host's files through it.
//!
//! Everything here blocks: call it from a blocking thread.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use crate::error::Error;

/// `path` made absolute against the current directory: what a path the
/// operator gave (`--plugins plugins`, `--cache-dir`, the Python `Host`'s)
/// is turned into once, where it enters, so a relative path behaves as an
/// absolute one (the watcher's events name absolute paths). Symlinks are
/// not resolved (a directory reached through one is watched and read
/// through it, as given); a path that cannot be made absolute (the current
/// directory is gone) is kept as given.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether symlinks are followed when opening files below a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symlinks {
    /// Follow them (the operator's global directory).
    Follow,
    /// Refuse them, at every step (a tenant's directory).
    Refuse,
}

/// An open plugin directory: files are opened relative to it.
#[derive(Debug)]
pub struct PluginDir {
    fd: OwnedFd,
    path: PathBuf,
    symlinks: Symlinks,
}

/// What [`PluginDir::open`] found at a directory's path.
#[derive(Debug)]
pub enum Opened {
    /// An open directory.
    Dir(PluginDir),
    /// Nothing there (it was removed).
    Missing,
    /// Something that is not a directory, or (under [`Symlinks::Refuse`]) a
    /// symlink: refused with the uniform message.
    Refused(Error),
}

fn dir_flags(symlinks: Symlinks) -> OFlags {
    let base = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    match symlinks {
        Symlinks::Follow => base,
        Symlinks::Refuse => base | OFlags::NOFOLLOW,
    }
}

fn file_flags(symlinks: Symlinks) -> OFlags {
    let base = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    match symlinks {
        Symlinks::Follow => base,
        Symlinks::Refuse => base | OFlags::NOFOLLOW,
    }
}

impl PluginDir {
    /// Opens the directory at `path`. Under [`Symlinks::Refuse`] the last
    /// component of `path` must not be a symlink (the components above it
    /// are the operator's).
    pub fn open(path: &Path, symlinks: Symlinks) -> Opened {
        match rustix::fs::open(path, dir_flags(symlinks), Mode::empty()) {
            Ok(fd) => Opened::Dir(PluginDir {
                fd,
                path: path.to_path_buf(),
                symlinks,
            }),
            Err(rustix::io::Errno::NOENT) => Opened::Missing,
            Err(_) => Opened::Refused(Error::Refused {
                path: path.into(),
                tenant: symlinks == Symlinks::Refuse,
            }),
        }
    }

    /// The symlink rule for `rel`: a global directory's files are followed,
    /// except those under `tenants/`.
    fn symlinks_for(&self, rel: &Path) -> Symlinks {
        match (self.symlinks, rel.components().next()) {
            (Symlinks::Follow, Some(Component::Normal(first))) if first == "tenants" => {
                Symlinks::Refuse
            }
            (s, _) => s,
        }
    }

    /// Opens the regular file at `rel` (relative, no `..`). `Ok(None)`:
    /// nothing at `rel` (only its last step missing: a manifest that is not
    /// there). Anything else that is not a regular file inside the
    /// directory is [`Error::Refused`]; a tenant's file with other hard
    /// links [`Error::HardLink`].
    fn open_file(&self, rel: &Path) -> Result<Option<std::fs::File>, Error> {
        let symlinks = self.symlinks_for(rel);
        let refused = || Error::Refused {
            path: self.path.join(rel),
            tenant: symlinks == Symlinks::Refuse,
        };
        let mut steps: Vec<&OsStr> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(s) => steps.push(s),
                Component::CurDir => {}
                _ => return Err(refused()),
            }
        }
        let Some((last, parents)) = steps.split_last() else {
            return Err(refused());
        };
        let mut owned: Option<OwnedFd> = None;
        for step in parents {
            let at = owned.as_ref().unwrap_or(&self.fd);
            let next = rustix::fs::openat(at, step.as_bytes(), dir_flags(symlinks), Mode::empty())
                .map_err(|_| refused())?;
            owned = Some(next);
        }
        let at = owned.as_ref().unwrap_or(&self.fd);
        let fd = match rustix::fs::openat(at, last.as_bytes(), file_flags(symlinks), Mode::empty())
        {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(_) => return Err(refused()),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|_| refused())?;
        if !is_regular(&stat) {
            return Err(refused());
        }
        // A second name may be outside the directory: another tenant's
        // file, linked in. Only a tenant's own files are held to this.
        #[allow(
            clippy::useless_conversion,
            reason = "st_nlink is u64 with one of rustix's backends, u32 with another"
        )]
        let links = u64::from(stat.st_nlink);
        if symlinks == Symlinks::Refuse && links > 1 {
            return Err(Error::HardLink {
                path: self.path.join(rel),
                links,
            });
        }
        Ok(Some(std::fs::File::from(fd)))
    }

    /// Whether `rel` is a regular file inside the directory (by the same
    /// rules as [`PluginDir::read`]); the error is the uniform refusal, or
    /// [`Error::HardLink`].
    pub fn check(&self, rel: &Path) -> Result<(), Error> {
        match self.open_file(rel)? {
            Some(_) => Ok(()),
            None => Err(Error::Refused {
                path: self.path.join(rel),
                tenant: self.symlinks_for(rel) == Symlinks::Refuse,
            }),
        }
    }

    /// Reads the regular file at `rel`, at most `max_bytes`: a missing
    /// file, or anything that is not a regular file inside the directory,
    /// is [`Error::Refused`]; a tenant's file with other hard links
    /// [`Error::HardLink`]; a larger one is [`Error::TooLarge`].
    pub fn read(&self, rel: &Path, max_bytes: u64) -> Result<Vec<u8>, Error> {
        match self.read_optional(rel, max_bytes)? {
            Some(bytes) => Ok(bytes),
            None => Err(Error::Refused {
                path: self.path.join(rel),
                tenant: self.symlinks_for(rel) == Symlinks::Refuse,
            }),
        }
    }

    /// Like [`PluginDir::read`], but a missing file is `Ok(None)` (a
    /// manifest is optional).
    pub fn read_optional(&self, rel: &Path, max_bytes: u64) -> Result<Option<Vec<u8>>, Error> {
        let path = self.path.join(rel);
        let Some(file) = self.open_file(rel)? else {
            return Ok(None);
        };
        read_capped(file, &path, max_bytes).map(Some)
    }

    /// The names of the entries directly in the directory that end in
    /// `.wasm` and do not start with a dot, sorted. Whatever they are
    /// (file, symlink, FIFO, directory): [`PluginDir::read`] decides.
    pub fn wasm_names(&self) -> Result<Vec<String>, Error> {
        let io = |e: rustix::io::Errno| Error::Read {
            path: self.path.clone(),
            source: e.into(),
        };
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(io)?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(io)?;
            // A name that is not UTF-8 is listed lossily: it is no valid
            // plugin name, and is refused as one (never silently skipped).
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_string_lossy();
            if name.ends_with(".wasm") && !name.starts_with('.') {
                names.push(name.into_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Opens the file at `path` (symlinks followed) without blocking — opening
/// a FIFO never waits for a writer — and reads its status on the opened
/// descriptor, for the caller to check its type and size. `Ok(None)`:
/// nothing at `path`.
pub(crate) fn open_nonblocking(
    path: &Path,
) -> std::io::Result<Option<(std::fs::File, rustix::fs::Stat)>> {
    let fd = match rustix::fs::open(path, file_flags(Symlinks::Follow), Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&fd)?;
    Ok(Some((std::fs::File::from(fd), stat)))
}

/// Whether `stat` (of an opened descriptor) is a regular file's.
pub(crate) fn is_regular(stat: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
}

/// Reads the opened regular `file` (at `path`) whole, at most `max_bytes`:
/// a larger one, or one that grows past the cap while it is read, is
/// [`Error::TooLarge`] (checked before reading, so a huge or sparse file
/// is never read).
pub(crate) fn read_capped(
    file: std::fs::File,
    path: &Path,
    max_bytes: u64,
) -> Result<Vec<u8>, Error> {
    let too_large = || Error::TooLarge {
        path: path.to_path_buf(),
        limit: max_bytes,
    };
    let io = |source| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    let len = file.metadata().map_err(io)?.len();
    if len > max_bytes {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // The file may grow after the check: never read past the cap.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Reads `dir/rel` under the rules above with `dir` opened by `symlinks`
/// (for callers without an open [`PluginDir`]).
pub fn read_in(
    dir: &Path,
    rel: &Path,
    symlinks: Symlinks,
    max_bytes: u64,
) -> Result<Option<Vec<u8>>, Error> {
    match PluginDir::open(dir, symlinks) {
        Opened::Dir(d) => d.read_optional(rel, max_bytes),
        Opened::Missing => Err(Error::Refused {
            path: dir.join(rel),
            tenant: symlinks == Symlinks::Refuse,
        }),
        Opened::Refused(e) => Err(e),
    }
}
