//! What a decision log line may not hold: masked paths (OPA's `mask`), and
//! strings longer than the configured size.
//!
//! A mask path is the part's name then object keys (`args.password`,
//! `state.user.email`); where the path meets an array, it goes on into
//! every element (`args.users.email` masks each user's email). A masked
//! value becomes `"[masked]"`, and the text of each of its strings and
//! numbers is cut out of every other string of the line — a fault's
//! detail or a skip's message that quotes it — so it appears nowhere.
//!
//! A guard that quotes a value seldom quotes it as written: it writes the
//! args as JSON (the value JSON-escaped: `se\"cr\\et`), or a JSON text
//! inside another (escaped twice). [`Secrets`] holds each value in every
//! form it takes in a line — as written, and JSON-escaped once and twice
//! the ways the guest languages' encoders write it (serde_json and
//! JavaScript's; Python's `ensure_ascii`; Go's, which also escapes `<`,
//! `>`, `&`; Rust's `{:?}`) — and cuts each out. The same [`Secrets`] mask the server
//! log's lines about a call: the guard's `log` lines, its stdout and
//! stderr, and its fault's detail.

use std::borrow::Cow;
use std::fmt;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// What a masked value, or its text inside another string, becomes.
pub const MASKED: &str = "[masked]";

/// The masked values of one call, each in every form it may take in a
/// line (see this module's comment); cut out by [`Secrets::scrub`],
/// longest first, so a form holding another is cut whole. Its `Debug`
/// says how many forms it holds, never what they are.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Longest first, no duplicates, none empty.
    forms: Vec<String>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} forms)", self.forms.len())
    }
}

/// How one JSON encoder writes a string's characters.
#[derive(Clone, Copy)]
enum Encoder {
    /// serde_json, JavaScript's `JSON.stringify`: `"`, `\` and control
    /// characters only.
    Minimal,
    /// Python's `json.dumps` (`ensure_ascii`): also everything outside
    /// printable ASCII, as `\uXXXX` (surrogate pairs beyond the BMP).
    Ascii,
    /// Go's `encoding/json`: also `<`, `>`, `&`, U+2028 and U+2029.
    Go,
    /// Rust's `{:?}` of a string (`\u{1b}`, not JSON's `\u001b`).
    Debug,
}

impl Encoder {
    const ALL: [Encoder; 4] = [
        Encoder::Minimal,
        Encoder::Ascii,
        Encoder::Go,
        Encoder::Debug,
    ];

    /// `s` as this encoder writes it inside a string literal (no quotes).
    fn escape(self, s: &str) -> String {
        if let Encoder::Debug = self {
            let quoted = format!("{s:?}");
            return quoted[1..quoted.len() - 1].to_string();
        }
        let mut out = String::with_capacity(s.len() + 8);
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => unicode(&mut out, c),
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if matches!(self, Encoder::Go) => {
                    unicode(&mut out, c)
                }
                c if matches!(self, Encoder::Ascii) && !(' '..='~').contains(&c) => {
                    unicode(&mut out, c)
                }
                c => out.push(c),
            }
        }
        out
    }
}

/// `c` as `\uXXXX` (lower-case hex; a surrogate pair beyond the BMP).
fn unicode(out: &mut String, c: char) {
    let mut units = [0u16; 2];
    for unit in c.encode_utf16(&mut units) {
        let _ = write!(out, "\\u{unit:04x}");
    }
}

impl Secrets {
    /// Adds `text` (a masked string's or number's text) in each of its
    /// forms. Empty text is not a secret.
    pub fn add(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut forms = vec![text.to_string()];
        for encoder in Encoder::ALL {
            let once = encoder.escape(text);
            let twice = encoder.escape(&once);
            forms.push(once);
            forms.push(twice);
        }
        for form in forms {
            if !self.forms.contains(&form) {
                self.forms.push(form);
            }
        }
        self.forms.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// Whether no value is masked.
    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// Cuts every form of every secret out of `s`.
    pub fn scrub(&self, s: &mut String) {
        if let Cow::Owned(clean) = self.scrubbed(s) {
            *s = clean;
        }
    }

    /// `s` with every form of every secret cut out (borrowed when there
    /// was none).
    pub fn scrubbed<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(s);
        for form in &self.forms {
            if out.contains(form.as_str()) {
                out = Cow::Owned(out.replace(form.as_str(), MASKED));
            }
        }
        out
    }

