//! A policy set's one layer: the plugin directory as a tar archive (POSIX
//! ustar), written here byte for byte so the same directory always gives
//! the same bytes, and so the same digest — the files in path order, each
//! `0644`, owned by 0:0, dated 0, no directory entries — and read back by
//! the same narrow rules: regular files only, every path relative and
//! plain (no `..`, no absolute path, no link), within a size and count.

use std::path::{Component, Path, PathBuf};

/// The size of a tar block.
const BLOCK: usize = 512;

/// The most files a set may hold.
pub(crate) const MAX_FILES: usize = 100_000;

/// The files of `dir` as a tar archive: every regular file under it, by
/// its path relative to `dir` (`/`-separated), in byte order of those
/// paths. Hidden entries (a name starting with `.`) are left out; a
/// symbolic link or another kind of file is refused, named.
pub(crate) fn pack(dir: &Path) -> Result<Vec<u8>, String> {
    let mut files = Vec::new();
    walk(dir, "", &mut files)?;
    files.sort();
    if files.len() > MAX_FILES {
        return Err(format!(
            "{} files: a set holds at most {MAX_FILES}",
            files.len()
        ));
    }
    let mut out = Vec::new();
    for name in &files {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.extend_from_slice(&header(name, bytes.len() as u64)?);
        out.extend_from_slice(&bytes);
        out.resize(out.len().next_multiple_of(BLOCK), 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

/// Collects the regular files under `dir/prefix` into `files`.
fn walk(root: &Path, prefix: &str, files: &mut Vec<String>) -> Result<(), String> {
    let dir = root.join(prefix);
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(format!(
                "{}: a file name that is not UTF-8",
                entry.path().display()
            ));
        };
        if name.starts_with('.') {
            continue;
        }
        let relative = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", entry.path().display()))?;
        if kind.is_dir() {
            walk(root, &relative, files)?;
        } else if kind.is_file() {
            files.push(relative);
        } else {
            return Err(format!(
                "{}: not a regular file or directory (a set holds only those; copy what a link \
                 points to)",
                entry.path().display()
            ));
        }
    }
    Ok(())
}

/// The ustar header of the file `name` of `size` bytes.
fn header(name: &str, size: u64) -> Result<[u8; BLOCK], String> {
    let mut h = [0u8; BLOCK];
    let (prefix, rest) = split_name(name)?;
    h[..rest.len()].copy_from_slice(rest.as_bytes());
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    // The checksum is counted with its own field as spaces.
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    octal(&mut h[148..155], u64::from(sum));
    h[155] = b' ';
    Ok(h)
}

/// `name` as ustar's prefix (at most 155 bytes) and name (at most 100),
/// split at a `/`.
fn split_name(name: &str) -> Result<(&str, &str), String> {
    if name.len() <= 100 {
        return Ok(("", name));
    }
    let too_long = || format!("{name}: a path longer than a tar header holds (255 bytes)");
    let cut = name
        .char_indices()
        .filter(|&(i, c)| c == '/' && i <= 155 && name.len() - i - 1 <= 100)
        .map(|(i, _)| i)
        .next()
        .ok_or_else(too_long)?;
    Ok((&name[..cut], &name[cut + 1..]))
}

/// Writes `value` in octal, zero-padded, into `field` (its last byte NUL).
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
    field[width] = 0;
}

/// One file of an archive, checked.
pub(crate) struct Entry<'a> {
    /// Its relative path, each part plain.
    pub(crate) path: PathBuf,
    /// Its bytes.
    pub(crate) bytes: &'a [u8],
}

/// The files of the archive `tar`, each checked: a regular file (or a
/// directory entry, skipped), a relative path of plain parts, a header
/// whose checksum holds; at most [`MAX_FILES`], no path twice.
pub(crate) fn entries(tar: &[u8]) -> Result<Vec<Entry<'_>>, String> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut at = 0;
    loop {
        let Some(h) = tar.get(at..at + BLOCK) else {
            return Err("the archive ends without its end blocks".into());
        };
        if h.iter().all(|&b| b == 0) {
            return Ok(out);
        }
        let name = text(&h[..100]);
        let prefix = text(&h[345..500]);
        let full = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        };
        let stored = read_octal(&h[148..156]).ok_or_else(|| format!("{full}: a bad checksum"))?;
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| u64::from(if (148..156).contains(&i) { b' ' } else { b }))
            .sum();
        if stored != sum {
            return Err(format!("{full}: its header's checksum does not hold"));
        }
        let size = read_octal(&h[124..136]).ok_or_else(|| format!("{full}: a bad size"))?;
        let size = usize::try_from(size).map_err(|_| format!("{full}: too large"))?;
        let start = at + BLOCK;
        let bytes = start
            .checked_add(size)
            .and_then(|end| tar.get(start..end))
            .ok_or_else(|| format!("{full}: the archive ends inside it"))?;
        at = start + size.next_multiple_of(BLOCK);
        match h[156] {
            b'0' | 0 => {}
            b'5' => continue,
            kind => {
                return Err(format!(
                    "{full}: an entry of type {:?}: a set holds regular files only",
                    char::from(kind)
                ));
            }
        }
        let path = plain(&full)?;
        if !seen.insert(path.clone()) {
            return Err(format!("{full}: in the archive twice"));
        }
        if out.len() == MAX_FILES {
            return Err(format!("more than {MAX_FILES} files"));
        }
        out.push(Entry { path, bytes });
    }
}

