//! Where in a manifest's text an error is: its line, and the key it is
//! about.

use std::ops::Range;

/// The 1-based line holding byte `offset` of `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key a toml error at `span` of `text` is about, found from the span
/// and the document (never from the error's message): the key the span
/// covers (an unknown or a duplicate key, a table's header), else the
/// `key = ` the span's line starts with (a value of the wrong type).
pub(super) fn key_at(text: &str, span: Range<usize>) -> Option<String> {
    let bare = |k: &str| {
        !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    };
    let start = span.start.min(text.len());
    let covered = text.get(span).map_or("", str::trim);
    let covered = covered.trim_start_matches('[').trim_end_matches(']').trim();
    let after_equals = text
        .get(..start)
        .is_some_and(|t| t.trim_end().ends_with('='));
    if bare(covered) && !after_equals {
        return Some(covered.to_string());
    }
    let line_start = text.get(..start)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next().unwrap_or("").trim();
    if let Some(header) = line.strip_prefix('[') {
        let header = header
            .trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or("")
            .trim();
        return bare(header).then(|| header.to_string());
    }
    let (k, _) = line.split_once('=')?;
    let k = k.trim();
    (!k.is_empty()).then(|| k.to_string())
}

/// The key a toml error at byte `at` is about, by its place in the parsed
/// document.
pub(super) struct FoundKey {
    /// Its full path (`plugin[2].fuel`, `shares.tenants.acme.rate`); `None`
    /// at the top of the document.
    pub(super) path: Option<String>,
    /// Whether its value is a datetime.
    pub(super) datetime: bool,
}

/// The innermost key of `text` whose key or value holds byte `at`, with its
/// full path (arrays of tables numbered from 1, as [`ManifestError`]s
/// number plugins); `None` when `text` does not parse as TOML.
pub(super) fn find_key(text: &str, at: usize) -> Option<FoundKey> {
    use toml::de::{DeTable, DeValue};
    /// Whether `at` is in `value` (its path pushed onto `path`), and if so
    /// whether the innermost value there is a datetime.
    fn walk(value: &toml::Spanned<DeValue<'_>>, at: usize, path: &mut Vec<String>) -> Option<bool> {
        match value.get_ref() {
            DeValue::Table(table) => {
                for (key, item) in table.iter() {
                    path.push(format!(".{}", key.get_ref()));
                    // The key itself (an unknown or a duplicate key), else
                    // inside its value.
                    if key.span().contains(&at) {
                        return Some(matches!(item.get_ref(), DeValue::Datetime(_)));
                    }
                    if let Some(datetime) = walk(item, at, path) {
                        return Some(datetime);
                    }
                    path.pop();
                }
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(format!("[{}]", i + 1));
                    if let Some(datetime) = walk(item, at, path) {
                        return Some(datetime);
                    }
                    path.pop();
                }
            }
            _ => {}
        }
        value
            .span()
            .contains(&at)
            .then(|| matches!(value.get_ref(), DeValue::Datetime(_)))
    }
    let doc = DeTable::parse(text).ok()?;
    let root = toml::Spanned::new(doc.span(), DeValue::Table(doc.into_inner()));
    let mut path = Vec::new();
    let datetime = walk(&root, at, &mut path).unwrap_or(false);
    let path = path.concat();
    Some(FoundKey {
        path: (!path.is_empty()).then(|| path.trim_start_matches('.').to_string()),
        datetime,
    })
}

/// The full path of the key (`case[2].expect.action`) a toml error at
/// `span` of `text` is about: by its place in the parsed document, else by
/// the text around it. For files of TOML the host reads besides manifests
/// (`toolgate test`'s case files), so their errors name keys as a
/// manifest's do.
pub fn key_path(text: &str, span: Range<usize>) -> Option<String> {
    match find_key(text, span.start) {
        Some(found) => found.path,
        None => key_at(text, span),
    }
}