    /// The secrets of `mask` (paths as in `[decision_log] mask`) in a
    /// call's parts: its `args`, its tool result (`content`) and its
    /// `state`.
    pub fn of(
        mask: &[String],
        args: Option<&Map<String, Value>>,
        content: Option<&Value>,
        state: &Value,
    ) -> Secrets {
        let mut secrets = Secrets::default();
        for path in mask {
            let keys: Vec<&str> = path.split('.').collect();
            match keys.as_slice() {
                ["args"] => args
                    .iter()
                    .flat_map(|a| a.values())
                    .for_each(|v| leaves(v, &mut secrets)),
                ["args", key, rest @ ..] => {
                    if let Some(v) = args.and_then(|a| a.get(*key)) {
                        collect(v, rest, &mut secrets);
                    }
                }
                ["content", rest @ ..] => {
                    if let Some(v) = content {
                        collect(v, rest, &mut secrets);
                    }
                }
                [_, rest @ ..] => collect(state, rest, &mut secrets),
                [] => {}
            }
        }
        secrets
    }
}

/// Adds the text of every string and number at `path` in `value` to
/// `secrets`.
fn collect(value: &Value, path: &[&str], secrets: &mut Secrets) {
    match (value, path) {
        (v, []) => leaves(v, secrets),
        (Value::Array(items), path) => items.iter().for_each(|v| collect(v, path, secrets)),
        (Value::Object(map), [key, rest @ ..]) => {
            if let Some(v) = map.get(*key) {
                collect(v, rest, secrets);
            }
        }
        _ => {}
    }
}

/// Masks `path` (the keys under a part) in `value`, adding the text of
/// every masked string and number to `secrets`. With `replace` false the
/// value is left as it is (the part is not written), only its secrets
/// noted.
pub fn mask(value: &mut Value, path: &[&str], secrets: &mut Secrets, replace: bool) {
    match (value, path) {
        (v, []) => {
            leaves(v, secrets);
            if replace {
                *v = Value::String(MASKED.into());
            }
        }
        (Value::Array(items), path) => {
            for item in items {
                mask(item, path, secrets, replace);
            }
        }
        (Value::Object(map), [key, rest @ ..]) => {
            if let Some(v) = map.get_mut(*key) {
                mask(v, rest, secrets, replace);
            }
        }
        _ => {}
    }
}

/// Adds the text of every string and number in `value` to `secrets`.
fn leaves(value: &Value, secrets: &mut Secrets) {
    match value {
        Value::String(s) => secrets.add(s),
        Value::Number(n) => secrets.add(&n.to_string()),
        Value::Array(items) => items.iter().for_each(|v| leaves(v, secrets)),
        Value::Object(map) => map.values().for_each(|v| leaves(v, secrets)),
        _ => {}
    }
}

/// Cuts every secret out of every string in `value` (every form, longest
/// first), then cuts every string longer than `max_bytes` to that size,
/// saying how much was cut.
pub fn scrub_and_cut(value: &mut Value, secrets: &Secrets, max_bytes: usize) {
    walk_strings(value, &mut |s| {
        secrets.scrub(s);
        cut(s, max_bytes);
    });
}

/// Cuts `s` to at most `max_bytes` (on a character boundary), marked.
pub fn cut(s: &mut String, max_bytes: usize) {
    if s.len() <= max_bytes {
        return;
    }
    let mut at = max_bytes;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    let cut = s.len() - at;
    s.truncate(at);
    s.push_str(&format!("…[cut {cut} bytes]"));
}

