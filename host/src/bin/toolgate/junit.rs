//! `toolgate test --junit`: the results as JUnit XML, the report CI
//! systems read (one `testsuite` per case file, one `testcase` per case,
//! a `failure` with the differences for each failing case).

use std::fmt::Write as _;

use crate::test::FileResults;

/// The results as a JUnit XML document.
pub(crate) fn xml(files: &[FileResults]) -> String {
    let count = |f: &FileResults| {
        let failed = f.cases.iter().filter(|c| c.failure.is_some()).count();
        (f.cases.len(), failed)
    };
    let (tests, failures) = files
        .iter()
        .map(count)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"toolgate test\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\">"
    );
    for file in files {
        let (tests, failures) = count(file);
        let name = escape(&file.path.display().to_string());
        let time: f64 = file.cases.iter().map(|c| c.time.as_secs_f64()).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{time:.6}\">"
        );
        for case in &file.cases {
            let _ = write!(
                out,
                "    <testcase classname=\"{name}\" name=\"{}\" time=\"{:.6}\"",
                escape(&case.name),
                case.time.as_secs_f64()
            );
            match &case.failure {
                None => out.push_str("/>\n"),
                Some(why) => {
                    let why = escape(why);
                    let _ = writeln!(
                        out,
                        ">\n      <failure message=\"{why}\">{why}</failure>\n    </testcase>"
                    );
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text safe in an XML attribute or element: markup escaped, and the
/// characters XML 1.0 cannot hold at all (most control characters)
/// written as `\u{..}`.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || matches!(c, '\u{FFFE}' | '\u{FFFF}') => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            escape("a<b>&\"c'\n\u{1}"),
            "a&lt;b&gt;&amp;&quot;c&apos;&#10;\\u{1}"
        );
    }
}