/// `name` as a relative path of plain parts, or why not.
fn plain(name: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(name);
    let ok = !name.is_empty()
        && !name.contains('\\')
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(p) if !p.to_string_lossy().starts_with('.')));
    if ok {
        Ok(path)
    } else {
        Err(format!(
            "{name:?}: not a plain relative path (no `..`, no leading `/` or `.`)"
        ))
    }
}

/// A NUL-terminated header field as text.
fn text(field: &[u8]) -> &str {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).unwrap_or("\u{fffd}")
}

/// An octal header field (spaces and NULs around it ignored).
fn read_octal(field: &[u8]) -> Option<u64> {
    let digits = text(field).trim_matches(|c: char| c == ' ' || c == '\0');
    u64::from_str_radix(digits, 8).ok()
}

/// Writes the files of `tar` under `into` (a new directory).
pub(crate) fn unpack(tar: &[u8], into: &Path) -> Result<(), String> {
    let files = entries(tar)?;
    std::fs::create_dir_all(into).map_err(|e| format!("{}: {e}", into.display()))?;
    for file in files {
        let path = into.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, file.bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_packs_to_the_same_bytes_and_unpacks_to_the_same_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let long = "d".repeat(120);
        std::fs::create_dir_all(dir.path().join("tenants/acme")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join(&long)).expect("mkdir");
        std::fs::write(dir.path().join("toolgate.toml"), "x = 1\n").expect("write");
        std::fs::write(dir.path().join("tenants/acme/a.wasm"), [1u8; 700]).expect("write");
        std::fs::write(dir.path().join(&long).join("f"), b"long").expect("write");
        std::fs::write(dir.path().join(".hidden"), b"no").expect("write");
        let a = pack(dir.path()).expect("pack");
        // Other times and modes change nothing.
        std::fs::write(dir.path().join("toolgate.toml"), "x = 1\n").expect("write");
        assert_eq!(pack(dir.path()).expect("pack"), a);
        let names: Vec<String> = entries(&a)
            .expect("entries")
            .iter()
            .map(|e| e.path.display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                format!("{long}/f"),
                "tenants/acme/a.wasm".into(),
                "toolgate.toml".into()
            ]
        );
        let out = tempfile::tempdir().expect("tempdir");
        unpack(&a, &out.path().join("x")).expect("unpack");
        assert_eq!(
            std::fs::read(out.path().join("x/tenants/acme/a.wasm")).expect("read"),
            [1u8; 700]
        );
        assert!(!out.path().join("x/.hidden").exists());
    }

    #[test]
    fn an_archive_that_escapes_links_or_lies_is_refused_naming_the_entry() {
        let with = |name: &str, kind: u8| {
            let mut h = header(name, 2).expect("header");
            h[156] = kind;
            h[148..156].fill(b' ');
            let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
            octal(&mut h[148..155], u64::from(sum));
            let mut tar = h.to_vec();
            tar.extend_from_slice(b"ok");
            tar.resize(BLOCK * 4, 0);
            tar
        };
        assert!(entries(&with("a/b", b'0')).is_ok());
        for name in ["../x", "/etc/x", "a/../../x", "a/.git/x"] {
            let e = entries(&with(name, b'0')).err().expect(name);
            assert!(e.contains("plain relative path"), "{e}");
        }
        let e = entries(&with("l", b'2')).err().expect("symlink");
        assert!(e.contains("regular files only"), "{e}");
        let mut bad = with("a", b'0');
        bad[0] = b'b';
        let e = entries(&bad).err().expect("checksum");
        assert!(e.contains("checksum"), "{e}");
        let e = entries(&with("a", b'0')[..BLOCK]).err().expect("cut");
        assert!(e.contains("ends inside"), "{e}");
    }
}