fn walk_strings(value: &mut Value, f: &mut impl FnMut(&mut String)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter_mut().for_each(|v| walk_strings(v, f)),
        Value::Object(map) => map.values_mut().for_each(|v| walk_strings(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_by_path_through_arrays_and_scrubs_the_text_elsewhere() {
        let mut args = json!({"password": "hunter22", "users": [{"email": "a@x.io"}, {"email": "b@x.io"}], "n": 1});
        let mut secrets = Secrets::default();
        mask(&mut args, &["password"], &mut secrets, true);
        mask(&mut args, &["users", "email"], &mut secrets, true);
        mask(&mut args, &["missing", "key"], &mut secrets, true);
        assert_eq!(
            args,
            json!({"password": MASKED, "users": [{"email": MASKED}, {"email": MASKED}], "n": 1})
        );
        let mut line = json!({"detail": "bad password hunter22 for a@x.io", "args": args});
        scrub_and_cut(&mut line, &secrets, 1024);
        assert_eq!(line["detail"], "bad password [masked] for [masked]");
    }

    /// The report's password, quoted by a guard as each language's JSON
    /// encoder writes it, once and inside another JSON string.
    #[test]
    fn every_encoding_of_a_masked_value_is_cut() {
        let mut secrets = Secrets::default();
        secrets.add("se\"cr\\et-77x é<1>");
        for quoted in [
            // serde_json, JavaScript: once, twice.
            r#"{"password":"se\"cr\\et-77x é<1>"}"#,
            r#""{\"password\":\"se\\\"cr\\\\et-77x é<1>\"}""#,
            // Python (ensure_ascii), Go (`<`, `>` escaped).
            r#"{"password": "se\"cr\\et-77x \u00e9<1>"}"#,
            r#"{"password":"se\"cr\\et-77x é\u003c1\u003e"}"#,
            // Rust's Debug.
            r#"Some("se\"cr\\et-77x é<1>")"#,
        ] {
            let scrubbed = secrets.scrubbed(quoted);
            assert!(scrubbed.contains(MASKED), "{quoted} -> {scrubbed}");
            assert!(!scrubbed.contains("77x"), "{quoted} -> {scrubbed}");
        }
        let mut newline = Secrets::default();
        newline.add("line1\nline2-SEC");
        assert_eq!(
            newline.scrubbed(r#"{"p":"line1\nline2-SEC","q":"line1\\nline2-SEC"}"#),
            r#"{"p":"[masked]","q":"[masked]"}"#
        );
        assert_eq!(
            format!("{newline:?}"),
            "Secrets(3 forms)",
            "Debug shows no secret"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            failure_persistence: None,
            ..Default::default()
        })]

        /// Any value — quotes, backslashes, control characters, unicode
        /// — in any text, as written or JSON-escaped once or twice: no
        /// form of it is left.
        #[test]
        fn no_form_of_a_masked_value_is_left(
            value in "[\"\\\\/<>&\\x00-\\x1f\\x7f\\u{85}\\u{2028}é€😀a-z]{1,6}-SEC-.{0,6}",
            before in ".{0,8}",
            after in ".{0,8}",
        ) {
            let mut secrets = Secrets::default();
            secrets.add(&value);
            let json = |s: &str| serde_json::to_string(s).unwrap_or_default();
            let once = json(&value);
            let twice = json(&once);
            for text in [value.clone(), once.clone(), twice.clone(), json(&twice)] {
                let line = format!("{before}{text}{after}");
                let scrubbed = secrets.scrubbed(&line);
                // Without its quotes (one each side).
                let bare = |s: &str| s[1..s.len() - 1].to_string();
                for form in [value.clone(), bare(&once), bare(&twice)] {
                    proptest::prop_assert!(
                        !scrubbed.contains(form.as_str()) || before.contains(form.as_str())
                            || after.contains(form.as_str()),
                        "{form:?} left in {scrubbed:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn cuts_long_strings_on_a_character_boundary() {
        let mut s = "ééééé".to_string(); // 10 bytes
        cut(&mut s, 3);
        assert_eq!(s, "é…[cut 8 bytes]");
        let mut short = "abc".to_string();
        cut(&mut short, 3);
        assert_eq!(short, "abc");
    }
}
