//! One-line renderings of errors and response bodies for error messages.

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

/// `text` on one line, cut to 300 characters (with `…` when cut).
pub fn snippet(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 300 {
        format!("{}…", one_line.chars().take(300).collect::<String>())
    } else {
        one_line
    }
}
