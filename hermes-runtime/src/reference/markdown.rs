//! The Markdown the pages are written in: a generated-file header and tables.

use std::fmt::Write as _;

use super::REGENERATE;

/// The start of a page: the generated-file notice (its first line), the title and an intro.
pub fn header(title: &str, intro: &str) -> String {
    format!(
        "<!-- Generated from the code by hermes_runtime::reference; do not edit. \
         Regenerate: {REGENERATE} -->\n\n# {title}\n\n{intro}\n"
    )
}

/// A table with a header row; `|` in cells is escaped and line breaks become spaces.
pub fn table(headers: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut out = format!("\n{}\n", row(headers.iter().copied()));
    let rule = row(headers.iter().map(|_| "---"));
    out.push_str(&rule);
    out.push('\n');
    for cells in rows {
        let _ = writeln!(out, "{}", row(cells.iter().map(String::as_str)));
    }
    out
}

/// One table row.
fn row<'a>(cells: impl Iterator<Item = &'a str>) -> String {
    let cells: Vec<String> = cells
        .map(|cell| cell.replace('|', "\\|").replace('\n', " "))
        .collect();
    format!("| {} |", cells.join(" | "))
}

/// `text` as inline code.
pub fn code(text: &str) -> String {
    format!("`{text}`")
}
