//! `pii-redact` (response): replaces every e-mail address and phone number
//! in the run's final answer with the config's `mask`, and leaves an answer
//! that has none alone (it returns none: the content stays as it is).
//!
//! - an e-mail address: `local@domain.tld` (local part of letters, digits
//!   and `._%+-`; a domain of at least two dot-separated labels);
//! - a phone number: an optional `+`, then 9 to 15 digits, single spaces,
//!   dashes, dots or parentheses between them (so a date such as
//!   `2024-01-15`, 8 digits, is not one).
//!
//! ```toml
//! [[plugin]]
//! path = "pii-redact.wasm"
//! [plugin.config]
//! mask = "[redacted]"   # default; must not be empty
//! ```

use toolgate_guest::serde::Deserialize;
use toolgate_guest::serde_json::Value;
use toolgate_guest::{ConfigCheck, ResponseGuard, ResponseRenderEvent};

/// The guard.
struct PiiRedact;

/// The plugin's config.
#[derive(Deserialize)]
#[serde(crate = "toolgate_guest::serde", deny_unknown_fields)]
struct Settings {
    /// What each address or number becomes.
    #[serde(default = "default_mask")]
    mask: String,
}

fn default_mask() -> String {
    "[redacted]".into()
}

/// The config, checked.
fn settings(config: &Value) -> Result<Settings, String> {
    let s: Settings = toolgate_guest::config_as(config)?;
    if s.mask.is_empty() {
        return Err("mask must not be empty".into());
    }
    Ok(s)
}

impl ConfigCheck for PiiRedact {
    fn validate_config(config: &Value) -> Result<(), String> {
        settings(config).map(drop)
    }
}

impl ResponseGuard for PiiRedact {
    fn on_response_render(event: ResponseRenderEvent) -> Option<String> {
        let mask = settings(&toolgate_guest::config()).map_or_else(|_| default_mask(), |s| s.mask);
        let redacted = redact(&event.content, &mask);
        (redacted != event.content).then_some(redacted)
    }
}

/// `text` with every address and number replaced by `mask`. Matches start
/// and end on ASCII bytes, so every slice is on a character boundary.
fn redact(text: &str, mask: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut last) = (0, 0);
    while i < b.len() {
        match email_at(b, i).or_else(|| phone_at(b, i)) {
            Some(end) => {
                out.push_str(&text[last..i]);
                out.push_str(mask);
                (i, last) = (end, end);
            }
            None => i += 1,
        }
    }
    out.push_str(&text[last..]);
    out
}

fn is_local(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"._%+-".contains(&c)
}

fn is_label(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// The end of an e-mail address starting at `i`, if one does.
fn email_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && is_local(b[i - 1]) {
        return None;
    }
    let mut j = i;
    while j < b.len() && is_local(b[j]) {
        j += 1;
    }
    if j == i || b.get(j) != Some(&b'@') {
        return None;
    }
    let (mut k, mut labels, mut end) = (j + 1, 0, j + 1);
    loop {
        let start = k;
        while k < b.len() && is_label(b[k]) {
            k += 1;
        }
        if k == start {
            break;
        }
        labels += 1;
        end = k;
        if b.get(k) == Some(&b'.') {
            k += 1;
        } else {
            break;
        }
    }
    (labels >= 2).then_some(end)
}

/// The end of a phone number starting at `i`, if one does.
fn phone_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'+') {
        return None;
    }
    let mut j = i;
    if b[j] == b'+' || b[j] == b'(' {
        j += 1;
    }
    let (mut digits, mut end, mut gap) = (0, None, false);
    while j < b.len() {
        let c = b[j];
        if c.is_ascii_digit() {
            digits += 1;
            end = Some(j + 1);
            gap = false;
        } else if b" -.()".contains(&c) && !gap && digits > 0 {
            gap = c != b')';
        } else {
            break;
        }
        j += 1;
    }
    end.filter(|_| (9..=15).contains(&digits))
}

toolgate_guest::export!(PiiRedact: response, config);

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redacts_addresses_and_numbers_only() {
        let m = "[x]";
        assert_eq!(redact("mail ann.lee+x@mail.example.com.", m), "mail [x].");
        assert_eq!(redact("call +44 20 7946 0958 now", m), "call [x] now");
        assert_eq!(redact("call (555) 123-4567", m), "call [x]");
        assert_eq!(redact("on 2024-01-15, 3 items", m), "on 2024-01-15, 3 items");
        assert_eq!(redact("user@localhost and é", m), "user@localhost and é");
        assert_eq!(redact("é a@b.io é", m), "é [x] é");
    }
}
