//! What a decision log line may not hold: masked paths (OPA's `mask`), and
//! strings longer than the configured size.
//!
//! A mask path is the part's name then object keys (`args.password`,
//! `state.user.email`); where the path meets an array, it goes on into
//! every element (`args.users.email` masks each user's email). A masked
//! value becomes `"[masked]"`, and the text of each of its strings and
//! numbers is cut out of every other string of the line — a fault's
//! detail or a skip's message that quotes it — so it appears nowhere.

use serde_json::Value;

/// What a masked value, or its text inside another string, becomes.
pub const MASKED: &str = "[masked]";

/// Masks `path` (the keys under a part) in `value`, adding the text of
/// every masked string and number to `secrets`. With `replace` false the
/// value is left as it is (the part is not written), only its secrets
/// noted.
pub fn mask(value: &mut Value, path: &[&str], secrets: &mut Vec<String>, replace: bool) {
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

/// The text of every string and number in `value`.
fn leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if !s.is_empty() => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
        Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
        _ => {}
    }
}

/// Cuts every secret out of every string in `value` (longest first, so a
/// secret holding another is cut whole), then cuts every string longer
/// than `max_bytes` to that size, saying how much was cut.
pub fn scrub_and_cut(value: &mut Value, secrets: &mut [String], max_bytes: usize) {
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    walk_strings(value, &mut |s| {
        for secret in secrets.iter() {
            if s.contains(secret.as_str()) {
                *s = s.replace(secret.as_str(), MASKED);
            }
        }
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
        let mut secrets = Vec::new();
        mask(&mut args, &["password"], &mut secrets, true);
        mask(&mut args, &["users", "email"], &mut secrets, true);
        mask(&mut args, &["missing", "key"], &mut secrets, true);
        assert_eq!(
            args,
            json!({"password": MASKED, "users": [{"email": MASKED}, {"email": MASKED}], "n": 1})
        );
        let mut line = json!({"detail": "bad password hunter22 for a@x.io", "args": args});
        scrub_and_cut(&mut line, &mut secrets, 1024);
        assert_eq!(line["detail"], "bad password [masked] for [masked]");
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
