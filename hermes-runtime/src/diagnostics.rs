//! One-line renderings of errors and response bodies for error messages, and the escaping
//! that keeps text from the model or a server from driving the terminal it is printed on.

use std::borrow::Cow;

/// An error and its sources, joined with `": "`; a source whose text the line already holds
/// (an error that quotes its cause) is not repeated.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !s.contains(&part) {
            s.push_str(": ");
            s.push_str(&part);
        }
        source = inner.source();
    }
    s
}

/// `text` on one line, cut to 300 characters (with `…` when cut), control characters escaped.
pub fn snippet(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let one_line = printable(&one_line).into_owned();
    if one_line.chars().count() > 300 {
        format!("{}…", one_line.chars().take(300).collect::<String>())
    } else {
        one_line
    }
}

/// `text` with every control character (C0, DEL, C1) written as an escape (`\x1b`, `\r`,
/// `\u{9b}`): a server's error body, a process name or a file name chosen by the model may hold
/// terminal escape sequences that would recolour, move or rewrite what a user reads.
pub fn printable(text: &str) -> Cow<'_, str> {
    printable_keeping(text, &[])
}

/// [`printable`], leaving the characters of `keep` as they are (a log line's own `\n`).
pub fn printable_keeping<'a>(text: &'a str, keep: &[char]) -> Cow<'a, str> {
    let escaped = |c: char| c.is_control() && !keep.contains(&c);
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !escaped(c) => out.push(c),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(printable("plain text, üñí"), Cow::Borrowed(_)));
        assert_eq!(
            printable("a\x1b[31mred\r\u{9b}2J\x07"),
            "a\\x1b[31mred\\r\\u{9b}2J\\x07"
        );
        assert_eq!(printable_keeping("one\ntwo\r", &['\n']), "one\ntwo\\r");
        assert_eq!(
            snippet("HTTP 500:\n\x1b]0;owned\x07 body"),
            "HTTP 500: \\x1b]0;owned\\x07 body"
        );
    }
}
